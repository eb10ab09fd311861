// checkpoint.c: writes and reads the checkpoint files of checkpoint.h.
//
// Writing streams: the header and a section table with the crc32 fields
// zero go first, then META and the three arrays straight from the caller's
// memory (a bounce buffer of CHUNK bytes only on a big-endian host, or for
// arrays that come through a CkptIO, piece by piece), each
// crc32 computed as it is written; then the table is rewritten in place with
// the crc32s, the file fsync'ed, renamed and its directory fsync'ed. Reading
// uses pread into the caller's arrays (or a bounce buffer when an array is
// not wanted), checksumming as it goes.
#include "runtime/store/checkpoint.h"
#include "runtime/dist/dist.h"
#include "common/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

enum {
    CKPT_VERSION = 3,  // written; version 2 (no schedule length) is still read
    SECTIONS = 4,      // META, W, M, V
    HEADER_BYTES = 24, // magic, version, endian, count, crc
    ENTRY_BYTES = 24,  // id, crc, offset, size
    TABLE_BYTES = SECTIONS * ENTRY_BYTES,
    TABLE_END = HEADER_BYTES + TABLE_BYTES,
    META_V2_BYTES = 4 * 8 + 2 * 4 + 8 + 4 * 8 + CKPT_MODEL_BYTES + CKPT_SCHEDULE_BYTES,
    META_BYTES = META_V2_BYTES + 8, // version 3: + the schedule's length
    CHUNK = 1 << 22,                // bytes per write, pread and crc32 call
};
enum { SEC_META = 1, SEC_W, SEC_M, SEC_V };
static const char MAGIC[8] = "MTCKPT\0";
static const char *const SECTION_NAMES[SECTIONS] = {"META", "W", "M", "V"};
static const uint32_t ENDIAN = 0x01020304u, OTHER_ENDIAN = 0x04030201u;
// n above this would overflow the file's offsets (three arrays of 4n bytes)
static const int64_t MAX_N = (INT64_MAX - TABLE_END - META_BYTES) / 12;

static void store_u32(unsigned char *d, uint32_t v) {
    for (int i = 0; i < 4; i++) d[i] = (unsigned char)(v >> (8 * i));
}
static void store_u64(unsigned char *d, uint64_t v) {
    for (int i = 0; i < 8; i++) d[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t ld32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t ld64(const unsigned char *p) { return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32; }

static int host_is_le(void) {
    uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

// Reverses the bytes of each of the n floats at p (big-endian hosts only).
static void swap_floats(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++, p += 4) {
        unsigned char t = p[0];
        p[0] = p[3];
        p[3] = t;
        t = p[1];
        p[1] = p[2];
        p[2] = t;
    }
}

// ---------------------------------------------------------------- names

// dir + "/" + name, malloc'd (trailing slashes of dir dropped); NULL when out of memory.
static char *path_join(const char *dir, const char *name) {
    size_t d = strlen(dir);
    while (d > 1 && dir[d - 1] == '/') d--;
    size_t k = strlen(name);
    char *p = malloc(d + 1 + k + 1);
    if (!p) return NULL;
    memcpy(p, dir, d);
    size_t at = d;
    if (d == 0 || dir[d - 1] != '/') p[at++] = '/';
    memcpy(p + at, name, k + 1);
    return p;
}

// What a checkpoint directory holds: single-file checkpoints, the
// manifests of sharded ones, and their shards.
enum { NAME_FILE, NAME_MANIFEST, NAME_SHARD };

// Whether name is "step-DIGITS.ckpt", "step-DIGITS.manifest" or
// "step-DIGITS.shard-R-of-N" (*kind; *of = N), each perhaps with ".tmp"
// after it (*tmp), with a step that fits an int64; sets *step.
static int parse_name(const char *name, int64_t *step, int *kind, int *of, int *tmp) {
    if (strncmp(name, "step-", 5) != 0) return 0;
    const char *p = name + 5;
    int64_t s = 0;
    if (*p < '0' || *p > '9') return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (s > (INT64_MAX - (*p - '0')) / 10) return 0;
        s = s * 10 + (*p - '0');
    }
    int r, n, used = 0;
    *of = 0;
    if (strncmp(p, ".ckpt", 5) == 0) *kind = NAME_FILE, p += 5;
    else if (strncmp(p, ".manifest", 9) == 0) *kind = NAME_MANIFEST, p += 9;
    else if (sscanf(p, ".shard-%d-of-%d%n", &r, &n, &used) == 2 && used > 0) *kind = NAME_SHARD, *of = n, p += used;
    else return 0;
    if (*p == 0) *tmp = 0;
    else if (strcmp(p, ".tmp") == 0) *tmp = 1;
    else return 0;
    *step = s;
    return 1;
}

typedef struct Found {
    char *name; // malloc'd
    int64_t step;
    int kind, tmp;
    int of; // a shard's: the ranks that wrote its step
} Found;

// The checkpoint files of dir (parse_name's, .tmp ones too), malloc'd (*count of
// them; free each name and the array). Returns 0 or an errno.
static int list_dir(const char *dir, Found **out, size_t *count) {
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return errno;
    Found *f = NULL;
    size_t n = 0, cap = 0;
    int e = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            e = errno;
            break;
        }
        int64_t step;
        int kind, of, tmp;
        if (!parse_name(de->d_name, &step, &kind, &of, &tmp)) continue;
        if (n == cap) {
            size_t c = cap ? 2 * cap : 16;
            Found *g = realloc(f, c * sizeof *g);
            if (!g) {
                e = ENOMEM;
                break;
            }
            f = g;
            cap = c;
        }
        f[n].name = strdup(de->d_name);
        if (!f[n].name) {
            e = ENOMEM;
            break;
        }
        f[n].step = step;
        f[n].kind = kind;
        f[n].of = of;
        f[n].tmp = tmp;
        n++;
    }
    closedir(d);
    if (e != 0) {
        for (size_t i = 0; i < n; i++) free(f[i].name);
        free(f);
        return e;
    }
    *out = f;
    *count = n;
    return 0;
}

static void free_found(Found *f, size_t n) {
    for (size_t i = 0; i < n; i++) free(f[i].name);
    free(f);
}

static int newest_first(const void *a, const void *b) {
    const Found *x = a, *y = b;
    return x->step < y->step ? 1 : x->step > y->step ? -1 : strcmp(x->name, y->name);
}

