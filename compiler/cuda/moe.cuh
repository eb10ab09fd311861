// moe.cuh: the mixture-of-experts ops on the GPU (needs the prelude): top_k,
// moe and its backward, the load-balancing loss and its backward, add_loss.
// Their plain reference is runtime/kernels.inc (top_k, moe, moe_bwd,
// load_balance), which the cpu backend runs; these follow it op for op.
//
// First version, for correctness: the experts' matrix products are plain
// loops, one block per row over the experts whose gate is not 0 (dropless,
// nothing computed for an unselected expert), not yet grouped GEMMs through
// cuBLASLt. Routing stays on the device: no host sync.
//
// Each kernel takes its node's output and operands as the cpu kernel does,
// then `bf`: bit a set when argument a (0 the output) is stored as bf16.
// Workspace `ws` is the engine's scratch of the device allocation
// (runtime/backend_cuda.c sizes it: moe rows (F + C) floats, moe_bwd rows
// (2 C + 3 E F) floats, load_balance_bwd E doubles).

__device__ __forceinline__ float mt_ldv(const void *p, long long i, int bf) {
    return bf ? mt_ld((const bf16 *)p + i) : ((const float *)p)[i];
}
__device__ __forceinline__ void mt_stv(void *p, long long i, int bf, float v) {
    if (bf) mt_st((bf16 *)p + i, v);
    else ((float *)p)[i] = v;
}
#define MT_BF(a) ((bf >> (a)) & 1)
__device__ __forceinline__ float mt_silu(float h) { return h / (1.0f + expf(-h)); }

// y[rows, E] = 1 at each row's K largest x (of equals the lower index first). One thread a row.
extern "C" __global__ void mt_node_top_k(void *y, const void *x, int bf, long long rows, int E, int K) {
    long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    for (int j = 0; j < E; j++) mt_stv(y, r * E + j, MT_BF(0), 0.0f);
    for (int k = 0; k < K; k++) {
        int best = -1;
        float bv = 0.0f;
        for (int j = 0; j < E; j++) {
            float v = mt_ldv(x, r * E + j, MT_BF(1));
            if (mt_ldv(y, r * E + j, MT_BF(0)) == 0.0f && (best < 0 || v > bv)) best = j, bv = v;
        }
        mt_stv(y, r * E + best, MT_BF(0), 1.0f);
    }
}

// y[rows, C] = sum over e with gate != 0 of gate * wd[e] (silu(wg[e] x) * (wu[e] x)).
// Block r: a [F] and the row's sum [C] in ws + r (F + C).
extern "C" __global__ void mt_node_moe(void *y, const void *x, const void *gates, const void *wg, const void *wu,
                                       const void *wd, int bf, long long rows, int C, int E, int F, float *ws) {
    long long r = blockIdx.x;
    float *a = ws + r * (F + C), *acc = a + F;
    for (int c = threadIdx.x; c < C; c += blockDim.x) acc[c] = 0.0f;
    for (int e = 0; e < E; e++) {
        float g = mt_ldv(gates, r * E + e, MT_BF(2));
        if (g == 0.0f) continue; // the same for the whole block
        for (int f = threadIdx.x; f < F; f += blockDim.x) {
            float h1 = 0.0f, h3 = 0.0f;
            long long w = ((long long)e * F + f) * C;
            for (int c = 0; c < C; c++) {
                float xc = mt_ldv(x, r * C + c, MT_BF(1));
                h1 += mt_ldv(wg, w + c, MT_BF(3)) * xc, h3 += mt_ldv(wu, w + c, MT_BF(4)) * xc;
            }
            a[f] = mt_silu(h1) * h3;
        }
        __syncthreads();
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float o = 0.0f;
            long long w = ((long long)e * C + c) * F;
            for (int f = 0; f < F; f++) o += mt_ldv(wd, w + f, MT_BF(5)) * a[f];
            acc[c] += g * o;
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) mt_stv(y, r * C + c, MT_BF(0), acc[c]);
}

