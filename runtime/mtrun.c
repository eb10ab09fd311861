// mtrun: replays a plan written by mtc: trains the model it describes with
// weights and AdamW states in host memory. With --calibrate, measures this
// machine instead and writes a target profile for mtc --target. Exit status:
// 0 success, 1 an error in the plan, the data or the run, 2 a usage error.
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/backend/blas_core.h"
#include "runtime/calibrate.h"
#include "runtime/backend/device.h"
#include "runtime/dist/dist.h"
#include "common/verify.h"
#include "runtime/plan_read.h"
#include "runtime/train.h"

#ifndef MT_VERSION
#define MT_VERSION "0.0.0"
#endif

static const char USAGE[] =
    "usage: mtrun PLAN [options]\n"
    "       mtrun --calibrate [--out FILE] [--threads N] [--tier-dir DIR]\n"
    "\n"
    "Trains the model of a plan written by mtc, streaming it through the device.\n"
    "With --calibrate, measures this machine (cpu backend: memory bandwidth, AdamW,\n"
    "sgemm and element-wise rates, cores, RAM) in a few seconds and writes a target\n"
    "profile for mtc --target instead.\n"
    "\n"
    "options:\n"
    "  --steps N        optimizer steps (default: the model's train section; with --resume, the end of\n"
    "                   the checkpoint's run)\n"
    "  --schedule-steps N  the steps the learning-rate schedule (warmup, then decay) spans (default: --steps;\n"
    "                   with --resume, the checkpoint's run's, kept whatever --steps says and said so)\n"
    "  --data FILE      training text (bytes) or llm.c token file (uint16 or Llama-3 uint32; a loss\n"
    "                   mask X.mask beside X.bin is used); the last 10% validates without --val-data;\n"
    "                   JSON lines, or text for a model whose vocabulary is not bytes, are refused\n"
    "                   (tools/prepare_data.py makes token files of them)\n"
    "  --val-data FILE  a separate validation file (the same formats)\n"
    "  --shuffle        take the training rows from the data's windows of seq+1 tokens in a random\n"
    "                   order, another each epoch, drawn from --seed (a resume keeps the order)\n"
    "  --lr X           peak learning rate\n"
    "  --warmup N       steps of linear warmup from 0 to the peak (default: the model's train section)\n"
    "  --lr-schedule S  cosine, linear or constant after the warmup (default: the model's)\n"
    "  --min-lr X       the rate cosine and linear decay to (default: the model's min_lr fraction of\n"
    "                   the peak); a checkpoint keeps none of these: a resume warns where they differ\n"
    "                   from its log's\n"
    "  --epochs X       the steps that pass over the training split X times (not with --steps)\n"
    "  --weight-decay X AdamW's decoupled weight decay (default: the model's)\n"
    "  --clip X         the global gradient norm clipped to (0: none; default: the model's)\n"
    "  --accumulate N   micro-batches a step (default: the model's; a step's tokens grow with it)\n"
    "  --seed N         seed of the weight initialisation\n"
    "  --val-every N    validation loss every N steps\n"
    "  --val-batches N  batches averaged for a validation loss (default 10)\n"
    "  --device D       cpu, cuda or auto (default: the cuda backend on a machine with a GPU,\n"
    "                   else cpu; it says which)\n"
    "  --reference      run the unstreamed reference executor instead of the plan\n"
    "  --trace FILE     the measured timeline as Chrome trace JSON, on the tracks of mtc --trace\n"
    "                   (cuda: CUDA events around every instruction of the GPU's engines; cpu: the\n"
    "                   host clock around every instruction)\n"
    "  --threads N      optimizer threads (default: online CPUs; with the cuda backend, those less the\n"
    "                   4 its engines keep busy, at least 1)\n"
    "  --log FILE       metrics as JSON lines (default: PLAN with .metrics.jsonl), appended to: another\n"
    "                   run's records stay, each run's config record numbered (\"run\")\n"
    "  --log-every N    a step's line every N steps, and the first and last (default 1); the log gets all\n"
    "  --init PATH      start from pretrained weights: safetensors (a file, an index.json, a folder\n"
    "                   holding either: per-expert or transformers 5's fused expert names) or llm.c's\n"
    "                   GPT-2 checkpoint\n"
    "  --export PATH    write the weights at the end under the model's checkpoint names: PATH.safetensors\n"
    "                   (sharded with an index above --shard-bytes), or any other PATH a folder that\n"
    "                   transformers loads: model.safetensors (likewise), config.json,\n"
    "                   generation_config.json and the tokenizer tools/prepare_data.py kept beside the data\n"
    "                   (llama, mistral, qwen2, mixtral and gemma2 checkpoint names; others are refused);\n"
    "                   a LoRA plan's (mtc --lora) folder: the PEFT adapter, adapter_config.json and\n"
    "                   adapter_model.safetensors, which peft loads on the base model.\n"
    "                   With --resume DIR and --steps at or below its checkpoint's step (--steps 0),\n"
    "                   nothing is trained: the checkpoint's weights are exported\n"
    "  --merge          with --export, a LoRA plan's adapters merged into their base weights\n"
    "                   (W + alpha/r B A): the full model, as --export writes it for any other plan\n"
    "  --logits PREFIX  at the end, the first validation batch and the model's logits on it as\n"
    "                   PREFIX.tokens.npy (B, T) and PREFIX.logits.npy (B, T, V); with document starts\n"
    "                   (X.docs) attending within each document as training does, which it says\n"
    "  --logits-full-rows  --logits attending over each whole row: a plain forward of the row\n"
    "  --sample-every N every N steps and the last, a greedy and two temperature-1 continuations of\n"
    "                   the first half of the first validation row, seeded by --seed and the step,\n"
    "                   decoded with the data's vocabulary (bytes, or X.vocab.json beside X.bin);\n"
    "                   --logits and samples run the plan's own forward, one per new token (no KV cache):\n"
    "                   each costs what a validation batch costs, about a third of a predicted step\n"
    "  --sample-prompt FILE  the samples' prompt: token ids (tools/prompt_tokens.py writes them from\n"
    "                   text, with the tokenizer's chat template); samples at the end of the run too, and\n"
    "                   with --steps 0 (--init PATH, or --resume DIR) only those: generation\n"
    "  --dtype D        bf16 or fp32 (default), for --export (an error without it)\n"
    "  --shard-bytes N  --export shards above N bytes (default 5000000000; an error without --export)\n"
    "  --save DIR       write checkpoints (weights, Adam moments, step, data position) into DIR (default:\n"
    "                   beside the log, LOG less .metrics.jsonl or .jsonl with .ckpt; where that holds\n"
    "                   another run's checkpoints, with .runN.ckpt, N the run's number in the log; none\n"
    "                   where the log is no file or both hold some, said in the banner):\n"
    "                   every --save-every steps, the final step, and on SIGINT or SIGTERM (which end\n"
    "                   the run after the step in progress; a second signal ends it at once)\n"
    "                   (with --resume DIR: DIR); a folder that cannot be written is refused before the first step\n"
    "  --no-save        no checkpoints\n"
    "  --save-every N   every N steps (default: every validation, --val-every's or the model's; an error\n"
    "                   with --no-save)\n"
    "  --keep K         keep the newest K checkpoints (default 3; an error with --no-save)\n"
    "  --resume DIR     continue from the newest checkpoint in DIR, written by any plan of the same\n"
    "                   model (another batch, remat, target or tiling), saving into DIR (unless --save or\n"
    "                   --no-save); nothing left to do is an error, but with --export, --logits or\n"
    "                   --sample-prompt (--steps 0) the checkpoint's weights are used as they are\n"
    "  --tier-dir DIR   the NVMe tier: every layer's Adam moments (and fp32 master, where the plan says\n"
    "                   tier=master; its gradients too with tier=grads) in DIR/mtrun.tier (io_uring,\n"
    "                   O_DIRECT); with tier=weights the bf16 weights too, DIR/mtrun.weights (mapped);\n"
    "                   a sharded rank's in DIR/rank-R-of-N;\n"
    "                   preallocated at start (too little space is refused), streamed through three\n"
    "                   staging buffers by the optimizer; scratch, removed at exit, never a checkpoint;\n"
    "                   results are the same bits as without it; with --calibrate, measures the tier\n"
    "                   there (free space, sequential read and write rates)\n"
    "  --calibrate      measure this machine and write a target profile; no PLAN\n"
    "  --out FILE       the profile --calibrate writes (default local.target in the current directory,\n"
    "                   where mtc --target local looks first); a file\n"
    "                   it did not write itself is never overwritten\n"
    "  --help, --version\n"
    "\n"
    "exit status: 0 success, 1 error in the plan, the data or the run, 2 usage error\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "mtrun: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'mtrun --help'.\n");
    return 2;
}

