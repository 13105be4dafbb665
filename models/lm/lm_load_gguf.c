/* lm_load_gguf.c - a session's weights from a GGUF file (llama.cpp's format; lm_gguf.h maps its tensors).
 *
 * A tensor whose ggml type is a block dtype the engine multiplies in place (Q8_0, Q4_0, Q4_K, Q6_K) goes
 * into a session holding that dtype as its bytes, rows moved back where the converter permuted them (LLaMA's
 * q/k); GPT-2's Conv1D weights are stored [out, in], which is the layout a quantized leaf has
 * (col_lm_leaf_shape). Anything else (f32, f16, bf16, other block types, a session holding another dtype)
 * is read as f32 and stored as the session holds it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "filemap.h"
#include "lm_gguf.h"
#include "lm_trainer_internal.h"

col_dtype col_lm_gguf_block_dtype(uint32_t ggml_type)
{
    switch (ggml_type) {
    case COL_GGML_Q8_0: return COL_Q8_0;
    case COL_GGML_Q4_0: return COL_Q4_0;
    case COL_GGML_Q4_K: return COL_Q4_K;
    case COL_GGML_Q6_K: return COL_Q6_K;
    default: return COL_F32;
    }
}

col_status col_lm_gguf_param_dtypes(const col_gguf *g, const col_lm_config *c, col_dtype *out, col_err *err)
{
    int np = col_lm_param_count(c);
    col_param_spec *specs = calloc((size_t)np, sizeof *specs);
    if (!specs)
        return col_err_set(err, COL_ENOMEM, "out of memory");
    col_lm_param_specs(c, specs);
    col_status st = COL_OK;
    for (int i = 0; i < np && st == COL_OK; i++) {
        col_lm_gguf_tensor gt;
        if ((st = col_lm_gguf_find(g, c, i, &gt, err)) != COL_OK)
            break;
        col_dtype q = col_lm_gguf_block_dtype(gt.t->type);
        /* held as stored only where a quantized leaf has the stored layout */
        out[i] = col_lm_quant_dtype(&specs[i], q) == q && gt.transposed == specs[i].in_out ? q : COL_F32;
    }
    free(specs);
    return st;
}

/* parameter i read in place from the tensor gt: stored exactly as the session holds it (the same block dtype in
 * the leaf's layout, or f32 in the parameter's), rows in order */
static bool map_param(col_lm_trainer *t, int i, const col_lm_gguf_tensor *gt, bool same_blocks,
                      col_lm_load_report *rep)
{
    if (!t->ext || gt->row_perm_heads)
        return false;
    const col_param_spec *s = &t->specs[i];
    bool f32 = lmt_param_dtype(t, i) == COL_F32 && gt->t->type == COL_GGML_F32 && !gt->transposed &&
               gt->nbytes == sizeof(float) * (size_t)col_param_numel(s) && (uintptr_t)gt->data % LMT_MAP_ALIGN == 0;
    if (!f32 && !(same_blocks && (uintptr_t)gt->data % 2 == 0))
        return false;
    lmt_map_param(t, i, gt->data, gt->nbytes, rep);
    return true;
}

static col_status load_gguf(col_lm_trainer *t, const col_gguf *g, col_lm_load_report *rep, col_err *err)
{
    if (lmt_partial(t) || t->par)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: a GGUF file loads into a session of the whole model in one "
                           "process", col_gguf_name(g));
    const col_lm_config *c = &t->cfg.model;
    col_lm_config fc;
    col_status st = col_lm_gguf_config(g, &fc, err);
    if (st == COL_OK && (fc.arch != c->arch || fc.n_layer != c->n_layer || fc.hidden != c->hidden ||
                         fc.vocab_size != c->vocab_size || fc.n_head != c->n_head || fc.n_kv_head != c->n_kv_head ||
                         fc.ffn != c->ffn))
        st = col_err_set(err, COL_EFORMAT, "%s holds a %d-layer %s of hidden size %d; the session is a %d-layer %s "
                         "of hidden size %d", col_gguf_name(g), fc.n_layer, col_arch_name(fc.arch), fc.hidden,
                         c->n_layer, col_arch_name(c->arch), c->hidden);
    for (int i = 0; i < t->np && st == COL_OK; i++) {
        const col_param_spec *s = &t->specs[i];
        col_lm_gguf_tensor gt;
        if ((st = col_lm_gguf_find(g, c, i, &gt, err)) != COL_OK)
            break;
        col_dtype want = lmt_param_dtype(t, i);
        int64_t ls[2];
        col_lm_leaf_shape(s, want, ls);
        bool same_blocks = col_dtype_is_quant(want) && col_lm_gguf_block_dtype(gt.t->type) == want &&
                           gt.transposed == s->in_out && ls[0] == gt.rows && ls[1] == gt.cols &&
                           gt.row_bytes == col_dtype_row_bytes(want, gt.cols);
        if (map_param(t, i, &gt, same_blocks, rep))
            continue;
        if (same_blocks) {
            void *p = NULL;
            if ((st = lmt_get(t, 0, i, true, &p, err)) != COL_OK)
                break;
            for (int64_t r = 0; r < gt.rows; r++) {
                int64_t from = gt.row_perm_heads > 0 ? col_lm_gguf_perm_row(r, gt.row_perm_heads, gt.rows) : r;
                memcpy((char *)p + (size_t)r * gt.row_bytes, (const char *)gt.data + (size_t)from * gt.row_bytes,
                       gt.row_bytes);
            }
            col_file_release(gt.data, gt.nbytes); /* (its copy is in the session) */
            continue;
        }
        /* f32 values: in the parameter itself, or through the conversion buffer */
        void *w = t->conv;
        if (!lmt_mixed(t))
            st = lmt_get(t, 0, i, true, &w, err);
        if (st == COL_OK)
            st = col_lm_gguf_read_f32(g, c, i, w, err);
        if (st == COL_OK && lmt_mixed(t))
            st = lmt_set_weights(t, i, w, err);
        if (st == COL_OK)
            col_file_release(gt.data, gt.nbytes); /* (its copy is in the session) */
    }
    if (st == COL_OK)
        st = mt_stage_flush(t->stage, err);
    mt_stage_forget(t->stage);
    return st;
}

col_status col_lm_trainer_load_gguf(col_lm_trainer *t, const col_gguf *g, col_err *err)
{
    col_status st = lmt_refuse_mapped(t, err);
    return st != COL_OK ? st : load_gguf(t, g, NULL, err);
}

col_status col_lm_trainer_load_gguf_mapped(col_lm_trainer *t, col_gguf **g, col_lm_load_report *report, col_err *err)
{
    col_lm_load_report own;
    if (!report)
        report = &own;
    report->n_mapped = 0, report->mapped_bytes = 0;
    col_status st = lmt_map_begin(t, err);
    if (st == COL_OK && (st = load_gguf(t, *g, report, err)) == COL_OK && lmt_map_end(t, st, report)) {
        t->ext_gguf = *g;
        *g = NULL;
    }
    return st;
}
