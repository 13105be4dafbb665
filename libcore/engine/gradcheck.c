#include "gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "plan.h"
#include "rng.h"

typedef struct {
    col_graph *g;
    col_plan *plan;                    /* forward and backward: the analytic gradients */
    col_plan *fwd;                     /* the output only: the finite differences */
    col_node *leaf[COL_GC_MAX_INPUTS];
    void *data[COL_GC_MAX_INPUTS];     /* bound copies of the inputs */
    void *grad[COL_GC_MAX_INPUTS];     /* gradient buffers, in each input's dtype */
    col_node *out;
    float *r;                          /* the random projection R, f32 host copy */
    int64_t nout;
} gc_state;

static void gc_free(gc_state *s, int n)
{
    col_plan_free(s->plan);
    col_plan_free(s->fwd);
    col_graph_free(s->g);
    for (int i = 0; i < n; i++) {
        free(s->data[i]);
        free(s->grad[i]);
    }
    free(s->r);
}

/* loss = sum(out * R) in double, from the f32 output of a forward run */
static double gc_loss(const gc_state *s)
{
    const float *o = col_plan_data(s->fwd, s->out);
    double acc = 0.0;
    for (int64_t i = 0; i < s->nout; i++)
        acc += (double)o[i] * (double)s->r[i];
    return acc;
}

static col_status gc_run(gc_state *s, const col_backend *be, int n, col_err *err)
{
    for (int i = 0; i < n; i++)
        if (s->grad[i])
            memset(s->grad[i], 0, col_dtype_size(s->leaf[i]->t.dtype) * (size_t)col_numel(&s->leaf[i]->t));
    return col_plan_run(s->plan, be, err);
}

static col_status gc_build(gc_state *s, col_gc_build_fn build, void *user, int n, const col_gc_input *in,
                           uint64_t seed, col_err *err)
{
    s->g = col_graph_new();
    if (!s->g)
        return col_err_set(err, COL_ENOMEM, "gradcheck: out of memory");
    for (int i = 0; i < n; i++) {
        col_tensor t = {.dtype = in[i].dtype, .ndim = in[i].ndim};
        memcpy(t.shape, in[i].shape, sizeof t.shape);
        size_t bytes = col_tensor_bytes(&t); /* whole blocks for a quantized input */
        bool diff = col_dtype_is_float(t.dtype) && !in[i].no_grad;
        s->leaf[i] = diff ? col_param(s->g, "x", t.dtype, t.ndim, t.shape) : col_input(s->g, "x", t.dtype, t.ndim, t.shape);
        s->data[i] = malloc(bytes ? bytes : 1);
        if (!s->data[i])
            return col_err_set(err, COL_ENOMEM, "gradcheck: out of memory");
        memcpy(s->data[i], in[i].data, bytes);
        if (!s->leaf[i])
            break;
        col_bind(s->leaf[i], s->data[i], NULL);
        if (diff) {
            s->grad[i] = calloc((size_t)col_numel(&t) + 1, col_dtype_size(t.dtype));
            if (!s->grad[i])
                return col_err_set(err, COL_ENOMEM, "gradcheck: out of memory");
            col_bind_grad(s->leaf[i], s->grad[i], NULL);
        }
    }
    col_node *out = col_graph_status(s->g) == COL_OK ? build(s->g, s->leaf, user) : NULL;
    out = col_cast(s->g, out, COL_F32);
    out = col_contiguous(s->g, out);
    col_node *r = out ? col_input(s->g, "R", COL_F32, out->t.ndim, out->t.shape) : NULL;
    col_node *loss = col_sum(s->g, col_mul(s->g, out, r), (1u << COL_MAX_DIMS) - 1, 0);
    if (col_graph_status(s->g) != COL_OK)
        return col_err_set(err, col_graph_status(s->g), "%s", col_graph_error(s->g)->msg);
    col_mark_output(out);
    s->out = out;
    s->nout = col_numel(&out->t);
    s->r = malloc(sizeof(float) * (size_t)(s->nout + 1));
    if (!s->r)
        return col_err_set(err, COL_ENOMEM, "gradcheck: out of memory");
    col_fill_uniform(s->r, s->nout, seed, -1.0f, 1.0f);
    col_bind(r, s->r, NULL);
    col_status st = col_graph_backward(s->g, loss, err);
    if (st == COL_OK)
        st = col_plan_create(s->g, &s->plan, err);
    if (st == COL_OK)
        st = col_plan_create_for(s->g, NULL, &s->out, 1, &s->fwd, err);
    return st;
}

