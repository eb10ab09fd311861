// cuda_emu.h: just enough of CUDA to run the CUDA C that mtc generates (the
// translation unit NVRTC compiles: compiler/emit/cuda/*.cuh and emit_cuda.c's
// kernels) on the host, for tests. C++ (g++ or clang++, -std=c++17), libc
// headers only. What it models and what it does not: tests/emu/README.md.
//
// A launch runs the grid's blocks one after another; a block's threads are
// fibers on the calling thread (each started on its own stack by ucontext,
// then switched by _setjmp/_longjmp, which save no signal mask: no system
// call a switch), switched only at barriers:
// __syncthreads waits for every live thread of the block, the warp
// collectives (__shfl*_sync, votes, __syncwarp) for every live lane of the
// warp. A barrier nobody can leave is reported, and the process aborts.
//
// The one source change the emulation needs: `extern __shared__` (dynamic
// shared memory) written as plain `extern`, which the harness does to the
// text; it then names the array mt_smem below (the only name mt uses).
#ifndef MT_CUDA_EMU_H
#define MT_CUDA_EMU_H

#undef _FORTIFY_SOURCE // its longjmp check refuses a jump to another fiber's stack
#include <math.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __constant__
#define __shared__ static // blocks run one at a time: one copy serves each in turn
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint3 {
    unsigned x, y, z;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) int4 {
    int x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline int4 make_int4(int a, int b, int c, int d) { return {a, b, c, d}; }
static inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }

// bit casts
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float __int_as_float(int u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
static inline int __float_as_int(float f) {
    int u;
    memcpy(&u, &f, 4);
    return u;
}
static inline double __longlong_as_double(long long u) {
    double f;
    memcpy(&f, &u, 8);
    return f;
}
static inline long long __double_as_longlong(double f) {
    long long u;
    memcpy(&u, &f, 8);
    return u;
}

// CUDA's integer min and max (device code calls them unqualified)
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

// Fast-math intrinsics: the exact functions (the GPU's are within a few ulp;
// glibc already declares __expf and __logf).
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
// The round-to-nearest intrinsics (never contracted on the GPU): one IEEE
// float operation each, as the host does them. Each is a call of its own, so
// no host compiler contracts across them (the harnesses also pass
// -ffp-contract=off where the bits matter: tests/emu/adamw_device_check.c).
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }

namespace mt_emu {

enum { WARP = 32, MAX_THREADS = 1024, STACK = 64 << 10, SMEM_MAX = 232448 }; // sm_90: 227 KiB a block
enum { READY, AT_BLOCK, AT_WARP, DONE };

struct Fiber {
    ucontext_t ctx; // to start it
    jmp_buf jb;     // where it waits at a barrier
    int state, started;
};

// The launch in progress and its block's threads.
struct Launch {
    void (*body)(void **args);
    void **args;
    Fiber fiber[MAX_THREADS];
    char *stacks;       // (MAX_THREADS, STACK)
    int n, cur;         // threads in the block, the one running
    int live, at_block; // not DONE; waiting at __syncthreads
    int warp_live[MAX_THREADS / WARP], at_warp[MAX_THREADS / WARP];
    // (2, n) each lane's word for the warp collectives, two sets used in turn:
    // a lane writes set p only after every lane of its warp has left the
    // previous collective on set p (it passed the one on set 1-p since)
    uint64_t slot[2][MAX_THREADS];
    int parity[MAX_THREADS]; // (n) the set each thread's next collective uses
    ucontext_t start;        // a context to copy for each fiber's start (getcontext once)
    jmp_buf sched;           // the block's round robin
    // cp.async: each thread's copies not yet landed (4 or 16 bytes read at
    // issue, written at the wait that covers their group) and its committed groups
    struct CpAsync {
        void *dst;
        unsigned char data[16];
        int bytes, group;
    } * cp[MAX_THREADS];
    int ncp[MAX_THREADS], cpcap[MAX_THREADS], committed[MAX_THREADS];
};
inline Launch L;

} // namespace mt_emu

