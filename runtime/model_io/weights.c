#include "runtime/model_io/weights.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/io.h"
#include "runtime/model_io/hf_config.h"
#include "runtime/model_io/safetensors.h"

// ---------------------------------------------------------------- names

// How many tensors the model has in a checkpoint: a block param once a layer.
static int64_t tensor_count(const Graph *g) {
    int64_t k = 0;
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        k += param_copies(g, prm) * param_elements(prm);
    }
    return k;
}

static char *shape_text(char *buf, size_t cap, int rank, const int64_t *dims) {
    Shape s = {.rank = rank};
    for (int i = 0; i < rank && i < MT_MAX_RANK; i++) s.dims[i] = dims[i];
    return shape_str(&s, buf, cap);
}

// ---------------------------------------------------------------- safetensors

// Transformers 5 renames a few modules when it loads a Hub checkpoint
// (conversion_mapping.py); a file it saved from a model's state_dict holds
// the new names. Mixtral's "block_sparse_moe" became "mlp".
static const struct { const char *hub, *v5; } V5_RENAMES[] = {{".block_sparse_moe.", ".mlp."}};

// name with the first `from` replaced by `to`, or NULL when it holds none.
static char *renamed(Arena *a, const char *name, const char *from, const char *to) {
    const char *at = strstr(name, from);
    return at ? arena_printf(a, "%.*s%s%s", (int)(at - name), name, to, at + strlen(from)) : NULL;
}

// Which operand of an OP_MOE parameter `param` is: 2 w_gate, 3 w_up, 4
// w_down; 0 when no moe op takes it.
static int moe_role(const Graph *g, int param) {
    for (int pk = 0; pk < graph_nparts(g); pk++) {
        const Part *part = &g->parts[pk];
        for (int i = 0; i < part->nfwd; i++) {
            const Node *n = part->nodes.items[i];
            for (int k = 2; n->op == OP_MOE && k <= 4 && k < n->nin; k++)
                if (n->in[k]->op == OP_PARAM && n->in[k]->param == param) return k;
        }
    }
    return 0;
}

// Where transformers 5 keeps expert e of a per-expert parameter
// "PRE.experts.{e}.NAME" of layer l: the fused tensor
// "PRE'.experts.gate_up_proj" (E, 2F, C), gate rows [0, F) then up rows
// [F, 2F) of each expert, or "PRE'.experts.down_proj" (E, C, F), PRE' being
// PRE renamed as V5_RENAMES says. The tensor found, and *row0 the first row
// of expert e's slice in it; NULL when the set holds no such tensor.
static const StTensor *fused_expert(const StSet *set, Arena *a, const Plan *p, int param, int64_t l, int64_t e,
                                    int64_t *row0) {
    const Param *prm = p->graph->params.items[param];
    int role = prm->in_block && param_elements(prm) > 1 ? moe_role(p->graph, param) : 0;
    char *name = role ? param_ckpt_name(a, prm, l, 0) : NULL;
    char *cut = name ? strstr(name, ".experts.0.") : NULL;
    if (!cut) return NULL;
    cut[strlen(".experts.")] = 0; // "PRE.experts."
    char *fused = arena_printf(a, "%s%s", name, role == 4 ? "down_proj" : "gate_up_proj");
    const StTensor *t = fused ? st_find(set, fused) : NULL;
    for (size_t k = 0; fused && !t && k < sizeof V5_RENAMES / sizeof V5_RENAMES[0]; k++) {
        char *alt = renamed(a, fused, V5_RENAMES[k].hub, V5_RENAMES[k].v5);
        if (alt) t = st_find(set, alt);
    }
    Shape es = param_element_shape(prm); // (F, C) or (C, F)
    int64_t E = param_elements(prm), rows = role == 4 ? es.dims[0] : 2 * es.dims[0];
    if (!t || t->rank != 3 || t->shape[0] != E || t->shape[1] != rows || t->shape[2] != es.dims[1]) return t ? t : NULL;
    *row0 = e * rows + (role == 3 ? es.dims[0] : 0);
    return t;
}

