// moe.cuh: the mixture-of-experts ops on the GPU (needs the prelude and
// mma.cuh): top_k, moe and its backward, the load-balancing loss and its
// backward, add_loss. Their plain reference is runtime/backend/kernels.inc (top_k,
// moe, moe_bwd, load_balance), which the cpu backend runs; these follow it
// op for op (tests/emu/moe_check.c compares moe's with it at odd sizes).
//
// moe and its backward: dropless dispatch, as kernels.inc's. The rows are
// routed on the device (no host sync) into slots grouped by expert, and
// each expert's GEMMs run over its own rows only, tiled through shared
// memory with fp32 accumulation (bf16 plans on the tensor cores: pipelined
// 128 x 128 tiles where C and F allow, below), the grid covering every
// expert's row tiles at once; nothing is computed for an unselected expert. The launch sequence and the scratch are
// runtime/backend/moe_launch.h's.
//
// Each kernel takes its node's output and operands as the cpu kernel does,
// then `bf`: bit a set when argument a (0 the output) is stored as bf16.
// Workspace `ws` is the engine's scratch of the device allocation
// (runtime/backend/backend_cuda.c sizes it: moe and moe_bwd by moe_launch.h,
// load_balance_bwd E doubles).

__device__ __forceinline__ float mt_ldv(const void *p, long long i, int bf) {
    return bf ? mt_ld((const bf16 *)p + i) : ((const float *)p)[i];
}
__device__ __forceinline__ void mt_stv(void *p, long long i, int bf, float v) {
    if (bf) mt_st((bf16 *)p + i, v);
    else ((float *)p)[i] = v;
}
#define MT_BF(a) ((bf >> (a)) & 1)
__device__ __forceinline__ float mt_silu(float h) { return h / (1.0f + expf(-h)); }
// The gate's GELU of h and its derivative *d (kernels.inc's gate_act): gelu
// (act 1, the DSL's gelu(approximate = none), erf's), else gelu_tanh.
__device__ __forceinline__ float mt_moe_gelu(int act, float h, float *d) {
    if (act == 1) {
        float phi2 = 1.0f + erff(h * 0.7071067811865476f);
        *d = 0.5f * phi2 + h * 0.3989422804014327f * expf(-0.5f * h * h);
        return 0.5f * h * phi2;
    }
    float s = 0.7978845608028654f, c = 0.044715f, t = 1.0f - 2.0f / (1.0f + expf(2.0f * (s * (h + c * h * h * h))));
    *d = 0.5f * (1.0f + t) + 0.5f * h * (1.0f - t * t) * s * (1.0f + 3.0f * c * h * h);
    return 0.5f * h * (1.0f + t);
}
// The experts' gate activation (common/graph.h's MoeAct) in bf's bits 16, 17 (moe_launch.h's moe_run).
__device__ __forceinline__ int mt_moe_act_of(int bf) { return bf >> 16 & 3; }
// The experts' activation of h1 = x w_gate^T, h3 = x w_up^T (kernels.inc's
// expert_act): act(h1) h3 (silu: SwiGLU, else the GELU of bf's act), or with
// alpha > 0 gpt-oss's clamped SwiGLU (clamp(h3, -L, L) + 1) g sigmoid(alpha g), g = min(h1, L).
__device__ __forceinline__ float mt_moe_act(int bf, float h1, float h3, float alpha, float L) {
    float d;
    if (!(alpha > 0.0f)) return (mt_moe_act_of(bf) ? mt_moe_gelu(mt_moe_act_of(bf), h1, &d) : mt_silu(h1)) * h3;
    float g = h1 < L ? h1 : L, u = h3 < -L ? -L : h3 > L ? L : h3;
    return (u + 1.0f) * g / (1.0f + expf(-alpha * g));
}
// mt_moe_act's gradients given da (kernels.inc's expert_act_bwd).
__device__ __forceinline__ void mt_moe_act_bwd(int bf, float h1, float h3, float da, float alpha, float L, float *dh1,
                                               float *dh3) {
    if (!(alpha > 0.0f) && mt_moe_act_of(bf)) {
        float d, act = mt_moe_gelu(mt_moe_act_of(bf), h1, &d);
        *dh3 = da * act, *dh1 = da * h3 * d;
        return;
    }
    if (!(alpha > 0.0f)) {
        float sg = 1.0f / (1.0f + expf(-h1));
        *dh3 = da * mt_silu(h1), *dh1 = da * h3 * sg * (1.0f + h1 * (1.0f - sg));
        return;
    }
    float g = h1 < L ? h1 : L, u = h3 < -L ? -L : h3 > L ? L : h3, s = 1.0f / (1.0f + expf(-alpha * g));
    *dh3 = h3 >= -L && h3 <= L ? da * g * s : 0.0f;
    *dh1 = h1 <= L ? da * (u + 1.0f) * s * (1.0f + alpha * g * (1.0f - s)) : 0.0f;
}

// y[rows, E] = 1 at each row's K largest x (of equals the lower index first). One thread a row.
extern "C" __global__ void mt_node_top_k(void *y, const void *x, int bf, long long rows, int E, int K) {
    long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    for (int j = 0; j < E; j++) mt_stv(y, r * E + j, MT_BF(0), 0.0f);
    for (int k = 0; k < K; k++) {
        int best = -1;
        float bv = 0.0f;
        for (int j = 0; j < E; j++) {
            float v = mt_ldv(x, r * E + j, MT_BF(1));
            if (mt_ldv(y, r * E + j, MT_BF(0)) == 0.0f && (best < 0 || v > bv)) best = j, bv = v;
        }
        mt_stv(y, r * E + best, MT_BF(0), 1.0f);
    }
}

// ---------------------------------------------------------------- moe: dropless grouped GEMMs
//
// A chunk of rows [r0, r0 + nr) at a time (runtime/backend/moe_launch.h runs
// the chunks and sizes them): route the chunk's rows to their experts on the
// device, run each expert's GEMMs over its own rows only, scatter back by row.
// Every kernel takes the same parameters (MT_MOE_PARAMS); bf's bits are
// moe_bwd's order: 0 out, 1 dy, 2 x, 3 gates, 4 w_gate, 5 w_up, 6 w_down
// (the forward's y is out, its dy NULL). No float atomics: each output
// element is written by one thread, sums run in a fixed order.
//
// route (ints): cnt [E] rows per expert; off [E + 1] where each expert's
// slots start; tile [E + 1] where its row tiles start (each expert's slots
// padded to MT_MOE_T, or MT_MOE_BT on the pipelined path); slot_row [nr K] the row of each slot, grouped by
// expert, by row within one; slot_of [nr, K] the slot of a row's j-th
// selected expert (j in expert order; -1 past its last), whose expert is
// the one whose off segment holds it. A row's selected experts are its
// first K with gate != 0; a row with more than K gets NaN outputs.
// ws (floats, S = nr K slots): forward a [S, F], o [S, C]; backward h1 (then
// dh1) [S, F], h3 (then dh3) [S, F], o (then dx per slot) [S, C].

#define MT_MOE_T 64  // a tile's rows and columns (moe_launch.h's MOE_TILE)
#define MT_MOE_TK 16 // the CUDA-core tile's reduction depth
#define MT_MOE_NAN __int_as_float(0x7fc00000)
#define MT_MOE_PIPE 0x80 // bf's bit: the pipelined path below (moe_launch.h sets it)
#define MT_MOE_BT 128    // its tiles' rows and columns (moe_launch.h's MOE_TILE_PIPE)
#define MT_MOE_PARAMS                                                                                                \
    void *out, const void *dy, const void *x, const void *gates, const void *wg, const void *wu, const void *wd,      \
        int bf, long long rows, long long r0, int nr, int C, int E, int F, int K, int acc, int *route, float *ws,     \
        float alpha, float limit, const void *bgu

