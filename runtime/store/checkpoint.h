// checkpoint.h: training checkpoints for mtrun (--save DIR --save-every N
// [--keep K], --resume DIR). A checkpoint holds what a resumed run needs to
// continue to the same bits: the step, the data position, the seed and RNG
// state, which model it belongs to (and the plan that wrote it, to say what
// changed when another plan of the same model resumes it), and the fp32
// master weights and both Adam moments.
//
// File format, version 3, all integers and floats little-endian:
//
//   header   "MTCKPT\0\0" (8 bytes), u32 version = 3, u32 endian = 0x01020304,
//            u32 section count = 4, u32 header crc32 (of the 20 bytes before it)
//   table    per section: u32 id, u32 crc32 of its bytes, u64 offset, u64 size
//   sections META (id 1): i64 step, i64 data_pos, u64 seed, u64 rng_state,
//                         u32 plan_crc, u32 model_crc, i64 n,
//                         i64 batch, i64 seq, i64 accumulate, i64 device_limit,
//                         the model's name, NUL-padded (64 bytes),
//                         the plan's schedule in words, NUL-padded (192 bytes),
//                         i64 schedule_steps (344 bytes)
//            W, M, V (ids 2, 3, 4): n IEEE-754 binary32 each (4n bytes)
//
// Version 2 is version 3 without schedule_steps (META 336 bytes): read, with
// schedule_steps 0. crc32 is zlib's. The writer puts the table right after the header and the
// sections after it in id order; the reader accepts any order inside the
// file, without overlaps. A checkpoint is DIR/step-%09lld.ckpt (more digits
// past step 999999999), named by its step.
//
// Durability: the file is written in full to NAME.tmp, fsync'ed, renamed to
// NAME and the directory fsync'ed, so a crash at any moment leaves either the
// new checkpoint complete under its name or no file of that name, and the
// older checkpoints as they were. A NAME.tmp left by a crash is ignored by
// ckpt_latest and removed by the next successful ckpt_save in the directory.
//
// Errors are returned as "FILE: what is wrong" in the caller's buffer, never
// printed; nothing here exits.
#ifndef MT_CHECKPOINT_H
#define MT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

enum { CKPT_MODEL_BYTES = 64, CKPT_SCHEDULE_BYTES = 192 };

typedef struct CkptMeta {
    int64_t step;       // optimizer steps done (>= 0; it names the file)
    int64_t data_pos;   // the data loader's training position (DataSet.train_pos)
    uint64_t seed;      // the run's seed
    uint64_t rng_state; // the run's RNG state (reserved; written and read back as given)
    uint32_t plan_crc;  // the plan that wrote it (Plan.plan_crc)
    uint32_t model_crc; // the model it belongs to: its parameters' names, shapes and host layout
    int64_t n;          // floats in each of w, m, v
    // what the writing plan was, to say what changed when another plan of the model resumes it
    int64_t batch, seq, accumulate, device_limit;
    int64_t schedule_steps;             // the steps the run's learning-rate schedule spans (0: not recorded, version 2)
    char model[CKPT_MODEL_BYTES];       // the model's name, cut to fit, NUL-terminated
    char schedule[CKPT_SCHEDULE_BYTES]; // Plan.schedule, cut to fit, NUL-terminated
} CkptMeta;

// Writes DIR/step-%09lld.ckpt holding meta and the arrays w, m, v (meta->n
// floats each, read only; NULL allowed when n is 0): master weights and both
// Adam moments. First to DIR/step-%09lld.ckpt.tmp, written in full, fsync'ed,
// then renamed (over an existing file of the same step), then the directory
// fsync'ed; then deletes the step-*.ckpt files beyond the newest `keep` by
// step number (keep >= 1; the file just written is never deleted) and any
// step-*.ckpt.tmp leftovers. Creates DIR if missing (one level). The arrays
// are written straight from the caller's memory, checksummed as written.
//
// Returns 0, or -1 with a message. On a failure to write, nothing partial
// remains under the final name (the .tmp is removed) and the previous
// checkpoints are untouched. A failure to remove an old checkpoint after the
// new one is safely in place also returns -1, with a message that says so.
//
// Fault injection for tests: if the environment variable
// MT_CKPT_ABORT_AFTER_BYTES=N is set, the process calls abort() once N bytes
// of the new checkpoint have been written (simulating a crash mid-save). The
// bytes are counted in the order written: the file from its first byte to its
// last (N inside [0, 24) is inside the header), then the 96-byte section
// table once more, rewritten in place with the crc32s filled in; N = file
// size + 96 aborts after the last write, before the fsync and the rename.
// N = 0 aborts right after the .tmp is created.
int ckpt_save(const char *dir, int keep, const CkptMeta *meta, const float *w, const float *m, const float *v,
              char *err, size_t errcap);

// Arrays that are not whole in memory (the NVMe tier holds the layers'
// moments, tier.h): get copies floats [off, off + n) of array a (0 w, 1 m,
// 2 v) into dst, for a save; put copies src into them, for a read. Each
// returns 0, or -1 with a message in err.
typedef struct CkptIO {
    int (*get)(void *ctx, int array, int64_t off, int64_t n, float *dst, char *err, size_t errcap);
    int (*put)(void *ctx, int array, int64_t off, int64_t n, const float *src, char *err, size_t errcap);
    void *ctx;
} CkptIO;

