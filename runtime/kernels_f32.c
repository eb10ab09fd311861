// The kernels in float: see kernels.h.
typedef float real;
#define KERNEL_RUN kernel_run_f32
#define GEMM cblas_sgemm
#include "kernels.inc"
