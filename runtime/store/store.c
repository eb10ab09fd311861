#include "runtime/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>

#include "common/bf16.h"
#include "common/storage.h"
#include "runtime/dist/dist.h"
#include "runtime/store/pool.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int store_grads_bf16(const Plan *p, int holds) {
    const char *add_only = getenv("MT_GRADS_ADD_ONLY");
    return storage_grads_bf16(p->graph, p->ranks, !!(holds & STORE_TIER_GRADS)) &&
           !(add_only && !strcmp(add_only, "1"));
}

int64_t store_bytes(const Plan *p, int holds) {
    return storage_host_bytes(p->graph, store_grads_bf16(p, holds)); // a frozen parameter: its storage dtype only
}

// The arrays of a layer's tier record: m and v, the master, the gradients.
static int tier_arrays(int holds) { return 2 + !!(holds & STORE_TIER_MASTER) + !!(holds & STORE_TIER_GRADS); }

int64_t store_tier_bytes(const Plan *p, int holds) {
    return p->graph->layers * store_tier_layer(p) * 4 * tier_arrays(holds) +
           (holds & STORE_TIER_WEIGHTS ? plan_host_elems(p) * 2 : 0);
}

int64_t store_shard_elems(const Plan *p, int rank, int ranks) {
    int64_t n = 0, lo, hi;
    for (int64_t seg = SEG_FIRST; seg < p->graph->layers; seg++) {
        dist_shard(plan_segment_len(p, seg), rank, ranks, &lo, &hi);
        n += hi - lo;
    }
    return n;
}

int64_t store_slice(const HostStore *s, const Plan *p, int64_t seg, int64_t *lo, int64_t *hi) {
    int64_t base = plan_segment_base(p, seg), len = plan_segment_len(p, seg);
    if (!s->shard_at) {
        *lo = base, *hi = base + len;
        return base;
    }
    dist_shard(len, s->rank, s->ranks, lo, hi);
    *lo += base, *hi += base;
    return s->shard_at[plan_segment_index(seg)];
}

int64_t store_index(const HostStore *s, const Plan *p, int64_t f) {
    if (!s->shard_at) return f;
    int64_t lo, hi, at = store_slice(s, p, plan_segment_of(p, f), &lo, &hi);
    return f >= lo && f < hi ? at + (f - lo) : -1;
}

// The part [*a, *b) of plan elements [off, off + n) of segment seg that
// this store holds (may be empty), and the array index of *a.
static int64_t store_clip(const HostStore *s, const Plan *p, int64_t seg, int64_t off, int64_t n, int64_t *a,
                          int64_t *b) {
    int64_t lo, hi, at = store_slice(s, p, seg, &lo, &hi);
    *a = off > lo ? off : lo;
    *b = off + n < hi ? off + n : hi;
    if (*b < *a) *b = *a;
    return at + (*a - lo);
}

int store_alloc(HostStore *s, const Plan *p) {
    char ignored[16];
    return store_alloc_tier(s, p, NULL, 0, 1, ignored, sizeof ignored);
}

// The gradient accumulators with the gradients on the tier: an anonymous
// mapping whose pages hold memory only while touched (a layer's, from its
// first COPY_OUT of a step to its INS_NORM, which moves them to the tier and
// drops them: store_norm); the pages read as zeros until written.
// *mapped: the length to unmap.
static float *grads_map(size_t bytes, size_t *mapped) {
    void *at = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    *mapped = bytes;
    return at == MAP_FAILED ? NULL : at;
}

// Zeroes floats [off, off + n) of the mapped gradients and gives back the
// memory of the pages wholly inside (they read as zeros again).
static void grads_drop(HostStore *s, int64_t off, int64_t n) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)(s->g + off), b = (uintptr_t)(s->g + off + n);
    uintptr_t lo = (a + page - 1) / page * page, hi = b / page * page;
    if (hi <= lo || madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0) {
        memset(s->g + off, 0, (size_t)n * sizeof(float));
        return;
    }
    memset((void *)a, 0, lo - a);
    memset((void *)hi, 0, b - hi);
}

// Whether parameter i lies in segment seg (a layer's, or a global one).
static int in_segment(const Plan *p, int i, int64_t seg) {
    const Param *prm = p->graph->params.items[i];
    return prm->in_block ? seg >= 0 && param_in_layer(p->graph, prm, seg)
                         : seg < 0 && plan_segment_of(p, p->param_offset[i]) == seg;
}

// Whether plan element f lies in a frozen parameter (its padding included),
// and where that run ends: the run of elements from f, below hi, that are
// all frozen or all not (never past f's segment).
static int64_t frozen_run(const Plan *p, int64_t f, int64_t hi, int *frozen) {
    const Graph *g = p->graph;
    int64_t seg = plan_segment_of(p, f), end = plan_segment_base(p, seg) + plan_segment_len(p, seg);
    end = end < hi ? end : hi;
    *frozen = 0;
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        if (!param_store_frozen(prm) || !in_segment(p, i, seg)) continue;
        int64_t lo = plan_param_elem(p, i, seg), up = lo + storage_host_elems_of(shape_numel(&prm->shape));
        if (f >= lo && f < up) {
            *frozen = 1;
            return up < end ? up : end;
        }
        if (lo > f && lo < end) end = lo;
    }
    return end;
}

// Frozen elements of plan elements [lo, hi) that this store holds.
static int64_t frozen_held(const HostStore *s, const Plan *p, int64_t lo, int64_t hi) {
    int64_t n = 0;
    for (int64_t f = lo, e, a, b; f < hi; f = e) {
        int frozen;
        e = frozen_run(p, f, hi, &frozen);
        store_clip(s, p, plan_segment_of(p, f), f, e - f, &a, &b);
        n += frozen ? b - a : 0;
    }
    return n;
}

// Frozen elements of plan elements [lo, hi).
static int64_t frozen_elems(const Plan *p, int64_t lo, int64_t hi) {
    int64_t n = 0;
    for (int64_t f = lo, e; f < hi; f = e) {
        int frozen;
        e = frozen_run(p, f, hi, &frozen);
        n += frozen ? e - f : 0;
    }
    return n;
}

