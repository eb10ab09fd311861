// test_safetensors: runtime/model_io/safetensors.c against fixtures written by
// tests/make_safetensors.py, an independent writer (Python's struct, json).
// Opens every good fixture (F32, BF16 and F16 with every bit pattern, a
// directory, a sharded set by its index and by its directory) and checks
// names, order, dtypes, shapes, files and every value's bits; checks each
// broken fixture is refused with a message naming the file at fault and the
// fault; then writes: F32 round trips bit for bit, BF16 gives the fixture
// writer's round-to-nearest-even bits, sharded writing with a tiny shard size
// reads back identical through the index and the directory, a write removes
// what an earlier one left that would contradict it, and failed writes (a
// missing directory, a rename that cannot happen, bad arguments) leave
// nothing.
//
// usage: test_safetensors PYTHON tests/make_safetensors.py WORKDIR
// Prints each failure and exits 1 if there was any.
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/model_io/safetensors.h"
#include "tests/check.h"

static const char *python, *writer, *workdir;

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("FAIL: out of memory\n");
        exit(1);
    }
    return p;
}

// workdir/a/b... joined with '/', malloc'd
static char *in_work(const char *fmt, ...) {
    char rel[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    size_t n = strlen(workdir) + strlen(rel) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", workdir, rel);
    return p;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// The names in dir, sorted, separated by spaces ("" for an empty or missing directory).
static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static void list_dir(const char *dir, char *out, size_t cap) {
    char *names[256];
    int n = 0;
    out[0] = '\0';
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d)) && n < 256;)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) names[n++] = strdup(de->d_name);
    if (d) closedir(d);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (names[i] && at < cap) at += (size_t)snprintf(out + at, cap - at, "%s%s", i ? " " : "", names[i]);
        free(names[i]);
    }
}

// Runs PYTHON WRITER WORKDIR; returns 0 when it exited 0.
static int make_fixtures(void) {
    char *argv[] = {(char *)python, (char *)writer, (char *)workdir, NULL};
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execv(python, argv);
        execvp(python, argv);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        FAIL("fixture writer '%s %s %s' failed (status %d)", python, writer, workdir, status);
        return -1;
    }
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// ---------------------------------------------------------------- reading the good fixtures

// every tensor read, converted to fp32, for the writing tests
typedef struct Got {
    StOut out;      // name and data malloc'd
    uint16_t *bf16; // (numel) what BF16 writing must give, from the fixture writer
    int64_t numel;
} Got;
static Got got[64];
static int ngot;

static void keep(const StTensor *t, const float *f32, const uint16_t *bf16, int64_t numel) {
    for (int i = 0; i < ngot; i++)
        if (strcmp(got[i].out.name, t->name) == 0) return; // the sharded set is opened twice
    if (!CHECK(ngot < 64, "more than 64 tensors in the fixtures")) return;
    Got *g = &got[ngot++];
    g->out.name = strdup(t->name);
    g->out.rank = t->rank;
    memcpy(g->out.shape, t->shape, sizeof t->shape);
    float *d = xmalloc((size_t)numel * sizeof *d);
    memcpy(d, f32, (size_t)numel * sizeof *d);
    g->out.data = d;
    g->bf16 = xmalloc((size_t)numel * sizeof *g->bf16);
    memcpy(g->bf16, bf16, (size_t)numel * sizeof *g->bf16);
    g->numel = numel;
}

static StDtype dtype_of(const char *s) {
    return strcmp(s, "F32") == 0 ? ST_F32 : strcmp(s, "BF16") == 0 ? ST_BF16 : ST_F16;
}

