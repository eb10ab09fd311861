// search.c: the scheduler's pass 6 (schedule.c lists them): the search.
// For each remat mode, slot count and checkpoint place, the most resident
// layers that fit, costed by the engine simulation of cost.c; the mixed
// plans by branch and bound over their floors; the fastest plan that fits
// wins.
#include "compiler/schedule/schedule_internal.h"

#include "common/scratch.h"
#include "compiler/schedule/placement.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Whether plan p, which costs c, fits t's memories; else why says what it needs.
static int fits_target(const Plan *p, const Cost *c, const Target *t, char *why, size_t cap) {
    why[0] = 0;
    if ((double)c->host_bytes > t->host_memory)
        snprintf(why, cap, "needs %.4g GB of host memory%s, %s has %.4g GB", (double)c->host_bytes / 1e9,
                 c->place.level > PLACE_RAM ? " with the most it can put on the NVMe tier" : "", t->name,
                 t->host_memory / 1e9);
    else if ((double)c->place.tier_bytes > t->tier_capacity && c->place.level > PLACE_RAM)
        snprintf(why, cap, "needs %.4g GB of NVMe tier, %s has %.4g GB", (double)c->place.tier_bytes / 1e9, t->name,
                 t->tier_capacity / 1e9);
    else if ((double)c->device_peak_bytes > t->device_memory && p->scratch_bytes > 0)
        snprintf(why, cap, "needs %.4g GB of device memory (%.4g GB of it the kernels' scratch), %s has %.4g GB",
                 (double)c->device_peak_bytes / 1e9, (double)(c->device_peak_bytes - p->arena_bytes) / 1e9, t->name,
                 t->device_memory / 1e9);
    else if ((double)c->device_peak_bytes > t->device_memory)
        snprintf(why, cap, "needs %.4g GB of device memory, %s has %.4g GB", (double)c->device_peak_bytes / 1e9,
                 t->name, t->device_memory / 1e9);
    return why[0] == 0;
}

// Whether a block tensor carries annotation `want` (0: any).
static int has_annotation(const Graph *g, Annot want) {
    for (int k = 0; k < g->nkinds; k++) {
        const Part *block = &g->parts[kind_part(k)];
        for (int i = 0; i < block->nfwd; i++) {
            const Node *n = block->nodes.items[i];
            if (n->annot && (!want || n->annot == want)) return 1;
        }
    }
    return 0;
}

// annotations_allow for block part pk (one kind's).
static int kind_annotations_allow(Graph *g, PartKind pk, const SchedChoice *c, Arena *a, char *why, size_t cap) {
    const Part *block = &g->parts[pk];
    BlockNeeds need;
    if (block_needs(block, g->train.compute, a, &need) != 0) return snprintf(why, cap, "out of memory"), 0;
    for (int i = 0; i < block->nfwd; i++) {
        const Node *n = block->nodes.items[i], *b = base_of(n);
        if (!n->annot || b->part != pk || b->id >= block->nfwd || !need.saved[b->id]) continue;
        int kept = need.kept[b->id], all_resident = c->remat == REMAT_NONE || c->resident == g->layers, ok = 0;
        // a layer leaves the device: none resident, and more streamed than the backward finds intact
        int leaves = !c->resident && (c->slots < g->layers || (block->nchunks && c->remat == REMAT_LAYER));
        switch (n->annot) { // (a mixed plan treats the layers it offloads and the rest differently: neither holds)
        case ANNOT_KEEP: ok = !c->offloaded && (all_resident || (c->remat == REMAT_SELECTIVE && kept)); break;
        case ANNOT_RECOMPUTE:
            ok = !c->offloaded && leaves && (c->remat == REMAT_LAYER || (c->remat == REMAT_SELECTIVE && !kept));
            break;
        case ANNOT_OFFLOAD: ok = leaves && c->remat == REMAT_OFFLOAD; break;
        case ANNOT_NONE: ok = 1; break;
        }
        if (!ok) {
            snprintf(why, cap,
                     "remat %s%s, %d slots, %lld resident layers does not %s '%s' (line %d), as its "
                     "annotation says",
                     remat_name(c->remat), c->offloaded ? " mixed with offload" : "", c->slots, (long long)c->resident,
                     annot_name(n->annot), n->name ? n->name : "?", n->loc.line);
            return 0;
        }
    }
    return 1;
}

// Whether choice c does with every annotated block tensor that the backward
// reads what its annotation says (dsl/README.md, Annotations): keep it on
// the device in every layer (remat none, every layer resident, or selective
// for a matmul or attention output it restores); recompute it (layer, or
// selective for the rest) or offload it to host memory (offload), with no
// layer resident, so that every streamed layer but the last `slots` at the
// turn, which the backward finds intact, drops it. The baselines model other
// systems and take no annotations. 0 with the first contradiction in why.
static int annotations_allow(Graph *g, const SchedChoice *c, Arena *a, char *why, size_t cap) {
    if (c->policy != POLICY_MT || !has_annotation(g, ANNOT_NONE)) return 1;
    for (int k = 0; k < g->nkinds; k++)
        if (!kind_annotations_allow(g, (PartKind)kind_part(k), c, a, why, cap)) return 0;
    return 1;
}

double schedule_overshoot(const Cost *c, const Target *t) {
    double dev = (double)c->device_peak_bytes / t->device_memory, host = (double)c->host_bytes / t->host_memory;
    return dev > host ? dev : host;
}

// One search: what it is asked and what it has found.
typedef struct Search {
    Graph *g;
    const Target *t;
    const SchedRequest *req;
    Arena *a;
    const CostKernels *kernels; // the graph's kernels priced on t, once
    SchedResult *best;
    char *err;
    size_t errcap;
} Search;

// What one built choice costs.
typedef struct Tried {
    Cost cost;
    int fits;
    int64_t host_act_bytes; // its host activation store
} Tried;

// Builds and costs one choice, shows it to req->seen and keeps it in *best
// when it beats it. With out, says what it costs.
static int try_choice_out(Search *x, const SchedChoice *c, Tried *out) {
    Graph *g = x->g;
    const Target *t = x->t;
    const SchedRequest *req = x->req;
    Arena *a = x->a;
    SchedResult r = {.choice = *c}, *best = x->best;
    ArenaMark mark = arena_mark(a); // a plan that loses gives its memory back
    r.plan = schedule_build_train(g, t, c, a, x->err, x->errcap);
    if (!r.plan) return -1;
    if (cost_plan_with(r.plan, t, x->kernels, &r.cost, NULL) != 0)
        return snprintf(x->err, x->errcap, "out of memory while costing a plan"), -1;
    r.fits = fits_target(r.plan, &r.cost, t, r.why, sizeof r.why);
    if (r.fits) r.fits = annotations_allow(g, c, a, r.why, sizeof r.why);
    if (out) *out = (Tried){.cost = r.cost, .fits = r.fits, .host_act_bytes = r.plan->host_act_bytes};
    if (req->seen) req->seen(req->seen_ctx, g, &r);
    int better;
    if (!best->plan) better = 1;
    else if (r.fits != best->fits) better = r.fits;
    else if (r.fits) better = r.cost.step_s < best->cost.step_s;
    else better = schedule_overshoot(&r.cost, t) < schedule_overshoot(&best->cost, t);
    if (better) *best = r;
    else arena_release(a, mark);
    return 0;
}

