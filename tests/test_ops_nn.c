/* test_ops_nn.c - embedding, RoPE and fused cross-entropy: forward against
 * double references, full backward against references, gradient checks
 * (including strided inputs), thread-count independence, and errors. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

static col_backend be;
static col_rng rng;

static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)col_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

static void put_index(void *buf, col_dtype dt, int64_t i, int64_t v)
{
    if (dt == COL_I32)
        ((int32_t *)buf)[i] = (int32_t)v;
    else
        ((int64_t *)buf)[i] = v;
}

static int64_t get_index(const void *buf, col_dtype dt, int64_t i)
{
    return dt == COL_I32 ? ((const int32_t *)buf)[i] : ((const int64_t *)buf)[i];
}

/* plans and runs g; returns the status of the first failing step */
static col_status plan_run(col_graph *g, col_plan **p, col_err *err)
{
    col_status st = col_plan_create(g, p, err);
    return st == COL_OK ? col_plan_run(*p, &be, err) : st;
}

/* builder error: NULL node, graph error set, message naming the op */
static void expect_build_error(col_graph *g, col_node *n, const char *op, const char *what)
{
    const char *msg = col_graph_error(g)->msg;
    TL_OK(n == NULL && col_graph_status(g) != COL_OK && strstr(msg, op) != NULL, "%s: build error \"%s\"", what, msg);
}

/* ================================ embedding ================================ */

static void test_embedding_forward(col_dtype idt, int64_t V, int64_t C, int nd, const int64_t *ids_shape)
{
    col_tensor it = {.dtype = idt, .ndim = nd};
    memcpy(it.shape, ids_shape, sizeof(int64_t) * (size_t)nd);
    int64_t N = col_numel(&it);
    float *w = malloc(sizeof(float) * (size_t)(V * C));
    void *ids = malloc(8 * (size_t)N);
    col_fill_normal(w, V * C, col_rng_u32(&rng), 1.0f);
    for (int64_t i = 0; i < N; i++)
        put_index(ids, idt, i, rnd(0, V - 1));
    col_graph *g = col_graph_new();
    int64_t ws[2] = {V, C};
    col_node *wn = col_input(g, "w", COL_F32, 2, ws), *in = col_input(g, "ids", idt, nd, ids_shape);
    col_bind(wn, w, NULL);
    col_bind(in, ids, NULL);
    col_node *out = col_embedding(g, wn, in);
    col_mark_output(out);
    col_plan *p = NULL;
    col_err err = {0};
    bool ran = out && plan_run(g, &p, &err) == COL_OK;
    bool shape_ok = out && out->t.ndim == nd + 1 && out->t.shape[nd] == C;
    for (int i = 0; shape_ok && i < nd; i++)
        shape_ok = out->t.shape[i] == ids_shape[i];
    double maxerr = ran ? 0.0 : INFINITY;
    for (int64_t r = 0; ran && r < N; r++) {
        const float *o = (const float *)col_data(out) + r * C;
        int64_t id = get_index(ids, idt, r);
        for (int64_t c = 0; c < C; c++)
            maxerr = fmax(maxerr, fabs((double)o[c] - (double)w[id * C + c]));
    }
    char b[96];
    TL_OK(ran && shape_ok && maxerr == 0.0, "embedding fwd %s ids %s, V=%lld C=%lld: max err %g %s",
          col_dtype_name(idt), col_shape_str(&it, b, sizeof b), (long long)V, (long long)C, maxerr, err.msg);
    col_plan_free(p);
    col_graph_free(g);
    free(w);
    free(ids);
}

/* loss = sum(embedding(w, ids) * R); dw must equal the scatter-add of R.
 * Run with 1 and 2 threads: results must be identical bit for bit. */
