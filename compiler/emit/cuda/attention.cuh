// attention.cuh: flash-style attention, forward and backward, causal or not,
// grouped-query (H query heads share KVH key/value heads, query head h reads
// kv head h / (H / KVH)), specialised per head size D. Never materialises
// the T x T scores: keys stream through shared memory in tiles of 32 (one
// per lane) with an online softmax. fp32 arithmetic; S (float or bf16) is the
// storage type. Needs prelude.cuh. The plain reference that test programs
// compare against is attention_ref.cuh; the semantics are the cpu
// reference's (runtime/backend/kernels.inc: attention, attention_bwd): scores
// q.k * scale (1/sqrt(D) unless the model sets it), soft-capped to
// softcap * tanh(score / softcap) when softcap > 0; key j visible to query t
// when j <= t (causal) or always, and with a window W only when j > t - W,
// and with chunks of C positions (Llama 4's chunked attention) only when j
// and t lie in the same chunk (j / C == t / C).
// A window or a chunk skips whole key tiles before the block's first visible
// key (and, in bwd_dkdv, query tiles past the last query that sees the
// block's keys).
// Packed documents: seg_start (B, T), for query t of row b the position of
// the first token of its document; key j is visible to query t only when
// j >= seg_start[b * T + t] as well (NULL: no documents; kernels.h).
//
// Layouts: q, y, dq, dy [B, T, H*D]; k, v, dk, dv [B, T, KVH*D]; lse and the
// backward's workspace rows [B, H, T] (fp32, natural log).
//
// Launch ABI (the numbers live in common/attention.h, shared with host code):
//   mt_attn_fwd_NAME      grid (ceil(T/16), H, B), 128 threads, attn_smem_fwd(D) bytes of dynamic shared memory
//   mt_attn_bwd_dq_NAME   grid (ceil(T/16), H, B), 128 threads, attn_smem_dq(D)
//   mt_attn_bwd_dkdv_NAME grid (ceil(T/32), KVH, B), 128 threads, attn_smem_dkdv(D)
// each with seg_start (or NULL) as its last parameter but the forward's,
// which then takes sinks [H] (gpt-oss's learned logit a head; NULL: none).
// backward: bwd_dq first (it writes the workspace: lse, then delta =
// rowsum(dP * P), each (B, H, T) floats), then bwd_dkdv, which reads it.
// Both write every element of their outputs (no zeroing needed, no atomics:
// a key block sums over its whole query group itself, so results are
// deterministic). Above 48 KiB of shared memory the launcher must raise
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first.
//
// The forward writes lse when given a pointer. Given the forward's y and
// lse (a plan's OP_ATTENTION_LSE, which OP_ATTENTION_BWD reads), bwd_dq
// takes them and computes delta = rowsum(dy * y); given NULL it recomputes
// both in a first pass over the keys (without sinks: the backward of an
// attention with sinks needs the forward's y and lse, which include them). Matrix work (T x T x head size):
// forward 2, backward bwd_dq 3 (Q K^T, dY V^T, dS K) and bwd_dkdv 4 (Q K^T,
// dY V^T, P^T dY, dS^T Q).
#define MT_ATTN_THREADS 128
#define MT_ATTN_WARPS 4
#define MT_ATTN_ROWS 4                            // query rows per warp
#define MT_ATTN_BQ (MT_ATTN_WARPS * MT_ATTN_ROWS) // query rows per block
#define MT_ATTN_BK 32                             // keys per tile, one per lane
#define MT_LOG2E 1.4426950408889634f
#define MT_LN2 0.6931471805599453f
#define MT_NEG_INF __int_as_float(0xff800000)

