#include "runtime/model_io/safetensors.h"
#include "common/io.h"
#include "common/bf16.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads and writes F32 data as it lies in memory: it needs a little-endian host"
#endif

#define MAX_JSON_INT 9007199254740992.0 // 2^53: every integer up to it is exact in a double

static const char *const DTYPE_NAMES[] = {[ST_F32] = "F32", [ST_BF16] = "BF16", [ST_F16] = "F16"};
static const int DTYPE_BYTES[] = {[ST_F32] = 4, [ST_BF16] = 2, [ST_F16] = 2};
_Static_assert(sizeof DTYPE_NAMES / sizeof *DTYPE_NAMES == ST_F16 + 1, "a name for every StDtype");
_Static_assert(sizeof DTYPE_BYTES / sizeof *DTYPE_BYTES == ST_F16 + 1, "a size for every StDtype");

const char *st_dtype_name(StDtype d) { return (unsigned)d <= ST_F16 ? DTYPE_NAMES[d] : "?"; }

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void store_u64(unsigned char *d, uint64_t v) {
    for (int i = 0; i < 8; i++) d[i] = (unsigned char)(v >> (8 * i));
}

// dir/name, with dir's trailing slashes dropped ("" or NULL dir: name itself). malloc'd or NULL.
static char *join(const char *dir, size_t dirlen, const char *name) {
    while (dirlen > 1 && dir[dirlen - 1] == '/') dirlen--;
    size_t k = strlen(name);
    char *p = malloc(dirlen + k + 2);
    if (!p) return NULL;
    if (dirlen == 0) {
        memcpy(p, name, k + 1);
    } else {
        memcpy(p, dir, dirlen);
        size_t at = dirlen;
        if (dir[dirlen - 1] != '/') p[at++] = '/';
        memcpy(p + at, name, k + 1);
    }
    return p;
}

// The length of path's directory part, its last '/' included (0 when there is none).
static size_t dir_len(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) + 1 : 0;
}

// A JSON number that is an integer in [0, 2^53].
static int json_count(const cJSON *j, int64_t *v) {
    if (!cJSON_IsNumber(j)) return -1;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= MAX_JSON_INT) || d != (double)(int64_t)d) return -1;
    *v = (int64_t)d;
    return 0;
}

// Parses text (len bytes, not NUL-terminated) as one JSON value with nothing after it. On failure
// returns NULL with *at the byte offset where parsing stopped (-1: out of memory).
static cJSON *parse_json(const unsigned char *text, size_t len, int64_t *at) {
    *at = -1;
    char *copy = malloc(len + 1);
    if (!copy) return NULL;
    memcpy(copy, text, len);
    copy[len] = '\0';
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(copy, len + 1, &end, 1);
    if (!j) *at = end && end >= copy ? (int64_t)(end - copy) : 0;
    free(copy);
    return j;
}

// ---------------------------------------------------------------- reading

// Adds an empty StFile for path to s (so st_close frees what follows). Returns it or NULL.
static StFile *add_file(StSet *s, const char *path) {
    StFile *f = realloc(s->files, (size_t)(s->nfiles + 1) * sizeof *f);
    if (!f) return NULL;
    s->files = f;
    f = &s->files[s->nfiles];
    *f = (StFile){0};
    f->path = strdup(path);
    if (!f->path) return NULL;
    s->nfiles++;
    return f;
}

static StTensor *add_tensor(StSet *s, int *cap) {
    if (s->n == *cap) {
        int want = *cap ? 2 * *cap : 64;
        StTensor *t = realloc(s->tensors, (size_t)want * sizeof *t);
        if (!t) return NULL;
        s->tensors = t;
        *cap = want;
    }
    StTensor *t = &s->tensors[s->n++];
    *t = (StTensor){0};
    return t;
}

// "[2, 3]" into buf, for messages.
static const char *shape_text(char *buf, size_t cap, const int64_t *shape, int rank) {
    size_t at = 0;
    buf[0] = '\0';
    at += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
    return buf;
}

