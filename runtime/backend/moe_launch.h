// moe_launch.h: how one moe or moe_bwd node runs as compiler/emit/cuda/moe.cuh's
// grouped kernels: its chunks of rows, the scratch they need, and the launch
// sequence. Host C, shared by runtime/backend/backend_cuda.c and tests/emu/moe_check.c
// (which runs it on the emulation against runtime/backend/kernels.inc). The scratch
// sizing is common/scratch.h's, which mtc's scheduler counts too.
//
// Per chunk of nr rows, S = nr K routed slots (K: the experts a row selects):
//   mt_moe_count, mt_moe_route   (E blocks)        route the rows on the device
//   forward:  mt_moe_up, mt_moe_down (tiles)  a = silu(x w_gate^T) (x w_up^T), o = a w_down^T
//             mt_moe_combine (nr blocks)      y[r] = sum of gate o over r's experts
//   backward: mt_moe_up_bwd, mt_moe_down_bwd  h1, h3, o again
//             mt_moe_dgates (nr blocks)       dgates = dy . o
//             mt_moe_dw_down (E x tiles)      dw_down += (gate dy)^T a
//             mt_moe_da (tiles)               dh1, dh3
//             mt_moe_dbias (E blocks)         the gate_up bias's gradient, with one
//             mt_moe_dw_up (E x tiles)        dw_gate += dh1^T x, dw_up += dh3^T x
//             mt_moe_dx_slots, mt_moe_combine_dx   dx
// a = mt_moe_act(h1, h3): act(h1) h3 (silu, gelu or gelu_tanh: the node's
// MoeAct, bf's bits 16, 17), or gpt-oss's clamped SwiGLU where the node's
// alpha (MoeDims) is above 0. A non-silu act never takes the pipelined path
// (its moe_form is not 0: scratch.h's moe_pipelined).
// "tiles": a grid over every expert's routed rows at once, each expert's
// padded to MOE_TILE; its size, known on the host without the counts, is the
// bound (S + E (MOE_TILE - 1)) / MOE_TILE. Later chunks add to the weights'
// gradients (in their storage type: bf16 rounds once per chunk).
//
// The weights are read where they lie, in any layout the node's moe_form
// names (common/graph.h; bf's bits 8 .. 13, with the gates on the experts'
// input: then dgates runs after dx_slots, from the experts' dx).
// A bf16 node whose C and F are multiples of 8, its weights each [E, out, in] (scratch.h's moe_pipelined)
// and whose operands are 16-byte aligned (moe_takes_pipelined) runs the
// pipelined tensor-core kernels instead (moe.cuh explains why they
// and not cuBLAS's grouped GEMM), tiles of MOE_TILE_PIPE rows:
//   forward:  mt_moe_up_pipe, mt_moe_down_pipe, mt_moe_combine
//   backward: mt_moe_up_bwd_pipe, mt_moe_down_bwd_pipe, mt_moe_dgates,
//             mt_moe_gather_dy (nr K blocks)  gate dy per slot, bf16
//             mt_moe_dw_down_pipe, mt_moe_da_pipe, mt_moe_dw_up_pipe,
//             mt_moe_dx_slots_pipe, mt_moe_combine_dx
#ifndef MT_MOE_LAUNCH_H
#define MT_MOE_LAUNCH_H

#include <stdint.h>

#include "common/scratch.h" // MoeDims and the scratch of a chunk: moe_scratch_bytes, moe_chunk_rows

// moe.cuh's MT_MOE_T, MT_MOE_BT and MT_MOE_PIPE; its blocks' threads
enum { MOE_TILE = 64, MOE_TILE_PIPE = 128, MOE_BF_PIPE = 0x80, MOE_THREADS = 256 };