// Plan elements [off, off + n) of the master (one parameter's tensor, in
// one segment) from src into the store: the master on the tier, or in RAM
// the part of them the store holds (a sharded store: its slice of the
// segment, perhaps none). 0, or -1 with a message.
static int put_master(HostStore *hs, const Plan *p, int64_t off, int64_t n, const float *src, char *err,
                      size_t errcap) {
    if (hs->tier_master) return store_put(hs, p, 0, off, n, src, err, errcap) ? -1 : 0;
    int64_t lo, hi, at = store_slice(hs, p, plan_segment_of(p, off), &lo, &hi);
    int64_t a = off > lo ? off : lo, b = off + n < hi ? off + n : hi;
    if (b > a && hs->frozen) // a frozen parameter's into its storage dtype (store_put: under bf16, rounded)
        return store_put(hs, p, 0, a, b - a, src + (a - off), err, errcap) ? -1 : 0;
    if (b > a) memcpy(hs->w + at + (a - lo), src + (a - off), (size_t)(b - a) * sizeof *src);
    return 0;
}

// t converted into the master from element off: in RAM whole, else (the
// tier, a sharded store) through one tensor's buffer. 0, or -1 with a message.
static int put_tensor(HostStore *hs, const Plan *p, const StTensor *t, int64_t off, char *err, size_t errcap) {
    if (!hs->tier_master && !hs->shard_at && !hs->frozen) {
        st_to_f32(t, hs->w + off);
        return 0;
    }
    float *tmp = malloc((size_t)st_numel(t) * sizeof(float) + 1); // (numel) the tensor in fp32
    if (!tmp) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    st_to_f32(t, tmp);
    int bad = put_master(hs, p, off, st_numel(t), tmp, err, errcap);
    free(tmp);
    return bad;
}

static int load_safetensors(const char *path, const Plan *p, HostStore *hs, char *err, size_t errcap) {
    const Graph *g = p->graph;
    StSet set;
    if (st_open(&set, path, err, errcap) != 0) return -1;
    Arena a = {0};
    int rc = -1;
    char *used = calloc((size_t)set.n + 1, 1); // (set.n) tensors the model took
    if (!used) goto done;
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        Shape es = param_element_shape(prm); // one checkpoint tensor's
        for (int64_t l = 0; l < (prm->in_block ? g->layers : 1); l++)
            for (int64_t e = 0; e < param_elements(prm) && (!prm->in_block || param_in_layer(g, prm, l)); e++) {
                const char *name = param_ckpt_name(&a, prm, l, e);
                const StTensor *t = name ? st_find(&set, name) : NULL;
                for (size_t k = 0; name && !t && k < sizeof V5_RENAMES / sizeof V5_RENAMES[0]; k++) {
                    char *alt = renamed(&a, name, V5_RENAMES[k].hub, V5_RENAMES[k].v5);
                    if (alt && (t = st_find(&set, alt))) name = alt;
                }
                int64_t row0 = -1; // >= 0: the tensor is transformers 5's fused experts; e's rows from row0
                if (!t && (t = fused_expert(&set, &a, p, i, l, e, &row0)) && row0 < 0) {
                    char s1[160], s2[160];
                    Shape want = param_element_shape(prm);
                    snprintf(err, errcap,
                             "%s: tensor \"%s\" is %s in the file; the model's %lld experts of %s (\"%s\") "
                             "do not fit it as transformers 5 fuses them",
                             t->file, t->name, shape_text(s1, sizeof s1, t->rank, t->shape),
                             (long long)param_elements(prm), shape_str(&want, s2, sizeof s2), name);
                    goto done;
                }
                if (!t && name && prm->lora) continue; // a LoRA adapter the base model has not: its own init
                if (!t) {
                    snprintf(err, errcap, "%s: no tensor \"%s\" (parameter '%s' of the model)", path, name ? name : "?",
                             prm->name);
                    goto done;
                }
                if (row0 >= 0) { // one expert's rows of the fused tensor: contiguous, (es) as the model holds them
                    StTensor slice = *t;
                    int64_t esize = t->nbytes / st_numel(t);
                    slice.rank = es.rank;
                    for (int d = 0; d < es.rank; d++) slice.shape[d] = es.dims[d];
                    slice.data = (const unsigned char *)t->data + row0 * t->shape[2] * esize;
                    slice.nbytes = shape_numel(&es) * esize;
                    int64_t off = plan_param_elem(p, i, l) + e * shape_numel(&es);
                    if (put_tensor(hs, p, &slice, off, err, errcap) != 0) goto done;
                    used[t - set.tensors] = 1;
                    continue;
                }
                int same = t->rank == es.rank;
                for (int d = 0; same && d < t->rank; d++) same = t->shape[d] == es.dims[d];
                if (!same) {
                    char s1[160], s2[160];
                    snprintf(err, errcap, "%s: tensor \"%s\" is %s in the file but %s in the model", t->file, name,
                             shape_text(s1, sizeof s1, t->rank, t->shape), shape_str(&es, s2, sizeof s2));
                    goto done;
                }
                int64_t off = plan_param_elem(p, i, l) + e * shape_numel(&es);
                if (put_tensor(hs, p, t, off, err, errcap) != 0) goto done;
                used[t - set.tensors] = 1;
            }
    }
    for (int k = 0; k < set.n; k++)
        if (!used[k]) {
            snprintf(err, errcap, "%s: tensor \"%s\" is not a parameter of model '%s'", set.tensors[k].file,
                     set.tensors[k].name, g->model_name);
            goto done;
        }
    rc = 0;
