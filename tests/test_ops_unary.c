/* test_ops_unary.c - elementwise activations, swiglu and dropout.
 *
 * For every op: forward values and autodiff gradients against references in
 * double (on contiguous, transposed, sliced and expanded inputs), finite
 * difference gradient checks, bitwise equality between 1 and 2 threads, and
 * the builder errors. Dropout: the mask against col_rand_uniform, kept
 * fraction and scaling, the same mask in backward and in a recomputed
 * (checkpointed) forward, distinct masks for two dropouts of one graph. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "graph.h"
#include "ops.h"
#include "plan.h"
#include "rng.h"
#include "testlib.h"
#include "backend_cpu.h"

/* ---- references in double ---- */

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static const double K_BETA = 0.79788456080286535588; /* sqrt(2/pi) */
static const double K_KAPPA = 0.044715;

static double r_exp(double a, double b) { (void)b; return exp(a); }
static double r_log(double a, double b) { (void)b; return log(a); }
static double r_tanh(double a, double b) { (void)b; return tanh(a); }
static double r_sigmoid(double a, double b) { (void)b; return sigm(a); }
static double r_relu(double a, double b) { (void)b; return a > 0 ? a : 0; }
static double r_gelu(double a, double b) { (void)b; return 0.5 * a * (1.0 + erf(a / sqrt(2.0))); }
static double r_gelu_tanh(double a, double b)
{
    (void)b;
    return 0.5 * a * (1.0 + tanh(K_BETA * (a + K_KAPPA * a * a * a)));
}
static double r_silu(double a, double b) { (void)b; return a * sigm(a); }
static double r_swiglu(double a, double b) { return a * sigm(a) * b; }

/* d out / d input `which` */
static double d_exp(double a, double b, int w) { (void)b, (void)w; return exp(a); }
static double d_log(double a, double b, int w) { (void)b, (void)w; return 1.0 / a; }
static double d_tanh(double a, double b, int w) { (void)b, (void)w; return 1.0 - tanh(a) * tanh(a); }
static double d_sigmoid(double a, double b, int w) { (void)b, (void)w; return sigm(a) * (1.0 - sigm(a)); }
static double d_relu(double a, double b, int w) { (void)b, (void)w; return a > 0 ? 1.0 : 0.0; }
static double d_gelu(double a, double b, int w)
{
    (void)b, (void)w;
    return 0.5 * (1.0 + erf(a / sqrt(2.0))) + a * exp(-0.5 * a * a) / sqrt(2.0 * M_PI);
}
static double d_gelu_tanh(double a, double b, int w)
{
    (void)b, (void)w;
    double t = tanh(K_BETA * (a + K_KAPPA * a * a * a));
    return 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * K_BETA * (1.0 + 3.0 * K_KAPPA * a * a);
}
static double d_silu(double a, double b, int w) { (void)b, (void)w; return sigm(a) * (1.0 + a * (1.0 - sigm(a))); }
static double d_swiglu(double a, double b, int w)
{
    return w == 0 ? b * sigm(a) * (1.0 + a * (1.0 - sigm(a))) : a * sigm(a);
}

static col_node *dropout_fixed(col_graph *g, col_node *x) { return col_dropout(g, x, 0.35f, 77); }

typedef struct {
    const char *name; /* as in the builder's error messages */
    int nin;
    col_node *(*f1)(col_graph *, col_node *);
    col_node *(*f2)(col_graph *, col_node *, col_node *);
    double (*ref)(double, double);              /* NULL: no value reference (dropout) */
    double (*dref)(double, double, int);
    float lo, hi;                               /* input range */
    bool kink;                                  /* gradcheck: keep |x| > 0.05 */
} op_case;

