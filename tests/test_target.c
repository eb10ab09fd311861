// test_target.c: the target profiles (common/target.c). Every shipped
// profile in schedules/ loads and is sane; every bad profile in
// tests/targets/ is refused with the message its first line expects:
//
//     # expect: LINE: phrase     the error is "FILE:LINE: error: phrase..."
//     # expect: phrase           the error is "FILE: error: phrase..." (the whole file)
//
// Usage: test_target PROJECT_ROOT. Prints each failure; returns 1 on any.
#include "common/target.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

// Loads a profile that must load; 0 or -1.
static int load_ok(const char *name, Target *t) {
    char err[2048];
    memset(t, 0, sizeof *t);
    if (target_load(name, t, err, sizeof err) != 0) {
        FAIL("%s: refused: %s", name, err);
        return -1;
    }
    return 0;
}

// The checks every profile passes, real or test machine.
static void check_sane(const char *file, const Target *t) {
    const struct {
        const char *key;
        double v;
    } positive[] = {
        {"device_memory", t->device_memory},
        {"hbm_bandwidth", t->hbm_bandwidth},
        {"matrix_flops_f32", t->matrix_flops_f32},
        {"matrix_flops_bf16", t->matrix_flops_bf16},
        {"vector_flops", t->vector_flops},
        {"h2d_bandwidth", t->h2d_bandwidth},
        {"d2h_bandwidth", t->d2h_bandwidth},
        {"host_memory", t->host_memory},
        {"host_memory_bandwidth", t->host_memory_bandwidth},
        {"host_cores", t->host_cores},
        {"host_adamw_bandwidth", t->host_adamw_bandwidth},
        {"host_grads_add_bandwidth", t->host_grads_add_bandwidth},
        {"kernel_launch_s", t->kernel_launch_s},
        {"gemm_efficiency", t->gemm_efficiency},
        {"attention_tc_fraction", t->attention_tc_fraction},
        {"attention_fp32_fraction", t->attention_fp32_fraction},
    };
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++)
        CHECK(positive[i].v > 0, "%s: %s = %g, not positive", file, positive[i].key, positive[i].v);
    CHECK(t->gemm_efficiency <= 1, "%s: gemm_efficiency %g above 1", file, t->gemm_efficiency);
    // the CUDA-core kernel is no faster than the tensor-core one, which is no faster than the GEMMs
    CHECK(t->attention_fp32_fraction <= t->attention_tc_fraction && t->attention_tc_fraction <= t->gemm_efficiency,
          "%s: attention fractions fp32 %g, tensor-core %g, gemm_efficiency %g out of order", file,
          t->attention_fp32_fraction, t->attention_tc_fraction, t->gemm_efficiency);
    CHECK(t->attention_tc_wide_fraction == 0 || (t->attention_fp32_fraction <= t->attention_tc_wide_fraction &&
                                                 t->attention_tc_wide_fraction <= t->gemm_efficiency),
          "%s: attention_tc_wide_fraction %g out of order (fp32 %g, gemm_efficiency %g)", file,
          t->attention_tc_wide_fraction, t->attention_fp32_fraction, t->gemm_efficiency);
    CHECK(t->link_duplex == 0 || t->link_duplex == 1, "%s: link_duplex %d", file, t->link_duplex);
    // the file's name is the profile's name: "--target h200" finds name = h200
    char want[300];
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    snprintf(want, sizeof want, "%.*s", (int)(strlen(base) - strlen(".target")), base);
    CHECK(strcmp(t->name, want) == 0, "%s: name '%s', expected '%s'", file, t->name, want);
    int gpu = strcmp(t->arch, "cpu") != 0;
    if (gpu) {
        CHECK(t->matrix_flops_bf16 >= t->matrix_flops_f32, "%s: bf16 rate %g below the f32 rate %g", file,
              t->matrix_flops_bf16, t->matrix_flops_f32);
        CHECK(t->matrix_flops_f32 <= t->vector_flops * 1.0001,
              "%s: f32 GEMMs at %g exceed the FP32 CUDA-core peak %g: a TF32 figure?", file, t->matrix_flops_f32,
              t->vector_flops);
        CHECK(t->hbm_bandwidth > t->h2d_bandwidth, "%s: device memory slower than the host link", file);
        CHECK(t->host_memory > t->device_memory, "%s: a host smaller than its GPU cannot hold the model", file);
    }
}