inline dim3 threadIdx, blockIdx, blockDim, gridDim;
static const int warpSize = 32;
// Dynamic shared memory (`extern __shared__ float mt_smem[]`).
alignas(16) inline float mt_smem[mt_emu::SMEM_MAX / 4];

namespace mt_emu {

inline void fail(const char *what) {
    fprintf(stderr, "cuda_emu: %s (block %u,%u,%u thread %u)\n", what, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
    abort();
}
inline void yield() {
    if (!_setjmp(L.fiber[L.cur].jb)) _longjmp(L.sched, 1);
}
inline void release(int state, int warp) { // every thread waiting at that barrier may go on
    int lo = state == AT_WARP ? warp * WARP : 0, hi = state == AT_WARP ? min(L.n, lo + WARP) : L.n;
    for (int i = lo; i < hi; i++)
        if (L.fiber[i].state == state) L.fiber[i].state = READY;
    if (state == AT_WARP) L.at_warp[warp] = 0;
    else L.at_block = 0;
}
inline void sync_block() {
    L.fiber[L.cur].state = AT_BLOCK;
    if (++L.at_block == L.live) release(AT_BLOCK, 0);
    yield();
}
inline void sync_warp() {
    int w = L.cur / WARP;
    L.fiber[L.cur].state = AT_WARP;
    if (++L.at_warp[w] == L.warp_live[w]) release(AT_WARP, w);
    yield();
}
inline void check_mask(unsigned mask) {
    int w = L.cur / WARP, lanes = min(WARP, L.n - w * WARP);
    unsigned all = lanes == WARP ? 0xffffffffu : (1u << lanes) - 1;
    if ((mask & all) != all) fail("warp collective with a partial mask: not modelled");
}
// Every live lane of the warp posts a word; returns once all have.
inline void post(uint64_t v) {
    L.slot[L.parity[L.cur]][L.cur] = v;
    sync_warp();
}
// After post: what lane posted (0 for a lane past the block's end).
inline uint64_t lane_word(int lane) {
    int i = L.cur / WARP * WARP + lane;
    return i < L.n ? L.slot[L.parity[L.cur]][i] : 0;
}
inline void done_reading() { L.parity[L.cur] ^= 1; }
template <typename T> inline uint64_t to_word(T v) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <typename T> inline T from_word(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}
template <typename T> inline T shfl(unsigned mask, T v, int src) {
    check_mask(mask);
    post(to_word(v));
    T r = from_word<T>(lane_word(src));
    done_reading();
    return r;
}

inline void fiber_main() {
    L.body(L.args);
    Fiber *f = &L.fiber[L.cur];
    f->state = DONE;
    int w = L.cur / WARP;
    L.live--, L.warp_live[w]--;
    if (L.at_block && L.at_block == L.live) release(AT_BLOCK, 0);
    if (L.at_warp[w] && L.at_warp[w] == L.warp_live[w]) release(AT_WARP, w);
    _longjmp(L.sched, 1); // (never returns: its stack is done)
}

inline int run(dim3 grid, dim3 block, size_t smem, void (*body)(void **), void **args) {
    unsigned n = block.x * block.y * block.z;
    if (n == 0 || n > MAX_THREADS || smem > SMEM_MAX || !grid.x || !grid.y || !grid.z) {
        fprintf(stderr, "cuda_emu: bad launch: %u threads, %zu bytes of shared memory\n", n, smem);
        return -1;
    }
    if (!L.stacks && (!(L.stacks = (char *)malloc((size_t)MAX_THREADS * STACK)) || getcontext(&L.start) != 0))
        return -1;
    L.body = body, L.args = args, L.n = (int)n;
    gridDim = grid, blockDim = block;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                blockIdx = dim3(bx, by, bz);
                for (size_t i = 0; i < (smem + 3) / 4; i++) mt_smem[i] = __int_as_float(0x7fc0dead); // poison: NaN
                L.live = (int)n, L.at_block = 0;
                for (unsigned w = 0; w < (n + WARP - 1) / WARP; w++)
                    L.warp_live[w] = min((int)WARP, (int)(n - w * WARP)), L.at_warp[w] = 0;
                for (unsigned i = 0; i < n; i++) {
                    Fiber *f = &L.fiber[i];
                    f->ctx = L.start;
                    f->ctx.uc_stack.ss_sp = L.stacks + (size_t)i * STACK;
                    f->ctx.uc_stack.ss_size = STACK;
                    f->ctx.uc_link = NULL; // fiber_main jumps back itself
                    makecontext(&f->ctx, fiber_main, 0);
                    f->state = READY, f->started = 0, L.parity[i] = 0;
                    L.ncp[i] = 0, L.committed[i] = 0; // copies never waited for are lost, as on the GPU
                }
                // round robin over the ready threads until all are done
                while (L.live > 0) {
                    int ran = 0;
                    for (unsigned i = 0; i < n; i++) {
                        if (L.fiber[i].state != READY) continue;
                        L.cur = (int)i;
                        threadIdx = dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
                        Fiber *f = &L.fiber[i];
                        if (!_setjmp(L.sched)) { // back here when the fiber waits or ends
                            if (f->started) _longjmp(f->jb, 1);
                            f->started = 1;
                            setcontext(&f->ctx);
                            fail("setcontext failed");
                        }
                        ran = 1;
                    }
                    if (!ran) fail("deadlock: threads wait at a barrier that the others never reach");
                }
            }
    return 0;
}

// Unpacks cuLaunchKernel-style arguments (args[i] points at parameter i).
template <unsigned... I> struct Idx {};
template <unsigned N, unsigned... I> struct MakeIdx : MakeIdx<N - 1, N - 1, I...> {};
template <unsigned... I> struct MakeIdx<0, I...> { typedef Idx<I...> type; };
template <typename... A, unsigned... I> inline void call(void (*f)(A...), void **args, Idx<I...>) {
    f(*(A *)args[I]...);
}
template <typename... A> constexpr unsigned arity(void (*)(A...)) { return sizeof...(A); }
template <auto F> void thunk(void **args) { call(F, args, typename MakeIdx<arity(F)>::type()); }
// Each parameter's size, for a launcher that copies their values (cuLaunchKernel does).
template <typename... A> struct Sizes {
    static constexpr unsigned v[sizeof...(A) + 1] = {(unsigned)sizeof(A)..., 0u};
};
template <typename... A> constexpr const unsigned *sizes_of(void (*)(A...)) { return Sizes<A...>::v; }

struct Entry {
    const char *name;
    void (*body)(void **);
    unsigned n;           // parameters
    const unsigned *size; // (n) their sizes in bytes
};

} // namespace mt_emu

