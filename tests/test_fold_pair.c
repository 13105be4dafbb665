/* test_fold_pair.c - the Evoformer's pair side (fold_pair.h) against DeepMind's
 * AlphaFold (JAX, float32): TriangleMultiplication outgoing and incoming,
 * TriangleAttention around the starting and the ending node, at the real
 * widths (c_z 128) on a few residues, with the references and perturbed
 * weights of tools/refgen/make_fold_pair_fixtures.py (tests/fixtures/fold_pair/).
 * Each module also runs chunked (uneven slices, more slices than one concat
 * takes) and must give the unchunked results; the arena of the plans shows
 * what chunking saves at 64..128 residues; and the errors a caller can meet
 * (a pair that is not [N, N, c_z], a missing or mis-shaped weight). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "fold_pair.h"
#include "ops.h"
#include "plan.h"
#include "testlib.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/fold_pair"
#endif

static col_backend be;

typedef enum { TRI_MUL_OUT, TRI_MUL_IN, TRI_ATT_START, TRI_ATT_END } kind;

static const struct {
    const char *file, *module;
} CASES[] = {
    [TRI_MUL_OUT] = {"tri_mul_out", "triangle_multiplication_outgoing"},
    [TRI_MUL_IN] = {"tri_mul_in", "triangle_multiplication_incoming"},
    [TRI_ATT_START] = {"tri_att_start", "triangle_attention_starting_node"},
    [TRI_ATT_END] = {"tri_att_end", "triangle_attention_ending_node"},
};

enum { C_Z = 128, C_I = 128, HEADS = 4 };

/* the module of kind k on pair, as the Evoformer builds it */
static col_node *build(fold_ctx *c, kind k, col_node *pair)
{
    switch (k) {
    case TRI_MUL_OUT:
    case TRI_MUL_IN:
        return fold_triangle_multiplication(c, CASES[k].module, pair, C_I, k == TRI_MUL_OUT);
    case TRI_ATT_START:
    case TRI_ATT_END: {
        const fold_attn_dims d = {C_Z, HEADS, C_Z / HEADS, C_Z / HEADS, C_Z, true};
        return fold_triangle_attention(c, CASES[k].module, pair, &d, k == TRI_ATT_START);
    }
    }
    return NULL;
}

/* a tensor of the fixture as f32 [n] (NULL and a note if absent or of another size) */
static float *read_tensor(const col_ckpt *r, const char *name, int64_t n)
{
    const col_ckpt_tensor *t = col_ckpt_find(r, name);
    int64_t m = 1;
    for (int d = 0; t && d < t->ndim; d++) m *= t->shape[d];
    if (!t || m != n) {
        TL_NOTE("the fixture has no '%s' of %lld values", name, (long long)n);
        return NULL;
    }
    float *f = malloc(sizeof(float) * (size_t)n);
    col_err err = {0};
    if (!f || col_ckpt_read_f32(t, t->ndim, t->shape, f, &err) != COL_OK) {
        TL_NOTE("%s", err.msg);
        free(f);
        return NULL;
    }
    return f;
}

static double max_abs(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN counts as the largest error */
    }
    return m;
}

/* Runs kind k with chunk rows per slice on the fixture's input; out gets N*N*C_Z values. */
static bool run_module(const col_ckpt *fx, kind k, int64_t n, int64_t chunk, const float *in, float *out,
                       int *nodes)
{
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    fold_ctx c = {&b, -1, chunk};
    col_node *pair = col_input(g, "pair", COL_F32, 3, (int64_t[]){n, n, C_Z});
    col_node *y = col_contiguous(g, build(&c, k, pair));
    col_err err = {0};
    col_plan *p = NULL;
    size_t bytes = sizeof(float) * (size_t)(n * n * C_Z);
    bool ok = mb_builder_status(&b, &err) == COL_OK && mb_bind_checkpoint(&b, fx, &err) == COL_OK &&
              col_plan_create_for(g, NULL, &y, 1, &p, &err) == COL_OK &&
              col_plan_upload(p, pair, in, bytes, &err) == COL_OK && col_plan_run(p, &be, &err) == COL_OK &&
              col_plan_download(p, y, out, bytes, &err) == COL_OK;
    if (!ok) TL_NOTE("%s chunk %lld: %s", CASES[k].file, (long long)chunk, err.msg);
    if (nodes) *nodes = p ? col_plan_length(p) : 0;
    col_plan_free(p);
    mb_builder_free(&b);
    col_graph_free(g);
    return ok;
}

