// plan_write.c: serialises a Plan into the file format of common/plan.h.
//
// Every integer is little-endian whatever the host; a double is its IEEE-754
// bits as a u64. A string is a u32 length and that many bytes (no NUL); an
// optional string that is absent has the length 0xFFFFFFFF and no bytes. A
// shape is u32 rank, then rank i64 dims; a location is i32 line, i32 col.
// The sections, field by field (plan_read.c reads the same fields in the
// same order):
//
//   SOURCE   str path, str text, u32 crc32 of the text
//   CONFIG   i64 batch, seq, steps, accumulate, warmup, val_every, seed;
//            f64 lr, beta1, beta2, weight_decay, adam_eps, min_lr_frac, clip;
//            u32 schedule (LrSchedule), u32 compute (DType), optstr data
//   GRAPH    str model name, str block name, str block prefix, i64 layers;
//            u32 nkinds (block kinds), layers × u8 layer kind;
//            u32 count, per model input: str name, u32 dtype, shape, loc;
//            u32 count, per param: str name, str ckpt, u32 in_block, str prefix,
//              u32 kind, shape, u32 init, f64 init_std, u32 init_given,
//              u32 first_use, loc, u32 frozen, u32 lora (0, 1 A, 2 B), i32 lora_of, f64 lora_scale;
//            per part, head, block, tail, then kinds 1 .. nkinds-1's blocks:
//              u32 kind (PartKind), u32 count, per node (its id is its index):
//                u32 op, u32 dtype, shape, loc, optstr name, u32 annot,
//                u32 nin, nin × u32 input node ids (same part),
//                i32 param, i32 src_part, i32 src, f64 value, i32 axis,
//                i64 offset, i32 heads, kv_heads, causal, trans_a, trans_b,
//                inverse, f64 eps, f64 theta, i64 window, f64 scale, softcap, i32 top_k,
//                i32 rope_interleaved, f64 rope_scale, u32 count (rope: D/2, else 0),
//                count × f64 rope_freq, str rope_rule (rope under a scaling rule: the rule
//                and its fields as "llama3 factor=32 ..."; else absent),
//                i32 wide, i64 padding, i32 pooled, i64 chunk, i32 group_limit, i32 moe_form;
//              i32 output id, i32 nfwd, i32 grad_seed id (-1: none),
//              u32 count, per grad: i32 of id, i32 grad id (-1: zero)
//   HOST     i64 host_global, i64 host_tail, nkinds × i64 host_kind, u32 count (= params),
//            count × i64 param offset (floats into its segment),
//            i64 host_act_bytes, u32 count (= segments: layers + 2), count × u8 optimizer
//            placement (Plan.opt_device, by segment index: 0 host, 1 device)
//   ARENA    i64 arena_bytes, i64 scratch_bytes, i64 device_limit, i32 nframes; per part: u32
//            count (= its nodes; a block part's times nframes), count × i64
//            byte offset (-1: a view or reshape)
//   STREAMS  str schedule, i32 ranks, i32 sharded, i32 nevents; u32 count, train instructions;
//            u32 count, eval instructions; each i32 kind, engine, part,
//            layer, input, from, to, frame, flags, event; i64 src, dst, bytes
//   KERNELS  bytes kernel IR, bytes bitcode, optstr cuda arch, bytes cubin,
//            bytes ptx; "bytes" is a u64 length and that many bytes
//
// The sections follow the table in id order. The file is written to PATH.tmp,
// synced and renamed over PATH, so PATH is never a partial plan.
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "compiler/emit/plan_write.h"

#include "common/io.h"

enum { SECTIONS = SEC_COUNT_PLUS_ONE - 1, HEADER_BYTES = 24, ENTRY_BYTES = 24 };
static const char MAGIC[8] = "MTPLAN\0";
static const uint32_t ABSENT = 0xFFFFFFFFu;

// A growable byte buffer; a failed allocation is remembered, not reported
// at each call.
typedef struct Buf {
    unsigned char *data; // (cap)
    size_t len, cap;
    int failed;
} Buf;

