#include "compiler/schedule/scaleout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/storage.h"
#include "compiler/schedule/collective.h"

const char *const SCALE_NAMES[SCALE_COUNT] = {"replicated", "sharded", "sharded+tier", "megatrain"};

// How mpirun lays N ranks on the profile: nodes filled in turn.
typedef struct Layout {
    int ranks, per_node, nodes;
} Layout;

static Layout layout_of(const Target *t, int ranks) {
    int gpn = t->gpus_per_node >= 1 ? (int)t->gpus_per_node : 1;
    Layout l = {.ranks = ranks, .per_node = strcmp(t->arch, "cpu") == 0 ? ranks : ranks < gpn ? ranks : gpn};
    l.nodes = (ranks + l.per_node - 1) / l.per_node;
    return l;
}

// The whole host store of g: master, moments, accumulators and the bf16
// copy, with fp32 gradients, as several ranks keep them (they sum them;
// common/storage.h, storage_grads_bf16).
static double host_store_bytes(const Graph *g) { return (double)storage_host_bytes(g, 0); }

Target scaleout_rank_profile(const Target *t, int ranks) {
    Layout l = layout_of(t, ranks);
    Target rt = *t;
    rt.host_memory = t->host_memory / l.per_node;
    rt.tier_capacity = t->tier_capacity / l.per_node;
    rt.tier_read_bandwidth = t->tier_read_bandwidth / l.per_node;
    rt.tier_write_bandwidth = t->tier_write_bandwidth / l.per_node;
    return rt;
}

// The profile one rank's plan is searched on: a rank's share of the node
// (scaleout_rank_profile). The search's plans are one GPU's, so a sharded
// rank's store is counted as 1/N of the whole (store_shards: the placement
// counts the rank's slice against its share of host memory and, with the
// tier, puts there what of it does not fit). Only sharded+tier keeps the
// tier; megatrain's workers share one store and the whole node.
static Target rank_target(const Target *t, int s, Layout l) {
    Target rt = s == SCALE_MEGATRAIN ? *t : scaleout_rank_profile(t, l.ranks);
    if (s != SCALE_SHARDED_TIER && l.ranks > 1) rt.tier_capacity = rt.tier_read_bandwidth = rt.tier_write_bandwidth = 0;
    if (s == SCALE_SHARDED || s == SCALE_SHARDED_TIER) rt.store_shards = l.ranks;
    return rt;
}

// MegaTrain's host work a step beyond the gradient norm, per parameter, as
// its examples/sft/train.py steps its CPUMasterModel (infinity/model/
// cpu_master.py, mp_state.py): DeepSpeed's CPUAdam (reads w, g, m, v,
// writes w, m, v: 28 bytes, at host_adamw_bandwidth, as the zero3-offload
// baseline prices it), and at host_memory_bandwidth torch's
// clip_grad_norm_ scaling the fp32 gradients in place (8), update_shared_flats
// copying the fp32 master into the workers' bf16 flats (read 4, write 2;
// f32: 4 and 4), model.zero_grad and the next step's zeroing of the shared
// gradients before the workers start (4 and 4). All of it on the one main
// process, none of it overlapping the workers.
static double megatrain_update_s(const Plan *p, int32_t seg, const Target *t) {
    double elems = (double)plan_segment_len(p, seg), flats = p->graph->train.compute == DT_BF16 ? 6.0 : 8.0;
    return elems * 28.0 / t->host_adamw_bandwidth + elems * (8.0 + flats + 8.0) / t->host_memory_bandwidth;
}

