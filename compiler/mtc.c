// mtc: the mt compiler driver. Reads a model, runs the stages in order and
// prints what was asked. Exit status: 0 success, 1 a user error in the
// model or its files, 2 a usage error.
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/io.h"
#include <zlib.h>

#include "graph.h"
#include "explain.h"
#include "plan_write.h"
#include "schedule.h"
#include "verify.h"
#include "summary.h"

#ifndef MT_VERSION
#define MT_VERSION "0.0.0"
#endif

static const char USAGE[] =
    "usage: mtc MODEL.mt [options]\n"
    "\n"
    "Compiles a model description into a training plan for mtrun.\n"
    "\n"
    "options:\n"
    "  -o PLAN          write the training plan for mtrun\n"
    "  --target PROFILE target machine profile: a file, or NAME for schedules/NAME.target\n"
    "  --explain        predicted step time on the target against the lower bound (needs --target)\n"
    "  --trace FILE     the predicted timeline as Chrome trace-event JSON (needs --target)\n"
    "  --batch N        batch size (overrides the train section)\n"
    "  --seq N          sequence length (overrides the train section)\n"
    "  --summary        print parameter counts per part and the host memory needed\n"
    "  --json           print the summary (or --explain) as one JSON object\n"
    "  --dump-graph     print the layer graph, one node a line\n"
    "  --help           print this help\n"
    "  --version        print the version\n"
    "\n"
    "With no output option mtc checks the model and prints nothing on success.\n"
    "exit status: 0 success, 1 error in the model or a file, 2 usage error\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "mtc: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'mtc --help'.\n");
    return 2;
}

static int parse_count(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > (1LL << 40)) return -1;
    *out = v;
    return 0;
}

// Schedules the graph and writes the plan; nothing is left at path on failure.
static int write_plan(Graph *g, const Source *src, const char *path, Arena *arena) {
    char err[1024];
    Plan *p = schedule_first(g, arena, err, sizeof err);
    if (p && plan_verify(p, err, sizeof err) != 0) { // a compiler bug: never write such a plan
        fprintf(stderr, "mtc: internal error: %s\n", err);
        return -1;
    }
    if (p) {
        p->source_path = src->path;
        p->source = src->text;
        p->source_len = src->len;
        p->source_crc = (uint32_t)crc32(0L, (const Bytef *)src->text, (uInt)src->len);
        if (plan_write(p, path, err, sizeof err) == 0) return 0;
    }
    fprintf(stderr, "mtc: error: %s\n", err);
    return -1;
}

int main(int argc, char **argv) {
    enum { OPT_TARGET = 256, OPT_BATCH, OPT_SEQ, OPT_SUMMARY, OPT_JSON, OPT_DUMP, OPT_EXPLAIN, OPT_TRACE, OPT_HELP,
           OPT_VERSION };
    static const struct option LONG[] = {
        {"target", required_argument, 0, OPT_TARGET}, {"batch", required_argument, 0, OPT_BATCH},
        {"seq", required_argument, 0, OPT_SEQ},       {"summary", no_argument, 0, OPT_SUMMARY},
        {"json", no_argument, 0, OPT_JSON},           {"dump-graph", no_argument, 0, OPT_DUMP},
        {"explain", no_argument, 0, OPT_EXPLAIN},     {"trace", required_argument, 0, OPT_TRACE},
        {"help", no_argument, 0, OPT_HELP},           {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    const char *out_path = NULL, *target = NULL, *trace_path = NULL;
    int want_summary = 0, want_json = 0, want_dump = 0, want_explain = 0;
    SemaOptions opt = {0};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:", LONG, NULL)) != -1) {
        switch (c) {
        case 'o': out_path = optarg; break;
        case OPT_TARGET: target = optarg; break;
        case OPT_BATCH:
            if (parse_count(optarg, &opt.batch)) return usage_error("--batch needs a positive integer, got '%s'", optarg);
            break;
        case OPT_SEQ:
            if (parse_count(optarg, &opt.seq)) return usage_error("--seq needs a positive integer, got '%s'", optarg);
            break;
        case OPT_SUMMARY: want_summary = 1; break;
        case OPT_JSON: want_json = 1; break;
        case OPT_DUMP: want_dump = 1; break;
        case OPT_EXPLAIN: want_explain = 1; break;
        case OPT_TRACE: trace_path = optarg; break;
        case OPT_HELP: fputs(USAGE, stdout); return 0;
        case OPT_VERSION: printf("mtc %s\n", MT_VERSION); return 0;
        case ':': return usage_error("option '%s' needs a value", argv[optind - 1]);
        default: return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind == argc) return usage_error("%s", "no model file given");
    if (argc - optind > 1) return usage_error("one model file at a time; '%s' is a second", argv[optind + 1]);
    const char *path = argv[optind];

    if ((want_explain || trace_path) && !target)
        return usage_error("%s", want_explain ? "--explain needs --target PROFILE" : "--trace needs --target PROFILE");
    Target tgt;
    char terr[1024];
    if (target && target_load(target, &tgt, terr, sizeof terr) != 0) {
        fprintf(stderr, "%s\n", terr);
        return 1;
    }

    char *text;
    size_t len;
    int err = io_read_file(path, &text, &len);
    if (err) {
        fprintf(stderr, "%s: error: cannot read the model: %s\n", path, strerror(err));
        return 1;
    }
    Source src = {.path = path, .text = text, .len = len};
    Diag diag = {.src = &src, .sink = stderr};
    Arena arena = {0};
    int rc = 1;
    Model *model = dsl_parse(&src, &arena, &diag);
    Graph *g = model ? sema_lower(model, &opt, &arena, &diag) : NULL;
    if (g && autodiff(g, &arena, &diag) != 0) g = NULL;
    if (g) {
        rc = 0;
        if (want_dump) graph_dump(stdout, g, path);
        if (want_explain || trace_path) {
            char serr[1024];
            Plan *p = schedule_first(g, &arena, serr, sizeof serr);
            if (p && want_explain) explain_print(stdout, p, &tgt, want_json);
            if (p && trace_path && explain_trace(trace_path, p, &tgt, serr, sizeof serr) != 0) p = NULL;
            if (!p) fprintf(stderr, "mtc: error: %s\n", serr);
            rc = p ? 0 : 1;
        } else if (want_json) {
            summary_print_json(stdout, g, path, &arena);
        } else if (want_summary) {
            summary_print(stdout, g, path);
        }
        if (out_path && write_plan(g, &src, out_path, &arena) != 0) rc = 1;
        if (fflush(stdout) != 0) {
            fprintf(stderr, "mtc: error: writing the output: %s\n", strerror(errno));
            rc = 1;
        }
    }
    arena_free(&arena);
    free(text);
    return rc;
}