done:
    if (rc && !err[0]) snprintf(err, errcap, "out of memory");
    free(used);
    arena_free(&a);
    st_close(&set);
    return rc;
}

// ---------------------------------------------------------------- llm.c GPT-2

enum { LLMC_MAGIC = 20240326, LLMC_VERSION_FP32 = 3, LLMC_HEADER_INTS = 256 };

// llm.c's tensors in file order, with the Hugging Face GPT-2 name each maps
// to, whether it has one slice per layer, and whether llm.c stores the
// matrix [out, in] where Conv1D stores [in, out].
static const struct {
    const char *hf;
    int per_layer, transposed;
} LLMC_GPT2[] = {
    {"wte.weight", 0, 0},
    {"wpe.weight", 0, 0},
    {"h.{i}.ln_1.weight", 1, 0},
    {"h.{i}.ln_1.bias", 1, 0},
    {"h.{i}.attn.c_attn.weight", 1, 1},
    {"h.{i}.attn.c_attn.bias", 1, 0},
    {"h.{i}.attn.c_proj.weight", 1, 1},
    {"h.{i}.attn.c_proj.bias", 1, 0},
    {"h.{i}.ln_2.weight", 1, 0},
    {"h.{i}.ln_2.bias", 1, 0},
    {"h.{i}.mlp.c_fc.weight", 1, 1},
    {"h.{i}.mlp.c_fc.bias", 1, 0},
    {"h.{i}.mlp.c_proj.weight", 1, 1},
    {"h.{i}.mlp.c_proj.bias", 1, 0},
    {"ln_f.weight", 0, 0},
    {"ln_f.bias", 0, 0},
};

// The parameter whose checkpoint name for layer 0 is `hf` with {i} as 0.
static int param_by_hf(const Plan *p, const char *hf, Arena *a) {
    const Graph *g = p->graph;
    const char *mark = strstr(hf, "{i}");
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        char *name = param_ckpt_name(a, prm, 0, 0), *want;
        if (mark) want = arena_printf(a, "%.*s0%s", (int)(mark - hf), hf, mark + 3);
        else want = arena_strdup(a, hf);
        if (name && want && !strcmp(name, want) && prm->in_block == (mark != NULL)) return i;
    }
    return -1;
}

