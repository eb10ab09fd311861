// test_data: runtime/data.c on a small text file and small llm.c token files
// written by tests/make_llmc_tokens.py, an independent fixture writer. Checks
// exact tokens and targets of batches, the wrap-around, validation batches,
// split sizes, that the data file is left as it was, and one error per kind
// of bad input (message names the file and says what is wrong).
//
// usage: test_data PYTHON tests/make_llmc_tokens.py WORKDIR
// Prints each failure and exits 1 if there was any.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/data.h"
#include "tests/check.h"

static const char *python, *writer, *workdir;

static void check_i64(int64_t got, int64_t want, const char *what) {
    CHECK(got == want, "%s: got %lld, want %lld", what, (long long)got, (long long)want);
}

// the fixture's formulas, computed here on their own
static int32_t llmc_token(int64_t i) { return (int32_t)((7919 * i + 11) % 50000); }
static int32_t text_byte(int64_t i) { return (int32_t)((13 * i + 7) % 256); }

static char *in_workdir(const char *name) {
    size_t n = strlen(workdir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) {
        printf("FAIL: out of memory\n");
        exit(1);
    }
    snprintf(p, n, "%s/%s", workdir, name);
    return p;
}

// Runs PYTHON WRITER OUT ARGS... ; returns 0 when it exited 0 and OUT exists.
static int make_fixture(const char *out, const char *args) {
    char *argv[32];
    char buf[512];
    int argc = 0;
    argv[argc++] = (char *)python;
    argv[argc++] = (char *)writer;
    argv[argc++] = (char *)out;
    snprintf(buf, sizeof buf, "%s", args);
    for (char *tok = strtok(buf, " "); tok && argc < 31; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    unlink(out);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execv(python, argv);
        execvp(python, argv);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        FAIL("fixture writer '%s %s %s %s' failed (status %d)", python, writer, out, args, status);
        return -1;
    }
    struct stat st;
    if (stat(out, &st) != 0) {
        FAIL("fixture writer did not write %s", out);
        return -1;
    }
    return 0;
}

static void write_bytes(const char *path, int64_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        FAIL("cannot write %s: %s", path, strerror(errno));
        return;
    }
    for (int64_t i = 0; i < n; i++) fputc(text_byte(i), f);
    CHECK(fclose(f) == 0, "cannot write %s", path);
}

static unsigned char *slurp(const char *path, long *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *len = n;
    return p;
}

// tokens[b*T + t] == x(pos + b*T + t), targets[b*T + t] == x(pos + b*T + t + 1)
static void check_batch(const char *what, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T,
                        int64_t pos, int32_t (*x)(int64_t)) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int64_t i = b * T + t;
            if (tokens[i] != x(pos + i) || targets[i] != x(pos + i + 1)) {
                FAIL("%s (from token %lld): at b=%lld t=%lld got token %d target %d, want %d %d", what, (long long)pos,
                     (long long)b, (long long)t, tokens[i], targets[i], x(pos + i), x(pos + i + 1));
                return;
            }
        }
}

static void check_error(const char *path, int64_t vocab, double val_fraction, const char *phrase) {
    DataSet d;
    char err[512] = "";
    int rc = data_open(&d, path, vocab, val_fraction, err, sizeof err);
    CHECK(rc == -1, "data_open(%s, V=%lld, %g) returned %d, want -1", path, (long long)vocab, val_fraction, rc);
    CHECK(strstr(err, path) == err, "message for %s does not start with the file name: '%s'", path, err);
    CHECK(strstr(err, phrase) != NULL, "message for %s lacks '%s': '%s'", path, phrase, err);
    CHECK(d.map == NULL && d.path == NULL && d.ntokens == 0, "failed data_open(%s) left *d set", path);
    if (rc == 0) data_close(&d);
}

