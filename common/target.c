// target.c: reads a target profile (target.h; the format is documented in
// schedules/README.md). One pass over the lines; the first error ends it.
#include "common/target.h"
#include "common/io.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// What a key's value must be.
typedef enum KeyKind {
    KEY_WORD,   // name: one word of letters, digits, '_', '-', '.', '+'
    KEY_ARCH,   // one of the known architectures
    KEY_NUMBER, // a positive finite number
    KEY_COUNT,  // a positive whole number
    KEY_SHARE,  // a number in (0, 1]
    KEY_BOOL,   // true or false
} KeyKind;

typedef struct KeySpec {
    const char *key;
    KeyKind kind;
    size_t offset;    // of the field in Target
    const char *unit; // for messages
    int required;
    double fallback; // the value of an optional key left out
} KeySpec;

#define F(field) offsetof(Target, field)

// Every key, in the order schedules/README.md documents them.
static const KeySpec KEYS[] = {
    {"name", KEY_WORD, F(name), "a word", 1, 0},
    {"arch", KEY_ARCH, F(arch), "a word", 1, 0},
    {"device_memory", KEY_NUMBER, F(device_memory), "bytes", 1, 0},
    {"hbm_bandwidth", KEY_NUMBER, F(hbm_bandwidth), "bytes/s", 1, 0},
    {"matrix_flops_f32", KEY_NUMBER, F(matrix_flops_f32), "FLOP/s", 1, 0},
    {"matrix_flops_bf16", KEY_NUMBER, F(matrix_flops_bf16), "FLOP/s", 1, 0},
    {"vector_flops", KEY_NUMBER, F(vector_flops), "FLOP/s", 1, 0},
    {"h2d_bandwidth", KEY_NUMBER, F(h2d_bandwidth), "bytes/s", 1, 0},
    {"d2h_bandwidth", KEY_NUMBER, F(d2h_bandwidth), "bytes/s", 1, 0},
    {"link_duplex", KEY_BOOL, F(link_duplex), "true or false", 1, 0},
    {"host_memory", KEY_NUMBER, F(host_memory), "bytes", 1, 0},
    {"host_memory_bandwidth", KEY_NUMBER, F(host_memory_bandwidth), "bytes/s", 1, 0},
    {"host_cores", KEY_COUNT, F(host_cores), "cores", 1, 0},
    {"host_adamw_bandwidth", KEY_NUMBER, F(host_adamw_bandwidth), "bytes/s", 0, 0}, // left out: host_memory_bandwidth
    {"host_grads_add_bandwidth", KEY_NUMBER, F(host_grads_add_bandwidth), "bytes/s", 0, 0}, // left out: AdamW's
    {"kernel_launch_s", KEY_NUMBER, F(kernel_launch_s), "seconds", 0, TARGET_DEFAULT_KERNEL_LAUNCH_S},
    {"gemm_call_s", KEY_NUMBER, F(gemm_call_s), "seconds", 0, 0},
    {"transcendental_s", KEY_NUMBER, F(transcendental_s), "seconds", 0, 0},
    {"transcendental_f64_s", KEY_NUMBER, F(transcendental_f64_s), "seconds", 0, 0},  // left out: transcendental_s
    {"attention_plain_flops", KEY_NUMBER, F(attention_plain_flops), "FLOP/s", 0, 0}, // left out: vector_flops
    {"gemm_one_thread_flops", KEY_NUMBER, F(gemm_one_thread_flops), "FLOP/s", 0, 0}, // left out: the matrix rate
    {"bf16_convert_s", KEY_NUMBER, F(bf16_convert_s), "seconds", 0, 0},
    {"gemm_efficiency", KEY_SHARE, F(gemm_efficiency), "a share of peak", 0, TARGET_DEFAULT_GEMM_EFFICIENCY},
    {"moe_gemm_efficiency", KEY_SHARE, F(moe_gemm_efficiency), "a share of peak", 0, 0}, // left out: gemm_efficiency
    {"duplex_efficiency", KEY_SHARE, F(duplex_efficiency), "a share of each direction's rate", 0,
     TARGET_DEFAULT_DUPLEX_EFFICIENCY},
    {"attention_tc_fraction", KEY_SHARE, F(attention_tc_fraction), "a share of matrix_flops_bf16", 0,
     TARGET_DEFAULT_ATTENTION_TC_FRACTION},
    {"attention_tc_wide_fraction", KEY_SHARE, F(attention_tc_wide_fraction), "a share of matrix_flops_bf16", 0, 0},
    {"attention_tc_narrow_fraction", KEY_SHARE, F(attention_tc_narrow_fraction), "a share of matrix_flops_bf16", 0, 0},
    {"attention_fp32_fraction", KEY_SHARE, F(attention_fp32_fraction), "a share of matrix_flops_bf16", 0,
     TARGET_DEFAULT_ATTENTION_FP32_FRACTION},
    {"gpus_per_node", KEY_COUNT, F(gpus_per_node), "GPUs", 0, 1},
    {"nodes", KEY_COUNT, F(nodes), "nodes", 0, 1},
    {"gpu_link_bandwidth", KEY_NUMBER, F(gpu_link_bandwidth), "bytes/s", 0, 0},
    {"gpu_link_latency_s", KEY_NUMBER, F(gpu_link_latency_s), "seconds", 0, 0},
    {"node_link_bandwidth", KEY_NUMBER, F(node_link_bandwidth), "bytes/s", 0, 0},
    {"node_link_latency_s", KEY_NUMBER, F(node_link_latency_s), "seconds", 0, 0},
    {"tier_capacity", KEY_NUMBER, F(tier_capacity), "bytes", 0, 0},
    {"tier_read_bandwidth", KEY_NUMBER, F(tier_read_bandwidth), "bytes/s", 0, 0},
    {"tier_write_bandwidth", KEY_NUMBER, F(tier_write_bandwidth), "bytes/s", 0, 0},
};
#define NKEYS (sizeof KEYS / sizeof KEYS[0])
// The tier's three keys, last in KEYS: all or none.
#define KEY_TIER_FIRST (NKEYS - 3)