static void put_bytes(Buf *b, const void *src, size_t n) {
    if (b->failed) return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 4096;
        while (n > cap - b->len) {
            if (cap > SIZE_MAX / 2) {
                b->failed = 1;
                return;
            }
            cap *= 2;
        }
        unsigned char *d = realloc(b->data, cap);
        if (!d) {
            b->failed = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, src, n);
    b->len += n;
}

static void put_u32(Buf *b, uint32_t v) {
    unsigned char s[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put_bytes(b, s, 4);
}
static void put_u64(Buf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}
static void put_i32(Buf *b, int64_t v) { put_u32(b, (uint32_t)(int32_t)v); }
static void put_i64(Buf *b, int64_t v) { put_u64(b, (uint64_t)v); }
static void put_f64(Buf *b, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    put_u64(b, bits);
}
static void put_strn(Buf *b, const char *s, size_t n) {
    if (n >= ABSENT) {
        b->failed = 1;
        return;
    }
    put_u32(b, (uint32_t)n);
    put_bytes(b, s, n);
}
static void put_str(Buf *b, const char *s) {
    if (!s) put_u32(b, ABSENT);
    else put_strn(b, s, strlen(s));
}
static void put_shape(Buf *b, const Shape *s) {
    put_u32(b, (uint32_t)s->rank);
    for (int i = 0; i < s->rank && i < MT_MAX_RANK; i++) put_i64(b, s->dims[i]);
}
static void put_loc(Buf *b, Loc l) {
    put_i32(b, l.line);
    put_i32(b, l.col);
}
static void put_id(Buf *b, const Node *n) { put_i32(b, n ? n->id : -1); }

static void write_source(Buf *b, Plan *p) {
    const char *text = p->source ? p->source : "";
    size_t len = p->source ? p->source_len : 0;
    p->source_crc = io_crc32(0, (const unsigned char *)text, len);
    put_str(b, p->source_path);
    put_strn(b, text, len);
    put_u32(b, p->source_crc);
}

static void write_config(Buf *b, const TrainConfig *t) {
    put_i64(b, t->batch);
    put_i64(b, t->seq);
    put_i64(b, t->steps);
    put_i64(b, t->accumulate);
    put_i64(b, t->warmup);
    put_i64(b, t->val_every);
    put_i64(b, t->seed);
    put_f64(b, t->lr);
    put_f64(b, t->beta1);
    put_f64(b, t->beta2);
    put_f64(b, t->weight_decay);
    put_f64(b, t->adam_eps);
    put_f64(b, t->min_lr_frac);
    put_f64(b, t->clip);
    put_u32(b, (uint32_t)t->schedule);
    put_u32(b, (uint32_t)t->compute);
    put_str(b, t->data);
}

static void write_node(Buf *b, const Node *n) {
    put_u32(b, (uint32_t)n->op);
    put_u32(b, (uint32_t)n->dtype);
    put_shape(b, &n->shape);
    put_loc(b, n->loc);
    put_str(b, n->name);
    put_u32(b, (uint32_t)n->annot);
    put_u32(b, (uint32_t)n->nin);
    for (int j = 0; j < n->nin; j++) put_id(b, n->in[j]);
    put_i32(b, n->param);
    put_i32(b, n->src_part);
    put_i32(b, n->src);
    put_f64(b, n->value);
    put_i32(b, n->axis);
    put_i64(b, n->offset);
    put_i32(b, n->heads);
    put_i32(b, n->kv_heads);
    put_i32(b, n->causal);
    put_i32(b, n->trans_a);
    put_i32(b, n->trans_b);
    put_i32(b, n->inverse);
    put_f64(b, n->eps);
    put_f64(b, n->theta);
    put_i64(b, n->window);
    put_f64(b, n->scale);
    put_f64(b, n->softcap);
    put_i32(b, n->top_k);
    put_i32(b, n->rope_interleaved);
    put_f64(b, n->rope_scale);
    int64_t pairs = rope_pairs(n); // rope_freq's (D/2)
    put_u32(b, (uint32_t)pairs);
    for (int64_t i = 0; i < pairs; i++) put_f64(b, n->rope_freq[i]);
    put_str(b, n->op == OP_ROPE ? n->rope_rule : NULL); // the rule and its fields (--export's rope_parameters)
    put_i32(b, n->wide);
    put_i64(b, n->padding);
    put_i32(b, n->pooled);
    put_i64(b, n->chunk);
    put_i32(b, n->group_limit);
    put_i32(b, n->moe_form);
}

static int fail(char *err, size_t errcap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errcap, const char *fmt, ...) {
    if (err && errcap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errcap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// Whether n is node n->id of part pk (or NULL where none_ok), so that its
// id names it in the file.
static int in_part(const Part *part, PartKind pk, const Node *n, int none_ok) {
    if (!n) return none_ok;
    return n->part == pk && n->id >= 0 && n->id < part->nodes.n && part->nodes.items[n->id] == n;
}

// Every node reference the file stores as an id within its part, and every
// op (KERNELS indexes by it); returns -1 on a bad one (a compiler bug),
// naming it in err.
static int check_refs(const Graph *g, const char *path, char *err, size_t errcap) {
    if (g->nkinds < 1 || g->nkinds > MT_MAX_KINDS)
        return fail(err, errcap, "%s: internal error: %d block kinds (1..%d)", path, g->nkinds, MT_MAX_KINDS);
    for (int pk = 0; pk < graph_nparts(g); pk++) {
        const Part *part = &g->parts[pk];
        const char *pn = part_name((PartKind)pk);
        for (int i = 0; i < part->nodes.n; i++) {
            const Node *n = part->nodes.items[i];
            if (!in_part(part, (PartKind)pk, n, 0))
                return fail(err, errcap, "%s: internal error: %s node %d does not know its place", path, pn, i);
            if ((unsigned)n->op >= OP_COUNT)
                return fail(err, errcap, "%s: internal error: %s node %d has op %d", path, pn, i, (int)n->op);
            for (int j = 0; j < n->nin; j++)
                if (!in_part(part, (PartKind)pk, n->in[j], 0) || n->in[j]->id >= i)
                    return fail(err, errcap,
                                "%s: internal error: operand %d of %s node %d is not an earlier node of its part", path,
                                j, pn, i);
        }
        if (!in_part(part, (PartKind)pk, part->output, 1) || !in_part(part, (PartKind)pk, part->grad_seed, 1))
            return fail(err, errcap,
                        "%s: internal error: the %s part's output or gradient seed is not one of its nodes", path, pn);
        for (int i = 0; i < part->grads.n; i++) {
            const Grad *gr = part->grads.items[i];
            if (!in_part(part, (PartKind)pk, gr->of, 0) || !in_part(part, (PartKind)pk, gr->grad, 1))
                return fail(err, errcap, "%s: internal error: gradient %d of the %s part names a node of another part",
                            path, i, pn);
        }
    }
    return 0;
}

static void write_graph(Buf *b, const Graph *g) {
    put_str(b, g->model_name);
    put_str(b, g->block_name);
    put_str(b, g->block_prefix);
    put_i64(b, g->layers);
    put_u32(b, (uint32_t)g->nkinds);
    put_bytes(b, g->layer_kind, (size_t)g->layers); // a byte a layer
    put_u32(b, (uint32_t)g->inputs.n);
    for (int i = 0; i < g->inputs.n; i++) {
        const ModelInput *mi = g->inputs.items[i];
        put_str(b, mi->name);
        put_u32(b, (uint32_t)mi->dtype);
        put_shape(b, &mi->shape);
        put_loc(b, mi->loc);
    }
    put_u32(b, (uint32_t)g->params.n);
    for (int i = 0; i < g->params.n; i++) {
        const Param *pr = g->params.items[i];
        put_str(b, pr->name);
        put_str(b, pr->ckpt);
        put_u32(b, (uint32_t)pr->in_block);
        put_str(b, pr->in_block ? pr->prefix : "");
        put_u32(b, (uint32_t)pr->kind);
        put_shape(b, &pr->shape);
        put_u32(b, (uint32_t)pr->init);
        put_f64(b, pr->init_std);
        put_u32(b, (uint32_t)pr->init_given);
        put_u32(b, (uint32_t)pr->first_use);
        put_loc(b, pr->loc);
        put_u32(b, (uint32_t)pr->frozen);
        put_u32(b, (uint32_t)pr->lora);
        put_i32(b, pr->lora ? pr->lora_of : -1);
        put_f64(b, pr->lora_scale);
        put_i32(b, pr->balance_mask ? pr->balance_mask->id : -1);
        put_f64(b, pr->balance_rate);
    }
    for (int pk = 0; pk < graph_nparts(g); pk++) {
        const Part *part = &g->parts[pk];
        put_u32(b, (uint32_t)pk);
        put_u32(b, (uint32_t)part->nodes.n);
        for (int i = 0; i < part->nodes.n; i++) write_node(b, part->nodes.items[i]);
        put_id(b, part->output);
        put_i32(b, part->nfwd);
        put_id(b, part->grad_seed);
        put_u32(b, (uint32_t)part->grads.n);
        for (int i = 0; i < part->grads.n; i++) {
            const Grad *gr = part->grads.items[i];
            put_id(b, gr->of);
            put_id(b, gr->grad);
        }
    }
}

static void write_host(Buf *b, const Plan *p) {
    put_i64(b, p->host_global);
    put_i64(b, p->host_tail);
    for (int k = 0; k < p->graph->nkinds; k++) put_i64(b, p->host_kind[k]);
    put_u32(b, (uint32_t)p->graph->params.n);
    for (int i = 0; i < p->graph->params.n; i++) put_i64(b, p->param_offset[i]);
    put_i64(b, p->host_act_bytes);
    put_u32(b, (uint32_t)plan_segment_count(p));
    for (int64_t s = SEG_FIRST; s < p->graph->layers; s++) {
        uint8_t d = p->opt_device ? p->opt_device[plan_segment_index(s)] : 0; // (as it is: the reader checks it)
        put_bytes(b, &d, 1);
    }
}

static void write_arena(Buf *b, const Plan *p) {
    put_i64(b, p->arena_bytes);
    put_i64(b, p->scratch_bytes);
    put_i64(b, p->device_limit);
    put_i32(b, p->nframes);
    for (int pk = 0; pk < graph_nparts(p->graph); pk++) {
        int64_t n = (int64_t)p->graph->parts[pk].nodes.n * (part_is_block(pk) ? p->nframes : 1);
        put_u32(b, (uint32_t)n);
        for (int64_t i = 0; i < n; i++) put_i64(b, p->node_offset[pk][i]);
    }
}

static void write_instrs(Buf *b, const Instr *ins, int32_t n) {
    put_u32(b, (uint32_t)n);
    for (int32_t i = 0; i < n; i++) {
        const Instr *in = &ins[i];
        put_i32(b, in->kind);
        put_i32(b, in->engine);
        put_i32(b, in->part);
        put_i32(b, in->layer);
        put_i32(b, in->input);
        put_i32(b, in->from);
        put_i32(b, in->to);
        put_i32(b, in->frame);
        put_i32(b, in->flags);
        put_i32(b, in->event);
        put_i64(b, in->src);
        put_i64(b, in->dst);
        put_i64(b, in->bytes);
    }
}

// Returns -1 on a RUN that names nodes the graph does not have.
static int check_runs(const Graph *g, const Instr *ins, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        const Instr *in = &ins[i];
        if (in->kind == INS_RUN && (in->part < 0 || in->part >= graph_nparts(g) || in->from < 0 || in->from > in->to ||
                                    in->to > g->parts[in->part].nodes.n))
            return -1;
    }
    return 0;
}

static void put_blob(Buf *b, const void *data, size_t len) {
    put_u64(b, len);
    put_bytes(b, data, len);
}

static void write_kernels(Buf *b, const Plan *p) {
    put_blob(b, p->kernels_bytes, p->kernels_len);
    put_blob(b, p->bitcode, p->bitcode_len);
    put_str(b, p->cuda_arch);
    put_blob(b, p->cubin, p->cubin_len);
    put_blob(b, p->ptx, p->ptx_len);
}

static void store_u32(unsigned char *d, uint32_t v) {
    for (int i = 0; i < 4; i++) d[i] = (unsigned char)(v >> (8 * i));
}
static void store_u64(unsigned char *d, uint64_t v) {
    for (int i = 0; i < 8; i++) d[i] = (unsigned char)(v >> (8 * i));
}

// Writes all of data to the new file tmp, synced. Returns 0 or an errno.
static int write_synced(const char *tmp, const unsigned char *data, size_t len) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, data + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            close(fd);
            return e;
        }
        done += (size_t)n;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return e;
    }
    return close(fd) != 0 ? errno : 0;
}