static const op_case CASES[] = {
    {"exp", 1, col_exp, NULL, r_exp, d_exp, -4, 4, false},
    {"log", 1, col_log, NULL, r_log, d_log, 0.2f, 5, false},
    {"tanh", 1, col_tanh, NULL, r_tanh, d_tanh, -4, 4, false},
    {"sigmoid", 1, col_sigmoid, NULL, r_sigmoid, d_sigmoid, -6, 6, false},
    {"relu", 1, col_relu, NULL, r_relu, d_relu, -3, 3, true},
    {"gelu", 1, col_gelu, NULL, r_gelu, d_gelu, -5, 5, false},
    {"gelu_tanh", 1, col_gelu_tanh, NULL, r_gelu_tanh, d_gelu_tanh, -5, 5, false},
    {"silu", 1, col_silu, NULL, r_silu, d_silu, -6, 6, false},
    {"swiglu", 2, NULL, col_swiglu, r_swiglu, d_swiglu, -4, 4, false},
    {"dropout", 1, dropout_fixed, NULL, NULL, NULL, -2, 2, false},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

static col_node *apply_op(col_graph *g, const op_case *c, col_node **v)
{
    return c->nin == 1 ? c->f1(g, v[0]) : c->f2(g, v[0], v[1]);
}

/* ---- operand layouts: the op sees shape[], read through a view of a leaf ---- */

enum { L_CONTIG, L_TRANSPOSE, L_SLICE, L_EXPAND, L_COUNT };
static const char *const LAYOUT_NAME[L_COUNT] = {"contiguous", "transposed", "sliced", "expanded"};

typedef struct {
    int nd;
    int64_t shape[4];
    int layout[2]; /* per input */
} setup;

static int64_t numel_of(int nd, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    return n;
}

static void leaf_shape(const setup *s, int k, int64_t *ls)
{
    int nd = s->nd;
    memcpy(ls, s->shape, sizeof s->shape);
    switch (s->layout[k]) {
    case L_TRANSPOSE: ls[0] = s->shape[nd - 1], ls[nd - 1] = s->shape[0]; break;
    case L_SLICE: ls[nd - 1] += 3; break;
    case L_EXPAND: ls[0] = 1; break;
    default: break;
    }
}

static col_node *apply_layout(col_graph *g, col_node *leaf, const setup *s, int k)
{
    int nd = s->nd;
    switch (s->layout[k]) {
    case L_TRANSPOSE: return col_transpose(g, leaf, 0, nd - 1);
    case L_SLICE: return col_slice(g, leaf, nd - 1, 1, s->shape[nd - 1]);
    case L_EXPAND: return col_expand(g, leaf, nd, s->shape);
    default: return leaf;
    }
}

/* row-major index in leaf k of the element the op sees at idx (computed here,
 * independently of the library's view code) */
static int64_t leaf_index(const setup *s, int k, const int64_t *idx)
{
    int nd = s->nd;
    int64_t ls[4], li[4];
    leaf_shape(s, k, ls);
    memcpy(li, idx, sizeof li);
    switch (s->layout[k]) {
    case L_TRANSPOSE: li[0] = idx[nd - 1], li[nd - 1] = idx[0]; break;
    case L_SLICE: li[nd - 1] += 1; break;
    case L_EXPAND: li[0] = 0; break;
    default: break;
    }
    int64_t off = 0;
    for (int d = 0; d < nd; d++)
        off = off * ls[d] + li[d];
    return off;
}

static void next_index(const setup *s, int64_t *idx)
{
    for (int d = s->nd - 1; d >= 0; d--) {
        if (++idx[d] < s->shape[d])
            return;
        idx[d] = 0;
    }
}

static void random_setup(col_rng *rng, setup *s, int nin)
{
    s->nd = 1 + (int)col_rng_below(rng, 4);
    for (int d = 0; d < s->nd; d++)
        s->shape[d] = 1 + (int64_t)col_rng_below(rng, d == s->nd - 1 ? 40 : 6);
    for (int k = 0; k < 2; k++)
        s->layout[k] = k < nin ? (int)col_rng_below(rng, L_COUNT) : L_CONTIG;
}

/* finite differences need inputs away from a kink; the references do not */
static void fill_input(float *x, int64_t n, uint64_t seed, const op_case *c, bool away_from_kink)
{
    col_fill_uniform(x, n, seed, c->lo, c->hi);
    if (c->kink && away_from_kink)
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] >= 0 ? x[i] + 0.05f : x[i] - 0.05f;
}

static bool close_to(double got, double want, double atol, double rtol)
{
    return fabs(got - want) <= atol + rtol * fabs(want);
}

/* ---- forward + backward of one op against the double references, and
 * bitwise equality of 1 and 2 threads ---- */

typedef struct {
    col_graph *g;
    col_plan *plan;
    col_node *out;
    float *x[2], *grad[2], *r;
    int64_t ln[2], n;
} op_run;

static void op_run_free(op_run *o)
{
    col_plan_free(o->plan);
    col_graph_free(o->g);
    for (int k = 0; k < 2; k++) {
        free(o->x[k]);
        free(o->grad[k]);
    }
    free(o->r);
}

