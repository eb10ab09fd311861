#include "runtime/model_io/hf_config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The families --export DIR can describe, each by the checkpoint names of a
// layer ("{e}": one per expert) and of the globals, as transformers reads
// them ("?" before a name: it may be absent, as a tied LM head is).
typedef enum { FAM_LLAMA, FAM_MISTRAL, FAM_QWEN2, FAM_MIXTRAL, FAM_GEMMA2 } Family;
static const struct {
    const char *arch, *type;
    const char *layer[16]; // NULL-terminated
} FAMILIES[] = {
    [FAM_LLAMA] = {"LlamaForCausalLM",
                   "llama",
                   {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                    "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}},
    [FAM_MISTRAL] = {"MistralForCausalLM",
                     "mistral",
                     {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                      "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                      "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}},
    [FAM_QWEN2] = {"Qwen2ForCausalLM",
                   "qwen2",
                   {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
                    "self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight",
                    "self_attn.v_proj.bias", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}},
    [FAM_MIXTRAL] = {"MixtralForCausalLM",
                     "mixtral",
                     {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                      "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                      "block_sparse_moe.gate.weight", "block_sparse_moe.experts.{e}.w1.weight",
                      "block_sparse_moe.experts.{e}.w2.weight", "block_sparse_moe.experts.{e}.w3.weight"}},
    [FAM_GEMMA2] = {"Gemma2ForCausalLM",
                    "gemma2",
                    {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                     "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                     "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight", "mlp.gate_proj.weight",
                     "mlp.up_proj.weight", "mlp.down_proj.weight"}},
};
static const char *const GLOBALS[] = {"model.embed_tokens.weight", "model.norm.weight", "?lm_head.weight"};
static const char LAYER_PREFIX[] = "model.layers.{i}.";

// The parameter whose checkpoint name (relative to its block's prefix) is ckpt, or NULL.
static const Param *param_named(const Graph *g, const char *ckpt) {
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        if (!strcmp(prm->ckpt, ckpt)) return prm;
    }
    return NULL;
}

// The first forward node of op in a part of the kind `where` (-1: any part), or NULL.
static const Node *first_op(const Graph *g, OpKind op, int where) {
    for (int pk = 0; pk < graph_nparts(g); pk++) {
        if (where >= 0 && pk != where) continue;
        const Part *part = &g->parts[pk];
        for (int i = 0; i < part->nfwd; i++)
            if (((const Node *)part->nodes.items[i])->op == op) return part->nodes.items[i];
    }
    return NULL;
}

// Whether the model's parameters are exactly the family's: every block
// parameter under "model.layers.{i}." with a name of the family's layer,
// every layer holding all of them, the globals those of GLOBALS. Names the
// first that is not in err.
static int names_match(const Graph *g, Family f, int64_t experts, char *err, size_t errcap) {
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        int ok = 0;
        if (prm->lora) continue; // a LoRA adapter: merged into its base or exported apart (weights.h)
        if (prm->in_block) {
            ok = !strcmp(prm->prefix, LAYER_PREFIX);
            int known = 0;
            for (int k = 0; ok && !known && FAMILIES[f].layer[k]; k++) known = !strcmp(prm->ckpt, FAMILIES[f].layer[k]);
            ok = ok && known && (!strstr(prm->ckpt, "{e}") || param_elements(prm) == experts);
        } else {
            for (size_t k = 0; !ok && k < sizeof GLOBALS / sizeof GLOBALS[0]; k++)
                ok = !strcmp(prm->ckpt, GLOBALS[k] + (GLOBALS[k][0] == '?'));
        }
        if (!ok) {
            snprintf(err, errcap, "parameter '%s' (\"%s%s\") is not one of a %s checkpoint's", prm->name,
                     prm->in_block ? prm->prefix : "", prm->ckpt, FAMILIES[f].type);
            return -1;
        }
    }
    // every layer name in every layer (its kind has it), and the globals not optional
    for (int k = 0; FAMILIES[f].layer[k]; k++)
        for (int64_t l = 0; l < g->layers; l++) {
            int have = 0;
            for (int i = 0; i < g->params.n && !have; i++) {
                const Param *prm = g->params.items[i];
                have = param_in_layer(g, prm, l) && !strcmp(prm->ckpt, FAMILIES[f].layer[k]);
            }
            if (!have) {
                snprintf(err, errcap, "layer %lld has no \"%s\", which every %s layer holds", (long long)l,
                         FAMILIES[f].layer[k], FAMILIES[f].type);
                return -1;
            }
        }
    for (size_t k = 0; k < sizeof GLOBALS / sizeof GLOBALS[0]; k++)
        if (GLOBALS[k][0] != '?' && !param_named(g, GLOBALS[k])) {
            snprintf(err, errcap, "the model has no \"%s\", which every %s checkpoint holds", GLOBALS[k],
                     FAMILIES[f].type);
            return -1;
        }
    return 0;
}

