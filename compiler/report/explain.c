#include "compiler/report/explain.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/storage.h"
#include "common/trace.h"

// The attention kernels a plan runs, for --explain: "tensor-core",
// "fp32 fallback", "cpu", "tensor-core + fp32 fallback", "no attention".
// The mixture of experts' routed work, which the cost model prices: "  experts:
// ..." for the first moe of the graph's parts (K of E experts a row), nothing without one.
static void explain_experts(FILE *out, const Graph *g) {
    for (int pk = 0; pk < graph_nparts(g); pk++)
        for (int i = 0; i < g->parts[pk].nfwd; i++) {
            const Node *n = g->parts[pk].nodes.items[i];
            if (n->op != OP_MOE) continue;
            const Shape *s = &n->in[1]->shape;
            fprintf(out, "  experts: %lld of %lld a token (the router's top_k), the GEMMs priced by that routed work\n",
                    (long long)graph_routed_experts(g, n->in[1]), (long long)s->dims[s->rank - 1]);
            return;
        }
}

static const char *attention_kernel(int kinds) {
    switch (kinds) {
    case 0: return "no attention";
    case ATTN_KIND_TC: return "tensor-core";
    case ATTN_KIND_FP32: return "fp32 fallback";
    case ATTN_KIND_CPU: return "cpu";
    case ATTN_KIND_TC | ATTN_KIND_FP32: return "tensor-core + fp32 fallback";
    default: return "mixed";
    }
}

// One JSON object's fields: numbers through json_num (null when not
// finite), with the names of those written null kept for its why_null.
typedef struct JsonObj {
    FILE *out;
    const char *sep; // before the next field: "" first, then ", "
    char nulls[320];
} JsonObj;

static void jnum(JsonObj *o, const char *name, const char *fmt, double v) {
    fprintf(o->out, "%s\"%s\": ", o->sep, name);
    json_num(o->out, fmt, v);
    o->sep = ", ";
    size_t n = strlen(o->nulls);
    if (!isfinite(v)) snprintf(o->nulls + n, sizeof o->nulls - n, "%s%s", n ? ", " : "", name);
}

// ", "why_null": "FIELDS: why"" when a number of o was written null.
static void jwhy(JsonObj *o, const char *why) {
    if (!o->nulls[0]) return;
    char s[1024];
    snprintf(s, sizeof s, "%s: %s", o->nulls, why);
    fprintf(o->out, "%s\"why_null\": ", o->sep);
    json_str(o->out, s);
}

// Why a row's numbers are not finite: a step of no finite time (ranks with
// no path between them on t: their collectives never end), else a division
// by a time or a bound of 0 s.
static void null_why(char *why, size_t cap, double step_s, int ranks, const Target *t) {
    if (isfinite(step_s)) snprintf(why, cap, "not finite: a division by a time or a bound of 0 s");
    else if (ranks > 1)
        snprintf(why, cap,
                 "not finite: %d ranks have no path between them on %s (no link between its GPUs or between its "
                 "nodes), so their collectives, and the step, take no finite time",
                 ranks, t->name);
    else snprintf(why, cap, "not finite: the cost model gives the step no finite time on %s", t->name);
}