static int try_choice(Search *x, const SchedChoice *c) { return try_choice_out(x, c, NULL); }

// ---------------------------------------------------------------- mixed plans

// A plan's busy times: each a sum over its instructions, so a linear
// function of its picks (each picked layer trades its recompute for its
// copies, the same for every layer of a kind of pick).
typedef struct Busy {
    double device;       // RUNs and arena copies
    double in, out;      // the link, each direction
    double link_bytes;   // what crosses the link, which host memory carries too
    double grads_bytes;  // and what the gradients' adds move there (the unpicked plan's: the least, below)
    double device_bytes; // device memory (not a time, but linear in the picks too)
} Busy;

static Busy busy_of(const Cost *c) {
    return (Busy){.device = c->compute_s + c->device_copy_s,
                  .in = c->copy_in_s,
                  .out = c->copy_out_s,
                  .link_bytes = (double)(c->copy_in_bytes + c->copy_out_bytes),
                  .grads_bytes = c->grads_host_bytes,
                  .device_bytes = (double)c->device_peak_bytes};
}

// The host's side of a plan: its placement and work, which follow from its
// host activation store alone (cost_place_with, cost_host_work).
typedef struct HostSide {
    Placement place;
    double update_s, optimizer_s;
    const double *updates; // (layers + 2) each layer's updates, the head's globals', the tail's
} HostSide;

// The work follows from the placement's level: priced once a level, in
// work[level] (update_s < 0: not yet; updates in arena a). updates NULL: out of memory.
// basis: p's (cost_place_basis), counted once for every pair.
static HostSide host_side(const Plan *p, const Target *t, int64_t act, const PlaceBasis *basis,
                          HostSide work[PLACE_COUNT], Arena *a) {
    HostSide h;
    cost_place_with(p, t, basis, act, &h.place);
    HostSide *w = &work[h.place.level];
    if (w->update_s < 0) {
        double *updates = arena_alloc(a, (size_t)(p->graph->layers + 2) * sizeof *updates); // (layers + 2)
        cost_host_work(p, t, &h.place, &w->update_s, &w->optimizer_s, updates);
        w->updates = updates;
    }
    h.update_s = w->update_s, h.optimizer_s = w->optimizer_s, h.updates = w->updates;
    return h;
}

// The least time a duplex link with `in` and `out` seconds of copies at
// full rate (each direction's, u's) can be busy, where a copy that starts
// while the other direction is busy runs at t's duplex_efficiency e of its
// rate (cost_simulate). Of any moment both directions are busy, the copy
// the simulation placed second started while the other was busy: it is
// slowed. So if a and b seconds (at full rate) of the in and out copies
// are slowed, k = 1/e - 1: the in direction is busy in + k a, the out
// direction out + k b, and both together at most (a + b) / e, so the link
// is busy at least in + out - a - b. The least over every a <= in,
// b <= out of the largest of the three: the smallest M where
// min(in, (M - in) / k) + min(out, (M - out) / k) >= in + out - M, found
// by bisection from below (lo never reaches it: a floor).
static double duplex_link_floor(double in, double out, const Target *t) {
    double lo = fmax(in, out), hi = in + out, k = 1.0 / t->duplex_efficiency - 1.0;
    if (!(k > 0) || in <= 0 || out <= 0) return lo;
    for (int i = 0; i < 60 && hi - lo > 1e-12 * hi; i++) {
        double m = 0.5 * (lo + hi);
        if (fmin(in, (m - in) / k) + fmin(out, (m - out) / k) >= in + out - m) hi = m;
        else lo = m;
    }
    return lo;
}

// The least step a plan with busy times u and host side h can take on t,
// whatever the engines' overlap: cost_plan_with's step is never below it.
// Each micro-batch takes at least its busiest resource (on a cpu target,
// everything: one thread), host memory carrying the link's and the tier's
// bytes; the first also the host's work, and first_min; each later one rest_min.
static double floor_step(const Busy *u, const HostSide *h, const Target *t, int64_t accumulate, double first_min,
                         double rest_min) {
    double first, rest;
    if (strcmp(t->arch, "cpu") == 0) {
        rest = u->device + u->in + u->out;
        first = rest + h->optimizer_s;
    } else {
        double link = t->link_duplex ? duplex_link_floor(u->in, u->out, t) : u->in + u->out;
        double tier = (h->place.tier_read_bytes + h->place.tier_write_bytes) / (double)accumulate;
        double mem = (u->link_bytes + u->grads_bytes + tier) / t->host_memory_bandwidth;
        rest = fmax(u->device, fmax(link, mem));
        first = fmax(rest, mem + h->optimizer_s);
    }
    return fmax(first, first_min) + (double)(accumulate - 1) * fmax(rest, rest_min);
}

// A step as chains of waits between the engines, each layer's part in it
// by its pick: a floor of the simulation that sees what the engines'
// busy times do not, the layers' copies and compute waiting for each
// other through the frames.
//
// Forward: the host updates the head's globals, then layer after layer
// (nothing makes it wait), each update priced at the plan's placement (a
// store that spills onto the NVMe tier updates at the tier's rate). Layer
// l's weights go in once its update is done, the previous layer's weights
// are in, and the layer `slots` before it (its frame's last user) has
// computed; it computes once they are in, the
// layer before it has computed, and that frame's last saves are out; its
// own saves follow its compute, one after another. The tail's forward waits
// for the last layer's, and for the tail's globals, which go in after every
// update.
//
// Backward (leaving layers, from the top): layer l's copies (weights, what
// it loads) go in once the layer before it on the copy-in engine is in and
// the layer `slots` above it is done, and what it loads once the gradients
// out of its frame's last user are out (the copy-in engine WAITs for them:
// claim_frame); it computes once they are in and the layer above is done.
typedef struct LayerTimes {
    double in, compute, save;     // forward: weights in, its compute, its saves
    double back_in, back_compute; // backward: its copies in, its compute (recompute included)
    double back_out;              // backward: its gradients out
    double out_after;             // its compute before the event its first gradient out waits for (< 0: none)
    int wait_above;               // its backward compute waits for the gradients out of the layer this many
                                  // above it (its frame's last user): 0, none
    double wait_after;            // after this much of its backward compute
    int in_wait_above;            // and its backward copies in (what it loads) for those of the layer this
                                  // many above it: 0, none
    double in_wait_after;         // after this much of its copies in
    // Its longest backward copy in on the link (in_big) after in_pre of its copies in, and the copy on
    // the link's other direction just before it in the stream: a COPY_OUT of the layer in_above above it
    // (0: none known) after in_above_done of that layer's gradients out (chain_in, the duplex link)
    double in_pre, in_big, in_above_done;
    int in_above;
    // A sharded plan's collectives in its backward (chain_comm): its weights' all-gather (ag) before its
    // compute, which waits for it after ag_after of its compute (< 0: it does not); its gradients'
    // reduce-scatter (rs) after rs_after of its compute (< 0: no wait known)
    double ag, rs, ag_after, rs_after;
} LayerTimes;

