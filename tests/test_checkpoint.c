// test_checkpoint: runtime/store/checkpoint.c. Saves, prunes to --keep, reads back
// to the same bits (NaN payloads, -0, denormals included), finds the newest;
// refuses every kind of damage with a message naming the file and the
// section; and, crashing a child mid-save with MT_CKPT_ABORT_AFTER_BYTES at
// several points (and failing a write with RLIMIT_FSIZE), checks that the
// previous checkpoint stays the newest and intact and nothing appears under
// the new name. The file layout is checked against checkpoint.h's
// description with this file's own little-endian readers.
//
// usage: test_checkpoint [WORKDIR]   (a fresh directory is made inside it;
// default $TMPDIR or /tmp; removed when everything passed)
// Prints each failure and exits 1 if there was any.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/store/checkpoint.h"
#include "runtime/dist/dist.h"
#include "tests/check.h"

static char workdir[4096];

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("FAIL: out of memory\n");
        exit(1);
    }
    return p;
}

// workdir/a[/b], malloc'd
static char *in_work(const char *a, const char *b) {
    size_t n = strlen(workdir) + strlen(a) + (b ? strlen(b) : 0) + 3;
    char *p = xmalloc(n);
    snprintf(p, n, b ? "%s/%s/%s" : "%s/%s", workdir, a, b ? b : "");
    return p;
}

// The file layout, as checkpoint.h describes it.
enum { HEADER = 24, ENTRY = 24, TABLE_END = HEADER + 4 * ENTRY, META = 344 };
static const char *const NAMES[4] = {"META", "W", "M", "V"};

static int64_t file_size(int64_t n) { return TABLE_END + META + 12 * n; }

static uint32_t ld32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t ld64(const unsigned char *p) { return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32; }

// ---------------------------------------------------------------- fixtures

typedef struct State {
    CkptMeta meta;
    float *w, *m, *v; // (meta.n)
} State;

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

// Arbitrary bit patterns (NaNs with payloads among them) and the awkward
// values first, different for each step and array.
static void fill(float *a, int64_t n, int64_t step, int which) {
    static const uint32_t special[] = {0x7fc12345u, 0x7f800001u, 0xffc00000u, 0x80000000u, 0x00000001u,
                                       0x807fffffu, 0x7f800000u, 0xff800000u, 0x3f800000u};
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(step + 1) + (uint64_t)which * 0x632BE59BD9B4E019ull;
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits = i < (int64_t)(sizeof special / sizeof *special) ? special[i] : (uint32_t)(next_rand(&s) >> 16);
        memcpy(&a[i], &bits, 4);
    }
}

static State make_state(int64_t step, int64_t n) {
    State st = {
        .meta = {.step = step,
                 .data_pos = 1000003 * step + 7,
                 .seed = 0x0123456789abcdefull,
                 .rng_state = 0xfedcba9876543210ull ^ (uint64_t)step,
                 .plan_crc = 0xdeadbeefu,
                 .model_crc = 0x80000001u + (uint32_t)step,
                 .n = n,
                 .batch = 4,
                 .seq = 64 + step,
                 .accumulate = 2,
                 .device_limit = 1 << 30,
                 .model = "tiny",
                 .schedule = "remat=layer slots=2"},
        .w = xmalloc((size_t)n * 4),
        .m = xmalloc((size_t)n * 4),
        .v = xmalloc((size_t)n * 4),
    };
    fill(st.w, n, step, 0);
    fill(st.m, n, step, 1);
    fill(st.v, n, step, 2);
    return st;
}

static void free_state(State *st) {
    free(st->w);
    free(st->m);
    free(st->v);
}

static int meta_equal(const CkptMeta *a, const CkptMeta *b) {
    return a->step == b->step && a->data_pos == b->data_pos && a->seed == b->seed && a->rng_state == b->rng_state &&
           a->plan_crc == b->plan_crc && a->model_crc == b->model_crc && a->n == b->n && a->batch == b->batch &&
           a->seq == b->seq && a->accumulate == b->accumulate && a->device_limit == b->device_limit &&
           !strcmp(a->model, b->model) && !strcmp(a->schedule, b->schedule);
}

static int save(const char *dir, int keep, const State *st) {
    char err[1024];
    int rc = ckpt_save(dir, keep, &st->meta, st->w, st->m, st->v, err, sizeof err);
    CHECK(rc == 0, "ckpt_save %s step %lld: %s", dir, (long long)st->meta.step, err);
    return rc;
}

