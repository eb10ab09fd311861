// backend.h: what a device must do to replay a plan: hold the arena, copy
// between host and arena, poison dead regions, and run parts of the graph,
// each operation on the engine of the plan instruction that asks for it.
// A backend is a struct of function pointers: cpu (backend_cpu.c) and cuda
// (backend_cuda.c, a shared object mtrun loads with dlopen). replay.c
// drives both.
//
// Every operation takes the instruction it serves (`in`: its engine, its
// layer; NULL outside a stream: tests, the compute engine). On the cpu an
// operation is done when it returns. A backend with `record` set is
// asynchronous: an operation is only queued on its engine (a CUDA stream),
// and the replay joins engines through record and wait, as the plan's
// events say; finish drains every engine.
#ifndef MT_BACKEND_H
#define MT_BACKEND_H

#include <stddef.h>

#include "common/plan.h"
#include "runtime/dist/dist.h"
#include "runtime/store/store.h"

typedef struct Backend Backend;
struct Dist;
struct Backend {
    const char *name;
    void *ctx;
    int host_threads; // threads an asynchronous backend's COPY_OUT may add its gradients on (0 or 1: its own)
    // host -> arena [dst, dst + bytes)
    void (*copy_in)(Backend *be, const Instr *in, int64_t dst, const void *host, int64_t bytes);
    // arena [src, src + bytes), fp32 or (flags GRADS_BF16) bf16, added into
    // host floats, or (GRADS_SET: they hold zeros, store_grads_out) set
    void (*copy_out_add)(Backend *be, const Instr *in, float *host, int64_t src, int64_t bytes, int flags);
    // arena [src, src + bytes) -> host bytes (the host activation store)
    void (*copy_out)(Backend *be, const Instr *in, void *host, int64_t src, int64_t bytes);
    // arena -> arena
    void (*copy)(Backend *be, const Instr *in, int64_t dst, int64_t src, int64_t bytes);
    // INS_COPY XFER_BF16: the bf16 values at arena src widened into the fp32 arena [dst, dst + bytes) (bytes the
    // fp32 ones). NULL: a backend that cannot, which refuses sharded plans (the only ones that ask)
    void (*copy_widen)(Backend *be, const Instr *in, int64_t dst, int64_t src, int64_t bytes);
    // A sharded plan's collectives on its comm engine, INS_ALLGATHER and INS_REDUCE_SCATTER, in place on the
    // arena over the ranks of `dist` (runtime/dist/dist.h), as common/plan.h says, both backends through
    // comm_plan_collective (runtime/dist/comm.h): the cpu backend's with MPI on the arena, the cuda backend's queued
    // on its comm stream (ENG_COMM) by NCCL, or by MPI through host copies where it has no NCCL (the CPU
    // emulation). 0, or -1 with a message (a failed MPI or NCCL call, out of memory), after which the replay
    // issues nothing more of the stream and the run ends: the other ranks may wait in a collective this one
    // will never join (mtrun's dist_close ends the job). An asynchronous backend also keeps the failure for
    // finish. NULL: a backend without collectives, which refuses sharded plans.
    int (*collective)(Backend *be, const Instr *in, const struct Dist *dist, char *err, size_t errcap);
    // arena [dst, dst + bytes) holds nothing from now on (quiet NaNs: 0x7fc00000 on the cpu, all ones on cuda)
    void (*poison)(Backend *be, const Instr *in, int64_t dst, int64_t bytes);
    // runs nodes [from, to) of a part at block frame `frame`'s arena offsets
    // (plan_offsets); flags RUN_* (RUN_SKIP_HEAVY: matmul and attention
    // nodes are not run, their buffers already hold their values)
    void (*run)(Backend *be, const Instr *in, PartKind part, int from, int to, int frame, int flags);
    // The document starts (B, T) of the micro-batch whose stream replays next
    // (kernels.h: seg_start; data.h, X.docs), or NULL: rows are one stream.
    // Data like the tokens: replay() passes Replay.seg_start before the
    // stream's first instruction, and every attention kernel of the stream
    // takes it as its argument (the cpu's by pointer, the cuda backend's from
    // its own device copy). 0, or -1 with a message (a backend whose kernels
    // cannot mask documents).
    int (*set_doc_starts)(Backend *be, const int32_t *seg_start, char *err, size_t errcap);
    // the float at arena src, once everything before it on in's engine is done
    float (*read_scalar)(Backend *be, const Instr *in, int64_t src);
    // An asynchronous backend's INS_LOSS (NULL: read_scalar): the float at
    // arena src, once everything before it on in's engine is done, lands in
    // *dst by the time finish returns; no engine waits for it mid-step
    void (*read_scalar_async)(Backend *be, const Instr *in, int64_t src, float *dst);
    // Asynchronous backends only (NULL on the cpu):
    // INS_RECORD `in`: its event fires when its engine's work so far is done
    void (*record)(Backend *be, const Instr *in);
    // INS_WAIT `in`, once the replay saw its event's RECORD (on engine
    // `recorder`) issued: nothing after it on in's engine starts before the
    // event fired (a host engine blocks until then, without spinning)
    void (*wait)(Backend *be, const Instr *in, int recorder);
    // every engine drained; 0, or -1 with the first failure (the call, the
    // instruction, its engine and layer) in err
    int (*finish)(Backend *be, char *err, size_t errcap);
    // --trace (NULL: not tracing): an instruction the replay timed ran from
    // t0 to t1 (CLOCK_MONOTONIC seconds). The replay times every instruction
    // of a synchronous backend (the cpu's), and of an asynchronous one only
    // the host engine's work (NORM, UPDATE): it times its engines' itself.
    void (*trace_host)(Backend *be, const Instr *in, double t0, double t1);
    // The optimizer of the segments the plan places on the device (Plan.opt_device), in the backend's
    // device store (common/scratch.h, plan_opt_device_at). NULL, all three, on a backend without one (the
    // cpu's: there placement is a no-op and the host store does everything, as for any plan).
    // opt_copy_in: a placed segment's COPY_IN, its streamed copy (XFER_BF16: the bf16 copy, else the fp32
    // master) from the device store into arena [dst, dst + bytes), on in's engine, device to device.
    // opt_copy_out: a placed segment's COPY_OUT, arena [src, src + bytes) (XFER_BF16: bf16, widened) added
    // into its fp32 gradient accumulators from element dst, or (set: they hold zeros) stored there.
    // opt_store: the norms, updates and moves the host store hands the backend (store.h, StoreDevice).
    void (*opt_copy_in)(Backend *be, const Instr *in);
    void (*opt_copy_out)(Backend *be, const Instr *in, int set);
    const StoreDevice *opt_store;
    void (*destroy)(Backend *be);
};