// The multiplier c of an OP_MUL node c * x where x is an `of` node, in the
// forward of part pk; NAN when there is none.
static double const_factor(const Graph *g, int pk, OpKind of) {
    const Part *part = &g->parts[pk];
    for (int i = 0; i < part->nfwd; i++) {
        const Node *n = part->nodes.items[i];
        if (n->op != OP_MUL || n->nin != 2) continue;
        for (int k = 0; k < 2; k++)
            if (n->in[k]->op == of && n->in[1 - k]->op == OP_CONST) return n->in[1 - k]->value;
    }
    return NAN;
}

// A float field as transformers' strict config classes want it: always
// with a point or an exponent (cJSON writes 30.0 as 30, an int to them),
// the shortest text that reads back the same double.
static void add_float(cJSON *obj, const char *key, double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, sizeof buf, "%.17g", v);
    if (!strpbrk(buf, ".en")) strcat(buf, ".0");
    cJSON_AddRawToObject(obj, key, buf);
}

// What of a rope node the config written here cannot say, or NULL. It
// says rope_type "default", every pair of a head turning at
// theta^(-2i/D), or the rule the plan names (rope_rule: "llama3
// factor=32 ...", written out by rope_rule_json) with its fields; a cos/sin scale
// not from a named rule, interleaved pairs or partial rotary would load in
// transformers as another function.
static const char *rope_unsaid(const Node *rope, const Node *first, int64_t head_dim) {
    int64_t pairs = rope_pairs(rope);
    if (pairs * 2 != head_dim) return "its rope turns part of each head (partial rotary)";
    if (rope->rope_interleaved) return "its rope pairs neighbouring features (interleaved)";
    if ((rope->rope_rule == NULL) != (first->rope_rule == NULL) ||
        (rope->rope_rule && strcmp(rope->rope_rule, first->rope_rule)) || rope->theta != first->theta)
        return "its rope differs from layer 0's (one rope_parameters for every layer)";
    if (rope->rope_rule && strstr(rope->rope_rule, " max_position_embeddings="))
        return "its rope's factor comes from max_position_embeddings, which config.json gives the sequence length";
    if (rope->rope_rule) return NULL;
    if (rope->rope_scale != 1) return "its rope scales cos and sin without a named rule";
    for (int64_t i = 0; rope->rope_freq && i < pairs; i++) {
        double plain = pow(rope->theta, -2.0 * (double)i / (double)head_dim);
        if (fabs(rope->rope_freq[i] - plain) > 1e-12 * plain)
            return "its rope frequencies follow a rule the plan does not name";
    }
    return NULL;
}

// rope_parameters' rule from a rope_rule ("llama3 factor=32
// low_freq_factor=1 ...", checked by rope_unsaid): rope_type, then each
// field under its transformers name, the position counts as integers, the
// flags as booleans, the rest as floats. -1 out of memory.
static int rope_rule_json(cJSON *rp, const char *rule) {
    char *words = strdup(rule), *save = NULL;
    if (!words) return -1;
    char *w = strtok_r(words, " ", &save);
    cJSON_AddStringToObject(rp, "rope_type", w ? w : "default");
    while ((w = strtok_r(NULL, " ", &save))) {
        char *eq = strchr(w, '=');
        if (!eq) continue;
        *eq = 0;
        const char *v = eq + 1;
        if (*v == '[') { // longrope's factor lists, "[a,b,...]"
            cJSON *list = cJSON_AddArrayToObject(rp, w);
            for (char *e = (char *)v + 1; list && *e && *e != ']';) {
                char *end;
                double f = strtod(e, &end);
                if (end == e) break;
                cJSON_AddItemToArray(list, cJSON_CreateNumber(f));
                e = *end == ',' ? end + 1 : end;
            }
        } else if (!strcmp(v, "true") || !strcmp(v, "false")) cJSON_AddBoolToObject(rp, w, !strcmp(v, "true"));
        else if (strstr(w, "position_embeddings")) cJSON_AddNumberToObject(rp, w, strtod(v, NULL));
        else add_float(rp, w, strtod(v, NULL));
    }
    free(words);
    return 0;
}