static void test_embedding_backward(col_dtype idt, int64_t V, int64_t C, int64_t N)
{
    float *w = malloc(sizeof(float) * (size_t)(V * C)), *R = malloc(sizeof(float) * (size_t)(N * C));
    float *dw[2] = {malloc(sizeof(float) * (size_t)(V * C)), malloc(sizeof(float) * (size_t)(V * C))};
    double *ref = calloc((size_t)(V * C), sizeof(double));
    void *ids = malloc(8 * (size_t)N);
    col_fill_normal(w, V * C, col_rng_u32(&rng), 1.0f);
    col_fill_uniform(R, N * C, col_rng_u32(&rng), -1.0f, 1.0f);
    for (int64_t i = 0; i < N; i++) /* few distinct ids: many repeats */
        put_index(ids, idt, i, rnd(0, V / 4));
    for (int64_t r = 0; r < N; r++)
        for (int64_t c = 0; c < C; c++)
            ref[get_index(ids, idt, r) * C + c] += R[r * C + c];
    col_graph *g = col_graph_new();
    int64_t ws[2] = {V, C}, rs[2] = {N, C};
    col_node *wn = col_param(g, "w", COL_F32, 2, ws), *in = col_input(g, "ids", idt, 1, &N);
    col_node *rn = col_input(g, "R", COL_F32, 2, rs);
    col_bind(wn, w, NULL);
    col_bind(in, ids, NULL);
    col_bind(rn, R, NULL);
    col_node *loss = col_sum(g, col_mul(g, col_embedding(g, wn, in), rn), 3u, 0);
    col_err err = {0};
    col_plan *p = NULL;
    bool ok = col_graph_backward(g, loss, &err) == COL_OK && col_plan_create(g, &p, &err) == COL_OK;
    int saved = omp_get_max_threads();
    for (int k = 0; k < 2 && ok; k++) {
        omp_set_num_threads(k == 0 ? 1 : (saved > 1 ? saved : 2));
        memset(dw[k], 0, sizeof(float) * (size_t)(V * C));
        col_bind_grad(wn, dw[k], NULL);
        ok = col_plan_run(p, &be, &err) == COL_OK;
    }
    omp_set_num_threads(saved);
    double maxerr = ok ? 0.0 : INFINITY;
    for (int64_t i = 0; ok && i < V * C; i++)
        maxerr = fmax(maxerr, fabs((double)dw[1][i] - ref[i]));
    bool same = ok && memcmp(dw[0], dw[1], sizeof(float) * (size_t)(V * C)) == 0;
    TL_OK(ok && maxerr < 1e-4, "embedding bwd %s V=%lld C=%lld N=%lld: dense dw vs scatter-add reference, max err %.2e %s",
          col_dtype_name(idt), (long long)V, (long long)C, (long long)N, maxerr, err.msg);
    TL_OK(same, "embedding bwd V=%lld C=%lld N=%lld: same bits with 1 and %d threads", (long long)V, (long long)C,
          (long long)N, saved > 1 ? saved : 2);
    col_plan_free(p);
    col_graph_free(g);
    free(w);
    free(R);
    free(dw[0]);
    free(dw[1]);
    free(ref);
    free(ids);
}

typedef struct {
    int weight_transposed; /* the leaf is [C, V], transposed to [V, C] */
    int ids_sliced;        /* the leaf is [2, N + 1], the ids are row 1 from column 1 */
    int64_t N;
} emb_case;

static col_node *build_embedding(col_graph *g, col_node **x, void *u)
{
    const emb_case *c = u;
    col_node *w = c->weight_transposed ? col_transpose(g, x[0], 0, 1) : x[0];
    col_node *ids = x[1];
    if (c->ids_sliced) {
        int64_t s[1] = {c->N};
        ids = col_reshape(g, col_slice(g, col_slice(g, ids, 0, 1, 1), 1, 1, c->N), 1, s);
    }
    return col_embedding(g, w, ids);
}

static void gradcheck_embedding(int weight_transposed, int ids_sliced)
{
    int64_t V = rnd(3, 7), C = rnd(1, 9), N = rnd(6, 16);
    emb_case c = {weight_transposed, ids_sliced, N};
    float *w = malloc(sizeof(float) * (size_t)(V * C));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(2 * (N + 1)));
    col_fill_normal(w, V * C, col_rng_u32(&rng), 1.0f);
    for (int64_t i = 0; i < 2 * (N + 1); i++)
        ids[i] = (int32_t)rnd(0, V - 1); /* N > V: ids repeat */
    col_gc_input in[2] = {{.dtype = COL_F32, .ndim = 2, .data = w}, {.dtype = COL_I32, .data = ids}};
    in[0].shape[0] = weight_transposed ? C : V;
    in[0].shape[1] = weight_transposed ? V : C;
    if (ids_sliced) {
        in[1].ndim = 2;
        in[1].shape[0] = 2;
        in[1].shape[1] = N + 1;
    } else {
        in[1].ndim = 1;
        in[1].shape[0] = N;
    }
    char name[160];
    snprintf(name, sizeof name, "embedding V=%lld C=%lld N=%lld%s%s", (long long)V, (long long)C, (long long)N,
             weight_transposed ? " transposed weight" : "", ids_sliced ? " sliced ids" : "");
    col_gc_opts o = {.seed = col_rng_u32(&rng), .max_points = 64};
    tl_gradcheck(&be, name, build_embedding, &c, 2, in, &o);
    free(w);
    free(ids);
}

/* ================================== RoPE =================================== */

/* inverse frequencies from the spec, in double except for the f32 exponent
 * (2i/rd rounded to float, as transformers computes it); band[i] = 0 high
 * frequency (unchanged), 1 medium (blended), 2 low (divided by factor) */