// B=4, T=8 on 1000 tokens, val_fraction 0.1: 900 training tokens, 100 validation
static void test_llmc(void) {
    char *path = in_workdir("tokens.bin");
    if (make_fixture(path, "--count 1000") != 0) {
        free(path);
        return;
    }
    long len0;
    unsigned char *before = slurp(path, &len0);
    struct stat st0, st1;
    stat(path, &st0);

    DataSet d;
    char err[512] = "";
    if (data_open(&d, path, 50257, 0.1, err, sizeof err) != 0) {
        FAIL("data_open(%s): %s", path, err);
        free(before);
        free(path);
        return;
    }
    CHECK(d.format == DATA_LLMC, "tokens.bin: not read as an llm.c token file");
    check_i64(d.ntokens, 1000, "tokens.bin: ntokens");
    check_i64(d.ntrain, 900, "tokens.bin: training split");
    check_i64(d.nval, 100, "tokens.bin: validation split");
    check_i64(d.train_pos, 0, "tokens.bin: train_pos after open");
    CHECK(data_check_batch(&d, 4, 8, err, sizeof err) == 0, "data_check_batch(4, 8): %s", err);

    enum { B = 4, T = 8 };
    int32_t tokens[B * T], targets[B * T]; // (B, T) each
    data_next_train(&d, B, T, tokens, targets, NULL);
    // literal values: token i is (7919*i + 11) % 50000
    CHECK(tokens[0] == 11 && targets[0] == 7930, "first batch starts %d -> %d, want 11 -> 7930", tokens[0], targets[0]);
    CHECK(tokens[T] == 13363, "row 1 starts with %d, want 13363 (token 8)", tokens[T]);
    CHECK(targets[T - 1] == tokens[T], "row 0's last target %d is not row 1's first token %d", targets[T - 1],
          tokens[T]);
    CHECK(tokens[31] == 45500 && targets[31] == 3419,
          "last of first batch %d -> %d, want 45500 -> 3419 (tokens 31, 32)", tokens[31], targets[31]);
    check_batch("train batch 0", tokens, targets, B, T, 0, llmc_token);
    check_i64(d.train_pos, 32, "train_pos after one batch");
    data_next_train(&d, B, T, tokens, targets, NULL);
    check_batch("train batch 1", tokens, targets, B, T, 32, llmc_token);
    // batches 2..27 start at 64..864; 864 + 33 <= 900, 896 + 33 > 900: wrap
    for (int k = 2; k < 28; k++) {
        check_i64(d.train_pos, 32 * k, "train_pos before a batch");
        data_next_train(&d, B, T, tokens, targets, NULL);
        check_batch("train batch k", tokens, targets, B, T, 32 * k, llmc_token);
    }
    check_i64(d.train_pos, 0, "train_pos after the last batch that fits (wrap)");
    data_next_train(&d, B, T, tokens, targets, NULL);
    check_batch("train batch 28 (wrapped)", tokens, targets, B, T, 0, llmc_token);

    // resume from a checkpointed position; a position that cannot hold a batch restarts
    d.train_pos = 64;
    data_next_train(&d, B, T, tokens, targets, NULL);
    check_batch("train batch from train_pos 64", tokens, targets, B, T, 64, llmc_token);
    d.train_pos = 868; // 868 + 33 > 900
    data_next_train(&d, B, T, tokens, targets, NULL);
    check_batch("train batch from a train_pos past the end", tokens, targets, B, T, 0, llmc_token);
    d.train_pos = -5;
    data_next_train(&d, B, T, tokens, targets, NULL);
    check_batch("train batch from a negative train_pos", tokens, targets, B, T, 0, llmc_token);
    // a batch that ends exactly at the split's end: B=1, T=29, 899 = 31*29, so batch 30
    // reads tokens 870..899 and is the last before the wrap
    d.train_pos = 0;
    for (int k = 0; k < 31; k++) {
        data_next_train(&d, 1, 29, tokens, targets, NULL);
        check_batch("train batch k of 1 x 29", tokens, targets, 1, 29, 29 * k, llmc_token);
    }
    check_i64(d.train_pos, 0, "train_pos after the batch that ends at the split's end");

    // a data-parallel rank's part: rank r of 2 at B=2 reads rows 2r, 2r+1 of the global batch of 4 rows,
    // the global position advancing by 4 rows, wrapping as one process at B=4 does; validation the same
    d.ranks = 2;
    CHECK(data_check_batch(&d, 2, 8, err, sizeof err) == 0, "data_check_batch(2, 8) of 2 ranks: %s", err);
    CHECK(data_check_batch(&d, 2, 450, err, sizeof err) == -1 && strstr(err, "B=4 x T=450"),
          "data_check_batch(2, 450) of 2 ranks: '%s' (wants the global batch B=4)", err);
    for (int r = 0; r < 2; r++) {
        d.rank = r, d.train_pos = 0;
        for (int k = 0; k < 29; k++) {
            data_next_train(&d, 2, T, tokens, targets, NULL);
            check_batch("rank r's rows of global batch k", tokens, targets, 2, T, 32 * (k % 28) + 16 * r, llmc_token);
        }
        data_val_batch(&d, 1, 2, T, tokens, targets, NULL);
        check_batch("rank r's rows of validation batch 1", tokens, targets, 2, T, 900 + 32 + 16 * r, llmc_token);
        check_i64(data_val_batches(&d, 2, T), 3, "data_val_batches(2, 8) of 2 ranks");
    }
    d.rank = 0, d.ranks = 1;
    d.train_pos = 32;

    // validation: 3 whole batches at 900, 932, 964 (964 + 33 = 997 <= 1000)
    check_i64(data_val_batches(&d, B, T), 3, "data_val_batches(4, 8)");
    check_i64(data_val_batches(&d, 1, 99), 1, "data_val_batches(1, 99)");
    check_i64(data_val_batches(&d, 1, 100), 0, "data_val_batches(1, 100)");
    check_i64(data_val_batches(&d, 3, 11), 3, "data_val_batches(3, 11)"); // 99 / 33
    check_i64(data_val_batches(&d, 1, 50), 1, "data_val_batches(1, 50)"); // a second would need 50..100
    check_i64(data_val_batches(&d, 1, 49), 2, "data_val_batches(1, 49)");
    int64_t starts[] = {900, 932, 964, 900, 932, 964};
    for (int i = 0; i < 6; i++) {
        data_val_batch(&d, i, B, T, tokens, targets, NULL);
        check_batch("val batch i", tokens, targets, B, T, starts[i], llmc_token);
    }
    data_val_batch(&d, 0, B, T, tokens, targets, NULL);
    CHECK(tokens[0] == 27111 && targets[B * T - 1] == 30519,
          "val batch 0 runs %d .. %d, want 27111 .. 30519 (tokens 900, 932)", tokens[0], targets[B * T - 1]);
    data_val_batch(&d, -1, B, T, tokens, targets, NULL);
    check_batch("val batch -1", tokens, targets, B, T, 964, llmc_token);
    check_i64(d.train_pos, 32, "train_pos after validation (must not move)");

    // a split too small for one batch; the boundaries exactly
    CHECK(data_check_batch(&d, 1, 99, err, sizeof err) == 0, "data_check_batch(1, 99): %s", err);
    err[0] = 0;
    CHECK(data_check_batch(&d, 1, 100, err, sizeof err) == -1,
          "data_check_batch(1, 100) passed with 100 validation tokens");
    CHECK(strstr(err, path) == err && strstr(err, "validation split holds 100 tokens") && strstr(err, "B*T+1 = 101"),
          "message for a validation split too small: '%s'", err);
    err[0] = 0;
    CHECK(data_check_batch(&d, 1, 900, err, sizeof err) == -1,
          "data_check_batch(1, 900) passed with 900 training tokens");
    CHECK(strstr(err, path) == err && strstr(err, "training split holds 900 tokens") && strstr(err, "B*T+1 = 901"),
          "message for a training split too small: '%s'", err);
    err[0] = 0;
    CHECK(data_check_batch(&d, 0, 8, err, sizeof err) == -1 && strstr(err, "must be positive"),
          "data_check_batch(0, 8): '%s'", err);
    err[0] = 0;
    CHECK(data_check_batch(&d, INT64_MAX / 2, 4, err, sizeof err) == -1 && strstr(err, "must be positive"),
          "data_check_batch with an overflowing B*T: '%s'", err);
    // and the batch functions write zeros rather than read past the split
    int32_t big_tokens[1001], big_targets[1001]; // (1, 1001) each
    big_tokens[0] = big_targets[0] = -1;
    data_next_train(&d, 1, 1001, big_tokens, big_targets, NULL);
    CHECK(big_tokens[0] == 0 && big_targets[0] == 0, "an oversized training batch was not zeros");
    data_val_batch(&d, 0, 1, 1001, big_tokens, big_targets, NULL);
    CHECK(big_tokens[1000] == 0 && big_targets[1000] == 0, "an oversized validation batch was not zeros");
    data_close(&d);
    CHECK(d.map == NULL && d.path == NULL, "data_close left *d set");
    data_close(&d); // harmless twice

    // with no validation split the training split is the whole file
    CHECK(data_open(&d, path, 50257, 0, err, sizeof err) == 0, "data_open(%s, val 0): %s", path, err);
    check_i64(d.ntrain, 1000, "training split with val_fraction 0");
    check_i64(d.nval, 0, "validation split with val_fraction 0");
    check_i64(data_val_batches(&d, 1, 1), 0, "data_val_batches with no validation split");
    CHECK(data_check_batch(&d, 1, 999, err, sizeof err) == 0, "data_check_batch(1, 999), val 0: %s", err);
    CHECK(data_check_batch(&d, 1, 1000, err, sizeof err) == -1, "data_check_batch(1, 1000) passed with 1000 tokens");
    data_close(&d);
    CHECK(data_open(&d, path, 50257, 0.15, err, sizeof err) == 0, "data_open(%s, val 0.15): %s", path, err);
    check_i64(d.nval, 150, "validation split with val_fraction 0.15");
    check_i64(d.ntrain, 850, "training split with val_fraction 0.15");
    data_close(&d);
    CHECK(data_open(&d, path, 50257, 0.1236, err, sizeof err) == 0, "data_open(%s, val 0.1236): %s", path, err);
    check_i64(d.nval, 124, "validation split with val_fraction 0.1236 (123.6 tokens, rounded)");
    data_close(&d);

    // the data file is left as it was
    long len1;
    unsigned char *after = slurp(path, &len1);
    stat(path, &st1);
    CHECK(before && after && len0 == len1 && memcmp(before, after, (size_t)len0) == 0, "%s changed", path);
    CHECK(st0.st_mtime == st1.st_mtime && st0.st_size == st1.st_size, "%s: size or mtime changed", path);
    free(before);
    free(after);
    free(path);
}