static int parse_int(const char *s, int64_t min, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min) return -1;
    *out = v;
    return 0;
}

// A test hook, not a feature: MT_TEST_DROP_WAIT=K removes the K-th WAIT
// (from 0) of the verified train stream, so tests/check_cuda_emu.py can show
// that the cuda backend honours each one (a run without it goes wrong);
// K = -1 says how many there are. It also says whether the plan verifier
// needs the WAIT (one that other WAITs imply cannot change a run), and
// returns 1 + the index of the work the WAIT waited for (the instruction
// before the event's RECORD on the recording engine), which the threaded
// replay then holds back (TrainOptions.test_hold_ins); 0 when unset.
static int drop_wait_for_tests(Plan *p) {
    const char *k = getenv("MT_TEST_DROP_WAIT");
    if (!k || !*k) return 0;
    int want = atoi(k), seen = 0;
    for (int i = 0; i < p->ntrain; i++) {
        if (p->train[i].kind != INS_WAIT) continue;
        if (seen++ != want) continue;
        fprintf(stderr, "mtrun: MT_TEST_DROP_WAIT: train stream instruction %d (WAIT event %d on %s) dropped\n", i,
                p->train[i].event, p->train[i].engine == ENG_HOST ? "host" : "a device engine");
        int event = p->train[i].event, record = -1, work = -1;
        memmove(&p->train[i], &p->train[i + 1], (size_t)(p->ntrain - i - 1) * sizeof *p->train);
        p->ntrain--;
        for (int j = 0; j < p->ntrain; j++) // the event's last RECORD before the WAIT, else the stream's last
            if (p->train[j].kind == INS_RECORD && p->train[j].event == event && (j < i || record < 0 || record >= i))
                record = j;
        for (int j = record - 1; j >= 0 && work < 0; j--)
            if (p->train[j].engine == p->train[record].engine && p->train[j].kind != INS_RECORD &&
                p->train[j].kind != INS_WAIT)
                work = j;
        char err[512];
        if (plan_verify(p, err, sizeof err) == 0)
            fprintf(stderr, "mtrun: MT_TEST_DROP_WAIT: the verifier accepts the plan without it (other WAITs "
                            "imply it)\n");
        else fprintf(stderr, "mtrun: MT_TEST_DROP_WAIT: the verifier needs it: %s\n", err);
        if (work >= 0)
            fprintf(stderr, "mtrun: MT_TEST_DROP_WAIT: instruction %d, the work it waited for, held\n", work);
        return work + 1;
    }
    fprintf(stderr, "mtrun: MT_TEST_DROP_WAIT: the train stream has %d WAITs\n", seen);
    return 0;
}