static void ref_inv_freq(const col_rope_cfg *cfg, int64_t rd, double *inv, int *band)
{
    for (int64_t i = 0; i < rd / 2; i++) {
        float e = (float)(2 * i) / (float)rd;
        double f = 1.0 / pow((double)cfg->theta, (double)e);
        band[i] = 0;
        if (cfg->llama3_factor > 0) {
            double factor = cfg->llama3_factor, lo = cfg->llama3_low_freq_factor, hi = cfg->llama3_high_freq_factor;
            double orig = cfg->llama3_original_max_pos;
            double wl = 2.0 * M_PI / f;
            if (wl > orig / lo) {
                f /= factor;
                band[i] = 2;
            } else if (wl >= orig / hi) {
                double smooth = (orig / wl - lo) / (hi - lo);
                f = (1.0 - smooth) * f / factor + smooth * f;
                band[i] = 1;
            }
        }
        inv[i] = f;
    }
}

typedef struct {
    int64_t B, H, T, D;
    int pos2d;          /* positions [B, T] instead of [T] */
    int layout;         /* 0: leaf [B,H,T,D]; 1: leaf [B,T,H,D] transposed; 2: leaf [B,H,D,T] transposed */
    col_rope_cfg cfg;
} rope_case;

static void rope_leaf_shape(const rope_case *c, int64_t *s)
{
    int64_t l[3][4] = {{c->B, c->H, c->T, c->D}, {c->B, c->T, c->H, c->D}, {c->B, c->H, c->D, c->T}};
    memcpy(s, l[c->layout], sizeof l[0]);
}

/* strides of the logical [B,H,T,D] view into the contiguous leaf */
static void rope_view_strides(const rope_case *c, int64_t *st)
{
    int64_t B = c->B, H = c->H, T = c->T, D = c->D;
    (void)B;
    if (c->layout == 0) {
        int64_t s[4] = {H * T * D, T * D, D, 1};
        memcpy(st, s, sizeof s);
    } else if (c->layout == 1) {
        int64_t s[4] = {T * H * D, D, H * D, 1};
        memcpy(st, s, sizeof s);
    } else {
        int64_t s[4] = {H * D * T, D * T, 1, T};
        memcpy(st, s, sizeof s);
    }
}

static col_node *rope_view(col_graph *g, const rope_case *c, col_node *leaf)
{
    if (c->layout == 1)
        return col_transpose(g, leaf, 1, 2);
    if (c->layout == 2)
        return col_transpose(g, leaf, 2, 3);
    return leaf;
}

static void test_rope_forward(const rope_case *c, const char *what)
{
    int64_t B = c->B, H = c->H, T = c->T, D = c->D, n = B * H * T * D;
    int64_t rd = c->cfg.rotary_dims ? c->cfg.rotary_dims : D, half = rd / 2, np = c->pos2d ? B * T : T;
    float *x = malloc(sizeof(float) * (size_t)n);
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)np);
    col_fill_uniform(x, n, col_rng_u32(&rng), -1.0f, 1.0f);
    for (int64_t i = 0; i < np; i++)
        pos[i] = rnd(0, 10000);
    if (c->pos2d && B > 2) /* one repeated position row (the kernel shares its table) */
        memcpy(pos + 2 * T, pos, sizeof(int64_t) * (size_t)T);
    col_graph *g = col_graph_new();
    int64_t ls[4], vs[4], ps[2] = {c->pos2d ? B : T, T};
    rope_leaf_shape(c, ls);
    rope_view_strides(c, vs);
    col_node *xl = col_input(g, "x", COL_F32, 4, ls);
    col_node *pn = col_input(g, "pos", COL_I64, c->pos2d ? 2 : 1, c->pos2d ? ps : ps + 1);
    col_bind(xl, x, NULL);
    col_bind(pn, pos, NULL);
    col_node *out = col_rope(g, rope_view(g, c, xl), pn, &c->cfg);
    col_mark_output(out);
    col_plan *p = NULL;
    col_err err = {0};
    bool ran = out && plan_run(g, &p, &err) == COL_OK;

    double *inv = malloc(sizeof(double) * (size_t)half);
    int *band = malloc(sizeof(int) * (size_t)half), seen[3] = {0, 0, 0};
    ref_inv_freq(&c->cfg, rd, inv, band);
    for (int64_t i = 0; i < half; i++)
        seen[band[i]]++;
    double worst = ran ? 0.0 : INFINITY; /* error / tolerance */
    for (int64_t b = 0; ran && b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                const float *xr = x + b * vs[0] + h * vs[1] + t * vs[2];
                const float *o = (const float *)col_data(out) + ((b * H + h) * T + t) * D;
                float ps1 = (float)pos[(c->pos2d ? b * T : 0) + t];
                for (int64_t d = 0; d < D; d++) {
                    double want, tol = 2e-6;
                    if (d >= rd) {
                        want = xr[d * vs[3]];
                        tol = 0.0;
                    } else {
                        int64_t i = d < half ? d : d - half;
                        double x1 = xr[i * vs[3]], x2 = xr[(i + half) * vs[3]];
                        float a = ps1 * (float)inv[i]; /* the angle is an f32 product, as in transformers */
                        want = d < half ? x1 * cos(a) - x2 * sin(a) : x2 * cos(a) + x1 * sin(a);
                        /* a few ulps of f32 difference in inv_freq move the angle by ~1e-6 |a| */
                        tol += 1e-6 * fabs((double)a) * (fabs(x1) + fabs(x2));
                    }
                    double e = fabs((double)o[d] - want);
                    worst = fmax(worst, tol > 0 ? e / tol : (e > 0 ? INFINITY : 0.0));
                }
            }
    bool bands_ok = c->cfg.llama3_factor > 0 ? (seen[0] && seen[1] && seen[2]) : seen[0] == half;
    TL_OK(ran && worst <= 1.0 && bands_ok,
          "rope fwd %s [%lld,%lld,%lld,%lld] rd=%lld pos %s layout %d: max err/tol %.3f (bands %d/%d/%d) %s", what,
          (long long)B, (long long)H, (long long)T, (long long)D, (long long)rd, c->pos2d ? "[B,T]" : "[T]", c->layout,
          worst, seen[0], seen[1], seen[2], err.msg);
    col_plan_free(p);
    col_graph_free(g);
    free(x);
    free(pos);
    free(inv);
    free(band);
}