static int load_llmc(const char *path, const Plan *p, HostStore *hs, char *err, size_t errcap) {
    const Graph *g = p->graph;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errcap, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    int32_t h[LLMC_HEADER_INTS];
    Arena a = {0};
    float *buf = NULL;
    int rc = -1;
    if (fread(h, 4, LLMC_HEADER_INTS, f) != LLMC_HEADER_INTS) {
        snprintf(err, errcap, "%s: shorter than llm.c's 1024-byte header", path);
        goto done;
    }
    if (h[1] != LLMC_VERSION_FP32) {
        snprintf(err, errcap, "%s: llm.c checkpoint version %d; this reads version 3 (fp32)", path, h[1]);
        goto done;
    }
    int64_t maxT = h[2], V = h[3], L = h[4], C = h[6], Vp = h[7];
    if (maxT < 1 || V < 1 || L < 1 || C < 1 || Vp < V || h[5] < 1) {
        snprintf(err, errcap,
                 "%s: the header's model sizes are not valid (T %lld, V %lld, L %lld, C %lld, padded V %lld)", path,
                 (long long)maxT, (long long)V, (long long)L, (long long)C, (long long)Vp);
        goto done;
    }
    if (L != g->layers) {
        snprintf(err, errcap, "%s: %lld layers in the checkpoint, %lld in model '%s'", path, (long long)L,
                 (long long)g->layers, g->model_name);
        goto done;
    }
    // The file's shape of each tensor, one layer's slice for per-layer ones.
    int64_t rows[16] = {Vp, maxT, C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C, C, C};
    int64_t cols[16] = {C, C, 1, 1, C, 1, C, 1, 1, 1, C, 1, 4 * C, 1, 1, 1};
    for (int k = 0; k < 16; k++) {
        int idx = param_by_hf(p, LLMC_GPT2[k].hf, &a);
        if (idx < 0) {
            snprintf(err, errcap, "%s: model '%s' has no parameter named \"%s\", which llm.c's GPT-2 checkpoint holds",
                     path, g->model_name, LLMC_GPT2[k].hf);
            goto done;
        }
        const Param *prm = g->params.items[idx];
        int64_t r = rows[k], c = cols[k], n = r * c;
        // What the model wants: the transposed matrix, the unpadded vocabulary.
        int64_t want_r = LLMC_GPT2[k].transposed ? c : (k == 0 ? V : r), want_c = LLMC_GPT2[k].transposed ? r : c;
        int64_t have_r = prm->shape.dims[0], have_c = prm->shape.rank > 1 ? prm->shape.dims[1] : 1;
        if (have_r != want_r || have_c != want_c || prm->shape.rank > 2) {
            char s[160];
            snprintf(err, errcap, "%s: tensor \"%s\" is [%lld, %lld] in the checkpoint but %s in the model", path,
                     LLMC_GPT2[k].hf, (long long)want_r, (long long)want_c, shape_str(&prm->shape, s, sizeof s));
            goto done;
        }
        free(buf);
        buf = malloc((size_t)n * sizeof(float)); // (r, c) one slice as stored
        if (!buf) {
            snprintf(err, errcap, "out of memory");
            goto done;
        }
        for (int64_t l = 0; l < (LLMC_GPT2[k].per_layer ? L : 1); l++) {
            if (fread(buf, sizeof(float), (size_t)n, f) != (size_t)n) {
                snprintf(err, errcap, "%s: truncated inside \"%s\"", path, LLMC_GPT2[k].hf);
                goto done;
            }
            // (want_r * want_c) the tensor as the model holds it: in the store,
            // or (the master on the tier, a sharded store) a buffer put there after
            int buffered = hs->tier_master || hs->shard_at || hs->frozen;
            float *w = buffered ? malloc((size_t)(want_r * want_c) * sizeof(float) + 1)
                                : hs->w + plan_param_elem(p, idx, l);
            if (!w) {
                snprintf(err, errcap, "out of memory");
                goto done;
            }
            if (LLMC_GPT2[k].transposed)
                for (int64_t i = 0; i < r; i++)
                    for (int64_t j = 0; j < c; j++) w[j * r + i] = buf[i * c + j];
            else memcpy(w, buf, (size_t)(want_r * want_c) * sizeof(float)); // drops the padded rows of wte
            if (buffered) {
                int bad = put_master(hs, p, plan_param_elem(p, idx, l), want_r * want_c, w, err, errcap);
                free(w);
                if (bad) goto done;
            }
        }
    }
    if (fgetc(f) != EOF) {
        snprintf(err, errcap, "%s: bytes left after the last tensor; not a GPT-2 checkpoint of this size", path);
        goto done;
    }
    rc = 0;
done:
    free(buf);
    arena_free(&a);
    fclose(f);
    return rc;
}

