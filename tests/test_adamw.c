// test_adamw.c: the fast AdamW kernel against the double-precision reference
// (random tensors, odd and tiny sizes, several thread counts, misaligned
// pointers), its bf16 copy against an independent rounding, the squared
// gradient norm for determinism across thread counts, the fused zeroing of
// the gradients (same bits, g exactly zero), bf16 gradients read directly
// (the bits of their fp32 widening), the store's first touch, two
// callers of the thread pool at once, the pool with no thread to be had,
// several parameters updated as one job (adamw_update_parts),
// and one step worked by hand. Prints every failed check and returns 1 if there was any.
#include <math.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/store/adamw.h"
#include "runtime/store/pool.h"
#include "tests/check.h"

// splitmix64: a fixed seed gives the same tensors on every machine.
static uint64_t rng_state = 0x2545F4914F6CDD1DULL;

static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// Uniform in [lo, hi).
static float rng_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rng_next() >> 40) / (double)(1ULL << 24));
}

// A value of random sign and magnitude 10^[lo_exp, hi_exp), so tensors mix
// scales as real ones do.
static float rng_logscale(float lo_exp, float hi_exp) {
    float x = powf(10.0f, rng_uniform(lo_exp, hi_exp));
    return rng_next() & 1 ? x : -x;
}

static uint32_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

// bf16 by the definition of round to nearest even on the bit pattern (a
// different formulation from the kernel's add-and-shift): keep the top 16
// bits, round up when the dropped 16 are over half, or exactly half and the
// kept part is odd. NaN is checked separately.
static uint16_t bf16_expected(float x) {
    uint32_t u = float_bits(x);
    uint32_t kept = u >> 16, dropped = u & 0xFFFFu;
    if (dropped > 0x8000u || (dropped == 0x8000u && (kept & 1u))) kept++;
    return (uint16_t)kept;
}

// 1 when b is the bf16 of x; NaN must give a NaN of the same sign.
static int bf16_matches(float x, uint16_t b) {
    if (isnan(x)) return (b & 0x7F80u) == 0x7F80u && (b & 0x7Fu) && (b >> 15) == (float_bits(x) >> 31);
    return b == bf16_expected(x);
}

// One tensor's optimizer state, (n) each.
typedef struct State {
    float *w, *m, *v, *g;
    int64_t n;
} State;

// Each array on a 64-byte boundary, as the host store lays them out, so
// that the streaming kernel's aligned path runs (test_zero_grads also
// offsets one array to take the plain path).
static State state_alloc(int64_t n) {
    size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
    State s = {aligned_alloc(64, bytes), aligned_alloc(64, bytes), aligned_alloc(64, bytes), aligned_alloc(64, bytes),
               n};
    if (!s.w || !s.m || !s.v || !s.g) {
        printf("out of memory\n");
        exit(1);
    }
    return s;
}

static State state_random(int64_t n) {
    State s = state_alloc(n);
    for (int64_t i = 0; i < n; i++) {
        s.w[i] = rng_logscale(-4, 0);
        s.g[i] = rng_logscale(-6, 0);
        s.m[i] = rng_logscale(-6, -1);
        float r = rng_logscale(-6, -1);
        s.v[i] = r * r;
    }
    return s;
}

static State state_copy(const State *a) {
    State s = state_alloc(a->n);
    for (int64_t i = 0; i < a->n; i++) s.w[i] = a->w[i], s.m[i] = a->m[i], s.v[i] = a->v[i], s.g[i] = a->g[i];
    return s;
}

static void state_free(State *s) { free(s->w), free(s->m), free(s->v), free(s->g); }

// |a - b| within rel of scale, scale at least max(|a|, |b|), plus a floor
// far below any value the tests use.
static int close_rel(double a, double b, double scale, double rel) {
    double mag = fmax(scale, fmax(fabs(a), fabs(b)));
    return fabs(a - b) <= rel * mag + 1e-30;
}

