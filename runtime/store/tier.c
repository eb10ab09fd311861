// tier.c: the NVMe tier of tier.h: a scratch file of per-layer records read
// and written through io_uring in TIER_BLOCK requests, staged in TIER_SLOTS
// page-aligned buffers.
//
// A slot is empty, reading, ready (it holds its layer's current record:
// read, or given back unchanged), held (the caller's, between tier_acquire
// and tier_release) or writing (its record is on the way back to the file
// and still current in the buffer; empty once written, so that the file,
// not the staging, carries the state from one step to the next). pump() submits what the reading and writing slots
// still have to send, TIER_DEPTH requests at most in flight, and reaps completions.
#include "runtime/store/tier.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

typedef enum { SLOT_EMPTY, SLOT_READING, SLOT_READY, SLOT_HELD, SLOT_WRITING } SlotState;

typedef struct Slot {
    float *buf;    // (arrays * stride) one layer's record
    int64_t layer; // the record it holds (-1: none)
    SlotState state;
    int64_t next;  // reading or writing: bytes of the record submitted so far
    int inflight;  // requests of this slot in flight
    uint64_t used; // when last acquired, for choosing a slot to reuse
} Slot;

typedef struct Request {
    int slot;         // -1: free
    int64_t off, len; // bytes, in the record
} Request;

struct Tier {
    char *path;
    int fd;
    int direct; // opened with O_DIRECT
    struct io_uring ring;
    int ring_ok;
    int64_t layers, floats, stride, record; // record: bytes per layer
    Slot slot[TIER_SLOTS];
    Request req[TIER_DEPTH];
    int inflight;
    uint64_t clock;
    int64_t writes;            // write requests submitted, for fault injection
    int64_t short_at, kill_at; // MT_TIER_SHORT_WRITE, MT_TIER_KILL_AT_WRITE (0: off)
    char err[512];             // the first failure; every later call returns it
};

static int fail(Tier *t, const char *fmt, ...) {
    if (t->err[0]) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    return -1;
}

static int report(const Tier *t, char *err, size_t errcap) {
    if (err && errcap) snprintf(err, errcap, "%s", t->err);
    return -1;
}

static int64_t env_count(const char *name) {
    const char *s = getenv(name);
    return s && *s ? strtoll(s, NULL, 10) : 0;
}

int64_t tier_stride(const Tier *t) { return t->stride; }
int64_t tier_bytes(const Tier *t) { return t->layers * t->record; }
const char *tier_path(const Tier *t) { return t->path; }

// ---------------------------------------------------------------- opening

static Tier *open_fail(Tier *t, char *err, size_t errcap) {
    report(t, err, errcap);
    tier_close(t);
    return NULL;
}

