// blas_core.c: OpenBLAS kernels that fit the host CPU (blas_core.h).
//
// A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels by CPU model when it
// loads. 0.3.21 does not know Sapphire Rapids and falls back to Prescott's
// SSE3 kernels: sgemm at 15 to 30 GFLOP/s where its SkylakeX kernels run
// 100 to 150 on the same core. OPENBLAS_CORETYPE overrides the choice, but
// OpenBLAS reads it while loading, before main; so this sets it and runs
// OpenBLAS's own choosing again (gotoblas_dynamic_quit, then _init, both
// exported by DYNAMIC_ARCH builds and looked up, so that another build
// simply keeps its kernels). A kernel set only changes how a GEMM's sums
// are blocked: results move by rounding, alike for every GEMM of the run.
#include "runtime/backend/blas_core.h"

#include <cblas.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *mt_blas_core_pick(void) {
    const char *now = openblas_get_corename();
    if (!now) return "";
    if (getenv("OPENBLAS_CORETYPE") || strcasecmp(now, "prescott") != 0) return now; // chosen, or a CPU it knew
    void (*quit)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit");
    void (*init)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init");
    if (!quit || !init) return now;
    __builtin_cpu_init();
    const char *want = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) want = "Haswell";
    if (!want) return now;
    setenv("OPENBLAS_CORETYPE", want, 1);
    quit();
    init();
    unsetenv("OPENBLAS_CORETYPE"); // not handed to anything this process starts
    now = openblas_get_corename();
    return now ? now : "";
}

static _Atomic int blas_all, blas_now; // threads OpenBLAS started with; set now (0: not read yet)

void mt_blas_threads_for(long long macs) {
    if (!blas_all) blas_all = blas_now = openblas_get_num_threads();
    int want = macs < MT_BLAS_THREADED_MACS ? 1 : blas_all;
    if (want != blas_now) {
        openblas_set_num_threads(want);
        blas_now = want;
    }
}
