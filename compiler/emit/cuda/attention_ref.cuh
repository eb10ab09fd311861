// attention_ref.cuh: the plain reference for attention.cuh, for test
// programs only (tests/gpu): one thread per output value, fp32 storage,
// double accumulation, and the T x T probabilities materialised in device
// memory as P[B, H, T, T], C[B, H, T, T] (the soft-capping's derivative)
// and dS[B, H, T, T]. The semantics are runtime/backend/kernels.inc's attention and
// attention_bwd, line for line: score q.k * scale, then softcap * tanh(score
// / softcap) when softcap > 0; key j visible to query t when j <= t (causal)
// or always, and with a window W > 0 only when j > t - W, and with packed
// documents (mt_ref_attn_probs_doc_starts: seg_start (B, T), the first position of
// query t's document in its row) only when j >= seg_start[b * T + t]; query
// head h reads kv head h / (H / KVH). Needs prelude.cuh. Never in a plan.
//
// Order: probs (or probs_docs), then fwd; for the backward probs, ds, then dq and dkdv.
// Layouts as attention.cuh: q, y, dq, dy [B, T, H*D]; k, v, dk, dv [B, T, KVH*D].

// The score of query row qr against key row kr: q.k * scale, soft-capped;
// *dcap = d score / d (q.k * scale).
__device__ double mt_ref_attn_score(const float *qr, const float *kr, int D, double scale, double softcap,
                                    double *dcap) {
    double dot = 0;
    for (int d = 0; d < D; d++) dot += (double)qr[d] * kr[d];
    dot *= scale;
    *dcap = 1;
    if (softcap > 0) {
        double c = tanh(dot / softcap);
        dot = softcap * c, *dcap = 1 - c * c;
    }
    return dot;
}

// P[b, h, t, :] = softmax over the visible keys of the scores; 0 elsewhere.
// C[b, h, t, j] = d score / d (q.k * scale) (1 without soft-capping).
// One thread per (b, h, t); seg_start NULL: no documents.
__device__ void mt_ref_attn_probs_row(float *P, float *C, const float *q, const float *k, const int *seg_start, int B,
                                      int T, int H, int KVH, int D, int causal, int window, double scale,
                                      double softcap) {
    long row = (long)blockIdx.x * blockDim.x + threadIdx.x; // (b * H + h) * T + t
    if (row >= (long)B * H * T) return;
    int t = (int)(row % T), h = (int)(row / T % H), b = (int)(row / T / H), kvh = h / (H / KVH);
    int n = causal ? t + 1 : T, j0 = window && t + 1 > window ? t + 1 - window : 0;
    if (seg_start && seg_start[(long)b * T + t] > j0) j0 = seg_start[(long)b * T + t];
    double mx = -1e300, sum = 0, dc;
    const float *qr = q + ((long)b * T + t) * H * D + (long)h * D;
    float *Pr = P + row * T, *Cr = C + row * T;
    for (int j = 0; j < T; j++) Pr[j] = 0.0f, Cr[j] = 0.0f;
    for (int j = j0; j < n; j++) {
        double sc = mt_ref_attn_score(qr, k + ((long)b * T + j) * KVH * D + (long)kvh * D, D, scale, softcap, &dc);
        mx = sc > mx ? sc : mx;
    }
    for (int j = j0; j < n; j++)
        sum += exp(mt_ref_attn_score(qr, k + ((long)b * T + j) * KVH * D + (long)kvh * D, D, scale, softcap, &dc) - mx);
    for (int j = j0; j < n; j++) {
        double sc = mt_ref_attn_score(qr, k + ((long)b * T + j) * KVH * D + (long)kvh * D, D, scale, softcap, &dc);
        Pr[j] = (float)(exp(sc - mx) / sum), Cr[j] = (float)dc;
    }
}
extern "C" __global__ void mt_ref_attn_probs(float *P, float *C, const float *q, const float *k, int B, int T, int H,
                                             int KVH, int D, int causal, int window, double scale, double softcap) {
    mt_ref_attn_probs_row(P, C, q, k, NULL, B, T, H, KVH, D, causal, window, scale, softcap);
}
extern "C" __global__ void mt_ref_attn_probs_doc_starts(float *P, float *C, const float *q, const float *k,
                                                  const int *seg_start, int B, int T, int H, int KVH, int D, int causal,
                                                  int window, double scale, double softcap) {
    mt_ref_attn_probs_row(P, C, q, k, seg_start, B, T, H, KVH, D, causal, window, scale, softcap);
}

