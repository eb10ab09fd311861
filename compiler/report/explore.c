// explore.c: the Pareto frontier of the searched schedules, printed and
// drawn (explore.h).
#include "compiler/report/explore.h"

#include "common/json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void explore_seen(void *ctx, const Graph *g, const SchedResult *r) {
    Exploration *x = ctx;
    if (x->failed || !r->plan) return;
    if (x->n == x->cap) {
        int cap = x->cap ? 2 * x->cap : 256;
        ExplorePoint *p = realloc(x->pts, (size_t)cap * sizeof *p);
        if (!p) {
            x->failed = 1;
            return;
        }
        x->pts = p, x->cap = cap;
    }
    double tokens = (double)(g->train.batch * g->train.seq * g->train.accumulate);
    x->pts[x->n++] = (ExplorePoint){.batch = g->train.batch,
                                    .policy = r->choice.policy,
                                    .fits = r->fits,
                                    .tokens_per_s = r->fits && r->cost.step_s > 0 ? tokens / r->cost.step_s : 0,
                                    .device_bytes = (double)r->cost.device_peak_bytes,
                                    .host_bytes = (double)r->cost.host_bytes};
    snprintf(x->pts[x->n - 1].schedule, sizeof x->pts[0].schedule, "%s", r->plan->schedule);
    x->seq = g->train.seq;
}

void explore_free(Exploration *x) {
    free(x->pts);
    *x = (Exploration){0};
}

int explore_on_frontier(const Exploration *x, int i) {
    const ExplorePoint *p = &x->pts[i];
    if (!p->fits || p->policy != POLICY_MT) return 0;
    for (int j = 0; j < x->n; j++) {
        const ExplorePoint *q = &x->pts[j];
        if (j == i || !q->fits || q->policy != POLICY_MT || q->batch != p->batch) continue;
        int no_worse = q->tokens_per_s >= p->tokens_per_s && q->device_bytes <= p->device_bytes &&
                       q->host_bytes <= p->host_bytes;
        int better = q->tokens_per_s > p->tokens_per_s || q->device_bytes < p->device_bytes ||
                     q->host_bytes < p->host_bytes;
        if (no_worse && (better || j < i)) return 0; // (of equal points, the first stands)
    }
    return 1;
}

// The batches explored, ascending, into b (cap at least x->n); returns how many.
static int batches(const Exploration *x, int64_t *b) {
    int n = 0;
    for (int i = 0; i < x->n; i++) {
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= b[k] == x->pts[i].batch;
        if (!seen) b[n++] = x->pts[i].batch;
    }
    for (int i = 1; i < n; i++) // insertion sort: a handful
        for (int k = i; k > 0 && b[k - 1] > b[k]; k--) {
            int64_t t = b[k];
            b[k] = b[k - 1], b[k - 1] = t;
        }
    return n;
}

// The best tokens a second of policy pol at batch b (0: none fits).
static double best_of(const Exploration *x, Policy pol, int64_t b) {
    double best = 0;
    for (int i = 0; i < x->n; i++)
        if (x->pts[i].policy == pol && x->pts[i].batch == b && x->pts[i].tokens_per_s > best)
            best = x->pts[i].tokens_per_s;
    return best;
}

// Point indices of batch b's frontier, fastest first, into idx; returns how many.
static int frontier(const Exploration *x, int64_t b, int *idx) {
    int n = 0;
    for (int i = 0; i < x->n; i++)
        if (x->pts[i].batch == b && explore_on_frontier(x, i)) idx[n++] = i;
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && x->pts[idx[k - 1]].tokens_per_s < x->pts[idx[k]].tokens_per_s; k--) {
            int t = idx[k];
            idx[k] = idx[k - 1], idx[k - 1] = t;
        }
    return n;
}

