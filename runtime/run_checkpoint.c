// run_checkpoint.c: a training run's checkpoints: saves (one file, or each
// rank's shard and rank 0's manifest) and the resume from the newest.
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "runtime/run.h"
#include "runtime/store/checkpoint.h"

// The model a checkpoint belongs to: its parameters' checkpoint names and
// shapes, the layers, and the host store's layout (which every plan of the
// model shares), not the schedule, batch or target.
uint32_t model_crc(const Plan *p) {
    const Graph *g = p->graph;
    int64_t head[3] = {g->layers, p->host_global, p->host_layer};
    uint32_t c = io_crc32(0, head, sizeof head);
    for (int i = 0; i < g->params.n; i++) {
        const Param *pm = g->params.items[i];
        c = io_crc32(c, pm->ckpt, strlen(pm->ckpt) + 1);
        c = io_crc32(c, &pm->shape.rank, sizeof pm->shape.rank);
        c = io_crc32(c, pm->shape.dims, (size_t)pm->shape.rank * sizeof pm->shape.dims[0]);
        c = io_crc32(c, &p->param_offset[i], sizeof p->param_offset[i]);
    }
    return c;
}

// A checkpoint's arrays through the store, where some live in the tier.
static int store_ckpt_get(void *ctx, int array, int64_t off, int64_t n, float *dst, char *err, size_t errcap) {
    Run *r = ctx;
    return store_get(&r->hs, r->p, array, off, n, dst, err, errcap);
}
static int store_ckpt_put(void *ctx, int array, int64_t off, int64_t n, const float *src, char *err, size_t errcap) {
    Run *r = ctx;
    return store_put(&r->hs, r->p, array, off, n, src, err, errcap);
}

// The store's segments in store order (the head's globals, the tail's,
// then each layer's), as checkpoints shard them: malloc'd, *n of them.
static CkptSegment *checkpoint_segments(const Plan *p, int *n) {
    int64_t layers = p->graph->layers;
    CkptSegment *segs = malloc((size_t)(layers + 2) * sizeof *segs);
    for (int64_t k = 0; segs && k < layers + 2; k++) {
        int64_t seg = k == 0 ? SEG_HEAD : k == 1 ? SEG_TAIL : k - 2;
        segs[k] = (CkptSegment){plan_segment_base(p, seg), plan_segment_len(p, seg)};
    }
    *n = (int)(layers + 2);
    return segs;
}

// Continues from the newest checkpoint in o->resume: weights, both Adam
// moments, step and data position. A checkpoint belongs to the model, not
// the plan: another plan of the same model (batch, remat, target, tiling)
// resumes it, and what changed is said. Returns the last step done, or -1
// with a message.
int64_t run_resume(Run *r, uint64_t seed, char *err, size_t errcap) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    char path[4096];
    CkptMeta meta;
    // Whose checkpoint it is, first; then the arrays.
    if (ckpt_latest(r->o->resume, path, sizeof path, err, errcap) != 0 ||
        ckpt_load(path, &meta, -1, NULL, 0, NULL, NULL, err, errcap) != 0)
        return -1;
    if (check_checkpoint(r, path, &meta, seed, err, errcap) != 0) return -1;
    CkptIO io = {store_ckpt_get, store_ckpt_put, r};
    int nsegs;
    CkptSegment *segs = checkpoint_segments(p, &nsegs);
    // every segment whole (a replicated store) or this rank's slice of each (a sharded one), from a file or
    // the shards of any number of ranks
    CkptRange *want = p->sharded && segs ? malloc((size_t)nsegs * sizeof *want) : NULL;
    for (int k = 0; want && k < nsegs; k++) dist_shard(segs[k].len, r->hs.rank, r->hs.ranks, &want[k].lo, &want[k].hi);
    int rc = segs && (want || !p->sharded)
                 ? ckpt_load(path, &meta, plan_host_elems(p), segs, nsegs, want, &io, err, errcap)
                 : -1;
    if (!segs || (p->sharded && !want)) snprintf(err, errcap, "out of memory");
    free(segs), free(want);
    if (rc != 0) return -1;
    if (data_seek(&r->data, meta.data_pos, err, errcap) != 0) {
        size_t n = strlen(err);
        snprintf(err + n, errcap - n, " (%s)", path);
        return -1;
    }
    r->ckpt_schedule_steps = meta.schedule_steps;
    fprintf(r->o->out, "resumed from %s at step %lld\n", path, (long long)meta.step);
    if (meta.plan_crc != p->plan_crc) { // the same model under another plan: say what changed
        fprintf(r->o->out, "  written by another plan of this model; weights, Adam moments, step and data position "
                           "carry over:\n");
        if (meta.batch != t->batch || meta.seq != t->seq || meta.accumulate != t->accumulate)
            fprintf(r->o->out, "  batch %lld x seq %lld x accumulate %lld -> %lld x %lld x %lld\n",
                    (long long)meta.batch, (long long)meta.seq, (long long)meta.accumulate, (long long)t->batch,
                    (long long)t->seq, (long long)t->accumulate);
        if (strncmp(meta.schedule, p->schedule, CKPT_SCHEDULE_BYTES - 1))
            fprintf(r->o->out, "  schedule %s\n        -> %s\n", meta.schedule, p->schedule);
        if (meta.device_limit != p->device_limit)
            fprintf(r->o->out, "  device memory %.2f GB -> %.2f GB\n", (double)meta.device_limit / 1e9,
                    (double)p->device_limit / 1e9);
    }
    return meta.step;
}

