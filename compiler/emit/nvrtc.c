// nvrtc.c: one CUDA C source -> cubin + PTX through NVRTC, with NVRTC's log
// mapped back to the generated lines and the ops they came from. Built
// without the CUDA toolkit (MT_HAVE_NVRTC undefined: CMake found none, or
// -DMT_CUDA=OFF), every compile fails saying so; the rest (cache, messages)
// is the same.
#include "compiler/emit/nvrtc.h"

#ifdef MT_HAVE_NVRTC
#include <nvrtc.h>
#endif

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cache.h"

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
    if (strncmp(arch, "sm_", 3) != 0 || !isdigit((unsigned char)arch[3]) || !isdigit((unsigned char)arch[4])) return 0;
    for (const char *p = arch + 5; *p; p++)
        if (!isalnum((unsigned char)*p)) return 0; // sm_90a
    return atoi(arch + 3) >= 80 && strlen(arch) < sizeof(((CudaBinary *)0)->arch);
}

const char *nvrtc_version_str(void) {
#ifndef MT_HAVE_NVRTC
    return "none";
#else
    static char buf[32];
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
    snprintf(buf, sizeof buf, "%d.%d", major, minor);
    return buf;
#endif
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
#ifndef MT_HAVE_NVRTC
    (void)src, (void)name, (void)origin, (void)norigin, (void)now_s, (void)report_log, (void)split_ptxas_info;
    msg_add(&m,
            "this mtc was built without the CUDA toolkit, so it has no NVRTC to compile the kernels of a plan for "
            "a GPU target (%s); plan for a cpu target (mtrun --calibrate, then --target local), or build mt with the "
            "toolkit (Debian's nvidia-cuda-toolkit, or NVIDIA's installer in /usr/local/cuda)",
            arch);
    return -1;
#else
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
#endif
}

// The compile cache (common/cache.h). NVRTC's output is a function of its
// version, the options (fixed here but for the arch), the program's name and
// its source: an entry "nvrtc" under their hash, whose blob is
//
//     u64 x 2     the source's length, the cubin's length
//     cubin, PTX  (the PTX without its NUL)

static const long long NVRTC_CACHE_MAX_BYTES = 1ll << 30;

// The cached compile in blob (len bytes) into *out, or -1 when it is not one of src_len.
static int from_blob(const uint8_t *blob, size_t len, size_t src_len, const char *arch, CudaBinary *out) {
    memset(out, 0, sizeof *out);
    uint64_t head[2]; // the source's length, the cubin's
    if (len < sizeof head) return -1;
    memcpy(head, blob, sizeof head);
    if (head[0] != src_len || head[1] == 0 || head[1] >= len - sizeof head) return -1;
    size_t np = len - sizeof head - head[1];
    out->cubin = malloc(head[1]);
    out->ptx = malloc(np + 1);
    if (!out->cubin || !out->ptx) {
        nvrtc_binary_free(out);
        return -1;
    }
    memcpy(out->cubin, blob + sizeof head, head[1]);
    memcpy(out->ptx, blob + sizeof head + head[1], np);
    out->ptx[np] = 0;
    out->cubin_len = head[1];
    out->ptx_len = np;
    if (strlen(out->ptx) != np) {
        nvrtc_binary_free(out);
        return -1;
    }
    snprintf(out->arch, sizeof out->arch, "%s", arch);
    return 0;
}

static void cache_keep(const char *path, size_t src_len, const CudaBinary *b) {
    uint64_t head[2] = {src_len, b->cubin_len};
    size_t len = sizeof head + b->cubin_len + b->ptx_len;
    uint8_t *blob = malloc(len); // (len) head, cubin, PTX
    if (!blob) return;
    memcpy(blob, head, sizeof head);
    memcpy(blob + sizeof head, b->cubin, b->cubin_len);
    memcpy(blob + sizeof head + b->cubin_len, b->ptx, b->ptx_len);
    cache_write(path, blob, len, NVRTC_CACHE_MAX_BYTES);
    free(blob);
}

int nvrtc_compile(const char *src, const char *name, const char *arch, const char *const *origin, int norigin,
                  CudaBinary *out, char *err, size_t errcap) {
    CacheKey k = cache_key();
    const char *parts[] = {nvrtc_version_str(), arch, name, src};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) cache_key_add(&k, parts[i], strlen(parts[i]));
    char path[4300];
    int cached = nvrtc_arch_ok(arch) && cache_path(path, sizeof path, "nvrtc", &k);
    double t0 = now_s();
    size_t len = 0;
    uint8_t *blob = cached ? cache_read(path, &len) : NULL;
    int hit = blob && from_blob(blob, len, strlen(src), arch, out) == 0;
    free(blob);
    if (hit) {
        out->seconds = now_s() - t0;
        if (errcap) err[0] = 0;
        return 0;
    }
    // a cold compile takes seconds to a minute (13 to 49 s for gemma2-9b): say so when it starts and ends
    int lines = 0;
    for (const char *c = src; *c; c++) lines += *c == '\n';
#ifdef MT_HAVE_NVRTC
    fprintf(stderr, "mtc: NVRTC %s compiling %s for %s (%d lines of CUDA C, not in the compile cache)...\n",
            nvrtc_version_str(), name, arch, lines);
#endif
    int rc = compile(src, name, arch, origin, norigin, out, NULL, err, errcap);
    if (rc == 0) fprintf(stderr, "mtc: NVRTC compiled %s for %s in %.1f s\n", name, arch, out->seconds);
    if (rc == 0 && cached) cache_keep(path, strlen(src), out);
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