static col_node *build_rope(col_graph *g, col_node **x, void *u)
{
    const rope_case *c = u;
    return col_rope(g, rope_view(g, c, x[0]), x[1], &c->cfg);
}

static void gradcheck_rope(const rope_case *c, const char *what)
{
    int64_t n = c->B * c->H * c->T * c->D, np = c->pos2d ? c->B * c->T : c->T;
    float *x = malloc(sizeof(float) * (size_t)n);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)np);
    col_fill_uniform(x, n, col_rng_u32(&rng), -1.0f, 1.0f);
    for (int64_t i = 0; i < np; i++)
        pos[i] = (int32_t)rnd(0, 10000);
    col_gc_input in[2] = {{.dtype = COL_F32, .ndim = 4, .data = x}, {.dtype = COL_I32, .data = pos}};
    rope_leaf_shape(c, in[0].shape);
    in[1].ndim = c->pos2d ? 2 : 1;
    in[1].shape[0] = c->pos2d ? c->B : c->T;
    in[1].shape[c->pos2d] = c->T;
    char name[128];
    snprintf(name, sizeof name, "rope %s [%lld,%lld,%lld,%lld] rd=%d layout %d pos %s", what, (long long)c->B,
             (long long)c->H, (long long)c->T, (long long)c->D, c->cfg.rotary_dims, c->layout,
             c->pos2d ? "[B,T]" : "[T]");
    col_gc_opts o = {.seed = col_rng_u32(&rng), .max_points = 64};
    tl_gradcheck(&be, name, build_rope, (void *)c, 2, in, &o);
    free(x);
    free(pos);
}

static rope_case random_rope_case(int layout, int pos2d, int partial, col_rope_cfg cfg, int64_t D)
{
    rope_case c = {.B = rnd(1, 3), .H = rnd(1, 3), .T = rnd(1, 6), .D = D, .pos2d = pos2d, .layout = layout,
                   .cfg = cfg};
    if (c.pos2d && c.B < 3)
        c.B = 3;
    c.cfg.rotary_dims = partial ? (int)(2 * rnd(1, D / 2 - 1)) : 0;
    return c;
}

/* ============================== cross-entropy ============================== */

typedef struct {
    int64_t N, V;
    int ndim3;          /* logits [A, N/A, V] given as a transposed leaf [N/A, A, V] */
    int64_t A;
    int64_t ignore;
} ce_case;

/* reference loss and dlogits (dloss = 1) in double; returns the count */
static int64_t ref_ce(const float *x, const void *t, col_dtype tdt, int64_t N, int64_t V, int64_t ign, double *loss,
                      double *grad)
{
    int64_t count = 0;
    double sum = 0.0;
    for (int64_t r = 0; r < N; r++)
        count += get_index(t, tdt, r) != ign;
    for (int64_t r = 0; r < N; r++) {
        int64_t tr = get_index(t, tdt, r);
        const float *row = x + r * V;
        double m = -INFINITY, s = 0.0;
        for (int64_t j = 0; j < V; j++)
            m = fmax(m, row[j]);
        for (int64_t j = 0; j < V; j++)
            s += exp(row[j] - m);
        double lse = m + log(s);
        for (int64_t j = 0; grad && j < V; j++)
            grad[r * V + j] = tr == ign ? 0.0 : (exp(row[j] - lse) - (j == tr)) / (double)count;
        if (tr != ign)
            sum += lse - row[tr];
    }
    *loss = sum / (double)count;
    return count;
}

