// attention_tc.cuh: flash attention, forward and backward, on tensor cores (bf16 storage,
// mma.sync m16n8k16 with fp32 accumulation, online softmax in fp32, tiles
// staged with cp.async (two stages: the next tile loads while this one is
// used) and read with ldmatrix; FlashAttention-2's loop order). Same
// semantics, layouts, lse and backward workspace as attention.cuh (the fp32
// fallback; attention_ref.cuh is the plain reference both are checked
// against). Needs prelude.cuh, mma.cuh and attention.cuh (its constants and
// MtAttnOpt).
//
// Head sizes: D (queries, keys) and DV (values, outputs) each 64, 128, 192
// or 256, not necessarily equal (DeepSeek's 192/128). Grouped-query as
// attention.cuh (query head h reads kv head h / (H / KVH)); the options
// (scale, soft-capping, sliding window, chunk) as attention.cuh's MtAttnOpt.
//
// Documents (packed rows): seg, when not NULL, is (B, T): seg[b*T + t] the
// position of the first token of query t's document; key j is visible to t
// only when j >= seg[b*T + t] (besides causal and window). Key tiles wholly
// before a query block's smallest seg are skipped.
//
// Masks are evaluated only on the tiles that need them (the causal diagonal,
// a window's edge, a document's start, the end of the rows); every other
// tile takes the scores as they are. Causal launches the heaviest query
// blocks (the last rows) first.
//
// The work, in T*T*D units of matrix products: forward Q K^T, P V (2);
// bwd_dq dS K after Q K^T and dY V^T (3); bwd_dkdv Q K^T and dY V^T again,
// then P^T dY and dS^T Q (4): 9, dq deterministic (no atomics; the standard
// count, with dq by atomics, is 7). The backend passes the forward's y and
// lse (the plan's attention_lse); given NULL, bwd_dq first recomputes them
// (Q K^T, dY V^T: 2 more). P and dS enter the products as plain bf16, as
// FlashAttention and PyTorch's SDPA do: each output's largest error against
// attention in double is at most 1.54 times that of plain bf16 attention (P
// and dS rounded to bf16) on emu_attention's cases, FlashAttention's own
// tests' criterion (2 times); dv's equals it.
//
// Launch ABI (numbers in common/attention.h: ATTN_TC_*, attn_tc_*), 128 threads each:
//   mt_attn_tc_fwd_NAME      grid (ceil(T/64), H, B),     attn_tc_smem_fwd(D, DV) bytes of dynamic shared memory
//   mt_attn_tc_bwd_dq_NAME   grid (ceil(T/64), H, B),     attn_tc_smem_dq(D, DV)
//   mt_attn_tc_bwd_dkdv_NAME grid (ceil(T/BKD), KVH, B),  attn_tc_smem_dkdv(D, DV), BKD = attn_tc_bk_dkdv(D, DV)
// each at most 99 KiB of shared memory.
// bwd_dq first (it writes the workspace), then bwd_dkdv, as attention.cuh.
// q, k, v 16-byte aligned with rows of H*D, KVH*D and KVH*DV elements.
#define MT_ATTN_TC_THREADS 128
#define MT_ATTN_TC_BQ 64     // query rows per block of fwd and bwd_dq, 16 per warp
#define MT_ATTN_TC_BQ_DKDV 16 // query rows per tile of bwd_dkdv: with 64 or 32, beside its accumulators
                              // (dk and dv: 128 registers a thread at D 128), registers spill

// The tile sizes of one pair of head widths (common/attention.h mirrors them).
template <int D, int DV> struct MtAttnTcGeo {
    static_assert((D % 64 == 0 || D == 192) && D <= 256 && (DV % 64 == 0 || DV == 192) && DV <= 256,
                  "head sizes 64, 128, 192, 256");
    // keys per tile of fwd (BK) and bwd_dq (BKQ): 64, 32 at heads over 128 (registers), halved
    // while the block's shared memory exceeds 99 KiB, what sm_86 and sm_89 allow (227 KiB on sm_90)
    static constexpr int CAP = 99 * 1024;
    static constexpr int fwd_bytes(int bk) { return 2 * (64 * (D + 8) + 2 * bk * (D + 8 + DV + 8)); }
    static constexpr int dq_bytes(int bk) { return 2 * (64 + 2 * bk) * (D + 8 + DV + 8); }
    static constexpr int BK0 = D > 128 || DV > 128 ? 32 : 64;
    static constexpr int BK = fwd_bytes(BK0) <= CAP ? BK0 : fwd_bytes(BK0 / 2) <= CAP ? BK0 / 2 : BK0 / 4;
    static constexpr int BKQ = dq_bytes(BK0) <= CAP ? BK0 : dq_bytes(BK0 / 2) <= CAP ? BK0 / 2 : BK0 / 4;
    static_assert(fwd_bytes(BK) <= CAP && dq_bytes(BKQ) <= CAP, "shared memory over 99 KiB");
    static constexpr int SPLIT = D + DV > 256 ? 2 : 1;        // bwd_dkdv: warps sharing 16 keys, each owning
                                                              // 1/SPLIT of dk's and dv's columns
    static constexpr int BKD = 64 / SPLIT;                     // keys per block of bwd_dkdv
    static constexpr int LDK = D + 8, LDV = DV + 8;            // row pitches in shared memory: the pad puts
                                                              // ldmatrix's rows in other banks
};

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