// Compares the fast result f against the reference r, both stepped from the
// state before, old. The tolerance is 1e-6 relative to the magnitude of the
// terms each new value is summed from (old w after decay and the Adam update
// for w; beta1*m and (1-beta1)*gg for m): where the terms nearly cancel, the
// result is small but its float rounding is that of the terms, and no fp32
// kernel can do better than a few ulps of those.
static int compare_states(const char *label, const State *old, const State *f, const State *r, const AdamWStep *s,
                          int decay) {
    double lr = s->lr, b1 = s->beta1, b2 = s->beta2;
    double bc1 = 1.0 - pow(b1, (double)s->t), bc2 = 1.0 - pow(b2, (double)s->t);
    int64_t bad = 0;
    for (int64_t i = 0; i < f->n; i++) {
        double gg = (double)old->g[i] * s->grad_scale;
        double m_terms = fabs(b1 * old->m[i]) + fabs((1.0 - b1) * gg);
        double m_new = b1 * old->m[i] + (1.0 - b1) * gg;
        double v_new = b2 * old->v[i] + (1.0 - b2) * gg * gg;
        double w_terms = fabs(old->w[i] * (decay ? 1.0 - lr * s->weight_decay : 1.0)) +
                         fabs(lr * (m_new / bc1) / (sqrt(v_new / bc2) + s->eps));
        int ok = close_rel(f->w[i], r->w[i], w_terms, 1e-6) && close_rel(f->m[i], r->m[i], m_terms, 1e-6) &&
                 close_rel(f->v[i], r->v[i], 0.0, 1e-6);
        if (!ok && bad++ < 5)
            printf("  %s: element %lld: w %.9g vs ref %.9g, m %.9g vs %.9g, v %.9g vs %.9g\n", label, (long long)i,
                   f->w[i], r->w[i], f->m[i], r->m[i], f->v[i], r->v[i]);
    }
    if (bad) printf("  %s: %lld of %lld elements differ from the reference\n", label, (long long)bad, (long long)f->n);
    return bad == 0;
}

