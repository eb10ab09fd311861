#include "explain.h"

#include <string.h>

// Whether the plan fits the target; if not, why, in reason.
static int fits(const Cost *c, const Target *t, char *reason, size_t cap) {
    reason[0] = 0;
    if ((double)c->device_peak_bytes > t->device_memory)
        snprintf(reason, cap, "needs %.3g GB of device memory, %s has %.3g GB", (double)c->device_peak_bytes / 1e9,
                 t->name, t->device_memory / 1e9);
    else if ((double)c->host_bytes > t->host_memory)
        snprintf(reason, cap, "needs %.3g GB of host memory, %s has %.3g GB", (double)c->host_bytes / 1e9, t->name,
                 t->host_memory / 1e9);
    return reason[0] == 0;
}

void explain_print(FILE *out, const Plan *p, const Target *t, int json) {
    const Graph *g = p->graph;
    Cost c;
    cost_plan(p, t, &c);
    char reason[256];
    int ok = fits(&c, t, reason, sizeof reason);
    int64_t link = c.copy_in_bytes + c.copy_out_bytes;
    if (json) {
        fprintf(out, "{\"target\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"policies\": [\n", t->name,
                (long long)g->train.batch, (long long)g->train.seq);
        fprintf(out, "  {\"name\": \"sequential\", \"predicted_step_s\": %.6g, \"lower_bound_s\": %.6g, "
                     "\"device_peak_bytes\": %lld, \"host_bytes\": %lld, \"link_bytes_per_step\": %lld, "
                     "\"weight_crossings\": %d, \"chosen\": %s, \"fits\": %s",
                c.step_s, c.lower_bound_s, (long long)c.device_peak_bytes, (long long)c.host_bytes, (long long)link,
                c.weight_crossings, ok ? "true" : "false", ok ? "true" : "false");
        if (!ok) fprintf(out, ", \"reason\": \"%s\"", reason);
        fprintf(out, "}\n]}\n");
        return;
    }
    fprintf(out, "model %s on %s: batch %lld, seq %lld, compute %s\n", g->model_name, t->name,
            (long long)g->train.batch, (long long)g->train.seq, dtype_name(g->train.compute));
    fprintf(out, "  %-12s %10s %10s %6s %12s %12s %12s %9s\n", "policy", "step s", "bound s", "ratio", "device GB",
            "host GB", "link GB/step", "crossings");
    fprintf(out, "  %-12s %10.4g %10.4g %6.2f %12.4g %12.4g %12.4g %9d\n", ok ? "sequential *" : "sequential",
            c.step_s, c.lower_bound_s, c.step_s / c.lower_bound_s, (double)c.device_peak_bytes / 1e9,
            (double)c.host_bytes / 1e9, (double)link / 1e9, c.weight_crossings);
    fprintf(out, "  step: compute %.4g s (recompute %.4g), copy in %.4g s, copy out %.4g s, device copies %.4g s, "
                 "optimizer %.4g s\n", c.compute_s, c.recompute_s, c.copy_in_s, c.copy_out_s, c.device_copy_s,
            c.optimizer_s);
    if (!ok) fprintf(out, "  does not fit: %s\n", reason);
    fprintf(out, "  (* chosen; the one policy so far: one stream, no overlap, every layer recomputed)\n");
}