// What must be the same on every rank of a data-parallel run, as lines of
// "name=value" (dist_check_plan compares them): the options that change
// what is trained or how. The data files by their size too, since each rank
// opens its own (a file of that path on another machine may differ).
// malloc'd; NULL out of memory.
static char *rank_options(const TrainOptions *o, DeviceKind device, const Plan *p) {
    const char *data = o->data ? o->data : p->graph->train.data;
    char *s = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&s, &len);
    if (!f) return NULL;
    struct stat st;
    const char *names[] = {"steps", "lr", "seed", "val-every", "warmup", "lr-schedule", "min-lr"};
    double values[] = {(double)o->steps,  o->lr,          (double)o->seed, (double)o->val_every,
                       (double)o->warmup, o->lr_schedule, o->min_lr}; // < 0: the plan's
    for (int i = 0; i < 7; i++)
        if (values[i] < 0) fprintf(f, "%s=the plan's\n", names[i]);
        else fprintf(f, "%s=%.17g\n", names[i], values[i]);
    fprintf(f, "epochs=%.17g\nweight-decay=%.17g\nclip=%.17g\naccumulate=%lld\n", o->epochs,
            p->graph->train.weight_decay, p->graph->train.clip, (long long)p->graph->train.accumulate);
    fprintf(f, "val-batches=%lld\nreference=%d\ndevice=%d\nshuffle=%d\nsave-every=%lld\n", (long long)o->val_batches,
            o->reference, (int)device, o->shuffle, (long long)o->save_every); // (the steps every rank saves its shard)
    fprintf(f, "data=%s (%lld bytes)\n", data ? data : "none",
            data && stat(data, &st) == 0 ? (long long)st.st_size : -1LL);
    fprintf(f, "val-data=%s (%lld bytes)\n", o->val_data ? o->val_data : "none",
            o->val_data && stat(o->val_data, &st) == 0 ? (long long)st.st_size : -1LL);
    fprintf(f, "init=%s\nresume=%s\ntier-dir=%s\nexport=%s\n", o->init ? o->init : "none",
            o->resume ? o->resume : "none", o->tier_dir ? "given" : "none",
            o->export_path ? "given" : "none"); // (every rank joins the export's gathers)
    return fclose(f) == 0 ? s : (free(s), NULL);
}