// Checks one "tensor" record of expected.txt against the open set (the k-th tensor of it).
static int check_tensor(FILE *ex, const StSet *s, int k, const char *set_path) {
    char name[256], file[256], dt[16];
    int rank;
    int64_t shape[ST_MAX_RANK] = {0}, numel = 1, n;
    if (fscanf(ex, " tensor %255s %255s %15s %d", name, file, dt, &rank) != 4 || rank < 0 || rank > ST_MAX_RANK)
        return FAIL("expected.txt: a bad tensor record in %s", set_path), -1;
    for (int i = 0; i < rank; i++) {
        long long v;
        if (fscanf(ex, "%lld", &v) != 1) return FAIL("expected.txt: bad shape"), -1;
        shape[i] = v;
        numel *= v;
    }
    long long nl;
    if (fscanf(ex, "%lld", &nl) != 1 || nl != numel) return FAIL("expected.txt: bad count for %s", name), -1;
    n = nl;
    uint32_t *want = xmalloc((size_t)n * 4);
    uint16_t *want16 = xmalloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        unsigned v;
        if (fscanf(ex, "%x", &v) != 1) return FAIL("expected.txt: values of %s", name), -1;
        want[i] = v;
    }
    long long nb;
    if (fscanf(ex, " bf16 %lld", &nb) != 1 || nb != n) return FAIL("expected.txt: bf16 of %s", name), -1;
    for (int64_t i = 0; i < n; i++) {
        unsigned v;
        if (fscanf(ex, "%x", &v) != 1) return FAIL("expected.txt: bf16 values of %s", name), -1;
        want16[i] = (uint16_t)v;
    }

    const StTensor *t = st_find(s, name);
    if (CHECK(t != NULL, "%s: st_find('%s') found nothing", set_path, name)) {
        CHECK(k < s->n && &s->tensors[k] == t, "%s: tensor '%s' is not at position %d (file, then offset order)",
              set_path, name, k);
        CHECK(ends_with(t->file, file), "%s: tensor '%s' is in %s, want %s", set_path, name, t->file, file);
        CHECK(t->dtype == dtype_of(dt), "%s: tensor '%s' dtype %s, want %s", set_path, name, st_dtype_name(t->dtype),
              dt);
        CHECK(t->rank == rank && memcmp(t->shape, shape, sizeof shape) == 0, "%s: tensor '%s' has the wrong shape",
              set_path, name);
        CHECK(st_numel(t) == n, "%s: tensor '%s' st_numel %lld, want %lld", set_path, name, (long long)st_numel(t),
              (long long)n);
        CHECK(t->nbytes == n * (t->dtype == ST_F32 ? 4 : 2), "%s: tensor '%s' nbytes %lld", set_path, name,
              (long long)t->nbytes);
        float *f = xmalloc((size_t)n * 4 + 4);
        f[n] = 12345.0f; // st_to_f32 must write n floats, no more
        st_to_f32(t, f);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++)
            if (bits_of(f[i]) != want[i] && bad++ < 5)
                FAIL("%s: tensor '%s' element %lld is %08x, want %08x", set_path, name, (long long)i, bits_of(f[i]),
                     want[i]);
        CHECK(bad == 0, "%s: tensor '%s': %lld of %lld values wrong", set_path, name, (long long)bad, (long long)n);
        CHECK(f[n] == 12345.0f, "%s: st_to_f32 wrote past tensor '%s'", set_path, name);
        keep(t, f, want16, n);
        free(f);
    }
    free(want);
    free(want16);
    return 0;
}

static void test_good(void) {
    char *exp = in_work("fixtures/expected.txt");
    FILE *ex = fopen(exp, "r");
    free(exp);
    if (!CHECK(ex != NULL, "no expected.txt from the fixture writer")) return;
    char rel[256];
    int n, sets = 0;
    while (fscanf(ex, " open %255s %d", rel, &n) == 2) {
        sets++;
        char *path = in_work("fixtures/%s", rel);
        char err[512] = "";
        StSet s;
        int rc = st_open(&s, path, err, sizeof err);
        CHECK(rc == 0, "st_open(%s) failed: %s", path, err);
        if (rc == 0) CHECK(s.n == n, "%s: %d tensors, want %d", path, s.n, n);
        for (int k = 0; k < n; k++)
            if (check_tensor(ex, &s, k, path) != 0) break;
        CHECK(st_find(&s, "no such tensor") == NULL, "%s: st_find found a tensor that is not there", path);
        st_close(&s);
        CHECK(s.tensors == NULL && s.n == 0 && s.files == NULL, "st_close did not zero the set");
        free(path);
    }
    CHECK(sets == 6, "expected.txt lists %d sets, want 6", sets);
    fclose(ex);
}

