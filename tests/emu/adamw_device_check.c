// adamw_device_check: the device AdamW (mt_adamw, compiler/emit/cuda/prelude.cuh)
// and the device's gradient adds and squared norm (mt_grads_add, mt_sq_norm_chunks)
// gives the host's bits (runtime/store/adamw.c, adamw_update and
// adamw_update_bf16_grads), and both keep the operation order written out
// here (order_ref).
//
//   adamw_device_check CXX EMU_DIR WORK_DIR
//
// 1. The prelude compiled for the emulation (tests/emu/cuda_emu.h) with
//    -ffp-contract=off; mt_adamw launched over 5003 elements (not a multiple
//    of the grid) on values whose exponents spread over 2^-30 .. 2^4, for
//    fp32 gradients (zeroed and not, with and without the bf16 copy) and bf16
//    gradients, with and without weight decay: w, m, v and the bf16 copy
//    equal the host kernel's and order_ref's bit for bit, and the fp32
//    gradients are zero after a zeroing launch. Outputs the kernel must write
//    start as NaN (the bf16 copy) so an element it skips fails.
// 2. The values can tell orders apart: each of four reorderings of
//    order_ref (step * (m / denom); beta1 * m + (1 - beta1) * gg as one fma;
//    sqrt(v * inv_sqrt_bc2^2); the decay applied after the step) must differ
//    from it in at least one element, or the check in 1 proves nothing.
// 3. NVRTC for sm_90: mt_adamw's PTX has no fma (the intrinsics are not
//    contracted), and a copy of it written with plain * and + does have one
//    (NVRTC contracts by default), so the PTX test can fail.
// 4. The placed segments' other device kernels: mt_grads_add and
//    mt_sq_norm_chunks against the host's, bit for bit (check_grads_and_norm).
// Exit status 0 only when every check passed.
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "compiler/emit/cuda/sources.h"
#include "compiler/emit/nvrtc.h"
#include "runtime/store/adamw.h"
#include "tests/check.h"

typedef int (*LaunchFn)(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block, size_t smem,
                        void **args);

