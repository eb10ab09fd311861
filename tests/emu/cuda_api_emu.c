// cuda_api_emu.c: the CUDA runtime, driver and cuBLASLt calls that
// runtime/backend/backend_cuda.c makes, emulated on the CPU for tests (the build
// links a second copy of the backend, libmt_cuda_emu.so, against this
// instead of libcudart, libcuda and libcublasLt). Types and names come from
// the toolkit's own headers, so the backend compiles unchanged. What it
// models and what it does not: tests/emu/README.md.
//
//   device memory  host memory (malloc); pinning does nothing. Registering
//                  keeps the ranges, refuses one that shares a page with a
//                  range registered (cudaErrorHostMemoryAlreadyRegistered)
//                  or, with MT_CUDA_EMU_PIN_MAX=BYTES, one larger than that
//                  (as r580 drivers refuse 512 GiB or more), and with
//                  MT_CUDA_EMU_PIN_LOG=FILE appends "register OFFSET BYTES"
//                  and "unregister OFFSET" lines to FILE, offsets from the
//                  first range registered
//   streams        a host thread each, running its queue in order, with a
//                  seeded random pause before each operation (up to 0, 50 or
//                  500 us, drawn per stream: MT_CUDA_EMU_SEED), so that a
//                  missing wait shows as a wrong value rather than luck; a
//                  copy fills its destination with NaN first and takes at
//                  least 200 us, so a read that races it reads NaN
//   events         a record counter and a completion counter: a stream's wait
//                  holds its thread until the event's record at the time of
//                  the wait completed; cudaEventSynchronize sleeps likewise
//   contexts       one primary context, current on a thread once it called
//                  cudaSetDevice, cudaFree or cuCtxSetCurrent (stricter than
//                  the runtime); cuLaunchKernel on a thread without it fails
//   kernels        cuModuleLoadData ignores the image and loads the shared
//                  object MT_CUDA_EMU_KERNELS names instead: the plan's
//                  translation unit (mtc --emit-cuda) compiled for the host
//                  with tests/emu/cuda_emu.h and its kernel table; one kernel
//                  runs at a time (the emulation's block state is global)
//   cuBLASLt       column-major matmuls of bf16 or f32 operands, served by
//                  the host BLAS in f32 (bf16 widened, the result rounded),
//                  each with an algorithm its heuristic returned
#include <cblas.h>
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ---------------------------------------------------------------- streams and events

typedef enum { OP_COPY, OP_SET, OP_LAUNCH, OP_GEMM, OP_RECORD, OP_WAIT } OpKind;

struct CUevent_st {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded, completed; // records issued, records completed
    double t;                     // when the last record completed, seconds
};

typedef struct Op {
    OpKind kind;
    struct Op *next;
    void *dst;
    const void *src;
    size_t bytes;
    int value;
    struct CUevent_st *ev;
    uint64_t gen;
    // OP_LAUNCH
    const char *name;
    unsigned grid[3], block;
    size_t smem;
    void **args;  // (nargs) pointers into params
    char *params; // the parameter values, copied at launch
    // OP_GEMM
    void (*gemm)(struct Op *);
    void *g; // its closure
} Op;

struct CUstream_st {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    Op *head, *tail;
    int busy, stop;
    uint64_t rng;
    unsigned max_pause_us;
};