// B=2, T=16 on 500 bytes, val_fraction 0.2: 400 training tokens, 100 validation
static void test_text(void) {
    char *path = in_workdir("text.txt");
    write_bytes(path, 500);
    DataSet d;
    char err[512] = "";
    if (data_open(&d, path, 256, 0.2, err, sizeof err) != 0) {
        FAIL("data_open(%s): %s", path, err);
        free(path);
        return;
    }
    CHECK(d.format == DATA_TEXT, "text.txt: not read as bytes");
    check_i64(d.ntokens, 500, "text.txt: ntokens");
    check_i64(d.ntrain, 400, "text.txt: training split");
    check_i64(d.nval, 100, "text.txt: validation split");
    enum { B = 2, T = 16 };
    int32_t tokens[B * T], targets[B * T]; // (B, T) each
    CHECK(data_check_batch(&d, B, T, err, sizeof err) == 0, "data_check_batch(2, 16): %s", err);
    data_next_train(&d, B, T, tokens, targets, NULL);
    CHECK(tokens[0] == 7 && targets[0] == 20 && tokens[T] == 215,
          "text batch 0 starts %d -> %d, row 1 %d; want 7 -> 20, 215", tokens[0], targets[0], tokens[T]);
    check_batch("text train batch 0", tokens, targets, B, T, 0, text_byte);
    // 12 batches at 0..352 (352 + 33 <= 400), then wrap
    for (int k = 1; k < 12; k++) {
        data_next_train(&d, B, T, tokens, targets, NULL);
        check_batch("text train batch k", tokens, targets, B, T, 32 * k, text_byte);
    }
    check_i64(d.train_pos, 0, "text train_pos after the last batch that fits (wrap)");
    data_next_train(&d, B, T, tokens, targets, NULL);
    check_batch("text train batch 12 (wrapped)", tokens, targets, B, T, 0, text_byte);
    check_i64(data_val_batches(&d, B, T), 3, "text data_val_batches(2, 16)");
    data_val_batch(&d, 2, B, T, tokens, targets, NULL);
    check_batch("text val batch 2", tokens, targets, B, T, 464, text_byte);
    data_val_batch(&d, 4, B, T, tokens, targets, NULL);
    check_batch("text val batch 4 (wrapped)", tokens, targets, B, T, 432, text_byte);
    data_close(&d);

    CHECK(data_open(&d, path, 50257, 0.2, err, sizeof err) == 0, "data_open(%s, V=50257): %s", path, err);
    data_close(&d);
    check_error(path, 255, 0.1, "vocabulary V=255 is smaller than 256");
    check_error(path, 255, 0.1, "give an llm.c token file");
    free(path);
}