col_status col_gradcheck(const col_backend *be, col_gc_build_fn build, void *user, int n, const col_gc_input *in,
                         const col_gc_opts *opts, col_gc_result *res, col_err *err)
{
    memset(res, 0, sizeof *res);
    if (n < 1 || n > COL_GC_MAX_INPUTS)
        return col_err_set(err, COL_EINVAL, "gradcheck: %d inputs (1..%d)", n, COL_GC_MAX_INPUTS);
    col_gc_opts o = {.h = 1e-3, .rtol = 1e-2, .atol = 1e-3, .max_points = 48, .seed = 1};
    if (opts) {
        if (opts->h > 0)
            o.h = opts->h;
        if (opts->rtol > 0)
            o.rtol = opts->rtol;
        if (opts->atol > 0)
            o.atol = opts->atol;
        if (opts->max_points > 0)
            o.max_points = opts->max_points;
        o.seed = opts->seed;
    }
    gc_state s = {0};
    col_status st = gc_build(&s, build, user, n, in, o.seed, err);
    if (st == COL_OK)
        st = gc_run(&s, be, n, err);
    float *analytic[COL_GC_MAX_INPUTS] = {0};
    for (int i = 0; i < n && st == COL_OK; i++) {
        if (!s.grad[i])
            continue;
        int64_t cnt = col_numel(&s.leaf[i]->t);
        analytic[i] = malloc(sizeof(float) * (size_t)(cnt + 1));
        if (!analytic[i]) {
            st = col_err_set(err, COL_ENOMEM, "gradcheck: out of memory");
            break;
        }
        col_convert(analytic[i], COL_F32, s.grad[i], s.leaf[i]->t.dtype, cnt);
    }
    for (int i = 0; i < n && st == COL_OK; i++) {
        if (!analytic[i])
            continue;
        const col_tensor *t = &s.leaf[i]->t;
        int64_t cnt = col_numel(t);
        int64_t step = cnt > o.max_points ? cnt / o.max_points : 1;
        col_tensor host = *t;
        host.data = s.data[i];
        col_set_contiguous_strides(&host);
        for (int64_t k = (int64_t)(o.seed % (uint64_t)step); k < cnt && st == COL_OK; k += step) {
            double x0 = col_get_as_f64(&host, k);
            double h = o.h * (fabs(x0) > 1.0 ? fabs(x0) : 1.0);
            col_set_from_f64(&host, k, x0 + h);
            double hp = col_get_as_f64(&host, k) - x0; /* the step actually taken after rounding */
            st = col_plan_run(s.fwd, be, err);
            double lp = st == COL_OK ? gc_loss(&s) : 0;
            col_set_from_f64(&host, k, x0 - h);
            double hm = x0 - col_get_as_f64(&host, k);
            if (st == COL_OK)
                st = col_plan_run(s.fwd, be, err);
            double lm = st == COL_OK ? gc_loss(&s) : 0;
            col_set_from_f64(&host, k, x0);
            double num = (lp - lm) / (hp + hm);
            double ana = analytic[i][k];
            double e = fabs(ana - num);
            res->checked++;
            if (e > o.atol + o.rtol * fabs(num))
                res->failed++;
            if (e > res->max_abs_err || res->checked == 1) {
                res->max_abs_err = e;
                res->worst_input = i;
                res->worst_index = k;
                res->worst_analytic = ana;
                res->worst_numeric = num;
            }
        }
    }
    for (int i = 0; i < n; i++)
        free(analytic[i]);
    gc_free(&s, n);
    return st;
}