// The options of a model's attention (the kernel IR's KirAttn): the scale of
// q.k, soft-capping (0: none), the sliding window (0: none) and the chunk
// (0: none). Entry points pass literals, so the compiler folds them (no tanh
// without a softcap).
struct MtAttnOpt {
    float scale, softcap;
    int window;
    int chunk;
};
// Whether query t sees key j.
template <bool CAUSAL>
__device__ __forceinline__ bool mt_attn_visible(const MtAttnOpt &o, int j, int t, int T) {
    return j < T && (!CAUSAL || j <= t) && (o.window == 0 || j > t - o.window) && (o.chunk == 0 || j / o.chunk == t / o.chunk);
}
// The score of q.k in log2 units (exp2 instead of exp): scaled, soft-capped.
__device__ __forceinline__ float mt_attn_score2(const MtAttnOpt &o, float qk) {
    if (o.softcap > 0.0f) return o.softcap * MT_LOG2E * tanhf(qk * (o.scale / o.softcap));
    return qk * (o.scale * MT_LOG2E);
}
// d score / d (q.k * scale) from the score in log2 units s2: 1 - tanh^2
// under soft-capping (tanh = s2 / (softcap log2 e)), else 1.
__device__ __forceinline__ float mt_attn_dcap(const MtAttnOpt &o, float s2) {
    if (o.softcap <= 0.0f) return 1.0f;
    const float c = s2 * (1.0f / (o.softcap * MT_LOG2E));
    return 1.0f - c * c;
}
// The first key tile (of bk keys) that query q0 or a later one sees.
__device__ __forceinline__ int mt_attn_kstart(const MtAttnOpt &o, int q0, int bk) {
    const int w = o.window > 0 && q0 + 1 > o.window ? (q0 + 1 - o.window) / bk * bk : 0;
    return o.chunk > 0 ? max(w, q0 / o.chunk * o.chunk / bk * bk) : w;
}
// One past the last query that sees a key before k1.
__device__ __forceinline__ int mt_attn_qend(const MtAttnOpt &o, int k1, int T) {
    const long end = (long)k1 - 1 + o.window, cend = ((long)k1 - 1) / (o.chunk > 0 ? o.chunk : 1) * o.chunk + o.chunk;
    const int w = o.window > 0 && end < T ? (int)end : T;
    return o.chunk > 0 && cend < w ? (int)cend : w;
}
// The first key query t of row b sees by its document (0: none given or t past T).
__device__ __forceinline__ int mt_attn_doc(const int *seg_start, int b, int t, int T) {
    return seg_start && t < T ? seg_start[(long)b * T + t] : 0;
}
// Head h's sink logit in log2 units, where the running softmax of its rows
// starts (max s, sum exp2(s - s) = 1, no value), or -inf without sinks
// (NULL): then the lse and y include the sink, and the backward, which
// takes them, needs nothing more.
template <typename S>
__device__ __forceinline__ float mt_attn_sink2(const S *sinks, int h) {
    return sinks ? mt_ld(sinks + h) * MT_LOG2E : MT_NEG_INF;
}
// The base of exp2 for a running maximum m: m, or 0 while a row has seen no
// visible key (a window's rows meet fully masked tiles first).
__device__ __forceinline__ float mt_attn_base(float m) { return m == MT_NEG_INF ? 0.0f : m; }

// dst[r][0, D) (row pitch LD floats) = rows r0 + r of base (row stride
// `stride` elements), r < rows; rows at or past nvalid are zeros. Coalesced:
// consecutive threads read consecutive elements, four at a time when vec.
template <typename S, int D, int LD>
__device__ __forceinline__ void mt_attn_load(float *dst, const S *base, long stride, int r0, int nvalid, int rows,
                                             bool vec) {
    if (D % 4 == 0 && vec) {
        for (int e = threadIdx.x; e < rows * (D / 4); e += blockDim.x) {
            int r = e / (D / 4), c = e % (D / 4) * 4;
            float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r0 + r < nvalid) x = mt_ld4(base + (long)(r0 + r) * stride + c);
            float *o = dst + r * LD + c;
            o[0] = x.x, o[1] = x.y, o[2] = x.z, o[3] = x.w;
        }
    } else {
        for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
            int r = e / D, c = e % D;
            dst[r * LD + c] = r0 + r < nvalid ? mt_ld(base + (long)(r0 + r) * stride + c) : 0.0f;
        }
    }
}