// Where expert e's element (o, i) of weight j lies in its tensor (j 0
// w_gate, 1 w_up: F x C, out x in; 2 w_down: C x F), the node's
// moe_form in bf's bits 8 .. 12 (common/graph.h: bit j the weight
// stored [E, in, out]; 8, 16 a fused gate_up [E, 2F, C] or, under bit 1,
// [E, C, 2F], its gate and up as halves or interleaved).
__device__ __forceinline__ long long mt_moe_w(int bf, int j, long long e, long long o, long long i, int C, int F) {
    int lay = bf >> 8 & 31;
    if (j < 2 && (lay & 24)) {
        long long col = lay & 16 ? 2 * o + j : (long long)j * F + o; // its column of the fused 2F
        return lay & 1 ? (e * C + i) * 2 * F + col : (e * 2 * F + col) * C + i;
    }
    long long N = j == 2 ? C : F, I = j == 2 ? F : C;
    return lay >> j & 1 ? (e * I + i) * N + o : (e * N + o) * I + i;
}
// The gates on the experts' input (MOE_GATES_ON_INPUT, bf's bit 13: Llama
// 4): expert e runs on gate x and its output is not gated; dgates = dx_e . x
// (after mt_moe_dx_slots), dx = the sum of gate dx_e.
__device__ __forceinline__ int mt_moe_on_input(int bf) { return bf >> 13 & 1; }

// The gate and up biases of expert e's column f (bgu [E, 2F] in the columns
// of the fused GEMM, common/graph.h's moe_gate_col and moe_up_col; bf16
// where bf's bit 15), 0 without them.
__device__ __forceinline__ float mt_moe_bias(const void *bgu, int bf, int up, long long e, int f, int F) {
    int col = bf >> 8 & 16 ? 2 * f + up : up * F + f;
    return bgu ? mt_ldv(bgu, e * 2 * F + col, bf >> 15 & 1) : 0.0f;
}

// Where the gradient of that element lies from dw_gate's start in moe_bwd's
// packed output (w_up's from dw_gate's end, but in the one fused tensor).
__device__ __forceinline__ long long mt_moe_dw(int bf, int j, long long e, long long o, long long i, int C, int F,
                                               int E) {
    long long past = j == 2 || (j == 1 && !(bf >> 8 & 24)) ? (long long)j * E * F * C : 0;
    return past + mt_moe_w(bf, j, e, o, i, C, F);
}

// The rows of a route tile: MT_MOE_BT on the pipelined path, else MT_MOE_T.
__device__ __forceinline__ int mt_moe_tile_rows(int bf) { return bf & MT_MOE_PIPE ? MT_MOE_BT : MT_MOE_T; }

struct MtMoeRoute {
    int *cnt, *off, *tile, *slot_row, *slot_of;
};
__device__ __forceinline__ MtMoeRoute mt_moe_route_of(int *route, int E, int nr, int K) {
    MtMoeRoute t;
    t.cnt = route, t.off = t.cnt + E, t.tile = t.off + E + 1, t.slot_row = t.tile + E + 1;
    t.slot_of = t.slot_row + (long long)nr * K;
    return t;
}

// The rank of expert e among row r's experts with gate != 0 (expert order), or -1 when its gate is 0.
__device__ __forceinline__ int mt_moe_rank(const void *gates, int bfg, long long r, int e, int E) {
    if (mt_ldv(gates, r * E + e, bfg) == 0.0f) return -1;
    int j = 0;
    for (int i = 0; i < e; i++) j += mt_ldv(gates, r * E + i, bfg) != 0.0f;
    return j;
}

// Block e (256 threads): cnt[e], the chunk's rows that selected e; all
// blocks together set slot_of to -1 (a row's unused places).
extern "C" __global__ void mt_moe_count(MT_MOE_PARAMS) {
    __shared__ int part[256];
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    int e = blockIdx.x, n = 0;
    for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < (long long)nr * K;
         s += (long long)gridDim.x * blockDim.x)
        t.slot_of[s] = -1;
    for (int i = threadIdx.x; i < nr; i += blockDim.x) {
        int j = mt_moe_rank(gates, MT_BF(3), r0 + i, e, E);
        n += j >= 0 && j < K;
    }
    part[threadIdx.x] = n;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < (int)blockDim.x; i++) n += part[i];
        t.cnt[e] = n;
    }
}

// Block e (256 threads): off[e], tile[e] (and [E] by the last block), then
// expert e's slots in row order by a block-wide scan over the chunk's rows.
extern "C" __global__ void mt_moe_route(MT_MOE_PARAMS) {
    __shared__ int scan[256], base0;
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    int e = blockIdx.x, tid = threadIdx.x;
    if (tid == 0) {
        int o = 0, ti = 0, T = mt_moe_tile_rows(bf);
        for (int i = 0; i < e; i++) o += t.cnt[i], ti += (t.cnt[i] + T - 1) / T;
        t.off[e] = o, t.tile[e] = ti, base0 = o;
        if (e == E - 1) t.off[E] = o + t.cnt[e], t.tile[E] = ti + (t.cnt[e] + T - 1) / T;
    }
    __syncthreads();
    int base = base0;
    for (int b = 0; b < nr; b += 256) {
        int i = b + tid, j = i < nr ? mt_moe_rank(gates, MT_BF(3), r0 + i, e, E) : -1, f = j >= 0 && j < K;
        scan[tid] = f;
        __syncthreads();
        for (int d = 1; d < 256; d *= 2) { // inclusive scan
            int v = tid >= d ? scan[tid - d] : 0;
            __syncthreads();
            scan[tid] += v;
            __syncthreads();
        }
        if (f) {
            int s = base + scan[tid] - 1;
            t.slot_row[s] = (int)(r0 + i), t.slot_of[(long long)i * K + j] = s;
        }
        base += scan[255];
        __syncthreads();
    }
}

// The expert whose segment of start [E + 1] (ascending: tile or off) holds
// x, or -1 past the last one.
__device__ __forceinline__ int mt_moe_expert_of(const int *start, int E, int x) {
    if (x >= start[E]) return -1;
    int lo = 0, hi = E; // start[lo] <= x < start[hi]
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (start[mid] <= x) lo = mid;
        else hi = mid;
    }
    return lo;
}

// The plain tile: acc[q][i][j] += sum over k < kdim of a(q, mt_moe_row(0, i,
// j), k) b(q, mt_moe_col(0, i, j), k), q < NQ, for a 64 x 64 tile (256
// threads, 16 x 16, 4 x 4 each: rows ty + 16 i, columns tx + 16 j) in fp32
// on the CUDA cores. The loaders return 0 outside the operands. AK (BK):
// a's (b's) consecutive k lie next to each other in memory, else its
// consecutive rows (columns) do; consecutive threads load along that
// direction, so that a warp's loads coalesce. SH: 1 when a is the same for
// every q (loaded once), 2 when b is. Shared-memory tiles of depth
// MT_MOE_TK.
template <int NQ, bool AK, bool BK, int SH, class LA, class LB>
__device__ __forceinline__ void mt_moe_gemm_fma(const LA &a, const LB &b, int kdim, float (&acc)[NQ][4][4]) {
    constexpr int NA = SH == 1 ? 1 : NQ, NB = SH == 2 ? 1 : NQ;
    __shared__ float As[NA][MT_MOE_TK][MT_MOE_T + 1], Bs[NB][MT_MOE_TK][MT_MOE_T + 1];
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    for (int k0 = 0; k0 < kdim; k0 += MT_MOE_TK) {
        for (int l = threadIdx.x; l < MT_MOE_TK * MT_MOE_T; l += blockDim.x) {
            int k = AK ? l % MT_MOE_TK : l / MT_MOE_T, i = AK ? l / MT_MOE_TK : l % MT_MOE_T;
            for (int q = 0; q < NA; q++) As[q][k][i] = k0 + k < kdim ? a(q, i, k0 + k) : 0.0f;
            k = BK ? l % MT_MOE_TK : l / MT_MOE_T, i = BK ? l / MT_MOE_TK : l % MT_MOE_T;
            for (int q = 0; q < NB; q++) Bs[q][k][i] = k0 + k < kdim ? b(q, i, k0 + k) : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < MT_MOE_TK; k++)
            for (int q = 0; q < NQ; q++) {
                float av[4], bv[4];
                for (int i = 0; i < 4; i++)
                    av[i] = As[NA > 1 ? q : 0][k][ty + 16 * i], bv[i] = Bs[NB > 1 ? q : 0][k][tx + 16 * i];
                for (int i = 0; i < 4; i++)
                    for (int j = 0; j < 4; j++) acc[q][i][j] += av[i] * bv[j];
            }
        __syncthreads();
    }
}


// The same tile on the tensor cores (mt_mma_16816: bf16 operands, fp32
// accumulation): the loaders' values rounded to bf16 into shared tiles 32
// deep, k pairs packed in a word (rows padded to 20 words: no bank
// conflicts on the fragment loads). Warp w computes rows 16 (w / 2) ..
// + 16, columns 32 (w % 2) .. + 32: four n8 blocks i, acc[q][i][0 .. 4) as
// mma's C fragment (mt_moe_row(1, i, j), mt_moe_col(1, i, j)). AK, BK as
// above (a thread loads a k pair).
#define MT_MOE_TKC 32
__device__ __forceinline__ mt_u32 mt_moe_pack(float lo, float hi) {
    return (mt_u32)mt_f32_to_bf16(lo) | (mt_u32)mt_f32_to_bf16(hi) << 16;
}
template <int NQ, bool AK, bool BK, int SH, class LA, class LB>
__device__ __forceinline__ void mt_moe_gemm_tc(const LA &a, const LB &b, int kdim, float (&acc)[NQ][4][4]) {
    constexpr int NA = SH == 1 ? 1 : NQ, NB = SH == 2 ? 1 : NQ;
    __shared__ mt_u32 As[NA][MT_MOE_T][MT_MOE_TKC / 2 + 4], Bs[NB][MT_MOE_T][MT_MOE_TKC / 2 + 4];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    int r0 = 16 * (warp / 2), c0 = 32 * (warp % 2);
    for (int k0 = 0; k0 < kdim; k0 += MT_MOE_TKC) {
        for (int l = threadIdx.x; l < MT_MOE_T * MT_MOE_TKC / 2; l += blockDim.x) {
            int kp = AK ? l % (MT_MOE_TKC / 2) : l / MT_MOE_T, i = AK ? l / (MT_MOE_TKC / 2) : l % MT_MOE_T;
            int k = k0 + 2 * kp;
            for (int q = 0; q < NA; q++)
                As[q][i][kp] = mt_moe_pack(k < kdim ? a(q, i, k) : 0.0f, k + 1 < kdim ? a(q, i, k + 1) : 0.0f);
            kp = BK ? l % (MT_MOE_TKC / 2) : l / MT_MOE_T, i = BK ? l / (MT_MOE_TKC / 2) : l % MT_MOE_T, k = k0 + 2 * kp;
            for (int q = 0; q < NB; q++)
                Bs[q][i][kp] = mt_moe_pack(k < kdim ? b(q, i, k) : 0.0f, k + 1 < kdim ? b(q, i, k + 1) : 0.0f);
        }
        __syncthreads();
        for (int ks = 0; ks < MT_MOE_TKC / 2; ks += 8) // two k16 steps
            for (int q = 0; q < NQ; q++) {
                int qa = NA > 1 ? q : 0, qb = NB > 1 ? q : 0;
                mt_u32 af[4] = {As[qa][r0 + g][ks + t], As[qa][r0 + g + 8][ks + t], As[qa][r0 + g][ks + t + 4],
                                As[qa][r0 + g + 8][ks + t + 4]};
                for (int i = 0; i < 4; i++) {
                    mt_u32 bfr[2] = {Bs[qb][c0 + 8 * i + g][ks + t], Bs[qb][c0 + 8 * i + g][ks + t + 4]};
                    mt_mma_16816(acc[q][i], af, bfr, acc[q][i]);
                }
            }
        __syncthreads();
    }
}

// Where acc[q][i][j] of either tile lies: its row and column in the 64 x 64 tile.
__device__ __forceinline__ int mt_moe_row(int tc, int i, int j) {
    return tc ? 16 * (threadIdx.x / 64) + threadIdx.x % 32 / 4 + 8 * (j / 2) : threadIdx.x / 16 + 16 * i;
}
__device__ __forceinline__ int mt_moe_col(int tc, int i, int j) {
    return tc ? 32 * (threadIdx.x / 32 % 2) + 8 * i + 2 * (threadIdx.x % 4) + j % 2 : threadIdx.x % 16 + 16 * j;
}

// The tensor cores when x and the experts' weights are bf16 (bf's bits 2, 4,
// 5, 6: a bf16 plan), else fp32 on the CUDA cores. The same for the block.
__device__ __forceinline__ int mt_moe_tc(int bf) { return (bf & 0x74) == 0x74; }
template <int NQ, bool AK, bool BK, int SH, class LA, class LB>
__device__ __forceinline__ void mt_moe_gemm(int tc, const LA &a, const LB &b, int kdim, float (&acc)[NQ][4][4]) {
    if (tc) mt_moe_gemm_tc<NQ, AK, BK, SH>(a, b, kdim, acc);
    else mt_moe_gemm_fma<NQ, AK, BK, SH>(a, b, kdim, acc);
}

// A block of routed-row tiles: expert e, its slots [s0, s0 + ns), their rows and gates in rowid, gate.
struct MtMoeTile {
    int e, s0, ns;
};
__device__ __forceinline__ MtMoeTile mt_moe_tile_of(const MtMoeRoute &t, int E, int *rowid, float *gate,
                                                    const void *gates, int bfg) {
    MtMoeTile b;
    b.e = mt_moe_expert_of(t.tile, E, blockIdx.x);
    if (b.e < 0) return b;
    b.s0 = t.off[b.e] + (blockIdx.x - t.tile[b.e]) * MT_MOE_T;
    b.ns = min(MT_MOE_T, t.off[b.e] + t.cnt[b.e] - b.s0);
    for (int i = threadIdx.x; i < b.ns; i += blockDim.x) {
        rowid[i] = t.slot_row[b.s0 + i];
        gate[i] = mt_ldv(gates, (long long)rowid[i] * E + b.e, bfg);
    }
    __syncthreads();
    return b;
}

// Row tiles x F tiles: h1 = x_e w_gate[e]^T, h3 = x_e w_up[e]^T over expert e's
// slots; the forward keeps a = silu(h1) h3, the backward h1 and h3.
template <bool FWD> __device__ __forceinline__ void mt_moe_up_body(MT_MOE_PARAMS) {
    __shared__ int rowid[MT_MOE_T];
    __shared__ float gate[MT_MOE_T];
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    MtMoeTile b = mt_moe_tile_of(t, E, rowid, gate, gates, MT_BF(3));
    if (b.e < 0) return;
    int n0 = blockIdx.y * MT_MOE_T, e = b.e, ns = b.ns;
    int tc = mt_moe_tc(bf);
    float sum[2][4][4] = {};
    float in = mt_moe_on_input(bf);
    auto la = [&](int q, int i, int k) {
        return i < ns ? (in ? gate[i] : 1.0f) * mt_ldv(x, (long long)rowid[i] * C + k, MT_BF(2)) : 0.0f;
    };
    auto lb = [&](int q, int j, int k) {
        long long w = mt_moe_w(bf, q, e, n0 + j, k, C, F);
        return n0 + j >= F ? 0.0f : q ? mt_ldv(wu, w, MT_BF(5)) : mt_ldv(wg, w, MT_BF(4));
    };
    mt_moe_gemm<2, true, true, 1>(tc, la, lb, C, sum);
    long long S = (long long)nr * K;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int si = mt_moe_row(tc, i, j), f = n0 + mt_moe_col(tc, i, j);
            if (si >= ns || f >= F) continue;
            long long at = (long long)(b.s0 + si) * F + f;
            float h1 = sum[0][i][j] + mt_moe_bias(bgu, bf, 0, e, f, F), h3 = sum[1][i][j] + mt_moe_bias(bgu, bf, 1, e, f, F);
            if (FWD) ws[at] = mt_moe_act(bf, h1, h3, alpha, limit);
            else ws[at] = h1, ws[S * F + at] = h3;
        }
}
extern "C" __global__ void mt_moe_up(MT_MOE_PARAMS) {
    mt_moe_up_body<true>(out, dy, x, gates, wg, wu, wd, bf, rows, r0, nr, C, E, F, K, acc, route, ws, alpha, limit, bgu);
}
extern "C" __global__ void mt_moe_up_bwd(MT_MOE_PARAMS) {
    mt_moe_up_body<false>(out, dy, x, gates, wg, wu, wd, bf, rows, r0, nr, C, E, F, K, acc, route, ws, alpha, limit, bgu);
}