/* forward loss and full backward for contiguous [N, V] logits; 1 vs 2 threads bitwise */
static void test_ce(col_dtype tdt, int64_t N, int64_t V, int64_t ign, int ramp, float dscale)
{
    float *x = malloc(sizeof(float) * (size_t)(N * V));
    float *dx[2] = {malloc(sizeof(float) * (size_t)(N * V)), malloc(sizeof(float) * (size_t)(N * V))};
    double *ref = malloc(sizeof(double) * (size_t)(N * V));
    void *t = malloc(8 * (size_t)N);
    col_fill_normal(x, N * V, col_rng_u32(&rng), 3.0f);
    if (ramp) /* rising logits: the running max grows block after block */
        for (int64_t i = 0; i < N * V; i++)
            x[i] += 0.01f * (float)(i % V);
    int64_t nign = 0;
    for (int64_t r = 0; r < N; r++) {
        bool skip = N > 1 && (r % 3 == 1);
        nign += skip;
        put_index(t, tdt, r, skip ? ign : rnd(0, V - 1));
        if (!skip && get_index(t, tdt, r) == ign) /* ignore_index may be a class */
            nign++;
    }
    double want;
    ref_ce(x, t, tdt, N, V, ign, &want, ref);
    col_graph *g = col_graph_new();
    int64_t xs[2] = {N, V};
    col_node *xn = col_param(g, "logits", COL_F32, 2, xs), *tn = col_input(g, "targets", tdt, 1, &N);
    col_bind(xn, x, NULL);
    col_bind(tn, t, NULL);
    col_node *ce = col_cross_entropy(g, xn, tn, ign);
    col_node *loss = col_scale(g, ce, dscale, 0.0f);
    col_mark_output(ce);
    col_err err = {0};
    col_plan *p = NULL;
    bool ok = col_graph_backward(g, loss, &err) == COL_OK && col_plan_create(g, &p, &err) == COL_OK;
    float got[2] = {0, 0};
    int saved = omp_get_max_threads();
    for (int k = 0; k < 2 && ok; k++) {
        omp_set_num_threads(k == 0 ? 1 : (saved > 1 ? saved : 2));
        memset(dx[k], 0, sizeof(float) * (size_t)(N * V));
        col_bind_grad(xn, dx[k], NULL);
        ok = col_plan_run(p, &be, &err) == COL_OK;
        got[k] = ok ? *(const float *)col_data(ce) : NAN;
    }
    omp_set_num_threads(saved);
    double gerr = ok ? 0.0 : INFINITY;
    for (int64_t i = 0; ok && i < N * V; i++)
        gerr = fmax(gerr, fabs((double)dx[1][i] - dscale * ref[i]));
    TL_OK(ok && fabs(got[1] - want) <= 2e-6 * fabs(want) + 1e-6,
          "cross_entropy fwd %s N=%lld V=%lld ignore=%lld (%lld ignored)%s: %.7f vs reference %.7f %s",
          col_dtype_name(tdt), (long long)N, (long long)V, (long long)ign, (long long)nign, ramp ? " rising" : "",
          got[1], want, err.msg);
    TL_OK(ok && gerr <= 1e-6 * fabs(dscale), "cross_entropy bwd N=%lld V=%lld dloss=%g: dlogits max err %.2e",
          (long long)N, (long long)V, dscale, gerr);
    TL_OK(ok && memcmp(&got[0], &got[1], sizeof(float)) == 0 &&
              memcmp(dx[0], dx[1], sizeof(float) * (size_t)(N * V)) == 0,
          "cross_entropy N=%lld V=%lld: same bits with 1 and %d threads", (long long)N, (long long)V,
          saved > 1 ? saved : 2);
    col_plan_free(p);
    col_graph_free(g);
    free(x);
    free(dx[0]);
    free(dx[1]);
    free(ref);
    free(t);
}

static col_node *build_ce(col_graph *g, col_node **x, void *u)
{
    const ce_case *c = u;
    col_node *l = c->ndim3 ? col_transpose(g, x[0], 0, 1) : x[0]; /* [N/A, A, V] -> [A, N/A, V] */
    return col_cross_entropy(g, l, x[1], c->ignore);
}

static void gradcheck_ce(int ndim3)
{
    ce_case c = {.N = rnd(2, 8), .V = rnd(2, 12), .ndim3 = ndim3, .A = 2, .ignore = -100};
    if (ndim3)
        c.N = 2 * rnd(1, 4);
    float *x = malloc(sizeof(float) * (size_t)(c.N * c.V));
    int64_t *t = malloc(sizeof(int64_t) * (size_t)c.N);
    col_fill_normal(x, c.N * c.V, col_rng_u32(&rng), 1.0f);
    for (int64_t r = 0; r < c.N; r++)
        t[r] = r % 3 == 1 ? c.ignore : rnd(0, c.V - 1);
    col_gc_input in[2] = {{.dtype = COL_F32, .data = x}, {.dtype = COL_I64, .data = t}};
    if (ndim3) {
        in[0].ndim = 3;
        in[0].shape[0] = c.N / 2;
        in[0].shape[1] = 2;
        in[0].shape[2] = c.V;
        in[1].ndim = 2; /* targets follow the transposed logits: [A, N/A] */
        in[1].shape[0] = 2;
        in[1].shape[1] = c.N / 2;
    } else {
        in[0].ndim = 2;
        in[0].shape[0] = c.N;
        in[0].shape[1] = c.V;
        in[1].ndim = 1;
        in[1].shape[0] = c.N;
    }
    char name[96];
    snprintf(name, sizeof name, "cross_entropy N=%lld V=%lld%s, ignored rows", (long long)c.N, (long long)c.V,
             ndim3 ? " transposed 3-D logits" : "");
    col_gc_opts o = {.seed = col_rng_u32(&rng), .h = 1e-2, .max_points = 64};
    tl_gradcheck(&be, name, build_ce, &c, 2, in, &o);
    free(x);
    free(t);
}