int64_t store_tier_layer(const Plan *p) {
    if (!storage_frozen_elems(p->graph, 0)) return p->host_layer;
    int64_t most = 0;
    for (int64_t l = 0; l < p->graph->layers; l++) {
        int64_t base = plan_segment_base(p, l), end = base + plan_segment_len(p, l);
        int64_t len = end - base - frozen_elems(p, base, end);
        most = len > most ? len : most;
    }
    return most;
}

// Where plan element f (not frozen) of layer `layer` lies in the layer's
// tier record: its offset in the segment less the frozen elements before it.
static int64_t in_tier(const Plan *p, int64_t layer, int64_t f) {
    int64_t base = plan_segment_base(p, layer);
    return f - base - frozen_elems(p, base, f);
}

static int run_cmp(const void *a, const void *b) {
    int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

int store_trained_runs(const HostStore *s, const Plan *p, int64_t lo, int64_t hi, int64_t *runs) {
    int n = 0;
    for (int64_t seg = SEG_FIRST; seg < p->graph->layers; seg++) {
        int64_t slo, shi, at = store_slice(s, p, seg, &slo, &shi);
        for (int64_t f = slo, e; f < shi; f = e) {
            int frozen;
            e = frozen_run(p, f, shi, &frozen);
            int64_t a = at + (f - slo) > lo ? at + (f - slo) : lo, b = at + (e - slo) < hi ? at + (e - slo) : hi;
            if (frozen || b <= a) continue;
            if (runs) runs[2 * n] = a, runs[2 * n + 1] = b;
            n++;
        }
    }
    if (!runs) return n;
    qsort(runs, (size_t)n, 2 * sizeof *runs, run_cmp);
    int k = 0; // the runs that touch merged
    for (int i = 0; i < n; i++)
        if (k > 0 && runs[2 * k - 1] >= runs[2 * i]) runs[2 * k - 1] = runs[2 * i + 1];
        else runs[2 * k] = runs[2 * i], runs[2 * k + 1] = runs[2 * i + 1], k++;
    return k;
}

int64_t store_shard_bytes(const Plan *p, int rank, int ranks) {
    DType compute = p->graph->train.compute;
    int64_t per = storage_host_bytes_per_param(compute), bytes = 0, lo, hi;
    for (int64_t seg = SEG_FIRST; seg < p->graph->layers; seg++) {
        dist_shard(plan_segment_len(p, seg), rank, ranks, &lo, &hi);
        int64_t base = plan_segment_base(p, seg);
        bytes += (hi - lo) * per - frozen_elems(p, base + lo, base + hi) * (per - storage_weight_bytes(compute));
    }
    return bytes;
}

enum { STORE_HUGE = 2 << 20 }; // a transparent huge page: where each array starts

// bytes (> 0) of zeroed memory on a STORE_HUGE boundary, transparent huge
// pages asked for where the kernel has them; nothing touched yet (the
// kernel's zero pages). *mapped: the length to unmap. NULL when out of
// memory (the mapping is not MAP_NORESERVE, so the kernel's overcommit
// check refuses a store larger than the machine, as malloc did, rather
// than the first touch meeting the OOM killer). holes: the array has
// ranges never touched (a frozen parameter's master, moments, gradients):
// MAP_NORESERVE, so that the kernel does not count them (an fp32 master of
// llama3-405b's frozen base would be 1.6 TB of a 1.5 TB machine); the fit
// check (store_bytes, what is held) is then the only refusal up front.
static void *store_map(size_t bytes, size_t *mapped, int holes) {
    size_t len = (bytes + STORE_HUGE - 1) / STORE_HUGE * STORE_HUGE;
    char *raw = mmap(NULL, len + STORE_HUGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | (holes ? MAP_NORESERVE : 0), -1, 0);
    if (raw == MAP_FAILED) return NULL;
    size_t lead = (STORE_HUGE - ((uintptr_t)raw & (STORE_HUGE - 1))) & (STORE_HUGE - 1);
    if (lead) munmap(raw, lead);
    if (STORE_HUGE - lead) munmap(raw + lead + len, STORE_HUGE - lead);
#ifdef MADV_HUGEPAGE
    madvise(raw + lead, len, MADV_HUGEPAGE); // refused where the kernel has none: small pages then
#endif
    *mapped = len;
    return raw + lead;
}

// A failing tier device under the mapped bf16 weights (a read or write-back
// error, the file cut short) raises SIGBUS at whichever access meets it, on
// any thread: the handler ends the process with a message naming the file
// and the rank (made when mapped: in a handler only write and _exit are
// safe), exit 1, and mpirun then ends the other ranks. The checkpoints
// already saved are whole (a manifest is written last). A SIGBUS anywhere
// else gets the action there was before, raised again.
static struct {
    uintptr_t lo, hi; // the mapping [lo, hi) (lo 0: none)
    char msg[4608];   // (len) the message
    size_t len;
    struct sigaction before; // SIGBUS's action before weights_guard
    int fd;                  // the file, open while mapped (as /proc/PID/fd shows it: "... (deleted)")
} weights_fault;

static void weights_sigbus(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    uintptr_t at = (uintptr_t)info->si_addr;
    if (weights_fault.lo && at >= weights_fault.lo && at < weights_fault.hi) {
        ssize_t said = write(STDERR_FILENO, weights_fault.msg, weights_fault.len);
        (void)said; // (nothing more to do where stderr is gone)
        _exit(1);
    }
    sigaction(sig, &weights_fault.before, NULL);
    raise(sig); // delivered, by the action before, once this returns
}

// Guards the mapping [m, m + len) of path, open as fd (rank of ranks; 1: not sharded); keeps fd. One mapping a
// process (mtrun's one store): a second is left unguarded, its fd closed.
static void weights_guard(void *m, size_t len, int fd, const char *path, int rank, int ranks) {
    if (weights_fault.lo) {
        close(fd);
        return;
    }
    char who[64] = "";
    if (ranks > 1) snprintf(who, sizeof who, "rank %d of %d: ", rank, ranks);
    int n = snprintf(weights_fault.msg, sizeof weights_fault.msg,
                     "mtrun: %serror: %s: the tier device failed under the bf16 weights mapped from it (a read or "
                     "write-back error, or the file cut short): the run ends here; resume from the last checkpoint\n",
                     who, path);
    weights_fault.len = n < (int)sizeof weights_fault.msg ? (size_t)n : sizeof weights_fault.msg - 1;
    struct sigaction sa = {.sa_sigaction = weights_sigbus, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    weights_fault.lo = (uintptr_t)m, weights_fault.hi = (uintptr_t)m + len, weights_fault.fd = fd;
    sigaction(SIGBUS, &sa, &weights_fault.before);
}

// Ends weights_guard's watch over m (if it is the mapping watched) and closes its file, before it is unmapped.
static void weights_unguard(const void *m) {
    if (!weights_fault.lo || (uintptr_t)m != weights_fault.lo) return;
    sigaction(SIGBUS, &weights_fault.before, NULL);
    close(weights_fault.fd);
    weights_fault.lo = weights_fault.hi = 0;
}

// The bf16 copy on the tier (STORE_TIER_WEIGHTS): len bytes of a shared
// mapping of DIR/mtrun.weights, preallocated (refused up front, naming the
// file, where the device is full or a file size limit stops it), its name
// removed as soon as it is mapped, so that nothing is left behind however
// the run ends. Its pages are the file's zeros until written; the kernel
// reads them in as a layer streams and writes back what AdamW changed; a
// device that fails under it ends the run naming it (weights_guard).
// *mapped: the length to unmap. NULL with a message.
static void *weights_map(const char *dir, size_t len, int rank, int ranks, size_t *mapped, char *err, size_t errcap) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/mtrun.weights", dir) >= (int)sizeof path) {
        snprintf(err, errcap, "the tier directory's path is too long (%zu bytes)", strlen(dir));
        return NULL;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errcap, "%s: cannot create the tier's file of the bf16 weights: %s", path, strerror(errno));
        return NULL;
    }
    int rc = posix_fallocate(fd, 0, (off_t)len);
    void *m = rc == 0 ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (rc == 0 && m == MAP_FAILED) rc = errno;
    unlink(path);
    if (rc != 0) {
        close(fd);
        snprintf(err, errcap, "%s: cannot hold the bf16 weights' %lld bytes on the tier: %s", path, (long long)len,
                 strerror(rc));
        return NULL;
    }
    weights_guard(m, len, fd, path, rank, ranks);
    *mapped = len;
    return m;
}