typedef struct Chains {
    double head;          // the head's copies in and forward
    double tail_in;       // the tail's copies in (weights and inputs)
    double pre;           // the compute engine from the tail's forward to the last layer's backward (the tail's)
    double post;          // and after the last one's (the head's backward)
    double post_out;      // then the copy-out engine's (its gradients out)
    double post_norm;     // and the host's (the gradients' norm, on the first micro-batch a step)
    double duplex;        // a copy that starts while the link's other direction is busy runs at this share of
                          // its rate (Target.duplex_efficiency; 1: the link is not duplex)
    int comm;             // the backward's collectives run in the order chain_comm follows (each layer's
                          // all-gather, then its reduce-scatter, from the top): the chains count them
    LayerTimes *unpicked; // (L) every layer with no picks
    const uint8_t *kind;  // (L) each layer's block kind (Graph.layer_kind)
    LayerTimes *picked;   // (nkinds * 3) a leaving layer's by its kind and PICK_* (PICK_NONE unused)
} Chains;

// What split_layers marks as it reads a plan's stream.
typedef struct Marks {
    int64_t *rec_layer;  // (nevents) each RECORD of a layer's backward compute: that layer (-1: none)
    double *rec_compute; // (nevents) and its compute before it
    int64_t *out_layer;  // (nevents) each RECORD on the copy-out engine: the layer whose gradients went out last
    uint8_t *out_seen;   // (L) a COPY_OUT of the layer seen
    int64_t d2h_layer;   // the last copy on the link's device-to-host direction: a COPY_OUT of this layer (-1: other)
    double d2h_done;     // after this much of that layer's gradients out
    int64_t *ev_comm;    // (nevents) the collectives known done when the event fires
    int64_t *ag_index;   // (L) which collective (in the comm engine's order) is the layer's backward all-gather
    int64_t known[ENG_COUNT]; // the collectives each engine knows done (through its WAITs)
    int64_t ncomm;            // the collectives so far
    int64_t comm_layer;       // the backward's last collective: 2 (L - 1 - its layer), + 1 for a reduce-scatter
    int comm_order;           // the backward's collectives in chain_comm's order so far
    int64_t in_waits;         // the copy-in engine's WAITs on copy-out RECORDs since its last copy: the lowest
                              // layer (-1: none)
} Marks;

// What instruction in (d seconds), in the backward while layer cur's (L: the tail's) runs, says of the
// waits between the layers' compute and their gradients out, into lt and m.
static void mark_backward(const Instr *in, double d, int64_t cur, int64_t L, int64_t *last_out, Marks *m,
                          LayerTimes *lt) {
    if (in->kind == INS_RECORD && in->engine == ENG_COMPUTE && cur < L)
        m->rec_layer[in->event] = cur, m->rec_compute[in->event] = lt[cur].back_compute;
    if (in->kind == INS_RECORD && in->engine == ENG_COPY_OUT) m->out_layer[in->event] = *last_out;
    if (in->kind == INS_WAIT && in->engine == ENG_COPY_OUT && m->rec_layer[in->event] >= 0 &&
        !m->out_seen[m->rec_layer[in->event]]) { // its copies out wait for that much of its compute at least
        LayerTimes *w = &lt[m->rec_layer[in->event]];
        w->out_after = fmax(w->out_after, m->rec_compute[in->event]);
    }
    int64_t above = in->kind == INS_WAIT && in->engine == ENG_COMPUTE ? m->out_layer[in->event] : -1;
    if (cur < L && above > cur && !lt[cur].wait_above) // (the first such wait; later ones wait for no more)
        lt[cur].wait_above = (int)(above - cur), lt[cur].wait_after = lt[cur].back_compute;
    if (in->kind == INS_COPY_OUT && in->layer >= 0 && in->layer < L)
        m->out_seen[in->layer] = 1, lt[in->layer].back_out += d, *last_out = in->layer;
    if (in->kind == INS_WAIT && in->engine == ENG_COPY_IN && m->out_layer[in->event] >= 0 &&
        (m->in_waits < 0 || m->out_layer[in->event] < m->in_waits)) // (the lowest: its gradients go out last)
        m->in_waits = m->out_layer[in->event];
    int copy_in = in->engine == ENG_COPY_IN &&
                  (in->kind == INS_COPY_IN || in->kind == INS_LOAD || in->kind == INS_INPUT);
    if (copy_in && cur < L && m->in_waits > cur && !lt[cur].in_wait_above) // the copies from here on wait
        lt[cur].in_wait_above = (int)(m->in_waits - cur), lt[cur].in_wait_after = lt[cur].back_in;
    if (copy_in) m->in_waits = -1;
}

// Instruction in (d seconds): what the engines know of the collectives done (every instruction), and in
// the backward while layer cur's (L: the tail's) runs, each layer's collectives and the waits between
// them and its compute, into lt and m.
static void mark_comm(const Instr *in, double d, int back, int64_t cur, int64_t L, Marks *m, LayerTimes *lt) {
    int64_t *k = &m->known[in->engine];
    if (in->kind == INS_WAIT && m->ev_comm[in->event] > *k) *k = m->ev_comm[in->event];
    int coll = in->engine == ENG_COMM && (in->kind == INS_ALLGATHER || in->kind == INS_REDUCE_SCATTER);
    if (coll) *k = ++m->ncomm;
    if (in->kind == INS_RECORD) m->ev_comm[in->event] = *k;
    if (!back || cur < 0) return;
    if (coll && in->layer >= 0 && in->layer < L) {
        int64_t at = 2 * (L - 1 - (int64_t)in->layer) + (in->kind == INS_REDUCE_SCATTER);
        m->comm_order = m->comm_order && at > m->comm_layer; // (each once: all-gather, then reduce-scatter)
        m->comm_layer = at;
        if (in->kind == INS_ALLGATHER) lt[in->layer].ag += d, m->ag_index[in->layer] = m->ncomm;
        else lt[in->layer].rs += d;
    }
    if (in->kind == INS_WAIT && in->engine == ENG_COMM && m->rec_layer[in->event] >= 0) {
        LayerTimes *w = &lt[m->rec_layer[in->event]]; // its reduce-scatter waits for that much of its compute
        if (w->rs == 0) w->rs_after = fmax(w->rs_after, m->rec_compute[in->event]);
    }
    if (cur < L && in->engine == ENG_COMPUTE && d > 0 && lt[cur].ag_after < 0 && m->ag_index[cur] > 0 &&
        *k >= m->ag_index[cur])
        lt[cur].ag_after = lt[cur].back_compute; // its compute from here on waits for its all-gather
}

// Which direction of the link instruction in of p uses, as cost_simulate's resources say (a duplex link):
// 1 host to device, 2 device to host, 0 neither.
static int link_direction(const Plan *p, const Instr *in) {
    int seg_op = in->kind == INS_COPY_IN || in->kind == INS_COPY_OUT;
    if (seg_op && plan_opt_device(p, in->layer)) return 0; // (on the device)
    if (in->kind == INS_COPY_IN || in->kind == INS_INPUT || in->kind == INS_LOAD) return 1;
    return in->kind == INS_COPY_OUT || in->kind == INS_SAVE || in->kind == INS_STAT ? 2 : 0;
}