/* 3-D logits from a transposed leaf: the loss equals the 2-D loss of the
 * materialised [A*M, V] logits */
static void test_ce_3d(void)
{
    int64_t A = 3, M = 5, V = 37, N = A * M;
    float *x = malloc(sizeof(float) * (size_t)(N * V)), *xt = malloc(sizeof(float) * (size_t)(N * V));
    int32_t t[15];
    col_fill_normal(x, N * V, col_rng_u32(&rng), 2.0f);
    for (int64_t i = 0; i < N; i++)
        t[i] = i % 4 == 0 ? -1 : (int32_t)rnd(0, V - 1);
    /* leaf [M, A, V]; logical [A, M, V] row (a, m) = leaf (m, a) */
    for (int64_t a = 0; a < A; a++)
        for (int64_t m = 0; m < M; m++)
            memcpy(xt + (m * A + a) * V, x + (a * M + m) * V, sizeof(float) * (size_t)V);
    double want;
    ref_ce(x, t, COL_I32, N, V, -1, &want, NULL);
    col_graph *g = col_graph_new();
    int64_t ls[3] = {M, A, V}, ts[2] = {A, M};
    col_node *xl = col_input(g, "x", COL_F32, 3, ls), *tn = col_input(g, "t", COL_I32, 2, ts);
    col_bind(xl, xt, NULL);
    col_bind(tn, t, NULL);
    col_node *ce = col_cross_entropy(g, col_transpose(g, xl, 0, 1), tn, -1);
    col_mark_output(ce);
    col_plan *p = NULL;
    col_err err = {0};
    bool ok = ce && plan_run(g, &p, &err) == COL_OK;
    float got = ok ? *(const float *)col_data(ce) : NAN;
    TL_OK(ok && ce->t.ndim == 0 && fabs(got - want) <= 2e-6 * fabs(want) + 1e-6,
          "cross_entropy fwd transposed [%lld,%lld,%lld] logits, [%lld,%lld] targets: %.7f vs %.7f %s", (long long)A,
          (long long)M, (long long)V, (long long)A, (long long)M, got, want, err.msg);
    col_plan_free(p);
    col_graph_free(g);
    free(x);
    free(xt);
}

/* every row ignored: 0/0 = NaN like PyTorch, and a zero gradient */
static void test_ce_all_ignored(void)
{
    int64_t N = 4, V = 5, xs[2] = {N, V};
    float x[20], dx[20];
    int32_t t[4] = {-100, -100, -100, -100};
    col_fill_normal(x, 20, 5, 1.0f);
    col_graph *g = col_graph_new();
    col_node *xn = col_param(g, "x", COL_F32, 2, xs), *tn = col_input(g, "t", COL_I32, 1, &N);
    col_bind(xn, x, NULL);
    col_bind(tn, t, NULL);
    col_bind_grad(xn, dx, NULL);
    for (int i = 0; i < 20; i++)
        dx[i] = 0.0f;
    col_node *ce = col_cross_entropy(g, xn, tn, -100);
    col_err err = {0};
    col_plan *p = NULL;
    bool ok = col_graph_backward(g, ce, &err) == COL_OK && plan_run(g, &p, &err) == COL_OK;
    bool zero = true;
    for (int i = 0; i < 20; i++)
        zero = zero && dx[i] == 0.0f;
    TL_OK(ok && isnan(*(const float *)col_data(ce)) && zero, "cross_entropy all rows ignored: loss NaN, gradient 0 %s",
          err.msg);
    col_plan_free(p);
    col_graph_free(g);
}

/* ================================= errors ================================== */

enum { OP_EMBEDDING, OP_ROPE, OP_CROSS_ENTROPY };

/* a leaf of an error case */
typedef struct {
    const char *name;
    col_dtype dt;
    int nd;
    const int64_t *shape;
} leaf_desc;

/* op(a, b): embedding(weight a, ids b), rope(x a, positions b, cfg), cross_entropy(logits a, targets b, -100) */
static col_node *build_op(col_graph *g, int op, leaf_desc a, leaf_desc b, const col_rope_cfg *cfg, void *ad, void *bd)
{
    col_node *an = col_input(g, a.name, a.dt, a.nd, a.shape), *bn = col_input(g, b.name, b.dt, b.nd, b.shape);
    if (ad)
        col_bind(an, ad, NULL);
    if (bd)
        col_bind(bn, bd, NULL);
    switch (op) {
    case OP_EMBEDDING: return col_embedding(g, an, bn);
    case OP_ROPE: return col_rope(g, an, bn, cfg);
    default: return col_cross_entropy(g, an, bn, -100);
    }
}

