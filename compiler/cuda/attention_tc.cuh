// attention_tc.cuh: flash attention, forward and backward, on tensor cores (bf16 storage,
// mma.sync m16n8k16 with fp32 accumulation, online softmax in fp32, tiles
// staged with cp.async and read with ldmatrix; FlashAttention-2's loop
// order). Same semantics, layouts, lse and backward workspace as
// attention.cuh (which stays the reference and the fallback: f32 storage, other head
// sizes). Needs prelude.cuh, mma.cuh and attention.cuh (its constants).
//
// One block: 64 query rows of one head, four warps of 16 rows each; keys
// stream through shared memory 64 at a time. Causal: key tiles wholly after
// the block's last query are skipped; the diagonal tile masks per element.
// Grouped-query as attention.cuh (query head h reads kv head h / (H / KVH)).
// The options (scale, soft-capping, sliding window: attention.cuh's
// MtAttnOpt) as attention.cuh: a window skips whole key tiles before the
// block's first visible key, and in bwd_dkdv whole query tiles after the
// last query that sees the block's keys.
//
// Launch ABI (numbers in common/attention.h: ATTN_TC_*), 128 threads each:
//   mt_attn_tc_fwd_NAME      grid (ceil(T/64), H, B), attn_tc_smem_fwd(D) bytes of dynamic shared memory
//   mt_attn_tc_bwd_dq_NAME   grid (ceil(T/64), H, B), attn_tc_smem_dq(D)
//   mt_attn_tc_bwd_dkdv_NAME grid (ceil(T/64), KVH, B), attn_tc_smem_dkdv(D)
// bwd_dq first (it writes the workspace), then bwd_dkdv, as attention.cuh;
// deterministic, no atomics.
// q, k, v 16-byte aligned with rows of H*D and KVH*D elements (D 64 or 128).
#define MT_ATTN_TC_THREADS 128
#define MT_ATTN_TC_BQ 64 // query rows per block, 16 per warp
#define MT_ATTN_TC_BK 64 // keys per tile
#define MT_ATTN_TC_BQ_DKDV 16 // query rows per tile of bwd_dkdv: with 64 or 32, beside its accumulators
                              // (dk and dv: 128 registers a thread at D 128), registers spill

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
                                               int T, int H, int KVH, MtAttnOpt opt) {
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

    mt_attn_tc_stage<D, LD>(Qs, qb, qstride, q0, T, BQ);
    mt_cp_async_commit();
    mt_cp_async_wait<0>();
    __syncthreads();
    // this warp's 16 query rows as A fragments, one per 16 dims
    mt_u32 qa[KD][4];
    #pragma unroll
    for (int kk = 0; kk < KD; kk++) // matrix j = lane / 8: rows + 8 (j % 2), dims + 8 (j / 2)
        mt_ldmatrix_x4(qa[kk], Qs + (warp * 16 + lane % 8 + 8 * (lane / 8 % 2)) * LD + kk * 16 + 8 * (lane / 16));

    float o[ND][4]; // (16, D) output rows g and g + 8, dims 8n + 2t, +1
    float m[2] = {MT_NEG_INF, MT_NEG_INF}, l[2] = {0.0f, 0.0f}; // rows g, g + 8
    #pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const int row0 = q0 + warp * 16 + g; // this lane's rows: row0, row0 + 8
    const int kend = CAUSAL ? min(T, q0 + BQ) : T;
    for (int k0 = mt_attn_kstart(opt, q0, BK); k0 < kend; k0 += BK) {
        __syncthreads(); // the previous tile is consumed
        mt_attn_tc_stage<D, LD>(Ks, kb, kstride, k0, T, BK);
        mt_attn_tc_stage<D, LD>(Vs, vb, kstride, k0, T, BK);
        mt_cp_async_commit();
        mt_cp_async_wait<0>();
        __syncthreads();
        // S = Q K^T: (16, BK) per warp; B[dim][key] = K[key][dim], rows of K as they are
        float s[NK][4];
        #pragma unroll
        for (int n = 0; n < NK; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            #pragma unroll
            for (int kk = 0; kk < KD; kk += 2) { // x4: dims 16kk .. 16kk + 31 of keys 8n .. 8n + 7
                mt_u32 kf[4];
                mt_ldmatrix_x4(kf, Ks + (n * 8 + lane % 8) * LD + kk * 16 + 8 * (lane / 8));
                mt_mma_16816(s[n], qa[kk], kf, s[n]);
                mt_mma_16816(s[n], qa[kk + 1], kf + 2, s[n]);
            }
        }
        // online softmax over this tile, rows g (i = 0) and g + 8 (i = 1)
        float mt[2] = {m[0], m[1]};
        #pragma unroll
        for (int n = 0; n < NK; n++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = e / 2, row = row0 + 8 * i, j = k0 + n * 8 + 2 * t + e % 2;
                s[n][e] = mt_attn_visible<CAUSAL>(opt, j, row, T) ? mt_attn_score2(opt, s[n][e]) : MT_NEG_INF;
                mt[i] = fmaxf(mt[i], s[n][e]);
            }
        #pragma unroll
        for (int i = 0; i < 2; i++) { // a row lives in the 4 lanes of a group
            mt[i] = fmaxf(mt[i], __shfl_xor_sync(MT_FULL_MASK, mt[i], 1));
            mt[i] = fmaxf(mt[i], __shfl_xor_sync(MT_FULL_MASK, mt[i], 2));
        }
        float corr[2], mb[2], ls[2] = {0.0f, 0.0f};
        #pragma unroll
        for (int i = 0; i < 2; i++) mb[i] = mt_attn_base(mt[i]), corr[i] = exp2f(m[i] - mb[i]), m[i] = mt[i];
        mt_u32 pa[NK / 2][4]; // P as A fragments over the keys: n-tiles 2j, 2j + 1 make k-step j
        #pragma unroll
        for (int n = 0; n < NK; n++) {
            float p[4];
            #pragma unroll
            for (int e = 0; e < 4; e++) p[e] = exp2f(s[n][e] - mb[e / 2]), ls[e / 2] += p[e];
            pa[n / 2][2 * (n % 2)] = mt_pack_bf16(p[0], p[1]);
            pa[n / 2][2 * (n % 2) + 1] = mt_pack_bf16(p[2], p[3]);
        }
        #pragma unroll
        for (int i = 0; i < 2; i++) {
            ls[i] += __shfl_xor_sync(MT_FULL_MASK, ls[i], 1);
            ls[i] += __shfl_xor_sync(MT_FULL_MASK, ls[i], 2);
            l[i] = l[i] * corr[i] + ls[i];
        }
        #pragma unroll
        for (int n = 0; n < ND; n++) o[n][0] *= corr[0], o[n][1] *= corr[0], o[n][2] *= corr[1], o[n][3] *= corr[1];
        // O += P V; B[key][dim] = V[key][dim]: columns of V, so ldmatrix .trans
        #pragma unroll
        for (int n = 0; n < ND; n += 2)
            #pragma unroll
            for (int j = 0; j < NK / 2; j++) { // x4: keys 16j + 8 (lane / 8 % 2), dims 8n + 8 (lane / 16)
                mt_u32 vf[4];
                mt_ldmatrix_x4_trans(vf, Vs + (j * 16 + lane % 8 + 8 * (lane / 8 % 2)) * LD + n * 8 + 8 * (lane / 16));
                mt_mma_16816(o[n], pa[j], vf, o[n]);
                mt_mma_16816(o[n + 1], pa[j], vf + 2, o[n + 1]);
            }
    }
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = row0 + 8 * i;
        if (row >= T) continue;
        const float inv = 1.0f / l[i];
        bf16 *yr = y + ((long)b * T + row) * qstride + (long)h * D;
        #pragma unroll
        for (int n = 0; n < ND; n++) mt_st(yr + n * 8 + 2 * t, o[n][2 * i] * inv), mt_st(yr + n * 8 + 2 * t + 1, o[n][2 * i + 1] * inv);
        if (lse && t == 0) lse[((long)b * H + h) * T + row] = (m[i] + log2f(l[i])) * MT_LN2;
    }
}

