/* dm_trainer.c - a diffusion component's parameters trained with AdamW, in memtier chunks. */
#include "dm_trainer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "mt_resident.h"
#include "optim.h"
#include "plan.h"

struct dm_trainer {
    dm_train_config cfg;
    const col_backend *be;
    mb_builder *b;
    col_graph *g;
    col_node *loss;
    mt_pool *pool;
    int n;               /* parameters (b->n at creation) */
    mt_ref *ref;         /* [4 * n]: weights, gradient, exp_avg, exp_avg_sq (chunk -1: none) */
    col_opt_tensor *ot;  /* the trained tensors, in parameter order */
    int *oti;            /* per parameter: its index in ot, or -1 */
    int nt;
    col_plan *plan;
    mt_resident *res;
    long runs;
    int micro;           /* micro-batches since the last step */
    int64_t step;
    int64_t total, trained;
};

dm_train_config dm_train_defaults(void)
{
    return (dm_train_config){.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-2f,
                             .max_grad_norm = 1.0f, .grad_accum = 1};
}

float dm_train_lr(const dm_train_config *c, int64_t s)
{
    if (s < 0) s = 0;
    if (c->warmup_steps > 0 && s < c->warmup_steps) /* LambdaLR: base_lr * (s / W) in double */
        return (float)((double)c->lr * ((double)s / (double)c->warmup_steps));
    return c->lr;
}

static int64_t numel(const mb_param *p)
{
    int64_t k = 1;
    for (int d = 0; d < p->ndim; d++) k *= p->shape[d];
    return k;
}

static col_opt_config opt_of(const dm_train_config *c)
{
    col_opt_config o = col_opt_defaults(COL_OPT_ADAMW);
    o.lr = c->lr;
    o.beta1 = c->beta1;
    o.beta2 = c->beta2;
    o.eps = c->eps;
    o.weight_decay = c->weight_decay;
    return o;
}

static col_status check_config(const dm_train_config *c, col_err *err)
{
    col_opt_config o = opt_of(c);
    col_status st = col_opt_validate(&o, err);
    if (st != COL_OK) return st;
    if (c->warmup_steps < 0) return col_err_set(err, COL_EINVAL, "training: %" PRId64 " warmup steps", c->warmup_steps);
    if (!(c->max_grad_norm >= 0 && isfinite(c->max_grad_norm)))
        return col_err_set(err, COL_EINVAL, "training: a gradient clipping norm of %g (0 = off, or > 0)",
                           (double)c->max_grad_norm);
    if (c->grad_accum < 0 || c->grad_accum > 65536)
        return col_err_set(err, COL_EINVAL, "training: gradient accumulation over %d micro-batches (1..65536)",
                           c->grad_accum);
    return COL_OK;
}

/* the chunk size: the option, else the one wasting least on the weights (at most memtier's default; with a
 * compute tier about an eighth of the weights, so that the tier has chunks to choose from) */
static col_status chunk_size(const dm_trainer *t, size_t *out, col_err *err)
{
    if (t->cfg.chunk_bytes) {
        *out = t->cfg.chunk_bytes;
        return COL_OK;
    }
    size_t total = 0, cap = MT_DEFAULT_CHUNK_BYTES;
    for (int i = 0; i < t->n; i++) total += (size_t)numel(&t->b->params[i]) * sizeof(float);
    if (t->cfg.compute_budget && total / 8 < cap) cap = total / 8;
    if (cap < 4096) cap = 4096;
    size_t *sz = calloc(t->n > 0 ? (size_t)t->n : 1, sizeof *sz);
    if (!sz) return col_err_set(err, COL_ENOMEM, "training: out of memory");
    int k = 0;
    for (int i = 0; i < t->n; i++) {
        size_t b = (size_t)numel(&t->b->params[i]) * sizeof(float);
        if (b <= cap) sz[k++] = b;
    }
    col_status st = COL_OK;
    if (k) st = mt_chunk_bytes_auto(sz, k, cap, out, NULL, err);
    else *out = cap;
    free(sz);
    return st;
}

/* every tensor placed: weights in first-use order, then the trained ones' gradients and moments */
static col_status place(dm_trainer *t, col_err *err)
{
    size_t chunk = 0;
    col_status st = chunk_size(t, &chunk, err);
    if (st != COL_OK) return st;
    mt_config mc = {.chunk_bytes = chunk, .host_budget = t->cfg.host_budget};
    if ((st = mt_create(&mc, &t->pool, err)) != COL_OK) return st;
    static const mt_kind kinds[4] = {MT_PARAM, MT_GRAD, MT_OPTSTATE, MT_OPTSTATE};
    col_status first = COL_OK;
    col_err fail = {0};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < t->n; i++) {
            t->ref[k * t->n + i] = (mt_ref){.chunk = -1};
            if (k > 0 && !t->b->params[i].trainable) continue;
            size_t bytes = (size_t)numel(&t->b->params[i]) * sizeof(float);
            /* after a budget failure keep planning: the message then names what all of it needs */
            col_status a = mt_alloc(t->pool, kinds[k], bytes, &t->ref[k * t->n + i], &fail);
            if (a != COL_OK && a != COL_ENOMEM) return col_err_copy(err, &fail);
            if (a == COL_ENOMEM) first = a;
        }
    return first == COL_OK ? COL_OK : col_err_copy(err, &fail);
}