// Reads path with arrays and meta-only, and compares both with st bit for bit.
static void check_reads_back(const char *path, const State *st) {
    char err[1024];
    int64_t n = st->meta.n;
    State got = {.w = xmalloc((size_t)n * 4), .m = xmalloc((size_t)n * 4), .v = xmalloc((size_t)n * 4)};
    int rc = ckpt_read(path, &got.meta, n, got.w, got.m, got.v, err, sizeof err);
    CHECK(rc == 0, "ckpt_read %s: %s", path, err);
    if (rc == 0) {
        CHECK(meta_equal(&got.meta, &st->meta), "%s: meta differs from what was saved", path);
        CHECK(memcmp(got.w, st->w, (size_t)n * 4) == 0, "%s: W differs from what was saved", path);
        CHECK(memcmp(got.m, st->m, (size_t)n * 4) == 0, "%s: M differs from what was saved", path);
        CHECK(memcmp(got.v, st->v, (size_t)n * 4) == 0, "%s: V differs from what was saved", path);
    }
    CkptMeta only;
    rc = ckpt_read(path, &only, -1, NULL, NULL, NULL, err, sizeof err);
    CHECK(rc == 0 && meta_equal(&only, &st->meta), "meta-only ckpt_read %s: rc %d %s", path, rc, err);
    rc = ckpt_read(path, &only, n, NULL, NULL, NULL, err, sizeof err);
    CHECK(rc == 0 && meta_equal(&only, &st->meta), "meta-only ckpt_read %s with n: rc %d %s", path, rc, err);
    free_state(&got);
}

// The names in dir, sorted, space-separated, malloc'd.
static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static char *list_names(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return strdup("(cannot open)");
    char *names[64];
    int k = 0;
    for (struct dirent *de; (de = readdir(d)) && k < 64;)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) names[k++] = strdup(de->d_name);
    closedir(d);
    qsort(names, (size_t)k, sizeof *names, by_name);
    size_t len = 1;
    for (int i = 0; i < k; i++) len += strlen(names[i]) + 1;
    char *s = xmalloc(len);
    s[0] = 0;
    for (int i = 0; i < k; i++) {
        if (i) strcat(s, " ");
        strcat(s, names[i]);
        free(names[i]);
    }
    return s;
}

static void check_names(const char *dir, const char *want, const char *when) {
    char *got = list_names(dir);
    CHECK(strcmp(got, want) == 0, "%s: %s holds '%s', want '%s'", when, dir, got, want);
    free(got);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, len, f) == len && fclose(f) == 0, "cannot write %s", path);
}

static unsigned char *read_whole(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        FAIL("cannot open %s", path);
        *len = 0;
        return xmalloc(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = xmalloc((size_t)n);
    CHECK(fread(d, 1, (size_t)n, f) == (size_t)n, "cannot read %s", path);
    fclose(f);
    *len = (size_t)n;
    return d;
}

static void check_err(int rc, const char *err, const char *want, const char *what) {
    CHECK(rc == -1, "%s: accepted (rc %d), want the refusal '%s'", what, rc, want);
    if (rc == -1) CHECK(strcmp(err, want) == 0, "%s: message '%s', want '%s'", what, err, want);
}

// Reads the damaged file at path (with arrays and meta-only) and wants msg
// after "PATH: ".
static void check_refused(const char *path, int64_t n, const char *msg, const char *what) {
    char want[2048], err[1024];
    snprintf(want, sizeof want, "%s: %s", path, msg);
    float *a = xmalloc((size_t)n * 4), *b = xmalloc((size_t)n * 4), *c = xmalloc((size_t)n * 4);
    CkptMeta meta;
    int rc = ckpt_read(path, &meta, n, a, b, c, err, sizeof err);
    check_err(rc, err, want, what);
    CkptMeta zero = {0};
    CHECK(rc == 0 || memcmp(&meta, &zero, sizeof meta) == 0, "%s: meta not zeroed on refusal", what);
    char what2[512];
    snprintf(what2, sizeof what2, "%s (meta only)", what);
    rc = ckpt_read(path, &meta, -1, NULL, NULL, NULL, err, sizeof err);
    check_err(rc, err, want, what2);
    free(a);
    free(b);
    free(c);
}

// ---------------------------------------------------------------- tests

static void test_keep_and_latest(int64_t n) {
    char *dir = in_work("keep", NULL), err[1024], path[4096];
    State st[3];
    for (int i = 0; i < 3; i++) {
        st[i] = make_state(i + 1, n);
        save(dir, 2, &st[i]); // the first call creates dir
    }
    check_names(dir, "step-000000002.ckpt step-000000003.ckpt", "keep=2 after steps 1, 2, 3");
    char *p2 = in_work("keep", "step-000000002.ckpt"), *p3 = in_work("keep", "step-000000003.ckpt");
    check_reads_back(p2, &st[1]);
    check_reads_back(p3, &st[2]);
    struct stat sb;
    CHECK(stat(p3, &sb) == 0 && sb.st_size == file_size(n), "%s: %lld bytes, want %lld", p3, (long long)sb.st_size,
          (long long)file_size(n));

    int rc = ckpt_latest(dir, path, sizeof path, err, sizeof err);
    CHECK(rc == 0 && strcmp(path, p3) == 0, "ckpt_latest %s: rc %d path '%s' err '%s', want %s", dir, rc, path, err,
          p3);

    // leftovers and other names are ignored
    char *tmp9 = in_work("keep", "step-000000009.ckpt.tmp"), *bak = in_work("keep", "step-000000010.ckpt.bak");
    char *other = in_work("keep", "step-0000000x1.ckpt");
    write_file(tmp9, "partial", 7);
    write_file(bak, "x", 1);
    write_file(other, "x", 1);
    rc = ckpt_latest(dir, path, sizeof path, err, sizeof err);
    CHECK(rc == 0 && strcmp(path, p3) == 0, "ckpt_latest with a .tmp leftover: rc %d path '%s' err '%s', want %s", rc,
          path, err, p3);
    char small[8];
    rc = ckpt_latest(dir, small, sizeof small, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "does not fit in 8 bytes"), "ckpt_latest into 8 bytes: rc %d '%s'", rc, err);

    // saving step 3 again replaces it; the next save removes the leftover
    // .tmp and keeps 2 by step number, leaving other names alone
    State again = make_state(3, n);
    fill(again.w, n, 33, 0);
    save(dir, 2, &again);
    check_reads_back(p3, &again);
    check_names(dir, "step-000000002.ckpt step-000000003.ckpt step-000000010.ckpt.bak step-0000000x1.ckpt",
                "a second save of step 3");
    free_state(&again);

    for (int i = 0; i < 3; i++) free_state(&st[i]);
    free(dir);
    free(p2);
    free(p3);
    free(tmp9);
    free(bak);
    free(other);
}

