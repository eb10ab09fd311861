// run_checks.c: what a training run must satisfy before it starts, each
// refused with a message that says what to do: the plan's inputs, the
// data, the flags together (sharding, the NVMe tier, --export, --logits,
// --sample-every), the host memory, where checkpoints go and the
// checkpoint a run resumes. Also what the run's memory comes to.
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/storage.h"
#include "runtime/run.h"
#include "runtime/store/checkpoint.h"
#include "runtime/model_io/weights.h"

// The vocabulary the data must fit: the rows of every embedding table the
// model inputs index, and the width of every loss's logits.
int64_t model_vocab(const Graph *g) {
    int64_t v = INT64_MAX;
    for (int pk = 0; pk < PART_COUNT; pk++) {
        const Part *part = &g->parts[pk];
        for (int i = 0; i < part->nfwd; i++) {
            const Node *n = part->nodes.items[i];
            if (n->op == OP_EMBED && n->in[1]->op == OP_INPUT && n->in[1]->src_part == SRC_MODEL_INPUT)
                v = n->in[0]->shape.dims[0] < v ? n->in[0]->shape.dims[0] : v;
            if (n->op == OP_CROSS_ENTROPY) {
                const Shape *s = &n->in[0]->shape;
                v = s->dims[s->rank - 1] < v ? s->dims[s->rank - 1] : v;
            }
        }
    }
    return v;
}

// Checks that forward takes (tokens, targets), both i32[B, T], which is what
// mtrun feeds, besides the loss scale autodiff adds after them (graph.h).
int check_inputs(const Graph *g, char *err, size_t errcap) {
    int scale = graph_loss_scale_input(g), ok = g->inputs.n == 2 + (scale >= 0) && (scale < 0 || scale == 2);
    for (int i = 0; ok && i < 2; i++) {
        const ModelInput *in = g->inputs.items[i];
        ok = in->dtype == DT_I32 && in->shape.rank == 2 && in->shape.dims[0] == g->train.batch &&
             in->shape.dims[1] == g->train.seq;
    }
    if (!ok)
        snprintf(err, errcap,
                 "mtrun feeds forward(tokens: i32[B, T], targets: i32[B, T]); this model's forward takes "
                 "other inputs");
    return ok ? 0 : -1;
}

int check_text_data(const DataSet *d, int64_t vocab, char *err, size_t errcap) {
    if (d->format != DATA_TEXT) return 0;
    int64_t i = 0;
    while (i < d->ntokens && (d->toks[i] == ' ' || d->toks[i] == '\n' || d->toks[i] == '\t' || d->toks[i] == '\r')) i++;
    int json = i < d->ntokens && (d->toks[i] == '{' || d->toks[i] == '[');
    if (!json && vocab <= 256) return 0; // a byte-level model on text: one token a byte
    char why[96] = "";
    if (vocab > 256)
        snprintf(why, sizeof why, ", though this model's vocabulary is %lld tokens, not bytes", (long long)vocab);
    snprintf(err, errcap,
             "%s is %s, which mtrun would train on as raw bytes%s; mtrun trains on token files: make one with "
             "`python3 tools/prepare_data.py %s --tokenizer MODEL_DIR --out OUT` (--kind text, alpaca or messages; "
             "a loss mask for instruction data) and give --data OUT.bin",
             d->path, json ? "JSON (lines), not tokens" : "text, not tokens", why, d->path);
    return -1;
}