static pthread_mutex_t launch_mu = PTHREAD_MUTEX_INITIALIZER; // one kernel at a time
static int (*emu_launch)(const char *, unsigned, unsigned, unsigned, unsigned, size_t, void **);
static int (*emu_params)(const char *, unsigned *, int);
static size_t device_bytes, device_peak;
static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t stream_seed;
enum { COPY_PAUSE_US = 200 }; // the least time a copy's destination holds NaN

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t next_random(uint64_t *s) { // splitmix64
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void run_op(Op *op) {
    switch (op->kind) {
    case OP_COPY: memmove(op->dst, op->src, op->bytes); break;
    case OP_SET: memset(op->dst, op->value, op->bytes); break;
    case OP_LAUNCH:
        pthread_mutex_lock(&launch_mu);
        if (emu_launch(op->name, op->grid[0], op->grid[1], op->grid[2], op->block, op->smem, op->args) != 0) {
            fprintf(stderr, "cuda_api_emu: the launch of %s failed\n", op->name);
            abort();
        }
        pthread_mutex_unlock(&launch_mu);
        break;
    case OP_GEMM: op->gemm(op); break;
    case OP_RECORD:
        pthread_mutex_lock(&op->ev->mu);
        if (op->gen > op->ev->completed) op->ev->completed = op->gen, op->ev->t = now_s();
        pthread_cond_broadcast(&op->ev->cv);
        pthread_mutex_unlock(&op->ev->mu);
        break;
    case OP_WAIT:
        pthread_mutex_lock(&op->ev->mu);
        while (op->ev->completed < op->gen) pthread_cond_wait(&op->ev->cv, &op->ev->mu);
        pthread_mutex_unlock(&op->ev->mu);
        break;
    }
}

static void *stream_main(void *arg) {
    struct CUstream_st *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break;
        Op *op = s->head;
        s->busy = 1;
        pthread_mutex_unlock(&s->mu);
        // A copy's destination holds NaN from its start to its end (as a real
        // copy's is half written), and a copy pauses at least COPY_PAUSE_US
        // there: a reader the plan forgot to order after it reads NaN.
        int poison = op->kind == OP_COPY && ((const char *)op->dst + op->bytes <= (const char *)op->src ||
                                             (const char *)op->src + op->bytes <= (const char *)op->dst);
        if (poison) memset(op->dst, 0xFF, op->bytes);
        unsigned pause_us = s->max_pause_us ? (unsigned)(next_random(&s->rng) % s->max_pause_us) : 0;
        if (poison && pause_us < COPY_PAUSE_US) pause_us = COPY_PAUSE_US;
        if (pause_us && op->kind != OP_WAIT) nanosleep(&(struct timespec){0, (long)pause_us * 1000}, NULL);
        run_op(op);
        pthread_mutex_lock(&s->mu);
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        s->busy = 0;
        pthread_cond_broadcast(&s->cv);
        free(op->params);
        free(op->args);
        free(op->g);
        free(op);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static cudaError_t enqueue(cudaStream_t s, Op *op) {
    if (!s) { // the legacy default stream: at once (only the backend's set-up uses it)
        run_op(op);
        free(op->params), free(op->args), free(op->g), free(op);
        return cudaSuccess;
    }
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return cudaSuccess;
}

static Op *new_op(OpKind kind) {
    Op *op = calloc(1, sizeof *op);
    if (!op) abort();
    op->kind = kind;
    return op;
}

// ---------------------------------------------------------------- runtime API

const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess                 ? "no error"
           : e == cudaErrorMemoryAllocation ? "out of memory (emulated)"
                                            : "emulated error";
}
// MT_CUDA_EMU_DEVICES: how many devices the emulation says it has (default
// 1), all of them the same memory: for each rank's choice of its GPU
static int emu_devices(void) {
    const char *s = getenv("MT_CUDA_EMU_DEVICES");
    return s && atoi(s) > 0 ? atoi(s) : 1;
}
cudaError_t cudaGetDeviceCount(int *n) {
    *n = emu_devices();
    return cudaSuccess;
}
// The context current on each thread: the one emulated device's primary
// context, bound by cudaSetDevice, cudaFree and cuCtxSetCurrent only, which
// is stricter than the runtime (any runtime call binds it there): a thread
// that launches a kernel without having bound it fails, as the driver API
// does on a thread with no current context.
static struct CUctx_st { int device; } primary_ctx;
static __thread CUcontext current_ctx;

cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= emu_devices()) return cudaErrorInvalidDevice;
    current_ctx = &primary_ctx;
    return cudaSuccess;
}
cudaError_t cudaSetDeviceFlags(unsigned flags) {
    (void)flags;
    return cudaSuccess;
}
// MT_CUDA_EMU_SM: the emulated GPU's architecture (default 90)
static int emu_sm(void) {
    const char *s = getenv("MT_CUDA_EMU_SM");
    return s && *s ? atoi(s) : 90;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device < 0 || device >= emu_devices()) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "CPU emulation of CUDA");
    prop->major = emu_sm() / 10, prop->minor = emu_sm() % 10;
    prop->totalGlobalMem = (size_t)16 << 30;
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *total = (size_t)16 << 30;
    pthread_mutex_lock(&mem_mu);
    *free_b = *total - device_bytes;
    pthread_mutex_unlock(&mem_mu);
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
    if (!bytes) {
        *p = NULL;
        return cudaSuccess;
    }
    if (!(*p = malloc(bytes + sizeof(size_t) * 2))) return cudaErrorMemoryAllocation;
    *(size_t *)*p = bytes; // the size in front, for cudaFree's bookkeeping
    *p = (char *)*p + sizeof(size_t) * 2;
    pthread_mutex_lock(&mem_mu);
    device_bytes += bytes;
    if (device_bytes > device_peak) device_peak = device_bytes;
    pthread_mutex_unlock(&mem_mu);
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    current_ctx = &primary_ctx;
    if (!p) return cudaSuccess;
    char *base = (char *)p - sizeof(size_t) * 2;
    pthread_mutex_lock(&mem_mu);
    device_bytes -= *(size_t *)base;
    pthread_mutex_unlock(&mem_mu);
    free(base);
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags) {
    (void)flags;
    return (*p = malloc(bytes ? bytes : 1)) ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}