// ckpt_save and ckpt_read with the arrays through io, in pieces of at most
// 1 << 20 floats in file order (the same file, the same checks, the same
// fault injection). A failure of io's get fails the save with its message.
// ckpt_read_io puts each piece before the section's crc32 is checked: on
// -1 what was put is unspecified.
int ckpt_save_io(const char *dir, int keep, const CkptMeta *meta, const CkptIO *io, char *err, size_t errcap);
int ckpt_read_io(const char *path, CkptMeta *meta, int64_t expected_n, const CkptIO *io, char *err, size_t errcap);

// Sharded checkpoints, the ranks of a data-parallel run (dist.h) saving
// together: the store is a list of segments (the head's and the tail's
// globals and each layer's, in store order, tiling [0, n)), and rank r of
// R writes, of each segment in order, its slice dist_shard(len, r, R) of
// w, m and v, as one file DIR/step-%09lld.shard-%05d-of-%05d: a checkpoint
// file as above whose META is the run's but for n, the shard's floats.
// Once every rank's shard is on disk (its .tmp fsync'ed and renamed), rank
// 0 writes DIR/step-%09lld.manifest (.tmp, fsync, rename, the directory
// fsync'ed), a text file that commits the step:
//
//   mt sharded checkpoint 1
//   step S / n N / ranks R / segments K      (one a line)
//   OFF LEN                                  (K lines: the segments)
//   shard r NAME BYTES CRC                   (R lines: each shard's file, size
//                                             and the crc32 of its section table,
//                                             in hex; that table holds its
//                                             sections' crc32s)
//   crc32 CRC                                (of every byte before this line)
//
// A step whose manifest is missing was never committed: a rank killed
// mid-save leaves a shard's .tmp or some shards, which no reader takes
// (ckpt_latest finds the newest .ckpt or .manifest) and the next commit's
// pruning removes. Readers check each shard's size and table crc32 against
// the manifest, then its sections' crc32s as for any checkpoint file.
typedef struct CkptSegment {
    int64_t off, len; // floats: where the segment starts in the store, and how many
} CkptSegment;
typedef struct CkptRange {
    int64_t lo, hi; // [lo, hi) of a segment, in its own floats
} CkptRange;

// Rank `rank` of `ranks`'s shard of step meta->step (meta->n: the whole
// store's floats, tiled by segs), its floats through io's get (store
// offsets). Creates DIR if missing. Sets the file's size and the crc32 of
// its section table, for the manifest. The same fault injection as
// ckpt_save, and MT_CKPT_ABORT_STEP=S limits it to the save of step S.
// Returns 0, or -1 with a message (nothing under the shard's name then).
int ckpt_save_shard(const char *dir, const CkptMeta *meta, const CkptSegment *segs, int nsegs, int rank, int ranks,
                    const CkptIO *io, int64_t *bytes, uint32_t *table_crc, char *err, size_t errcap);
// Rank 0, after every rank's ckpt_save_shard succeeded: the manifest of
// meta->step naming the `ranks` shards with their sizes and table crc32s
// (each rank's), then the pruning of ckpt_save (the newest `keep` committed
// steps kept, a manifest with the shards it names; .tmp files, uncommitted
// shards and shards of a kept step by another number of ranks removed).
// Returns 0, or -1 with a message.
int ckpt_commit_shards(const char *dir, int keep, const CkptMeta *meta, const CkptSegment *segs, int nsegs, int ranks,
                       const int64_t *bytes, const uint32_t *table_crcs, char *err, size_t errcap);

// Reads a checkpoint, a single file (step-*.ckpt, versions 2 and 3) or a
// sharded one (step-*.manifest, saved by any number of ranks), as
// ckpt_latest names it: its meta (n the whole store's), and with io, the
// floats of w, m and v this reader wants, put through io at store offsets:
// of each segment k of segs (the plan's, which must equal a manifest's),
// [want[k].lo, want[k].hi) (want NULL: everything), so that a rank of a
// replicated store fills every segment and a rank of a sharded one its
// slices. Only the shards that hold wanted floats are read (and shard 0,
// whose META is the checkpoint's), each checked whole. Refuses n other
// than expected_n (>= 0; with io it must be given). Returns 0, or -1 with
// a message naming the file; on -1 *meta is zeroed and what was put is
// unspecified.
int ckpt_load(const char *path, CkptMeta *meta, int64_t expected_n, const CkptSegment *segs, int nsegs,
              const CkptRange *want, const CkptIO *io, char *err, size_t errcap);

// Finds the newest checkpoint in dir: the step-DIGITS.ckpt or
// step-DIGITS.manifest with the largest step (files under a final name are
// complete by construction; *.tmp leftovers, shards and other names are
// ignored; the file is not opened, ckpt_load validates it). path receives
// "DIR/step-%09lld.ckpt" (or .manifest), ready for ckpt_load.
// Returns 0, or -1 with a message (no such directory, no checkpoint in it,
// path too small for the name).
int ckpt_latest(const char *dir, char *path, size_t pathcap, char *err, size_t errcap);

// Reads the meta of a checkpoint, validating magic, version, endianness, the
// table and every section's crc, even of the arrays it is not asked for (a
// corrupted file is refused with a message naming the file and the section:
// "FILE: section W is corrupted (crc32 mismatch)"; truncated: "FILE: section
// M is truncated"). Refuses a checkpoint whose n differs from expected_n,
// giving both numbers; expected_n < 0 accepts any n, and then w, m and v must
// be NULL (a meta-only read, to learn n). Reads w, m, v (n floats each) when
// not NULL. Returns 0, or -1 with a message; on -1 *meta is zeroed and the
// arrays' contents are unspecified (they may hold part of a damaged file).
int ckpt_read(const char *path, CkptMeta *meta, int64_t expected_n, float *w, float *m, float *v, char *err,
              size_t errcap);

#endif