// fsync of a directory, to make a rename, creation or removal in it
// durable. Returns 0 or an errno; file systems that cannot sync a directory
// (EINVAL, ENOTSUP) count as done.
static int sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno;
    int e = fsync(fd) != 0 ? errno : 0;
    close(fd);
    return e == EINVAL || e == ENOTSUP || e == EROFS ? 0 : e;
}

// The parent of dir, for syncing after creating dir (best effort).
static void sync_parent_of(const char *dir) {
    size_t d = strlen(dir);
    while (d > 1 && dir[d - 1] == '/') d--;
    while (d > 0 && dir[d - 1] != '/') d--;
    while (d > 1 && dir[d - 1] == '/') d--;
    char *parent = d == 0 ? strdup(".") : strndup(dir, d);
    if (!parent) return;
    sync_dir(parent);
    free(parent);
}

// ---------------------------------------------------------------- writing

// The new file, the bytes written so far and the fault-injection limit.
typedef struct Writer {
    int fd;
    int64_t written;     // bytes, counted in the order written
    int64_t abort_after; // -1: no fault injection
} Writer;

// Writes len bytes at the file offset off (-1: the current offset), with
// EINTR and short writes retried. Returns 0 or an errno.
static int put(Writer *wr, const void *data, size_t len, int64_t off) {
    const unsigned char *p = data;
    while (len > 0) {
        size_t k = len > (1u << 30) ? (1u << 30) : len;
        if (wr->abort_after >= 0) { // MT_CKPT_ABORT_AFTER_BYTES: write up to the limit, then crash
            if (wr->written >= wr->abort_after) abort();
            if ((int64_t)k > wr->abort_after - wr->written) k = (size_t)(wr->abort_after - wr->written);
        }
        ssize_t n = off < 0 ? write(wr->fd, p, k) : pwrite(wr->fd, p, k, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) return EIO;
        wr->written += n;
        p += n;
        len -= (size_t)n;
        if (off >= 0) off += n;
        if (wr->written == wr->abort_after) abort();
    }
    return 0;
}

// Writes the n floats of array `array`, from a or through io, little-endian,
// adding them to *crc. io's failure: EIO, with its message in why.
static int put_floats(Writer *wr, const float *a, const CkptIO *io, int array, int64_t n, uint32_t *crc,
                      unsigned char *bounce, char *why, size_t whycap) {
    const unsigned char *p = (const unsigned char *)a;
    uint64_t left = (uint64_t)n * 4;
    while (left > 0) {
        size_t k = left > CHUNK ? CHUNK : (size_t)left;
        const unsigned char *src = p;
        if (io) {
            int64_t off = n - (int64_t)(left / 4);
            if (io->get(io->ctx, array, off, (int64_t)(k / 4), (float *)bounce, why, whycap) != 0) return EIO;
            src = bounce;
        } else if (!host_is_le()) {
            memcpy(bounce, p, k);
            src = bounce;
        }
        if (!host_is_le()) swap_floats(bounce, k / 4); // big-endian host
        *crc = io_crc32(*crc, src, k);
        int e = put(wr, src, k, -1);
        if (e != 0) return e;
        if (!io) p += k;
        left -= k;
    }
    return 0;
}

static void encode_meta(unsigned char b[META_BYTES], const CkptMeta *m) {
    store_u64(b, (uint64_t)m->step);
    store_u64(b + 8, (uint64_t)m->data_pos);
    store_u64(b + 16, m->seed);
    store_u64(b + 24, m->rng_state);
    store_u32(b + 32, m->plan_crc);
    store_u32(b + 36, m->model_crc);
    store_u64(b + 40, (uint64_t)m->n);
    store_u64(b + 48, (uint64_t)m->batch);
    store_u64(b + 56, (uint64_t)m->seq);
    store_u64(b + 64, (uint64_t)m->accumulate);
    store_u64(b + 72, (uint64_t)m->device_limit);
    memset(b + 80, 0, CKPT_MODEL_BYTES + CKPT_SCHEDULE_BYTES);
    memcpy(b + 80, m->model, strnlen(m->model, CKPT_MODEL_BYTES - 1));
    memcpy(b + 80 + CKPT_MODEL_BYTES, m->schedule, strnlen(m->schedule, CKPT_SCHEDULE_BYTES - 1));
    store_u64(b + META_V2_BYTES, (uint64_t)m->schedule_steps);
}

static void encode_table(unsigned char t[TABLE_BYTES], int64_t n, const uint32_t crc[SECTIONS]) {
    uint64_t off = TABLE_END;
    for (int s = 0; s < SECTIONS; s++) {
        uint64_t size = s == 0 ? META_BYTES : (uint64_t)n * 4;
        unsigned char *e = t + (size_t)s * ENTRY_BYTES;
        store_u32(e, (uint32_t)(s + 1));
        store_u32(e + 4, crc[s]);
        store_u64(e + 8, off);
        store_u64(e + 16, size);
        off += size;
    }
}

// MT_CKPT_ABORT_AFTER_BYTES as a byte count, or -1 when unset or not a
// non-negative decimal number, or when MT_CKPT_ABORT_STEP is set to another
// step than this save's.
static int64_t abort_after_bytes(int64_t step) {
    const char *s = getenv("MT_CKPT_ABORT_AFTER_BYTES"), *at = getenv("MT_CKPT_ABORT_STEP");
    if (!s || !*s || (at && *at && strtoll(at, NULL, 10) != step)) return -1;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - (*p - '0')) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