/* builds out = op(views of params) and loss = sum(out * R), with backward */
static bool op_run_build(op_run *o, const op_case *c, const setup *s, uint64_t seed)
{
    memset(o, 0, sizeof *o);
    col_err err = {0};
    o->g = col_graph_new();
    col_node *v[2], *leaf[2];
    o->n = numel_of(s->nd, s->shape);
    for (int k = 0; k < c->nin; k++) {
        int64_t ls[4];
        leaf_shape(s, k, ls);
        o->ln[k] = numel_of(s->nd, ls);
        leaf[k] = col_param(o->g, "x", COL_F32, s->nd, ls);
        v[k] = apply_layout(o->g, leaf[k], s, k);
        o->x[k] = malloc(sizeof(float) * (size_t)o->ln[k]);
        o->grad[k] = calloc((size_t)o->ln[k], sizeof(float));
        fill_input(o->x[k], o->ln[k], seed + 17 * (uint64_t)k, c, false);
    }
    o->out = apply_op(o->g, c, v);
    col_node *r = col_input(o->g, "R", COL_F32, s->nd, s->shape);
    col_node *loss = col_sum(o->g, col_mul(o->g, o->out, r), 0xffu, 0);
    o->r = malloc(sizeof(float) * (size_t)o->n);
    col_fill_uniform(o->r, o->n, seed + 99, -1.0f, 1.0f);
    if (col_graph_status(o->g) != COL_OK) {
        TL_NOTE("%s: build failed: %s", c->name, col_graph_error(o->g)->msg);
        return false;
    }
    col_mark_output(o->out);
    if (col_graph_backward(o->g, loss, &err) != COL_OK || col_plan_create(o->g, &o->plan, &err) != COL_OK) {
        TL_NOTE("%s: %s", c->name, err.msg);
        return false;
    }
    for (int k = 0; k < c->nin; k++) {
        col_bind(leaf[k], o->x[k], &err);
        col_bind_grad(leaf[k], o->grad[k], &err);
    }
    col_bind(r, o->r, &err);
    return true;
}

static bool op_run_exec(op_run *o, const col_backend *be, int nin)
{
    col_err err = {0};
    for (int k = 0; k < nin; k++)
        memset(o->grad[k], 0, sizeof(float) * (size_t)o->ln[k]);
    if (col_plan_run(o->plan, be, &err) != COL_OK) {
        TL_NOTE("run: %s", err.msg);
        return false;
    }
    return true;
}

static void check_op(const col_backend *be, const op_case *c, const setup *s, uint64_t seed, bool threads)
{
    char desc[160];
    int len = snprintf(desc, sizeof desc, "%s [", c->name);
    for (int d = 0; d < s->nd; d++)
        len += snprintf(desc + len, sizeof desc - (size_t)len, "%s%lld", d ? "," : "", (long long)s->shape[d]);
    len += snprintf(desc + len, sizeof desc - (size_t)len, "] %s", LAYOUT_NAME[s->layout[0]]);
    if (c->nin == 2)
        snprintf(desc + len, sizeof desc - (size_t)len, "/%s", LAYOUT_NAME[s->layout[1]]);

    op_run o;
    bool ok = op_run_build(&o, c, s, seed);
    if (ok && threads)
        omp_set_num_threads(1);
    ok = ok && op_run_exec(&o, be, c->nin);
    if (!ok) {
        TL_OK(false, "%s: builds and runs", desc);
        op_run_free(&o);
        return;
    }
    const float *out = col_data(o.out);
    if (c->ref) {
        /* forward, and the gradient: dL/dleaf = sum over uses of R * d out / d in */
        double *want[2] = {calloc((size_t)o.ln[0], sizeof(double)),
                           c->nin == 2 ? calloc((size_t)o.ln[1], sizeof(double)) : NULL};
        int64_t idx[4] = {0}, bad = 0, worst = -1;
        double worst_err = 0;
        for (int64_t i = 0; i < o.n; i++, next_index(s, idx)) {
            int64_t li[2] = {leaf_index(s, 0, idx), c->nin == 2 ? leaf_index(s, 1, idx) : 0};
            double a = o.x[0][li[0]], b = c->nin == 2 ? o.x[1][li[1]] : 0.0;
            double ref = c->ref(a, b);
            bad += !close_to(out[i], ref, 2e-6, 2e-5);
            if (fabs(out[i] - ref) > worst_err || worst < 0)
                worst_err = fabs(out[i] - ref), worst = i;
            for (int k = 0; k < c->nin; k++)
                want[k][li[k]] += (double)o.r[i] * c->dref(a, b, k);
        }
        TL_OK(bad == 0, "%s: forward matches double reference (%lld bad, max |err| %.3g at %lld)", desc,
              (long long)bad, worst_err, (long long)worst);
        for (int k = 0; k < c->nin; k++) {
            bad = 0, worst_err = 0, worst = -1;
            for (int64_t j = 0; j < o.ln[k]; j++) {
                bad += !close_to(o.grad[k][j], want[k][j], 3e-6, 2e-5);
                if (fabs(o.grad[k][j] - want[k][j]) > worst_err || worst < 0)
                    worst_err = fabs(o.grad[k][j] - want[k][j]), worst = j;
            }
            TL_OK(bad == 0, "%s: gradient of input %d matches double reference (%lld bad, max |err| %.3g at %lld)",
                  desc, k, (long long)bad, worst_err, (long long)worst);
            free(want[k]);
        }
    }
    if (threads) {
        /* 1 thread above; now 2 threads: outputs and gradients bitwise equal */
        float *out1 = malloc(sizeof(float) * (size_t)o.n), *g1[2] = {0};
        memcpy(out1, out, sizeof(float) * (size_t)o.n);
        for (int k = 0; k < c->nin; k++) {
            g1[k] = malloc(sizeof(float) * (size_t)o.ln[k]);
            memcpy(g1[k], o.grad[k], sizeof(float) * (size_t)o.ln[k]);
        }
        omp_set_num_threads(2);
        bool same = op_run_exec(&o, be, c->nin) && memcmp(out1, col_data(o.out), sizeof(float) * (size_t)o.n) == 0;
        for (int k = 0; k < c->nin; k++) {
            same = same && memcmp(g1[k], o.grad[k], sizeof(float) * (size_t)o.ln[k]) == 0;
            free(g1[k]);
        }
        free(out1);
        TL_OK(same, "%s: output and gradients are bitwise equal with 1 and 2 threads", desc);
    }
    op_run_free(&o);
}

static void test_values(const col_backend *be)
{
    col_rng rng;
    col_rng_init(&rng, 2024);
    for (int ci = 0; ci < NCASES; ci++) {
        const op_case *c = &CASES[ci];
        if (!c->ref)
            continue;
        for (int trial = 0; trial < 4; trial++) {
            setup s;
            random_setup(&rng, &s, c->nin);
            if (trial < L_COUNT) /* every layout at least once */
                s.layout[0] = trial, s.layout[1] = (trial + 1) % L_COUNT;
            check_op(be, c, &s, 1000 + 10 * (uint64_t)ci + (uint64_t)trial, false);
        }
    }
}

/* large tensors (several blocks, the parallel path): values, and 1 vs 2 threads */
static void test_threads(const col_backend *be)
{
    for (int ci = 0; ci < NCASES; ci++) {
        for (int lay = 0; lay < 2; lay++) {
            setup s = {.nd = 2, .shape = {301, 517}, .layout = {lay ? L_TRANSPOSE : L_CONTIG, L_CONTIG}};
            check_op(be, &CASES[ci], &s, 7 + (uint64_t)ci, true);
        }
    }
}

/* ---- finite-difference gradient checks ---- */

typedef struct {
    const op_case *c;
    setup s;
} gc_user;

static col_node *gc_build(col_graph *g, col_node **leaves, void *user)
{
    const gc_user *u = user;
    col_node *v[2];
    for (int k = 0; k < u->c->nin; k++)
        v[k] = apply_layout(g, leaves[k], &u->s, k);
    return apply_op(g, u->c, v);
}

static void test_gradcheck(const col_backend *be)
{
    col_rng rng;
    col_rng_init(&rng, 77);
    for (int ci = 0; ci < NCASES; ci++) {
        const op_case *c = &CASES[ci];
        for (int trial = 0; trial < 3; trial++) {
            gc_user u = {.c = c};
            random_setup(&rng, &u.s, c->nin);
            if (trial == 0)
                u.s.layout[0] = L_CONTIG, u.s.layout[1] = L_CONTIG;
            if (trial == 1) /* a non-contiguous view and a broadcast */
                u.s.layout[0] = L_TRANSPOSE, u.s.layout[1] = L_EXPAND;
            col_gc_input in[2];
            float *data[2] = {0};
            for (int k = 0; k < c->nin; k++) {
                in[k] = (col_gc_input){.dtype = COL_F32, .ndim = u.s.nd};
                leaf_shape(&u.s, k, in[k].shape);
                int64_t n = numel_of(u.s.nd, in[k].shape);
                data[k] = malloc(sizeof(float) * (size_t)n);
                fill_input(data[k], n, 500 + 3 * (uint64_t)ci + (uint64_t)trial + 101 * (uint64_t)k, c, true);
                in[k].data = data[k];
            }
            char name[96];
            snprintf(name, sizeof name, "%s %s/%s %dd", c->name, LAYOUT_NAME[u.s.layout[0]],
                     c->nin == 2 ? LAYOUT_NAME[u.s.layout[1]] : "-", u.s.nd);
            col_gc_opts opts = {.seed = 3 + (uint64_t)trial};
            tl_gradcheck(be, name, gc_build, &u, c->nin, in, &opts);
            for (int k = 0; k < c->nin; k++)
                free(data[k]);
        }
    }
}

/* ---- dropout ---- */

static bool kept_ref(uint64_t seed, uint64_t i, float p) { return col_rand_uniform(seed, i) >= p; }

static void test_dropout_forward(const col_backend *be)
{
    const float p = 0.3f;
    const uint64_t seed = 4242;
    const int64_t n1 = 262147, R2 = 333, C2 = 211, n2 = R2 * C2;
    col_graph *g = col_graph_new();
    col_node *x1 = col_input(g, "x1", COL_F32, 1, &n1);
    col_node *x2 = col_input(g, "x2", COL_F32, 2, (int64_t[]){R2, C2});
    TL_OK(col_dropout(g, x1, 0.0f, seed) == x1, "dropout: p = 0 returns the input node itself");
    col_node *y1 = col_dropout(g, x1, p, seed);
    col_node *y2 = col_dropout(g, col_transpose(g, x2, 0, 1), p, seed); /* [C2, R2], strided input */
    col_node *y3 = col_dropout(g, x1, p, seed);                          /* same seed and input as y1 */
    col_mark_output(y1);
    col_mark_output(y2);
    col_mark_output(y3);
    col_plan *plan = NULL;
    col_err err = {0};
    float *h1 = malloc(sizeof(float) * (size_t)n1), *h2 = malloc(sizeof(float) * (size_t)n2);
    col_fill_uniform(h1, n1, 1, 0.5f, 1.5f);
    col_fill_uniform(h2, n2, 2, -1.5f, -0.5f);
    bool ok = col_graph_status(g) == COL_OK && col_plan_create(g, &plan, &err) == COL_OK;
    col_bind(x1, h1, &err);
    col_bind(x2, h2, &err);
    omp_set_num_threads(1);
    ok = ok && col_plan_run(plan, be, &err) == COL_OK;
    TL_OK(ok, "dropout: graph of three dropouts builds and runs %s", err.msg);
    if (!ok)
        goto done;
    const float *o1 = col_data(y1), *o2 = col_data(y2), *o3 = col_data(y3);
    double scale = 1.0 / (1.0 - (double)p);

    int64_t kept = 0, bad_mask = 0, bad_val = 0, differ = 0, bad3 = 0;
    for (int64_t i = 0; i < n1; i++) {
        bool k = kept_ref(seed, (uint64_t)i, p);
        kept += o1[i] != 0.0f;
        bad_mask += k != (o1[i] != 0.0f);
        if (k ? !close_to(o1[i], h1[i] * scale, 0, 1e-6) : o1[i] != 0.0f)
            bad_val++;
        bool k3 = kept_ref(seed, (uint64_t)(n1 + n2 + i), p); /* third dropout: after n1 + n2 stream positions */
        bad3 += k3 != (o3[i] != 0.0f) || (k3 && !close_to(o3[i], h1[i] * scale, 0, 1e-6));
        differ += (o1[i] != 0.0f) != (o3[i] != 0.0f);
    }
    double frac = (double)kept / (double)n1;
    TL_OK(bad_mask == 0, "dropout: mask is col_rand_uniform(seed, i) >= p (%lld mismatches)", (long long)bad_mask);
    TL_OK(bad_val == 0, "dropout: kept values are x/(1-p), dropped are 0 (%lld bad)", (long long)bad_val);
    TL_OK(fabs(frac - (1.0 - p)) < 0.01, "dropout: kept fraction %.4f is near 1-p = %.2f", frac, 1.0 - p);
    TL_OK(bad3 == 0, "dropout: a later dropout draws from stream offset n1+n2 (%lld mismatches)", (long long)bad3);
    /* independent masks disagree on about 2p(1-p) = 42% of the elements */
    TL_OK(differ > n1 / 3, "dropout: two dropouts with the same seed draw different masks (%lld of %lld differ)",
          (long long)differ, (long long)n1);

    int64_t bad2 = 0;
    for (int64_t r = 0; r < C2; r++)
        for (int64_t c = 0; c < R2; c++) {
            int64_t i = r * R2 + c; /* logical index in the [C2, R2] output */
            float x = h2[c * C2 + r];
            bool k = kept_ref(seed, (uint64_t)(n1 + i), p);
            bad2 += k ? !close_to(o2[i], x * scale, 0, 1e-6) : o2[i] != 0.0f;
        }
    TL_OK(bad2 == 0, "dropout: strided input, mask by logical output index at offset n1 (%lld bad)", (long long)bad2);

    /* the same run with 2 threads: bitwise equal */
    float *c1 = malloc(sizeof(float) * (size_t)n1), *c2 = malloc(sizeof(float) * (size_t)n2),
          *c3 = malloc(sizeof(float) * (size_t)n1);
    memcpy(c1, o1, sizeof(float) * (size_t)n1);
    memcpy(c2, o2, sizeof(float) * (size_t)n2);
    memcpy(c3, o3, sizeof(float) * (size_t)n1);
    omp_set_num_threads(2);
    ok = col_plan_run(plan, be, &err) == COL_OK;
    TL_OK(ok && memcmp(c1, o1, sizeof(float) * (size_t)n1) == 0 && memcmp(c2, o2, sizeof(float) * (size_t)n2) == 0 &&
              memcmp(c3, o3, sizeof(float) * (size_t)n1) == 0,
          "dropout: masks and values bitwise equal with 1 and 2 threads");
    free(c1);
    free(c2);
    free(c3);
done:
    col_plan_free(plan);
    col_graph_free(g);
    free(h1);
    free(h2);
}

