/* lm_load.c - a checkpoint into a session's parameters (lm_trainer.h): each
 * parameter's tensor found by name, the tensors no parameter reads refused
 * unless the family's transformers class ignores them too, the values copied
 * tensor by tensor and their NaN/Inf values counted. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "filemap.h"
#include "lm_family.h"
#include "lm_quant.h"
#include "lm_trainer_internal.h"

/* the name transformers gives the output projection in every family's *ForCausalLM */
static const char HEAD[] = "lm_head.weight";

static const col_ckpt_tensor *find_param(const col_ckpt *ck, const char *name)
{
    const col_ckpt_tensor *x = col_ckpt_find(ck, name);
    static const char *const prefixes[] = {"transformer.", "model.", "model.decoder."};
    for (size_t i = 0; !x && i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(name, prefixes[i], n) == 0)
            x = col_ckpt_find(ck, name + n);
    }
    if (!x && strncmp(name, "model.decoder.", 14) == 0) { /* facebook/opt-*: "decoder.layers..." */
        char alt[96];
        snprintf(alt, sizeof alt, "%s", name + 6);
        x = col_ckpt_find(ck, alt);
    }
    return x;
}

/* each parameter's tensor into src; a missing one is an error naming it */
static col_status resolve(const col_lm_trainer *t, const col_ckpt *ck, const col_ckpt_tensor **src, unsigned flags,
                          col_lm_load_report *rep, col_err *err)
{
    for (int i = 0; i < t->np; i++) {
        src[i] = find_param(ck, t->specs[i].name);
        if (!src[i] && (flags & COL_LOAD_NEW_VALUE_HEAD) && t->cfg.model.value_head && i == t->np - 1) {
            if (rep) /* a language model becoming a value model: its value head keeps its initialisation */
                rep->new_value_head = true;
            continue;
        }
        if (!src[i])
            return col_err_set(err, COL_EFORMAT, "the checkpoint has no tensor '%s', which a %d-layer %s model needs",
                               t->specs[i].name, t->cfg.model.n_layer, col_arch_name(t->cfg.model.arch));
    }
    return COL_OK;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
    return (x > y) - (x < y);
}

/* whether x holds exactly what emb holds: a tied lm_head saved beside the embedding it is tied to */
static bool same_tensor(const col_ckpt_tensor *x, const col_ckpt_tensor *emb)
{
    return x->dtype == emb->dtype && x->ndim == emb->ndim &&
           memcmp(x->shape, emb->shape, sizeof(int64_t) * (size_t)x->ndim) == 0 && x->nbytes == emb->nbytes &&
           (x->data == emb->data || memcmp(x->data, emb->data, x->nbytes) == 0);
}

static bool ends_with(const char *s, const char *end)
{
    size_t n = strlen(s), m = strlen(end);
    return n >= m && strcmp(s + n - m, end) == 0;
}

/* the error for tensor x, which no parameter of the model reads */
static col_status unused_error(const col_lm_trainer *t, const col_ckpt_tensor *x, const col_ckpt_tensor *emb,
                               col_err *err)
{
    const col_lm_config *c = &t->cfg.model;
    bool head = strcmp(x->name, HEAD) == 0;
    char why[192] = "";
    if (head && c->tie_embeddings)
        snprintf(why, sizeof why, " (it is not a copy of %.80s: was the model untied, tie_word_embeddings false?)",
                 emb->name);
    else if (c->arch == COL_ARCH_LLAMA && ends_with(x->name, "_proj.bias"))
        snprintf(why, sizeof why, " (the config has %s false)",
                 strstr(x->name, "self_attn.") ? "attention_bias" : "mlp_bias");
    return col_err_set_on(err, COL_SETTING_EXTRA_TENSORS, COL_EFORMAT,
                          "%s has a tensor '%.200s' that a %d-layer %s model%s does not use%s",
                          x->file ? x->file : "the checkpoint", x->name, c->n_layer, col_lm_family_of(c->arch)->title,
                          head && c->tie_embeddings ? " with tied embeddings" : "", why);
}

/* every tensor of ck that no parameter reads (src) must be one the family ignores, or a tied lm_head's
 * copy of the embedding (src[0] in every family), or accepted by COL_LOAD_IGNORE_EXTRA (and reported) */
