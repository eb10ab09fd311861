// backend_cuda.c: the cuda backend (backend.h), built into libmt_cuda.so,
// which mtrun loads with dlopen (device.c), so that mtrun itself starts on
// machines without libcudart. In the tests the same file is built against
// the CPU emulation of the CUDA calls it makes (tests/emu/cuda_api_emu.c).
//
//   engines   one CUDA stream per engine of the plan; the host engine's
//             instructions (NORM, UPDATE) run on the replay's host thread,
//             concurrent with the streams (replay.c, REPLAY_STREAMS); a
//             sharded plan's collectives on the comm engine's stream, by
//             NCCL or MPI through host copies (comm.c)
//   threads   each engine thread binds the primary context itself (enter);
//             a LOSS is copied into a pinned slot and read at finish, no
//             engine synchronised mid-step for it
//   events    a CUDA event per plan event (cudaEventBlockingSync): a stream
//             waits on another's with cudaStreamWaitEvent; the host engine
//             waits with cudaEventSynchronize, which sleeps; a stream waits on
//             the host engine by its thread not queueing before the host is done
//   memory    one cudaMalloc: the plan's arena, then a scratch region for each
//             engine that runs kernels (f64 accumulators of KA_ACC64
//             arguments, the attention backward's lse and delta, the MoE
//             grouped GEMMs' chunk), of the plan's scratch_bytes, which mtc
//             counted in the plan's device memory (common/scratch.h); a plan
//             recording less than its kernels need is refused at load;
//             then the document starts (plan_doc_starts_bytes); the card's free
//             memory read after the ranks' collectives took NCCL's buffers;
//             nothing else while training runs; a GEMM's cuBLASLt
//             workspace is its engine's scratch (gemm_workspace_bytes of it),
//             its algorithm picked once at load for that workspace. The host ranges the streams read
//             and write (the streamed weights, the activation store) pinned
//             with cudaHostRegister in chunks of at most PIN_CHUNK_BYTES
//             (r580 drivers fail one call of 512 GiB or more), the time it
//             took printed, or the run is refused up front
//   kernels   the plan's cubin (cuModuleLoadData) on a GPU of its
//             architecture, its PTX on a newer one; an older GPU is refused
//             naming both. Expression kernels by the launch ABI of
//             compiler/emit/emit_cuda.h; attention by the flash templates
//             (common/attention.h); GEMMs through cuBLASLt, bf16 or fp32
//             operands as stored, fp32 accumulation, then the GEMM's epilogue
//             kernel as a second launch
//   errors    every CUDA, driver and cuBLASLt call is checked; the first
//             failure names the call, the plan instruction, its engine and
//             layer, and every later operation is skipped (finish reports it)
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/arena.h"
#include "common/attention.h"
#include "common/bf16.h"
#include "common/kir.h"
#include "common/scan.h"
#include "common/scratch.h"
#include "common/trace.h"
#include "runtime/backend/moe_launch.h"
#include "runtime/store/adamw.h"
#include "runtime/backend/backend.h"
#include "runtime/dist/comm.h"

enum { MAX_ARGS = 64, FINISH_THREADS = 256 };

// The most one cudaHostRegister pins: 64 GiB. r580 drivers fail a call of
// 512 GiB or more (llama3-405b's bf16 copy is 810 GB). MT_PIN_CHUNK_BYTES
// overrides it (the emulation tests, with small plans).
#define PIN_CHUNK_BYTES ((int64_t)64 << 30)

typedef struct Kernel {    // how one kernel of a part launches
    CUfunction fn, finish; // expression kernel and its SYMBOL_finish (NULL: none)
    int grid, block, smem, finish_grid;
    CUfunction attn[3]; // attention: fwd, or bwd_dq and bwd_dkdv
    int attn_smem[3], attn_tc;
    cublasLtMatmulDesc_t desc;         // GEMM: C^T = op(B)^T op(A)^T in cuBLASLt's column-major terms
    cublasLtMatrixLayout_t la, lb, lc; // B's, A's and C's layouts, in that order of the call
    cublasLtMatmulAlgo_t algo;         // GEMM: chosen once at load (gemm_pick_algo), for its workspace
    size_t workspace;                  // GEMM: cuBLASLt's workspace, bytes at the start of the engine's scratch
} Kernel;

// COPY_OUT's gradients on their way into the host store: a ring of
// RING_SLOTS pinned staging slots, each a piece of at most slot_bytes of
// one COPY_OUT. The issuing engine queues a piece's copy and an event after
// it, and goes on (it waits only while every slot holds a piece not yet
// added); the ring's own thread waits for each piece's event, in order,
// and adds it into (or sets it in: GRADS_SET) the store's gradients
// (grads_accumulate, on up to host_threads threads). So the events the
// engine records after a COPY_OUT fire when its copy is done, not its add,
// and compute waits for no add; the host engine, which reads the
// gradients, drains the ring when it waits on the copy-out engine
// (cuda_wait), and so does finish.
enum { RING_SLOTS = 4 };
#define RING_SLOT_MAX_BYTES ((int64_t)256 << 20)
typedef struct RingPiece {
    const Instr *in;
    float *host; // (n) where it goes
    int64_t n;
    int flags; // GRADS_BF16, GRADS_SET
} RingPiece;
typedef struct GradsRing {
    char *slot[RING_SLOTS];         // pinned, (slot_bytes) each
    cudaEvent_t copied[RING_SLOTS]; // recorded after the slot's copy
    RingPiece piece[RING_SLOTS];    // slot k's piece; slots fill in ring order
    int64_t slot_bytes;
    int head, count; // the oldest piece's slot, and pieces queued and not yet added
    int stop, started;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} GradsRing;

typedef struct TraceEvent { // --trace: one instruction between two CUDA events (timing ones), or host times
    const Instr *in;        // of the train stream
    cudaEvent_t t0, t1;     // NULL: a host instruction, at host_t0, host_t1 (seconds after the epoch)
    double host_t0, host_t1;
} TraceEvent;

typedef struct Cuda {
    const Plan *p;
    Arena karena;
    KirProgram prog;
    int bf16;       // the plan's storage: bf16 (the attention variants' names say so)
    char name[400]; // "cuda: NVIDIA H200 (sm_90, the plan's sm_90 cubin)"
    char *dev;      // (dev_bytes) the one device allocation
    int64_t dev_bytes;
    char *scratch[ENG_COUNT]; // (scratch_bytes) in dev, per engine that runs kernels; NULL for others
    int64_t scratch_bytes;
    LoadBalancePool pool; // a pooled load-balancing loss's sums across the layers: device memory of its
                          // own (layers * 2 E doubles, a few KiB, outside the plan's count); NULL: none
    cudaStream_t stream[ENG_COUNT];
    cudaEvent_t *event; // (nevents)
    CUmodule mod;
    CUfunction moe[MOE_KERNELS]; // compiler/emit/cuda/moe.cuh's grouped kernels (NULL: not loaded)
    CUfunction widen;            // the prelude's mt_widen_bf16, for INS_COPY XFER_BF16 (NULL: the plan has none)
    Kernel *kern[PART_COUNT];    // (prog.parts[p].n)
    cublasLtHandle_t lt;
    char *staging[ENG_COUNT]; // pinned, 4 bytes: a scalar read at once (cuda_read_scalar)
    GradsRing ring;           // COPY_OUT's gradients, added on the host off the copy-out engine
    void **pinned;            // (npinned) the chunks registered, each a cudaHostRegister
    int npinned;
    pthread_mutex_t mu; // the first failure
    int failed;
    char err[1024];
    int poison_free;      // MT_POISON_FREE=1: FREE fills its region with NaN (cuda_poison)
    CUcontext cuctx;      // the device's primary context, which every engine thread binds (enter)
    float *loss_host;     // pinned, (nloss_cap): LOSS values queued, read at finish
    float **loss_dst;     // (nloss_cap) where each goes
    int nloss, nloss_cap; // queued since the last finish; the plan's LOSS instructions
    Trace trace;          // --trace (tracing: trace.f set)
    pthread_mutex_t trace_mu;
    TraceEvent *tev; // (ntev of cap_tev) instructions timed since the last finish
    int ntev, cap_tev;
    cudaEvent_t epoch;        // the trace's time zero
    double epoch_host;        // the host clock then (trace_clock_s), for the host engine's instructions
    int device, devices;      // the GPU this rank runs on (its local rank modulo devices), of the machine's
    size_t comm_bytes;        // the device memory opening the ranks' collectives took (NCCL's buffers)
    Comm comm;                // the ranks' collectives (comm.h): NCCL, or MPI through host copies
    cudaStream_t comm_stream; // where they are queued (NULL with one rank)
    int *doc_starts_dev;      // (B, T) the device copy of the micro-batch's document starts: in dev after the
                              // scratch, plan_doc_starts_bytes (common/scratch.h)
    void *seg_start;          // what every attention launch passes as seg_start: doc_starts_dev, or NULL
    // The optimizer of the segments the plan places on the device (Plan.opt_device; NULL, 0: none):
    char *opt;             // the device store, in dev after the document starts (common/scratch.h)
    double *opt_sums;      // (opt_chunks) device: a placed segment's chunk sums of its squared norm
    double *opt_sums_host; // (opt_chunks) pinned, where they are read
    int64_t opt_chunks;    // the most chunks (ADAMW_NORM_CHUNK) of a placed segment
    CUfunction adamw, grads_add, sq_norm_chunks; // the prelude's mt_adamw, mt_grads_add, mt_sq_norm_chunks
    StoreDevice opt_store;                       // what the host store calls for those segments (ctx: this)
} Cuda;

static const char *const ENGINE[ENG_COUNT] = {"compute", "copy-in", "copy-out", "host", "comm"};
static const char *const KIND[INS_COUNT] = {"COPY_IN", "COPY_OUT", "COPY",      "INPUT",         "RUN",  "LOSS",
                                            "SAVE",    "LOAD",     "FREE",      "RECORD",        "WAIT", "NORM",
                                            "UPDATE",  "STAT",     "ALLGATHER", "REDUCE_SCATTER"};

static int engine_of(const Instr *in) {
    return in && in->engine >= 0 && in->engine < ENG_COUNT ? in->engine : ENG_COMPUTE;
}

// "train stream instruction 412 (RUN, layer 3) on the compute engine"
static void where(const Cuda *c, const Instr *in, char *buf, size_t cap) {
    if (!in) {
        snprintf(buf, cap, "outside a stream");
        return;
    }
    const Plan *p = c->p;
    int train = in >= p->train && in < p->train + p->ntrain;
    long idx = train ? (long)(in - p->train) : (long)(in - p->eval);
    snprintf(buf, cap, "%s stream instruction %ld (%s, layer %d) on the %s engine", train ? "train" : "eval", idx,
             in->kind >= 0 && in->kind < INS_COUNT ? KIND[in->kind] : "?", in->layer, ENGINE[engine_of(in)]);
}

