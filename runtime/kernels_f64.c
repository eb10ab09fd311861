// The kernels in double, for gradient checks: see kernels.h.
typedef double real;
#define KERNEL_RUN kernel_run_f64
#define GEMM cblas_dgemm
#include "kernels.inc"
