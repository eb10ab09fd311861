// data.h: training data for mtrun. A data file is mapped read-only and kept
// mapped; batches are cut from it as llm.c's loader does.
//
// Three formats:
//   - llm.c's token file: a header of 256 little-endian int32 (magic, version,
//     token count, the rest unused), then that many little-endian tokens:
//     GPT-2's (magic 20240520, version 1, uint16 tokens) or Llama-3's (magic
//     20240801, version 7, uint32 tokens). A file whose name ends in ".bin",
//     or whose first four bytes are either magic, must be one, and is
//     validated in full, every token below the model's vocabulary included.
//   - byte-level text: any other file; each byte is a token 0..255, so the
//     model's vocabulary must hold at least 256 tokens.
//
// Document starts go with a token file X.bin when X.docs exists (tools/
// prepare_data.py writes it): the same header with magic 20241205, version
// 1 and the token count, then one byte per token, 1 where a document (a
// conversation) starts. Attention in a row then never crosses a document's
// start (the segment starts below); the loss mask is unchanged by it.
//
// A loss mask goes with a token file X.bin when X.mask exists (tools/
// prepare_data.py writes both): the same header with magic 20240902, version
// 1 and the token count, then one byte per token, 1 where that token counts
// as a target and 0 where it does not (a prompt, a user turn, padding). Its
// count must equal the token file's. A target whose token the mask excludes
// is fed as DATA_IGNORE (PyTorch's ignore index), which the loss skips: the
// loss is the mean over the counted targets.
//
// The last val_fraction of the tokens is the validation split, the rest the
// training split; val_fraction 1 makes the whole file validation data (a
// separate --val-data file). In a data-parallel run (rank, ranks below) the
// batch is each rank's slice of a global batch of ranks*B rows. A batch is B rows of T+1 consecutive tokens, each row
// starting T tokens after the one before (so rows overlap by one token):
// tokens[b*T + t] = x[pos + b*T + t], targets[b*T + t] = x[pos + b*T + t + 1],
// which reads B*T+1 tokens from pos.
//
// Errors are returned as "FILE: what is wrong" in the caller's buffer, never
// printed. The file is never written: it is opened O_RDONLY and mapped
// PROT_READ, MAP_PRIVATE.
#ifndef MT_DATA_H
#define MT_DATA_H

#include <stddef.h>
#include <stdint.h>

#define DATA_LLMC_MAGIC 20240520
#define DATA_LLMC_VERSION 1
#define DATA_LLMC3_MAGIC 20240801 // llm.c's Llama-3 token files
#define DATA_LLMC3_VERSION 7
#define DATA_MASK_MAGIC 20240902 // mt's loss masks
#define DATA_MASK_VERSION 1
#define DATA_DOCS_MAGIC 20241205 // mt's document starts
#define DATA_DOCS_VERSION 1
#define DATA_LLMC_HEADER_BYTES 1024 // 256 int32
#define DATA_IGNORE (-100)          // a target that does not count (PyTorch's ignore_index)

typedef enum DataFormat {
    DATA_TEXT,  // raw bytes, one token each
    DATA_LLMC,  // llm.c header + uint16 tokens
    DATA_LLMC3, // llm.c Llama-3 header + uint32 tokens
} DataFormat;

typedef struct DataSet {
    char *path;               // as the user named it (malloc'd), for messages
    const unsigned char *map; // (map_len) the whole file, PROT_READ, MAP_PRIVATE
    size_t map_len;
    DataFormat format;
    const unsigned char *toks;     // (ntokens) bytes for text, (2*ntokens) LE uint16 or (4*ntokens) LE uint32 for llm.c
    int64_t ntokens;               // in the whole file
    char *mask_path;               // the loss mask X.mask of X.bin (malloc'd), or NULL: every target counts
    const unsigned char *mask_map; // (mask_len) the whole mask file
    size_t mask_len;
    const unsigned char *mask;           // (ntokens) 1: the token counts as a target; NULL without a mask
    int64_t nmasked;                     // tokens the mask excludes
    char *doc_starts_path;               // the document starts X.docs of X.bin (malloc'd), or NULL: one stream
    const unsigned char *doc_starts_map; // (doc_starts_len) the whole file
    size_t doc_starts_len;
    const unsigned char *doc_starts; // (ntokens) 1: the token starts a document; NULL without the file
    int64_t ndocuments;              // documents the file starts
    int64_t ntrain;                  // tokens [0, ntrain) are the training split
    int64_t nval;                    // tokens [ntrain, ntokens) the validation split; 0 when val_fraction is 0
    double val_fraction;             // as given to data_open
    int64_t train_pos; // next training token offset within the training split (checkpointed by the caller)
    // A data-parallel run's part (runtime/dist/dist.h): each batch of B rows the
    // functions below cut is this rank's rows [rank*B, rank*B + B) of a
    // global batch of ranks*B rows, cut as one process would cut it, so the
    // ranks together see the tokens one process sees at batch ranks*B.
    // data_open sets rank 0 of 1; the caller sets them before data_check_batch.
    int rank, ranks;
    // data_shuffle: the training split as W = (ntrain - 1) / T windows of T + 1
    // tokens (window i from token i*T), every epoch in an order of its own
    int shuffle;
    uint64_t shuffle_seed;
    int64_t rows_done; // windows taken since the start of the run, every rank's (checkpointed through data_position)
    int64_t *perm;     // (perm_n) epoch perm_epoch's order of the windows, for windows of perm_T
    int64_t perm_n, perm_epoch, perm_T;
} DataSet;

