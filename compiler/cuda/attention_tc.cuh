// attention_tc.cuh: flash attention forward on tensor cores (bf16 storage,
// mma.sync m16n8k16 with fp32 accumulation, online softmax in fp32, tiles
// staged with cp.async and read with ldmatrix; FlashAttention-2's loop
// order). Same semantics, layouts and lse as mt_attn_fwd of attention.cuh
// (which stays the reference and the fallback: f32 storage, other head
// sizes). Needs prelude.cuh, mma.cuh and attention.cuh (its constants). The
// backward is not written yet.
//
// One block: 64 query rows of one head, four warps of 16 rows each; keys
// stream through shared memory 64 at a time. Causal: key tiles wholly after
// the block's last query are skipped; the diagonal tile masks per element.
// Grouped-query as attention.cuh (query head h reads kv head h / (H / KVH)).
// Options that change the scores (a scale, a window, soft-capping) go where
// `s` is scaled below, before the mask.
//
// Launch ABI (numbers in attention.h: ATTN_TC_*):
//   mt_attn_tc_fwd_NAME  grid (ceil(T/64), H, B), 128 threads,
//                        attn_tc_smem_fwd(D) bytes of dynamic shared memory
// q, k, v 16-byte aligned with rows of H*D and KVH*D elements (D 64 or 128).
#define MT_ATTN_TC_THREADS 128
#define MT_ATTN_TC_BQ 64 // query rows per block, 16 per warp
#define MT_ATTN_TC_BK 64 // keys per tile

// dst (rows, LD) = rows r0 .. r0 + rows - 1 of base (row stride `stride`),
// zeros at and past nvalid; 16 bytes per cp.async. The caller commits.
template <int D, int LD>
__device__ __forceinline__ void mt_attn_tc_stage(bf16 *dst, const bf16 *base, long stride, int r0, int nvalid,
                                                 int rows) {
    constexpr int CH = D / 8; // 16-byte chunks a row
    for (int e = threadIdx.x; e < rows * CH; e += blockDim.x) {
        const int r = e / CH, c = e % CH * 8;
        if (r0 + r < nvalid) mt_cp_async16(dst + r * LD + c, base + (long)(r0 + r) * stride + c);
        else *(uint4 *)(dst + r * LD + c) = make_uint4(0u, 0u, 0u, 0u);
    }
}

__device__ __forceinline__ mt_u32 mt_pack_bf16(float lo, float hi) {
    return (mt_u32)mt_f32_to_bf16(lo) | ((mt_u32)mt_f32_to_bf16(hi) << 16);
}

