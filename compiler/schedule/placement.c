// placement.c: the optimizer's placement (placement.h), after the search.
//
//   1. What is asked: none leaves the plan alone; a cpu target has no device
//      store, so nothing is placed there whatever is asked.
//   2. The most layers that fit: the device memory the chosen plan leaves
//      free (t->device_memory less plan_device_bytes) over a segment's
//      device store (plan_opt_device_segment_bytes), the globals first, then
//      layers 0, 1, ... in order.
//   3. A fixed count that does not fit: the plan does not fit, and why says
//      by how much. Auto: the placement of the most layers that fit, kept
//      when its predicted step is shorter than the all-host plan's.
//   4. The schedule words say what was placed.
#include "compiler/schedule/placement.h"

#include <stdio.h>
#include <string.h>

#include "common/scratch.h"

// Places the globals and layers [0, layers) of p (layers < 0: nothing).
static void place(Plan *p, int64_t layers) {
    for (int64_t s = SEG_FIRST; s < p->graph->layers; s++)
        p->opt_device[plan_segment_index(s)] = layers >= 0 && (s < 0 || s < layers);
}

int64_t placement_layers(const Plan *p) {
    if (!plan_opt_device(p, SEG_HEAD) && !plan_opt_device(p, SEG_TAIL)) return -1;
    int64_t n = 0;
    while (n < p->graph->layers && plan_opt_device(p, n)) n++;
    return n;
}

// The most layers (with the globals) whose device store fits beside the rest of p on t; -1: not even the globals.
static int64_t most_that_fit(Plan *p, const Target *t) {
    int64_t lo = -1, hi = p->graph->layers; // the answer lies in [lo, hi]
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        place(p, mid);
        if ((double)plan_device_bytes(p) <= t->device_memory) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int placement_choose(const Target *t, const DevOptRequest *req, const CostKernels *k, Arena *a, SchedResult *best,
                     char *err, size_t errcap) {
    Plan *p = best->plan;
    // 1. what is asked
    if (!p || req->mode == DEVOPT_NONE || (req->mode == DEVOPT_AUTO && strncmp(t->arch, "sm_", 3) != 0)) return 0;
    if (strncmp(t->arch, "sm_", 3) != 0) {
        best->fits = 0;
        snprintf(best->why, sizeof best->why, "%s is not a GPU: no device to place the optimizer on", t->name);
        return 0;
    }
    if (!p->opt_device && !(p->opt_device = arena_alloc(a, (size_t)plan_segment_count(p)))) goto oom;
    // 2. the most that fit
    int64_t fit = most_that_fit(p, t), want = req->mode == DEVOPT_ALL      ? p->graph->layers
                                              : req->mode == DEVOPT_LAYERS ? req->layers
                                                                           : fit;
    if (want > p->graph->layers) want = p->graph->layers;
    // 3. the placement, costed
    Cost placed;
    place(p, want);
    if (want >= 0 && cost_plan_with(p, t, k, &placed, NULL) != 0) goto oom;
    if (req->mode == DEVOPT_AUTO && (want < 0 || placed.step_s >= best->cost.step_s)) {
        place(p, -1);
        return 0;
    }
    if (req->mode != DEVOPT_AUTO && want > fit) {
        char fits_words[64];
        if (fit < 0) snprintf(fits_words, sizeof fits_words, "not even the globals fit");
        else snprintf(fits_words, sizeof fits_words, "the globals and at most %lld layers fit", (long long)fit);
        best->fits = 0;
        snprintf(best->why, sizeof best->why,
                 "the optimizer of the globals and %lld layers on the device needs %.4g MB of device memory beside "
                 "the plan's %.4g MB; the device has %.4g MB (%s)",
                 (long long)want, (double)plan_opt_device_bytes(p) / 1e6,
                 (double)(plan_device_bytes(p) - plan_opt_device_bytes(p)) / 1e6, t->device_memory / 1e6, fits_words);
    }
    best->cost = placed;
    // 4. in the schedule words
    char words[512];
    int n = snprintf(words, sizeof words, "%s devopt=%lld/%lld", p->schedule ? p->schedule : "", (long long)want,
                     (long long)p->graph->layers);
    if (!(p->schedule = arena_strndup(a, words, n < (int)sizeof words ? (size_t)n : sizeof words - 1))) goto oom;
    return 0;
oom:
    snprintf(err, errcap, "out of memory while placing the optimizer");
    return -1;
}