// Opens path (and its mask, when there is one); vocab is the model's
// vocabulary size; val_fraction is in [0, 1] (0: no validation split, 1: all
// of it validation). Returns 0, or -1 with a message in err
// ("FILE: what is wrong") and *d zeroed, so data_close(d) is harmless either way.
int data_open(DataSet *d, const char *path, int64_t vocab, double val_fraction, char *err, size_t errcap);

// Checks that each split holds at least B*T+1 tokens (the validation split
// only when there is one). Returns 0, or -1 with a message in err giving the
// numbers. Call it once after data_open and before the batch functions: they
// require it, and write zeros rather than read past a split too small for a
// batch.
int data_check_batch(const DataSet *d, int64_t B, int64_t T, char *err, size_t errcap);

// The next training batch: tokens[b*T + t] and targets = the next token (DATA_IGNORE where the mask excludes it), taken
// from consecutive windows of B*T+1 tokens starting at train_pos (B rows of T+1 consecutive tokens each, rows following
// each other, as llm.c's loader); advances train_pos by B*T and wraps to 0 when the next batch would not fit. A
// train_pos from which the batch itself would not fit (a checkpoint taken with another B or T, say) is taken as 0. seg
// (NULL: not wanted) gets each position's segment start within its row: the last t' <= t of the row (t' > 0) whose
// token X.docs marks as a document's first, else 0, for the attention (kernels.h); all 0 without X.docs.
void data_next_train(DataSet *d, int64_t B, int64_t T, int32_t *tokens, int32_t *targets, int32_t *seg); // (B, T) each

// From now on data_next_train takes each row from a window of the training
// split in a seeded random order: the split cut into W = (ntrain - 1) / T
// windows of T + 1 tokens (window i from token i*T, as the straight loader's
// rows), each epoch (W rows) a Fisher-Yates permutation of them drawn from
// seed and the epoch's number, so every window is seen once an epoch, in
// another order each epoch, the same for the same seed. Validation is not
// shuffled.
void data_shuffle(DataSet *d, uint64_t seed);

// Where the training data is, for a checkpoint: train_pos, or with
// data_shuffle -1 - the windows taken (negative, so that a checkpoint says
// which it is); data_seek goes back there, refusing a position of the other
// kind. 0, or -1 with a message.
int64_t data_position(const DataSet *d);
int data_seek(DataSet *d, int64_t pos, char *err, size_t errcap);

// The i-th validation batch, the same way from the validation split's start (wrapping modulo the number
// of whole batches that fit), so validation loss is computed on the same batches every time.
void data_val_batch(const DataSet *d, int64_t i, int64_t B, int64_t T, int32_t *tokens, int32_t *targets, int32_t *seg);
int64_t data_val_batches(const DataSet *d, int64_t B, int64_t T); // how many whole batches fit

// X + suffix for a token file X.bin when that file or folder exists
// (malloc'd), else NULL: what tools/prepare_data.py writes beside the tokens,
// X.tokenizer/ (the tokenizer's own files, which --export DIR copies) and
// X.vocab.json (below).
char *data_sidecar(const char *path, const char *suffix);

// The bytes each token stands for, to print what a model says: for byte
// text the byte itself; for a token file X.bin the vocabulary
// X.vocab.json = {"tokens": ["68656c6c6f", ...], "bos_token_id": N or null,
// "eos_token_id": ..., "pad_token_id": ...}, token i's bytes as hexadecimal
// pairs (a special token's its text). Token ids from n up to the model's
// vocabulary decode to nothing.
typedef struct DataVocab {
    int64_t n;         // tokens
    char *bytes;       // (off[n]) every token's bytes, one after another
    int64_t *off;      // (n + 1) token i is bytes[off[i], off[i + 1])
    int bos, eos, pad; // -1: not known
    char *path;        // the vocabulary file (malloc'd); NULL for bytes
} DataVocab;
// Opens d's vocabulary, sized to at least `vocab` tokens. 0, or -1 with a
// message in err (no X.vocab.json beside a token file, or a bad one).
int data_vocab_open(DataVocab *v, const DataSet *d, int64_t vocab, char *err, size_t errcap);
void data_vocab_close(DataVocab *v);

// Unmaps the file and zeroes *d.
void data_close(DataSet *d);

#endif