// ---- the backward: the building blocks, per warp

// acc (16, 8 NT) += A (16, D) B^T, A = 16 rows at a, B = 8 NT rows at b, both
// in shared memory with row pitch LD: Q K^T, dY V^T, K Q^T, V dY^T.
template <int D, int LD, int NT>
__device__ __forceinline__ void mt_tc_abt(float acc[NT][4], const bf16 *a, const bf16 *b) {
    const int lane = threadIdx.x % MT_WARP;
    #pragma unroll
    for (int kk = 0; kk < D / 16; kk += 2) {
        mt_u32 af[2][4];
        #pragma unroll
        for (int x = 0; x < 2; x++) // matrix j = lane / 8: rows + 8 (j % 2), dims + 8 (j / 2)
            mt_ldmatrix_x4(af[x], a + (lane % 8 + 8 * (lane / 8 % 2)) * LD + (kk + x) * 16 + 8 * (lane / 16));
        #pragma unroll
        for (int n = 0; n < NT; n++) {
            mt_u32 bf[4]; // dims 16 kk .. 16 kk + 31 of rows 8n .. 8n + 7
            mt_ldmatrix_x4(bf, b + (n * 8 + lane % 8) * LD + kk * 16 + 8 * (lane / 8));
            mt_mma_16816(acc[n], af[0], bf, acc[n]);
            mt_mma_16816(acc[n], af[1], bf + 2, acc[n]);
        }
    }
}
// acc (16, D) += P V, P (16, 16 KS) as A fragments, V = 16 KS rows at v in
// shared memory (pitch LD): P V, dS K, P^T dY, dS^T Q.
template <int D, int LD, int KS>
__device__ __forceinline__ void mt_tc_pv(float acc[D / 8][4], const mt_u32 pa[KS][4], const bf16 *v) {
    const int lane = threadIdx.x % MT_WARP;
    #pragma unroll
    for (int n = 0; n < D / 8; n += 2)
        #pragma unroll
        for (int j = 0; j < KS; j++) { // x4 .trans: rows 16j + 8 (lane / 8 % 2), dims 8n + 8 (lane / 16)
            mt_u32 vf[4];
            mt_ldmatrix_x4_trans(vf, v + (j * 16 + lane % 8 + 8 * (lane / 8 % 2)) * LD + n * 8 + 8 * (lane / 16));
            mt_mma_16816(acc[n], pa[j], vf, acc[n]);
            mt_mma_16816(acc[n + 1], pa[j], vf + 2, acc[n + 1]);
        }
}
// Accumulator fragments (16, 8 NT) as bf16 A fragments (16, 16 (NT / 2)).
template <int NT> __device__ __forceinline__ void mt_tc_to_a(mt_u32 pa[NT / 2][4], const float c[NT][4]) {
    #pragma unroll
    for (int n = 0; n < NT; n++) {
        pa[n / 2][2 * (n % 2)] = mt_pack_bf16(c[n][0], c[n][1]);
        pa[n / 2][2 * (n % 2) + 1] = mt_pack_bf16(c[n][2], c[n][3]);
    }
}