// Keeps the first failure; later operations see c->failed and do nothing.
static void fail(Cuda *c, const Instr *in, const char *call, const char *why) {
    char w[256];
    where(c, in, w, sizeof w);
    pthread_mutex_lock(&c->mu);
    if (!c->failed) snprintf(c->err, sizeof c->err, "cuda: %s failed: %s, at %s", call, why, w);
    c->failed = 1;
    pthread_mutex_unlock(&c->mu);
}
static int failed(Cuda *c) { return __atomic_load_n(&c->failed, __ATOMIC_ACQUIRE); }

static int rt_ok(Cuda *c, const Instr *in, const char *call, cudaError_t e) {
    if (e == cudaSuccess) return 1;
    fail(c, in, call, cudaGetErrorString(e));
    return 0;
}
static int cu_ok(Cuda *c, const Instr *in, const char *call, CUresult e) {
    if (e == CUDA_SUCCESS) return 1;
    const char *s = NULL;
    cuGetErrorString(e, &s);
    fail(c, in, call, s ? s : "unknown CUresult");
    return 0;
}
static int lt_ok(Cuda *c, const Instr *in, const char *call, cublasStatus_t e) {
    if (e == CUBLAS_STATUS_SUCCESS) return 1;
    fail(c, in, call, cublasLtGetStatusString(e));
    return 0;
}
#define RT(c, in, call) rt_ok(c, in, #call, call)
#define CU(c, in, call) cu_ok(c, in, #call, call)
#define LT(c, in, call) lt_ok(c, in, #call, call)

// ---------------------------------------------------------------- the trace

// The next free trace event, the array grown when full; NULL when it cannot
// grow. The caller holds trace_mu: another engine's thread may move the
// array, so no pointer into it outlives the lock.
static TraceEvent *trace_push(Cuda *c) {
    if (c->ntev == c->cap_tev) {
        int cap = c->cap_tev ? 2 * c->cap_tev : 1024;
        TraceEvent *t = realloc(c->tev, (size_t)cap * sizeof *t);
        if (t) c->tev = t, c->cap_tev = cap;
    }
    return c->ntev < c->cap_tev ? &c->tev[c->ntev] : NULL;
}

// Brackets an operation of `in` with timing events on its stream (--trace).
// The start event is read under the lock, like trace_end's end event.
static int trace_begin(Cuda *c, const Instr *in) {
    if (!c->trace.f || !in || !trace_in_train(c->p, in)) return -1;
    pthread_mutex_lock(&c->trace_mu);
    int i = -1;
    cudaEvent_t t0 = NULL;
    TraceEvent *t = trace_push(c);
    if (t) {
        *t = (TraceEvent){in, NULL, NULL, 0, 0};
        if (cudaEventCreate(&t->t0) == cudaSuccess && cudaEventCreate(&t->t1) == cudaSuccess) i = c->ntev++, t0 = t->t0;
        else if (t->t0) // the second failed: the first is not kept
            cudaEventDestroy(t->t0);
    }
    pthread_mutex_unlock(&c->trace_mu);
    if (i >= 0) cudaEventRecord(t0, c->stream[engine_of(in)]);
    return i;
}
static void trace_end(Cuda *c, const Instr *in, int i) {
    if (i < 0) return;
    pthread_mutex_lock(&c->trace_mu);
    cudaEvent_t t1 = c->tev[i].t1;
    pthread_mutex_unlock(&c->trace_mu);
    cudaEventRecord(t1, c->stream[engine_of(in)]);
}
// Writes the timed instructions (all engines drained) and forgets them.
static void trace_flush(Cuda *c) {
    for (int i = 0; i < c->ntev; i++) {
        TraceEvent *t = &c->tev[i];
        float a = (float)(1e3 * t->host_t0), b = (float)(1e3 * t->host_t1);
        if (!t->t0 || (cudaEventElapsedTime(&a, c->epoch, t->t0) == cudaSuccess &&
                       cudaEventElapsedTime(&b, c->epoch, t->t1) == cudaSuccess))
            trace_instr(&c->trace, c->p, t->in, 1e-3 * a, 1e-3 * (b - a));
        if (t->t0) cudaEventDestroy(t->t0), cudaEventDestroy(t->t1);
    }
    c->ntev = 0;
}

// A host engine instruction the replay timed (NORM, UPDATE), on the host track.
static void cuda_trace_host(Backend *be, const Instr *in, double t0, double t1) {
    Cuda *c = be->ctx;
    if (!c->trace.f || !in || !trace_in_train(c->p, in)) return;
    pthread_mutex_lock(&c->trace_mu);
    TraceEvent *t = trace_push(c);
    if (t) *t = (TraceEvent){in, NULL, NULL, t0 - c->epoch_host, t1 - c->epoch_host}, c->ntev++;
    pthread_mutex_unlock(&c->trace_mu);
}

// ---------------------------------------------------------------- copies

// Every operation starts here: nothing after the first failure; and the
// calling thread (a replay engine's, which the driver API knows nothing
// of) binds the device's primary context itself the first time, rather
// than by whichever runtime call happens to come first on it.
static int enter(Cuda *c, const Instr *in) {
    static __thread CUcontext bound;
    if (failed(c)) return 0;
    if (bound != c->cuctx && CU(c, in, cuCtxSetCurrent(c->cuctx))) bound = c->cuctx;
    return !failed(c);
}

static cudaStream_t stream_of(Cuda *c, const Instr *in) { return c->stream[engine_of(in)]; }

// The host engine's instructions (and tests' calls) are done when they return.
static void done_if_host(Cuda *c, const Instr *in) {
    if (!failed(c) && engine_of(in) == ENG_HOST) RT(c, in, cudaStreamSynchronize(c->stream[ENG_HOST]));
}

static void cuda_copy_in(Backend *be, const Instr *in, int64_t dst, const void *host, int64_t bytes) {
    Cuda *c = be->ctx;
    if (!enter(c, in)) return;
    int t = trace_begin(c, in);
    RT(c, in, cudaMemcpyAsync(c->dev + dst, host, (size_t)bytes, cudaMemcpyHostToDevice, stream_of(c, in)));
    trace_end(c, in, t);
    done_if_host(c, in);
}

// The ring's thread: each piece, in order, once its copy is done, into the
// host store; after a failure it only empties the ring.
static void *ring_main(void *arg) {
    Backend *be = arg;
    Cuda *c = be->ctx;
    GradsRing *r = &c->ring;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->count && !r->stop) pthread_cond_wait(&r->cv, &r->mu);
        if (!r->count) break;
        int k = r->head;
        RingPiece pc = r->piece[k];
        pthread_mutex_unlock(&r->mu);
        if (enter(c, pc.in) && RT(c, pc.in, cudaEventSynchronize(r->copied[k])))
            grads_accumulate(pc.host, r->slot[k], pc.n, pc.flags, be->host_threads);
        pthread_mutex_lock(&r->mu);
        r->head = (k + 1) % RING_SLOTS, r->count--;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