// Row tiles x C tiles: o = a w_down[e]^T per slot (a from ws, or silu(h1) h3 in the backward).
template <bool FWD> __device__ __forceinline__ void mt_moe_down_body(MT_MOE_PARAMS) {
    __shared__ int rowid[MT_MOE_T];
    __shared__ float gate[MT_MOE_T];
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    MtMoeTile b = mt_moe_tile_of(t, E, rowid, gate, gates, MT_BF(3));
    if (b.e < 0) return;
    int n0 = blockIdx.y * MT_MOE_T, e = b.e, ns = b.ns, s0 = b.s0;
    long long S = (long long)nr * K;
    int tc = mt_moe_tc(bf);
    float sum[1][4][4] = {}, *o = ws + (FWD ? 1 : 2) * S * F;
    auto la = [&](int, int i, int k) {
        long long at = (long long)(s0 + i) * F + k;
        return i >= ns ? 0.0f : FWD ? ws[at] : mt_moe_act(bf, ws[at], ws[S * F + at], alpha, limit);
    };
    auto lb = [&](int, int j, int k) {
        return n0 + j < C ? mt_ldv(wd, mt_moe_w(bf, 2, e, n0 + j, k, C, F), MT_BF(6)) : 0.0f;
    };
    mt_moe_gemm<1, true, true, 0>(tc, la, lb, F, sum);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int si = mt_moe_row(tc, i, j), c = n0 + mt_moe_col(tc, i, j);
            if (si < ns && c < C) o[(long long)(s0 + si) * C + c] = sum[0][i][j];
        }
}
extern "C" __global__ void mt_moe_down(MT_MOE_PARAMS) {
    mt_moe_down_body<true>(out, dy, x, gates, wg, wu, wd, bf, rows, r0, nr, C, E, F, K, acc, route, ws, alpha, limit, bgu);
}
extern "C" __global__ void mt_moe_down_bwd(MT_MOE_PARAMS) {
    mt_moe_down_body<false>(out, dy, x, gates, wg, wu, wd, bf, rows, r0, nr, C, E, F, K, acc, route, ws, alpha, limit, bgu);
}

// Row r's selected experts with gate != 0 beyond K: its outputs are NaN.
__device__ __forceinline__ int mt_moe_overflow(const void *gates, int bfg, long long r, int E, int K) {
    int n = 0;
    for (int e = 0; e < E; e++) n += mt_ldv(gates, r * E + e, bfg) != 0.0f;
    return n > K;
}

// Whether row r has more gates != 0 than K (its outputs are then NaN), by
// thread 0 for the block.
__device__ __forceinline__ int mt_moe_bad_row(const void *gates, int bfg, long long r, int E, int K) {
    __shared__ int bad;
    if (threadIdx.x == 0) bad = mt_moe_overflow(gates, bfg, r, E, K);
    __syncthreads();
    return bad;
}

// Block i, row r0 + i: y[r] = sum over its selected experts e, in expert
// order (slot_of's), of gate[r, e] o[slot] (kernels.inc moe's order).
extern "C" __global__ void mt_moe_combine(MT_MOE_PARAMS) {
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    long long i = blockIdx.x, r = r0 + i, S = (long long)nr * K;
    const float *o = ws + S * F;
    int bad = mt_moe_bad_row(gates, MT_BF(3), r, E, K);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float y = 0.0f;
        for (int j = 0, s; j < K && (s = t.slot_of[i * K + j]) >= 0; j++)
            y += (mt_moe_on_input(bf) ? 1.0f : mt_ldv(gates, r * E + mt_moe_expert_of(t.off, E, s), MT_BF(3))) *
                 o[(long long)s * C + c];
        mt_stv(out, r * C + c, MT_BF(0), bad ? MT_MOE_NAN : y);
    }
}

// Block i, row r0 + i: dgates[r, e] = dy[r] . o[slot] (in double) for its
// selected experts, 0 for the others (written first); gates on the input:
// x[r] . dx[slot], run after mt_moe_dx_slots (dx in o's place).
extern "C" __global__ void mt_moe_dgates(MT_MOE_PARAMS) {
    __shared__ double part[256];
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    long long i = blockIdx.x, r = r0 + i, S = (long long)nr * K, dgates = rows * C;
    const float *o = ws + 2 * S * F;
    int bad = mt_moe_bad_row(gates, MT_BF(3), r, E, K);
    for (int e = threadIdx.x; e < E; e += blockDim.x) mt_stv(out, dgates + r * E + e, MT_BF(0), bad ? MT_MOE_NAN : 0.0f);
    __syncthreads();
    for (int j = 0, s; j < K && (s = t.slot_of[i * K + j]) >= 0; j++) { // the same for the whole block
        int e = mt_moe_expert_of(t.off, E, s);
        const float *os = o + (long long)s * C;
        double dot = 0;
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            dot += (double)(mt_moe_on_input(bf) ? mt_ldv(x, r * C + c, MT_BF(2)) : mt_ldv(dy, r * C + c, MT_BF(1))) *
                   os[c];
        part[threadIdx.x] = dot;
        __syncthreads();
        for (int d = blockDim.x / 2; d > 0; d /= 2) {
            if ((int)threadIdx.x < d) part[threadIdx.x] += part[threadIdx.x + d];
            __syncthreads();
        }
        if (threadIdx.x == 0) mt_stv(out, dgates + r * E + e, MT_BF(0), bad ? MT_MOE_NAN : (float)part[0]);
        __syncthreads();
    }
}

// Row tiles x F tiles: da = (gate dy) w_down[e] per slot, then in place
// dh3, dh1 by mt_moe_act_bwd (kernels.inc moe_bwd).
extern "C" __global__ void mt_moe_da(MT_MOE_PARAMS) {
    __shared__ int rowid[MT_MOE_T];
    __shared__ float gate[MT_MOE_T];
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    MtMoeTile b = mt_moe_tile_of(t, E, rowid, gate, gates, MT_BF(3));
    if (b.e < 0) return;
    int n0 = blockIdx.y * MT_MOE_T, e = b.e, ns = b.ns;
    long long S = (long long)nr * K;
    int tc = mt_moe_tc(bf);
    float sum[1][4][4] = {};
    auto la = [&](int, int i, int k) {
        return i < ns ? (mt_moe_on_input(bf) ? 1.0f : gate[i]) * mt_ldv(dy, (long long)rowid[i] * C + k, MT_BF(1))
                      : 0.0f;
    };
    auto lb = [&](int, int j, int k) {
        return n0 + j < F ? mt_ldv(wd, mt_moe_w(bf, 2, e, k, n0 + j, C, F), MT_BF(6)) : 0.0f;
    };
    mt_moe_gemm<1, true, false, 0>(tc, la, lb, C, sum);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int si = mt_moe_row(tc, i, j), f = n0 + mt_moe_col(tc, i, j);
            if (si >= ns || f >= F) continue;
            long long at = (long long)(b.s0 + si) * F + f;
            mt_moe_act_bwd(bf, ws[at], ws[S * F + at], sum[0][i][j], alpha, limit, &ws[at], &ws[S * F + at]);
        }
}

// Row tiles x C tiles: dx per slot = dh1 w_gate[e] + dh3 w_up[e], into o's place.
extern "C" __global__ void mt_moe_dx_slots(MT_MOE_PARAMS) {
    __shared__ int rowid[MT_MOE_T];
    __shared__ float gate[MT_MOE_T];
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    MtMoeTile b = mt_moe_tile_of(t, E, rowid, gate, gates, MT_BF(3));
    if (b.e < 0) return;
    int n0 = blockIdx.y * MT_MOE_T, e = b.e, ns = b.ns, s0 = b.s0;
    long long S = (long long)nr * K;
    int tc = mt_moe_tc(bf);
    float sum[2][4][4] = {}, *o = ws + 2 * S * F;
    auto la = [&](int q, int i, int k) { return i < ns ? ws[q * S * F + (long long)(s0 + i) * F + k] : 0.0f; };
    auto lb = [&](int q, int j, int k) {
        long long w = mt_moe_w(bf, q, e, k, n0 + j, C, F);
        return n0 + j >= C ? 0.0f : q ? mt_ldv(wu, w, MT_BF(5)) : mt_ldv(wg, w, MT_BF(4));
    };
    mt_moe_gemm<2, true, false, 0>(tc, la, lb, F, sum);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int si = mt_moe_row(tc, i, j), c = n0 + mt_moe_col(tc, i, j);
            if (si < ns && c < C) o[(long long)(s0 + si) * C + c] = sum[0][i][j] + sum[1][i][j];
        }
}