// Steps past 999999999 sort by number, not by name.
static void test_big_steps(void) {
    char *dir = in_work("big", NULL), err[1024], path[4096];
    State a = make_state(1000000000, 5), b = make_state(999999999, 5);
    save(dir, 1, &a);
    save(dir, 1, &b); // older than a: a stays, and b, just written, is not deleted
    check_names(dir, "step-1000000000.ckpt step-999999999.ckpt", "keep=1, an older step saved after a newer one");
    State c = make_state(1000000001, 5);
    save(dir, 1, &c);
    check_names(dir, "step-1000000001.ckpt", "keep=1 after step 1000000001");
    int rc = ckpt_latest(dir, path, sizeof path, err, sizeof err);
    char *want = in_work("big", "step-1000000001.ckpt");
    CHECK(rc == 0 && strcmp(path, want) == 0, "ckpt_latest: '%s' (%s), want %s", path, err, want);
    check_reads_back(want, &c);
    free(want);
    free_state(&a);
    free_state(&b);
    free_state(&c);

    // n = 0: no arrays at all
    CkptMeta z = {.step = 7, .seed = 1, .n = 0}, got;
    rc = ckpt_save(dir, 1, &z, NULL, NULL, NULL, err, sizeof err);
    CHECK(rc == 0, "ckpt_save n=0: %s", err);
    char *p = in_work("big", "step-000000007.ckpt");
    rc = ckpt_read(p, &got, 0, NULL, NULL, NULL, err, sizeof err);
    CHECK(rc == 0 && meta_equal(&got, &z), "ckpt_read n=0: rc %d %s", rc, err);
    free(p);
    free(dir);
}