// Writes the whole checkpoint to the new file tmp and syncs it, the arrays
// from memory or through io. Returns 0 or an errno (EIO with a message in
// why when io failed).
static int write_file(const char *tmp, const CkptMeta *meta, const float *arrays[3], const CkptIO *io,
                      uint32_t *table_crc, char *why, size_t whycap) {
    Writer wr = {.fd = -1, .abort_after = abort_after_bytes(meta->step)};
    unsigned char *bounce = NULL;
    if ((io || !host_is_le()) && meta->n > 0 && !(bounce = aligned_alloc(64, CHUNK))) return ENOMEM;
    wr.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (wr.fd < 0) {
        int e = errno;
        free(bounce);
        return e;
    }
    if (wr.abort_after == 0) abort();

    unsigned char head[TABLE_END];
    memcpy(head, MAGIC, 8);
    store_u32(head + 8, CKPT_VERSION);
    store_u32(head + 12, ENDIAN);
    store_u32(head + 16, SECTIONS);
    store_u32(head + 20, io_crc32(0, head, 20));
    uint32_t crc[SECTIONS] = {0};
    encode_table(head + HEADER_BYTES, meta->n, crc); // crc32s filled in at the end
    unsigned char mb[META_BYTES];
    encode_meta(mb, meta);
    crc[0] = io_crc32(0, mb, META_BYTES);

    int e = put(&wr, head, TABLE_END, -1);
    if (e == 0) e = put(&wr, mb, META_BYTES, -1);
    for (int a = 0; a < 3 && e == 0; a++)
        e = put_floats(&wr, arrays[a], io, a, meta->n, &crc[1 + a], bounce, why, whycap);
    if (e == 0) {
        encode_table(head + HEADER_BYTES, meta->n, crc);
        if (table_crc) *table_crc = io_crc32(0, head + HEADER_BYTES, TABLE_BYTES);
        e = put(&wr, head + HEADER_BYTES, TABLE_BYTES, HEADER_BYTES);
    }
    if (e == 0 && fsync(wr.fd) != 0) e = errno;
    if (close(wr.fd) != 0 && e == 0) e = errno;
    free(bounce);
    return e;
}

// A manifest read: its shards' names, sizes and table crcs.
typedef struct Manifest {
    int64_t step, n;
    int ranks, nsegs;
    CkptSegment *segs; // (nsegs)
    char (*names)[80]; // (ranks)
    int64_t *bytes;    // (ranks)
    uint32_t *crcs;    // (ranks)
} Manifest;
static int manifest_read(const char *path, Manifest *m, char *err, size_t errcap);
static void manifest_free(Manifest *m);

// Whether f is a committed checkpoint: a whole file, or a manifest.
static int committed(const Found *f) { return !f->tmp && f->kind != NAME_SHARD; }

// Keeps the newest `keep` committed checkpoints (and always keep_step's):
// removes older ones (a manifest with its shards), every .tmp, and shards
// that no kept manifest names (a save that never committed: older than the
// newest committed step, or of a step no rank writes now). Called once
// every writer of the directory is done. Returns 0, or -1 with a message
// naming final.
static int prune(const char *dir, int keep, int64_t keep_step, const char *final, char *err, size_t errcap) {
    Found *f;
    size_t n;
    int e = list_dir(dir, &f, &n);
    if (e != 0)
        return io_fail(err, errcap, final, "saved, but cannot list %s to remove old checkpoints: %s", dir, strerror(e));
    qsort(f, n, sizeof *f, newest_first);
    int64_t *kept = malloc((size_t)(keep + 1) * sizeof *kept);
    int nkept = 0, rc = 0;
    if (!kept) rc = io_fail(err, errcap, final, "saved, but out of memory while removing old checkpoints");
    for (size_t i = 0; kept && i < n; i++) { // the steps kept, newest first
        int seen = 0;
        for (int k = 0; k < nkept; k++) seen |= kept[k] == f[i].step;
        if (committed(&f[i]) && !seen && (nkept < keep || f[i].step == keep_step)) kept[nkept++] = f[i].step;
    }
    int *ranks = kept ? calloc((size_t)keep + 1, sizeof *ranks) : NULL; // (nkept) the ranks each kept manifest names
    for (size_t i = 0; ranks && i < n; i++)
        for (int k = 0; k < nkept; k++)
            if (f[i].kind == NAME_MANIFEST && !f[i].tmp && kept[k] == f[i].step) {
                char *p = path_join(dir, f[i].name), why[16];
                Manifest m;
                ranks[k] = p && manifest_read(p, &m, why, sizeof why) == 0 ? m.ranks : -1; // (-1: keep its shards)
                if (ranks[k] > 0) manifest_free(&m);
                free(p);
            }
    for (size_t i = 0; ranks && i < n; i++) {
        int keep_it = 0;
        for (int k = 0; k < nkept; k++) // a kept step's file or manifest, and the shards its manifest names
            keep_it |= !f[i].tmp && kept[k] == f[i].step &&
                       (f[i].kind != NAME_SHARD || ranks[k] < 0 || f[i].of == ranks[k]);
        if (keep_it) continue;
        char *p = path_join(dir, f[i].name);
        if (!p) {
            rc = io_fail(err, errcap, final, "saved, but out of memory while removing old checkpoints");
            break;
        }
        if (unlink(p) != 0 && errno != ENOENT && rc == 0)
            rc = io_fail(err, errcap, final, "saved, but cannot remove the old %s: %s", p, strerror(errno));
        free(p);
    }
    if (kept && !ranks) rc = io_fail(err, errcap, final, "saved, but out of memory while removing old checkpoints");
    free(kept), free(ranks);
    free_found(f, n);
    return rc;
}

// Creates dir if missing (one level; several ranks may race to). 0, or -1 with a message.
static int make_dir(const char *dir, char *err, size_t errcap) {
    if (mkdir(dir, 0777) == 0) {
        sync_parent_of(dir);
    } else if (errno == EEXIST) {
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return io_fail(err, errcap, dir, "cannot save checkpoints here: not a directory");
    } else {
        return io_fail(err, errcap, dir, "cannot create the checkpoint directory: %s", strerror(errno));
    }
    return 0;
}

static int save_any(const char *dir, int keep, const CkptMeta *meta, const float *w, const float *m, const float *v,
                    const CkptIO *io, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!dir || !*dir) return io_fail(err, errcap, "checkpoint", "no directory to save into");
    if (!meta) return io_fail(err, errcap, dir, "internal error: no checkpoint meta to save");
    if (keep < 1) return io_fail(err, errcap, dir, "--keep must be at least 1, not %d", keep);
    if (meta->step < 0) return io_fail(err, errcap, dir, "internal error: checkpoint step %lld", (long long)meta->step);
    if (meta->n < 0 || meta->n > MAX_N)
        return io_fail(err, errcap, dir, "internal error: %lld floats per array to save", (long long)meta->n);
    if (meta->n > 0 && !io && (!w || !m || !v))
        return io_fail(err, errcap, dir, "internal error: an array to save is missing");

    if (make_dir(dir, err, errcap) != 0) return -1;

    char name[48], tmpname[64];
    snprintf(name, sizeof name, "step-%09lld.ckpt", (long long)meta->step);
    snprintf(tmpname, sizeof tmpname, "%s.tmp", name);
    char *final = path_join(dir, name), *tmp = path_join(dir, tmpname);
    int rc = -1;
    if (!final || !tmp) {
        io_fail(err, errcap, dir, "out of memory while saving a checkpoint");
        goto done;
    }
    const float *arrays[3] = {w, m, v};
    char why[512] = "";
    int e = write_file(tmp, meta, arrays, io, NULL, why, sizeof why);
    if (e == 0 && rename(tmp, final) != 0) e = errno;
    if (e != 0) {
        io_fail(err, errcap, final, "cannot write the checkpoint: %s", why[0] ? why : strerror(e));
        unlink(tmp); // nothing, or a partial temporary file
        goto done;
    }
    e = sync_dir(dir);
    if (e != 0) {
        io_fail(err, errcap, final, "written, but cannot sync its directory: %s", strerror(e));
        goto done;
    }
    rc = prune(dir, keep, meta->step, final, err, errcap);