/* The module against DeepMind's output, then chunked against itself unchunked. */
static void test_case(kind k)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", FIXTURES, CASES[k].file);
    col_ckpt *fx = NULL;
    col_err err = {0};
    if (col_ckpt_open(path, &fx, &err) != COL_OK) {
        TL_OK(false, "open %s: %s", path, err.msg);
        return;
    }
    const col_ckpt_tensor *t = col_ckpt_find(fx, "in/pair");
    int64_t n = t && t->ndim == 3 ? t->shape[0] : 0;
    int64_t numel = n * n * C_Z;
    float *in = numel ? read_tensor(fx, "in/pair", numel) : NULL;
    float *want = numel ? read_tensor(fx, "out/update", numel) : NULL;
    float *got = malloc(sizeof(float) * (size_t)(numel + 1)), *chunked = malloc(sizeof(float) * (size_t)(numel + 1));
    if (!in || !want || !got || !chunked) {
        TL_OK(false, "%s: the fixture's input and output [N, N, %d]", CASES[k].file, C_Z);
    } else {
        int nodes1 = 0;
        bool ran = run_module(fx, k, n, 0, in, got, &nodes1);
        double e = ran ? max_abs(got, want, numel) : INFINITY;
        TL_OK(ran && e <= 5e-4, "%s (N %lld): max-abs error %.3g vs AlphaFold (bound 5e-4)", CASES[k].module,
              (long long)n, e);
        /* uneven slices (the last one shorter), and one row each (more slices than one concat takes) */
        int64_t chunks[] = {(n + 1) / 3 + 1, 1};
        for (int i = 0; i < 2; i++) {
            int nodes = 0;
            bool rc = ran && run_module(fx, k, n, chunks[i], in, chunked, &nodes);
            double d = rc ? max_abs(chunked, got, numel) : INFINITY;
            TL_OK(rc && d <= 1e-5 && nodes > nodes1,
                  "%s chunked by %lld rows: max-abs %.3g from unchunked (bound 1e-5), %d ops vs %d", CASES[k].file,
                  (long long)chunks[i], d, nodes, nodes1);
        }
    }
    free(in);
    free(want);
    free(got);
    free(chunked);
    col_ckpt_close(fx);
}

/* Arena and scratch bytes of kind k's plan at n residues, chunked by chunk rows;
 * the weights bound to one zero buffer (their values do not matter here). */
static size_t arena_bytes(kind k, int64_t n, int64_t chunk)
{
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    fold_ctx c = {&b, -1, chunk};
    col_node *pair = col_input(g, "pair", COL_F32, 3, (int64_t[]){n, n, C_Z});
    col_node *y = build(&c, k, pair);
    col_err err = {0};
    size_t most = 0, bytes = 0;
    for (int i = 0; i < b.n; i++) {
        size_t s = sizeof(float);
        for (int d = 0; d < b.params[i].ndim; d++) s *= (size_t)b.params[i].shape[d];
        if (s > most) most = s;
    }
    float *zeros = calloc(most ? most : 1, 1);
    bool ok = zeros && mb_builder_status(&b, &err) == COL_OK;
    for (int i = 0; ok && i < b.n; i++) ok = col_bind(b.params[i].node, zeros, &err) == COL_OK;
    col_plan *p = NULL;
    if (ok && col_plan_create_for(g, NULL, &y, 1, &p, &err) == COL_OK)
        bytes = col_plan_arena_bytes(p) + col_plan_scratch_bytes(p);
    else
        TL_NOTE("plan %s at N %lld: %s", CASES[k].file, (long long)n, err.msg);
    col_plan_free(p);
    free(zeros);
    mb_builder_free(&b);
    col_graph_free(g);
    return bytes;
}

static void test_memory(kind k, double most_ratio)
{
    static const int64_t ns[] = {64, 96, 128};
    for (int i = 0; i < 3; i++) {
        int64_t n = ns[i];
        size_t whole = arena_bytes(k, n, 0), by16 = arena_bytes(k, n, 16), by4 = arena_bytes(k, n, 4);
        double r16 = whole ? (double)by16 / (double)whole : INFINITY, r4 = whole ? (double)by4 / (double)whole : INFINITY;
        TL_OK(whole > 0 && by16 > 0 && by4 > 0 && by4 <= by16 && r16 <= most_ratio,
              "%s N %lld: arena %.1f MiB unchunked, %.1f MiB by 16 rows (%.2fx), %.1f MiB by 4 (%.2fx)", CASES[k].file,
              (long long)n, (double)whole / 1048576.0, (double)by16 / 1048576.0, r16, (double)by4 / 1048576.0, r4);
    }
}