Tier *tier_open(const char *dir, int64_t layers, int64_t floats, int arrays, char *err, size_t errcap) {
    Tier *t = calloc(1, sizeof *t);
    size_t plen = strlen(dir) + sizeof "/mtrun.tier";
    if (!t || !(t->path = malloc(plen))) {
        if (err && errcap) snprintf(err, errcap, "%s: out of memory opening the tier", dir);
        free(t);
        return NULL;
    }
    snprintf(t->path, plen, "%s/mtrun.tier", dir);
    t->fd = -1;
    t->layers = layers, t->floats = floats;
    t->stride = (floats * 4 + TIER_ALIGN - 1) / TIER_ALIGN * TIER_ALIGN / 4;
    t->record = (int64_t)arrays * t->stride * 4;
    t->short_at = env_count("MT_TIER_SHORT_WRITE"), t->kill_at = env_count("MT_TIER_KILL_AT_WRITE");
    for (int i = 0; i < TIER_SLOTS; i++) t->slot[i].layer = -1;
    for (int i = 0; i < TIER_DEPTH; i++) t->req[i].slot = -1;
    int64_t need = layers * t->record;

    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fail(t, "%s: --tier-dir needs an existing directory", dir);
        return open_fail(t, err, errcap);
    }
    t->direct = 1;
    t->fd = open(t->path, O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0600);
    if (t->fd < 0 && errno == EINVAL) { // a filesystem without O_DIRECT (tmpfs): buffered
        t->direct = 0;
        t->fd = open(t->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    }
    if (t->fd < 0) {
        fail(t, "%s: cannot create the tier file: %s", t->path, strerror(errno));
        return open_fail(t, err, errcap);
    }
    if (flock(t->fd, LOCK_EX | LOCK_NB) != 0) {
        fail(t, "%s: in use by another mtrun (locked); give each run its own --tier-dir", t->path);
        close(t->fd), t->fd = -1; // not ours to remove
        return open_fail(t, err, errcap);
    }
    // A file a killed run left is scratch: start it afresh, all zeros.
    struct statvfs vs;
    if (ftruncate(t->fd, 0) != 0) {
        fail(t, "%s: cannot truncate the tier file: %s", t->path, strerror(errno));
        return open_fail(t, err, errcap);
    }
    if (fstatvfs(t->fd, &vs) == 0 && (int64_t)vs.f_bavail * (int64_t)vs.f_frsize < need) {
        fail(t, "%s: the tier needs %lld bytes (%.6g GB) and its filesystem has %lld bytes free", t->path,
             (long long)need, (double)need / 1e9, (long long)((int64_t)vs.f_bavail * (int64_t)vs.f_frsize));
        return open_fail(t, err, errcap);
    }
    int e = need > 0 ? fallocate(t->fd, 0, 0, (off_t)need) : 0;
    if (e != 0 && errno == EOPNOTSUPP) e = ftruncate(t->fd, (off_t)need); // no fallocate: sparse
    if (e != 0) {
        fail(t, "%s: cannot preallocate %lld bytes (%.6g GB) for the tier: %s", t->path, (long long)need,
             (double)need / 1e9, strerror(errno));
        return open_fail(t, err, errcap);
    }
    for (int i = 0; i < TIER_SLOTS; i++)
        if (!(t->slot[i].buf = aligned_alloc(TIER_ALIGN, (size_t)(t->record ? t->record : TIER_ALIGN)))) {
            fail(t, "%s: cannot allocate %d staging buffers of %lld bytes", t->path, TIER_SLOTS, (long long)t->record);
            return open_fail(t, err, errcap);
        }
    if ((e = io_uring_queue_init(TIER_DEPTH, &t->ring, 0)) != 0) {
        fail(t, "%s: cannot set up io_uring: %s", t->path, strerror(-e));
        return open_fail(t, err, errcap);
    }
    t->ring_ok = 1;
    return t;
}

// ---------------------------------------------------------------- I/O

// One completion: a request of slot s back with res bytes (or -errno).
static void complete(Tier *t, Request *q, int res) {
    Slot *s = &t->slot[q->slot];
    const char *what = s->state == SLOT_READING ? "read" : "write";
    if (res < 0)
        fail(t, "%s: layer %lld: the %s of %lld bytes at byte %lld of its record failed: %s", t->path,
             (long long)s->layer, what, (long long)q->len, (long long)q->off, strerror(-res));
    else if (res != q->len)
        fail(t, "%s: layer %lld: short %s, %d of %lld bytes at byte %lld of its record (%s)", t->path,
             (long long)s->layer, what, res, (long long)q->len, (long long)q->off,
             s->state == SLOT_READING ? "the tier file was truncated or changed behind mtrun's back"
                                      : "the disk is full or failing");
    s->inflight--, t->inflight--;
    q->slot = -1;
    // A read done: ready. A write done: empty, so that the layer's next
    // acquire reads the file back (the file, not the staging, holds the state).
    if (s->inflight == 0 && s->next == t->record) s->state = s->state == SLOT_READING ? SLOT_READY : SLOT_EMPTY;
}

