/* test_fold_attention.c - AlphaFold's Attention and GlobalAttention
 * (fold_attention.h) against DeepMind's modules (JAX, float32), from
 * tools/refgen/make_fold_msa_fixtures.py: gated self-attention with a key
 * bias [B,1,1,K] that masks one key, ungated cross-attention with other key,
 * value and output widths and a shared bias [1,H,Q,K], global attention
 * gated and not; and the errors a caller meets (widths that do not match the
 * input or the weights, a bias of the wrong shape). */
#include "fold_attention.h"
#include "fold_fixture.h"

static col_backend be;

static void check(const char *what, const col_ckpt *ck, const char *out_name, fx_graph *x, col_node *y)
{
    char full[96];
    snprintf(full, sizeof full, "out/%s", out_name);
    int nd = 0;
    int64_t shape[COL_MAX_DIMS];
    float *want = fx_read(ck, full, &nd, shape);
    col_err err = {COL_OK};
    float *got = want && fx_same_shape(y, nd, shape) ? fx_run(x, ck, y, &err) : NULL;
    double e = got ? fx_max_abs(got, want, col_numel(&y->t)) : INFINITY;
    TL_OK(got && e <= 5e-4, "%s: max |diff| %.2e vs AlphaFold (<= 5e-4) %s", what, e, got ? "" : err.msg);
    free(want);
    free(got);
}

static void test_attention(void)
{
    col_ckpt *ck = fx_open("attention_gated");
    if (ck) {
        fx_graph x;
        fx_init(&x, &be, 0);
        col_node *q = fx_input(&x, ck, "q_data"), *bias = fx_input(&x, ck, "bias");
        fold_attn_dims d = {.c_in = 64, .heads = 8, .key_dim = 8, .value_dim = 8, .c_out = 64, .gating = true};
        col_node *y = fold_attention(&x.c, "attention", &d, q, q, bias);
        check("gated self-attention, 8 heads of 8, key bias [3,1,1,7] with a masked key", ck, "out", &x, y);
        TL_OK(x.b.n == 7 && x.b.n == fx_weight_count(ck) && mb_find(&x.b, "attention//gating_b") >= 0,
              "it reads the module's 7 weights by DeepMind's names (%d)", x.b.n);
        fx_free(&x);
    }
    col_ckpt_close(ck);

    ck = fx_open("attention_cross");
    if (ck) {
        fx_graph x;
        fx_init(&x, &be, 0);
        col_node *q = fx_input(&x, ck, "q_data"), *m = fx_input(&x, ck, "m_data"), *bias = fx_input(&x, ck, "bias");
        fold_attn_dims d = {.c_in = 64, .heads = 4, .key_dim = 8, .value_dim = 12, .c_out = 40, .gating = false};
        col_node *y = fold_attention(&x.c, "attention", &d, q, m, bias);
        check("ungated cross-attention, Q 5 K 6, key_dim 8 value_dim 12 c_out 40, bias [1,4,5,6]", ck, "out", &x, y);
        TL_OK(x.b.n == 5 && x.b.n == fx_weight_count(ck), "without gating: 5 weights (%d)", x.b.n);
        fx_free(&x);

        /* widths the weights do not have: the bind names the tensor */
        fx_init(&x, &be, 0);
        q = fx_input(&x, ck, "q_data");
        d.key_dim = 16;
        y = fold_attention(&x.c, "attention", &d, q, q, NULL);
        col_err err = {COL_OK};
        float *r = fx_run(&x, ck, y, &err);
        TL_OK(!r && err.code == COL_ESHAPE && strstr(err.msg, "attention//query_w"),
              "a key width the file does not hold is refused: %s", err.msg);
        free(r);
        fx_free(&x);
    }
    col_ckpt_close(ck);
}

static void test_global(void)
{
    col_ckpt *ck = fx_open("global_attention");
    if (!ck) return;
    int used = 0;
    for (int gated = 1; gated >= 0; gated--) {
        fx_graph x;
        fx_init(&x, &be, 0);
        col_node *m = fx_input(&x, ck, "m_data");
        fold_attn_dims d = {.c_in = 64, .heads = 8, .key_dim = 8, .value_dim = 8, .c_out = 64, .gating = gated};
        const char *name = gated ? "gated" : "ungated";
        col_node *y = fold_global_attention(&x.c, name, &d, m);
        check(gated ? "global attention, gated (5 columns of 4 rows, 64 channels, 8 heads)"
                    : "global attention, ungated (one output per column, broadcast over its rows)",
              ck, name, &x, y);
        used += x.b.n;
        fx_free(&x);
    }
    TL_OK(used == fx_weight_count(ck), "the two modules read all %d weights of the file (%d)", fx_weight_count(ck),
          used);
    col_ckpt_close(ck);
}

static void test_errors(void)
{
    fx_graph x;
    col_err err = {COL_OK};
    fold_attn_dims d = {.c_in = 16, .heads = 2, .key_dim = 4, .value_dim = 4, .c_out = 16, .gating = true};
    fx_init(&x, &be, 0);
    col_node *q = col_input(x.g, "q", COL_F32, 3, (int64_t[]){2, 5, 12});
    TL_OK(!fold_attention(&x.c, "blk/attention", &d, q, q, NULL) && mb_builder_status(&x.b, &err) == COL_ESHAPE &&
              strstr(err.msg, "blk/attention") && strstr(err.msg, "16"),
          "an input whose channels are not c_in: %s", err.msg);
    fx_free(&x);

    fx_init(&x, &be, 0);
    q = col_input(x.g, "q", COL_F32, 3, (int64_t[]){2, 5, 16});
    col_node *bias = col_input(x.g, "bias", COL_F32, 4, (int64_t[]){2, 1, 3, 5});
    TL_OK(!fold_attention(&x.c, "attention", &d, q, q, bias) && mb_builder_status(&x.b, &err) == COL_ESHAPE &&
              strstr(err.msg, "bias") && strstr(err.msg, "[2, 2, 5, 5]"),
          "a bias that does not broadcast to [B,H,Q,K]: %s", err.msg);
    fx_free(&x);

    fx_init(&x, &be, 0);
    q = col_input(x.g, "q", COL_F32, 3, (int64_t[]){2, 5, 16});
    col_node *m = col_input(x.g, "m", COL_F32, 3, (int64_t[]){3, 5, 16});
    TL_OK(!fold_attention(&x.c, "attention", &d, q, m, NULL) && mb_builder_status(&x.b, &err) == COL_ESHAPE &&
              strstr(err.msg, "batches 2 and 3"),
          "query and memory batches that differ: %s", err.msg);
    fx_free(&x);

    fx_init(&x, &be, 0);
    d.heads = 0;
    q = col_input(x.g, "q", COL_F32, 3, (int64_t[]){2, 5, 16});
    TL_OK(!fold_global_attention(&x.c, "attention", &d, q) && mb_builder_status(&x.b, &err) == COL_EINVAL &&
              strstr(err.msg, "positive"),
          "zero heads: %s", err.msg);
    fx_free(&x);
}

int main(void)
{
    tl_cpu_backend(&be);
    test_attention();
    test_global();
    test_errors();
    col_cpu_backend_free(&be);
    return tl_done();
}