// acc (16, D) += C V for C (16, 8 NT) accumulator fragments (destroyed), in
// two bf16 passes, C's bf16 rounding then what it left: about 16 bits of C.
template <int D, int LD, int NT>
__device__ __forceinline__ void mt_tc_pv_split(float acc[D / 8][4], float c[NT][4], const bf16 *v) {
    mt_u32 ca[NT / 2][4];
    mt_tc_to_a<NT>(ca, c);
    mt_tc_pv<D, LD, NT / 2>(acc, ca, v);
    #pragma unroll
    for (int n = 0; n < NT; n++)
        #pragma unroll
        for (int e = 0; e < 4; e++) c[n][e] -= mt_bf16_to_f32(mt_f32_to_bf16(c[n][e]));
    mt_tc_to_a<NT>(ca, c);
    mt_tc_pv<D, LD, NT / 2>(acc, ca, v);
}

// Stages key tile k0 of K and V (rows of `stride` elements at kb, vb) into Ks
// and Vs with the whole block, then this warp's scores: s = Q K^T and
// dp = dY V^T (16, BK), Q and dY the warp's 16 rows at qw and dyw.
template <int D, int LD, int NK>
__device__ __forceinline__ void mt_tc_scores(float s[NK][4], float dp[NK][4], bf16 *Ks, bf16 *Vs, const bf16 *kb,
                                             const bf16 *vb, long stride, int k0, int T, const bf16 *qw,
                                             const bf16 *dyw) {
    __syncthreads(); // the previous tile is consumed
    mt_attn_tc_stage<D, LD>(Ks, kb, stride, k0, T, MT_ATTN_TC_BK);
    mt_attn_tc_stage<D, LD>(Vs, vb, stride, k0, T, MT_ATTN_TC_BK);
    mt_cp_async_commit();
    mt_cp_async_wait<0>();
    __syncthreads();
    #pragma unroll
    for (int n = 0; n < NK; n++)
        #pragma unroll
        for (int e = 0; e < 4; e++) s[n][e] = 0.0f, dp[n][e] = 0.0f;
    mt_tc_abt<D, LD, NK>(s, qw, Ks);
    mt_tc_abt<D, LD, NK>(dp, dyw, Vs);
}