enum {
    O_STEPS = 256,
    O_DATA,
    O_LR,
    O_SEED,
    O_VAL_EVERY,
    O_VAL_BATCHES,
    O_DEVICE,
    O_REFERENCE,
    O_THREADS,
    O_LOG,
    O_INIT,
    O_EXPORT,
    O_DTYPE,
    O_SHARD,
    O_SAVE,
    O_SAVE_EVERY,
    O_KEEP,
    O_RESUME,
    O_CALIBRATE,
    O_OUT,
    O_HELP,
    O_VERSION,
    O_TRACE,
    O_TIER_DIR,
    O_SCHEDULE_STEPS,
    O_NO_SAVE,
    O_LOGITS,
    O_SAMPLE_EVERY,
    O_SHUFFLE,
    O_WARMUP,
    O_EPOCHS,
    O_LOG_EVERY,
    O_WEIGHT_DECAY,
    O_CLIP,
    O_ACCUMULATE,
    O_LOGITS_FULL_ROWS,
    O_SAMPLE_PROMPT,
    O_LR_SCHEDULE,
    O_MIN_LR,
    O_VAL_DATA,
    O_MERGE
};
static const struct option LONG[] = {
    {"steps", required_argument, 0, O_STEPS},
    {"data", required_argument, 0, O_DATA},
    {"lr", required_argument, 0, O_LR},
    {"seed", required_argument, 0, O_SEED},
    {"val-every", required_argument, 0, O_VAL_EVERY},
    {"val-batches", required_argument, 0, O_VAL_BATCHES},
    {"device", required_argument, 0, O_DEVICE},
    {"reference", no_argument, 0, O_REFERENCE},
    {"threads", required_argument, 0, O_THREADS},
    {"log", required_argument, 0, O_LOG},
    {"init", required_argument, 0, O_INIT},
    {"export", required_argument, 0, O_EXPORT},
    {"merge", no_argument, 0, O_MERGE},
    {"dtype", required_argument, 0, O_DTYPE},
    {"shard-bytes", required_argument, 0, O_SHARD},
    {"save", required_argument, 0, O_SAVE},
    {"save-every", required_argument, 0, O_SAVE_EVERY},
    {"keep", required_argument, 0, O_KEEP},
    {"resume", required_argument, 0, O_RESUME},
    {"calibrate", no_argument, 0, O_CALIBRATE},
    {"out", required_argument, 0, O_OUT},
    {"help", no_argument, 0, O_HELP},
    {"version", no_argument, 0, O_VERSION},
    {"val-data", required_argument, 0, O_VAL_DATA},
    {"trace", required_argument, 0, O_TRACE},
    {"tier-dir", required_argument, 0, O_TIER_DIR},
    {"schedule-steps", required_argument, 0, O_SCHEDULE_STEPS},
    {"no-save", no_argument, 0, O_NO_SAVE},
    {"logits", required_argument, 0, O_LOGITS},
    {"sample-every", required_argument, 0, O_SAMPLE_EVERY},
    {"shuffle", no_argument, 0, O_SHUFFLE},
    {"warmup", required_argument, 0, O_WARMUP},
    {"epochs", required_argument, 0, O_EPOCHS},
    {"log-every", required_argument, 0, O_LOG_EVERY},
    {"weight-decay", required_argument, 0, O_WEIGHT_DECAY},
    {"clip", required_argument, 0, O_CLIP},
    {"accumulate", required_argument, 0, O_ACCUMULATE},
    {"logits-full-rows", no_argument, 0, O_LOGITS_FULL_ROWS},
    {"sample-prompt", required_argument, 0, O_SAMPLE_PROMPT},
    {"lr-schedule", required_argument, 0, O_LR_SCHEDULE},
    {"min-lr", required_argument, 0, O_MIN_LR},
    {0, 0, 0, 0},
};

// The command line, parsed.
typedef struct Args {
    TrainOptions o;
    DeviceKind device;
    int calibrate;
    const char *calibrate_out;
    const char *given[O_MERGE + 1]; // the options given, by id: a flag that does nothing where it is is an error
    double weight_decay, clip;      // --weight-decay and --clip over the model's train section; < 0: the model's
    int64_t accumulate;             // --accumulate over it; 0: the model's
} Args;