typedef enum {
    MOE_COUNT,
    MOE_ROUTE,
    MOE_UP,
    MOE_DOWN,
    MOE_COMBINE,
    MOE_UP_BWD,
    MOE_DOWN_BWD,
    MOE_DGATES,
    MOE_DW_DOWN,
    MOE_DA,
    MOE_DW_UP,
    MOE_DX_SLOTS,
    MOE_COMBINE_DX,
    MOE_UP_PIPE,
    MOE_UP_BWD_PIPE,
    MOE_DOWN_PIPE,
    MOE_DOWN_BWD_PIPE,
    MOE_GATHER_DY,
    MOE_DA_PIPE,
    MOE_DX_SLOTS_PIPE,
    MOE_DW_DOWN_PIPE,
    MOE_DW_UP_PIPE,
    MOE_DBIAS,
    MOE_KERNELS
} MoeKernel;

static const char *const MOE_KERNEL_NAME[MOE_KERNELS] =
    {"mt_moe_count",        "mt_moe_route",         "mt_moe_up",         "mt_moe_down",    "mt_moe_combine",
     "mt_moe_up_bwd",       "mt_moe_down_bwd",      "mt_moe_dgates",     "mt_moe_dw_down", "mt_moe_da",
     "mt_moe_dw_up",        "mt_moe_dx_slots",      "mt_moe_combine_dx", "mt_moe_up_pipe", "mt_moe_up_bwd_pipe",
     "mt_moe_down_pipe",    "mt_moe_down_bwd_pipe", "mt_moe_gather_dy",  "mt_moe_da_pipe", "mt_moe_dx_slots_pipe",
     "mt_moe_dw_down_pipe", "mt_moe_dw_up_pipe",    "mt_moe_dbias"};

// Whether moe_run runs node d (bf16 bits bf, operands arg as moe_run's,
// scratch ws) on the pipelined kernels: its scratch was sized for them
// (moe_pipelined), x and the weights are bf16, and their cp.async loads
// find x, the weights and ws 16-byte aligned (C, F multiples of 8 keep the
// rows so; a view at an odd offset would not be).
static inline int moe_takes_pipelined(MoeDims d, int bf, void *const arg[8], const float *ws) {
    uintptr_t base = (uintptr_t)arg[2] | (uintptr_t)arg[4] | (uintptr_t)arg[5] | (uintptr_t)arg[6] | (uintptr_t)ws;
    return moe_pipelined(d) && (bf & 0x74) == 0x74 && base % 16 == 0;
}

// Launches kernel k on a grid (gx, gy) of MOE_THREADS-thread blocks with the
// 21 parameters of MT_MOE_PARAMS; 0 when queued.
typedef int (*MoeLaunchFn)(void *ctx, MoeKernel k, unsigned gx, unsigned gy, void **params);

