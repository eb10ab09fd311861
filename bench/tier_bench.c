// tier_bench.c: the NVMe tier (runtime/store/tier.c) against a plain sequential
// dd-style copy of the same bytes on the same disk, and AdamW through the
// tier against AdamW in RAM, all measured in the same run.
//
//     tier_bench [--dir DIR] [--mb MB] [--layers L] [--reps R] [--threads T]
//
// The file holds L records of MB / L MiB (the m and v of MB / L / 8 Mi
// parameters each). Per repetition, in turn:
//   dd write   one file written front to back in 1 MiB write(2)s with
//              O_DIRECT from one aligned buffer (dd bs=1M oflag=direct)
//   dd read    the same file read back the same way (dd bs=1M iflag=direct)
//   tier write every record through tier_acquire_new and tier_release
//              (dirty), then tier_drain: what the tier's io_uring writes
//   tier read  every record through tier_acquire and tier_release (clean):
//              reads with the next record prefetched
//   adamw ram  adamw_update over every layer, w, m, v, g in RAM
//   adamw tier the same with m and v in the tier, layer after layer as
//              store_update runs them: read i+1 while updating i and
//              writing i-1 back
// Each rate printed is the median of R; each ratio the median of the R
// per-repetition ratios. Targets: tier/dd 0.8 or more each way; AdamW
// through the tier is bound by the disk, so its ratio to RAM says how much
// of the disk's rate the optimizer keeps, reported, not a target.
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/store/adamw.h"
#include "runtime/store/tier.h"

enum { DD_BLOCK = 1 << 20, MAX_REPS = 64 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, const char *why) {
    fprintf(stderr, "tier_bench: %s: %s\n", what, why);
    exit(1);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// dd: bytes of path written (write) or read front to back in DD_BLOCK
// transfers with O_DIRECT. Returns the seconds.
static double dd(const char *path, int64_t bytes, int write_it, char *buf) {
    int fd = open(path, write_it ? O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT : O_RDONLY | O_DIRECT, 0600);
    if (fd < 0) die(path, strerror(errno));
    double t0 = now_s();
    for (int64_t off = 0; off < bytes; off += DD_BLOCK) {
        ssize_t n = write_it ? write(fd, buf, DD_BLOCK) : read(fd, buf, DD_BLOCK);
        if (n != DD_BLOCK) die(path, n < 0 ? strerror(errno) : "short transfer");
    }
    if (write_it && fsync(fd) != 0) die(path, strerror(errno));
    double dt = now_s() - t0;
    close(fd);
    return dt;
}

static void check(int ok, const char *err) {
    if (!ok) die("tier", err);
}

int main(int argc, char **argv) {
    const char *dir = ".";
    int64_t mb = 1024, layers = 16;
    int reps = 3, threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--dir") && v) dir = v, i++;
        else if (!strcmp(a, "--mb") && v) mb = atoll(v), i++;
        else if (!strcmp(a, "--layers") && v) layers = atoll(v), i++;
        else if (!strcmp(a, "--reps") && v) reps = atoi(v), i++;
        else if (!strcmp(a, "--threads") && v) threads = atoi(v), i++;
        else {
            fprintf(stderr, "usage: tier_bench [--dir DIR] [--mb MB] [--layers L] [--reps R] [--threads T]\n");
            return 2;
        }
    }
    if (mb < 1 || layers < 1 || reps < 1 || reps > MAX_REPS || threads < 1 || (mb << 20) / layers / 8 < 1024) {
        fprintf(stderr,
                "tier_bench: --mb, --layers, --reps (1..%d), --threads must be positive, and each layer "
                "at least 8 KiB\n",
                MAX_REPS);
        return 2;
    }
    int64_t n = (mb << 20) / layers / 8 / 1024 * 1024; // parameters a layer: m and v, 4096-aligned each
    char err[512], ddpath[4096];
    snprintf(ddpath, sizeof ddpath, "%s/tier_bench.dd", dir);
    Tier *t = tier_open(dir, layers, n, 2, err, sizeof err);
    check(t != NULL, err);
    int64_t bytes = tier_bytes(t);
    char *buf = aligned_alloc(TIER_ALIGN, DD_BLOCK);
    float *w = aligned_alloc(64, (size_t)(layers * n) * 4), *g = aligned_alloc(64, (size_t)(layers * n) * 4); // (L*n)
    float *m = aligned_alloc(64, (size_t)(layers * n) * 4), *v = aligned_alloc(64, (size_t)(layers * n) * 4); // (L*n)
    if (!buf || !w || !g || !m || !v) die("memory", "cannot allocate the buffers");
    memset(buf, 0x5a, DD_BLOCK);
    for (int64_t i = 0; i < layers * n; i++)
        w[i] = 0.01f * (float)(i % 97), g[i] = 1e-3f * (float)(i % 89), m[i] = v[i] = 0;
    AdamWStep st =
        {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .t = 1, .grad_scale = 1};

