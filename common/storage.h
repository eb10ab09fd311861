// storage.h: the storage rule, the one place that says how many bytes every
// value of a plan takes, on the device, on the link and in host memory.
// mtc sizes the arena, the copies, the cost model, --summary and --explain
// from it; mtrun's plan reader, verifier, backends and host store read it
// too. Nothing else multiplies by an element size of its own.
//
// A graph value's logical dtype (Node.dtype) is f32 or i32. Under the
// model's compute dtype (TrainConfig.compute):
//
//   f32   every float value is stored as fp32; the fp32 master weights
//         themselves stream to the device.
//   bf16  float values are stored as bf16 (round to nearest even, NaN kept
//         a quiet NaN): weights on the device and on the link, activations,
//         their gradients, and weight gradients on the link. Arithmetic
//         inside every kernel is fp32 (loads widen exactly), and every
//         node's value is rounded to bf16 where the node ends, even inside
//         a fused kernel, so fusion and tiling never change a result.
//         Reductions accumulate in fp32 or wider and round once, at the end.
//         Stay fp32: scalars (the loss and its seed), the embedding's
//         gradient (OP_EMBED_BWD, a scatter-add of every token's row, which
//         needs an fp32 accumulator and is that accumulator), and a tiled
//         part's parameter gradient until its chunks are summed (Node.wide:
//         each chunk's part and the running sum, so that the last add rounds
//         once, as the untiled GEMM or column sum does), and attention's
//         softmax statistics (OP_ATTENTION_LSE: the backward's exp(s - lse)
//         needs them to fp32's precision).
//
// The host store is fp32 (master weights, Adam m and v, gradient
// accumulators) plus, under bf16, the bf16 copy that streams; AdamW writes
// that copy in the same pass as the update. Under bf16 with one micro-batch
// a step the layers' gradients are bf16 instead (storage_grads_bf16).
#ifndef MT_STORAGE_H
#define MT_STORAGE_H

#include <stdint.h>

#include "common/graph.h"
#include "common/bf16.h"

// The node whose buffer n's value lives in (views and reshapes alias their operand).
static inline const Node *storage_base(const Node *n) {
    while (n->op == OP_VIEW || n->op == OP_RESHAPE) n = n->in[0];
    return n;
}

// What node n's value is stored as under compute dtype `compute`.
static inline DType storage_dtype(DType compute, const Node *n) {
    if (n->dtype != DT_F32) return n->dtype;
    if (compute != DT_BF16) return DT_F32;
    const Node *b = storage_base(n);
    if (b->op == OP_PARAM) return DT_BF16; // weights stream as bf16
    if (b->shape.rank == 0 || b->op == OP_EMBED_BWD || b->op == OP_ATTENTION_LSE || b->wide) return DT_F32;
    return DT_BF16;
}

// How many leading elements of node n's value are rounded to bf16 where it
// ends: all of a value stored as bf16; of a wide norm backward (its gain's
// and bias's gradient a tiled part's fp32 partial), the dx before them, which
// the block's backward reads as every other activation gradient; else none.
static inline int64_t storage_rounded_elems(DType compute, const Node *n) {
    if (n->dtype != DT_F32 || compute != DT_BF16) return 0;
    if (storage_dtype(compute, n) == DT_BF16) return shape_numel(&n->shape);
    if (n->wide && (n->op == OP_LAYERNORM_BWD || n->op == OP_RMSNORM_BWD)) return shape_numel(&n->in[1]->shape);
    return 0;
}

static inline int64_t dtype_bytes(DType t) { return t == DT_BF16 ? 2 : 4; }

// Bytes of one element of n, and of all of it.
static inline int64_t storage_elem_bytes(DType compute, const Node *n) {
    return dtype_bytes(storage_dtype(compute, n));
}
static inline int64_t storage_bytes(DType compute, const Node *n) {
    return shape_numel(&n->shape) * storage_elem_bytes(compute, n);
}

// Bytes of a weight element on the device and on the link (what streams).
static inline int64_t storage_weight_bytes(DType compute) { return compute == DT_BF16 ? 2 : 4; }

// Host store arrays align each parameter to STORE_ALIGN_ELEMS elements (64
// bytes of fp32, for the optimizer's vector loops): the elements a parameter
// of numel elements takes, and those of the whole store.
enum { STORE_ALIGN_ELEMS = 16 };
static inline int64_t storage_host_elems_of(int64_t numel) {
    return (numel + STORE_ALIGN_ELEMS - 1) / STORE_ALIGN_ELEMS * STORE_ALIGN_ELEMS;
}
static inline int64_t storage_host_elems(const Graph *g) {
    int64_t n = 0;
    for (int i = 0; i < g->params.n; i++) {
        const Param *p = g->params.items[i];
        n += storage_host_elems_of(shape_numel(&p->shape)) * param_copies(g, p);
    }
    return n;
}