// The first touch, in parallel: every parameter's range of each array in
// RAM zeroed by the pool threads that will update it (adamw_first_touch,
// split as adamw_update splits it), then the padding after each parameter
// (storage_host_elems_of) on this thread. Before this, the pages are the
// kernel's zero pages: the values are already zero, and this only places
// them (on a NUMA machine, on the node of the core that updates them) and
// pays their page faults now rather than in the first step.
static void store_first_touch(HostStore *s, const Plan *p) {
    const Graph *g = p->graph;
    for (int64_t seg = SEG_FIRST; seg < g->layers; seg++)
        for (int i = 0; i < g->params.n; i++) {
            if (!in_segment(p, i, seg)) continue;
            int64_t n = shape_numel(&((const Param *)g->params.items[i])->shape), a, b, pa, pb;
            int64_t off = store_clip(s, p, seg, plan_param_elem(p, i, seg), n, &a, &b); // what this store holds of it
            int64_t pad = store_clip(s, p, seg, plan_param_elem(p, i, seg) + n, storage_host_elems_of(n) - n, &pa, &pb);
            int ram = !s->tier || seg < 0; // m and v (and a tier master) in RAM
            uint16_t *gb = store_grads_bf16_at(s, off), *gb_pad = store_grads_bf16_at(s, pad); // (s->n: unsharded)
            // (a tier's: touched as they arrive)
            float *grads = (s->tier_grads && seg >= 0) || gb ? NULL : s->g + off;
            // a frozen parameter: its storage dtype only (under bf16 the copy, not the master); its master,
            // moments and gradients never touched (their pages, the kernel's zero pages, hold no memory)
            int frozen = param_store_frozen(g->params.items[i]);
            if (frozen) grads = NULL, gb = gb_pad = NULL;
            if (b > a)
                adamw_first_touch((ram || !s->tier_master) && !(frozen && s->wb) ? s->w + off : NULL,
                                  ram && !frozen ? s->m + off : NULL, ram && !frozen ? s->v + off : NULL, grads, gb,
                                  s->wb && !s->tier_weights ? s->wb + off : NULL, b - a, s->threads);
            if (grads) memset(s->g + pad, 0, (size_t)(pb - pa) * sizeof(float));
            if (gb_pad) memset(gb_pad, 0, (size_t)(pb - pa) * sizeof(uint16_t));
        }
}

static int store_open(HostStore *s, const Plan *p, const char *tier_dir, int holds, int threads, int rank, int ranks,
                      char *err, size_t errcap);
