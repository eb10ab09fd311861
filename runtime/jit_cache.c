// jit_cache.c: the JIT's compiled kernels kept on disk (jit_cache.h).
#include "jit_cache.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

enum { JIT_CACHE_MAX_ENTRIES = 4096 };
static const long long JIT_CACHE_MAX_BYTES = 1ll << 28;
static const char MAGIC[8] = {'M', 'T', 'J', 'I', 'T', 'O', 'B', '1'};

JitCacheKey jit_cache_key(void) { return (JitCacheKey){{0xcbf29ce484222325ull, 0x243f6a8885a308d3ull}}; }

// Two independent 64-bit hashes, FNV-1a and a multiply-xorshift.
void jit_cache_key_add(JitCacheKey *k, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i <= n; i++) {
        uint8_t c = i < n ? p[i] : 0;
        k->h[0] = (k->h[0] ^ c) * 0x100000001b3ull;
        unsigned long long x = (k->h[1] ^ c) * 0x9e3779b97f4a7c15ull;
        k->h[1] = x ^ (x >> 29);
    }
}

static unsigned long long object_hash(const void *obj, size_t len) {
    JitCacheKey k = jit_cache_key();
    jit_cache_key_add(&k, obj, len);
    return k.h[0] ^ k.h[1];
}

// The cache folder, created if missing; 0 when there is none.
static int cache_dir(char *dir, size_t cap) {
    const char *env = getenv("MT_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (env && *env) {
        if (!strcmp(env, "off")) return 0;
        n = snprintf(dir, cap, "%s", env);
    } else if (xdg && *xdg) {
        n = snprintf(dir, cap, "%s/mt", xdg);
    } else if (home && *home) {
        n = snprintf(dir, cap, "%s/.cache", home);
        if (n > 0 && (size_t)n < cap) mkdir(dir, 0755);
        n = snprintf(dir, cap, "%s/.cache/mt", home);
    } else {
        return 0;
    }
    if (n <= 0 || (size_t)n >= cap - 64) return 0; // room for the entry's name
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return 0;
    return 1;
}

int jit_cache_path(char *path, size_t cap, const JitCacheKey *k) {
    char dir[4096];
    if (cap < sizeof dir + 64 || !cache_dir(dir, sizeof dir)) return 0;
    snprintf(path, cap, "%s/jit-%016llx%016llx.o", dir, k->h[0], k->h[1]);
    return 1;
}

void *jit_cache_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char magic[8];
    uint64_t head[2]; // the object's length, its hash
    void *obj = NULL;
    int ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, MAGIC, 8) && fread(head, 8, 2, f) == 2 && head[0] > 0 &&
             head[0] < (1ull << 31) && (obj = malloc(head[0])) && fread(obj, 1, head[0], f) == head[0] && fgetc(f) == EOF;
    fclose(f);
    if (!ok || object_hash(obj, head[0]) != head[1]) {
        free(obj);
        return NULL;
    }
    utime(path, NULL); // used now, for trim
    *len = head[0];
    return obj;
}

typedef struct Entry {
    char name[64];
    time_t used;
    long long bytes;
} Entry;

static int older_first(const void *a, const void *b) {
    time_t x = ((const Entry *)a)->used, y = ((const Entry *)b)->used;
    return (x > y) - (x < y);
}

// Removes the least recently used jit- entries of dir until the rest take
// at most 3/4 of JIT_CACHE_MAX_BYTES, once they take more than all of it.
static void trim(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    Entry *e = malloc(JIT_CACHE_MAX_ENTRIES * sizeof *e); // (JIT_CACHE_MAX_ENTRIES) the entries seen
    int n = 0;
    long long total = 0;
    char path[4300];
    for (struct dirent *de; e && (de = readdir(d)) && n < JIT_CACHE_MAX_ENTRIES;) {
        struct stat st;
        if (strncmp(de->d_name, "jit-", 4) != 0 || strlen(de->d_name) >= sizeof e->name) continue;
        snprintf(path, sizeof path, "%.4200s/%.63s", dir, de->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        memcpy(e[n].name, de->d_name, strlen(de->d_name) + 1);
        e[n].used = st.st_mtime;
        e[n].bytes = (long long)st.st_size;
        total += e[n++].bytes;
    }
    closedir(d);
    if (e && total > JIT_CACHE_MAX_BYTES) {
        qsort(e, (size_t)n, sizeof *e, older_first);
        for (int i = 0; i < n && total > JIT_CACHE_MAX_BYTES / 4 * 3; i++) {
            snprintf(path, sizeof path, "%.4200s/%.63s", dir, e[i].name);
            if (unlink(path) == 0) total -= e[i].bytes;
        }
    }
    free(e);
}

void jit_cache_write(const char *path, const void *obj, size_t len) {
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%.4200s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    uint64_t head[2] = {len, object_hash(obj, len)};
    int ok = fwrite(MAGIC, 1, 8, f) == 8 && fwrite(head, 8, 2, f) == 2 && fwrite(obj, 1, len, f) == len;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return;
    }
    char dir[4300];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0, trim(dir);
}
