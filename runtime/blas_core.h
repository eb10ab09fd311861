// blas_core.h: OpenBLAS kernels that fit the host CPU.
#pragma once

// Where OpenBLAS fell back to its generic Prescott (SSE3) kernels on a CPU
// newer than it knows, and OPENBLAS_CORETYPE is unset: switches it to the
// newest kernels the CPU runs (SkylakeX with AVX-512 F, BW, DQ and VL,
// else Haswell with AVX2 and FMA). Call before the process's first BLAS
// call. Returns OpenBLAS's core name afterwards ("" when it has none).
const char *mt_blas_core_pick(void);
