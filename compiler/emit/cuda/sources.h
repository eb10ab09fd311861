// sources.h: the CUDA sources of compiler/emit/cuda/, embedded into mtc at build
// time (embed.cmake), each NUL-terminated; _len excludes the NUL.
#ifndef MT_CUDA_SOURCES_H
#define MT_CUDA_SOURCES_H

#include <stddef.h>

extern const char mt_cuda_prelude[];       // storage types, loads and stores, reductions
extern const char mt_cuda_attention[];     // the flash attention template (needs the prelude)
extern const char mt_cuda_attention_ref[]; // its plain reference, for tests/gpu only
extern const char mt_cuda_mma[];           // tensor-core and cp.async wrappers (needs the prelude)
extern const char mt_cuda_attention_tc[];  // tensor-core flash attention (needs prelude, mma, attention)
extern const char mt_cuda_moe[];           // mixture-of-experts ops, KK_NODE kernels (needs prelude, mma)
extern const char mt_cuda_scan[];          // conv1d and the recurrences, KK_NODE kernels (needs prelude, mma, moe)
extern const size_t mt_cuda_prelude_len, mt_cuda_attention_len, mt_cuda_attention_ref_len, mt_cuda_mma_len,
    mt_cuda_attention_tc_len, mt_cuda_moe_len, mt_cuda_scan_len;

#endif