static int same_bits(const float *a, const float *b, int64_t n) {
    return n == 0 || memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

static const AdamWStep STEP_RANDOM =
    {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .t = 7, .grad_scale = 0.37f};

// The fast kernel against the reference on n random elements, with nthreads
// 1 and 3 (which must agree to the bit), with and without decay, and its bf16
// copy.
static void test_against_ref(int64_t n) {
    State old = state_random(n);
    for (int decay = 0; decay <= 1; decay++) {
        State ref = state_copy(&old), one = state_copy(&old), three = state_copy(&old);
        uint16_t *bf = malloc((size_t)n * sizeof *bf); // (n)
        if (!bf) exit(1);
        adamw_update_ref(ref.w, ref.m, ref.v, ref.g, n, &STEP_RANDOM, decay);
        adamw_update(one.w, one.m, one.v, one.g, NULL, n, &STEP_RANDOM, decay, 1);
        adamw_update(three.w, three.m, three.v, three.g, bf, n, &STEP_RANDOM, decay, 3);

        char label[96];
        snprintf(label, sizeof label, "n=%lld decay=%d nthreads=1", (long long)n, decay);
        if (!compare_states(label, &old, &one, &ref, &STEP_RANDOM, decay)) FAIL("%s", label);
        snprintf(label, sizeof label, "n=%lld decay=%d nthreads=3", (long long)n, decay);
        if (!compare_states(label, &old, &three, &ref, &STEP_RANDOM, decay)) FAIL("%s", label);
        if (!same_bits(one.w, three.w, n) || !same_bits(one.m, three.m, n) || !same_bits(one.v, three.v, n)) {
            snprintf(label, sizeof label, "n=%lld decay=%d: nthreads 1 and 3 differ in bits", (long long)n, decay);
            FAIL("%s", label);
        }
        if (!same_bits(old.g, one.g, n)) FAIL("adamw_update wrote to g");
        int64_t bad_bf = 0;
        for (int64_t i = 0; i < n; i++)
            if (!bf16_matches(three.w[i], bf[i]) && bad_bf++ < 5)
                printf("  bf16 of %.9g (0x%08x): got 0x%04x, expected 0x%04x\n", three.w[i], float_bits(three.w[i]),
                       bf[i], bf16_expected(three.w[i]));
        if (bad_bf) {
            snprintf(label, sizeof label, "n=%lld decay=%d: bf16_out is not w rounded", (long long)n, decay);
            FAIL("%s", label);
        }
        free(bf);
        state_free(&ref), state_free(&one), state_free(&three);
    }
    state_free(&old);
}

// Arrays that start one float past a cache line, with 3 threads, must give
// the same bits as the aligned single-threaded run (the thread ranges are
// placed by w's address).
static void test_misaligned(int64_t n) {
    State old = state_random(n + 1);
    State a = state_copy(&old), b = state_copy(&old);
    adamw_update(a.w + 1, a.m + 1, a.v + 1, a.g + 1, NULL, n, &STEP_RANDOM, 1, 1);
    adamw_update(b.w + 1, b.m + 1, b.v + 1, b.g + 1, NULL, n, &STEP_RANDOM, 1, 3);
    if (!same_bits(a.w, b.w, n + 1) || !same_bits(a.m, b.m, n + 1) || !same_bits(a.v, b.v, n + 1))
        FAIL("misaligned arrays: nthreads 1 and 3 differ");
    if (a.w[0] != old.w[0] || a.m[0] != old.m[0] || a.v[0] != old.v[0])
        FAIL("misaligned arrays: the element before the range was written");
    state_free(&old), state_free(&a), state_free(&b);
}

// One step worked by hand. Values exactly representable in binary, so the
// only rounding in the expected numbers is the square root.
//   lr 0.25, beta1 0.75, beta2 0.875, eps 0.0625, weight_decay 0.5, t 2, grad_scale 0.5
//   bc1 = 1 - 0.75^2 = 0.4375          bc2 = 1 - 0.875^2 = 0.234375
//   element 0: w 1, m 0.5, v 0.25, g 2     -> gg 1
//     m = 0.75*0.5 + 0.25*1 = 0.625       v = 0.875*0.25 + 0.125*1 = 0.34375
//     mhat = 0.625/0.4375 = 1.428571428571429   vhat = 0.34375/0.234375 = 1.466666666666667
//     sqrt(vhat) = 1.211060141638997      update = 0.25*mhat/(1.211060141638997+0.0625) = 0.2804287331756751
//     w = 1 - 0.25*0.5*1 - update = 0.5945712668243249   (no decay: 0.7195712668243249)
//   element 1: w -2, m -0.25, v 0.0625, g 0.5  -> gg 0.25
//     m = -0.1875 + 0.0625 = -0.125        v = 0.0546875 + 0.0078125 = 0.0625
//     mhat = -0.2857142857142857  vhat = 0.2666666666666667  sqrt = 0.5163977794943222
//     update = 0.25*mhat/(0.5163977794943222+0.0625) = -0.1233871919338948
//     w = -2 + 0.25 - update = -1.626612808066105   (no decay: -1.876612808066105)
//   element 2: w 0.125, m 0, v 0, g 0 -> m 0, v 0, update 0
//     w = 0.125 - 0.25*0.5*0.125 = 0.109375   (no decay: 0.125)
static void test_hand_step(void) {
    const AdamWStep s = {.lr = 0.25f,
                         .beta1 = 0.75f,
                         .beta2 = 0.875f,
                         .eps = 0.0625f,
                         .weight_decay = 0.5f,
                         .t = 2,
                         .grad_scale = 0.5f};
    const double m_want[3] = {0.625, -0.125, 0.0};
    const double v_want[3] = {0.34375, 0.0625, 0.0};
    const double w_want[2][3] = {{0.7195712668243249, -1.876612808066105, 0.125},
                                 {0.5945712668243249, -1.626612808066105, 0.109375}};
    for (int decay = 0; decay <= 1; decay++) {
        for (int ref = 0; ref <= 1; ref++) {
            float w[3] = {1.0f, -2.0f, 0.125f}, m[3] = {0.5f, -0.25f, 0.0f}, v[3] = {0.25f, 0.0625f, 0.0f};
            float g[3] = {2.0f, 0.5f, 0.0f};
            uint16_t bf[3];
            if (ref) adamw_update_ref(w, m, v, g, 3, &s, decay);
            else adamw_update(w, m, v, g, bf, 3, &s, decay, 2);
            for (int i = 0; i < 3; i++) {
                if (!close_rel(w[i], w_want[decay][i], 0.0, 1e-6) || !close_rel(m[i], m_want[i], 0.0, 1e-6) ||
                    !close_rel(v[i], v_want[i], 0.0, 1e-6)) {
                    printf("  hand step (%s, decay=%d) element %d: w %.9g m %.9g v %.9g, expected %.9g %.9g %.9g\n",
                           ref ? "reference" : "fast", decay, i, w[i], m[i], v[i], w_want[decay][i], m_want[i],
                           v_want[i]);
                    FAIL("hand-computed step");
                }
                if (!ref && !bf16_matches(w[i], bf[i])) FAIL("hand-computed step: bf16_out");
            }
        }
    }
}

// bf16_out on chosen bit patterns: with lr 0 the update leaves w as it is,
// so bf16_out is the rounding of exactly these values.
static void test_bf16_rounding(void) {
    const uint32_t patterns[] = {
        0x3F800000u, // 1.0: exact
        0x3F808000u, // halfway, kept part even: stays 0x3F80
        0x3F818000u, // halfway, kept part odd: up to 0x3F82
        0x3F808001u, // just over half: up
        0x3F807FFFu, // just under half: down
        0xBF818000u, // negative halfway, odd: up in magnitude to 0xBF82
        0x7F7FFFFFu, // largest float: rounds to infinity
        0x7F800000u, // infinity
        0x80000000u, // -0
        0x00000001u, // smallest subnormal: to +0
        0x7FC00001u, // quiet NaN
        0xFF800001u, // signalling NaN, negative: must stay a NaN
    };
    enum { NPAT = sizeof patterns / sizeof patterns[0] };
    const AdamWStep s =
        {.lr = 0.0f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f, .t = 1, .grad_scale = 1.0f};
    float w[NPAT], m[NPAT] = {0}, v[NPAT] = {0}, g[NPAT] = {0};
    uint16_t bf[NPAT];
    for (int i = 0; i < NPAT; i++) memcpy(&w[i], &patterns[i], sizeof w[i]);
    adamw_update(w, m, v, g, bf, NPAT, &s, 0, 1);
    const uint16_t want[NPAT - 2] = {0x3F80, 0x3F80, 0x3F82, 0x3F81, 0x3F80, 0xBF82, 0x7F80, 0x7F80, 0x8000, 0x0000};
    for (int i = 0; i < NPAT; i++) {
        int ok = i < NPAT - 2 ? bf[i] == want[i] && bf16_matches(w[i], bf[i]) : bf16_matches(w[i], bf[i]);
        if (!ok) {
            printf("  bf16 of bits 0x%08x: got 0x%04x\n", patterns[i], bf[i]);
            FAIL("bf16 rounding of a chosen value");
        }
    }
}

// adamw_sq_norm: the same bits for nthreads 1, 2 and 5, and within 1e-12
// relative of a plain double loop.
static void test_sq_norm(int64_t n) {
    float *g = malloc((size_t)(n ? n : 1) * sizeof *g); // (n)
    if (!g) exit(1);
    for (int64_t i = 0; i < n; i++) g[i] = rng_logscale(-8, 1);
    double plain = 0.0;
    for (int64_t i = 0; i < n; i++) plain += (double)g[i] * (double)g[i];
    double one = adamw_sq_norm(g, n, 1), two = adamw_sq_norm(g, n, 2), five = adamw_sq_norm(g, n, 5);
    char label[128];
    if (memcmp(&one, &two, sizeof one) || memcmp(&one, &five, sizeof one)) {
        snprintf(label, sizeof label, "sq_norm n=%lld: %.17g %.17g %.17g for nthreads 1, 2, 5", (long long)n, one, two,
                 five);
        FAIL("%s", label);
    }
    if (!close_rel(one, plain, 0.0, 1e-12)) {
        snprintf(label, sizeof label, "sq_norm n=%lld: %.17g, a plain loop gives %.17g", (long long)n, one, plain);
        FAIL("%s", label);
    }
    free(g);
}

// The gradients' add, threaded, against its plain loop and against a hand
// sum in double: bit for bit, f32 and bf16, for every thread count.
static void test_grads_accumulate(int64_t n) {
    float *g0 = malloc((size_t)(n + 1) * sizeof *g0), *g = malloc((size_t)(n + 1) * sizeof *g), // (n) accumulators
                                                          *ref = malloc((size_t)(n + 1) * sizeof *ref),
          *src = malloc((size_t)(n + 1) * sizeof *src);        // (n)
    uint16_t *src16 = malloc((size_t)(n + 1) * sizeof *src16); // (n)
    for (int64_t i = 0; i < n; i++) {
        g0[i] = rng_logscale(-8, 4);
        src[i] = rng_logscale(-8, 4);
        src16[i] = bf16_expected(rng_logscale(-8, 4));
    }
    for (int bf16 = 0; bf16 < 2; bf16++) {
        memcpy(ref, g0, (size_t)n * sizeof *g0);
        grads_accumulate_ref(ref, bf16 ? (const void *)src16 : (const void *)src, n, bf16);
        int64_t off = 0; // the plain loop is the sum a float add makes
        for (int64_t i = 0; i < n && !off; i++) {
            uint32_t b = (uint32_t)src16[i] << 16;
            float x;
            memcpy(&x, &b, 4);
            if (ref[i] != g0[i] + (bf16 ? x : src[i])) off = i + 1;
        }
        if (off) FAIL("grads_accumulate_ref: an element is not its float sum");
        for (int threads = 1; threads <= 9; threads += 2) {
            memcpy(g, g0, (size_t)n * sizeof *g0);
            g[n] = -1.0f; // past the end: untouched
            grads_accumulate(g, bf16 ? (const void *)src16 : (const void *)src, n, bf16, threads);
            if (!same_bits(g, ref, n) || g[n] != -1.0f) {
                char what[96];
                snprintf(what, sizeof what, "grads_accumulate n %lld, %s, %d threads", (long long)n,
                         bf16 ? "bf16" : "f32", threads);
                FAIL("%s", what);
            }
        }
    }
    free(g0), free(g), free(ref), free(src), free(src16);
}

// ADAMW_ZERO_GRADS: w, m, v and the bf16 copy have the bits of the update
// without it, for 1, 2 and 3 threads, aligned (the streaming path), one
// float past a line (every array alike) and with m one float off w (the
// plain path); g is exactly +0 over [0, n) and untouched past it.
static void test_zero_grads(int64_t n) {
    State old = state_random(n + 2);
    for (int shift = 0; shift < 3; shift++) { // 0 aligned, 1 all one float on, 2 m alone one float on
        int64_t a = shift == 1, am = shift ? 1 : 0;
        State want = state_copy(&old);
        uint16_t *bw = malloc((size_t)(n + 2) * 2), *bz = malloc((size_t)(n + 2) * 2); // (n + 2)
        if (!bw || !bz) exit(1);
        adamw_update(want.w + a, want.m + am, want.v + a, want.g + a, bw + a, n, &STEP_RANDOM, ADAMW_DECAY, 1);
        for (int threads = 1; threads <= 3; threads++) {
            State got = state_copy(&old);
            adamw_update(got.w + a, got.m + am, got.v + a, got.g + a, bz + a, n, &STEP_RANDOM,
                         ADAMW_DECAY | ADAMW_ZERO_GRADS, threads);
            int zeroed = 1;
            for (int64_t i = 0; i < n; i++) zeroed &= float_bits(got.g[a + i]) == 0;
            char what[128];
            snprintf(what, sizeof what, "zeroing the gradients, n %lld, shift %d, %d threads", (long long)n, shift,
                     threads);
            if (!same_bits(got.w, want.w, n + 2) || !same_bits(got.m, want.m, n + 2) ||
                !same_bits(got.v, want.v, n + 2) || memcmp(bw + a, bz + a, (size_t)n * 2) || !zeroed ||
                !same_bits(got.g + a + n, old.g + a + n, 2 - a) || (a && got.g[0] != old.g[0]))
                FAIL("%s", what);
            state_free(&got);
        }
        free(bw), free(bz);
        state_free(&want);
    }
    state_free(&old);
}

// bf16 gradients (adamw_update_bf16_grads, the host store's layers' with one
// micro-batch a step): w, m, v and the bf16 copy have the bits of
// adamw_update on the gradients widened to fp32, for 1, 2 and 3 threads,
// aligned (the streaming path), one element past a line (every array) and
// with g one element off w (the plain path); g is only read; the update is
// within the reference's tolerance of its plain reference
// (adamw_update_bf16_grads_ref); adamw_sq_norm_bf16 has adamw_sq_norm's bits
// of the widened values and is near its plain reference; the first touch
// zeroes exactly [0, n) of the bf16 gradients.
static void test_bf16_grads(int64_t n) {
    State old = state_random(n + 2);
    uint16_t *g16 = malloc((size_t)(n + 2) * 2), *g16_old = malloc((size_t)(n + 2) * 2); // (n + 2)
    if (!g16 || !g16_old) exit(1);
    for (int64_t i = 0; i < n + 2; i++) {
        g16[i] = bf16_expected(old.g[i]);
        uint32_t b = (uint32_t)g16[i] << 16;
        memcpy(&old.g[i], &b, 4); // the fp32 accumulator holds the bf16 value, as 0 + x leaves it
    }
    memcpy(g16_old, g16, (size_t)(n + 2) * 2);
    for (int shift = 0; shift < 3; shift++) { // 0 aligned, 1 all one element on, 2 g alone one element on
        int64_t a = shift == 1, ag = shift ? 1 : 0;
        State want = state_copy(&old);
        uint16_t *bw = malloc((size_t)(n + 2) * 2), *bz = malloc((size_t)(n + 2) * 2); // (n + 2)
        if (!bw || !bz) exit(1);
        adamw_update(want.w + a, want.m + a, want.v + a, want.g + ag, bw + a, n, &STEP_RANDOM, ADAMW_DECAY, 1);
        for (int threads = 1; threads <= 3; threads++) {
            State got = state_copy(&old);
            adamw_update_bf16_grads(got.w + a, got.m + a, got.v + a, g16 + ag, bz + a, n, &STEP_RANDOM, ADAMW_DECAY,
                                    threads);
            char what[128];
            snprintf(what, sizeof what, "bf16 gradients, n %lld, shift %d, %d threads", (long long)n, shift, threads);
            if (!same_bits(got.w, want.w, n + 2) || !same_bits(got.m, want.m, n + 2) ||
                !same_bits(got.v, want.v, n + 2) || memcmp(bw + a, bz + a, (size_t)n * 2) ||
                memcmp(g16, g16_old, (size_t)(n + 2) * 2))
                FAIL("%s", what);
            state_free(&got);
        }
        free(bw), free(bz);
        state_free(&want);
    }
    State ref = state_copy(&old), fast = state_copy(&old);
    adamw_update_bf16_grads_ref(ref.w, ref.m, ref.v, g16, n, &STEP_RANDOM, 1);
    adamw_update_bf16_grads(fast.w, fast.m, fast.v, g16, NULL, n, &STEP_RANDOM, 1, 3);
    fast.n = ref.n = n;
    if (!compare_states("bf16 gradients against their reference", &old, &fast, &ref, &STEP_RANDOM, 1))
        FAIL("bf16 gradients against their reference");
    double f32 = adamw_sq_norm(old.g, n, 1), one = adamw_sq_norm_bf16(g16, n, 1), five = adamw_sq_norm_bf16(g16, n, 5);
    if (memcmp(&f32, &one, sizeof one) || memcmp(&f32, &five, sizeof five))
        FAIL("sq_norm of bf16 gradients: other bits");
    if (!close_rel(one, adamw_sq_norm_ref(NULL, g16, n), 0.0, 1e-12) ||
        !close_rel(adamw_sq_norm(old.g, n, 2), adamw_sq_norm_ref(old.g, NULL, n), 0.0, 1e-12))
        FAIL("sq_norm against its plain reference");
    memset(g16, 0x5a, (size_t)(n + 2) * 2);
    adamw_first_touch(NULL, NULL, NULL, NULL, g16, NULL, n, 3);
    int zeroed = g16[n] == 0x5a5a;
    for (int64_t i = 0; i < n; i++) zeroed &= g16[i] == 0;
    if (!zeroed) FAIL("first touch of bf16 gradients");
    state_free(&ref), state_free(&fast);
    free(g16), free(g16_old);
    state_free(&old);
}

// adamw_first_touch zeroes exactly [0, n) of each array it is given, for
// any thread count, and leaves alone what it is not given.
static void test_first_touch(int64_t n) {
    for (int threads = 1; threads <= 4; threads += 3) {
        State s = state_random(n + 1);
        uint16_t *b = malloc((size_t)(n + 1) * 2); // (n + 1)
        if (!b) exit(1);
        memset(b, 0x5a, (size_t)(n + 1) * 2);
        float keep = s.m[0];
        adamw_first_touch(s.w, NULL, s.v, s.g, NULL, b, n, threads);
        int ok = s.m[0] == keep && b[n] == 0x5a5a;
        for (int64_t i = 0; i < n; i++) ok &= s.w[i] == 0 && s.v[i] == 0 && s.g[i] == 0 && b[i] == 0;
        ok &= s.w[n] != 0 || s.v[n] != 0;
        if (!ok) FAIL("%s", threads == 1 ? "first touch, 1 thread" : "first touch, 4 threads");
        free(b);
        state_free(&s);
    }
}

// Two callers of the pool at once (as the host engine's AdamW and a GPU
// copy-out engine's adds are): each one's updates, 3 threads, 20 times over,
// give the bits one thread gives; neither waits forever for the other.
typedef struct Caller {
    State s;
    int64_t n;
} Caller;

static void *caller_main(void *arg) {
    Caller *c = arg;
    for (int r = 0; r < 20; r++) adamw_update(c->s.w, c->s.m, c->s.v, c->s.g, NULL, c->n, &STEP_RANDOM, ADAMW_DECAY, 3);
    return NULL;
}

static void test_concurrent_callers(int64_t n) {
    State old = state_random(n);
    Caller a = {state_copy(&old), n}, b = {state_copy(&old), n}, want = {state_copy(&old), n};
    for (int r = 0; r < 20; r++)
        adamw_update(want.s.w, want.s.m, want.s.v, want.s.g, NULL, n, &STEP_RANDOM, ADAMW_DECAY, 1);
    pthread_t tid;
    if (pthread_create(&tid, NULL, caller_main, &a) != 0) exit(1);
    caller_main(&b);
    pthread_join(tid, NULL);
    if (!same_bits(a.s.w, want.s.w, n) || !same_bits(b.s.w, want.s.w, n) || !same_bits(a.s.v, want.s.v, n) ||
        !same_bits(b.s.m, want.s.m, n))
        FAIL("two concurrent callers of the pool: not the bits of one thread");
    state_free(&old), state_free(&a.s), state_free(&b.s), state_free(&want.s);
}

// The pool's fallback: in a child process whose address space cannot hold
// another thread's stack (RLIMIT_AS, which binds root too), no worker can
// start; pool_run then runs every job on the caller and says so (the
// count), and the update gives the bits of one thread. First in main: a
// child forked after workers started would inherit a pool without threads.
static int count_job(void *arg) { return __atomic_add_fetch((int *)arg, 1, __ATOMIC_RELAXED); }
static void *count_thread(void *arg) {
    count_job(*(int **)arg);
    return NULL;
}

static void test_no_threads(int64_t n) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        State old = state_random(n), want = state_copy(&old), got = state_copy(&old);
        adamw_update(want.w, want.m, want.v, want.g, NULL, n, &STEP_RANDOM, ADAMW_DECAY, 1);
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1) _exit(3);
        fclose(f);
        struct rlimit lim = {(rlim_t)pages * 4096 + (1 << 20), (rlim_t)pages * 4096 + (1 << 20)};
        if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(3);
        int count = 0, *jobs[4] = {&count, &count, &count, &count};
        int here = pool_run(count_thread, jobs, sizeof jobs[0], 4);
        adamw_update(got.w, got.m, got.v, got.g, NULL, n, &STEP_RANDOM, ADAMW_DECAY, 4);
        _exit(here == 3 && count == 4 && same_bits(got.w, want.w, n) && same_bits(got.v, want.v, n) ? 0 : 4);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        FAIL("no worker thread can start: the jobs do not all run on the caller with the bits of one thread");
}

