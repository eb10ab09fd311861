// nvrtc.c: one CUDA C source -> cubin + PTX through NVRTC, with NVRTC's log
// mapped back to the generated lines and the ops they came from.
#include "nvrtc.h"

#include <nvrtc.h>

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

// How many diagnostics one failure reports; the rest are counted.
enum { NVRTC_MAX_REPORTED = 8 };

// An append-only message buffer over err[errcap]; silently cut when full.
typedef struct Msg {
    char *buf;
    size_t cap, len;
} Msg;

static void msg_add(Msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void msg_add(Msg *m, const char *fmt, ...) {
    if (m->cap == 0 || m->len >= m->cap - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(m->buf + m->len, m->cap - m->len, fmt, ap);
    va_end(ap);
    if (n > 0) m->len += (size_t)n < m->cap - m->len ? (size_t)n : m->cap - 1 - m->len;
}

int nvrtc_arch_ok(const char *arch) {
    if (strncmp(arch, "sm_", 3) != 0 || !isdigit((unsigned char)arch[3]) || !isdigit((unsigned char)arch[4]))
        return 0;
    for (const char *p = arch + 5; *p; p++)
        if (!isalnum((unsigned char)*p)) return 0; // sm_90a
    return atoi(arch + 3) >= 80 && strlen(arch) < sizeof(((CudaBinary *)0)->arch);
}

const char *nvrtc_version_str(void) {
    static char buf[32];
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
    snprintf(buf, sizeof buf, "%d.%d", major, minor);
    return buf;
}

// Line `line` (1-based) of src as [*start, *start + *len), or 0 when src is shorter.
static int source_line(const char *src, int line, const char **start, int *len) {
    const char *p = src;
    for (int i = 1; i < line; i++) {
        p = strchr(p, '\n');
        if (!p) return 0;
        p++;
    }
    const char *e = strchr(p, '\n');
    *start = p;
    *len = (int)(e ? e - p : (ptrdiff_t)strlen(p));
    return 1;
}

// NVRTC's log, "NAME(LINE): error: MESSAGE" and "NAME(LINE): warning #177-D:
// MESSAGE" lines followed by the quoted line and a caret, becomes one entry
// per diagnostic with the generated line and its origin. Returns how many it
// found; lines it cannot place go to m verbatim.
static int report_log(Msg *m, const char *log, const char *src, const char *name, const char *const *origin,
                      int norigin) {
    size_t nlen = strlen(name);
    int found = 0;
    for (const char *p = log; *p;) {
        const char *eol = strchr(p, '\n');
        int len = (int)(eol ? eol - p : (ptrdiff_t)strlen(p));
        int line = 0;
        const char *rest = NULL;
        if ((size_t)len > nlen + 3 && strncmp(p, name, nlen) == 0 && p[nlen] == '(') {
            char *end;
            long v = strtol(p + nlen + 1, &end, 10);
            if (end[0] == ')' && end[1] == ':' && v > 0 && v < 1000000) {
                line = (int)v;
                rest = end + 2;
                while (*rest == ' ') rest++;
            }
        }
        if (rest) {
            found++;
            if (found <= NVRTC_MAX_REPORTED) {
                int is_warning = strncmp(rest, "warning", 7) == 0;
                msg_add(m, "%s:%d: %s%.*s%s\n", name, line, is_warning ? "error: " : "", len - (int)(rest - p), rest,
                        is_warning ? " (warnings are errors)" : "");
                const char *s;
                int slen;
                if (source_line(src, line, &s, &slen)) msg_add(m, "    %5d | %.*s\n", line, slen, s);
                if (origin && line <= norigin && origin[line - 1]) msg_add(m, "  in %s\n", origin[line - 1]);
            }
        } else if (!found && len > 0 && strncmp(p, "Remark", 6) != 0 && p[0] != ' ') {
            // a diagnostic without a line (a bad option, an internal error)
            msg_add(m, "%.*s\n", len, p);
        }
        p = eol ? eol + 1 : p + len;
    }
    if (found > NVRTC_MAX_REPORTED) msg_add(m, "(%d more diagnostics)\n", found - NVRTC_MAX_REPORTED);
    return found;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// Moves ptxas's resource report out of log into a malloc'd *info: lines that
// start with "ptxas info", and those that continue them ("ptxas         .
// 0 bytes stack frame, 0 bytes spill stores, ...", NVRTC 13; or indented). What stays are diagnostics.
static int split_ptxas_info(char *log, char **info) {
    size_t n = strlen(log), o = 0, k = 0;
    char *in = malloc(n + 1);
    if (!in) return -1;
    int cont = 0;
    for (char *p = log; *p;) {
        size_t len = strcspn(p, "\n") + (p[strcspn(p, "\n")] == '\n');
        size_t sp = strspn(p + 5, " \t");
        int is_info = !strncmp(p, "ptxas info", 10) || (!strncmp(p, "ptxas", 5) && sp && p[5 + sp] == '.') ||
                      (cont && (*p == ' ' || *p == '\t'));
        cont = is_info;
        memmove(is_info ? in + k : log + o, p, len);
        if (is_info) k += len;
        else o += len;
        p += len;
    }
    log[o] = 0, in[k] = 0;
    *info = in;
    return 0;
}

static int compile(const char *src, const char *name, const char *arch, const char *const *origin, int norigin,
                   CudaBinary *out, char **info, char *err, size_t errcap) {
    memset(out, 0, sizeof *out);
    if (info) *info = NULL;
    Msg m = {err, errcap, 0};
    if (errcap) err[0] = 0;
    if (!nvrtc_arch_ok(arch)) {
        msg_add(&m, "unknown CUDA architecture '%s'; expected sm_80, sm_89, sm_90 or a newer sm_XX", arch);
        return -1;
    }
    char archopt[32];
    snprintf(archopt, sizeof archopt, "-arch=%s", arch);
    const char *opts[] = {archopt, "--std=c++17", "-default-device", "-lineinfo", "--ptxas-options=-v"};
    int nopts = info ? 5 : 4;
    nvrtcProgram prog;
    nvrtcResult r = nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) {
        msg_add(&m, "NVRTC %s: cannot create a program: %s", nvrtc_version_str(), nvrtcGetErrorString(r));
        return -1;
    }
    double t0 = now_s();
    r = nvrtcCompileProgram(prog, nopts, opts);
    out->seconds = now_s() - t0;
    size_t loglen = 0;
    char *log = NULL;
    if (nvrtcGetProgramLogSize(prog, &loglen) == NVRTC_SUCCESS && loglen > 1 && (log = malloc(loglen)) &&
        nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS)
        log[0] = 0;
    if (info && log && split_ptxas_info(log, info) != 0) {
        msg_add(&m, "out of memory reading NVRTC's log");
        free(log);
        nvrtcDestroyProgram(&prog);
        return -1;
    }
    int has_log = log && log[0];
    if (r != NVRTC_SUCCESS || has_log) {
        msg_add(&m, "NVRTC %s, %s: %s\n", nvrtc_version_str(), arch,
                r != NVRTC_SUCCESS ? nvrtcGetErrorString(r) : "warnings (treated as errors)");
        if (has_log) report_log(&m, log, src, name, origin, norigin);
        while (m.len > 0 && err[m.len - 1] == '\n') err[--m.len] = 0; // no trailing newline, as other messages
        free(log);
        if (info) free(*info), *info = NULL;
        nvrtcDestroyProgram(&prog);
        return -1;
    }
    free(log);
    size_t nc = 0, np = 0;
    if ((r = nvrtcGetCUBINSize(prog, &nc)) != NVRTC_SUCCESS || (r = nvrtcGetPTXSize(prog, &np)) != NVRTC_SUCCESS ||
        nc == 0 || np == 0) {
        msg_add(&m, "NVRTC %s, %s: no cubin or PTX: %s", nvrtc_version_str(), arch, nvrtcGetErrorString(r));
        nvrtcDestroyProgram(&prog);
        return -1;
    }
    out->cubin = malloc(nc);
    out->ptx = malloc(np);
    if (!out->cubin || !out->ptx || nvrtcGetCUBIN(prog, (char *)out->cubin) != NVRTC_SUCCESS ||
        nvrtcGetPTX(prog, out->ptx) != NVRTC_SUCCESS) {
        msg_add(&m, "NVRTC %s, %s: cannot read back the cubin or PTX", nvrtc_version_str(), arch);
        nvrtcDestroyProgram(&prog);
        nvrtc_binary_free(out);
        return -1;
    }
    nvrtcDestroyProgram(&prog);
    out->cubin_len = nc;
    out->ptx_len = strnlen(out->ptx, np);
    snprintf(out->arch, sizeof out->arch, "%s", arch);
    return 0;
}

// The compile cache. NVRTC's output is a function of its version, the
// options (fixed here but for the arch), the program's name and its
// source, so a compile is kept under a 128-bit hash of those, in
// DIR/nvrtc-HASH.bin:
//
//     "MTNVRTC1"  magic
//     u64 x 4     the source's length, the cubin's, the PTX's, a hash of cubin and PTX
//     cubin, PTX
//
// An entry that does not read back whole and with its hash is compiled
// again and rewritten; entries are written to a temporary file and renamed,
// so concurrent mtc runs see an entry whole or not at all. A hit touches
// its entry; past CACHE_MAX_BYTES the least recently used entries go.
// Failures to read or write the cache are never errors: it only saves time.

enum { CACHE_MAX_ENTRIES = 4096 };
static const long long CACHE_MAX_BYTES = 1ll << 30;

typedef struct CacheKey {
    uint64_t h[2];
} CacheKey;

// Two independent 64-bit hashes, FNV-1a and a multiply-xorshift, each
// chained over the parts (NUL-separated).
static void key_add(CacheKey *k, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i <= n; i++) {
        uint8_t c = i < n ? p[i] : 0;
        k->h[0] = (k->h[0] ^ c) * 0x100000001b3ull;
        uint64_t x = (k->h[1] ^ c) * 0x9e3779b97f4a7c15ull;
        k->h[1] = x ^ (x >> 29);
    }
}

static CacheKey key_new(void) {
    return (CacheKey){{0xcbf29ce484222325ull, 0x243f6a8885a308d3ull}};
}

static uint64_t payload_hash(const CudaBinary *b) {
    CacheKey k = key_new();
    key_add(&k, b->cubin, b->cubin_len);
    key_add(&k, b->ptx, b->ptx_len);
    return k.h[0] ^ k.h[1];
}

// The cache folder: $MT_CACHE_DIR ("off": none), else $XDG_CACHE_HOME/mt,
// else $HOME/.cache/mt; created if missing. 0 when there is none.
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

static int cache_path(char *path, size_t cap, const char *src, const char *name, const char *arch) {
    char dir[4096];
    if (!cache_dir(dir, sizeof dir)) return 0;
    CacheKey k = key_new();
    const char *version = nvrtc_version_str();
    key_add(&k, version, strlen(version));
    key_add(&k, arch, strlen(arch));
    key_add(&k, name, strlen(name));
    key_add(&k, src, strlen(src));
    snprintf(path, cap, "%s/nvrtc-%016llx%016llx.bin", dir, (unsigned long long)k.h[0], (unsigned long long)k.h[1]);
    return 1;
}

static const char CACHE_MAGIC[8] = {'M', 'T', 'N', 'V', 'R', 'T', 'C', '1'};

// The entry at path into *out, or -1 when it is missing or not whole.
static int cache_read(const char *path, size_t src_len, const char *arch, CudaBinary *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char magic[8];
    uint64_t head[4]; // source length, cubin length, PTX length, payload hash
    int ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, CACHE_MAGIC, 8) && fread(head, 8, 4, f) == 4 &&
             head[0] == src_len && head[1] > 0 && head[1] < (1ull << 31) && head[2] > 0 && head[2] < (1ull << 31);
    if (ok) {
        out->cubin = malloc(head[1]);
        out->ptx = malloc(head[2] + 1);
        ok = out->cubin && out->ptx && fread(out->cubin, 1, head[1], f) == head[1] &&
             fread(out->ptx, 1, head[2], f) == head[2] && fgetc(f) == EOF;
    }
    fclose(f);
    if (ok) {
        out->ptx[head[2]] = 0;
        out->cubin_len = head[1];
        out->ptx_len = head[2];
        ok = strlen(out->ptx) == out->ptx_len && payload_hash(out) == head[3];
    }
    if (!ok) {
        nvrtc_binary_free(out);
        return -1;
    }
    snprintf(out->arch, sizeof out->arch, "%s", arch);
    return 0;
}