int read_sample_prompt(Run *r, char *err, size_t errcap) {
    const char *path = r->o->sample_prompt;
    const TrainConfig *t = &r->p->graph->train;
    int64_t vocab = model_vocab(r->p->graph), cap = 0;
    FILE *f = path ? fopen(path, "r") : NULL;
    if (path && !f) {
        snprintf(err, errcap, "--sample-prompt %s: %s", path, strerror(errno));
        return -1;
    }
    long long id;
    int c = 0;
    while (f && (c = fscanf(f, " %lld ,", &id)) == 1) {
        if (id < 0 || id >= vocab || r->prompt_n >= t->seq - 1) break;
        if (r->prompt_n == cap) {
            int32_t *more = realloc(r->prompt, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *more);
            if (!more) break;
            r->prompt = more;
        }
        r->prompt[r->prompt_n++] = (int32_t)id;
    }
    int ok = f && c == EOF && r->prompt_n > 0;
    if (f) fclose(f);
    if (ok) return 0;
    snprintf(err, errcap,
             "--sample-prompt %s: %s; it takes token ids (decimal, separated by spaces or commas), each below the "
             "vocabulary's %lld and fewer than the sequence's %lld: `python3 tools/prompt_tokens.py --tokenizer DIR "
             "TEXT` writes them",
             path,
             c == 1 && (id < 0 || id >= vocab) ? "a token id out of range"
             : c == 1                          ? "too many tokens"
             : c == EOF                        ? "no token ids"
                                               : "not token ids",
             (long long)vocab, (long long)t->seq);
    return -1;
}

void model_source_folder(const Plan *p, char *out, size_t cap) {
    static const char MARK[] = "# written by tools/hf_to_mt.py from ";
    char line[4096] = "";
    FILE *f = p->source_path ? fopen(p->source_path, "r") : NULL;
    if (f && fgets(line, sizeof line, f) && !strncmp(line, MARK, sizeof MARK - 1))
        snprintf(out, cap, "%.*s", (int)strcspn(line + sizeof MARK - 1, "\n"), line + sizeof MARK - 1);
    else if (cap) out[0] = 0;
    if (f) fclose(f);
}

int check_init(const Run *r, char *err, size_t errcap) {
    const char *init = r->o->init;
    char path[4200], ignored[256], magic[8] = {0};
    struct stat st;
    if (!init || stat(init, &st) != 0) return 0; // (weights_load names what is missing)
    FILE *f = S_ISREG(st.st_mode) ? fopen(init, "rb") : NULL;
    int ckpt = f && fread(magic, 1, sizeof magic, f) == sizeof magic && !memcmp(magic, "MTCKPT", 7);
    if (f) fclose(f);
    if (S_ISDIR(st.st_mode)) {
        snprintf(path, sizeof path, "%s/model.safetensors", init);
        struct stat sf;
        char index[4200];
        snprintf(index, sizeof index, "%s/model.safetensors.index.json", init);
        ckpt = stat(path, &sf) != 0 && stat(index, &sf) != 0 &&
               ckpt_latest(init, path, sizeof path, ignored, sizeof ignored) == 0;
    }
    if (!ckpt) return 0;
    snprintf(err, errcap,
             "--init %s: an mt checkpoint%s, not pretrained weights: --resume %s continues its run (weights, Adam "
             "moments and step); `mtrun PLAN --resume %s --steps 0 --export OUT` writes its weights as OUT.safetensors "
             "or a Hugging Face folder, which --init takes",
             init, S_ISDIR(st.st_mode) ? " folder" : "", S_ISDIR(st.st_mode) ? init : "DIR",
             S_ISDIR(st.st_mode) ? init : "DIR");
    return -1;
}

// MemAvailable from /proc/meminfo, in bytes; 0 when unknown.
static int64_t host_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    return (int64_t)kb * 1024;
}

// What the plan puts on the NVMe tier (its schedule's words: tier=moments,
// master or grads; mtc --explain says why): NULL when nothing.
static const char *plan_tier(const Plan *p) {
    const char *at = p->schedule ? strstr(p->schedule, " tier=") : NULL;
    return at ? at + strlen(" tier=") : NULL;
}