// What of a graph a Hugging Face config says, found and checked.
typedef struct {
    Family f;
    const Param *emb, *ffn;               // the embedding; the MLP's first weight (an expert's, for Mixtral)
    const Node *att, *rope, *norm, *topk; // layer 0's attention and rope, the first RMSNorm, the router
    int64_t experts, head_dim, window;    // window: the layers' sliding window, or 0
    int windowed_layers;
    double qscalar; // Gemma 2's query_pre_attn_scalar
} HfModel;

// Fills h from g, or says in why what a config of the family cannot say.
static void describe_model(const Graph *g, HfModel *h, char *why, size_t whycap) {
    const Param *emb = h->emb = param_named(g, "model.embed_tokens.weight"),
                *q = param_named(g, "self_attn.q_proj.weight");
    const Node *att = h->att = first_op(g, OP_ATTENTION, -1), *rope = h->rope = first_op(g, OP_ROPE, -1),
               *norm = h->norm = first_op(g, OP_RMSNORM, -1);
    Family f = h->f = param_named(g, "block_sparse_moe.experts.{e}.w1.weight") ? FAM_MIXTRAL
                      : param_named(g, "pre_feedforward_layernorm.weight")     ? FAM_GEMMA2
                      : param_named(g, "self_attn.q_proj.bias")                ? FAM_QWEN2
                      : att && att->window > 0                                 ? FAM_MISTRAL
                                                                               : FAM_LLAMA;
    const Param *ffn = h->ffn = param_named(g, f == FAM_MIXTRAL ? "block_sparse_moe.experts.{e}.w1.weight"
                                                                : "mlp.gate_proj.weight");
    const Node *topk = h->topk = first_op(g, OP_TOP_K, -1);
    int64_t experts = h->experts = f == FAM_MIXTRAL && ffn ? param_elements(ffn) : 0;
    if (!emb || !q || !att || !rope || !norm || !ffn || emb->shape.rank != 2 || q->shape.rank != 2 || att->heads < 1 ||
        q->shape.dims[0] % att->heads)
        snprintf(why, whycap,
                 "it lacks the embedding, query projection, attention, rope, RMSNorm or MLP of "
                 "the Hugging Face decoders mt can describe");
    else names_match(g, f, experts, why, whycap);
    if (!why[0] && f == FAM_MIXTRAL && !topk) snprintf(why, whycap, "its experts have no top_k router");
    int64_t head_dim = h->head_dim = why[0] ? 0 : q->shape.dims[0] / att->heads;
    // every layer's attention: the same heads; a window, scale and soft cap the family's config can say
    int64_t window = 0;
    int windowed_layers = 0;
    for (int64_t l = 0; !why[0] && l < g->layers; l++) {
        const Node *a = first_op(g, OP_ATTENTION, block_part(g, l));
        if (!a || a->heads != att->heads || a->kv_heads != att->kv_heads || a->softcap != att->softcap ||
            a->scale != att->scale || !a->causal) {
            snprintf(why, whycap,
                     "layer %lld's attention differs from layer 0's in heads, scale or soft cap, "
                     "or is not causal",
                     (long long)l);
            break;
        }
        if (a->chunk > 0) {
            snprintf(why, whycap,
                     "layer %lld's attention is chunked (Llama 4's), which these families' configs cannot say",
                     (long long)l);
            break;
        }
        if (a->window > 0) {
            if (windowed_layers++ && a->window != window)
                snprintf(why, whycap, "its layers use two sliding windows (%lld, %lld)", (long long)window,
                         (long long)a->window);
            window = a->window;
        }
    }
    for (int64_t l = 0; !why[0] && l < g->layers; l++) { // every layer's rope: what rope_parameters says
        const Node *r = first_op(g, OP_ROPE, block_part(g, l));
        const char *unsaid = r ? rope_unsaid(r, rope, head_dim) : "a layer has no rope";
        if (unsaid) snprintf(why, whycap, "layer %lld: %s", (long long)l, unsaid);
    }
    if (!why[0] && f != FAM_GEMMA2) {
        if (att->softcap != 0)
            snprintf(why, whycap, "its attention is soft-capped, which a %s config cannot say", FAMILIES[f].type);
        else if (att->scale != 0 && fabs(att->scale * sqrt((double)head_dim) - 1) > 1e-12)
            snprintf(why, whycap, "its attention scale %g is not 1/sqrt(head_dim), which a %s config cannot say",
                     att->scale, FAMILIES[f].type);
        else if (windowed_layers && windowed_layers != g->layers)
            snprintf(why, whycap, "%d of its %lld layers use a sliding window, which a %s config cannot say",
                     windowed_layers, (long long)g->layers, FAMILIES[f].type);
        else if (windowed_layers && f != FAM_MISTRAL && f != FAM_MIXTRAL && f != FAM_QWEN2)
            snprintf(why, whycap, "its layers use a sliding window, which a %s config cannot say", FAMILIES[f].type);
    } else if (!why[0]) {
        h->qscalar = att->scale > 0 ? 1 / (att->scale * att->scale) : (double)head_dim;
        if (fabs(h->qscalar - round(h->qscalar)) > 1e-6 * h->qscalar)
            snprintf(why, whycap, "its attention scale %g is not 1/sqrt of a whole query_pre_attn_scalar", att->scale);
    }
    h->window = window, h->windowed_layers = windowed_layers;
}