// dq, and the workspace for dkdv (lse, then delta = rowsum(dP * P) =
// rowsum(dy * y), each (B, H, T) fp32), as mt_attn_bwd_dq of attention.cuh:
// given the forward's y and lse it takes them, otherwise a first pass over
// the keys recomputes them. Per key tile: S = Q K^T, dP = dY V^T,
// dS = P (dP - delta), dq += dS K. One block: 64 query rows, 16 a warp.
template <int D, bool CAUSAL>
__device__ __forceinline__ void mt_attn_tc_bwd_dq(bf16 *dq, float *ws, const bf16 *dy, const bf16 *q, const bf16 *k,
                                                  const bf16 *v, const bf16 *y, const float *lse_saved, int T, int H,
                                                  int KVH, MtAttnOpt opt) {
    constexpr int BQ = MT_ATTN_TC_BQ, BK = MT_ATTN_TC_BK, LD = D + 8, NK = BK / 8, ND = D / 8;
    extern __shared__ float mt_smem[];
    bf16 *Qs = (bf16 *)mt_smem; // (BQ, D + 8)
    bf16 *dYs = Qs + BQ * LD;   // (BQ, D + 8)
    bf16 *Ks = dYs + BQ * LD;   // (BK, D + 8)
    bf16 *Vs = Ks + BK * LD;    // (BK, D + 8)
    const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BQ, kvh = h / (H / KVH), B = gridDim.z;
    const int lane = threadIdx.x % MT_WARP, warp = threadIdx.x / MT_WARP, g = lane / 4, t = lane % 4;
    const long qstride = (long)H * D, kstride = (long)KVH * D;
    const long qoff = ((long)b * T * H + h) * D, koff = ((long)b * T * KVH + kvh) * D;
    float *ws_lse = ws + ((long)b * H + h) * T, *ws_delta = ws + (long)B * H * T + ((long)b * H + h) * T;
    const bf16 *qw = Qs + warp * 16 * LD, *dyw = dYs + warp * 16 * LD; // this warp's rows
    const int row0 = q0 + warp * 16 + g;                              // this lane's rows: row0, row0 + 8

    mt_attn_tc_stage<D, LD>(Qs, q + qoff, qstride, q0, T, BQ);
    mt_attn_tc_stage<D, LD>(dYs, dy + qoff, qstride, q0, T, BQ);
    mt_cp_async_commit();
    mt_cp_async_wait<0>();
    __syncthreads();
    const int kstart = mt_attn_kstart(opt, q0, BK), kend = CAUSAL ? min(T, q0 + BQ) : T;
    float lse2[2], delta[2]; // rows g, g + 8; lse in log2 units
    if (y && lse_saved) {
        #pragma unroll
        for (int i = 0; i < 2; i++) { // the group's 4 lanes split the row's dims
            const int row = row0 + 8 * i;
            float u = 0.0f;
            if (row < T)
                for (int d = t; d < D; d += 4)
                    u += mt_ld(dyw + (g + 8 * i) * LD + d) * mt_ld(y + qoff + (long)row * qstride + d);
            u += __shfl_xor_sync(MT_FULL_MASK, u, 1);
            u += __shfl_xor_sync(MT_FULL_MASK, u, 2);
            delta[i] = u;
            lse2[i] = row < T ? lse_saved[((long)b * H + h) * T + row] * MT_LOG2E : 0.0f;
        }
    } else {
        float m[2] = {MT_NEG_INF, MT_NEG_INF}, l[2] = {0.0f, 0.0f}, u[2] = {0.0f, 0.0f};
        for (int k0 = kstart; k0 < kend; k0 += BK) {
            float s[NK][4], dp[NK][4];
            mt_tc_scores<D, LD, NK>(s, dp, Ks, Vs, k + koff, v + koff, kstride, k0, T, qw, dyw);
            float mt[2] = {m[0], m[1]};
            #pragma unroll
            for (int n = 0; n < NK; n++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = e / 2, j = k0 + n * 8 + 2 * t + e % 2;
                    s[n][e] = mt_attn_visible<CAUSAL>(opt, j, row0 + 8 * i, T) ? mt_attn_score2(opt, s[n][e]) : MT_NEG_INF;
                    mt[i] = fmaxf(mt[i], s[n][e]);
                }
            float ls[2] = {0.0f, 0.0f}, us[2] = {0.0f, 0.0f}, mb[2];
            #pragma unroll
            for (int i = 0; i < 2; i++) {
                mt[i] = fmaxf(mt[i], __shfl_xor_sync(MT_FULL_MASK, mt[i], 1));
                mt[i] = fmaxf(mt[i], __shfl_xor_sync(MT_FULL_MASK, mt[i], 2));
                mb[i] = mt_attn_base(mt[i]);
            }
            #pragma unroll
            for (int n = 0; n < NK; n++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float p = exp2f(s[n][e] - mb[e / 2]);
                    ls[e / 2] += p, us[e / 2] += p * dp[n][e];
                }
            #pragma unroll
            for (int i = 0; i < 2; i++) {
                #pragma unroll
                for (int o = 1; o <= 2; o <<= 1) {
                    ls[i] += __shfl_xor_sync(MT_FULL_MASK, ls[i], o);
                    us[i] += __shfl_xor_sync(MT_FULL_MASK, us[i], o);
                }
                const float corr = exp2f(m[i] - mb[i]);
                l[i] = l[i] * corr + ls[i], u[i] = u[i] * corr + us[i], m[i] = mt[i];
            }
        }
        #pragma unroll
        for (int i = 0; i < 2; i++) lse2[i] = m[i] + log2f(l[i]), delta[i] = u[i] / l[i];
    }
    #pragma unroll
    for (int i = 0; i < 2; i++)
        if (row0 + 8 * i < T && t == 0) ws_lse[row0 + 8 * i] = lse2[i] * MT_LN2, ws_delta[row0 + 8 * i] = delta[i];

    float acc[ND][4] = {}; // (16, D) dq rows g, g + 8
    for (int k0 = kstart; k0 < kend; k0 += BK) {
        float s[NK][4], dp[NK][4];
        mt_tc_scores<D, LD, NK>(s, dp, Ks, Vs, k + koff, v + koff, kstride, k0, T, qw, dyw);
        #pragma unroll
        for (int n = 0; n < NK; n++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = e / 2, j = k0 + n * 8 + 2 * t + e % 2;
                const float s2 = mt_attn_score2(opt, s[n][e]);
                const float p = mt_attn_visible<CAUSAL>(opt, j, row0 + 8 * i, T) ? exp2f(s2 - lse2[i]) : 0.0f;
                s[n][e] = p * (dp[n][e] - delta[i]) * mt_attn_dcap(opt, s2); // dS
            }
        mt_u32 dsa[NK / 2][4];
        mt_tc_to_a<NK>(dsa, s);
        mt_tc_pv<D, LD, NK / 2>(acc, dsa, Ks);
    }
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = row0 + 8 * i;
        if (row >= T) continue;
        bf16 *o = dq + qoff + (long)row * qstride;
        #pragma unroll
        for (int n = 0; n < ND; n++)
            mt_st(o + n * 8 + 2 * t, acc[n][2 * i] * opt.scale), mt_st(o + n * 8 + 2 * t + 1, acc[n][2 * i + 1] * opt.scale);
    }
}