// adamw_update_parts: parts of odd sizes with every flag, fp32 and bf16
// gradients, the bf16 copy or none, updated as one job on 1 to 4 threads,
// give the bits of one adamw_update (or adamw_update_bf16_grads) a part.
static void test_parts(void) {
    enum { NPARTS = 5 };
    static const int64_t sizes[NPARTS] = {1, 300001, 17, 700003, 5};
    for (int nt = 1; nt <= 4; nt++) {
        State a[NPARTS], b[NPARTS];
        uint16_t *gb[NPARTS], *out_a[NPARTS], *out_b[NPARTS];
        AdamWPart parts[NPARTS];
        for (int k = 0; k < NPARTS; k++) {
            a[k] = state_random(sizes[k]), b[k] = state_copy(&a[k]);
            gb[k] = malloc((size_t)sizes[k] * 2), out_a[k] = malloc((size_t)sizes[k] * 2);
            out_b[k] = malloc((size_t)sizes[k] * 2);
            for (int64_t i = 0; i < sizes[k]; i++) gb[k][i] = (uint16_t)(float_bits(a[k].g[i]) >> 16);
            int flags = (k % 2 ? ADAMW_DECAY : 0) | (k % 3 ? ADAMW_ZERO_GRADS : 0), bf = k == 3, copy = k != 2;
            if (bf)
                adamw_update_bf16_grads(a[k].w, a[k].m, a[k].v, gb[k], copy ? out_a[k] : NULL, sizes[k], &STEP_RANDOM,
                                        flags & ADAMW_DECAY, 1);
            else adamw_update(a[k].w, a[k].m, a[k].v, a[k].g, copy ? out_a[k] : NULL, sizes[k], &STEP_RANDOM, flags, 1);
            parts[k] = (AdamWPart){b[k].w,
                                   b[k].m,
                                   b[k].v,
                                   bf ? NULL : b[k].g,
                                   bf ? gb[k] : NULL,
                                   copy ? out_b[k] : NULL,
                                   sizes[k],
                                   bf ? flags & ADAMW_DECAY : flags};
        }
        adamw_update_parts(parts, NPARTS, &STEP_RANDOM, nt);
        for (int k = 0; k < NPARTS; k++) {
            int64_t n = sizes[k];
            CHECK(same_bits(a[k].w, b[k].w, n) && same_bits(a[k].m, b[k].m, n) && same_bits(a[k].v, b[k].v, n) &&
                      same_bits(a[k].g, b[k].g, n) && (k == 2 || !memcmp(out_a[k], out_b[k], (size_t)n * 2)),
                  "adamw_update_parts on %d threads: part %d (%lld elements) differs from adamw_update's", nt, k,
                  (long long)n);
            state_free(&a[k]), state_free(&b[k]), free(gb[k]), free(out_a[k]), free(out_b[k]);
        }
    }
}

