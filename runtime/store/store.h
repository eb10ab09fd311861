// store.h: the host store, the authoritative copy of every parameter and
// optimizer state. Every array is laid out as the plan's HOST section says
// (the global segment, then one contiguous segment per layer); what it holds
// per parameter is the storage rule's (common/storage.h). A sharded plan's
// rank holds only its shard of each segment (below: store_slice).
#ifndef MT_STORE_H
#define MT_STORE_H

#include <stdint.h>

#include "common/plan.h"
#include "runtime/store/adamw.h"
#include "runtime/store/tier.h"

// The host optimizer's state of one segment (the head's or the tail's globals, or one layer).
typedef struct StoreSegment {
    double sq_norm;    // its gradients' squared norm on this step (INS_NORM); NAN: not yet
    int pending;       // an update waits for INS_UPDATE (or a flush)
    AdamWStep step;    // that update: lr, t, the clip and 1/accumulation scale
    int64_t outs;      // COPY_OUTs into its gradients since they were last zeroed (store_grads_out)
    int64_t pass_outs; // COPY_OUTs into it in one pass of the train stream (a micro-batch)
} StoreSegment;

// The optimizer of the segments a plan places on the device (Plan.opt_device),
// as the backend that holds their state does it (runtime/backend/backend.h,
// opt_store: the cuda backend's). The store keeps its bookkeeping for them
// (pending updates and their steps, whether a COPY_OUT sets or adds) and
// calls these instead of touching its own arrays, which hold those segments'
// state only from a pull (checkpoints, export) to the next push. Each is done
// when it returns; n, off: elements from the segment's first.
typedef struct StoreDevice {
    void *ctx;
    // The squared norm of segment seg's n gradients, as adamw_sq_norm sums them: the same double.
    double (*sq_norm)(void *ctx, int64_t seg, int64_t n);
    // adamw_update of elements [off, off + n) of segment seg with the constants c (adamw_constants), its
    // bf16 copy written (bf16 compute) and its gradients zeroed: the host's bits (mt_adamw).
    void (*update)(void *ctx, int64_t seg, int64_t off, int64_t n, const AdamWConst *c);
    // Gradients [off, off + n) of segment seg zeroed (the padding after a parameter).
    void (*zero_grads)(void *ctx, int64_t seg, int64_t off, int64_t n);
    // All of segment seg's w, m, v and (wb not NULL) bf16 copy, n each: from the host's arrays onto the
    // device, its gradients zeroed (push), or back (pull). 0, or -1 with a message.
    int (*move)(void *ctx, int64_t seg, int64_t n, float *w, float *m, float *v, uint16_t *wb, int push, char *err,
                size_t errcap);
} StoreDevice;

