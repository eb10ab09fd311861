// rope.h: the frequency rules of rotary position embedding, as Hugging Face
// transformers' modeling_rope_utils.py defines them (rope_type default,
// linear, llama3, yarn, longrope). The compiler computes a rope node's
// inverse frequencies and its cos/sin scale once with rope_frequencies; the
// node carries them (Node.rope_freq, rope_scale) to the plan, the plain
// kernels and the generated ones.
#ifndef MT_ROPE_H
#define MT_ROPE_H

#include <stdint.h>

typedef enum { ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3, ROPE_YARN, ROPE_LONGROPE, ROPE_KINDS } RopeKind;

const char *rope_kind_name(RopeKind k); // "default", "linear", ... (transformers' rope_type)

// One rule and its config fields under transformers' names. A field a rule
// does not use is ignored; 0 marks a field left unset where the rule
// derives it.
typedef struct RopeRule {
    RopeKind kind;
    double theta;            // rope_theta
    double factor;           // linear, llama3, yarn, longrope
    double low_freq_factor;  // llama3
    double high_freq_factor; // llama3
    double original_max;     // original_max_position_embeddings: llama3, yarn, longrope
    double max_positions; // max_position_embeddings: yarn, longrope: factor = this / original_max when factor is unset
    double beta_fast, beta_slow;   // yarn (0: 32 and 1)
    double mscale, mscale_all_dim; // yarn: attention_factor = mscale(factor, mscale) / mscale(factor, mscale_all_dim)
    double attention_factor;       // yarn, longrope: the cos/sin scale (0: derived from factor)
    int truncate;                  // yarn: floor/ceil the correction range (transformers' default true)
    const double *factors;         // longrope: the per-pair factors in use (short_factor or long_factor), (nfactors)
    int64_t nfactors;
} RopeRule;

// Fills inv_freq[0 .. dim/2) (dim even: the width of the rotated part of a
// head) with the rule's inverse frequencies, pair i turning by t *
// inv_freq[i] at position t, and *scale with the factor cos and sin are
// multiplied by. In double precision; transformers computes the same
// formulas in f32. Returns NULL, or what is wrong with the rule (a message
// naming the field).
const char *rope_frequencies(const RopeRule *r, int64_t dim, double *inv_freq, double *scale);

#endif
