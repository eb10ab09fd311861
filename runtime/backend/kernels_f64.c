// The kernels in double, for gradient checks: see kernels.h.
typedef double real;
#define KERNEL_RUN kernel_run_f64
#define KERNEL_RUN_DOC_STARTS kernel_run_doc_starts_f64
#define KERNEL_ATTENTION_DOC_STARTS kernel_attention_doc_starts_f64
#include "runtime/backend/blas_core.h"
// one OpenBLAS thread for small GEMMs (blas_core.h)
#define GEMM(order, ta, tb, M, N, K, ...)                                                                              \
    (mt_blas_threads_for((long long)(M) * (N) * (K)), cblas_dgemm(order, ta, tb, M, N, K, __VA_ARGS__))
#include "runtime/backend/kernels.inc"