// Returns when every piece queued so far is in the host store.
static void ring_drain(Cuda *c) {
    GradsRing *r = &c->ring;
    if (!r->started) return;
    pthread_mutex_lock(&r->mu);
    while (r->count) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

// Through the ring (GradsRing): a piece of at most slot_bytes at a time,
// the engine going on once each is queued. The host's part is what one
// thread does at about 10 GB/s for a bf16 add (10 bytes an element: read
// it, read and write its accumulator), 6 bytes for a set; the cost model
// prices it as the ring runs it (compiler/schedule/cost.c, host_grads_add_bandwidth).
static void cuda_copy_out_add(Backend *be, const Instr *in, float *host, int64_t src, int64_t bytes, int flags) {
    Cuda *c = be->ctx;
    GradsRing *r = &c->ring;
    int e = engine_of(in), es = flags & GRADS_BF16 ? 2 : 4;
    if (!enter(c, in)) return;
    int t = trace_begin(c, in);
    for (int64_t off = 0; off < bytes && !failed(c);) {
        int64_t len = bytes - off < r->slot_bytes / es * es ? bytes - off : r->slot_bytes / es * es;
        pthread_mutex_lock(&r->mu);
        while (r->count == RING_SLOTS) pthread_cond_wait(&r->cv, &r->mu);
        int k = (r->head + r->count) % RING_SLOTS;
        pthread_mutex_unlock(&r->mu);
        if (!RT(c, in,
                cudaMemcpyAsync(r->slot[k], c->dev + src + off, (size_t)len, cudaMemcpyDeviceToHost, c->stream[e])) ||
            !RT(c, in, cudaEventRecord(r->copied[k], c->stream[e])))
            break;
        pthread_mutex_lock(&r->mu);
        r->piece[k] = (RingPiece){in, host + off / es, len / es, flags};
        r->count++;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        off += len;
    }
    trace_end(c, in, t);
    if (!in || engine_of(in) == ENG_HOST) ring_drain(c); // done when it returns
}

static void cuda_copy_out(Backend *be, const Instr *in, void *host, int64_t src, int64_t bytes) {
    Cuda *c = be->ctx;
    if (!enter(c, in)) return;
    int t = trace_begin(c, in);
    RT(c, in, cudaMemcpyAsync(host, c->dev + src, (size_t)bytes, cudaMemcpyDeviceToHost, stream_of(c, in)));
    trace_end(c, in, t);
    if (!in) RT(c, in, cudaStreamSynchronize(stream_of(c, in))); // a test reads it at once
    done_if_host(c, in);
}

static void cuda_copy(Backend *be, const Instr *in, int64_t dst, int64_t src, int64_t bytes) {
    Cuda *c = be->ctx;
    if (!enter(c, in)) return;
    int t = trace_begin(c, in);
    RT(c, in, cudaMemcpyAsync(c->dev + dst, c->dev + src, (size_t)bytes, cudaMemcpyDeviceToDevice, stream_of(c, in)));
    trace_end(c, in, t);
    done_if_host(c, in);
}

// INS_COPY XFER_BF16 (a sharded bf16 plan's gradients into the fp32
// staging its reduce-scatter sums): bytes / 4 bf16 values at src widened
// exactly into floats at dst by the prelude's mt_widen_bf16
// (compiler/emit/cuda/prelude.cuh; the cpu backend's cpu_copy_widen is its
// reference), a grid-stride loop of at most WIDEN_BLOCKS blocks.
enum { WIDEN_THREADS = 256, WIDEN_BLOCKS = 4096 };
static void cuda_copy_widen(Backend *be, const Instr *in, int64_t dst, int64_t src, int64_t bytes) {
    Cuda *c = be->ctx;
    if (!enter(c, in)) return;
    float *d = (float *)(void *)(c->dev + dst); // (n)
    const void *s = c->dev + src;               // (n) bf16
    long long n = bytes / 4, blocks = (n + WIDEN_THREADS - 1) / WIDEN_THREADS;
    void *params[] = {&d, &s, &n};
    int t = trace_begin(c, in);
    if (n)
        CU(c, in,
           cuLaunchKernel(c->widen, (unsigned)(blocks < WIDEN_BLOCKS ? blocks : WIDEN_BLOCKS), 1, 1, WIDEN_THREADS, 1,
                          1, 0, stream_of(c, in), params, NULL));
    trace_end(c, in, t);
    done_if_host(c, in);
}

// ---------------------------------------------------------------- the optimizer on the device

// The segments a plan places on the device (Plan.opt_device) keep their
// fp32 master, Adam moments, gradient accumulators and bf16 copy in the
// device store (common/scratch.h: plan_opt_device_at). Their COPY_IN and
// COPY_OUT stay on the plan's engines, device to device; the host engine's
// norms and updates, which the host store hands over (StoreDevice), run on
// the host engine's stream and are done when they return. Every kernel is the
// prelude's (compiler/emit/cuda/prelude.cuh), each element computed as the
// host computes it, so the bits do not depend on the placement.
enum { OPT_THREADS = 256, OPT_BLOCKS = 4096 };

// Segment seg's array k in the device store: 0 w, 1 m, 2 v, 3 g (n floats each), 4 the bf16 copy.
static char *opt_array(const Cuda *c, int64_t seg, int k) {
    return c->opt + plan_opt_device_at(c->p, seg) + plan_opt_device_array(plan_segment_len(c->p, seg), k);
}
static float *opt_floats(const Cuda *c, int64_t seg, int k) { return (float *)(void *)opt_array(c, seg, k); }
static unsigned opt_blocks(long long n) {
    long long b = (n + OPT_THREADS - 1) / OPT_THREADS;
    return (unsigned)(b < 1 ? 1 : b < OPT_BLOCKS ? b : OPT_BLOCKS);
}

// COPY_IN of a placed segment: its streamed copy (bf16, or the fp32 master) into the arena.
static void cuda_opt_copy_in(Backend *be, const Instr *in) {
    Cuda *c = be->ctx;
    if (!enter(c, in)) return;
    int64_t elem = in->flags & XFER_BF16 ? 2 : 4, at = in->src - plan_segment_base(c->p, in->layer);
    const char *src = opt_array(c, in->layer, elem == 2 ? 4 : 0) + at * elem;
    int t = trace_begin(c, in);
    RT(c, in, cudaMemcpyAsync(c->dev + in->dst, src, (size_t)in->bytes, cudaMemcpyDeviceToDevice, stream_of(c, in)));
    trace_end(c, in, t);
    done_if_host(c, in);
}

// COPY_OUT of a placed segment: the arena's gradients added (set: stored) into its accumulators (mt_grads_add).
static void cuda_opt_copy_out(Backend *be, const Instr *in, int set) {
    Cuda *c = be->ctx;
    if (!enter(c, in)) return;
    int bf = (in->flags & XFER_BF16) != 0;
    float *g = opt_floats(c, in->layer, 3) + (in->dst - plan_segment_base(c->p, in->layer));     // (n)
    const float *src = bf ? NULL : (const float *)(void *)(c->dev + in->src);                    // (n) or NULL
    const unsigned short *srcb = bf ? (const unsigned short *)(void *)(c->dev + in->src) : NULL; // (n) or NULL
    long long n = in->bytes / (bf ? 2 : 4);
    void *params[] = {&g, &src, &srcb, &n, &set};
    int t = trace_begin(c, in);
    CU(c, in, cuLaunchKernel(c->grads_add, opt_blocks(n), 1, 1, OPT_THREADS, 1, 1, 0, stream_of(c, in), params, NULL));
    trace_end(c, in, t);
    done_if_host(c, in);
}

// The host engine's work on the device: queued on its stream, done when it returns.
static int opt_done(Cuda *c) { return RT(c, NULL, cudaStreamSynchronize(c->stream[ENG_HOST])); }

// StoreDevice.sq_norm: the chunk sums on the device (mt_sq_norm_chunks), added here in chunk order, as
// adamw_sq_norm adds them. (A failure is kept for finish and the step's end; the norm is then 0.)
static double cuda_opt_sq_norm(void *ctx, int64_t seg, int64_t n) {
    Cuda *c = ctx;
    if (n <= 0 || !enter(c, NULL)) return 0.0;
    long long len = n, chunk = ADAMW_NORM_CHUNK, chunks = (n + ADAMW_NORM_CHUNK - 1) / ADAMW_NORM_CHUNK;
    const float *g = opt_floats(c, seg, 3); // (n)
    double *sums = c->opt_sums, total = 0.0;
    void *params[] = {&sums, &g, &len, &chunk};
    unsigned threads = 64, blocks = (unsigned)((chunks + threads - 1) / threads);
    if (CU(c, NULL,
           cuLaunchKernel(c->sq_norm_chunks, blocks, 1, 1, threads, 1, 1, 0, c->stream[ENG_HOST], params, NULL)) &&
        RT(c, NULL,
           cudaMemcpyAsync(c->opt_sums_host, sums, (size_t)chunks * sizeof(double), cudaMemcpyDeviceToHost,
                           c->stream[ENG_HOST])) &&
        opt_done(c))
        for (long long k = 0; k < chunks; k++) total += c->opt_sums_host[k];
    return total;
}

// StoreDevice.update: mt_adamw over [off, off + n) of the segment, the gradients zeroed.
static void cuda_opt_update(void *ctx, int64_t seg, int64_t off, int64_t n, const AdamWConst *k) {
    Cuda *c = ctx;
    if (!enter(c, NULL)) return;
    float *w = opt_floats(c, seg, 0) + off, *m = opt_floats(c, seg, 1) + off, *v = opt_floats(c, seg, 2) + off,
          *g = opt_floats(c, seg, 3) + off; // (n) each
    const unsigned short *gb = NULL;
    unsigned short *wb = c->p->graph->train.compute == DT_BF16 ? (unsigned short *)(void *)opt_array(c, seg, 4) + off
                                                               : NULL; // (n) or NULL
    long long len = n;
    int zero = 1;
    AdamWConst kc = *k; // (the kernel's MtAdamWConst: the same nine floats)
    void *params[] = {&w, &m, &v, &g, &gb, &wb, &len, &kc, &zero};
    if (CU(c, NULL,
           cuLaunchKernel(c->adamw, opt_blocks(len), 1, 1, OPT_THREADS, 1, 1, 0, c->stream[ENG_HOST], params, NULL)))
        opt_done(c);
}

// StoreDevice.zero_grads
static void cuda_opt_zero_grads(void *ctx, int64_t seg, int64_t off, int64_t n) {
    Cuda *c = ctx;
    if (enter(c, NULL) &&
        RT(c, NULL, cudaMemsetAsync(opt_floats(c, seg, 3) + off, 0, (size_t)n * sizeof(float), c->stream[ENG_HOST])))
        opt_done(c);
}

// StoreDevice.move: every engine drained first (nothing of a step in flight reads or writes the store).
static int cuda_opt_move(void *ctx, int64_t seg, int64_t n, float *w, float *m, float *v, uint16_t *wb, int push,
                         char *err, size_t errcap) {
    Cuda *c = ctx;
    void *host[4] = {w, m, v, wb};
    for (int e = 0; e < ENG_COUNT && enter(c, NULL); e++) RT(c, NULL, cudaStreamSynchronize(c->stream[e]));
    for (int k = 0; k < 4 && !failed(c); k++) {
        size_t bytes = (size_t)n * (k == 3 ? 2 : 4);
        char *d = opt_array(c, seg, k == 3 ? 4 : k);
        if (host[k])
            RT(c, NULL,
               push ? cudaMemcpy(d, host[k], bytes, cudaMemcpyHostToDevice)
                    : cudaMemcpy(host[k], d, bytes, cudaMemcpyDeviceToHost));
    }
    if (push && !failed(c)) RT(c, NULL, cudaMemset(opt_array(c, seg, 3), 0, (size_t)n * sizeof(float)));
    if (!failed(c)) return 0;
    snprintf(err, errcap, "%s", c->err);
    return -1;
}

// A sharded plan's INS_ALLGATHER and INS_REDUCE_SCATTER, in place on the
// arena, queued on the instruction's stream (the comm engine's) after what
// the plan's events made it wait for: NCCL's collectives (comm.c), or
// without NCCL (the emulation) MPI through host copies, the stream
// synchronised around them. The ranks are those open_comm opened.
static int cuda_collective(Backend *be, const Instr *in, const Dist *dist, char *err, size_t errcap) {
    Cuda *c = be->ctx;
    (void)dist;
    char why[600];
    if (enter(c, in)) {
        int t = trace_begin(c, in);
        if (comm_plan_collective(&c->comm, c->p, in, c->dev, stream_of(c, in), why, sizeof why) != 0)
            fail(c, in, in->kind == INS_ALLGATHER ? "the all-gather" : "the reduce-scatter", why);
        trace_end(c, in, t);
        done_if_host(c, in);
    }
    if (!failed(c)) return 0;
    pthread_mutex_lock(&c->mu);
    snprintf(err, errcap, "%s", c->err);
    pthread_mutex_unlock(&c->mu);
    return -1;
}

// A FREE's region filled with NaN, so that a schedule that reads it after
// its FREE shows as a NaN loss: only with MT_POISON_FREE=1 (the emulation's
// tests and tests/gpu set it), since in production it is a memset of every
// freed byte, 1.5 to 3% of a step. Outside a stream (in NULL: tests, the
// whole arena) always.
static void cuda_poison(Backend *be, const Instr *in, int64_t dst, int64_t bytes) {
    Cuda *c = be->ctx;
    if ((in && !c->poison_free) || !enter(c, in)) return;
    RT(c, in, cudaMemsetAsync(c->dev + dst, 0xff, (size_t)bytes, stream_of(c, in))); // NaN as f32 and as bf16
    done_if_host(c, in);
}

// The float at once (tests, outside a stream): the engine drained first.
static float cuda_read_scalar(Backend *be, const Instr *in, int64_t src) {
    Cuda *c = be->ctx;
    int e = engine_of(in);
    float v = 0.0f / 0.0f;
    if (!enter(c, in)) return v;
    if (RT(c, in, cudaMemcpyAsync(c->staging[e], c->dev + src, 4, cudaMemcpyDeviceToHost, c->stream[e])) &&
        RT(c, in, cudaStreamSynchronize(c->stream[e])))
        memcpy(&v, c->staging[e], 4);
    return v;
}

// INS_LOSS in a stream: the copy queued into a pinned slot of its own, the
// value set into *dst at finish, so that no engine stops mid-step for it.
static void cuda_read_scalar_async(Backend *be, const Instr *in, int64_t src, float *dst) {
    Cuda *c = be->ctx;
    if (!enter(c, in)) return;
    pthread_mutex_lock(&c->mu);
    int k = c->nloss < c->nloss_cap ? c->nloss++ : -1;
    if (k >= 0) c->loss_dst[k] = dst;
    pthread_mutex_unlock(&c->mu);
    if (k < 0) fail(c, in, "LOSS", "more LOSS instructions in one stream than the plan has");
    else RT(c, in, cudaMemcpyAsync(&c->loss_host[k], c->dev + src, 4, cudaMemcpyDeviceToHost, stream_of(c, in)));
}

// ---------------------------------------------------------------- kernels

static char *arg_ptr(const Cuda *c, const KirArg *a, const int64_t *offsets) {
    return c->dev + offsets[a->node] + a->offset * (a->dtype == KT_BF16 ? 2 : 4);
}

// Expression kernel i of part: accumulators zeroed, the launch, then its finish kernel.
static void launch_expr(Cuda *c, const Instr *in, int part, int i, const int64_t *offsets) {
    const KirKernel *k = &c->prog.parts[part].k[i];
    const Kernel *kn = &c->kern[part][i];
    cudaStream_t s = stream_of(c, in);
    double *acc = (double *)c->scratch[engine_of(in)]; // (kir_acc64_offset(k, nargs))
    void *ptr[MAX_ARGS], *params[MAX_ARGS], *fin[2 * MAX_ARGS];
    int64_t nacc = kir_acc64_offset(k, k->nargs);
    int nf = 0;
    if (nacc && !RT(c, in, cudaMemsetAsync(acc, 0, (size_t)nacc * 8, s))) return;
    for (int a = 0; a < k->nargs; a++) {
        const KirArg *g = &k->args[a];
        params[a] = &ptr[a];
        if (g->access & KA_ACC64) {
            ptr[a] = acc + kir_acc64_offset(k, a);
            continue;
        }
        ptr[a] = arg_ptr(c, g, offsets);
        if ((g->access & KA_ACC32) && !RT(c, in, cudaMemsetAsync(ptr[a], 0, (size_t)g->numel * 4, s))) return;
    }
    if (!CU(c, in,
            cuLaunchKernel(kn->fn, (unsigned)kn->grid, 1, 1, (unsigned)kn->block, 1, 1, (unsigned)kn->smem, s, params,
                           NULL)))
        return;
    if (!kn->finish) return;
    void *dst[MAX_ARGS];
    for (int a = 0; a < k->nargs; a++)
        if (k->args[a].access & KA_ACC64) {
            dst[nf] = arg_ptr(c, &k->args[a], offsets);
            fin[2 * nf] = &dst[nf], fin[2 * nf + 1] = &ptr[a], nf++;
        }
    CU(c, in, cuLaunchKernel(kn->finish, (unsigned)kn->finish_grid, 1, 1, FINISH_THREADS, 1, 1, 0, s, fin, NULL));
}

static void run_gemm(Cuda *c, const Instr *in, int part, int i, const int64_t *offsets) {
    const KirKernel *k = &c->prog.parts[part].k[i];
    const Kernel *kn = &c->kern[part][i];
    const float one = 1.0f, zero = 0.0f;
    char *C = arg_ptr(c, &k->args[0], offsets), *A = arg_ptr(c, &k->args[1], offsets),
         *B = arg_ptr(c, &k->args[2], offsets);
    LT(c, in,
       cublasLtMatmul(c->lt, kn->desc, &one, B, kn->la, A, kn->lb, &zero, C, kn->lc, C, kn->lc, &kn->algo,
                      c->scratch[engine_of(in)], kn->workspace, stream_of(c, in)));
}

// The flash templates: forward (y and its lse, the plan's OP_ATTENTION_LSE
// tensor, which the backward reads with y: it recomputes no softmax),
// backward bwd_dq (which writes delta = rowsum(dy * y) and lse into the
// engine's workspace) then bwd_dkdv. Every kernel takes document starts
// (seg, common/attention.h's convention): the stream's, or NULL; the
// forward takes the sinks [H] too (or NULL), which the backward needs not:
// y and lse include them.
static void run_attn(Cuda *c, const Instr *in, int part, int i, const int64_t *offsets) {
    const KirKernel *k = &c->prog.parts[part].k[i];
    const Kernel *kn = &c->kern[part][i];
    const KirAttn *t = &k->attn;
    cudaStream_t s = stream_of(c, in);
    int T = (int)t->T, H = (int)t->H, KVH = (int)t->KVH, D = (int)t->D, Dv = (int)t->Dv;
    int bq = kn->attn_tc ? ATTN_TC_BQ : ATTN_BQ, bk = kn->attn_tc ? attn_tc_bk_dkdv(D, Dv) : ATTN_BK;
    unsigned threads = kn->attn_tc ? ATTN_TC_THREADS : ATTN_THREADS, gq = (unsigned)((T + bq - 1) / bq),
             gk = (unsigned)((T + bk - 1) / bk), B = (unsigned)t->B;
    if (k->kind == KK_ATTN) {
        void *Y = arg_ptr(c, &k->args[0], offsets), *Q = arg_ptr(c, &k->args[1], offsets),
             *K = arg_ptr(c, &k->args[2], offsets), *V = arg_ptr(c, &k->args[3], offsets),
             *L = arg_ptr(c, &k->args[4], offsets), *SK = k->nargs > 5 ? arg_ptr(c, &k->args[5], offsets) : NULL;
        // seg_start: before the fp32 kernels' sinks (NULL: none), before T in the tensor-core ones
        void *a[] = {&Y, &L, &Q, &K, &V, &T, &H, &KVH, &c->seg_start, &SK};
        void *a_tc[] = {&Y, &L, &Q, &K, &V, &c->seg_start, &T, &H, &KVH, &SK};
        CU(c, in,
           cuLaunchKernel(kn->attn[0], gq, (unsigned)H, B, threads, 1, 1, (unsigned)kn->attn_smem[0], s,
                          kn->attn_tc ? a_tc : a, NULL));
        return;
    }
    size_t es = k->args[0].dtype == KT_BF16 ? 2 : 4;
    int64_t nq = t->B * t->T * t->H * t->D, nk = t->B * t->T * t->KVH * t->D;
    char *out = arg_ptr(c, &k->args[0], offsets); // dq (B, T, H*D) | dk (B, T, KVH*D) | dv (B, T, KVH*Dv)
    void *DQ = out, *DK = out + (size_t)nq * es, *DV = out + (size_t)(nq + nk) * es, *WS = c->scratch[engine_of(in)];
    void *DY = arg_ptr(c, &k->args[1], offsets), *Q = arg_ptr(c, &k->args[2], offsets),
         *K = arg_ptr(c, &k->args[3], offsets), *V = arg_ptr(c, &k->args[4], offsets),
         *Y = arg_ptr(c, &k->args[5], offsets), *L = arg_ptr(c, &k->args[6], offsets);
    void *a_dq[] = {&DQ, &WS, &DY, &Q, &K, &V, &Y, &L, &T, &H, &KVH, &c->seg_start};
    void *a_dkdv[] = {&DK, &DV, &WS, &DY, &Q, &K, &V, &T, &H, &KVH, &c->seg_start};
    void *a_dq_tc[] = {&DQ, &WS, &DY, &Q, &K, &V, &Y, &L, &c->seg_start, &T, &H, &KVH};
    void *a_dkdv_tc[] = {&DK, &DV, &WS, &DY, &Q, &K, &V, &c->seg_start, &T, &H, &KVH};
    if (CU(c, in,
           cuLaunchKernel(kn->attn[0], gq, (unsigned)H, B, threads, 1, 1, (unsigned)kn->attn_smem[0], s,
                          kn->attn_tc ? a_dq_tc : a_dq, NULL)))
        CU(c, in,
           cuLaunchKernel(kn->attn[1], gk, (unsigned)KVH, B, threads, 1, 1, (unsigned)kn->attn_smem[1], s,
                          kn->attn_tc ? a_dkdv_tc : a_dkdv, NULL));
}

// The geometry of a mixture-of-experts node (KK_NODE): rows, the last axis
// of x or logits (C or E), experts E and their width F.
typedef struct NodeDims {
    long long rows;
    int C, E, F;
} NodeDims;

static NodeDims node_dims(const Node *n) {
    NodeDims d = {0, 0, 0, 0};
    const Shape *x = n->op == OP_MOE_BWD ? &n->in[1]->shape : &n->in[0]->shape;
    if (n->op == OP_LOAD_BALANCE_BWD) x = &n->in[1]->shape;
    if (n->op == OP_ADD_LOSS) return (NodeDims){shape_numel(&n->shape), 1, 0, 0};
    d.C = (int)x->dims[x->rank - 1], d.rows = shape_numel(x) / d.C, d.E = d.C;
    if (n->op == OP_MOE || n->op == OP_MOE_BWD) {
        const Node *w = n->in[n->op == OP_MOE_BWD ? 3 : 2];
        d.E = (int)w->shape.dims[0], d.F = (int)moe_expert_width(n);
    }
    return d;
}

typedef struct MoeLaunchCtx {
    Cuda *c;
    const Instr *in;
    cudaStream_t s;
} MoeLaunchCtx;

static int moe_launch(void *ctx, MoeKernel k, unsigned gx, unsigned gy, void **params) {
    MoeLaunchCtx *m = ctx;
    return CU(m->c, m->in, cuLaunchKernel(m->c->moe[k], gx, gy, 1, MOE_THREADS, 1, 1, 0, m->s, params, NULL)) ? 0 : -1;
}

// conv1d and the recurrences by compiler/emit/cuda/scan.cuh's kernels: ptr and bf
// the node's arguments as run_node gathers them; the documents' starts and
// the engine's scratch (the state: common/scan.h's scan_scratch_bytes).
static void run_scan(Cuda *c, const Instr *in, const Kernel *kn, const Node *n, void **ptr, int nargs, int bf, void *ws,
                     cudaStream_t s) {
    void *params[24];
    int np = 0;
    for (int a = 0; a < nargs; a++) params[np++] = &ptr[a];
    params[np++] = &bf;
    ConvDims cd = {0, 0, 0, 0};
    ScanDims sd = {0, 0, 0, 0, 0, 0};
    long long rows = 0;
    int T = 0, C = 0, K = 0, B = 0, H = 0, Hk = 0, Dk = 0, Dv = 0;
    float scale = (float)n->scale, eps = (float)n->eps;
    unsigned grid, threads = 128, smem = 0;
    if (n->op == OP_CONV1D || n->op == OP_CONV1D_BWD) {
        conv_dims(n, &cd);
        rows = cd.B * cd.T, T = (int)cd.T, C = (int)cd.C, K = (int)cd.K;
        params[np++] = &rows, params[np++] = &T, params[np++] = &C, params[np++] = &K, params[np++] = &c->seg_start;
        long long work = rows * C + (n->op == OP_CONV1D_BWD ? (long long)C * K : 0);
        grid = (unsigned)((work + threads - 1) / threads);
    } else {
        scan_dims(n, &sd);
        int bwd = n->op == OP_DELTA_RULE_BWD || n->op == OP_SSD_BWD;
        B = (int)sd.B, T = (int)sd.T, H = (int)sd.H, Hk = (int)sd.Hk, Dk = (int)sd.Dk, Dv = (int)sd.Dv;
        void *more[] = {&B, &T, &H, &Hk, &Dk, &Dv, &scale, &eps, &c->seg_start, &ws};
        for (int i = 0; i < 10; i++) params[np++] = more[i];
        grid = (unsigned)(bwd ? B * Hk : B * H); // scan.cuh: a block a row and (key) head
        smem = 4u * (unsigned)(bwd ? 4 * Dk + 3 * Dv + 2 * (int)threads + 4 : 2 * Dk + 2);
    }
    CU(c, in, cuLaunchKernel(kn->fn, grid, 1, 1, threads, 1, 1, smem, s, params, NULL));
}

// A mixture-of-experts node by its kernels of compiler/emit/cuda/moe.cuh, over
// the engine's scratch; the cpu's plain kernels (kernels.inc) are their
// reference. moe and moe_bwd: the grouped kernels, chunk by chunk
// (runtime/backend/moe_launch.h); routing stays on the device.
static void run_node(Cuda *c, const Instr *in, int part, int i, const int64_t *offsets) {
    const KirKernel *k = &c->prog.parts[part].k[i];
    const Kernel *kn = &c->kern[part][i];
    const Node *n = c->p->graph->parts[part].nodes.items[k->anchor];
    cudaStream_t s = stream_of(c, in);
    NodeDims d = node_dims(n);
    void *ptr[8], *params[16];
    int np = 0, bf = 0, K = n->top_k;
    for (int a = 0; a < k->nargs && a < 8; a++) {
        ptr[a] = arg_ptr(c, &k->args[a], offsets), params[np++] = &ptr[a];
        bf |= (k->args[a].dtype == KT_BF16) << a;
    }
    void *ws = c->scratch[engine_of(in)];
    if (n->op >= OP_CONV1D && n->op <= OP_SSD_BWD) {
        run_scan(c, in, kn, n, ptr, k->nargs < 8 ? k->nargs : 8, bf, ws, s);
        return;
    }
    if (n->op == OP_MOE || n->op == OP_MOE_BWD) {
        int bwd = n->op == OP_MOE_BWD;
        MoeDims m = moe_node_dims(c->p->graph, n);
        MoeLaunchCtx ctx = {c, in, s};
        // moe's operands y, x, gates, w_gate, w_up, w_down, its gate_up bias in moe_bwd's places (no dy)
        int bias = n->moe_form & MOE_GATE_UP_BIAS;
        void *arg[8] = {ptr[0],           bwd ? ptr[1] : NULL, ptr[bwd ? 2 : 1], ptr[bwd ? 3 : 2],
                        ptr[bwd ? 4 : 3], ptr[bwd ? 5 : 4],    ptr[bwd ? 6 : 5], bias ? ptr[bwd ? 7 : 6] : NULL};
        int bits = bwd ? bf : (bf & 1) | (bf >> 1) << 2;
        bits = (bits & 0x7f) | (bits >> 7 & 1) << 15; // the bias's bit (moe_run's)
        moe_run(m, bwd, moe_chunk_rows(m, bwd, MOE_CHUNK_BYTES), arg, bits, ws, moe_launch, &ctx);
        return;
    }
    unsigned T = 128, thr = (unsigned)((d.rows + T - 1) / T);
    params[np++] = &bf, params[np++] = &d.rows;
    // a load-balancing loss: pooled, then the stream's LoadBalancePool (the layer this run's)
    int pooled = n->pooled;
    long long layer = part_is_block(part) ? in->layer : 0, layers = c->pool.layers;
    double *sums = c->pool.sums, pool_rows = c->pool.rows;
    switch (n->op) {
    case OP_TOP_K: params[np++] = &d.C, params[np++] = &K; break;
    case OP_LOAD_BALANCE: params[np++] = &d.C; break;
    case OP_LOAD_BALANCE_BWD: params[np++] = &d.C, params[np++] = &ws; break;
    default: break;
    }
    if (n->op == OP_LOAD_BALANCE || n->op == OP_LOAD_BALANCE_BWD)
        params[np++] = &pooled, params[np++] = &sums, params[np++] = &layer, params[np++] = &layers,
        params[np++] = &pool_rows;
    unsigned grid = n->op == OP_LOAD_BALANCE || n->op == OP_LOAD_BALANCE_BWD ? 1 : thr;
    CU(c, in, cuLaunchKernel(kn->fn, grid, 1, 1, T, 1, 1, 0, s, params, NULL));
}

static void cuda_run(Backend *be, const Instr *in, PartKind part, int from, int to, int frame, int flags) {
    Cuda *c = be->ctx;
    if (!enter(c, in)) return;
    const int64_t *offsets = plan_offsets(c->p, part, part_is_block(part) ? frame : 0);
    const KirSet *set = &c->prog.parts[part];
    int t = trace_begin(c, in);
    for (int i = 0; i < set->n && !failed(c); i++) {
        const KirKernel *k = &set->k[i];
        if (!kir_is_launched(k) || k->anchor < from || k->anchor >= to) continue;
        switch (k->kind) {
        case KK_EXPR: launch_expr(c, in, part, i, offsets); break;
        case KK_GEMM:
            if (!(flags & RUN_SKIP_HEAVY)) run_gemm(c, in, part, i, offsets);
            if (k->gemm.epilogue >= 0 && !failed(c)) launch_expr(c, in, part, k->gemm.epilogue, offsets);
            break;
        case KK_NODE:
            if (!((flags & RUN_SKIP_HEAVY) &&
                  op_is_heavy(((const Node *)c->p->graph->parts[part].nodes.items[k->anchor])->op)))
                run_node(c, in, part, i, offsets);
            break;
        default:
            if (!(flags & RUN_SKIP_HEAVY)) run_attn(c, in, part, i, offsets);
            break;
        }
    }
    trace_end(c, in, t);
    done_if_host(c, in);
}

// ---------------------------------------------------------------- events

static void cuda_record(Backend *be, const Instr *in) {
    Cuda *c = be->ctx;
    if (in->engine == ENG_HOST || !enter(c, in)) return; // the host engine's work is done when the replay fires it
    RT(c, in, cudaEventRecord(c->event[in->event], c->stream[in->engine]));
}

static void cuda_wait(Backend *be, const Instr *in, int recorder) {
    Cuda *c = be->ctx;
    if (recorder == ENG_HOST || !enter(c, in)) return; // its thread queued nothing before the host was done
    if (in->engine == ENG_HOST) { // sleeps (cudaEventBlockingSync); the gradients it read are added
        if (RT(c, in, cudaEventSynchronize(c->event[in->event])) && recorder == ENG_COPY_OUT) ring_drain(c);
    } else RT(c, in, cudaStreamWaitEvent(c->stream[in->engine], c->event[in->event], 0));
}

static int cuda_finish(Backend *be, char *err, size_t errcap) {
    Cuda *c = be->ctx;
    for (int e = 0; e < ENG_COUNT && enter(c, NULL); e++) RT(c, NULL, cudaStreamSynchronize(c->stream[e]));
    ring_drain(c);
    for (int k = 0; k < c->nloss && !failed(c); k++) *c->loss_dst[k] = c->loss_host[k]; // the LOSSes, in issue order
    c->nloss = 0;
    if (c->trace.f && !failed(c)) trace_flush(c);
    if (!failed(c)) return 0;
    if (err) snprintf(err, errcap, "%s", c->err);
    return -1;
}

// ---------------------------------------------------------------- loading

// The micro-batch's document starts (backend.h): copied to the device
// before the stream's engines start (a synchronous copy of B x T ints), so
// that every attention launch of the stream passes them.
static int cuda_set_doc_starts(Backend *be, const int32_t *seg_start, char *err, size_t errcap) {
    Cuda *c = be->ctx;
    c->seg_start = NULL;
    if (!seg_start) return 0;
    size_t bytes = (size_t)(c->p->graph->train.batch * c->p->graph->train.seq) * sizeof(int32_t);
    if (!enter(c, NULL) || !RT(c, NULL, cudaMemcpy(c->doc_starts_dev, seg_start, bytes, cudaMemcpyHostToDevice))) {
        snprintf(err, errcap, "%s", c->err);
        return -1;
    }
    c->seg_start = c->doc_starts_dev;
    return 0;
}

static void cuda_destroy(Backend *be) {
    Cuda *c = be->ctx;
    comm_close(&c->comm);
    if (c->comm_stream) cudaStreamSynchronize(c->comm_stream), cudaStreamDestroy(c->comm_stream);
    GradsRing *r = &c->ring;
    if (r->started) {
        pthread_mutex_lock(&r->mu);
        r->stop = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->thread, NULL);
    }
    for (int k = 0; k < RING_SLOTS; k++) {
        if (r->slot[k]) cudaFreeHost(r->slot[k]);
        if (r->copied[k]) cudaEventDestroy(r->copied[k]);
    }
    if (r->started) pthread_mutex_destroy(&r->mu), pthread_cond_destroy(&r->cv);
    for (int e = 0; e < ENG_COUNT; e++) {
        if (c->stream[e]) cudaStreamSynchronize(c->stream[e]), cudaStreamDestroy(c->stream[e]);
        if (c->staging[e]) cudaFreeHost(c->staging[e]);
    }
    if (c->trace.f) {
        char err[1200];
        trace_flush(c);
        if (trace_close(&c->trace, err, sizeof err) != 0) fprintf(stderr, "mtrun: %s\n", err);
    }
    if (c->epoch) cudaEventDestroy(c->epoch);
    free(c->tev);
    if (c->loss_host) cudaFreeHost(c->loss_host);
    free(c->loss_dst);
    for (int i = 0; c->event && i < c->p->nevents; i++)
        if (c->event[i]) cudaEventDestroy(c->event[i]);
    free(c->event);
    for (int p = 0; p < PART_COUNT; p++)
        for (int i = 0; c->kern[p] && i < c->prog.parts[p].n; i++) {
            Kernel *k = &c->kern[p][i];
            if (k->desc) cublasLtMatmulDescDestroy(k->desc);
            if (k->la) cublasLtMatrixLayoutDestroy(k->la);
            if (k->lb) cublasLtMatrixLayoutDestroy(k->lb);
            if (k->lc) cublasLtMatrixLayoutDestroy(k->lc);
        }
    for (int p = 0; p < PART_COUNT; p++) free(c->kern[p]);
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->mod) cuModuleUnload(c->mod);
    for (int i = 0; i < c->npinned; i++) cudaHostUnregister(c->pinned[i]);
    free(c->pinned);
    if (c->dev) cudaFree(c->dev);
    if (c->pool.sums) cudaFree(c->pool.sums);
    if (c->opt_sums) cudaFree(c->opt_sums);
    if (c->opt_sums_host) cudaFreeHost(c->opt_sums_host);
    arena_free(&c->karena);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->trace_mu);
    free(c);
    free(be);
}