typedef struct HostStore {
    int64_t n;    // elements in each array: plan_host_elems; sharded, this rank's slices' (store_shard_elems)
    float *w;     // (n) fp32 master weights; with f32 compute, also what streams to the device;
                  // with the master on a tier, (host_global): the globals' only
    float *m;     // (n) Adam first moments; with a tier, (host_global): the globals' only
    float *v;     // (n) Adam second moments; with a tier, (host_global)
    float *g;     // (n) fp32 gradient accumulators; with gb, (gb_from): the globals' only
    uint16_t *wb; // (n) with bf16 compute, the bf16 copy of w that streams (AdamW writes it); else NULL
    // The layers' gradients as bf16 where the plan allows it (store_grads_bf16:
    // bf16 compute, one micro-batch a step, one rank, not on the tier): (n -
    // gb_from), plan element f's at gb[f - gb_from] (store_grads_bf16_at),
    // gb_from = host_global. Each COPY_OUT sets its range once a step; the
    // norm and AdamW read them widened (the bits of an fp32 accumulator that
    // started at zero); nothing zeroes them. NULL: every gradient in g.
    uint16_t *gb;
    int64_t gb_from;
    // The host optimizer, by segment: seg[plan_segment_index(SEG_TAIL)] the
    // tail's globals, [.. (SEG_HEAD)] the head's, [.. (l)] layer l.
    int64_t nseg;      // plan_segment_count: 2 + layers
    StoreSegment *seg; // (nseg)
    int threads;       // for the optimizer, the norms and the first touch
    // Sharded (store_alloc_shard): rank `rank` of `ranks` holds, of every
    // segment, only its slice (dist_shard), the slices one after another in
    // segment order (SEG_TAIL's, SEG_HEAD's, layer 0's, ...): element f of
    // segment seg's slice [lo, hi) is at index shard_at[plan_segment_index(seg)]
    // + (f - plan_segment_base(seg) - lo) of every array. NULL: the whole
    // store, each element at its plan index (rank 0 of 1).
    int rank, ranks;
    int64_t *shard_at; // (nseg + 1); [nseg] = n
    size_t mapped[6];  // bytes mapped for w, m, v, g, wb, gb (store_free unmaps them)
    int64_t bytes;     // bytes held of w, m, v, g, wb and gb: the store as it allocated them (RAM; a tier's
                       // arrays as what RAM keeps of them, MAP_NORESERVE gradients whole), less the ranges of
                       // frozen parameters that only their storage dtype's array holds
    int64_t frozen;    // elements of frozen parameters it holds: in wb alone under bf16 (no master, moments or
                       // gradients: store_get and store_put read and write them there), in w alone under f32
    // The NVMe tier (NULL: none): every layer's m and v, a record per layer
    // (m at 0, v at tier_stride), and with tier_master its fp32 master too
    // (at 2 tier_stride; bf16 compute only: the bf16 copy wb streams), and
    // with tier_grads its gradients last, from the step's INS_NORM (which
    // moves them out of g) to the next step's INS_UPDATE (which reads them
    // there): g is then a mapping that holds memory only where touched, a
    // layer's from its first gradient of a step to its INS_NORM (with
    // accumulate > 1, every layer's for the step's micro-batches). Its
    // first failure stops every update and stays in err until the caller
    // reports it (store_failed).
    // With tier_weights (STORE_TIER_WEIGHTS: the plan's tier=weights) the
    // bf16 copy wb as well, whole: a shared mapping of DIR/mtrun.weights
    // (store.c, weights_map), whose pages the kernel reads in from the tier
    // as a layer streams and writes back after AdamW changes them; RAM holds
    // only what the page cache keeps.
    Tier *tier;
    int tier_master;
    int tier_grads;
    int tier_weights;
    char err[512];
    uint8_t *out_first; // (the plan's ntrain) a COPY_OUT the first of the train stream to write its range
    // The segments the plan places on the device (Plan.opt_device) are the backend's to update (NULL: none
    // is, whatever the plan says: the cpu backend, where placement is a no-op). Set by mtrun once the
    // backend is open; store_device_push then puts their state there.
    const StoreDevice *dev;
    // The balance rules' pending steps (Param.balance_mask; NULL: none): (params) NULL, or for a buffer
    // with a rule (layers, E) each element's sign(mean load - load) of the step that ended, -1, 0 or 1, set
    // by mtrun (runtime/run_balance.c) before the step's updates are made pending. store_update moves the
    // buffer's elements it holds by the rule's rate times their sign, master and bf16 copy, after AdamW.
    int8_t *const *balance;
} HostStore;

// Whether segment seg's optimizer state is on the device (placed, and a backend holds it).
static inline int store_on_device(const HostStore *s, const Plan *p, int64_t seg) {
    return s->dev && plan_opt_device(p, seg);
}
// Every placed segment's master, moments and bf16 copy onto the device (its
// gradients zeroed), after the host store was initialised, loaded or
// resumed; or back into the host store (pull), before a checkpoint or the
// export reads it. Nothing without s->dev. 0, or -1 with a message.
int store_device_push(HostStore *s, const Plan *p, char *err, size_t errcap);
int store_device_pull(HostStore *s, const Plan *p, char *err, size_t errcap);

