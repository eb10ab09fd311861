// scan.cuh: the hybrid models' recurrent ops on the GPU (needs the prelude
// and moe.cuh's mt_ldv/mt_stv): conv1d and its backward, the gated delta
// rule and the Mamba-2 scan (common/scan.h) and their backwards. Their plain
// reference is runtime/backend/kernels_scan.inc, which the cpu backend runs;
// these follow it step for step in fp32 (its state and sums are double), and
// tests/emu/scan_check.c compares the two on the emulation.
//
// Arguments as moe.cuh's node kernels: the node's output, its operands, then
// `bf` (bit a set when argument a, 0 the output, is stored as bf16), the
// sizes, seg (the rows' document starts, kernels.h's seg_start, or NULL) and
// ws, the engine's scratch (common/scan.h's scan_scratch_bytes). No float
// atomics: every output element is written by one thread, sums run in a
// fixed order.
//
// The recurrences run one block per batch row and head (forward) or key
// head (backward, which owns its group's dq and dk rows and runs the group's
// heads one after the other), MT_SCAN_THREADS threads over the state's
// columns or rows; the state S (Dk, Dv) lives in ws, row-major. Not yet the
// chunked tensor-core form: each step is O(Dk Dv) on the CUDA cores.

#define MT_SCAN_THREADS 128
#define MT_SCAN_CHUNK 64 // common/scan.h's SCAN_CHUNK
#define MT_SBF(a) ((bf >> (a)) & 1) // whether argument a is stored as bf16

// conv1d: y[b, t, c] = sum over s in [max(start(t), t - K + 1), t] of w[c, s - t + K - 1] x[b, s, c]. One thread an
// element of y.
extern "C" __global__ void mt_node_conv1d(void *y, const void *x, const void *w, int bf, long long rows, int T, int C,
                                          int K, const int *seg) {
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= rows * C) return;
    long long bt = e / C, t = bt % T, b = bt / T;
    int c = (int)(e % C);
    long long start = seg ? seg[bt] : 0, lo = t - K + 1 > start ? t - K + 1 : start;
    float s = 0.0f;
    for (long long p = lo; p <= t; p++) s += mt_ldv(w, (long long)c * K + p - t + K - 1, MT_SBF(2)) * mt_ldv(x, (b * T + p) * C + c, MT_SBF(1));
    mt_stv(y, e, MT_SBF(0), s);
}

// conv1d's backward, out = [dx | dw]: one thread an element of dx (the outputs whose window holds it), then one an
// element of dw (summed over every row and position in order).
extern "C" __global__ void mt_node_conv1d_bwd(void *out, const void *dy, const void *x, const void *w, int bf,
                                              long long rows, int T, int C, int K, const int *seg) {
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < rows * C) {
        long long bt = e / C, t = bt % T, b = bt / T;
        int c = (int)(e % C);
        float s = 0.0f;
        for (long long u = t; u < T && u < t + K; u++)
            if (!seg || seg[b * T + u] <= t)
                s += mt_ldv(w, (long long)c * K + t - u + K - 1, MT_SBF(3)) * mt_ldv(dy, (b * T + u) * C + c, MT_SBF(1));
        mt_stv(out, e, MT_SBF(0), s);
        return;
    }
    e -= rows * C;
    if (e >= (long long)C * K) return;
    int c = (int)(e / K), j = (int)(e % K);
    float s = 0.0f;
    for (long long bt = 0; bt < rows; bt++) {
        long long t = bt % T, p = t - K + 1 + j, start = seg ? seg[bt] : 0;
        if (p >= 0 && p >= start) s += mt_ldv(dy, bt * C + c, MT_SBF(1)) * mt_ldv(x, (bt - t + p) * C + c, MT_SBF(2));
    }
    mt_stv(out, rows * C + e, MT_SBF(0), s);
}

// The geometry every recurrence kernel takes.
struct MtScan {
    int B, T, H, Hk, Dk, Dv, delta;
    float scale, eps;
    const int *seg;
};

__device__ __forceinline__ int mt_scan_reset(const MtScan &s, int b, int t) {
    return t == 0 || (s.seg && s.seg[(long long)b * s.T + t] == t);
}

// Row bt's q and k of key head hk into shared qh, kh (Dk), l2-normalised under the delta rule (their inverse norms
// into r[0], r[1]), qh scaled. Ends synchronised.
__device__ void mt_scan_qk(const MtScan &s, const void *q, const void *k, int bf, int qa, long long bt, int hk,
                           float *qh, float *kh, float *r) {
    long long base = (bt * s.Hk + hk) * s.Dk;
    for (int i = threadIdx.x; i < s.Dk; i += blockDim.x)
        qh[i] = mt_ldv(q, base + i, MT_SBF(qa)), kh[i] = mt_ldv(k, base + i, MT_SBF(qa + 1));
    __syncthreads();
    if (threadIdx.x == 0) {
        float sq = 0.0f, sk = 0.0f;
        for (int i = 0; i < s.Dk; i++) sq += qh[i] * qh[i], sk += kh[i] * kh[i];
        r[0] = s.delta ? rsqrtf(sq + s.eps) : 1.0f, r[1] = s.delta ? rsqrtf(sk + s.eps) : 1.0f;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < s.Dk; i += blockDim.x) qh[i] *= r[0] * s.scale, kh[i] *= r[1];
    __syncthreads();
}