// Instruction in (d seconds) on the link, in the backward while layer cur's (L: the tail's) runs: the last
// device-to-host copy, into m; layer cur's longest copy in and the copy out before it, into lt (chain_in).
static void mark_link(const Plan *p, const Instr *in, double d, int64_t cur, int64_t L, Marks *m, LayerTimes *lt) {
    int dir = link_direction(p, in);
    if (dir == 2 && in->kind == INS_COPY_OUT && in->layer >= 0 && in->layer < L)
        m->d2h_layer = in->layer, m->d2h_done = lt[in->layer].back_out; // (mark_backward has counted it)
    else if (dir == 2) m->d2h_layer = -1;
    if (dir != 1 || cur >= L || d <= lt[cur].in_big || in->engine != ENG_COPY_IN) return;
    LayerTimes *w = &lt[cur];
    w->in_pre = w->back_in, w->in_big = d;
    w->in_above = m->d2h_layer > cur ? (int)(m->d2h_layer - cur) : 0, w->in_above_done = m->d2h_done;
}

// From plan p (dur: its instructions' times): each layer's times, by the
// layer each instruction serves (the last COPY_IN or block RUN naming one;
// the tail's RUN and the head's backward RUN end them), into lt (L), and
// the rest into *ch; the updates are the placement's (HostSide.updates).
// A layer's gradients go out on the copy-out engine (each COPY_OUT by the
// layer it names) after the compute its first one waits for (the copy-out
// engine's WAITs before it on RECORDs of that layer's backward compute):
// out_after, the layer's backward compute up to there. Its backward compute
// waits for a layer's gradients out where the compute engine WAITs on a
// RECORD that follows that layer's COPY_OUTs on the copy-out engine
// (wait_above, wait_after). 0, or -1 out of memory.
static int split_layers(const Plan *p, const double *dur, Chains *ch, LayerTimes *lt) {
    int64_t L = p->graph->layers, cur = -1; // -1: the head, L: the tail on, before the layers' backward
    int back = 0, post = 0;
    int64_t last_out = -1; // the layer whose gradients the copy-out engine sent last
    size_t ne = (size_t)p->nevents + 1;
    Marks m = {malloc(ne * sizeof *m.rec_layer),
               malloc(ne * sizeof *m.rec_compute),
               malloc(ne * sizeof *m.out_layer),
               calloc((size_t)L + 1, 1),
               .in_waits = -1,
               .d2h_layer = -1,
               .ev_comm = calloc(ne, sizeof *m.ev_comm),
               .ag_index = calloc((size_t)L + 1, sizeof *m.ag_index),
               .comm_layer = -1,
               .comm_order = 1};
    if (!m.rec_layer || !m.rec_compute || !m.out_layer || !m.out_seen || !m.ev_comm || !m.ag_index)
        return free(m.rec_layer), free(m.rec_compute), free(m.out_layer), free(m.out_seen), free(m.ev_comm),
               free(m.ag_index), -1;
    for (int e = 0; e < p->nevents; e++) m.rec_layer[e] = -1, m.out_layer[e] = -1;
    for (int64_t l = 0; l < L; l++) lt[l] = (LayerTimes){.out_after = -1, .ag_after = -1, .rs_after = -1};
    *ch = (Chains){.unpicked = ch->unpicked, .kind = ch->kind, .picked = ch->picked, .duplex = ch->duplex};
    for (int i = 0; i < p->ntrain; i++) {
        const Instr *in = &p->train[i];
        double d = dur[i];
        if (in->kind == INS_UPDATE) continue;
        if (in->kind == INS_RUN && in->part == PART_TAIL && !back) back = 1, cur = L;
        else if (in->kind == INS_RUN && in->part == PART_HEAD && back) post = 1;
        else if ((in->kind == INS_COPY_IN && in->layer == SEG_TAIL) || (!back && in->kind == INS_INPUT && cur >= 0))
            cur = L; // the tail's globals and inputs
        else if ((in->kind == INS_COPY_IN || (in->kind == INS_RUN && part_is_block(in->part))) && in->layer >= 0)
            cur = in->layer;
        int compute = in->engine == ENG_COMPUTE && (in->kind == INS_RUN || in->kind == INS_COPY),
            copy_in = in->engine == ENG_COPY_IN &&
                      (in->kind == INS_COPY_IN || in->kind == INS_LOAD || in->kind == INS_INPUT),
            save = in->engine == ENG_COPY_OUT && in->kind == INS_SAVE;
        mark_comm(in, d, back && !post, cur, L, &m, lt);
        if (back && !post && cur >= 0)
            mark_backward(in, d, cur, L, &last_out, &m, lt), mark_link(p, in, d, cur, L, &m, lt);
        else if (link_direction(p, in) == 2) m.d2h_layer = -1;
        if (post) {
            ch->post += compute ? d : 0;
            ch->post_out += in->engine == ENG_COPY_OUT && in->kind != INS_NORM ? d : 0;
            ch->post_norm += in->kind == INS_NORM ? d : 0;
        } else if (!back && cur < 0) ch->head += compute || copy_in ? d : 0;
        else if (!back && cur == L) ch->tail_in += copy_in ? d : 0;
        else if (!back) lt[cur].in += copy_in ? d : 0, lt[cur].compute += compute ? d : 0, lt[cur].save += save ? d : 0;
        else if (cur == L) ch->pre += compute ? d : 0;
        else lt[cur].back_in += copy_in ? d : 0, lt[cur].back_compute += compute ? d : 0;
    }
    ch->comm = m.comm_order;
    free(m.rec_layer), free(m.rec_compute), free(m.out_layer), free(m.out_seen), free(m.ev_comm), free(m.ag_index);
    return 0;
}

// The backward of layer l, with times t, from the compute engine free at
// ready and its copies in done at in_done: its compute's end into E[l],
// its gradients out's into O[l], from the copy-out engine free at *out_done.
// comm (chain_comm; NULL: not counted): the collectives' engine free at
// *comm, each layer's all-gather then its reduce-scatter in turn, as the
// plan's stream orders them from the top (Chains.comm).
static void chain_back(const LayerTimes *t, int64_t l, double ready, double in_done, double *E, double *O,
                       double *out_done, double *comm) {
    double start = fmax(ready, in_done);
    if (t->wait_above) start = fmax(start, O[l + t->wait_above] - t->wait_after);
    if (comm) { // (chain_comm) its all-gather, then its compute after it, then its reduce-scatter
        *comm += t->ag;
        if (t->ag_after >= 0) start = fmax(start, *comm - t->ag_after);
        *comm = fmax(*comm, t->rs_after >= 0 ? start + t->rs_after : 0) + t->rs;
    }
    E[l] = start + t->back_compute;
    *out_done = fmax(*out_done, t->out_after >= 0 ? start + t->out_after : 0) + t->back_out;
    O[l] = *out_done;
}

// Layer l's times in a plan of n leaving layers picked as pick (n) says.
static const LayerTimes *layer_times(const Chains *ch, const uint8_t *pick, int64_t n, int64_t l) {
    int p = l < n ? pick[l] : PICK_NONE;
    return p == PICK_NONE ? &ch->unpicked[l] : &ch->picked[ch->kind[l] * 3 + p];
}