// What the plan puts on the tier besides the Adam moments (STORE_TIER_*):
// tier=master the fp32 master (bf16 compute: with f32 it is what streams),
// tier=grads the gradients too (and the master under bf16, as mtc counts it),
// tier=weights the bf16 copy that streams too (bf16 compute only: the master,
// the gradients and the weights).
int plan_tier_holds(const Plan *p) {
    const char *want = plan_tier(p);
    int bf16 = p->graph->train.compute == DT_BF16, weights = want && bf16 && !strncmp(want, "weights", 7);
    int grads = want && (!strncmp(want, "grads", 5) || weights);
    int master = want && (!strncmp(want, "master", 6) || (grads && bf16));
    return (master ? STORE_TIER_MASTER : 0) | (grads ? STORE_TIER_GRADS : 0) | (weights ? STORE_TIER_WEIGHTS : 0);
}

// --export gathers the whole model in RAM: refused up front with the master on the tier.
static int check_tier(const Run *r, char *err, size_t errcap) {
    // (tier.c's file is DIR/mtrun.tier, one a directory; a sharded rank's is in DIR/rank-R-of-N)
    if (r->o->tier_dir && r->o->dist && r->o->dist->local > 1 && !r->p->sharded) {
        snprintf(err, errcap,
                 "--tier-dir with %d ranks on this machine is not supported yet: each would need its own "
                 "tier file in %s; start one rank a machine, or plan without the tier",
                 r->o->dist->local, r->o->tier_dir);
        return -1;
    }
    // now, not after the training
    if (r->o->tier_dir && r->o->export_path && (plan_tier_holds(r->p) & STORE_TIER_MASTER)) {
        snprintf(err, errcap,
                 "--export with the fp32 master on the NVMe tier (the plan's tier=%.*s) is not supported "
                 "yet: it would gather the whole model in RAM; save a checkpoint (--save) and export from it in a run "
                 "without the tier",
                 (int)strcspn(plan_tier(r->p), " "), plan_tier(r->p));
        return -1;
    }
    return 0;
}

// A sharded rank's store in RAM with its tier: its globals' slices whole, of
// its layers' slices what the tier does not hold, and the tier's staging
// (TIER_SLOTS records of its largest layer slice), as store_open allocates;
// with the bf16 copy on the tier, what of it the page cache must hold (two
// layers' slices: the one streaming and the next).
static int64_t rank_tier_ram_bytes(const Run *r) {
    const Plan *p = r->p;
    int rank = r->o->dist ? r->o->dist->rank : 0, holds = plan_tier_holds(p);
    int64_t per = storage_host_bytes_per_param(p->graph->train.compute), globals = 0, layers = 0, most = 1, lo, hi;
    for (int64_t seg = SEG_FIRST; seg < p->graph->layers; seg++) {
        dist_shard(plan_segment_len(p, seg), rank, p->ranks, &lo, &hi);
        if (seg < 0) globals += hi - lo;
        else layers += hi - lo, most = hi - lo > most ? hi - lo : most;
    }
    int arrays = 2 + !!(holds & STORE_TIER_MASTER) + !!(holds & STORE_TIER_GRADS);
    int64_t record = arrays * ((most * 4 + TIER_ALIGN - 1) / TIER_ALIGN * TIER_ALIGN);
    int64_t weights = holds & STORE_TIER_WEIGHTS ? 2 : 0; // the bf16 copy on the tier: its page cache, two slices
    return globals * (per - weights) + layers * (per - 4 * arrays - weights) + TIER_SLOTS * record +
           (holds & STORE_TIER_GRADS ? most * 4 : 0) + weights * 2 * most;
}

