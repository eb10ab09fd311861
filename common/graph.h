// graph.h: the layer graph IR that sema produces and every later stage of mtc
// consumes, and that the plan carries to mtrun (common/plan.h), so both
// sides read it; the passes that make it are mtc's (compiler/front/passes.h). A model is parts, each a DAG of typed
// nodes in topological order: the head (embeddings, before the streamed block), a block part per block kind (one layer,
// written once, run by every layer of its kind with that layer's own weights) and the tail (final norm, LM head, loss).
// Values that cross parts enter the consuming part through OP_INPUT nodes that name their source: a block part's input
// names the head (layer 0 takes the head's output, layer l the output of layer l - 1, whatever its kind), the tail's
// the last layer's block part.
#ifndef MT_GRAPH_H
#define MT_GRAPH_H

#include <stdint.h>
#include <stdio.h>

#include "common/arena.h"
#include "common/diag.h"

enum { MT_MAX_RANK = 8 };

// A user's annotation on a block tensor: what the scheduler must do with it.
typedef enum { ANNOT_NONE, ANNOT_KEEP, ANNOT_RECOMPUTE, ANNOT_OFFLOAD } Annot;
const char *annot_name(Annot a);

// A target that does not count (PyTorch's ignore_index): its row adds
// nothing to the loss and gets a zero gradient. The loss stays divided by
// all rows; mtrun rescales it by rows / counted rows (runtime/train.c).
#define GRAPH_IGNORE_TARGET (-100)

typedef enum { DT_F32, DT_I32, DT_BF16, DT_COUNT } DType;

typedef struct Shape {
    int rank; // 0 for a scalar
    int64_t dims[MT_MAX_RANK];
} Shape;

