// mma_test.cuh: kernels that drive each wrapper of compiler/emit/cuda/mma.cuh over
// every lane's fragment, for emu_check (on the emulation, against a plain
// matrix product on the host) and for NVRTC (sm_80, sm_90: the inline PTX
// compiles). Needs prelude.cuh and mma.cuh. One warp per problem: warp w of
// the grid (64 threads a block) works on problem w.

__device__ __forceinline__ mt_u32 mt_test_pack(const bf16 *lo, const bf16 *hi) {
    return (mt_u32)lo->bits | ((mt_u32)hi->bits << 16);
}

// D = A B + C per warp, fragments built straight from the PTX ISA's tables.
// A (nw, 16, 16), B (nw, 16, 8), C and D (nw, 16, 8), all row-major.
extern "C" __global__ void __launch_bounds__(64)
    mt_test_mma(float *D, const bf16 *A, const bf16 *B, const float *C) {
    const int w = blockIdx.x * 2 + threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    A += w * 256, B += w * 128, C += w * 128, D += w * 128;
    mt_u32 a[4], b[2];
    a[0] = mt_test_pack(A + g * 16 + 2 * t, A + g * 16 + 2 * t + 1);
    a[1] = mt_test_pack(A + (g + 8) * 16 + 2 * t, A + (g + 8) * 16 + 2 * t + 1);
    a[2] = mt_test_pack(A + g * 16 + 2 * t + 8, A + g * 16 + 2 * t + 9);
    a[3] = mt_test_pack(A + (g + 8) * 16 + 2 * t + 8, A + (g + 8) * 16 + 2 * t + 9);
    b[0] = mt_test_pack(B + 2 * t * 8 + g, B + (2 * t + 1) * 8 + g);
    b[1] = mt_test_pack(B + (2 * t + 8) * 8 + g, B + (2 * t + 9) * 8 + g);
    float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]}, d[4];
    mt_mma_16816(d, a, b, c);
    D[g * 8 + 2 * t] = d[0], D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2], D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// Four 8x8 matrices M (nw, 4, 8, 8) staged into shared memory with cp.async
// (row pitch 16 elements), then read back with ldmatrix: out (nw, 32, 8),
// per lane its four registers, then the four of the transposed load.
extern "C" __global__ void __launch_bounds__(64) mt_test_ldmatrix(mt_u32 *out, const bf16 *M) {
    __shared__ __align__(16) bf16 S[2][4 * 8 * 16]; // (warps, 4 * 8 rows, 16)
    const int wl = threadIdx.x / 32, w = blockIdx.x * 2 + wl, lane = threadIdx.x % 32;
    bf16 *s = S[wl];
    mt_cp_async16(s + lane * 16, M + w * 256 + lane * 8); // lane copies row lane % 8 of matrix lane / 8
    mt_cp_async_commit();
    mt_cp_async_wait<0>();
    __syncthreads();
    mt_u32 r[4];
    mt_ldmatrix_x4(r, s + lane * 16);
    for (int j = 0; j < 4; j++) out[(w * 32 + lane) * 8 + j] = r[j];
    mt_ldmatrix_x4_trans(r, s + lane * 16);
    for (int j = 0; j < 4; j++) out[(w * 32 + lane) * 8 + 4 + j] = r[j];
}

// cvt.rn.bf16x2.f32 (mt_cvt_bf16x2): x (n) fp32 in pairs, out (n / 2) the
// packed bf16 of x[2i] (low half) and x[2i + 1] (high half).
extern "C" __global__ void __launch_bounds__(64) mt_test_cvt(mt_u32 *out, const float *x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * i + 1 < n) out[i] = mt_cvt_bf16x2(x[2 * i], x[2 * i + 1]);
}
