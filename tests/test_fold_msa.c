/* test_fold_msa.c - the MSA-side Evoformer modules (fold_msa.h) against
 * DeepMind's (JAX, float32), from tools/refgen/make_fold_msa_fixtures.py:
 * the row attention with pair bias at the Evoformer's widths (MSA 256, pair
 * 128) and the extra stack's (MSA 64), the column attention (256), the column
 * global attention (64), the pair transition (128) and the MSA transition
 * (64), the outer product mean (256 -> 128) and its result for an MSA
 * without rows; each unchunked and in chunks (some leaving a short last
 * chunk, some more than six so the concatenations nest), the chunked results
 * against the unchunked ones within 1e-5; the arena a plan needs for the row
 * attention at 64 rows x 64 residues, unchunked and chunked; and the errors
 * a caller meets. */
#include "fold_fixture.h"
#include "fold_msa.h"

static col_backend be;

typedef enum { ROW, COLUMN, GLOBAL, TRANSITION, OPM } kind;

typedef struct {
    const char *file;       /* inputs and outputs (and the weights unless wfile) */
    const char *wfile;      /* the weights, when another file holds them */
    const char *what;
    kind k;
    const char *module;
    fold_attn_dims d;
    int64_t factor, c_z, oc; /* transition; outer product mean */
    int64_t chunks[2];      /* chunk sizes tried besides 0 */
} mcase;

static col_node *build(fx_graph *x, const mcase *m, const col_ckpt *ck)
{
    fold_ctx *c = &x->c;
    switch (m->k) {
    case ROW:
        return fold_msa_row_attention_with_pair_bias(c, m->module, fx_input(x, ck, "msa"), fx_input(x, ck, "pair"),
                                                     &m->d);
    case COLUMN: return fold_msa_column_attention(c, m->module, fx_input(x, ck, "msa"), &m->d);
    case GLOBAL: return fold_msa_column_global_attention(c, m->module, fx_input(x, ck, "msa"), &m->d);
    case TRANSITION: return fold_transition(c, m->module, fx_input(x, ck, "act"), m->factor);
    case OPM: return fold_outer_product_mean(c, m->module, fx_input(x, ck, "msa"), m->c_z, m->oc);
    }
    return NULL;
}

static void run_case(const mcase *m)
{
    col_ckpt *ck = fx_open(m->file), *wk = m->wfile ? fx_open(m->wfile) : ck;
    int nd = 0;
    int64_t shape[COL_MAX_DIMS];
    float *want = fx_read(ck, "out/update", &nd, shape);
    if (!ck || !wk || !want) {
        TL_OK(false, "%s: fixture with out/update", m->file);
        goto done;
    }
    float *base = NULL;
    int64_t n = 0;
    for (int t = 0; t < 3; t++) {
        int64_t chunk = t ? m->chunks[t - 1] : 0;
        if (t && !chunk) continue;
        fx_graph x;
        fx_init(&x, &be, chunk);
        col_node *y = build(&x, m, ck);
        col_err err = {COL_OK};
        float *got = fx_same_shape(y, nd, shape) ? fx_run(&x, wk, y, &err) : NULL;
        if (!got && err.code == COL_OK) mb_builder_status(&x.b, &err);
        n = y ? col_numel(&y->t) : 0;
        double e = got ? fx_max_abs(got, want, n) : INFINITY;
        if (!t) {
            TL_OK(got && e <= 5e-4, "%s: max |diff| %.2e vs AlphaFold (<= 5e-4) %s", m->what, e, got ? "" : err.msg);
            if (!m->wfile)
                TL_OK(x.b.n == fx_weight_count(wk), "%s: the graph reads all %d weights of the file (%d)", m->what,
                      fx_weight_count(wk), x.b.n);
            base = got;
            got = NULL;
        } else {
            double ec = got && base ? fx_max_abs(got, base, n) : INFINITY;
            TL_OK(got && e <= 5e-4 && ec <= 1e-5,
                  "%s, chunks of %lld: max |diff| %.2e vs AlphaFold, %.2e vs unchunked (<= 1e-5) %s", m->what,
                  (long long)chunk, e, ec, got ? "" : err.msg);
        }
        free(got);
        fx_free(&x);
    }
    free(base);
done:
    free(want);
    if (wk != ck) col_ckpt_close(wk);
    col_ckpt_close(ck);
}