// The warp's R query rows against the tile's key `lane`: s[r] = q_r . k and
// dp[r] = dy_r . v (Qs, dYs rows of D; Ks, Vs rows of LDK).
template <int D, int R, int LDK>
__device__ __forceinline__ void mt_attn_rows_dot2(float (&s)[R], float (&dp)[R], const float *Qs, const float *dYs,
                                                  const float *Ks, const float *Vs, int warp, int lane) {
    for (int r = 0; r < R; r++) s[r] = 0.0f, dp[r] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < D; d++) {
        const float kd = Ks[lane * LDK + d], vd = Vs[lane * LDK + d];
        for (int r = 0; r < R; r++) {
            s[r] += Qs[(warp * R + r) * D + d] * kd;
            dp[r] += dYs[(warp * R + r) * D + d] * vd;
        }
    }
}

// acc[r][i] += sum over the tile's keys jj of w_r(jj) * tile[jj][d], d = lane + 32 i,
// where lane jj holds w[r] for key jj (tile rows of LD floats).
template <int D, int R, int NPL, int BK, int LD>
__device__ __forceinline__ void mt_attn_rows_acc(float (&acc)[R][NPL], const float (&w)[R], const float *tile,
                                                 int lane) {
#pragma unroll 8
    for (int jj = 0; jj < BK; jj++) {
        float wj[R];
        for (int r = 0; r < R; r++) wj[r] = __shfl_sync(MT_FULL_MASK, w[r], jj);
        for (int i = 0; i < NPL; i++) {
            const int d = lane + MT_WARP * i;
            if (D % MT_WARP == 0 || d < D) {
                const float td = tile[jj * LD + d];
                for (int r = 0; r < R; r++) acc[r][i] += wj[r] * td;
            }
        }
    }
}

// y = softmax(q k^T / sqrt(D)) v, one block per 16 query rows of one head;
// warp w owns rows 4w .. 4w+3. Per key tile: lane j scores key j against the
// warp's rows, the row max and sum move online, then each lane accumulates
// output dims lane, lane+32, ...
template <typename S, int D, bool CAUSAL>
__device__ __forceinline__ void mt_attn_fwd(S *y, float *lse, const S *q, const S *k, const S *v, int T, int H,
                                            int KVH, MtAttnOpt opt, const int *seg_start, const S *sinks) {
    constexpr int R = MT_ATTN_ROWS, BQ = MT_ATTN_BQ, BK = MT_ATTN_BK, LDK = D + 1, NPL = (D + 31) / 32;
    extern __shared__ float mt_smem[];
    float *Qs = mt_smem;       // (BQ, D)
    float *Ks = Qs + BQ * D;   // (BK, D+1), padded: lanes read different rows
    float *Vs = Ks + BK * LDK; // (BK, D)
    const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BQ, kvh = h / (H / KVH);
    const int lane = threadIdx.x % MT_WARP, warp = threadIdx.x / MT_WARP;
    const long qstride = (long)H * D, kstride = (long)KVH * D;
    const S *qb = q + ((long)b * T * H + h) * D, *kb = k + ((long)b * T * KVH + kvh) * D,
            *vb = v + ((long)b * T * KVH + kvh) * D;
    const bool vec = mt_aligned4(q) && mt_aligned4(k) && mt_aligned4(v);

    mt_attn_load<S, D, D>(Qs, qb, qstride, q0, T, BQ, vec);
    float m[R], l[R], acc[R][NPL];
    int doc[R]; // each row's first key by its document
    const float sink2 = mt_attn_sink2(sinks, h);
    for (int r = 0; r < R; r++) {
        doc[r] = mt_attn_doc(seg_start, b, q0 + warp * R + r, T);
        m[r] = sink2, l[r] = sinks ? 1.0f : 0.0f; // the running softmax starts from the sink
        for (int i = 0; i < NPL; i++) acc[r][i] = 0.0f;
    }
    const int kend = CAUSAL ? min(T, q0 + BQ) : T;
    for (int k0 = mt_attn_kstart(opt, q0, BK); k0 < kend; k0 += BK) {
        __syncthreads(); // the previous tile is consumed
        mt_attn_load<S, D, LDK>(Ks, kb, kstride, k0, T, BK, vec);
        mt_attn_load<S, D, D>(Vs, vb, kstride, k0, T, BK, vec);
        __syncthreads();
        const int j = k0 + lane;
        float s[R];
        for (int r = 0; r < R; r++) s[r] = 0.0f;
#pragma unroll 8
        for (int d = 0; d < D; d++) {
            float kd = Ks[lane * LDK + d];
            for (int r = 0; r < R; r++) s[r] += Qs[(warp * R + r) * D + d] * kd;
        }
        float p[R];
        for (int r = 0; r < R; r++) {
            const int t = q0 + warp * R + r;
            const bool ok = mt_attn_visible<CAUSAL>(opt, j, t, T) && j >= doc[r];
            const float sv = ok ? mt_attn_score2(opt, s[r]) : MT_NEG_INF;
            const float mnew = fmaxf(m[r], mt_warp_max(sv)), mb = mt_attn_base(mnew);
            p[r] = ok ? exp2f(sv - mb) : 0.0f;
            const float corr = exp2f(m[r] - mb);
            l[r] = l[r] * corr + mt_warp_sum(p[r]);
            m[r] = mnew;
            for (int i = 0; i < NPL; i++) acc[r][i] *= corr;
        }
        mt_attn_rows_acc<D, R, NPL, BK, D>(acc, p, Vs, lane);
    }
    for (int r = 0; r < R; r++) {
        const int t = q0 + warp * R + r;
        if (t >= T) continue;
        const float inv = 1.0f / l[r];
        S *yr = y + ((long)b * T + t) * qstride + (long)h * D;
        for (int i = 0; i < NPL; i++) {
            const int d = lane + MT_WARP * i;
            if (D % MT_WARP == 0 || d < D) mt_st(yr + d, acc[r][i] * inv);
        }
        if (lse && lane == 0) lse[((long)b * H + h) * T + t] = (m[r] + log2f(l[r])) * MT_LN2;
    }
}