// moe's backward, rows: out = packed [dx | dgates | dw_gate | dw_up | dw_down];
// this kernel writes dx and dgates, and leaves each selected expert's a, dh1,
// dh3 [F] in ws + r (2 C + 3 E F) + 2 C + e 3 F for mt_node_moe_bwd_w.
extern "C" __global__ void mt_node_moe_bwd_rows(void *out, const void *dy, const void *x, const void *gates,
                                                const void *wg, const void *wu, const void *wd, int bf, long long rows,
                                                int C, int E, int F, float *ws) {
    long long r = blockIdx.x;
    float *dxa = ws + r * (2LL * C + 3LL * E * F), *o = dxa + C;
    long long dgates = rows * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dxa[c] = 0.0f;
    for (int e = 0; e < E; e++) {
        float g = mt_ldv(gates, r * E + e, MT_BF(3));
        float *a = o + C + (long long)e * 3 * F, *dh1 = a + F, *dh3 = dh1 + F;
        if (g == 0.0f) {
            if (threadIdx.x == 0) mt_stv(out, dgates + r * E + e, MT_BF(0), 0.0f);
            continue;
        }
        for (int f = threadIdx.x; f < F; f += blockDim.x) { // the forward again: h1, h3 held in dh1, dh3
            float h1 = 0.0f, h3 = 0.0f;
            long long w = ((long long)e * F + f) * C;
            for (int c = 0; c < C; c++) {
                float xc = mt_ldv(x, r * C + c, MT_BF(2));
                h1 += mt_ldv(wg, w + c, MT_BF(4)) * xc, h3 += mt_ldv(wu, w + c, MT_BF(5)) * xc;
            }
            a[f] = mt_silu(h1) * h3, dh1[f] = h1, dh3[f] = h3;
        }
        __syncthreads();
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float s = 0.0f;
            long long w = ((long long)e * C + c) * F;
            for (int f = 0; f < F; f++) s += mt_ldv(wd, w + f, MT_BF(6)) * a[f];
            o[c] = s;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double dot = 0;
            for (int c = 0; c < C; c++) dot += (double)mt_ldv(dy, r * C + c, MT_BF(1)) * o[c];
            mt_stv(out, dgates + r * E + e, MT_BF(0), (float)dot);
        }
        for (int f = threadIdx.x; f < F; f += blockDim.x) {
            float da = 0.0f;
            for (int c = 0; c < C; c++)
                da += g * mt_ldv(dy, r * C + c, MT_BF(1)) * mt_ldv(wd, ((long long)e * C + c) * F + f, MT_BF(6));
            float h1 = dh1[f], h3 = dh3[f], sg = 1.0f / (1.0f + expf(-h1));
            dh3[f] = da * mt_silu(h1);
            dh1[f] = da * h3 * sg * (1.0f + h1 * (1.0f - sg));
        }
        __syncthreads();
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float s = 0.0f;
            for (int f = 0; f < F; f++) {
                long long w = ((long long)e * F + f) * C + c;
                s += dh1[f] * mt_ldv(wg, w, MT_BF(4)) + dh3[f] * mt_ldv(wu, w, MT_BF(5));
            }
            dxa[c] += s;
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) mt_stv(out, r * C + c, MT_BF(0), dxa[c]);
}