// one fixture per kind of broken token file
static void test_errors(void) {
    static const struct {
        const char *name, *args;
        int64_t vocab;
        const char *phrase;
    } cases[] = {
        {"bad_magic.bin", "--count 100 --magic 20240521", 50257,
         "not an llm.c token file: the magic number at byte 0 is 20240521"},
        {"bad_version.bin", "--count 100 --version 2", 50257, "unsupported llm.c token file version 2"},
        {"truncated.bin", "--count 100 --truncate 1", 50257,
         "the header says 100 tokens (200 bytes after the 1024-byte header) but the file has 199"},
        {"trailing.bin", "--count 100 --extra 2", 50257, "trailing bytes"},
        {"miscount.bin", "--count 100 --header-count 99", 50257, "the header says 99 tokens"},
        {"negative.bin", "--count 100 --header-count -1", 50257, "token count -1 (byte 8) is negative"},
        {"short.bin", "--count 0 --truncate 24", 50257, "too short for an llm.c token file: 1000 bytes"},
        {"short.dat", "--count 0 --truncate 24", 50257, "starts with llm.c's magic number"},
        {"no_tokens.bin", "--count 0", 50257, "says 0 tokens"},
        {"big_token.bin", "--count 1000 --set 77=50257", 50257,
         "token at index 77 (byte 1178) is 50257, not below the model's vocabulary size 50257"},
        {"l3_bad_version.bin", "--count 100 --magic 20240801 --version 1", 128256,
         "version 1 at byte 4, expected 7 for magic 20240801 (uint32 tokens)"},
        {"l3_truncated.bin", "--count 100 --magic 20240801 --version 7 --truncate 2", 128256,
         "the header says 100 tokens (400 bytes after the 1024-byte header) but the file has 398"},
        {"l3_big_token.bin", "--count 1000 --magic 20240801 --version 7 --mod 128256 --set 5=128256", 128256,
         "token at index 5 (byte 1044) is 128256, not below the model's vocabulary size 128256"},
        {"l3_huge_token.bin", "--count 100 --magic 20240801 --version 7 --set 3=4294967295", 128256,
         "token at index 3 (byte 1036) is"},
        {"tiny.bin", "--count 1000", 50257, "training split holds"}, // checked with B, T below
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = in_workdir(cases[i].name);
        if (make_fixture(path, cases[i].args) == 0) {
            if (strcmp(cases[i].name, "tiny.bin") != 0) {
                check_error(path, cases[i].vocab, 0.1, cases[i].phrase);
            } else { // 1000 tokens, 900 for training: B=8, T=128 needs 1025
                DataSet d;
                char err[512] = "";
                CHECK(data_open(&d, path, 50257, 0.1, err, sizeof err) == 0, "data_open(%s): %s", path, err);
                err[0] = 0;
                CHECK(data_check_batch(&d, 8, 128, err, sizeof err) == -1, "a batch of 8 x 128 fits in 900 tokens?");
                CHECK(strstr(err, path) == err &&
                          strstr(err,
                                 "training split holds 900 tokens but one batch of B=8 x T=128 needs B*T+1 = 1025"),
                      "message for a file too small for a batch: '%s'", err);
                data_close(&d);
            }
        }
        free(path);
    }
    // the offending token one lower is fine, and so is a vocabulary one larger
    char *path = in_workdir("edge_token.bin");
    if (make_fixture(path, "--count 1000 --set 77=50256") == 0) {
        DataSet d;
        char err[512] = "";
        CHECK(data_open(&d, path, 50257, 0.1, err, sizeof err) == 0, "data_open(%s) with token 50256 < V: %s", path,
              err);
        data_close(&d);
    }
    free(path);
    // a token file is known by its magic number whatever its name
    path = in_workdir("tokens.dat");
    if (make_fixture(path, "--count 100") == 0) {
        DataSet d;
        char err[512] = "";
        CHECK(data_open(&d, path, 50257, 0.1, err, sizeof err) == 0, "data_open(%s): %s", path, err);
        CHECK(d.format == DATA_LLMC && d.ntokens == 100, "tokens.dat not read as an llm.c token file of 100 tokens");
        data_close(&d);
        check_error(path, 256, 0.1, "token at index 1 (byte 1026) is 7930"); // V=256 < 7930
    }
    free(path);

    path = in_workdir("no-such-file.bin");
    check_error(path, 50257, 0.1, "cannot open the data file: No such file or directory");
    free(path);
    path = in_workdir("empty.txt");
    write_bytes(path, 0);
    check_error(path, 50257, 0.1, "empty file");
    free(path);
    check_error(workdir, 50257, 0.1, "is a directory");
    path = in_workdir("fifo");
    unlink(path);
    if (mkfifo(path, 0600) == 0) check_error(path, 50257, 0.1, "is not a regular file");
    free(path);
    path = in_workdir("text.txt");
    check_error(path, 50257, 1.5, "val_fraction 1.5 is not in [0, 1]");
    check_error(path, 50257, -0.1, "is not in [0, 1]");
    check_error(path, 50257, NAN, "is not in [0, 1]");
    check_error(path, 0, 0.1, "vocabulary size 0 is not positive");
    free(path);
}