// The train stream's COPY_OUTs that set their range (out_first), and how
// many each segment gets a pass (pass_outs): the first of the stream to
// touch any of its range, by the copy-out engine's order, which is the
// stream's. Ranges overlap only where equal (each is a parameter's, tied
// weights' twice), but any overlap counts: then only the first sets.
typedef struct OutRange {
    int64_t lo, hi;
    int i;
} OutRange;
static int out_range_cmp(const void *a, const void *b) {
    const OutRange *x = a, *y = b;
    return x->lo != y->lo ? (x->lo < y->lo ? -1 : 1) : x->i - y->i;
}
static int grads_out_plan(HostStore *s, const Plan *p) {
    int n = 0;
    for (int i = 0; i < p->ntrain; i++) n += p->train[i].kind == INS_COPY_OUT;
    OutRange *r = malloc((size_t)n * sizeof *r + 1);
    if (!(s->out_first = calloc((size_t)p->ntrain + 1, 1)) || !r) {
        free(r);
        return -1;
    }
    n = 0;
    for (int i = 0; i < p->ntrain; i++) {
        const Instr *in = &p->train[i];
        if (in->kind != INS_COPY_OUT) continue;
        s->seg[plan_segment_index(plan_segment_of(p, in->dst))].pass_outs++;
        r[n++] = (OutRange){in->dst, in->dst + in->bytes / (in->flags & XFER_BF16 ? 2 : 4), i};
    }
    qsort(r, (size_t)n, sizeof *r, out_range_cmp);
    for (int a = 0; a < n;) { // each cluster of overlapping ranges: its first in the stream sets
        int b = a + 1, first = r[a].i;
        for (int64_t hi = r[a].hi; b < n && r[b].lo < hi; b++) {
            if (r[b].hi > hi) hi = r[b].hi;
            if (r[b].i < first) first = r[b].i;
        }
        s->out_first[first] = 1;
        // bf16 gradients are set, never added: one COPY_OUT of bf16 a range a pass (storage_grads_bf16 says
        // so of the graph; a plan that disagrees is a compiler bug)
        for (int k = a; s->gb && k < b; k++)
            if (r[k].lo >= s->gb_from && (b - a != 1 || !(p->train[r[k].i].flags & XFER_BF16))) {
                free(r);
                return -2;
            }
        a = b;
    }
    // The copy-out engine's order is the stream's only when it runs them all;
    // MT_GRADS_ADD_ONLY=1 adds every COPY_OUT, as before (tests compare the two).
    const char *add_only = getenv("MT_GRADS_ADD_ONLY");
    for (int i = 0; i < p->ntrain; i++)
        if ((p->train[i].kind == INS_COPY_OUT && p->train[i].engine != ENG_COPY_OUT) ||
            (add_only && !strcmp(add_only, "1")))
            memset(s->out_first, 0, (size_t)p->ntrain);
    free(r);
    return 0;
}

int store_grads_out(HostStore *s, const Plan *p, const Instr *in) {
    if (store_grads_bf16_at(s, in->dst)) return 1; // set once a step (HostStore.gb)
    if (in < p->train || in >= p->train + p->ntrain || !s->out_first) return 0;
    StoreSegment *seg = &s->seg[plan_segment_index(plan_segment_of(p, in->dst))];
    return seg->outs++ < seg->pass_outs && s->out_first[in - p->train];
}

int store_alloc_tier(HostStore *s, const Plan *p, const char *tier_dir, int holds, int threads, char *err,
                     size_t errcap) {
    return store_open(s, p, tier_dir, holds, threads, 0, 1, err, errcap);
}

int store_alloc_shard(HostStore *s, const Plan *p, int rank, const char *tier_dir, int holds, int threads, char *err,
                      size_t errcap) {
    if (!p->sharded || rank < 0 || rank >= p->ranks) {
        snprintf(err, errcap, "internal error: a sharded store of rank %d for a %s plan of %d ranks", rank,
                 p->sharded ? "sharded" : "replicated", p->ranks);
        return -1;
    }
    return store_open(s, p, tier_dir, holds, threads, rank, p->ranks, err, errcap);
}

// Floats of a layer's record on the tier: the largest layer's (host_layer),
// or of a sharded store, the largest slice of a layer it holds.
static int64_t store_record_floats(const HostStore *s, const Plan *p) {
    if (!s->shard_at) return store_tier_layer(p); // (its elements that are not frozen)
    int64_t most = 1;
    for (int64_t l = 0; l < p->graph->layers; l++) {
        int64_t n = s->shard_at[plan_segment_index(l) + 1] - s->shard_at[plan_segment_index(l)];
        if (n > most) most = n;
    }
    return most;
}

