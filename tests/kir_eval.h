// kir_eval.h: a plain C interpreter of an expression kernel of the kernel IR
// (kir.h), the reference that tests/gpu/gpu_check (on a GPU) and
// tests/emu/emu_check (on the CPU emulation of CUDA) compare mtc's generated
// CUDA kernels with: one row and one column at a time, statements in order,
// fp32 as float and f64 as double.
#ifndef MT_TESTS_KIR_EVAL_H
#define MT_TESTS_KIR_EVAL_H

#include <stdint.h>

#include "../common/kir.h"

// One kernel argument's host data.
typedef struct HostArg {
    float *f;    // (numel) f32 arguments
    int32_t *i;  // (numel) i32 arguments
    double *acc; // (numel) KA_ACC64 scratch
} HostArg;

// Runs k over args (h[i] for k->args[i]); after all rows, each KA_ACC64
// argument's f = acc / divisor.
void kir_eval(const KirKernel *k, HostArg *args);

// Allocates every argument (numel + 1 elements, zeroed) and fills the read
// ones: floats rand() (in [-1, 1)), integers 0 or 1 (in range of any table
// they index). Free with kir_free_args.
void kir_fill_args(const KirKernel *k, HostArg *h, float (*rand)(void));
void kir_free_args(const KirKernel *k, HostArg *h);

#endif
