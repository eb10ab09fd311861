// sample.h: what the model says while it trains (mtrun --sample-every) and
// its logits for a check against another implementation (mtrun --logits).
//
// Both run the model's forward on the host with the unstreamed reference
// executor (replay.h, reference_run), which the plan's streams are tested
// against, over one batch (B rows of T tokens) and read the logits its loss
// reads. A new token costs one such forward: for a tiny model milliseconds,
// for a streamed one a forward of the whole model on the host CPU with the
// plain kernels, with every layer's activations of the batch in host memory
// (minutes per token for an 8B model): use it on small models.
#ifndef MT_SAMPLE_H
#define MT_SAMPLE_H

#include <stdio.h>

#include "data.h"
#include "store.h"

// Writes PREFIX.tokens.npy (int32, (B, T)) and PREFIX.logits.npy (float32,
// (B, T, V)): the batch and the logits of the model's forward on it.
// 0, or -1 with a message.
int sample_logits_npy(const char *prefix, const Plan *p, HostStore *hs, const int32_t *tokens,
                      const int32_t *targets, char *err, size_t errcap);

// Prints to out, for step `step`, continuations of prompt[0, n) (n < T):
// one greedy, then `samples` at temperature `temp` drawn with a generator
// seeded by (seed, step, sample), each as long as the row allows (T - n
// tokens, or up to the vocabulary's eos), decoded with v (bytes that are not
// printable UTF-8 shown as \xNN). The same weights, prompt and seed print
// the same text. 0, or -1 with a message.
int sample_print(FILE *out, const Plan *p, HostStore *hs, const DataVocab *v, const int32_t *prompt, int64_t n,
                 uint64_t seed, int64_t step, int samples, double temp, char *err, size_t errcap);

#endif