enum { N = 5003, GRID = 7, THREADS = 128 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { // uniform in [0, 1)
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
// A value of random sign whose magnitude spreads over 2^lo .. 2^hi.
static float spread(int lo, int hi) {
    double mag = ldexp(1.0 + urand(), lo + (int)(urand() * (hi - lo)));
    return (float)(urand() < 0.5 ? -mag : mag);
}

// The prelude compiled with CXX for the emulation into WORK_DIR/adamw.so, with a table holding mt_adamw.
static LaunchFn build(const char *cxx, const char *emu_dir, const char *work_dir) {
    char cu[1024], so[1024], cmd[4096];
    snprintf(cu, sizeof cu, "%s/adamw.cu", work_dir);
    snprintf(so, sizeof so, "%s/adamw.so", work_dir);
    FILE *f = fopen(cu, "w");
    if (!f) {
        printf("FAIL cannot write %s\n", cu);
        return NULL;
    }
    fprintf(f,
            "#include \"cuda_emu.h\"\n%s\nMT_EMU_KERNELS_BEGIN\nMT_EMU_KERNEL(mt_adamw)\nMT_EMU_KERNEL(mt_grads_add)\n"
            "MT_EMU_KERNEL(mt_sq_norm_chunks)\nMT_EMU_KERNELS_END\n",
            mt_cuda_prelude);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s -x c++ -std=c++17 -O2 -ffp-contract=off -fPIC -shared -w -I'%s' '%s' -o '%s'", cxx,
             emu_dir, cu, so);
    if (system(cmd) != 0) {
        printf("FAIL the prelude does not compile for the emulation: %s\n", cmd);
        return NULL;
    }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    LaunchFn fn = h ? (LaunchFn)(uintptr_t)dlsym(h, "mt_emu_launch") : NULL;
    if (!fn) printf("FAIL cannot load %s: %s\n", so, dlerror());
    return fn;
}

// The order the host and the device must keep, written out one rounded
// operation a line (volatile: each result stored as a float). variant 0 is
// it; 1 to 4 are the reorderings the data must tell apart (see the top).
static void order_ref(float *w, float *m, float *v, float g, const AdamWConst *c, int variant) {
    volatile float gg = g * c->grad_scale;
    volatile float bm = c->beta1 * *m, gm = c->one_minus_beta1 * gg;
    volatile float mi = variant == 2 ? fmaf(c->beta1, *m, gm) : bm + gm;
    volatile float g2 = gg * gg;
    volatile float bv = c->beta2 * *v, gv = c->one_minus_beta2 * g2;
    volatile float vi = bv + gv;
    volatile float root = variant == 3 ? sqrtf(vi * (c->inv_sqrt_bc2 * c->inv_sqrt_bc2)) : sqrtf(vi) * c->inv_sqrt_bc2;
    volatile float denom = root + c->eps;
    volatile float num = c->step * mi;
    volatile float upd = variant == 1 ? c->step * (mi / denom) : num / denom;
    volatile float wd = *w * c->decay_mul;
    volatile float wi = variant == 4 ? (*w - upd) * c->decay_mul : wd - upd;
    *w = wi, *m = mi, *v = vi;
}

typedef struct State {
    float w[N], m[N], v[N], g[N]; // (N) each
    uint16_t gb[N], wb[N];        // (N) bf16 gradients, bf16 copy of w
} State;

static void fill(State *s) {
    for (int i = 0; i < N; i++) {
        s->w[i] = spread(-8, 1);
        s->m[i] = spread(-20, -4);
        s->v[i] = fabsf(spread(-30, -8));
        s->g[i] = spread(-14, 4);
        s->gb[i] = bf16_from_f32(s->g[i]);
    }
}

static int bits_equal(const void *a, const void *b, size_t bytes, const char *what, const char *name) {
    if (!memcmp(a, b, bytes)) return 1;
    printf("FAIL %s: %s differs from the host's bits\n", name, what);
    return 0;
}

// One case: the host kernel, the device kernel and order_ref from the same state.
static void check_case(LaunchFn fn, const AdamWStep *step, int decay, int bf16_grads, int zero, int copy) {
    static State init, host, dev, ref;
    char name[128];
    snprintf(name, sizeof name, "%s grads, decay %d, zeroed %d, bf16 copy %d", bf16_grads ? "bf16" : "fp32", decay,
             zero, copy);
    fill(&init);
    host = dev = ref = init;
    for (int i = 0; i < N; i++) host.wb[i] = dev.wb[i] = 0x7fc0; // NaN: an element the kernel skips shows
    AdamWConst c = adamw_constants(step, decay);
    int flags = (decay ? ADAMW_DECAY : 0) | (zero ? ADAMW_ZERO_GRADS : 0);
    if (bf16_grads) adamw_update_bf16_grads(host.w, host.m, host.v, host.gb, copy ? host.wb : NULL, N, step, flags, 1);
    else adamw_update(host.w, host.m, host.v, host.g, copy ? host.wb : NULL, N, step, flags, 1);
    float *dw = dev.w, *dm = dev.m, *dv = dev.v, *dg = bf16_grads ? NULL : dev.g;
    const uint16_t *dgb = bf16_grads ? dev.gb : NULL;
    uint16_t *dwb = copy ? dev.wb : NULL;
    long long n = N;
    int zero_grads = zero;
    void *args[] = {&dw, &dm, &dv, &dg, &dgb, &dwb, &n, &c, &zero_grads};
    if (!CHECK(fn("mt_adamw", GRID, 1, 1, THREADS, 0, args) == 0, "%s: mt_adamw did not launch", name)) return;
    for (int i = 0; i < N; i++)
        order_ref(&ref.w[i], &ref.m[i], &ref.v[i], bf16_grads ? f32_from_bf16(ref.gb[i]) : ref.g[i], &c, 0);
    int ok = bits_equal(dev.w, host.w, sizeof dev.w, "w", name) & bits_equal(dev.m, host.m, sizeof dev.m, "m", name) &
             bits_equal(dev.v, host.v, sizeof dev.v, "v", name) &
             bits_equal(ref.w, host.w, sizeof ref.w, "w (order_ref against the host)", name) &
             bits_equal(ref.m, host.m, sizeof ref.m, "m (order_ref against the host)", name) &
             bits_equal(ref.v, host.v, sizeof ref.v, "v (order_ref against the host)", name);
    if (copy) ok &= bits_equal(dev.wb, host.wb, sizeof dev.wb, "the bf16 copy", name);
    if (!bf16_grads) ok &= bits_equal(dev.g, host.g, sizeof dev.g, "the gradients after the update", name);
    if (zero && !bf16_grads)
        for (int i = 0; i < N && ok; i++) ok = CHECK(dev.g[i] == 0.0f, "%s: gradient %d not zeroed", name, i);
    CHECK(ok, "%s", name);
    if (ok) printf("ok   %s: w, m, v%s bit for bit\n", name, copy ? " and the bf16 copy" : "");
}

// 2: each reordering differs from order_ref somewhere on these values.
static void check_orders_differ(const AdamWStep *step) {
    static State init, a, b;
    fill(&init);
    AdamWConst c = adamw_constants(step, 1);
    for (int variant = 1; variant <= 4; variant++) {
        a = b = init;
        int differ = 0;
        for (int i = 0; i < N; i++) {
            order_ref(&a.w[i], &a.m[i], &a.v[i], a.g[i], &c, 0);
            order_ref(&b.w[i], &b.m[i], &b.v[i], b.g[i], &c, variant);
            differ += memcmp(&a.w[i], &b.w[i], 4) || memcmp(&a.m[i], &b.m[i], 4) || memcmp(&a.v[i], &b.v[i], 4);
        }
        printf("%s reordering %d changes %d of %d elements\n", differ ? "ok  " : "FAIL", variant, differ, N);
        CHECK(differ > 0, "reordering %d gives the same bits: the values cannot tell the orders apart", variant);
    }
}

// 4. The device's gradient adds and squared norm (the optimizer of a placed
// segment, runtime/backend/backend_cuda.c): mt_grads_add against
// grads_accumulate_ref (fp32 and bf16 sources, set and add), and
// mt_sq_norm_chunks' chunk sums added in order against adamw_sq_norm, over
// 3 chunks and a tail (ADAMW_NORM_CHUNK), bit for bit; the same sums in
// another order (adamw_sq_norm_ref: one running sum a chunk) must differ.
static void check_grads_and_norm(LaunchFn fn) {
    enum { NN = 3 * ADAMW_NORM_CHUNK + 12345 };
    static float g[NN], want[NN], got[NN], src[NN];
    static uint16_t srcb[NN];
    static double sums[4];
    for (int i = 0; i < NN; i++)
        g[i] = spread(-12, 3), src[i] = spread(-12, 3), srcb[i] = bf16_from_f32(spread(-12, 3));
    for (int bf = 0; bf < 2; bf++)
        for (int set = 0; set < 2; set++) {
            memcpy(want, g, sizeof g), memcpy(got, g, sizeof g);
            grads_accumulate_ref(want, bf ? (const void *)srcb : (const void *)src, NN,
                                 (bf ? GRADS_BF16 : 0) | (set ? GRADS_SET : 0));
            float *dg = got;
            const float *ds = bf ? NULL : src;
            const uint16_t *dsb = bf ? srcb : NULL;
            long long n = NN;
            void *args[] = {&dg, &ds, &dsb, &n, &set};
            CHECK(fn("mt_grads_add", 5, 1, 1, THREADS, 0, args) == 0, "mt_grads_add did not launch");
            int ok = CHECK(!memcmp(got, want, sizeof got), "mt_grads_add (%s, %s) differs from grads_accumulate_ref",
                           bf ? "bf16" : "fp32", set ? "set" : "add");
            if (ok)
                printf("ok   mt_grads_add, %s source, %s: grads_accumulate_ref's bits\n", bf ? "bf16" : "fp32",
                       set ? "set" : "added");
        }
    double *ds = sums;
    const float *dg = g;
    long long n = NN, chunk = ADAMW_NORM_CHUNK;
    void *args[] = {&ds, &dg, &n, &chunk};
    if (!CHECK(fn("mt_sq_norm_chunks", 1, 1, 1, 32, 0, args) == 0, "mt_sq_norm_chunks did not launch")) return;
    double total = 0.0, host = adamw_sq_norm(g, NN, 1), other = adamw_sq_norm_ref(g, NULL, NN);
    for (int k = 0; k < 4; k++) total += sums[k];
    CHECK(!memcmp(&total, &host, sizeof total), "mt_sq_norm_chunks: %.17g, the host's %.17g", total, host);
    CHECK(memcmp(&other, &host, sizeof other) != 0, "another order of additions gives the same double: the values "
                                                    "cannot tell orders apart");
    printf("%s mt_sq_norm_chunks: %.17g, the host's %.17g (another order: %.17g)\n",
           memcmp(&total, &host, sizeof total) ? "FAIL" : "ok  ", total, host, other);
}

// The body of `.entry NAME` in ptx (up to the next .entry or the end), as [*from, *to).
static int ptx_entry(const char *ptx, const char *name, const char **from, const char **to) {
    char key[128];
    snprintf(key, sizeof key, ".entry %s(", name);
    const char *p = strstr(ptx, key);
    if (!p) return 0;
    const char *q = strstr(p + 1, ".entry ");
    *from = p, *to = q ? q : p + strlen(p);
    return 1;
}
static int has_fma(const char *from, const char *to) {
    for (const char *p = from; p && p < to; p = strstr(p + 1, "fma."))
        if (!strncmp(p, "fma.", 4)) return 1;
    return 0;
}

// 3: the PTX of mt_adamw has no fma; the same update written with plain operators has.
static void check_nvrtc(void) {
    static const char plain[] =
        "extern \"C\" __global__ void plain_adamw(float *w, float *m, float *v, const float *g, float b1, float omb1,\n"
        "        float b2, float omb2, float step, float isq, float eps, float dm) {\n"
        "    int i = threadIdx.x;\n"
        "    float gg = g[i];\n"
        "    m[i] = b1 * m[i] + omb1 * gg;\n"
        "    v[i] = b2 * v[i] + omb2 * (gg * gg);\n"
        "    w[i] = w[i] * dm - step * m[i] / (sqrtf(v[i]) * isq + eps);\n"
        "}\n";
    size_t cap = mt_cuda_prelude_len + sizeof plain + 8;
    char *src = malloc(cap), err[4096];
    if (!CHECK(src != NULL, "out of memory")) return;
    snprintf(src, cap, "%s\n%s", mt_cuda_prelude, plain);
    CudaBinary bin;
    if (!CHECK(nvrtc_compile(src, "adamw.cu", "sm_90", NULL, 0, &bin, err, sizeof err) == 0,
               "NVRTC cannot compile the prelude for sm_90:\n%s", err)) {
        free(src);
        return;
    }
    const char *from, *to;
    if (CHECK(ptx_entry(bin.ptx, "mt_adamw", &from, &to), "no mt_adamw in the PTX")) {
        int fma = has_fma(from, to);
        printf("%s sm_90: mt_adamw's PTX %s\n", fma ? "FAIL" : "ok  ", fma ? "has an fma" : "has no fma");
        CHECK(!fma, "mt_adamw was contracted into a fused multiply-add");
    }
    if (CHECK(ptx_entry(bin.ptx, "plain_adamw", &from, &to), "no plain_adamw in the PTX")) {
        int fma = has_fma(from, to);
        printf("%s sm_90: the same update with plain operators %s\n", fma ? "ok  " : "FAIL",
               fma ? "has an fma (the check can fail)" : "has no fma (the check cannot fail)");
        CHECK(fma, "the PTX check cannot tell");
    }
    nvrtc_binary_free(&bin);
    free(src);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: adamw_device_check CXX EMU_DIR WORK_DIR\n");
        return 2;
    }
    LaunchFn fn = build(argv[1], argv[2], argv[3]);
    if (!fn) return 1;
    AdamWStep step =
        {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .t = 7, .grad_scale = 0.37f};
    for (int decay = 0; decay < 2; decay++) {
        check_case(fn, &step, decay, 0, 1, 1);
        check_case(fn, &step, decay, 0, 0, 0);
        check_case(fn, &step, decay, 1, 0, 1);
    }
    step.t = 1, step.grad_scale = 1.0f; // the first step: bias corrections at their largest
    check_case(fn, &step, 1, 0, 1, 0);
    step.t = 7, step.grad_scale = 0.37f;
    check_orders_differ(&step);
    check_grads_and_norm(fn);
    check_nvrtc();
    return check_summary("adamw_device_check");
}
