/* lm_quant.h - quantized models in safetensors files (what colossal-quantize writes and the sessions load).
 *
 * A quantized weight is stored under its Hugging Face name as a U8 tensor [rows, row bytes] holding the
 * blocks of its leaf (col_lm_leaf_shape: [out, in] for an in_out weight), and the file's "__metadata__"
 * maps the same name to "<dtype> <rows> <cols>" (e.g. "q4_0 2304 768"): the dtype (col_dtype_name) and the
 * leaf's shape in values. Other readers see a valid safetensors file of byte tensors; the tag says how to
 * read them. Every other tensor is stored as it always is (f32). */
#ifndef COL_LM_QUANT_H
#define COL_LM_QUANT_H

#include <stddef.h>

#include "checkpoint.h"
#include "lm.h"

/* The quantized weight formats by name: int8 (= q8_0), q4 (= q4_0), q8_0, q4_0, q4_K, q6_K (q4_k, q6_k too). */
bool col_lm_quant_parse(const char *name, col_dtype *out);
#define COL_LM_QUANT_NAMES "int8, q4, q8_0, q4_0, q4_K, q6_K"

/* The quantized dtype a checkpoint's tagged tensors hold (the first tagged one's; a file colossal-quantize
 * wrote has one), or COL_F32 when none is tagged: what a session should hold to load it as it is. */
col_dtype col_lm_quant_detect(const col_ckpt *ck);

/* The metadata value of a tensor of dtype dt and leaf shape [rows, cols]. */
void col_lm_quant_tag(col_dtype dt, const int64_t shape[2], char *buf, size_t size);

/* Whether file tensor x is quantized (*dt a block dtype, shape its leaf shape) or not (*dt COL_F32). A tag
 * that does not parse, names no block dtype, or does not match the stored bytes is COL_EFORMAT. */
col_status col_lm_quant_of(const col_ckpt *ck, const col_ckpt_tensor *x, col_dtype *dt, int64_t shape[2],
                           col_err *err);

/* The f32 values of a quantized file tensor for parameter s, in the spec's layout ([in, out] again for an
 * in_out weight): w holds col_param_numel(s) floats. COL_ESHAPE when the leaf shape is not s's. */
col_status col_lm_quant_read_f32(const col_ckpt_tensor *x, col_dtype dt, const int64_t shape[2],
                                 const col_param_spec *s, float *w, col_err *err);

#endif