// Submits what reading and writing slots still have to send, then reaps
// completions, waiting for one first when block and any is in flight.
// Returns 0, or -1 once anything failed.
static int pump(Tier *t, int block) {
    int submitted = 0, kill = 0;
    for (int i = 0; i < TIER_SLOTS && !t->err[0]; i++) {
        Slot *s = &t->slot[i];
        int writing = s->state == SLOT_WRITING;
        while ((s->state == SLOT_READING || writing) && s->next < t->record && t->inflight < TIER_DEPTH) {
            int k = 0;
            while (t->req[k].slot >= 0) k++;
            struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
            if (!sqe) break;
            int64_t len = t->record - s->next < TIER_BLOCK ? t->record - s->next : TIER_BLOCK;
            char *at = (char *)s->buf + s->next;
            off_t off = (off_t)(s->layer * t->record + s->next);
            if (writing) {
                t->writes++;
                unsigned n = (unsigned)len;
                if (t->writes == t->short_at) n = len > TIER_ALIGN ? (unsigned)(len - TIER_ALIGN) : 0;
                io_uring_prep_write(sqe, t->fd, at, n, off);
                kill |= t->writes == t->kill_at;
            } else {
                io_uring_prep_read(sqe, t->fd, at, (unsigned)len, off);
            }
            io_uring_sqe_set_data64(sqe, (uint64_t)k);
            t->req[k] = (Request){.slot = i, .off = s->next, .len = len};
            s->next += len, s->inflight++, t->inflight++, submitted++;
        }
    }
    if (submitted) {
        int e = io_uring_submit(&t->ring);
        if (e < 0) return fail(t, "%s: io_uring_submit: %s", t->path, strerror(-e));
        if (kill) raise(SIGKILL); // MT_TIER_KILL_AT_WRITE: a crash with the write in flight
    }
    struct io_uring_cqe *cqe;
    if (block && t->inflight > 0) {
        int e;
        while ((e = io_uring_wait_cqe(&t->ring, &cqe)) == -EINTR) {}
        if (e < 0) return fail(t, "%s: io_uring_wait_cqe: %s", t->path, strerror(-e));
    }
    while (t->inflight > 0 && io_uring_peek_cqe(&t->ring, &cqe) == 0) {
        complete(t, &t->req[io_uring_cqe_get_data64(cqe)], cqe->res);
        io_uring_cqe_seen(&t->ring, cqe);
    }
    return t->err[0] ? -1 : 0;
}

// Pumps until slot s has no read or write in flight.
static int settle(Tier *t, Slot *s) {
    while (!t->err[0] && (s->state == SLOT_READING || s->state == SLOT_WRITING))
        if (pump(t, 1) != 0) return -1;
    return t->err[0] ? -1 : 0;
}

static Slot *find(Tier *t, int64_t layer) {
    for (int i = 0; i < TIER_SLOTS; i++)
        if (t->slot[i].layer == layer && t->slot[i].state != SLOT_EMPTY) return &t->slot[i];
    return NULL;
}

// A slot to read into, not `keep`: an empty one, else the least recently
// used of the others not held (waiting for its write if one is in flight).
static Slot *victim(Tier *t, const Slot *keep) {
    Slot *best = NULL;
    for (int i = 0; i < TIER_SLOTS; i++) {
        Slot *s = &t->slot[i];
        if (s == keep || s->state == SLOT_HELD) continue;
        if (s->state == SLOT_EMPTY) return s;
        if (!best || s->used < best->used) best = s;
    }
    if (best && settle(t, best) != 0) return NULL;
    return best;
}

// Checks, before each read or write of layer's record is submitted, that
// the file is still the size mtrun preallocated with every block allocated:
// a file truncated behind mtrun's back is refused at its next I/O, even
// where writes since have refilled it (with holes) or the read would land
// inside it. Returns 0, or -1.
static int intact(Tier *t, int64_t layer) {
    struct stat st;
    int64_t need = t->layers * t->record;
    if (fstat(t->fd, &st) != 0)
        return fail(t, "%s: layer %lld: cannot stat the tier file: %s", t->path, (long long)layer, strerror(errno));
    if ((int64_t)st.st_size != need || (int64_t)st.st_blocks * 512 < need)
        return fail(t,
                    "%s: layer %lld: the tier file is %lld bytes with %lld allocated, not the %lld mtrun "
                    "preallocated: truncated or changed behind mtrun's back",
                    t->path, (long long)layer, (long long)st.st_size, (long long)st.st_blocks * 512, (long long)need);
    return 0;
}

