// attention_host.h: attention in double on the host, for the test programs
// that check the flash kernels (tests/emu/emu_check.c on the emulation,
// tests/gpu/gpu_check.c on a GPU), and the criterion FlashAttention's own
// tests judge a bf16 kernel by. Plain C, header only.
#ifndef MT_TESTS_ATTENTION_HOST_H
#define MT_TESTS_ATTENTION_HOST_H

#include <math.h>
#include <stdlib.h>

#include "common/bf16.h"

// The reference of the cases the plain kernels of attention_ref.cuh do not
// take (value heads of their own width, documents): y, lse, dq, dk, dv in
// double on the host, as runtime/backend/kernels.inc defines them, seg (B, T) or
// NULL. Layouts as the kernels': q (B, T, H*D), k (B, T, KVH*D), v
// (B, T, KVH*Dv), y and dy (B, T, H*Dv), lse (B, H, T). With bf16_p, the
// plain bf16 attention FlashAttention's tests hold a kernel to (PyTorch's
// in bf16): the probabilities P rounded to bf16 where they enter P V and
// P^T dY, dS where it enters dS K and dS^T Q, and y, dq, dk, dv rounded to
// bf16 at the end; the rest in double. sinks (H) or NULL: each head's
// learned logit (gpt-oss), one more column of every row's softmax with no
// value.
static inline void host_attention(float *y, float *lse, float *dq, float *dk, float *dv, const float *q, const float *k,
                                  const float *v, const float *dy, const int *seg, const float *sinks, int B, int T,
                                  int H, int KVH, int D, int Dv, int causal, int window, double scale, double softcap,
                                  int bf16_p) {
    double *p = malloc(8 * (size_t)T), *pb = malloc(8 * (size_t)T), *c = malloc(8 * (size_t)T),
           *acc = calloc((size_t)B * T * KVH * (D + Dv), 8), *dqa = malloc(8 * (size_t)D);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const int kh = h / (H / KVH);
                const float *qr = q + ((long)(b * T + t) * H + h) * D, *dyr = dy + ((long)(b * T + t) * H + h) * Dv;
                const double sink = sinks ? sinks[h] : -INFINITY;
                double mx = sink, sum = sinks ? 1 : 0, delta = 0; // exp(sink - mx) until mx moves
                for (int j = 0; j < T; j++) {
                    int vis = (!causal || j <= t) && (!window || j > t - window) && (!seg || j >= seg[b * T + t]);
                    p[j] = -INFINITY, c[j] = 1;
                    if (!vis) continue;
                    const float *kr = k + ((long)(b * T + j) * KVH + kh) * D;
                    double dot = 0;
                    for (int d = 0; d < D; d++) dot += (double)qr[d] * kr[d];
                    p[j] = dot * scale;
                    if (softcap > 0) c[j] = tanh(p[j] / softcap), p[j] = softcap * c[j], c[j] = 1 - c[j] * c[j];
                    mx = fmax(mx, p[j]);
                }
                if (sinks) sum = exp(sink - mx);
                for (int j = 0; j < T; j++) sum += p[j] == -INFINITY ? 0 : exp(p[j] - mx);
                for (int j = 0; j < T; j++) p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - mx) / sum;
                lse[((long)b * H + h) * T + t] = (float)(mx + log(sum));
                double *pr = pb; // P as it enters the products
                for (int j = 0; j < T; j++) pr[j] = bf16_p ? bf16_round((float)p[j]) : p[j];
                for (int e = 0; e < Dv; e++) {
                    double u = 0;
                    for (int j = 0; j < T; j++) u += pr[j] * v[((long)(b * T + j) * KVH + kh) * Dv + e];
                    y[((long)(b * T + t) * H + h) * Dv + e] = bf16_p ? bf16_round((float)u) : (float)u;
                    delta += u * dyr[e];
                }
                for (int d = 0; d < D; d++) dqa[d] = 0;
                for (int j = 0; j < T; j++) {
                    if (p[j] == 0) continue;
                    const float *kr = k + ((long)(b * T + j) * KVH + kh) * D,
                                *vr = v + ((long)(b * T + j) * KVH + kh) * Dv;
                    double dp = 0, *ak = acc + ((long)(b * T + j) * KVH + kh) * (D + Dv);
                    for (int e = 0; e < Dv; e++) dp += (double)dyr[e] * vr[e], ak[D + e] += pr[j] * dyr[e];
                    double ds = p[j] * (dp - delta) * c[j];
                    if (bf16_p) ds = bf16_round((float)ds);
                    ds *= scale;
                    for (int d = 0; d < D; d++) dqa[d] += ds * kr[d], ak[d] += ds * qr[d];
                }
                for (int d = 0; d < D; d++)
                    dq[((long)(b * T + t) * H + h) * D + d] = bf16_p ? bf16_round((float)dqa[d]) : (float)dqa[d];
            }
    for (long r = 0; r < (long)B * T * KVH; r++) {
        for (int d = 0; d < D; d++) dk[r * D + d] = (float)acc[r * (D + Dv) + d];
        for (int e = 0; e < Dv; e++) dv[r * Dv + e] = (float)acc[r * (D + Dv) + D + e];
        for (int d = 0; bf16_p && d < D; d++) dk[r * D + d] = bf16_round(dk[r * D + d]);
        for (int e = 0; bf16_p && e < Dv; e++) dv[r * Dv + e] = bf16_round(dv[r * Dv + e]);
    }
    free(p), free(pb), free(c), free(acc), free(dqa);
}