static col_status check_unused(const col_lm_trainer *t, const col_ckpt *ck, const col_ckpt_tensor **src, unsigned flags,
                               col_lm_load_report *rep, col_err *err)
{
    const col_lm_config *c = &t->cfg.model;
    const col_lm_family *f = col_lm_family_of(c->arch);
    const col_ckpt_tensor **used = malloc(sizeof *used * (size_t)t->np);
    if (!used)
        return col_err_set(err, COL_ENOMEM, "loading the checkpoint: out of memory");
    memcpy(used, src, sizeof *used * (size_t)t->np);
    qsort(used, (size_t)t->np, sizeof *used, cmp_ptr);
    col_status st = COL_OK;
    for (int i = 0; i < col_ckpt_count(ck) && st == COL_OK; i++) {
        const col_ckpt_tensor *x = col_ckpt_get(ck, i);
        if (bsearch(&x, used, (size_t)t->np, sizeof *used, cmp_ptr) || col_lm_unused_ok(f, x->name) ||
            (c->tie_embeddings && strcmp(x->name, HEAD) == 0 && same_tensor(x, src[0])) ||
            (c->value_head && (flags & COL_LOAD_NEW_VALUE_HEAD) && strcmp(x->name, HEAD) == 0))
            continue;
        if (!(flags & COL_LOAD_IGNORE_EXTRA))
            st = unused_error(t, x, src[0], err);
        else if (rep && rep->n_extra++ < COL_LM_LOAD_NAMES)
            snprintf(rep->extra[rep->n_extra - 1], COL_LM_LOAD_NAME_MAX, "%s", x->name);
    }
    free(used);
    return st;
}

static int64_t count_nonfinite(const float *w, int64_t n)
{
    int64_t k = 0;
#pragma omp parallel for reduction(+ : k) schedule(static) if (n > (1 << 20))
    for (int64_t i = 0; i < n; i++)
        k += !isfinite(w[i]);
    return k;
}

static void note_nonfinite(col_lm_load_report *rep, const char *name, int64_t count)
{
    if (!rep || count == 0)
        return;
    if (rep->n_nonfinite < COL_LM_LOAD_NAMES) {
        snprintf(rep->nonfinite[rep->n_nonfinite].name, COL_LM_LOAD_NAME_MAX, "%s", name);
        rep->nonfinite[rep->n_nonfinite].count = count;
    }
    rep->n_nonfinite++;
}

bool lmt_can_map(const col_lm_trainer *t)
{
    const col_lm_train_config *c = &t->cfg;
    return c->inference && !t->be->mem && !c->compute_budget && !t->par && !t->dp && c->lora.rank == 0 &&
           !(t->nvme_kinds & (1u << MT_PARAM));
}

void lmt_map_param(col_lm_trainer *t, int i, const void *data, size_t nbytes, col_lm_load_report *rep)
{
    col_file_populate(data, nbytes); /* mapped now, not faulted in by the first token */
    t->ext[i] = data;
    void *p = (void *)(uintptr_t)data;
    if (lmt_mixed(t)) /* (a quantized session: its parameters are the 16-bit / block memory) */
        t->w16[i] = p;
    else
        t->ot[i].w = p;
    if (rep)
        rep->n_mapped++, rep->mapped_bytes += nbytes;
}

/* parameter i read in place from x, when x holds exactly its bytes (f32, or the same blocks as the session)
 * aligned as the kernels read them best */
static bool map_param(col_lm_trainer *t, int i, const col_ckpt_tensor *x, col_dtype have, bool same_blocks,
                      col_lm_load_report *rep)
{
    const col_param_spec *s = &t->specs[i];
    if (!t->ext || !x->mapped || have != lmt_param_dtype(t, i))
        return false;
    if (have == COL_F32) {
        if (x->dtype != COL_ST_F32 || (uintptr_t)x->data % LMT_MAP_ALIGN != 0 ||
            x->nbytes != sizeof(float) * (size_t)col_param_numel(s) || col_ckpt_check_f32(x, s->ndim, s->shape, NULL))
            return false;
    } else if (!same_blocks || (uintptr_t)x->data % 2 != 0) { /* (blocks begin with a 16-bit scale) */
        return false;
    }
    lmt_map_param(t, i, x->data, x->nbytes, rep);
    return true;
}

/* tensor by tensor through the stage: an NVMe chunk is read, filled and written back, a host one filled in place
 * (or, under t->ext, read in place from the file where it can be) */