int plan_write(Plan *p, const char *path, char *err, size_t errcap) {
    if (!p || !p->graph) return fail(err, errcap, "%s: no plan to write", path);
    if (check_refs(p->graph, path, err, errcap) != 0) return -1;
    Buf sec[SECTIONS] = {{0}};
    unsigned char *file = NULL;
    char *tmp = NULL;
    int rc = -1;

    write_source(&sec[SEC_SOURCE - 1], p);
    write_config(&sec[SEC_CONFIG - 1], &p->graph->train);
    write_graph(&sec[SEC_GRAPH - 1], p->graph);
    write_host(&sec[SEC_HOST - 1], p);
    write_arena(&sec[SEC_ARENA - 1], p);
    if (check_runs(p->graph, p->train, p->ntrain) != 0 || check_runs(p->graph, p->eval, p->neval) != 0) {
        fail(err, errcap, "%s: internal error: a RUN instruction names nodes the graph does not have", path);
        goto done;
    }
    put_str(&sec[SEC_STREAMS - 1], p->schedule ? p->schedule : "");
    put_i32(&sec[SEC_STREAMS - 1], p->ranks ? p->ranks : 1); // a plan built without --ranks is one process's
    put_i32(&sec[SEC_STREAMS - 1], p->sharded);
    put_i32(&sec[SEC_STREAMS - 1], p->nevents);
    write_instrs(&sec[SEC_STREAMS - 1], p->train, p->ntrain);
    write_instrs(&sec[SEC_STREAMS - 1], p->eval, p->neval);
    write_kernels(&sec[SEC_KERNELS - 1], p);

    // Header, table, then the sections in id order.
    size_t total = HEADER_BYTES + SECTIONS * ENTRY_BYTES;
    for (int s = 0; s < SECTIONS; s++) {
        if (sec[s].failed || sec[s].len > SIZE_MAX - total) {
            fail(err, errcap, "%s: out of memory while writing the plan", path);
            goto done;
        }
        total += sec[s].len;
    }
    file = malloc(total);
    if (!file) {
        fail(err, errcap, "%s: out of memory while writing the plan", path);
        goto done;
    }
    memcpy(file, MAGIC, 8);
    store_u32(file + 8, PLAN_VERSION);
    store_u32(file + 12, PLAN_ENDIAN);
    store_u32(file + 16, SECTIONS);
    store_u32(file + 20, io_crc32(0, file, 20));
    size_t off = HEADER_BYTES + SECTIONS * ENTRY_BYTES;
    uint32_t plan_crc = io_crc32(0, NULL, 0);
    for (int s = 0; s < SECTIONS; s++) {
        unsigned char *e = file + HEADER_BYTES + (size_t)s * ENTRY_BYTES;
        store_u32(e, (uint32_t)(s + 1));
        store_u32(e + 4, io_crc32(0, sec[s].data, sec[s].len));
        store_u64(e + 8, off);
        store_u64(e + 16, sec[s].len);
        if (sec[s].len) memcpy(file + off, sec[s].data, sec[s].len);
        plan_crc = io_crc32(plan_crc, sec[s].data, sec[s].len);
        off += sec[s].len;
    }

    size_t plen = strlen(path);
    tmp = malloc(plen + 5);
    if (!tmp) {
        fail(err, errcap, "%s: out of memory while writing the plan", path);
        goto done;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    int e = write_synced(tmp, file, total);
    if (e == 0 && rename(tmp, path) != 0) e = errno;
    if (e != 0) {
        fail(err, errcap, "%s: cannot write the plan: %s", path, strerror(e));
        unlink(tmp); // nothing, or a partial temporary file
        goto done;
    }
    io_sync_parent_dir(path);
    p->plan_crc = plan_crc;
    rc = 0;
done:
    for (int s = 0; s < SECTIONS; s++) free(sec[s].data);
    free(file);
    free(tmp);
    return rc;
}