// The registered host ranges, [lo, hi) each, and the log.
static struct {
    pthread_mutex_t mu;
    uintptr_t *lo, *hi; // (n of cap)
    int n, cap;
    uintptr_t base; // the first range registered: the log's offsets are from it
} pins = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0, 0};

static void pin_log(const char *what, uintptr_t at, size_t bytes) {
    const char *path = getenv("MT_CUDA_EMU_PIN_LOG");
    FILE *f = path && *path ? fopen(path, "a") : NULL;
    if (!f) return;
    if (bytes) fprintf(f, "%s %lld %zu\n", what, (long long)(at - pins.base), bytes);
    else fprintf(f, "%s %lld\n", what, (long long)(at - pins.base));
    fclose(f);
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags) {
    (void)flags;
    const char *max = getenv("MT_CUDA_EMU_PIN_MAX");
    if (!p || !bytes || (max && *max && bytes > (size_t)strtoull(max, NULL, 10))) return cudaErrorInvalidValue;
    uintptr_t page = 4096, lo = (uintptr_t)p / page * page, hi = ((uintptr_t)p + bytes + page - 1) / page * page;
    pthread_mutex_lock(&pins.mu);
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < pins.n && e == cudaSuccess; i++)
        if (lo < pins.hi[i] && pins.lo[i] < hi) e = cudaErrorHostMemoryAlreadyRegistered;
    if (e == cudaSuccess && pins.n == pins.cap) {
        int cap = pins.cap ? 2 * pins.cap : 16;
        uintptr_t *a = realloc(pins.lo, (size_t)cap * sizeof *a),
                  *b = a ? realloc(pins.hi, (size_t)cap * sizeof *b) : NULL;
        if (a) pins.lo = a;
        if (b) pins.hi = b, pins.cap = cap;
        else e = cudaErrorMemoryAllocation;
    }
    if (e == cudaSuccess) {
        if (!pins.n) pins.base = (uintptr_t)p;
        pins.lo[pins.n] = lo, pins.hi[pins.n++] = hi;
        pin_log("register", (uintptr_t)p, bytes);
    }
    pthread_mutex_unlock(&pins.mu);
    return e;
}
cudaError_t cudaHostUnregister(void *p) {
    uintptr_t lo = (uintptr_t)p / 4096 * 4096;
    pthread_mutex_lock(&pins.mu);
    int i = 0, found;
    while (i < pins.n && pins.lo[i] != lo) i++;
    if ((found = i < pins.n)) {
        pins.lo[i] = pins.lo[pins.n - 1], pins.hi[i] = pins.hi[pins.n - 1], pins.n--;
        pin_log("unregister", (uintptr_t)p, 0);
    }
    pthread_mutex_unlock(&pins.mu);
    return found ? cudaSuccess : cudaErrorHostMemoryNotRegistered;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    (void)kind;
    memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
    memset(dst, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned flags) {
    (void)flags;
    static const unsigned PAUSES[3] = {0, 50, 500};
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) return cudaErrorMemoryAllocation;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_lock(&mem_mu);
    if (!stream_seed) {
        const char *e = getenv("MT_CUDA_EMU_SEED");
        stream_seed = e && *e ? strtoull(e, NULL, 10) + 1 : 1;
    }
    s->rng = stream_seed += 0x632BE59BD9B4E019ull;
    pthread_mutex_unlock(&mem_mu);
    s->max_pause_us = PAUSES[next_random(&s->rng) % 3];
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return cudaErrorMemoryAllocation;
    }
    *out = s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (!s) return cudaSuccess;
    pthread_mutex_lock(&s->mu);
    while (s->head) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    cudaStreamSynchronize(s);
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    free(s);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s) {
    (void)kind;
    Op *op = new_op(OP_COPY);
    op->dst = dst, op->src = src, op->bytes = bytes;
    return enqueue(s, op);
}
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s) {
    Op *op = new_op(OP_SET);
    op->dst = dst, op->value = value, op->bytes = bytes;
    return enqueue(s, op);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned flags) {
    (void)flags;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return cudaErrorMemoryAllocation;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    *out = e;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *out) { return cudaEventCreateWithFlags(out, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    cudaEventSynchronize(e);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    Op *op = new_op(OP_RECORD);
    pthread_mutex_lock(&e->mu);
    op->ev = e, op->gen = ++e->recorded;
    pthread_mutex_unlock(&e->mu);
    return enqueue(s, op);
}
// Waits for the event's last record issued so far; none: nothing to wait for.
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    (void)flags;
    Op *op = new_op(OP_WAIT);
    pthread_mutex_lock(&e->mu);
    op->ev = e, op->gen = e->recorded;
    pthread_mutex_unlock(&e->mu);
    return enqueue(s, op);
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    pthread_mutex_lock(&e->mu);
    uint64_t gen = e->recorded;
    while (e->completed < gen) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (a->completed < a->recorded || b->completed < b->recorded || !a->completed || !b->completed)
        return cudaErrorNotReady;
    *ms = (float)(1e3 * (b->t - a->t));
    return cudaSuccess;
}