// The host store's bytes in RAM: all of it, less what the tier holds, plus
// the tier's staging (TIER_SLOTS records, each array padded to TIER_ALIGN).
// With the gradients on the tier, g's pages are held only while a layer's
// gradients are being accumulated: counted as one layer's.
int64_t ram_store_bytes(const Run *r) {
    if (r->p->sharded && !r->o->tier_dir) // this rank's slices
        return store_shard_bytes(r->p, r->o->dist ? r->o->dist->rank : 0, r->p->ranks);
    if (r->p->sharded) return rank_tier_ram_bytes(r); // its slices less what its tier holds
    if (!r->o->tier_dir) return store_bytes(r->p, 0);
    int holds = plan_tier_holds(r->p);
    int arrays = 2 + !!(holds & STORE_TIER_MASTER) + !!(holds & STORE_TIER_GRADS);
    int64_t record = arrays * ((store_tier_layer(r->p) * 4 + TIER_ALIGN - 1) / TIER_ALIGN * TIER_ALIGN);
    return store_bytes(r->p, holds) - store_tier_bytes(r->p, holds) + TIER_SLOTS * record +
           (holds & STORE_TIER_GRADS ? r->p->host_layer * 4 : 0) +
           (holds & STORE_TIER_WEIGHTS ? 2 * r->p->host_layer * 2 : 0); // the bf16 copy's page cache, two layers
}

// What a sharded plan's run cannot do, refused up front: every rank holds
// only its shard of the store, which --reference reads whole.
static int check_sharded(const Run *r, char *err, size_t errcap) {
    const TrainOptions *o = r->o;
    if (!r->p->sharded) return 0;
    const char *what = o->reference ? "--reference (the host executor reads the whole store)" : NULL;
    if (!what) return 0;
    snprintf(err, errcap,
             "%s with a sharded plan (mtc --shard on) is not supported yet: each rank holds only its "
             "shard of the host store; make a replicated plan (mtc --shard off) for it",
             what);
    return -1;
}

// Refuses a run whose host store and cpu arena will not fit, before any of
// it is allocated: in a data-parallel run, into this rank's share of the
// machine's memory (each rank on it holds its own store).
static int check_host_memory(const Run *r, char *err, size_t errcap) {
    int64_t need = ram_store_bytes(r) + (r->o->reference ? 0 : r->p->arena_bytes + r->p->host_act_bytes);
    int64_t have = r->o->host_available > 0 ? r->o->host_available : host_available();
    int local = r->o->dist ? r->o->dist->local : 1;
    if (have > 0 && local > 1 && need > have / local) {
        snprintf(err, errcap,
                 "each rank needs %lld bytes of host memory (%.1f GB: its %s of the host store%s) "
                 "and %d ranks share this machine's %lld bytes (%.1f GB) available, %lld (%.1f GB) each; start fewer "
                 "ranks on a machine",
                 (long long)need, (double)need / 1e9, r->p->sharded ? "shard" : "own copy",
                 r->o->reference ? ""
                                 : ", its cpu arena and "
                                   "host activation store",
                 local, (long long)have, (double)have / 1e9, (long long)(have / local), (double)(have / local) / 1e9);
        return -1;
    }
    if (have <= 0 || need <= have) return 0;
    snprintf(err, errcap,
             "the plan needs %lld bytes of host memory (%.1f GB: weights, %sAdam moments, gradients%s) "
             "but this machine has %lld bytes (%.1f GB) available%s",
             (long long)need, (double)need / 1e9, r->o->tier_dir ? "the globals' " : "",
             r->o->reference ? "" : ", the cpu arena and the host activation store", (long long)have,
             (double)have / 1e9,
             plan_tier(r->p) && !r->o->tier_dir ? "; the plan was made with the Adam moments on the NVMe tier: give "
                                                  "--tier-dir DIR"
                                                : "");
    return -1;
}

// Checks, before the first step, that checkpoints can be written into dir:
// creates it where missing (one level, as a save would) and a file in it,
// both removed at once. A run whose saves would fail after its training is
// refused before it. 0, or -1 with a message.
static int check_writable(const char *dir, char *err, size_t errcap) {
    struct stat st;
    int made = mkdir(dir, 0777) == 0; // (removed again below: the first save makes it, as it always did)
    if (!made && errno != EEXIST) {
        snprintf(err, errcap, "%s: cannot create the checkpoint directory: %s (--save DIR saves elsewhere)", dir,
                 strerror(errno));
        return -1;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errcap, "%s: cannot save checkpoints here: not a directory (--save DIR saves elsewhere)", dir);
        return -1;
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.mtrun-write-check.%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600), e = errno;
    int wrote = fd >= 0 && write(fd, "", 1) == 1;
    if (!wrote && fd >= 0) e = errno;
    if (fd >= 0) close(fd), unlink(probe);
    if (made) rmdir(dir);
    if (wrote) return 0;
    snprintf(err, errcap,
             "%s: cannot write checkpoints here: %s; refused before the first step, so that no trained step is "
             "lost at the first save (--save DIR saves elsewhere, --no-save saves none)",
             dir, strerror(e));
    return -1;
}