template <int D, bool CAUSAL>
__device__ __forceinline__ void mt_attn_tc_fwd(bf16 *y, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                               int T, int H, int KVH) {
    constexpr int BQ = MT_ATTN_TC_BQ, BK = MT_ATTN_TC_BK, LD = D + 8; // pad: ldmatrix rows hit other banks
    constexpr int KD = D / 16, NK = BK / 8, ND = D / 8; // k-steps over D, key n-tiles, dim n-tiles
    extern __shared__ float mt_smem[];
    bf16 *Qs = (bf16 *)mt_smem; // (BQ, D + 8)
    bf16 *Ks = Qs + BQ * LD;    // (BK, D + 8)
    bf16 *Vs = Ks + BK * LD;    // (BK, D + 8)
    const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BQ, kvh = h / (H / KVH);
    const int lane = threadIdx.x % MT_WARP, warp = threadIdx.x / MT_WARP, g = lane / 4, t = lane % 4;
    const long qstride = (long)H * D, kstride = (long)KVH * D;
    const bf16 *qb = q + ((long)b * T * H + h) * D, *kb = k + ((long)b * T * KVH + kvh) * D,
               *vb = v + ((long)b * T * KVH + kvh) * D;
    const float sl2 = MT_LOG2E / sqrtf((float)D); // scores in log2 units

    mt_attn_tc_stage<D, LD>(Qs, qb, qstride, q0, T, BQ);
    mt_cp_async_commit();
    mt_cp_async_wait<0>();
    __syncthreads();
    // this warp's 16 query rows as A fragments, one per 16 dims
    mt_u32 qa[KD][4];
    for (int kk = 0; kk < KD; kk++) // matrix j = lane / 8: rows + 8 (j % 2), dims + 8 (j / 2)
        mt_ldmatrix_x4(qa[kk], Qs + (warp * 16 + lane % 8 + 8 * (lane / 8 % 2)) * LD + kk * 16 + 8 * (lane / 16));

    float o[ND][4]; // (16, D) output rows g and g + 8, dims 8n + 2t, +1
    float m[2] = {MT_NEG_INF, MT_NEG_INF}, l[2] = {0.0f, 0.0f}; // rows g, g + 8
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const int row0 = q0 + warp * 16 + g; // this lane's rows: row0, row0 + 8
    const int kend = CAUSAL ? min(T, q0 + BQ) : T;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads(); // the previous tile is consumed
        mt_attn_tc_stage<D, LD>(Ks, kb, kstride, k0, T, BK);
        mt_attn_tc_stage<D, LD>(Vs, vb, kstride, k0, T, BK);
        mt_cp_async_commit();
        mt_cp_async_wait<0>();
        __syncthreads();
        // S = Q K^T: (16, BK) per warp; B[dim][key] = K[key][dim], rows of K as they are
        float s[NK][4];
        for (int n = 0; n < NK; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            for (int kk = 0; kk < KD; kk += 2) { // x4: dims 16kk .. 16kk + 31 of keys 8n .. 8n + 7
                mt_u32 kf[4];
                mt_ldmatrix_x4(kf, Ks + (n * 8 + lane % 8) * LD + kk * 16 + 8 * (lane / 8));
                mt_mma_16816(s[n], qa[kk], kf, s[n]);
                mt_mma_16816(s[n], qa[kk + 1], kf + 2, s[n]);
            }
        }
        // online softmax over this tile, rows g (i = 0) and g + 8 (i = 1)
        float mt[2] = {m[0], m[1]};
        for (int n = 0; n < NK; n++)
            for (int e = 0; e < 4; e++) {
                const int i = e / 2, row = row0 + 8 * i, j = k0 + n * 8 + 2 * t + e % 2;
                const bool ok = j < T && (!CAUSAL || j <= row);
                s[n][e] = ok ? s[n][e] * sl2 : MT_NEG_INF;
                mt[i] = fmaxf(mt[i], s[n][e]);
            }
        for (int i = 0; i < 2; i++) { // a row lives in the 4 lanes of a group
            mt[i] = fmaxf(mt[i], __shfl_xor_sync(MT_FULL_MASK, mt[i], 1));
            mt[i] = fmaxf(mt[i], __shfl_xor_sync(MT_FULL_MASK, mt[i], 2));
        }
        float corr[2], ls[2] = {0.0f, 0.0f};
        for (int i = 0; i < 2; i++) corr[i] = exp2f(m[i] - mt[i]), m[i] = mt[i]; // finite: key 0 is in tile 0
        mt_u32 pa[NK / 2][4]; // P as A fragments over the keys: n-tiles 2j, 2j + 1 make k-step j
        for (int n = 0; n < NK; n++) {
            float p[4];
            for (int e = 0; e < 4; e++) p[e] = exp2f(s[n][e] - m[e / 2]), ls[e / 2] += p[e];
            pa[n / 2][2 * (n % 2)] = mt_pack_bf16(p[0], p[1]);
            pa[n / 2][2 * (n % 2) + 1] = mt_pack_bf16(p[2], p[3]);
        }
        for (int i = 0; i < 2; i++) {
            ls[i] += __shfl_xor_sync(MT_FULL_MASK, ls[i], 1);
            ls[i] += __shfl_xor_sync(MT_FULL_MASK, ls[i], 2);
            l[i] = l[i] * corr[i] + ls[i];
        }
        for (int n = 0; n < ND; n++) o[n][0] *= corr[0], o[n][1] *= corr[0], o[n][2] *= corr[1], o[n][3] *= corr[1];
        // O += P V; B[key][dim] = V[key][dim]: columns of V, so ldmatrix .trans
        for (int n = 0; n < ND; n += 2)
            for (int j = 0; j < NK / 2; j++) { // x4: keys 16j + 8 (lane / 8 % 2), dims 8n + 8 (lane / 16)
                mt_u32 vf[4];
                mt_ldmatrix_x4_trans(vf, Vs + (j * 16 + lane % 8 + 8 * (lane / 8 % 2)) * LD + n * 8 + 8 * (lane / 16));
                mt_mma_16816(o[n], pa[j], vf, o[n]);
                mt_mma_16816(o[n + 1], pa[j], vf + 2, o[n + 1]);
            }
    }
    for (int i = 0; i < 2; i++) {
        const int row = row0 + 8 * i;
        if (row >= T) continue;
        const float inv = 1.0f / l[i];
        bf16 *yr = y + ((long)b * T + row) * qstride + (long)h * D;
        for (int n = 0; n < ND; n++) mt_st(yr + n * 8 + 2 * t, o[n][2 * i] * inv), mt_st(yr + n * 8 + 2 * t + 1, o[n][2 * i + 1] * inv);
        if (lse && t == 0) lse[((long)b * H + h) * T + row] = (m[i] + log2f(l[i])) * MT_LN2;
    }
}

// One head size and mask: extern "C" mt_attn_tc_fwd_NAME, NAME as
// attn_kernel_name() spells it ("bf16_d128_causal").
#define MT_ATTN_TC_INSTANTIATE(D, CAUSAL, NAME)                                                                    \
    extern "C" __global__ void __launch_bounds__(MT_ATTN_TC_THREADS)                                               \
        mt_attn_tc_fwd_##NAME(bf16 *y, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int T, int H,      \
                              int KVH) {                                                                           \
        mt_attn_tc_fwd<D, CAUSAL>(y, lse, q, k, v, T, H, KVH);                                                     \
    }
