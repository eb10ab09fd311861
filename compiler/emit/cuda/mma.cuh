// mma.cuh: the tensor-core and asynchronous-copy instructions a tensor-core
// kernel uses, each wrapped in one small device function (inline PTX, sm_80
// and newer). Needs prelude.cuh. Compiled by NVRTC; on the CPU emulation of
// tests/emu/ (which defines MT_CUDA_EMU) each wrapper is the emulation's
// function of the same name with the PTX ISA's per-lane semantics, written
// out below. g = lane / 4 (the group), t = lane % 4 (the thread in the group).
//
// mt_mma_16816: D = A B + C, A (16, 16) bf16 row-major, B (16, 8) bf16
// column-major, C and D (16, 8) fp32, one warp (PTX ISA, "mma.m16n8k16",
// floating-point fragments). Per lane, two bf16 in each 32-bit register, the
// first in the low half:
//   a[0] = A[g][2t, 2t+1]     a[1] = A[g+8][2t, 2t+1]
//   a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
//   b[0] = B[2t, 2t+1][g]     b[1] = B[2t+8, 2t+9][g]
//   c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]   (d likewise)
//
// mt_ldmatrix_x4(r, p): four 8x8 b16 matrices from shared memory ("ldmatrix",
// .m8n8.x4). Lane 8j + i gives p = the address of row i of matrix j (16
// bytes, 16-byte aligned); every lane receives r[j] = row g of matrix j,
// elements 2t and 2t+1. mt_ldmatrix_x4_trans: r[j] = elements (2t, g) and
// (2t+1, g) of matrix j, i.e. the transpose's row g.
//
// mt_cvt_bf16x2(lo, hi): both rounded to bf16 (nearest, ties to even), lo in
// the low half ("cvt.rn.bf16x2.f32", sm_80): an A fragment's register.
//
// mt_cp_async16(dst, src): 16 bytes global -> shared, asynchronously
// ("cp.async.cg", both 16-byte aligned); mt_cp_async4(dst, src) 4 bytes
// ("cp.async.ca", both 4-byte aligned); mt_cp_async_commit() closes a group
// of them, mt_cp_async_wait<N>() waits until at most N groups are pending
// (then __syncthreads before other threads read them).

#ifdef MT_CUDA_EMU
// tests/emu/cuda_emu.h provides the wrappers.
#else
__device__ __forceinline__ void mt_mma_16816(float d[4], const mt_u32 a[4], const mt_u32 b[2], const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
                   "f"(c[2]), "f"(c[3]));
}
__device__ __forceinline__ void mt_ldmatrix_x4(mt_u32 r[4], const void *p) {
    mt_u32 s = (mt_u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void mt_ldmatrix_x4_trans(mt_u32 r[4], const void *p) {
    mt_u32 s = (mt_u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ mt_u32 mt_cvt_bf16x2(float lo, float hi) {
    mt_u32 r; // the first source goes to the upper half
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ void mt_cp_async16(void *dst, const void *src) {
    mt_u32 s = (mt_u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
}
__device__ __forceinline__ void mt_cp_async4(void *dst, const void *src) {
    mt_u32 s = (mt_u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src));
}
__device__ __forceinline__ void mt_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void mt_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif
