/* test_mb_store - diffusion parameters named while a graph is built
 * (mb_builder) and bound from a checkpoint or from memtier chunks
 * (mb_store): results against a hand-computed two-layer network, shared
 * weights across graphs, a compute tier giving bitwise the plain run's
 * results, and the errors a user meets (missing tensor, wrong shape,
 * host budget too small). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "checkpoint.h"
#include "mb_builder.h"
#include "mb_store.h"
#include "ops.h"
#include "testlib.h"

enum { IN = 5, HID = 7, OUT = 3 };

/* y = W2 silu(W1 x + b1) + b2, the weights named as a diffusers block would be */
static col_node *build(mb_builder *b, int batch, col_node **x)
{
    int64_t xs[2] = {batch, IN};
    *x = col_input(b->g, "x", COL_F32, 2, xs);
    mb_push(b, "blocks.%d.", 0);
    mb_push(b, "proj.");
    col_node *w1 = mb_weight(b, 2, (int64_t[]){HID, IN}, "weight");
    col_node *b1 = mb_weight(b, 1, (int64_t[]){HID}, "bias");
    mb_pop(b);
    mb_pop(b);
    col_node *h = col_silu(b->g, col_linear(b->g, *x, w1, b1));
    col_node *w2 = mb_weight(b, 2, (int64_t[]){OUT, HID}, "out.weight");
    col_node *b2 = mb_weight(b, 1, (int64_t[]){OUT}, "out.bias");
    /* asking twice gives the same leaf */
    TL_OK(mb_weight(b, 1, (int64_t[]){OUT}, "out.bias") == b2, "a name asked for twice is one leaf");
    return col_linear(b->g, h, w2, b2);
}

static float W1[HID * IN], B1[HID], W2[OUT * HID], B2[OUT];

static void reference(const float *x, int batch, float *y)
{
    for (int r = 0; r < batch; r++)
        for (int o = 0; o < OUT; o++) {
            double acc = B2[o];
            for (int k = 0; k < HID; k++) {
                double h = B1[k];
                for (int i = 0; i < IN; i++) h += (double)W1[k * IN + i] * x[r * IN + i];
                h = h / (1.0 + exp(-h));
                acc += (double)W2[o * HID + k] * h;
            }
            y[r * OUT + o] = (float)acc;
        }
}

static double max_rel(const float *a, const float *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + 1e-3);
        if (d > m) m = d;
    }
    return m;
}

static void write_weights(const char *path, bool wrong_shape, bool drop_bias)
{
    col_st_out t[4] = {
        {"blocks.0.proj.weight", 2, {HID, IN}, W1},
        {"blocks.0.proj.bias", 1, {HID}, B1},
        {"out.weight", 2, {OUT, wrong_shape ? HID - 1 : HID}, W2},
        {"out.bias", 1, {OUT}, B2},
    };
    col_err err = {0};
    TL_OK(col_st_write_f32(path, t, drop_bias ? 3 : 4, NULL, &err) == COL_OK, "write %s: %s", path, err.msg);
}