// Prices plan p (searched on rt) as one rank of strategy s: each
// instruction at its one-GPU price (cost_plan_with) but where the strategy
// changes it: a sharded rank's weights in are its slice over the link then
// the layer's all-gather, its gradients out the reduce-scatter then its
// slice; a replicated rank's gradients out are all-reduced first; a rank's
// AdamW and norms cover its part of the model (1/N sharded) at its share of
// the node's host (the node's ranks run theirs at once; megatrain's one
// optimizer has the node, and does what megatrain_update_s says). A
// collective runs inside the copy it belongs to, on its engine (the link
// counts as busy meanwhile: a little pessimistic). Then the engines are
// simulated as cost_plan_with does, and a micro-batch takes at least the
// host memory time of every host-side byte of the node's ranks: their
// links' and the adds of their gradients into the fp32 accumulators (read
// the copy, read and write the sum), with a step's optimizer after it.
static int price(const Plan *p, const Target *rt, const Target *t, int s, Layout l, const CostKernels *k,
                 ScaleRow *row) {
    const Graph *g = p->graph;
    double *dur = malloc(((size_t)p->ntrain + 1) * sizeof *dur); // (ntrain)
    Cost c;
    if (!dur || cost_plan_with(p, rt, k, &c, dur) != 0) {
        free(dur);
        return -1;
    }
    int sharded = s == SCALE_SHARDED || s == SCALE_SHARDED_TIER;
    double N = l.ranks, host_share = s == SCALE_MEGATRAIN ? 1.0 : (double)l.per_node / (sharded ? N : 1.0);
    double layers = g->layers > 0 ? (double)g->layers : 1, tier_update = c.place.tier_s / layers; // a layer's
    double link = 0, add = 0, net = 0, coll = 0, opt = 0; // a micro-batch's (opt: the first's)
    for (int i = 0; i < p->ntrain; i++) {
        const Instr *in = &p->train[i];
        double b = (double)in->bytes;
        switch ((InsKind)in->kind) {
        case INS_COPY_IN:
            if (sharded && l.ranks > 1) {
                double cs = collective_seconds(t, COLL_ALL_GATHER, b, l.ranks);
                net += collective_rank_bytes(COLL_ALL_GATHER, b, l.ranks);
                coll += cs;
                b /= N;
                dur[i] = b / rt->h2d_bandwidth + cs;
            }
            link += b;
            break;
        case INS_COPY_OUT: {
            double elem = in->flags & XFER_BF16 ? 2.0 : 4.0;
            if (s != SCALE_MEGATRAIN && l.ranks > 1) {
                int kind = sharded ? COLL_REDUCE_SCATTER : COLL_ALL_REDUCE;
                double cs = collective_seconds(t, kind, b, l.ranks);
                net += collective_rank_bytes(kind, b, l.ranks);
                coll += cs;
                if (sharded) b /= N;
                dur[i] = b / rt->d2h_bandwidth + cs;
            }
            link += b;
            add += b + 2.0 * b * 4.0 / elem;
            break;
        }
        case INS_INPUT:
        case INS_LOAD:
        case INS_SAVE:
        case INS_STAT: link += b; break;
        case INS_UPDATE:
            // (a layer's tier time is already the rank's slice at its share of the tier: AdamW's is scaled)
            if (s == SCALE_MEGATRAIN) dur[i] = megatrain_update_s(p, in->layer, t);
            else dur[i] = fmax(dur[i] * host_share, in->layer >= 0 ? tier_update : 0);
            opt += dur[i];
            break;
        case INS_NORM:
            dur[i] *= host_share;
            opt += dur[i];
            break;
        default: break;
        }
    }
    double acc = (double)g->train.accumulate;
    double first = cost_simulate(p, p->train, p->ntrain, rt, dur, 1, NULL, NULL);
    double rest = acc > 1 ? cost_simulate(p, p->train, p->ntrain, rt, dur, 0, NULL, NULL) : 0;
    free(dur);
    double tier = (c.place.tier_read_bytes + c.place.tier_write_bytes) / acc;
    double mem = (double)l.per_node * (link + add + tier) / t->host_memory_bandwidth; // a micro-batch's, the node's
    if (strcmp(t->arch, "cpu") != 0) {
        if (first < mem + opt) first = mem + opt;
        if (acc > 1 && rest < mem) rest = mem;
    }
    if (sharded) { // exact clipping: the partial squared norms all-reduced before any update
        double cs = collective_seconds(t, COLL_ALL_REDUCE, 8.0, l.ranks);
        first += cs, coll += cs / acc, net += collective_rank_bytes(COLL_ALL_REDUCE, 8.0, l.ranks) / acc;
    }
    double tokens = (double)(g->train.batch * g->train.seq) * acc; // a rank's a step
    row->priced = 1;
    snprintf(row->schedule, sizeof row->schedule, "%s", p->schedule ? p->schedule : "");
    row->step_s = first + (acc - 1) * rest;
    row->tokens_per_s = tokens * N / row->step_s;
    row->model_flops_per_gpu = 6.0 * (double)storage_host_elems(g) * tokens / row->step_s;
    row->link_bytes = link * acc, row->interconnect_bytes = net * acc, row->collective_s = coll * acc;
    row->host_memory_s = mem * acc, row->optimizer_s = opt;
    row->host_bytes = s == SCALE_MEGATRAIN ? (double)c.host_bytes / l.per_node : (double)c.host_bytes;
    row->tier_level = c.place.level, row->tier_bytes = (double)c.place.tier_bytes, row->tier_s = c.place.tier_s;
    row->node_host_bytes = s == SCALE_MEGATRAIN ? (double)c.host_bytes : row->host_bytes * l.per_node;
    return 0;
}