static int refuse(Cuda *c, char *err, size_t errcap) {
    snprintf(err, errcap, "%s", c->err);
    return -1;
}

// Looks up fn in the plan's module and lets it use smem bytes of dynamic shared memory.
static int get_function(Cuda *c, CUfunction *fn, const char *name, int smem) {
    if (!CU(c, NULL, cuModuleGetFunction(fn, c->mod, name))) return -1;
    if (smem > 48 * 1024 &&
        !CU(c, NULL, cuFuncSetAttribute(*fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)))
        return -1;
    return 0;
}

// cuBLASLt's view of a row-major GEMM C = op(A) op(B): C^T (N x M, column-
// major, ld ldc) = op(B)^T op(A)^T, B's buffer first.
static int gemm_layouts(Cuda *c, Kernel *kn, const KirKernel *k) {
    const KirGemm *g = &k->gemm;
    // operands bf16 or f32 alike; the output too, or f32 under bf16 operands (common/kir.h)
    cudaDataType_t t = k->args[1].dtype == KT_BF16 ? CUDA_R_16BF : CUDA_R_32F,
                   tc = k->args[0].dtype == KT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasOperation_t opa = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!LT(c, NULL, cublasLtMatmulDescCreate(&kn->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
        !LT(c, NULL, cublasLtMatmulDescSetAttribute(kn->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa)) ||
        !LT(c, NULL, cublasLtMatmulDescSetAttribute(kn->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb)) ||
        !LT(c, NULL,
            cublasLtMatrixLayoutCreate(&kn->la, t, (uint64_t)(g->tb ? g->K : g->N), (uint64_t)(g->tb ? g->N : g->K),
                                       g->ldb)) ||
        !LT(c, NULL,
            cublasLtMatrixLayoutCreate(&kn->lb, t, (uint64_t)(g->ta ? g->M : g->K), (uint64_t)(g->ta ? g->K : g->M),
                                       g->lda)) ||
        !LT(c, NULL, cublasLtMatrixLayoutCreate(&kn->lc, tc, (uint64_t)g->N, (uint64_t)g->M, g->ldc)))
        return -1;
    if (g->batch > 1) {
        int32_t n = (int32_t)g->batch;
        cublasLtMatrixLayout_t l[3] = {kn->la, kn->lb, kn->lc};
        int64_t stride[3] = {g->stride_b, g->stride_a, g->stride_c};
        for (int i = 0; i < 3; i++)
            if (!LT(c, NULL,
                    cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n)) ||
                !LT(c, NULL,
                    cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride[i],
                                                     sizeof stride[i])))
                return -1;
    }
    return 0;
}

