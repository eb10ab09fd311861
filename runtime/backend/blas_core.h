// blas_core.h: OpenBLAS kernels that fit the host CPU.
#pragma once

// Where OpenBLAS fell back to its generic Prescott (SSE3) kernels on a CPU
// newer than it knows, and OPENBLAS_CORETYPE is unset: switches it to the
// newest kernels the CPU runs (SkylakeX with AVX-512 F, BW, DQ and VL,
// else Haswell with AVX2 and FMA). Call before the process's first BLAS
// call. Returns OpenBLAS's core name afterwards ("" when it has none).
const char *mt_blas_core_pick(void);

#include "common/kir.h" // MT_BLAS_THREADED_MACS

// OpenBLAS threads for a GEMM of macs multiply-adds: one below
// MT_BLAS_THREADED_MACS, else the count OpenBLAS started with
// (OPENBLAS_NUM_THREADS, or the CPUs). A tiny model's GEMMs (llama-tiny's
// largest, the LM head, is 1024 x 256 x 64 = 2^24) take under a millisecond
// on one core, where handing half to a second thread costs about what it
// saves, and each threaded call keeps OpenBLAS's idle worker spinning in
// sched_yield for its timeout (about 0.1 s): through a whole training run,
// a second core burnt. OpenBLAS's own cut-off is 2^18. Threads split a
// GEMM's rows and columns, never its sums: results do not change.
void mt_blas_threads_for(long long macs);