static col_status load_weights(dm_trainer *t, const mb_source *src, dm_init_fn init, void *user, col_err *err)
{
    for (int i = 0; i < t->n; i++) {
        const mb_param *p = &t->b->params[i];
        float *w = mt_ptr(t->pool, t->ref[i]);
        col_status st;
        if (src && src->has(src, p->name)) st = src->read(src, p->name, p->ndim, p->shape, w, err);
        else if (init) st = init(user, p, w, err);
        else st = col_err_set(err, COL_EFORMAT, "the weights have no tensor %s", p->name);
        if (st != COL_OK) return st;
    }
    return COL_OK;
}

/* the plan: the loss and every gradient accumulation, nothing else kept */
static col_status make_plan(dm_trainer *t, col_err *err)
{
    int na = 0, ng = col_graph_count(t->g);
    for (int i = 0; i < ng; i++)
        if (col_graph_node(t->g, i)->op == COL_OP_ACCUMULATE) na++;
    col_node **outs = malloc(sizeof *outs * (size_t)(na + 1));
    if (!outs) return col_err_set(err, COL_ENOMEM, "training: out of memory");
    int k = 0;
    outs[k++] = t->loss;
    for (int i = 0; i < ng; i++)
        if (col_graph_node(t->g, i)->op == COL_OP_ACCUMULATE) outs[k++] = col_graph_node(t->g, i);
    col_status st = col_plan_create_for(t->g, t->be, outs, k, &t->plan, err);
    free(outs);
    if (st == COL_OK && t->cfg.compute_budget) st = mt_resident_create(t->pool, t->plan, t->cfg.compute_budget, &t->res, err);
    return st;
}

col_status dm_trainer_create(const dm_train_config *cfg, const col_backend *be, mb_builder *b, col_node *loss,
                             const mb_source *src, dm_init_fn init, void *init_user, dm_trainer **out, col_err *err)
{
    *out = NULL;
    col_status st = check_config(cfg, err);
    if (st != COL_OK) return st;
    if ((st = mb_builder_status(b, err)) != COL_OK) return st;
    if (b->dtype != COL_F32) return col_err_set(err, COL_EUNSUPPORTED, "training: f32 weights only");
    if (!loss || loss->t.dtype != COL_F32 || col_numel(&loss->t) != 1)
        return col_err_set(err, COL_EINVAL, "training: the loss must be one f32 value");
    if (be && be->mem && !cfg->compute_budget)
        return col_err_set_on(err, COL_SETTING_COMPUTE_BUDGET, COL_EINVAL,
                              "a GPU trains through a compute tier: it needs a compute tier budget");
    dm_trainer *t = calloc(1, sizeof *t);
    if (!t) return col_err_set(err, COL_ENOMEM, "training: out of memory");
    t->cfg = *cfg;
    t->be = be;
    t->b = b;
    t->g = b->g;
    t->loss = loss;
    t->n = b->n;
    t->ref = malloc(sizeof *t->ref * 4 * (size_t)(t->n ? t->n : 1));
    t->ot = calloc((size_t)(t->n ? t->n : 1), sizeof *t->ot);
    t->oti = malloc(sizeof *t->oti * (size_t)(t->n ? t->n : 1));
    if (!t->ref || !t->ot || !t->oti) {
        dm_trainer_free(t);
        return col_err_set(err, COL_ENOMEM, "training: out of memory");
    }
    for (int i = 0; i < t->n; i++) {
        t->total += numel(&b->params[i]);
        if (b->params[i].trainable) t->trained += numel(&b->params[i]);
    }
    if (t->trained == 0) st = col_err_set(err, COL_EINVAL, "training: the graph has no trainable parameter");
    if (st == COL_OK) st = place(t, err);
    for (int i = 0; i < t->n && st == COL_OK; i++) {
        t->oti[i] = -1;
        if (!b->params[i].trainable) continue;
        col_opt_tensor *o = &t->ot[t->nt];
        t->oti[i] = t->nt++;
        o->w = mt_ptr(t->pool, t->ref[i]);
        o->g = mt_ptr(t->pool, t->ref[t->n + i]);
        o->m = mt_ptr(t->pool, t->ref[2 * t->n + i]);
        o->v = mt_ptr(t->pool, t->ref[3 * t->n + i]);
        o->n = numel(&b->params[i]);
        o->decay = true; /* AdamW(unet.parameters()): biases and norms decay too */
    }
    if (st == COL_OK) st = load_weights(t, src, init, init_user, err);
    for (int i = 0; i < t->n && st == COL_OK; i++) {
        mb_param *p = &b->params[i];
        st = col_bind(p->node, mt_addr(t->pool, t->ref[i]), err);
        if (st == COL_OK && p->trainable) st = col_bind_grad(p->node, mt_addr(t->pool, t->ref[t->n + i]), err);
    }
    if (st == COL_OK) {
        col_mark_output(loss);
        st = col_graph_backward(t->g, loss, err);
    }
    if (st == COL_OK && be && be->mem) mt_pin_host(t->pool, be, 1u << MT_PARAM | 1u << MT_GRAD);
    if (st == COL_OK) st = make_plan(t, err);
    if (st != COL_OK) {
        dm_trainer_free(t);
        return st;
    }
    *out = t;
    return COL_OK;
}