static int32_t llama3_token(int64_t i) { return (int32_t)((7919 * i + 11) % 128256); }

// llm.c's Llama-3 token files (uint32 tokens, ids above 65535 included), a
// separate validation file (val_fraction 1), and loss masks beside them.
static void test_llama3_and_masks(void) {
    char *path = in_workdir("l3.bin"), *mask = in_workdir("l3.mask");
    char args[256];
    snprintf(args, sizeof args, "--count 1000 --magic 20240801 --version 7 --mod 128256 --mask-out %s", mask);
    unlink(mask);
    if (make_fixture(path, args) != 0) goto out;
    DataSet d;
    char err[512] = "";
    if (data_open(&d, path, 128256, 0.1, err, sizeof err) != 0) {
        FAIL("data_open(%s): %s", path, err);
        goto out;
    }
    CHECK(d.format == DATA_LLMC3, "l3.bin: not read as a Llama-3 token file");
    check_i64(d.ntokens, 1000, "l3.bin: ntokens");
    CHECK(d.mask != NULL && d.mask_path && strcmp(d.mask_path, mask) == 0, "l3.bin: its mask %s was not found", mask);
    check_i64(d.nmasked, 334, "l3.bin: tokens the mask excludes (i %% 3 == 0 of 1000)");
    enum { B = 2, T = 8 };
    int32_t tokens[B * T], targets[B * T]; // (B, T) each
    data_next_train(&d, B, T, tokens, targets, NULL);
    for (int64_t i = 0; i < B * T; i++) {
        int32_t want = (i + 1) % 3 == 0 ? DATA_IGNORE : llama3_token(i + 1);
        if (tokens[i] != llama3_token(i) || targets[i] != want) {
            FAIL("l3 masked batch at %lld: token %d target %d, want %d %d", (long long)i, tokens[i], targets[i],
                 llama3_token(i), want);
            break;
        }
    }
    CHECK(tokens[9] == 71282, "l3 token 9 is %d, want 71282 (past uint16)", tokens[9]);
    data_val_batch(&d, 0, B, T, tokens, targets, NULL);
    CHECK(targets[0] == 80950 && targets[2] == DATA_IGNORE,
          "l3 val batch: targets %d %d, want 80950 (token 901) %d (903)", targets[0], targets[2], DATA_IGNORE);
    data_close(&d);
    CHECK(d.mask == NULL && d.mask_path == NULL, "data_close left the mask set");

    // the whole file as validation data (--val-data)
    CHECK(data_open(&d, path, 128256, 1, err, sizeof err) == 0, "data_open(%s, val 1): %s", path, err);
    check_i64(d.ntrain, 0, "training split with val_fraction 1");
    check_i64(d.nval, 1000, "validation split with val_fraction 1");
    CHECK(data_check_batch(&d, B, T, err, sizeof err) == 0, "data_check_batch on a validation file: %s", err);
    data_val_batch(&d, 1, B, T, tokens, targets, NULL);
    CHECK(tokens[0] == llama3_token(16), "val file batch 1 starts with %d, want %d", tokens[0], llama3_token(16));
    data_close(&d);

    // masks that do not fit their token file
    snprintf(args, sizeof args, "--count 1000 --magic 20240801 --version 7 --mod 128256 --mask-out %s --mask-count 999",
             mask);
    if (make_fixture(path, args) == 0) {
        err[0] = 0;
        CHECK(data_open(&d, path, 128256, 0.1, err, sizeof err) == -1 && d.map == NULL, "a mask one short was taken");
        CHECK(strstr(err, mask) == err && strstr(err, "the mask holds 999 entries (header: 999) but") &&
                  strstr(err, "l3.bin holds 1000 tokens"),
              "message for a mask one short: '%s'", err);
    }
    snprintf(args, sizeof args, "--count 1000 --magic 20240801 --version 7 --mod 128256 --mask-out %s --mask-set 17=2",
             mask);
    if (make_fixture(path, args) == 0) {
        err[0] = 0;
        CHECK(data_open(&d, path, 128256, 0.1, err, sizeof err) == -1, "a mask holding a 2 was taken");
        CHECK(strstr(err, mask) == err && strstr(err, "entry at index 17 (byte 1041) is 2"),
              "message for a bad mask entry: '%s'", err);
    }
    // and a uint16 file can carry a mask too
    char *p16 = in_workdir("m16.bin"), *m16 = in_workdir("m16.mask");
    snprintf(args, sizeof args, "--count 100 --mask-out %s", m16);
    if (make_fixture(p16, args) == 0) {
        CHECK(data_open(&d, p16, 50257, 0.1, err, sizeof err) == 0 && d.mask && d.format == DATA_LLMC,
              "data_open(%s) with a mask: %s", p16, err);
        data_close(&d);
    }
    unlink(m16);
    free(p16);
    free(m16);
out:
    unlink(mask);
    free(path);
    free(mask);
}