static inline void __syncthreads() { mt_emu::sync_block(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    mt_emu::check_mask(mask);
    mt_emu::sync_warp();
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    int lane = mt_emu::L.cur % 32;
    return mt_emu::shfl(mask, v, lane / width * width + src % width);
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
    int lane = mt_emu::L.cur % 32, src = lane ^ m;
    return mt_emu::shfl(mask, v, src / width == lane / width ? src : lane);
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    int lane = mt_emu::L.cur % 32, src = lane + (int)d;
    return mt_emu::shfl(mask, v, src / width == lane / width ? src : lane);
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    int lane = mt_emu::L.cur % 32, src = lane - (int)d;
    return mt_emu::shfl(mask, v, src >= 0 && src / width == lane / width ? src : lane);
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    mt_emu::check_mask(mask);
    mt_emu::post(pred != 0);
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= (unsigned)(mt_emu::lane_word(i) != 0) << i;
    mt_emu::done_reading();
    return r & mask;
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) {
    int lanes = min(32, mt_emu::L.n - mt_emu::L.cur / 32 * 32);
    unsigned all = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    return (__ballot_sync(mask, pred) & all) == (mask & all);
}
// Threads switch only at barriers, so a read-modify-write is atomic as it is.
template <typename T> static inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}

// ---- compiler/emit/cuda/mma.cuh's wrappers, as the PTX ISA defines them per lane
// (the layouts are written in mma.cuh). Each needs the whole warp.
#define MT_CUDA_EMU 1
namespace mt_emu {
// Every lane's word v, into out[lane].
inline void gather(uint64_t v, uint64_t out[WARP]) {
    check_mask(0xffffffffu);
    if (L.warp_live[L.cur / WARP] != WARP) fail("tensor-core instruction without the whole warp");
    post(v);
    for (int i = 0; i < WARP; i++) out[i] = lane_word(i);
    done_reading();
}
inline uint64_t pair(unsigned lo, unsigned hi) { return (uint64_t)lo | (uint64_t)hi << 32; }
inline float bf16_lo(uint64_t w, int half) { return __uint_as_float((unsigned)(w >> (16 * half)) << 16); }
} // namespace mt_emu

