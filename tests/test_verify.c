// test_verify: the plan verifier accepts every example's plan and refuses
// mutated ones, each with a message naming the instructions involved:
// a dropped weight copy, a too-early weight overwrite, overlapping arena
// buffers, a dropped checkpoint copy, and a backward run before its
// forward recompute. (Two plans that look wrong but are not: overlapping
// buffers of values already dead, and the last layer's backward without
// its recompute, since its forward values are still in the arena.)
//
// usage: test_verify EXAMPLES_DIR
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/io.h"
#include "../compiler/schedule.h"
#include "../compiler/verify.h"

static int failures;

static Plan *compile(const char *path, Arena *a) {
    char *text, err[1024];
    size_t len;
    if (io_read_file(path, &text, &len) != 0) return NULL;
    Source src = {.path = path, .text = text, .len = len};
    Diag d = {.src = &src, .sink = stderr};
    Model *m = dsl_parse(&src, a, &d);
    Graph *g = m ? sema_lower(m, NULL, a, &d) : NULL;
    Plan *p = g && autodiff(g, a, &d) == 0 ? schedule_first(g, a, err, sizeof err) : NULL;
    free(text); // the plan keeps no pointer into the source here
    return p;
}

// The index of the n-th (0-based) instruction matching kind, part and layer.
static int find(const Plan *p, int kind, int part, int layer, int nth) {
    for (int i = 0; i < p->ntrain; i++) {
        const Instr *in = &p->train[i];
        if (in->kind == kind && (part < 0 || in->part == part) && in->layer == layer && nth-- == 0) return i;
    }
    return -1;
}

static void drop(Plan *p, int i) {
    memmove(&p->train[i], &p->train[i + 1], (size_t)(p->ntrain - i - 1) * sizeof(Instr));
    p->ntrain--;
}

static void move(Plan *p, int from, int to) { // to < from
    Instr saved = p->train[from];
    memmove(&p->train[to + 1], &p->train[to], (size_t)(from - to) * sizeof(Instr));
    p->train[to] = saved;
}

static void expect_refused(Plan *p, const char *what, const char *phrase) {
    char err[1024] = "";
    if (plan_verify(p, err, sizeof err) == 0) {
        printf("FAIL: %s was accepted\n", what);
        failures++;
    } else if (!strstr(err, phrase) || !strstr(err, "instruction")) {
        printf("FAIL: %s: the message lacks \"%s\" or the instructions:\n  %s\n", what, phrase, err);
        failures++;
    } else {
        printf("ok   %s: %s\n", what, err);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    static const char *const MODELS[] = {"gpt2-tiny", "llama-tiny", "gpt2", "llama3-8b", "llama3-70b", "llama3-405b",
                                         "qwen2-7b"};
    char path[4096], err[1024];
    for (size_t k = 0; k < sizeof MODELS / sizeof MODELS[0]; k++) {
        Arena a = {0};
        snprintf(path, sizeof path, "%s/%s.mt", argv[1], MODELS[k]);
        Plan *p = compile(path, &a);
        if (!p || plan_verify(p, err, sizeof err) != 0) {
            printf("FAIL: %s: %s\n", path, p ? err : "does not compile");
            failures++;
        }
        arena_free(&a);
    }

    snprintf(path, sizeof path, "%s/llama-tiny.mt", argv[1]); // two layers
    for (int mutation = 0; mutation < 5; mutation++) {
        Arena a = {0};
        Plan *p = compile(path, &a);
        if (!p) return 1;
        const Graph *g = p->graph;
        switch (mutation) {
        case 0: // layer 0's weights not copied in again before its backward
            drop(p, find(p, INS_COPY_IN, -1, 0, 1));
            expect_refused(p, "a dropped weight copy", "layer 1's weights");
            break;
        case 1: { // layer 0's weights copied over the slot while layer 1 still needs it
            int bwd1 = find(p, INS_RUN, PART_BLOCK, 1, 2), in0 = find(p, INS_COPY_IN, -1, 0, 1);
            move(p, in0, bwd1);
            expect_refused(p, "a too-early weight overwrite", "layer 0's weights");
            break;
        }
        case 2: { // the block's output made to overlap the first norm's output, which the backward still reads
            const Part *block = &g->parts[PART_BLOCK];
            int norm = -1;
            for (int i = 0; i < block->nfwd && norm < 0; i++)
                if (((const Node *)block->nodes.items[i])->op == OP_RMSNORM) norm = i;
            p->node_offset[PART_BLOCK][block->output->id] = p->node_offset[PART_BLOCK][norm] + 64;
            expect_refused(p, "overlapping arena buffers", "holds");
            break;
        }
        case 3: { // layer 0's output never saved as layer 1's checkpoint
            int fwd0 = find(p, INS_RUN, PART_BLOCK, 0, 0);
            drop(p, fwd0 + 1);
            expect_refused(p, "a dropped checkpoint copy", "reads");
            break;
        }
        case 4: { // layer 0's backward before its recomputed forward (layer 1's values still there)
            int rec0 = find(p, INS_RUN, PART_BLOCK, 0, 1), bwd0 = find(p, INS_RUN, PART_BLOCK, 0, 2);
            Instr t = p->train[rec0];
            p->train[rec0] = p->train[bwd0];
            p->train[bwd0] = t;
            expect_refused(p, "a backward before its forward", "layer");
            break;
        }
        }
        arena_free(&a);
    }
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