// ---------------------------------------------------------------- driver API: the kernels

struct CUfunc_st {
    char name[160];
    struct CUfunc_st *next; // the module's other functions
};
struct CUmod_st {
    void *so;
    struct CUfunc_st *funcs; // owned by the module, freed with it, as CUDA's are
};

CUresult cuCtxGetCurrent(CUcontext *ctx) {
    *ctx = current_ctx;
    return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext ctx) {
    if (ctx && ctx != &primary_ctx) return CUDA_ERROR_INVALID_CONTEXT;
    current_ctx = ctx;
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = e == CUDA_SUCCESS           ? "no error"
         : e == CUDA_ERROR_NOT_FOUND ? "named symbol not found (emulated)"
                                     : "emulated error";
    return CUDA_SUCCESS;
}
CUresult cuModuleLoadData(CUmodule *out, const void *image) {
    const char *path = getenv("MT_CUDA_EMU_KERNELS");
    if (!image || !path || !*path) {
        fprintf(stderr,
                "cuda_api_emu: cuModuleLoadData needs MT_CUDA_EMU_KERNELS, the plan's kernels built for the host\n");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        fprintf(stderr, "cuda_api_emu: %s\n", dlerror());
        return CUDA_ERROR_INVALID_IMAGE;
    }
    emu_launch = (int (*)(const char *, unsigned, unsigned, unsigned, unsigned, size_t, void **))(
        uintptr_t)dlsym(so, "mt_emu_launch");
    emu_params = (int (*)(const char *, unsigned *, int))(uintptr_t)dlsym(so, "mt_emu_params");
    if (!emu_launch || !emu_params) return CUDA_ERROR_INVALID_IMAGE;
    struct CUmod_st *m = calloc(1, sizeof *m);
    m->so = so;
    *out = m;
    return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m) {
    while (m->funcs) {
        struct CUfunc_st *f = m->funcs;
        m->funcs = f->next;
        free(f);
    }
    free(m); // the shared object stays: streams may still name its kernels
    return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction *out, CUmodule m, const char *name) {
    unsigned sizes[1];
    if (emu_params(name, sizes, 0) < 0) return CUDA_ERROR_NOT_FOUND;
    struct CUfunc_st *f = calloc(1, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->next = m->funcs, m->funcs = f;
    *out = f;
    return CUDA_SUCCESS;
}
CUresult cuModuleGetGlobal(CUdeviceptr *at, size_t *bytes, CUmodule m, const char *name) {
    void *p = dlsym(m->so, name);
    if (!p) return CUDA_ERROR_NOT_FOUND;
    *at = (CUdeviceptr)(uintptr_t)p;
    if (bytes) *bytes = 16; // (only SYMBOL_launch[4] is asked for)
    return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
    (void)f, (void)a, (void)v;
    return CUDA_SUCCESS;
}
// The parameter values are copied now, as CUDA does, by the sizes the kernel table gives.
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, CUstream s, void **params, void **extra) {
    unsigned sizes[64];
    if (!current_ctx) return CUDA_ERROR_INVALID_CONTEXT; // this thread never bound the context
    int n = emu_params(f->name, sizes, 64);
    if (n < 0 || n > 64 || extra || by != 1 || bz != 1) return CUDA_ERROR_INVALID_VALUE;
    Op *op = new_op(OP_LAUNCH);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (sizes[i] + 7) & ~7u;
    op->params = malloc(total + 8);
    op->args = calloc((size_t)n + 1, sizeof(void *));
    for (int i = 0, at = 0; i < n; i++) {
        memcpy(op->params + at, params[i], sizes[i]);
        op->args[i] = op->params + at;
        at += (int)((sizes[i] + 7) & ~7u);
    }
    op->name = f->name, op->grid[0] = gx, op->grid[1] = gy, op->grid[2] = gz, op->block = bx, op->smem = smem;
    return enqueue((cudaStream_t)s, op) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}

