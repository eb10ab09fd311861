// weights.h: pretrained weights in and trained weights out. Names map
// through the DSL's checkpoint names (param "h.{i}.attn.c_attn.weight"), so
// no model needs C code of its own.
#ifndef MT_WEIGHTS_H
#define MT_WEIGHTS_H

#include <stddef.h>

#include "runtime/model_io/hf_config.h"
#include "runtime/dist/dist.h"
#include "runtime/store/store.h"

// Loads every parameter of the plan's model into the master weights:
// - Hugging Face safetensors: a file, a sharded set's index.json, or a
//   directory holding either; bf16, fp16 or fp32 on disk;
// - llm.c's GPT-2 checkpoint (header magic 20240326, version 3: fp32), its
//   tensors renamed to the Hugging Face GPT-2 names, [out, in] matrices
//   transposed to Conv1D's [in, out], the padded vocabulary rows dropped.
// A missing, extra or wrongly shaped tensor is an error naming it, both
// shapes and the file. A sharded store (Plan.sharded) takes only its slice
// of each tensor: every rank reads the file, one tensor at a time. Returns
// 0, or -1 with a message.
int weights_load(const char *path, const Plan *p, HostStore *hs, char *err, size_t errcap);

// Writes the master weights under the checkpoint names, in bf16 or fp32,
// sharded as Hugging Face does above shard_bytes. A path ending in
// ".safetensors" is that file (or its shards and index); any other is a
// folder transformers' AutoModelForCausalLM loads (made if missing): its
// model.safetensors (sharded likewise), config.json and
// generation_config.json (hf_config.h), and every file of tokenizer_dir
// (NULL: none), with the bos, eos and pad ids of tok (NULL: not known) in
// both configs. One tensor at a time: each is gathered when the writer
// reaches it, from the ranks' slices of its segment (dist_gather_slices;
// dist NULL: one process), so no rank holds the whole model for it; with
// ranks, every rank calls this and rank 0 writes.
int weights_export(const char *path, const Plan *p, const HostStore *hs, int bf16, int64_t shard_bytes,
                   const char *tokenizer_dir, const HfTokens *tok, const Dist *dist, char *err, size_t errcap);

// Whether --export PATH names a folder: anything but a FILE.safetensors.
int weights_export_is_folder(const char *path);

// A plan with LoRA adapters (mtc --lora): weights_export to a folder writes
// the PEFT adapter that peft's PeftModel.from_pretrained loads on the base
// model: adapter_model.safetensors, the adapters named
// base_model.model.<checkpoint name> (q_proj.lora_A.weight ...), and
// adapter_config.json (rank, alpha, target modules). weights_export_merged
// writes what weights_export writes for a plan without adapters, each
// target's weight merged, W + (alpha / r) B A, the adapters left out.
int weights_has_lora(const Plan *p);
int weights_export_merged(const char *path, const Plan *p, const HostStore *hs, int bf16, int64_t shard_bytes,
                          const char *tokenizer_dir, const HfTokens *tok, const Dist *dist, char *err, size_t errcap);

// What weights_export would refuse before any training: a folder with a
// config.json (not a LoRA plan's PEFT adapter, unless merged) for a model
// whose config.json mt cannot write (hf_config.h). 0, or -1 with a message.
int weights_export_check(const char *path, const Plan *p, int merged, char *err, size_t errcap);
// What the PEFT adapter export would lose, refused before training: a LoRA
// plan's folder export (merged 0) with parameters other than the adapters
// trained (mtc --train) or moved by a balance rule (a router's bias_update:
// state the base model lacks, which peft's adapter cannot carry). 0, or -1
// with a message naming one.
int weights_export_check_adapter(const char *path, const Plan *p, int merged, char *err, size_t errcap);

#endif