// The scale-out rows, one JSON object (mtc --ranks N --explain --json).
static void scaleout_json(FILE *out, const Target *t, const ScaleOut *so) {
    fprintf(out,
            ",\n \"scaleout\": {\"ranks\": %d, \"ranks_per_node\": %d, \"nodes\": %d, \"store_bytes\": ", so->ranks,
            so->per_node, so->nodes);
    json_num(out, "%.0f", so->store_bytes);
    fprintf(out, ", \"nodes_needed\": %d, \"ranks_needed\": %d, \"chosen\": ", so->nodes_needed, so->ranks_needed);
    json_str(out, so->chosen >= 0 ? SCALE_NAMES[so->chosen] : "");
    fprintf(out, ", \"plan\": ");
    json_str(out, so->plan >= 0 ? SCALE_NAMES[so->plan] : "");
    fprintf(out, ", \"why\": ");
    json_str(out, so->why_chosen);
    fprintf(out, ", \"tier_nodes_needed\": %d, \"tier_ranks_needed\": %d", so->tier_nodes_needed,
            so->tier_ranks_needed);
    fprintf(out, ",\n  \"strategies\": [\n");
    for (int i = -1; i < SCALE_COUNT; i++) {
        const ScaleRow *r = i < 0 ? &so->one : &so->rows[i];
        fprintf(out, "   {\"name\": ");
        json_str(out, i < 0 ? "one-gpu" : SCALE_NAMES[i]);
        fprintf(out, ", \"ranks\": %d, \"fits\": %s", r->ranks, r->fits ? "true" : "false");
        JsonObj o = {.out = out, .sep = ", "};
        jnum(&o, "step_s", "%.6g", r->step_s);
        jnum(&o, "tokens_per_s", "%.6g", r->tokens_per_s);
        jnum(&o, "model_flops_per_gpu", "%.6g", r->model_flops_per_gpu);
        jnum(&o, "link_bytes_per_rank", "%.0f", r->link_bytes);
        jnum(&o, "interconnect_bytes_per_rank", "%.0f", r->interconnect_bytes);
        jnum(&o, "collective_s", "%.6g", r->collective_s);
        jnum(&o, "host_bytes_per_rank", "%.0f", r->host_bytes);
        jnum(&o, "tier_bytes_per_rank", "%.0f", r->tier_bytes);
        jnum(&o, "tier_s", "%.6g", r->tier_s);
        fprintf(out, ", \"tier_holds\": \"%s\"", PLACE_NAMES[r->tier_level]);
        jnum(&o, "node_host_bytes", "%.0f", r->node_host_bytes);
        jnum(&o, "host_memory_s", "%.6g", r->host_memory_s);
        jnum(&o, "optimizer_s", "%.6g", r->optimizer_s);
        jnum(&o, "bound_s", "%.6g", r->bound_s);
        char why[512];
        null_why(why, sizeof why, r->step_s, r->ranks, t);
        jwhy(&o, why);
        fprintf(out, ", \"schedule\": ");
        json_str(out, r->schedule);
        fprintf(out, ", \"reason\": ");
        json_str(out, r->fits ? "" : r->why);
        fprintf(out, "}%s\n", i + 1 < SCALE_COUNT ? "," : "");
    }
    fprintf(out, "  ]}");
}

// Sharded with the NVMe tier: the fewest nodes and their step, and the
// plan's bytes in RAM and on NVMe a rank and its tier's time against the step
// (t: a sharded plan's profile, one rank's share of its node's).
static void tier_lines(FILE *out, const Target *t, const ScaleOut *so) {
    if (t->tier_capacity <= 0 || strcmp(t->arch, "cpu") == 0) return;
    const ScaleRow *n = &so->needed, *nt = &so->tier_needed;
    if (so->nodes_needed > 0 && so->ranks_needed > 1)
        fprintf(out, "  sharded without the tier: %d node%s (%d GPUs), step %.4g s\n", so->nodes_needed,
                so->nodes_needed == 1 ? "" : "s", so->ranks_needed, n->step_s);
    if (so->tier_nodes_needed > 0)
        fprintf(out,
                "  sharded with the tier: %d node%s (%d GPUs), step %.4g s, a rank %.4g GB in RAM and %.4g GB on "
                "NVMe (%s), its tier %.4g s a step\n",
                so->tier_nodes_needed, so->tier_nodes_needed == 1 ? "" : "s", so->tier_ranks_needed, nt->step_s,
                nt->host_bytes / 1e9, nt->tier_bytes / 1e9, PLACE_NAMES[nt->tier_level], nt->tier_s);
    else fprintf(out, "  sharded with the tier fits on none of %s's %g nodes\n", t->name, t->nodes);
    if (so->plan == SCALE_SHARDED_TIER) {
        const ScaleRow *p = &so->rows[SCALE_SHARDED_TIER];
        fprintf(out,
                "  the plan, a rank of %d: %.4g GB in RAM (its share %.4g GB), %.4g GB on NVMe (the tier holds %s; "
                "its share %.4g GB at %.4g GB/s read, %.4g GB/s write); the tier %.4g s a step against the step's "
                "%.4g s (%.0f%%)\n",
                so->ranks, p->host_bytes / 1e9, t->host_memory / 1e9, p->tier_bytes / 1e9, PLACE_NAMES[p->tier_level],
                t->tier_capacity / 1e9, t->tier_read_bandwidth / 1e9, t->tier_write_bandwidth / 1e9, p->tier_s,
                p->step_s, 100.0 * p->tier_s / p->step_s);
    }
}