typedef enum {
    OP_INPUT,         // a value from a model input or another part
    OP_PARAM,         // a trainable tensor
    OP_CONST,         // a scalar constant, broadcast where used
    OP_ADD,           // a + b, broadcasting
    OP_SUB,           // a - b, broadcasting
    OP_MUL,           // a * b, broadcasting
    OP_DIV,           // a / b, broadcasting
    OP_NEG,           // -a
    OP_MATMUL,        // a[..., M, K] @ b[K, N] or b[..., K, N]; trans_a/trans_b
    OP_EMBED,         // table[V, C], idx i32[...] -> [..., C]
    OP_ARANGE,        // i32[n]: 0 .. n-1
    OP_LAYERNORM,     // x[..., C], g[C], b[C]; eps
    OP_RMSNORM,       // x[..., C], g[C]; eps
    OP_GELU,          // tanh approximation, as GPT-2
    OP_SILU,          // x * sigmoid(x)
    OP_SWIGLU,        // silu(gate) * up
    OP_ROPE,          // rotary embedding of x[B, T, H*D] by position; heads, theta, rope_*
    OP_ATTENTION,     // q[B, T, H*D], k[B, T, KVH*D], v[B, T, KVH*Dv], lse, [sinks[H]] -> [B, T, H*Dv]; heads,
                      // kv_heads, causal, window, scale, softcap. lse is the OP_ATTENTION_LSE of the same q, k
                      // (and sinks), the node just before: one kernel computes both (its gradient flows through
                      // q and k alone). sinks: a learned logit a head (gpt-oss) that joins every row's softmax
                      // as one more column with no value: the kernel's running softmax starts from it
    OP_SOFTMAX,       // along axis
    OP_CROSS_ENTROPY, // logits[..., V], targets i32[...] -> loss, f32[]: sum over rows whose target is not
                      // GRAPH_IGNORE_TARGET of -log softmax[target], / rows (the mean when none is ignored)
    OP_RESHAPE,       // same elements, new shape
    OP_SLICE,         // [offset, offset+size) along axis; what split lowers to
    OP_CONCAT,        // along axis
    OP_TRANSPOSE,     // swaps the last two axes
    // Backward ops, appended by autodiff. Ops with several results write
    // them packed into one flat buffer, read back through OP_VIEW.
    OP_SUM_TO,            // dy -> its sum over the axes broadcasting added, to this node's shape
    OP_EMBED_BWD,         // dy[..., C], idx -> dtable[V, C] (scatter-add)
    OP_LAYERNORM_BWD,     // dy, x, g -> packed [dx (x's size) | dg (C) | db (C)]
    OP_RMSNORM_BWD,       // dy, x, g -> packed [dx | dg]
    OP_GELU_BWD,          // dy, x -> dx
    OP_SILU_BWD,          // dy, x -> dx
    OP_SOFTMAX_BWD,       // dy, y (softmax's output) -> dx; axis
    OP_CROSS_ENTROPY_BWD, // dloss[], logits, targets -> dlogits
    OP_ATTENTION_BWD,     // dy, q, k, v, y, lse (the forward's output and OP_ATTENTION_LSE), [sinks] -> packed
                          // [dq | dk | dv]; heads, kv_heads, causal, window, scale, softcap. With sinks y and lse
                          // include them, so P = exp(score - lse) is the probabilities with the sink
                          // (a kernel that recomputes them from q and k reads the sinks)
    OP_PAD,               // dy -> zeros of this node's shape with dy at [offset, ...) along axis
    OP_VIEW,              // a slice of a packed buffer: this node's shape at element offset
    // Elementwise maths, appended so that the numbers of the ops above stay
    // as plans have them. Their gradients are written with forward ops.
    OP_TANH,    // tanh(a)
    OP_SIGMOID, // 1 / (1 + exp(-a))
    OP_ERF,     // erf(a)
    OP_EXP,     // exp(a)
    OP_LOG,     // log(a), natural
    OP_ABS,     // |a|
    OP_LT,      // a < b, broadcasting: 1.0 where true, 0.0 elsewhere
    OP_LE,      // a <= b, as OP_LT
    OP_EQ,      // a == b, as OP_LT
    OP_WHERE,   // cond != 0 ? a : b, broadcasting all three (cond, a, b)
    // Mixture of experts (dsl/README.md), appended likewise.
    OP_TOP_K,            // x[..., E] -> 1.0 at the top_k largest along the last axis (of equals the lower index
                         // first), 0.0 elsewhere; no gradient, as the comparisons
    OP_MOE,              // x[..., C], gates[..., E], w_gate[E, F, C], w_up[E, F, C], w_down[E, C, F][, b[E, 2F]]
                         // -> [..., C]:
                         // each row the sum over experts e whose gate is not 0 of
                         // gate * w_down[e] @ (silu(w_gate[e] @ x) * (w_up[e] @ x)); scale = alpha > 0 (with
                         // softcap = limit L): gpt-oss's clamped SwiGLU (clamp(h3, -L, L) + 1) g sigmoid(alpha g),
                         // g = min(h1, L), h1 = w_gate[e] @ x, h3 = w_up[e] @ x, in place of silu(h1) h3
                         // moe_form (the MOE_* bits below): weights stored [E, in, out] or as one fused gate_up,
                         // read in place; MOE_GATES_ON_INPUT: gate * w_down[e] @ act(..x..) becomes
                         // w_down[e] @ act(..gate x..) (Llama 4); MOE_GATE_UP_BIAS: b added to h1, h3
    OP_MOE_BWD,          // dy, x, gates, w_gate, w_up, w_down[, b] -> packed [dx | dgates | dw_gate | dw_up | dw_down
                         // | db];
                         // scale, softcap, moe_form as OP_MOE's (each dw in its weight's layout)
    OP_LOAD_BALANCE,     // logits[..., E], mask[..., E] (top_k's) -> f32[]: E * sum_e f_e P_e, f_e the share of
                         // rows whose mask selects e, P_e the mean over rows of softmax(logits)[e]
    OP_LOAD_BALANCE_BWD, // dloss[], logits, mask -> dlogits (the mask taken as constant)
    OP_ADD_LOSS,         // x, loss f32[] -> x unchanged; loss joins the training objective (its gradient 1)
    // Attention's softmax statistics, appended likewise.
    OP_ATTENTION_LSE, // q[B, T, H*D], k[B, T, KVH*D], [sinks[H]] -> f32[B, H, T], stored fp32: log (exp(sink_h) +
                      // sum_j exp(score(q_t, k_j))) over the keys query t sees (OP_ATTENTION's attributes and
                      // masks; no sink term without sinks); written by the
                      // attention kernel that reads it (the next node), kept for the backward; no gradient
    // Hybrid models' recurrent layers (common/scan.h), appended likewise.
    OP_CONV1D,         // x[B, T, C], w[C, K] -> [B, T, C]: causal depthwise convolution within each document
    OP_CONV1D_BWD,     // dy, x, w -> packed [dx | dw]
    OP_DELTA_RULE,     // q[B, T, Hk*Dk], k[B, T, Hk*Dk], v[B, T, H*Dv], g[B, T, H], beta[B, T, H] -> [B, T, H*Dv]:
                       // the gated delta rule, q and k l2-normalised (eps); heads H, kv_heads Hk, scale
    OP_DELTA_RULE_BWD, // dy, q, k, v, g, beta -> packed [dq | dk | dv | dg | dbeta]; as the forward
    OP_SSD,            // q, k, v, g, beta as OP_DELTA_RULE -> [B, T, H*Dv]: the gated linear recurrence of
                       // Mamba-2 (q = C, k = B, v = x, g = A dt, beta = dt); heads H, kv_heads the groups
    OP_SSD_BWD,        // dy, q, k, v, g, beta -> packed [dq | dk | dv | dg | dbeta]
    OP_FLOOR,          // floor(a), appended likewise; no gradient, as the comparisons (Llama 4's temperature)
    OP_COUNT
} OpKind;

