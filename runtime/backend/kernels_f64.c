// The kernels in double, for gradient checks: see kernels.h.
typedef double real;
#define KERNEL_RUN kernel_run_f64
#define KERNEL_RUN_DOCS kernel_run_docs_f64
#define KERNEL_ATTENTION_DOCS kernel_attention_docs_f64
#include "runtime/backend/blas_core.h"
// one OpenBLAS thread for small GEMMs (blas_core.h)
#define GEMM(order, ta, tb, M, N, K, ...) \
    (mt_blas_threads_for((long long)(M) * (N) * (K)), cblas_dgemm(order, ta, tb, M, N, K, __VA_ARGS__))
#include "runtime/backend/kernels.inc"