static void test_damage(const char *src, int64_t n) {
    char *path = in_work("damage.ckpt", NULL);
    size_t len;
    unsigned char *orig = read_whole(src, &len);
    CHECK((int64_t)len == file_size(n), "%s: %zu bytes, want %lld", src, len, (long long)file_size(n));
    if ((int64_t)len != file_size(n)) {
        free(orig);
        free(path);
        return;
    }
    // the layout as documented: magic, version, endian, count; the table in id order
    CHECK(memcmp(orig, "MTCKPT\0\0", 8) == 0 && ld32(orig + 8) == 3 && ld32(orig + 12) == 0x01020304u &&
              ld32(orig + 16) == 4,
          "%s: header differs from checkpoint.h's description", src);
    uint64_t off[4], size[4];
    for (int s = 0; s < 4; s++) {
        const unsigned char *e = orig + HEADER + s * ENTRY;
        off[s] = ld64(e + 8);
        size[s] = ld64(e + 16);
        CHECK(ld32(e) == (uint32_t)s + 1, "table entry %d has id %u", s, ld32(e));
    }
    CHECK(off[0] == TABLE_END && size[0] == META && off[1] == TABLE_END + META && size[1] == (uint64_t)n * 4 &&
              off[2] == off[1] + size[1] && off[3] == off[2] + size[2] && size[3] == (uint64_t)n * 4,
          "%s: section offsets and sizes differ from checkpoint.h's description", src);
    CHECK(ld64(orig + off[0]) == 3 && (int64_t)ld64(orig + off[0] + 40) == n,
          "%s: META's step or n is not where documented", src);
    // W[0] is the NaN 0x7fc12345, stored little-endian
    CHECK(ld32(orig + off[1]) == 0x7fc12345u, "%s: W[0] is 0x%08x, want 0x7fc12345", src, ld32(orig + off[1]));

    unsigned char *d = xmalloc(len);
    char what[256], msg[256];
    // one byte flipped in each section, at its start, middle and end
    for (int s = 0; s < 4; s++)
        for (int at = 0; at < 3; at++) {
            uint64_t o = off[s] + (at == 0 ? 0 : at == 1 ? size[s] / 2 : size[s] - 1);
            memcpy(d, orig, len);
            d[o] ^= 0x10;
            write_file(path, d, len);
            snprintf(what, sizeof what, "byte %llu of section %s flipped", (unsigned long long)o, NAMES[s]);
            snprintf(msg, sizeof msg, "section %s is corrupted (crc32 mismatch)", NAMES[s]);
            check_refused(path, n, msg, what);
        }
    // a section's crc in the table
    for (int s = 0; s < 4; s++) {
        memcpy(d, orig, len);
        d[HEADER + s * ENTRY + 4] ^= 1;
        write_file(path, d, len);
        snprintf(what, sizeof what, "the table's crc32 of section %s flipped", NAMES[s]);
        snprintf(msg, sizeof msg, "section %s is corrupted (crc32 mismatch)", NAMES[s]);
        check_refused(path, n, msg, what);
    }
    // cut inside each section, and at its start
    for (int s = 0; s < 4; s++)
        for (int at = 0; at < 2; at++) {
            size_t cut = (size_t)(off[s] + (at ? size[s] / 2 : 0));
            write_file(path, orig, cut);
            snprintf(what, sizeof what, "cut to %zu bytes, inside section %s", cut, NAMES[s]);
            snprintf(msg, sizeof msg, "section %s is truncated", NAMES[s]);
            check_refused(path, n, msg, what);
        }
    write_file(path, orig, len - 1);
    check_refused(path, n, "section V is truncated", "one byte short");
    write_file(path, orig, 0);
    check_refused(path, n, "empty file; not an mt checkpoint", "empty");
    write_file(path, orig, 5);
    check_refused(path, n, "truncated: 5 bytes, shorter than the checkpoint header (24)", "cut to 5 bytes");
    write_file(path, orig, 60);
    check_refused(path, n, "truncated: 60 bytes, shorter than the header and section table (120)", "cut to 60 bytes");

    // the header: magic, version, endianness, its crc, the section count
    struct {
        size_t at;
        uint32_t value;
        const char *msg;
    } hdr[] = {
        {0, 0x4b43544e, "not an mt checkpoint (bad magic)"}, // "NTCK"
        {8, 1, "checkpoint version 1, this mtrun reads versions 2 and 3"},
        {12, 0x04030201u, "written on a machine of the other byte order"},
        {12, 0x11223344u, "bad endianness word 0x11223344"},
        {20, 0, "the checkpoint header is corrupted (crc32 mismatch)"},
    };
    for (size_t i = 0; i < sizeof hdr / sizeof *hdr; i++) {
        memcpy(d, orig, len);
        for (int k = 0; k < 4; k++) d[hdr[i].at + (size_t)k] = (unsigned char)(hdr[i].value >> (8 * k));
        write_file(path, d, len);
        snprintf(what, sizeof what, "header bytes %zu..%zu set to 0x%08x", hdr[i].at, hdr[i].at + 3, hdr[i].value);
        check_refused(path, n, hdr[i].msg, what);
    }

    // the caller's model has another size
    write_file(path, orig, len);
    char err[1024], want[2048];
    float *a = xmalloc((size_t)(n + 1) * 4), *b = xmalloc((size_t)(n + 1) * 4), *c = xmalloc((size_t)(n + 1) * 4);
    CkptMeta meta;
    int rc = ckpt_read(path, &meta, n + 1, a, b, c, err, sizeof err);
    snprintf(want, sizeof want, "%s: the checkpoint holds %lld floats per array, the model has %lld (another model?)",
             path, (long long)n, (long long)(n + 1));
    check_err(rc, err, want, "expected_n = n + 1");
    rc = ckpt_read(path, &meta, n + 1, NULL, NULL, NULL, err, sizeof err);
    check_err(rc, err, want, "expected_n = n + 1 (meta only)");
    rc = ckpt_read(path, &meta, -1, a, b, c, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "expected size"), "arrays with expected_n -1: rc %d '%s'", rc, err);
    free(a);
    free(b);
    free(c);

    char *missing = in_work("no-such.ckpt", NULL);
    snprintf(want, sizeof want, "%s: cannot open the checkpoint: No such file or directory", missing);
    rc = ckpt_read(missing, &meta, n, NULL, NULL, NULL, err, sizeof err);
    check_err(rc, err, want, "a missing file");
    free(missing);
    free(d);
    free(orig);
    free(path);
}