// The query block a block computes: causal runs the last (heaviest) first.
template <bool CAUSAL> __device__ __forceinline__ int mt_attn_tc_qblock() {
    return CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
}

// The smallest and largest document start over query rows [q0, q0 + n) of
// row b that exist (0 and 0 without documents).
__device__ __forceinline__ void mt_attn_tc_segs(int *lo, int *hi, const int *seg, int b, int T, int q0, int n) {
    *lo = 0, *hi = 0;
    if (!seg) return;
    const int *s = seg + (long)b * T;
    const int e = min(T, q0 + n);
    *lo = q0 < e ? s[q0] : 0, *hi = *lo;
    for (int t = q0 + 1; t < e; t++) *lo = min(*lo, s[t]), *hi = max(*hi, s[t]);
}
// Whether every query in [q0, q0 + nq) sees every key in [k0, k0 + nk)
// (the keys exist, none masked): such a tile needs no mask. seghi: the
// queries' largest document start. Queries at or past T are not looked at
// (fwd and bwd_dq store nothing of them; bwd_dkdv checks them itself).
template <bool CAUSAL>
__device__ __forceinline__ bool mt_attn_tc_full(const MtAttnOpt &o, int k0, int nk, int q0, int nq, int T, int seghi) {
    return k0 + nk <= T && (!CAUSAL || k0 + nk - 1 <= q0) &&
           (o.window == 0 || k0 > q0 + nq - 1 - o.window) && seghi <= k0 &&
           (o.chunk == 0 || min(k0, q0) / o.chunk == (max(k0 + nk, q0 + nq) - 1) / o.chunk);
}

// ---- the products, per warp