// dq, and the workspace for dkdv: per query row, lse and delta = sum_j P dP
// = rowsum(dy * y). Pass 1 (skipped given y and lse) runs the online softmax
// over the keys carrying u = sum_j exp(s_j - m) dP_j alongside l; pass 2
// forms dS = P (dP - delta) tile by tile and accumulates dq += dS k.
template <typename S, int D, bool CAUSAL>
__device__ __forceinline__ void mt_attn_bwd_dq(S *dq, float *ws, const S *dy, const S *q, const S *k, const S *v,
                                               const S *y, const float *lse_saved, int T, int H, int KVH,
                                               MtAttnOpt opt, const int *seg_start) {
    constexpr int R = MT_ATTN_ROWS, BQ = MT_ATTN_BQ, BK = MT_ATTN_BK, LDK = D + 1, NPL = (D + 31) / 32;
    extern __shared__ float mt_smem[];
    float *Qs = mt_smem;        // (BQ, D)
    float *dYs = Qs + BQ * D;   // (BQ, D)
    float *Ks = dYs + BQ * D;   // (BK, D+1)
    float *Vs = Ks + BK * LDK;  // (BK, D+1)
    const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BQ, kvh = h / (H / KVH), B = gridDim.z;
    const int lane = threadIdx.x % MT_WARP, warp = threadIdx.x / MT_WARP;
    const long qstride = (long)H * D, kstride = (long)KVH * D;
    const long qoff = ((long)b * T * H + h) * D, koff = ((long)b * T * KVH + kvh) * D;
    const bool vec = mt_aligned4(q) && mt_aligned4(k) && mt_aligned4(v) && mt_aligned4(dy);
    float *ws_lse = ws + ((long)b * H + h) * T, *ws_delta = ws + (long)B * H * T + ((long)b * H + h) * T;

    mt_attn_load<S, D, D>(Qs, q + qoff, qstride, q0, T, BQ, vec);
    mt_attn_load<S, D, D>(dYs, dy + qoff, qstride, q0, T, BQ, vec);
    const int kstart = mt_attn_kstart(opt, q0, BK), kend = CAUSAL ? min(T, q0 + BQ) : T;
    float lse2[R], delta[R]; // lse in log2 units
    int doc[R];              // each row's first key by its document
    for (int r = 0; r < R; r++) doc[r] = mt_attn_doc(seg_start, b, q0 + warp * R + r, T);
    if (y && lse_saved) {
        __syncthreads();
        for (int r = 0; r < R; r++) {
            const int t = q0 + warp * R + r;
            float u = 0.0f;
            if (t < T)
                for (int d = lane; d < D; d += MT_WARP)
                    u += dYs[(warp * R + r) * D + d] * mt_ld(y + qoff + (long)t * qstride + d);
            delta[r] = mt_warp_sum(u);
            lse2[r] = t < T ? lse_saved[((long)b * H + h) * T + t] * MT_LOG2E : 0.0f;
        }
    } else {
        float m[R], l[R], u[R];
        for (int r = 0; r < R; r++) m[r] = MT_NEG_INF, l[r] = 0.0f, u[r] = 0.0f;
        for (int k0 = kstart; k0 < kend; k0 += BK) {
            __syncthreads();
            mt_attn_load<S, D, LDK>(Ks, k + koff, kstride, k0, T, BK, vec);
            mt_attn_load<S, D, LDK>(Vs, v + koff, kstride, k0, T, BK, vec);
            __syncthreads();
            const int j = k0 + lane;
            float s[R], dp[R];
            mt_attn_rows_dot2<D, R, LDK>(s, dp, Qs, dYs, Ks, Vs, warp, lane);
            for (int r = 0; r < R; r++) {
                const int t = q0 + warp * R + r;
                const bool ok = mt_attn_visible<CAUSAL>(opt, j, t, T) && j >= doc[r];
                const float sv = ok ? mt_attn_score2(opt, s[r]) : MT_NEG_INF;
                const float mnew = fmaxf(m[r], mt_warp_max(sv)), mb = mt_attn_base(mnew);
                const float p = ok ? exp2f(sv - mb) : 0.0f, corr = exp2f(m[r] - mb);
                l[r] = l[r] * corr + mt_warp_sum(p);
                u[r] = u[r] * corr + mt_warp_sum(p * dp[r]);
                m[r] = mnew;
            }
        }
        for (int r = 0; r < R; r++) lse2[r] = m[r] + log2f(l[r]), delta[r] = u[r] / l[r];
    }
    for (int r = 0; r < R; r++) {
        const int t = q0 + warp * R + r;
        if (t < T && lane == 0) ws_lse[t] = lse2[r] * MT_LN2, ws_delta[t] = delta[r];
    }

    float acc[R][NPL];
    for (int r = 0; r < R; r++)
        for (int i = 0; i < NPL; i++) acc[r][i] = 0.0f;
    for (int k0 = kstart; k0 < kend; k0 += BK) {
        __syncthreads();
        mt_attn_load<S, D, LDK>(Ks, k + koff, kstride, k0, T, BK, vec);
        mt_attn_load<S, D, LDK>(Vs, v + koff, kstride, k0, T, BK, vec);
        __syncthreads();
        const int j = k0 + lane;
        float s[R], dp[R];
        mt_attn_rows_dot2<D, R, LDK>(s, dp, Qs, dYs, Ks, Vs, warp, lane);
        float ds[R];
        for (int r = 0; r < R; r++) {
            const int t = q0 + warp * R + r;
            const bool ok = mt_attn_visible<CAUSAL>(opt, j, t, T) && j >= doc[r];
            const float s2 = mt_attn_score2(opt, s[r]), p = ok ? exp2f(s2 - lse2[r]) : 0.0f;
            ds[r] = p * (dp[r] - delta[r]) * mt_attn_dcap(opt, s2);
        }
        mt_attn_rows_acc<D, R, NPL, BK, LDK>(acc, ds, Ks, lane);
    }
    for (int r = 0; r < R; r++) {
        const int t = q0 + warp * R + r;
        if (t >= T) continue;
        S *out = dq + qoff + (long)t * qstride;
        for (int i = 0; i < NPL; i++) {
            const int d = lane + MT_WARP * i;
            if (D % MT_WARP == 0 || d < D) mt_st(out + d, acc[r][i] * opt.scale);
        }
    }
}