// One header entry: {"dtype": D, "shape": [...], "data_offsets": [BEGIN, END]} for tensor name,
// checked against the data buffer (data_len bytes at data). Fills t.
static int read_entry(StTensor *t, const cJSON *e, const char *name, const unsigned char *data, int64_t data_len,
                      const char *path, char *err, size_t errcap) {
    if (!cJSON_IsObject(e))
        return io_fail(err, errcap, path, "tensor '%s': the header entry is not a JSON object", name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return io_fail(err, errcap, path, "tensor '%s': no \"dtype\" string", name);
    int dtype = -1;
    for (int d = 0; d <= ST_F16; d++)
        if (strcmp(dt->valuestring, DTYPE_NAMES[d]) == 0) dtype = d;
    if (dtype < 0)
        return io_fail(err, errcap, path, "tensor '%s': dtype %s is not supported (only F32, BF16 and F16 are)", name,
                       dt->valuestring);
    if (!cJSON_IsArray(sh)) return io_fail(err, errcap, path, "tensor '%s': no \"shape\" array", name);
    int rank = cJSON_GetArraySize(sh);
    if (rank > ST_MAX_RANK)
        return io_fail(err, errcap, path, "tensor '%s': rank %d, more than the %d dimensions mt supports", name, rank,
                       ST_MAX_RANK);
    t->dtype = (StDtype)dtype;
    t->rank = rank;
    int64_t numel = 1;
    int overflow = 0;
    for (int i = 0; i < rank; i++) {
        if (json_count(cJSON_GetArrayItem(sh, i), &t->shape[i]) != 0)
            return io_fail(err, errcap, path, "tensor '%s': shape entry %d is not an integer in 0..2^53", name, i);
        if (t->shape[i] != 0 && numel > INT64_MAX / t->shape[i]) overflow = 1;
        else numel *= t->shape[i];
    }
    char sbuf[256];
    if (overflow || numel > INT64_MAX / DTYPE_BYTES[dtype])
        return io_fail(err, errcap, path, "tensor '%s': shape %s is too large: its size overflows 64 bits", name,
                       shape_text(sbuf, sizeof sbuf, t->shape, rank));
    t->nbytes = numel * DTYPE_BYTES[dtype];
    int64_t begin, end;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || json_count(cJSON_GetArrayItem(off, 0), &begin) != 0 ||
        json_count(cJSON_GetArrayItem(off, 1), &end) != 0)
        return io_fail(err, errcap, path, "tensor '%s': \"data_offsets\" is not [BEGIN, END], two integers in 0..2^53",
                       name);
    if (begin > end)
        return io_fail(err, errcap, path, "tensor '%s': data_offsets [%lld, %lld] end before they begin", name,
                       (long long)begin, (long long)end);
    if (end - begin != t->nbytes)
        return io_fail(err, errcap, path,
                       "tensor '%s': shape %s of %s is %lld bytes, but data_offsets [%lld, %lld] hold %lld", name,
                       shape_text(sbuf, sizeof sbuf, t->shape, rank), DTYPE_NAMES[dtype], (long long)t->nbytes,
                       (long long)begin, (long long)end, (long long)(end - begin));
    if (end > data_len)
        return io_fail(err, errcap, path,
                       "tensor '%s': data_offsets [%lld, %lld] run past the end of the data buffer (%lld bytes after "
                       "the header): the file is truncated or the header wrong",
                       name, (long long)begin, (long long)end, (long long)data_len);
    t->data = data + begin;
    return 0;
}