static void test_no_checkpoint(void) {
    char *dir = in_work("empty", NULL), *tmp = in_work("empty", "step-000000001.ckpt.tmp");
    char *txt = in_work("empty", "notes.txt"), err[1024], path[4096], want[4200];
    CHECK(mkdir(dir, 0777) == 0, "mkdir %s: %s", dir, strerror(errno));
    write_file(tmp, "x", 1);
    write_file(txt, "x", 1);
    int rc = ckpt_latest(dir, path, sizeof path, err, sizeof err);
    snprintf(want, sizeof want, "%s: no checkpoint in it (no step-*.ckpt or step-*.manifest file)", dir);
    check_err(rc, err, want, "a directory with only a .tmp leftover");
    char *missing = in_work("no-such-dir", NULL);
    rc = ckpt_latest(missing, path, sizeof path, err, sizeof err);
    snprintf(want, sizeof want, "%s: cannot read the checkpoint directory: No such file or directory", missing);
    check_err(rc, err, want, "a missing directory");
    rc = ckpt_latest(txt, path, sizeof path, err, sizeof err);
    snprintf(want, sizeof want, "%s: cannot read the checkpoint directory: Not a directory", txt);
    check_err(rc, err, want, "a regular file as the directory");

    // ckpt_save's refusals
    State st = make_state(1, 10);
    rc = ckpt_save(txt, 2, &st.meta, st.w, st.m, st.v, err, sizeof err);
    snprintf(want, sizeof want, "%s: cannot save checkpoints here: not a directory", txt);
    check_err(rc, err, want, "saving into a regular file");
    char *deep = in_work("no-such-dir", "sub");
    rc = ckpt_save(deep, 2, &st.meta, st.w, st.m, st.v, err, sizeof err);
    snprintf(want, sizeof want, "%s: cannot create the checkpoint directory: No such file or directory", deep);
    check_err(rc, err, want, "saving two levels down");
    rc = ckpt_save(dir, 0, &st.meta, st.w, st.m, st.v, err, sizeof err);
    snprintf(want, sizeof want, "%s: --keep must be at least 1, not 0", dir);
    check_err(rc, err, want, "keep = 0");
    check_names(dir, "notes.txt step-000000001.ckpt.tmp", "after the refused saves");
    free_state(&st);
    free(deep);
    free(missing);
    free(dir);
    free(tmp);
    free(txt);
}

// Forks a child that saves st into dir with MT_CKPT_ABORT_AFTER_BYTES=limit
// (none when limit < 0) and, when fsize_limit > 0, RLIMIT_FSIZE. Returns the
// wait status; the child exits 0 when ckpt_save returned 0, 2 when it
// refused with fsize_limit set and the message says the write failed ("File
// too large"), 4 on any other refusal (its message on stdout).
static int save_in_child(const char *dir, int keep, const State *st, int64_t limit, int64_t fsize_limit) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        if (fsize_limit > 0) {
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit fs = {(rlim_t)fsize_limit, (rlim_t)fsize_limit};
            setrlimit(RLIMIT_FSIZE, &fs);
        }
        char buf[32];
        snprintf(buf, sizeof buf, "%lld", (long long)limit);
        if (limit >= 0) setenv("MT_CKPT_ABORT_AFTER_BYTES", buf, 1);
        char err[1024];
        int rc = ckpt_save(dir, keep, &st->meta, st->w, st->m, st->v, err, sizeof err);
        if (rc == 0) _exit(0);
        if (fsize_limit > 0 && strstr(err, "step-000000005.ckpt: cannot write the checkpoint: File too large"))
            _exit(2);
        printf("child: ckpt_save: %s\n", err);
        fflush(stdout);
        _exit(4);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        FAIL("fork or waitpid failed: %s", strerror(errno));
        return -1;
    }
    return status;
}

// dir holds step 3 (st3) as its newest checkpoint, intact, and no step 4.
static void check_step3_survives(const char *dir, const State *st3, const char *when) {
    char err[1024], path[4096];
    char *p3 = in_work("crash", "step-000000003.ckpt"), *p4 = in_work("crash", "step-000000004.ckpt");
    int rc = ckpt_latest(dir, path, sizeof path, err, sizeof err);
    CHECK(rc == 0 && strcmp(path, p3) == 0, "%s: ckpt_latest gives '%s' (%s), want %s", when, path, err, p3);
    CHECK(!exists(p4), "%s: %s exists", when, p4);
    int before = check_failures;
    check_reads_back(p3, st3);
    if (check_failures != before) printf("  (%s)\n", when);
    free(p3);
    free(p4);
}