// 1. every shipped profile, by NAME and by path
static void test_shipped(void) {
    static const char *const expected[] = {"h200",   "gh200",     "h100-pcie",   "a100-80g",    "rtx4090",
                                           "h200x8", "h200x8-su", "tiny-1layer", "tiny-2layers"};
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "schedules/%s.target", expected[i]);
        Target by_name, by_path;
        if (load_ok(expected[i], &by_name) != 0 || load_ok(path, &by_path) != 0) continue;
        CHECK(memcmp(&by_name, &by_path, sizeof by_name) == 0, "%s: NAME and path load differently", expected[i]);
    }
    DIR *d = opendir("schedules");
    if (!d) {
        FAIL("cannot open schedules/");
        return;
    }
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!ends_with(e->d_name, ".target")) continue;
        char path[600];
        snprintf(path, sizeof path, "schedules/%s", e->d_name);
        Target t;
        if (load_ok(path, &t) != 0) continue;
        check_sane(path, &t);
        n++;
    }
    closedir(d);
    CHECK(n >= 9, "only %d profiles loaded from schedules/, expected at least 9", n);
}

// 2. figures the scheduler's tests and the paper's comparison rely on
static void test_figures(void) {
    Target h200, gh200, t1, t2;
    if (load_ok("h200", &h200) || load_ok("gh200", &gh200) || load_ok("tiny-1layer", &t1) ||
        load_ok("tiny-2layers", &t2))
        return;
    CHECK(h200.host_memory == 1.5e12, "h200: host_memory %.17g, expected exactly 1.5e12 (the MegaTrain machine)",
          h200.host_memory);
    CHECK(strcmp(h200.arch, "sm_90") == 0, "h200: arch %s", h200.arch);
    CHECK(h200.hbm_bandwidth == 4.8e12, "h200: hbm_bandwidth %g, the datasheet says 4.8e12", h200.hbm_bandwidth);
    CHECK(gh200.h2d_bandwidth > h200.h2d_bandwidth && gh200.d2h_bandwidth > h200.d2h_bandwidth,
          "gh200's link (%g, %g) is not faster than h200's (%g, %g)", gh200.h2d_bandwidth, gh200.d2h_bandwidth,
          h200.h2d_bandwidth, h200.d2h_bandwidth);
    // the optional keys: defaults where left out, the file's values where given
    CHECK(h200.kernel_launch_s == TARGET_DEFAULT_KERNEL_LAUNCH_S && h200.kernel_launch_s == 5e-6,
          "h200: kernel_launch_s %g, expected the default 5e-6", h200.kernel_launch_s);
    CHECK(h200.gemm_efficiency == TARGET_DEFAULT_GEMM_EFFICIENCY && h200.gemm_efficiency == 0.8,
          "h200: gemm_efficiency %g, expected the default 0.8", h200.gemm_efficiency);
    // host_adamw_bandwidth: h200's own figure; left out, the memory's rate
    CHECK(h200.host_adamw_bandwidth == 345e9 && h200.host_adamw_bandwidth < h200.host_memory_bandwidth,
          "h200: host_adamw_bandwidth %g, expected 345e9 (below host_memory_bandwidth %g)", h200.host_adamw_bandwidth,
          h200.host_memory_bandwidth);
    CHECK(gh200.host_adamw_bandwidth == gh200.host_memory_bandwidth,
          "gh200 leaves host_adamw_bandwidth out: %g, expected host_memory_bandwidth %g", gh200.host_adamw_bandwidth,
          gh200.host_memory_bandwidth);
    CHECK(t1.kernel_launch_s == 1e-6 && t1.gemm_efficiency == 0.5, "tiny-1layer: optional keys %g, %g",
          t1.kernel_launch_s, t1.gemm_efficiency);
    CHECK(h200.link_duplex == 1 && t1.link_duplex == 0, "link_duplex: h200 %d, tiny-1layer %d", h200.link_duplex,
          t1.link_duplex);
    const double MiB = 1024.0 * 1024.0;
    CHECK(t1.device_memory < 4 * MiB && t2.device_memory < 4 * MiB, "tiny profiles' device_memory %g, %g: not tiny",
          t1.device_memory, t2.device_memory);
    CHECK(t1.device_memory < t2.device_memory, "tiny-1layer's device memory is not below tiny-2layers'");
    CHECK(strcmp(t1.arch, "cpu") == 0 && strcmp(t2.arch, "cpu") == 0, "tiny profiles' arch is not cpu");
    // several GPUs: h200 is one (the defaults); h200x8 one node of 8 with 2 TB; h200x8-su 32 such nodes
    Target x8, su;
    if (load_ok("h200x8", &x8) || load_ok("h200x8-su", &su)) return;
    CHECK(h200.gpus_per_node == 1 && h200.nodes == 1 && h200.gpu_link_bandwidth == 0 && h200.node_link_bandwidth == 0,
          "h200: %g GPUs a node, %g nodes, links %g and %g: expected one GPU", h200.gpus_per_node, h200.nodes,
          h200.gpu_link_bandwidth, h200.node_link_bandwidth);
    CHECK(x8.gpus_per_node == 8 && x8.nodes == 1 && x8.host_memory == 2e12 && x8.node_link_bandwidth == 0,
          "h200x8: %g GPUs a node, %g nodes, host memory %g, node link %g", x8.gpus_per_node, x8.nodes, x8.host_memory,
          x8.node_link_bandwidth);
    CHECK(x8.gpu_link_bandwidth > 0 && x8.gpu_link_bandwidth <= 450e9 && x8.gpu_link_bandwidth > x8.h2d_bandwidth,
          "h200x8: NVLink %g a direction: not above PCIe's %g and at most the datasheet's 450e9", x8.gpu_link_bandwidth,
          x8.h2d_bandwidth);
    CHECK(su.nodes == 32 && su.gpus_per_node == 8 && su.node_link_bandwidth > 0 && su.node_link_bandwidth <= 50e9 &&
              su.gpu_link_bandwidth == x8.gpu_link_bandwidth && su.device_memory == h200.device_memory,
          "h200x8-su: %g nodes of %g, InfiniBand %g a direction (NDR: at most 50e9)", su.nodes, su.gpus_per_node,
          su.node_link_bandwidth);
}