static void test_modules(void)
{
    const fold_attn_dims evo = {.c_in = 256, .heads = 8, .key_dim = 32, .value_dim = 32, .c_out = 256, .gating = true};
    const fold_attn_dims extra = {.c_in = 64, .heads = 8, .key_dim = 8, .value_dim = 8, .c_out = 64, .gating = true};
    const mcase cases[] = {
        {"row_attention_evo", NULL, "row attention with pair bias, Evoformer (4 x 10, c_m 256, c_z 128)", ROW,
         "msa_row_attention_with_pair_bias", evo, 0, 0, 0, {1, 3}},
        {"row_attention_extra", NULL, "row attention with pair bias, extra stack (6 x 8, c_e 64, c_z 128)", ROW,
         "msa_row_attention_with_pair_bias", extra, 0, 0, 0, {1, 4}},
        {"column_attention_evo", "row_attention_evo", "column attention, Evoformer (4 x 10, c_m 256)", COLUMN,
         "msa_row_attention_with_pair_bias", evo, 0, 0, 0, {1, 3}},
        {"column_global_attention_extra", NULL, "column global attention, extra stack (6 x 8, c_e 64)", GLOBAL,
         "msa_column_global_attention", extra, 0, 0, 0, {1, 3}},
        {"pair_transition", NULL, "pair transition (10 x 10, c_z 128, factor 4)", TRANSITION, "pair_transition",
         {0}, 4, 0, 0, {1, 3}},
        {"msa_transition_extra", NULL, "MSA transition, extra stack (6 x 8, c_e 64, factor 4)", TRANSITION,
         "msa_transition", {0}, 4, 0, 0, {1, 4}},
        {"outer_product_mean_evo", NULL, "outer product mean (4 x 10, c_m 256 -> c_z 128, 32 channels)", OPM,
         "outer_product_mean", {0}, 0, 128, 32, {1, 3}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

/* the outer product mean of an MSA without rows: output_b / 1e-3, from output_b alone */
static void test_opm_no_rows(void)
{
    col_ckpt *ck = fx_open("outer_product_mean_evo");
    int nd = 0;
    int64_t shape[COL_MAX_DIMS];
    float *want = fx_read(ck, "out/update_no_rows", &nd, shape);
    fx_graph x;
    fx_init(&x, &be, 3);
    col_node *msa = col_input(x.g, "msa", COL_F32, 3, (int64_t[]){0, nd == 3 ? shape[0] : 1, 256});
    col_node *y = fold_outer_product_mean(&x.c, "outer_product_mean", msa, 128, 32);
    col_err err = {COL_OK};
    float *got = want && fx_same_shape(y, nd, shape) ? fx_run(&x, ck, y, &err) : NULL;
    double e = got ? fx_max_abs(got, want, col_numel(&y->t)) : INFINITY;
    TL_OK(got && e <= 5e-4 && x.b.n == 1 && mb_find(&x.b, "outer_product_mean//output_b") == 0,
          "outer product mean of 0 rows: output_b / 1e-3 (the first %.1f) from output_b alone (%d weights): max |diff| "
          "%.2e vs AlphaFold on all-masked rows %s",
          want ? want[0] : 0.0, x.b.n, e, got ? "" : err.msg);
    free(got);
    free(want);
    fx_free(&x);
    col_ckpt_close(ck);
}

static float *noise(int64_t n, uint32_t seed)
{
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; f && i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        f[i] = (float)((seed >> 8) & 0xFFFF) / 32768.0f - 1.0f;
    }
    return f;
}

/* the row attention at 64 x 64 with the Evoformer's widths: the arena of its plan, unchunked and in chunks of
 * 8 and 16 rows, and the chunked results against the unchunked */
static void test_memory(void)
{
    enum { S = 64, N = 64 };
    const fold_attn_dims d = {.c_in = 256, .heads = 8, .key_dim = 32, .value_dim = 32, .c_out = 256, .gating = true};
    col_ckpt *wk = fx_open("row_attention_evo");
    const int64_t chunks[3] = {0, 16, 8};
    size_t arena[3] = {0};
    float *out[3] = {0};
    for (int t = 0; wk && t < 3; t++) {
        fx_graph x;
        fx_init(&x, &be, chunks[t]);
        col_node *msa = fx_input_data(&x, "msa", noise(S * N * 256, 7), 3, (int64_t[]){S, N, 256});
        col_node *pair = fx_input_data(&x, "pair", noise(N * N * 128, 11), 3, (int64_t[]){N, N, 128});
        col_node *y = fold_msa_row_attention_with_pair_bias(&x.c, "msa_row_attention_with_pair_bias", msa, pair, &d);
        col_err err = {COL_OK};
        out[t] = fx_run(&x, wk, y, &err);
        arena[t] = x.arena;
        TL_OK(out[t] != NULL, "row attention %d x %d, chunks of %lld rows (0: unchunked): runs %s", S, N,
              (long long)chunks[t], err.msg);
        fx_free(&x);
    }
    double e16 = out[0] && out[1] ? fx_max_abs(out[1], out[0], S * N * 256) : INFINITY;
    double e8 = out[0] && out[2] ? fx_max_abs(out[2], out[0], S * N * 256) : INFINITY;
    TL_OK(e16 <= 1e-5 && e8 <= 1e-5, "row attention %d x %d: chunks of 16 and 8 rows give the unchunked result "
          "(max |diff| %.2e, %.2e)", S, N, e16, e8);
    TL_OK(arena[0] > 0 && arena[1] < arena[0] && arena[2] <= arena[1] && arena[2] * 2 < arena[0],
          "row attention %d x %d, c_m 256: the plan's arena %.2f MiB unchunked, %.2f MiB in chunks of 16 rows, "
          "%.2f MiB in chunks of 8", S, N, arena[0] / 1048576.0, arena[1] / 1048576.0, arena[2] / 1048576.0);
    for (int t = 0; t < 3; t++) free(out[t]);
    col_ckpt_close(wk);
}

static void test_errors(void)
{
    fx_graph x;
    col_err err = {COL_OK};
    fold_attn_dims d = {.c_in = 16, .heads = 2, .key_dim = 4, .value_dim = 4, .c_out = 16, .gating = true};
    fx_init(&x, &be, 0);
    col_node *msa = col_input(x.g, "msa", COL_F32, 3, (int64_t[]){3, 5, 16});
    col_node *pair = col_input(x.g, "pair", COL_F32, 3, (int64_t[]){5, 4, 8});
    TL_OK(!fold_msa_row_attention_with_pair_bias(&x.c, "row", msa, pair, &d) &&
              mb_builder_status(&x.b, &err) == COL_ESHAPE && strstr(err.msg, "row: the pair must be f32 [5, 5"),
          "a pair that does not match the MSA's residues: %s", err.msg);
    fx_free(&x);

    fx_init(&x, &be, 0);
    msa = col_input(x.g, "msa", COL_F32, 3, (int64_t[]){0, 5, 16});
    TL_OK(!fold_msa_column_attention(&x.c, "col", msa, &d) && mb_builder_status(&x.b, &err) == COL_ESHAPE &&
              strstr(err.msg, "col: the MSA must be") && strstr(err.msg, "1 or more rows"),
          "column attention over an MSA without rows: %s", err.msg);
    fx_free(&x);

    fx_init(&x, &be, 0);
    msa = col_input(x.g, "msa", COL_F32, 3, (int64_t[]){3, 5, 12});
    TL_OK(!fold_msa_column_global_attention(&x.c, "glob", msa, &d) && mb_builder_status(&x.b, &err) == COL_ESHAPE &&
              strstr(err.msg, "input width"),
          "an MSA whose channels are not the attention's: %s", err.msg);
    fx_free(&x);

    fx_init(&x, &be, 0);
    msa = col_input(x.g, "msa", COL_F32, 1, (int64_t[]){16});
    TL_OK(!fold_transition(&x.c, "tr", msa, 4) && mb_builder_status(&x.b, &err) == COL_ESHAPE &&
              strstr(err.msg, "tr: the transition's input"),
          "a transition of a vector: %s", err.msg);
    fx_free(&x);

    fx_init(&x, &be, 0);
    msa = col_input(x.g, "msa", COL_F32, 3, (int64_t[]){3, 5, 16});
    TL_OK(!fold_transition(&x.c, "tr", msa, 0) && mb_builder_status(&x.b, &err) == COL_EINVAL &&
              strstr(err.msg, "factor 0"),
          "a transition factor of 0: %s", err.msg);
    fx_free(&x);

    fx_init(&x, &be, 0);
    msa = col_input(x.g, "msa", COL_F32, 3, (int64_t[]){3, 5, 16});
    TL_OK(!fold_outer_product_mean(&x.c, "", msa, 8, 4) && mb_builder_status(&x.b, &err) == COL_EINVAL &&
              strstr(err.msg, "needs a name"),
          "a module without a name: %s", err.msg);
    fx_free(&x);
}

int main(void)
{
    tl_cpu_backend(&be);
    test_modules();
    test_opm_no_rows();
    test_memory();
    test_errors();
    col_cpu_backend_free(&be);
    return tl_done();
}
