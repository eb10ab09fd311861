// tile.c: row tiling, so that a long sequence fits the device. Before
// autodiff, the row-local tail of the block (after its last op that mixes
// rows, attention: the output projection, the residual adds, the norm and
// the MLP) and the whole tail (norm, LM head, cross-entropy) are rewritten
// into `chunks` copies that each work on T/chunks of the sequence:
//
//     y = f(x)          becomes   y = concat(f(slice(x, 0)), ..., f(slice(x, K-1)))
//     loss = ce(f(x))   becomes   loss = (ce(f(slice(x, 0))) + ... ) * (1/K)
//
// Nothing else changes: autodiff derives the backward of the chunks (a
// parameter's gradient is summed chunk by chunk), every executor runs the
// nodes as written, and the scheduler, told where each chunk's forward and
// backward nodes lie (Part.chunk_fwd, chunk_bwd), recomputes and
// differentiates one chunk at a time, so that only one chunk's intermediates
// (one chunk's logits, one chunk's MLP activations) are ever live.
#include <string.h>

#include "common/graph.h"
#include "compiler/front/passes.h"

// Whether `in` broadcasts into a row-shaped node without depending on the
// row: a parameter, a constant, or anything with fewer dims than the rows' T
// axis reaches (a [C] bias).
static int row_invariant(const Node *in, const Node *out) {
    return in->op == OP_PARAM || in->op == OP_CONST || in->shape.rank < out->shape.rank - 1;
}

// [B, T, ...] with the sequence T on axis 1.
static int row_shaped(const Node *n, int64_t T) { return n->shape.rank >= 2 && n->shape.dims[1] == T; }

// An op whose rows (positions along axis 1) can be computed from the same
// rows of its row-shaped operands alone. Cross-entropy, a mean over rows,
// only as the part's output (tile_part averages the chunks' means).
static int row_local(const Node *n, int64_t T, const Node *output) {
    if (n->op == OP_CROSS_ENTROPY) return n == output && row_shaped(n->in[0], T) && row_shaped(n->in[1], T);
    if (!row_shaped(n, T)) return 0;
    int last = n->shape.rank - 1;
    switch (n->op) {
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_DIV:
    case OP_NEG:
    case OP_GELU:
    case OP_SILU:
    case OP_SWIGLU:
    case OP_TANH:
    case OP_SIGMOID:
    case OP_ERF:
    case OP_EXP:
    case OP_LOG:
    case OP_FLOOR:
    case OP_ABS:
    case OP_LT:
    case OP_LE:
    case OP_EQ:
    case OP_WHERE:
    case OP_LAYERNORM:
    case OP_RMSNORM:
        for (int i = 0; i < n->nin; i++)
            if (!shape_eq(&n->in[i]->shape, &n->shape) && !row_invariant(n->in[i], n)) return 0;
        return 1;
    case OP_MATMUL: // rows of a [B, T, K] times a weight
        return !n->trans_a && row_shaped(n->in[0], T) && n->in[0]->shape.rank == n->shape.rank &&
               n->in[1]->op == OP_PARAM && n->in[1]->shape.rank == 2;
    case OP_SLICE: return n->axis == last && row_shaped(n->in[0], T);
    case OP_CONCAT:
        if (n->axis != last) return 0;
        for (int i = 0; i < n->nin; i++)
            if (!row_shaped(n->in[i], T)) return 0;
        return 1;
    default: return 0;
    }
}

static int is_leaf(const Node *n) { return n->op == OP_PARAM || n->op == OP_CONST || n->op == OP_INPUT; }