// A GEMM's algorithm, cuBLASLt's first pick for its shape within its
// workspace (gemm_workspace_bytes, in the engine's scratch, which the plan
// counts: common/scratch.h), chosen once here rather than by cublasLtMatmul
// on every call (which heuristics each call made with no algorithm).
static int gemm_pick_algo(Cuda *c, Kernel *kn, const KirKernel *k, int part, int i) {
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t best;
    size_t workspace = (size_t)gemm_workspace_bytes(&k->gemm);
    int found = 0;
    int ok = LT(c, NULL, cublasLtMatmulPreferenceCreate(&pref)) &&
             LT(c, NULL,
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                     sizeof workspace)) &&
             LT(c, NULL,
                cublasLtMatmulAlgoGetHeuristic(c->lt, kn->desc, kn->la, kn->lb, kn->lc, kn->lc, pref, 1, &best,
                                               &found));
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ok && found < 1)
        snprintf(c->err, sizeof c->err, "cuda: cuBLASLt has no algorithm for GEMM kernel %d of part %s", i,
                 part_name(part));
    if (!ok || found < 1) return -1;
    kn->algo = best.algo;
    kn->workspace = workspace;
    return 0;
}

// Every kernel's functions, launch geometry and GEMM descriptors.
static int load_kernels(Cuda *c) {
    for (int p = 0; p < PART_COUNT; p++) {
        const KirSet *set = &c->prog.parts[p];
        if (!(c->kern[p] = calloc((size_t)set->n + 1, sizeof(Kernel)))) return -1;
        for (int i = 0; i < set->n; i++) {
            const KirKernel *k = &set->k[i];
            Kernel *kn = &c->kern[p][i];
            char sym[64], name[160];
            if (k->nargs > MAX_ARGS) {
                snprintf(c->err, sizeof c->err, "cuda: kernel %d of part %s has %d arguments; at most %d", i,
                         part_name(p), k->nargs, MAX_ARGS);
                return -1;
            }
            if (k->kind == KK_GEMM) {
                if (gemm_layouts(c, kn, k) != 0 || gemm_pick_algo(c, kn, k, p, i) != 0) return -1;
                continue;
            }
            if (k->kind == KK_NODE) { // compiler/emit/cuda/moe.cuh's mt_node_<op>
                const Node *n = c->p->graph->parts[p].nodes.items[k->anchor];
                if (n->op == OP_MOE || n->op == OP_MOE_BWD) { // the grouped kernels (moe_launch.h), once
                    for (int m = 0; m < MOE_KERNELS && !c->moe[MOE_KERNELS - 1]; m++)
                        if (get_function(c, &c->moe[m], MOE_KERNEL_NAME[m], 0) != 0) return -1;
                    continue;
                }
                snprintf(name, sizeof name, "mt_node_%s", op_name(n->op));
                if (get_function(c, &kn->fn, name, 0) != 0) return -1;
                continue;
            }
            if (k->kind != KK_EXPR) {
                const KirAttn *t = &k->attn;
                char v[64];
                int D = (int)t->D, Dv = (int)t->Dv, bwd = k->kind == KK_ATTN_BWD;
                attn_variant_name_chunk(v, sizeof v, c->bf16, D, Dv, t->causal, (long long)t->window,
                                        (long long)t->chunk, t->scale, t->softcap);
                kn->attn_tc = attn_tc_ok(c->bf16, D, Dv);
                const char *pre = kn->attn_tc ? "mt_attn_tc" : "mt_attn";
                kn->attn_smem[0] = (int)(bwd ? (kn->attn_tc ? attn_tc_smem_dq(D, Dv) : attn_smem_dq(D))
                                             : (kn->attn_tc ? attn_tc_smem_fwd(D, Dv) : attn_smem_fwd(D)));
                kn->attn_smem[1] = (int)(kn->attn_tc ? attn_tc_smem_dkdv(D, Dv) : attn_smem_dkdv(D));
                snprintf(name, sizeof name, "%s_%s_%s", pre, bwd ? "bwd_dq" : "fwd", v);
                if (get_function(c, &kn->attn[0], name, kn->attn_smem[0]) != 0) return -1;
                snprintf(name, sizeof name, "%s_bwd_dkdv_%s", pre, v);
                if (bwd && get_function(c, &kn->attn[1], name, kn->attn_smem[1]) != 0) return -1;
                continue;
            }
            int owner = k->fused_into;
            if (owner >= 0 && set->k[owner].kind != KK_GEMM) continue; // the cpu's attention helpers
            kir_symbol(sym, sizeof sym, p, i);
            snprintf(name, sizeof name, "%s_launch", sym);
            CUdeviceptr at;
            size_t bytes;
            int geom[4]; // grid, block, dynamic shared bytes, finish grid
            if (!CU(c, NULL, cuModuleGetGlobal(&at, &bytes, c->mod, name)) ||
                !RT(c, NULL, cudaMemcpy(geom, (void *)(uintptr_t)at, sizeof geom, cudaMemcpyDeviceToHost)))
                return -1;
            kn->grid = geom[0], kn->block = geom[1], kn->smem = geom[2], kn->finish_grid = geom[3];
            if (get_function(c, &kn->fn, sym, kn->smem) != 0) return -1;
            snprintf(name, sizeof name, "%s_finish", sym);
            if (kn->finish_grid && get_function(c, &kn->finish, name, 0) != 0) return -1;
        }
    }
    return 0;
}