// acc (16, 8 NT) += A (16, D) B^T, A = 16 rows at a, B = 8 NT rows at b, both
// in shared memory with row pitches LDA and LDB: Q K^T, dY V^T, K Q^T, V dY^T.
template <int D, int LDA, int LDB, int NT>
__device__ __forceinline__ void mt_tc_abt(float acc[NT][4], const bf16 *a, const bf16 *b) {
    const int lane = threadIdx.x % MT_WARP;
    #pragma unroll
    for (int kk = 0; kk < D / 16; kk += 2) {
        mt_u32 af[2][4];
        #pragma unroll
        for (int x = 0; x < 2; x++) // matrix j = lane / 8: rows + 8 (j % 2), dims + 8 (j / 2)
            mt_ldmatrix_x4(af[x], a + (lane % 8 + 8 * (lane / 8 % 2)) * LDA + (kk + x) * 16 + 8 * (lane / 16));
        #pragma unroll
        for (int n = 0; n < NT; n++) {
            mt_u32 bf[4]; // dims 16 kk .. 16 kk + 31 of rows 8n .. 8n + 7
            mt_ldmatrix_x4(bf, b + (n * 8 + lane % 8) * LDB + kk * 16 + 8 * (lane / 8));
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
// Accumulator fragments (16, 8 NT) as bf16 A fragments (16, 16 (NT / 2)),
// rounded to nearest even by the hardware's conversion.
template <int NT> __device__ __forceinline__ void mt_tc_to_a(mt_u32 pa[NT / 2][4], const float c[NT][4]) {
    #pragma unroll
    for (int n = 0; n < NT; n++) {
        pa[n / 2][2 * (n % 2)] = mt_cvt_bf16x2(c[n][0], c[n][1]);
        pa[n / 2][2 * (n % 2) + 1] = mt_cvt_bf16x2(c[n][2], c[n][3]);
    }
}

// The K and V pipeline of fwd and bwd_dq: key tile k0 in stage st is
// wanted; the copy of tile knext (when before kend) into the other stage
// starts, then tile k0's copy is waited for. Stage s: Ks + s BK LDK, Vs + s BK LDV.
template <int D, int DV, int BK>
__device__ __forceinline__ void mt_attn_tc_kv_next(bf16 *Ks, bf16 *Vs, const bf16 *kb, const bf16 *vb, long kstride,
                                                   long vstride, int knext, int kend, int T, int st) {
    constexpr int LDK = D + 8, LDV = DV + 8;
    if (knext < kend) {
        mt_attn_tc_stage<D, LDK>(Ks + (st ^ 1) * BK * LDK, kb, kstride, knext, T, BK);
        mt_attn_tc_stage<DV, LDV>(Vs + (st ^ 1) * BK * LDV, vb, vstride, knext, T, BK);
    }
    mt_cp_async_commit(); // an empty group past the last tile: the wait below stays right
    mt_cp_async_wait<1>();
    __syncthreads();
}

// The set-up fwd and bwd_dq share: this block's 64 query rows q0 .. q0 + 63
// of head h (kv head kvh) of batch row b, this lane's rows row0 and row0 + 8
// (their document starts srow), the bases and row strides of q, k, v and of
// y / dy (rows of H*DV), and the key tiles of BK it visits, [kstart, kend):
// none wholly before the window or the queries' earliest document start
// (seghi: their latest), none past the causal diagonal.
template <int D, int DV, bool CAUSAL, int BK> struct MtAttnTcBlock {
    int b, h, kvh, q0, row0, seghi, srow[2], kstart, kend;
    long qstride, ystride, kstride, vstride;
    const bf16 *qb, *kb, *vb;
    __device__ __forceinline__ MtAttnTcBlock(const bf16 *q, const bf16 *k, const bf16 *v, const int *seg, int T,
                                             int H, int KVH, const MtAttnOpt &opt) {
        b = blockIdx.z, h = blockIdx.y, q0 = mt_attn_tc_qblock<CAUSAL>() * MT_ATTN_TC_BQ, kvh = h / (H / KVH);
        row0 = q0 + threadIdx.x / MT_WARP * 16 + threadIdx.x % MT_WARP / 4;
        qstride = (long)H * D, ystride = (long)H * DV, kstride = (long)KVH * D, vstride = (long)KVH * DV;
        qb = q + ((long)b * T * H + h) * D, kb = k + ((long)b * T * KVH + kvh) * D, vb = v + ((long)b * T * KVH + kvh) * DV;
        int seglo;
        mt_attn_tc_segs(&seglo, &seghi, seg, b, T, q0, MT_ATTN_TC_BQ);
        #pragma unroll
        for (int i = 0; i < 2; i++) srow[i] = seg && row0 + 8 * i < T ? seg[(long)b * T + row0 + 8 * i] : 0;
        kstart = max(mt_attn_kstart(opt, q0, BK), seglo / BK * BK), kend = CAUSAL ? min(T, q0 + MT_ATTN_TC_BQ) : T;
    }
    // the first key tile, K and V at kstart, into stage 0 (the caller commits)
    __device__ __forceinline__ void stage_first_kv(bf16 *Ks, bf16 *Vs, int T) const {
        mt_attn_tc_stage<D, D + 8>(Ks, kb, kstride, kstart, T, BK);
        mt_attn_tc_stage<DV, DV + 8>(Vs, vb, vstride, kstart, T, BK);
    }
};

template <int D, int DV, bool CAUSAL>
__device__ __forceinline__ void mt_attn_tc_fwd(bf16 *y, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                               const int *seg, int T, int H, int KVH, MtAttnOpt opt,
                                               const bf16 *sinks) {
    using G = MtAttnTcGeo<D, DV>;
    constexpr int BQ = MT_ATTN_TC_BQ, BK = G::BK, LDK = G::LDK, LDV = G::LDV, KD = D / 16, NK = BK / 8, ND = DV / 8;
    constexpr bool QREG = D <= 128; // the warp's Q fragments held in registers (wider: read from shared memory)
    extern __shared__ float mt_smem[];
    bf16 *Qs = (bf16 *)mt_smem;   // (BQ, D + 8)
    bf16 *Ks = Qs + BQ * LDK;     // (2, BK, D + 8): two stages
    bf16 *Vs = Ks + 2 * BK * LDK; // (2, BK, DV + 8)
    const MtAttnTcBlock<D, DV, CAUSAL, BK> blk(q, k, v, seg, T, H, KVH, opt);
    const int b = blk.b, h = blk.h, q0 = blk.q0, row0 = blk.row0, seghi = blk.seghi, kstart = blk.kstart, kend = blk.kend;
    const int lane = threadIdx.x % MT_WARP, warp = threadIdx.x / MT_WARP, t = lane % 4;
    const long kstride = blk.kstride, vstride = blk.vstride;
    const bf16 *kb = blk.kb, *vb = blk.vb;
    const int *srow = blk.srow;

    mt_attn_tc_stage<D, LDK>(Qs, blk.qb, blk.qstride, q0, T, BQ);
    mt_cp_async_commit();
    blk.stage_first_kv(Ks, Vs, T);
    mt_cp_async_commit();
    mt_cp_async_wait<1>(); // Q
    __syncthreads();
    const bf16 *qw = Qs + warp * 16 * LDK; // this warp's 16 query rows
    mt_u32 qa[QREG ? KD : 1][4];           // as A fragments, one per 16 dims
    if constexpr (QREG) {
        #pragma unroll
        for (int kk = 0; kk < KD; kk++) // matrix j = lane / 8: rows + 8 (j % 2), dims + 8 (j / 2)
            mt_ldmatrix_x4(qa[kk], qw + (lane % 8 + 8 * (lane / 8 % 2)) * LDK + kk * 16 + 8 * (lane / 16));
    }

    float o[ND][4]; // (16, DV) output rows g and g + 8, dims 8n + 2t, +1
    const float sink2 = mt_attn_sink2(sinks, h), l0 = sinks ? 1.0f : 0.0f; // the softmax starts from the sink
    float m[2] = {sink2, sink2}, l[2] = {l0, l0}; // rows g, g + 8
    #pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    int st = 0;
    for (int k0 = kstart; k0 < kend; k0 += BK, st ^= 1) {
        mt_attn_tc_kv_next<D, DV, BK>(Ks, Vs, kb, vb, kstride, vstride, k0 + BK, kend, T, st);
        const bf16 *Kt = Ks + st * BK * LDK, *Vt = Vs + st * BK * LDV;
        // S = Q K^T: (16, BK) per warp; B[dim][key] = K[key][dim], rows of K as they are
        float s[NK][4];
        #pragma unroll
        for (int n = 0; n < NK; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        if constexpr (QREG) {
            #pragma unroll
            for (int n = 0; n < NK; n++)
                #pragma unroll
                for (int kk = 0; kk < KD; kk += 2) { // x4: dims 16kk .. 16kk + 31 of keys 8n .. 8n + 7
                    mt_u32 kf[4];
                    mt_ldmatrix_x4(kf, Kt + (n * 8 + lane % 8) * LDK + kk * 16 + 8 * (lane / 8));
                    mt_mma_16816(s[n], qa[kk], kf, s[n]);
                    mt_mma_16816(s[n], qa[kk + 1], kf + 2, s[n]);
                }
        } else mt_tc_abt<D, LDK, LDK, NK>(s, qw, Kt);
        // online softmax over this tile, rows g (i = 0) and g + 8 (i = 1)
        const bool full = mt_attn_tc_full<CAUSAL>(opt, k0, BK, q0, BQ, T, seghi);
        float mx[2] = {m[0], m[1]};
        #pragma unroll
        for (int n = 0; n < NK; n++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = e / 2, row = row0 + 8 * i, j = k0 + n * 8 + 2 * t + e % 2;
                s[n][e] = (full || (mt_attn_visible<CAUSAL>(opt, j, row, T) && j >= srow[i])) ? mt_attn_score2(opt, s[n][e])
                                                                                             : MT_NEG_INF;
                mx[i] = fmaxf(mx[i], s[n][e]);
            }
        #pragma unroll
        for (int i = 0; i < 2; i++) { // a row lives in the 4 lanes of a group
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(MT_FULL_MASK, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(MT_FULL_MASK, mx[i], 2));
        }
        float corr[2], mb[2], ls[2] = {0.0f, 0.0f};
        #pragma unroll
        for (int i = 0; i < 2; i++) mb[i] = mt_attn_base(mx[i]), corr[i] = exp2f(m[i] - mb[i]), m[i] = mx[i];
        #pragma unroll
        for (int n = 0; n < NK; n++)
            #pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = exp2f(s[n][e] - mb[e / 2]), ls[e / 2] += s[n][e];
        mt_u32 pa[NK / 2][4]; // P as A fragments over the keys: n-tiles 2j, 2j + 1 make k-step j
        mt_tc_to_a<NK>(pa, s);
        #pragma unroll
        for (int i = 0; i < 2; i++) {
            ls[i] += __shfl_xor_sync(MT_FULL_MASK, ls[i], 1);
            ls[i] += __shfl_xor_sync(MT_FULL_MASK, ls[i], 2);
            l[i] = l[i] * corr[i] + ls[i];
        }
        #pragma unroll
        for (int n = 0; n < ND; n++) o[n][0] *= corr[0], o[n][1] *= corr[0], o[n][2] *= corr[1], o[n][3] *= corr[1];
        mt_tc_pv<DV, LDV, NK / 2>(o, pa, Vt); // O += P V
        __syncthreads(); // stage st is consumed before the next step's copy refills it
    }
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = row0 + 8 * i;
        if (row >= T) continue;
        const float inv = 1.0f / l[i];
        bf16 *yr = y + ((long)b * T + row) * blk.ystride + (long)h * DV;
        #pragma unroll
        for (int n = 0; n < ND; n++) mt_st(yr + n * 8 + 2 * t, o[n][2 * i] * inv), mt_st(yr + n * 8 + 2 * t + 1, o[n][2 * i + 1] * inv);
        if (lse && t == 0) lse[((long)b * H + h) * T + row] = (m[i] + log2f(l[i])) * MT_LN2;
    }
}

// dq, and the workspace for dkdv (lse, then delta = rowsum(dP * P) =
// rowsum(dy * y), each (B, H, T) fp32), as mt_attn_bwd_dq of attention.cuh:
// given the forward's y and lse it takes them, otherwise a first pass over
// the keys recomputes them. Per key tile: S = Q K^T, dP = dY V^T,
// dS = P (dP - delta), dq += dS K. One block: 64 query rows, 16 a warp.
template <int D, int DV, bool CAUSAL>
__device__ __forceinline__ void mt_attn_tc_bwd_dq(bf16 *dq, float *ws, const bf16 *dy, const bf16 *q, const bf16 *k,
                                                  const bf16 *v, const bf16 *y, const float *lse_saved, const int *seg,
                                                  int T, int H, int KVH, MtAttnOpt opt) {
    using G = MtAttnTcGeo<D, DV>;
    constexpr int BQ = MT_ATTN_TC_BQ, BK = G::BKQ, LDK = G::LDK, LDV = G::LDV, NK = BK / 8, ND = D / 8;
    extern __shared__ float mt_smem[];
    bf16 *Qs = (bf16 *)mt_smem;   // (BQ, D + 8)
    bf16 *dYs = Qs + BQ * LDK;    // (BQ, DV + 8)
    bf16 *Ks = dYs + BQ * LDV;    // (2, BK, D + 8): two stages
    bf16 *Vs = Ks + 2 * BK * LDK; // (2, BK, DV + 8)
    const MtAttnTcBlock<D, DV, CAUSAL, BK> blk(q, k, v, seg, T, H, KVH, opt);
    const int b = blk.b, h = blk.h, q0 = blk.q0, row0 = blk.row0, seghi = blk.seghi, kstart = blk.kstart, kend = blk.kend;
    const int lane = threadIdx.x % MT_WARP, warp = threadIdx.x / MT_WARP, g = lane / 4, t = lane % 4, B = gridDim.z;
    const long qstride = blk.qstride, ystride = blk.ystride, kstride = blk.kstride, vstride = blk.vstride;
    const bf16 *kb = blk.kb, *vb = blk.vb;
    const int *srow = blk.srow;
    float *ws_lse = ws + ((long)b * H + h) * T, *ws_delta = ws + (long)B * H * T + ((long)b * H + h) * T;
    const bf16 *qw = Qs + warp * 16 * LDK, *dyw = dYs + warp * 16 * LDV; // this warp's rows

    mt_attn_tc_stage<D, LDK>(Qs, blk.qb, qstride, q0, T, BQ);
    mt_attn_tc_stage<DV, LDV>(dYs, dy + ((long)b * T * H + h) * DV, ystride, q0, T, BQ);
    mt_cp_async_commit();
    mt_cp_async_wait<0>();
    __syncthreads();
    float lse2[2], delta[2]; // rows g, g + 8; lse in log2 units
    if (y && lse_saved) {
        #pragma unroll
        for (int i = 0; i < 2; i++) { // the group's 4 lanes split the row's dims
            const int row = row0 + 8 * i;
            float u = 0.0f;
            if (row < T)
                for (int d = t; d < DV; d += 4)
                    u += mt_ld(dyw + (g + 8 * i) * LDV + d) * mt_ld(y + ((long)b * T + row) * ystride + (long)h * DV + d);
            u += __shfl_xor_sync(MT_FULL_MASK, u, 1);
            u += __shfl_xor_sync(MT_FULL_MASK, u, 2);
            delta[i] = u;
            lse2[i] = row < T ? lse_saved[((long)b * H + h) * T + row] * MT_LOG2E : 0.0f;
        }
    } else {
        float m[2] = {MT_NEG_INF, MT_NEG_INF}, l[2] = {0.0f, 0.0f}, u[2] = {0.0f, 0.0f};
        blk.stage_first_kv(Ks, Vs, T);
        mt_cp_async_commit();
        int st = 0;
        for (int k0 = kstart; k0 < kend; k0 += BK, st ^= 1) {
            mt_attn_tc_kv_next<D, DV, BK>(Ks, Vs, kb, vb, kstride, vstride, k0 + BK, kend, T, st);
            float s[NK][4] = {}, dp[NK][4] = {};
            mt_tc_abt<D, LDK, LDK, NK>(s, qw, Ks + st * BK * LDK);
            mt_tc_abt<DV, LDV, LDV, NK>(dp, dyw, Vs + st * BK * LDV);
            const bool full = mt_attn_tc_full<CAUSAL>(opt, k0, BK, q0, BQ, T, seghi);
            float mx[2] = {m[0], m[1]};
            #pragma unroll
            for (int n = 0; n < NK; n++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = e / 2, j = k0 + n * 8 + 2 * t + e % 2;
                    s[n][e] = (full || (mt_attn_visible<CAUSAL>(opt, j, row0 + 8 * i, T) && j >= srow[i]))
                                  ? mt_attn_score2(opt, s[n][e])
                                  : MT_NEG_INF;
                    mx[i] = fmaxf(mx[i], s[n][e]);
                }
            float ls[2] = {0.0f, 0.0f}, us[2] = {0.0f, 0.0f}, mb[2];
            #pragma unroll
            for (int i = 0; i < 2; i++) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(MT_FULL_MASK, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(MT_FULL_MASK, mx[i], 2));
                mb[i] = mt_attn_base(mx[i]);
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
                l[i] = l[i] * corr + ls[i], u[i] = u[i] * corr + us[i], m[i] = mx[i];
            }
            __syncthreads(); // stage st is consumed
        }
        #pragma unroll
        for (int i = 0; i < 2; i++) lse2[i] = m[i] + log2f(l[i]), delta[i] = u[i] / l[i];
    }
    #pragma unroll
    for (int i = 0; i < 2; i++)
        if (row0 + 8 * i < T && t == 0) ws_lse[row0 + 8 * i] = lse2[i] * MT_LN2, ws_delta[row0 + 8 * i] = delta[i];

    float acc[ND][4] = {}; // (16, D) dq rows g, g + 8
    blk.stage_first_kv(Ks, Vs, T);
    mt_cp_async_commit();
    int st = 0;
    for (int k0 = kstart; k0 < kend; k0 += BK, st ^= 1) {
        mt_attn_tc_kv_next<D, DV, BK>(Ks, Vs, kb, vb, kstride, vstride, k0 + BK, kend, T, st);
        const bf16 *Kt = Ks + st * BK * LDK;
        float s[NK][4] = {}, dp[NK][4] = {};
        mt_tc_abt<D, LDK, LDK, NK>(s, qw, Kt);
        mt_tc_abt<DV, LDV, LDV, NK>(dp, dyw, Vs + st * BK * LDV);
        const bool full = mt_attn_tc_full<CAUSAL>(opt, k0, BK, q0, BQ, T, seghi);
        #pragma unroll
        for (int n = 0; n < NK; n++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = e / 2, j = k0 + n * 8 + 2 * t + e % 2;
                const float s2 = mt_attn_score2(opt, s[n][e]);
                const bool ok = full || (mt_attn_visible<CAUSAL>(opt, j, row0 + 8 * i, T) && j >= srow[i]);
                s[n][e] = ok ? exp2f(s2 - lse2[i]) * (dp[n][e] - delta[i]) * mt_attn_dcap(opt, s2) : 0.0f; // dS
            }
        mt_u32 dsa[NK / 2][4];
        mt_tc_to_a<NK>(dsa, s);
        mt_tc_pv<D, LDK, NK / 2>(acc, dsa, Kt);
        __syncthreads(); // stage st is consumed
    }
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = row0 + 8 * i;
        if (row >= T) continue;
        bf16 *o = dq + ((long)b * T + row) * qstride + (long)h * D;
        #pragma unroll
        for (int n = 0; n < ND; n++)
            mt_st(o + n * 8 + 2 * t, acc[n][2 * i] * opt.scale), mt_st(o + n * 8 + 2 * t + 1, acc[n][2 * i + 1] * opt.scale);
    }
}

// dk, dv for BKD keys of one kv head, summed over every query row of every
// query head in its group in a fixed order (no atomics). Warp w owns keys
// 16 (w / SPLIT) .. + 15 and part w % SPLIT of dk's and dv's columns (SPLIT
// 2 at wide heads: 128 accumulator registers a thread at most). Per tile of
// 16 queries (double-buffered, its lse, delta and document starts by cp.async with it):
// S^T = K Q^T, dP^T = V dY^T (keys as rows; with SPLIT 2 each warp of a pair
// sums its half of the dims and the pair adds through shared memory), P^T
// and dS^T = P^T (dP^T - delta), then dv += P^T dY, dk += dS^T Q.
template <int D, int DV, bool CAUSAL>
__device__ __forceinline__ void mt_attn_tc_bwd_dkdv(bf16 *dk, bf16 *dv, const float *ws, const bf16 *dy,
                                                    const bf16 *q, const bf16 *k, const bf16 *v, const int *seg, int T,
                                                    int H, int KVH, MtAttnOpt opt) {
    using G = MtAttnTcGeo<D, DV>;
    constexpr int BQ = MT_ATTN_TC_BQ_DKDV, BKD = G::BKD, SPLIT = G::SPLIT, LDK = G::LDK, LDV = G::LDV, NQ = BQ / 8;
    constexpr int DH = D / SPLIT, DVH = DV / SPLIT; // this warp's columns of dk and dv
    extern __shared__ float mt_smem[];
    bf16 *Ks = (bf16 *)mt_smem;     // (BKD, D + 8)
    bf16 *Vs = Ks + BKD * LDK;      // (BKD, DV + 8)
    bf16 *Qs = Vs + BKD * LDV;      // (2, BQ, D + 8): two stages
    bf16 *dYs = Qs + 2 * BQ * LDK;  // (2, BQ, DV + 8)
    float *Ls = (float *)(dYs + 2 * BQ * LDV); // (2, BQ) lse, natural log (the workspace's)
    float *Dl = Ls + 2 * BQ;                   // (2, BQ) delta
    int *Sg = (int *)(Dl + 2 * BQ);            // (2, BQ) document starts
    float *Xs = (float *)(Sg + 2 * BQ);        // SPLIT 2: (4 warps, 32 lanes, 16) partial S^T, dP^T
    const int b = blockIdx.z, kvh = blockIdx.y, k0 = blockIdx.x * BKD, Gq = H / KVH, B = gridDim.z;
    const int lane = threadIdx.x % MT_WARP, warp = threadIdx.x / MT_WARP, g = lane / 4, t = lane % 4;
    const int kg = warp / SPLIT, part = warp % SPLIT;
    const long qstride = (long)H * D, ystride = (long)H * DV, kstride = (long)KVH * D, vstride = (long)KVH * DV;
    const long koff = ((long)b * T * KVH + kvh) * D, voff = ((long)b * T * KVH + kvh) * DV;
    const int key0 = k0 + kg * 16 + g; // this lane's keys: key0, key0 + 8
    const int istart = CAUSAL ? k0 / BQ * BQ : 0, iend = mt_attn_qend(opt, k0 + BKD, T);
    const int ntile = iend > istart ? (iend - istart + BQ - 1) / BQ : 0, nstep = Gq * ntile;

    // query tile x of the flattened (head, tile) order into stage s
    auto stage = [&](int x, int s) {
        const int h = kvh * Gq + x / ntile, i0 = istart + x % ntile * BQ;
        mt_attn_tc_stage<D, LDK>(Qs + s * BQ * LDK, q + ((long)b * T * H + h) * D, qstride, i0, T, BQ);
        mt_attn_tc_stage<DV, LDV>(dYs + s * BQ * LDV, dy + ((long)b * T * H + h) * DV, ystride, i0, T, BQ);
        if (threadIdx.x < BQ) { // lse, delta, document starts with the tile (cp.async: no wait for them here)
            const int tq = i0 + threadIdx.x, r = s * BQ + threadIdx.x;
            const long w = ((long)b * H + h) * T + tq;
            if (tq < T) mt_cp_async4(Ls + r, ws + w), mt_cp_async4(Dl + r, ws + (long)B * H * T + w);
            else Ls[r] = 0.0f, Dl[r] = 0.0f;
            if (seg && tq < T) mt_cp_async4(Sg + r, seg + (long)b * T + tq);
            else Sg[r] = 0;
        }
    };
    mt_attn_tc_stage<D, LDK>(Ks, k + koff, kstride, k0, T, BKD);
    mt_attn_tc_stage<DV, LDV>(Vs, v + voff, vstride, k0, T, BKD);
    if (nstep > 0) stage(0, 0);
    mt_cp_async_commit();
    float dka[DH / 8][4] = {}, dva[DVH / 8][4] = {}; // (16, DH), (16, DVH): keys key0, key0 + 8
    for (int x = 0, st = 0; x < nstep; x++, st ^= 1) {
        if (x + 1 < nstep) stage(x + 1, st ^ 1);
        mt_cp_async_commit();
        mt_cp_async_wait<1>();
        __syncthreads();
        const int i0 = istart + x % ntile * BQ;
        const bf16 *Qt = Qs + st * BQ * LDK, *dYt = dYs + st * BQ * LDV;
        const float *Lt = Ls + st * BQ, *Dt = Dl + st * BQ;
        const int *St = Sg + st * BQ;
        int seglo = St[0], seghi = St[0];
        for (int r = 1; r < BQ; r++) seglo = min(seglo, St[r]), seghi = max(seghi, St[r]);
        if (seglo <= k0 + BKD - 1) { // else no query of the tile sees a key of the block
            float s[NQ][4] = {}, dp[NQ][4] = {}; // (16 keys, 16 queries)
            mt_tc_abt<DH, LDK, LDK, NQ>(s, Ks + kg * 16 * LDK + part * DH, Qt + part * DH);
            mt_tc_abt<DVH, LDV, LDV, NQ>(dp, Vs + kg * 16 * LDV + part * DVH, dYt + part * DVH);
            if (SPLIT > 1) { // the pair's halves of the dims: add the other warp's
                float *mine = Xs + (warp * MT_WARP + lane) * 16, *other = Xs + ((warp ^ 1) * MT_WARP + lane) * 16;
                #pragma unroll
                for (int n = 0; n < NQ; n++)
                    #pragma unroll
                    for (int e = 0; e < 4; e++) mine[n * 4 + e] = s[n][e], mine[8 + n * 4 + e] = dp[n][e];
                __syncthreads();
                #pragma unroll
                for (int n = 0; n < NQ; n++)
                    #pragma unroll
                    for (int e = 0; e < 4; e++) s[n][e] += other[n * 4 + e], dp[n][e] += other[8 + n * 4 + e];
            }
            const bool full = i0 + BQ <= T && mt_attn_tc_full<CAUSAL>(opt, k0, BKD, i0, BQ, T, seghi);
            #pragma unroll
            for (int n = 0; n < NQ; n++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int j = key0 + 8 * (e / 2), ql = n * 8 + 2 * t + e % 2, tq = i0 + ql;
                    const bool ok = full || (tq < T && mt_attn_visible<CAUSAL>(opt, j, tq, T) && j >= St[ql]);
                    const float s2 = mt_attn_score2(opt, s[n][e]), p = ok ? exp2f(s2 - Lt[ql] * MT_LOG2E) : 0.0f;
                    dp[n][e] = p * (dp[n][e] - Dt[ql]) * mt_attn_dcap(opt, s2), s[n][e] = p; // dS^T, P^T
                }
            mt_u32 dsa[NQ / 2][4], pa[NQ / 2][4];
            mt_tc_to_a<NQ>(dsa, dp);
            mt_tc_pv<DH, LDK, NQ / 2>(dka, dsa, Qt + part * DH);
            mt_tc_to_a<NQ>(pa, s);
            mt_tc_pv<DVH, LDV, NQ / 2>(dva, pa, dYt + part * DVH);
        }
        __syncthreads(); // stage st (and Xs) consumed
    }
    mt_cp_async_wait<0>(); // no tile: K and V were staged all the same
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        const int j = key0 + 8 * i;
        if (j >= T) continue;
        #pragma unroll
        for (int n = 0; n < DH / 8; n++)
            #pragma unroll
            for (int e = 0; e < 2; e++)
                mt_st(dk + koff + (long)j * kstride + part * DH + n * 8 + 2 * t + e, dka[n][2 * i + e] * opt.scale);
        #pragma unroll
        for (int n = 0; n < DVH / 8; n++)
            #pragma unroll
            for (int e = 0; e < 2; e++) mt_st(dv + voff + (long)j * vstride + part * DVH + n * 8 + 2 * t + e, dva[n][2 * i + e]);
    }
}