// ---------------------------------------------------------------- cuBLASLt

struct cublasLtContext {
    int unused;
};
typedef struct Layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld, stride;
    int32_t batch;
} Layout;
typedef struct Desc {
    cublasOperation_t ta, tb;
} Desc;

const char *cublasLtGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated failure";
}
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = calloc(1, sizeof **h);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    *d = (cublasLtMatmulDesc_t)calloc(1, sizeof(Desc));
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v,
                                              size_t n) {
    Desc *x = (Desc *)d;
    if (n != sizeof(cublasOperation_t)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a == CUBLASLT_MATMUL_DESC_TRANSA) memcpy(&x->ta, v, n);
    else if (a == CUBLASLT_MATMUL_DESC_TRANSB) memcpy(&x->tb, v, n);
    else return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (type != CUDA_R_32F && type != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
    Layout *x = calloc(1, sizeof *x);
    *x = (Layout){type, rows, cols, ld, 0, 1};
    *l = (cublasLtMatrixLayout_t)x;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                const void *v, size_t n) {
    Layout *x = (Layout *)l;
    if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && n == 4) memcpy(&x->batch, v, 4);
    else if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && n == 8) memcpy(&x->stride, v, 8);
    else return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

typedef struct Gemm {
    Desc d;
    Layout a, b, c, dl;
    float alpha, beta;
    const void *A, *B, *C;
    void *D;
    void *ws; // (ws_bytes) cuBLASLt's workspace, filled with NaN as the GEMM runs
    size_t ws_bytes;
} Gemm;

static float load(const void *p, cudaDataType_t t, int64_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static void store(void *p, cudaDataType_t t, int64_t i, float v) {
    if (t == CUDA_R_32F) {
        ((float *)p)[i] = v;
        return;
    }
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) u = 0x7fc00000u; // NaN stays NaN
    else u += 0x7fffu + ((u >> 16) & 1u);                 // round to nearest even, as common/bf16.h
    ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
}
// A matrix of layout l (column-major, rows x cols, ld) at batch b, widened to f32 (rows x cols, ld rows).
static float *widen(const void *p, const Layout *l, int b) {
    float *w = malloc((size_t)(l->rows * l->cols) * 4 + 4);
    int64_t base = (int64_t)b * l->stride;
    for (uint64_t j = 0; j < l->cols; j++)
        for (uint64_t i = 0; i < l->rows; i++)
            w[j * l->rows + i] = load(p, l->type, base + (int64_t)(j * (uint64_t)l->ld + i));
    return w;
}