done:
    free(final);
    free(tmp);
    return rc;
}

int ckpt_save(const char *dir, int keep, const CkptMeta *meta, const float *w, const float *m, const float *v,
              char *err, size_t errcap) {
    return save_any(dir, keep, meta, w, m, v, NULL, err, errcap);
}

int ckpt_save_io(const char *dir, int keep, const CkptMeta *meta, const CkptIO *io, char *err, size_t errcap) {
    return save_any(dir, keep, meta, NULL, NULL, NULL, io, err, errcap);
}

// ---------------------------------------------------------------- finding

int ckpt_latest(const char *dir, char *path, size_t pathcap, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (path && pathcap) path[0] = 0;
    if (!dir || !*dir) return io_fail(err, errcap, "checkpoint", "no directory to resume from");
    Found *f;
    size_t n;
    int e = list_dir(dir, &f, &n);
    if (e != 0) return io_fail(err, errcap, dir, "cannot read the checkpoint directory: %s", strerror(e));
    const Found *best = NULL;
    for (size_t i = 0; i < n; i++)
        if (committed(&f[i]) && (!best || newest_first(&f[i], best) < 0)) best = &f[i];
    int rc = 0;
    if (!best) {
        rc = io_fail(err, errcap, dir, "no checkpoint in it (no step-*.ckpt or step-*.manifest file)");
    } else {
        char *p = path_join(dir, best->name);
        if (!p) rc = io_fail(err, errcap, dir, "out of memory");
        else if (!path || strlen(p) >= pathcap)
            rc = io_fail(err, errcap, dir, "the path of %s does not fit in %zu bytes", best->name, pathcap);
        else memcpy(path, p, strlen(p) + 1);
        free(p);
    }
    free_found(f, n);
    return rc;
}

// ---------------------------------------------------------------- reading

typedef struct Entry {
    uint32_t crc;
    uint64_t off, size;
} Entry;