static int is_llmc(const char *path) {
    FILE *f = fopen(path, "rb");
    int32_t magic = 0;
    if (!f) return 0;
    int ok = fread(&magic, 4, 1, f) == 1 && magic == LLMC_MAGIC;
    fclose(f);
    return ok;
}

int weights_load(const char *path, const Plan *p, HostStore *hs, char *err, size_t errcap) {
    err[0] = 0;
    return is_llmc(path) ? load_llmc(path, p, hs, err, errcap) : load_safetensors(path, p, hs, err, errcap);
}

int weights_export_is_folder(const char *path) {
    size_t n = strlen(path), k = strlen(".safetensors");
    return n < k || strcmp(path + n - k, ".safetensors") != 0;
}

int weights_export_check_adapter(const char *path, const Plan *p, int merged, char *err, size_t errcap) {
    if (!weights_export_is_folder(path) || merged) return 0;
    for (int i = 0; weights_has_lora(p) && i < p->graph->params.n; i++) {
        const Param *prm = p->graph->params.items[i];
        if (prm->lora || param_store_frozen(prm)) continue;
        snprintf(err, errcap,
                 "--export DIR of a LoRA plan writes the PEFT adapter, which holds only the adapters; parameter "
                 "'%s' (\"%s\") %s and would be lost: give --merge for the full model, or a FILE.safetensors for "
                 "every parameter",
                 prm->name, prm->ckpt,
                 prm->balance_mask ? "is moved by its balance rule (router's bias_update)"
                                   : "is trained too (mtc --train)");
        return -1;
    }
    return 0;
}

int weights_export_check(const char *path, const Plan *p, int merged, char *err, size_t errcap) {
    char *config, *generation;
    if (!weights_export_is_folder(path) || (weights_has_lora(p) && !merged)) return 0; // (the adapter has none)
    if (hf_config_json(p, 0, NULL, &config, &generation, err, errcap) != 0) return -1;
    free(config);
    free(generation);
    return 0;
}

// len bytes into dir/name, atomically (a temporary file, fsync, rename). 0, or -1 with a message.
static int write_file(const char *dir, const char *name, const void *data, size_t len, char *err, size_t errcap) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(data, 1, len, f) == len && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) == 0) return 0;
    int e = errno;
    unlink(tmp);
    snprintf(err, errcap, "%s: cannot write: %s", path, strerror(e));
    return -1;
}

// text and a newline into dir/name, atomically. 0, or -1 with a message.
static int write_text(const char *dir, const char *name, const char *text, char *err, size_t errcap) {
    size_t n = strlen(text);
    char *line = malloc(n + 2);
    if (!line) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    memcpy(line, text, n);
    line[n] = '\n';
    int rc = write_file(dir, name, line, n + 1, err, errcap);
    free(line);
    return rc;
}

// Copies every regular file of src into dir, byte for byte (the tokenizer's
// files: JSON, a chat template, SentencePiece's binary tokenizer.model). 0,
// or -1 with a message.
static int copy_files(const char *src, const char *dir, int *copied, char *err, size_t errcap) {
    DIR *d = opendir(src);
    struct dirent *e;
    *copied = 0;
    if (!d) return io_fail(err, errcap, src, "cannot read the tokenizer folder: %s", strerror(errno));
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        char from[4096], *bytes = NULL;
        size_t len;
        struct stat st;
        snprintf(from, sizeof from, "%s/%s", src, e->d_name);
        if (e->d_name[0] == '.' || stat(from, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        int bad = io_read_file(from, &bytes, &len);
        if (bad) rc = io_fail(err, errcap, from, "cannot read: %s", strerror(bad));
        else rc = write_file(dir, e->d_name, bytes, len, err, errcap);
        *copied += !rc;
        free(bytes);
    }
    closedir(d);
    return rc;
}

// The folder transformers loads: the weights sharded as it shards them,
// config.json and generation_config.json, and the tokenizer's files.
enum { EXPORT_AS_IS, EXPORT_MERGED, EXPORT_ADAPTER };
static int export_impl(const char *path, const Plan *p, const HostStore *hs, int bf16, int64_t shard_bytes,
                       const char *tokenizer_dir, const HfTokens *tok, const Dist *dist, int how, char *err,
                       size_t errcap);

static int export_folder(const char *dir, const Plan *p, const HostStore *hs, int bf16, int64_t shard_bytes,
                         const char *tokenizer_dir, const HfTokens *tok, const Dist *dist, int how, char *err,
                         size_t errcap) {
    char *config = NULL, *generation = NULL, st_path[4096];
    if (hf_config_json(p, bf16, tok, &config, &generation, err, errcap) != 0) return -1;
    int rc = -1, copied = 0;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        io_fail(err, errcap, dir, "cannot make the export folder: %s", strerror(errno));
        goto done;
    }
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    if (export_impl(st_path, p, hs, bf16, shard_bytes, NULL, NULL, dist, how, err, errcap) != 0 ||
        write_text(dir, "config.json", config, err, errcap) != 0 ||
        write_text(dir, "generation_config.json", generation, err, errcap) != 0 ||
        (tokenizer_dir && copy_files(tokenizer_dir, dir, &copied, err, errcap) != 0))
        goto done;
    io_sync_parent_dir(st_path);
    rc = 0;
done:
    free(config);
    free(generation);
    return rc;
}