// MT_PIN_CHUNK_BYTES, or PIN_CHUNK_BYTES; whole pages, at least one.
static int64_t pin_chunk_bytes(void) {
    const char *s = getenv("MT_PIN_CHUNK_BYTES");
    int64_t chunk = s && *s ? strtoll(s, NULL, 10) : PIN_CHUNK_BYTES, page = 4096;
    return chunk < page ? page : chunk / page * page;
}

// Pins every host range, each in chunks cut at multiples of the chunk size
// (page boundaries: no page in two chunks), and prints what it pinned and
// how long that took (pinning hundreds of GB on 4 KiB pages takes minutes).
// 0, or -1 with a message naming the range, its size and the failed chunk.
static int pin_ranges(Cuda *c, const HostRange *pin, int npin) {
    int64_t chunk = pin_chunk_bytes(), total = 0;
    int calls = 0;
    for (int i = 0; i < npin; i++)
        if (pin[i].bytes)
            calls += (int)(((uintptr_t)pin[i].ptr % (uint64_t)chunk + (uint64_t)pin[i].bytes + (uint64_t)chunk - 1) /
                           (uint64_t)chunk);
    if (!(c->pinned = calloc((size_t)calls + 1, sizeof *c->pinned))) {
        snprintf(c->err, sizeof c->err, "out of memory");
        return -1;
    }
    double t0 = trace_clock_s();
    for (int i = 0; i < npin; i++) {
        char *at = pin[i].ptr, *end = at + pin[i].bytes;
        while (at < end) {
            char *next = (char *)(((uintptr_t)at / (uint64_t)chunk + 1) *
                                  (uint64_t)chunk); // the next multiple of chunk
            if (next > end) next = end;
            cudaError_t e = cudaHostRegister(at, (size_t)(next - at), cudaHostRegisterDefault);
            if (e != cudaSuccess) {
                snprintf(c->err, sizeof c->err,
                         "cannot pin %s (%lld bytes) for the GPU's copies: cudaHostRegister of "
                         "%lld bytes at offset %lld: %s",
                         pin[i].what, (long long)pin[i].bytes, (long long)(next - at),
                         (long long)(at - (char *)pin[i].ptr), cudaGetErrorString(e));
                return -1;
            }
            c->pinned[c->npinned++] = at;
            at = next;
        }
        total += pin[i].bytes;
    }
    if (total)
        printf("cuda: pinned %lld bytes of host memory (%d cudaHostRegister calls of at most %lld bytes) in %.2f s\n",
               (long long)total, c->npinned, (long long)chunk, trace_clock_s() - t0);
    return 0;
}

int backend_cuda_devices(char *why, size_t cap);
int backend_cuda_devices(char *why, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        snprintf(why, cap, "no CUDA device (cudaGetDeviceCount: %s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(why, cap, "%s, sm_%d%d, %.1f GB", prop.name, prop.major, prop.minor,
                 (double)prop.totalGlobalMem / 1e9);
    else snprintf(why, cap, "%d CUDA device%s", n, n == 1 ? "" : "s");
    return n;
}

// The MPI collectives' way to device buffers where there is no NCCL: a
// copy after what the stream has queued, waited for.
static int comm_to_host(void *ctx, void *host, const void *buf, size_t bytes, void *stream, char *err, size_t errcap) {
    Cuda *c = ctx;
    if (RT(c, NULL, cudaMemcpyAsync(host, buf, bytes, cudaMemcpyDeviceToHost, stream)) &&
        RT(c, NULL, cudaStreamSynchronize(stream)))
        return 0;
    snprintf(err, errcap, "%s", c->err);
    return -1;
}
static int comm_to_buf(void *ctx, void *buf, const void *host, size_t bytes, void *stream, char *err, size_t errcap) {
    Cuda *c = ctx;
    if (RT(c, NULL, cudaMemcpyAsync(buf, host, bytes, cudaMemcpyHostToDevice, stream)) &&
        RT(c, NULL, cudaStreamSynchronize(stream)))
        return 0;
    snprintf(err, errcap, "%s", c->err);
    return -1;
}