// The scale-out rows as a table: a step of every rank, each rank's bytes.
static void scaleout_text(FILE *out, const Graph *g, const Target *t, const ScaleOut *so) {
    fprintf(out,
            "  scale-out: %d ranks, %d a node on %d node%s of %s (%g GPUs a node, %g nodes), batch %lld a rank; "
            "host store %.4g GB\n",
            so->ranks, so->per_node, so->nodes, so->nodes == 1 ? "" : "s", t->name, t->gpus_per_node, t->nodes,
            (long long)g->train.batch, so->store_bytes / 1e9);
    fprintf(out, "  %-14s %9s %7s %10s %8s %11s %10s %10s %8s %10s %10s %9s %10s %9s %9s  %s\n", "strategy", "step s",
            "/bound", "tokens/s", "x 1 GPU", "TFLOP/s/GPU", "link GB", "net GB", "coll s", "host GB", "NVMe GB",
            "tier s", "node GB", "hostmem s", "optim s", "rank's schedule");
    for (int i = -1; i < SCALE_COUNT; i++) {
        const ScaleRow *r = i < 0 ? &so->one : &so->rows[i];
        char name[32];
        snprintf(name, sizeof name, "%s%s", i < 0 ? "one GPU" : SCALE_NAMES[i], i >= 0 && i == so->plan ? " *" : "");
        if (!r->priced) {
            fprintf(out, "  %-14s %9s  (%s)\n", name, "-", r->why);
            continue;
        }
        fprintf(out,
                "  %-14s %9.4g %7.3f %10.4g %8.2f %11.4g %10.4g %10.4g %8.3g %10.4g %10.4g %9.4g %10.4g %9.4g %9.4g  "
                "%s\n",
                name, r->step_s, r->bound_s > 0 ? r->step_s / r->bound_s : 0, r->tokens_per_s,
                so->one.tokens_per_s > 0 ? r->tokens_per_s / so->one.tokens_per_s : 0, r->model_flops_per_gpu / 1e12,
                r->link_bytes / 1e9, r->interconnect_bytes / 1e9, r->collective_s, r->host_bytes / 1e9,
                r->tier_bytes / 1e9, r->tier_s, r->node_host_bytes / 1e9, r->host_memory_s, r->optimizer_s,
                r->schedule);
        if (!r->fits) fprintf(out, "  %-14s does not fit: %s\n", "", r->why);
    }
    fprintf(out,
            "  (a step of every rank; /bound: against what no schedule of the strategy beats (the bounds above, a "
            "rank's share of them, its collectives); link, net (NVLink and network sent), host GB (RAM), NVMe GB "
            "and tier s (its reads and writes a step at its share of the node's tier): one rank's; node GB: a node's "
            "ranks' host memory; hostmem s: a node's host-side bytes at %.4g GB/s; optim s: a rank's optimizer at "
            "its share of the node's host)\n",
            t->host_memory_bandwidth / 1e9);
    if (so->plan >= 0 && so->plan != so->chosen) // --shard on|off
        fprintf(out, "  the plan: %s, as --shard %s asks; the model's choice: %s%s%s\n", SCALE_NAMES[so->plan],
                so->plan == SCALE_REPLICATED ? "off" : "on", so->chosen >= 0 ? SCALE_NAMES[so->chosen] : "",
                so->chosen >= 0 ? ", because " : "", so->why_chosen);
    else if (so->chosen >= 0) fprintf(out, "  the plan: %s, because %s\n", SCALE_NAMES[so->chosen], so->why_chosen);
    else fprintf(out, "  the plan: %s\n", so->why_chosen);
    if (so->ranks_needed == 1)
        fprintf(out, "  one GPU alone holds the %.4g GB store: a single rank needs no sharding\n",
                so->store_bytes / 1e9);
    else if (so->nodes_needed > 0)
        fprintf(out,
                "  sharded needs %d node%s of %s (%d %s): the fewest whose host memory holds every rank's slice "
                "of the %.4g GB store with its activations\n",
                so->nodes_needed, so->nodes_needed == 1 ? "" : "s", t->name, so->ranks_needed,
                strcmp(t->arch, "cpu") == 0 ? "ranks" : "GPUs", so->store_bytes / 1e9);
    else fprintf(out, "  sharded fits on none of %s's %g nodes\n", t->name, t->nodes);
    tier_lines(out, t, so);
}