// ---------------------------------------------------------------- the broken fixtures

static void test_bad(void) {
    static const struct {
        const char *open;   // under fixtures/bad/
        const char *file;   // the file the message must start with, under fixtures/bad/
        const char *phrase; // and what it must say
    } cases[] = {
        {"truncated.safetensors", "truncated.safetensors",
         "tensor 'w': data_offsets [0, 24] run past the end of the data buffer (14 bytes"},
        {"short.safetensors", "short.safetensors", "too short for a safetensors file"},
        {"header_past_end.safetensors", "header_past_end.safetensors",
         "the header size 1000 runs past the end of the file"},
        {"bad_json.safetensors", "bad_json.safetensors", "is not valid JSON"},
        {"trailing_json.safetensors", "trailing_json.safetensors", "is not valid JSON"},
        {"i64.safetensors", "i64.safetensors", "tensor 'ids': dtype I64 is not supported"},
        {"shape_mismatch.safetensors", "shape_mismatch.safetensors",
         "tensor 'w': shape [2, 3] of F32 is 24 bytes, but data_offsets [0, 20] hold 20"},
        {"overlap.safetensors", "overlap.safetensors", "tensors 'a' (data_offsets [0, 16]) and 'b' ([8, 24]) overlap"},
        {"dup_in_header.safetensors", "dup_in_header.safetensors", "tensor 'w' appears twice in the header"},
        {"not_object.safetensors", "not_object.safetensors", "the header is not a JSON object"},
        {"reversed.safetensors", "reversed.safetensors", "data_offsets [8, 4] end before they begin"},
        {"rank9.safetensors", "rank9.safetensors", "tensor 'w': rank 9"},
        {"negative.safetensors", "negative.safetensors", "tensor 'w': shape entry 0 is not an integer"},
        {"fraction.safetensors", "fraction.safetensors", "tensor 'w': shape entry 0 is not an integer"},
        {"no_dtype.safetensors", "no_dtype.safetensors", "tensor 'w': no \"dtype\" string"},
        {"metadata.safetensors", "metadata.safetensors", "\"__metadata__\" is not an object of strings"},
        {"nul.safetensors", "nul.safetensors", "holds a NUL byte"},
        {"no-such.safetensors", "no-such.safetensors", "cannot open the safetensors file: No such file or directory"},
        {"dup_shards/model.safetensors.index.json", "dup_shards/model-00002-of-00002.safetensors",
         "tensor 'x' is also in "},
        {"dup_shards", "dup_shards/model-00002-of-00002.safetensors", "(a duplicate name across shards)"},
        {"missing_shard/model.safetensors.index.json", "missing_shard/model.safetensors.index.json",
         "the weight_map puts tensor 'y' in shard "},
        {"missing_shard", "missing_shard/model.safetensors.index.json",
         "model-00002-of-00002.safetensors, which cannot be opened: No such file or directory"},
        {"wrong_shard", "wrong_shard/model.safetensors.index.json", "the weight_map puts tensor 'x' in "},
        {"not_in_index", "not_in_index/model-00001-of-00002.safetensors",
         "tensor 'y' is not in the weight_map of the index"},
        {"absent_tensor", "absent_tensor/model.safetensors.index.json", "tensor 'z' in "},
        {"slash_shard", "slash_shard/model.safetensors.index.json", "is not the file name of a shard"},
        {"empty_dir", "empty_dir", "neither model.safetensors nor model.safetensors.index.json"},
        {"broken.index.json", "broken.index.json", "the index is not valid JSON"},
    };
    static const char *const more[][2] = {
        // second phrases where one is not enough
        {"dup_shards", "model-00001-of-00002.safetensors"},
        {"missing_shard/model.safetensors.index.json", "which cannot be opened"},
        {"wrong_shard", "but it is in "},
        {"absent_tensor", "which does not hold it"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *path = in_work("fixtures/bad/%s", cases[i].open), *file = in_work("fixtures/bad/%s", cases[i].file);
        char err[1024] = "";
        StSet s;
        int rc = st_open(&s, path, err, sizeof err);
        size_t k = strlen(file);
        CHECK(rc == -1, "%s: st_open returned %d, want -1", path, rc);
        CHECK(strncmp(err, file, k) == 0 && strncmp(err + k, ": ", 2) == 0,
              "%s: the message does not start with '%s: ': %s", cases[i].open, file, err);
        CHECK(strstr(err, cases[i].phrase) != NULL, "%s: the message does not say '%s': %s", cases[i].open,
              cases[i].phrase, err);
        for (size_t j = 0; j < sizeof more / sizeof *more; j++)
            if (strcmp(more[j][0], cases[i].open) == 0)
                CHECK(strstr(err, more[j][1]) != NULL, "%s: the message does not say '%s': %s", cases[i].open,
                      more[j][1], err);
        CHECK(s.n == 0 && s.tensors == NULL && s.files == NULL && s.by_name == NULL, "%s: the set is not zeroed",
              cases[i].open);
        st_close(&s); // harmless after a failure
        if (getenv("TEST_SAFETENSORS_VERBOSE")) printf("refused: %s\n", err);
        free(path);
        free(file);
    }
    // a message that does not fit is cut, not overrun
    char small[16];
    memset(small, 'x', sizeof small);
    char *path = in_work("fixtures/bad/i64.safetensors");
    StSet s;
    CHECK(st_open(&s, path, small, 8) == -1 && strlen(small) == 7 && small[8] == 'x', "a short err buffer is overrun");
    free(path);
}

// ---------------------------------------------------------------- writing

static StOut outs[64];

// Reads path back and checks it holds got[] in order, as dtype: F32 bit for bit, BF16 as the fixture
// writer rounded it.
static void check_written(const char *path, StDtype dtype, const char *what) {
    StSet s;
    char err[512] = "";
    if (!CHECK(st_open(&s, path, err, sizeof err) == 0, "%s: reading back %s: %s", what, path, err)) return;
    CHECK(s.n == ngot, "%s: %d tensors read back, want %d", what, s.n, ngot);
    for (int i = 0; i < ngot && i < s.n; i++) {
        const StTensor *t = &s.tensors[i];
        const Got *g = &got[i];
        if (!CHECK(strcmp(t->name, g->out.name) == 0, "%s: tensor %d is '%s', want '%s'", what, i, t->name,
                   g->out.name))
            continue;
        CHECK(t->dtype == dtype && t->rank == g->out.rank && memcmp(t->shape, g->out.shape, sizeof t->shape) == 0,
              "%s: tensor '%s' has the wrong dtype or shape", what, t->name);
        CHECK(st_numel(t) == g->numel, "%s: tensor '%s' numel", what, t->name);
        if (st_numel(t) != g->numel) continue;
        int64_t bad = 0;
        const unsigned char *p = t->data;
        for (int64_t k = 0; k < g->numel; k++) {
            if (dtype == ST_F32) {
                uint32_t u, want = bits_of(g->out.data[k]);
                memcpy(&u, p + 4 * k, 4);
                if (u != want && bad++ < 5)
                    FAIL("%s: tensor '%s' element %lld is %08x, want %08x", what, t->name, (long long)k, u, want);
            } else {
                uint16_t h = (uint16_t)(p[2 * k] | p[2 * k + 1] << 8);
                if (h != g->bf16[k] && bad++ < 5)
                    FAIL("%s: tensor '%s' element %lld (fp32 %08x) is bf16 %04x, want %04x", what, t->name,
                         (long long)k, bits_of(g->out.data[k]), h, g->bf16[k]);
            }
        }
        CHECK(bad == 0, "%s: tensor '%s': %lld values wrong", what, t->name, (long long)bad);
    }
    st_close(&s);
}

// The header of a written file: size a multiple of 8, metadata first, spaces after the JSON.
static void check_header(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!CHECK(f != NULL, "cannot read %s", path)) return;
    unsigned char b[8];
    uint64_t n = 0;
    if (fread(b, 1, 8, f) == 8)
        for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    CHECK(n > 0 && n % 8 == 0 && n < 1 << 20, "%s: header size %llu is not a multiple of 8", path,
          (unsigned long long)n);
    if (n > 0 && n < 1 << 20) {
        char *h = xmalloc(n + 1);
        size_t got_n = fread(h, 1, n, f);
        h[got_n] = '\0';
        const char *meta = "{\"__metadata__\":{\"format\":\"pt\"}";
        CHECK(strncmp(h, meta, strlen(meta)) == 0, "%s: the header does not start with %s: %.60s", path, meta, h);
        char *end = strrchr(h, '}');
        int spaces = 1;
        for (char *p = end ? end + 1 : h; *p; p++) spaces &= *p == ' ';
        CHECK(end && spaces && (size_t)(h + got_n - end - 1) < 8, "%s: the header is not padded with spaces", path);
        cJSON *j = cJSON_ParseWithLength(h, got_n);
        CHECK(j != NULL, "%s: the header is not JSON", path);
        cJSON_Delete(j);
        free(h);
    }
    fclose(f);
}