int main(void) {
    test_no_threads(1000003); // before anything starts the pool
    test_hand_step();
    test_bf16_rounding();
    int64_t sizes[] = {1, 7, 1000003};
    for (int i = 0; i < 3; i++) test_against_ref(sizes[i]);
    test_misaligned(1000003);
    // none, tiny, one chunk and a bit, several chunks for 5 threads with a tail
    int64_t norm_sizes[] = {0, 1, 7, ADAMW_NORM_CHUNK + 1, 23 * ADAMW_NORM_CHUNK + 3, 1000003};
    for (int i = 0; i < 6; i++) test_sq_norm(norm_sizes[i]);
    if (adamw_sq_norm(NULL, 0, 4) != 0.0) FAIL("sq_norm of nothing is not 0");
    int64_t add_sizes[] = {0, 1, 17, 1000003, 4 * 128 * 1024 + 5}; // several threads' worth, with a tail
    for (int i = 0; i < 5; i++) test_grads_accumulate(add_sizes[i]);
    adamw_update(NULL, NULL, NULL, NULL, NULL, 0, &STEP_RANDOM, 1, 4); // n 0 touches nothing
    int64_t zero_sizes[] = {1, 300, 1000003};
    for (int i = 0; i < 3; i++) test_zero_grads(zero_sizes[i]);
    test_first_touch(1000003);
    int64_t bf16_sizes[] = {1, 300, 1000003};
    for (int i = 0; i < 3; i++) test_bf16_grads(bf16_sizes[i]);
    test_concurrent_callers(1000003);
    test_parts();
    if (check_failures) return check_summary("test_adamw");
    printf("test_adamw: all checks passed\n");
    return 0;
}