// One option c (with optarg) into a. -1, or the exit status: 2 a usage
// error, 0 after --help or --version.
static int parse_option(Args *a, int c, char **argv) {
    TrainOptions *o = &a->o;
    int64_t v;
    char *end;
    switch (c) {
    case O_STEPS:
        if (parse_int(optarg, 0, &o->steps)) return usage_error("--steps needs an integer >= 0, got '%s'", optarg);
        break;
    case O_SCHEDULE_STEPS:
        if (parse_int(optarg, 1, &o->schedule_steps))
            return usage_error("--schedule-steps needs an integer >= 1, got '%s'", optarg);
        break;
    case O_DATA: o->data = optarg; break;
    case O_VAL_DATA: o->val_data = optarg; break;
    case O_TRACE: o->trace = optarg; break;
    case O_LR:
        errno = 0;
        o->lr = strtod(optarg, &end);
        if (errno || end == optarg || *end || !(o->lr >= 0 && isfinite(o->lr)))
            return usage_error("--lr needs a finite number >= 0, got '%s'", optarg);
        break;
    case O_MIN_LR:
        errno = 0;
        o->min_lr = strtod(optarg, &end);
        if (errno || end == optarg || *end || !(o->min_lr >= 0 && isfinite(o->min_lr)))
            return usage_error("--min-lr needs a finite number >= 0, got '%s'", optarg);
        break;
    case O_EPOCHS:
    case O_WEIGHT_DECAY:
    case O_CLIP: {
        errno = 0;
        double x = strtod(optarg, &end);
        if (errno || end == optarg || *end || !(x >= 0 && isfinite(x)) || (c == O_EPOCHS && !(x > 0)))
            return usage_error(c == O_EPOCHS ? "--epochs needs a finite number > 0, got '%s'"
                               : c == O_CLIP ? "--clip needs a finite number >= 0 (0: no clipping), got '%s'"
                                             : "--weight-decay needs a finite number >= 0, got '%s'",
                               optarg);
        *(c == O_EPOCHS ? &o->epochs : c == O_CLIP ? &a->clip : &a->weight_decay) = x;
        break;
    }
    case O_LOG_EVERY:
        if (parse_int(optarg, 1, &o->log_every))
            return usage_error("--log-every needs an integer >= 1, got '%s'", optarg);
        break;
    case O_ACCUMULATE:
        if (parse_int(optarg, 1, &a->accumulate) || a->accumulate > 1000000)
            return usage_error("--accumulate needs an integer from 1 to 1000000, got '%s'", optarg);
        break;
    case O_WARMUP:
        if (parse_int(optarg, 0, &o->warmup)) return usage_error("--warmup needs an integer >= 0, got '%s'", optarg);
        break;
    case O_LR_SCHEDULE:
        if (strcmp(optarg, "cosine") && strcmp(optarg, "linear") && strcmp(optarg, "constant"))
            return usage_error("--lr-schedule is cosine, linear or constant, not '%s'", optarg);
        o->lr_schedule = !strcmp(optarg, "cosine")   ? SCHED_COSINE
                         : !strcmp(optarg, "linear") ? SCHED_LINEAR
                                                     : SCHED_CONSTANT;
        break;
    case O_SEED:
        if (parse_int(optarg, 0, &o->seed)) return usage_error("--seed needs an integer >= 0, got '%s'", optarg);
        break;
    case O_VAL_EVERY:
        if (parse_int(optarg, 1, &o->val_every))
            return usage_error("--val-every needs an integer >= 1, got '%s'", optarg);
        break;
    case O_VAL_BATCHES:
        if (parse_int(optarg, 0, &o->val_batches))
            return usage_error("--val-batches needs an integer >= 0, got '%s'", optarg);
        break;
    case O_DEVICE:
        if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") && strcmp(optarg, "auto"))
            return usage_error("--device is cpu, cuda or auto, not '%s'", optarg);
        a->device = !strcmp(optarg, "cpu") ? DEVICE_CPU : !strcmp(optarg, "cuda") ? DEVICE_CUDA : DEVICE_AUTO;
        break;
    case O_REFERENCE: o->reference = 1; break;
    case O_THREADS:
        if (parse_int(optarg, 1, &v) || v > 1024)
            return usage_error("--threads needs an integer from 1 to 1024, got '%s'", optarg);
        o->threads = (int)v;
        break;
    case O_LOG: o->log_path = optarg; break;
    case O_INIT: o->init = optarg; break;
    case O_EXPORT: o->export_path = optarg; break;
    case O_MERGE: o->export_merged = 1; break;
    case O_DTYPE:
        if (strcmp(optarg, "bf16") && strcmp(optarg, "fp32"))
            return usage_error("--dtype is bf16 or fp32, not '%s'", optarg);
        o->export_bf16 = !strcmp(optarg, "bf16");
        break;
    case O_SHARD:
        if (parse_int(optarg, 1, &o->shard_bytes))
            return usage_error("--shard-bytes needs an integer >= 1, got '%s'", optarg);
        break;
    case O_SAVE: o->save_dir = optarg; break;
    case O_NO_SAVE: break; // (given[O_NO_SAVE])
    case O_SAVE_EVERY:
        if (parse_int(optarg, 1, &o->save_every))
            return usage_error("--save-every needs an integer >= 1, got '%s'", optarg);
        break;
    case O_KEEP:
        if (parse_int(optarg, 1, &v) || v > 1000000)
            return usage_error("--keep needs an integer >= 1, got '%s'", optarg);
        o->keep = (int)v;
        break;
    case O_RESUME: o->resume = optarg; break;
    case O_TIER_DIR: o->tier_dir = optarg; break;
    case O_LOGITS: o->logits = optarg; break;
    case O_LOGITS_FULL_ROWS: o->logits_full_rows = 1; break;
    case O_SAMPLE_PROMPT: o->sample_prompt = optarg; break;
    case O_SHUFFLE: o->shuffle = 1; break;
    case O_SAMPLE_EVERY:
        if (parse_int(optarg, 1, &o->sample_every))
            return usage_error("--sample-every needs an integer >= 1, got '%s'", optarg);
        break;
    case O_CALIBRATE: a->calibrate = 1; break;
    case O_OUT: a->calibrate_out = optarg; break;
    case O_HELP: fputs(USAGE, stdout); return 0;
    case O_VERSION: printf("mtrun %s\n", MT_VERSION); return 0;
    case ':': return usage_error("option '%s' needs a value", argv[optind - 1]);
    default: return usage_error("unknown option '%s'", argv[optind - 1]);
    }
    return -1;
}