static void reset_dir(const char *dir) {
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char *p = xmalloc(strlen(dir) + strlen(de->d_name) + 2);
        sprintf(p, "%s/%s", dir, de->d_name);
        if (unlink(p) != 0) rmdir(p);
        free(p);
    }
    if (d) closedir(d);
    mkdir(dir, 0755);
}

static void test_write_single(void) {
    char err[512] = "", ls[4096];
    char *dir = in_work("out/single"), *path = in_work("out/single/model.safetensors");
    reset_dir(dir);
    CHECK(st_write(path, outs, ngot, ST_F32, 0, err, sizeof err) == 0, "st_write F32: %s", err);
    list_dir(dir, ls, sizeof ls);
    CHECK(strcmp(ls, "model.safetensors") == 0, "after an F32 write the directory holds '%s'", ls);
    check_header(path);
    check_written(path, ST_F32, "F32 write");
    check_written(dir, ST_F32, "F32 write, by directory");

    CHECK(st_write(path, outs, ngot, ST_BF16, 0, err, sizeof err) == 0, "st_write BF16: %s", err);
    list_dir(dir, ls, sizeof ls);
    CHECK(strcmp(ls, "model.safetensors") == 0, "after a BF16 write the directory holds '%s'", ls);
    check_header(path);
    check_written(path, ST_BF16, "BF16 write");

    // a shard size the data fits in: one plain file
    CHECK(st_write(path, outs, ngot, ST_F32, 1 << 30, err, sizeof err) == 0, "st_write with a big shard size: %s", err);
    list_dir(dir, ls, sizeof ls);
    CHECK(strcmp(ls, "model.safetensors") == 0, "a write that fits one shard left '%s'", ls);

    // no tensors: just the metadata
    CHECK(st_write(path, NULL, 0, ST_F32, 0, err, sizeof err) == 0, "st_write of no tensors: %s", err);
    StSet s;
    CHECK(st_open(&s, path, err, sizeof err) == 0 && s.n == 0, "reading back no tensors: %s", err);
    st_close(&s);
    check_header(path);
    free(dir);
    free(path);
}