// moe's backward, weights: one thread an (e, f, c): dw_gate[e, f, c], dw_up[e, f, c]
// and dw_down[e, c, f], summed over the rows that selected e (mt_node_moe_bwd_rows's ws).
extern "C" __global__ void mt_node_moe_bwd_w(void *out, const void *dy, const void *x, const void *gates, int bf,
                                             long long rows, int C, int E, int F, const float *ws) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x, n = (long long)E * F * C;
    if (i >= n) return;
    int c = (int)(i % C), f = (int)(i / C % F), e = (int)(i / ((long long)C * F));
    float sg = 0.0f, su = 0.0f, sd = 0.0f;
    for (long long r = 0; r < rows; r++) {
        float g = mt_ldv(gates, r * E + e, MT_BF(3));
        if (g == 0.0f) continue;
        const float *a = ws + r * (2LL * C + 3LL * E * F) + 2LL * C + (long long)e * 3 * F;
        float xc = mt_ldv(x, r * C + c, MT_BF(2));
        sg += a[F + f] * xc, su += a[2 * F + f] * xc, sd += g * mt_ldv(dy, r * C + c, MT_BF(1)) * a[f];
    }
    long long dwg = rows * C + rows * E, dwu = dwg + n, dwd = dwu + n;
    mt_stv(out, dwg + i, MT_BF(0), sg);
    mt_stv(out, dwu + i, MT_BF(0), su);
    mt_stv(out, dwd + ((long long)e * C + c) * F + f, MT_BF(0), sd);
}

// The softmax of row r of logits [rows, E] at j, given its max m and sum s.
__device__ __forceinline__ void mt_row_softmax(const void *l, int bfl, long long r, int E, float *m, float *s) {
    float mx = mt_ldv(l, r * E, bfl), sum = 0.0f;
    for (int j = 1; j < E; j++) mx = fmaxf(mx, mt_ldv(l, r * E + j, bfl));
    for (int j = 0; j < E; j++) sum += expf(mt_ldv(l, r * E + j, bfl) - mx);
    *m = mx, *s = sum;
}

// out[] = E sum_e f_e P_e (kernels.inc load_balance): one thread.
extern "C" __global__ void mt_node_load_balance(void *out, const void *logits, const void *mask, int bf, long long rows,
                                                int E) {
    if (threadIdx.x || blockIdx.x) return;
    double total = 0;
    for (int e = 0; e < E; e++) {
        double f = 0, P = 0;
        for (long long r = 0; r < rows; r++) {
            float m, s;
            mt_row_softmax(logits, MT_BF(1), r, E, &m, &s);
            f += (double)mt_ldv(mask, r * E + e, MT_BF(2)) / (double)rows;
            P += (double)(expf(mt_ldv(logits, r * E + e, MT_BF(1)) - m) / s) / (double)rows;
        }
        total += f * P;
    }
    mt_stv(out, 0, MT_BF(0), (float)((double)E * total));
}

// dlogits[r, j] = dloss E / rows p_rj (f_j - sum_e f_e p_re): one block, f [E] in ws (doubles).
extern "C" __global__ void mt_node_load_balance_bwd(void *out, const void *dloss, const void *logits, const void *mask,
                                                    int bf, long long rows, int E, double *ws) {
    if (threadIdx.x == 0)
        for (int e = 0; e < E; e++) {
            double f = 0;
            for (long long r = 0; r < rows; r++) f += (double)mt_ldv(mask, r * E + e, MT_BF(3)) / (double)rows;
            ws[e] = f;
        }
    __syncthreads();
    double scale = (double)mt_ldv(dloss, 0, MT_BF(1)) * (double)E / (double)rows;
    for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
        float m, s;
        mt_row_softmax(logits, MT_BF(2), r, E, &m, &s);
        double fp = 0;
        for (int e = 0; e < E; e++) fp += ws[e] * (double)(expf(mt_ldv(logits, r * E + e, MT_BF(2)) - m) / s);
        for (int j = 0; j < E; j++) {
            double p = (double)(expf(mt_ldv(logits, r * E + j, MT_BF(2)) - m) / s);
            mt_stv(out, r * E + j, MT_BF(0), (float)(scale * p * (ws[j] - fp)));
        }
    }
}

// y = x (the loss joins the objective through the backward's seed).
extern "C" __global__ void mt_node_add_loss(void *y, const void *x, const void *loss, int bf, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    (void)loss;
    if (i < n) mt_stv(y, i, MT_BF(0), mt_ldv(x, i, MT_BF(1)));
}
#undef MT_BF