// Block i, row r0 + i: dx[r] = the sum of its selected slots' dx, in expert order.
extern "C" __global__ void mt_moe_combine_dx(MT_MOE_PARAMS) {
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    long long i = blockIdx.x, r = r0 + i, S = (long long)nr * K;
    const float *o = ws + 2 * S * F;
    int bad = mt_moe_bad_row(gates, MT_BF(3), r, E, K);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float dx = 0.0f;
        for (int j = 0, s; j < K && (s = t.slot_of[i * K + j]) >= 0; j++)
            dx += (mt_moe_on_input(bf) ? mt_ldv(gates, r * E + mt_moe_expert_of(t.off, E, s), MT_BF(3)) : 1.0f) *
                  o[(long long)s * C + c];
        mt_stv(out, r * C + c, MT_BF(0), bad ? MT_MOE_NAN : dx);
    }
}

// A weight gradient's tile: grid (E * tiles of M, tiles of N), expert e =
// blockIdx.x / tm, its M rows from m0, N columns from n0; reduces over the
// expert's slots. Stores (acc 0) or adds to (acc 1, a later chunk) out.
struct MtMoeWTile {
    int e, m0, n0, s0, ns;
};
__device__ __forceinline__ MtMoeWTile mt_moe_wtile(const MtMoeRoute &t, int M) {
    int tm = (M + MT_MOE_T - 1) / MT_MOE_T;
    MtMoeWTile w;
    w.e = blockIdx.x / tm, w.m0 = blockIdx.x % tm * MT_MOE_T, w.n0 = blockIdx.y * MT_MOE_T;
    w.s0 = t.off[w.e], w.ns = t.cnt[w.e];
    return w;
}
__device__ __forceinline__ void mt_moe_wstore(void *out, long long at, int bf0, int acc, float v) {
    mt_stv(out, at, bf0, acc ? mt_ldv(out, at, bf0) + v : v);
}

// dw_down[e] [C, F] = sum over e's slots of (gate dy)^T a, a = silu(h1) h3.
extern "C" __global__ void mt_moe_dw_down(MT_MOE_PARAMS) {
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    MtMoeWTile w = mt_moe_wtile(t, C);
    long long S = (long long)nr * K, dwg = rows * C + rows * E;
    int e = w.e, m0 = w.m0, n0 = w.n0, s0 = w.s0;
    const int *slot_row = t.slot_row;
    int tc = mt_moe_tc(bf);
    float sum[1][4][4] = {};
    auto la = [&](int, int i, int k) {
        long long r = slot_row[s0 + k];
        float g = mt_moe_on_input(bf) ? 1.0f : mt_ldv(gates, r * E + e, MT_BF(3));
        return m0 + i < C ? g * mt_ldv(dy, r * C + m0 + i, MT_BF(1)) : 0.0f;
    };
    auto lb = [&](int, int j, int k) {
        long long at = (long long)(s0 + k) * F + n0 + j;
        return n0 + j < F ? mt_moe_act(bf, ws[at], ws[S * F + at], alpha, limit) : 0.0f;
    };
    mt_moe_gemm<1, false, false, 0>(tc, la, lb, w.ns, sum);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int c = m0 + mt_moe_row(tc, i, j), f = n0 + mt_moe_col(tc, i, j);
            if (c < C && f < F)
                mt_moe_wstore(out, dwg + mt_moe_dw(bf, 2, e, c, f, C, F, E), MT_BF(0), acc, sum[0][i][j]);
        }
}

// dw_gate[e], dw_up[e] [F, C] = sum over e's slots of dh1^T x, dh3^T x.
extern "C" __global__ void mt_moe_dw_up(MT_MOE_PARAMS) {
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    MtMoeWTile w = mt_moe_wtile(t, F);
    long long S = (long long)nr * K, dwg = rows * C + rows * E;
    int e = w.e, m0 = w.m0, n0 = w.n0, s0 = w.s0;
    const int *slot_row = t.slot_row;
    int tc = mt_moe_tc(bf);
    float sum[2][4][4] = {};
    auto la = [&](int q, int i, int k) { return m0 + i < F ? ws[q * S * F + (long long)(s0 + k) * F + m0 + i] : 0.0f; };
    auto lb = [&](int, int j, int k) { // the expert's input: x, or gate x
        long long r = slot_row[s0 + k];
        float g = mt_moe_on_input(bf) ? mt_ldv(gates, r * E + e, MT_BF(3)) : 1.0f;
        return n0 + j < C ? g * mt_ldv(x, r * C + n0 + j, MT_BF(2)) : 0.0f;
    };
    mt_moe_gemm<2, false, false, 2>(tc, la, lb, w.ns, sum);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int f = m0 + mt_moe_row(tc, i, j), c = n0 + mt_moe_col(tc, i, j);
            if (f >= F || c >= C) continue;
            mt_moe_wstore(out, dwg + mt_moe_dw(bf, 0, e, f, c, C, F, E), MT_BF(0), acc, sum[0][i][j]);
            mt_moe_wstore(out, dwg + mt_moe_dw(bf, 1, e, f, c, C, F, E), MT_BF(0), acc, sum[1][i][j]);
        }
}

// Block e: the gradient of expert e's gate and up biases, dh1 and dh3 summed
// over its slots (in double, in slot order), in the biases' columns;
// launched only with them (bgu not NULL).
extern "C" __global__ void mt_moe_dbias(MT_MOE_PARAMS) {
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    long long S = (long long)nr * K, db = rows * C + rows * E + 3LL * E * F * C;
    int e = blockIdx.x, s0 = t.off[e], ns = t.cnt[e];
    for (int j = threadIdx.x; j < 2 * F; j += blockDim.x) {
        int up = bf >> 8 & 16 ? j % 2 : j / F, f = bf >> 8 & 16 ? j / 2 : j % F;
        double sum = 0;
        for (int s = s0; s < s0 + ns; s++) sum += ws[up * S * F + (long long)s * F + f];
        mt_moe_wstore(out, db + (long long)e * 2 * F + j, MT_BF(0), acc, (float)sum);
    }
}

// ---------------------------------------------------------------- moe on the pipelined tensor-core path
//
// bf16 plans whose C and F are multiples of 8 (moe_launch.h's moe_pipelined;
// bit MT_MOE_PIPE of bf set) run their eight matrix products on one tile
// below instead of the 64 x 64 ones above: 128 x 128 output tiles, 256
// threads (8 warps of 64 x 32; at most 128 registers, so that two blocks
// share an SM), a reduction 32 deep a stage, two stages
// loaded by cp.async while the tensor cores (mma.sync bf16, fp32
// accumulation) work on the other, fragments read by ldmatrix. Why not
// cuBLAS's cublasGemmGroupedBatchedEx: it takes each group's m, n, k in host
// arrays, so it needs every expert's row count on the host (a device-to-host
// sync per moe node, which this path avoids: routing stays on the device) or
// a fixed capacity per expert (work on padding, and rows over it dropped).
// Here an expert's row tiles are found on the device (route's tile, 128-row
// tiles when the bit is set), as the 64-row path finds them.
//
// cp.async moves 16 bytes (8 bf16) from global memory, so every operand is
// bf16 in memory: x and the weights as stored, and the products between
// the GEMMs in bf16 buffers of ws (the 64-row path rounds them to bf16 on
// its way into the tensor cores too; what it keeps in fp32, h1, h3 and o,
// stays fp32 here). ws (floats, S = nr K slots): forward a (bf16) in
// [0, S F / 2), o [S, C] at S F; backward h1 [S, F], h3 [S, F], o (then dx
// per slot) [S, C], then bf16 a [S, F], dh1 [S, F], dh3 [S, F], gdy [S, C]
// (gate dy per slot, rounded as the 64-row path's loader rounds it).