/* runs op on 2-D f32 data a [as] and a 1-D index tensor b of bn elements; the run's status, its message in err */
static col_status run_op(int op, const int64_t *as, float *a, col_dtype bdt, int64_t bn, void *b, col_err *err)
{
    col_graph *g = col_graph_new();
    leaf_desc ad = {"a", COL_F32, 2, as}, bd = {"b", bdt, 1, &bn};
    col_mark_output(build_op(g, op, ad, bd, NULL, a, b));
    col_plan *p = NULL;
    col_status st = plan_run(g, &p, err);
    col_plan_free(p);
    col_graph_free(g);
    return st;
}

static void test_run_errors(void)
{
    int64_t ws[2] = {10, 4}, xs[2] = {3, 5};
    float w[40] = {0}, x[15] = {0};
    col_err err = {0};
    /* embedding: token id out of range */
    int32_t ids32[6] = {1, 2, 3, 12, 0, 9};
    col_status st = run_op(OP_EMBEDDING, ws, w, COL_I32, 6, ids32, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "embedding") && strstr(err.msg, "12") && strstr(err.msg, "position 3") &&
              strstr(err.msg, "0..9"),
          "embedding bad id -> run error \"%s\"", err.msg);
    int64_t ids64[3] = {1, -1, 3};
    err = (col_err){0};
    st = run_op(OP_EMBEDDING, ws, w, COL_I64, 3, ids64, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "embedding") && strstr(err.msg, "-1"),
          "embedding negative id -> run error \"%s\"", err.msg);
    /* cross-entropy: target out of range (and not ignore_index) */
    int64_t t[3] = {0, 5, -100};
    err = (col_err){0};
    st = run_op(OP_CROSS_ENTROPY, xs, x, COL_I64, 3, t, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "cross_entropy") && strstr(err.msg, "target 5") &&
              strstr(err.msg, "row 1"),
          "cross_entropy bad target -> run error \"%s\"", err.msg);
}

static void test_build_errors(void)
{
    int64_t s1[1] = {7}, s2[2] = {5, 4}, s3[3] = {2, 3, 4}, s4[4] = {2, 3, 5, 8}, p2[2] = {3, 5}, p1[1] = {4};
    int64_t pt[1] = {5}, t4[1] = {4}, t5[1] = {5}, t23[2] = {2, 4};
    col_rope_cfg cfg = {.theta = 10000.0f};
    col_rope_cfg odd = {.theta = 10000.0f, .rotary_dims = 3}, big = {.theta = 10000.0f, .rotary_dims = 10};
    col_rope_cfg l3 = {.theta = 500000.0f, .llama3_factor = 8, .llama3_low_freq_factor = 4,
                       .llama3_high_freq_factor = 1, .llama3_original_max_pos = 8192};
    const struct {
        int op;
        leaf_desc a, b;
        const col_rope_cfg *cfg;
        const char *what;
    } cases[] = {
        {OP_EMBEDDING, {"w", COL_F32, 1, s1}, {"i", COL_I32, 1, s1}, NULL, "embedding 1-D weight"},
        {OP_EMBEDDING, {"w", COL_I32, 2, s2}, {"i", COL_I32, 1, s1}, NULL, "embedding i32 weight"},
        {OP_EMBEDDING, {"w", COL_F32, 2, s2}, {"i", COL_F32, 1, s1}, NULL, "embedding f32 ids"},
        {OP_ROPE, {"x", COL_F32, 3, s3}, {"p", COL_I32, 1, s1}, &cfg, "rope 3-D x"},
        {OP_ROPE, {"x", COL_F32, 4, s4}, {"p", COL_I32, 1, p1}, &cfg, "rope positions [4] for T=5"},
        {OP_ROPE, {"x", COL_F32, 4, s4}, {"p", COL_I32, 2, p2}, &cfg, "rope positions [3,5] for B=2"},
        {OP_ROPE, {"x", COL_F32, 4, s4}, {"p", COL_F32, 1, pt}, &cfg, "rope f32 positions"},
        {OP_ROPE, {"x", COL_I32, 4, s4}, {"p", COL_I32, 1, pt}, &cfg, "rope i32 x"},
        {OP_ROPE, {"x", COL_F32, 4, s4}, {"p", COL_I32, 1, pt}, &odd, "rope odd rotary dims"},
        {OP_ROPE, {"x", COL_F32, 4, s4}, {"p", COL_I32, 1, pt}, &big, "rope rotary dims > head dim"},
        {OP_ROPE, {"x", COL_F32, 4, s4}, {"p", COL_I32, 1, pt}, &l3, "rope LLaMA-3 low >= high freq factor"},
        {OP_ROPE, {"x", COL_F32, 4, s4}, {"p", COL_I32, 1, pt}, NULL, "rope without config"},
        {OP_CROSS_ENTROPY, {"x", COL_F32, 2, s2}, {"t", COL_I32, 1, t4}, NULL,
         "cross_entropy targets [4] for logits [5,4]"},
        {OP_CROSS_ENTROPY, {"x", COL_F32, 2, s2}, {"t", COL_F32, 1, t5}, NULL, "cross_entropy f32 targets"},
        {OP_CROSS_ENTROPY, {"x", COL_I32, 2, s2}, {"t", COL_I32, 1, t5}, NULL, "cross_entropy i32 logits"},
        {OP_CROSS_ENTROPY, {"x", COL_F32, 3, s3}, {"t", COL_I32, 2, t23}, NULL,
         "cross_entropy targets [2,4] for logits [2,3,4]"},
    };
    static const char *op_name[] = {"embedding", "rope", "cross_entropy"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        col_graph *g = col_graph_new();
        col_node *n = build_op(g, cases[i].op, cases[i].a, cases[i].b, cases[i].cfg, NULL, NULL);
        expect_build_error(g, n, op_name[cases[i].op], cases[i].what);
        col_graph_free(g);
    }
}