// Where checkpoints go, into r->save_dir. A new run must not prune or
// replace the checkpoints of another: --save into a directory that holds
// some is refused unless resuming from it; the default directory beside the
// log (o->save_default) then gives way to this run's own, LOG.runN.ckpt
// (r->save_why says why), or where that holds some too to none, r->no_save
// saying why, as it does for a log that is not a file (/dev/null). 0, or
// -1 with a message.
int check_save_dir(Run *r, char *err, size_t errcap) {
    const TrainOptions *o = r->o;
    char path[4096], ignored[256];
    struct stat st;
    r->save_dir = o->save_dir;
    if (o->save_default && r->log && (fstat(fileno(r->log), &st) != 0 || !S_ISREG(st.st_mode))) {
        snprintf(r->no_save, sizeof r->no_save, "the log %s is not a file to save beside (--save DIR)", o->log_path);
        r->save_dir = NULL;
        return 0;
    }
    if (!o->save_dir) return 0;
    int resumed = o->resume && !strcmp(o->resume, o->save_dir); // (a missing one: the resume says so, not created)
    if (speaks(r) && (!resumed || stat(o->save_dir, &st) == 0) && check_writable(o->save_dir, err, errcap) != 0)
        return -1;
    if (resumed) return 0;
    if (ckpt_latest(o->save_dir, path, sizeof path, ignored, sizeof ignored) != 0) return 0; // none there
    if (o->save_default) { // this run's own folder beside it: DIR less .ckpt with .runN.ckpt, N its number in the log
        size_t n = strlen(o->save_dir);
        n -= n > 5 && !strcmp(o->save_dir + n - 5, ".ckpt") ? 5 : 0;
        snprintf(r->save_own, sizeof r->save_own, "%.*s.run%d.ckpt", (int)n, o->save_dir, r->run_id);
        snprintf(r->save_why, sizeof r->save_why,
                 "%s holds an earlier run's checkpoints (--resume %s continues it; --save DIR saves this run "
                 "elsewhere)",
                 o->save_dir, o->save_dir);
        if (ckpt_latest(r->save_own, path, sizeof path, ignored, sizeof ignored) == 0) { // that one too: none
            snprintf(r->no_save, sizeof r->no_save, "%.300s, and so does %.280s", r->save_why, r->save_own);
            r->save_dir = NULL;
            return 0;
        }
        r->save_dir = r->save_own;
        return speaks(r) ? check_writable(r->save_own, err, errcap) : 0;
    }
    snprintf(err, errcap,
             "%s already holds checkpoints (%s); pass --resume %s to continue that run, or save into "
             "another directory",
             o->save_dir, path, o->save_dir);
    return -1;
}