// by data offset, then size: how the overlap check walks a file's tensors
static int by_offset(const void *a, const void *b) {
    const StTensor *x = a, *y = b;
    const unsigned char *p = x->data, *q = y->data;
    if (p != q) return p < q ? -1 : 1;
    return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

// Maps path, validates its header and appends its tensors to s (sorted by data offset).
static int load_file(StSet *s, int *cap, const char *path, char *err, size_t errcap) {
    const unsigned char *m;
    size_t len;
    if (io_map_file(path, "safetensors file", 8,
                    "too short for a safetensors file: the 8-byte header size is not all there", &m, &len, err,
                    errcap) != 0)
        return -1;
    StFile *f = add_file(s, path);
    if (!f) {
        munmap((void *)m, len);
        return io_fail(err, errcap, path, "out of memory");
    }
    f->map = m;
    f->map_len = len;

    // u64 N, N bytes of JSON, the data buffer
    uint64_t hlen = le64(f->map);
    if (hlen > len - 8)
        return io_fail(err, errcap, path,
                       "the header size %llu runs past the end of the file (%zu bytes, so at most %zu bytes of header)",
                       (unsigned long long)hlen, len, len - 8);
    const unsigned char *text = f->map + 8;
    const unsigned char *nul = memchr(text, '\0', (size_t)hlen);
    if (nul)
        return io_fail(err, errcap, path, "the header (%llu bytes) holds a NUL byte at its byte %lld: not JSON",
                       (unsigned long long)hlen, (long long)(nul - text));
    int64_t at;
    cJSON *root = parse_json(text, (size_t)hlen, &at);
    if (!root) {
        if (at < 0) return io_fail(err, errcap, path, "out of memory");
        return io_fail(err, errcap, path, "the header (%llu bytes) is not valid JSON: the error is at its byte %lld",
                       (unsigned long long)hlen, (long long)at);
    }
    int rc = 0;
    const unsigned char *data = text + hlen;
    int64_t data_len = (int64_t)(len - 8 - hlen);
    int first = s->n;
    if (!cJSON_IsObject(root)) {
        rc = io_fail(err, errcap, path, "the header is not a JSON object");
        goto done;
    }
    for (const cJSON *item = root->child; item; item = item->next) {
        if (strcmp(item->string, "__metadata__") == 0) {
            int ok = cJSON_IsObject(item);
            for (const cJSON *kv = ok ? item->child : NULL; kv; kv = kv->next)
                if (!cJSON_IsString(kv)) ok = 0;
            if (!ok) {
                rc = io_fail(err, errcap, path, "\"__metadata__\" is not an object of strings");
                goto done;
            }
            continue;
        }
        StTensor *t = add_tensor(s, cap);
        if (!t) {
            rc = io_fail(err, errcap, path, "out of memory");
            goto done;
        }
        t->file = f->path;
        if (!(t->name = strdup(item->string))) {
            rc = io_fail(err, errcap, path, "out of memory");
            goto done;
        }
        if (read_entry(t, item, item->string, data, data_len, path, err, errcap) != 0) {
            rc = -1;
            goto done;
        }
    }
    if (s->n > first) qsort(s->tensors + first, (size_t)(s->n - first), sizeof *s->tensors, by_offset);
done:
    cJSON_Delete(root);
    return rc;
}

// by name, ties in set order (so the first of two duplicates comes first)
static int by_name(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x > y) - (x < y);
}

// Sorts s->by_name; refuses duplicate names, then tensors that overlap within a file.
static int finish_set(StSet *s, char *err, size_t errcap) {
    if (s->n == 0) return 0;
    s->by_name = malloc((size_t)s->n * sizeof *s->by_name);
    if (!s->by_name) return io_fail(err, errcap, s->files[0].path, "out of memory");
    for (int i = 0; i < s->n; i++) s->by_name[i] = &s->tensors[i];
    qsort(s->by_name, (size_t)s->n, sizeof *s->by_name, by_name);
    for (int i = 1; i < s->n; i++) {
        const StTensor *a = s->by_name[i - 1], *b = s->by_name[i];
        if (strcmp(a->name, b->name) != 0) continue;
        if (a->file == b->file)
            return io_fail(err, errcap, b->file, "tensor '%s' appears twice in the header (a duplicate name)", b->name);
        return io_fail(err, errcap, b->file, "tensor '%s' is also in %s (a duplicate name across shards)", b->name,
                       a->file);
    }
    // each file's tensors are together and in offset order; empty ones overlap nothing
    const StTensor *last = NULL; // the nonempty tensor ending furthest in the current file
    for (int i = 0; i < s->n; i++) {
        const StTensor *t = &s->tensors[i];
        if (last && last->file != t->file) last = NULL;
        if (t->nbytes == 0) continue;
        const unsigned char *p = t->data;
        if (last && (const unsigned char *)last->data + last->nbytes > p) {
            const unsigned char *base = (const unsigned char *)last->data; // offsets for the message
            const unsigned char *zero = NULL;
            for (int k = 0; k < s->nfiles; k++)
                if (s->files[k].path == t->file) zero = s->files[k].map + 8 + le64(s->files[k].map);
            return io_fail(err, errcap, t->file,
                           "tensors '%s' (data_offsets [%lld, %lld]) and '%s' ([%lld, %lld]) overlap", last->name,
                           (long long)(base - zero), (long long)(base - zero + last->nbytes), t->name,
                           (long long)(p - zero), (long long)(p - zero + t->nbytes));
        }
        if (!last || (const unsigned char *)last->data + last->nbytes < p + t->nbytes) last = t;
    }
    return 0;
}

