// moe_launch.h: how one moe or moe_bwd node runs as compiler/cuda/moe.cuh's
// grouped kernels: its chunks of rows, the scratch they need, and the launch
// sequence. Host C, shared by runtime/backend_cuda.c and tests/emu/moe_check.c
// (which runs it on the emulation against runtime/kernels.inc). The scratch
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
//             mt_moe_dw_up (E x tiles)        dw_gate += dh1^T x, dw_up += dh3^T x
//             mt_moe_dx_slots, mt_moe_combine_dx   dx
// "tiles": a grid over every expert's routed rows at once, each expert's
// padded to MOE_TILE; its size, known on the host without the counts, is the
// bound (S + E (MOE_TILE - 1)) / MOE_TILE. Later chunks add to the weights'
// gradients (in their storage type: bf16 rounds once per chunk).
#ifndef MT_MOE_LAUNCH_H
#define MT_MOE_LAUNCH_H

#include "../common/scratch.h" // MoeDims and the scratch of a chunk: moe_scratch_bytes, moe_chunk_rows

enum { MOE_TILE = 64, MOE_THREADS = 256 }; // moe.cuh's MT_MOE_T, its blocks' threads

typedef enum {
    MOE_COUNT, MOE_ROUTE, MOE_UP, MOE_DOWN, MOE_COMBINE, MOE_UP_BWD, MOE_DOWN_BWD, MOE_DGATES, MOE_DW_DOWN, MOE_DA,
    MOE_DW_UP, MOE_DX_SLOTS, MOE_COMBINE_DX, MOE_KERNELS
} MoeKernel;

static const char *const MOE_KERNEL_NAME[MOE_KERNELS] = {
    "mt_moe_count",    "mt_moe_route",  "mt_moe_up", "mt_moe_down",  "mt_moe_combine",  "mt_moe_up_bwd",
    "mt_moe_down_bwd", "mt_moe_dgates", "mt_moe_dw_down", "mt_moe_da", "mt_moe_dw_up", "mt_moe_dx_slots",
    "mt_moe_combine_dx"};

// Launches kernel k on a grid (gx, gy) of MOE_THREADS-thread blocks with the
// 18 parameters of MT_MOE_PARAMS; 0 when queued.
typedef int (*MoeLaunchFn)(void *ctx, MoeKernel k, unsigned gx, unsigned gy, void **params);

// Runs a node chunk by chunk over ws (moe_scratch_bytes(d, bwd, chunk)).
// arg: moe_bwd's operands (out, dy, x, gates, w_gate, w_up, w_down; the
// forward's y as out, dy NULL), bf their bf16 bits in that order. 0, or the
// first launch's failure.
static inline int moe_run(MoeDims d, int bwd, long long chunk, void *const arg[7], int bf, float *ws, MoeLaunchFn launch,
                          void *ctx) {
    void *out = arg[0], *dy = arg[1], *x = arg[2], *gates = arg[3], *wg = arg[4], *wu = arg[5], *wd = arg[6];
    long long rows = d.rows, r0 = 0;
    int C = d.C, E = d.E, F = d.F, K = d.K, acc = 0, nr = 0;
    int *route = NULL;
    void *params[] = {&out, &dy, &x, &gates, &wg, &wu, &wd, &bf, &rows, &r0, &nr, &C, &E, &F, &K, &acc, &route, &ws};
    static const MoeKernel FWD[] = {MOE_UP, MOE_DOWN, MOE_COMBINE};
    static const MoeKernel BWD[] = {MOE_UP_BWD, MOE_DOWN_BWD, MOE_DGATES, MOE_DW_DOWN, MOE_DA,
                                    MOE_DW_UP,  MOE_DX_SLOTS, MOE_COMBINE_DX};
    unsigned ft = (unsigned)((F + MOE_TILE - 1) / MOE_TILE), ct = (unsigned)((C + MOE_TILE - 1) / MOE_TILE);
    for (; r0 < rows; r0 += nr, acc = 1) {
        nr = (int)(rows - r0 < chunk ? rows - r0 : chunk);
        route = (int *)(ws + moe_floats(d, bwd, nr));
        unsigned tiles = (unsigned)(((long long)nr * K + (long long)E * (MOE_TILE - 1)) / MOE_TILE);
        int rc = launch(ctx, MOE_COUNT, (unsigned)E, 1, params);
        if (!rc) rc = launch(ctx, MOE_ROUTE, (unsigned)E, 1, params);
        int n = bwd ? 8 : 3;
        for (int i = 0; i < n && !rc; i++) {
            MoeKernel k = bwd ? BWD[i] : FWD[i];
            unsigned gx = k == MOE_COMBINE || k == MOE_DGATES || k == MOE_COMBINE_DX ? (unsigned)nr
                          : k == MOE_DW_DOWN                                        ? (unsigned)E * ct
                          : k == MOE_DW_UP                                          ? (unsigned)E * ft
                                                                                    : tiles;
            unsigned gy = k == MOE_UP || k == MOE_UP_BWD || k == MOE_DA || k == MOE_DW_DOWN ? ft
                          : k == MOE_COMBINE || k == MOE_DGATES || k == MOE_COMBINE_DX ? 1
                                                                                        : ct;
            if (tiles == 0 && gx == tiles) continue; // no routed rows: nothing to launch
            rc = launch(ctx, k, gx, gy, params);
        }
        if (rc) return rc;
    }
    return 0;
}

#endif