// What best_row's search callback keeps: the best priced plan so far.
typedef struct Best {
    const Target *t, *rt;
    int s;
    Layout l;
    const CostKernels *k;
    ScaleRow *row;
    int row_dev;   // *row's plan fits the device
    char why[256]; // why *row's plan does not fit
    int failed;
} Best;

// A plan the search built: priced as strategy s, kept when it beats the best.
static void best_seen(void *ctx, const Graph *g, const SchedResult *r) {
    (void)g;
    Best *b = ctx;
    ScaleRow cand = {0};
    if (b->failed || price(r->plan, b->rt, b->t, b->s, b->l, b->k, &cand) != 0) {
        b->failed = 1;
        return;
    }
    cand.fits = r->fits;
    // while none fits: those that fit the device first
    int dev = (double)r->cost.device_peak_bytes <= b->rt->device_memory;
    const ScaleRow *row = b->row;
    int slower = cand.step_s >= row->step_s, worse = b->row_dev > dev || (b->row_dev == dev && slower);
    if (cand.fits ? row->fits && slower : row->fits || (row->priced && worse)) return;
    *b->row = cand;
    b->row_dev = dev;
    snprintf(b->why, sizeof b->why, "%s", r->fits ? "" : r->why);
}

// Strategy s at layout l: of every plan the search builds for each of mt's
// remat modes (megatrain: its own schedule) on the rank's share of the node,
// the fastest that fits, priced as `price` does; when none fits, the fastest
// that fits the device, with why. MegaTrain's workers share one host: on
// several nodes, it is priced on one node's GPUs and does not fit. Returns
// 0, or -1 with err.
static int best_row(Graph *g, const Target *t, int s, Layout l, Arena *a, ScaleRow *row, char *err, size_t errcap) {
    static const Remat REMATS[] = {REMAT_LAYER, REMAT_SELECTIVE, REMAT_OFFLOAD, REMAT_MIXED, REMAT_NONE};
    int spans = l.nodes > 1;
    if (s == SCALE_MEGATRAIN && spans) l = layout_of(t, l.per_node);
    if (l.nodes > (t->nodes >= 1 ? (int)t->nodes : 1)) { // more GPUs than the profile has: nothing to price
        *row = (ScaleRow){.ranks = l.ranks};
        snprintf(row->why, sizeof row->why, "%d ranks need %d nodes of %d GPUs; %s has %g", l.ranks, l.nodes,
                 l.per_node, t->name, t->nodes);
        return 0;
    }
    if (s == SCALE_SHARDED_TIER && l.ranks > 1 && storage_frozen_elems(g, 0)) { // as mtrun's store_open refuses
        *row = (ScaleRow){.ranks = l.ranks};
        snprintf(row->why, sizeof row->why,
                 "a sharded rank's NVMe tier holds no frozen parameters or buffers yet (mtc --freeze, --lora, "
                 "`buffer`)");
        return 0;
    }
    Target rt = rank_target(t, s, l);
    CostKernels *k = cost_kernels(g, &rt);
    if (!k) return snprintf(err, errcap, "out of memory"), -1;
    *row = (ScaleRow){0};
    Best b = {.t = t, .rt = &rt, .s = s, .l = l, .k = k, .row = row, .why = "no plan"};
    int n = s == SCALE_MEGATRAIN ? 1 : (int)(sizeof REMATS / sizeof REMATS[0]), rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        // (ranks: a plan of one of l.ranks, replicated, whose gradients stay fp32 (common/storage.h,
        // storage_grads_bf16) as every strategy of several ranks keeps them; `price` prices it as s)
        SchedRequest q = {.policy = s == SCALE_MEGATRAIN ? POLICY_MEGATRAIN : POLICY_MT,
                          .remat = s == SCALE_MEGATRAIN ? REMAT_AUTO : REMATS[i],
                          .resident = -1,
                          .seen = best_seen,
                          .seen_ctx = &b,
                          .ranks = l.ranks};
        SchedResult r;
        ArenaMark mark = arena_mark(a); // the row keeps no plan
        rc = schedule_search(g, &rt, &q, a, &r, err, errcap);
        arena_release(a, mark);
        if (rc == 0 && b.failed) rc = -1, snprintf(err, errcap, "out of memory");
    }
    const char *why = b.why;
    cost_kernels_free(k);
    if (rc != 0) return -1;
    row->ranks = l.ranks;
    if (s == SCALE_SHARDED_TIER && t->tier_capacity <= 0) { // nothing to spill to
        *row = (ScaleRow){.ranks = l.ranks};
        snprintf(row->why, sizeof row->why, "%s has no NVMe tier (tier_capacity)", t->name);
        return 0;
    }
    double share = t->host_memory / (s == SCALE_MEGATRAIN ? 1 : l.per_node);
    if (!row->priced) {
        snprintf(row->why, sizeof row->why, "%s", why);
    } else if (s == SCALE_MEGATRAIN && spans) {
        char there[320] = "it fits";
        if (!row->fits && row->node_host_bytes > t->host_memory)
            snprintf(there, sizeof there, "its one store of %.4g GB does not fit the node's %.4g GB either",
                     row->node_host_bytes / 1e9, t->host_memory / 1e9);
        else if (!row->fits) snprintf(there, sizeof there, "it does not fit either: %s", why);
        snprintf(row->why, sizeof row->why,
                 "MegaTrain's workers share one host's memory (spawned processes, no NCCL): "
                 "one node of %d GPUs at most, priced here, where %s",
                 l.per_node, there);
        row->fits = 0;
    } else if (!row->fits && row->host_bytes > share) {
        snprintf(row->why, sizeof row->why,
                 "a rank needs %.4g GB of host memory%s; its share of a node is %.4g GB "
                 "(%.4g GB / %d)",
                 row->host_bytes / 1e9,
                 s == SCALE_SHARDED_TIER ? " (what of its 1/N of the store its share of the tier cannot hold, "
                                           "the tier's staging and its activation store)"
                 : s == SCALE_SHARDED    ? " (its 1/N of the store and its activation store)"
                 : s == SCALE_REPLICATED ? " (the whole store and its activation store)"
                                         : "",
                 share / 1e9, t->host_memory / 1e9, s == SCALE_MEGATRAIN ? 1 : l.per_node);
    } else if (!row->fits) {
        snprintf(row->why, sizeof row->why, "%s", why);
    }
    return 0;
}