int main(void)
{
    tl_cpu_backend(&be);
    col_rng_init(&rng, 20240611);

    /* embedding */
    for (int k = 0; k < 4; k++) {
        int nd = (int)rnd(1, 3);
        int64_t s[3] = {rnd(1, 6), rnd(1, 5), rnd(1, 4)};
        test_embedding_forward(k % 2 ? COL_I64 : COL_I32, rnd(2, 60), rnd(1, 40), nd, s);
    }
    int64_t big[2] = {4, 75};
    test_embedding_forward(COL_I32, 1000, 256, 2, big); /* parallel path */
    test_embedding_backward(COL_I32, 13, 7, 40);
    test_embedding_backward(COL_I64, 600, 200, 400); /* parallel path */
    gradcheck_embedding(0, 0);
    gradcheck_embedding(1, 1);

    /* RoPE: theta = 10000 */
    col_rope_cfg plain = {.theta = 10000.0f};
    for (int layout = 0; layout < 3; layout++)
        for (int pos2d = 0; pos2d < 2; pos2d++) {
            rope_case c = random_rope_case(layout, pos2d, 0, plain, 2 * rnd(1, 16));
            test_rope_forward(&c, "theta=1e4");
        }
    {
        rope_case c = random_rope_case(0, 1, 1, plain, 2 * rnd(4, 24));
        test_rope_forward(&c, "theta=1e4 partial");
        rope_case c2 = random_rope_case(1, 0, 1, plain, 2 * rnd(4, 24) + 1); /* odd head dim, partial */
        test_rope_forward(&c2, "theta=1e4 partial odd D");
        rope_case c3 = {.B = 2, .H = 12, .T = 128, .D = 64, .layout = 1, .cfg = plain}; /* parallel path */
        test_rope_forward(&c3, "theta=1e4 large");
    }
    /* RoPE: LLaMA-3.1 scaling; with D = 128 every band has members */
    col_rope_cfg l3 = {.theta = 500000.0f, .llama3_factor = 8.0f, .llama3_low_freq_factor = 1.0f,
                       .llama3_high_freq_factor = 4.0f, .llama3_original_max_pos = 8192.0f};
    for (int pos2d = 0; pos2d < 2; pos2d++) {
        rope_case c = random_rope_case(pos2d ? 2 : 0, pos2d, 0, l3, 128);
        test_rope_forward(&c, "llama3");
    }
    {
        rope_case c = random_rope_case(1, 1, 0, l3, 64);
        c.cfg.rotary_dims = 64; /* explicit, equals D */
        test_rope_forward(&c, "llama3 D=64");
    }
    for (int layout = 0; layout < 3; layout++) {
        rope_case c = random_rope_case(layout, layout == 1, 0, plain, 2 * rnd(1, 6));
        gradcheck_rope(&c, "theta=1e4");
    }
    {
        rope_case c = random_rope_case(2, 1, 1, plain, 10);
        gradcheck_rope(&c, "partial");
        rope_case c2 = random_rope_case(1, 0, 0, l3, 16);
        gradcheck_rope(&c2, "llama3");
    }

    /* cross-entropy */
    test_ce(COL_I32, 7, 11, -100, 0, 1.0f);
    test_ce(COL_I64, 9, 23, 2, 0, 2.5f);      /* ignore_index is a valid class */
    test_ce(COL_I64, 1, 5, -100, 0, 1.0f);
    test_ce(COL_I32, 5, 3000, -100, 1, 1.0f); /* several blocks, rising max */
    test_ce(COL_I64, 64, 1000, -1, 0, -0.5f); /* parallel path */
    test_ce_3d();
    test_ce_all_ignored();
    gradcheck_ce(0);
    gradcheck_ce(1);

    test_run_errors();
    test_build_errors();
    col_cpu_backend_free(&be);
    return tl_done();
}