// y[b, t, h*D + d] = sum_j P[b, h, t, j] v[b, j, kvh*D + d]. One thread per element of y.
extern "C" __global__ void mt_ref_attn_fwd(float *y, const float *P, const float *v, int B, int T, int H, int KVH,
                                           int D) {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long)B * T * H * D) return;
    int d = (int)(e % D), h = (int)(e / D % H), t = (int)(e / D / H % T), b = (int)(e / D / H / T);
    int kvh = h / (H / KVH);
    const float *Pr = P + (((long)b * H + h) * T + t) * T;
    double acc = 0;
    for (int j = 0; j < T; j++) acc += (double)Pr[j] * v[((long)b * T + j) * KVH * D + (long)kvh * D + d];
    y[e] = (float)acc;
}

// dS[b, h, t, j] = P (dP - sum_j P dP) C, dP_j = dy_t . v_j. One thread per (b, h, t).
extern "C" __global__ void mt_ref_attn_ds(float *dS, const float *P, const float *C, const float *dy, const float *v,
                                          int B, int T, int H, int KVH, int D) {
    long row = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= (long)B * H * T) return;
    int t = (int)(row % T), h = (int)(row / T % H), b = (int)(row / T / H), kvh = h / (H / KVH);
    const float *dyr = dy + ((long)b * T + t) * H * D + (long)h * D, *Pr = P + row * T, *Cr = C + row * T;
    float *dSr = dS + row * T;
    double delta = 0;
    for (int j = 0; j < T; j++) {
        const float *vr = v + ((long)b * T + j) * KVH * D + (long)kvh * D;
        double dp = 0;
        for (int d = 0; d < D; d++) dp += (double)dyr[d] * vr[d];
        dSr[j] = (float)dp;
        delta += (double)Pr[j] * dp;
    }
    for (int j = 0; j < T; j++) dSr[j] = (float)((double)Pr[j] * ((double)dSr[j] - delta) * Cr[j]);
}

// dq[b, t, h*D + d] = sum_j dS[b, h, t, j] k[b, j, kvh*D + d] * scale. One thread per element.
extern "C" __global__ void mt_ref_attn_dq(float *dq, const float *dS, const float *k, int B, int T, int H, int KVH,
                                          int D, double scale) {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long)B * T * H * D) return;
    int d = (int)(e % D), h = (int)(e / D % H), t = (int)(e / D / H % T), b = (int)(e / D / H / T);
    int kvh = h / (H / KVH);
    const float *dSr = dS + (((long)b * H + h) * T + t) * T;
    double acc = 0;
    for (int j = 0; j < T; j++) acc += (double)dSr[j] * k[((long)b * T + j) * KVH * D + (long)kvh * D + d];
    dq[e] = (float)(acc * scale);
}

// dk, dv[b, j, kvh*D + d]: sums over the group's query heads h and rows t of
// dS[b, h, t, j] q[b, t, h*D + d] * scale and P[b, h, t, j] dy[b, t, h*D + d].
// One thread per element.
extern "C" __global__ void mt_ref_attn_dkdv(float *dk, float *dv, const float *P, const float *dS, const float *q,
                                            const float *dy, int B, int T, int H, int KVH, int D, double scale) {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long)B * T * KVH * D) return;
    int d = (int)(e % D), kvh = (int)(e / D % KVH), j = (int)(e / D / KVH % T), b = (int)(e / D / KVH / T);
    int G = H / KVH;
    double ak = 0, av = 0;
    for (int h = kvh * G; h < (kvh + 1) * G; h++)
        for (int t = 0; t < T; t++) {
            long pr = (((long)b * H + h) * T + t) * T + j, qi = ((long)b * T + t) * H * D + (long)h * D + d;
            ak += (double)dS[pr] * q[qi];
            av += (double)P[pr] * dy[qi];
        }
    dk[e] = (float)(ak * scale);
    dv[e] = (float)av;
}