// One step on state S (Dk, Dv) in global memory, a column a thread: S *= e; u = beta (v - S^T kh) (delta) or
// beta v; S += kh u^T; o = S^T qh when y is not NULL.
__device__ void mt_scan_step(const MtScan &s, float *S, const float *qh, const float *kh, const void *v, int vbf,
                             long long vrow, float e, float beta, void *y, int ybf) {
    for (int j = threadIdx.x; j < s.Dv; j += blockDim.x) {
        float m = 0.0f;
        for (int i = 0; s.delta && i < s.Dk; i++) m += e * S[(long long)i * s.Dv + j] * kh[i];
        float u = beta * (mt_ldv(v, vrow + j, vbf) - m), o = 0.0f;
        for (int i = 0; i < s.Dk; i++) {
            float x = e * S[(long long)i * s.Dv + j] + kh[i] * u;
            S[(long long)i * s.Dv + j] = x, o += x * qh[i];
        }
        if (y) mt_stv(y, vrow + j, ybf, o);
    }
}

__device__ void mt_scan_zero(float *S, long long n) {
    for (long long i = threadIdx.x; i < n; i += blockDim.x) S[i] = 0.0f;
}

// The forward: block (b, h); shared qh, kh (Dk) and the norms.
__device__ void mt_scan_fwd(const MtScan &s, void *y, const void *q, const void *k, const void *v, const void *g,
                            const void *beta, int bf, float *ws) {
    extern __shared__ float mt_smem[];
    float *qh = mt_smem, *kh = qh + s.Dk, *r = kh + s.Dk;
    int b = blockIdx.x / s.H, h = blockIdx.x % s.H, hk = h / (s.H / s.Hk);
    float *S = ws + (long long)blockIdx.x * s.Dk * s.Dv;
    for (int t = 0; t < s.T; t++) {
        long long bt = (long long)b * s.T + t, row = bt * s.H + h;
        if (mt_scan_reset(s, b, t)) mt_scan_zero(S, (long long)s.Dk * s.Dv);
        mt_scan_qk(s, q, k, bf, 1, bt, hk, qh, kh, r);
        mt_scan_step(s, S, qh, kh, v, MT_SBF(3), row * s.Dv, expf(mt_ldv(g, row, MT_SBF(4))), mt_ldv(beta, row, MT_SBF(5)),
                     y, MT_SBF(0));
        __syncthreads();
    }
}

#define MT_SCAN_PARAMS                                                                                                 \
    void *y, const void *q, const void *k, const void *v, const void *g, const void *beta, int bf, int B, int T,     \
        int H, int Hk, int Dk, int Dv, float scale, float eps, const int *seg, float *ws
extern "C" __global__ void mt_node_delta_rule(MT_SCAN_PARAMS) {
    MtScan s = {B, T, H, Hk, Dk, Dv, 1, scale, eps, seg};
    mt_scan_fwd(s, y, q, k, v, g, beta, bf, ws);
}
extern "C" __global__ void mt_node_ssd(MT_SCAN_PARAMS) {
    MtScan s = {B, T, H, Hk, Dk, Dv, 0, scale, eps, seg};
    mt_scan_fwd(s, y, q, k, v, g, beta, bf, ws);
}

// The backward's shared vectors and scratch of one block.
struct MtScanBwd {
    float *qh, *kh, *dqh, *dkh, *u, *m, *du, *red, *r; // shared: (Dk) x 4, (Dv) x 3, (2 blockDim), (4)
    float *start, *st, *dS;                            // ws: (chunks, Dk, Dv), (MT_SCAN_CHUNK + 1, Dk, Dv), (Dk, Dv)
};