static void test_write_sharded(void) {
    char err[512] = "", ls[4096];
    char *dir = in_work("out/sharded"), *path = in_work("out/sharded/model.safetensors");
    char *index = in_work("out/sharded/model.safetensors.index.json");
    reset_dir(dir);
    // 56: the fixtures' tensors then fill one shard exactly (4 + 0 + 52) and overflow another by 4 (56 + 4)
    const int64_t shard_bytes = 56;
    // the packing, worked out here: in order, a new shard when the next tensor would not fit
    int nshards = 1, shard_of[64];
    int64_t size = 0, total = 0;
    for (int i = 0; i < ngot; i++) {
        int64_t nb = got[i].numel * 4;
        if (size > 0 && size + nb > shard_bytes) nshards++, size = 0;
        shard_of[i] = nshards;
        size += nb;
        total += nb;
    }
    CHECK(nshards >= 4, "the fixtures give only %d shards", nshards);
    // stale files a sharded write must remove: a plain model.safetensors, shards of another count
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
    char *stale = in_work("out/sharded/model-00001-of-00099.safetensors");
    f = fopen(stale, "w");
    if (f) fclose(f);
    char *keep_me = in_work("out/sharded/other-00001-of-00002.safetensors");
    f = fopen(keep_me, "w");
    if (f) fclose(f);

    CHECK(st_write(path, outs, ngot, ST_F32, shard_bytes, err, sizeof err) == 0, "sharded st_write: %s", err);
    char want[4096] = "";
    size_t at = 0;
    for (int k = 1; k <= nshards; k++)
        at += (size_t)snprintf(want + at, sizeof want - at, "model-%05d-of-%05d.safetensors ", k, nshards);
    snprintf(want + at, sizeof want - at, "model.safetensors.index.json other-00001-of-00002.safetensors");
    list_dir(dir, ls, sizeof ls);
    CHECK(strcmp(ls, want) == 0, "after a sharded write the directory holds\n  '%s', want\n  '%s'", ls, want);
    CHECK(!exists(path), "a sharded write left model.safetensors");
    CHECK(exists(keep_me), "a sharded write removed a file of another stem");
    check_written(index, ST_F32, "sharded write, by index");
    StSet set;
    if (CHECK(st_open(&set, index, err, sizeof err) == 0, "reading %s: %s", index, err)) {
        for (int i = 0; i < ngot && i < set.n; i++) {
            char name[64];
            snprintf(name, sizeof name, "/model-%05d-of-%05d.safetensors", shard_of[i], nshards);
            CHECK(ends_with(set.tensors[i].file, name), "tensor '%s' is in %s, want shard %d of %d",
                  set.tensors[i].name, set.tensors[i].file, shard_of[i], nshards);
        }
    }
    st_close(&set);
    check_written(dir, ST_F32, "sharded write, by directory");

    // each shard holds at most shard_bytes, or one tensor
    for (int k = 1; k <= nshards; k++) {
        char *shard = in_work("out/sharded/model-%05d-of-%05d.safetensors", k, nshards);
        StSet s;
        if (CHECK(st_open(&s, shard, err, sizeof err) == 0, "reading shard %s: %s", shard, err)) {
            int64_t bytes = 0;
            for (int i = 0; i < s.n; i++) bytes += s.tensors[i].nbytes;
            CHECK(s.n >= 1 && (bytes <= shard_bytes || s.n == 1), "%s: %d tensors, %lld bytes", shard, s.n,
                  (long long)bytes);
            check_header(shard);
        }
        st_close(&s);
        free(shard);
    }

    // the index as transformers writes it: total_size, weight_map sorted by name
    FILE *fi = fopen(index, "rb");
    char *text = xmalloc(1 << 20);
    size_t len = fi ? fread(text, 1, (1 << 20) - 1, fi) : 0;
    text[len] = '\0';
    if (fi) fclose(fi);
    cJSON *j = cJSON_Parse(text);
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "metadata"), "total_size");
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
    CHECK(cJSON_IsNumber(ts) && ts->valuedouble == (double)total, "the index's total_size is not %lld",
          (long long)total);
    CHECK(cJSON_GetArraySize(wm) == ngot, "the index's weight_map has %d entries, want %d", cJSON_GetArraySize(wm),
          ngot);
    const cJSON *prev = NULL;
    for (const cJSON *e = wm ? wm->child : NULL; e; prev = e, e = e->next)
        CHECK(!prev || strcmp(prev->string, e->string) < 0, "the weight_map is not sorted: '%s' before '%s'",
              prev ? prev->string : "", e->string);
    CHECK(strncmp(text, "{\n  \"metadata\": {\n    \"total_size\": ", 36) == 0 && len > 0 && text[len - 1] == '\n',
          "the index is not laid out as transformers writes it:\n%s", text);
    cJSON_Delete(j);
    free(text);

    // BF16, sharded
    CHECK(st_write(path, outs, ngot, ST_BF16, shard_bytes / 2, err, sizeof err) == 0, "sharded BF16 st_write: %s", err);
    check_written(index, ST_BF16, "sharded BF16 write");

    // back to one file: the index and the shards go
    CHECK(st_write(path, outs, ngot, ST_F32, 0, err, sizeof err) == 0, "st_write after a sharded one: %s", err);
    list_dir(dir, ls, sizeof ls);
    CHECK(strcmp(ls, "model.safetensors other-00001-of-00002.safetensors") == 0,
          "a single-file write over a sharded one left '%s'", ls);
    check_written(dir, ST_F32, "single-file write over a sharded one");
    free(dir);
    free(path);
    free(index);
    free(stale);
    free(keep_me);
}

