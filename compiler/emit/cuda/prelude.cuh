// prelude.cuh: what every generated translation unit starts with: the
// storage types, their loads and stores (fp32 arithmetic always), and warp
// and block reductions. Compiled by NVRTC inside mtc (no host headers: NVRTC
// has none); embedded into mtc as a C string at build time.
//
// bf16 is a storage type only: 16 bits, the top half of an fp32. Loads widen
// it exactly; stores round to nearest even (NaN stays NaN), as
// __float2bfloat16_rn does, without pulling in cuda_bf16.h (a large header
// that would double NVRTC's time for every plan).
#define MT_WARP 32
#define MT_FULL_MASK 0xffffffffu

typedef unsigned int mt_u32;
typedef unsigned long long mt_u64;
struct __align__(2) bf16 {
    unsigned short bits;
};

__device__ __forceinline__ float mt_ld(const float *p) { return *p; }
__device__ __forceinline__ float mt_ld(const bf16 *p) { return __uint_as_float((mt_u32)p->bits << 16); }
__device__ __forceinline__ float mt_bf16_to_f32(unsigned short b) { return __uint_as_float((mt_u32)b << 16); }
__device__ __forceinline__ unsigned short mt_f32_to_bf16(float f) {
    mt_u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
__device__ __forceinline__ void mt_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void mt_st(bf16 *p, float v) { p->bits = mt_f32_to_bf16(v); }

// INS_COPY XFER_BF16 on the cuda backend (runtime/backend/backend_cuda.c,
// cuda_copy_widen): n bf16 values at src widened exactly into n floats at
// dst, a grid-stride loop (a sharded bf16 plan's gradients into the fp32
// staging of its reduce-scatter). The cpu backend's cpu_copy_widen is its
// reference. In every plan's module: mtc does not know which plans shard.
extern "C" __global__ void mt_widen_bf16(float *dst, const unsigned short *src, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = mt_bf16_to_f32(src[i]);
}

// The AdamW update on the device (the optimizer state of a layer the plan
// places on the device): runtime/store/adamw.c's adamw_one, the same fp32
// operations in the same order, each rounded on its own by the
// round-to-nearest intrinsics (never contracted into a fused multiply-add;
// the host compiles adamw.c with -ffp-contract=off), so the device and the
// host give the same bits. Its plain reference is the host kernel itself:
// tests/emu/adamw_device_check.c compares them bit for bit. For i < n:
//     gg = g[i] * grad_scale                                (g: gb's bf16 widened when gb is not NULL)
//     m[i] = beta1 * m[i] + one_minus_beta1 * gg
//     v[i] = beta2 * v[i] + one_minus_beta2 * (gg * gg)
//     w[i] = w[i] * decay_mul - step * m[i] / (sqrt(v[i]) * inv_sqrt_bc2 + eps)
// then w_bf16[i] = w[i] rounded to bf16 (when not NULL) and g[i] = 0 (when
// zero_grads and g is used). w, m, v: (n) fp32; g: (n) fp32 or NULL; gb:
// (n) bf16 or NULL; w_bf16: (n) bf16 or NULL. The constants are
// adamw_constants' (runtime/store/adamw.h, AdamWConst: the same layout). A
// grid-stride loop; each element on its own, so any grid gives the same bits.
struct MtAdamWConst {
    float grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, decay_mul, step, inv_sqrt_bc2;
};
extern "C" __global__ void mt_adamw(float *w, float *m, float *v, float *g, const unsigned short *gb,
                                    unsigned short *w_bf16, long long n, MtAdamWConst c, int zero_grads) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float gg = __fmul_rn(gb ? mt_bf16_to_f32(gb[i]) : g[i], c.grad_scale);
        float mi = __fadd_rn(__fmul_rn(c.beta1, m[i]), __fmul_rn(c.one_minus_beta1, gg));
        float vi = __fadd_rn(__fmul_rn(c.beta2, v[i]), __fmul_rn(c.one_minus_beta2, __fmul_rn(gg, gg)));
        float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), c.inv_sqrt_bc2), c.eps);
        float wi = __fsub_rn(__fmul_rn(w[i], c.decay_mul), __fdiv_rn(__fmul_rn(c.step, mi), denom));
        w[i] = wi, m[i] = mi, v[i] = vi;
        if (w_bf16) w_bf16[i] = mt_f32_to_bf16(wi);
        if (zero_grads && !gb) g[i] = 0.0f;
    }
}

// A COPY_OUT of a segment whose optimizer is on the device: n gradients
// from the arena, fp32 (src) or bf16 (srcb, widened exactly), added into the
// device store's fp32 accumulators g, or (set) stored there: the host's
// grads_accumulate (runtime/store/adamw.c; its reference
// grads_accumulate_ref), one float add an element as there.
extern "C" __global__ void mt_grads_add(float *g, const float *src, const unsigned short *srcb, long long n, int set) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float x = srcb ? mt_bf16_to_f32(srcb[i]) : src[i];
        g[i] = set ? x : __fadd_rn(g[i], x);
    }
}