// The options that do nothing where they are given: each a usage error
// (2); -1 when there are none.
static int check_option_context(const Args *a) {
    if (a->calibrate_out && !a->calibrate) return usage_error("%s", "--out goes with --calibrate");
    static const struct {
        int opt, needs;
        const char *what;
    } CONTEXT[] = {
        // opt does nothing without needs
        {O_DTYPE, O_EXPORT, "--dtype chooses the dtype of --export"},
        {O_SHARD, O_EXPORT, "--shard-bytes shards --export"},
        {O_LOGITS_FULL_ROWS, O_LOGITS, "--logits-full-rows chooses the attention of --logits"},
        {O_MERGE, O_EXPORT, "--merge merges a LoRA plan's adapters into --export"},
    };
    for (size_t i = 0; i < sizeof CONTEXT / sizeof CONTEXT[0]; i++)
        if (a->given[CONTEXT[i].opt] && !a->given[CONTEXT[i].needs])
            return usage_error("%s; without it the flag would do nothing", CONTEXT[i].what);
    static const struct {
        int opt;
        const char *what;
    } UNSAVED[] = {
        // opt does nothing with --no-save
        {O_SAVE, "--save and --no-save contradict each other"},
        {O_SAVE_EVERY, "--save-every sets how often checkpoints are written; --no-save writes none"},
        {O_KEEP, "--keep sets how many checkpoints are kept; --no-save writes none"},
    };
    for (size_t i = 0; a->given[O_NO_SAVE] && i < sizeof UNSAVED / sizeof UNSAVED[0]; i++)
        if (a->given[UNSAVED[i].opt]) return usage_error("%s", UNSAVED[i].what);
    if (a->given[O_EPOCHS] && a->given[O_STEPS])
        return usage_error("%s", "--epochs and --steps both set the run's length; give one");
    if (a->given[O_INIT] && a->given[O_RESUME])
        return usage_error("%s", "--init does nothing with --resume: the checkpoint's weights replace it");
    for (int k = O_STEPS; a->calibrate && k <= O_MERGE; k++)
        if (a->given[k] && k != O_CALIBRATE && k != O_OUT && k != O_THREADS && k != O_TIER_DIR)
            return usage_error("--%s trains; --calibrate measures this machine and trains nothing", a->given[k]);
    return -1;
}