// Reads the "# expect: " line of a fixture into buf; 0 or -1.
static int read_expectation(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char *ok = fgets(buf, (int)cap, f);
    fclose(f);
    if (!ok || !starts_with(buf, "# expect: ")) return -1;
    buf[strcspn(buf, "\r\n")] = 0;
    memmove(buf, buf + strlen("# expect: "), strlen(buf) - strlen("# expect: ") + 1);
    return 0;
}

// 3. every bad fixture refused with its expected message, *t untouched
static void test_bad_fixtures(void) {
    DIR *d = opendir("tests/targets");
    if (!d) {
        FAIL("cannot open tests/targets/");
        return;
    }
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!ends_with(e->d_name, ".target")) continue;
        n++;
        char path[600], expect[1024], want[2048], err[2048];
        snprintf(path, sizeof path, "tests/targets/%s", e->d_name);
        if (read_expectation(path, expect, sizeof expect) != 0) {
            FAIL("%s: no '# expect: ' first line", path);
            continue;
        }
        // "LINE: phrase" or a whole-file "phrase"
        size_t digits = strspn(expect, "0123456789");
        if (digits > 0 && expect[digits] == ':')
            snprintf(want, sizeof want, "%s:%.*s: error: %s", path, (int)digits, expect, expect + digits + 2);
        else snprintf(want, sizeof want, "%s: error: %s", path, expect);
        Target t;
        memset(&t, 0x5a, sizeof t);
        Target before = t;
        err[0] = 0;
        int rc = target_load(path, &t, err, sizeof err);
        if (rc == 0) {
            FAIL("%s: accepted, expected '%s'", path, want);
            continue;
        }
        CHECK(rc == -1, "%s: returned %d, not -1", path, rc);
        CHECK(starts_with(err, want), "%s:\n  got      '%s'\n  expected '%s...'", path, err, want);
        CHECK(memcmp(&t, &before, sizeof t) == 0, "%s: the Target was written on failure", path);
    }
    closedir(d);
    CHECK(n >= 15, "only %d bad fixtures in tests/targets/, expected at least 15", n);
}

// 4. files that cannot be read; a message cut to a small buffer
static void test_unreadable(void) {
    char err[1024];
    Target t;
    struct {
        const char *name, *want;
    } cases[] = {
        {"no-such-machine",
         "schedules/no-such-machine.target: error: cannot read the target profile: No such file "
         "or directory (a bare NAME means NAME.target or schedules/NAME.target in the current directory"},
        {"tests/targets/no-such.target",
         "tests/targets/no-such.target: error: cannot read the target profile: No such file or directory"},
        {"tests/targets", "tests/targets: error: cannot read the target profile: Is a directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = 0;
        if (target_load(cases[i].name, &t, err, sizeof err) == 0) FAIL("%s: loaded, expected a refusal", cases[i].name);
        else
            CHECK(starts_with(err, cases[i].want), "%s:\n  got      '%s'\n  expected '%s...'", cases[i].name, err,
                  cases[i].want);
    }
    char small[16];
    memset(small, 'x', sizeof small);
    CHECK(target_load("tests/targets/unknown_key.target", &t, small, sizeof small) == -1 &&
              memchr(small, 0, sizeof small) && starts_with("tests/targets/unknown_key.target", small),
          "a message cut to 16 bytes: '%.16s'", small);
    CHECK(target_load("tests/targets/unknown_key.target", &t, NULL, 0) == -1, "no err buffer: not refused");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_target PROJECT_ROOT\n");
        return 2;
    }
    if (chdir(argv[1]) != 0) {
        perror(argv[1]);
        return 1;
    }
    test_shipped();
    test_figures();
    test_bad_fixtures();
    test_unreadable();
    if (check_failures) return check_summary("test_target");
    printf("test_target: ok\n");
    return 0;
}