// One policy row of --explain --json: its plan's figures (none when it was
// not searched), whether it fits and is chosen.
static void row_json(FILE *out, const Graph *g, const Target *t, const Bounds *b, const SchedResult *r,
                     const char *name, int chosen) {
    double acc = (double)g->train.accumulate;
    double tokens = (double)(g->train.batch * g->train.seq) * acc; // a step's
    const Cost *c = &r->cost;
    fprintf(out, "  {\"name\": ");
    json_str(out, name);
    if (!r->plan) { // not searched
        fprintf(out, ", \"fits\": false, \"chosen\": false, \"reason\": ");
        json_str(out, r->why);
        fprintf(out, "}");
        return;
    }
    fprintf(out, ", \"schedule\": ");
    json_str(out, r->plan->schedule);
    JsonObj o = {.out = out, .sep = ", "};
    jnum(&o, "predicted_step_s", "%.6g", c->step_s);
    jnum(&o, "tokens_per_s", "%.6g", tokens / c->step_s);
    jnum(&o, "ratio_physical", "%.4f", c->step_s / b->physical_s);
    jnum(&o, "ratio_exact", "%.4f", c->step_s / b->exact_s);
    fprintf(out,
            ", \"device_peak_bytes\": %lld, \"arena_bytes\": %lld, \"scratch_bytes\": %lld, \"host_bytes\": %lld, "
            "\"host_activation_bytes\": %lld",
            (long long)c->device_peak_bytes, (long long)r->plan->arena_bytes, (long long)r->plan->scratch_bytes,
            (long long)c->host_bytes, (long long)r->plan->host_act_bytes);
    jnum(&o, "link_bytes_per_step", "%.0f", (double)(c->copy_in_bytes + c->copy_out_bytes) * acc);
    jnum(&o, "weight_crossings", "%.3f", c->weight_crossings);
    jnum(&o, "recompute_s", "%.6g", c->recompute_s * acc);
    jnum(&o, "compute_s", "%.6g", c->compute_s * acc);
    jnum(&o, "gemm_s", "%.6g", c->gemm_s * acc);
    jnum(&o, "attention_s", "%.6g", c->attention_s * acc);
    fprintf(out, ", \"attention_kernel\": \"%s\", \"tier\": \"%s\"", attention_kernel(c->attention_kinds),
            PLACE_NAMES[c->place.level]);
    jnum(&o, "ram_bytes_per_param", "%.6g", c->place.ram_per_param);
    jnum(&o, "tier_bytes_per_param", "%.6g", c->place.tier_per_param);
    fprintf(out, ", \"tier_bytes\": %lld", (long long)c->place.tier_bytes);
    jnum(&o, "tier_s", "%.6g", c->place.tier_s);
    char why[512];
    null_why(why, sizeof why, c->step_s, r->choice.ranks, t);
    jwhy(&o, why);
    fprintf(out, ", \"fits\": %s, \"chosen\": %s", r->fits ? "true" : "false", chosen ? "true" : "false");
    if (!r->fits) {
        fprintf(out, ", \"reason\": ");
        json_str(out, r->why);
    }
    fprintf(out, "}");
}