// The ranks' collectives on the communication stream, checked once at
// start-up, each kind a plan runs: every rank's device index plus one,
// summed, must come back as the sum over the ranks (an all-reduce), and
// the ranks' r + 1 all-gathered, then reduce-scattered, must give r + 1
// everywhere and (r + 1) x ranks in rank r's place (a communicator that
// does not work fails here, not in the first step). NCCL connects its
// buffers at a collective's first call, so the device memory all this
// took, NCCL's own buffers, is known once they ran: c->comm_bytes, which
// the check of the plan against the card's free memory then sees gone.
// 0, or -1 with a message in c->err.
static int open_comm(Cuda *c, const Dist *dist) {
#ifdef MT_HAVE_NCCL
    int nccl = 1;
#else
    int nccl = 0;
#endif
    if (nccl && dist->local > c->devices) { // (NCCL refuses two ranks of one communicator on one GPU)
        snprintf(c->err, sizeof c->err,
                 "cuda: %d ranks on this machine but %d GPU%s: NCCL needs a GPU for each rank; "
                 "start at most %d ranks a machine",
                 dist->local, c->devices, c->devices == 1 ? "" : "s", c->devices);
        return -1;
    }
    CommStaging staging = {comm_to_host, comm_to_buf, c};
    char why[512] = "";
    size_t free0 = 0, free1 = 0, total = 0;
    if (!RT(c, NULL, cudaMemGetInfo(&free0, &total)) ||
        !RT(c, NULL, cudaStreamCreateWithFlags(&c->comm_stream, cudaStreamNonBlocking)))
        return -1;
    if (comm_open(&c->comm, dist, nccl, nccl ? NULL : &staging, why, sizeof why) != 0) {
        snprintf(c->err, sizeof c->err, "cuda: %s", why);
        return -1;
    }
    int n = dist->size, ok = 1;
    float *buf = NULL, *got = calloc((size_t)n + 1, sizeof *got), want = 0; // (n) on the device and here
    if (!got || !RT(c, NULL, cudaMalloc((void **)&buf, (size_t)n * sizeof *buf))) ok = 0;
    else got[0] = (float)(c->device + 1);
    if (ok && (!RT(c, NULL, cudaMemcpy(buf, got, sizeof *got, cudaMemcpyHostToDevice)) ||
               comm_all_reduce(&c->comm, buf, 1, COMM_F32, c->comm_stream, why, sizeof why) != 0 ||
               !RT(c, NULL, cudaStreamSynchronize(c->comm_stream)) ||
               !RT(c, NULL, cudaMemcpy(got, buf, sizeof *got, cudaMemcpyDeviceToHost))))
        ok = 0;
    for (int r = 0; r < n; r++) want += (float)(r % c->devices + 1); // (every rank's device; one machine)
    if (ok && dist->local == n && got[0] != want)
        snprintf(why, sizeof why, "the ranks' start-up all-reduce gave %g, not %g", (double)got[0], (double)want),
            ok = 0;
    float mine = (float)(dist->rank + 1);
    if (ok && (!RT(c, NULL, cudaMemcpy(buf + dist->rank, &mine, sizeof mine, cudaMemcpyHostToDevice)) ||
               comm_all_gather(&c->comm, buf, 1, COMM_F32, c->comm_stream, why, sizeof why) != 0 ||
               !RT(c, NULL, cudaStreamSynchronize(c->comm_stream)) ||
               !RT(c, NULL, cudaMemcpy(got, buf, (size_t)n * sizeof *got, cudaMemcpyDeviceToHost))))
        ok = 0;
    for (int r = 0; ok && r < n; r++)
        if (got[r] != (float)(r + 1))
            snprintf(why, sizeof why, "the ranks' start-up all-gather gave %g for rank %d, not %d", (double)got[r], r,
                     r + 1),
                ok = 0;
    if (ok && (comm_reduce_scatter(&c->comm, buf, 1, COMM_F32, c->comm_stream, why, sizeof why) != 0 ||
               !RT(c, NULL, cudaStreamSynchronize(c->comm_stream)) ||
               !RT(c, NULL, cudaMemcpy(&mine, buf + dist->rank, sizeof mine, cudaMemcpyDeviceToHost))))
        ok = 0;
    if (ok && mine != (float)((dist->rank + 1) * n))
        snprintf(why, sizeof why, "the ranks' start-up reduce-scatter gave %g, not %d", (double)mine,
                 (dist->rank + 1) * n),
            ok = 0;
    if (buf) cudaFree(buf);
    free(got);
    if (!ok && !failed(c)) snprintf(c->err, sizeof c->err, "cuda: %s", *why ? why : "out of memory");
    if (!ok || !RT(c, NULL, cudaMemGetInfo(&free1, &total))) return -1;
    c->comm_bytes = free0 > free1 ? free0 - free1 : 0;
    return 0;
}

Backend *backend_cuda_create(const Plan *p, const HostRange *pin, int npin, const char *trace_path, const Dist *dist,
                             char *err, size_t errcap);
// What backend_cuda_create learns of the GPU and the plan on the way.
typedef struct {
    struct cudaDeviceProp prop;
    int ptx;            // 1: the plan's PTX, for a GPU newer than its cubin
    int widen;          // 1: the plan widens bf16 in the arena (INS_COPY XFER_BF16): its module's mt_widen_bf16
    int nscratch;       // engines that run kernels, each with its scratch
    int64_t arena;      // the arena's bytes, rounded up to 256
    int64_t doc_starts; // the document starts' bytes after the scratch
    int64_t opt;        // the optimizer's device store after them (plan_opt_device_bytes)
} CudaOpen;

// The GPU of this rank, and whether it can run the plan's kernels.
static int open_device(Cuda *c, const Dist *dist, CudaOpen *o) {
    const Plan *p = c->p;
    // the host waits by sleeping: no core spins while AdamW needs it
    cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync);
    if (!RT(c, NULL, cudaGetDeviceCount(&c->devices))) return -1;
    c->device = dist && c->devices > 0 ? dist->local_rank % c->devices : 0; // each rank on a machine its own GPU
    if (!RT(c, NULL, cudaSetDevice(c->device)) || !RT(c, NULL, cudaFree(NULL)) ||
        !CU(c, NULL, cuCtxGetCurrent(&c->cuctx)) || !RT(c, NULL, cudaGetDeviceProperties(&o->prop, c->device)))
        return -1;
    int gpu_sm = o->prop.major * 10 + o->prop.minor, plan_sm = atoi(p->cuda_arch + 3);
    o->ptx = gpu_sm != plan_sm;
    if (gpu_sm < plan_sm) {
        snprintf(c->err, sizeof c->err,
                 "the plan's kernels are for %s but this GPU (%s) is sm_%d; compile the plan "
                 "for a target of this GPU's architecture",
                 p->cuda_arch, o->prop.name, gpu_sm);
        return -1;
    }
    if (o->ptx && !p->ptx_len) {
        snprintf(c->err, sizeof c->err, "this GPU (%s, sm_%d) is newer than the plan's %s and the plan carries no PTX",
                 o->prop.name, gpu_sm, p->cuda_arch);
        return -1;
    }
    snprintf(c->name, sizeof c->name, "cuda: %s (device %d of %d, sm_%d, the plan's %s %s)", o->prop.name, c->device,
             c->devices, gpu_sm, p->cuda_arch, o->ptx ? "PTX" : "cubin");
    return 0;
}

// What the plan's instructions and kernel IR ask of the backend: the ring's
// slot for COPY_OUT, which engines run kernels, bf16 widening, bf16 kernels.
static int read_plan_needs(Cuda *c, CudaOpen *o) {
    const Plan *p = c->p;
    for (int i = 0; i < p->ntrain + p->neval; i++) {
        const Instr *in = i < p->ntrain ? &p->train[i] : &p->eval[i - p->ntrain];
        if (in->kind == INS_COPY_OUT && in->bytes > c->ring.slot_bytes) c->ring.slot_bytes = in->bytes;
        if (in->kind == INS_RUN) c->scratch[in->engine] = c->name; // marked: this engine runs kernels
        if (in->kind == INS_COPY && (in->flags & XFER_BF16)) o->widen = 1;
    }
    c->scratch[ENG_COMPUTE] = c->name; // (operations outside a stream run there)
    int nnodes[PART_COUNT];
    for (int pk = 0; pk < PART_COUNT; pk++) nnodes[pk] = p->graph->parts[pk].nodes.n;
    if (kir_read(&c->prog, p->kernels_bytes, p->kernels_len, graph_nparts(p->graph), nnodes, &c->karena, c->err,
                 sizeof c->err) != 0)
        return -1;
    for (int pk = 0; pk < PART_COUNT; pk++)
        for (int i = 0; i < c->prog.parts[pk].n; i++)
            for (int a = 0; a < c->prog.parts[pk].k[i].nargs; a++)
                c->bf16 |= c->prog.parts[pk].k[i].args[a].dtype == KT_BF16;
    return 0;
}