// Whether the store of a plan holds the layers' gradients as bf16
// (common/storage.h, storage_grads_bf16; holds: what a tier takes, below).
// MT_GRADS_ADD_ONLY=1, the tests' switch to the path before, keeps them all
// in fp32 accumulators, every COPY_OUT added.
int store_grads_bf16(const Plan *p, int holds);
// Bytes the store needs for a plan, the tier's arrays counted as in RAM
// (what --summary calls host memory, plus alignment padding): per element
// storage_host_bytes_per_param, 2 less a layer's where store_grads_bf16
// (common/storage.h, storage_host_bytes); a frozen parameter's its storage
// dtype only (2 bytes under bf16: the copy wb; 4 under f32: w). Its master,
// moments and gradients are never touched, so their pages hold no memory.
// holds: what a tier takes (below).
int64_t store_bytes(const Plan *p, int holds);
// Plan element f's bf16 gradient (HostStore.gb), or NULL: an fp32 accumulator at g + f.
static inline uint16_t *store_grads_bf16_at(const struct HostStore *s, int64_t f) {
    return s->gb && f >= s->gb_from ? s->gb + (f - s->gb_from) : NULL;
}
// What a tier holds besides every layer's Adam moments (flags).
enum { STORE_TIER_MASTER = 1, STORE_TIER_GRADS = 2, STORE_TIER_WEIGHTS = 4 };
// Floats of a layer's record in the tier, each array's: the largest layer's
// elements that are not frozen (a frozen parameter has no moments, master or
// gradients there: a record holds the rest of the segment in order).
int64_t store_tier_layer(const Plan *p);
// Bytes of the store that a tier holds instead of RAM: every layer's m and v,
// and what `holds` says (STORE_TIER_WEIGHTS: the whole bf16 copy too).
int64_t store_tier_bytes(const Plan *p, int holds);
// Allocates the arrays zeroed (anonymous mappings on 2 MiB boundaries,
// transparent huge pages asked for with madvise where the kernel has them),
// then touches them first in parallel: each parameter's range of every
// array zeroed by the pool thread that will update it (adamw_first_touch),
// so that on a NUMA machine each page lies on the node of the core that
// updates it, and the page faults are paid here, not in the first step.
// store_alloc: one thread, no tier. Returns 0, or -1 out of memory.
int store_alloc(HostStore *s, const Plan *p);
// The same on `threads` threads (s->threads), with the layers' Adam moments,
// and what `holds` says (their fp32 master, bf16 compute only; their
// gradients between a step's norm and the next update, in RAM a mapping
// that holds memory only where touched), in a tier file in tier_dir (NULL:
// none, as store_alloc), zeroed. Returns 0, or -1 with a message (out of
// memory, or the tier refused: no room, no such directory).
int store_alloc_tier(HostStore *s, const Plan *p, const char *tier_dir, int holds, int threads, char *err,
                     size_t errcap);
// The tier's first failure (a short read or write, naming the file and the
// layer), or NULL: callers check it after anything that updates, flushes or
// moves moments, and stop the run with it.
const char *store_failed(const HostStore *s);
void store_free(HostStore *s);

// The segment of `layer` (-1: the globals): its first float, its floats.
int64_t store_segment(const Plan *p, int64_t layer, int64_t *count);

// The sharded store (Plan.sharded): rank `rank` of p->ranks holds only its
// slice of every segment (dist_shard); with tier_dir, what `holds` says of
// its layers' slices in a tier file of its own, in tier_dir/rank-R-of-N
// (made if missing), each record the largest slice of a layer. Otherwise
// as store_alloc_tier. Returns 0, or -1 with a message.
int store_alloc_shard(HostStore *s, const Plan *p, int rank, const char *tier_dir, int holds, int threads, char *err,
                      size_t errcap);