// The keys only some families' configs have: sliding windows, experts, Gemma 2's.
static void add_family_keys(cJSON *c, const Graph *g, const HfModel *h) {
    if (h->f == FAM_MISTRAL || h->f == FAM_MIXTRAL || h->f == FAM_QWEN2) {
        if (h->window) cJSON_AddNumberToObject(c, "sliding_window", (double)h->window);
        else cJSON_AddNullToObject(c, "sliding_window");
        if (h->f == FAM_QWEN2) cJSON_AddBoolToObject(c, "use_sliding_window", h->window > 0);
    }
    if (h->f == FAM_MIXTRAL) {
        double aux = 0;
        for (int pk = 0; pk < graph_nparts(g) && !(aux > 0); pk++) aux = const_factor(g, pk, OP_LOAD_BALANCE);
        cJSON_AddNumberToObject(c, "num_local_experts", (double)h->experts);
        cJSON_AddNumberToObject(c, "num_experts_per_tok", h->topk->top_k);
        add_float(c, "router_aux_loss_coef", aux > 0 ? aux : 0);
    }
    if (h->f == FAM_GEMMA2) {
        double fcap = const_factor(g, PART_TAIL, OP_TANH);
        cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
        cJSON_AddNumberToObject(c, "query_pre_attn_scalar", round(h->qscalar));
        if (h->att->softcap > 0) add_float(c, "attn_logit_softcapping", h->att->softcap);
        else cJSON_AddNullToObject(c, "attn_logit_softcapping");
        if (fcap > 0) add_float(c, "final_logit_softcapping", fcap);
        else cJSON_AddNullToObject(c, "final_logit_softcapping");
        cJSON_AddNumberToObject(c, "sliding_window", (double)(h->window ? h->window : g->train.seq));
        cJSON *types = cJSON_AddArrayToObject(c, "layer_types");
        for (int64_t l = 0; l < g->layers; l++) {
            const Node *a = first_op(g, OP_ATTENTION, block_part(g, l));
            cJSON_AddItemToArray(types, cJSON_CreateString(a->window > 0 ? "sliding_attention" : "full_attention"));
        }
    }
}

// bos, eos and pad in both files (null in config.json where unknown).
static void add_token_ids(cJSON *c, cJSON *gen, const Graph *g, const HfTokens *tok) {
    const char *keys[3] = {"bos_token_id", "eos_token_id", "pad_token_id"};
    int ids[3] = {tok ? tok->bos : -1, tok ? tok->eos : -1, tok ? tok->pad : -1};
    const Node *lookup = first_op(g, OP_EMBED,
                                  PART_HEAD); // transformers' decoders take its padding_idx from pad_token_id
    if (ids[2] < 0 && lookup && lookup->padding) ids[2] = (int)(lookup->padding - 1);
    for (int k = 0; k < 3; k++) {
        if (ids[k] >= 0) {
            cJSON_AddNumberToObject(c, keys[k], ids[k]);
            cJSON_AddNumberToObject(gen, keys[k], ids[k]);
        } else {
            cJSON_AddNullToObject(c, keys[k]);
        }
    }
}

