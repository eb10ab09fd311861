#include "runtime/data.h"
#include "common/io.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// A uint32 token past INT32_MAX reads as negative, which no vocabulary holds.
static int64_t token_at(const DataSet *d, int64_t i) {
    if (d->format == DATA_TEXT) return d->toks[i];
    if (d->format == DATA_LLMC3) return le32(d->toks + 4 * i);
    const unsigned char *p = d->toks + 2 * i;
    return p[0] | p[1] << 8;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

// B*T, or -1 when B or T is not positive or B*T+1 overflows.
static int64_t batch_span(int64_t B, int64_t T) {
    if (B <= 0 || T <= 0 || B > (INT64_MAX - 1) / T) return -1;
    return B * T;
}

// header: int32 magic, version, count, 253 unused; then (count) tokens,
// uint16 (GPT-2's magic) or uint32 (Llama-3's).
static int open_llmc(DataSet *d, const char *path, int64_t vocab, char *err, size_t errcap) {
    const unsigned char *m = d->map;
    size_t len = d->map_len;
    const char *why = ends_with(path, ".bin") ? "a file named *.bin is read as an llm.c token file"
                                              : "the file starts with llm.c's magic number";
    uint32_t magic = len >= 4 ? le32(m) : 0;
    if (len >= 4 && magic != DATA_LLMC_MAGIC && magic != DATA_LLMC3_MAGIC)
        return io_fail(err, errcap, path,
                       "not an llm.c token file: the magic number at byte 0 is %u, expected %d (GPT-2, uint16 tokens) "
                       "or %d (Llama-3, uint32 tokens) (%s; to train on the raw bytes of a file, give it another name)",
                       magic, DATA_LLMC_MAGIC, DATA_LLMC3_MAGIC, why);
    if (len < DATA_LLMC_HEADER_BYTES)
        return io_fail(err, errcap, path,
                       "too short for an llm.c token file: %zu bytes, but the header alone is %d (%s)", len,
                       DATA_LLMC_HEADER_BYTES, why);
    int wide = magic == DATA_LLMC3_MAGIC, width = wide ? 4 : 2;
    int32_t version = (int32_t)le32(m + 4), count = (int32_t)le32(m + 8);
    int32_t want_version = wide ? DATA_LLMC3_VERSION : DATA_LLMC_VERSION;
    if (version != want_version)
        return io_fail(err, errcap, path,
                       "unsupported llm.c token file version %d at byte 4, expected %d for magic %u (%s tokens)",
                       version, want_version, magic, wide ? "uint32" : "uint16");
    if (count < 0) return io_fail(err, errcap, path, "the llm.c header's token count %d (byte 8) is negative", count);
    int64_t want = DATA_LLMC_HEADER_BYTES + width * (int64_t)count;
    if ((int64_t)len != want) {
        int64_t have = (int64_t)len - DATA_LLMC_HEADER_BYTES;
        return io_fail(err, errcap, path,
                       "the header says %d tokens (%lld bytes after the %d-byte header) but the file "
                       "has %lld bytes after it: %s",
                       count, (long long)(want - DATA_LLMC_HEADER_BYTES), DATA_LLMC_HEADER_BYTES, (long long)have,
                       (int64_t)len < want ? "truncated" : "trailing bytes");
    }
    if (count == 0) return io_fail(err, errcap, path, "the llm.c header says 0 tokens: no data");
    d->format = wide ? DATA_LLMC3 : DATA_LLMC;
    d->toks = m + DATA_LLMC_HEADER_BYTES;
    d->ntokens = count;
    for (int64_t i = 0; i < d->ntokens; i++) {
        int64_t t = token_at(d, i);
        if (t >= vocab)
            return io_fail(err, errcap, path,
                           "token at index %lld (byte %lld) is %lld, not below the model's vocabulary size %lld",
                           (long long)i, (long long)(DATA_LLMC_HEADER_BYTES + width * i), (long long)t,
                           (long long)vocab);
    }
    return 0;
}

// X.bin -> X + suffix; NULL for other names or out of memory.
static char *beside_name(const char *path, const char *suffix) {
    if (!ends_with(path, ".bin")) return NULL;
    size_t n = strlen(path) - 4, cap = n + strlen(suffix) + 1;
    char *m = malloc(cap);
    if (m) snprintf(m, cap, "%.*s%s", (int)n, path, suffix);
    return m;
}

// A file of one byte a token beside X.bin, when it exists: the loss mask
// X.mask or the document starts X.docs (header as llm.c's: magic, version,
// count; then count bytes of 0 or 1). *flags stays NULL without the file.
typedef struct ByteFile {
    const char *suffix, *noun, *what; // ".mask", "mask", "loss mask"
    int magic, version;
} ByteFile;
static const ByteFile MASK_FILE = {".mask", "mask", "loss mask", DATA_MASK_MAGIC, DATA_MASK_VERSION};
static const ByteFile DOC_STARTS_FILE = {".docs", "document map", "map of document starts", DATA_DOCS_MAGIC,
                                         DATA_DOCS_VERSION};

static int open_bytes(DataSet *d, const ByteFile *bf, char **path, const unsigned char **map, size_t *len,
                      const unsigned char **flags, char *err, size_t errcap) {
    char *mpath = beside_name(d->path, bf->suffix), noun[64], empty[64];
    if (!mpath || access(mpath, F_OK) != 0) {
        free(mpath);
        return 0;
    }
    *path = mpath;
    snprintf(noun, sizeof noun, "%s file", bf->noun);
    snprintf(empty, sizeof empty, "empty file: no %s", bf->noun);
    if (io_map_file(mpath, noun, 1, empty, map, len, err, errcap) != 0) return -1;
    const unsigned char *m = *map;
    if (*len < DATA_LLMC_HEADER_BYTES || le32(m) != (uint32_t)bf->magic || le32(m + 4) != (uint32_t)bf->version)
        return io_fail(err, errcap, mpath,
                       "not a %s: it must start with a 1024-byte header of magic %d, "
                       "version %d (it is the %s of %s because of its name)",
                       bf->what, bf->magic, bf->version, bf->noun, d->path);
    int64_t count = (int32_t)le32(m + 8), have = (int64_t)*len - DATA_LLMC_HEADER_BYTES;
    if (count != d->ntokens || have != count)
        return io_fail(err, errcap, mpath,
                       "the %s holds %lld entries (header: %lld) but %s holds %lld tokens: "
                       "they must be equal, one entry a token",
                       bf->noun, (long long)have, (long long)count, d->path, (long long)d->ntokens);
    *flags = m + DATA_LLMC_HEADER_BYTES;
    for (int64_t i = 0; i < count; i++)
        if ((*flags)[i] > 1)
            return io_fail(err, errcap, mpath, "entry at index %lld (byte %lld) is %d; a %s holds 0 or 1", (long long)i,
                           (long long)(DATA_LLMC_HEADER_BYTES + i), (*flags)[i], bf->noun);
    return 0;
}

static int open_mask(DataSet *d, char *err, size_t errcap) {
    if (open_bytes(d, &MASK_FILE, &d->mask_path, &d->mask_map, &d->mask_len, &d->mask, err, errcap) != 0) return -1;
    for (int64_t i = 0; d->mask && i < d->ntokens; i++) d->nmasked += d->mask[i] == 0;
    if (open_bytes(d, &DOC_STARTS_FILE, &d->doc_starts_path, &d->doc_starts_map, &d->doc_starts_len, &d->doc_starts,
                   err, errcap) != 0)
        return -1;
    for (int64_t i = 0; d->doc_starts && i < d->ntokens; i++) d->ndocuments += d->doc_starts[i];
    return 0;
}

static int open_text(DataSet *d, const char *path, int64_t vocab, char *err, size_t errcap) {
    if (vocab < 256)
        return io_fail(err, errcap, path,
                       "the model's vocabulary V=%lld is smaller than 256, so a text file (read as "
                       "bytes, each a token 0..255) cannot be used; give an llm.c token file",
                       (long long)vocab);
    d->format = DATA_TEXT;
    d->toks = d->map;
    d->ntokens = (int64_t)d->map_len;
    return 0;
}

int data_open(DataSet *d, const char *path, int64_t vocab, double val_fraction, char *err, size_t errcap) {
    *d = (DataSet){0};
    if (vocab <= 0)
        return io_fail(err, errcap, path, "the model's vocabulary size %lld is not positive", (long long)vocab);
    if (!(val_fraction >= 0 && val_fraction <= 1))
        return io_fail(err, errcap, path, "val_fraction %g is not in [0, 1]", val_fraction);

    const unsigned char *m;
    size_t len;
    if (io_map_file(path, "data file", 1, "empty file: no tokens", &m, &len, err, errcap) != 0) return -1;
    d->map = m;
    d->map_len = len;
    d->path = strdup(path);
    if (!d->path) {
        data_close(d);
        return io_fail(err, errcap, path, "out of memory");
    }

    int llmc = ends_with(path, ".bin") ||
               (len >= 4 && (le32(d->map) == DATA_LLMC_MAGIC || le32(d->map) == DATA_LLMC3_MAGIC));
    if ((llmc ? open_llmc : open_text)(d, path, vocab, err, errcap) != 0 || open_mask(d, err, errcap) != 0) {
        data_close(d);
        return -1;
    }

    // the last val_fraction of the tokens, rounded to the nearest token
    d->val_fraction = val_fraction;
    d->nval = val_fraction > 0 ? (int64_t)((double)d->ntokens * val_fraction + 0.5) : 0;
    if (d->nval > d->ntokens) d->nval = d->ntokens;
    d->ntrain = d->ntokens - d->nval;
    d->train_pos = 0;
    d->rank = 0, d->ranks = 1;
    return 0;
}

// The rows every rank's batches of B rows make together: ranks*B.
static int64_t global_rows(const DataSet *d, int64_t B) {
    int64_t n = d->ranks > 1 ? d->ranks : 1;
    return B > 0 && B <= INT64_MAX / n ? B * n : -1;
}

// This rank's rows of the global batch from token pos: rows [rank*B, rank*B + B).
static int64_t rank_pos(const DataSet *d, int64_t pos, int64_t B, int64_t T) {
    return pos + (d->ranks > 1 ? (int64_t)d->rank * B * T : 0);
}

int data_check_batch(const DataSet *d, int64_t B, int64_t T, char *err, size_t errcap) {
    const char *path = d->path ? d->path : "(no data)";
    int64_t span = batch_span(global_rows(d, B), T);
    if (span >= 0 && d->ranks > 1) B *= d->ranks; // the messages give the global batch
    if (span < 0)
        return io_fail(err, errcap, path,
                       "the batch size B=%lld and sequence length T=%lld must be positive and B*T+1 "
                       "must fit in 64 bits",
                       (long long)B, (long long)T);
    if (d->val_fraction < 1 && d->ntrain < span + 1)
        return io_fail(err, errcap, path,
                       "the training split holds %lld tokens but one batch of B=%lld x T=%lld needs "
                       "B*T+1 = %lld (the file holds %lld tokens, %lld of them for validation)",
                       (long long)d->ntrain, (long long)B, (long long)T, (long long)(span + 1), (long long)d->ntokens,
                       (long long)d->nval);
    if (d->val_fraction > 0 && d->nval < span + 1)
        return io_fail(err, errcap, path,
                       "the validation split holds %lld tokens (val_fraction %g of %lld) but one batch "
                       "of B=%lld x T=%lld needs B*T+1 = %lld",
                       (long long)d->nval, d->val_fraction, (long long)d->ntokens, (long long)B, (long long)T,
                       (long long)(span + 1));
    return 0;
}

// tokens[b*T + t] = x[pos + b*T + t], targets[b*T + t] = x[pos + b*T + t + 1];
// seg (NULL: not wanted) each position's segment start in its row
static void fill(const DataSet *d, int64_t pos, int64_t B, int64_t T, int32_t *tokens, int32_t *targets,
                 int32_t *seg) { // (B, T) each
    for (int64_t i = 0; i < B * T; i++) {
        tokens[i] = (int32_t)token_at(d, pos + i);
        targets[i] = d->mask && !d->mask[pos + i + 1] ? DATA_IGNORE : (int32_t)token_at(d, pos + i + 1);
    }
    for (int64_t b = 0; seg && b < B; b++)
        for (int64_t t = 0, start = 0; t < T; t++) {
            if (d->doc_starts && t > 0 && d->doc_starts[pos + b * T + t]) start = t;
            seg[b * T + t] = (int32_t)start;
        }
}

static void fill_zeros(int64_t B, int64_t T, int32_t *tokens, int32_t *targets, int32_t *seg) { // (B, T) each
    if (B <= 0 || T <= 0) return;
    memset(tokens, 0, (size_t)(B * T) * sizeof *tokens);
    memset(targets, 0, (size_t)(B * T) * sizeof *targets);
    if (seg) memset(seg, 0, (size_t)(B * T) * sizeof *seg);
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void data_shuffle(DataSet *d, uint64_t seed) {
    d->shuffle = 1;
    d->shuffle_seed = seed;
    d->perm_epoch = -1;
}

// The order of the W windows in epoch `epoch`: a Fisher-Yates shuffle drawn
// from (seed, epoch). -1 out of memory.
static int make_perm(DataSet *d, int64_t W, int64_t T, int64_t epoch) {
    if (d->perm_epoch == epoch && d->perm_T == T) return 0;
    if (d->perm_n != W) {
        free(d->perm);
        d->perm = malloc((size_t)W * sizeof(int64_t));
        d->perm_n = d->perm ? W : 0;
        if (!d->perm) return -1;
    }
    uint64_t s = d->shuffle_seed ^ (uint64_t)(epoch + 1) * 0xd1342543de82ef95ull;
    for (int64_t i = 0; i < W; i++) d->perm[i] = i;
    for (int64_t i = W - 1; i > 0; i--) {
        int64_t k = (int64_t)(splitmix64(&s) % (uint64_t)(i + 1)), x = d->perm[i];
        d->perm[i] = d->perm[k];
        d->perm[k] = x;
    }
    d->perm_epoch = epoch, d->perm_T = T;
    return 0;
}

void data_next_train(DataSet *d, int64_t B, int64_t T, int32_t *tokens, int32_t *targets, int32_t *seg) {
    int64_t span = batch_span(global_rows(d, B), T);
    if (span < 0 || d->ntrain < span + 1) { // data_check_batch would have said so
        fill_zeros(B, T, tokens, targets, seg);
        return;
    }
    if (d->shuffle) { // row by row, the next windows of this epoch's order: this rank's of the global batch
        int64_t W = (d->ntrain - 1) / T, first = d->rows_done + (d->ranks > 1 ? (int64_t)d->rank * B : 0);
        for (int64_t b = 0; b < B; b++) {
            int64_t row = first + b;
            if (make_perm(d, W, T, row / W) != 0) {
                fill_zeros(B, T, tokens, targets, seg);
                return;
            }
            fill(d, d->perm[row % W] * T, 1, T, tokens + b * T, targets + b * T, seg ? seg + b * T : NULL);
        }
        d->rows_done += global_rows(d, B);
        return;
    }
    if (d->train_pos < 0 || d->train_pos > d->ntrain - span - 1) d->train_pos = 0;
    fill(d, rank_pos(d, d->train_pos, B, T), B, T, tokens, targets, seg);
    d->train_pos += span;
    if (d->train_pos > d->ntrain - span - 1) d->train_pos = 0;
}

int64_t data_val_batches(const DataSet *d, int64_t B, int64_t T) {
    int64_t span = batch_span(global_rows(d, B), T);
    if (span < 0 || d->nval < span + 1) return 0;
    return (d->nval - 1) / span; // batch k reads [k*span, k*span + span] within the split
}

void data_val_batch(const DataSet *d, int64_t i, int64_t B, int64_t T, int32_t *tokens, int32_t *targets,
                    int32_t *seg) {
    int64_t n = data_val_batches(d, B, T);
    if (n == 0) {
        fill_zeros(B, T, tokens, targets, seg);
        return;
    }
    int64_t k = i % n;
    if (k < 0) k += n;
    fill(d, rank_pos(d, d->ntrain + k * global_rows(d, B) * T, B, T), B, T, tokens, targets, seg);
}

int64_t data_position(const DataSet *d) { return d->shuffle ? -1 - d->rows_done : d->train_pos; }

int data_seek(DataSet *d, int64_t pos, char *err, size_t errcap) {
    if ((pos < 0) != (d->shuffle != 0)) {
        snprintf(err, errcap,
                 "the checkpoint was written by a run %s --shuffle; resume it %s it, or the data "
                 "position means nothing",
                 pos < 0 ? "with" : "without", pos < 0 ? "with" : "without");
        return -1;
    }
    if (pos < 0) d->rows_done = -1 - pos;
    else d->train_pos = pos;
    return 0;
}

void data_close(DataSet *d) {
    free(d->perm);
    if (d->map) munmap((void *)d->map, d->map_len);
    if (d->mask_map) munmap((void *)d->mask_map, d->mask_len);
    if (d->doc_starts_map) munmap((void *)d->doc_starts_map, d->doc_starts_len);
    free(d->doc_starts_path);
    free(d->path);
    free(d->mask_path);
    *d = (DataSet){0};
}

char *data_sidecar(const char *path, const char *suffix) {
    char *s = beside_name(path, suffix);
    if (s && access(s, F_OK) != 0) {
        free(s);
        s = NULL;
    }
    return s;
}

static int hex_digit(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

int data_vocab_open(DataVocab *v, const DataSet *d, int64_t vocab, char *err, size_t errcap) {
    memset(v, 0, sizeof *v);
    v->bos = v->eos = v->pad = -1;
    if (d->format == DATA_TEXT) { // a token is its byte
        v->n = 256;
        v->bytes = malloc(256);
        v->off = malloc(257 * sizeof(int64_t));
        if (!v->bytes || !v->off) goto oom;
        for (int i = 0; i <= 256; i++) v->off[i] = i;
        for (int i = 0; i < 256; i++) v->bytes[i] = (char)i;
        return 0;
    }
    char *path = data_sidecar(d->path, ".vocab.json"), *text = NULL;
    size_t len;
    if (!path) {
        snprintf(err, errcap,
                 "%s: no vocabulary beside it (X.vocab.json, which tools/prepare_data.py writes) to "
                 "decode samples with",
                 d->path);
        return -1;
    }
    int bad = io_read_file(path, &text, &len);
    cJSON *j = bad ? NULL : cJSON_ParseWithLength(text, len), *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    free(text);
    v->path = path;
    if (bad || !cJSON_IsArray(toks)) {
        io_fail(err, errcap, path, "%s", bad ? strerror(bad) : "not JSON with a \"tokens\" array");
        cJSON_Delete(j);
        data_vocab_close(v);
        return -1;
    }
    int64_t n = cJSON_GetArraySize(toks), total = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, toks) total += cJSON_IsString(t) ? (int64_t)strlen(t->valuestring) / 2 : 0;
    v->n = n;
    v->bytes = malloc((size_t)total + 1);
    v->off = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!v->bytes || !v->off) {
        cJSON_Delete(j);
        data_vocab_close(v);
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    int64_t i = 0, at = 0;
    v->off[0] = 0;
    cJSON_ArrayForEach(t, toks) {
        const char *h = cJSON_IsString(t) ? t->valuestring : NULL;
        size_t hn = h ? strlen(h) : 1;
        for (size_t k = 0; h && k + 1 < hn; k += 2) {
            int hi = hex_digit(h[k]), lo = hex_digit(h[k + 1]);
            if (hi < 0 || lo < 0) h = NULL;
            else v->bytes[at++] = (char)(hi << 4 | lo);
        }
        if (!h || hn % 2) {
            io_fail(err, errcap, path, "token %lld is not a string of hexadecimal byte pairs", (long long)i);
            cJSON_Delete(j);
            data_vocab_close(v);
            return -1;
        }
        v->off[++i] = at;
    }
    const char *keys[3] = {"bos_token_id", "eos_token_id", "pad_token_id"};
    int *ids[3] = {&v->bos, &v->eos, &v->pad};
    for (int k = 0; k < 3; k++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, keys[k]);
        if (cJSON_IsNumber(id) && id->valuedouble >= 0 && id->valuedouble < (double)n) *ids[k] = id->valueint;
    }
    cJSON_Delete(j);
    if (n < vocab) { // the model's extra rows (a vocabulary padded to a multiple) decode to nothing
        int64_t *off = realloc(v->off, (size_t)(vocab + 1) * sizeof(int64_t));
        if (!off) goto oom;
        v->off = off;
        for (int64_t k = n + 1; k <= vocab; k++) off[k] = off[n];
        v->n = vocab;
    }
    return 0;
oom:
    data_vocab_close(v);
    snprintf(err, errcap, "out of memory");
    return -1;
}

void data_vocab_close(DataVocab *v) {
    free(v->path);
    free(v->bytes);
    free(v->off);
    memset(v, 0, sizeof *v);
}