// The squared norm of a segment's n gradients g on the device, as the
// host's adamw_sq_norm sums them (runtime/store/adamw.c, chunk_sq_body):
// chunks of `chunk` elements (ADAMW_NORM_CHUNK), chunk k summed by thread k
// into sums[k] in double, in the host's order (four quarter streams of two
// running sums each, combined in a fixed order, then the tail); the caller
// adds the chunk sums in order. Each square of a float is exact in double,
// so only the additions round, as on the host: the same double. One thread
// a chunk (a 3B model's layer has some 1,500 chunks): correct before fast.
extern "C" __global__ void mt_sq_norm_chunks(double *sums, const float *g, long long n, long long chunk) {
    long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x, start = k * chunk;
    if (start >= n) return;
    const float *c = g + start;
    long long len = n - start < chunk ? n - start : chunk, q = len / 8 * 2;
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (long long i = 0; i < q; i += 2)
        for (int j = 0; j < 8; j++) {
            double x = (double)c[(j / 2) * q + i + (j % 2)];
            a[j] = __dadd_rn(a[j], __dmul_rn(x, x));
        }
    double sum = __dadd_rn(__dadd_rn(__dadd_rn(a[0], a[1]), __dadd_rn(a[2], a[3])),
                           __dadd_rn(__dadd_rn(a[4], a[5]), __dadd_rn(a[6], a[7])));
    for (long long i = 4 * q; i < len; i++) sum = __dadd_rn(sum, __dmul_rn((double)c[i], (double)c[i]));
    sums[k] = sum;
}

// Four consecutive elements at p (16-byte aligned for float, 8 for bf16).
__device__ __forceinline__ float4 mt_ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 mt_ld4(const bf16 *p) {
    uint2 u = *(const uint2 *)p;
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xffff0000u));
}
__device__ __forceinline__ void mt_st4(float *p, float4 v) { *(float4 *)p = v; }
__device__ __forceinline__ void mt_st4(bf16 *p, float4 v) {
    uint2 u;
    u.x = (mt_u32)mt_f32_to_bf16(v.x) | ((mt_u32)mt_f32_to_bf16(v.y) << 16);
    u.y = (mt_u32)mt_f32_to_bf16(v.z) | ((mt_u32)mt_f32_to_bf16(v.w) << 16);
    *(uint2 *)p = u;
}
// Whether p can be read four elements at a time.
template <typename S> __device__ __forceinline__ bool mt_aligned4(const S *p) {
    return ((mt_u64)p & (4 * sizeof(S) - 1)) == 0;
}

// Loads and stores of the other kernel IR types (i32 arguments), four at a time too.
__device__ __forceinline__ int mt_ld(const int *p) { return *p; }
__device__ __forceinline__ int4 mt_ld4(const int *p) { return *(const int4 *)p; }
__device__ __forceinline__ void mt_st(int *p, int v) { *p = v; }
__device__ __forceinline__ void mt_st4(int *p, int4 v) { *(int4 *)p = v; }
__device__ __forceinline__ float4 mt_pack4(float a, float b, float c, float d) { return make_float4(a, b, c, d); }
__device__ __forceinline__ int4 mt_pack4(int a, int b, int c, int d) { return make_int4(a, b, c, d); }

template <typename X> __device__ __forceinline__ X mt_max(X a, X b) { return a > b || a != a ? a : b; } // NaN wins
template <typename X> __device__ __forceinline__ X mt_min(X a, X b) { return a < b || a != a ? a : b; }

// Sums and maxima over a warp, returned to every lane (float, double, int, long long).
template <typename X> __device__ __forceinline__ X mt_warp_sum(X v) {
    for (int o = MT_WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(MT_FULL_MASK, v, o);
    return v;
}
template <typename X> __device__ __forceinline__ X mt_warp_max(X v) {
    for (int o = MT_WARP / 2; o > 0; o >>= 1) v = mt_max(v, __shfl_xor_sync(MT_FULL_MASK, v, o));
    return v;
}
// The same over the block (blockDim.x a multiple of 32, at most 1024), to
// every thread. scratch: (32) elements of shared memory (a double array
// serves every type); back-to-back calls are safe (each syncs before it
// writes scratch).
template <typename X> __device__ __forceinline__ X mt_block_sum(X v, X *scratch) {
    int lane = threadIdx.x % MT_WARP, warp = threadIdx.x / MT_WARP, nwarps = blockDim.x / MT_WARP;
    v = mt_warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : (X)0;
    return mt_warp_sum(v);
}
template <typename X> __device__ __forceinline__ X mt_block_max(X v, X *scratch) {
    int lane = threadIdx.x % MT_WARP, warp = threadIdx.x / MT_WARP, nwarps = blockDim.x / MT_WARP;
    v = mt_warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : scratch[0];
    return mt_warp_max(v);
}