/* y = dropout(x, p); loss = sum(y * R): dx must be R * (the forward's mask) / (1-p) */
static void test_dropout_backward(const col_backend *be, float p)
{
    const int64_t shape[2] = {257, 300}, n = shape[0] * shape[1];
    const uint64_t seed = 99;
    col_graph *g = col_graph_new();
    col_node *x = col_param(g, "x", COL_F32, 2, shape);
    col_node *r = col_input(g, "R", COL_F32, 2, shape);
    col_node *y = col_dropout(g, x, p, seed);
    col_node *loss = col_sum(g, col_mul(g, y, r), 3, 0);
    col_err err = {0};
    col_plan *plan = NULL;
    float *hx = malloc(sizeof(float) * (size_t)n), *hr = malloc(sizeof(float) * (size_t)n);
    float *gx = calloc((size_t)n, sizeof(float));
    col_fill_uniform(hx, n, 5, 0.5f, 1.5f);
    col_fill_uniform(hr, n, 6, 0.5f, 1.5f);
    col_mark_output(y);
    bool ok = col_graph_status(g) == COL_OK && col_graph_backward(g, loss, &err) == COL_OK &&
              col_plan_create(g, &plan, &err) == COL_OK;
    col_bind(x, hx, &err);
    col_bind_grad(x, gx, &err);
    col_bind(r, hr, &err);
    ok = ok && col_plan_run(plan, be, &err) == COL_OK;
    TL_OK(ok, "dropout p=%g: forward and backward run %s", (double)p, err.msg);
    if (ok) {
        const float *hy = col_data(y);
        double scale = p < 1.0f ? 1.0 / (1.0 - (double)p) : 0.0;
        int64_t bad = 0, kept = 0;
        for (int64_t i = 0; i < n; i++) {
            bool k = p < 1.0f && kept_ref(seed, (uint64_t)i, p);
            kept += k;
            bool fwd_kept = hy[i] != 0.0f, bwd_kept = gx[i] != 0.0f;
            if (fwd_kept != k || bwd_kept != k || (k && !close_to(gx[i], hr[i] * scale, 0, 1e-6)))
                bad++;
        }
        TL_OK(bad == 0, "dropout p=%g: backward uses the forward's mask, dx = dy/(1-p) where kept (%lld bad, %lld kept)",
              (double)p, (long long)bad, (long long)kept);
    }
    col_plan_free(plan);
    col_graph_free(g);
    free(hx);
    free(hr);
    free(gx);
}

