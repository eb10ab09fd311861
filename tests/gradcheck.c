// gradcheck: checks autodiff's gradients against central finite differences
// in double precision. For each model given, for each part (head, block,
// tail), binds random inputs and parameters, takes the objective
//   J = sum(output * R) for a random R (the head's and block's gradient seed,
//   the tail's loss scale: a scalar),
// plus every loss add_loss joins to the objective,
// runs the backward the compiler appended, and compares every gradient, of
// every parameter and part input, element by element (up to --samples a
// tensor, 48 by default) with the fourth-order central difference of J. Fails on any relative error above
// TOLERANCE.
//
// usage: gradcheck [--samples N] MODEL.mt...
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "common/graph.h"
#include "runtime/backend/blas_core.h"
#include "runtime/backend/exec.h"
#include "compiler/front/passes.h"

static int max_samples = 48; // elements checked a tensor; --samples N
static const double TOLERANCE = 1e-6, STEP = 1e-4;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(void) { // [0, 1)
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static double normal(void) { return sqrt(-2 * log(1 - uniform())) * cos(6.283185307179586 * uniform()); }

// Plus every loss add_loss joins to the objective (OP_ADD_LOSS's second operand).
static double objective(PartState *ps, const double *R) {
    const Part *p = ps->part;
    exec_run(ps, 0, p->nfwd);
    const double *out = ps->val[p->output->id];
    double j = 0;
    for (int i = 0; i < p->nfwd; i++) {
        const Node *n = p->nodes.items[i];
        if (n->op == OP_ADD_LOSS) j += ((const double *)ps->val[n->in[1]->id])[0];
    }
    if (!R) return j + out[0];
    for (int64_t i = 0; i < shape_numel(&p->output->shape); i++) j += out[i] * R[i];
    return j;
}

// Checks one part; returns the number of failed elements.
static int check_part(const Graph *g, PartKind pk, const char *path) {
    const Part *part = &g->parts[pk];
    PartState ps;
    if (exec_init(&ps, part, PREC_F64) != 0) return 1;
    void **bound = calloc((size_t)part->nodes.n, sizeof(void *));
    double *R = NULL;
    for (int i = 0; i < part->nodes.n; i++) {
        const Node *n = part->nodes.items[i];
        if (n->op != OP_INPUT && n->op != OP_PARAM) continue;
        int64_t cnt = shape_numel(&n->shape);
        bound[i] = malloc((size_t)cnt * 8);
        for (int64_t k = 0; k < cnt; k++) {
            if (n->dtype == DT_I32) ((int *)bound[i])[k] = (int)(uniform() * 4); // models have V >= 4
            else ((double *)bound[i])[k] = n->op == OP_PARAM ? 0.5 * normal() + (n->shape.rank == 1) : normal();
        }
        ps.val[i] = bound[i];
        if (n == part->grad_seed) R = bound[i]; // a block's d J / d output, the tail's loss scale
    }
    double j0 = objective(&ps, R);
    exec_run(&ps, part->nfwd, part->nodes.n);
    int failed = 0, checked = 0;
    double worst = 0;
    for (int gi = 0; gi < part->grads.n; gi++) {
        const Grad *gr = part->grads.items[gi];
        int64_t cnt = shape_numel(&gr->of->shape);
        double *x = ps.val[gr->of->id], *analytic = malloc((size_t)cnt * 8);
        for (int64_t k = 0; k < cnt; k++) analytic[k] = gr->grad ? ((double *)ps.val[gr->grad->id])[k] : 0.0;
        for (int s = 0; s < max_samples && s < cnt; s++) {
            int64_t k = cnt <= max_samples ? s : (int64_t)(uniform() * (double)cnt);
            double saved = x[k], h = STEP * fmax(1.0, fabs(saved)), jd[4];
            for (int e = 0; e < 4; e++) { // J at x + 2h, x + h, x - h, x - 2h
                x[k] = saved + (double[]){2, 1, -1, -2}[e] * h;
                jd[e] = objective(&ps, R);
            }
            x[k] = saved;
            double fd = (8 * (jd[1] - jd[2]) - (jd[0] - jd[3])) / (12 * h), a = analytic[k];
            // Relative to the gradient, or for near-zero gradients to the
            // objective's scale, where rounding in J itself dominates.
            double err = fabs(a - fd) / fmax(fmax(fabs(a), fabs(fd)), 1e-3 * fmax(1.0, fabs(j0)));
            worst = fmax(worst, err);
            checked++;
            if (err > TOLERANCE) {
                if (failed < 5)
                    printf("FAIL %s: %s part, d J / d %s[%lld]: autodiff %.10g, finite differences %.10g (rel err "
                           "%.2g)\n",
                           path, part_name(pk), gr->of->name ? gr->of->name : "input", (long long)k, a, fd, err);
                failed++;
            }
        }
        free(analytic);
    }
    printf("%s %s: %s part, %d gradient elements, worst relative error %.2g (J = %.6g)\n", failed ? "FAIL" : "ok  ",
           path, part_name(pk), checked, worst, j0);
    if (checked == 0 && pk != PART_HEAD) {
        printf("FAIL %s: %s part has no gradients to check\n", path, part_name(pk));
        failed++;
    }
    for (int i = 0; i < part->nodes.n; i++) free(bound[i]);
    free(bound);
    exec_free(&ps);
    return failed;
}

int main(int argc, char **argv) {
    mt_blas_core_pick(); // OpenBLAS's kernels for this CPU, as mtrun picks them
    int first = 1;
    if (argc > 2 && !strcmp(argv[1], "--samples")) {
        max_samples = atoi(argv[2]);
        first = 3;
    }
    if (first >= argc || max_samples < 1) {
        fprintf(stderr, "usage: gradcheck [--samples N] MODEL.mt...\n");
        return 2;
    }
    int failed = 0;
    for (int a = first; a < argc; a++) {
        char *text;
        size_t len;
        if (io_read_file(argv[a], &text, &len) != 0) {
            printf("FAIL %s: cannot read\n", argv[a]);
            failed++;
            continue;
        }
        Source src = {.path = argv[a], .text = text, .len = len};
        Diag diag = {.src = &src, .sink = stdout};
        Arena arena = {0};
        Model *m = dsl_parse(&src, &arena, &diag);
        Graph *g = m ? sema_lower(m, NULL, &arena, &diag) : NULL;
        if (!g || autodiff(g, &arena, &diag) != 0) failed++;
        else
            for (int pk = 0; pk < graph_nparts(g); pk++) failed += check_part(g, (PartKind)pk, argv[a]);
        arena_free(&arena);
        free(text);
    }
    return failed ? 1 : 0;
}
