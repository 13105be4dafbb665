/* lm_trainer_batch.c - batched decoding of many sequences (col_lm_batch in lm_trainer.h): the
 * serving path. Each slot is one row of every layer's key/value caches [slots, n_kv_head, ctx,
 * head_dim]; a graph of k rows takes each row's start position and cache row at run time
 * (col_lm_build_opts.cache_rows), so one step graph per batch size k serves any k slots. */
#include <stdlib.h>
#include <string.h>

#include "lm_trainer_internal.h"
#include "units.h"

enum { PREFILL_GRAPHS = 4 }; /* prefill graphs kept, by prompt length (least recently used goes) */

typedef struct {
    col_graph *g;
    col_plan *plan;
    lmt_tier tier;
    col_lm_graph lg;
    int batch, seq;
    uint64_t used; /* the batch's clock at its last use */
} bgraph;

struct col_lm_batch {
    col_lm_trainer *t;
    int slots, ctx;
    float *kv;            /* 2 * n_layer caches of [slots, n_kv_head, ctx, head_dim] */
    int *pos;             /* per slot: the positions it holds */
    bgraph *step;         /* [slots]: the step graph of k rows at step[k - 1] */
    bgraph pre[PREFILL_GRAPHS];
    int64_t *start, *rows; /* [slots] scratch inputs */
    uint64_t clock;
};

size_t col_lm_batch_cache_bytes(const col_lm_config *c, int slots, int ctx)
{
    return sizeof(float) * 2 * (size_t)c->n_layer * (size_t)c->n_kv_head * (size_t)c->head_dim * (size_t)slots *
           (size_t)ctx;
}

static void bg_free(bgraph *b)
{
    lmt_tier_free(&b->tier);
    col_plan_free(b->plan);
    col_graph_free(b->g);
    lmt_graph_arrays_free(&b->lg);
    free(b->lg.cache);
    memset(b, 0, sizeof *b);
}

/* a graph of `batch` rows of `seq` new tokens over the batch's caches */
static col_status bg_build(col_lm_batch *b, bgraph *d, int batch, int seq, col_err *err)
{
    col_lm_trainer *t = b->t;
    const col_lm_config *c = &t->cfg.model;
    bg_free(d);
    d->g = col_graph_new();
    d->lg.cache = calloc((size_t)(2 * c->n_layer), sizeof(col_node *));
    if (!d->g || !lmt_graph_arrays(t, &d->lg) || !d->lg.cache)
        return col_err_set(err, COL_ENOMEM, "batched decoding: out of memory");
    col_lm_build_opts o = {.batch = batch, .seq = seq, .cache_len = b->ctx, .cache_rows = b->slots};
    lmt_lora_opts(t, &o);
    col_status st = col_lm_build(d->g, c, &o, &d->lg, err);
    if (st == COL_OK) {
        col_mark_output(d->lg.logits);
        st = lmt_bind_params(t, &d->lg, false, err);
    }
    size_t per = (size_t)b->slots * (size_t)c->n_kv_head * (size_t)b->ctx * (size_t)c->head_dim;
    for (int l = 0; l < 2 * c->n_layer && st == COL_OK; l++)
        st = col_bind(d->lg.cache[l], b->kv + (size_t)l * per, err);
    if (st == COL_OK)
        st = col_plan_create_on(d->g, t->be, &d->plan, err);
    if (st == COL_OK)
        st = lmt_share_memory(t, d->plan, err);
    if (st == COL_OK) {
        /* the shared arena may have grown: the other graphs' compute tiers are made again on their next run */
        for (int k = 0; k < b->slots; k++)
            lmt_tier_free(&b->step[k].tier);
        for (int k = 0; k < PREFILL_GRAPHS; k++)
            lmt_tier_free(&b->pre[k].tier);
        d->batch = batch;
        d->seq = seq;
    } else {
        bg_free(d);
    }
    return st;
}