// Reads all of path into a malloc'd buffer; returns 0 or an errno.
static int read_all(const char *path, unsigned char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    }
    size_t cap = (size_t)st.st_size + 1, n = 0;
    unsigned char *p = malloc(cap);
    if (!p) {
        close(fd);
        return ENOMEM;
    }
    for (;;) {
        if (n == cap) { // the file grew while we read it
            unsigned char *q = realloc(p, 2 * cap);
            if (!q) {
                free(p);
                close(fd);
                return ENOMEM;
            }
            p = q;
            cap *= 2;
        }
        ssize_t r = read(fd, p + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(p);
            close(fd);
            return e;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    *out = p;
    *len = n;
    return 0;
}

typedef struct Entry {
    const char *name;  // inside the parsed index
    const char *shard; // the weight_map's file name
    int file;          // index into StSet.files
} Entry;

static int entry_by_name(const void *a, const void *b) {
    return strcmp(((const Entry *)a)->name, ((const Entry *)b)->name);
}
static int entry_by_shard(const void *a, const void *b) {
    const Entry *x = *(const Entry *const *)a, *y = *(const Entry *const *)b;
    int c = strcmp(x->shard, y->shard);
    return c ? c : (x > y) - (x < y);
}

static const Entry *find_entry(const Entry *e, int n, const char *name) {
    Entry key = {.name = name};
    return bsearch(&key, e, (size_t)n, sizeof *e, entry_by_name);
}

// An index: {"metadata": {...}, "weight_map": {"TENSOR": "SHARD", ...}}, shards beside it.
static int open_index(StSet *s, const char *path, char *err, size_t errcap) {
    unsigned char *text;
    size_t len;
    int e = read_all(path, &text, &len);
    if (e) return io_fail(err, errcap, path, "cannot read the index: %s", strerror(e));
    Entry *ent = NULL;
    Entry **by_shard = NULL;
    char *shard_path = NULL;
    cJSON *root = NULL;
    int rc = -1, cap = 0;

    const unsigned char *nul = memchr(text, '\0', len);
    if (nul) {
        io_fail(err, errcap, path, "the index holds a NUL byte at its byte %lld: not JSON", (long long)(nul - text));
        goto done;
    }
    int64_t at;
    root = parse_json(text, len, &at);
    if (!root) {
        if (at < 0) io_fail(err, errcap, path, "out of memory");
        else io_fail(err, errcap, path, "the index is not valid JSON: the error is at its byte %lld", (long long)at);
        goto done;
    }
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(wm)) {
        io_fail(err, errcap, path, "the index has no \"weight_map\" object");
        goto done;
    }
    int n = cJSON_GetArraySize(wm);
    if (n == 0) {
        io_fail(err, errcap, path, "the index's weight_map lists no tensors");
        goto done;
    }
    ent = calloc((size_t)n, sizeof *ent);
    by_shard = calloc((size_t)n, sizeof *by_shard);
    if (!ent || !by_shard) {
        io_fail(err, errcap, path, "out of memory");
        goto done;
    }
    int k = 0;
    for (const cJSON *kv = wm->child; kv; kv = kv->next, k++) {
        if (!cJSON_IsString(kv) || kv->valuestring[0] == '\0' || strchr(kv->valuestring, '/')) {
            io_fail(err, errcap, path,
                    "the weight_map entry for tensor '%s' is not the file name of a shard in the index's directory",
                    kv->string);
            goto done;
        }
        ent[k] = (Entry){.name = kv->string, .shard = kv->valuestring, .file = -1};
    }
    qsort(ent, (size_t)n, sizeof *ent, entry_by_name);
    for (int i = 1; i < n; i++)
        if (strcmp(ent[i - 1].name, ent[i].name) == 0) {
            io_fail(err, errcap, path, "tensor '%s' is listed twice in the weight_map", ent[i].name);
            goto done;
        }

    // each shard once, in name order
    for (int i = 0; i < n; i++) by_shard[i] = &ent[i];
    qsort(by_shard, (size_t)n, sizeof *by_shard, entry_by_shard);
    size_t dlen = dir_len(path);
    for (int i = 0; i < n; i++) {
        if (i > 0 && strcmp(by_shard[i - 1]->shard, by_shard[i]->shard) == 0) {
            by_shard[i]->file = by_shard[i - 1]->file;
            continue;
        }
        free(shard_path);
        shard_path = join(path, dlen, by_shard[i]->shard);
        if (!shard_path) {
            io_fail(err, errcap, path, "out of memory");
            goto done;
        }
        struct stat st;
        if (stat(shard_path, &st) != 0) {
            io_fail(err, errcap, path, "the weight_map puts tensor '%s' in shard %s, which cannot be opened: %s",
                    by_shard[i]->name, shard_path, strerror(errno));
            goto done;
        }
        if (load_file(s, &cap, shard_path, err, errcap) != 0) goto done;
        by_shard[i]->file = s->nfiles - 1;
    }
    if (finish_set(s, err, errcap) != 0) goto done;

    // the weight_map and the shards agree, both ways
    for (int i = 0; i < n; i++) {
        const StTensor *t = st_find(s, ent[i].name);
        const char *want = s->files[ent[i].file].path;
        if (!t) {
            io_fail(err, errcap, path, "the weight_map puts tensor '%s' in %s, which does not hold it", ent[i].name,
                    want);
            goto done;
        }
        if (t->file != want) {
            io_fail(err, errcap, path, "the weight_map puts tensor '%s' in %s, but it is in %s", ent[i].name, want,
                    t->file);
            goto done;
        }
    }
    for (int i = 0; i < s->n; i++)
        if (!find_entry(ent, n, s->tensors[i].name)) {
            io_fail(err, errcap, s->tensors[i].file, "tensor '%s' is not in the weight_map of the index %s",
                    s->tensors[i].name, path);
            goto done;
        }
    rc = 0;
done:
    cJSON_Delete(root);
    free(text);
    free(ent);
    free(by_shard);
    free(shard_path);
    return rc;
}