const char *op_name(OpKind op);
// The ops whose outputs selective recomputation keeps rather than recompute
// (a run with RUN_SKIP_HEAVY skips them): matmul, attention (and its lse), moe, the
// recurrences (delta_rule, ssd).
int op_is_heavy(OpKind op);
const char *dtype_name(DType t);

// The parts of a model: the head, the block parts (one per block kind:
// PART_BLOCK is kind 0's, PART_KIND1 + k - 1 kind k's, k >= 1) and the
// tail. A graph uses parts 0 .. graph_nparts(g) - 1; the rest stay empty.
enum { MT_MAX_KINDS = 8 };
typedef enum { PART_HEAD, PART_BLOCK, PART_TAIL, PART_KIND1, PART_COUNT = PART_KIND1 + MT_MAX_KINDS - 1 } PartKind;
const char *part_name(PartKind p);
// The block part of kind k, and the kind of block part pk (-1: pk is not a block part).
static inline int kind_part(int k) { return k == 0 ? PART_BLOCK : PART_KIND1 + k - 1; }
static inline int part_kind(int pk) {
    return pk == PART_BLOCK ? 0 : pk >= PART_KIND1 && pk < PART_COUNT ? pk - PART_KIND1 + 1 : -1;
}
static inline int part_is_block(int pk) { return part_kind(pk) >= 0; }

typedef struct Node {
    OpKind op;
    int id; // index in its part
    PartKind part;
    DType dtype;
    Shape shape;
    Loc loc;
    const char *name; // the source name it was assigned to, or NULL
    Annot annot;      // keep / recompute / offload, block nodes only
    struct Node **in; // (nin) operands
    int nin;
    // Attributes; which ones an op uses is listed in the OpKind comments.
    int param;      // OP_PARAM: index into Graph.params
    int src_part;   // OP_INPUT: PartKind of the source, or -1 for a model input
    int src;        // OP_INPUT: node id in src_part, or model input index
    double value;   // OP_CONST
    int axis;       // SLICE, CONCAT, SOFTMAX (non-negative)
    int64_t offset; // SLICE
    int heads, kv_heads, causal, trans_a, trans_b;
    int inverse; // OP_ROPE: rotate backwards (its gradient)
    // OP_ROPE: pair i of each head (i < D/2) turns by t * rope_freq[i] at
    // position t, cos and sin scaled by rope_scale (common/rope.h computes
    // both from the rule); the pairs are (i, i + D/2) (Hugging Face's
    // rotate_half), or (2i, 2i + 1) when rope_interleaved (GPT-J). rope_rule
    // names a scaling rule and its fields ("llama3 factor=32 ..."; NULL
    // under none), for the dump and for --export's rope_parameters.
    const double *rope_freq; // (D/2)
    double rope_scale;
    int rope_interleaved;
    const char *rope_rule;
    int tile; // OP_SLICE made by tile.c: chunk tile-1 of its input's rows (0: not one); the compiler's only
    double eps, theta;
    // OP_ATTENTION(_BWD, _LSE): query t sees keys t - window < j <= t (0: all of
    // them to t); scores q.k * scale (0: 1/sqrt(D)), then softcap *
    // tanh(score / softcap) (0: not capped); with a chunk C only keys of
    // query t's chunk, j / C == t / C (0: no chunks; Llama 4's chunked attention).
    int64_t window, chunk;
    double scale, softcap;
    int top_k;       // OP_TOP_K: how many experts a row selects
    int group_limit; // OP_TOP_K of a router's group limit (its groups, top_groups): ranks the groups, or the
                     // experts within one, not the experts a row takes; not a load (plan_report_marks)
    int64_t padding; // OP_EMBED, OP_EMBED_BWD: 1 + the table row that takes no gradient (Hugging Face's
                     // padding_idx), 0: none
    int wide;        // stored fp32 under bf16 (common/storage.h): a partial sum of a tiled part's
                     // parameter gradient across its chunks, which the last add rounds once
    int pooled;      // OP_LOAD_BALANCE(_BWD) in a block: f and P pooled over every layer's rows of the
                     // micro-batch (transformers' Mixtral form; the kernels' LoadBalancePool), 0: this layer's
    int moe_form;    // OP_MOE(_BWD): MOE_* bits, how the weights are stored and where the gates apply (0: each
                     // weight its own [E, out, in], gates on the outputs)
} Node;