col_status col_lm_batch_open(col_lm_trainer *t, int slots, int ctx, col_lm_batch **out, col_err *err)
{
    *out = NULL;
    const col_lm_config *c = &t->cfg.model;
    if (lmt_partial(t))
        return col_err_set(err, COL_EUNSUPPORTED, "batched decoding: this session holds only a pipeline stage");
    if (t->par)
        return col_err_set(err, COL_EUNSUPPORTED, "batched decoding: not under tensor or sequence parallelism");
    if (t->cfg.objective != COL_LM_OBJ_MEAN_CE && t->cfg.objective != COL_LM_OBJ_TOKEN_LOGPROB)
        return col_err_set(err, COL_EUNSUPPORTED, "batched decoding: the session is a value model (no vocabulary)");
    if (slots < 1 || slots > 4096)
        return col_err_set(err, COL_EINVAL, "batched decoding: %d sequences (1..4096)", slots);
    if (ctx < 1 || ctx > c->max_positions)
        return col_err_set(err, COL_EINVAL, "batched decoding: %d positions per sequence; the model has %d", ctx,
                           c->max_positions);
    col_lm_batch *b = calloc(1, sizeof *b);
    if (!b)
        return col_err_set(err, COL_ENOMEM, "batched decoding: out of memory");
    b->t = t;
    b->slots = slots;
    b->ctx = ctx;
    b->pos = calloc((size_t)slots, sizeof *b->pos);
    b->step = calloc((size_t)slots, sizeof *b->step);
    b->start = calloc((size_t)slots, sizeof *b->start);
    b->rows = calloc((size_t)slots, sizeof *b->rows);
    if (!b->pos || !b->step || !b->start || !b->rows) {
        col_lm_batch_close(b);
        return col_err_set(err, COL_ENOMEM, "batched decoding: out of memory");
    }
    size_t bytes = col_lm_batch_cache_bytes(c, slots, ctx);
    col_err e2 = {0};
    if (lmt_kv_alloc(t, bytes / sizeof(float), &b->kv, &e2) != COL_OK) {
        col_lm_batch_close(b);
        char kb[COL_BYTES_STR];
        return col_err_set(err, COL_ENOMEM, "batched decoding: cannot allocate %s of key/value caches (%d "
                           "sequences of %d positions)%s%s", col_fmt_bytes(kb, sizeof kb, bytes), slots, ctx,
                           e2.msg[0] ? ": " : "", e2.msg);
    }
    *out = b;
    return COL_OK;
}

void col_lm_batch_close(col_lm_batch *b)
{
    if (!b)
        return;
    for (int k = 0; b->step && k < b->slots; k++)
        bg_free(&b->step[k]);
    for (int k = 0; k < PREFILL_GRAPHS; k++)
        bg_free(&b->pre[k]);
    lmt_kv_release(b->t, b->kv);
    free(b->pos);
    free(b->step);
    free(b->start);
    free(b->rows);
    free(b);
}

void col_lm_batch_reset(col_lm_batch *b, int slot)
{
    if (slot >= 0 && slot < b->slots)
        b->pos[slot] = 0;
}

int col_lm_batch_pos(const col_lm_batch *b, int slot)
{
    return slot >= 0 && slot < b->slots ? b->pos[slot] : -1;
}

col_status col_lm_batch_copy_prefix(col_lm_batch *b, int dst, int src, int n, col_err *err)
{
    if (dst < 0 || dst >= b->slots || src < 0 || src >= b->slots || dst == src)
        return col_err_set(err, COL_EINVAL, "batched decoding: copy from sequence %d to %d of %d", src, dst, b->slots);
    if (n < 0 || n > b->pos[src])
        return col_err_set(err, COL_EINVAL, "batched decoding: %d positions asked of a sequence holding %d", n,
                           b->pos[src]);
    const col_lm_config *c = &b->t->cfg.model;
    const col_backend_mem *m = lmt_dev(b->t);
    size_t head = (size_t)b->ctx * (size_t)c->head_dim, nb = sizeof(float) * (size_t)n * (size_t)c->head_dim;
    size_t rowsz = (size_t)c->n_kv_head * head;
    for (int l = 0; l < 2 * c->n_layer; l++) {
        float *base = b->kv + (size_t)l * (size_t)b->slots * rowsz;
        for (int h = 0; h < c->n_kv_head; h++) {
            float *d = base + (size_t)dst * rowsz + (size_t)h * head, *s = base + (size_t)src * rowsz + (size_t)h * head;
            if (!m)
                memcpy(d, s, nb);
            else if (!m->copy)
                return col_err_set(err, COL_EUNSUPPORTED, "batched decoding: the backend cannot copy device memory");
            else {
                col_status st = m->copy(b->t->be, d, s, nb, err);
                if (st != COL_OK)
                    return st;
            }
        }
    }
    b->pos[dst] = n;
    return COL_OK;
}