// Reads up to len bytes at off, with EINTR and short reads retried; stops
// early only at the end of the file. Returns the bytes read, or -1 (errno set).
static int64_t get(int fd, void *buf, size_t len, uint64_t off) {
    unsigned char *p = buf;
    size_t done = 0;
    while (done < len) {
        size_t k = len - done > (1u << 30) ? (1u << 30) : len - done;
        ssize_t n = pread(fd, p + done, k, (off_t)(off + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n == 0) break;
        done += (size_t)n;
    }
    return (int64_t)done;
}

// Reads section s into dst (its size bytes), or through bounce when dst is
// NULL (and through io's put, when given, for an array), and checks its
// crc32. Returns 0, or -1 with a message.
static int read_section(int fd, const char *path, int s, const Entry *en, void *dst, const CkptIO *io,
                        unsigned char *bounce, char *err, size_t errcap) {
    uint32_t crc = io_crc32(0, NULL, 0);
    unsigned char *out = dst;
    for (uint64_t done = 0; done < en->size;) {
        size_t k = en->size - done > CHUNK ? CHUNK : (size_t)(en->size - done);
        unsigned char *to = out ? out + done : bounce;
        int64_t got = get(fd, to, k, en->off + done);
        if (got < 0) return io_fail(err, errcap, path, "cannot read section %s: %s", SECTION_NAMES[s], strerror(errno));
        if ((size_t)got < k) return io_fail(err, errcap, path, "section %s is truncated", SECTION_NAMES[s]);
        crc = io_crc32(crc, to, k);
        if (io && s > 0) {
            if (!host_is_le()) swap_floats(to, k / 4);
            if (io->put(io->ctx, s - 1, (int64_t)(done / 4), (int64_t)(k / 4), (const float *)to, err, errcap) != 0)
                return -1;
        }
        done += k;
    }
    if (crc != en->crc) return io_fail(err, errcap, path, "section %s is corrupted (crc32 mismatch)", SECTION_NAMES[s]);
    if (out && !io && s > 0 && !host_is_le()) swap_floats(out, (size_t)(en->size / 4));
    return 0;
}

// The header and the section table; fills e[id - 1]. len: the file's size.
static int read_table(int fd, const char *path, uint64_t len, Entry e[SECTIONS], uint32_t *version_out, char *err,
                      size_t errcap) {
    unsigned char h[TABLE_END];
    int64_t got = get(fd, h, TABLE_END, 0);
    if (got < 0) return io_fail(err, errcap, path, "cannot read the checkpoint: %s", strerror(errno));
    if (got == 0) return io_fail(err, errcap, path, "empty file; not an mt checkpoint");
    if (memcmp(h, MAGIC, got < 8 ? (size_t)got : 8) != 0)
        return io_fail(err, errcap, path, "not an mt checkpoint (bad magic)");
    if (got < HEADER_BYTES)
        return io_fail(err, errcap, path, "truncated: %lld bytes, shorter than the checkpoint header (%d)",
                       (long long)got, HEADER_BYTES);
    uint32_t version = ld32(h + 8), endian = ld32(h + 12), count = ld32(h + 16);
    if (endian == OTHER_ENDIAN) return io_fail(err, errcap, path, "written on a machine of the other byte order");
    if (version != CKPT_VERSION && version != 2)
        return io_fail(err, errcap, path, "checkpoint version %u, this mtrun reads versions 2 and %d", version,
                       CKPT_VERSION);
    if (endian != ENDIAN) return io_fail(err, errcap, path, "bad endianness word 0x%08x", endian);
    if (io_crc32(0, h, 20) != ld32(h + 20))
        return io_fail(err, errcap, path, "the checkpoint header is corrupted (crc32 mismatch)");
    if (count != SECTIONS)
        return io_fail(err, errcap, path, "the section table lists %u sections; a version %u checkpoint has %d", count,
                       version, SECTIONS);
    if (got < TABLE_END)
        return io_fail(err, errcap, path, "truncated: %lld bytes, shorter than the header and section table (%d)",
                       (long long)got, TABLE_END);
    int seen[SECTIONS] = {0};
    for (int i = 0; i < SECTIONS; i++) {
        const unsigned char *t = h + HEADER_BYTES + (size_t)i * ENTRY_BYTES;
        uint32_t id = ld32(t);
        if (id < 1 || id > SECTIONS)
            return io_fail(err, errcap, path, "section table entry %d has id %u; ids are 1..%d", i, id, SECTIONS);
        if (seen[id - 1]++)
            return io_fail(err, errcap, path, "section %s is listed twice in the section table", SECTION_NAMES[id - 1]);
        e[id - 1].crc = ld32(t + 4);
        e[id - 1].off = ld64(t + 8);
        e[id - 1].size = ld64(t + 16);
    }
    for (int s = 0; s < SECTIONS; s++) { // in id order, so a file cut short names its first missing section
        if (e[s].off < TABLE_END)
            return io_fail(err, errcap, path, "section %s starts at byte %llu, inside the header and section table",
                           SECTION_NAMES[s], (unsigned long long)e[s].off);
        if (e[s].off > len || e[s].size > len - e[s].off)
            return io_fail(err, errcap, path, "section %s is truncated", SECTION_NAMES[s]);
    }
    for (int a = 0; a < SECTIONS; a++)
        for (int b = a + 1; b < SECTIONS; b++)
            if (e[a].off < e[b].off + e[b].size && e[b].off < e[a].off + e[a].size && e[a].size && e[b].size)
                return io_fail(err, errcap, path, "sections %s and %s overlap", SECTION_NAMES[a], SECTION_NAMES[b]);
    int meta_bytes = version == 2 ? META_V2_BYTES : META_BYTES;
    if (e[0].size != (uint64_t)meta_bytes)
        return io_fail(err, errcap, path, "section META has %llu bytes; a version %u checkpoint's has %d",
                       (unsigned long long)e[0].size, version, meta_bytes);
    *version_out = version;
    return 0;
}

static int read_all(int fd, const char *path, CkptMeta *meta, int64_t expected_n, float *arrays[3], const CkptIO *io,
                    char *err, size_t errcap) {
    struct stat st;
    if (fstat(fd, &st) != 0) return io_fail(err, errcap, path, "cannot read the checkpoint: %s", strerror(errno));
    if (!S_ISREG(st.st_mode)) return io_fail(err, errcap, path, "not a regular file");
    Entry e[SECTIONS];
    uint32_t version = CKPT_VERSION;
    if (read_table(fd, path, (uint64_t)st.st_size, e, &version, err, errcap) != 0) return -1;

    unsigned char mb[META_BYTES] = {0};
    if (read_section(fd, path, 0, &e[0], mb, NULL, NULL, err, errcap) != 0) return -1;
    CkptMeta got = {
        .step = (int64_t)ld64(mb),
        .data_pos = (int64_t)ld64(mb + 8),
        .seed = ld64(mb + 16),
        .rng_state = ld64(mb + 24),
        .plan_crc = ld32(mb + 32),
        .model_crc = ld32(mb + 36),
        .n = (int64_t)ld64(mb + 40),
        .batch = (int64_t)ld64(mb + 48),
        .seq = (int64_t)ld64(mb + 56),
        .accumulate = (int64_t)ld64(mb + 64),
        .device_limit = (int64_t)ld64(mb + 72),
        .schedule_steps = version >= 3 ? (int64_t)ld64(mb + META_V2_BYTES) : 0,
    };
    memcpy(got.model, mb + 80, CKPT_MODEL_BYTES);
    got.model[CKPT_MODEL_BYTES - 1] = 0;
    memcpy(got.schedule, mb + 80 + CKPT_MODEL_BYTES, CKPT_SCHEDULE_BYTES);
    got.schedule[CKPT_SCHEDULE_BYTES - 1] = 0;
    if (got.n < 0 || got.n > MAX_N)
        return io_fail(err, errcap, path, "section META: %lld floats per array is out of range", (long long)got.n);
    for (int s = 1; s < SECTIONS; s++)
        if (e[s].size != (uint64_t)got.n * 4)
            return io_fail(err, errcap, path, "section %s has %llu bytes; META's n = %lld floats needs %lld",
                           SECTION_NAMES[s], (unsigned long long)e[s].size, (long long)got.n, (long long)got.n * 4);
    if (expected_n >= 0 && got.n != expected_n)
        return io_fail(err, errcap, path,
                       "the checkpoint holds %lld floats per array, the model has %lld (another model?)",
                       (long long)got.n, (long long)expected_n);

    unsigned char *bounce = NULL;
    if ((io || !arrays[0] || !arrays[1] || !arrays[2]) && got.n > 0 && !(bounce = aligned_alloc(64, CHUNK)))
        return io_fail(err, errcap, path, "out of memory while reading the checkpoint");
    int rc = 0;
    for (int s = 1; s < SECTIONS && rc == 0; s++)
        rc = read_section(fd, path, s, &e[s], io ? NULL : arrays[s - 1], io, bounce, err, errcap);
    free(bounce);
    if (rc == 0) *meta = got;
    return rc;
}

static int read_any(const char *path, CkptMeta *meta, int64_t expected_n, float *w, float *m, float *v,
                    const CkptIO *io, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!path) return io_fail(err, errcap, "checkpoint", "no checkpoint to read");
    if (!meta) return io_fail(err, errcap, path, "internal error: nowhere to put the checkpoint meta");
    memset(meta, 0, sizeof *meta);
    if (expected_n < 0 && (w || m || v || io))
        return io_fail(err, errcap, path, "internal error: arrays to read without their expected size");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_fail(err, errcap, path, "cannot open the checkpoint: %s", strerror(errno));
    float *arrays[3] = {w, m, v};
    int rc = read_all(fd, path, meta, expected_n, arrays, io, err, errcap);
    close(fd);
    return rc;
}

