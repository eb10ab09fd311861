// cache.c: compiled code kept on disk between runs (cache.h).
#include "common/cache.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

enum { CACHE_MAX_ENTRIES = 4096, CACHE_NAME = 64 };
static const char MAGIC[8] = {'M', 'T', 'C', 'A', 'C', 'H', 'E', '1'};

CacheKey cache_key(void) { return (CacheKey){{0xcbf29ce484222325ull, 0x243f6a8885a308d3ull}}; }

void cache_key_add(CacheKey *k, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i <= n; i++) {
        uint8_t c = i < n ? p[i] : 0;
        k->h[0] = (k->h[0] ^ c) * 0x100000001b3ull;
        unsigned long long x = (k->h[1] ^ c) * 0x9e3779b97f4a7c15ull;
        k->h[1] = x ^ (x >> 29);
    }
}

static unsigned long long blob_hash(const void *blob, size_t len) {
    CacheKey k = cache_key();
    cache_key_add(&k, blob, len);
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
    if (n <= 0 || (size_t)n >= cap) return 0;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return 0;
    return 1;
}

int cache_path(char *path, size_t cap, const char *kind, const CacheKey *k) {
    char dir[4096];
    if (!cache_dir(dir, sizeof dir)) return 0;
    int n = snprintf(path, cap, "%s/%s-%016llx%016llx.bin", dir, kind, k->h[0], k->h[1]);
    return n > 0 && (size_t)n < cap;
}

void *cache_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char magic[8];
    uint64_t head[2]; // the blob's length, its hash
    void *blob = NULL;
    int ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, MAGIC, 8) && fread(head, 8, 2, f) == 2 && head[0] > 0 &&
             head[0] < (1ull << 31) && (blob = malloc(head[0])) && fread(blob, 1, head[0], f) == head[0] &&
             fgetc(f) == EOF;
    fclose(f);
    if (!ok || blob_hash(blob, head[0]) != head[1]) {
        free(blob);
        return NULL;
    }
    utime(path, NULL); // used now, for cache_trim
    *len = head[0];
    return blob;
}

typedef struct Entry {
    char name[CACHE_NAME];
    time_t used;
    long long bytes;
} Entry;

static int older_first(const void *a, const void *b) {
    time_t x = ((const Entry *)a)->used, y = ((const Entry *)b)->used;
    return (x > y) - (x < y);
}

// Removes the least recently used entries of dir named prefix* (the kind
// and its '-') until the rest take at most 3/4 of max_bytes, once they
// take more than all of it.
static void cache_trim(const char *dir, const char *prefix, long long max_bytes) {
    DIR *d = opendir(dir);
    if (!d) return;
    Entry *e = malloc(CACHE_MAX_ENTRIES * sizeof *e); // (CACHE_MAX_ENTRIES) the entries seen
    int n = 0;
    long long total = 0;
    char path[4200];
    for (struct dirent *de; e && (de = readdir(d)) && n < CACHE_MAX_ENTRIES;) {
        struct stat st;
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, prefix, strlen(prefix)) != 0 || len >= CACHE_NAME) continue;
        snprintf(path, sizeof path, "%.4096s/%.63s", dir, de->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        memcpy(e[n].name, de->d_name, len + 1);
        e[n].used = st.st_mtime;
        e[n].bytes = (long long)st.st_size;
        total += e[n++].bytes;
    }
    closedir(d);
    if (e && total > max_bytes) {
        qsort(e, (size_t)n, sizeof *e, older_first);
        for (int i = 0; i < n && total > max_bytes / 4 * 3; i++) {
            snprintf(path, sizeof path, "%.4096s/%.63s", dir, e[i].name);
            if (unlink(path) == 0) total -= e[i].bytes;
        }
    }
    free(e);
}

void cache_write(const char *path, const void *blob, size_t len, long long max_bytes) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%.4200s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    uint64_t head[2] = {len, blob_hash(blob, len)};
    int ok = fwrite(MAGIC, 1, 8, f) == 8 && fwrite(head, 8, 2, f) == 2 && fwrite(blob, 1, len, f) == len;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return;
    }
    char dir[4200], prefix[CACHE_NAME];
    snprintf(dir, sizeof dir, "%.4199s", path);
    char *slash = strrchr(dir, '/'), *dash = slash ? strchr(slash, '-') : NULL;
    if (!dash || dash - slash >= CACHE_NAME) return;
    snprintf(prefix, sizeof prefix, "%.*s", (int)(dash - slash), slash + 1); // "KIND-"
    *slash = 0;
    cache_trim(dir, prefix, max_bytes);
}
