// kir_eval.h: a plain C interpreter of an expression kernel of the kernel IR
// (kir.h), the reference that tests/gpu/gpu_check (on a GPU) and
// tests/emu/emu_check (on the CPU emulation of CUDA) compare mtc's generated
// CUDA kernels with: one row and one column at a time, statements in order,
// fp32 as float and f64 as double.
#ifndef MT_TESTS_KIR_EVAL_H
#define MT_TESTS_KIR_EVAL_H

#include <stdint.h>

#include "common/kir.h"

// One kernel argument's host data.
typedef struct HostArg {
    float *f;    // (numel) f32 arguments, and bf16 ones as the floats they hold
    int32_t *i;  // (numel) i32 arguments
    double *acc; // (numel) KA_ACC64 scratch
} HostArg;

// Runs k over args (h[i] for k->args[i]); after all rows, each KA_ACC64
// argument's f = acc / divisor.
void kir_eval(const KirKernel *k, HostArg *args);

// Allocates every argument (numel + 1 elements, zeroed) and fills the read
// ones: floats rand() (in [-1, 1), rounded to bf16 for a bf16 argument),
// integers 0 or 1 (in range of any table they index). Free with kir_free_args.
void kir_fill_args(const KirKernel *k, HostArg *h, float (*rand)(void));
void kir_free_args(const KirKernel *k, HostArg *h);

// An argument as the generated kernel holds it (the device's copy): its bytes
// (f32 4, bf16 2, i32 4, KA_ACC64 scratch 8 a value); h packed into dst
// (bf16 bits for bf16, scratch zeroed).
size_t kir_arg_bytes(const KirArg *a);
size_t kir_arg_out_bytes(const KirArg *a); // what kir_arg_error reads: f32 4 a value, bf16 2, i32 4
void kir_arg_pack(const KirArg *a, const HostArg *h, void *dst);

// A written argument's error: got (the device's copy of a, in a's storage;
// for a KA_ACC64 argument its finish kernel's output, in a's storage)
// against the interpreter's want: max |got - want| / max(|want|, 1e-2);
// an f32 accumulation's (KA_ACC32: atomics, in any order) against
// max(|want|, 1e-2, the largest |want| of the argument), normwise;
// i32 exact (0, else infinity). Passes at kir_arg_tolerance: 1e-4 for f32,
// 1e-2 for bf16 (a rounding either side of a tie is one bf16 ulp, 2^-8 to
// 2^-7 relative).
double kir_arg_error(const KirArg *a, const void *got, const HostArg *want);
double kir_arg_tolerance(const KirArg *a);

// The harness's one rewrite of a model's text: its config line `V = n`, where
// n > cap, becomes `V = cap` in place (padded with spaces), so that tables of
// V x C fit in a test's memory, and then an embedding's `padding_idx = p`
// past the capped table `padding_idx = cap - 1`; 1 when rewritten.
int kir_cap_vocab(char *text, long long cap);

#endif