static void test_write_failures(void) {
    char err[512] = "", before[4096], after[4096];
    char *out = in_work("out");

    // into a missing directory, plain and sharded
    char *missing = in_work("out/missing"), *path = in_work("out/missing/model.safetensors");
    list_dir(out, before, sizeof before);
    CHECK(st_write(path, outs, ngot, ST_F32, 0, err, sizeof err) == -1, "a write into a missing directory succeeded");
    CHECK(strncmp(err, path, strlen(path)) == 0 && strstr(err, "No such file or directory"),
          "a write into a missing directory says: %s", err);
    CHECK(st_write(path, outs, ngot, ST_BF16, 64, err, sizeof err) == -1,
          "a sharded write into a missing directory succeeded");
    CHECK(strstr(err, "out/missing/model-00001-of-") && strstr(err, "No such file or directory"),
          "a sharded write into a missing directory says: %s", err);
    list_dir(out, after, sizeof after);
    CHECK(!exists(missing) && strcmp(before, after) == 0, "a failed write changed %s: '%s' -> '%s'", out, before,
          after);
    free(missing);
    free(path);

    // a rename that cannot happen (a directory where the second shard goes): nothing of the write stays
    char *dir = in_work("out/blocked");
    reset_dir(dir);
    path = in_work("out/blocked/model.safetensors");
    float v[16] = {1, 2, 3};
    StOut three[3] = {{.name = "a", .rank = 1, .shape = {16}, .data = v},
                      {.name = "b", .rank = 1, .shape = {16}, .data = v},
                      {.name = "c", .rank = 1, .shape = {16}, .data = v}};
    char *block = in_work("out/blocked/model-00002-of-00003.safetensors");
    char *inside = in_work("out/blocked/model-00002-of-00003.safetensors/keep");
    CHECK(mkdir(block, 0755) == 0, "cannot make %s", block);
    FILE *f = fopen(inside, "w");
    if (f) fclose(f);
    CHECK(st_write(path, three, 3, ST_F32, 64, err, sizeof err) == -1, "a write over a directory succeeded");
    CHECK(strncmp(err, block, strlen(block)) == 0 && strstr(err, "cannot write"), "a blocked rename says: %s", err);
    list_dir(dir, after, sizeof after);
    CHECK(strcmp(after, "model-00002-of-00003.safetensors") == 0, "a failed sharded write left '%s'", after);
    // the same for one file: the path is a directory
    char *target = in_work("out/blocked/model-00002-of-00003.safetensors");
    CHECK(st_write(target, three, 3, ST_F32, 0, err, sizeof err) == -1, "a write over a directory succeeded");
    list_dir(dir, after, sizeof after);
    CHECK(strcmp(after, "model-00002-of-00003.safetensors") == 0, "a failed single write left '%s'", after);
    unlink(inside);
    rmdir(block);

    // refused before anything is written
    float one = 1;
    static const struct {
        StOut t[2];
        int n;
        StDtype dtype;
        const char *phrase;
    } bad[] = {
        {{{.name = "a", .rank = 1, .shape = {1}, .data = NULL}}, 1, ST_F32, "tensor 'a' has no data"},
        {{{.name = "a", .rank = 9, .shape = {1}, .data = NULL}}, 1, ST_F32, "tensor 'a' has rank 9"},
        {{{.name = "a", .rank = 1, .shape = {-2}, .data = NULL}}, 1, ST_F32, "tensor 'a' has dimension 0 = -2 < 0"},
        {{{.name = NULL, .rank = 0, .shape = {0}, .data = NULL}}, 1, ST_F32, "tensor 0 has no name"},
        {{{.name = "__metadata__", .rank = 0, .shape = {0}, .data = NULL}}, 1, ST_F32, "the header's metadata key"},
        {{{.name = "a", .rank = 0, .shape = {0}, .data = NULL}, {.name = "a", .rank = 0, .shape = {0}, .data = NULL}},
         2,
         ST_F32,
         "tensor 'a' is given twice"},
        {{{.name = "a", .rank = 2, .shape = {INT64_MAX / 2, 3}, .data = NULL}}, 1, ST_F32, "overflows"},
        {{{.name = "a", .rank = 0, .shape = {0}, .data = NULL}}, 1, ST_F16, "cannot write dtype F16"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        StOut t[2] = {bad[i].t[0], bad[i].t[1]};
        for (int k = 0; k < 2; k++)
            if (t[k].rank == 0 && t[k].name) t[k].data = &one;
        CHECK(st_write(path, t, bad[i].n, bad[i].dtype, 0, err, sizeof err) == -1 &&
                  strncmp(err, path, strlen(path)) == 0 && strstr(err, bad[i].phrase),
              "bad write %zu: want '%s', got: %s", i, bad[i].phrase, err);
        list_dir(dir, after, sizeof after);
        CHECK(after[0] == '\0', "a refused write left '%s'", after);
    }
    free(target);
    free(block);
    free(inside);
    free(path);
    free(dir);
    free(out);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: test_safetensors PYTHON tests/make_safetensors.py WORKDIR\n");
        return 2;
    }
    python = argv[1];
    writer = argv[2];
    workdir = argv[3];
    mkdir(workdir, 0755);
    if (make_fixtures() != 0) return 1;
    test_good();
    test_bad();
    for (int i = 0; i < ngot; i++) outs[i] = got[i].out;
    CHECK(ngot == 13, "%d distinct tensors read from the fixtures, want 13", ngot);
    test_write_single();
    test_write_sharded();
    test_write_failures();
    for (int i = 0; i < ngot; i++) {
        free((char *)got[i].out.name);
        free((float *)got[i].out.data);
        free(got[i].bf16);
    }
    if (check_failures) return check_summary("test_safetensors");
    printf("safetensors: all checks passed\n");
    return 0;
}