// A tensor of the export, gathered when the writer reaches it: each float
// from the rank whose slice of the segment holds it (dist_shard), so that
// the writer holds one tensor, never the model; this store's floats from
// its master (RAM: the tier's master is refused up front).
typedef struct ExportGather {
    const Dist *dist;
    const Plan *p;
    const HostStore *hs;
} ExportGather;
static int master_get(void *ctx, int64_t off, int64_t n, float *dst, char *err, size_t errcap) {
    const ExportGather *x = ctx;
    int64_t at = store_index(x->hs, x->p, off); // [off, off + n) lies in this rank's slice: contiguous in its store
    if (at < 0 || (n > 0 && store_index(x->hs, x->p, off + n - 1) != at + n - 1)) {
        snprintf(err, errcap, "internal error: the store holds no elements %lld to %lld", (long long)off,
                 (long long)(off + n));
        return -1;
    }
    store_get_weights(x->hs, x->p, off, n, dst); // (a frozen parameter's from its storage dtype)
    return 0;
}
static int gather_tensor(void *ctx, const StOut *t, float *dst, char *err, size_t errcap) {
    const ExportGather *x = ctx;
    int64_t n = 1, seg = plan_segment_of(x->p, t->at);
    for (int d = 0; d < t->rank; d++) n *= t->shape[d];
    return dist_gather_slices(x->dist, plan_segment_base(x->p, seg), plan_segment_len(x->p, seg), t->at, n, dst,
                              master_get, (void *)x, err, errcap);
}

// A LoRA target's merged weight W + scale B A (its adapters at params a and b).
typedef struct MergedTensor {
    const ExportGather *gather;
    int a, b;
    int64_t layer;
} MergedTensor;
static int merged_tensor(void *ctx, const StOut *t, float *dst, char *err, size_t errcap) {
    const MergedTensor *mt = ctx;
    const Plan *p = mt->gather->p;
    const Param *A = p->graph->params.items[mt->a];
    int64_t r = A->shape.dims[0], in = A->shape.dims[1], out = t->shape[0];
    float *ab = malloc((size_t)(r * in + out * r + 1) * sizeof(float)); // A (r, in), then B (out, r)
    StOut ta = {.rank = 2, .shape = {r, in}, .at = plan_param_elem(p, mt->a, mt->layer)};
    StOut tb = {.rank = 2, .shape = {out, r}, .at = plan_param_elem(p, mt->b, mt->layer)};
    int rc = !ab || gather_tensor((void *)mt->gather, t, dst, err, errcap) != 0 ||
             gather_tensor((void *)mt->gather, &ta, ab, err, errcap) != 0 ||
             gather_tensor((void *)mt->gather, &tb, ab + r * in, err, errcap) != 0;
    if (!ab) snprintf(err, errcap, "out of memory");
    for (int64_t o = 0; !rc && dst && o < out; o++) // (dst NULL: a rank that only sends its slices)
        for (int64_t i = 0; i < in; i++) {
            double sum = 0;
            for (int64_t k = 0; k < r; k++) sum += (double)ab[r * in + o * r + k] * ab[k * in + i];
            dst[o * in + i] = (float)(dst[o * in + i] + A->lora_scale * sum);
        }
    free(ab);
    return rc ? -1 : 0;
}