int ckpt_read(const char *path, CkptMeta *meta, int64_t expected_n, float *w, float *m, float *v, char *err,
              size_t errcap) {
    return read_any(path, meta, expected_n, w, m, v, NULL, err, errcap);
}

int ckpt_read_io(const char *path, CkptMeta *meta, int64_t expected_n, const CkptIO *io, char *err, size_t errcap) {
    return read_any(path, meta, expected_n, NULL, NULL, NULL, io, err, errcap);
}

// ---------------------------------------------------------------- sharded checkpoints

// A shard's floats, segment by segment: run k holds segment seg's slice
// [lo, lo + len) (dist_shard's), store offset global, at shard offset at.
typedef struct ShardRun {
    int seg;
    int64_t lo, len, global, at;
} ShardRun;

typedef struct Shard {
    ShardRun *runs; // (nruns)
    int nruns;
    int64_t n; // floats in the shard
} Shard;

// Whether segs tile [0, n) in order. 0, or -1 with a message.
static int check_segments(const char *what, const CkptSegment *segs, int nsegs, int64_t n, char *err, size_t errcap) {
    int64_t at = 0;
    for (int k = 0; k < nsegs; at += segs[k].len, k++)
        if (segs[k].off != at || segs[k].len < 0)
            return io_fail(err, errcap, what,
                           "internal error: segment %d at %lld of %lld floats does not follow the "
                           "last (at %lld)",
                           k, (long long)segs[k].off, (long long)segs[k].len, (long long)at);
    if (at != n)
        return io_fail(err, errcap, what, "internal error: the segments hold %lld floats, not %lld", (long long)at,
                       (long long)n);
    return 0;
}

// Rank `rank` of `ranks`'s shard of segs. 0, or -1 out of memory.
static int shard_layout(Shard *sh, const CkptSegment *segs, int nsegs, int rank, int ranks) {
    *sh = (Shard){.runs = malloc((size_t)(nsegs + 1) * sizeof *sh->runs)};
    if (!sh->runs) return -1;
    for (int k = 0; k < nsegs; k++) {
        int64_t lo, hi;
        dist_shard(segs[k].len, rank, ranks, &lo, &hi);
        if (hi > lo) sh->runs[sh->nruns++] = (ShardRun){k, lo, hi - lo, segs[k].off + lo, sh->n};
        sh->n += hi - lo;
    }
    return 0;
}

// The runs of a shard that floats [off, off + n) of it span, in order:
// calls each(ctx, run, first float of the run's, count, floats done before).
typedef int (*RunPiece)(void *ctx, const ShardRun *run, int64_t from, int64_t k, int64_t done, char *err,
                        size_t errcap);
static int each_piece(const Shard *sh, int64_t off, int64_t n, RunPiece each, void *ctx, char *err, size_t errcap) {
    int lo = 0, hi = sh->nruns - 1; // the last run starting at or before off
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (sh->runs[mid].at <= off) lo = mid;
        else hi = mid - 1;
    }
    int64_t done = 0;
    for (int r = lo; r < sh->nruns && done < n; r++) {
        const ShardRun *run = &sh->runs[r];
        int64_t from = off + done - run->at, k = run->len - from < n - done ? run->len - from : n - done;
        if (from < 0 || k <= 0) continue;
        if (each(ctx, run, from, k, done, err, errcap) != 0) return -1;
        done += k;
    }
    return 0;
}

typedef struct ShardIO {
    const Shard *sh;
    const CkptIO *io;
    int array;
    float *buf;            // the caller's piece
    const CkptRange *want; // (nsegs) what the reader fills of each segment; NULL: everything
} ShardIO;

static int get_piece(void *ctx, const ShardRun *run, int64_t from, int64_t k, int64_t done, char *err, size_t errcap) {
    ShardIO *s = ctx;
    return s->io->get(s->io->ctx, s->array, run->global + from, k, s->buf + done, err, errcap);
}
static int shard_get(void *ctx, int array, int64_t off, int64_t n, float *dst, char *err, size_t errcap) {
    ShardIO *s = ctx;
    s->array = array, s->buf = dst;
    return each_piece(s->sh, off, n, get_piece, s, err, errcap);
}

// The part of [lo, lo + k) of segment `seg` the reader wants, put.
static int put_wanted(const ShardIO *s, int seg, int64_t seg_off, int64_t lo, int64_t k, const float *src, char *err,
                      size_t errcap) {
    int64_t a = lo, b = lo + k;
    if (s->want) {
        a = a > s->want[seg].lo ? a : s->want[seg].lo;
        b = b < s->want[seg].hi ? b : s->want[seg].hi;
    }
    return b > a ? s->io->put(s->io->ctx, s->array, seg_off + a, b - a, src + (a - lo), err, errcap) : 0;
}
static int put_piece(void *ctx, const ShardRun *run, int64_t from, int64_t k, int64_t done, char *err, size_t errcap) {
    ShardIO *s = ctx;
    return put_wanted(s, run->seg, run->global - run->lo, run->lo + from, k, s->buf + done, err, errcap);
}
static int shard_put(void *ctx, int array, int64_t off, int64_t n, const float *src, char *err, size_t errcap) {
    ShardIO *s = ctx;
    s->array = array, s->buf = (float *)src;
    return each_piece(s->sh, off, n, put_piece, s, err, errcap);
}

static void shard_name(char *out, size_t cap, int64_t step, int rank, int ranks) {
    snprintf(out, cap, "step-%09lld.shard-%05d-of-%05d", (long long)step, rank, ranks);
}

// Moves tmp to final and syncs the directory. 0, or -1 with a message (tmp removed).
static int commit_file(const char *dir, const char *tmp, const char *final, int e, const char *why, char *err,
                       size_t errcap) {
    if (e == 0 && rename(tmp, final) != 0) e = errno;
    if (e != 0) {
        io_fail(err, errcap, final, "cannot write it: %s", why && why[0] ? why : strerror(e));
        unlink(tmp);
        return -1;
    }
    if ((e = sync_dir(dir)) != 0)
        return io_fail(err, errcap, final, "written, but cannot sync its directory: %s", strerror(e));
    return 0;
}