// Node.moe_form's bits. The first five say how the weights are stored,
// the last where the gates apply. The first three: which of moe's weights is
// stored [E, in, out] rather than [E, out, in]. A fused gate_up weight
// (HALVES or INTERLEAVED; the node's w_gate and w_up are then one operand
// twice, its layout bit MOE_W_GATE_T) is [E, 2F, C], or [E, C, 2F] under
// MOE_W_GATE_T: the gate then the up (Llama 4), or gate and up alternating
// (gpt-oss: the gate at 2f, the up at 2f + 1). The kernels read them all in
// place and write each gradient in its weight's layout.
enum {
    MOE_W_GATE_T = 1,
    MOE_W_UP_T = 2,
    MOE_W_DOWN_T = 4,
    MOE_GATE_UP_HALVES = 8,
    MOE_GATE_UP_INTERLEAVED = 16,
    MOE_GATES_ON_INPUT = 32, // expert e runs on gate_e * x and its output is not gated (Llama 4)
    MOE_GATE_UP_BIAS = 64,   // a sixth operand, the gate and up biases [E, 2F] in h's columns (moe_gate_col,
                             // moe_up_col), added before the activation (gpt-oss's gate_up_proj_bias)
    MOE_FORM_BITS = 127,
    MOE_ACT_SHIFT = 7, // moe_form >> MOE_ACT_SHIFT: the experts' gated activation, a MoeAct (0: silu)
    MOE_ACT_BITS = 3 << MOE_ACT_SHIFT
};

// The experts' gated activation act(g) * u of moe's act = ..., each the DSL's own
// element-wise op: silu(g); gelu(g, approximate = none), 0.5 g (1 + erf(g / sqrt 2));
// gelu(g, approximate = tanh), 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))).
typedef enum { MOE_ACT_SILU, MOE_ACT_GELU, MOE_ACT_GELU_TANH, MOE_ACTS } MoeAct;

static inline MoeAct moe_act(const Node *n) { return (MoeAct)((n->moe_form & MOE_ACT_BITS) >> MOE_ACT_SHIFT); }

static inline int moe_fused(const Node *n) { return n->moe_form & (MOE_GATE_UP_HALVES | MOE_GATE_UP_INTERLEAVED); }

// Moe or moe_bwd node n's expert width F (its w_down [E, C, F], or [E, F, C] stored transposed).
static inline int64_t moe_expert_width(const Node *n) {
    const Shape *wd = &n->in[n->op == OP_MOE_BWD ? 5 : 4]->shape;
    return wd->dims[n->moe_form & MOE_W_DOWN_T ? 1 : 2];
}

int64_t shape_numel(const Shape *s);

// The operands of moe node n: 5, and its gate_up bias (MOE_GATE_UP_BIAS); moe_bwd's one more (dy).
static inline int moe_operand_count(const Node *n) {
    return 5 + !!(n->moe_form & MOE_GATE_UP_BIAS) + (n->op == OP_MOE_BWD);
}

// The floats moe's operand j (0 x .. 4 w_down, 5 the gate_up bias) adds to its backward's packed
// output: its own, but 0 for a fused gate_up's second place (w_up, the same tensor).
static inline int64_t moe_operand_floats(const Node *n, int j) {
    return j == 3 && moe_fused(n) ? 0 : shape_numel(&n->in[j + (n->op == OP_MOE_BWD)]->shape);
}