// data_shuffle: every epoch takes each window of the training split once,
// in an order of its own; the same seed the same orders; data_position and
// data_seek resume the order mid-epoch, and refuse the other kind of position.
static void test_shuffle(void) {
    char *path = in_workdir("shuffle.txt"), err[512] = "";
    FILE *f = fopen(path, "wb"); // byte i is i / 16: window w (from 16 w) starts with byte w
    for (int i = 0; f && i < 500; i++) fputc(i / 16, f);
    CHECK(f && fclose(f) == 0, "cannot write %s", path); // 400 training bytes: W = (400 - 1) / 16 = 24 windows
    enum { B = 3, T = 16, W = 24, ROWS = 3 * W };
    int64_t start[2][ROWS];                // (seed, row) the window each row came from, by its first token
    int32_t tokens[B * T], targets[B * T]; // (B, T) each
    for (int run = 0; run < 2; run++) {
        DataSet d;
        if (data_open(&d, path, 256, 0.2, err, sizeof err) != 0) {
            FAIL("data_open(%s): %s", path, err);
            break;
        }
        data_shuffle(&d, run ? 5 : 4);
        for (int64_t r = 0; r < ROWS; r += B) {
            if (r == 30 && run == 0) { // a checkpoint mid-epoch, read back into another DataSet
                DataSet e;
                CHECK(data_open(&e, path, 256, 0.2, err, sizeof err) == 0, "reopen: %s", err);
                data_shuffle(&e, 4);
                CHECK(data_seek(&e, data_position(&d), err, sizeof err) == 0, "data_seek: %s", err);
                int32_t t2[B * T], g2[B * T];
                data_next_train(&d, B, T, tokens, targets, NULL);
                data_next_train(&e, B, T, t2, g2, NULL);
                CHECK(!memcmp(tokens, t2, sizeof t2) && !memcmp(targets, g2, sizeof g2),
                      "shuffle: the batch after data_seek(data_position()) differs");
                DataSet straight;
                CHECK(data_open(&straight, path, 256, 0.2, err, sizeof err) == 0, "reopen: %s", err);
                CHECK(data_seek(&straight, data_position(&d), err, sizeof err) == -1 && strstr(err, "--shuffle"),
                      "shuffle: a shuffled position taken by an unshuffled loader");
                CHECK(data_seek(&e, 48, err, sizeof err) == -1,
                      "shuffle: a straight position taken by a shuffled loader");
                data_close(&straight);
                data_close(&e);
            } else {
                data_next_train(&d, B, T, tokens, targets, NULL);
            }
            for (int64_t b = 0; b < B; b++) {
                int64_t at = -1; // the window whose first byte and the next match the row's
                for (int64_t w = 0; w < W && at < 0; w++)
                    if (tokens[b * T] == w && tokens[b * T + T - 1] == w && targets[b * T + T - 1] == w + 1) at = w;
                start[run][r + b] = at;
            }
        }
        data_close(&d);
    }
    for (int run = 0; run < 2; run++)
        for (int e = 0; e < ROWS / W; e++) {
            int seen[W] = {0}, ok = 1;
            for (int64_t i = 0; i < W; i++) {
                int64_t w = start[run][e * W + i];
                ok = ok && w >= 0 && !seen[w]++;
            }
            CHECK(ok, "shuffle: seed %d's epoch %d does not take every window once", run ? 5 : 4, e);
        }
    CHECK(memcmp(start[0], start[0] + W, sizeof(int64_t) * W) != 0, "shuffle: epochs 0 and 1 in the same order");
    CHECK(memcmp(start[0], start[1], sizeof start[0]) != 0, "shuffle: seeds 4 and 5 give the same order");
    // a data-parallel run's ranks, shuffled: rank r of 2 at batch B takes rows [rB, rB + B) of each global
    // batch of 2B rows that one process at batch 2B takes, epoch after epoch
    DataSet one, rank[2];
    int ok = data_open(&one, path, 256, 0.2, err, sizeof err) == 0;
    for (int r = 0; r < 2 && ok; r++) {
        ok = data_open(&rank[r], path, 256, 0.2, err, sizeof err) == 0;
        if (ok) rank[r].rank = r, rank[r].ranks = 2, data_shuffle(&rank[r], 4);
    }
    CHECK(ok, "data_open(%s): %s", path, err);
    if (ok) {
        data_shuffle(&one, 4);
        int32_t all[2 * B * T], allt[2 * B * T]; // (2B, T) each
        for (int k = 0; k < ROWS / B; k++) {     // past two epochs
            data_next_train(&one, 2 * B, T, all, allt, NULL);
            for (int r = 0; r < 2; r++) {
                data_next_train(&rank[r], B, T, tokens, targets, NULL);
                CHECK(!memcmp(tokens, all + r * B * T, sizeof tokens) &&
                          !memcmp(targets, allt + r * B * T, sizeof targets),
                      "shuffle: rank %d of 2's rows of global batch %d are not one process's rows [%d, %d)", r, k,
                      r * B, r * B + B);
            }
        }
        check_i64(data_position(&rank[1]), data_position(&one), "shuffle: a rank's position against one process's");
        for (int r = 0; r < 2; r++) data_close(&rank[r]);
        data_close(&one);
    }
    free(path);
}