// One step of the backward at row bt, head h, from the state before it (prev, NULL after a reset) and after it
// (cur); w.dS holds d loss / d cur less this step's output and leaves with d loss / d prev. Writes dv, dg, dbeta
// and adds into dq, dk (this block's key head's rows: no other block writes them).
__device__ void mt_scan_step_bwd(const MtScan &s, const MtScanBwd &w, void *out, const void *dy, const void *const *in,
                                 int bf, long long bt, int h, const float *prev, const float *cur) {
    int hk = h / (s.H / s.Hk), Dk = s.Dk, Dv = s.Dv;
    long long row = bt * s.H + h, BT = (long long)s.B * s.T, nqk = BT * s.Hk * Dk;
    float e = expf(mt_ldv(in[3], row, MT_SBF(5))), beta = mt_ldv(in[4], row, MT_SBF(6));
    mt_scan_qk(s, in[0], in[1], bf, 2, bt, hk, w.qh, w.kh, w.r);
    for (int j = threadIdx.x; j < Dv; j += blockDim.x) { // u as the forward made it; dS += qh dy^T; du = dS^T kh
        float m = 0.0f, d = mt_ldv(dy, row * Dv + j, MT_SBF(1)), du = 0.0f;
        for (int i = 0; prev && s.delta && i < Dk; i++) m += e * prev[(long long)i * Dv + j] * w.kh[i];
        for (int i = 0; i < Dk; i++) {
            float x = w.dS[(long long)i * Dv + j] + w.qh[i] * d;
            w.dS[(long long)i * Dv + j] = x, du += x * w.kh[i];
        }
        w.m[j] = m, w.u[j] = beta * (mt_ldv(in[2], row * Dv + j, MT_SBF(4)) - m), w.du[j] = du;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < Dk; i += blockDim.x) { // dqh = cur dy; dkh = dS u (- beta A du under delta)
        float dq = 0.0f, dk = 0.0f;
        for (int j = 0; j < Dv; j++) {
            dq += cur[(long long)i * Dv + j] * mt_ldv(dy, row * Dv + j, MT_SBF(1));
            dk += w.dS[(long long)i * Dv + j] * w.u[j];
            if (prev && s.delta) dk -= e * prev[(long long)i * Dv + j] * beta * w.du[j];
        }
        w.dqh[i] = dq * s.scale, w.dkh[i] = dk;
    }
    __syncthreads();
    float dg = 0.0f, db = 0.0f;
    for (int j = threadIdx.x; j < Dv; j += blockDim.x) { // dA = dS (- kh beta du^T); dg = sum A dA; dS = e dA
        for (int i = 0; i < Dk; i++) {
            float x = w.dS[(long long)i * Dv + j] - (s.delta ? w.kh[i] * beta * w.du[j] : 0.0f);
            dg += (prev ? e * prev[(long long)i * Dv + j] : 0.0f) * x;
            w.dS[(long long)i * Dv + j] = prev ? e * x : 0.0f;
        }
        db += w.du[j] * (mt_ldv(in[2], row * Dv + j, MT_SBF(4)) - w.m[j]);
        mt_stv(out, 2 * nqk + row * Dv + j, MT_SBF(0), beta * w.du[j]);
    }
    w.red[threadIdx.x] = dg, w.red[blockDim.x + threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.x == 0) { // the block's sums in order; then q's and k's l2 backward dots
        float sg = 0.0f, sb = 0.0f, dotq = 0.0f, dotk = 0.0f;
        for (int i = 0; i < (int)blockDim.x; i++) sg += w.red[i], sb += w.red[blockDim.x + i];
        long long dgo = 2 * nqk + BT * s.H * Dv + row;
        mt_stv(out, dgo, MT_SBF(0), sg), mt_stv(out, dgo + BT * s.H, MT_SBF(0), sb);
        for (int i = 0; s.delta && i < Dk; i++) dotq += w.qh[i] / s.scale * w.dqh[i], dotk += w.kh[i] * w.dkh[i];
        w.r[2] = dotq, w.r[3] = dotk;
    }
    __syncthreads();
    long long qo = (bt * s.Hk + hk) * Dk;
    for (int i = threadIdx.x; i < Dk; i += blockDim.x) { // dq += r (dq^ - q^ (q^ . dq^)), k likewise
        float dq = w.r[0] * (w.dqh[i] - w.qh[i] / s.scale * w.r[2]), dk = w.r[1] * (w.dkh[i] - w.kh[i] * w.r[3]);
        mt_stv(out, qo + i, MT_SBF(0), mt_ldv(out, qo + i, MT_SBF(0)) + dq);
        mt_stv(out, nqk + qo + i, MT_SBF(0), mt_ldv(out, nqk + qo + i, MT_SBF(0)) + dk);
    }
    __syncthreads();
}

