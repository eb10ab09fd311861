// cache.h: compiled code kept on disk between runs, for mtc (NVRTC's
// cubin and PTX, compiler/emit/nvrtc.c) and mtrun (the JIT's object code,
// runtime/backend/jit.c).
//
// An entry is one blob kept under a 128-bit hash of everything that
// decides it (the caller's key), in DIR/KIND-HASH.bin:
//
//     "MTCACHE1"  magic
//     u64 x 2     the blob's length, a hash of it
//     blob
//
// DIR is $MT_CACHE_DIR ("off": none), else $XDG_CACHE_HOME/mt, else
// $HOME/.cache/mt, created when missing. An entry that does not read back
// whole and with its hash is as good as missing: the caller compiles again
// and rewrites it. Entries are written to a temporary file and renamed, so
// concurrent runs see an entry whole or not at all. A hit touches its
// entry; past the caller's limit the least recently used entries of its
// kind go. Failures to read or write the cache are never errors: it only
// saves time.
#ifndef MT_CACHE_H
#define MT_CACHE_H

#include <stddef.h>

typedef struct CacheKey {
    unsigned long long h[2]; // two independent 64-bit hashes: FNV-1a and a multiply-xorshift
} CacheKey;

CacheKey cache_key(void);
// Chains n bytes into the key (each part as if NUL-terminated).
void cache_key_add(CacheKey *k, const void *data, size_t n);

// The path of kind's entry for key k ("nvrtc", "jit") into path; 0 when
// there is no cache folder.
int cache_path(char *path, size_t cap, const char *kind, const CacheKey *k);
// The entry's blob (malloc'd, *len bytes), or NULL when missing or not whole.
void *cache_read(const char *path, size_t *len);
// Keeps blob as the entry at path, then trims the entries of its kind to
// 3/4 of max_bytes once they take more.
void cache_write(const char *path, const void *blob, size_t len, long long max_bytes);

#endif