// The fewest nodes (of t's) on which a sharded run (strategy s: without or
// with the tier) of every GPU of each fits (0: none), and its row in *found:
// without the tier from the nodes whose memory holds the store, with it from
// one, upward. known: the row of s at `ranks` ranks, already predicted.
static int nodes_needed(Graph *g, const Target *t, int s, int ranks, const ScaleRow *known, Arena *a, ScaleRow *found,
                        char *err, size_t errcap) {
    int gpn = t->gpus_per_node >= 1 ? (int)t->gpus_per_node : 1, max = t->nodes >= 1 ? (int)t->nodes : 1;
    int n = s == SCALE_SHARDED_TIER ? 1 : (int)ceil(host_store_bytes(g) / t->host_memory);
    for (n = n < 1 ? 1 : n; n <= max; n++) {
        ScaleRow r = *known;
        if (n * gpn != ranks && best_row(g, t, s, layout_of(t, n * gpn), a, &r, err, errcap) != 0) return -1;
        if (r.fits) return *found = r, n;
    }
    return 0;
}

// The one-GPU bounds b as strategy s at layout l changes them: every weight
// in and every gradient out once a step (a sharded rank's slice, with the
// whole model's all-gather and reduce-scatter on the same engines; a
// replicated rank's all-reduce), the host's optimizer and memory at the
// rank's share of the node (the node's ranks together), the exact-semantics
// turn of the updates and a backward. MegaTrain's way as replicated without
// collectives.
static double bound_of(const Bounds *b, const Graph *g, const Target *t, int s, Layout l) {
    if (l.ranks == 1 && s != SCALE_MEGATRAIN) return b->exact_s; // one GPU: its bounds as they are (the tier too)
    int sharded = s == SCALE_SHARDED || s == SCALE_SHARDED_TIER;
    double N = l.ranks, f = sharded ? 1.0 / N : 1.0;
    double share = sharded ? l.per_node / N : s == SCALE_REPLICATED ? l.per_node : 1.0;
    double weights = (double)storage_host_elems(g) * (double)storage_weight_bytes(g->train.compute);
    double in = b->in_s * f, out = b->out_s * f;
    if (sharded) in += collective_seconds(t, COLL_ALL_GATHER, weights, l.ranks);
    if (s != SCALE_MEGATRAIN)
        out += collective_seconds(t, sharded ? COLL_REDUCE_SCATTER : COLL_ALL_REDUCE, weights, l.ranks);
    double link = t->link_duplex ? fmax(in, out) : in + out;
    double host = s == SCALE_MEGATRAIN ? b->host_s : b->host_s * share;
    // host memory: the links' bytes of every rank of the node, and the optimizer's (megatrain: once)
    double link_mem = (b->in_s * t->h2d_bandwidth + b->out_s * t->d2h_bandwidth) / t->host_memory_bandwidth;
    double mem = (link_mem * (sharded ? 1.0 / N : 1.0)) * l.per_node + (b->host_memory_s - link_mem) * share;
    double turn = (s == SCALE_MEGATRAIN ? b->update_s : b->update_s * share) + b->backward_s;
    double bound = fmax(fmax(b->compute_s, link), fmax(fmax(host, mem), turn));
    if (s == SCALE_SHARDED_TIER && t->tier_read_bandwidth > 0) { // what of a slice its share cannot hold, read and
        double spill = fmax(0, host_store_bytes(g) / N - t->host_memory / l.per_node); // written once a step
        // more than all but the bf16 copy: the copy is on the tier too, read again as it crosses the link
        double again = fmin(spill, fmax(0, spill - (host_store_bytes(g) - weights) / N));
        bound = fmax(bound, (spill + again) * l.per_node / t->tier_read_bandwidth +
                                spill * l.per_node / t->tier_write_bandwidth);
    }
    return bound;
}