/* dropouts inside a checkpoint segment are recomputed in backward with the same masks */
static bool ckpt_grads(const col_backend *be, bool ckpt, const float *hx, const float *hr, float *gx, int64_t n)
{
    col_graph *g = col_graph_new();
    col_node *x = col_param(g, "x", COL_F32, 1, &n);
    col_node *r = col_input(g, "R", COL_F32, 1, &n);
    if (ckpt)
        col_checkpoint_begin(g);
    col_node *h = col_dropout(g, col_tanh(g, x), 0.25f, 3);
    h = col_dropout(g, col_gelu(g, h), 0.25f, 3);
    if (ckpt)
        col_checkpoint_end(g);
    col_node *loss = col_sum(g, col_mul(g, h, r), 1, 0);
    col_err err = {0};
    col_plan *plan = NULL;
    memset(gx, 0, sizeof(float) * (size_t)n);
    bool ok = col_graph_status(g) == COL_OK && col_graph_backward(g, loss, &err) == COL_OK &&
              col_plan_create(g, &plan, &err) == COL_OK;
    col_bind(x, (void *)hx, &err);
    col_bind_grad(x, gx, &err);
    col_bind(r, (void *)hr, &err);
    ok = ok && col_plan_run(plan, be, &err) == COL_OK;
    if (!ok)
        TL_NOTE("checkpoint=%d: %s", ckpt, err.msg);
    col_plan_free(plan);
    col_graph_free(g);
    return ok;
}

static void test_dropout_checkpoint(const col_backend *be)
{
    const int64_t n = 5000;
    float *hx = malloc(sizeof(float) * n), *hr = malloc(sizeof(float) * n);
    float *g0 = malloc(sizeof(float) * n), *g1 = malloc(sizeof(float) * n);
    col_fill_uniform(hx, n, 8, -2.0f, 2.0f);
    col_fill_uniform(hr, n, 9, -1.0f, 1.0f);
    bool ok = ckpt_grads(be, false, hx, hr, g0, n) && ckpt_grads(be, true, hx, hr, g1, n);
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; i++)
        zeros += g0[i] == 0.0f;
    /* kept by both dropouts: (3/4)^2 of the elements */
    TL_OK(ok && zeros > n / 3 && zeros < n / 2 && memcmp(g0, g1, sizeof(float) * n) == 0,
          "dropout: checkpointed recomputation reproduces the masks (%lld of %lld gradients dropped)", (long long)zeros,
          (long long)n);
    free(hx);
    free(hr);
    free(g0);
    free(g1);
}

/* ---- builder errors ---- */

static bool fails_with(col_graph *g, col_node *res, col_status code, const char *word)
{
    const col_err *e = col_graph_error(g);
    bool ok = res == NULL && col_graph_status(g) == code && strstr(e->msg, word) != NULL;
    if (!ok)
        TL_NOTE("got %s: %s", col_status_name(col_graph_status(g)), e->msg);
    return ok;
}