// When leaving layer l's backward copies in are done, from their engine free at ready. On a duplex link
// its longest copy either starts while the other direction is busy, and
// runs at ch->duplex of its rate, or starts once the copy out before it in
// the stream is done: the gradients out of layer l + in_above, in_above_done
// of them after that layer's start on its engine (O: each layer's gradients
// out done, the chains' floors), whichever ends first.
static double chain_in(const Chains *ch, const uint8_t *pick, int64_t n, int64_t l, double ready, const double *O) {
    const LayerTimes *t = layer_times(ch, pick, n, l);
    if (!t->in_above || !(ch->duplex < 1)) return ready + t->back_in;
    const LayerTimes *above = layer_times(ch, pick, n, l + t->in_above);
    double before = O[l + t->in_above] - above->back_out + fmin(t->in_above_done, above->back_out);
    double start = ready + t->in_pre, end = fmin(start + t->in_big / ch->duplex, fmax(start, before) + t->in_big);
    return end + (t->back_in - t->in_pre - t->in_big);
}

// The least time of a micro-batch of a plan of n leaving layers picked as
// pick (n) says, updating as updates (L + 2) says: the end of the chains
// above, the last gradients out and (the first micro-batch's) their norm.
// updates NULL: a later micro-batch's, with no host work (cost_simulate's
// host_work 0). E, F: (L + slots + 1) scratch.
static double chain_floor(const Chains *ch, const double *updates, int64_t L, int64_t streamed, int64_t n,
                          const uint8_t *pick, int slots, double *E, double *F) {
    double upd = updates ? updates[L] : 0, in_done = 0, saved = 0,
           *S = E;                // S: saves done, by layer (E is free until the backward)
    double prev = upd + ch->head; // the head's forward done
    for (int64_t l = 0; l < L; l++) {
        const LayerTimes *t = layer_times(ch, pick, n, l);
        int reuse = l >= slots && l < streamed; // its frame was layer l - slots'
        upd += updates ? updates[l] : 0;
        in_done = fmax(fmax(in_done, upd), reuse ? F[l - slots] : 0) + t->in;
        F[l] = fmax(fmax(prev, in_done), reuse ? S[l - slots] : 0) + t->compute;
        saved = t->save > 0 ? fmax(saved, F[l]) + t->save : saved;
        S[l] = t->save > 0 ? saved : 0; // (a frame whose last user saved nothing waits for no save)
        prev = F[l];
    }
    double tail_in = fmax(in_done, upd + (updates ? updates[L + 1] : 0)) + ch->tail_in, tail = fmax(prev, tail_in);
    in_done = tail_in;
    // the backward, from the top: the layers that stay (their copies in, if any, wait for nothing
    // the chains count), then the leaving ones; O (F, free now): each layer's gradients out done
    double *O = F, out_done = 0, ready = tail + ch->pre, comm_free = 0, *comm = ch->comm ? &comm_free : NULL;
    for (int64_t l = L - 1; l >= n; l--) {
        chain_back(&ch->unpicked[l], l, ready, 0, E, O, &out_done, comm);
        ready = E[l];
    }
    for (int64_t x = n + 1; x <= n + slots; x++) E[x] = tail; // (the copies in of the leaving layers wait for these)
    for (int64_t l = n - 1; l >= 0; l--) {
        const LayerTimes *t = layer_times(ch, pick, n, l);
        in_done = chain_in(ch, pick, n, l, fmax(in_done, E[l + slots]), O);
        if (t->in_wait_above) // (its copies after the wait, at full rate at least)
            in_done = fmax(in_done, O[l + t->in_wait_above] + t->back_in - t->in_wait_after);
        chain_back(t, l, E[l + 1], in_done, E, O, &out_done, comm);
    }
    return fmax(E[0] + ch->post, out_done) + ch->post_out + (updates ? ch->post_norm : 0);
}

// The mixed plans of choice c (layer or selective, its slots, checkpoint
// place and resident layers): every pair (K offloaded, S selective on the
// host) of picks among the n layers that leave the device, K + S from 1 to
// n (all n offloaded is remat offload's plan), or the pair req asks for.
//
// An exact search, by branch and bound. Probe plans (no picks; for each
// block kind, its last leaving layer picked of each kind of pick) give
// every pair's floor before any is built: its engines' busy times, the
// unpicked plan's plus what each pick adds; its host side, from its host
// activation store; and the chains of waits through the frames. A pair that cannot fit host or device
// memory is never built; the others are built and simulated in order of
// their floors until no pair left could beat the fastest fitting plan found
// (or req->beat_s): its floor is at least that plan's step. The result is
// the fastest of every pair, as building them all finds it
// (MT_SEARCH_EVERY=1 does, and checks every floor and every skip against
// the plan it built).
//
// The chains end with the copy-out engine: each layer's gradients go out
// after the compute they wait for, in turn (the layers that stay on the
// device too: on qwen3-next-80b-a3b their gradients out, not their compute,
// hold up the leaving layers' backward), then the head's and their norm (a
// later micro-batch's chains, with no host work, bound each of the
// others). A streamed layer's backward compute waits for its frame's last
// user's gradients out. A duplex link's busy time counts its penalty
// (duplex_link_floor), and the chains the penalty's delay of each leaving
// layer's longest backward copy in (chain_in: slowed, or started after the
// copy out before it). Without the staying layers' copies out, the frame's
// wait and chain_in, qwen3-next-80b-a3b's floors on h200 sat 5% under its
// steps, whose pairs lie within 5% of each other, and its --explain built
// 27,000 plans in 5.2 s of CPU (3,776 now, 0.8 s). The pairs whose floor
// only ties the fastest plan found (within FLOOR_ROUNDING) are not built:
// with duplex_efficiency 1, qwen3-next-80b-a3b's floors meet the steps of
// its fastest pairs, and 3,900 of the 3,930 plans it built were such ties.
// Host memory's floor counts the gradients' adds (Cost.grads_host_bytes),
// as the step does: without them llama3-405b's floors on h200 sat 1.6%
// under its steps and its --explain built 92,200 plans in 34 s. With ranks,
// every pair's floor has what the ranks sum after the micro-batches
// (Cost.sums_s): without it llama3-70b's --ranks 8 --explain on h200x8
// built some 80,000 plans in 25 s. A sharded plan's backward collectives
// (ENG_COMM) are a chain of their own where the stream orders them as
// chain_back follows them (each layer's all-gather, its compute, its
// reduce-scatter, from the top; Chains.comm): without it llama3-405b's
// sharded floors on gh200x2-nvme sat 0.5% under steps that lie within as
// much of each other, and its --ranks 2 --explain took 5.7 s (1.9 s now).
// A leaving layer's loads wait for the gradients out of the layer the
// copy-in engine's WAIT names (in_wait_above): without them the plans that
// offload most of the leaving layers on h200x8-shared-pcie, whose backward
// copies in queue behind the gradients out on the half-rate link, had
// floors up to 13.5% under their steps, and qwen3-next-80b-a3b's
// --ranks 8 --explain there built some 28,000 plans in 7.1 s of CPU
// (7,600 now, 2.2 s; the sharded rows' floors still sit up to 26% under).
//
// The scale-out comparison (scaleout.c) prices the plans this search
// builds as a rank of each strategy, and keeps the fastest by that price:
// a plan this search's floors skip is not priced, so a strategy's row is
// the best of the plans whose one-GPU step could beat the best found.