// The command line into a, checked. -1, or the exit status (as parse_option's).
static int parse_args(Args *a, int argc, char **argv) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *a = (Args){.o = {.steps = -1,
                      .schedule_steps = -1,
                      .lr = -1,
                      .warmup = -1,
                      .lr_schedule = -1,
                      .min_lr = -1,
                      .seed = -1,
                      .val_every = -1,
                      .val_batches = 10,
                      .threads = ncpu > 0 ? (int)ncpu : 1,
                      .out = stdout,
                      .shard_bytes = 5000000000,
                      .keep = 3,
                      .log_every = 1},
                .device = DEVICE_AUTO,
                .weight_decay = -1,
                .clip = -1};
    opterr = 0;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, ":", LONG, &li)) != -1) {
        if (c >= O_STEPS && c <= O_MERGE && li >= 0) a->given[c] = LONG[li].name;
        li = -1;
        int rc = parse_option(a, c, argv);
        if (rc >= 0) return rc;
    }
    return check_option_context(a);
}

// mtrun --calibrate: measures this machine and writes its target profile.
static int calibrate_main(const Args *a, int argc, char **argv) {
    if (optind < argc) return usage_error("--calibrate takes no plan; '%s' is one", argv[optind]);
    char err[1024] = "";
    const char *out = a->calibrate_out ? a->calibrate_out : "local.target"; // where mtc --target local looks first
    if (calibrate_run(out, a->o.threads, a->o.tier_dir, stdout, err, sizeof err) == 0) return 0;
    fprintf(stderr, "mtrun: error: %s\n", err);
    return 1;
}

// The cuda backend where a GPU is to be had (--device auto says which), into
// a->o.cuda_create. -1, or the exit status: 2 where --device cuda finds none.
// The cuda backend's engine threads that issue work while the host
// optimizer runs (compute, copy-in, copy-out, and the gradients' ring that
// adds COPY_OUT's pieces): the optimizer's pool leaves them their cores.
enum { CUDA_ENGINE_THREADS = 4 };

static int open_device(Args *a) {
    if (a->device == DEVICE_CPU) return -1;
    char why[512];
    int gpus = device_cuda_open(&a->o.cuda_create, why, sizeof why);
    if (a->device == DEVICE_CUDA && !gpus) {
        fprintf(stderr, "mtrun: --device cuda: %s\n", why);
        return 2;
    }
    if (a->device == DEVICE_AUTO) fprintf(stdout, "device: %s (%s)\n", gpus ? "cuda" : "cpu", why);
    if (gpus && !a->given[O_THREADS]) // (the host engine's thread runs the pool's first job itself)
        a->o.threads = a->o.threads > CUDA_ENGINE_THREADS ? a->o.threads - CUDA_ENGINE_THREADS : 1;
    return -1;
}

// The plan at path, verified, into *plan, with the test hooks applied to
// a->o. 0; 1 with a message in err; 2 where the ranks' plans or options
// differ (dist_check_plan: every rank learns it, rank 0 says it).
static int read_plan(const char *path, Args *a, const Dist *dist, Arena *arena, Plan **plan, char *err, size_t errcap) {
    TrainOptions *o = &a->o;
    Plan *p = plan_read(path, arena, err, errcap);
    if (p && plan_verify(p, err, errcap) != 0) p = NULL; // a plan whose reads see wrong values never runs
    if (p) o->test_hold_ins = drop_wait_for_tests(p);
    if (p && a->weight_decay >= 0) p->graph->train.weight_decay = a->weight_decay; // the flags over the model's
    if (p && a->clip >= 0) p->graph->train.clip = a->clip;                         // train section, which the run
    if (p && a->accumulate > 0) p->graph->train.accumulate = a->accumulate;        // reads and its checkpoints record
    const char *avail = getenv("MT_TEST_HOST_AVAILABLE"); // a test hook: the host memory mtrun takes as available
    if (avail && *avail) o->host_available = strtoll(avail, NULL, 10);
    char *options = p ? rank_options(o, a->device, p) : NULL;
    if (p && !options) snprintf(err, errcap, "out of memory"), p = NULL;
    int differs = p && dist_check_plan(dist, p, options, err, errcap) != 0;
    free(options);
    *plan = differs ? NULL : p;
    return differs ? 2 : p ? 0 : 1;
}

