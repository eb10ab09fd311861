#include "runtime/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "common/storage.h"
#include "runtime/replay.h"

// One .npy file (format 1.0): descr "<i4" or "<f4", C order, shape (rank).
static int write_npy(const char *path, const char *descr, const int64_t *shape, int rank, const void *data, size_t elem,
                     char *err, size_t errcap) {
    char dict[256];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    int64_t count = 1;
    for (int i = 0; i < rank; i++) {
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld, ", (long long)shape[i]);
        count *= shape[i];
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    int hlen = (n + 1 + 10 + 63) / 64 * 64 - 10; // the header padded with spaces, ending in '\n', to 64 bytes
    memset(dict + n, ' ', (size_t)(hlen - n - 1));
    dict[hlen - 1] = '\n';
    unsigned char pre[10] =
        {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)hlen, f) == (size_t)hlen &&
             fwrite(data, elem, (size_t)count, f) == (size_t)count;
    if (f && fclose(f) != 0) ok = 0;
    return ok ? 0 : io_fail(err, errcap, path, "cannot write");
}

// The logits' width V of the tail's losses (0: no cross_entropy).
static int64_t logits_width(const Plan *p) {
    const Part *tail = &p->graph->parts[PART_TAIL];
    for (int i = 0; i < tail->nfwd; i++) {
        const Node *n = tail->nodes.items[i];
        if (n->op == OP_CROSS_ENTROPY) return n->in[0]->shape.dims[n->in[0]->shape.rank - 1];
    }
    return 0;
}

// The plan's own forward over the batch (the eval stream, replayed by rp on
// the run's backend) with its last instruction that runs, the tail's
// forward, run here a piece at a time instead: up to and including each
// cross_entropy, after which the logits it read are copied out of the arena
// into out (B, T, V), at the rows its targets are (all of them, or under row
// tiling the slice of T its targets' OP_SLICE takes), as reference_run's
// tail_logits places them. A later chunk's nodes may reuse an earlier
// chunk's logits buffer, never before that chunk's loss read it; a plan
// whose tail overwrites logits before their cross_entropy runs is refused.
// 0, or -1 with a message.
static int plan_logits(const Plan *p, Replay *rp, const int32_t *const *inputs, const int32_t *seg_start, float *out,
                       char *err, size_t errcap) {
    const Graph *g = p->graph;
    const Part *tail = &g->parts[PART_TAIL];
    const int64_t *off = plan_offsets(p, PART_TAIL, 0);
    DType compute = g->train.compute;
    int64_t B = g->train.batch, T = g->train.seq, found = 0;
    int run = -1; // the eval stream's tail forward
    for (int i = 0; i < p->neval; i++)
        if (p->eval[i].kind == INS_RUN) run = i;
    if (run < 0 || p->eval[run].part != PART_TAIL || p->eval[run].from != 0 || p->eval[run].to != tail->nfwd) {
        snprintf(err, errcap, "the plan's eval stream does not end with the tail's forward");
        return -1;
    }
    float loss;
    rp->seg_start = seg_start;
    if (replay(rp, p->eval, run, inputs, 1, &loss, err, errcap) != 0) return -1;
    Backend *be = rp->be;
    for (int i = 0, from = 0; i < tail->nfwd; i++) {
        const Node *n = tail->nodes.items[i], *tg = n->op == OP_CROSS_ENTROPY ? n->in[1] : NULL;
        if (!tg) continue;
        const Node *lg = storage_base(n->in[0]);
        int64_t a = off[lg->id], bytes = storage_bytes(compute, lg);
        for (int k = lg->id + 1; k <= i; k++) { // nothing between the logits and their loss writes over them
            const Node *m = tail->nodes.items[k];
            if (m->op == OP_VIEW || m->op == OP_RESHAPE || off[k] < 0) continue;
            if (off[k] < a + bytes && a < off[k] + storage_bytes(compute, m)) {
                snprintf(err, errcap,
                         "the plan's tail writes node %d over the logits (node %d) before its loss reads "
                         "them; run with --reference",
                         k, lg->id);
                return -1;
            }
        }
        be->run(be, NULL, PART_TAIL, from, i + 1, 0, 0);
        from = i + 1;
        int64_t t0 = tg->op == OP_SLICE && tg->axis == 1 ? tg->offset : 0;
        const Shape *s = &n->in[0]->shape; // (B, Tc, V)
        if (s->rank != 3 || s->dims[0] != B || t0 + s->dims[1] > T || (tg->op != OP_SLICE && s->dims[1] != T)) break;
        int64_t Tc = s->dims[1], V = s->dims[2], count = B * Tc * V, es = storage_elem_bytes(compute, lg);
        void *buf = malloc((size_t)(count * es)); // (B, Tc, V) as stored: f32 or bf16
        if (!buf) {
            snprintf(err, errcap, "out of memory for the logits");
            return -1;
        }
        be->copy_out(be, NULL, buf, a, count * es);
        if (be->finish && be->finish(be, err, errcap) != 0) {
            free(buf);
            return -1;
        }
        for (int64_t b = 0; b < B; b++)
            for (int64_t e = 0; e < Tc * V; e++) {
                int64_t from_e = b * Tc * V + e;
                out[(b * T + t0) * V + e] = es == 2 ? f32_from_bf16(((const uint16_t *)buf)[from_e])
                                                    : ((const float *)buf)[from_e];
            }
        free(buf);
        found += Tc;
    }
    if (found != T) {
        snprintf(err, errcap, "the loss does not read logits of the whole batch [B, T, V]");
        return -1;
    }
    return 0;
}