// explain_print's JSON: one object, the bounds, a row a policy and, with
// ranks, the scale-out strategies. Every number through json_num: one that
// is not finite is null, and the object's why_null says why.
static void explain_json(FILE *out, const Graph *g, const Target *t, const Bounds *b, const SchedResult *rows,
                         const char *const *names, int nrows, int chosen, const ScaleOut *so) {
    fprintf(out, "{\"target\": ");
    json_str(out, t->name);
    fprintf(out, ", \"batch\": %lld, \"seq\": %lld, \"accumulate\": %lld, \"compute_dtype\": \"%s\",\n",
            (long long)g->train.batch, (long long)g->train.seq, (long long)g->train.accumulate,
            dtype_name(g->train.compute));
    fprintf(out, " \"bounds\": {");
    JsonObj o = {.out = out, .sep = ""};
    jnum(&o, "physical_s", "%.6g", b->physical_s);
    jnum(&o, "exact_s", "%.6g", b->exact_s);
    jnum(&o, "compute_s", "%.6g", b->compute_s);
    jnum(&o, "in_s", "%.6g", b->in_s);
    jnum(&o, "out_s", "%.6g", b->out_s);
    jnum(&o, "host_s", "%.6g", b->host_s);
    jnum(&o, "host_memory_s", "%.6g", b->host_memory_s);
    jnum(&o, "update_s", "%.6g", b->update_s);
    jnum(&o, "backward_s", "%.6g", b->backward_s);
    jnum(&o, "tier_s", "%.6g", b->tier_s);
    jnum(&o, "comm_s", "%.6g", b->comm_s);
    jnum(&o, "turn_s", "%.6g", b->turn_s);
    jwhy(&o, "not finite: a bound of no finite time on this target (a rate of 0 in its profile)");
    fprintf(out, "},\n \"policies\": [\n");
    for (int i = 0; i < nrows; i++) {
        row_json(out, g, t, b, &rows[i], names[i], i == chosen);
        fprintf(out, "%s\n", i + 1 < nrows ? "," : "");
    }
    fprintf(out, "]");
    if (so) scaleout_json(out, t, so);
    fprintf(out, "}\n");
}

