// sample.h: what the model says while it trains (mtrun --sample-every) and
// its logits for a check against another implementation (mtrun --logits).
//
// Both run the plan's own forward over one batch (B rows of T tokens): the
// run's replay `rp` of the eval stream (forward and loss, what validation
// runs) on the run's backend, cpu or cuda, with the weights as the store
// holds them, and read the logits its loss reads out of the arena. No KV
// cache: a new token costs one such forward of the whole batch, the plan's
// predicted forward time (about a third of its predicted step; mtc
// --explain), so samples cost on a streamed model what a validation batch
// costs. rp NULL (mtrun --reference), or MT_SAMPLE_REFERENCE=1 in the
// environment (tests), runs the unstreamed reference executor on the host
// instead (replay.h, reference_run), which the plan's streams are tested
// against: minutes per token for an 8B model.
#ifndef MT_SAMPLE_H
#define MT_SAMPLE_H

#include <stdio.h>

#include "runtime/data.h"
#include "runtime/replay.h"
#include "runtime/store/store.h"

// Writes PREFIX.tokens.npy (int32, (B, T)) and PREFIX.logits.npy (float32,
// (B, T, V)): the batch and the logits of the model's forward on it, its
// attention kept within the documents seg_start (B, T) says (kernels.h),
// or NULL. With prefix NULL, the forward alone, nothing written (a rank
// other than 0 of a sharded run: its all-gathers take every rank). 0, or
// -1 with a message.
int sample_logits_npy(const char *prefix, const Plan *p, HostStore *hs, Replay *rp, const int32_t *tokens,
                      const int32_t *targets, const int32_t *seg_start, char *err, size_t errcap);

// Prints to out, for step `step`, continuations of prompt[0, n) (n < T):
// one greedy, then `samples` at temperature `temp` drawn with a generator
// seeded by (seed, step, sample), each as long as the row allows (T - n
// tokens, or up to the vocabulary's eos), decoded with v (bytes that are not
// printable UTF-8 shown as \xNN). The same weights, prompt and seed print
// the same text. 0, or -1 with a message.
int sample_print(FILE *out, const Plan *p, HostStore *hs, Replay *rp, const DataVocab *v, const int32_t *prompt,
                 int64_t n, uint64_t seed, int64_t step, int samples, double temp, char *err, size_t errcap);

#endif