void dm_trainer_free(dm_trainer *t)
{
    if (!t) return;
    mt_resident_free(t->res);
    col_plan_free(t->plan);
    mt_destroy(t->pool);
    free(t->ref);
    free(t->ot);
    free(t->oti);
    free(t);
}

col_status dm_trainer_upload(dm_trainer *t, col_node *input, const void *src, size_t bytes, col_err *err)
{
    return col_plan_upload(t->plan, input, src, bytes, err);
}

col_status dm_trainer_backward(dm_trainer *t, float *loss, col_err *err)
{
    if (t->micro == 0) mt_zero(t->pool, MT_GRAD);
    col_status st = t->res ? mt_resident_run(t->res, t->be, t->runs++, err) : col_plan_run(t->plan, t->be, err);
    if (st != COL_OK) return st;
    t->micro++;
    if (loss) st = col_plan_download(t->plan, t->loss, loss, sizeof *loss, err);
    return st;
}

col_status dm_trainer_step(dm_trainer *t, dm_step_info *info, col_err *err)
{
    if (t->micro == 0) return col_err_set(err, COL_ESTATE, "training: an optimizer step without a backward pass");
    int na = t->micro;
    if (na > 1)
        for (int i = 0; i < t->nt; i++)
            for (int64_t j = 0; j < t->ot[i].n; j++) t->ot[i].g[j] /= (float)na;
    float lr = dm_train_lr(&t->cfg, t->step);
    double norm = 0;
    col_status st = COL_OK;
    if (t->cfg.max_grad_norm > 0) st = col_clip_grad_norm(t->ot, t->nt, t->cfg.max_grad_norm, &norm, err);
    else norm = col_grad_global_norm(t->ot, t->nt);
    if (st != COL_OK && !isfinite(norm))
        return col_err_set(err, COL_EINVAL, "step %" PRId64 ": the gradient norm is %g: training diverged; lower the "
                           "learning rate", t->step + 1, norm);
    col_opt_config o = opt_of(&t->cfg);
    if (st == COL_OK) st = col_opt_step(&o, lr, t->step + 1, t->ot, t->nt, err);
    if (st != COL_OK) return st;
    t->micro = 0;
    t->step++;
    if (info) *info = (dm_step_info){.step = t->step, .lr = lr, .grad_norm = norm};
    return COL_OK;
}

int64_t dm_trainer_steps(const dm_trainer *t) { return t->step; }
void dm_trainer_set_steps(dm_trainer *t, int64_t steps) { t->step = steps; }
int dm_trainer_count(const dm_trainer *t) { return t->n; }
const mb_param *dm_trainer_param(const dm_trainer *t, int i) { return i >= 0 && i < t->n ? &t->b->params[i] : NULL; }
int64_t dm_trainer_numel(const dm_trainer *t, int i) { return i >= 0 && i < t->n ? numel(&t->b->params[i]) : 0; }
int64_t dm_trainer_total(const dm_trainer *t) { return t->total; }
int64_t dm_trainer_trained(const dm_trainer *t) { return t->trained; }
mt_pool *dm_trainer_pool(dm_trainer *t) { return t->pool; }

static float *kind_ptr(const dm_trainer *t, int k, int i)
{
    if (i < 0 || i >= t->n) return NULL;
    mt_ref r = t->ref[k * t->n + i];
    return r.chunk < 0 ? NULL : mt_ptr(t->pool, r);
}

float *dm_trainer_weights(const dm_trainer *t, int i) { return kind_ptr(t, 0, i); }
float *dm_trainer_grad(const dm_trainer *t, int i) { return kind_ptr(t, 1, i); }
float *dm_trainer_moment(const dm_trainer *t, int i, int slot)
{
    return slot == 0 || slot == 1 ? kind_ptr(t, 2 + slot, i) : NULL;
}