// max |a - b| over the first `width` elements of each of n / stride rows (NaN sticks)
static inline double max_abs_rows(const float *a, const float *b, size_t n, size_t stride, size_t width) {
    double m = 0;
    for (size_t r = 0; r + stride <= n; r += stride)
        for (size_t i = r; i < r + width; i++) {
            double d = fabs((double)a[i] - b[i]);
            if (!(d <= m) && m == m) m = d;
        }
    return m;
}

// A case's geometry and options for attn_fair_ratios; hq and hk: the query
// and kv heads compared (a group's only, or all: H and KVH).
typedef struct AttnHostCase {
    int B, T, H, KVH, D, Dv, causal, window;
    double scale, softcap;
    const int *seg; // (B, T) document starts, or NULL
    int hq, hk;
    const float *sinks; // (H) or NULL
} AttnHostCase;

// A bf16 kernel judged as FlashAttention's tests judge theirs: for each of
// y, dq, dk, dv (out[0..3], widened to f32) its largest error against the
// reference in double (host_attention) over the largest error of plain bf16
// attention (host_attention's bf16_p: PyTorch's in bf16) against the same
// reference, into ratio[0..3]; a kernel passes at 2 or less. Inputs of size
// 1 (the tests' [-1, 1)): where plain bf16 is exact (T 1's dq and dk are 0)
// its error counts as 5e-6, an allowance of 1e-5. *plain_dv_rel: plain
// bf16's own dv error by the elementwise measure |a - b| / max(|b|, 0.1).
static inline void attn_fair_ratios(const AttnHostCase *c, const float *const out[4], const float *q, const float *k,
                                    const float *v, const float *dy, double ratio[4], double *plain_dv_rel) {
    long n[4] = {(long)c->B * c->T * c->H * c->Dv, (long)c->B * c->T * c->H * c->D, (long)c->B * c->T * c->KVH * c->D,
                 (long)c->B * c->T * c->KVH * c->Dv};
    long nl = (long)c->B * c->H * c->T;
    float *x[5], *p[5];
    for (int i = 0; i < 5; i++) {
        long m = i < 4 ? n[i] : nl;
        x[i] = malloc(4 * (size_t)m + 4), p[i] = malloc(4 * (size_t)m + 4);
    }
    host_attention(x[0], x[4], x[1], x[2], x[3], q, k, v, dy, c->seg, c->sinks, c->B, c->T, c->H, c->KVH, c->D, c->Dv,
                   c->causal, c->window, c->scale, c->softcap, 0);
    host_attention(p[0], p[4], p[1], p[2], p[3], q, k, v, dy, c->seg, c->sinks, c->B, c->T, c->H, c->KVH, c->D, c->Dv,
                   c->causal, c->window, c->scale, c->softcap, 1);
    int width[4] = {c->Dv, c->D, c->D, c->Dv};
    for (int i = 0; i < 4; i++) {
        size_t stride = (size_t)(i < 2 ? c->H : c->KVH) * (size_t)width[i],
               cols = (size_t)(i < 2 ? c->hq : c->hk) * (size_t)width[i];
        double ek = max_abs_rows(out[i], x[i], (size_t)n[i], stride, cols),
               eb = max_abs_rows(p[i], x[i], (size_t)n[i], stride, cols);
        ratio[i] = ek / fmax(eb, 5e-6);
    }
    double m = 0;
    for (long r = 0; r < n[3]; r += (long)c->KVH * c->Dv)
        for (long j = r; j < r + (long)c->hk * c->Dv; j++) {
            double d = fabs((double)p[3][j] - x[3][j]) / fmax(fabs((double)x[3][j]), 0.1);
            if (!(d <= m)) m = d;
        }
    *plain_dv_rel = m;
    for (int i = 0; i < 5; i++) free(x[i]), free(p[i]);
}

#endif