// The logits of the batch (B, T, V) into a malloc'd buffer: the plan's own
// forward with rp, the reference executor without (or with
// MT_SAMPLE_REFERENCE=1, a test's check of the one against the other).
// NULL with a message.
static float *batch_logits(const Plan *p, HostStore *hs, Replay *rp, const int32_t *tokens, const int32_t *targets,
                           const int32_t *seg_start, char *err, size_t errcap) {
    const TrainConfig *t = &p->graph->train;
    int64_t V = logits_width(p);
    float *logits = V ? malloc((size_t)(t->batch * t->seq * V) * sizeof(float)) : NULL; // (B, T, V)
    static const float one = 1; // the loss scale (graph.h): a forward reads none
    const int32_t *inputs[3] = {tokens, targets, (const int32_t *)(const void *)&one};
    const char *ref = getenv("MT_SAMPLE_REFERENCE");
    if (ref && *ref && strcmp(ref, "0") != 0) rp = NULL;
    if (logits && rp) {
        if (plan_logits(p, rp, inputs, seg_start, logits, err, errcap) == 0) return logits;
        free(logits);
        return NULL;
    }
    if (!logits || isnan(reference_run(p, hs, inputs, seg_start, 0, logits))) {
        snprintf(err, errcap, "%s",
                 !V        ? "the model's tail has no cross_entropy to read logits from"
                 : !logits ? "out of memory for the logits"
                           : "the forward failed: out of memory, or the loss does not read logits "
                             "of the whole batch [B, T, V]");
        free(logits);
        return NULL;
    }
    return logits;
}

int sample_logits_npy(const char *prefix, const Plan *p, HostStore *hs, Replay *rp, const int32_t *tokens,
                      const int32_t *targets, const int32_t *seg_start, char *err, size_t errcap) {
    const TrainConfig *t = &p->graph->train;
    float *logits = batch_logits(p, hs, rp, tokens, targets, seg_start, err, errcap);
    if (!logits || !prefix) {
        free(logits);
        return logits ? 0 : -1;
    }
    char path[4096];
    int64_t shape[3] = {t->batch, t->seq, logits_width(p)};
    snprintf(path, sizeof path, "%s.tokens.npy", prefix);
    int rc = write_npy(path, "<i4", shape, 2, tokens, 4, err, errcap);
    snprintf(path, sizeof path, "%s.logits.npy", prefix);
    if (!rc) rc = write_npy(path, "<f4", shape, 3, logits, 4, err, errcap);
    free(logits);
    return rc;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The next token from row logits (V): the largest (lowest index of equals)
// when temp is 0, else drawn from softmax(logits / temp).
static int32_t pick(const float *logits, int64_t V, double temp, uint64_t *rng) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temp <= 0) return (int32_t)best;
    double sum = 0, u = (double)(splitmix64(rng) >> 11) * 0x1p-53;
    for (int64_t i = 0; i < V; i++) sum += exp(((double)logits[i] - logits[best]) / temp);
    double acc = 0;
    for (int64_t i = 0; i < V; i++) {
        acc += exp(((double)logits[i] - logits[best]) / temp) / sum;
        if (u < acc) return (int32_t)i;
    }
    return (int32_t)best;
}