// dk, dv for 32 keys of one kv head, summed over every query row of every
// query head in its group (no atomics). Per tile of 16 query rows: lane j
// forms P and dS for key j against the warp's rows into shared memory; then
// each thread accumulates its (key, dim) elements: dv += P^T dy, dk += dS^T q.
template <typename S, int D, bool CAUSAL>
__device__ __forceinline__ void mt_attn_bwd_dkdv(S *dk, S *dv, const float *ws, const S *dy, const S *q, const S *k,
                                                 const S *v, int T, int H, int KVH, MtAttnOpt opt,
                                                 const int *seg_start) {
    constexpr int R = MT_ATTN_ROWS, BQ = MT_ATTN_BQ, BK = MT_ATTN_BK, LDK = D + 1;
    constexpr int NE = (BK * D + MT_ATTN_THREADS - 1) / MT_ATTN_THREADS; // (key, dim) elements per thread
    extern __shared__ float mt_smem[];
    float *Ks = mt_smem;        // (BK, D+1)
    float *Vs = Ks + BK * LDK;  // (BK, D+1)
    float *Qs = Vs + BK * LDK;  // (BQ, D)
    float *dYs = Qs + BQ * D;   // (BQ, D)
    float *Ps = dYs + BQ * D;   // (BQ, BK)
    float *dSs = Ps + BQ * BK;  // (BQ, BK)
    float *Ls = dSs + BQ * BK;  // (BQ) lse, log2 units
    float *Dl = Ls + BQ;        // (BQ) delta
    const int b = blockIdx.z, kvh = blockIdx.y, k0 = blockIdx.x * BK, G = H / KVH, B = gridDim.z;
    const int lane = threadIdx.x % MT_WARP, warp = threadIdx.x / MT_WARP;
    const long qstride = (long)H * D, kstride = (long)KVH * D, koff = ((long)b * T * KVH + kvh) * D;
    const bool vec = mt_aligned4(q) && mt_aligned4(k) && mt_aligned4(v) && mt_aligned4(dy);
    const int iend = mt_attn_qend(opt, k0 + BK, T);

    mt_attn_load<S, D, LDK>(Ks, k + koff, kstride, k0, T, BK, vec);
    mt_attn_load<S, D, LDK>(Vs, v + koff, kstride, k0, T, BK, vec);
    float dka[NE], dva[NE];
#pragma unroll
    for (int c = 0; c < NE; c++) dka[c] = 0.0f, dva[c] = 0.0f;
    const int j = k0 + lane;
    for (int h = kvh * G; h < (kvh + 1) * G; h++) {
        const long qoff = ((long)b * T * H + h) * D, wrow = ((long)b * H + h) * T;
        for (int i0 = CAUSAL ? k0 / BQ * BQ : 0; i0 < iend; i0 += BQ) {
            __syncthreads(); // the previous tile is consumed (and K, V are loaded)
            mt_attn_load<S, D, D>(Qs, q + qoff, qstride, i0, T, BQ, vec);
            mt_attn_load<S, D, D>(dYs, dy + qoff, qstride, i0, T, BQ, vec);
            if (threadIdx.x < BQ) {
                const int t = i0 + threadIdx.x;
                Ls[threadIdx.x] = t < T ? ws[wrow + t] * MT_LOG2E : 0.0f;
                Dl[threadIdx.x] = t < T ? ws[(long)B * H * T + wrow + t] : 0.0f;
            }
            __syncthreads();
            for (int r = 0; r < R; r++) {
                const int il = warp * R + r, t = i0 + il;
                float s = 0.0f, dp = 0.0f;
        #pragma unroll 8
        for (int d = 0; d < D; d++) {
                    s += Qs[il * D + d] * Ks[lane * LDK + d];
                    dp += dYs[il * D + d] * Vs[lane * LDK + d];
                }
                const bool ok = t < T && mt_attn_visible<CAUSAL>(opt, j, t, T) && j >= mt_attn_doc(seg_start, b, t, T);
                const float s2 = mt_attn_score2(opt, s), p = ok ? exp2f(s2 - Ls[il]) : 0.0f;
                Ps[il * BK + lane] = p;
                dSs[il * BK + lane] = p * (dp - Dl[il]) * mt_attn_dcap(opt, s2);
            }
            __syncthreads();
#pragma unroll 2
            for (int il = 0; il < BQ; il++) {
#pragma unroll
                for (int c = 0; c < NE; c++) {
                    const int e = threadIdx.x + MT_ATTN_THREADS * c, jl = e / D, d = e % D;
                    if ((BK * D) % MT_ATTN_THREADS == 0 || e < BK * D) {
                        dva[c] += Ps[il * BK + jl] * dYs[il * D + d];
                        dka[c] += dSs[il * BK + jl] * Qs[il * D + d];
                    }
                }
            }
        }
    }
#pragma unroll
    for (int c = 0; c < NE; c++) {
        const int e = threadIdx.x + MT_ATTN_THREADS * c, jl = e / D, d = e % D;
        if (((BK * D) % MT_ATTN_THREADS == 0 || e < BK * D) && k0 + jl < T) {
            const long e_o = koff + (long)(k0 + jl) * kstride + d;
            mt_st(dk + e_o, dka[c] * opt.scale);
            mt_st(dv + e_o, dva[c]);
        }
    }
}