// The adapters of base parameter `base`: *a and *b (-1: none).
static void lora_of(const Graph *g, int base, int *a, int *b) {
    *a = *b = -1;
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        if (prm->lora && prm->lora_of == base) *(prm->lora == 1 ? a : b) = i;
    }
}

int weights_has_lora(const Plan *p) {
    for (int i = 0; i < p->graph->params.n; i++)
        if (((const Param *)p->graph->params.items[i])->lora) return 1;
    return 0;
}

// peft's adapter_config.json for the plan's adapters (one rank and alpha
// for all; target_modules the bases' module names, each once). malloc'd.
static char *adapter_config(const Plan *p) {
    const Graph *g = p->graph;
    size_t cap = 4096, n = 0;
    char *js = malloc(cap);
    double rank = 0, alpha = 0;
    if (!js) return NULL;
    n += (size_t)snprintf(js + n, cap - n,
                          "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n"
                          "  \"target_modules\": [");
    int first = 1;
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        if (prm->lora != 1) continue;
        const Param *base = g->params.items[prm->lora_of];
        rank = (double)prm->shape.dims[0], alpha = prm->lora_scale * rank;
        size_t len = strlen(base->ckpt) - strlen(".weight");
        const char *mod = base->ckpt + len;
        while (mod > base->ckpt && mod[-1] != '.') mod--;
        int len_mod = (int)(base->ckpt + len - mod), seen = 0;
        for (int k = 0; k < i && !seen; k++) { // each module name once
            const Param *q = g->params.items[k];
            if (q->lora != 1) continue;
            const Param *qb = g->params.items[q->lora_of];
            size_t ql = strlen(qb->ckpt) - strlen(".weight");
            seen = ql >= (size_t)len_mod && !strncmp(qb->ckpt + ql - len_mod, mod, (size_t)len_mod) &&
                   (ql == (size_t)len_mod || qb->ckpt[ql - len_mod - 1] == '.');
        }
        if (seen) continue;
        if (n + (size_t)len_mod + 64 > cap && !(js = realloc(js, cap *= 2 + (size_t)len_mod))) return NULL;
        n += (size_t)snprintf(js + n, cap - n, "%s\"%.*s\"", first ? "" : ", ", len_mod, mod);
        first = 0;
    }
    if (n + 512 > cap && !(js = realloc(js, cap + 512))) return NULL;
    snprintf(js + n, 512,
             "],\n  \"r\": %.0f,\n  \"lora_alpha\": %.17g,\n  \"lora_dropout\": 0.0,\n  \"bias\": \"none\",\n"
             "  \"fan_in_fan_out\": false,\n  \"use_rslora\": false,\n  \"init_lora_weights\": true,\n"
             "  \"inference_mode\": true,\n  \"base_model_name_or_path\": null,\n  \"modules_to_save\": null\n}",
             rank, alpha);
    return js;
}

// The PEFT adapter folder: adapter_model.safetensors (the adapters under
// peft's names) and adapter_config.json.
static int export_adapter(const char *dir, const Plan *p, const HostStore *hs, int bf16, const Dist *dist, char *err,
                          size_t errcap) {
    char st_path[4096], *config = adapter_config(p);
    int rc = -1;
    if (!config) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        io_fail(err, errcap, dir, "cannot make the export folder: %s", strerror(errno));
    else {
        snprintf(st_path, sizeof st_path, "%s/adapter_model.safetensors", dir);
        rc = export_impl(st_path, p, hs, bf16, INT64_MAX, NULL, NULL, dist, EXPORT_ADAPTER, err, errcap);
        if (rc == 0) rc = write_text(dir, "adapter_config.json", config, err, errcap);
    }
    free(config);
    return rc;
}

int weights_export(const char *path, const Plan *p, const HostStore *hs, int bf16, int64_t shard_bytes,
                   const char *tokenizer_dir, const HfTokens *tok, const Dist *dist, char *err, size_t errcap) {
    return export_impl(path, p, hs, bf16, shard_bytes, tokenizer_dir, tok, dist, EXPORT_AS_IS, err, errcap);
}