    double r_ddw[MAX_REPS], r_ddr[MAX_REPS], r_tw[MAX_REPS], r_tr[MAX_REPS], r_ar[MAX_REPS], r_at[MAX_REPS];
    double q_w[MAX_REPS], q_r[MAX_REPS], q_a[MAX_REPS];
    for (int k = 0; k < reps; k++) {
        double ddw = dd(ddpath, bytes, 1, buf), ddr = dd(ddpath, bytes, 0, buf);

        double t0 = now_s();
        for (int64_t l = 0; l < layers; l++) {
            float *rec = tier_acquire_new(t, l, err, sizeof err);
            check(rec != NULL, err);
            memset(rec, 0, (size_t)(2 * tier_stride(t)) * 4);
            check(tier_release(t, l, 1, err, sizeof err) == 0, err);
        }
        check(tier_drain(t, err, sizeof err) == 0, err);
        double tw = now_s() - t0;

        t0 = now_s();
        for (int64_t l = 0; l < layers; l++) {
            check(tier_acquire(t, l, err, sizeof err) != NULL, err);
            check(tier_release(t, l, 0, err, sizeof err) == 0, err);
        }
        check(tier_drain(t, err, sizeof err) == 0, err);
        double tr = now_s() - t0;

        t0 = now_s();
        for (int64_t l = 0; l < layers; l++)
            adamw_update(w + l * n, m + l * n, v + l * n, g + l * n, NULL, n, &st, 1, threads);
        double ar = now_s() - t0;

        t0 = now_s();
        for (int64_t l = 0; l < layers; l++) {
            float *rec = tier_acquire(t, l, err, sizeof err);
            check(rec != NULL, err);
            adamw_update(w + l * n, rec, rec + tier_stride(t), g + l * n, NULL, n, &st, 1, threads);
            check(tier_release(t, l, 1, err, sizeof err) == 0, err);
        }
        check(tier_drain(t, err, sizeof err) == 0, err);
        double at = now_s() - t0;

        r_ddw[k] = (double)bytes / ddw / 1e9, r_ddr[k] = (double)bytes / ddr / 1e9;
        r_tw[k] = (double)bytes / tw / 1e9, r_tr[k] = (double)bytes / tr / 1e9;
        r_ar[k] = (double)(layers * n) / ar / 1e9, r_at[k] = (double)(layers * n) / at / 1e9;
        q_w[k] = ddw / tw, q_r[k] = ddr / tr, q_a[k] = ar / at;
    }
    unlink(ddpath);
    tier_close(t);
    printf("tier_bench: %s, %.1f MB in %lld records of %.1f MB, %d reps, %d threads\n", dir, (double)bytes / 1e6,
           (long long)layers, (double)bytes / (double)layers / 1e6, reps, threads);
    printf("write: tier %.3f GB/s  dd %.3f GB/s  tier/dd %.2f\n", median(r_tw, reps), median(r_ddw, reps),
           median(q_w, reps));
    printf("read:  tier %.3f GB/s  dd %.3f GB/s  tier/dd %.2f\n", median(r_tr, reps), median(r_ddr, reps),
           median(q_r, reps));
    printf("adamw: tier %.4f Gparam/s  ram %.4f Gparam/s  tier/ram %.3f (the tier moves 16 B a parameter: %.2f GB/s)\n",
           median(r_at, reps), median(r_ar, reps), median(q_a, reps), 16 * median(r_at, reps));
    free(buf), free(w), free(g), free(m), free(v);
    return 0;
}
