/* mb_store.c - a pipeline's weights in memtier chunks, and its graphs' plans. */
#include "mb_store.h"
#include "units.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt_resident.h"

typedef struct {
    char name[MB_NAME_MAX];
    int ndim;
    int64_t shape[4];
    mt_ref ref;
} dm_entry;

struct mb_store {
    mb_store_config cfg;
    const col_backend *be;
    mt_pool *pool;
    dm_entry *e;
    int n, cap;
    size_t bytes;
    col_plan *arena_owner;   /* the first exec's plan: the others share its arena */
    mt_resident *tier_owner; /* the first compute tier: the others share its arena */
};

struct mb_exec {
    mb_store *s;
    col_plan *plan;
    mt_resident *res;
    long runs;
};

col_status mb_store_create(const mb_store_config *cfg, const col_backend *be, mb_store **out, col_err *err)
{
    *out = NULL;
    if (!be) return col_err_set(err, COL_EINVAL, "diffusion store: no backend");
    if (be->mem && cfg->compute_budget == 0)
        return col_err_set_on(err, COL_SETTING_COMPUTE_BUDGET, COL_EINVAL,
                              "a GPU runs the model through a compute tier: it needs a compute tier budget");
    mb_store *s = calloc(1, sizeof *s);
    if (!s) return col_err_set(err, COL_ENOMEM, "diffusion store: out of memory");
    s->cfg = *cfg;
    s->be = be;
    mt_config mc = {.chunk_bytes = cfg->chunk_bytes, .host_budget = cfg->host_budget};
    col_status st = mt_create(&mc, &s->pool, err);
    if (st != COL_OK) {
        free(s);
        return st;
    }
    *out = s;
    return COL_OK;
}

void mb_store_free(mb_store *s)
{
    if (!s) return;
    mt_destroy(s->pool);
    free(s->e);
    free(s);
}

const col_backend *mb_store_backend(const mb_store *s) { return s->be; }
mt_pool *mb_store_pool(mb_store *s) { return s->pool; }
size_t mb_store_bytes(const mb_store *s) { return s->bytes; }
int mb_store_count(const mb_store *s) { return s->n; }

static int find(const mb_store *s, const char *name)
{
    for (int i = s->n - 1; i >= 0; i--) /* a graph asks in the order the last one did */
        if (strcmp(s->e[i].name, name) == 0) return i;
    return -1;
}

static int64_t numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

static col_status add(mb_store *s, const mb_param *p, const mb_source *src, col_err *err)
{
    if (!src || !src->has(src, p->name)) return col_err_set(err, COL_EFORMAT, "the weights have no tensor %s", p->name);
    col_status st;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        dm_entry *ne = realloc(s->e, (size_t)cap * sizeof *ne);
        if (!ne) return col_err_set(err, COL_ENOMEM, "diffusion store: out of memory");
        s->e = ne;
        s->cap = cap;
    }
    dm_entry *e = &s->e[s->n];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", p->name);
    e->ndim = p->ndim;
    memcpy(e->shape, p->shape, sizeof e->shape);
    size_t bytes = (size_t)numel(p->ndim, p->shape) * sizeof(float);
    st = mt_alloc(s->pool, MT_PARAM, bytes, &e->ref, err);
    if (st != COL_OK) return st;
    float *dst = mt_ptr(s->pool, e->ref);
    if (!dst) return col_err_set(err, COL_EINTERNAL, "diffusion store: %s has no host memory", p->name);
    st = src->read(src, p->name, p->ndim, p->shape, dst, err);
    if (st != COL_OK) return st;
    s->n++;
    s->bytes += bytes;
    return COL_OK;
}

col_status mb_store_bind(mb_store *s, mb_builder *b, const mb_source *src, col_err *err)
{
    col_status st = mb_builder_status(b, err);
    if (st != COL_OK) return st;
    if (b->dtype != COL_F32) return col_err_set(err, COL_EUNSUPPORTED, "diffusion store: f32 weights only for now");
    for (int i = 0; i < b->n; i++) {
        const mb_param *p = &b->params[i];
        int j = find(s, p->name);
        if (j < 0) {
            if ((st = add(s, p, src, err)) != COL_OK) return st;
            j = s->n - 1;
        } else if (s->e[j].ndim != p->ndim || numel(p->ndim, p->shape) != numel(s->e[j].ndim, s->e[j].shape) ||
                   memcmp(s->e[j].shape, p->shape, (size_t)p->ndim * sizeof(int64_t)) != 0) {
            return col_err_set(err, COL_ESHAPE, "%s is held with another shape", p->name);
        }
        if ((st = col_bind(p->node, mt_addr(s->pool, s->e[j].ref), err)) != COL_OK) return st;
    }
    mt_pin_host(s->pool, s->be, 1u << MT_PARAM);
    return COL_OK;
}

col_status mb_exec_create(mb_store *s, col_graph *g, col_node *const *outputs, int n, mb_exec **out, col_err *err)
{
    *out = NULL;
    mb_exec *x = calloc(1, sizeof *x);
    if (!x) return col_err_set(err, COL_ENOMEM, "diffusion store: out of memory");
    x->s = s;
    col_status st = col_plan_create_for(g, s->be, outputs, n, &x->plan, err);
    if (st == COL_OK && s->arena_owner) st = col_plan_share_memory(x->plan, s->arena_owner, err);
    if (st == COL_OK && s->cfg.compute_budget) {
        size_t own = col_plan_memory_bytes(x->plan);
        if (own >= s->cfg.compute_budget && !s->tier_owner) {
            char have[32], need[32];
            col_fmt_bytes(have, sizeof have, s->cfg.compute_budget);
            col_fmt_bytes(need, sizeof need, own);
            st = col_err_set_on(err, COL_SETTING_COMPUTE_BUDGET, COL_ENOMEM,
                                "a compute tier of %s cannot hold the %s of activations this image size needs", have,
                                need);
        }
        if (st == COL_OK) st = mt_resident_create(s->pool, x->plan, s->cfg.compute_budget, &x->res, err);
        if (st == COL_OK && s->tier_owner) st = mt_resident_share_arena(x->res, s->tier_owner, err);
    }
    if (st != COL_OK) {
        mb_exec_free(x);
        return st;
    }
    if (!s->arena_owner) s->arena_owner = x->plan;
    if (x->res && !s->tier_owner) s->tier_owner = x->res;
    *out = x;
    return COL_OK;
}

void mb_exec_free(mb_exec *x)
{
    if (!x) return;
    if (x->s->tier_owner == x->res) x->s->tier_owner = NULL;
    if (x->s->arena_owner == x->plan) x->s->arena_owner = NULL;
    mt_resident_free(x->res);
    col_plan_free(x->plan);
    free(x);
}

col_status mb_exec_upload(mb_exec *x, col_node *n, const void *src, size_t bytes, col_err *err)
{
    return col_plan_upload(x->plan, n, src, bytes, err);
}

col_status mb_exec_download(mb_exec *x, col_node *n, void *dst, size_t bytes, col_err *err)
{
    return col_plan_download(x->plan, n, dst, bytes, err);
}

col_status mb_exec_run(mb_exec *x, col_err *err)
{
    if (!x->res) return col_plan_run(x->plan, x->s->be, err);
    return mt_resident_run(x->res, x->s->be, x->runs++, err);
}

size_t mb_exec_arena_bytes(const mb_exec *x)
{
    return col_plan_arena_bytes(x->plan) + col_plan_scratch_bytes(x->plan);
}