int64_t hf_config_max_positions(const char *folder) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", folder);
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0;
    if (f) {
        FILE *m = open_memstream(&text, &len);
        char buf[4096];
        for (size_t n; m && (n = fread(buf, 1, sizeof buf, f)) > 0;) fwrite(buf, 1, n, m);
        if (m) fclose(m);
        fclose(f);
    }
    cJSON *c = text ? cJSON_Parse(text) : NULL, *text_config = cJSON_GetObjectItem(c, "text_config");
    const cJSON *v = cJSON_GetObjectItem(c, "max_position_embeddings");
    if (!cJSON_IsNumber(v)) v = cJSON_GetObjectItem(text_config, "max_position_embeddings"); // (gemma3's)
    int64_t n = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble < 1e15 ? (int64_t)v->valuedouble : 0;
    cJSON_Delete(c);
    free(text);
    return n;
}

int hf_config_json(const Plan *p, int bf16, const HfTokens *tok, char **config, char **generation, char *err,
                   size_t errcap) {
    const Graph *g = p->graph;
    *config = *generation = NULL;
    HfModel h = {0};
    char why[512] = "";
    describe_model(g, &h, why, sizeof why);
    const Param *emb = h.emb, *ffn = h.ffn;
    const Node *att = h.att, *rope = h.rope, *norm = h.norm;
    Family f = h.f;
    int64_t head_dim = h.head_dim;
    if (why[0]) {
        snprintf(err, errcap,
                 "--export DIR writes a folder transformers loads, with config.json; model '%s' is not "
                 "one mt can describe (llama, mistral, qwen2, mixtral or gemma2 by their checkpoint names, "
                 "\"model.layers.{i}.\" ...): %s. Export to a FILE.safetensors instead",
                 g->model_name, why);
        return -1;
    }

    cJSON *c = cJSON_CreateObject(), *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(FAMILIES[f].arch));
    cJSON_AddStringToObject(c, "model_type", FAMILIES[f].type);
    cJSON_AddNumberToObject(c, "vocab_size", (double)emb->shape.dims[0]);
    cJSON_AddNumberToObject(c, "hidden_size", (double)emb->shape.dims[1]);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)param_element_shape(ffn).dims[0]);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)g->layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", att->heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", att->kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", (double)head_dim);
    cJSON_AddNumberToObject(c, "max_position_embeddings",
                            (double)(tok && tok->max_positions > 0 ? tok->max_positions : g->train.seq));
    add_float(c, "rms_norm_eps", norm->eps);
    add_float(c, "rope_theta", rope->theta); // transformers 4's key; 5 reads rope_parameters
    cJSON *rp = cJSON_AddObjectToObject(c, "rope_parameters");
    if (rope_rule_json(rp, rope->rope_rule ? rope->rope_rule : "default") != 0) {
        cJSON_Delete(c);
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    add_float(rp, "rope_theta", rope->theta);
    if (rope->rope_rule && !strncmp(rope->rope_rule, "longrope ", 9) && !cJSON_GetObjectItem(rp, "attention_factor"))
        add_float(rp, "attention_factor", rope->rope_scale); // the cos/sin scale mt derived, not transformers' guess
    cJSON_AddBoolToObject(c, "tie_word_embeddings", param_named(g, "lm_head.weight") == NULL);
    cJSON_AddStringToObject(c, "hidden_act", f == FAM_GEMMA2 ? "gelu_pytorch_tanh" : "silu");
    cJSON_AddStringToObject(c, "dtype", bf16 ? "bfloat16" : "float32");
    cJSON_AddStringToObject(c, "torch_dtype", bf16 ? "bfloat16" : "float32"); // transformers 4's key
    add_family_keys(c, g, &h);
    cJSON *gen = cJSON_CreateObject();
    add_token_ids(c, gen, g, tok);
    cJSON_AddStringToObject(c, "exported_by", "mt");
    *config = cJSON_Print(c);
    *generation = cJSON_Print(gen);
    cJSON_Delete(c);
    cJSON_Delete(gen);
    if (!*config || !*generation) {
        free(*config);
        free(*generation);
        *config = *generation = NULL;
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    return 0;
}