// One expert's matrix of a moe weight, out x in, as a row-major GEMM reads
// it: expert e's from element e * expert of its tensor, leading dimension
// ld, stored [in, out] where t (x W^T is then x times it untransposed).
typedef struct MoeMat {
    int64_t expert, ld;
    int t;
} MoeMat;

// Weight j of a moe with moe_form `layout`, C, F: 0 w_gate, 1 w_up
// (F x C each), 2 w_down (C x F), 3 a fused gate_up (2F x C, one GEMM: its
// columns as moe_gate_col, moe_up_col say).
static inline MoeMat moe_mat(int layout, int j, int64_t C, int64_t F) {
    int t = layout >> (j == 3 ? 0 : j) & 1;
    if (j == 2) return (MoeMat){C * F, t ? C : F, t};
    if (j == 3) return (MoeMat){2 * F * C, t ? 2 * F : C, t};
    return (MoeMat){F * C, t ? F : C, t};
}

// Where the gate's and the up's column f sit in a row of the fused GEMM's
// output h [n, 2F] (the separate weights' GEMMs write it the same way, halves).
static inline int64_t moe_gate_col(int layout, int64_t F, int64_t f) {
    (void)F;
    return layout & MOE_GATE_UP_INTERLEAVED ? 2 * f : f;
}
static inline int64_t moe_up_col(int layout, int64_t F, int64_t f) {
    return layout & MOE_GATE_UP_INTERLEAVED ? 2 * f + 1 : F + f;
}

// The sinks [H] operand of attention node n (OP_ATTENTION, its
// OP_ATTENTION_LSE or OP_ATTENTION_BWD; the last operand when there is
// one), or -1 when it has none: the index into n->in.
static inline int attention_sinks_operand(const Node *n) {
    int plain = n->op == OP_ATTENTION_LSE ? 2 : n->op == OP_ATTENTION ? 4 : 6;
    return n->nin > plain ? plain : -1;
}

// What a pooled load-balancing loss (Node.pooled) keeps across the layers
// of a micro-batch, one per stream (the runtime's; device memory on a GPU):
// layer l's forward writes row l of sums, the counts of its rows' top-k
// choices per expert, then the sums over its rows of the router's
// probabilities per expert; the backward reads every row. Rows of layers
// without one stay 0. Writing a row, not adding to it, lets a recomputed
// forward run again.
typedef struct LoadBalancePool {
    double *sums;   // (layers, 2 E)
    int64_t layer;  // the layer whose block part runs
    int64_t layers; // the graph's
    double rows;    // every pooled row: a layer's rows times the layers with a pooled loss
} LoadBalancePool;

// How many rope frequencies n carries: D/2 for OP_ROPE, 0 for other ops.
static inline int64_t rope_pairs(const Node *n) {
    return n->op == OP_ROPE && n->shape.rank == 3 && n->heads > 0 ? n->shape.dims[2] / n->heads / 2 : 0;
}

// OP_INPUT sources that are not parts.
enum { SRC_MODEL_INPUT = -1, SRC_GRAD_SEED = -2 };

// A gradient autodiff produced: of a parameter node or a part input.
typedef struct Grad {
    Node *of;   // OP_PARAM, or OP_INPUT from another part
    Node *grad; // same shape; NULL when it is zero (the value does not reach the output)
} Grad;

typedef struct Part {
    PtrVec nodes; // of Node*, in topological order
    Node *output; // what the part produces: block output, loss; the head's
                  // output is the block's input
    // Filled by autodiff: nodes[0, nfwd) are the forward, the rest the
    // backward, which may read forward nodes.
    int nfwd;
    Node *grad_seed; // d loss / d output: OP_INPUT from SRC_GRAD_SEED; in the tail the loss scale (model input
                     // LOSS_SCALE_INPUT, which mtrun feeds), or in a plan before it the constant 1
    PtrVec grads;    // of Grad*: every parameter node, then differentiable inputs
    // Row tiling (tile.c; the compiler's, not in the plan): chunk c's forward
    // is nodes [chunk_fwd[2c], chunk_fwd[2c+1]), its backward (filled by
    // autodiff) nodes [chunk_bwd[2c], chunk_bwd[2c+1]).
    int nchunks;    // 0: not tiled
    int *chunk_fwd; // (2 * nchunks)
    int *chunk_bwd; // (2 * nchunks)
    // The scheduler's memo, computed once per graph (compiler/schedule/layout.c,
    // prepare_parts): the fused kernels' spans (fuse_spans: node i is
    // written from span_first[i] and read at span_anchor[i]), and the
    // part's buffer layouts by timeline (compiler/schedule/schedule_internal.h's Layout): each node's
    // byte offset from the part's base (-1 for views, reshapes and params)
    // and the bytes in all.
    int *span_first, *span_anchor; // (nodes.n) or NULL
    int64_t *layout_rel[3];        // (nodes.n) or NULL
    int64_t layout_bytes[3];
} Part;