void explain_print(FILE *out, const Graph *g, const Target *t, const Bounds *b, const SchedResult *rows,
                   const char *const *names, int nrows, int chosen, const ScaleOut *so, int json) {
    double acc = (double)g->train.accumulate;
    double tokens = (double)(g->train.batch * g->train.seq) * acc; // a step's
    if (json) {
        explain_json(out, g, t, b, rows, names, nrows, chosen, so);
        return;
    }
    fprintf(out, "model %s on %s: batch %lld, seq %lld, accumulate %lld, compute %s\n", g->model_name, t->name,
            (long long)g->train.batch, (long long)g->train.seq, (long long)g->train.accumulate,
            dtype_name(g->train.compute));
    char tier[128] = "";
    int n = b->tier_s > 0 ? snprintf(tier, sizeof tier, ", NVMe tier %.4g", b->tier_s) : 0;
    if (b->comm_s > 0) snprintf(tier + n, sizeof tier - (size_t)n, ", collectives %.4g", b->comm_s);
    double update = b->update_s > b->tier_s ? b->update_s : b->tier_s;
    fprintf(out,
            "  bounds: physical %.4g s (compute %.4g, weights in %.4g, gradients out %.4g, optimizer %.4g, host "
            "memory %.4g%s), exact semantics %.4g s (at least weights in + gradients out, %.4g, AdamW%s + the "
            "backward, %.4g, and compute + the head's gradients out, update and weights in, %.4g)\n",
            b->physical_s, b->compute_s, b->in_s, b->out_s, b->host_s, b->host_memory_s, tier, b->exact_s,
            b->in_s + b->out_s, b->tier_s > 0 ? " streaming the tier" : "", update + b->backward_s,
            b->compute_s + b->turn_s);
    fprintf(out, "  %-16s %10s %10s %8s %8s %10s %10s %12s %9s  %s\n", "policy", "step s", "tokens/s", "/phys",
            "/exact", "device GB", "host GB", "link GB/step", "crossings", "schedule");
    for (int i = 0; i < nrows; i++) {
        const SchedResult *r = &rows[i];
        const Cost *c = &r->cost;
        if (!r->plan) {
            fprintf(out, "  %-16s %10s  (%s)\n", names[i], "-", r->why);
            continue;
        }
        char name[64];
        snprintf(name, sizeof name, "%s%s", names[i], i == chosen ? " *" : "");
        fprintf(out, "  %-16s %10.4g %10.4g %8.3f %8.3f %10.4g %10.4g %12.4g %9.2f  %s\n", name, c->step_s,
                tokens / c->step_s, c->step_s / b->physical_s, c->step_s / b->exact_s,
                (double)c->device_peak_bytes / 1e9, (double)c->host_bytes / 1e9,
                (double)(c->copy_in_bytes + c->copy_out_bytes) * acc / 1e9, c->weight_crossings,
                r->plan ? r->plan->schedule : "");
        if (!r->fits) fprintf(out, "  %-16s does not fit: %s\n", "", r->why);
    }
    if (chosen >= 0) {
        const Cost *c = &rows[chosen].cost;
        fprintf(out,
                "  chosen (*): compute %.4g s (GEMMs %.4g, attention %.4g on the %s kernel, other %.4g; recompute "
                "%.4g), copy in %.4g s, copy out %.4g s, device copies %.4g s, host optimizer %.4g s per "
                "micro-batch\n",
                c->compute_s, c->gemm_s, c->attention_s, attention_kernel(c->attention_kinds),
                c->compute_s - c->gemm_s - c->attention_s, c->recompute_s, c->copy_in_s, c->copy_out_s,
                c->device_copy_s, c->optimizer_s);
        explain_experts(out, g);
        const Placement *pl = &c->place;
        if (pl->level > PLACE_RAM)
            fprintf(out,
                    "  host store: %.4g bytes a layer parameter in RAM, %.4g on the NVMe tier (%s); RAM %.4g GB of "
                    "%.4g, tier %.4g GB of %.6g; the tier %.4g s a step (%.4g GB read at %.4g GB/s, %.4g GB "
                    "written at %.4g GB/s, under the updates) against the step's %.4g s\n",
                    pl->ram_per_param, pl->tier_per_param,
                    pl->level == PLACE_MOMENTS  ? "the Adam moments"
                    : pl->level == PLACE_MASTER ? "the Adam moments and the fp32 master"
                    : pl->level == PLACE_GRADS
                        ? "the Adam moments, the fp32 master where it does not stream, the gradients"
                        : "the Adam moments, the fp32 master, the gradients, and the bf16 weights, read at each "
                          "crossing",
                    (double)c->host_bytes / 1e9, t->host_memory / 1e9, (double)pl->tier_bytes / 1e9,
                    t->tier_capacity / 1e9, pl->tier_s, pl->tier_read_bytes / 1e9, t->tier_read_bandwidth / 1e9,
                    pl->tier_write_bytes / 1e9, t->tier_write_bandwidth / 1e9, c->step_s);
        else
            fprintf(out, "  host store: %.4g bytes a layer parameter, all in RAM (%.4g GB of %.4g)\n",
                    pl->ram_per_param, (double)c->host_bytes / 1e9, t->host_memory / 1e9);
        int64_t frozen = storage_frozen_elems(g, 0) + storage_frozen_elems(g, 1);
        if (frozen)
            fprintf(out,
                    "  frozen: %.4g G parameters at %lld bytes each (their storage dtype: no gradient, moments or "
                    "master), %.4g GB of the host store\n",
                    (double)frozen / 1e9, (long long)storage_weight_bytes(g->train.compute),
                    (double)frozen * (double)storage_weight_bytes(g->train.compute) / 1e9);
    } else {
        fprintf(out, "  no policy fits %s\n", t->name);
    }
    if (so) scaleout_text(out, g, t, so);
}

int explain_trace(const char *path, const Plan *p, const Target *t, char *err, size_t errcap) {
    double *dur = calloc((size_t)p->ntrain + 1, sizeof *dur), *start = calloc((size_t)p->ntrain + 1, sizeof *start),
           *end = calloc((size_t)p->ntrain + 1, sizeof *end);
    if (!dur || !start || !end || cost_instr_times(p, t, dur) != 0) {
        free(dur), free(start), free(end);
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    cost_simulate(p, p->train, p->ntrain, t, dur, 1, start, end);
    Trace tr;
    int rc = trace_open(&tr, path, err, errcap);
    for (int i = 0; rc == 0 && i < p->ntrain; i++)
        if (end[i] > start[i])
            trace_instr(&tr, p, &p->train[i], start[i], end[i] - start[i]); // not events, frees, the loss
    free(dur), free(start), free(end);
    return rc == 0 ? trace_close(&tr, err, errcap) : -1;
}