int ckpt_save_shard(const char *dir, const CkptMeta *meta, const CkptSegment *segs, int nsegs, int rank, int ranks,
                    const CkptIO *io, int64_t *bytes, uint32_t *table_crc, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!dir || !*dir) return io_fail(err, errcap, "checkpoint", "no directory to save into");
    if (ranks < 1 || rank < 0 || rank >= ranks)
        return io_fail(err, errcap, dir, "internal error: rank %d of %d", rank, ranks);
    if (check_segments(dir, segs, nsegs, meta->n, err, errcap) != 0 || make_dir(dir, err, errcap) != 0) return -1;
    Shard sh;
    if (shard_layout(&sh, segs, nsegs, rank, ranks) != 0) return io_fail(err, errcap, dir, "out of memory");
    char name[80], tmpname[96];
    shard_name(name, sizeof name, meta->step, rank, ranks);
    snprintf(tmpname, sizeof tmpname, "%s.tmp", name);
    char *final = path_join(dir, name), *tmp = path_join(dir, tmpname), why[512] = "";
    int rc = -1;
    if (!final || !tmp) {
        io_fail(err, errcap, dir, "out of memory while saving a checkpoint");
    } else {
        CkptMeta mine = *meta;
        mine.n = sh.n; // the shard's floats; the manifest has the store's
        ShardIO sio = {.sh = &sh, .io = io};
        CkptIO through = {shard_get, NULL, &sio};
        int e = write_file(tmp, &mine, (const float *[3]){NULL, NULL, NULL}, &through, table_crc, why, sizeof why);
        rc = commit_file(dir, tmp, final, e, why, err, errcap);
        *bytes = TABLE_END + META_BYTES + 12 * sh.n;
    }
    free(final), free(tmp), free(sh.runs);
    return rc;
}

static const char MANIFEST_MAGIC[] = "mt sharded checkpoint 1\n";

int ckpt_commit_shards(const char *dir, int keep, const CkptMeta *meta, const CkptSegment *segs, int nsegs, int ranks,
                       const int64_t *bytes, const uint32_t *table_crcs, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (keep < 1) return io_fail(err, errcap, dir, "--keep must be at least 1, not %d", keep);
    char name[48], tmpname[64];
    snprintf(name, sizeof name, "step-%09lld.manifest", (long long)meta->step);
    snprintf(tmpname, sizeof tmpname, "%s.tmp", name);
    char *final = path_join(dir, name), *tmp = path_join(dir, tmpname);
    size_t cap = 256 + (size_t)nsegs * 48 + (size_t)ranks * 96, len = 0;
    char *text = malloc(cap);
    int rc = -1;
    if (!final || !tmp || !text) {
        io_fail(err, errcap, dir, "out of memory while saving a checkpoint");
        goto done;
    }
    len += (size_t)snprintf(text + len, cap - len, "%sstep %lld\nn %lld\nranks %d\nsegments %d\n", MANIFEST_MAGIC,
                            (long long)meta->step, (long long)meta->n, ranks, nsegs);
    for (int k = 0; k < nsegs; k++)
        len += (size_t)snprintf(text + len, cap - len, "%lld %lld\n", (long long)segs[k].off, (long long)segs[k].len);
    for (int r = 0; r < ranks; r++) {
        char shard[80];
        shard_name(shard, sizeof shard, meta->step, r, ranks);
        len += (size_t)snprintf(text + len, cap - len, "shard %d %s %lld %08x\n", r, shard, (long long)bytes[r],
                                table_crcs[r]);
    }
    len += (size_t)snprintf(text + len, cap - len, "crc32 %08x\n", io_crc32(0, text, len));
    Writer wr = {.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), .abort_after = -1};
    int e = wr.fd < 0 ? errno : put(&wr, text, len, -1);
    if (e == 0 && fsync(wr.fd) != 0) e = errno;
    if (wr.fd >= 0 && close(wr.fd) != 0 && e == 0) e = errno;
    if (commit_file(dir, tmp, final, e, NULL, err, errcap) == 0) rc = prune(dir, keep, meta->step, final, err, errcap);
done:
    free(final), free(tmp), free(text);
    return rc;
}

static void manifest_free(Manifest *m) {
    free(m->segs), free(m->names), free(m->bytes), free(m->crcs);
    *m = (Manifest){0};
}

// Reads and checks path (its crc32 line, every field). 0, or -1 with a message.
static int manifest_read(const char *path, Manifest *m, char *err, size_t errcap) {
    *m = (Manifest){0};
    char *text;
    size_t len;
    if (io_read_file(path, &text, &len) != 0)
        return io_fail(err, errcap, path, "cannot read the manifest: %s", strerror(errno));
    int rc = -1;
    char *last = len > 1 ? memchr(text, 0, len) : NULL;
    if (last || len < sizeof MANIFEST_MAGIC || memcmp(text, MANIFEST_MAGIC, sizeof MANIFEST_MAGIC - 1) != 0) {
        io_fail(err, errcap, path, "not an mt checkpoint manifest");
        goto done;
    }
    text[len - 1] = 0; // (its last newline)
    last = strrchr(text, '\n');
    unsigned crc;
    if (!last || sscanf(last + 1, "crc32 %x", &crc) != 1 || crc != io_crc32(0, text, (size_t)(last + 1 - text))) {
        io_fail(err, errcap, path, "the manifest is damaged (its crc32 line does not match)");
        goto done;
    }
    char *at = text + sizeof MANIFEST_MAGIC - 1;
    int used = 0;
    long long step, n;
    if (sscanf(at, "step %lld\nn %lld\nranks %d\nsegments %d\n%n", &step, &n, &m->ranks, &m->nsegs, &used) != 4 ||
        !used || m->ranks < 1 || m->nsegs < 0 || n < 0) {
        io_fail(err, errcap, path, "the manifest's header is malformed");
        goto done;
    }
    m->step = step, m->n = n, at += used;
    m->segs = calloc((size_t)m->nsegs + 1, sizeof *m->segs);
    m->names = calloc((size_t)m->ranks, sizeof *m->names);
    m->bytes = calloc((size_t)m->ranks, sizeof *m->bytes);
    m->crcs = calloc((size_t)m->ranks, sizeof *m->crcs);
    if (!m->segs || !m->names || !m->bytes || !m->crcs) {
        io_fail(err, errcap, path, "out of memory reading the manifest");
        goto done;
    }
    for (int k = 0; k < m->nsegs; k++, at += used) {
        long long off, l;
        if (sscanf(at, "%lld %lld\n%n", &off, &l, &used) != 2 || !used) {
            io_fail(err, errcap, path, "the manifest's segment %d is malformed", k);
            goto done;
        }
        m->segs[k] = (CkptSegment){off, l};
    }
    for (int r = 0; r < m->ranks; r++, at += used) {
        int rr;
        long long b;
        char want[80];
        shard_name(want, sizeof want, m->step, r, m->ranks);
        if (sscanf(at, "shard %d %79s %lld %x\n%n", &rr, m->names[r], &b, &crc, &used) != 4 || !used || rr != r ||
            strcmp(m->names[r], want) != 0) {
            io_fail(err, errcap, path, "the manifest's shard %d is malformed", r);
            goto done;
        }
        m->bytes[r] = b, m->crcs[r] = crc;
    }
    if (check_segments(path, m->segs, m->nsegs, m->n, err, errcap) == 0) rc = 0;
done:
    free(text);
    if (rc != 0) manifest_free(m);
    return rc;
}