// The backward, out = [dq | dk | dv | dg | dbeta]: block (b, key head); for each head of its group a forward that
// keeps the state at each chunk's start, then the chunks last first, each recomputing its states.
__device__ void mt_scan_bwd(const MtScan &s, void *out, const void *dy, const void *const *in, int bf, float *ws) {
    extern __shared__ float mt_smem[];
    MtScanBwd w;
    w.qh = mt_smem, w.kh = w.qh + s.Dk, w.dqh = w.kh + s.Dk, w.dkh = w.dqh + s.Dk, w.u = w.dkh + s.Dk;
    w.m = w.u + s.Dv, w.du = w.m + s.Dv, w.red = w.du + s.Dv, w.r = w.red + 2 * blockDim.x;
    long long S = (long long)s.Dk * s.Dv, chunks = (s.T + MT_SCAN_CHUNK - 1) / MT_SCAN_CHUNK;
    w.start = ws + (long long)blockIdx.x * (chunks + MT_SCAN_CHUNK + 2) * S;
    w.st = w.start + chunks * S, w.dS = w.st + (MT_SCAN_CHUNK + 1) * S;
    int b = blockIdx.x / s.Hk, hk = blockIdx.x % s.Hk, R = s.H / s.Hk;
    long long nqk = (long long)s.B * s.T * s.Hk * s.Dk;
    for (int t = 0; t < s.T; t++) // this key head's dq and dk rows: summed over its heads below
        for (int i = threadIdx.x; i < s.Dk; i += blockDim.x) {
            long long o = (((long long)b * s.T + t) * s.Hk + hk) * s.Dk + i;
            mt_stv(out, o, MT_SBF(0), 0.0f), mt_stv(out, nqk + o, MT_SBF(0), 0.0f);
        }
    __syncthreads();
    for (int h = hk * R; h < (hk + 1) * R; h++) {
        for (int t = 0; t < s.T; t++) { // the states entering each chunk, in st[0] as it runs
            long long bt = (long long)b * s.T + t, row = bt * s.H + h;
            if (mt_scan_reset(s, b, t)) mt_scan_zero(w.st, S);
            __syncthreads();
            if (t % MT_SCAN_CHUNK == 0)
                for (long long i = threadIdx.x; i < S; i += blockDim.x) w.start[t / MT_SCAN_CHUNK * S + i] = w.st[i];
            mt_scan_qk(s, in[0], in[1], bf, 2, bt, hk, w.qh, w.kh, w.r);
            mt_scan_step(s, w.st, w.qh, w.kh, in[2], MT_SBF(4), row * s.Dv, expf(mt_ldv(in[3], row, MT_SBF(5))),
                         mt_ldv(in[4], row, MT_SBF(6)), NULL, 0);
            __syncthreads();
        }
        mt_scan_zero(w.dS, S);
        __syncthreads();
        for (long long c = chunks - 1; c >= 0; c--) {
            int t0 = (int)(c * MT_SCAN_CHUNK), len = s.T - t0 < MT_SCAN_CHUNK ? s.T - t0 : MT_SCAN_CHUNK;
            for (long long i = threadIdx.x; i < S; i += blockDim.x) w.st[i] = w.start[c * S + i];
            __syncthreads();
            for (int i = 0; i < len; i++) { // st[i + 1]: the state after step t0 + i
                long long bt = (long long)b * s.T + t0 + i, row = bt * s.H + h;
                float *next = w.st + (i + 1) * S;
                if (i > 0 && mt_scan_reset(s, b, t0 + i)) mt_scan_zero(next, S);
                else
                    for (long long x = threadIdx.x; x < S; x += blockDim.x) next[x] = w.st[i * S + x];
                mt_scan_qk(s, in[0], in[1], bf, 2, bt, hk, w.qh, w.kh, w.r);
                mt_scan_step(s, next, w.qh, w.kh, in[2], MT_SBF(4), row * s.Dv, expf(mt_ldv(in[3], row, MT_SBF(5))),
                             mt_ldv(in[4], row, MT_SBF(6)), NULL, 0);
                __syncthreads();
            }
            for (int i = len - 1; i >= 0; i--)
                mt_scan_step_bwd(s, w, out, dy, in, bf, (long long)b * s.T + t0 + i, h,
                                 mt_scan_reset(s, b, t0 + i) ? NULL : w.st + i * S, w.st + (i + 1) * S);
        }
    }
}

#define MT_SCAN_BWD_PARAMS                                                                                             \
    void *out, const void *dy, const void *q, const void *k, const void *v, const void *g, const void *beta, int bf,  \
        int B, int T, int H, int Hk, int Dk, int Dv, float scale, float eps, const int *seg, float *ws
extern "C" __global__ void mt_node_delta_rule_bwd(MT_SCAN_BWD_PARAMS) {
    MtScan s = {B, T, H, Hk, Dk, Dv, 1, scale, eps, seg};
    const void *in[5] = {q, k, v, g, beta};
    mt_scan_bwd(s, out, dy, in, bf, ws);
}
extern "C" __global__ void mt_node_ssd_bwd(MT_SCAN_BWD_PARAMS) {
    MtScan s = {B, T, H, Hk, Dk, Dv, 0, scale, eps, seg};
    const void *in[5] = {q, k, v, g, beta};
    mt_scan_bwd(s, out, dy, in, bf, ws);
}