/* uploads the inputs and runs d; rows: its logits rows [row0, row0 + nrows) */
static col_status bg_run(col_lm_batch *b, bgraph *d, const int32_t *ids, size_t row0, size_t nrows,
                         const float **logits, col_err *err)
{
    col_lm_trainer *t = b->t;
    size_t k = (size_t)d->batch;
    col_status st = col_plan_upload(d->plan, d->lg.ids, ids, sizeof(int32_t) * k * (size_t)d->seq, err);
    if (st == COL_OK)
        st = col_plan_upload(d->plan, d->lg.start, b->start, sizeof(int64_t) * k, err);
    if (st == COL_OK)
        st = col_plan_upload(d->plan, d->lg.rows, b->rows, sizeof(int64_t) * k, err);
    if (st == COL_OK)
        st = lmt_run(t, d->plan, &d->tier, col_lm_batch_cache_bytes(&t->cfg.model, b->slots, b->ctx), err);
    if (st == COL_OK)
        st = lmt_get_logits(t, d->plan, d->lg.logits, row0, nrows, logits, err);
    d->used = ++b->clock;
    return st;
}

col_status col_lm_batch_prefill(col_lm_batch *b, int slot, const int32_t *tokens, int n, const float **logits,
                                col_err *err)
{
    if (slot < 0 || slot >= b->slots)
        return col_err_set(err, COL_EINVAL, "batched decoding: sequence %d of %d", slot, b->slots);
    if (n < 1 || b->pos[slot] + n > b->ctx)
        return col_err_set(err, COL_EINVAL, "batched decoding: %d more tokens after %d do not fit the %d positions",
                           n, b->pos[slot], b->ctx);
    bgraph *d = NULL, *lru = &b->pre[0];
    for (int i = 0; i < PREFILL_GRAPHS && !d; i++) {
        if (b->pre[i].g && b->pre[i].seq == n)
            d = &b->pre[i];
        else if (!b->pre[i].g || (lru->g && b->pre[i].used < lru->used))
            lru = &b->pre[i];
    }
    if (!d) {
        col_status st = bg_build(b, lru, 1, n, err);
        if (st != COL_OK)
            return st;
        d = lru;
    }
    b->start[0] = b->pos[slot];
    b->rows[0] = slot;
    col_status st = bg_run(b, d, tokens, (size_t)(n - 1), 1, logits, err);
    if (st == COL_OK)
        b->pos[slot] += n;
    return st;
}

col_status col_lm_batch_step(col_lm_batch *b, const int *slots, const int32_t *tokens, int k, const float **logits,
                             col_err *err)
{
    if (k < 1 || k > b->slots)
        return col_err_set(err, COL_EINVAL, "batched decoding: a step of %d sequences (1..%d)", k, b->slots);
    for (int i = 0; i < k; i++) {
        int s = slots[i];
        if (s < 0 || s >= b->slots)
            return col_err_set(err, COL_EINVAL, "batched decoding: sequence %d of %d", s, b->slots);
        if (b->pos[s] + 1 > b->ctx)
            return col_err_set(err, COL_EINVAL, "batched decoding: sequence %d is full (%d positions)", s, b->ctx);
        for (int j = 0; j < i; j++)
            if (slots[j] == s)
                return col_err_set(err, COL_EINVAL, "batched decoding: sequence %d twice in one step", s);
        b->start[i] = b->pos[s];
        b->rows[i] = s;
    }
    bgraph *d = &b->step[k - 1];
    if (!d->g) {
        col_status st = bg_build(b, d, k, 1, err);
        if (st != COL_OK)
            return st;
    }
    col_status st = bg_run(b, d, tokens, 0, (size_t)k, logits, err);
    if (st == COL_OK)
        for (int i = 0; i < k; i++)
            b->pos[slots[i]]++;
    return st;
}