// One pair of head sizes, mask and options: extern "C" mt_attn_tc_{fwd,bwd_dq,bwd_dkdv}_NAME,
// NAME as attn_variant_name_dv() spells it ("bf16_d128_causal", "bf16_d192_v128_causal");
// arguments as attention.cuh's entry points of the same name plus seg
// (NULL: no documents) before T, the forward's sinks (or NULL) last; SCALE, SOFTCAP, WINDOW and CHUNK as its MT_ATTN_INSTANTIATE_CHUNK.
// At least one block an SM: without it ptxas held bwd_dq at D 128 to 168
// registers on sm_80 and spilled (cuda_nvrtc_attention_tc).
#define MT_ATTN_TC_INSTANTIATE(D, CAUSAL, NAME) MT_ATTN_TC_INSTANTIATE_OPT(D, D, CAUSAL, 1.0f / sqrtf((float)D), 0.0f, 0, NAME)
#define MT_ATTN_TC_INSTANTIATE_OPT(D, DV, CAUSAL, SCALE, SOFTCAP, WINDOW, NAME)                                      \
    MT_ATTN_TC_INSTANTIATE_CHUNK(D, DV, CAUSAL, SCALE, SOFTCAP, WINDOW, 0, NAME)
#define MT_ATTN_TC_INSTANTIATE_CHUNK(D, DV, CAUSAL, SCALE, SOFTCAP, WINDOW, CHUNK, NAME)                             \
    extern "C" __global__ void __launch_bounds__(MT_ATTN_TC_THREADS, 1)                                               \
        mt_attn_tc_fwd_##NAME(bf16 *y, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *seg,       \
                              int T, int H, int KVH, const bf16 *sinks) {                                             \
        mt_attn_tc_fwd<D, DV, CAUSAL>(y, lse, q, k, v, seg, T, H, KVH, MtAttnOpt{SCALE, SOFTCAP, WINDOW, CHUNK}, sinks);     \
    }                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(MT_ATTN_TC_THREADS, 1)                                               \
        mt_attn_tc_bwd_dq_##NAME(bf16 *dq, float *ws, const bf16 *dy, const bf16 *q, const bf16 *k, const bf16 *v,    \
                                 const bf16 *y, const float *lse, const int *seg, int T, int H, int KVH) {            \
        mt_attn_tc_bwd_dq<D, DV, CAUSAL>(dq, ws, dy, q, k, v, y, lse, seg, T, H, KVH, MtAttnOpt{SCALE, SOFTCAP, WINDOW, CHUNK}); \
    }                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(MT_ATTN_TC_THREADS, 1)                                               \
        mt_attn_tc_bwd_dkdv_##NAME(bf16 *dk, bf16 *dv, const float *ws, const bf16 *dy, const bf16 *q,                \
                                   const bf16 *k, const bf16 *v, const int *seg, int T, int H, int KVH) {             \
        mt_attn_tc_bwd_dkdv<D, DV, CAUSAL>(dk, dv, ws, dy, q, k, v, seg, T, H, KVH, MtAttnOpt{SCALE, SOFTCAP, WINDOW, CHUNK}); \
    }