/* The errors a caller meets: a pair of the wrong shape, a missing weight, a weight of another shape. */
static void test_errors(void)
{
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    fold_ctx c = {&b, -1, 0};
    col_err err = {0};
    col_node *bad = col_input(g, "pair", COL_F32, 3, (int64_t[]){4, 5, C_Z});
    TL_OK(fold_triangle_multiplication(&c, "tri", bad, C_I, true) == NULL &&
              mb_builder_status(&b, &err) == COL_ESHAPE && strstr(err.msg, "tri: the pair activations") &&
              strstr(err.msg, "[4,5,128]"),
          "a pair that is not [N, N, c_z] is refused: %s", err.msg);
    mb_builder_free(&b);
    mb_builder_init(&b, g, false, COL_F32);
    c.b = &b;
    TL_OK(fold_triangle_multiplication(&c, "tri", col_input(g, "p2", COL_F32, 3, (int64_t[]){4, 4, C_Z}), 0, false) ==
                  NULL &&
              mb_builder_status(&b, &err) == COL_EINVAL && strstr(err.msg, "intermediate channels"),
          "no intermediate channels is refused: %s", err.msg);
    mb_builder_free(&b);
    mb_builder_init(&b, g, false, COL_F32);
    c.b = &b;
    const fold_attn_dims d = {64, HEADS, 16, 16, 64, true};
    TL_OK(fold_triangle_attention(&c, "att", col_input(g, "p3", COL_F32, 3, (int64_t[]){4, 4, C_Z}), &d, true) ==
                  NULL &&
              mb_builder_status(&b, &err) == COL_EINVAL && strstr(err.msg, "att: the attention's input and output") &&
              strstr(err.msg, "128"),
          "attention widths other than the pair's are refused: %s", err.msg);
    mb_builder_free(&b);
    col_graph_free(g);

    /* the incoming module's weights asked for as the outgoing one's: missing; c_z 64 against the file's 128 */
    char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", FIXTURES, CASES[TRI_MUL_IN].file);
    col_ckpt *fx = NULL;
    if (col_ckpt_open(path, &fx, &err) != COL_OK) {
        TL_OK(false, "open %s: %s", path, err.msg);
        return;
    }
    g = col_graph_new();
    mb_builder_init(&b, g, false, COL_F32);
    c.b = &b;
    fold_triangle_multiplication(&c, CASES[TRI_MUL_OUT].module, col_input(g, "p", COL_F32, 3, (int64_t[]){3, 3, C_Z}),
                                 C_I, true);
    TL_OK(mb_builder_status(&b, &err) == COL_OK && mb_bind_checkpoint(&b, fx, &err) == COL_EFORMAT &&
              strstr(err.msg, "triangle_multiplication_outgoing/layer_norm_input//scale"),
          "a missing weight is named: %s", err.msg);
    mb_builder_free(&b);
    col_graph_free(g);
    g = col_graph_new();
    mb_builder_init(&b, g, false, COL_F32);
    c.b = &b;
    fold_triangle_multiplication(&c, CASES[TRI_MUL_IN].module, col_input(g, "p", COL_F32, 3, (int64_t[]){3, 3, 64}),
                                 C_I, false);
    TL_OK(mb_builder_status(&b, &err) == COL_OK && mb_bind_checkpoint(&b, fx, &err) == COL_ESHAPE &&
              strstr(err.msg, "triangle_multiplication_incoming/layer_norm_input//scale"),
          "a weight of another width is named: %s", err.msg);
    mb_builder_free(&b);
    col_graph_free(g);
    col_ckpt_close(fx);
}

int main(void)
{
    tl_cpu_backend(&be);
    test_case(TRI_MUL_OUT);
    test_case(TRI_MUL_IN);
    test_case(TRI_ATT_START);
    test_case(TRI_ATT_END);
    test_memory(TRI_MUL_OUT, 1.0);
    test_memory(TRI_ATT_START, 0.65);
    test_memory(TRI_ATT_END, 0.65);
    test_errors();
    col_cpu_backend_free(&be);
    return tl_done();
}
