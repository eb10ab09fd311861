// rope_freqs: prints common/rope.c's inverse frequencies and cos/sin scale
// for one rule, for tests/check_rope_rules.py to hold against transformers'
// ROPE_INIT_FUNCTIONS.
//
// usage: rope_freqs KIND DIM THETA [FIELD=VALUE ...]
//   KIND default|linear|llama3|yarn|longrope; FIELD one of factor,
//   low_freq_factor, high_freq_factor, original_max_position_embeddings,
//   max_position_embeddings, beta_fast, beta_slow, mscale, mscale_all_dim,
//   attention_factor, truncate (0 or 1), factors (comma-separated, longrope).
// Prints "scale S" then one frequency a line (%.17g); exit 1 on an error.
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rope.h"

int main(int argc, char **argv) {
    if (argc < 4) return fprintf(stderr, "usage: rope_freqs KIND DIM THETA [FIELD=VALUE ...]\n"), 2;
    RopeRule r = {.kind = ROPE_KINDS, .theta = atof(argv[3]), .truncate = 1};
    for (int k = 0; k < ROPE_KINDS; k++)
        if (!strcmp(argv[1], rope_kind_name((RopeKind)k))) r.kind = (RopeKind)k;
    int64_t dim = atoll(argv[2]);
    double *factors = calloc((size_t)dim, sizeof *factors), *freq = calloc((size_t)dim, sizeof *freq); // (dim)
    if (r.kind == ROPE_KINDS || dim < 2 || !factors || !freq)
        return fprintf(stderr, "rope_freqs: bad kind or dim\n"), 2;
    static const struct {
        const char *name;
        size_t at;
    } F[] = {
        {"factor", offsetof(RopeRule, factor)},
        {"low_freq_factor", offsetof(RopeRule, low_freq_factor)},
        {"high_freq_factor", offsetof(RopeRule, high_freq_factor)},
        {"original_max_position_embeddings", offsetof(RopeRule, original_max)},
        {"max_position_embeddings", offsetof(RopeRule, max_positions)},
        {"beta_fast", offsetof(RopeRule, beta_fast)},
        {"beta_slow", offsetof(RopeRule, beta_slow)},
        {"mscale", offsetof(RopeRule, mscale)},
        {"mscale_all_dim", offsetof(RopeRule, mscale_all_dim)},
        {"attention_factor", offsetof(RopeRule, attention_factor)},
    };
    for (int i = 4; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) return fprintf(stderr, "rope_freqs: %s is not FIELD=VALUE\n", argv[i]), 2;
        *eq = 0;
        int found = 0;
        for (size_t f = 0; f < sizeof F / sizeof F[0]; f++)
            if (!strcmp(argv[i], F[f].name)) *(double *)((char *)&r + F[f].at) = atof(eq + 1), found = 1;
        if (!strcmp(argv[i], "truncate")) r.truncate = atoi(eq + 1), found = 1;
        if (!strcmp(argv[i], "factors")) {
            found = 1;
            for (char *p = eq + 1; *p && r.nfactors < dim; p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p))
                factors[r.nfactors++] = atof(p);
            r.factors = factors;
        }
        if (!found) return fprintf(stderr, "rope_freqs: unknown field %s\n", argv[i]), 2;
    }
    double scale;
    const char *bad = rope_frequencies(&r, dim, freq, &scale);
    if (bad) return fprintf(stderr, "rope_freqs: %s\n", bad), 1;
    printf("scale %.17g\n", scale);
    for (int64_t i = 0; i < dim / 2; i++) printf("%.17g\n", freq[i]);
    free(factors);
    free(freq);
    return 0;
}