static void test_errors(void)
{
    const int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
    for (int ci = 0; ci < NCASES; ci++) {
        const op_case *c = &CASES[ci];
        col_dtype bad[2] = {COL_I32, COL_BF16};
        for (int b = 0; b < 2; b++) {
            col_graph *g = col_graph_new();
            col_node *v[2] = {col_input(g, "x", bad[b], 2, s23), col_input(g, "y", COL_F32, 2, s23)};
            if (c->nin == 2 && b == 1) { /* the second operand is the bad one */
                col_node *t = v[0];
                v[0] = v[1], v[1] = t;
            }
            col_node *res = apply_op(g, c, v);
            TL_OK(fails_with(g, res, COL_EDTYPE, c->name), "%s: %s input is refused, message names the op", c->name,
                  col_dtype_name(bad[b]));
            col_graph_free(g);
        }
        col_graph *g = col_graph_new();
        col_node *none[2] = {NULL, NULL};
        TL_OK(apply_op(g, c, none) == NULL && col_graph_status(g) == COL_OK, "%s: a NULL source gives NULL", c->name);
        col_graph_free(g);
    }
    col_graph *g = col_graph_new();
    col_node *res = col_swiglu(g, col_input(g, "a", COL_F32, 2, s23), col_input(g, "b", COL_F32, 2, s32));
    TL_OK(fails_with(g, res, COL_ESHAPE, "swiglu") && strstr(col_graph_error(g)->msg, "[2,3]") &&
              strstr(col_graph_error(g)->msg, "[3,2]"),
          "swiglu: [2,3] and [3,2] are refused, message names the op and the shapes");
    col_graph_free(g);
    g = col_graph_new();
    res = col_swiglu(g, col_input(g, "a", COL_F32, 2, s23), col_input(g, "b", COL_F32, 1, &s23[1]));
    TL_OK(fails_with(g, res, COL_ESHAPE, "swiglu"), "swiglu: no broadcasting of [3] to [2,3]");
    col_graph_free(g);
    const float bad_p[] = {-0.1f, 1.5f, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        g = col_graph_new();
        res = col_dropout(g, col_input(g, "x", COL_F32, 2, s23), bad_p[i], 1);
        TL_OK(fails_with(g, res, COL_EINVAL, "dropout"), "dropout: p = %g is refused", (double)bad_p[i]);
        col_graph_free(g);
    }
}

/* The run counter changes the mask between runs of one plan; the backward
 * of each run uses that run's mask. */
static void test_dropout_counter(const col_backend *be)
{
    enum { N = 4096 };
    col_graph *g = col_graph_new();
    int64_t s[1] = {N};
    col_node *x = col_param(g, "x", COL_F32, 1, s);
    col_node *y = col_dropout(g, x, 0.5f, 77);
    col_node *loss = col_sum(g, y, 1, 0);
    col_mark_output(y);
    col_err err = {0};
    col_plan *p = NULL;
    float *xd = malloc(sizeof(float) * N), *gd = calloc(N, sizeof(float));
    float *y1 = malloc(sizeof(float) * N), *g1 = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++)
        xd[i] = 1.0f + (float)i / N;
    col_bind(x, xd, NULL);
    col_bind_grad(x, gd, NULL);
    bool ok = col_graph_backward(g, loss, &err) == COL_OK && col_plan_create(g, &p, &err) == COL_OK;
    int same01 = 0, same11 = 1, grad_matches = 1;
    for (int run = 0; ok && run < 3; run++) {
        col_graph_set_rng_counter(g, run == 0 ? 0 : 1);
        memset(gd, 0, sizeof(float) * N);
        ok = col_plan_run(p, be, &err) == COL_OK;
        const float *yd = col_data(y);
        for (int i = 0; ok && i < N; i++) {
            grad_matches &= (yd[i] != 0) == (gd[i] != 0);
            if (run == 1)
                same01 += (yd[i] != 0) == (y1[i] != 0);
            if (run == 2)
                same11 &= yd[i] == y1[i] && gd[i] == g1[i];
        }
        memcpy(y1, yd, sizeof(float) * N);
        memcpy(g1, gd, sizeof(float) * N);
    }
    TL_OK(ok, "dropout with a run counter runs");
    /* two independent masks with p = 0.5 agree on about half the elements */
    TL_OK(same01 > N / 2 - 300 && same01 < N / 2 + 300, "counter 0 and 1 draw independent masks (%d of %d agree)", same01,
          N);
    TL_OK(same11, "the same counter gives the same mask");
    TL_OK(grad_matches, "each run's backward uses that run's forward mask");
    free(xd), free(gd), free(y1), free(g1);
    col_plan_free(p);
    col_graph_free(g);
}

int main(void)
{
    col_backend be;
    tl_cpu_backend(&be);
    int threads = omp_get_max_threads();
    test_errors();
    test_values(&be);
    test_gradcheck(&be);
    test_threads(&be);
    omp_set_num_threads(threads);
    test_dropout_forward(&be);
    omp_set_num_threads(threads);
    test_dropout_backward(&be, 0.5f);
    test_dropout_backward(&be, 0.1f);
    test_dropout_backward(&be, 1.0f);
    test_dropout_checkpoint(&be);
    test_dropout_counter(&be);
    col_cpu_backend_free(&be);
    return tl_done();
}