static void test_crash(int64_t n) {
    char *dir = in_work("crash", NULL), *tmp4 = in_work("crash", "step-000000004.ckpt.tmp");
    char *p4 = in_work("crash", "step-000000004.ckpt"), when[256];
    State st3 = make_state(3, n), st4 = make_state(4, n);
    save(dir, 2, &st3);
    int64_t size = file_size(n), w = TABLE_END + META, v = w + 8 * n;
    struct {
        int64_t at;
        const char *where;
    } cases[] = {
        {0, "right after creating the .tmp"},
        {10, "inside the header"},
        {HEADER + 30, "inside the section table"},
        {TABLE_END + 20, "inside META"},
        {w + 2 * n + 1, "inside W"},
        {v + 2 * n + 3, "inside V"},
        {size - 1, "one byte before the end of V"},
        {size, "after the last section, before the table's crc32s"},
        {size + 50, "while rewriting the table"},
        {size + 96, "just before the fsync and the rename"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(when, sizeof when, "abort after %lld bytes, %s", (long long)cases[i].at, cases[i].where);
        int status = save_in_child(dir, 2, &st4, cases[i].at, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "%s: the child did not die by SIGABRT (status 0x%x)",
              when, status);
        check_step3_survives(dir, &st3, when);
        // the crash left the .tmp as far as it got: the fault injection counts as documented
        struct stat sb;
        int64_t want = cases[i].at < size ? cases[i].at : size;
        CHECK(stat(tmp4, &sb) == 0 && sb.st_size == want, "%s: the leftover .tmp has %lld bytes, want %lld", when,
              exists(tmp4) ? (long long)sb.st_size : -1LL, (long long)want);
    }
    // one byte more than a save writes: no abort; the leftover .tmp goes
    int status = save_in_child(dir, 2, &st4, size + 97, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "abort after %lld bytes: the save did not complete (status 0x%x)", (long long)(size + 97), status);
    check_names(dir, "step-000000003.ckpt step-000000004.ckpt", "a completed save after the crashes");
    check_reads_back(p4, &st4);

    // a write that fails (the file size limit): -1, no .tmp, nothing under
    // the new name, the others untouched
    State st5 = make_state(5, n);
    status = save_in_child(dir, 2, &st5, -1, size / 2);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2,
          "a save past RLIMIT_FSIZE: status 0x%x, want exit 2 (refused: File too large)", status);
    check_names(dir, "step-000000003.ckpt step-000000004.ckpt", "a failed save");
    check_reads_back(p4, &st4);

    free_state(&st3);
    free_state(&st4);
    free_state(&st5);
    free(dir);
    free(tmp4);
    free(p4);
}

// ---------------------------------------------------------------- sharded checkpoints

// A store's arrays behind a CkptIO, as train.c's store is: get copies out,
// put copies in (and counts the floats put).
typedef struct Arrays {
    float *a[3];
    int64_t put;
} Arrays;
static int arrays_get(void *ctx, int array, int64_t off, int64_t n, float *dst, char *err, size_t errcap) {
    (void)err, (void)errcap;
    memcpy(dst, ((Arrays *)ctx)->a[array] + off, (size_t)n * 4);
    return 0;
}
static int arrays_put(void *ctx, int array, int64_t off, int64_t n, const float *src, char *err, size_t errcap) {
    (void)err, (void)errcap;
    Arrays *x = ctx;
    memcpy(x->a[array] + off, src, (size_t)n * 4);
    x->put += n;
    return 0;
}

// Segments of awkward lengths: empty, shorter than the ranks, uneven, large.
enum { NSEGS = 6 };
static const int64_t SEG_LENS[NSEGS] = {0, 2, 1001, 7, 65536 + 3, 30};

static void segments(CkptSegment *segs, int64_t *n) {
    *n = 0;
    for (int k = 0; k < NSEGS; k++) segs[k] = (CkptSegment){*n, SEG_LENS[k]}, *n += SEG_LENS[k];
}

// Saves st as `ranks` shards in dir and commits it. 0 or -1.
static int save_sharded(const char *dir, int keep, const State *st, int ranks) {
    CkptSegment segs[NSEGS];
    int64_t n, bytes[8];
    uint32_t crcs[8];
    segments(segs, &n);
    Arrays x = {{st->w, st->m, st->v}, 0};
    CkptIO io = {arrays_get, arrays_put, &x};
    char err[1024];
    for (int r = 0; r < ranks; r++) {
        int rc = ckpt_save_shard(dir, &st->meta, segs, NSEGS, r, ranks, &io, &bytes[r], &crcs[r], err, sizeof err);
        CHECK(rc == 0, "ckpt_save_shard %d of %d: %s", r, ranks, err);
        if (rc != 0) return -1;
    }
    int rc = ckpt_commit_shards(dir, keep, &st->meta, segs, NSEGS, ranks, bytes, crcs, err, sizeof err);
    CHECK(rc == 0, "ckpt_commit_shards of %d: %s", ranks, err);
    return rc;
}