// One head size, storage type, mask and options: three extern "C" entry
// points named mt_attn_{fwd,bwd_dq,bwd_dkdv}_NAME, NAME as attn_kernel_name()
// spells it ("f32_d64_causal", "bf16_d128_causal_w4096"). SCALE and SOFTCAP
// are float literals, WINDOW an int; MT_ATTN_INSTANTIATE takes the defaults
// (1/sqrt(D), no capping, no window); MT_ATTN_INSTANTIATE_CHUNK adds the
// chunk (an int, 0: none).
#define MT_ATTN_INSTANTIATE(S, D, CAUSAL, NAME) MT_ATTN_INSTANTIATE_OPT(S, D, CAUSAL, 1.0f / sqrtf((float)D), 0.0f, 0, NAME)
#define MT_ATTN_INSTANTIATE_OPT(S, D, CAUSAL, SCALE, SOFTCAP, WINDOW, NAME)                                     \
    MT_ATTN_INSTANTIATE_CHUNK(S, D, CAUSAL, SCALE, SOFTCAP, WINDOW, 0, NAME)
#define MT_ATTN_INSTANTIATE_CHUNK(S, D, CAUSAL, SCALE, SOFTCAP, WINDOW, CHUNK, NAME)                            \
    extern "C" __global__ void __launch_bounds__(MT_ATTN_THREADS)                                                  \
        mt_attn_fwd_##NAME(S *y, float *lse, const S *q, const S *k, const S *v, int T, int H, int KVH,            \
                           const int *seg_start, const S *sinks) {                                                 \
        mt_attn_fwd<S, D, CAUSAL>(y, lse, q, k, v, T, H, KVH, MtAttnOpt{SCALE, SOFTCAP, WINDOW, CHUNK}, seg_start, sinks); \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(MT_ATTN_THREADS)                                                  \
        mt_attn_bwd_dq_##NAME(S *dq, float *ws, const S *dy, const S *q, const S *k, const S *v, const S *y,        \
                              const float *lse, int T, int H, int KVH, const int *seg_start) {                     \
        mt_attn_bwd_dq<S, D, CAUSAL>(dq, ws, dy, q, k, v, y, lse, T, H, KVH, MtAttnOpt{SCALE, SOFTCAP, WINDOW, CHUNK},    \
                                     seg_start);                                                                   \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(MT_ATTN_THREADS)                                                  \
        mt_attn_bwd_dkdv_##NAME(S *dk, S *dv, const float *ws, const S *dy, const S *q, const S *k, const S *v,     \
                                int T, int H, int KVH, const int *seg_start) {                                     \
        mt_attn_bwd_dkdv<S, D, CAUSAL>(dk, dv, ws, dy, q, k, v, T, H, KVH, MtAttnOpt{SCALE, SOFTCAP, WINDOW, CHUNK},      \
                                       seg_start);                                                                 \
    }