// INIT_UNIFORM: uniform on [-init_std, init_std) (a LoRA A matrix: peft's kaiming-uniform, the bound 1/sqrt(in)).
typedef enum { INIT_NORMAL, INIT_ZEROS, INIT_ONES, INIT_UNIFORM } InitKind;

typedef struct Param {
    const char *name; // in the DSL
    const char *ckpt; // checkpoint name; for block params, relative to prefix
    int in_block;
    // Block params: the checkpoint prefix of their block kind, with "{i}"
    // in it, and that kind (0 .. Graph.nkinds - 1); layer l, of that kind,
    // has its own copy, checkpoint layer l. Global params: NULL and 0.
    const char *prefix;
    int kind;
    Shape shape;
    InitKind init;
    double init_std; // INIT_NORMAL: the standard deviation; INIT_UNIFORM: the bound
    int init_given;  // written in the source; otherwise chosen by use
    PartKind first_use;
    Loc loc;
    // Frozen (mtc --freeze, --lora's base weights): no gradient (autodiff makes none), no Adam moments, no
    // update; it keeps the value it was initialised or loaded with. 0: trained.
    int frozen;
    // A buffer (written `buffer`: DeepSeek-V3's e_score_correction_bias): frozen whatever mtc's flags say, and
    // counted apart from the parameters (mtc --summary). 0: a parameter.
    int buffer;
    // A LoRA adapter (compiler/front/adapters.c): 1 its A [r, in], 2 its B [out, r], of parameter `lora_of`
    // (the base weight [out, in], frozen), scaled by lora_scale (alpha / r). 0: not an adapter.
    int lora;
    int lora_of;
    double lora_scale;
    // A buffer's balance rule (`router(..., bias = b, bias_update = gamma)`: DeepSeek-V3's auxiliary-loss-free
    // update): after each step's optimizer, mtrun moves element i by balance_rate x sign(mean load - load_i),
    // load_i the tokens that chose expert i over the step (every micro-batch, every rank) as balance_mask counts
    // them: the top_k mask [..., E] of the router that chooses by this bias, a node of its block kind's part.
    // NULL: no rule (the buffer keeps its value).
    const struct Node *balance_mask;
    double balance_rate;
} Param;

// Whether the host store holds parameter p as frozen: in its storage dtype
// only, without master, moments or gradients. A buffer with a balance rule
// is frozen to autodiff and AdamW but changes every step, so it keeps an
// fp32 master as a trained parameter does.
static inline int param_store_frozen(const Param *p) { return p->frozen && !p->balance_mask; }

typedef struct ModelInput {
    const char *name;
    DType dtype;
    Shape shape;
    Loc loc;
} ModelInput;

typedef enum { SCHED_COSINE, SCHED_LINEAR, SCHED_CONSTANT } LrSchedule;

// The train section with defaults filled in; mtrun flags override it.
typedef struct TrainConfig {
    int64_t batch, seq, steps, accumulate, warmup, val_every, seed;
    double lr, beta1, beta2, weight_decay, adam_eps, min_lr_frac, clip;
    LrSchedule schedule;
    DType compute;
    const char *data; // NULL: none given
} TrainConfig;

typedef struct Graph {
    const char *model_name;
    Part parts[PART_COUNT];
    const char *block_name;   // the block, or the order of block kinds, forward calls
    const char *block_prefix; // e.g. "h.{i}."; its first kind's under an order
    int64_t layers;           // the model's layers, each streamed by itself
    // The block kinds (1 for a single block; under an order of block kinds,
    // dsl/README.md, its kinds in the order they first appear) and each
    // layer's kind, 0 .. nkinds-1 (layers); a layer runs block part
    // kind_part(kind) with its own weights. Every kind is some layer's.
    int nkinds;
    uint8_t *layer_kind;
    const char *kind_name[MT_MAX_KINDS]; // each kind's block name, as the DSL declares it (NULL in a plan's graph)
    PtrVec params;                       // of Param*: globals and block params, in declaration order
    PtrVec inputs;                       // of ModelInput*: forward's arguments
    TrainConfig train;
    int64_t kernel_scratch; // device scratch of an engine that runs the fused kernels (common/scratch.h); the
                            // scheduler fills it once (0: not yet)
    // The fused kernels (compiler/fuse/fuse.c), made once by the compile path (compiler/compile.c) and
    // read by the scheduler, its cost model and the emitters; NULL until then (and in a plan's graph).
    const struct KirProgram *kernels;
} Graph;

