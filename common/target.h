// target.h: the target profile, one machine as the ahead-of-time scheduler
// sees it: device memory and rates, the host link, the host's memory and
// cores. Read from a plain text file of `key = value` lines; the format and
// every key are documented in schedules/README.md.
#ifndef MT_TARGET_H
#define MT_TARGET_H

#include <stddef.h>

// The optional keys' values when a profile leaves them out.
#define TARGET_DEFAULT_KERNEL_LAUNCH_S 5e-6  // seconds a kernel launch costs
#define TARGET_DEFAULT_GEMM_EFFICIENCY 0.8   // share of matrix peak large GEMMs reach
#define TARGET_DEFAULT_DUPLEX_EFFICIENCY 1.0 // share of each direction's rate kept while both run
// Flash attention's rate as a share of matrix_flops_bf16, by the kernel a
// plan runs: the tensor-core kernel (bf16, head sizes 64, 128, 192, 256) and the fp32
// CUDA-core kernel (the fallback). The defaults are what schedules/h200.target
// carries, measured on an H200 (schedules/README.md, "Attention").
#define TARGET_DEFAULT_ATTENTION_TC_FRACTION 0.126
#define TARGET_DEFAULT_ATTENTION_FP32_FRACTION 0.009

typedef struct Target {
    char name[64], arch[16];      // one word each; arch is sm_80, sm_89, sm_90 or cpu
    double device_memory;         // bytes
    double hbm_bandwidth;         // bytes/s, device memory
    double matrix_flops_f32;      // dense FLOP/s of f32 GEMMs (FP32 CUDA cores, not TF32)
    double matrix_flops_bf16;     // dense FLOP/s of bf16 GEMMs with f32 accumulation
    double vector_flops;          // FP32 non-tensor FLOP/s
    double h2d_bandwidth;         // bytes/s host to device, sustained from pinned memory
    double d2h_bandwidth;         // bytes/s device to host, the same
    double host_memory;           // bytes of host RAM
    double host_memory_bandwidth; // bytes/s, sustained
    double host_adamw_bandwidth;  // bytes/s of the host AdamW update's traffic (compiler/schedule/cost.c's update_bytes
                                  // a parameter) with all host cores, optional: host_memory_bandwidth when left out
    double host_grads_add_bandwidth; // bytes/s of a COPY_OUT's host part on a GPU (compiler/schedule/cost.c's
                                     // grads_host_bytes), optional: host_adamw_bandwidth when left out
    double host_cores;               // a whole number
    int link_duplex;                 // 1: both link directions run at full rate at once
    double kernel_launch_s;          // seconds, optional
    double gemm_call_s;              // seconds a host BLAS call costs beyond its FLOPs (cpu targets), optional
    double transcendental_s;     // seconds of one exp, log, sqrt, sin, cos or pow on one thread (cpu targets), optional
    double transcendental_f64_s; // seconds of one libm exp, log, sin, cos or pow in double, scalar, one thread: a bf16
                                 // plan's f64 maths (rope's angles) on a cpu target, optional (0: transcendental_s)
    double attention_plain_flops;      // FLOP/s of bf16 attention on a cpu target, the plain kernel on one thread,
                                       // optional: vector_flops when left out
    double gemm_one_thread_flops;      // FLOP/s of an sgemm on one thread (cpu targets: the cpu backend's calls under
                                       // MT_BLAS_THREADED_MACS), optional: the matrix rate when left out
    double bf16_convert_s;             // seconds to widen a bf16 element to f32 or round one back, one thread (cpu
                                       // targets: a bf16 plan's GEMM, attention and node operands), optional (0)
    double gemm_efficiency;            // in (0, 1], optional
    double moe_gemm_efficiency;        // in (0, 1], optional: the MoE grouped kernels' share of peak on a GPU
                                       // (compiler/emit/cuda/moe.cuh); gemm_efficiency when left out
    double duplex_efficiency;          // in (0, 1], optional: each link direction's rate while the other runs too
    double attention_tc_fraction;      // in (0, 1], optional: tensor-core flash attention's FLOP/s / matrix_flops_bf16
                                       // (query/key and value heads of 128 or less)
    double attention_tc_wide_fraction; // in (0, 1], optional: the same for heads wider than 128 (192, 256: other
                                       // tiles); 0 (left out): attention_tc_fraction
    double attention_tc_narrow_fraction; // in (0, 1], optional: the same for heads of 64 or less (Llama 3.2 1B's);
                                         // 0 (left out): attention_tc_fraction
    double attention_fp32_fraction;      // in (0, 1], optional: the fp32 flash attention's FLOP/s / matrix_flops_bf16
    // Several GPUs (docs/scaleout.md), optional: `nodes` nodes of gpus_per_node GPUs each, every GPU with
    // the figures above and its own host link; the host_* figures are a node's, which its GPUs share.
    double gpus_per_node;       // a whole number, optional (1)
    double nodes;               // a whole number, optional (1)
    double gpu_link_bandwidth;  // bytes/s a direction between two GPUs of a node (NVLink), optional (0: none);
                                // required with gpus_per_node above 1
    double gpu_link_latency_s;  // seconds a message between them takes beyond its bytes, optional (0)
    double node_link_bandwidth; // bytes/s a direction from each GPU to other nodes (its NIC), optional (0: none);
                                // required with nodes above 1
    double node_link_latency_s; // seconds, optional (0)
    // The NVMe tier (mtrun --tier-dir), optional, all three or none (0: no tier):
    double tier_capacity;        // bytes of NVMe for the tier
    double tier_read_bandwidth;  // bytes/s sequential, with O_DIRECT
    double tier_write_bandwidth; // bytes/s sequential, with O_DIRECT
    // Not a profile key: compiler/schedule/scaleout.c's profile of one rank of a sharded run of this many
    // ranks, each holding 1/store_shards of every segment of the host store, as the placement counts it
    // (0 or 1: the whole store, or the plan's own shards)
    double store_shards;
} Target;

// Reads a profile into *t. name: a path, or a bare NAME (no '/', no
// ".target" suffix, and no file of that name) meaning schedules/NAME.target
// relative to the current directory. Returns 0, or -1 with *t untouched and
// one message in err (cut to errcap), "FILE:LINE: error: message", or
// "FILE: error: message" where the whole file is at fault (unreadable, a
// required key missing).
int target_load(const char *name, Target *t, char *err, size_t errcap);

#endif
