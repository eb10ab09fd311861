// plan.h: the contract between mtc and mtrun. mtc builds a Plan in memory
// (compiler/schedule.c) and writes it (compiler/plan_write.c); mtrun reads and
// validates it (runtime/plan_read.c) and replays its instruction streams.
//
// File format, version 1, all integers little-endian:
//
//   header   "MTPLAN\0\0" (8 bytes), u32 version = 1, u32 endian = 0x01020304,
//            u32 section count, u32 header crc32 (of the bytes before it)
//   table    per section: u32 id, u32 crc32 of its bytes, u64 offset, u64 size
//   sections SOURCE, CONFIG, GRAPH, HOST, ARENA, STREAMS, KERNELS (ids 1..7),
//            each present once, in any order, inside the file, not overlapping
//
// crc32 is zlib's. Strings are u32 length + bytes (no NUL). What each
// section holds is written out in plan_write.c, field by field; plan_read.c
// reads the same fields and validates every one before use.
#ifndef MT_PLAN_H
#define MT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "../compiler/graph.h"

enum { PLAN_VERSION = 1, PLAN_ENDIAN = 0x01020304 };

typedef enum {
    SEC_SOURCE = 1, // model path, source text, its crc32
    SEC_CONFIG,     // the TrainConfig
    SEC_GRAPH,      // model name, block, inputs, params, the three parts with their backward
    SEC_HOST,       // host store layout
    SEC_ARENA,      // device arena size and every node's offset
    SEC_STREAMS,    // the instruction streams
    SEC_KERNELS,    // the kernels the streams launch (op names for now; code with the fusion issue)
    SEC_COUNT_PLUS_ONE
} SectionId;

typedef enum {
    INS_COPY_IN,  // host master weights [src, src + bytes/4) floats -> arena [dst, dst + bytes)
    INS_COPY_OUT, // arena [src, src + bytes) -> added into host gradients from float dst
    INS_COPY,     // arena [src, ...) -> arena [dst, ...), bytes
    INS_INPUT,    // model input `input` (the batch's tokens or targets) -> arena [dst, dst + bytes)
    INS_RUN,      // run nodes [from, to) of part `part`, with layer `layer`'s weights in the slot
    INS_LOSS,     // the loss scalar at arena src is the micro-batch's loss
    INS_COUNT
} InsKind;

typedef struct Instr {
    int32_t kind;  // InsKind
    int32_t part;  // INS_RUN
    int32_t layer; // INS_RUN, INS_COPY_IN, INS_COPY_OUT: which layer (-1: global params)
    int32_t input; // INS_INPUT
    int32_t from, to; // INS_RUN
    int64_t src, dst, bytes;
} Instr;

typedef struct Plan {
    // SOURCE
    const char *source_path;
    const char *source; // (source_len) the model text
    size_t source_len;
    uint32_t source_crc;
    // CONFIG and GRAPH (the graph holds the TrainConfig)
    Graph *graph;
    // HOST: the host store is floats: the global segment, then one segment a
    // layer, each contiguous so that a layer is one copy.
    int64_t host_global;   // floats in the global segment
    int64_t host_layer;    // floats in each layer's segment
    int64_t *param_offset; // (graph->params.n) floats from the start of its segment
    // ARENA
    int64_t arena_bytes;
    int64_t *node_offset[PART_COUNT]; // (parts[p].nodes.n) byte offsets; -1 for views and reshapes
    // STREAMS
    Instr *train;  // (ntrain) one micro-batch: forward, loss, backward, gradients out
    int32_t ntrain;
    Instr *eval;   // (neval) forward and loss only, for validation
    int32_t neval;
    // set by the writer and the reader: crc32 over all sections, naming this plan
    uint32_t plan_crc;
} Plan;

#endif