typedef struct CacheEntry {
    char name[64];
    time_t used;
    long long bytes;
} CacheEntry;

static int older_first(const void *a, const void *b) {
    time_t x = ((const CacheEntry *)a)->used, y = ((const CacheEntry *)b)->used;
    return (x > y) - (x < y);
}

// Removes the least recently used entries of dir until the rest take at
// most 3/4 of CACHE_MAX_BYTES, once they take more than all of it.
static void cache_trim(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    CacheEntry *e = malloc(CACHE_MAX_ENTRIES * sizeof *e); // (CACHE_MAX_ENTRIES) the entries seen
    int n = 0;
    long long total = 0;
    char path[4300];
    for (struct dirent *de; e && (de = readdir(d)) && n < CACHE_MAX_ENTRIES;) {
        struct stat st;
        if (strncmp(de->d_name, "nvrtc-", 6) != 0 || strlen(de->d_name) >= sizeof e->name) continue;
        snprintf(path, sizeof path, "%.4200s/%.63s", dir, de->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        memcpy(e[n].name, de->d_name, strlen(de->d_name) + 1);
        e[n].used = st.st_mtime;
        e[n].bytes = (long long)st.st_size;
        total += e[n++].bytes;
    }
    closedir(d);
    if (e && total > CACHE_MAX_BYTES) {
        qsort(e, (size_t)n, sizeof *e, older_first);
        for (int i = 0; i < n && total > CACHE_MAX_BYTES / 4 * 3; i++) {
            snprintf(path, sizeof path, "%.4200s/%.63s", dir, e[i].name);
            if (unlink(path) == 0) total -= e[i].bytes;
        }
    }
    free(e);
}

static void cache_write(const char *path, size_t src_len, const CudaBinary *b) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%.4200s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    uint64_t head[4] = {src_len, b->cubin_len, b->ptx_len, payload_hash(b)};
    int ok = fwrite(CACHE_MAGIC, 1, 8, f) == 8 && fwrite(head, 8, 4, f) == 4 &&
             fwrite(b->cubin, 1, b->cubin_len, f) == b->cubin_len && fwrite(b->ptx, 1, b->ptx_len, f) == b->ptx_len;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return;
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = 0;
    cache_trim(dir);
}

int nvrtc_compile(const char *src, const char *name, const char *arch, const char *const *origin, int norigin,
                  CudaBinary *out, char *err, size_t errcap) {
    char path[4200];
    int cached = nvrtc_arch_ok(arch) && cache_path(path, sizeof path, src, name, arch);
    double t0 = now_s();
    if (cached && cache_read(path, strlen(src), arch, out) == 0) {
        utime(path, NULL); // used now, for cache_trim
        out->seconds = now_s() - t0;
        if (errcap) err[0] = 0;
        return 0;
    }
    int rc = compile(src, name, arch, origin, norigin, out, NULL, err, errcap);
    if (rc == 0 && cached) cache_write(path, strlen(src), out);
    return rc;
}

int nvrtc_compile_report(const char *src, const char *name, const char *arch, CudaBinary *out, char **info, char *err,
                         size_t errcap) {
    int rc = compile(src, name, arch, NULL, 0, out, info, err, errcap);
    if (rc != 0) free(*info), *info = NULL;
    return rc;
}

void nvrtc_binary_free(CudaBinary *b) {
    free(b->cubin);
    free(b->ptx);
    memset(b, 0, sizeof *b);
}