// The store of rank `rank` of `ranks` (ranks 1: the whole of it).
static int store_open(HostStore *s, const Plan *p, const char *tier_dir, int holds, int threads, int rank, int ranks,
                      char *err, size_t errcap) {
    *s = (HostStore){.n = plan_host_elems(p),
                     .nseg = plan_segment_count(p),
                     .threads = threads > 1 ? threads : 1,
                     .rank = rank,
                     .ranks = ranks};
    if (ranks > 1) { // this rank's slices, one after another
        if (!(s->shard_at = malloc((size_t)(s->nseg + 1) * sizeof *s->shard_at))) {
            snprintf(err, errcap, "out of memory laying out the sharded host store");
            return -1;
        }
        s->shard_at[0] = 0;
        for (int64_t seg = SEG_FIRST, lo, hi; seg < p->graph->layers; seg++) {
            dist_shard(plan_segment_len(p, seg), rank, ranks, &lo, &hi);
            s->shard_at[plan_segment_index(seg) + 1] = s->shard_at[plan_segment_index(seg)] + (hi - lo);
        }
        s->n = s->shard_at[s->nseg];
    }
    holds = tier_dir ? holds : 0;
    int master = !!(holds & STORE_TIER_MASTER);
    if (master && p->graph->train.compute != DT_BF16) {
        snprintf(err, errcap,
                 "the fp32 master can live on the NVMe tier only under bf16 compute (with f32 compute "
                 "it is what streams to the device)");
        return -1;
    }
    char rank_dir[4096]; // a sharded rank's tier: its own directory in tier_dir, DIR/rank-R-of-N
    if (tier_dir && ranks > 1 && storage_frozen_elems(p->graph, 0)) {
        snprintf(err, errcap,
                 "--tier-dir with a sharded plan that has frozen parameters (mtc --freeze, --lora) is not "
                 "supported yet: give the ranks the host memory for their slices, or run without --ranks");
        return -1;
    }
    if (tier_dir && ranks > 1) {
        snprintf(rank_dir, sizeof rank_dir, "%s/rank-%d-of-%d", tier_dir, rank, ranks);
        if (mkdir(rank_dir, 0700) != 0 && errno != EEXIST) {
            snprintf(err, errcap, "%s: cannot make the rank's tier directory: %s", rank_dir, strerror(errno));
            return -1;
        }
        tier_dir = rank_dir;
    }
    if (tier_dir &&
        !(s->tier = tier_open(tier_dir, p->graph->layers, store_record_floats(s, p), tier_arrays(holds), err, errcap)))
        return -1;
    s->tier_master = master;
    s->tier_grads = !!(holds & STORE_TIER_GRADS);
    s->tier_weights = !!(holds & STORE_TIER_WEIGHTS);          // (only with the master: plan_tier_holds)
    int bf16_grads = ranks == 1 && store_grads_bf16(p, holds); // the layers' gradients as bf16 (gb)
    s->gb_from = p->host_global;
    snprintf(err, errcap, "cannot allocate the host store (%lld bytes)",
             (long long)(s->shard_at ? store_shard_bytes(p, rank, ranks)
                                     : store_bytes(p, holds) - (tier_dir ? store_tier_bytes(p, holds) : 0)));
    s->seg = calloc((size_t)s->nseg, sizeof *s->seg);
    if (!s->seg) {
        store_free(s);
        return -1;
    }
    for (int64_t i = 0; i < s->nseg; i++) s->seg[i].sq_norm = NAN;
    size_t bytes = (size_t)s->n * 4 + 64;
    // what RAM keeps of what the tier holds (the globals: a sharded rank's slices of them); the fp32 gradients
    // beside gb
    size_t globals = (size_t)(s->shard_at ? s->shard_at[plan_segment_index(0)] : p->host_global) * 4 + 64;
    void **arrays[6] = {(void **)&s->w, (void **)&s->m,  (void **)&s->v,
                        (void **)&s->g, (void **)&s->wb, (void **)&s->gb};
    for (int i = 0; i < 6; i++) {
        if ((i == 4 && p->graph->train.compute != DT_BF16) || (i == 5 && !bf16_grads)) continue; // no bf16 copy, no gb
        int global_only = (s->tier && (i == 1 || i == 2)) || (s->tier_master && i == 0) || (i == 3 && bf16_grads);
        size_t b = i == 4        ? (size_t)s->n * 2 + 64
                   : i == 5      ? (size_t)(s->n - s->gb_from) * 2 + 64
                   : global_only ? globals
                                 : bytes;
        // what it holds: a frozen parameter's elements only in its storage dtype's array (wb, or under f32 w)
        int64_t frozen = frozen_held(s, p, i == 5 ? s->gb_from : 0, global_only ? p->host_global : plan_host_elems(p));
        int holes = frozen > 0 && i != 4 && (i != 0 || p->graph->train.compute == DT_BF16);
        // the gradients on the tier: all of it mapped, only what is touched held (grads_map); the bf16 copy
        // on the tier: no RAM of its own (weights_map)
        if (i == 4 && s->tier_weights) {
            if (!(s->wb = weights_map(tier_dir, b, rank, ranks, &s->mapped[i], err, errcap))) {
                store_free(s);
                return -1;
            }
            s->frozen += frozen;
            continue;
        }
        if (!(*arrays[i] = i == 3 && s->tier_grads ? grads_map(b, &s->mapped[i])
                                                   : store_map(b, &s->mapped[i], holes))) {
            store_free(s);
            return -1;
        }
        s->bytes += (int64_t)b - 64 - (holes ? frozen * (i == 5 ? 2 : 4) : 0);
        s->frozen += holes ? 0 : frozen;
    }
    int rc = grads_out_plan(s, p);
    if (rc != 0) {
        if (rc == -2)
            snprintf(err, errcap,
                     "internal error: the plan copies a layer's gradient out other than once a step as "
                     "bf16, where the store holds the layers' gradients as bf16 (common/storage.h: "
                     "storage_grads_bf16)");
        store_free(s);
        return -1;
    }
    store_first_touch(s, p);
    return 0;
}

void store_free(HostStore *s) {
    void *arrays[6] = {s->w, s->m, s->v, s->g, s->wb, s->gb};
    weights_unguard(s->wb);
    for (int i = 0; i < 6; i++)
        if (arrays[i]) munmap(arrays[i], s->mapped[i]);
    free(s->seg);
    free(s->shard_at);
    free(s->out_first);
    tier_close(s->tier);
    *s = (HostStore){0};
}

const char *store_failed(const HostStore *s) { return s->err[0] ? s->err : NULL; }

int64_t store_segment(const Plan *p, int64_t layer, int64_t *count) {
    *count = plan_segment_len(p, layer);
    return plan_segment_base(p, layer);
}

// Array `array` (0 w, 1 m, 2 v, 3 g) of a layer's staged record: m at 0,
// v at one tier_stride, the master (tier_master) at two, the gradients
// (tier_grads) last.
static float *in_record(const HostStore *s, float *rec, int array) {
    int64_t at = array == 3 ? 2 + s->tier_master : array > 0 ? array - 1 : 2;
    return rec + at * tier_stride(s->tier);
}