#define MT_MOE_BK 32     // its reduction depth a stage
#define MT_MOE_LDK (MT_MOE_BK + 8)  // a stage's row in the k-contiguous layout (80 bytes: ldmatrix's rows in other banks)
#define MT_MOE_LDN (MT_MOE_BT + 8)  // a stage's row in the k-outer layout (272 bytes)
#define MT_MOE_STAGE (MT_MOE_BT * MT_MOE_LDK) // bf16 a stage of one operand (the larger layout)

// One operand's stage [MT_MOE_BT, MT_MOE_BK] of k0 .. k0 + MT_MOE_BK by cp.async.
// KC (k contiguous): smem [m][k] (stride MT_MOE_LDK), src(m, k) the address
// of elements k .. k + 8 of tile row m; else smem [k][m] (stride
// MT_MOE_LDN), src(k, m) that of tile rows m .. m + 8 at depth k. src
// returns NULL for zeros (past the operand); k >= kdim is zero here.
template <bool KC, class SRC>
__device__ __forceinline__ void mt_moe_stage_load(bf16 *dst, const SRC &src, int k0, int kdim) {
    for (int l = threadIdx.x; l < MT_MOE_BT * MT_MOE_BK / 8; l += blockDim.x) {
        int outer = KC ? l / (MT_MOE_BK / 8) : l / (MT_MOE_BT / 8), inner = 8 * (KC ? l % (MT_MOE_BK / 8) : l % (MT_MOE_BT / 8));
        int k = k0 + (KC ? inner : outer);
        const bf16 *p = k < kdim ? (KC ? src(outer, k) : src(k, inner)) : NULL;
        bf16 *d = dst + outer * (KC ? MT_MOE_LDK : MT_MOE_LDN) + inner;
        if (p) mt_cp_async16(d, p);
        else ((mt_u32 *)d)[0] = ((mt_u32 *)d)[1] = ((mt_u32 *)d)[2] = ((mt_u32 *)d)[3] = 0;
    }
}

// acc += A B^T over k < kdim for the block's 128 x 128 tile: A(m, k) by sa,
// B(n, k) by sb, AK (BK): A's (B's) layout is k-contiguous (see
// mt_moe_stage_load). Warp w holds rows 64 (w / 4) + 16 i + .., columns
// 32 (w % 4) + 8 j + ..: acc[i][j] is mma's C fragment of that m16 x n8 block.
template <bool AK, bool BK, class SA, class SB>
__device__ __forceinline__ void mt_moe_mma_tile(const SA &sa, const SB &sb, int kdim, float (&acc)[4][4][4]) {
    __shared__ __align__(16) bf16 As[2][MT_MOE_STAGE], Bs[2][MT_MOE_STAGE];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wm = 64 * (warp / 4), wn = 32 * (warp % 4);
    int li = lane % 8, lj = lane / 8; // ldmatrix: this lane gives row li of matrix lj
    int nk = (kdim + MT_MOE_BK - 1) / MT_MOE_BK;
    mt_moe_stage_load<AK>(As[0], sa, 0, kdim);
    mt_moe_stage_load<BK>(Bs[0], sb, 0, kdim);
    mt_cp_async_commit();
    for (int kt = 0; kt < nk; kt++) {
        if (kt + 1 < nk) {
            mt_moe_stage_load<AK>(As[(kt + 1) % 2], sa, (kt + 1) * MT_MOE_BK, kdim);
            mt_moe_stage_load<BK>(Bs[(kt + 1) % 2], sb, (kt + 1) * MT_MOE_BK, kdim);
        }
        mt_cp_async_commit(); // an empty group past the last stage: the wait below stays right
        mt_cp_async_wait<1>();
        __syncthreads();
        const bf16 *a = As[kt % 2], *b = Bs[kt % 2];
        for (int kk = 0; kk < MT_MOE_BK; kk += 16) {
            mt_u32 af[4][4], bfr[4][2];
            for (int i = 0; i < 4; i++) {
                int m = wm + 16 * i;
                if (AK) mt_ldmatrix_x4(af[i], a + (m + li + 8 * (lj % 2)) * MT_MOE_LDK + kk + 8 * (lj / 2));
                else mt_ldmatrix_x4_trans(af[i], a + (kk + li + 8 * (lj / 2)) * MT_MOE_LDN + m + 8 * (lj % 2));
            }
            for (int p = 0; p < 2; p++) { // n8 blocks 2p and 2p + 1
                int n = wn + 16 * p;
                mt_u32 r[4];
                if (BK) mt_ldmatrix_x4(r, b + (n + li + 8 * (lj / 2)) * MT_MOE_LDK + kk + 8 * (lj % 2));
                else mt_ldmatrix_x4_trans(r, b + (kk + li + 8 * (lj % 2)) * MT_MOE_LDN + n + 8 * (lj / 2));
                bfr[2 * p][0] = r[0], bfr[2 * p][1] = r[1], bfr[2 * p + 1][0] = r[2], bfr[2 * p + 1][1] = r[3];
            }
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) mt_mma_16816(acc[i][j], af[i], bfr[j], acc[i][j]);
        }
        __syncthreads();
    }
}

// Where acc[i][j][v] of mt_moe_mma_tile lies in the tile: its row and column.
__device__ __forceinline__ int mt_moe_prow(int i, int v) {
    return 64 * (threadIdx.x / 128) + 16 * i + threadIdx.x % 32 / 4 + 8 * (v / 2);
}
__device__ __forceinline__ int mt_moe_pcol(int j, int v) { return 32 * (threadIdx.x / 32 % 4) + 8 * j + 2 * (threadIdx.x % 4) + v % 2; }

// The bf16 buffers of the backward's ws (pipelined path): a, dh1, dh3 [S, F], gdy [S, C].
struct MtMoeBufs {
    bf16 *a, *dh1, *dh3, *gdy;
};
__device__ __forceinline__ MtMoeBufs mt_moe_bufs(float *ws, long long S, int F, int C) {
    MtMoeBufs u;
    u.a = (bf16 *)(ws + 2 * S * F + S * C), u.dh1 = u.a + S * F, u.dh3 = u.dh1 + S * F, u.gdy = u.dh3 + S * F;
    (void)C;
    return u;
}

// Row tiles x 64-wide F tiles: h1 = x_e w_gate[e]^T, h3 = x_e w_up[e]^T over
// expert e's slots, B's n8 blocks alternating w_gate's and w_up's rows (so
// that a thread holds h1 and h3 of one element: acc[i][2p] and [2p + 1]);
// a = silu(h1) h3 to bf16 (the forward's ws, the backward's a), the
// backward also h1 and h3.
template <bool FWD> __device__ __forceinline__ void mt_moe_up_pipe_body(MT_MOE_PARAMS) {
    __shared__ int rowid[MT_MOE_BT];
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    int e = mt_moe_expert_of(t.tile, E, blockIdx.x);
    if (e < 0) return;
    int s0 = t.off[e] + (blockIdx.x - t.tile[e]) * MT_MOE_BT, ns = min(MT_MOE_BT, t.off[e] + t.cnt[e] - s0);
    for (int i = threadIdx.x; i < ns; i += blockDim.x) rowid[i] = t.slot_row[s0 + i];
    __syncthreads();
    int n0 = blockIdx.y * (MT_MOE_BT / 2);
    long long S = (long long)nr * K;
    auto sa = [&](int m, int k) { return m < ns ? (const bf16 *)x + (long long)rowid[m] * C + k : (const bf16 *)NULL; };
    auto sb = [&](int n, int k) {
        int f = n0 + n / 16 * 8 + n % 8;
        const bf16 *w = (const bf16 *)(n / 8 % 2 ? wu : wg);
        return f < F ? w + ((long long)e * F + f) * C + k : (const bf16 *)NULL;
    };
    float sum[4][4][4] = {};
    mt_moe_mma_tile<true, true>(sa, sb, C, sum);
    bf16 *a = FWD ? (bf16 *)ws : mt_moe_bufs(ws, S, F, C).a;
    for (int i = 0; i < 4; i++)
        for (int p = 0; p < 2; p++)
            for (int v = 0; v < 4; v++) {
                int si = mt_moe_prow(i, v), f = n0 + mt_moe_pcol(2 * p, v) / 16 * 8 + mt_moe_pcol(2 * p, v) % 8;
                if (si >= ns || f >= F) continue;
                long long at = (long long)(s0 + si) * F + f;
                float h1 = sum[i][2 * p][v], h3 = sum[i][2 * p + 1][v];
                mt_st(a + at, mt_moe_act(bf, h1, h3, alpha, limit));
                if (!FWD) ws[at] = h1, ws[S * F + at] = h3;
            }
}
extern "C" __global__ void __launch_bounds__(256, 2) mt_moe_up_pipe(MT_MOE_PARAMS) {
    mt_moe_up_pipe_body<true>(out, dy, x, gates, wg, wu, wd, bf, rows, r0, nr, C, E, F, K, acc, route, ws, alpha, limit, bgu);
}
extern "C" __global__ void __launch_bounds__(256, 2) mt_moe_up_bwd_pipe(MT_MOE_PARAMS) {
    mt_moe_up_pipe_body<false>(out, dy, x, gates, wg, wu, wd, bf, rows, r0, nr, C, E, F, K, acc, route, ws, alpha, limit, bgu);
}