// Sharded or replicated, the faster that fits; sharded+tier when neither
// fits and it does; o->why_chosen says why.
static void choose(ScaleOut *o) {
    const ScaleRow *sh = &o->rows[SCALE_SHARDED], *re = &o->rows[SCALE_REPLICATED], *st = &o->rows[SCALE_SHARDED_TIER];
    int sharded = sh->fits && (!re->fits || sh->step_s <= re->step_s * 1.001);
    if (!sh->fits && !re->fits && st->fits) {
        o->chosen = SCALE_SHARDED_TIER;
        snprintf(o->why_chosen, sizeof o->why_chosen,
                 "neither sharded nor replicated fits in host memory (sharded: %.240s); with %.4g GB of each rank's "
                 "slice on its node's NVMe tier it does",
                 sh->why, st->tier_bytes / 1e9);
    } else if (!sh->fits && !re->fits) {
        o->chosen = -1;
        snprintf(o->why_chosen, sizeof o->why_chosen, "neither fits: sharded: %.240s%s%.240s", sh->why,
                 st->priced ? "; sharded+tier: " : "", st->priced ? st->why : "");
    } else if (sharded && !re->fits) {
        o->chosen = SCALE_SHARDED;
        snprintf(o->why_chosen, sizeof o->why_chosen, "replicated does not fit (%s)", re->why);
    } else if (sharded) {
        o->chosen = SCALE_SHARDED;
        snprintf(o->why_chosen, sizeof o->why_chosen, "its step is %.4g s against replicated's %.4g s (%.2fx)",
                 sh->step_s, re->step_s, re->step_s / sh->step_s);
    } else {
        o->chosen = SCALE_REPLICATED;
        snprintf(o->why_chosen, sizeof o->why_chosen, "%s", !sh->fits ? sh->why : "its step is shorter than sharded's");
    }
}