// Runs a node chunk by chunk over ws (moe_scratch_bytes(d, bwd, chunk)).
// arg: moe_bwd's operands (out, dy, x, gates, w_gate, w_up, w_down, the
// gate_up bias or NULL; the forward's y as out, dy NULL), bf their bf16 bits
// in that order (the bias's bit 15). 0, or the first launch's failure.
static inline int moe_run(MoeDims d, int bwd, long long chunk, void *const arg[8], int bf, float *ws,
                          MoeLaunchFn launch, void *ctx) {
    void *out = arg[0], *dy = arg[1], *x = arg[2], *gates = arg[3], *wg = arg[4], *wu = arg[5], *wd = arg[6];
    const void *bgu = arg[7];
    long long rows = d.rows, r0 = 0;
    int C = d.C, E = d.E, F = d.F, K = d.K, acc = 0, nr = 0;
    int *route = NULL;
    int pipe = moe_takes_pipelined(d, bf, arg, ws);
    if (pipe) bf |= MOE_BF_PIPE;
    bf |= (d.form & MOE_FORM_BITS) << 8;   // the weights' layout and where the gates apply (moe.cuh's mt_moe_w, ..)
    bf |= (d.form >> MOE_ACT_SHIFT) << 16; // the gate's activation (moe.cuh's mt_moe_act_of)
    float alpha = d.alpha, limit = d.limit;
    void *params[] = {&out, &dy, &x, &gates, &wg,  &wu,    &wd, &bf,    &rows,  &r0, &nr,
                      &C,   &E,  &F, &K,     &acc, &route, &ws, &alpha, &limit, &bgu};
    static const MoeKernel FWD[] = {MOE_UP, MOE_DOWN, MOE_COMBINE};
    static const MoeKernel BWD[] = {MOE_UP_BWD, MOE_DOWN_BWD, MOE_DGATES,   MOE_DW_DOWN,   MOE_DA,
                                    MOE_DBIAS,  MOE_DW_UP,    MOE_DX_SLOTS, MOE_COMBINE_DX};
    static const MoeKernel BWD_ON_INPUT[] = {MOE_UP_BWD, MOE_DOWN_BWD, MOE_DW_DOWN, MOE_DA,        MOE_DBIAS,
                                             MOE_DW_UP,  MOE_DX_SLOTS, MOE_DGATES,  MOE_COMBINE_DX}; // dgates from dx
    static const MoeKernel FWD_PIPE[] = {MOE_UP_PIPE, MOE_DOWN_PIPE, MOE_COMBINE};
    static const MoeKernel BWD_PIPE[] = {MOE_UP_BWD_PIPE, MOE_DOWN_BWD_PIPE, MOE_DGATES,
                                         MOE_GATHER_DY,   MOE_DW_DOWN_PIPE,  MOE_DA_PIPE,
                                         MOE_DW_UP_PIPE,  MOE_DX_SLOTS_PIPE, MOE_COMBINE_DX};
    const MoeKernel *seq = pipe  ? (bwd ? BWD_PIPE : FWD_PIPE)
                           : bwd ? (d.form & MOE_GATES_ON_INPUT ? BWD_ON_INPUT : BWD)
                                 : FWD;
    int n = bwd ? 9 : 3, T = pipe ? MOE_TILE_PIPE : MOE_TILE;
    unsigned ft = (unsigned)((F + T - 1) / T), ct = (unsigned)((C + T - 1) / T);
    unsigned fh = (unsigned)((F + T / 2 - 1) /
                             (T / 2)); // the pipelined up's and dw_up's F tiles (64 of gate's, 64 of up's)
    for (; r0 < rows; r0 += nr, acc = 1) {
        nr = (int)(rows - r0 < chunk ? rows - r0 : chunk);
        route = (int *)(ws + moe_floats(d, bwd, nr));
        unsigned tiles = (unsigned)(((long long)nr * K + (long long)E * (T - 1)) / T);
        int rc = launch(ctx, MOE_COUNT, (unsigned)E, 1, params);
        if (!rc) rc = launch(ctx, MOE_ROUTE, (unsigned)E, 1, params);
        for (int i = 0; i < n && !rc; i++) {
            MoeKernel k = seq[i];
            unsigned gx = tiles, gy = ct;
            switch (k) {
            case MOE_COMBINE:
            case MOE_DGATES:
            case MOE_COMBINE_DX: gx = (unsigned)nr, gy = 1; break;
            case MOE_DBIAS: gx = (unsigned)E, gy = 1; break;
            case MOE_GATHER_DY: gx = (unsigned)nr * (unsigned)K, gy = 1; break;
            case MOE_DW_DOWN:
            case MOE_DW_DOWN_PIPE: gx = (unsigned)E * ct, gy = ft; break;
            case MOE_DW_UP: gx = (unsigned)E * ft; break;
            case MOE_DW_UP_PIPE: gx = (unsigned)E * fh; break;
            case MOE_UP:
            case MOE_UP_BWD:
            case MOE_DA:
            case MOE_DA_PIPE: gy = ft; break;
            case MOE_UP_PIPE:
            case MOE_UP_BWD_PIPE: gy = fh; break;
            default: break; // row tiles x C tiles
            }
            if ((tiles == 0 && gx == tiles) || (k == MOE_DBIAS && !bgu)) continue; // no routed rows, no bias
            rc = launch(ctx, k, gx, gy, params);
        }
        if (rc) return rc;
    }
    return 0;
}

#endif
