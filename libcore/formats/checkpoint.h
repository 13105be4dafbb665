/* checkpoint.h - tensors stored in model files: safetensors (single or
 * sharded with model.safetensors.index.json), PyTorch pickles
 * (pytorch_model.bin, single or sharded with pytorch_model.bin.index.json)
 * and NumPy .npz archives (np.savez / np.savez_compressed: DeepMind's
 * AlphaFold parameters, e.g. params_model_3_ptm.npz).
 *
 * Every file is untrusted: each length, offset, dtype and shape is checked
 * before use, and a bad file gives COL_EFORMAT with one line naming the file
 * and what is wrong. Nothing in a file is ever executed.
 *
 * safetensors files are memory-mapped; tensor data points into the mapping,
 * and col_ckpt_read_f32 drops the pages it has read from this process's
 * resident memory (they stay in the page cache).
 * PyTorch checkpoints and .npz archives are zip archives, also mapped:
 * entries stored uncompressed are used in place, deflated ones are
 * decompressed into memory.
 */
#ifndef COL_CHECKPOINT_H
#define COL_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "tensor.h"

/* Every dtype transformers writes to safetensors / torch state dicts. */
typedef enum {
    COL_ST_F64, COL_ST_F32, COL_ST_F16, COL_ST_BF16,
    COL_ST_I64, COL_ST_I32, COL_ST_I16, COL_ST_I8, COL_ST_U8, COL_ST_BOOL,
    COL_ST_DTYPE_COUNT
} col_st_dtype;

size_t col_st_dtype_size(col_st_dtype dt);
const char *col_st_dtype_name(col_st_dtype dt);   /* safetensors spelling: "F32", "BF16", ... */

typedef struct {
    const char *name;        /* e.g. "transformer.h.0.attn.c_attn.weight" */
    col_st_dtype dtype;
    int ndim;                /* 0..COL_MAX_DIMS */
    int64_t shape[COL_MAX_DIMS];
    const void *data;        /* contiguous, row-major, little-endian; may be
                                unaligned (read it with memcpy) */
    size_t nbytes;           /* numel * dtype size */
    const char *file;        /* the file it came from (for messages) */
    bool mapped;             /* data lies in a read-only mapping of the file: once read, its pages may leave
                                memory (col_ckpt_read_f32 lets them go, so a checkpoint read tensor by
                                tensor never stays resident as a whole) */
} col_ckpt_tensor;

typedef struct col_ckpt col_ckpt;

/* Opens a checkpoint: a directory holding model.safetensors,
 * model.safetensors.index.json (+ shards), pytorch_model.bin or
 * pytorch_model.bin.index.json (+ shards) -- tried in that order -- or one
 * such file given directly: a zip is read as an .npz when its name ends in
 * .npz or, whatever its name, when it has no <prefix>/data.pkl entry and at
 * least one *.npy entry (else as PyTorch); *.json as an index; anything else
 * as safetensors. An .npz's tensors are named by their entry names less
 * ".npy" ("alphafold/.../transition1//weights").
 * An index is {"weight_map": {tensor: shard file}}: shards must be plain file
 * names in the index's directory, are opened in name order, and must hold
 * every tensor mapped to them; a tensor in two shards is an error.
 * Tensors are numbered source by source, each file in its own order (for
 * safetensors: by data offset). Missing paths give COL_EIO, bad files
 * COL_EFORMAT. */
col_status col_ckpt_open(const char *path, col_ckpt **out, col_err *err);
void col_ckpt_close(col_ckpt *c);
int col_ckpt_count(const col_ckpt *c);
const col_ckpt_tensor *col_ckpt_get(const col_ckpt *c, int i);
const col_ckpt_tensor *col_ckpt_find(const col_ckpt *c, const char *name);   /* NULL if absent; O(log n) */
/* The value of a safetensors "__metadata__" key in the file tensor t came from; NULL when that file has
 * none, or t comes from another format. */
const char *col_ckpt_tensor_meta(const col_ckpt *c, const col_ckpt_tensor *t, const char *key);
/* Which format was read: "safetensors", "pytorch" or "npz". */
const char *col_ckpt_format(const col_ckpt *c);

/* Converts a stored tensor to f32 (any float or integer dtype; BOOL gives
 * 0/1; integers and F64 round to nearest); dst holds numel floats.
 * COL_ESHAPE if the shape differs from (ndim, shape), naming the tensor and
 * both shapes. */
col_status col_ckpt_read_f32(const col_ckpt_tensor *t, int ndim, const int64_t *shape, float *dst, col_err *err);
/* The checks of col_ckpt_read_f32 alone (shape, dtype, size): COL_OK when
 * reading t into that shape would succeed. */
col_status col_ckpt_check_f32(const col_ckpt_tensor *t, int ndim, const int64_t *shape, col_err *err);

/* Writes tensors (f32 data, shapes given) as one safetensors file the way
 * the Python library does (tensors sorted by name, header padded with spaces
 * to a multiple of 8 bytes), atomically: streamed to a temporary file in the
 * same directory, fsync, rename (col_st_writer_* below, tensor after tensor). metadata: optional NULL-terminated list
 * {key0, value0, key1, value1, ..., NULL} stored as "__metadata__".
 * COL_EINVAL for an empty, reserved ("__metadata__") or repeated name or a
 * bad shape; the old file, if any, is then untouched. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[COL_MAX_DIMS];
    const float *data;
    bool u8;                 /* the data are bytes (dtype U8, the shape counts bytes), not f32: a quantized
                                tensor's blocks (models/lm/lm_quant.h) */
} col_st_out;
col_status col_st_write_f32(const char *path, const col_st_out *tensors, int n, const char *const *metadata,
                            col_err *err);