int st_open(StSet *s, const char *path, char *err, size_t errcap) {
    *s = (StSet){0};
    char *single = NULL, *index = NULL;
    int rc = -1;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t n = strlen(path);
        single = join(path, n, "model.safetensors");
        index = join(path, n, "model.safetensors.index.json");
        if (!single || !index) {
            io_fail(err, errcap, path, "out of memory");
        } else if (stat(single, &st) == 0) {
            int cap = 0;
            rc = load_file(s, &cap, single, err, errcap) == 0 ? finish_set(s, err, errcap) : -1;
        } else if (stat(index, &st) == 0) {
            rc = open_index(s, index, err, errcap);
        } else {
            io_fail(err, errcap, path,
                    "the directory holds neither model.safetensors nor model.safetensors.index.json");
        }
    } else if (ends_with(path, ".json")) {
        rc = open_index(s, path, err, errcap);
    } else {
        int cap = 0;
        rc = load_file(s, &cap, path, err, errcap) == 0 ? finish_set(s, err, errcap) : -1;
    }
    free(single);
    free(index);
    if (rc != 0) st_close(s);
    return rc;
}

static int name_cmp(const void *key, const void *elem) { return strcmp(key, (*(const StTensor *const *)elem)->name); }

const StTensor *st_find(const StSet *s, const char *name) {
    if (!s->by_name || s->n == 0) return NULL;
    const StTensor *const *p = bsearch(name, s->by_name, (size_t)s->n, sizeof *s->by_name, name_cmp);
    return p ? *p : NULL;
}

int64_t st_numel(const StTensor *t) { return t->nbytes / DTYPE_BYTES[t->dtype]; }

// f16 bits to f32 bits, exactly
static uint32_t f16_to_f32_bits(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = h >> 10 & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return sign | 0x7f800000u | man << 13;         // inf, nan (payload kept)
    if (exp != 0) return sign | (exp + 127 - 15) << 23 | man << 13; // normal
    if (man == 0) return sign;                                      // +-0
    int top = 9; // subnormal man * 2^-24: normalise on its highest set bit
    while (!(man >> top & 1)) top--;
    return sign | (uint32_t)(top - 24 + 127) << 23 | (man << (23 - top) & 0x7fffff);
}

void st_to_f32(const StTensor *t, float *out) {
    int64_t n = st_numel(t);
    const unsigned char *p = t->data;
    if (t->dtype == ST_F32) {
        if (n > 0) memcpy(out, p, (size_t)t->nbytes);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        uint32_t u = t->dtype == ST_BF16 ? (uint32_t)h << 16 : f16_to_f32_bits(h);
        memcpy(&out[i], &u, 4);
    }
}

void st_close(StSet *s) {
    for (int i = 0; i < s->n; i++) free((char *)s->tensors[i].name);
    for (int i = 0; i < s->nfiles; i++) {
        if (s->files[i].map) munmap((void *)s->files[i].map, s->files[i].map_len);
        free(s->files[i].path);
    }
    free(s->tensors);
    free(s->files);
    free(s->by_name);
    *s = (StSet){0};
}