// How far a floor, summed in another order than the simulation sums a step,
// may lie above it by rounding alone: a pair's floor is lowered by it, and a
// pair whose floor is within it of the fastest plan's step is not built, as
// it could at best tie (and a tie keeps the plan found first).
#define FLOOR_ROUNDING 1e-9

typedef struct Pair {
    int64_t k, s;
    double floor;
    int cannot_fit; // skipped unless MT_SEARCH_EVERY
} Pair;

static int by_floor(const void *pa, const void *pb) {
    const Pair *a = pa, *b = pb;
    if (a->floor != b->floor) return a->floor < b->floor ? -1 : 1;
    return a->k != b->k ? (a->k < b->k ? -1 : 1) : (a->s > b->s) - (a->s < b->s);
}

// What the probe plans of a mixed search found (try_mixed): the plan with
// no picks, and what a pick of each kind of block adds to it.
typedef struct Probes {
    Arena own;           // the probes' plans and these arrays (the search's arena keeps the plans it offers)
    Plan *p0;            // the plan with no picks
    Chains ch;           // its chains; ch.picked: a picked layer's, by kind and pick
    Busy u0, *du;        // its busy times; (nkinds * 3) what a pick adds, by kind and pick
    double sums_s;       // what its ranks sum after the micro-batches: every pair's (Cost.sums_s)
    int64_t act0, *dact; // its host activation store; (nkinds * 3) what a pick adds, the same
} Probes;

static int out_of_memory(Search *x) {
    snprintf(x->err, x->errcap, "out of memory while scheduling");
    return -1;
}

// The probes of choice c with n leaving layers, into pr: no picks, then for
// each block kind its last leaving layer offloaded, and it selective on the
// host. A picked layer changes what the plan costs by what its kind and
// pick make it cost, wherever it lies. 0, or -1 with a message.
static int probe_picks(Search *x, SchedChoice c, int64_t n, Probes *pr) {
    Graph *g = x->g;
    int64_t L = g->layers, nk = g->nkinds;
    Arena *own = &pr->own;
    Chains one = {.kind = g->layer_kind, .duplex = x->t->link_duplex ? x->t->duplex_efficiency : 1};
    pr->ch = one;
    pr->du = arena_alloc(own, (size_t)(nk * 3) * sizeof *pr->du);
    pr->dact = arena_alloc(own, (size_t)(nk * 3) * sizeof *pr->dact);
    int64_t *last = arena_alloc(own, (size_t)nk * sizeof *last); // (nkinds) -1: none leaves
    pr->ch.picked = arena_alloc(own, (size_t)(nk * 3) * sizeof *pr->ch.picked);
    pr->ch.unpicked = arena_alloc(own, (size_t)(L + 1) * sizeof *pr->ch.unpicked);
    one.unpicked = arena_alloc(own, (size_t)(L + 1) * sizeof *one.unpicked); // (L) scratch
    if (!pr->du || !pr->dact || !last || !pr->ch.picked || !pr->ch.unpicked || !one.unpicked) return out_of_memory(x);
    for (int64_t k = 0; k < nk; k++) last[k] = -1;
    for (int64_t l = 0; l < n; l++) last[g->layer_kind[l]] = l;
    for (int64_t i = 0; i < 1 + 2 * nk; i++) { // no picks; then kind (i - 1) / 2, pick 1 + (i - 1) % 2
        int64_t kind = (i - 1) / 2, pick = 1 + (i - 1) % 2;
        if (i > 0 && last[kind] < 0) continue;
        SchedChoice one_pick = c;
        one_pick.offloaded = i > 0 && pick == PICK_OFFLOAD;
        one_pick.host_selective = i > 0 && pick == PICK_HOST_SELECTIVE;
        one_pick.probe_layer = i > 0 ? last[kind] + 1 : 0;
        Plan *p = schedule_build_train(g, x->t, &one_pick, own, x->err, x->errcap);
        if (!p) return -1;
        Cost pc;
        double *dur = arena_alloc(own, ((size_t)p->ntrain + 1) * sizeof *dur); // (ntrain)
        if (!dur || cost_plan_with(p, x->t, x->kernels, &pc, dur) != 0) return out_of_memory(x);
        if (i == 0) {
            pr->p0 = p, pr->u0 = busy_of(&pc), pr->act0 = p->host_act_bytes, pr->sums_s = pc.sums_s;
            if (split_layers(p, dur, &pr->ch, pr->ch.unpicked) != 0) return out_of_memory(x);
            continue;
        }
        Busy b = busy_of(&pc);
        const double *bi = (const double *)&b, *b0 = (const double *)&pr->u0;
        double *d = (double *)&pr->du[kind * 3 + pick];
        for (size_t j = 0; j < sizeof b / sizeof(double); j++) d[j] = bi[j] - b0[j];
        // the picks move no gradient; a store pushed onto the tier's gradients level adds more
        // (bf16 gradients no more: storage_grads_bf16), so the unpicked plan's is the least
        pr->du[kind * 3 + pick].grads_bytes = 0;
        pr->dact[kind * 3 + pick] = p->host_act_bytes - pr->act0;
        if (split_layers(p, dur, &one, one.unpicked) != 0) return out_of_memory(x);
        pr->ch.picked[kind * 3 + pick] = one.unpicked[last[kind]];
    }
    return 0;
}

// The floor of every pair (k offloaded, s selective on the host) of c's n
// leaving layers but the plans built already (the unmixed plan, the pairs
// (1, 0) and (0, 1), remat offload's), from the probes pr, into pairs
// (*np of them); those that cannot fit host or device memory only with
// every (MT_SEARCH_EVERY). 0, or -1 with a message.
static int floor_pairs(Search *x, SchedChoice c, int64_t n, Probes *pr, int every, Pair *pairs, size_t *np) {
    const Graph *g = x->g;
    const Target *t = x->t;
    int64_t L = g->layers, accumulate = g->train.accumulate;
    uint8_t *picks = arena_alloc(&pr->own, (size_t)n + 1); // (n) a pair's picks
    // E, F: (L + slots + 1) chain_floor's scratch
    double *E = malloc((size_t)(L + c.slots + 2) * 2 * sizeof *E), *F = E ? E + L + c.slots + 2 : NULL;
    if (!picks || !E) return free(E), out_of_memory(x);
    HostSide work[PLACE_COUNT];
    for (int i = 0; i < PLACE_COUNT; i++) work[i].update_s = -1;
    PlaceBasis basis; // the unpicked plan's, on which every pair's placement is priced
    cost_place_basis(pr->p0, t, &basis);
    for (int64_t k = 0; k <= n; k++)
        for (int64_t s = 0; k + s <= n; s++) {
            if (k + s <= 1 || (k == n && s == 0)) continue; // the unmixed plan, the probes; remat offload's
            Busy b = pr->u0;
            int64_t act = pr->act0;
            fill_picks(picks, n, k, s);
            for (int64_t l = 0; l < n; l++) { // each pick adds what its kind and pick add
                if (picks[l] == PICK_NONE) continue;
                const double *d = (const double *)&pr->du[g->layer_kind[l] * 3 + picks[l]];
                double *bj = (double *)&b;
                for (size_t j = 0; j < sizeof b / sizeof(double); j++) bj[j] += d[j];
                act += pr->dact[g->layer_kind[l] * 3 + picks[l]];
            }
            HostSide h = host_side(pr->p0, t, act, &basis, work, &pr->own);
            if (!h.updates) return free(E), out_of_memory(x);
            // what cannot fit host or device memory (a megabyte's slack for the arena's alignment) is not built
            int cannot_fit = (double)h.place.ram_bytes > t->host_memory ||
                             (h.place.level > PLACE_RAM && (double)h.place.tier_bytes > t->tier_capacity) ||
                             b.device_bytes > t->device_memory + 1e6;
            if (cannot_fit && !every) continue;
            // the first micro-batch's chains, and a later one's (on one thread, a cpu's, the busy
            // times say it all)
            int chains = strcmp(t->arch, "cpu") != 0;
            double chain = chains ? chain_floor(&pr->ch, h.updates, L, L - c.resident, n, picks, c.slots, E, F) : 0;
            double rest = chains && accumulate > 1
                              ? chain_floor(&pr->ch, NULL, L, L - c.resident, n, picks, c.slots, E, F)
                              : 0;
            double floor = floor_step(&b, &h, t, accumulate, chain, rest) + pr->sums_s;
            pairs[(*np)++] = (Pair){.k = k, .s = s, .floor = floor * (1 - FLOOR_ROUNDING), .cannot_fit = cannot_fit};
        }
    free(E);
    return 0;
}