void store_norm(HostStore *s, const Plan *p, int64_t layer) {
    int64_t lo, hi, at = store_slice(s, p, layer, &lo, &hi);
    if (store_on_device(s, p, layer)) { // (one process's whole segment: the verifier refuses a sharded one)
        s->seg[plan_segment_index(layer)].sq_norm = s->dev->sq_norm(s->dev->ctx, layer, hi - lo);
        return;
    }
    // (sharded: this rank's slice's part of the norm; the ranks sum them before the clip)
    const uint16_t *gb = store_grads_bf16_at(s, at);
    s->seg[plan_segment_index(layer)].sq_norm = gb ? adamw_sq_norm_bf16(gb, hi - lo, s->threads)
                                                   : adamw_sq_norm(s->g + at, hi - lo, s->threads);
    if (!s->tier_grads || layer < 0 || s->err[0]) return;
    // The step's gradients are whole: into the layer's record until its update, out of RAM.
    float *rec = tier_acquire(s->tier, layer, s->err, sizeof s->err);
    if (!rec) return;
    if (s->shard_at) // a sharded rank's slice, whole (a sharded plan with frozen parameters has no tier: store_open)
        memcpy(in_record(s, rec, 3), s->g + at, (size_t)(hi - lo) * sizeof(float));
    for (int64_t f = lo, e; !s->shard_at && f < hi; f = e) { // (a frozen parameter's: none)
        int frozen;
        e = frozen_run(p, f, hi, &frozen);
        if (!frozen) memcpy(in_record(s, rec, 3) + in_tier(p, layer, f), s->g + f, (size_t)(e - f) * sizeof(float));
    }
    if (tier_release(s->tier, layer, 1, s->err, sizeof s->err) != 0) return;
    grads_drop(s, at, hi - lo);
    s->seg[plan_segment_index(layer)].outs = 0; // zeros again
}

// The balance rule's pending step of parameter i (a buffer) in segment
// `layer` (HostStore.balance): the elements [a, b) this store holds, master
// at w and bf16 copy at wb (NULL: none), each moved by the rule's rate times
// its sign, as torch's b += rate * sign(...) in fp32.
static void balance_step(const HostStore *s, const Plan *p, int i, int64_t layer, float *w, uint16_t *wb, int64_t a,
                         int64_t b) {
    const Param *prm = p->graph->params.items[i];
    int64_t E = shape_numel(&prm->shape);
    const int8_t *sign = s->balance[i] + layer * E + (a - plan_param_elem(p, i, layer)); // (b - a) from a's
    float rate = (float)prm->balance_rate;
    for (int64_t k = 0; k < b - a; k++) {
        w[k] += rate * (float)sign[k];
        if (wb) wb[k] = bf16_from_f32(w[k]);
    }
}

void store_update(HostStore *s, const Plan *p, int64_t layer) {
    StoreSegment *seg = &s->seg[plan_segment_index(layer)];
    if (!seg->pending || s->err[0]) return;
    const Graph *g = p->graph;
    // The segment's moments (and master): in RAM, or the layer's record
    // staged from the tier.
    float *m = s->m, *v = s->v, *w = s->w, *grad = s->g;
    int staged = s->tier && layer >= 0;
    int64_t first = 0; // a sharded store's: the index of its slice's first float
    if (staged) {
        if (!(m = tier_acquire(s->tier, layer, s->err, sizeof s->err))) return;
        v = in_record(s, m, 2);
        int64_t lo, hi;
        first = store_slice(s, p, layer, &lo, &hi); // (sharded: its slice's first float)
        if (s->tier_master) w = in_record(s, m, 0);
        if (s->tier_grads) grad = in_record(s, m, 3); // put there by store_norm
    }
    // The gradients are zeroed as AdamW reads them, and the padding after
    // each parameter (which a COPY_OUT of the device's layout may add into)
    // here: together the whole segment, as one memset of it would. The
    // parameters' updates are one pool job (adamw_update_parts).
    AdamWPart *parts = malloc(((size_t)g->params.n + 1) * sizeof *parts); // (params.n) this segment's
    int nparts = 0;
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        int rule = prm->balance_mask && s->balance && layer >= 0;         // frozen, but moved by its balance rule
        if (!in_segment(p, i, layer) || (prm->frozen && !rule)) continue; // frozen: no gradient, never updated
        int decay = prm->shape.rank >= 2 ? ADAMW_DECAY : 0;               // none on norms and biases
        int64_t n = shape_numel(&prm->shape), a, b, pa, pb;
        int64_t off = store_clip(s, p, layer, plan_param_elem(p, i, layer), n, &a, &b); // (sharded: its slice's part)
        int64_t pad = store_clip(s, p, layer, plan_param_elem(p, i, layer) + n, storage_host_elems_of(n) - n, &pa, &pb);
        if (rule) { // (a host store's: mtrun refuses the rule where the segment's optimizer is on the device)
            int64_t wbase = !staged || !s->tier_master ? 0 : s->shard_at ? first : off - in_tier(p, layer, off);
            balance_step(s, p, i, layer, w + off - wbase, s->wb ? s->wb + off : NULL, a, b);
            continue;
        }
        if (store_on_device(s, p, layer)) { // the same update of the same elements, on the device
            AdamWConst c = adamw_constants(&seg->step, decay);
            int64_t base = plan_segment_base(p, layer);
            if (b > a) s->dev->update(s->dev->ctx, layer, a - base, b - a, &c);
            if (pb > pa) s->dev->zero_grads(s->dev->ctx, layer, pa - base, pb - pa);
            continue;
        }
        // the index in m and v (in w, in grad) of this parameter's first float less off: a record's in_tier
        int64_t base = !staged ? 0 : s->shard_at ? first : off - in_tier(p, layer, off);
        int64_t wbase = s->tier_master ? base : 0, gbase = s->tier_grads ? base : 0;
        const uint16_t *gb = grad == s->g ? store_grads_bf16_at(s, off) : NULL; // set by COPY_OUT: not zeroed
        AdamWPart part = {w + off - wbase,
                          m + off - base,
                          v + off - base,
                          gb ? NULL : grad + off - gbase,
                          gb,
                          s->wb ? s->wb + off : NULL,
                          b - a,
                          decay | (gb ? 0 : ADAMW_ZERO_GRADS)};
        if (b > a && parts) parts[nparts++] = part;
        else if (b > a) adamw_update_parts(&part, 1, &seg->step, s->threads); // (no room for the list: one at a time)
        if (grad == s->g && !gb) memset(s->g + pad, 0, (size_t)(pb - pa) * sizeof(float));
    }
    adamw_update_parts(parts, nparts, &seg->step, s->threads); // the segment's parameters: one barrier
    free(parts);
    if (grad == s->g) seg->outs = 0; // zeroed (a tier's were zeroed in RAM by store_norm)
    if (m != s->m && tier_release(s->tier, layer, 1, s->err, sizeof s->err) != 0) return;
    seg->pending = 0;
}