// --logits and --sample-every run the forward on the host from the fp32
// master, on the first validation batch: refused with the master on the
// tier or without such a batch, and --sample-every without a vocabulary
// to decode the samples with. 0, or -1 with a message.
static int check_forward_flags(const Run *r, char *err, size_t errcap) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    if (!r->o->logits && !r->o->sample_every && !r->o->sample_prompt) return 0;
    if (r->o->tier_dir && (plan_tier_holds(p) & STORE_TIER_MASTER)) {
        snprintf(err, errcap,
                 "--logits and --sample-every run the forward on the host from the fp32 master, which "
                 "this plan puts on the NVMe tier (tier=%.*s)",
                 (int)strcspn(plan_tier(p), " "), plan_tier(p));
        return -1;
    }
    if (data_val_batches(r->val, t->batch, t->seq) <= 0) {
        snprintf(err, errcap,
                 "--logits and --sample-every take the first validation batch (as the logits' batch, "
                 "as the prompt); %s has none of %lld x %lld tokens",
                 r->val->path, (long long)t->batch, (long long)t->seq);
        return -1;
    }
    DataVocab v; // a vocabulary that decodes samples, found before any training
    int samples = r->o->sample_every || r->o->sample_prompt;
    if (samples && data_vocab_open(&v, r->val, model_vocab(p->graph), err, errcap) != 0) return -1;
    if (samples) data_vocab_close(&v);
    return 0;
}

int check_flags(const Run *r, char *err, size_t errcap) {
    if (check_sharded(r, err, errcap) != 0 || check_tier(r, err, errcap) != 0 || check_host_memory(r, err, errcap) != 0)
        return -1;
    if (r->o->export_path && // what the PEFT adapter would lose, before what config.json cannot say
        weights_export_check_adapter(r->o->export_path, r->p, r->o->export_merged, err, errcap) != 0)
        return -1;
    if (r->o->export_path && weights_export_check(r->o->export_path, r->p, r->o->export_merged, err, errcap) != 0)
        return -1;
    return check_forward_flags(r, err, errcap);
}

int check_backend(const Run *r, char *err, size_t errcap) {
    if (!r->p->sharded || (r->be->collective && r->be->copy_widen)) return 0;
    snprintf(err, errcap,
             "the %s backend runs no collectives, which a sharded plan needs (mtc --shard on): "
             "run it with --device cpu, or make a replicated plan (mtc --shard off)",
             r->be->name);
    return -1;
}

// A checkpoint belongs to the model, not the plan: another plan of the same
// model (batch, remat, target, tiling) resumes it.
int check_checkpoint(const Run *r, const char *path, const CkptMeta *meta, uint64_t seed, char *err, size_t errcap) {
    const Plan *p = r->p;
    if (meta->model_crc != model_crc(p) || meta->n != plan_host_elems(p)) {
        snprintf(err, errcap,
                 "%s: this checkpoint belongs to model '%s' (parameters crc %08x, %lld floats); this "
                 "plan's model is '%s' (crc %08x, %lld floats): a checkpoint resumes only the model that wrote it%s",
                 path, meta->model, meta->model_crc, (long long)meta->n, p->graph->model_name, model_crc(p),
                 (long long)plan_host_elems(p),
                 strcmp(meta->model, p->graph->model_name)
                     ? ""
                     : ", laid out as it was (an edited model, or a store laid out by another version of mt: the mt "
                       "that "
                       "wrote it can --export its weights, and --init starts from them)");
        return -1;
    }
    if (meta->seed != seed) {
        snprintf(err, errcap, "%s: written by a run with seed %llu, this run's is %llu", path,
                 (unsigned long long)meta->seed, (unsigned long long)seed);
        return -1;
    }
    return 0;
}

int check_steps_left(const Run *r, int64_t done, int64_t steps, char *err, size_t errcap) {
    if (!r->o->resume || done < steps) return 0;
    if (r->o->export_path || r->o->logits || r->o->sample_prompt) { // the checkpoint's weights out, nothing trained
        fprintf(r->o->out, "nothing to train: the checkpoint is at step %lld and this run ends at step %lld; %s it\n",
                (long long)done, (long long)steps,
                r->o->export_path ? "exporting"
                : r->o->logits    ? "writing the logits of"
                                  : "sampling");
        return 0;
    }
    snprintf(err, errcap,
             "nothing to do: the checkpoint in %s is at step %lld and this run ends at step %lld; "
             "give --steps above %lld to train further, or --export PATH (with --steps 0) to write its weights",
             r->o->resume, (long long)done, (long long)steps, (long long)done);
    return -1;
}