// D = A B + C: products and sums in double, rounded once to fp32 (the
// hardware's order and internal precision are unspecified; at least fp32).
static inline void mt_mma_16816(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
    using namespace mt_emu;
    uint64_t wa0[WARP], wa1[WARP], wb[WARP], wc0[WARP], wc1[WARP];
    gather(pair(a[0], a[1]), wa0), gather(pair(a[2], a[3]), wa1), gather(pair(b[0], b[1]), wb);
    gather(pair(__float_as_uint(c[0]), __float_as_uint(c[1])), wc0);
    gather(pair(__float_as_uint(c[2]), __float_as_uint(c[3])), wc1);
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < WARP; l++) {
        int g = l / 4, t = l % 4;
        for (int e = 0; e < 2; e++) {
            A[g][2 * t + e] = bf16_lo(wa0[l], e), A[g + 8][2 * t + e] = bf16_lo(wa0[l] >> 32, e);
            A[g][2 * t + 8 + e] = bf16_lo(wa1[l], e), A[g + 8][2 * t + 8 + e] = bf16_lo(wa1[l] >> 32, e);
            B[2 * t + e][g] = bf16_lo(wb[l], e), B[2 * t + 8 + e][g] = bf16_lo(wb[l] >> 32, e);
            C[g][2 * t + e] = __uint_as_float((unsigned)(wc0[l] >> (32 * e)));
            C[g + 8][2 * t + e] = __uint_as_float((unsigned)(wc1[l] >> (32 * e)));
        }
    }
    int g = L.cur % WARP / 4, t = L.cur % 4;
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i / 2), col = 2 * t + i % 2;
        double acc = C[row][col];
        for (int k = 0; k < 16; k++) acc += (double)A[row][k] * B[k][col];
        d[i] = (float)acc;
    }
}
static inline void mt_ldmatrix_x4(unsigned r[4], const void *p) {
    using namespace mt_emu;
    uint64_t rows[WARP];
    gather((uint64_t)(uintptr_t)p, rows);
    int g = L.cur % WARP / 4, t = L.cur % 4;
    for (int j = 0; j < 4; j++) memcpy(&r[j], (const char *)(uintptr_t)rows[8 * j + g] + 4 * t, 4);
}
static inline void mt_ldmatrix_x4_trans(unsigned r[4], const void *p) {
    using namespace mt_emu;
    uint64_t rows[WARP];
    gather((uint64_t)(uintptr_t)p, rows);
    int g = L.cur % WARP / 4, t = L.cur % 4;
    for (int j = 0; j < 4; j++) {
        uint16_t lo, hi;
        memcpy(&lo, (const char *)(uintptr_t)rows[8 * j + 2 * t] + 2 * g, 2);
        memcpy(&hi, (const char *)(uintptr_t)rows[8 * j + 2 * t + 1] + 2 * g, 2);
        r[j] = (unsigned)lo | (unsigned)hi << 16;
    }
}
// cvt.rn.bf16x2.f32: each rounded to nearest, ties to even (a NaN stays a
// quiet NaN), lo in the low half.
static inline unsigned mt_cvt_bf16x2(float lo, float hi) {
    unsigned r = 0;
    for (int i = 0; i < 2; i++) {
        unsigned u = __float_as_uint(i ? hi : lo);
        if ((u & 0x7fffffffu) > 0x7f800000u) u = (u | 0x00400000u) >> 16;
        else u = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        r |= (u & 0xffffu) << (16 * i);
    }
    return r;
}
// cp.async: the source is read at once, the destination written only by
// the mt_cp_async_wait<N> that covers the copy's group (every committed
// group but the N most recent), so that a read before the wait, or by
// another thread before a barrier after it, sees the old contents.
static inline void mt_cp_async_n(void *dst, const void *src, int bytes) {
    using namespace mt_emu;
    int t = L.cur;
    if (L.ncp[t] == L.cpcap[t]) {
        L.cpcap[t] = L.cpcap[t] ? 2 * L.cpcap[t] : 64;
        L.cp[t] = (Launch::CpAsync *)realloc(L.cp[t], (size_t)L.cpcap[t] * sizeof *L.cp[t]);
        if (!L.cp[t]) fail("out of memory for cp.async");
    }
    Launch::CpAsync *c = &L.cp[t][L.ncp[t]++];
    c->dst = dst, c->bytes = bytes, c->group = L.committed[t];
    memcpy(c->data, src, (size_t)bytes);
}
static inline void mt_cp_async16(void *dst, const void *src) { mt_cp_async_n(dst, src, 16); }
static inline void mt_cp_async4(void *dst, const void *src) { mt_cp_async_n(dst, src, 4); }
static inline void mt_cp_async_commit() { mt_emu::L.committed[mt_emu::L.cur]++; }
template <int N> static inline void mt_cp_async_wait() {
    using namespace mt_emu;
    int t = L.cur, keep = 0;
    for (int i = 0; i < L.ncp[t]; i++) {
        Launch::CpAsync *c = &L.cp[t][i];
        if (c->group < L.committed[t] - N) memcpy(c->dst, c->data, (size_t)c->bytes);
        else L.cp[t][keep++] = *c;
    }
    L.ncp[t] = keep;
}

