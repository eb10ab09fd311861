// tier.h: the NVMe tier, a second host tier for optimizer state: one scratch
// file, DIR/mtrun.tier, holding a record per layer (the layer's Adam moments,
// m then v, and with the plan's tier=master or tier=grads its fp32 master or
// its gradients too: store.c, tier_arrays), each record contiguous and each
// array in it padded to 4096 bytes, so that a layer is one O_DIRECT transfer.
//
// I/O goes through io_uring (liburing) with O_DIRECT (buffered where the
// filesystem refuses O_DIRECT, as tmpfs does), in TIER_BLOCK requests, up to
// TIER_DEPTH in flight. Records are staged in TIER_SLOTS buffers: while the
// caller updates layer i in one, layer i+1 is read into another (prefetched
// when i is acquired) and layer i-1 is written back from the third.
//
// The file is scratch: truncated and preallocated (fallocate) when opened,
// locked (flock) against a second mtrun, removed when closed; a run killed
// leaves it behind, and the next run in DIR starts it afresh. It never holds
// a checkpoint: checkpoints are whole files of their own (checkpoint.h) and
// the tier is filled from them on resume.
//
// One caller thread at a time. Errors are returned as "FILE: layer N: what
// is wrong" in the caller's buffer, never printed; nothing here exits.
//
// Fault injection for tests (counting write requests of TIER_BLOCK or less
// from 1 in submission order):
//   MT_TIER_SHORT_WRITE=N   the Nth write request is submitted 4096 bytes
//                           short, as a device that wrote less would return
//   MT_TIER_KILL_AT_WRITE=N SIGKILL right after the Nth write request is
//                           submitted (a crash in the middle of a write)
#ifndef MT_TIER_H
#define MT_TIER_H

#include <stddef.h>
#include <stdint.h>

enum {
    TIER_ALIGN = 4096,    // every array in a record starts and ends on it
    TIER_BLOCK = 1 << 20, // bytes per read or write request
    TIER_DEPTH = 32,      // requests in flight
    TIER_SLOTS = 3,       // staging buffers: reading i+1, updating i, writing i-1
};

typedef struct Tier Tier;

// Opens DIR/mtrun.tier for `layers` records of `arrays` arrays of `floats`
// floats each, and preallocates it. Refuses up front, naming the bytes and
// the path, when DIR's filesystem has less free space than the file needs
// or fallocate fails (a full disk, a file size limit). Returns the tier, or
// NULL with a message.
Tier *tier_open(const char *dir, int64_t layers, int64_t floats, int arrays, char *err, size_t errcap);

// Floats from one array of a record to the next (floats rounded up to TIER_ALIGN bytes).
int64_t tier_stride(const Tier *t);
// The file's size in bytes, and its path.
int64_t tier_bytes(const Tier *t);
const char *tier_path(const Tier *t);

// Layer's record, staged in a page-aligned buffer: (arrays * tier_stride) floats, array
// a at a * tier_stride. Waits for its read (or a write of it in flight);
// starts reading layer + 1 (mod layers) into another slot. The record stays
// the caller's until tier_release. A read that comes back short (the file
// was truncated or damaged behind mtrun's back) is refused naming the file
// and the layer. Returns NULL with a message on any error.
float *tier_acquire(Tier *t, int64_t layer, char *err, size_t errcap);

// Layer's record for a caller that replaces all of it: a staging buffer,
// the file not read (its contents unspecified until the caller fills it),
// nothing prefetched; then tier_release with dirty. NULL with a message on
// an error.
float *tier_acquire_new(Tier *t, int64_t layer, char *err, size_t errcap);

// Gives back layer's record; dirty: it changed, write it back (the write
// runs while the caller goes on). Returns 0, or -1 with a message (a write
// that completed short or failed, naming the file and the layer).
int tier_release(Tier *t, int64_t layer, int dirty, char *err, size_t errcap);

// Waits for every read and write in flight. Returns 0, or -1 with a message.
int tier_drain(Tier *t, char *err, size_t errcap);

// Drains, closes and removes the file, frees the tier (NULL: nothing).
void tier_close(Tier *t);

#endif