// ---------------------------------------------------------------- writing

typedef struct Buf {
    char *p; // (cap) text so far: len bytes
    size_t len, cap;
    int failed; // out of memory: the rest is dropped
} Buf;

static void buf_add(Buf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t want = b->cap ? b->cap : 256;
        while (want < b->len + n + 1) want *= 2;
        char *p = realloc(b->p, want);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = want;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_str(Buf *b, const char *s) { buf_add(b, s, strlen(s)); }

__attribute__((format(printf, 2, 3))) static void buf_printf(Buf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) b->failed = 1; // only short numbers go through here
    else buf_add(b, tmp, (size_t)n);
}

// s as a JSON string: quotes, backslashes and control characters escaped, other bytes as they are
static void buf_json_str(Buf *b, const char *s) {
    buf_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            buf_add(b, e, 2);
        } else if (*p < 0x20) {
            buf_printf(b, "\\u%04x", *p);
        } else {
            buf_add(b, (const char *)p, 1);
        }
    }
    buf_add(b, "\"", 1);
}

typedef struct OutFile {
    char *path; // final name (malloc'd)
    char *tmp;  // path + ".tmp" (malloc'd)
    int lo, hi; // tensors [lo, hi) of the caller's array
    int state;  // 0: nothing on disk, 1: tmp written, 2: renamed to path
} OutFile;

static int write_all(int fd, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, p + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? errno : EIO;
        done += (size_t)n;
    }
    return 0;
}

static int64_t out_numel(const StOut *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->shape[i];
    return n;
}