// Loads path wanting, of each segment, rank `rank` of `ranks`'s slice
// (ranks 0: everything) into NaN-filled arrays: the wanted floats equal
// st's bit for bit, every other stays NaN, the meta is st's.
static void check_loads(const char *path, const State *st, int rank, int ranks, const char *what) {
    CkptSegment segs[NSEGS];
    CkptRange want[NSEGS];
    int64_t n, wanted = 0;
    segments(segs, &n);
    for (int k = 0; k < NSEGS; k++) {
        if (ranks) dist_shard(segs[k].len, rank, ranks, &want[k].lo, &want[k].hi);
        else want[k] = (CkptRange){0, segs[k].len};
        wanted += want[k].hi - want[k].lo;
    }
    State got = {.w = xmalloc((size_t)n * 4), .m = xmalloc((size_t)n * 4), .v = xmalloc((size_t)n * 4)};
    uint32_t nan = 0x7fc0dead;
    for (int64_t i = 0; i < n; i++) memcpy(&got.w[i], &nan, 4), memcpy(&got.m[i], &nan, 4), memcpy(&got.v[i], &nan, 4);
    Arrays x = {{got.w, got.m, got.v}, 0};
    CkptIO io = {arrays_get, arrays_put, &x};
    char err[1024];
    int rc = ckpt_load(path, &got.meta, n, segs, NSEGS, ranks ? want : NULL, &io, err, sizeof err);
    CHECK(rc == 0, "%s: ckpt_load %s: %s", what, path, err);
    if (rc == 0) {
        CHECK(meta_equal(&got.meta, &st->meta), "%s: the meta differs", what);
        CHECK(x.put == 3 * wanted, "%s: %lld floats put, want %lld", what, (long long)x.put, (long long)(3 * wanted));
        const float *a[3] = {st->w, st->m, st->v}, *b[3] = {got.w, got.m, got.v};
        int64_t bad = -1;
        for (int k = 0; k < NSEGS; k++)
            for (int64_t i = 0; i < segs[k].len && bad < 0; i++) {
                int in = i >= want[k].lo && i < want[k].hi;
                for (int j = 0; j < 3; j++)
                    if (memcmp(&b[j][segs[k].off + i], in ? (const void *)&a[j][segs[k].off + i] : (const void *)&nan,
                               4))
                        bad = segs[k].off + i;
            }
        CHECK(bad < 0, "%s: float %lld is not what it should be", what, (long long)bad);
    }
    CkptMeta only;
    rc = ckpt_load(path, &only, -1, NULL, 0, NULL, NULL, err, sizeof err);
    CHECK(rc == 0 && meta_equal(&only, &st->meta), "%s: the meta alone: %s", what, err);
    free_state(&got);
}

