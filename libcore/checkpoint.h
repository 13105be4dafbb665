/* checkpoint.h - tensors stored in model files: safetensors (single or
 * sharded with model.safetensors.index.json) and PyTorch pickles
 * (pytorch_model.bin, single or sharded with pytorch_model.bin.index.json).
 *
 * Every file is untrusted: each length, offset, dtype and shape is checked
 * before use, and a bad file gives COL_EFORMAT with one line naming the file
 * and what is wrong. Nothing in a file is ever executed.
 *
 * safetensors files are memory-mapped; tensor data points into the mapping.
 * Pickle checkpoints are read into memory (they are zip archives).
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
    const void *data;        /* contiguous, row-major, little-endian */
    size_t nbytes;           /* numel * dtype size */
    const char *file;        /* the file it came from (for messages) */
} col_ckpt_tensor;

typedef struct col_ckpt col_ckpt;

/* Opens a checkpoint: a directory holding model.safetensors,
 * model.safetensors.index.json (+ shards), pytorch_model.bin or
 * pytorch_model.bin.index.json (+ shards) -- tried in that order -- or one
 * such file given directly. */
col_status col_ckpt_open(const char *path, col_ckpt **out, col_err *err);
void col_ckpt_close(col_ckpt *c);
int col_ckpt_count(const col_ckpt *c);
const col_ckpt_tensor *col_ckpt_get(const col_ckpt *c, int i);
const col_ckpt_tensor *col_ckpt_find(const col_ckpt *c, const char *name);
/* Which format was read: "safetensors" or "pytorch". */
const char *col_ckpt_format(const col_ckpt *c);

/* Converts a stored tensor to f32 (any float or integer dtype); dst holds
 * numel floats. COL_ESHAPE if the shape differs from want (ndim, shape). */
col_status col_ckpt_read_f32(const col_ckpt_tensor *t, int ndim, const int64_t *shape, float *dst, col_err *err);

/* Writes tensors (f32 data, shapes given) as one safetensors file,
 * atomically; metadata: optional NULL-terminated key/value pairs. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[COL_MAX_DIMS];
    const float *data;
} col_st_out;
col_status col_st_write_f32(const char *path, const col_st_out *tensors, int n, const char *const *metadata,
                            col_err *err);

/* ---- the format readers behind col_ckpt_open (for tests and fuzzing) ---- */
typedef struct col_st_file col_st_file;
/* Parses a safetensors image in memory (data/len must outlive the file). */
col_status col_st_parse(const void *data, size_t len, const char *name, col_st_file **out, col_err *err);
col_status col_st_open(const char *path, col_st_file **out, col_err *err);  /* mmap */
int col_st_count(const col_st_file *f);
const col_ckpt_tensor *col_st_get(const col_st_file *f, int i);
void col_st_close(col_st_file *f);

typedef struct col_pt_file col_pt_file;
/* Parses a PyTorch zip checkpoint image in memory; the pickle may only use
 * the opcodes and globals a state dict needs (OrderedDict, torch's tensor
 * rebuild functions, storage types); anything else (e.g. os.system) is
 * refused with an error naming it. */
col_status col_pt_parse(const void *data, size_t len, const char *name, col_pt_file **out, col_err *err);
col_status col_pt_open(const char *path, col_pt_file **out, col_err *err);
int col_pt_count(const col_pt_file *f);
const col_ckpt_tensor *col_pt_get(const col_pt_file *f, int i);
void col_pt_close(col_pt_file *f);

#endif