// Writes tensors [f->lo, f->hi) as one safetensors file to f->tmp, synced. Returns 0 or an errno.
static int write_file(const OutFile *f, const StOut *t, StDtype dtype, unsigned char *chunk, size_t chunk_bytes,
                      char *why, size_t whycap) {
    int esize = DTYPE_BYTES[dtype];
    Buf h = {0};
    buf_str(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    int64_t off = 0;
    for (int i = f->lo; i < f->hi; i++) {
        int64_t nb = out_numel(&t[i]) * esize;
        buf_add(&h, ",", 1);
        buf_json_str(&h, t[i].name);
        buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", DTYPE_NAMES[dtype]);
        for (int d = 0; d < t[i].rank; d++) buf_printf(&h, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        buf_printf(&h, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + nb));
        off += nb;
    }
    buf_add(&h, "}", 1);
    while (!h.failed && h.len % 8 != 0) buf_add(&h, " ", 1); // as the reference pads it
    if (h.failed) {
        free(h.p);
        return ENOMEM;
    }
    int fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(h.p);
        return errno;
    }
    unsigned char size[8];
    store_u64(size, h.len);
    int e = write_all(fd, size, 8);
    if (!e) e = write_all(fd, h.p, h.len);
    free(h.p);
    size_t per = chunk_bytes / 2; // bf16 values per chunk
    for (int i = f->lo; i < f->hi && !e; i++) {
        int64_t n = out_numel(&t[i]);
        if (n == 0) continue;
        const float *data = t[i].data;
        float *filled = NULL; // (n) a tensor that fill gives, only while it is written
        if (!data && !(data = filled = malloc((size_t)n * sizeof *filled))) e = ENOMEM;
        else if (filled && t[i].fill(t[i].ctx, &t[i], filled, why, whycap) != 0) e = EIO;
        else if (dtype == ST_F32) e = write_all(fd, data, (size_t)n * 4);
        for (int64_t at = 0; dtype != ST_F32 && at < n && !e; at += (int64_t)per) {
            size_t k = n - at < (int64_t)per ? (size_t)(n - at) : per;
            for (size_t j = 0; j < k; j++) {
                uint16_t b = bf16_from_f32(data[at + (int64_t)j]);
                chunk[2 * j] = (unsigned char)b;
                chunk[2 * j + 1] = (unsigned char)(b >> 8);
            }
            e = write_all(fd, chunk, 2 * k);
        }
        free(filled);
    }
    if (!e && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    return e;
}

// The index, as transformers writes it: json.dumps(..., indent=2, sort_keys=True) + "\n".
static int write_index(const char *tmp, const StOut *const *sorted, int n, const int *shard_of, const OutFile *files,
                       int64_t total) {
    Buf b = {0};
    buf_printf(&b, "{\n  \"metadata\": {\n    \"total_size\": %lld\n  },\n  \"weight_map\": {", (long long)total);
    for (int i = 0; i < n; i++) {
        buf_str(&b, i ? ",\n    " : "\n    ");
        buf_json_str(&b, sorted[i]->name);
        buf_str(&b, ": ");
        const char *p = files[shard_of[i]].path;
        buf_json_str(&b, p + dir_len(p));
    }
    buf_str(&b, "\n  }\n}\n");
    if (b.failed) {
        free(b.p);
        return ENOMEM;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(b.p);
        return errno;
    }
    int e = write_all(fd, b.p, b.len);
    free(b.p);
    if (!e && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    return e;
}

// name is STEM-DIGITS-of-DIGITS.safetensors
static int is_shard_name(const char *name, const char *stem) {
    size_t k = strlen(stem);
    if (strncmp(name, stem, k) != 0 || name[k] != '-') return 0;
    const char *p = name + k + 1;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    if (strncmp(p, "-of-", 4) != 0) return 0;
    p += 4;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    return strcmp(p, ".safetensors") == 0;
}

// Removes what an earlier write to path left that would contradict this one (see safetensors.h);
// best effort.
static void remove_stale(const char *path, const char *index, const char *stem, const OutFile *files, int nfiles,
                         int sharded) {
    if (sharded) unlink(path);
    else unlink(index);
    size_t dlen = dir_len(path);
    char *dirname = dlen ? strndup(path, dlen) : strdup(".");
    DIR *d = dirname ? opendir(dirname) : NULL;
    for (struct dirent *de; d && (de = readdir(d));) {
        if (!is_shard_name(de->d_name, stem)) continue;
        int ours = 0;
        for (int i = 0; sharded && i < nfiles; i++)
            if (strcmp(files[i].path + dir_len(files[i].path), de->d_name) == 0) ours = 1;
        if (ours) continue;
        char *p = join(path, dlen, de->d_name);
        if (p) unlink(p);
        free(p);
    }
    if (d) closedir(d);
    free(dirname);
    io_sync_parent_dir(path);
}

static int out_by_name(const void *a, const void *b) {
    return strcmp((*(const StOut *const *)a)->name, (*(const StOut *const *)b)->name);
}

static char *with_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    char *p = malloc(n + k + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    memcpy(p + n, suffix, k + 1);
    return p;
}

int st_write(const char *path, const StOut *t, int n, StDtype dtype, int64_t shard_bytes, char *err, size_t errcap) {
    if (dtype != ST_F32 && dtype != ST_BF16)
        return io_fail(err, errcap, path, "cannot write dtype %s: only F32 and BF16 are written", st_dtype_name(dtype));
    if (n < 0 || (n > 0 && !t)) return io_fail(err, errcap, path, "no tensors to write (n = %d)", n);
    int esize = DTYPE_BYTES[dtype];
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!t[i].name) return io_fail(err, errcap, path, "tensor %d has no name", i);
        if (strcmp(t[i].name, "__metadata__") == 0)
            return io_fail(err, errcap, path, "tensor %d is named \"__metadata__\", the header's metadata key", i);
        if (t[i].rank < 0 || t[i].rank > ST_MAX_RANK)
            return io_fail(err, errcap, path, "tensor '%s' has rank %d; 0..%d are allowed", t[i].name, t[i].rank,
                           ST_MAX_RANK);
        int64_t numel = 1;
        for (int d = 0; d < t[i].rank; d++) {
            int64_t k = t[i].shape[d];
            if (k < 0)
                return io_fail(err, errcap, path, "tensor '%s' has dimension %d = %lld < 0", t[i].name, d,
                               (long long)k);
            if (k != 0 && numel > INT64_MAX / esize / k)
                return io_fail(err, errcap, path, "tensor '%s': its size overflows 64 bits", t[i].name);
            numel *= k;
        }
        if (numel > 0 && !t[i].data && !t[i].fill)
            return io_fail(err, errcap, path, "tensor '%s' has no data", t[i].name);
        if (numel * esize > INT64_MAX - total) return io_fail(err, errcap, path, "the total size overflows 64 bits");
        total += numel * esize;
    }

    const StOut **sorted = malloc(((size_t)n + 1) * sizeof *sorted);
    int *shard_of = malloc(((size_t)n + 1) * sizeof *shard_of); // (n) for sorted[i]
    int *file_of = malloc(((size_t)n + 1) * sizeof *file_of);   // (n) for t[i]
    unsigned char *chunk = malloc(1 << 20);                     // (1 MiB) bf16 conversion buffer
    OutFile *files = NULL;
    char *index = with_suffix(path, ".index.json"), *index_tmp = with_suffix(path, ".index.json.tmp");
    const char *base = path + dir_len(path);
    char *stem = strdup(base);
    int nfiles = 0, index_state = 0, rc = -1, e = 0;
    const char *failed_path = path;
    char why[512] = ""; // a fill's message
    if (!sorted || !shard_of || !file_of || !chunk || !index || !index_tmp || !stem) {
        io_fail(err, errcap, path, "out of memory");
        goto done;
    }
    if (ends_with(stem, ".safetensors")) stem[strlen(stem) - strlen(".safetensors")] = '\0';
    for (int i = 0; i < n; i++) sorted[i] = &t[i];
    qsort(sorted, (size_t)n, sizeof *sorted, out_by_name);
    for (int i = 1; i < n; i++)
        if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0) {
            io_fail(err, errcap, path, "tensor '%s' is given twice", sorted[i]->name);
            goto done;
        }

    // pack in order: a shard takes tensors while they fit in shard_bytes (a bigger one alone)
    int nshards = 1;
    if (shard_bytes > 0 && total > shard_bytes) {
        int64_t size = 0;
        for (int i = 0; i < n; i++) {
            int64_t nb = out_numel(&t[i]) * esize;
            if (size > 0 && nb > shard_bytes - size) {
                nshards++;
                size = 0;
            }
            file_of[i] = nshards - 1;
            size += nb;
        }
    } else {
        for (int i = 0; i < n; i++) file_of[i] = 0;
    }
    int sharded = nshards > 1;
    files = calloc((size_t)nshards, sizeof *files);
    if (!files) {
        io_fail(err, errcap, path, "out of memory");
        goto done;
    }
    nfiles = nshards;
    for (int k = 0, i = 0; k < nfiles; k++) {
        OutFile *f = &files[k];
        f->lo = i;
        while (i < n && file_of[i] == k) i++;
        f->hi = i;
        if (sharded) {
            char name[64];
            snprintf(name, sizeof name, "-%05d-of-%05d.safetensors", k + 1, nshards);
            char *full = with_suffix(stem, name);
            f->path = full ? join(path, dir_len(path), full) : NULL;
            free(full);
        } else {
            f->path = strdup(path);
        }
        f->tmp = f->path ? with_suffix(f->path, ".tmp") : NULL;
        if (!f->path || !f->tmp) {
            io_fail(err, errcap, path, "out of memory");
            goto done;
        }
    }

    // every file to its temporary name, synced; then the renames, the index last
    for (int k = 0; k < nfiles && !e; k++) {
        files[k].state = 1;
        failed_path = files[k].path;
        e = write_file(&files[k], t, dtype, chunk, 1 << 20, why, sizeof why);
    }
    if (!e && sharded) {
        for (int i = 0; i < n; i++) shard_of[i] = file_of[sorted[i] - t];
        index_state = 1;
        failed_path = index;
        e = write_index(index_tmp, sorted, n, shard_of, files, total);
    }
    for (int k = 0; k < nfiles && !e; k++) {
        failed_path = files[k].path;
        if (rename(files[k].tmp, files[k].path) != 0) e = errno;
        else files[k].state = 2;
    }
    if (!e && sharded) {
        failed_path = index;
        if (rename(index_tmp, index) != 0) e = errno;
        else index_state = 2;
    }
    if (e) {
        io_fail(err, errcap, failed_path, "cannot write: %s", why[0] ? why : strerror(e));
        goto done;
    }
    io_sync_parent_dir(path);
    remove_stale(path, index, stem, files, nfiles, sharded);
    rc = 0;
done:
    if (rc != 0) { // nothing of this write stays
        for (int k = 0; k < nfiles; k++) {
            if (files[k].state == 1) unlink(files[k].tmp);
            if (files[k].state == 2) unlink(files[k].path);
        }
        if (index_state == 1) unlink(index_tmp);
        if (index_state == 2) unlink(index);
        if (nfiles) io_sync_parent_dir(path);
    }
    for (int k = 0; k < nfiles; k++) {
        free(files[k].path);
        free(files[k].tmp);
    }
    free(files);
    free(sorted);
    free(shard_of);
    free(file_of);
    free(chunk);
    free(index);
    free(index_tmp);
    free(stem);
    return rc;
}