// The cpu backend: the arena is one host buffer of exactly p->arena_bytes,
// refused when that exceeds the target's device memory p->device_limit;
// copies are memcpy, nodes run through the plan's JIT-compiled kernels
// (jit.h), or the plain kernels (kernels.h) of a plan without them. Every arena byte
// starts as a quiet NaN. NULL with a message in err.
Backend *backend_cpu_create(const Plan *p, char *err, size_t errcap);

// mtrun --trace on the cpu backend: every instruction the replay runs, timed
// with the host clock, into path as Chrome trace JSON (common/trace.h), on
// the tracks of mtc --trace; written as it runs, closed by destroy. 0, or -1
// with a message in err.
int backend_cpu_trace(Backend *be, const char *path, char *err, size_t errcap);

// Host memory an asynchronous backend reads or writes while its engines run
// (the streamed weights, the host activation store): the cuda backend pins
// it up front or refuses.
typedef struct HostRange {
    void *ptr;
    int64_t bytes;
    const char *what; // "the bf16 weights"
} HostRange;

// The cuda backend (backend_cuda.c, in libmt_cuda.so): its entry points,
// looked up by name with dlsym (device.c).
//   int  backend_cuda_devices(char *why, size_t cap): CUDA devices (0: why)
//   Backend *backend_cuda_create(const Plan *p, const HostRange *pin, int npin, const char *trace_path,
//                                const Dist *dist, char *err, size_t errcap)
// (dist: the ranks, NULL for one process: each rank runs on the GPU of its
// local rank modulo the machine's, and opens the ranks' collectives, comm.h)
typedef int (*BackendCudaDevicesFn)(char *why, size_t cap);
typedef Backend *(*BackendCudaCreateFn)(const Plan *p, const HostRange *pin, int npin, const char *trace_path,
                                        const Dist *dist, char *err, size_t errcap);

// Fills bytes at dst with the bytes of quiet-NaN floats (0x7fc00000), as
// if dst were 4-byte aligned. Shared by the arena and the host activation
// store.
void backend_fill_nan(void *dst, int64_t bytes);

#endif