static const char *const ARCHS[] = {"sm_80", "sm_89", "sm_90", "cpu"};
#define NARCHS (sizeof ARCHS / sizeof ARCHS[0])

// The longest piece of the user's text a message quotes.
#define QUOTE_MAX 60

// Writes "path:line: error: message" (line 0: "path: error: message") into
// err and returns -1.
static int fail(char *err, size_t errcap, const char *path, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(char *err, size_t errcap, const char *path, int line, const char *fmt, ...) {
    if (!err || errcap == 0) return -1;
    int n = line > 0 ? snprintf(err, errcap, "%s:%d: error: ", path, line) : snprintf(err, errcap, "%s: error: ", path);
    if (n >= 0 && (size_t)n < errcap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + n, errcap - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

// Trims [*s, *e) of spaces on both sides.
static void trim(const char **s, const char **e) {
    while (*s < *e && is_space(**s)) (*s)++;
    while (*e > *s && is_space((*e)[-1])) (*e)--;
}

static int is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == '+';
}

static int is_key_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

static int span_is(const char *s, size_t n, const char *word) { return strlen(word) == n && memcmp(s, word, n) == 0; }

// "name, arch, ..." into buf: the known keys, for the unknown-key message.
static void known_keys(char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < NKEYS && n < cap; i++) {
        int w = snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", KEYS[i].key);
        if (w < 0) break;
        n += (size_t)w;
    }
}

// Parses a number the way a profile writes it: decimal or scientific, no
// sign, no hex, no inf or nan. Returns 0 with *out, or -1.
static int parse_number(const char *s, size_t n, double *out) {
    if (n == 0 || n > 64 || !((s[0] >= '0' && s[0] <= '9') || s[0] == '.')) return -1;
    for (size_t i = 0; i < n; i++) // strtod would take hex ("0x10") too
        if (!s[i] || !strchr("0123456789.eE+-", s[i])) return -1;
    char buf[72];
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (end != buf + n || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

// Checks and stores one value. line: for messages.
static int set_value(const KeySpec *k, const char *v, size_t n, Target *t, const char *path, int line, char *err,
                     size_t errcap) {
    int q = n > QUOTE_MAX ? QUOTE_MAX : (int)n;
    const char *more = n > QUOTE_MAX ? "..." : "";
    char *field = (char *)t + k->offset;
    switch (k->kind) {
    case KEY_WORD:
    case KEY_ARCH: {
        size_t cap = k->kind == KEY_WORD ? sizeof t->name : sizeof t->arch;
        int ok = n < cap;
        for (size_t i = 0; i < n && ok; i++) ok = is_word_char(v[i]);
        if (!ok)
            return fail(err, errcap, path, line,
                        "'%s' must be one word of letters, digits, '_', '-', '.' or '+' (at most %zu characters), "
                        "got '%.*s%s'",
                        k->key, cap - 1, q, v, more);
        if (k->kind == KEY_ARCH) {
            size_t a = 0;
            while (a < NARCHS && !span_is(v, n, ARCHS[a])) a++;
            if (a == NARCHS)
                return fail(err, errcap, path, line, "unknown arch '%.*s'; known: sm_80, sm_89, sm_90, cpu", q, v);
        }
        memcpy(field, v, n);
        field[n] = 0;
        return 0;
    }
    case KEY_BOOL:
        if (span_is(v, n, "true") || span_is(v, n, "false")) {
            *(int *)(void *)field = v[0] == 't';
            return 0;
        }
        return fail(err, errcap, path, line, "'%s' must be true or false, got '%.*s%s'", k->key, q, v, more);
    case KEY_NUMBER:
    case KEY_COUNT:
    case KEY_SHARE: {
        double x;
        if (parse_number(v, n, &x) != 0 || !(x > 0))
            return fail(err, errcap, path, line,
                        "'%s' must be a positive finite number (%s; decimal or scientific like 4.8e12), got "
                        "'%.*s%s'",
                        k->key, k->unit, q, v, more);
        if (k->kind == KEY_COUNT && x != floor(x))
            return fail(err, errcap, path, line, "'%s' must be a whole number of %s, got '%.*s'", k->key, k->unit, q,
                        v);
        if (k->kind == KEY_SHARE && x > 1)
            return fail(err, errcap, path, line, "'%s' is a share of peak, at most 1, got '%.*s'", k->key, q, v);
        *(double *)(void *)field = x;
        return 0;
    }
    }
    return fail(err, errcap, path, line, "internal error: key '%s' of unknown kind", k->key);
}

// Reads the profile text (len bytes) of path into *t.
static int parse_profile(const char *path, const char *text, size_t len, Target *t, char *err, size_t errcap) {
    int first_line[NKEYS] = {0}; // 0: not given yet
    const char *p = text, *end = text + len;
    for (int line = 1; p < end; line++) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        const char *s = p, *e = eol;
        p = eol < end ? eol + 1 : end;
        if (memchr(s, 0, (size_t)(e - s)))
            return fail(err, errcap, path, line, "binary file (a NUL byte on this line); expected a text profile");
        const char *hash = memchr(s, '#', (size_t)(e - s));
        if (hash) e = hash; // a comment runs to the end of the line
        trim(&s, &e);
        if (s == e) continue;

        // key = value
        const char *eq = memchr(s, '=', (size_t)(e - s));
        const char *ks = s, *ke = eq ? eq : e;
        trim(&ks, &ke);
        int key_ok = eq && ks < ke;
        for (const char *c = ks; key_ok && c < ke; c++) key_ok = is_key_char(*c);
        if (!key_ok) {
            int n = (int)(e - s) > QUOTE_MAX ? QUOTE_MAX : (int)(e - s);
            return fail(err, errcap, path, line, "expected 'key = value' with a lower-case key, got '%.*s%s'", n, s,
                        e - s > QUOTE_MAX ? "..." : "");
        }
        size_t k = 0;
        while (k < NKEYS && !span_is(ks, (size_t)(ke - ks), KEYS[k].key)) k++;
        if (k == NKEYS) {
            char list[512];
            known_keys(list, sizeof list);
            int n = (int)(ke - ks) > QUOTE_MAX ? QUOTE_MAX : (int)(ke - ks);
            return fail(err, errcap, path, line, "unknown key '%.*s'; known keys: %s", n, ks, list);
        }
        if (first_line[k])
            return fail(err, errcap, path, line, "'%s' given twice (first on line %d)", KEYS[k].key, first_line[k]);
        first_line[k] = line;
        const char *vs = eq + 1, *ve = e;
        trim(&vs, &ve);
        if (vs == ve) return fail(err, errcap, path, line, "'%s' has no value (%s)", KEYS[k].key, KEYS[k].unit);
        if (set_value(&KEYS[k], vs, (size_t)(ve - vs), t, path, line, err, errcap) != 0) return -1;
    }

    // every required key given; the optional ones take their defaults
    char missing[512];
    size_t nmissing = 0, n = 0;
    missing[0] = 0;
    for (size_t k = 0; k < NKEYS; k++) {
        if (first_line[k]) continue;
        if (!KEYS[k].required) {
            *(double *)(void *)((char *)t + KEYS[k].offset) = KEYS[k].fallback;
            continue;
        }
        if (n < sizeof missing) {
            int w = snprintf(missing + n, sizeof missing - n, "%s'%s'", nmissing ? ", " : "", KEYS[k].key);
            if (w > 0) n += (size_t)w;
        }
        nmissing++;
    }
    if (nmissing) return fail(err, errcap, path, 0, "missing required key%s %s", nmissing > 1 ? "s" : "", missing);
    if (t->host_adamw_bandwidth == 0) t->host_adamw_bandwidth = t->host_memory_bandwidth; // left out (fallback 0)
    if (t->host_grads_add_bandwidth == 0) t->host_grads_add_bandwidth = t->host_adamw_bandwidth; // left out
    if (t->moe_gemm_efficiency == 0) t->moe_gemm_efficiency = t->gemm_efficiency;                // left out
    if (t->gpus_per_node > 1 && t->gpu_link_bandwidth == 0)
        return fail(err, errcap, path, 0,
                    "%g GPUs a node need 'gpu_link_bandwidth' (bytes/s a direction between two "
                    "of them)",
                    t->gpus_per_node);
    if (t->nodes > 1 && t->node_link_bandwidth == 0)
        return fail(err, errcap, path, 0,
                    "%g nodes need 'node_link_bandwidth' (bytes/s a direction from each GPU to "
                    "the other nodes)",
                    t->nodes);
    int tier_keys = !!first_line[KEY_TIER_FIRST] + !!first_line[KEY_TIER_FIRST + 1] + !!first_line[KEY_TIER_FIRST + 2];
    if (tier_keys != 0 && tier_keys != 3)
        return fail(err, errcap, path, 0,
                    "the NVMe tier needs all three of 'tier_capacity', 'tier_read_bandwidth' and "
                    "'tier_write_bandwidth', or none");
    return 0;
}

// A bare NAME: no '/', no ".target" suffix, and no file of that name.
static int is_bare_name(const char *name) {
    size_t n = strlen(name), k = strlen(".target");
    if (n == 0 || strchr(name, '/')) return 0;
    if (n >= k && strcmp(name + n - k, ".target") == 0) return 0;
    return access(name, F_OK) != 0;
}

#ifndef MT_SCHEDULES_DIR
#define MT_SCHEDULES_DIR "schedules"
#endif

int target_load(const char *name, Target *t, char *err, size_t errcap) {
    int bare = is_bare_name(name);
    char *path = NULL;
    if (bare) { // NAME.target here (where mtrun --calibrate writes), schedules/NAME.target here, else in the profiles
                // mt was built with
        size_t cap = strlen(name) + strlen(MT_SCHEDULES_DIR) + sizeof "schedules/.target";
        path = malloc(cap);
        if (!path) return fail(err, errcap, name, 0, "out of memory");
        snprintf(path, cap, "%s.target", name);
        if (access(path, F_OK) != 0) snprintf(path, cap, "schedules/%s.target", name);
        if (access(path, F_OK) != 0) snprintf(path, cap, "%s/%s.target", MT_SCHEDULES_DIR, name);
    }
    const char *shown = bare ? path : name;
    char *text;
    size_t len;
    int rc = io_read_file(shown, &text, &len);
    if (rc != 0) {
        if (bare)
            snprintf(path, strlen(name) + strlen(MT_SCHEDULES_DIR) + sizeof "schedules/.target", "schedules/%s.target",
                     name); // name what the user's NAME means here
        fail(err, errcap, shown, 0, "cannot read the target profile: %s%s", strerror(rc),
             bare ? " (a bare NAME means NAME.target or schedules/NAME.target in the current directory, "
                    "or " MT_SCHEDULES_DIR "/NAME.target)"
                  : "");
        free(path);
        return -1;
    }
    Target tmp;
    memset(&tmp, 0, sizeof tmp);
    rc = parse_profile(shown, text, len, &tmp, err, errcap);
    free(text);
    free(path);
    if (rc == 0) *t = tmp;
    return rc;
}