static void gemm_run(Op *op) {
    Gemm *g = op->g;
    int batch = g->dl.batch > 0 ? g->dl.batch : 1;
    uint64_t m = g->dl.rows, n = g->dl.cols, k = g->d.ta == CUBLAS_OP_N ? g->a.cols : g->a.rows;
    for (int b = 0; b < batch; b++) {
        float *A = widen(g->A, &g->a, b), *B = widen(g->B, &g->b, b), *C = malloc((size_t)(m * n) * 4 + 4);
        cblas_sgemm(CblasColMajor, g->d.ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                    g->d.tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, (int)m, (int)n, (int)k, g->alpha, A,
                    (int)g->a.rows, B, (int)g->b.rows, 0.0f, C, (int)m);
        int64_t base = (int64_t)b * g->dl.stride, cbase = (int64_t)b * g->c.stride;
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                float v = C[j * m + i];
                if (g->beta != 0) v += g->beta * load(g->C, g->c.type, cbase + (int64_t)(j * (uint64_t)g->c.ld + i));
                store(g->D, g->dl.type, base + (int64_t)(j * (uint64_t)g->dl.ld + i), v);
            }
        free(A), free(B), free(C);
    }
    // The algorithm used its workspace: a plan whose workspace overlaps live
    // data (another kernel's scratch still in use) reads NaN.
    if (g->ws) memset(g->ws, 0xff, g->ws_bytes);
}

// A preference keeps its maximum workspace (data[0]); the heuristic returns
// one algorithm, marked, which cublasLtMatmul requires (the backend picks
// one per GEMM at load, not on every call), and which needs all of that
// workspace (data[1]): cublasLtMatmul refuses less, and the GEMM fills it.
static const uint64_t EMU_ALGO_MARK = 0x4d54414c474fULL;
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    return (*pref = calloc(1, sizeof **pref)) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    free(pref);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t bytes) {
    if (!pref || !buf || !bytes) return CUBLAS_STATUS_INVALID_VALUE;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (bytes != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&pref->data[0], buf, sizeof(uint64_t));
    }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int want,
                                              cublasLtMatmulHeuristicResult_t results[], int *found) {
    (void)h;
    if (!desc || !a || !b || !c || !d || !pref || want < 1 || !results || !found) return CUBLAS_STATUS_INVALID_VALUE;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = EMU_ALGO_MARK;
    results[0].algo.data[1] = pref->data[0];
    results[0].workspaceSize = (size_t)pref->data[0];
    results[0].state = CUBLAS_STATUS_SUCCESS;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t s) {
    (void)h;
    if (!algo || algo->data[0] != EMU_ALGO_MARK) return CUBLAS_STATUS_INVALID_VALUE; // none picked by the heuristic
    if (workspace_bytes < algo->data[1] || (algo->data[1] && !workspace)) return CUBLAS_STATUS_INVALID_VALUE;
    Gemm *g = calloc(1, sizeof *g);
    g->d = *(Desc *)desc;
    g->a = *(Layout *)Adesc, g->b = *(Layout *)Bdesc, g->c = *(Layout *)Cdesc, g->dl = *(Layout *)Ddesc;
    memcpy(&g->alpha, alpha, 4);
    memcpy(&g->beta, beta, 4);
    g->A = A, g->B = B, g->C = C, g->D = D;
    g->ws = algo->data[1] ? workspace : NULL, g->ws_bytes = (size_t)algo->data[1];
    uint64_t k = g->d.ta == CUBLAS_OP_N ? g->a.cols : g->a.rows;
    uint64_t ar = g->d.ta == CUBLAS_OP_N ? g->a.rows : g->a.cols, bc = g->d.tb == CUBLAS_OP_N ? g->b.cols : g->b.rows,
             bk = g->d.tb == CUBLAS_OP_N ? g->b.rows : g->b.cols;
    if (ar != g->dl.rows || bc != g->dl.cols || bk != k || g->c.rows != g->dl.rows || g->c.cols != g->dl.cols) {
        free(g);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    Op *op = new_op(OP_GEMM);
    op->gemm = gemm_run, op->g = g;
    return enqueue(s, op) == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

// The emulated device's peak allocation (tests).
size_t cuda_emu_device_peak(void);
size_t cuda_emu_device_peak(void) { return device_peak; }