/* The same with the header padded (spaces, as the format allows) so that the data begin at a multiple of align
 * bytes (8 to 4096, a multiple of 8): with sizes that are multiples of it too, every tensor then starts on such
 * a boundary, and a reader can use f32 weights in place where the file is mapped (col_lm_trainer_load_mapped
 * wants 64). The tensors, their order and the JSON are col_st_write_f32's. */
col_status col_st_write_aligned(const char *path, const col_st_out *tensors, int n, const char *const *metadata,
                                size_t align, col_err *err);

/* The same file written piece by piece, so that the tensors need never be in
 * memory all at once (a model on the NVMe tier goes out chunk by chunk
 * through a bounded buffer). col_st_writer_begin checks the tensors and the
 * metadata as col_st_write_f32 does (the data pointers are not used and may
 * be NULL), lays the file out - the header, then the data in name order, so
 * every tensor's place is known - and writes the header to a temporary file
 * beside path. col_st_writer_put writes len bytes of tensor i (its index in
 * the array given to begin) at byte off of that tensor's data; pieces may
 * come in any order, each byte once (pwrite at its place). col_st_writer_end
 * with ok checks that every tensor was written whole (else COL_EINVAL), then
 * fsyncs the file and renames it over path; without ok, or after a failed
 * put, it removes the temporary file and the old file, if any, is untouched
 * (ok false returns COL_OK: the caller's error stands). end always frees w.
 * The bytes are col_st_write_f32's whatever the order of the pieces. */
typedef struct col_st_writer col_st_writer;
col_status col_st_writer_begin(const char *path, const col_st_out *tensors, int n, const char *const *metadata,
                               col_st_writer **out, col_err *err);
/* col_st_writer_begin laying the file out as col_st_write_aligned does */
col_status col_st_writer_begin_aligned(const char *path, const col_st_out *tensors, int n, const char *const *metadata,
                                       size_t align, col_st_writer **out, col_err *err);
col_status col_st_writer_put(col_st_writer *w, int i, uint64_t off, const void *data, size_t len, col_err *err);
col_status col_st_writer_end(col_st_writer *w, bool ok, col_err *err);

/* ---- the format readers behind col_ckpt_open (for tests and fuzzing) ---- */
typedef struct col_st_file col_st_file;
/* Parses a safetensors image in memory (data/len must outlive the file;
 * name is used in messages). Refuses (COL_EFORMAT) a header length beyond
 * the file or over 100 MB, a header that is not UTF-8 JSON holding one
 * object, unknown dtypes, shapes with more than COL_MAX_DIMS dims or entries
 * that are not non-negative integers, sizes that overflow, data_offsets that
 * are not [begin, end] integers with begin <= end <= data size and
 * end - begin == numel * dtype size, overlapping ranges, repeated names and
 * "__metadata__" that is not {string: string}. Gaps between ranges and
 * trailing bytes are allowed. Tensors come in file order (by data_offsets). */
col_status col_st_parse(const void *data, size_t len, const char *name, col_st_file **out, col_err *err);
col_status col_st_open(const char *path, col_st_file **out, col_err *err);  /* mmap, read-only */
int col_st_count(const col_st_file *f);
const col_ckpt_tensor *col_st_get(const col_st_file *f, int i);
/* The "__metadata__" value stored under key, or NULL. */
const char *col_st_metadata(const col_st_file *f, const char *key);
void col_st_close(col_st_file *f);

typedef struct col_pt_file col_pt_file;
/* Parses a PyTorch zip checkpoint image in memory; the pickle may only use
 * the opcodes and globals a state dict needs (OrderedDict, torch's tensor
 * rebuild functions, storage types); anything else (e.g. os.system) is
 * refused with an error naming it. Storages stored uncompressed and 16-byte
 * aligned in data are referenced in place, so data/len must outlive the file
 * (like col_st_parse); col_pt_open maps the file and keeps the mapping. */
col_status col_pt_parse(const void *data, size_t len, const char *name, col_pt_file **out, col_err *err);
col_status col_pt_open(const char *path, col_pt_file **out, col_err *err);
int col_pt_count(const col_pt_file *f);
const col_ckpt_tensor *col_pt_get(const col_pt_file *f, int i);
void col_pt_close(col_pt_file *f);

typedef struct col_npz_file col_npz_file;
/* Parses a NumPy .npz image in memory: a zip (stored or deflated entries)
 * holding only NAME.npy entries, each a .npy array of format 1.0, 2.0 or
 * 3.0 whose header is exactly {'descr', 'fortran_order', 'shape'} (parsed,
 * never evaluated) and whose data is exactly numel * itemsize bytes. Read:
 * the little-endian dtypes <f8 <f4 <f2 <i8 <i4 <i2 |i1 |u1 |b1, C order, at
 * most COL_MAX_DIMS dims (0: a scalar). Refused with a message naming the
 * array: big-endian, Fortran-ordered, object, structured and other dtypes,
 * header keys other than those three, a wrong data length, an entry that is
 * not NAME.npy, a name twice. Tensors are named NAME and come in archive
 * order. Stored entries are referenced in place, so data/len must outlive
 * the file; col_npz_open maps the file and keeps the mapping. */
col_status col_npz_parse(const void *data, size_t len, const char *name, col_npz_file **out, col_err *err);
col_status col_npz_open(const char *path, col_npz_file **out, col_err *err);
int col_npz_count(const col_npz_file *f);
const col_ckpt_tensor *col_npz_get(const col_npz_file *f, int i);
void col_npz_close(col_npz_file *f);
/* Whether a zip image is an .npz rather than a PyTorch checkpoint: it lists
 * no <prefix>/data.pkl and at least one *.npy (entry names only). */
bool col_npz_sniff(const void *data, size_t len);

#endif