// The most experts a row of a moe node with these gates (x's rows, E wide)
// can run, from the data flow that made them, wherever in the graph: the
// top_k of the router that masks them (a top_k mask, times or dividing
// anything, selecting with where, or a softmax over the logits it masks
// to -inf), else E (a gate no router limits). moe runs an expert for a
// row where its gate is not 0, so this bounds the work and the scratch.
int64_t graph_routed_experts(const Graph *g, const Node *gates);
// Whether a router limits the gates (router(..., top_k = E) does, to all E).
int graph_gates_routed(const Graph *g, const Node *gates);

// The experts E of the graph's pooled load-balancing losses (0: none), with
// the layers that have one and the rows of each into *layers and *rows.
int64_t graph_pooled_experts(const Graph *g, int64_t *layers, int64_t *rows);

// The parts graph g uses: the head, the block, the tail and the other kinds' blocks.
static inline int graph_nparts(const Graph *g) { return PART_KIND1 + g->nkinds - 1; }
// The block part streamed layer `layer` runs.
static inline int block_part(const Graph *g, int64_t layer) { return kind_part(g->layer_kind[layer]); }
// How many layers are of block kind `kind`.
static inline int64_t graph_kind_layers(const Graph *g, int kind) {
    int64_t n = 0;
    for (int64_t l = 0; l < g->layers; l++) n += g->layer_kind[l] == kind;
    return n;
}

// Appends a node to part (kind pk) with the given operands. NULL when out of memory.
Node *graph_add_node(Arena *a, Part *part, PartKind pk, OpKind op, DType dt, const Shape *shape, Loc loc, int nin,
                     Node **in);

// The model input the tail's gradient seed reads: d objective / d loss, f32[],
// fed by mtrun for each micro-batch (the loss mask's weight of the step's
// cross-entropy beside the losses add_loss joins); autodiff appends it after
// forward's arguments. Its index in g->inputs, or -1 (no backward yet, or a
// plan whose seed is the constant 1).
#define LOSS_SCALE_INPUT "loss_scale"
int graph_loss_scale_input(const Graph *g);

// The input node of part that carries a value from part `from` (a PartKind,
// or SRC_MODEL_INPUT, SRC_GRAD_SEED), or NULL.
Node *part_input_from(const Part *part, int from);
// The gradient autodiff made for node `of` of part, or NULL.
const Grad *part_grad_of(const Part *part, const Node *of);

int64_t shape_numel(const Shape *s);
// Formats "[4, 64, 768]" into buf and returns buf.
char *shape_str(const Shape *s, char *buf, size_t cap);
int shape_eq(const Shape *a, const Shape *b);

// How many checkpoint tensors a parameter is: a parameter array (its
// checkpoint name holds "{e}") dims[0], each of its shape less that axis;
// any other 1.
int64_t param_elements(const Param *p);
// The shape of one of its checkpoint tensors.
Shape param_element_shape(const Param *p);
// Whether layer `layer` has a copy of p: p is a block parameter of that layer's kind.
static inline int param_in_layer(const Graph *g, const Param *p, int64_t layer) {
    return p->in_block && p->kind == g->layer_kind[layer];
}
// How many copies of p the model has: one a layer of its kind, or 1 for a global.
int64_t param_copies(const Graph *g, const Param *p);
// The checkpoint name of a parameter in streamed layer `layer` (ignored
// for global parameters): its prefix with "{i}" the layer index; in an
// array, "{e}" is `element`
// (ignored otherwise). Allocated in a.
char *param_ckpt_name(Arena *a, const Param *p, int64_t layer, int64_t element);

// Prints the graph, one node a line, for `mtc --dump-graph`.
void graph_dump(FILE *out, const Graph *g, const char *path);

#endif