static int compare(Graph *g, const Target *t, int ranks, int want_nodes, int strategies, const Bounds *b, Arena *a,
                   ScaleOut *o, char *err, size_t errcap) {
    Layout l = layout_of(t, ranks);
    *o = (ScaleOut){.ranks = ranks, .per_node = l.per_node, .nodes = l.nodes, .store_bytes = host_store_bytes(g)};
    if (strategies == SCALE_COUNT && best_row(g, t, SCALE_REPLICATED, layout_of(t, 1), a, &o->one, err, errcap) != 0)
        return -1;
    for (int s = 0; s < strategies; s++)
        if (best_row(g, t, s, l, a, &o->rows[s], err, errcap) != 0) return -1;
    if (b && o->one.priced) o->one.bound_s = bound_of(b, g, t, SCALE_REPLICATED, layout_of(t, 1));
    for (int s = 0; b && s < strategies; s++)
        if (o->rows[s].priced) o->rows[s].bound_s = bound_of(b, g, t, s, layout_of(t, o->rows[s].ranks));
    choose(o);
    o->plan = o->chosen;
    int gpn = t->gpus_per_node >= 1 ? (int)t->gpus_per_node : 1;
    if (want_nodes && strcmp(t->arch, "cpu") == 0) { // one machine: its ranks are processes
        o->nodes_needed = o->rows[SCALE_SHARDED].fits, o->ranks_needed = ranks;
        o->tier_nodes_needed = o->rows[SCALE_SHARDED_TIER].fits, o->tier_ranks_needed = ranks;
        o->needed = o->rows[SCALE_SHARDED], o->tier_needed = o->rows[SCALE_SHARDED_TIER];
    } else if (want_nodes) {
        int n = nodes_needed(g, t, SCALE_SHARDED, ranks, &o->rows[SCALE_SHARDED], a, &o->needed, err, errcap);
        int m = n < 0 || t->tier_capacity <= 0
                    ? 0
                    : nodes_needed(g, t, SCALE_SHARDED_TIER, ranks, &o->rows[SCALE_SHARDED_TIER], a, &o->tier_needed,
                                   err, errcap);
        if (n < 0 || m < 0) return -1;
        o->nodes_needed = n, o->ranks_needed = n * gpn;
        o->tier_nodes_needed = m, o->tier_ranks_needed = m * gpn;
    }
    return 0;
}

int scaleout_compare(Graph *g, const Target *t, int ranks, int want_nodes, const Bounds *b, Arena *a, ScaleOut *out,
                     char *err, size_t errcap) {
    return compare(g, t, ranks, want_nodes, SCALE_COUNT, b, a, out, err, errcap);
}

int scaleout_choose(Graph *g, const Target *t, int ranks, Arena *a, char *why, size_t whycap) {
    ScaleOut o;
    if (compare(g, t, ranks, 0, SCALE_SHARDED_TIER + 1, NULL, a, &o, why, whycap) != 0) return -1;
    snprintf(why, whycap, "%s", o.why_chosen);
    return o.chosen == SCALE_SHARDED_TIER ? SCALE_SHARDED : o.chosen; // (-1: neither fits, as --explain --ranks says)
}