// One device allocation: the arena, then each kernel-running engine's
// scratch of the size the plan records (common/scratch.h), which mtc
// counted in the plan's device memory, then the document starts. The
// ranks' collectives open first: NCCL's own buffers come off the free memory.
static int alloc_device(Cuda *c, const Dist *dist, CudaOpen *o) {
    const Plan *p = c->p;
    int64_t need = program_scratch_bytes(&c->prog, p->graph);
    if (p->scratch_bytes < need) {
        snprintf(c->err, sizeof c->err,
                 "the plan records %lld bytes of kernel scratch per engine but its kernels need "
                 "%lld; recompile it with this mtc",
                 (long long)p->scratch_bytes, (long long)need);
        return -1;
    }
    c->scratch_bytes = p->scratch_bytes;
    for (int e = 0; e < ENG_COUNT; e++) o->nscratch += c->scratch[e] != NULL;
    o->arena = (p->arena_bytes + 255) & ~(int64_t)255, o->doc_starts = plan_doc_starts_bytes(p);
    o->opt = plan_opt_device_bytes(p);
    c->dev_bytes = plan_device_bytes(p);
    if (o->nscratch != plan_scratch_engines(p) ||
        c->dev_bytes != o->arena + o->nscratch * c->scratch_bytes + o->doc_starts + o->opt ||
        o->doc_starts < p->graph->train.batch * p->graph->train.seq * 4) {
        snprintf(c->err, sizeof c->err, "internal error: %d engines run kernels, common/scratch.h counts %d",
                 o->nscratch, plan_scratch_engines(p));
        return -1;
    }
    if (dist && dist->mpi && dist->size > 1) {
        if (open_comm(c, dist) != 0) return -1;
        char how[64];
        size_t k = strlen(c->name);
        snprintf(c->name + k, sizeof c->name - k, ", collectives by %s", comm_describe(&c->comm, how, sizeof how));
        k = strlen(c->name);
        if (c->comm_bytes)
            snprintf(c->name + k, sizeof c->name - k, " (%.1f MB of device memory)", (double)c->comm_bytes / 1e6);
    }
    size_t free_b = 0, total_b = 0;
    if (!RT(c, NULL, cudaMemGetInfo(&free_b, &total_b))) return -1;
    if ((size_t)c->dev_bytes > free_b) {
        char nccl[160] = "";
        if (c->comm_bytes)
            snprintf(nccl, sizeof nccl, " after the ranks' collectives took %zu for their buffers", c->comm_bytes);
        snprintf(c->err, sizeof c->err,
                 "the plan needs %lld bytes of device memory (arena %lld, scratch %lld, document "
                 "starts %lld, the optimizer %lld) but %s has %zu free of %zu%s; compile the plan for a target with "
                 "less device memory",
                 (long long)c->dev_bytes, (long long)p->arena_bytes,
                 (long long)(c->dev_bytes - o->arena - o->doc_starts - o->opt), (long long)o->doc_starts,
                 (long long)o->opt, o->prop.name, free_b, total_b, nccl);
        return -1;
    }
    void *dev = NULL;
    if (!RT(c, NULL, cudaMalloc(&dev, (size_t)c->dev_bytes))) return -1;
    c->dev = dev;
    for (int e = 0, k = 0; e < ENG_COUNT; e++)
        if (c->scratch[e]) c->scratch[e] = c->dev + o->arena + (k++) * c->scratch_bytes;
    c->doc_starts_dev = (int *)(void *)(c->dev + o->arena + o->nscratch * c->scratch_bytes); // (B, T)
    if (!RT(c, NULL, cudaMemset(c->dev, 0xff, (size_t)c->dev_bytes))) return -1; // nothing written yet reads as NaN
    int64_t pooled_layers, pooled_rows, pooled_E = graph_pooled_experts(p->graph, &pooled_layers, &pooled_rows);
    c->pool = (LoadBalancePool){.layers = p->graph->layers, .rows = (double)(pooled_layers * pooled_rows)};
    if (pooled_E) { // the rows of layers without one stay 0
        size_t bytes = (size_t)(p->graph->layers * 2 * pooled_E) * sizeof(double);
        void *sums = NULL;
        if (!RT(c, NULL, cudaMalloc(&sums, bytes))) return -1;
        c->pool.sums = sums;
        if (!RT(c, NULL, cudaMemset(sums, 0, bytes))) return -1;
    }
    return 0;
}

// The engines' streams and staging words, the gradients' ring and its
// thread, the LOSS instructions' pinned slots, the plan's events.
static int open_streams(Cuda *c, Backend *be) {
    const Plan *p = c->p;
    for (int e = 0; e < ENG_COUNT; e++) {
        void *s = NULL;
        if (!RT(c, NULL, cudaStreamCreateWithFlags(&c->stream[e], cudaStreamNonBlocking)) ||
            !RT(c, NULL, cudaHostAlloc(&s, 4, cudaHostAllocDefault)))
            return -1;
        c->staging[e] = s;
    }
    GradsRing *r = &c->ring; // slots of the largest COPY_OUT, at most RING_SLOT_MAX_BYTES (MT_RING_SLOT_BYTES in tests)
    const char *rs = getenv("MT_RING_SLOT_BYTES");
    int64_t slot_max = rs && atoll(rs) >= 4 ? atoll(rs) : RING_SLOT_MAX_BYTES;
    r->slot_bytes = r->slot_bytes < 4 ? 4 : r->slot_bytes > slot_max ? slot_max : r->slot_bytes;
    for (int k = 0; k < RING_SLOTS; k++) {
        void *s = NULL;
        if (!RT(c, NULL, cudaHostAlloc(&s, (size_t)r->slot_bytes, cudaHostAllocDefault)) ||
            !RT(c, NULL, cudaEventCreateWithFlags(&r->copied[k], cudaEventBlockingSync | cudaEventDisableTiming)))
            return -1;
        r->slot[k] = s;
    }
    if (pthread_mutex_init(&r->mu, NULL) != 0 || pthread_cond_init(&r->cv, NULL) != 0 ||
        pthread_create(&r->thread, NULL, ring_main, be) != 0) {
        snprintf(c->err, sizeof c->err, "cuda: cannot start the gradients' ring thread");
        return -1;
    }
    r->started = 1;
    for (int i = 0; i < p->ntrain + p->neval; i++) // a pinned slot per LOSS instruction
        c->nloss_cap += (i < p->ntrain ? p->train[i].kind : p->eval[i - p->ntrain].kind) == INS_LOSS;
    void *slots = NULL;
    if (!RT(c, NULL, cudaHostAlloc(&slots, (size_t)(c->nloss_cap + 1) * sizeof(float), cudaHostAllocDefault)) ||
        !(c->loss_dst = calloc((size_t)c->nloss_cap + 1, sizeof *c->loss_dst)))
        return -1;
    c->loss_host = slots;
    if (!(c->event = calloc((size_t)p->nevents + 1, sizeof *c->event))) return -1;
    for (int i = 0; i < p->nevents; i++)
        if (!RT(c, NULL, cudaEventCreateWithFlags(&c->event[i], cudaEventBlockingSync | cudaEventDisableTiming)))
            return -1;
    return 0;
}

// The kernels: the cubin of the plan's architecture, its PTX (NUL-terminated)
// on a newer GPU; cuBLASLt.
static int load_module(Cuda *c, const CudaOpen *o) {
    const Plan *p = c->p;
    char *image = NULL;
    if (o->ptx && (image = malloc(p->ptx_len + 1))) memcpy(image, p->ptx, p->ptx_len), image[p->ptx_len] = 0;
    if (o->ptx && !image) return -1;
    int loaded = CU(c, NULL, cuModuleLoadData(&c->mod, o->ptx ? (const void *)image : (const void *)p->cubin));
    free(image);
    if (!loaded || !LT(c, NULL, cublasLtCreate(&c->lt)) || load_kernels(c) != 0) return -1;
    if (o->widen && get_function(c, &c->widen, "mt_widen_bf16", 0) != 0) {
        snprintf(c->err, sizeof c->err,
                 "this plan widens bf16 gradients on the device (a sharded bf16 plan) but its "
                 "kernels have no mt_widen_bf16: recompile it with this mtc");
        return -1;
    }
    return 0;
}

// The device store's place (after the document starts), the norm's chunk
// sums, the three kernels and the host store's calls, where the plan
// places anything on the device.
static int open_opt(Cuda *c, Backend *be, int64_t at) {
    const Plan *p = c->p;
    if (!plan_opt_device_bytes(p)) return 0;
    c->opt = c->dev + at;
    for (int64_t s = SEG_FIRST; s < p->graph->layers; s++) {
        int64_t chunks = (plan_segment_len(p, s) + ADAMW_NORM_CHUNK - 1) / ADAMW_NORM_CHUNK;
        if (plan_opt_device(p, s) && chunks > c->opt_chunks) c->opt_chunks = chunks;
    }
    void *sums = NULL, *host = NULL;
    if (!RT(c, NULL, cudaMalloc(&sums, (size_t)(c->opt_chunks + 1) * sizeof(double))) ||
        !RT(c, NULL, cudaHostAlloc(&host, (size_t)(c->opt_chunks + 1) * sizeof(double), cudaHostAllocDefault)))
        return -1;
    c->opt_sums = sums, c->opt_sums_host = host;
    if (get_function(c, &c->adamw, "mt_adamw", 0) != 0 || get_function(c, &c->grads_add, "mt_grads_add", 0) != 0 ||
        get_function(c, &c->sq_norm_chunks, "mt_sq_norm_chunks", 0) != 0) {
        snprintf(c->err, sizeof c->err,
                 "this plan places the optimizer on the device but its kernels have no mt_adamw, mt_grads_add or "
                 "mt_sq_norm_chunks: recompile it with this mtc");
        return -1;
    }
    c->opt_store = (StoreDevice){.ctx = c,
                                 .sq_norm = cuda_opt_sq_norm,
                                 .update = cuda_opt_update,
                                 .zero_grads = cuda_opt_zero_grads,
                                 .move = cuda_opt_move};
    be->opt_copy_in = cuda_opt_copy_in, be->opt_copy_out = cuda_opt_copy_out, be->opt_store = &c->opt_store;
    return 0;
}

// --trace: the file, and the epoch every timing event is measured from.
static int open_trace(Cuda *c, Backend *be, const char *trace_path) {
    if (trace_open(&c->trace, trace_path, c->err, sizeof c->err) != 0) return -1;
    if (!RT(c, NULL, cudaEventCreate(&c->epoch)) || !RT(c, NULL, cudaEventRecord(c->epoch, c->stream[ENG_COMPUTE])) ||
        !RT(c, NULL, cudaEventSynchronize(c->epoch)))
        return -1;
    c->epoch_host = trace_clock_s();
    be->trace_host = cuda_trace_host;
    return 0;
}

Backend *backend_cuda_create(const Plan *p, const HostRange *pin, int npin, const char *trace_path, const Dist *dist,
                             char *err, size_t errcap) {
    if (!p->cuda_arch || (!p->cubin_len && !p->ptx_len) || !p->kernels_len) {
        snprintf(err, errcap,
                 "this plan carries no CUDA kernels (it was compiled for a cpu target); compile it for "
                 "a GPU target (mtc --target h200, or a profile of this GPU)");
        return NULL;
    }
    Backend *be = calloc(1, sizeof *be);
    Cuda *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be), free(c);
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    c->p = p;
    c->poison_free = getenv("MT_POISON_FREE") && !strcmp(getenv("MT_POISON_FREE"), "1");
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->trace_mu, NULL);
    *be = (Backend){.name = c->name,
                    .ctx = c,
                    .copy_in = cuda_copy_in,
                    .copy_out_add = cuda_copy_out_add,
                    .copy_out = cuda_copy_out,
                    .copy = cuda_copy,
                    .copy_widen = cuda_copy_widen,
                    .collective = cuda_collective,
                    .poison = cuda_poison,
                    .run = cuda_run,
                    .read_scalar = cuda_read_scalar,
                    .read_scalar_async = cuda_read_scalar_async,
                    .record = cuda_record,
                    .wait = cuda_wait,
                    .finish = cuda_finish,
                    .set_doc_starts = cuda_set_doc_starts,
                    .destroy = cuda_destroy};
    CudaOpen o = {0};
    if (open_device(c, dist, &o) == 0 && read_plan_needs(c, &o) == 0 && alloc_device(c, dist, &o) == 0 &&
        pin_ranges(c, pin, npin) == 0 && // the host memory the streams read and write: pinned now, or refused
        open_streams(c, be) == 0 && load_module(c, &o) == 0 && open_opt(c, be, c->dev_bytes - o.opt) == 0 &&
        (!trace_path || open_trace(c, be, trace_path) == 0))
        return be;
    refuse(c, err, errcap);
    if (!*err) snprintf(err, errcap, "cuda: out of memory");
    cuda_destroy(be);
    return NULL;
}