// dk, dv for 64 keys of one kv head (16 a warp), summed over every query row
// of every query head in its group in a fixed order (no atomics). Per tile of
// 16 queries: S^T = K Q^T, dP^T = V dY^T (keys as rows), P^T and
// dS^T = P^T (dP^T - delta), then dv += P^T dY, dk += dS^T Q.
template <int D, bool CAUSAL>
__device__ __forceinline__ void mt_attn_tc_bwd_dkdv(bf16 *dk, bf16 *dv, const float *ws, const bf16 *dy,
                                                    const bf16 *q, const bf16 *k, const bf16 *v, int T, int H,
                                                    int KVH, MtAttnOpt opt) {
    constexpr int BQ = MT_ATTN_TC_BQ_DKDV, BK = MT_ATTN_TC_BK, LD = D + 8, NQ = BQ / 8, ND = D / 8;
    extern __shared__ float mt_smem[];
    bf16 *Ks = (bf16 *)mt_smem;     // (BK, D + 8)
    bf16 *Vs = Ks + BK * LD;        // (BK, D + 8)
    bf16 *Qs = Vs + BK * LD;        // (BQ, D + 8)
    bf16 *dYs = Qs + BQ * LD;       // (BQ, D + 8)
    float *Ls = (float *)(dYs + BQ * LD); // (BQ) lse, log2 units
    float *Dl = Ls + BQ;                  // (BQ) delta
    const int b = blockIdx.z, kvh = blockIdx.y, k0 = blockIdx.x * BK, G = H / KVH, B = gridDim.z;
    const int lane = threadIdx.x % MT_WARP, warp = threadIdx.x / MT_WARP, g = lane / 4, t = lane % 4;
    const long qstride = (long)H * D, kstride = (long)KVH * D, koff = ((long)b * T * KVH + kvh) * D;
    const int key0 = k0 + warp * 16 + g, iend = mt_attn_qend(opt, k0 + BK, T); // this lane's keys: key0, key0 + 8

    mt_attn_tc_stage<D, LD>(Ks, k + koff, kstride, k0, T, BK);
    mt_attn_tc_stage<D, LD>(Vs, v + koff, kstride, k0, T, BK);
    float dka[ND][4] = {}, dva[ND][4] = {}; // (16, D) rows key0, key0 + 8
    for (int h = kvh * G; h < (kvh + 1) * G; h++) {
        const long qoff = ((long)b * T * H + h) * D, wrow = ((long)b * H + h) * T;
        for (int i0 = CAUSAL ? k0 / BQ * BQ : 0; i0 < iend; i0 += BQ) {
            __syncthreads(); // the previous tile is consumed
            mt_attn_tc_stage<D, LD>(Qs, q + qoff, qstride, i0, T, BQ);
            mt_attn_tc_stage<D, LD>(dYs, dy + qoff, qstride, i0, T, BQ);
            mt_cp_async_commit();
            if (threadIdx.x < BQ) {
                const int tq = i0 + threadIdx.x;
                Ls[threadIdx.x] = tq < T ? ws[wrow + tq] * MT_LOG2E : 0.0f;
                Dl[threadIdx.x] = tq < T ? ws[(long)B * H * T + wrow + tq] : 0.0f;
            }
            mt_cp_async_wait<0>();
            __syncthreads();
            float s[NQ][4] = {}, dp[NQ][4] = {}; // (16 keys, 16 queries)
            mt_tc_abt<D, LD, NQ>(s, Ks + warp * 16 * LD, Qs);
            mt_tc_abt<D, LD, NQ>(dp, Vs + warp * 16 * LD, dYs);
            #pragma unroll
            for (int n = 0; n < NQ; n++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int j = key0 + 8 * (e / 2), ql = n * 8 + 2 * t + e % 2, tq = i0 + ql;
                    const bool ok = tq < T && mt_attn_visible<CAUSAL>(opt, j, tq, T);
                    const float s2 = mt_attn_score2(opt, s[n][e]), p = ok ? exp2f(s2 - Ls[ql]) : 0.0f;
                    dp[n][e] = p * (dp[n][e] - Dl[ql]) * mt_attn_dcap(opt, s2), s[n][e] = p; // dS^T, P^T
                }
            // dv and dk sum over the whole query group: P^T and dS^T go in as
            // bf16 hi + lo (bf16 alone costs dv 3e-2 relative at GQA 8)
            mt_tc_pv_split<D, LD, NQ>(dva, s, dYs);
            mt_tc_pv_split<D, LD, NQ>(dka, dp, Qs);
        }
    }
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        const int j = key0 + 8 * i;
        if (j >= T) continue;
        const long o = koff + (long)j * kstride;
        #pragma unroll
        for (int n = 0; n < ND; n++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                mt_st(dk + o + n * 8 + 2 * t + e, dka[n][2 * i + e] * opt.scale);
                mt_st(dv + o + n * 8 + 2 * t + e, dva[n][2 * i + e]);
            }
    }
}

