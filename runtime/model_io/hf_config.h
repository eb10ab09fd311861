// hf_config.h: the config.json and generation_config.json that make an
// exported folder one that transformers' AutoModelForCausalLM loads.
//
// The plan knows a model by its graph, not by a family: the family is told
// by the parameters' checkpoint names (the DSL writes the Hub's), and must
// match one of the table in hf_config.c name for name (llama, mistral,
// qwen2, mixtral, gemma2); its config is read off the graph (widths from the
// parameters' shapes, heads, window, scale and soft-capping from the
// attention, theta from rope, eps from the norms, the experts from the moe
// op, the final soft-capping from the tail). A model that matches no family,
// or whose graph says something the family's config cannot (a window on a
// Llama, a soft cap outside Gemma 2), is refused naming what.
#ifndef MT_HF_CONFIG_H
#define MT_HF_CONFIG_H

#include <stddef.h>

#include "common/plan.h"

typedef struct HfTokens {
    int bos, eos, pad;     // token ids for the configs; -1: not known
    int64_t max_positions; // the source checkpoint's max_position_embeddings, which the export keeps; 0: not known
                           // (the plan's sequence is written)
} HfTokens;

// The max_position_embeddings of the config.json in folder (or of its
// text_config); 0 where there is none to read.
int64_t hf_config_max_positions(const char *folder);

// The two files' text (malloc'd, NUL-terminated) for the plan's model,
// exported in bf16 or fp32. Returns 0, or -1 with a message in err and both
// NULL.
int hf_config_json(const Plan *p, int bf16, const HfTokens *tok, char **config, char **generation, char *err,
                   size_t errcap);

#endif
