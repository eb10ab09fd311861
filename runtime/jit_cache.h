// jit_cache.h: the JIT's compiled kernels kept on disk between runs.
//
// An entry is the object code the JIT made of a plan's bitcode, kept under
// a 128-bit hash of everything that decides it (the bitcode, LLVM's
// version, the host's triple, CPU and features, the pass pipeline, the
// vector maths library), in DIR/jit-HASH.o:
//
//     "MTJITOB1"  magic
//     u64 x 2     the object's length, a hash of it
//     object
//
// DIR is $MT_CACHE_DIR ("off": none), else $XDG_CACHE_HOME/mt, else
// $HOME/.cache/mt, as mtc's NVRTC cache. An entry that does not read back
// whole and with its hash is compiled again and rewritten; entries are
// written to a temporary file and renamed, so concurrent runs see an entry
// whole or not at all. A hit touches its entry; past JIT_CACHE_MAX_BYTES
// the least recently used entries go. Failures to read or write the cache
// are never errors: it only saves time (0.2 to 0.6 s of O3 and code
// generation per mtrun run of a tiny model).
#pragma once

#include <stddef.h>

typedef struct JitCacheKey {
    unsigned long long h[2];
} JitCacheKey;

JitCacheKey jit_cache_key(void);
// Chains n bytes into the key (each part NUL-terminated in the hash).
void jit_cache_key_add(JitCacheKey *k, const void *data, size_t n);
// The entry's path for key k into path; 0 when there is no cache folder.
int jit_cache_path(char *path, size_t cap, const JitCacheKey *k);
// The entry's object (malloc'd, *len bytes), or NULL when missing or not whole.
void *jit_cache_read(const char *path, size_t *len);
void jit_cache_write(const char *path, const void *obj, size_t len);