// store_device_push and store_device_pull: every placed segment's state moved.
static int device_move(HostStore *s, const Plan *p, int push, char *err, size_t errcap) {
    for (int64_t seg = SEG_FIRST; s->dev && seg < p->graph->layers; seg++) {
        if (!store_on_device(s, p, seg)) continue;
        int64_t base = plan_segment_base(p, seg), n = plan_segment_len(p, seg);
        if (s->dev->move(s->dev->ctx, seg, n, s->w + base, s->m + base, s->v + base, s->wb ? s->wb + base : NULL, push,
                         err, errcap) != 0)
            return -1;
    }
    return 0;
}
int store_device_push(HostStore *s, const Plan *p, char *err, size_t errcap) {
    return device_move(s, p, 1, err, errcap);
}
int store_device_pull(HostStore *s, const Plan *p, char *err, size_t errcap) {
    return device_move(s, p, 0, err, errcap);
}

void store_flush(HostStore *s, const Plan *p) {
    for (int64_t l = SEG_FIRST; l < p->graph->layers; l++) store_update(s, p, l);
}

// Copies floats [off, off + n) of an array between the store and buf, in
// pieces that lie in one segment: RAM, or a layer's record in the tier.
static int store_move_plain(HostStore *s, const Plan *p, int array, int64_t off, int64_t n, float *buf, int out,
                            char *err, size_t errcap) {
    float *ram = array == 0 ? s->w : array == 1 ? s->m : s->v;
    while (n > 0) {
        int64_t layer = plan_segment_of(p, off), count;
        int64_t start = store_segment(p, layer, &count), k = start + count - off < n ? start + count - off : n;
        if (s->shard_at) { // this rank's slice of the segment, or a refusal
            int64_t a, b;
            store_clip(s, p, layer, off, k, &a, &b);
            if (a != off || b != off + k) {
                snprintf(err, errcap,
                         "rank %d of a sharded run holds elements [%lld, %lld) of the host store's "
                         "segment from %lld, not [%lld, %lld)",
                         s->rank, (long long)(a == b ? 0 : a - start), (long long)(a == b ? 0 : b - start),
                         (long long)start, (long long)(off - start), (long long)(off + k - start));
                return -1;
            }
        }
        int64_t lo, hi, first = store_slice(s, p, layer, &lo, &hi), index = s->shard_at ? first + (off - lo) : off;
        int staged = s->tier && (array > 0 || s->tier_master) && layer >= 0;
        float *at = staged ? tier_acquire(s->tier, layer, err, errcap) : ram + index;
        if (!at) return -1;
        if (staged) at = in_record(s, at, array) + (s->shard_at ? index - first : in_tier(p, layer, off));
        memcpy(out ? buf : at, out ? at : buf, (size_t)k * sizeof(float));
        if (staged && tier_release(s->tier, layer, !out, err, errcap) != 0) return -1;
        off += k, n -= k, buf += k;
    }
    return 0;
}

// The same for floats [off, off + n) of one frozen parameter: its weights
// from or into its storage dtype (under bf16 the copy: widened out, rounded
// in); its moments read as zeros, and what is put into them is dropped.
static int store_move_frozen(HostStore *s, const Plan *p, int array, int64_t off, int64_t n, float *buf, int out,
                             char *err, size_t errcap) {
    int64_t a, b, at = store_clip(s, p, plan_segment_of(p, off), off, n, &a, &b);
    // f32: the master is its storage; a sharded store's elements it does not hold: store_move_plain's refusal
    if ((array == 0 && !s->wb) || a != off || b != off + n)
        return store_move_plain(s, p, array, off, n, buf, out, err, errcap);
    for (int64_t k = 0; k < n; k++)
        if (array == 0 && out) buf[k] = f32_from_bf16(s->wb[at + k]);
        else if (array == 0) s->wb[at + k] = bf16_from_f32(buf[k]);
        else if (out) buf[k] = 0.0f;
    return 0;
}

static int store_move(HostStore *s, const Plan *p, int array, int64_t off, int64_t n, float *buf, int out, char *err,
                      size_t errcap) {
    for (int64_t f = off, e; f < off + n; f = e) {
        int frozen;
        e = frozen_run(p, f, off + n, &frozen);
        int rc = frozen ? store_move_frozen(s, p, array, f, e - f, buf + (f - off), out, err, errcap)
                        : store_move_plain(s, p, array, f, e - f, buf + (f - off), out, err, errcap);
        if (rc != 0) return -1;
    }
    return 0;
}

void store_get_weights(const HostStore *s, const Plan *p, int64_t off, int64_t n, float *dst) {
    for (int64_t f = off, e; f < off + n; f = e) {
        int frozen;
        e = frozen_run(p, f, off + n, &frozen);
        int64_t at = store_index(s, p, f);
        if (frozen && s->wb)
            for (int64_t k = 0; k < e - f; k++) dst[f - off + k] = f32_from_bf16(s->wb[at + k]);
        else memcpy(dst + (f - off), s->w + at, (size_t)(e - f) * sizeof *dst);
    }
}

int store_get(HostStore *s, const Plan *p, int array, int64_t off, int64_t n, float *dst, char *err, size_t errcap) {
    return store_move(s, p, array, off, n, dst, 1, err, errcap);
}

int store_put(HostStore *s, const Plan *p, int array, int64_t off, int64_t n, const float *src, char *err,
              size_t errcap) {
    return store_move(s, p, array, off, n, (float *)src, 0, err, errcap);
}

