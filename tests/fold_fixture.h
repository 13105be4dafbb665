/* fold_fixture.h - the per-module AlphaFold fixtures of the fold tests: one
 * safetensors file per case (tools/refgen/make_fold_*_fixtures.py) holding
 * weights under their Haiku names, inputs "in/NAME" and outputs "out/NAME";
 * a graph built over fold_ctx, its weights bound from such a file and its
 * inputs from the same or another, run on the CPU backend through a plain
 * plan. Included by the test programs only. */
#ifndef COL_FOLD_FIXTURE_H
#define COL_FOLD_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "fold_layers.h"
#include "mb_builder.h"
#include "ops.h"
#include "plan.h"
#include "testlib.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/fold_msa"
#endif

enum { FX_MAX_IN = 4 };

/* FIXTURES/NAME.safetensors, or NULL and a failed check */
static inline col_ckpt *fx_open(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", FIXTURES, name);
    col_ckpt *ck = NULL;
    col_err err = {COL_OK};
    if (col_ckpt_open(path, &ck, &err) != COL_OK) {
        TL_OK(false, "%s: fixture readable: %s", name, err.msg);
        return NULL;
    }
    return ck;
}

/* tensor NAME as f32 (malloc'ed) with its shape, or NULL */
static inline float *fx_read(const col_ckpt *ck, const char *name, int *ndim, int64_t *shape)
{
    const col_ckpt_tensor *t = ck ? col_ckpt_find(ck, name) : NULL;
    if (!t) return NULL;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    float *f = malloc(sizeof(float) * (size_t)(n + 1));
    col_err err = {COL_OK};
    if (!f || col_ckpt_read_f32(t, t->ndim, t->shape, f, &err) != COL_OK) {
        free(f);
        return NULL;
    }
    if (ndim) *ndim = t->ndim;
    if (shape) memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    return f;
}

/* tensors of ck that are weights (not in/ or out/) */
static inline int fx_weight_count(const col_ckpt *ck)
{
    int k = 0;
    for (int i = 0; ck && i < col_ckpt_count(ck); i++) {
        const char *n = col_ckpt_get(ck, i)->name;
        k += strncmp(n, "in/", 3) != 0 && strncmp(n, "out/", 4) != 0;
    }
    return k;
}

typedef struct {
    const col_backend *be;
    col_graph *g;
    mb_builder b;
    fold_ctx c;
    col_node *in[FX_MAX_IN];
    float *data[FX_MAX_IN];
    int nin;
    size_t arena;        /* the plan's arena + scratch bytes, after fx_run */
} fx_graph;

static inline void fx_init(fx_graph *x, const col_backend *be, int64_t chunk)
{
    memset(x, 0, sizeof *x);
    x->be = be;
    x->g = col_graph_new();
    mb_builder_init(&x->b, x->g, false, COL_F32);
    x->c = (fold_ctx){.b = &x->b, .layer = -1, .chunk = chunk};
}

static inline void fx_free(fx_graph *x)
{
    for (int i = 0; i < x->nin; i++) free(x->data[i]);
    mb_builder_free(&x->b);
    col_graph_free(x->g);
}

/* an input leaf holding host data of the given shape (the graph keeps the buffer) */
static inline col_node *fx_input_data(fx_graph *x, const char *name, float *data, int ndim, const int64_t *shape)
{
    if (!data || x->nin >= FX_MAX_IN) {
        free(data);
        return NULL;
    }
    col_node *n = col_input(x->g, name, COL_F32, ndim, shape);
    x->in[x->nin] = n;
    x->data[x->nin++] = data;
    return n;
}

/* input leaf "in/NAME" of ck */
static inline col_node *fx_input(fx_graph *x, const col_ckpt *ck, const char *name)
{
    char full[128];
    snprintf(full, sizeof full, "in/%s", name);
    int nd = 0;
    int64_t shape[COL_MAX_DIMS];
    float *f = fx_read(ck, full, &nd, shape);
    if (!f) TL_NOTE("fixture has no '%s'", full);
    return fx_input_data(x, full, f, nd, shape);
}

/* Binds the weights from wk, runs out and returns its values (malloc'ed) or NULL with err set. */
static inline float *fx_run(fx_graph *x, const col_ckpt *wk, col_node *out, col_err *err)
{
    if (mb_builder_status(&x->b, err) != COL_OK || !out) {
        if (err->code == COL_OK) col_err_set(err, COL_EINTERNAL, "no output");
        return NULL;
    }
    if (mb_bind_checkpoint(&x->b, wk, err) != COL_OK) return NULL;
    for (int i = 0; i < x->nin; i++)
        if (col_bind(x->in[i], x->data[i], err) != COL_OK) return NULL;
    col_plan *p = NULL;
    const col_backend *be = x->be;
    size_t n = (size_t)col_numel(&out->t);
    float *y = malloc(sizeof(float) * (n + 1));
    bool ok = y && col_plan_create_for(x->g, be, &out, 1, &p, err) == COL_OK && col_plan_run(p, be, err) == COL_OK &&
              col_plan_download(p, out, y, sizeof(float) * n, err) == COL_OK;
    if (p) x->arena = col_plan_arena_bytes(p) + col_plan_scratch_bytes(p);
    col_plan_free(p);
    if (!ok) {
        free(y);
        return NULL;
    }
    return y;
}

static inline double fx_max_abs(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN wins */
    }
    return m;
}

/* out's shape equals the fixture tensor's */
static inline bool fx_same_shape(const col_node *out, int nd, const int64_t *shape)
{
    if (!out || out->t.ndim != nd) return false;
    for (int i = 0; i < nd; i++)
        if (out->t.shape[i] != shape[i]) return false;
    return true;
}

#endif