// Tiles the row-local suffix of part pk's forward. Returns 0 (also when
// there is nothing to tile), -1 out of memory.
static int tile_part(Graph *g, PartKind pk, int64_t K, Arena *a) {
    Part *part = &g->parts[pk];
    int n = part->nodes.n;
    int64_t T = g->train.seq, R = T / K;
    unsigned char *in_region = arena_alloc(a, (size_t)n + 1);
    Node **map = arena_alloc(a, ((size_t)n + 1) * sizeof(Node *));
    if (!in_region || !map) return -1;
    memset(in_region, 0, (size_t)n + 1);

    // 1. The region: the longest suffix of row-local nodes (leaves may sit
    //    among them; they stay where they are and are shared by the chunks).
    int first = n, count = 0;
    for (int i = n - 1; i >= 0; i--) {
        const Node *nd = part->nodes.items[i];
        if (is_leaf(nd)) continue;
        if (!row_local(nd, T, part->output)) break;
        in_region[i] = 1;
        first = i;
        count++;
    }
    // A region that is only the output's own copy is not worth chunking.
    if (count < 2 || !in_region[part->output->id]) return 0;
    // Its inputs from before it must be row-shaped (they are sliced).
    for (int i = first; i < n; i++) {
        const Node *nd = part->nodes.items[i];
        if (!in_region[i]) continue;
        for (int j = 0; j < nd->nin; j++) {
            const Node *x = nd->in[j];
            if (!in_region[x->id] && !row_invariant(x, nd) && !row_shaped(x, T)) return 0;
        }
    }

    // 2. The chunks, appended after the original nodes: slices of the
    //    region's row-shaped inputs, then a copy of every region node.
    PtrVec old = part->nodes;
    int *chunk = arena_alloc(a, (size_t)(2 * K) * sizeof(int));
    if (!chunk) return -1;
    Node **outs = arena_alloc(a, (size_t)K * sizeof(Node *));
    if (!outs) return -1;
    // The tail's 1/K comes first: the backward reads it before the chunks
    // run (the loss's gradient flows into them), so it sits with the nodes
    // before them.
    Node *inv_k = NULL;
    if (part->output->op == OP_CROSS_ENTROPY) {
        inv_k = graph_add_node(a, part, pk, OP_CONST, DT_F32, NULL, part->output->loc, 0, NULL);
        if (!inv_k) return -1;
        inv_k->value = 1.0 / (double)K;
    }
    int appended = 0; // chunk ranges are counted in appended nodes, fixed up below
    for (int64_t c = 0; c < K; c++) {
        chunk[2 * c] = appended;
        memset(map, 0, ((size_t)n + 1) * sizeof(Node *));
        for (int i = first; i < n; i++) {
            Node *nd = old.items[i];
            if (!in_region[i]) continue;
            Node **ins = arena_alloc(a, (size_t)nd->nin * sizeof(Node *));
            if (!ins) return -1;
            for (int j = 0; j < nd->nin; j++) {
                Node *x = nd->in[j];
                if (in_region[x->id]) ins[j] = map[x->id];
                else if (row_invariant(x, nd)) ins[j] = x;
                else { // a slice of a row-shaped input, once a chunk
                    if (!map[x->id]) {
                        Shape s = x->shape;
                        s.dims[1] = R;
                        Node *sl = graph_add_node(a, part, pk, OP_SLICE, x->dtype, &s, x->loc, 1, &x);
                        if (!sl) return -1;
                        sl->axis = 1;
                        sl->offset = c * R;
                        sl->tile = (int)c + 1;
                        appended++;
                        map[x->id] = sl;
                    }
                    ins[j] = map[x->id];
                }
            }
            Shape s = nd->shape;
            if (nd->op != OP_CROSS_ENTROPY) s.dims[1] = R;
            Node *cp = graph_add_node(a, part, pk, nd->op, nd->dtype, &s, nd->loc, nd->nin, ins);
            if (!cp) return -1;
            Node keep = *cp;
            *cp = *nd; // every attribute
            cp->id = keep.id;
            cp->shape = keep.shape;
            cp->in = keep.in;
            appended++;
            map[i] = cp;
        }
        chunk[2 * c + 1] = appended;
        outs[c] = map[part->output->id];
    }

    // 3. What the chunks make together: the output rows concatenated, or
    //    the loss as the mean of the chunks' mean losses.
    Node *out = part->output, *joined;
    if (out->op == OP_CROSS_ENTROPY) {
        joined = outs[0];
        for (int64_t c = 1; c < K; c++) {
            Node *in2[2] = {joined, outs[c]};
            joined = graph_add_node(a, part, pk, OP_ADD, DT_F32, &out->shape, out->loc, 2, in2);
            if (!joined) return -1;
        }
        Node *in2[2] = {joined, inv_k};
        joined = graph_add_node(a, part, pk, OP_MUL, DT_F32, &out->shape, out->loc, 2, in2);
    } else {
        joined = graph_add_node(a, part, pk, OP_CONCAT, out->dtype, &out->shape, out->loc, (int)K, outs);
        if (joined) joined->axis = 1;
    }
    if (!joined) return -1;
    joined->name = out->name;

    // 4. Drop the region's originals and renumber; the chunks follow the
    //    nodes before them.
    PtrVec now = {0};
    for (int i = 0; i < part->nodes.n; i++) {
        Node *nd = part->nodes.items[i];
        if (i < n && in_region[i]) continue;
        nd->id = now.n;
        if (ptrvec_push(a, &now, nd) != 0) return -1;
    }
    int kept = n - count + (inv_k != NULL); // nodes before the chunks
    part->nodes = now;
    part->output = joined;
    part->nchunks = (int)K;
    part->chunk_fwd = chunk;
    for (int64_t c = 0; c < 2 * K; c++) chunk[c] += kept;
    part->chunk_bwd = arena_alloc(a, (size_t)(2 * K) * sizeof(int));
    return part->chunk_bwd ? 0 : -1;
}

int tile_rows(Graph *g, int64_t chunks, Arena *a, Diag *d) {
    if (chunks <= 1) return 0;
    if (g->train.seq % chunks != 0) {
        diag_error(d, (Loc){0, 0}, "--tile %lld does not divide the sequence length %lld", (long long)chunks,
                   (long long)g->train.seq);
        return -1;
    }
    for (int pk = PART_BLOCK; pk < graph_nparts(g); pk++) // every block kind's part and the tail
        if (tile_part(g, (PartKind)pk, chunks, a) != 0) {
            diag_error(d, (Loc){0, 0}, "out of memory while tiling");
            return -1;
        }
    // The tail reads the last layer's output by its id, which tiling changed.
    int last = block_part(g, g->layers - 1);
    Node *tx = part_input_from(&g->parts[PART_TAIL], last);
    if (tx) tx->src = g->parts[last].output->id;
    return 0;
}