static void test_builder(const char *path)
{
    col_backend be;
    tl_cpu_backend(&be);
    col_ckpt *c = NULL;
    col_err err = {0};
    TL_OK(col_ckpt_open(path, &c, &err) == COL_OK, "open weights: %s", err.msg);
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    col_node *x, *y = build(&b, 2, &x);
    TL_OK(b.n == 4 && strcmp(b.params[0].name, "blocks.0.proj.weight") == 0 && strcmp(b.params[3].name, "out.bias") == 0,
          "four parameters in first-use order with their full names (%d, %s)", b.n, b.n ? b.params[0].name : "");
    TL_OK(mb_find(&b, "blocks.0.proj.bias") == 1 && mb_find(&b, "proj.bias") == -1, "mb_find by full name");
    TL_OK(mb_bind_checkpoint(&b, c, &err) == COL_OK, "bind from the checkpoint: %s", err.msg);
    col_mark_output(y);
    col_plan *p = NULL;
    float xs[2 * IN], out[2 * OUT], ref[2 * OUT];
    for (int i = 0; i < 2 * IN; i++) xs[i] = sinf(0.7f * (float)i) * 1.5f;
    bool ran = col_plan_create(g, &p, &err) == COL_OK && col_plan_upload(p, x, xs, sizeof xs, &err) == COL_OK &&
               col_plan_run(p, &be, &err) == COL_OK && col_plan_download(p, y, out, sizeof out, &err) == COL_OK;
    TL_OK(ran, "run the bound graph: %s", err.msg);
    reference(xs, 2, ref);
    TL_OK(max_rel(out, ref, 2 * OUT) < 1e-5, "outputs equal the hand computation (max rel %.2e)", max_rel(out, ref, 2 * OUT));
    col_plan_free(p);
    mb_builder_free(&b);
    col_graph_free(g);

    /* a weight asked for with two shapes, and scopes popped too often, are errors */
    g = col_graph_new();
    mb_builder_init(&b, g, true, COL_F32);
    mb_weight(&b, 1, (int64_t[]){3}, "a");
    TL_OK(mb_weight(&b, 1, (int64_t[]){4}, "a") == NULL && mb_builder_status(&b, &err) == COL_ESHAPE &&
              strstr(err.msg, "a is asked for with two shapes"),
          "one name with two shapes: %s", err.msg);
    mb_builder_free(&b);
    mb_builder_init(&b, g, true, COL_F32);
    mb_pop(&b);
    TL_OK(mb_builder_status(&b, &err) == COL_EINTERNAL, "a pop without a push is reported: %s", err.msg);
    mb_builder_free(&b);
    col_graph_free(g);
    /* a source with a prefix reads a component inside a bigger file */
    mb_source src;
    mb_ckpt_source sc;
    mb_source_ckpt(&src, &sc, c, "blocks.0.");
    float w[HID * IN];
    TL_OK(src.has(&src, "proj.weight") && !src.has(&src, "out.weight"), "a prefixed source finds its own names only");
    TL_OK(src.read(&src, "proj.weight", 2, (int64_t[]){HID, IN}, w, &err) == COL_OK && memcmp(w, W1, sizeof w) == 0,
          "and reads them: %s", err.msg);
    TL_OK(src.read(&src, "proj.bias", 1, (int64_t[]){HID + 1}, w, &err) == COL_ESHAPE && strstr(err.msg, "proj.bias"),
          "a shape that differs is named: %s", err.msg);
    col_ckpt_close(c);
    col_cpu_backend_free(&be);
}

/* the network's output for a batch through a store (compute tier or not) */
static bool run_store(mb_store *s, col_ckpt *c, int batch, const float *xs, float *out, col_err *err)
{
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    col_node *x, *y = build(&b, batch, &x);
    mb_exec *e = NULL;
    mb_source src;
    mb_ckpt_source sc;
    mb_source_ckpt(&src, &sc, c, NULL);
    bool ok = mb_store_bind(s, &b, c ? &src : NULL, err) == COL_OK && mb_exec_create(s, g, &y, 1, &e, err) == COL_OK &&
              mb_exec_upload(e, x, xs, sizeof(float) * (size_t)batch * IN, err) == COL_OK &&
              mb_exec_run(e, err) == COL_OK && mb_exec_download(e, y, out, sizeof(float) * (size_t)batch * OUT, err) == COL_OK;
    mb_exec_free(e);
    mb_builder_free(&b);
    col_graph_free(g);
    return ok;
}