// Host store bytes per parameter with an fp32 gradient accumulator: fp32
// master 4, Adam m and v 8, gradients 4, and under bf16 the 2-byte copy
// that streams. Where the gradients are bf16 (storage_grads_bf16), a layer
// parameter takes 2 bytes less: storage_host_bytes counts both.
static inline int64_t storage_host_bytes_per_param(DType compute) { return 16 + (compute == DT_BF16 ? 2 : 0); }

// Whether the host store holds the layers' gradients as bf16 (2 bytes a
// parameter) rather than in fp32 accumulators (4): with bf16 compute, one
// micro-batch a step, one rank (ranks sum fp32 gradients), the gradients
// not on the NVMe tier (tier_grads: its records keep fp32 ones), and every
// block parameter's gradient leaving the device once a pass, as bf16. Then
// each COPY_OUT into a layer sets its range, once a step, and the norm and
// AdamW read the bf16 values widened: the bits an fp32 accumulator that
// started at zero held (0 + x is x), without the widen and with no zeroing.
// The globals keep fp32 accumulators (the embedding's gradient is an fp32
// scatter-add; tied weights get two gradients, the second added).
static inline int storage_grads_bf16(const Graph *g, int ranks, int tier_grads) {
    if (g->train.compute != DT_BF16 || g->train.accumulate != 1 || ranks != 1 || tier_grads) return 0;
    for (int pk = 0; pk < PART_COUNT; pk++) {
        if (!part_is_block(pk)) continue;
        const PtrVec *gr = &g->parts[pk].grads;
        for (int i = 0; i < gr->n; i++) {
            const Grad *a = gr->items[i];
            if (a->of->op != OP_PARAM || !a->grad) continue;
            if (storage_dtype(DT_BF16, a->grad) != DT_BF16) return 0;
            for (int qk = pk; qk < PART_COUNT; qk++) // a second gradient of the same parameter: added, so fp32
                for (int j = qk == pk ? i + 1 : 0; part_is_block(qk) && j < g->parts[qk].grads.n; j++) {
                    const Grad *b = g->parts[qk].grads.items[j];
                    if (b->of->op == OP_PARAM && b->grad && b->of->param == a->of->param) return 0;
                }
        }
    }
    return 1;
}

// Elements of the host store's global parameters (the head's and the
// tail's segments), the rest being the layers'.
static inline int64_t storage_host_global_elems(const Graph *g) {
    int64_t n = 0;
    for (int i = 0; i < g->params.n; i++) {
        const Param *p = g->params.items[i];
        if (!p->in_block) n += storage_host_elems_of(shape_numel(&p->shape));
    }
    return n;
}

// Elements of the frozen parameters (param_store_frozen: no gradient, no
// moments, no fp32 master): the globals' (global 1) or the layers' (0),
// every copy.
static inline int64_t storage_frozen_elems(const Graph *g, int global) {
    int64_t n = 0;
    for (int i = 0; i < g->params.n; i++) {
        const Param *p = g->params.items[i];
        if (param_store_frozen(p) && (p->in_block == 0) == global)
            n += storage_host_elems_of(shape_numel(&p->shape)) * param_copies(g, p);
    }
    return n;
}

// What a frozen parameter takes in host memory: its storage dtype only
// (storage_weight_bytes, what streams: 2 under bf16, 4 under f32), no
// master, moments or gradients. The host store's bytes it saves against a
// trained one of per bytes an element.
static inline int64_t storage_frozen_saving(const Graph *g, int64_t per, int global) {
    return storage_frozen_elems(g, global) * (per - storage_weight_bytes(g->train.compute));
}

// Host store bytes: storage_host_bytes_per_param an element, less 2 a layer
// element where the layers' gradients are bf16 (grads_bf16); a frozen
// parameter's element its storage_weight_bytes.
static inline int64_t storage_host_bytes(const Graph *g, int grads_bf16) {
    int64_t all = storage_host_elems(g), per = storage_host_bytes_per_param(g->train.compute);
    return all * per - (grads_bf16 ? 2 * (all - storage_host_global_elems(g)) : 0) - storage_frozen_saving(g, per, 1) -
           storage_frozen_saving(g, per - (grads_bf16 ? 2 : 0), 0);
}

#endif