void explore_print(FILE *out, const Exploration *x, int json) {
    int64_t *b = malloc(((size_t)x->n + 1) * sizeof *b);
    int *idx = malloc(((size_t)x->n + 1) * sizeof *idx);
    if (!b || !idx) {
        free(b), free(idx);
        return;
    }
    int nb = batches(x, b);
    if (json) {
        fprintf(out, "{\"model\": ");
        json_str(out, x->model);
        fprintf(out, ", \"target\": ");
        json_str(out, x->target);
        fprintf(out, ", \"seq\": %lld, \"batches\": [\n", (long long)x->seq);
    } else
        fprintf(out,
                "model %s on %s, seq %lld: the Pareto frontier of the searched schedules at each batch\n"
                "(predicted tokens a second against device and host memory; %d plans costed)\n",
                x->model, x->target, (long long)x->seq, x->n);
    for (int k = 0; k < nb; k++) {
        int nf = frontier(x, b[k], idx);
        if (json) fprintf(out, "  {\"batch\": %lld, \"frontier\": [", (long long)b[k]);
        else fprintf(out, "batch %lld:%s\n", (long long)b[k], nf ? "" : " nothing fits");
        for (int i = 0; i < nf; i++) {
            const ExplorePoint *p = &x->pts[idx[i]];
            if (json) { // (a point on the frontier fits: its figures are finite, json_num all the same)
                fprintf(out, "%s{\"tokens_per_s\": ", i ? ", " : "");
                json_num(out, "%.6g", p->tokens_per_s);
                fprintf(out, ", \"device_bytes\": ");
                json_num(out, "%.0f", p->device_bytes);
                fprintf(out, ", \"host_bytes\": ");
                json_num(out, "%.0f", p->host_bytes);
                fprintf(out, ", \"schedule\": ");
                json_str(out, p->schedule);
                fprintf(out, "}");
            } else
                fprintf(out, "  %12.4g tokens/s  %9.4g GB device  %9.4g GB host  %s\n", p->tokens_per_s,
                        p->device_bytes / 1e9, p->host_bytes / 1e9, p->schedule);
        }
        if (json) fprintf(out, "]}%s\n", k + 1 < nb ? "," : "");
    }
    if (json) fprintf(out, "], \"policies\": {");
    else fprintf(out, "best tokens a second by policy and batch (- : does not fit)\n  %-14s", "batch");
    if (!json) {
        for (int k = 0; k < nb; k++) fprintf(out, " %10lld", (long long)b[k]);
        fputc('\n', out);
    }
    for (int pol = 0; pol < POLICY_COUNT; pol++) {
        if (json) fprintf(out, "%s\"%s\": [", pol ? ", " : "", policy_name((Policy)pol));
        else fprintf(out, "  %-14s", policy_name((Policy)pol));
        for (int k = 0; k < nb; k++) {
            double t = best_of(x, (Policy)pol, b[k]);
            if (json) {
                fprintf(out, "%s[%lld, ", k ? ", " : "", (long long)b[k]);
                json_num(out, "%.6g", t);
                fprintf(out, "]");
            } else if (t > 0) fprintf(out, " %10.4g", t);
            else fprintf(out, " %10s", "-");
        }
        fprintf(out, json ? "]" : "\n");
    }
    if (json) fprintf(out, "}}\n");
    free(b);
    free(idx);
}

// ---------------------------------------------------------------- the picture

// A "nice" tick step for [0, hi] in about five steps: 1, 2 or 5 times a power of ten.
static double tick_step(double hi) {
    double raw = hi / 5, p = pow(10, floor(log10(raw > 0 ? raw : 1))), m = raw / p;
    return p * (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10);
}

typedef struct Panel {
    double x0, y0, w, h; // the plot area, in pixels (y0 at the top)
    double xmax, ymax;   // data ranges from 0 (x as given: the right panel passes positions)
} Panel;

static double px(const Panel *p, double x) { return p->x0 + p->w * x / p->xmax; }
static double py(const Panel *p, double y) { return p->y0 + p->h - p->h * y / p->ymax; }

// Axes, the y ticks, and labels; x ticks are the caller's.
static void axes(FILE *f, const Panel *p, const char *xlabel, const char *ylabel) {
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", p->x0, p->y0 + p->h,
            p->x0 + p->w, p->y0 + p->h);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", p->x0, p->y0, p->x0,
            p->y0 + p->h);
    double step = tick_step(p->ymax);
    for (double y = 0; y <= p->ymax * 1.0001; y += step) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", p->x0, py(p, y),
                p->x0 + p->w, py(p, y));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n", p->x0 - 4,
                py(p, y) + 4, y);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n", p->x0 + p->w / 2,
            p->y0 + p->h + 34, xlabel);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f "
            "%.1f)\">%s</text>\n",
            p->x0 - 48, p->y0 + p->h / 2, p->x0 - 48, p->y0 + p->h / 2, ylabel);
}