// Builds the pairs of c in order of their floors until none left could
// beat the fastest fitting plan (or req->beat_s);
// with every, all of them, each checked against its floor and its skip.
// 0, or -1 with a message.
static int build_pairs(Search *x, SchedChoice c, const Pair *pairs, size_t np, int every) {
    const SchedRequest *req = x->req;
    int rc = 0;
    for (size_t i = 0; i < np && rc == 0; i++) {
        const SchedResult *best = x->best;
        double beat = best->plan && best->fits ? best->cost.step_s : INFINITY;
        if (req->beat_s > 0 && req->beat_s < beat) beat = req->beat_s;
        if (!every && pairs[i].floor >= beat * (1 - FLOOR_ROUNDING)) break; // (at best a tie: the first found stays)
        c.offloaded = pairs[i].k, c.host_selective = pairs[i].s;
        Tried tr;
        rc = try_choice_out(x, &c, &tr);
        if (rc == 0 && every && (tr.cost.step_s < pairs[i].floor || (tr.fits && pairs[i].cannot_fit))) {
            snprintf(x->err, x->errcap,
                     "internal error: the mixed search's %s of %lld offloaded and %lld selective on "
                     "the host is wrong (floor %.9g s, step %.9g s; store %lld bytes)",
                     tr.cost.step_s < pairs[i].floor ? "floor" : "skip", (long long)pairs[i].k, (long long)pairs[i].s,
                     pairs[i].floor, tr.cost.step_s, (long long)tr.host_act_bytes);
            rc = -1;
        }
    }
    return rc;
}

// The mixed plans of choice c, by branch and bound (above): the probes, the
// pairs (1, 0) and (0, 1), every other pair's floor, then the pairs in
// order of their floors. 0, or -1 with a message.
static int try_mixed(Search *x, SchedChoice c) {
    const SchedRequest *req = x->req;
    int64_t n = x->g->layers - c.resident - c.slots;
    if (req->offloaded || req->host_selective) { // asked for: where that many leave the device
        c.offloaded = req->offloaded, c.host_selective = req->host_selective;
        return c.offloaded + c.host_selective > n ? 0 : try_choice(x, &c);
    }
    if (n < 1) return 0;
    Probes pr = {0};
    Pair *pairs = malloc((size_t)(n + 2) * (size_t)(n + 2) * sizeof *pairs); // ((n + 1)(n + 2) / 2)
    size_t np = 0;
    int rc = pairs ? probe_picks(x, c, n, &pr) : out_of_memory(x);
    for (int pick = PICK_OFFLOAD; rc == 0 && pick <= PICK_HOST_SELECTIVE; pick++) { // the pairs (1, 0) and (0, 1)
        SchedChoice one_pick = c;
        one_pick.offloaded = pick == PICK_OFFLOAD, one_pick.host_selective = pick == PICK_HOST_SELECTIVE;
        if (n > 1 || pick == PICK_HOST_SELECTIVE) rc = try_choice(x, &one_pick); // all n offloaded is remat offload's
    }
    int every = getenv("MT_SEARCH_EVERY") && strcmp(getenv("MT_SEARCH_EVERY"), "1") == 0;
    if (rc == 0) rc = floor_pairs(x, c, n, &pr, every, pairs, &np);
    if (rc == 0 && np) qsort(pairs, np, sizeof *pairs, by_floor);
    if (rc == 0) rc = build_pairs(x, c, pairs, np, every);
    free(pairs);
    arena_free(&pr.own);
    return rc;
}

// The most resident layers (0 .. L) whose arena fits: the arena grows by a
// frame per resident layer, so two plans give the line.
static int64_t most_resident(Graph *g, const Target *t, SchedChoice c, Arena *a, char *err, size_t errcap) {
    c.resident = 0;
    ArenaMark mark = arena_mark(a); // the layouts are measured, not kept
    Plan *p0 = schedule_lay_out(g, t, &c, a, err, errcap);
    if (!p0) return -1;
    int64_t lo = 0, hi = g->layers; // lo fits
    if ((double)plan_device_bytes(p0) > t->device_memory) hi = 0;
    arena_release(a, mark);
    while (lo < hi) {
        c.resident = (lo + hi + 1) / 2;
        Plan *p = schedule_lay_out(g, t, &c, a, err, errcap);
        if (!p) return -1;
        if ((double)plan_device_bytes(p) <= t->device_memory) lo = c.resident;
        else hi = c.resident - 1;
        arena_release(a, mark);
    }
    return lo;
}

// The baselines: fixed shapes, with checkpoints on the device and on the host.
static int search_baseline(Search *x) {
    const SchedRequest *req = x->req;
    // megatrain prefetches into two slots. ZeRO-3 too: once its trace is recorded, each
    // submodule's pre-forward hook queues up to stage3_prefetch_bucket_size (5e7) more elements
    // on a side stream, up to stage3_max_live_parameters (1e9) live, and the host waits for
    // that stream before the submodule runs (partitioned_param_coordinator.py fetch_sub_module,
    // partition_parameters.py NoGatherHandle): the next layer's weights cross while this one
    // computes, as in two slots
    SchedChoice c = {.policy = req->policy,
                     .remat = REMAT_LAYER,
                     .slots = req->policy == POLICY_SEQUENTIAL ? 1 : 2,
                     .ranks = req->ranks,
                     .sharded = req->shard > 0};
    for (int host = 0; host < 2; host++) {
        c.ckpt_host = host;
        if (try_choice(x, &c) != 0) return -1;
    }
    return 0;
}