int weights_export_merged(const char *path, const Plan *p, const HostStore *hs, int bf16, int64_t shard_bytes,
                          const char *tokenizer_dir, const HfTokens *tok, const Dist *dist, char *err, size_t errcap) {
    return export_impl(path, p, hs, bf16, shard_bytes, tokenizer_dir, tok, dist, EXPORT_MERGED, err, errcap);
}

// how: EXPORT_AS_IS every parameter under its name (a LoRA plan's folder:
// the PEFT adapter); EXPORT_MERGED the adapters merged into their bases;
// EXPORT_ADAPTER the adapters alone, under peft's names.
static int export_impl(const char *path, const Plan *p, const HostStore *hs, int bf16, int64_t shard_bytes,
                       const char *tokenizer_dir, const HfTokens *tok, const Dist *dist, int how, char *err,
                       size_t errcap) {
    const Graph *g = p->graph;
    int writer = !dist || !dist->mpi || dist->rank == 0; // the others only send their slices
    if (how == EXPORT_AS_IS && weights_export_is_folder(path) && weights_has_lora(p))
        return export_adapter(path, p, hs, bf16, dist, err, errcap);
    if (writer && how != EXPORT_ADAPTER && weights_export_is_folder(path))
        return export_folder(path, p, hs, bf16, shard_bytes, tokenizer_dir, tok, dist, how, err, errcap);
    if (hs->tier_master) {
        snprintf(err, errcap,
                 "--export with the fp32 master on the NVMe tier is not supported yet (it would gather the "
                 "whole model in RAM): save a checkpoint (--save) and export from it in a run without the tier");
        return -1;
    }
    Arena a = {0};
    int64_t n = tensor_count(g);
    StOut *out = arena_alloc(&a, (size_t)(n + 1) * sizeof(StOut));
    int rc = -1;
    if (!out) goto oom;
    // Checkpoint order: head globals, the layers, then the tail's.
    int64_t k = 0;
    ExportGather gather = {dist, p, hs};
    for (int pass = 0; pass < 3; pass++)
        for (int64_t l = 0; l < (pass == 1 ? g->layers : 1); l++)
            for (int i = 0; i < g->params.n; i++) {
                const Param *prm = g->params.items[i];
                int want = pass == 1 ? param_in_layer(g, prm, l)
                                     : !prm->in_block && (prm->first_use == PART_HEAD) == (pass == 0);
                if (!want || (how == EXPORT_MERGED && prm->lora) || (how == EXPORT_ADAPTER && !prm->lora)) continue;
                Shape es = param_element_shape(prm); // one checkpoint tensor's
                for (int64_t e = 0; e < param_elements(prm); e++) {
                    StOut *o = &out[k++];
                    if (!(o->name = param_ckpt_name(&a, prm, l, e))) goto oom;
                    o->rank = es.rank;
                    for (int d = 0; d < o->rank; d++) o->shape[d] = es.dims[d];
                    o->fill = gather_tensor, o->ctx = &gather, o->at = plan_param_elem(p, i, l) + e * shape_numel(&es);
                    int la, lb;
                    lora_of(g, i, &la, &lb);
                    if (how == EXPORT_ADAPTER && !(o->name = arena_printf(&a, "base_model.model.%s", o->name)))
                        goto oom;
                    if (how != EXPORT_MERGED || la < 0) continue;
                    MergedTensor *mt = arena_alloc(&a, sizeof *mt);
                    if (!mt) goto oom;
                    *mt = (MergedTensor){&gather, la, lb, l};
                    o->fill = merged_tensor, o->ctx = mt;
                }
            }
    if (writer) rc = st_write(path, out, (int)k, bf16 ? ST_BF16 : ST_F32, shard_bytes, err, errcap);
    else { // the writer's fills, in its order (st_write writes the tensors as given)
        rc = 0;
        for (int64_t i = 0; i < k && rc == 0; i++) rc = out[i].fill(out[i].ctx, &out[i], NULL, err, errcap);
    }
    arena_free(&a);
    return rc;
oom:
    snprintf(err, errcap, "out of memory");
    arena_free(&a);
    return -1;
}