// Elements of every array rank `rank` of `ranks` holds: its slices' lengths.
int64_t store_shard_elems(const Plan *p, int rank, int ranks);
// The runs of array indices in [lo, hi) that hold no frozen element (a
// frozen parameter's gradients are never touched): into runs[2k] and
// runs[2k + 1] in order, those that touch merged; returns how many. With
// runs NULL, returns at most how many there are (what runs must hold).
int store_trained_runs(const HostStore *s, const Plan *p, int64_t lo, int64_t hi, int64_t *runs);
// Bytes of RAM the store of rank `rank` of `ranks` holds: its elements at
// storage_host_bytes_per_param, a frozen parameter's at its storage dtype.
int64_t store_shard_bytes(const Plan *p, int rank, int ranks);
// Where this store keeps segment seg (SEG_TAIL, SEG_HEAD or a layer): the
// plan elements [*lo, *hi) of it that it holds (all of it unless sharded;
// may be empty), and the array index of *lo, which sharded checkpoints and
// export read each rank's slice from (s->w + index, ... m, v, g, wb).
int64_t store_slice(const HostStore *s, const Plan *p, int64_t seg, int64_t *lo, int64_t *hi);
// The array index of plan element f, or -1 where this store does not hold it.
int64_t store_index(const HostStore *s, const Plan *p, int64_t f);

// The optimizer per segment (layer -1: the globals), what the plan's host
// instructions do and what the end of a step sets up:
// INS_NORM: the squared norm of the segment's gradients into seg.sq_norm
// (after the step's last micro-batch); with tier_grads, a layer's gradients
// then move to its record and out of RAM.
void store_norm(HostStore *s, const Plan *p, int64_t layer);
// INS_UPDATE: applies the segment's pending AdamW update to all its
// parameters (weight decay on matrices only, none on norms and biases),
// writing the bf16 copy and zeroing its gradients in the same pass
// (ADAMW_ZERO_GRADS; the padding after each parameter zeroed too); nothing
// when no update is pending.
void store_update(HostStore *s, const Plan *p, int64_t layer);
// Whether COPY_OUT `in` (of the plan's train stream) may set its range of
// the gradients rather than add into it, and counts it: when the range
// holds zeros, which is so when it is the first COPY_OUT of the stream to
// touch any of its range (in the copy-out engine's order, the stream's) in
// the first pass since its segment was zeroed (by the update, or by the
// norm moving a tier's gradients out). 0 + x is x, bit for bit but for
// the sign of a zero, which no later value sees (AdamW's moments add it to
// +0 or a nonzero value). Called in the copy-out engine's order.
int store_grads_out(HostStore *s, const Plan *p, const Instr *in);
// Every pending update, in segment order (before validation, checkpoints,
// export and the end of training).
void store_flush(HostStore *s, const Plan *p);

// Floats [off, off + n) of array `array` (0 w, 1 m, 2 v) out of the store
// into dst, or from src into it, wherever they live (RAM or the tier): what
// checkpoints read and write (plan elements; a sharded store refuses any it
// does not hold, naming them). Returns 0, or -1 with a message.
int store_get(HostStore *s, const Plan *p, int array, int64_t off, int64_t n, float *dst, char *err, size_t errcap);
int store_put(HostStore *s, const Plan *p, int array, int64_t off, int64_t n, const float *src, char *err,
              size_t errcap);

// Plan elements [off, off + n) of the weights, held by this store at one
// run of array indices and none on the tier, into dst: the master, or a
// frozen parameter's bf16 copy widened (what --export reads).
void store_get_weights(const HostStore *s, const Plan *p, int64_t off, int64_t n, float *dst);

// Rounds the whole master into the bf16 copy (a no-op without one): after
// the master was written other than by AdamW (initialised, loaded, resumed).
// Returns 0, or -1 with a message (the tier's).
int store_sync_copy(HostStore *s, const Plan *p, char *err, size_t errcap);

// Initialises the master weights from seed as each parameter's init says.
// Each element's value depends only on (seed, parameter, layer, index), not
// on the order of initialisation, the layout or the threads: a parameter's
// elements are shared among s->threads threads of the host pool (the same
// bits as one thread: test store_init_threads). Returns 0, or -1 with a
// message (the tier's).
int store_init(HostStore *s, const Plan *p, uint64_t seed, char *err, size_t errcap);

#endif