static void test_sharded(void) {
    char *dir = in_work("shards", NULL), err[1024], path[4096];
    CkptSegment segs[NSEGS];
    int64_t n;
    segments(segs, &n);
    State s2 = make_state(2, n), s4 = make_state(4, n), s6 = make_state(6, n);
    // an old single-file checkpoint, then sharded ones: the newest committed step is found, whatever its kind
    CHECK(save(dir, 5, &s2) == 0, "save step 2");
    if (save_sharded(dir, 5, &s4, 3) != 0) goto done;
    CHECK(ckpt_latest(dir, path, sizeof path, err, sizeof err) == 0 && strstr(path, "step-000000004.manifest"),
          "latest after a sharded step 4: %s %s", path, err);
    // loads whole and by any other number of ranks' slices, and the single file by slices too
    check_loads(path, &s4, 0, 0, "3 shards, everything");
    for (int R = 1; R <= 4; R++)
        for (int r = 0; r < R; r++) {
            char what[64];
            snprintf(what, sizeof what, "3 shards, rank %d of %d's slices", r, R);
            check_loads(path, &s4, r, R, what);
        }
    char *one = in_work("shards", "step-000000002.ckpt");
    check_loads(one, &s2, 1, 3, "a single file, rank 1 of 3's slices");
    // an uncommitted step 6 (shards, no manifest): step 4 stays the newest
    CkptSegment s[NSEGS];
    segments(s, &n);
    Arrays x = {{s6.w, s6.m, s6.v}, 0};
    CkptIO io = {arrays_get, arrays_put, &x};
    int64_t bytes;
    uint32_t crc;
    CHECK(ckpt_save_shard(dir, &s6.meta, s, NSEGS, 0, 2, &io, &bytes, &crc, err, sizeof err) == 0,
          "shard 0 of step 6: %s", err);
    CHECK(ckpt_latest(dir, path, sizeof path, err, sizeof err) == 0 && strstr(path, "step-000000004.manifest"),
          "latest with step 6 uncommitted: %s", path);
    // a shard missing, cut short, or another of the same size: refused, naming it
    char *shard = in_work("shards", "step-000000004.shard-00001-of-00003"), *moved = in_work("shards", "moved");
    char want[8192];
    float *a = xmalloc((size_t)n * 4), *b = xmalloc((size_t)n * 4), *c = xmalloc((size_t)n * 4);
    Arrays y = {{a, b, c}, 0};
    CkptIO yio = {arrays_get, arrays_put, &y};
    CkptMeta meta;
    CHECK(rename(shard, moved) == 0, "cannot move a shard");
    snprintf(want, sizeof want, "%s: shard 1 of 3 of step 4 is missing: No such file or directory", shard);
    check_err(ckpt_load(path, &meta, n, segs, NSEGS, NULL, &yio, err, sizeof err), err, want, "a missing shard");
    size_t len;
    unsigned char *bytes1 = read_whole(moved, &len);
    write_file(shard, bytes1, len - 4);
    snprintf(want, sizeof want, "%s: shard 1 of 3 of step 4 has %lld bytes; the manifest says %lld", shard,
             (long long)len - 4, (long long)len);
    check_err(ckpt_load(path, &meta, n, segs, NSEGS, NULL, &yio, err, sizeof err), err, want, "a short shard");
    bytes1[HEADER + ENTRY + 4] ^= 1; // (section W's crc32 in the table)
    write_file(shard, bytes1, len);
    snprintf(want, sizeof want, "%s: shard 1 of 3 of step 4 is not the one its manifest names (section table crc32)",
             shard);
    check_err(ckpt_load(path, &meta, n, segs, NSEGS, NULL, &yio, err, sizeof err), err, want, "another shard");
    free(bytes1);
    CHECK(rename(moved, shard) == 0, "cannot move the shard back");
    // the manifest damaged, or laid out otherwise than the plan
    size_t mlen;
    unsigned char *man = read_whole(path, &mlen);
    man[30] ^= 1;
    char *bad = in_work("shards", "step-000000005.manifest");
    write_file(bad, man, mlen);
    snprintf(want, sizeof want, "%s: the manifest is damaged (its crc32 line does not match)", bad);
    check_err(ckpt_load(bad, &meta, n, segs, NSEGS, NULL, &yio, err, sizeof err), err, want, "a damaged manifest");
    unlink(bad);
    free(man);
    CkptSegment other[NSEGS];
    memcpy(other, segs, sizeof other);
    other[2].len--, other[3].off--, other[3].len++;
    snprintf(want, sizeof want, "%s: the checkpoint's 6 segments are laid out otherwise than this plan's 6", path);
    check_err(ckpt_load(path, &meta, n, other, NSEGS, NULL, &yio, err, sizeof err), err, want, "another layout");
    // a shard of step 6 by 3 ranks that never committed (an earlier run's), then step 6 committed by 2:
    CHECK(ckpt_save_shard(dir, &s6.meta, s, NSEGS, 2, 3, &io, &bytes, &crc, err, sizeof err) == 0, "stray shard: %s",
          err);
    // committing step 6 with keep 2 removes step 2's file and the leftovers (the stray shard of kept step 6
    // too: its manifest names 2 ranks), keeps 4 and 6
    if (save_sharded(dir, 2, &s6, 2) == 0)
        check_names(dir,
                    "step-000000004.manifest step-000000004.shard-00000-of-00003 "
                    "step-000000004.shard-00001-of-00003 step-000000004.shard-00002-of-00003 "
                    "step-000000006.manifest step-000000006.shard-00000-of-00002 "
                    "step-000000006.shard-00001-of-00002",
                    "keep 2 after a sharded step 6");
    // a crash mid-shard (MT_CKPT_ABORT_STEP limits the fault to step 8's save): no shard under its name, 6 newest
    State s8 = make_state(8, n);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("MT_CKPT_ABORT_AFTER_BYTES", "500", 1);
        setenv("MT_CKPT_ABORT_STEP", "8", 1);
        Arrays z = {{s8.w, s8.m, s8.v}, 0};
        CkptIO zio = {arrays_get, arrays_put, &z};
        ckpt_save_shard(dir, &s8.meta, s, NSEGS, 1, 2, &zio, &bytes, &crc, err, sizeof err);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    char *torn = in_work("shards", "step-000000008.shard-00001-of-00002");
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && !exists(torn), "a crash mid-shard: status %d", status);
    CHECK(ckpt_latest(dir, path, sizeof path, err, sizeof err) == 0 && strstr(path, "step-000000006.manifest"),
          "latest after a crash mid-shard of step 8: %s", path);
    check_loads(path, &s6, 0, 0, "2 shards of step 6, everything");
    free(torn), free_state(&s8);
    free(a), free(b), free(c), free(shard), free(moved), free(bad), free(one);
done:
    free_state(&s2), free_state(&s4), free_state(&s6);
    free(dir);
}

static void remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        for (struct dirent *de; (de = readdir(d));) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
            size_t n = strlen(path) + strlen(de->d_name) + 2;
            char *p = xmalloc(n);
            snprintf(p, n, "%s/%s", path, de->d_name);
            remove_tree(p);
            free(p);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

int main(int argc, char **argv) {
    const char *base = argc > 1 ? argv[1] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if (mkdir(base, 0777) != 0 && errno != EEXIST) {
        printf("FAIL: cannot create %s: %s\n", base, strerror(errno));
        return 1;
    }
    snprintf(workdir, sizeof workdir, "%s/ckpt-XXXXXX", base);
    if (!mkdtemp(workdir)) {
        printf("FAIL: cannot create a directory in %s: %s\n", base, strerror(errno));
        return 1;
    }
    // more than one 4 MiB chunk per array, and not a whole number of them
    const int64_t n = (1 << 20) + 12345;
    test_keep_and_latest(n);
    char *p3 = in_work("keep", "step-000000003.ckpt");
    test_damage(p3, n);
    free(p3);
    test_big_steps();
    test_no_checkpoint();
    test_crash(n);
    test_sharded();
    if (check_failures) {
        printf("test_checkpoint: files left in %s\n", workdir);
        return check_summary("test_checkpoint");
    }
    remove_tree(workdir);
    printf("test_checkpoint: all passed\n");
    return 0;
}