// One head size, mask and options: extern "C" mt_attn_tc_{fwd,bwd_dq,bwd_dkdv}_NAME,
// NAME as attn_kernel_name() spells it ("bf16_d128_causal"); arguments as
// attention.cuh's entry points of the same name, SCALE, SOFTCAP and WINDOW
// as its MT_ATTN_INSTANTIATE_OPT.
#define MT_ATTN_TC_INSTANTIATE(D, CAUSAL, NAME) MT_ATTN_TC_INSTANTIATE_OPT(D, CAUSAL, 1.0f / sqrtf((float)D), 0.0f, 0, NAME)
#define MT_ATTN_TC_INSTANTIATE_OPT(D, CAUSAL, SCALE, SOFTCAP, WINDOW, NAME)                                       \
    extern "C" __global__ void __launch_bounds__(MT_ATTN_TC_THREADS)                                               \
        mt_attn_tc_fwd_##NAME(bf16 *y, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int T, int H,      \
                              int KVH) {                                                                           \
        mt_attn_tc_fwd<D, CAUSAL>(y, lse, q, k, v, T, H, KVH, MtAttnOpt{SCALE, SOFTCAP, WINDOW});                  \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(MT_ATTN_TC_THREADS)                                               \
        mt_attn_tc_bwd_dq_##NAME(bf16 *dq, float *ws, const bf16 *dy, const bf16 *q, const bf16 *k, const bf16 *v, \
                                 const bf16 *y, const float *lse, int T, int H, int KVH) {                         \
        mt_attn_tc_bwd_dq<D, CAUSAL>(dq, ws, dy, q, k, v, y, lse, T, H, KVH, MtAttnOpt{SCALE, SOFTCAP, WINDOW});   \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(MT_ATTN_TC_THREADS)                                               \
        mt_attn_tc_bwd_dkdv_##NAME(bf16 *dk, bf16 *dv, const float *ws, const bf16 *dy, const bf16 *q,             \
                                   const bf16 *k, const bf16 *v, int T, int H, int KVH) {                          \
        mt_attn_tc_bwd_dkdv<D, CAUSAL>(dk, dv, ws, dy, q, k, v, T, H, KVH, MtAttnOpt{SCALE, SOFTCAP, WINDOW});     \
    }