// X.docs: each batch position's segment start in its row (the last
// document start at or before it, past the row's first position, else 0),
// straight and shuffled; a bad file is refused naming it.
static void test_doc_starts(void) {
    char *path = in_workdir("docs.bin"), *dpath = in_workdir("docs.docs"), err[512] = "";
    enum { N = 200, B = 2, T = 16 };
    unsigned char hdr[1024] = {0}, flags[N];
    FILE *f = fopen(path, "wb");
    int32_t h[3] = {DATA_LLMC_MAGIC, DATA_LLMC_VERSION, N};
    memcpy(hdr, h, sizeof h);
    fwrite(hdr, 1, sizeof hdr, f);
    for (int i = 0; i < N; i++) fputc(i % 256, f), fputc(0, f);
    fclose(f);
    for (int i = 0; i < N; i++) flags[i] = i % 7 == 3; // documents start at 3, 10, 17, ...
    int32_t dh[3] = {DATA_DOCS_MAGIC, DATA_DOCS_VERSION, N};
    memcpy(hdr, dh, sizeof dh);
    f = fopen(dpath, "wb");
    fwrite(hdr, 1, sizeof hdr, f);
    fwrite(flags, 1, N, f);
    fclose(f);
    for (int shuffled = 0; shuffled < 2; shuffled++) {
        DataSet d;
        if (data_open(&d, path, 50257, 0.2, err, sizeof err) != 0) { // 160 training tokens, 40 validation
            FAIL("data_open(%s): %s", path, err);
            break;
        }
        CHECK(d.doc_starts && d.ndocuments == (N - 3 + 6) / 7, "docs: %lld documents read", (long long)d.ndocuments);
        if (shuffled) data_shuffle(&d, 9);
        int32_t tokens[B * T], targets[B * T], seg[B * T]; // (B, T) each
        for (int batch = 0; batch < 5; batch++) {
            data_next_train(&d, B, T, tokens, targets, seg);
            for (int b = 0; b < B; b++) {
                int64_t pos0 = tokens[b * T]; // tokens are their positions (below 256 here)
                for (int t = 0, want = 0; t < T; t++) {
                    if (t > 0 && flags[pos0 + t]) want = t;
                    CHECK(seg[b * T + t] == want, "docs%s: batch %d row %d position %d: segment start %d, want %d",
                          shuffled ? " shuffled" : "", batch, b, t, seg[b * T + t], want);
                }
            }
        }
        CHECK(data_val_batches(&d, B, T) == 1, "docs: one validation batch");
        data_val_batch(&d, 0, B, T, tokens, targets, seg);
        for (int t = 0, want = 0; t < T; t++) {
            if (t > 0 && flags[tokens[0] + t]) want = t;
            CHECK(seg[t] == want, "docs: validation position %d: segment start %d, want %d", t, seg[t], want);
        }
        data_close(&d);
    }
    f = fopen(dpath, "r+b"); // an entry of 2
    fseek(f, 1024 + 5, SEEK_SET);
    fputc(2, f);
    fclose(f);
    DataSet bad;
    CHECK(data_open(&bad, path, 50257, 0.2, err, sizeof err) == -1 && strstr(err, dpath) == err &&
              strstr(err, "index 5 (byte 1029) is 2; a document map holds 0 or 1"),
          "docs: an entry of 2 refused naming the .docs file, the index and the byte: '%s'", err);
    free(path);
    free(dpath);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: test_data PYTHON tests/make_llmc_tokens.py WORKDIR\n");
        return 2;
    }
    python = argv[1];
    writer = argv[2];
    workdir = argv[3];
    if (mkdir(workdir, 0755) != 0 && errno != EEXIST) {
        printf("FAIL: cannot make %s: %s\n", workdir, strerror(errno));
        return 1;
    }
    test_llmc();
    test_text();
    test_errors();
    test_llama3_and_masks();
    test_shuffle();
    test_doc_starts();
    if (check_failures) return check_summary("test_data");
    printf("ok: data loading, batches, splits and errors\n");
    return 0;
}