// The metrics log and the checkpoints' directory, where not given: beside
// the plan, PLAN.bin -> PLAN.metrics.jsonl, and the --resume directory,
// else beside the log, LOG.metrics.jsonl -> LOG.ckpt (with --no-save, none). The malloc'd paths
// into *log_path and *save_dir. A rank other than 0 (log_path "") logs
// nothing.
static void default_paths(Args *a, const char *path, char **log_path, char **save_dir) {
    TrainOptions *o = &a->o;
    if (o->log_path && !*o->log_path) o->log_path = NULL;
    else if (!o->log_path) {
        size_t n = strlen(path);
        if (n > 4 && !strcmp(path + n - 4, ".bin")) n -= 4;
        *log_path = malloc(n + 16);
        if (*log_path) snprintf(*log_path, n + 16, "%.*s.metrics.jsonl", (int)n, path);
        o->log_path = *log_path;
    }
    if (!o->save_dir && !a->given[O_NO_SAVE] && o->resume) o->save_dir = o->resume; // where the run was saving
    if (!o->save_dir && !a->given[O_NO_SAVE] && o->log_path) {
        size_t n = strlen(o->log_path);
        if (n > 14 && !strcmp(o->log_path + n - 14, ".metrics.jsonl")) n -= 14;
        else if (n > 6 && !strcmp(o->log_path + n - 6, ".jsonl")) n -= 6;
        *save_dir = malloc(n + 6);
        if (*save_dir) snprintf(*save_dir, n + 6, "%.*s.ckpt", (int)n, o->log_path);
        o->save_dir = *save_dir, o->save_default = 1;
    }
}

// The plan at path trained, on this process's rank. 0, or 1 with a message.
static int train_plan(Args *a, const char *path, Dist *dist) {
    TrainOptions *o = &a->o;
    char err[1024] = "", *log_path = NULL, *save_dir = NULL;
    Arena arena = {0};
    Plan *p;
    int rc = read_plan(path, a, dist, &arena, &p, err, sizeof err);
    if (rc == 2) {
        if (dist->rank == 0) fprintf(stderr, "mtrun: error: %s\n", err);
        arena_free(&arena);
        dist_close(dist, 0);
        return 1;
    }
    if (p) {
        default_paths(a, path, &log_path, &save_dir);
        if (!o->save_every) // every validation: --val-every's, else the model's (on every rank: each saves its shard)
            o->save_every = o->val_every > 0 ? o->val_every : p->graph->train.val_every;
        rc = train_run(p, path, o, err, sizeof err);
    }
    if (rc && dist->mpi) fprintf(stderr, "mtrun: rank %d of %d: error: %s\n", dist->rank, dist->size, err);
    else if (rc) fprintf(stderr, "mtrun: error: %s\n", err);
    free(log_path);
    free(save_dir);
    arena_free(&arena);
    dist_close(dist, rc); // an error ends every rank: the others may wait for this one in a collective
    return rc;
}

// mtrun PLAN: trains, as one rank of the run where mpirun started it.
static int train_main(Args *a, int argc, char **argv) {
    TrainOptions *o = &a->o;
    if (optind == argc) return usage_error("%s", "no plan given");
    Dist dist; // the ranks, where mpirun started this process; rank 0 of 1 otherwise
    char derr[256];
    if (dist_open(&dist, &argc, &argv, derr, sizeof derr) != 0) {
        fprintf(stderr, "mtrun: error: %s\n", derr);
        return 1;
    }
    if (dist.rank > 0) { // rank 0 speaks for the run: the banner, the steps, the log, the manifest of each
                         // checkpoint, --export, --trace, --logits and samples (every rank writes its checkpoint
                         // shard; a sharded plan's ranks all run the forward of --logits and samples, train.c)
        if (!freopen("/dev/null", "w", stdout)) return 1;
        o->log_path = "", o->trace = NULL; // (--export: each sends its slices)
    }
    if (dist.mpi) o->dist = &dist;
    int rc = open_device(a);
    if (rc >= 0) return rc;
    if (argc - optind > 1) return usage_error("one plan at a time; '%s' is a second", argv[optind + 1]);
    if (o->trace && o->reference) return usage_error("%s", "--trace times the plan's streams; --reference runs none");
    return train_plan(a, argv[optind], &dist);
}

int main(int argc, char **argv) {
    mt_blas_core_pick(); // before the first GEMM: OpenBLAS's kernels for this CPU
    Args a;
    int rc = parse_args(&a, argc, argv);
    if (rc >= 0) return rc;
    return a.calibrate ? calibrate_main(&a, argc, argv) : train_main(&a, argc, argv);
}
