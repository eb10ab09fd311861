// test_compile: the one compile path (compiler/compile.c) fuses each graph
// it lowers once, and the stages after it (the scheduler's layouts, the
// cost model, the bounds, the emitters) read that program rather than fusing
// again. fuse_runs (compiler/fuse/fuse.c) counts fuse's calls; each case
// compiles a model and checks how many it took:
//   - a plan of one rank (llama-tiny on tiny-2layers at batch 1), its
//     searches, its bounds and the plan written: 1;
//   - the same for 2 ranks under --shard auto (the scale-out model's
//     searches on the same graph): 1;
//   - --tile auto on gpt2 (sequence 1024: untiled, 2 and 4 chunks): 3, one
//     a graph lowered;
//   - and, so that the count itself is checked, one more graph lowered by
//     hand: 1 more.
// usage: test_compile SOURCE_DIR WORK_DIR
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "compiler/compile.h"
#include "compiler/fuse/fuse.h"
#include "tests/check.h"

static const char *source_dir;

// Compiles examples/NAME for target (schedules/TARGET.target) through req;
// with out_path, writes the plan. Returns fuse's calls it took, or -1
// (reported).
static long fuses_of(const char *name, const char *target, const CompileRequest *req, const char *out_path) {
    char path[1024], tpath[1024], err[1024];
    snprintf(path, sizeof path, "%s/examples/%s", source_dir, name);
    snprintf(tpath, sizeof tpath, "%s/schedules/%s.target", source_dir, target);
    Target t;
    if (!CHECK(target_load(tpath, &t, err, sizeof err) == 0, "%s", err)) return -1;
    char *text;
    size_t len;
    if (!CHECK(io_read_file(path, &text, &len) == 0, "cannot read %s", path)) return -1;
    Source src = {.path = path, .text = text, .len = len};
    Diag d = {.src = &src, .sink = stdout};
    Arena a = {0};
    long before = fuse_runs(), n = -1;
    CompileRequest at = *req;
    at.target = &t;
    Compiled c;
    if (!CHECK(compile(&src, &at, &a, &d, &c) == 0, "%s on %s does not compile", name, target)) goto done;
    Graph *untiled = compile_untiled(&c, &req->sema, &a, &d);
    Bounds b;
    if (!CHECK(untiled && cost_bounds(untiled, &t, 1, 0, &b) == 0, "%s: no bounds", name)) goto done;
    if (req->stage == COMPILE_PLAN) { // what --explain adds: a search of every remat mode on the same graph
        CHECK(c.best.plan && c.best.fits, "%s on %s: no plan that fits (%s)", name, target, c.why);
        SchedRequest q = req->sched;
        q.remat = REMAT_LAYER, q.shard = q.shard < 0 ? 0 : q.shard;
        SchedResult r;
        CHECK(schedule_search(c.g, &t, &q, &a, &r, err, sizeof err) == 0, "%s: %s", name, err);
    }
    if (out_path && c.best.plan) CHECK(compile_emit(&c, &at, &src, out_path, &a) == 0, "%s: no plan written", name);
    n = fuse_runs() - before;
done:
    arena_free(&a);
    free(text);
    return n;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_compile SOURCE_DIR WORK_DIR\n");
        return 2;
    }
    source_dir = argv[1];
    char plan[1024];
    snprintf(plan, sizeof plan, "%s/compile.plan", argv[2]);
    CompileRequest one = {.stage = COMPILE_PLAN,
                          .sema = {.batch = 1},
                          .tile = 1,
                          .sched = {.policy = POLICY_MT, .remat = REMAT_AUTO, .resident = -1, .shard = -1}};
    long n = fuses_of("llama-tiny.mt", "tiny-2layers", &one, plan);
    CHECK(n == 1, "a plan of one rank, searched, bounded and written: fuse ran %ld times, not once", n);
    CHECK(remove(plan) == 0, "no plan written at %s", plan);
    CompileRequest two = one;
    two.sched.ranks = 2;
    n = fuses_of("llama-tiny.mt", "tiny-2layers", &two, NULL);
    CHECK(n == 1, "a plan of 2 ranks under --shard auto: fuse ran %ld times, not once", n);
    CompileRequest tiles = {.stage = COMPILE_TILED, .sched = one.sched};
    n = fuses_of("gpt2.mt", "h200", &tiles, NULL);
    CHECK(n == 3, "--tile auto on gpt2 (untiled, 2 and 4 chunks): fuse ran %ld times, not 3", n);
    // the counter counts: a graph lowered by hand is fused once more
    long before = fuse_runs();
    char path[1024], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/examples/gpt2-tiny.mt", source_dir);
    if (CHECK(io_read_file(path, &text, &len) == 0, "cannot read %s", path)) {
        Source src = {.path = path, .text = text, .len = len};
        Diag d = {.src = &src, .sink = stdout};
        Arena a = {0};
        Model *m = dsl_parse(&src, &a, &d);
        CHECK(m && compile_lower(m, NULL, 1, NULL, &a, &d) && fuse_runs() == before + 1,
              "compile_lower: fuse ran %ld times, not once", fuse_runs() - before);
        arena_free(&a);
        free(text);
    }
    return check_summary("test_compile");
}
