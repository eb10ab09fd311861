// safetensors.h: Hugging Face safetensors files, read (mapped read-only,
// validated in full) and written (atomically, sharded like Hugging Face).
//
// A file is a little-endian uint64 N, then N bytes of JSON, then the data
// buffer:
//   {"NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]}, ...,
//    "__metadata__": {"format": "pt"}}
// where [BEGIN, END) is relative to the data buffer's start. A sharded set is
// an index, NAME.safetensors.index.json = {"metadata": {"total_size": T},
// "weight_map": {"TENSOR": "model-00001-of-00002.safetensors", ...}}, with the
// shards in the index's directory.
//
// Errors are returned as "FILE: what is wrong" in the caller's buffer (FILE
// the shard, index or directory at fault), never printed. Files are read
// O_RDONLY and mapped PROT_READ, MAP_PRIVATE; the host must be little-endian.
#ifndef MT_SAFETENSORS_H
#define MT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_RANK 8

typedef enum StDtype { ST_F32, ST_BF16, ST_F16 } StDtype;

typedef struct StTensor {
    const char *name; // owned by the set
    StDtype dtype;
    int rank;                   // 0 (a scalar: one element) .. ST_MAX_RANK
    int64_t shape[ST_MAX_RANK]; // (rank) the rest zero
    const void *data;           // (nbytes) inside the file's read-only mapping; not necessarily aligned
    int64_t nbytes;             // shape product * element size
    const char *file;           // the file it is in, for messages (owned by the set)
} StTensor;

typedef struct StFile {
    char *path;               // as opened (malloc'd); StTensor.file points here
    const unsigned char *map; // (map_len) the whole file, PROT_READ, MAP_PRIVATE
    size_t map_len;
} StFile;

typedef struct StSet {
    StTensor *tensors; // (n) file by file (shards in name order), each file's in data-offset order
    int n;
    StFile *files; // (nfiles) one, or the index's shards
    int nfiles;
    const StTensor **by_name; // (n) the tensors sorted by name, for st_find
} StSet;

// path: a .safetensors file, an index (a name ending in ".json"; its shards
// are resolved relative to its directory), or a directory holding
// model.safetensors (taken first, as transformers does) or
// model.safetensors.index.json. Validates everything: the header size within
// the file, the header well-formed JSON and an object, dtypes known (others
// refused naming the tensor and the dtype), ranks at most ST_MAX_RANK, shape
// product * element size == END - BEGIN, offsets within the data buffer, no
// two tensors overlapping, no duplicate names (across shards too), and for an
// index: each weight_map entry names a shard that exists and holds that
// tensor, and each shard's tensors are all in the weight_map. Gaps between
// tensors and bytes after the last are allowed; the index's total_size is
// not checked. Returns 0, or -1 with a message in err and *s zeroed, so
// st_close(s) is harmless either way.
int st_open(StSet *s, const char *path, char *err, size_t errcap);

// The tensor named name, or NULL if the set has none. O(log n).
const StTensor *st_find(const StSet *s, const char *name);

// Elements in t: the product of its shape (1 for a scalar).
int64_t st_numel(const StTensor *t);

// Converts t's data to fp32: exactly for BF16 and F16, subnormals, infinities
// and NaNs (payload and sign kept) included.
void st_to_f32(const StTensor *t, float *out); // out: (st_numel(t))

// Frees what st_open allocated, unmaps the files and zeroes *s.
void st_close(StSet *s);

typedef struct StOut {
    const char *name;
    int rank;                   // 0 .. ST_MAX_RANK
    int64_t shape[ST_MAX_RANK]; // (rank)
    const float *data;          // (shape product) fp32; may be NULL when the product is 0
    // or, data NULL: fill writes the tensor's floats into dst (shape product) when the writer reaches
    // it, one tensor at a time, in the order given (a gather over the ranks: weights.c); 0, or -1
    // with a message
    int (*fill)(void *ctx, const struct StOut *t, float *dst, char *err, size_t errcap);
    void *ctx;
    int64_t at; // for fill: where the tensor's floats are, in the caller's terms
} StOut;

// Writes t[0..n) in that order, contiguous from offset 0, as dtype: ST_F32
// (the bits as given) or ST_BF16 (rounded to nearest even; a NaN stays a NaN
// of the same sign, quiet). The header holds "__metadata__": {"format": "pt"}
// (so transformers loads it) and is padded with spaces to a multiple of 8
// bytes, as the reference implementation does.
//
// Sharding: when shard_bytes > 0 and the data exceeds it, tensors are packed
// in order into shards of at most shard_bytes (a bigger tensor alone in its
// own), named as Hugging Face does: for "out/model.safetensors",
// "out/model-00001-of-00003.safetensors", ..., plus
// "out/model.safetensors.index.json" (metadata.total_size, the data bytes,
// and weight_map, sorted by name, as transformers writes it). If the packing
// gives one shard, a plain "out/model.safetensors" is written instead, as
// Hugging Face does. (A path not ending in ".safetensors" gets the same
// suffixes after its full base name.)
//
// Every file is written to PATH.tmp, fsync'ed, then all are renamed (the
// shards before the index) and the directory synced. Then what a previous
// write left that would contradict this one is removed: PATH after a sharded
// write; the index after a single-file write; and shards named
// STEM-NNNNN-of-NNNNN.safetensors that are not this write's. On failure
// nothing of this write is left (no temporary file, no new shard) and -1 is
// returned with a message. Refused before anything is written: dtype ST_F16,
// a tensor with no name, the name "__metadata__", a name given twice, a rank
// out of range, a negative dimension, sizes that overflow, NULL data and
// no fill with elements.
int st_write(const char *path, const StOut *t, int n, StDtype dtype, int64_t shard_bytes, char *err, size_t errcap);

// "F32", "BF16", "F16".
const char *st_dtype_name(StDtype d);

#endif