static const char *const COLORS[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                     "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
enum { NCOLORS = sizeof COLORS / sizeof COLORS[0] };

int explore_svg(const char *path, const Exploration *x, char *err, size_t errcap) {
    int64_t *b = malloc(((size_t)x->n + 1) * sizeof *b);
    int *idx = malloc(((size_t)x->n + 1) * sizeof *idx);
    FILE *f = b && idx ? fopen(path, "w") : NULL;
    if (!f) {
        snprintf(err, errcap, "%s: cannot write the plot: %s", path, b && idx ? strerror(errno) : "out of memory");
        free(b), free(idx);
        return -1;
    }
    int nb = batches(x, b);
    double tmax = 0, dmax = 0;
    for (int i = 0; i < x->n; i++) {
        if (!x->pts[i].fits) continue;
        if (x->pts[i].tokens_per_s > tmax) tmax = x->pts[i].tokens_per_s;
        if (x->pts[i].policy == POLICY_MT && x->pts[i].device_bytes / 1e9 > dmax) dmax = x->pts[i].device_bytes / 1e9;
    }
    tmax = tmax > 0 ? tmax * 1.1 : 1;
    dmax = dmax > 0 ? dmax * 1.05 : 1;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"470\" viewBox=\"0 0 1000 470\" "
               "font-family=\"sans-serif\">\n<rect width=\"1000\" height=\"470\" fill=\"white\"/>\n");
    fprintf(f,
            "<text x=\"500\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">%s on %s, sequence %lld: predicted "
            "tokens a second</text>\n",
            x->model, x->target, (long long)x->seq);

    // left: every fitting mt plan, and each batch's frontier joined
    Panel L = {.x0 = 80, .y0 = 50, .w = 380, .h = 330, .xmax = dmax, .ymax = tmax};
    axes(f, &L, "device memory (GB)", "tokens/s");
    double step = tick_step(dmax);
    for (double v = 0; v <= dmax * 1.0001; v += step)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n", px(&L, v),
                L.y0 + L.h + 16, v);
    for (int i = 0; i < x->n; i++)
        if (x->pts[i].fits && x->pts[i].policy == POLICY_MT)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2\" fill=\"#bbb\"/>\n",
                    px(&L, x->pts[i].device_bytes / 1e9), py(&L, x->pts[i].tokens_per_s));
    for (int k = 0; k < nb; k++) {
        int nf = frontier(x, b[k], idx);
        if (!nf) continue;
        const char *c = COLORS[k % NCOLORS];
        for (int i = 1; i < nf; i++) // by device memory (the frontier is short)
            for (int j = i; j > 0 && x->pts[idx[j - 1]].device_bytes > x->pts[idx[j]].device_bytes; j--) {
                int t = idx[j];
                idx[j] = idx[j - 1], idx[j - 1] = t;
            }
        // the staircase of the most tokens a second at up to each device memory
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", c);
        double best = 0;
        for (int i = 0; i < nf; i++) {
            const ExplorePoint *p = &x->pts[idx[i]];
            if (p->tokens_per_s <= best) continue;
            if (best > 0) fprintf(f, "%.1f,%.1f ", px(&L, p->device_bytes / 1e9), py(&L, best));
            fprintf(f, "%.1f,%.1f ", px(&L, p->device_bytes / 1e9), py(&L, p->tokens_per_s));
            best = p->tokens_per_s;
        }
        fprintf(f, "%.1f,%.1f\"/>\n", px(&L, dmax), py(&L, best));
        for (int i = 0; i < nf; i++)
            fprintf(f,
                    "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>batch %lld: %s, %.4g tokens/s, "
                    "%.4g GB device, %.4g GB host</title></circle>\n",
                    px(&L, x->pts[idx[i]].device_bytes / 1e9), py(&L, x->pts[idx[i]].tokens_per_s), c, (long long)b[k],
                    x->pts[idx[i]].schedule, x->pts[idx[i]].tokens_per_s, x->pts[idx[i]].device_bytes / 1e9,
                    x->pts[idx[i]].host_bytes / 1e9);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"%s\" text-anchor=\"end\">batch %lld</text>\n",
                L.x0 + L.w - 4, L.y0 + L.h - 8 - 14 * (nb - 1 - k), c, (long long)b[k]);
    }
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#777\">grey: every plan that fits; dots: each "
            "batch's frontier (tokens/s, device and host memory); line: the most tokens/s within a device "
            "memory</text>\n",
            L.x0, L.y0 + L.h + 50);

    // right: each policy's best at each batch where any fits (batches evenly spaced)
    int nfit = 0;
    for (int k = 0; k < nb; k++) {
        int any = 0;
        for (int pol = 0; pol < POLICY_COUNT; pol++) any |= best_of(x, (Policy)pol, b[k]) > 0;
        if (any) b[nfit++] = b[k];
    }
    nb = nfit;
    Panel R = {.x0 = 590, .y0 = 50, .w = 380, .h = 330, .xmax = nb > 1 ? nb - 1 : 1, .ymax = tmax};
    axes(f, &R, "batch (sequences a micro-batch)", "tokens/s");
    for (int k = 0; k < nb; k++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%lld</text>\n",
                px(&R, nb > 1 ? k : 0.5), R.y0 + R.h + 16, (long long)b[k]);
    for (int pol = 0; pol < POLICY_COUNT; pol++) {
        const char *c = COLORS[pol % NCOLORS];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", c);
        for (int k = 0; k < nb; k++) {
            double t = best_of(x, (Policy)pol, b[k]);
            if (t > 0) fprintf(f, "%.1f,%.1f ", px(&R, nb > 1 ? k : 0.5), py(&R, t));
        }
        fprintf(f, "\"/>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"%s\">%s</text>\n", R.x0 + 8,
                R.y0 + 12 + 14 * pol, c, policy_name((Policy)pol));
    }
    fprintf(f, "</svg>\n");
    free(b), free(idx);
    if (fclose(f) != 0) {
        snprintf(err, errcap, "%s: cannot write the plot: %s", path, strerror(errno));
        remove(path);
        return -1;
    }
    return 0;
}