// The bytes of tokens[0, n) decoded with v, on one line: valid UTF-8 as it
// is; \n, \t, \\ and \" escaped; any other control byte, and any byte
// that is not part of a whole UTF-8 character (a token that splits one, a
// stray byte of a byte model), as \xNN.
static int put_tokens(FILE *out, const DataVocab *v, const int32_t *tokens, int64_t n) {
    int64_t len = 0;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] >= 0 && tokens[i] < v->n) len += v->off[tokens[i] + 1] - v->off[tokens[i]];
    unsigned char *b = malloc((size_t)len + 1); // (len) the text
    if (!b) return -1;
    len = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = tokens[i] >= 0 && tokens[i] < v->n ? v->off[tokens[i]] : 0;
             tokens[i] >= 0 && tokens[i] < v->n && k < v->off[tokens[i] + 1]; k++)
            b[len++] = (unsigned char)v->bytes[k];
    for (int64_t i = 0; i < len;) {
        unsigned char c = b[i];
        int need = c >= 0xf0 && c < 0xf5 ? 3 : c >= 0xe0 ? (c < 0xf0 ? 2 : 0) : c >= 0xc2 ? 1 : 0;
        int ok = c >= 0x80 && need > 0 && i + need < len;
        for (int k = 1; ok && k <= need; k++) ok = (b[i + k] & 0xc0) == 0x80;
        if (ok) { // no overlong form, surrogate or code point past U+10FFFF: the second byte's range by the first
            unsigned char c1 = b[i + 1];
            ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 > 0x9f) && !(c == 0xf0 && c1 < 0x90) &&
                 !(c == 0xf4 && c1 > 0x8f);
        }
        if (ok) { // a whole multi-byte character
            fwrite(b + i, 1, (size_t)need + 1, out);
            i += need + 1;
            continue;
        }
        if (c == '\n') fputs("\\n", out);
        else if (c == '\t') fputs("\\t", out);
        else if (c == '\\' || c == '"') fprintf(out, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f) fprintf(out, "\\x%02x", c);
        else fputc(c, out);
        i++;
    }
    free(b);
    return 0;
}

int sample_print(FILE *out, const Plan *p, HostStore *hs, Replay *rp, const DataVocab *v, const int32_t *prompt,
                 int64_t n, uint64_t seed, int64_t step, int samples, double temp, char *err, size_t errcap) {
    const TrainConfig *t = &p->graph->train;
    int64_t B = t->batch, T = t->seq;
    if (samples > B - 1) samples = (int)(B - 1); // row 0 greedy, rows 1 .. samples drawn: one forward for all
    int32_t *tokens = calloc((size_t)(B * T), sizeof(int32_t));  // (B, T) row b: the prompt, then what row b drew
    int32_t *targets = calloc((size_t)(B * T), sizeof(int32_t)); // (B, T) zeros: the loss is not wanted
    int64_t *len = calloc((size_t)B, sizeof(int64_t));           // (B) tokens each row holds
    uint64_t *rng = calloc((size_t)B, sizeof(uint64_t));         // (B) each row's generator
    int rc = -1;
    if (!tokens || !targets || !len || !rng) {
        snprintf(err, errcap, "out of memory");
        goto done;
    }
    for (int64_t b = 0; b <= samples; b++) {
        memcpy(tokens + b * T, prompt, (size_t)n * sizeof(int32_t));
        len[b] = n;
        rng[b] = seed * 0x100000001b3ull ^ (uint64_t)step * 0x9e3779b97f4a7c15ull ^ (uint64_t)b;
    }
    for (int64_t pos = n, going = 1; pos < T && going; pos++) { // the next token of every row still going
        float *logits = batch_logits(p, hs, rp, tokens, targets, NULL, err, errcap); // (rows: one text each)
        if (!logits) goto done;
        int64_t V = logits_width(p); // (it may exceed the vocabulary file's; those ids decode to nothing)
        for (int64_t b = 0; b <= samples; b++) {
            if (len[b] != pos) continue; // this row ended at an eos
            int32_t tok = pick(logits + (b * T + pos - 1) * V, V, b ? temp : 0, &rng[b]);
            tokens[b * T + pos] = tok;
            if (tok != v->eos) len[b] = pos + 1;
        }
        going = 0;
        for (int64_t b = 0; b <= samples; b++) going |= len[b] == pos + 1;
        free(logits);
    }
    for (int64_t b = 0; b <= samples; b++) {
        if (b) fprintf(out, "sample %lld temp %g: \"", (long long)step, temp);
        else fprintf(out, "sample %lld greedy: \"", (long long)step);
        int bad = put_tokens(out, v, prompt, n);
        fputs("\" -> \"", out);
        bad |= put_tokens(out, v, tokens + b * T + n, len[b] - n);
        fputs("\"\n", out);
        if (bad) {
            snprintf(err, errcap, "out of memory");
            goto done;
        }
    }
    fflush(out);
    rc = 0;
done:
    free(tokens);
    free(targets);
    free(len);
    free(rng);
    return rc;
}