// The kernel table a harness appends after the translation unit, and the
// one entry point it exports:
//   MT_EMU_KERNELS_BEGIN MT_EMU_KERNEL(mt_k0_0) ... MT_EMU_KERNELS_END
//   int mt_emu_launch(name, gx, gy, gz, block, smem, args): 0; -1 for a bad
//   geometry; -2 for a name not in the table.
//   int mt_emu_params(name, sizes, cap): the kernel's parameter count, their
//   sizes in bytes into sizes[0 .. cap); -2 for a name not in the table.
#define MT_EMU_KERNELS_BEGIN static const mt_emu::Entry mt_emu_table[] = {
#define MT_EMU_KERNEL(f) {#f, mt_emu::thunk<f>, mt_emu::arity(f), mt_emu::sizes_of(f)},
#define MT_EMU_KERNELS_END                                                                                             \
    { NULL, NULL }                                                                                                     \
    }                                                                                                                  \
    ;                                                                                                                  \
    extern "C" int mt_emu_launch(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block, size_t smem, \
                                 void **args) {                                                                        \
        for (const mt_emu::Entry *e = mt_emu_table; e->name; e++)                                                      \
            if (!strcmp(e->name, name)) return mt_emu::run(dim3(gx, gy, gz), dim3(block), smem, e->body, args);        \
        return -2;                                                                                                     \
    }                                                                                                                  \
    extern "C" int mt_emu_params(const char *name, unsigned *size, int cap) {                                          \
        for (const mt_emu::Entry *e = mt_emu_table; e->name; e++)                                                      \
            if (!strcmp(e->name, name)) {                                                                              \
                for (unsigned i = 0; i < e->n && (int)i < cap; i++) size[i] = e->size[i];                              \
                return (int)e->n;                                                                                      \
            }                                                                                                          \
        return -2;                                                                                                     \
    }

#endif