// A save of several ranks: each writes its shard of every segment, and
// once all are on disk rank 0 commits the step with the manifest. A rank
// that fails (or is killed) leaves the previous manifest the newest. 0,
// or -1 with a message (on every rank: the failing rank's own, else which
// rank failed).
static int save_sharded(Run *r, const CkptMeta *meta, char *err, size_t errcap) {
    const Dist *d = r->o->dist;
    CkptIO io = {store_ckpt_get, store_ckpt_put, r};
    int nsegs;
    CkptSegment *segs = checkpoint_segments(r->p, &nsegs);
    int64_t mine[3] = {-1, 0, 0}, *all = malloc((size_t)d->size * sizeof mine), bytes = 0; // (size, 3): ok, bytes, crc
    uint32_t crc = 0;
    if (!segs || !all) snprintf(err, errcap, "out of memory");
    else if (ckpt_save_shard(r->save_dir, meta, segs, nsegs, d->rank, d->size, &io, &bytes, &crc, err, errcap) == 0)
        mine[0] = 0, mine[1] = bytes, mine[2] = crc;
    int64_t scratch[3];
    dist_gather_i64(d, mine, 3, all ? all : scratch); // (every rank joins; one out of memory then fails alone)
    int rc = all && mine[0] == 0 ? 0 : -1, failed = -1;
    for (int k = 0; all && k < d->size && failed < 0; k++)
        if (all[3 * k] != 0) failed = k;
    if (rc == 0 && failed >= 0) {
        snprintf(err, errcap,
                 "rank %d of %d could not write its shard of step %lld (its message says why); step %lld "
                 "is not saved, the newest checkpoint in %s stays the one to resume",
                 failed, d->size, (long long)meta->step, (long long)meta->step, r->save_dir);
        rc = -1;
    }
    if (rc == 0 && d->rank == 0) {
        int64_t *b = malloc((size_t)d->size * sizeof *b);
        uint32_t *c = malloc((size_t)d->size * sizeof *c);
        for (int k = 0; b && c && k < d->size; k++) b[k] = all[3 * k + 1], c[k] = (uint32_t)all[3 * k + 2];
        if (!b || !c) rc = -1, snprintf(err, errcap, "out of memory");
        else rc = ckpt_commit_shards(r->save_dir, r->o->keep, meta, segs, nsegs, d->size, b, c, err, errcap);
        free(b), free(c);
    }
    free(segs), free(all);
    return rc;
}

int run_save(Run *r, int64_t step, uint64_t seed, char *err, size_t errcap) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    store_flush(&r->hs, p); // the checkpoint holds step `step`'s weights (the device's placed segments' too)
    if (store_ok(r, err, errcap) != 0 || store_device_pull(&r->hs, p, err, errcap) != 0) return -1;
    CkptMeta meta = {.step = step,
                     .data_pos = data_position(&r->data),
                     .seed = seed,
                     .plan_crc = p->plan_crc,
                     .model_crc = model_crc(p),
                     .n = plan_host_elems(p),
                     .batch = t->batch,
                     .seq = t->seq,
                     .accumulate = t->accumulate,
                     .device_limit = p->device_limit,
                     .schedule_steps = r->schedule_steps};
    snprintf(meta.model, sizeof meta.model, "%s", p->graph->model_name);
    snprintf(meta.schedule, sizeof meta.schedule, "%s", p->schedule);
    CkptIO io = {store_ckpt_get, store_ckpt_put, r};
    if (run_ranks(r) > 1 ? save_sharded(r, &meta, err, errcap) != 0
        : r->hs.tier || r->hs.frozen
            ? ckpt_save_io(r->save_dir, r->o->keep, &meta, &io, err, errcap) != 0
            : ckpt_save(r->save_dir, r->o->keep, &meta, r->hs.w, r->hs.m, r->hs.v, err, errcap) != 0)
        return -1;
    fprintf(r->o->out, "step %6lld  saved a checkpoint in %s\n", (long long)step, r->save_dir);
    return 0;
}