static col_status copy_params(col_lm_trainer *t, const col_ckpt *ck, const col_ckpt_tensor **src,
                              col_lm_load_report *rep, col_err *err)
{
    col_status st = COL_OK;
    for (int i = 0; i < t->np && st == COL_OK; i++) {
        const col_param_spec *s = &t->specs[i];
        if (!src[i]) /* a new value head (COL_LOAD_NEW_VALUE_HEAD) */
            continue;
        /* a tensor colossal-quantize wrote: copied as it is into a session holding that dtype, else read as f32 */
        col_dtype have, want = lmt_param_dtype(t, i);
        int64_t qs[2], ls[2];
        if ((st = col_lm_quant_of(ck, src[i], &have, qs, err)) != COL_OK)
            break;
        if (have != COL_F32 && t->par) {
            st = col_err_set(err, COL_EUNSUPPORTED, "%s: quantized tensors do not load under tensor or sequence "
                             "parallelism", src[i]->name);
            break;
        }
        col_lm_leaf_shape(s, have, ls);
        bool same_blocks = have != COL_F32 && have == want && ls[0] == qs[0] && ls[1] == qs[1];
        if (map_param(t, i, src[i], have, same_blocks, rep)) {
            if (have == COL_F32)
                note_nonfinite(rep, s->name, count_nonfinite(src[i]->data, col_param_numel(s)));
            continue;
        }
        if (same_blocks) {
            void *p = NULL;
            if ((st = lmt_get(t, 0, i, true, &p, err)) == COL_OK)
                memcpy(p, src[i]->data, src[i]->nbytes);
            continue;
        }
        /* into the parameter; under mixed precision into the master (or the conversion buffer without one),
         * then rounded into the parameter */
        void *w = t->conv;
        bool mixed = lmt_mixed(t);
        if (!mixed || (lmt_has(t, LMT_MASTER, i) && !t->zn)) /* (a span of a master: through the buffer) */
            st = lmt_get(t, mixed ? LMT_MASTER : 0, i, true, &w, err);
        if (st == COL_OK && t->par) { /* this rank's block of the whole tensor */
            const col_param_spec *ws = &t->whole[i];
            if ((st = col_ckpt_read_f32(src[i], ws->ndim, ws->shape, t->pbuf, err)) == COL_OK)
                lmt_par_block(t, i, t->pbuf, w);
        } else if (st == COL_OK && have != COL_F32) {
            st = col_lm_quant_read_f32(src[i], have, qs, s, w, err);
        } else if (st == COL_OK) {
            st = col_ckpt_read_f32(src[i], s->ndim, s->shape, w, err);
        }
        if (st == COL_OK)
            note_nonfinite(rep, s->name, count_nonfinite(w, col_param_numel(s)));
        if (st == COL_OK && mixed)
            st = lmt_set_weights(t, i, w, err);
    }
    if (st == COL_OK)
        st = mt_stage_flush(t->stage, err);
    mt_stage_forget(t->stage);
    return st;
}

static col_status load_params(col_lm_trainer *t, const col_ckpt *ck, unsigned flags, col_lm_load_report *report,
                              col_err *err)
{
    if (report)
        memset(report, 0, sizeof *report);
    const col_ckpt_tensor **src = calloc((size_t)t->np, sizeof *src);
    if (!src)
        return col_err_set(err, COL_ENOMEM, "loading the checkpoint: out of memory");
    col_status st = resolve(t, ck, src, flags, report, err);
    if (st == COL_OK)
        st = check_unused(t, ck, src, flags, report, err);
    if (st == COL_OK)
        st = copy_params(t, ck, src, report, err);
    free(src);
    return st;
}

col_status lmt_refuse_mapped(const col_lm_trainer *t, col_err *err)
{
    if (t->ext || t->ext_ck || t->ext_gguf)
        return col_err_set(err, COL_ESTATE, "this session reads its weights in place from a model file: load other "
                           "weights into a new session");
    return COL_OK;
}

col_status col_lm_trainer_load_ex(col_lm_trainer *t, const col_ckpt *ck, unsigned flags, col_lm_load_report *report,
                                  col_err *err)
{
    col_status st = lmt_refuse_mapped(t, err);
    return st != COL_OK ? st : load_params(t, ck, flags, report, err);
}

col_status lmt_map_begin(col_lm_trainer *t, col_err *err)
{
    col_status st = lmt_refuse_mapped(t, err);
    if (st == COL_OK && lmt_can_map(t) && !(t->ext = calloc((size_t)t->np, sizeof *t->ext)))
        st = col_err_set(err, COL_ENOMEM, "loading the weights: out of memory");
    return st;
}

bool lmt_map_end(col_lm_trainer *t, col_status st, const col_lm_load_report *rep)
{
    if (st == COL_OK && rep->n_mapped > 0)
        return true;
    if (st == COL_OK) { /* nothing read in place: the session is an ordinary one */
        free(t->ext);
        t->ext = NULL;
    }
    return false;
}

col_status col_lm_trainer_load_mapped(col_lm_trainer *t, col_ckpt **ck, unsigned flags, col_lm_load_report *report,
                                      col_err *err)
{
    col_lm_load_report own;
    col_status st = lmt_map_begin(t, err);
    if (st == COL_OK && (st = load_params(t, *ck, flags, report ? report : &own, err)) == COL_OK &&
        lmt_map_end(t, st, report ? report : &own)) {
        t->ext_ck = *ck;
        *ck = NULL;
    }
    return st;
}

col_status col_lm_trainer_load(col_lm_trainer *t, const col_ckpt *ck, col_err *err)
{
    return col_lm_trainer_load_ex(t, ck, 0, NULL, err);
}