// A segment's master for writing or reading it whole: RAM, or its layer's
// record staged from the tier (then store_release_master). The result is
// indexed by master_index.
static float *store_master(HostStore *s, const Plan *p, int64_t layer, char *err, size_t errcap) {
    if (!s->tier_master || layer < 0) return s->w;
    float *rec = tier_acquire(s->tier, layer, err, errcap);
    int64_t lo, hi;
    return rec ? in_record(s, rec, 0) - store_slice(s, p, layer, &lo, &hi) : NULL;
}
// The index in store_master's result of store index `at` (not frozen).
static int64_t master_index(const HostStore *s, const Plan *p, int64_t layer, int64_t at) {
    return s->tier_master && layer >= 0 && !s->shard_at ? plan_segment_base(p, layer) + in_tier(p, layer, at) : at;
}
static int store_release_master(HostStore *s, int64_t layer, int dirty, char *err, size_t errcap) {
    return s->tier_master && layer >= 0 ? tier_release(s->tier, layer, dirty, err, errcap) : 0;
}

int store_sync_copy(HostStore *s, const Plan *p, char *err, size_t errcap) {
    for (int64_t l = SEG_FIRST; s->wb && l < p->graph->layers; l++) {
        int64_t lo, hi, at = store_slice(s, p, l, &lo, &hi);
        const float *w = store_master(s, p, l, err, errcap);
        if (!w) return -1;
        for (int64_t f = lo, e; f < hi; f = e) { // a frozen parameter's copy is all there is of it
            int frozen;
            e = frozen_run(p, f, hi, &frozen);
            const float *from = w + master_index(s, p, l, at + (f - lo)); // (a tier's record: unsharded, at is f)
            for (int64_t k = 0; !frozen && k < e - f; k++) s->wb[at + (f - lo) + k] = bf16_from_f32(from[k]);
        }
        if (store_release_master(s, l, 0, err, errcap) != 0) return -1;
    }
    return 0;
}

// splitmix64: a counter-based generator, so every element has its own draw.
static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// A standard normal for element i of stream `key` (Box-Muller on two draws).
static double normal_at(uint64_t key, int64_t i) {
    uint64_t r1 = mix(key ^ mix((uint64_t)i * 2)), r2 = mix(key ^ mix((uint64_t)i * 2 + 1));
    double u1 = ((double)(r1 >> 11) + 0.5) / 9007199254740992.0, u2 = (double)(r2 >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

// A uniform draw on [0, 1) for element i of stream `key`.
static double uniform_at(uint64_t key, int64_t i) {
    return (double)(mix(key ^ mix((uint64_t)i * 2)) >> 11) / 9007199254740992.0;
}

// One thread's share of a parameter's initial values: elements [k0, k1)
// of stream key, into w (fp32) or, where it is NULL, wb (bf16).
typedef struct InitJob {
    const Param *prm;
    uint64_t key;
    float *w;     // (elements) element k of the parameter at w[k], or NULL
    uint16_t *wb; // (elements) the same in bf16, when w is NULL
    int64_t k0, k1;
} InitJob;

static void *init_job_run(void *arg) {
    const InitJob *j = arg;
    const Param *prm = j->prm;
    for (int64_t k = j->k0; k < j->k1; k++) {
        float x = prm->init == INIT_ONES      ? 1.0f
                  : prm->init == INIT_ZEROS   ? 0.0f
                  : prm->init == INIT_UNIFORM ? (float)(prm->init_std * (2.0 * uniform_at(j->key, k) - 1.0))
                                              : (float)(prm->init_std * normal_at(j->key, k));
        if (j->wb) j->wb[k] = bf16_from_f32(x); // a frozen parameter under bf16: no master (store_sync_copy's bits)
        else j->w[k] = x;
    }
    return NULL;
}

// Elements [k0, k1) of a parameter on the store's threads (the host pool):
// each element's value depends on its index alone, so the bits are those of
// one thread. Ranges under INIT_MIN_PER_THREAD elements stay on the caller.
enum { INIT_MIN_PER_THREAD = 1 << 12, INIT_MAX_THREADS = 256 };
static void init_range(const Param *prm, uint64_t key, float *w, uint16_t *wb, int64_t k0, int64_t k1, int threads) {
    int64_t n = k1 - k0, most = n / INIT_MIN_PER_THREAD;
    int nt = (int)(most < threads ? (most > 1 ? most : 1) : threads);
    if (nt > INIT_MAX_THREADS) nt = INIT_MAX_THREADS;
    InitJob jobs[INIT_MAX_THREADS];
    for (int i = 0; i < nt; i++) jobs[i] = (InitJob){prm, key, w, wb, k0 + n * i / nt, k0 + n * (i + 1) / nt};
    if (nt == 1) init_job_run(&jobs[0]);
    else pool_run(init_job_run, jobs, sizeof jobs[0], nt);
}

int store_init(HostStore *s, const Plan *p, uint64_t seed, char *err, size_t errcap) {
    const Graph *g = p->graph;
    for (int64_t seg = SEG_FIRST; seg < g->layers; seg++) { // the globals, then each layer's segment
        float *master = store_master(s, p, seg, err, errcap);
        if (!master) return -1;
        for (int i = 0; i < g->params.n; i++) {
            const Param *prm = g->params.items[i];
            if (!in_segment(p, i, seg)) continue;
            int64_t n = shape_numel(&prm->shape), l = seg < 0 ? 0 : seg, a, b;
            int64_t at = store_clip(s, p, seg, plan_param_elem(p, i, l), n, &a, &b); // (sharded: its slice's part)
            float *w = param_store_frozen(prm) && s->wb
                           ? NULL
                           : master + master_index(s, p, seg, at) - (a - plan_param_elem(p, i, l));
            // w[k]: element k of the parameter
            uint16_t *wb = param_store_frozen(prm) && s->wb ? s->wb + at - (a - plan_param_elem(p, i, l))
                                                            : NULL; // or its copy's
            uint64_t key = mix(seed ^ mix((uint64_t)i << 32 ^ (uint64_t)l));
            init_range(prm, key, w, wb, a - plan_param_elem(p, i, l), b - plan_param_elem(p, i, l), s->threads);
        }
        if (store_release_master(s, seg, 1, err, errcap) != 0) return -1;
    }
    return 0;
}