// A block of the pipelined path's row tiles: expert e (-1: none), its slots [s0, s0 + ns).
__device__ __forceinline__ MtMoeTile mt_moe_pipe_tile(const MtMoeRoute &t, int E) {
    MtMoeTile b;
    b.e = mt_moe_expert_of(t.tile, E, blockIdx.x);
    if (b.e < 0) return b;
    b.s0 = t.off[b.e] + (blockIdx.x - t.tile[b.e]) * MT_MOE_BT;
    b.ns = min(MT_MOE_BT, t.off[b.e] + t.cnt[b.e] - b.s0);
    return b;
}

// Row tiles x C tiles: o = a w_down[e]^T per slot (the forward's and the backward's ws).
template <bool FWD> __device__ __forceinline__ void mt_moe_down_pipe_body(MT_MOE_PARAMS) {
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    MtMoeTile b = mt_moe_pipe_tile(t, E);
    if (b.e < 0) return;
    int n0 = blockIdx.y * MT_MOE_BT, e = b.e, ns = b.ns, s0 = b.s0;
    long long S = (long long)nr * K;
    const bf16 *a = FWD ? (const bf16 *)ws : mt_moe_bufs(ws, S, F, C).a;
    float *o = ws + (FWD ? 1 : 2) * S * F;
    auto sa = [&](int m, int k) { return m < ns ? a + (long long)(s0 + m) * F + k : (const bf16 *)NULL; };
    auto sb = [&](int n, int k) {
        return n0 + n < C ? (const bf16 *)wd + ((long long)e * C + n0 + n) * F + k : (const bf16 *)NULL;
    };
    float sum[4][4][4] = {};
    mt_moe_mma_tile<true, true>(sa, sb, F, sum);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            for (int v = 0; v < 4; v++) {
                int si = mt_moe_prow(i, v), c = n0 + mt_moe_pcol(j, v);
                if (si < ns && c < C) o[(long long)(s0 + si) * C + c] = sum[i][j][v];
            }
}
extern "C" __global__ void __launch_bounds__(256, 2) mt_moe_down_pipe(MT_MOE_PARAMS) {
    mt_moe_down_pipe_body<true>(out, dy, x, gates, wg, wu, wd, bf, rows, r0, nr, C, E, F, K, acc, route, ws, alpha, limit, bgu);
}
extern "C" __global__ void __launch_bounds__(256, 2) mt_moe_down_bwd_pipe(MT_MOE_PARAMS) {
    mt_moe_down_pipe_body<false>(out, dy, x, gates, wg, wu, wd, bf, rows, r0, nr, C, E, F, K, acc, route, ws, alpha, limit, bgu);
}

// Block s (grid nr K, those past the routed slots return): gdy[s] = bf16(gate dy[row]).
extern "C" __global__ void mt_moe_gather_dy(MT_MOE_PARAMS) {
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    int s = blockIdx.x;
    if (s >= t.off[E]) return;
    int e = mt_moe_expert_of(t.off, E, s);
    long long r = t.slot_row[s], S = (long long)nr * K;
    float g = mt_ldv(gates, r * E + e, MT_BF(3));
    bf16 *gdy = mt_moe_bufs(ws, S, F, C).gdy + (long long)s * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) mt_st(gdy + c, g * mt_ldv(dy, r * C + c, MT_BF(1)));
}

// Row tiles x F tiles: da = gdy w_down[e] per slot, then dh3 and dh1
// (mt_moe_act_bwd) to bf16 (kernels.inc moe_bwd).
extern "C" __global__ void __launch_bounds__(256, 2) mt_moe_da_pipe(MT_MOE_PARAMS) {
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    MtMoeTile b = mt_moe_pipe_tile(t, E);
    if (b.e < 0) return;
    int n0 = blockIdx.y * MT_MOE_BT, e = b.e, ns = b.ns, s0 = b.s0;
    long long S = (long long)nr * K;
    MtMoeBufs u = mt_moe_bufs(ws, S, F, C);
    auto sa = [&](int m, int k) { return m < ns ? u.gdy + (long long)(s0 + m) * C + k : (const bf16 *)NULL; };
    auto sb = [&](int k, int n) { // w_down[e] [C, F]: k = c, n = f
        return n0 + n < F ? (const bf16 *)wd + ((long long)e * C + k) * F + n0 + n : (const bf16 *)NULL;
    };
    float sum[4][4][4] = {};
    mt_moe_mma_tile<true, false>(sa, sb, C, sum);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            for (int v = 0; v < 4; v++) {
                int si = mt_moe_prow(i, v), f = n0 + mt_moe_pcol(j, v);
                if (si >= ns || f >= F) continue;
                long long at = (long long)(s0 + si) * F + f;
                float dh1, dh3;
                mt_moe_act_bwd(bf, ws[at], ws[S * F + at], sum[i][j][v], alpha, limit, &dh1, &dh3);
                mt_st(u.dh3 + at, dh3);
                mt_st(u.dh1 + at, dh1);
            }
}

// Row tiles x C tiles: dx per slot = dh1 w_gate[e] + dh3 w_up[e] (one
// reduction over 2 F: dh1's k, then dh3's), into o's place.
extern "C" __global__ void __launch_bounds__(256, 2) mt_moe_dx_slots_pipe(MT_MOE_PARAMS) {
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    MtMoeTile b = mt_moe_pipe_tile(t, E);
    if (b.e < 0) return;
    int n0 = blockIdx.y * MT_MOE_BT, e = b.e, ns = b.ns, s0 = b.s0;
    long long S = (long long)nr * K;
    MtMoeBufs u = mt_moe_bufs(ws, S, F, C);
    auto sa = [&](int m, int k) {
        return m >= ns ? (const bf16 *)NULL : k < F ? u.dh1 + (long long)(s0 + m) * F + k : u.dh3 + (long long)(s0 + m) * F + k - F;
    };
    auto sb = [&](int k, int n) { // w_gate[e], w_up[e] [F, C]: k = f (then F + f), n = c
        const bf16 *w = (const bf16 *)(k < F ? wg : wu);
        return n0 + n < C ? w + ((long long)e * F + k % F) * C + n0 + n : (const bf16 *)NULL;
    };
    float sum[4][4][4] = {}, *o = ws + 2 * S * F;
    mt_moe_mma_tile<true, false>(sa, sb, 2 * F, sum);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            for (int v = 0; v < 4; v++) {
                int si = mt_moe_prow(i, v), c = n0 + mt_moe_pcol(j, v);
                if (si < ns && c < C) o[(long long)(s0 + si) * C + c] = sum[i][j][v];
            }
}