// The directory of a file's path, malloc'd ("." for a bare name).
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
}

// Whether shard file `path` is the one the manifest names: its size and
// the crc32 of its section table. 0, or -1 with a message.
static int shard_matches(const char *path, int r, const Manifest *m, char *err, size_t errcap) {
    struct stat st;
    if (stat(path, &st) != 0)
        return io_fail(err, errcap, path, "shard %d of %d of step %lld is missing: %s", r, m->ranks, (long long)m->step,
                       strerror(errno));
    if ((int64_t)st.st_size != m->bytes[r])
        return io_fail(err, errcap, path, "shard %d of %d of step %lld has %lld bytes; the manifest says %lld", r,
                       m->ranks, (long long)m->step, (long long)st.st_size, (long long)m->bytes[r]);
    unsigned char t[TABLE_BYTES];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int64_t got = fd < 0 ? -1 : get(fd, t, TABLE_BYTES, HEADER_BYTES);
    if (fd >= 0) close(fd);
    if (got != TABLE_BYTES || io_crc32(0, t, TABLE_BYTES) != m->crcs[r])
        return io_fail(err, errcap, path,
                       "shard %d of %d of step %lld is not the one its manifest names (section "
                       "table crc32)",
                       r, m->ranks, (long long)m->step);
    return 0;
}

static int load_sharded(const char *path, CkptMeta *meta, int64_t expected_n, const CkptSegment *segs, int nsegs,
                        const CkptRange *want, const CkptIO *io, char *err, size_t errcap) {
    Manifest m;
    if (manifest_read(path, &m, err, errcap) != 0) return -1;
    char *dir = dir_of(path), *file = NULL;
    Shard sh = {0};
    int rc = -1;
    if (!dir) {
        io_fail(err, errcap, path, "out of memory");
        goto done;
    }
    if (expected_n >= 0 && m.n != expected_n) {
        io_fail(err, errcap, path, "the checkpoint holds %lld floats per array, the model has %lld (another model?)",
                (long long)m.n, (long long)expected_n);
        goto done;
    }
    if (segs && (nsegs != m.nsegs || memcmp(segs, m.segs, (size_t)nsegs * sizeof *segs) != 0)) {
        io_fail(err, errcap, path, "the checkpoint's %d segments are laid out otherwise than this plan's %d", m.nsegs,
                nsegs);
        goto done;
    }
    for (int r = 0; r < m.ranks; r++) { // every shard as the manifest names it, before anything is put
        free(file);
        if (!(file = path_join(dir, m.names[r]))) goto oom;
        if (shard_matches(file, r, &m, err, errcap) != 0) goto done;
    }
    for (int r = 0; r < m.ranks; r++) {
        free(sh.runs);
        if (shard_layout(&sh, m.segs, m.nsegs, r, m.ranks) != 0) goto oom;
        int needed = r == 0; // (shard 0 always: its META is the checkpoint's)
        for (int k = 0; io && k < sh.nruns; k++) {
            const ShardRun *run = &sh.runs[k];
            needed |= !want || (want[run->seg].lo < run->lo + run->len && run->lo < want[run->seg].hi);
        }
        if (!needed) continue;
        free(file);
        if (!(file = path_join(dir, m.names[r]))) goto oom;
        CkptMeta got;
        ShardIO sio = {.sh = &sh, .io = io, .want = want};
        CkptIO through = {NULL, shard_put, &sio};
        if (io ? ckpt_read_io(file, &got, sh.n, &through, err, errcap) != 0
               : ckpt_read(file, &got, sh.n, NULL, NULL, NULL, err, errcap) != 0)
            goto done;
        if (got.step != m.step) {
            io_fail(err, errcap, file, "holds step %lld; its manifest %s says %lld", (long long)got.step, path,
                    (long long)m.step);
            goto done;
        }
        if (r == 0) *meta = got, meta->n = m.n;
    }
    rc = 0;
    goto done;
oom:
    io_fail(err, errcap, path, "out of memory");
done:
    free(dir), free(file), free(sh.runs);
    manifest_free(&m);
    if (rc != 0) memset(meta, 0, sizeof *meta);
    return rc;
}

static int ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

int ckpt_load(const char *path, CkptMeta *meta, int64_t expected_n, const CkptSegment *segs, int nsegs,
              const CkptRange *want, const CkptIO *io, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!path) return io_fail(err, errcap, "checkpoint", "no checkpoint to read");
    if (io && expected_n < 0)
        return io_fail(err, errcap, path, "internal error: arrays to read without their expected size");
    if (ends_with(path, ".manifest")) return load_sharded(path, meta, expected_n, segs, nsegs, want, io, err, errcap);
    if (!io) return ckpt_read(path, meta, expected_n, NULL, NULL, NULL, err, errcap);
    if (!want) return ckpt_read_io(path, meta, expected_n, io, err, errcap);
    // one file, of which the reader wants parts: the whole store as one run
    if (check_segments(path, segs, nsegs, expected_n, err, errcap) != 0) return -1;
    ShardRun *runs = malloc((size_t)(nsegs + 1) * sizeof *runs);
    if (!runs) return io_fail(err, errcap, path, "out of memory");
    for (int k = 0; k < nsegs; k++) runs[k] = (ShardRun){k, 0, segs[k].len, segs[k].off, segs[k].off};
    Shard sh = {runs, nsegs, expected_n};
    ShardIO sio = {.sh = &sh, .io = io, .want = want};
    CkptIO through = {NULL, shard_put, &sio};
    int rc = ckpt_read_io(path, meta, expected_n, &through, err, errcap);
    free(runs);
    return rc;
}