// Per layer: offload some, keep some selectively on the host, recompute the
// rest (layer or selective), for every slot count and checkpoint place asked.
static int search_mixed(Search *x, int tiled) {
    const SchedRequest *req = x->req;
    for (int base = REMAT_LAYER; base <= REMAT_SELECTIVE; base++)
        for (int host = 0; host < 2; host++)
            for (int slots = 1; slots <= MAX_SLOTS; slots++) {
                // two or three slots unless asked: the next layer's weights cross while this one
                // computes; a third lets a layer's saves finish while the next two compute
                if (!req->slots && slots < 2) continue;
                if ((req->remat == REMAT_LAYER || req->remat == REMAT_SELECTIVE) && base != (int)req->remat) continue;
                if (tiled && base == REMAT_LAYER) continue; // a tiled backward recomputes every layer
                if (req->slots && slots != req->slots) continue;
                if (req->ckpt && host != (req->ckpt == CKPT_HOST)) continue;
                SchedChoice c = {.policy = POLICY_MT,
                                 .remat = (Remat)base,
                                 .slots = slots,
                                 .ckpt_host = host,
                                 .ranks = req->ranks,
                                 .sharded = req->shard > 0};
                c.resident = req->resident >= 0 ? req->resident : most_resident(x->g, x->t, c, x->a, x->err, x->errcap);
                if (c.resident < 0 || try_mixed(x, c) != 0) return -1;
            }
    return 0;
}

// Remat none: every layer resident.
static int search_all_resident(Search *x) {
    const SchedRequest *req = x->req;
    int64_t L = x->g->layers;
    if (req->resident >= 0 && req->resident != L && req->remat == REMAT_NONE) {
        snprintf(x->err, x->errcap, "--remat none keeps every layer resident; --resident %lld contradicts it",
                 (long long)req->resident);
        return -1;
    }
    SchedChoice c = {.policy = POLICY_MT,
                     .remat = REMAT_NONE,
                     .slots = 1,
                     .resident = L,
                     .ranks = req->ranks,
                     .sharded = req->shard > 0};
    return try_choice(x, &c) != 0 ? -1 : 0;
}

// Remat mode rm (layer, selective, offload) for every slot count and
// checkpoint place asked, with the most resident layers that fit.
static int search_streamed(Search *x, Remat rm, int tiled) {
    const SchedRequest *req = x->req;
    Graph *g = x->g;
    for (int host = 0; host < 2; host++)
        for (int slots = 1; slots <= MAX_SLOTS; slots++) {
            if (rm == REMAT_OFFLOAD && !host) continue; // offload means host memory
            if (req->slots && slots != req->slots) continue;
            if (req->ckpt && host != (req->ckpt == CKPT_HOST)) continue;
            SchedChoice c = {.policy = POLICY_MT,
                             .remat = rm,
                             .slots = slots,
                             .ckpt_host = host,
                             .ranks = req->ranks,
                             .sharded = req->shard > 0};
            // recomputed chunk by chunk: nothing resident
            // (and none under a recompute or offload annotation: resident layers keep everything)
            int chunked = tiled && rm == REMAT_LAYER,
                dropped = has_annotation(g, ANNOT_RECOMPUTE) || has_annotation(g, ANNOT_OFFLOAD);
            c.resident = req->resident >= 0   ? req->resident
                         : chunked || dropped ? 0
                                              : most_resident(g, x->t, c, x->a, x->err, x->errcap);
            if (c.resident < 0) return -1;
            if (try_choice(x, &c) != 0) return -1;
        }
    return 0;
}

// After the modes: remat mixed with too few layers to mix offers the plain
// plan, refused; picks asked that no plan has room for are an error.
static int search_refusals(Search *x, int asked) {
    const SchedRequest *req = x->req;
    SchedResult *best = x->best;
    int64_t L = x->g->layers;
    if (req->remat == REMAT_MIXED && !asked && !best->plan) { // too few layers to mix: the plain plan, refused
        SchedChoice c = {.policy = POLICY_MT,
                         .remat = REMAT_LAYER,
                         .slots = 1,
                         .ranks = req->ranks,
                         .sharded = req->shard > 0};
        if (try_choice(x, &c) != 0) return -1;
        best->fits = 0;
        snprintf(best->why, sizeof best->why,
                 "no mix: a mixed plan needs at least 2 layers leaving the device, and "
                 "%lld layers stream through at least 1 slot",
                 (long long)L);
    }
    if (asked && !best->plan) {
        snprintf(x->err, x->errcap,
                 "%lld picked layers asked (%lld offloaded, %lld selective on the host), but no "
                 "plan of the request has that many layers leaving the device (%lld layers, less the resident ones "
                 "and the slots the backward finds intact)",
                 (long long)(req->offloaded + req->host_selective), (long long)req->offloaded,
                 (long long)req->host_selective, (long long)L);
        return -1;
    }
    return 0;
}

// The search of x's request: the baselines' fixed shapes, or mt's remat
// modes as asked, the fastest that fits into x->best. 0, or -1 with a message.
static int search(Search *x) {
    const SchedRequest *req = x->req;
    int64_t L = x->g->layers;
    if (req->resident > L) {
        snprintf(x->err, x->errcap, "%lld resident layers asked; the model has %lld", (long long)req->resident,
                 (long long)L);
        return -1;
    }
    if (req->policy != POLICY_MT) return search_baseline(x);
    int tiled = x->g->parts[PART_BLOCK].nchunks > 0;
    int asked = req->offloaded || req->host_selective; // a mixed plan of these picks
    if (asked && req->remat != REMAT_AUTO && req->remat != REMAT_MIXED && req->remat != REMAT_LAYER &&
        req->remat != REMAT_SELECTIVE) {
        snprintf(x->err, x->errcap, "picked layers mix into remat layer or selective, not %s", remat_name(req->remat));
        return -1;
    }
    for (int rm = REMAT_NONE; rm < REMAT_COUNT; rm++) {
        if (req->remat != REMAT_AUTO && rm != (int)req->remat) continue;
        if (asked && rm != REMAT_MIXED && !((int)req->remat == rm && (rm == REMAT_LAYER || rm == REMAT_SELECTIVE)))
            continue; // a mixed plan was asked for
        int rc = rm == REMAT_MIXED || asked ? search_mixed(x, tiled)
                 : rm == REMAT_NONE         ? search_all_resident(x)
                                            : search_streamed(x, (Remat)rm, tiled);
        if (rc != 0) return -1;
    }
    return search_refusals(x, asked);
}

int schedule_search(Graph *g, const Target *t, const SchedRequest *req, Arena *a, SchedResult *best, char *err,
                    size_t errcap) {
    *best = (SchedResult){0};
    if (prepare_parts(g, a) != 0) return snprintf(err, errcap, "out of memory while scheduling"), -1;
    CostKernels *kernels = cost_kernels(g, t);
    if (!kernels) return snprintf(err, errcap, "out of memory while costing the kernels"), -1;
    Search x = {.g = g, .t = t, .req = req, .a = a, .kernels = kernels, .best = best, .err = err, .errcap = errcap};
    int rc = search(&x);
    if (rc == 0 && best->plan) { // the plan returned, whole: its evaluation stream too
        best->plan = schedule_build(g, t, &best->choice, a, err, errcap);
        if (!best->plan) rc = -1;
    }
    if (rc == 0) rc = placement_choose(t, &req->device_opt, kernels, a, best, err, errcap); // placement.c
    if (rc == 0 && req->seen && best->plan && placement_layers(best->plan) >= 0) req->seen(req->seen_ctx, g, best);
    cost_kernels_free(kernels);
    return rc;
}