// A weight gradient's tile on the pipelined path: grid (E * tiles of M, tiles of N), as mt_moe_wtile.
__device__ __forceinline__ MtMoeWTile mt_moe_pipe_wtile(const MtMoeRoute &t, int M, int mt) {
    int tm = (M + mt - 1) / mt;
    MtMoeWTile w;
    w.e = blockIdx.x / tm, w.m0 = blockIdx.x % tm * mt, w.n0 = blockIdx.y * MT_MOE_BT;
    w.s0 = t.off[w.e], w.ns = t.cnt[w.e];
    return w;
}

// dw_down[e] [C, F] = sum over e's slots of gdy^T a.
extern "C" __global__ void __launch_bounds__(256, 2) mt_moe_dw_down_pipe(MT_MOE_PARAMS) {
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    MtMoeWTile w = mt_moe_pipe_wtile(t, C, MT_MOE_BT);
    long long S = (long long)nr * K, dwd = rows * C + rows * E + 2LL * E * F * C;
    int e = w.e, m0 = w.m0, n0 = w.n0, s0 = w.s0;
    MtMoeBufs u = mt_moe_bufs(ws, S, F, C);
    auto sa = [&](int k, int m) { return m0 + m < C ? u.gdy + (long long)(s0 + k) * C + m0 + m : (const bf16 *)NULL; };
    auto sb = [&](int k, int n) { return n0 + n < F ? u.a + (long long)(s0 + k) * F + n0 + n : (const bf16 *)NULL; };
    float sum[4][4][4] = {};
    mt_moe_mma_tile<false, false>(sa, sb, w.ns, sum);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            for (int v = 0; v < 4; v++) {
                int c = m0 + mt_moe_prow(i, v), f = n0 + mt_moe_pcol(j, v);
                if (c < C && f < F) mt_moe_wstore(out, dwd + ((long long)e * C + c) * F + f, MT_BF(0), acc, sum[i][j][v]);
            }
}

// dw_gate[e], dw_up[e] [F, C] = sum over e's slots of dh1^T x, dh3^T x: A's
// rows 0 .. 64 are dh1's columns m0 .., rows 64 .. 128 dh3's (M tiles 64 wide).
extern "C" __global__ void __launch_bounds__(256, 2) mt_moe_dw_up_pipe(MT_MOE_PARAMS) {
    MtMoeRoute t = mt_moe_route_of(route, E, nr, K);
    MtMoeWTile w = mt_moe_pipe_wtile(t, F, MT_MOE_BT / 2);
    long long S = (long long)nr * K, dwg = rows * C + rows * E, n = (long long)E * F * C;
    int e = w.e, m0 = w.m0, n0 = w.n0, s0 = w.s0;
    const int *slot_row = t.slot_row;
    MtMoeBufs u = mt_moe_bufs(ws, S, F, C);
    auto sa = [&](int k, int m) {
        int f = m0 + m % (MT_MOE_BT / 2);
        return f < F ? (m < MT_MOE_BT / 2 ? u.dh1 : u.dh3) + (long long)(s0 + k) * F + f : (const bf16 *)NULL;
    };
    auto sb = [&](int k, int j) {
        return n0 + j < C ? (const bf16 *)x + (long long)slot_row[s0 + k] * C + n0 + j : (const bf16 *)NULL;
    };
    float sum[4][4][4] = {};
    mt_moe_mma_tile<false, false>(sa, sb, w.ns, sum);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            for (int v = 0; v < 4; v++) {
                int m = mt_moe_prow(i, v), f = m0 + m % (MT_MOE_BT / 2), c = n0 + mt_moe_pcol(j, v);
                if (f >= F || c >= C) continue;
                long long at = dwg + ((long long)e * F + f) * C + c;
                mt_moe_wstore(out, at + (m < MT_MOE_BT / 2 ? 0 : n), MT_BF(0), acc, sum[i][j][v]);
            }
}

// The softmax of row r of logits [rows, E] at j, given its max m and sum s.
__device__ __forceinline__ void mt_row_softmax(const void *l, int bfl, long long r, int E, float *m, float *s) {
    float mx = mt_ldv(l, r * E, bfl), sum = 0.0f;
    for (int j = 1; j < E; j++) mx = fmaxf(mx, mt_ldv(l, r * E + j, bfl));
    for (int j = 0; j < E; j++) sum += expf(mt_ldv(l, r * E + j, bfl) - mx);
    *m = mx, *s = sum;
}

// The counts C and probability sums S per expert of layers [0, to) of a
// pooled loss's sums (layers, 2 E), at expert e.
__device__ void mt_pool_sums(const double *sums, long long to, int E, int e, double *C, double *S) {
    *C = 0, *S = 0;
    for (long long l = 0; l < to; l++) *C += sums[l * 2 * E + e], *S += sums[l * 2 * E + E + e];
}

// out[] = E sum_e f_e P_e (kernels.inc load_balance): one thread. pooled:
// sums, layer, pool_rows are the stream's LoadBalancePool's (common/graph.h):
// this layer's counts and probability sums go to its row of sums, and out is
// its share of the pooled loss.
extern "C" __global__ void mt_node_load_balance(void *out, const void *logits, const void *mask, int bf, long long rows,
                                                int E, int pooled, double *sums, long long layer, long long layers,
                                                double pool_rows) {
    if (threadIdx.x || blockIdx.x) return;
    (void)layers;
    double total = 0, norm = pooled ? 1.0 : (double)rows, *own = pooled ? sums + layer * 2 * E : NULL;
    for (int e = 0; e < E; e++) {
        double f = 0, P = 0;
        for (long long r = 0; r < rows; r++) {
            float m, s;
            mt_row_softmax(logits, MT_BF(1), r, E, &m, &s);
            f += (double)mt_ldv(mask, r * E + e, MT_BF(2)) / norm;
            P += (double)(expf(mt_ldv(logits, r * E + e, MT_BF(1)) - m) / s) / norm;
        }
        if (pooled) own[e] = f, own[E + e] = P;
        else total += f * P;
    }
    for (int e = 0; pooled && e < E; e++) {
        double C, S;
        mt_pool_sums(sums, layer, E, e, &C, &S);
        total += (own[e] * (S + own[E + e]) + own[E + e] * C) / pool_rows * (1 / pool_rows);
    }
    mt_stv(out, 0, MT_BF(0), (float)((double)E * total));
}

// dlogits[r, j] = dloss E / rows p_rj (f_j - sum_e f_e p_re): one block, f [E] in ws (doubles);
// pooled as mt_node_load_balance.
extern "C" __global__ void mt_node_load_balance_bwd(void *out, const void *dloss, const void *logits, const void *mask,
                                                    int bf, long long rows, int E, double *ws, int pooled, double *sums,
                                                    long long layer, long long layers, double pool_rows) {
    (void)layer;
    if (threadIdx.x == 0)
        for (int e = 0; e < E; e++) {
            double f = 0, S;
            if (pooled) mt_pool_sums(sums, layers, E, e, &f, &S), f /= pool_rows; // every layer's counts
            else
                for (long long r = 0; r < rows; r++) f += (double)mt_ldv(mask, r * E + e, MT_BF(3)) / (double)rows;
            ws[e] = f;
        }
    __syncthreads();
    double scale = (double)mt_ldv(dloss, 0, MT_BF(1)) * (double)E / (pooled ? pool_rows : (double)rows);
    for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
        float m, s;
        mt_row_softmax(logits, MT_BF(2), r, E, &m, &s);
        double fp = 0;
        for (int e = 0; e < E; e++) fp += ws[e] * (double)(expf(mt_ldv(logits, r * E + e, MT_BF(2)) - m) / s);
        for (int j = 0; j < E; j++) {
            double p = (double)(expf(mt_ldv(logits, r * E + j, MT_BF(2)) - m) / s);
            mt_stv(out, r * E + j, MT_BF(0), (float)(scale * p * (ws[j] - fp)));
        }
    }
}

// y = x (the loss joins the objective through the backward's seed).
extern "C" __global__ void mt_node_add_loss(void *y, const void *x, const void *loss, int bf, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    (void)loss;
    if (i < n) mt_stv(y, i, MT_BF(0), mt_ldv(x, i, MT_BF(1)));
}
#undef MT_BF