/* the tensors of a file: names in one block */
enum { ST_NAME_MAX = MB_NAME_MAX + 16 };
typedef struct {
    col_st_out *o;
    char *names;
    int n;
} st_list;

static col_status list_alloc(st_list *l, int n, col_err *err)
{
    l->o = calloc((size_t)(n ? n : 1), sizeof *l->o);
    l->names = malloc((size_t)(n ? n : 1) * ST_NAME_MAX);
    l->n = 0;
    if (!l->o || !l->names) return col_err_set(err, COL_ENOMEM, "saving: out of memory");
    return COL_OK;
}

static void list_free(st_list *l)
{
    free(l->o);
    free(l->names);
}

static void list_add(st_list *l, const mb_param *p, const float *data, const char *name)
{
    char *dst = l->names + (size_t)l->n * ST_NAME_MAX;
    snprintf(dst, ST_NAME_MAX, "%s", name);
    col_st_out *o = &l->o[l->n++];
    o->name = dst;
    o->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++) o->shape[d] = p->shape[d];
    o->data = data;
}

col_status dm_trainer_save(const dm_trainer *t, const char *path, dm_name_fn name, void *user,
                           const char *const *metadata, col_err *err)
{
    st_list l;
    col_status st = list_alloc(&l, t->n, err);
    char buf[MB_NAME_MAX];
    for (int i = 0; i < t->n && st == COL_OK; i++) {
        const mb_param *p = &t->b->params[i];
        if (name ? !name(user, p, buf, sizeof buf) : !p->trainable) continue;
        list_add(&l, p, dm_trainer_weights(t, i), name ? buf : p->name);
    }
    if (st == COL_OK) st = col_st_write_f32(path, l.o, l.n, metadata, err);
    list_free(&l);
    return st;
}

col_status dm_trainer_save_optimizer(const dm_trainer *t, const char *path, col_err *err)
{
    st_list l;
    col_status st = list_alloc(&l, 2 * t->n, err);
    char buf[MB_NAME_MAX + 16], step[32];
    for (int i = 0; i < t->n && st == COL_OK; i++) {
        const mb_param *p = &t->b->params[i];
        if (!p->trainable) continue;
        for (int s = 0; s < 2; s++) {
            snprintf(buf, sizeof buf, "%s.%s", p->name, s ? "exp_avg_sq" : "exp_avg");
            list_add(&l, p, dm_trainer_moment(t, i, s), buf);
        }
    }
    snprintf(step, sizeof step, "%" PRId64, t->step);
    const char *meta[] = {"format", "colossal-diffuse optimizer 1", "optimizer", "adamw", "step", step, NULL};
    if (st == COL_OK) st = col_st_write_f32(path, l.o, l.n, meta, err);
    list_free(&l);
    return st;
}

col_status dm_trainer_load_optimizer(dm_trainer *t, const char *path, col_err *err)
{
    col_st_file *f = NULL;
    col_status st = col_st_open(path, &f, err);
    if (st != COL_OK) return st;
    const char *step = col_st_metadata(f, "step");
    char *end = NULL;
    long long s = step ? strtoll(step, &end, 10) : -1;
    if (!step || *end || s < 0)
        st = col_err_set(err, COL_EFORMAT, "%s has no step count: not an optimizer state colossal-diffuse wrote", path);
    int expect = 0;
    for (int i = 0; i < t->n && st == COL_OK; i++) {
        const mb_param *p = &t->b->params[i];
        if (!p->trainable) continue;
        for (int k = 0; k < 2 && st == COL_OK; k++) {
            char buf[MB_NAME_MAX + 16];
            snprintf(buf, sizeof buf, "%s.%s", p->name, k ? "exp_avg_sq" : "exp_avg");
            const col_ckpt_tensor *ct = NULL;
            for (int j = 0; j < col_st_count(f) && !ct; j++)
                if (strcmp(col_st_get(f, j)->name, buf) == 0) ct = col_st_get(f, j);
            if (!ct) st = col_err_set(err, COL_EFORMAT, "%s has no tensor %s: it belongs to another run", path, buf);
            else if (ct->dtype != COL_ST_F32) st = col_err_set(err, COL_EFORMAT, "%s: %s is not F32", path, buf);
            else st = col_ckpt_read_f32(ct, p->ndim, p->shape, dm_trainer_moment(t, i, k), err);
            expect++;
        }
    }
    if (st == COL_OK && col_st_count(f) != expect)
        st = col_err_set(err, COL_EFORMAT, "%s holds %d tensors where this run has %d: it belongs to another run", path,
                         col_st_count(f), expect);
    if (st == COL_OK) t->step = s;
    col_st_close(f);
    return st;
}