static void start_read(Tier *t, Slot *s, int64_t layer) {
    if (intact(t, layer) != 0) return;
    *s = (Slot){.buf = s->buf, .layer = layer, .state = SLOT_READING, .used = s->used};
    pump(t, 0);
}

// 0 when layer's record may be acquired: no earlier failure, a layer of the file.
static int acquirable(Tier *t, int64_t layer) {
    if (t->err[0]) return -1;
    if (layer < 0 || layer >= t->layers)
        return fail(t, "%s: internal error: layer %lld of %lld", t->path, (long long)layer, (long long)t->layers);
    return 0;
}

float *tier_acquire(Tier *t, int64_t layer, char *err, size_t errcap) {
    if (acquirable(t, layer) != 0) return report(t, err, errcap), NULL;
    Slot *s = find(t, layer);
    if (s && s->state == SLOT_WRITING) { // its record is current while its write lands: take it back
        if (settle(t, s) != 0) return report(t, err, errcap), NULL;
    } else if (!s) {
        if (!(s = victim(t, NULL))) {
            if (!t->err[0]) fail(t, "%s: internal error: every staging buffer is held", t->path);
            return report(t, err, errcap), NULL;
        }
        start_read(t, s, layer);
    }
    if (settle(t, s) != 0) return report(t, err, errcap), NULL;
    s->state = SLOT_HELD;
    s->used = ++t->clock;
    int64_t next = (layer + 1) % t->layers; // the prefetch: the next layer, unless already staged
    if (next != layer && !find(t, next)) {
        Slot *p = victim(t, s);
        if (p) start_read(t, p, next);
    }
    if (t->err[0]) return report(t, err, errcap), NULL;
    return s->buf;
}

float *tier_acquire_new(Tier *t, int64_t layer, char *err, size_t errcap) {
    if (acquirable(t, layer) != 0) return report(t, err, errcap), NULL;
    Slot *s = find(t, layer);
    if (!s && !(s = victim(t, NULL)) && !t->err[0])
        fail(t, "%s: internal error: every staging buffer is held", t->path);
    if (t->err[0] || settle(t, s) != 0) return report(t, err, errcap), NULL;
    *s = (Slot){.buf = s->buf, .layer = layer, .state = SLOT_HELD, .used = ++t->clock};
    return s->buf;
}

int tier_release(Tier *t, int64_t layer, int dirty, char *err, size_t errcap) {
    if (t->err[0]) return report(t, err, errcap);
    Slot *s = find(t, layer);
    if (!s || s->state != SLOT_HELD) {
        fail(t, "%s: internal error: layer %lld released but not held", t->path, (long long)layer);
        return report(t, err, errcap);
    }
    if (!dirty) {
        s->state = SLOT_READY;
        return 0;
    }
    if (intact(t, layer) != 0) return report(t, err, errcap);
    s->state = SLOT_WRITING, s->next = 0, s->inflight = 0;
    return pump(t, 0) != 0 ? report(t, err, errcap) : 0;
}

int tier_drain(Tier *t, char *err, size_t errcap) {
    for (int i = 0; i < TIER_SLOTS; i++)
        if (settle(t, &t->slot[i]) != 0) return report(t, err, errcap);
    return 0;
}

void tier_close(Tier *t) {
    if (!t) return;
    if (t->ring_ok) {
        while (t->inflight > 0) { // what is in flight must land before its buffer goes
            struct io_uring_cqe *cqe;
            if (io_uring_wait_cqe(&t->ring, &cqe) != 0) break;
            complete(t, &t->req[io_uring_cqe_get_data64(cqe)], cqe->res);
            io_uring_cqe_seen(&t->ring, cqe);
        }
        io_uring_queue_exit(&t->ring);
    }
    if (t->fd >= 0) {
        unlink(t->path);
        close(t->fd);
    }
    for (int i = 0; i < TIER_SLOTS; i++) free(t->slot[i].buf);
    free(t->path);
    free(t);
}