static void test_store(const char *path, const char *bad_shape, const char *no_bias)
{
    col_backend be;
    tl_cpu_backend(&be);
    col_err err = {0};
    col_ckpt *c = NULL, *cs = NULL, *cb = NULL;
    TL_OK(col_ckpt_open(path, &c, &err) == COL_OK && col_ckpt_open(bad_shape, &cs, &err) == COL_OK &&
              col_ckpt_open(no_bias, &cb, &err) == COL_OK,
          "open the three weight files: %s", err.msg);
    float xs[3 * IN], out[3 * OUT], ref[3 * OUT], tier_out[3 * OUT];
    for (int i = 0; i < 3 * IN; i++) xs[i] = cosf(1.3f * (float)i);
    reference(xs, 3, ref);

    mb_store *s = NULL;
    mb_store_config cfg = {0};
    TL_OK(mb_store_create(&cfg, &be, &s, &err) == COL_OK, "create a store: %s", err.msg);
    TL_OK(run_store(s, c, 3, xs, out, &err), "run through the store: %s", err.msg);
    TL_OK(max_rel(out, ref, 3 * OUT) < 1e-5, "store outputs equal the hand computation");
    size_t bytes = mb_store_bytes(s);
    TL_OK(mb_store_count(s) == 4 && bytes == sizeof(float) * (HID * IN + HID + OUT * HID + OUT),
          "the store holds the four tensors once (%d, %zu bytes)", mb_store_count(s), bytes);
    /* a second graph (another batch) shares the weights: nothing is read again (no checkpoint given) */
    TL_OK(run_store(s, NULL, 1, xs, out, &err) && max_rel(out, ref, OUT) < 1e-5,
          "a second graph binds to the held weights without a checkpoint: %s", err.msg);
    TL_OK(mb_store_count(s) == 4 && mb_store_bytes(s) == bytes, "and holds no second copy");
    mb_store_free(s);

    /* a compute tier: bitwise the plain run's outputs */
    float plain[3 * OUT];
    cfg.compute_budget = 0;
    TL_OK(mb_store_create(&cfg, &be, &s, &err) == COL_OK && run_store(s, c, 3, xs, plain, &err), "plain run: %s", err.msg);
    mb_store_free(s);
    cfg.compute_budget = 64 << 10;
    cfg.chunk_bytes = 128;
    TL_OK(mb_store_create(&cfg, &be, &s, &err) == COL_OK && run_store(s, c, 3, xs, tier_out, &err),
          "run through a 64 KB compute tier in 128-byte chunks: %s", err.msg);
    TL_OK(memcmp(plain, tier_out, sizeof plain) == 0, "the compute tier's outputs are bitwise the plain run's");
    mb_store_free(s);

    /* errors: a missing tensor, another shape, a host budget too small */
    cfg = (mb_store_config){0};
    TL_OK(mb_store_create(&cfg, &be, &s, &err) == COL_OK, "store for the errors");
    TL_OK(!run_store(s, cb, 3, xs, out, &err) && err.code == COL_EFORMAT && strstr(err.msg, "out.bias"),
          "a missing tensor is named: %s", err.msg);
    mb_store_free(s);
    TL_OK(mb_store_create(&cfg, &be, &s, &err) == COL_OK, "store for the errors");
    TL_OK(!run_store(s, cs, 3, xs, out, &err) && err.code == COL_ESHAPE && strstr(err.msg, "out.weight"),
          "a tensor of another shape is named: %s", err.msg);
    mb_store_free(s);
    cfg.host_budget = 256;
    cfg.chunk_bytes = 128;
    TL_OK(mb_store_create(&cfg, &be, &s, &err) == COL_OK, "store with a 256-byte host budget");
    TL_OK(!run_store(s, c, 3, xs, out, &err) && err.code == COL_ENOMEM &&
              col_err_has_setting(&err, COL_SETTING_HOST_BUDGET),
          "a host budget too small is reported as such: %s", err.msg);
    mb_store_free(s);
    col_ckpt_close(c);
    col_ckpt_close(cs);
    col_ckpt_close(cb);
    col_cpu_backend_free(&be);
}

int main(void)
{
    for (int i = 0; i < HID * IN; i++) W1[i] = 0.3f * sinf((float)i * 1.7f + 0.2f);
    for (int i = 0; i < HID; i++) B1[i] = 0.1f * cosf((float)i);
    for (int i = 0; i < OUT * HID; i++) W2[i] = 0.25f * cosf((float)i * 0.9f);
    for (int i = 0; i < OUT; i++) B2[i] = -0.05f * (float)i;
    char dir[] = "/tmp/test_mb_store_XXXXXX";
    tl_mkdtemp(dir);
    char good[512], shape[512], nobias[512];
    snprintf(good, sizeof good, "%s/w.safetensors", dir);
    snprintf(shape, sizeof shape, "%s/shape.safetensors", dir);
    snprintf(nobias, sizeof nobias, "%s/nobias.safetensors", dir);
    write_weights(good, false, false);
    write_weights(shape, true, false);
    write_weights(nobias, false, true);
    test_builder(good);
    test_store(good, shape, nobias);
    tl_remove_tree(dir);
    return tl_done();
}
