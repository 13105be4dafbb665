/* test_fold_heads.c - AlphaFold2's pLDDT, aligned-error and distogram heads (fold_heads.h) against
 * DeepMind's PredictedLDDTHead, PredictedAlignedErrorHead and DistogramHead run under hk.transform at
 * the real widths (c_s 384, c_z 128) with perturbed weights and random representations, and the
 * confidence metrics (fold_confidence.h) against alphafold.common.confidence on the heads' logits;
 * then the errors the builders and the metrics give for bad input.
 * Fixtures: tools/refgen/make_fold_out_fixtures.py (tests/fixtures/fold_out/heads.safetensors). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "fold_confidence.h"
#include "fold_heads.h"
#include "plan.h"
#include "testlib.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/fold_out"
#endif

static col_backend be;
static const col_ckpt *ref_ck;

static int64_t numel(const col_ckpt_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* a reference tensor as f32 (NULL and a failed check if absent); *n its element count */
static float *ref_f32(const char *name, int64_t *n)
{
    const col_ckpt_tensor *t = col_ckpt_find(ref_ck, name);
    float *f = t ? malloc(sizeof(float) * (size_t)(numel(t) + 1)) : NULL;
    col_err err = {0};
    if (!t || !f || col_ckpt_read_f32(t, t->ndim, t->shape, f, &err) != COL_OK) {
        TL_OK(false, "reference '%s' readable %s", name, err.msg);
        free(f);
        return NULL;
    }
    if (n) *n = numel(t);
    return f;
}

/* a float64 reference (confidence.py's values) */
static double *ref_f64(const char *name, int64_t *n)
{
    const col_ckpt_tensor *t = col_ckpt_find(ref_ck, name);
    if (!t || t->dtype != COL_ST_F64) {
        TL_OK(false, "reference '%s' present as F64", name);
        return NULL;
    }
    double *d = malloc(t->nbytes + sizeof(double));
    memcpy(d, t->data, t->nbytes);
    if (n) *n = numel(t);
    return d;
}

static double max_abs(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

enum { C_S = 384, C_Z = 128 };

/* the three heads on the graph, bound to the fixture's weights, against the JAX logits */
static void heads_parity(int64_t N)
{
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    fold_ctx c = {&b, -1, 0};
    col_node *single = col_input(g, "single", COL_F32, 2, (int64_t[]){N, C_S});
    col_node *pair = col_input(g, "pair", COL_F32, 3, (int64_t[]){N, N, C_Z});
    col_node *lddt = fold_plddt_head(&c, single, C_S, FOLD_PLDDT_CHANNELS, FOLD_PLDDT_BINS);
    col_node *pae = fold_pae_head(&c, pair, C_Z, FOLD_PAE_BINS);
    col_node *dist = fold_distogram_head(&c, pair, C_Z, FOLD_DISTOGRAM_BINS);
    float *in_s = ref_f32("in/single", NULL), *in_p = ref_f32("in/pair", NULL);
    float *w_l = ref_f32("out/plddt_logits", NULL), *w_p = ref_f32("out/pae_logits", NULL),
          *w_d = ref_f32("out/distogram_logits", NULL);
    col_plan *p = NULL;
    col_err err = {0};
    bool ok = in_s && in_p && w_l && w_p && w_d && mb_builder_status(&b, &err) == COL_OK;
    if (ok) {
        col_mark_output(lddt);
        col_mark_output(pae);
        col_mark_output(dist);
    }
    ok = ok && mb_bind_checkpoint(&b, ref_ck, &err) == COL_OK && col_bind(single, in_s, &err) == COL_OK &&
         col_bind(pair, in_p, &err) == COL_OK && col_plan_create(g, &p, &err) == COL_OK &&
         col_plan_run(p, &be, &err) == COL_OK;
    TL_OK(ok, "the heads build, bind to DeepMind's names and run %s", ok ? "" : err.msg);
    if (ok) {
        int weights = 0;
        for (int i = 0; i < col_ckpt_count(ref_ck); i++) weights += strstr(col_ckpt_get(ref_ck, i)->name, "//") != NULL;
        TL_OK(b.n == weights && b.n == 12, "the heads use every weight of the fixture (%d of %d)", b.n, weights);
        TL_OK(mb_find(&b, "predicted_lddt_head/act_0//weights") >= 0 &&
                  mb_find(&b, "predicted_aligned_error_head/logits//bias") >= 0 &&
                  mb_find(&b, "distogram_head/half_logits//weights") >= 0,
              "parameter names are Haiku's (predicted_lddt_head/act_0//weights, ...)");
        const float *gl = col_plan_data(p, lddt), *gp = col_plan_data(p, pae), *gd = col_plan_data(p, dist);
        double el = max_abs(gl, w_l, N * FOLD_PLDDT_BINS), ep = max_abs(gp, w_p, N * N * FOLD_PAE_BINS),
               ed = max_abs(gd, w_d, N * N * FOLD_DISTOGRAM_BINS);
        TL_OK(el <= 5e-4, "PredictedLDDTHead logits [%lld, 50]: max |err| %.2e (<= 5e-4)", (long long)N, el);
        TL_OK(ep <= 5e-4, "PredictedAlignedErrorHead logits [%lld, %lld, 64]: max |err| %.2e (<= 5e-4)", (long long)N,
              (long long)N, ep);
        TL_OK(ed <= 5e-4, "DistogramHead logits [%lld, %lld, 64]: max |err| %.2e (<= 5e-4)", (long long)N,
              (long long)N, ed);
        bool sym = true;
        for (int64_t i = 0; i < N && sym; i++)
            for (int64_t j = 0; j < N && sym; j++)
                for (int k = 0; k < FOLD_DISTOGRAM_BINS; k++)
                    sym = sym && gd[(i * N + j) * FOLD_DISTOGRAM_BINS + k] == gd[(j * N + i) * FOLD_DISTOGRAM_BINS + k];
        TL_OK(sym, "the distogram logits are symmetric in the two residues, exactly");
        /* end to end: pLDDT of our logits against confidence.py on JAX's */
        double *want = ref_f64("out/plddt", NULL);
        float *pl = malloc(sizeof(float) * (size_t)N);
        if (want && fold_plddt(gl, N, FOLD_PLDDT_BINS, pl, &err) == COL_OK) {
            double m = 0;
            for (int64_t i = 0; i < N; i++) m = fmax(m, fabs(pl[i] - want[i]));
            TL_OK(m <= 1e-3, "pLDDT from the graph's logits vs confidence.py on JAX's: max |err| %.2e (<= 1e-3)", m);
        } else {
            TL_OK(false, "pLDDT from the graph's logits: %s", err.msg);
        }
        free(pl);
        free(want);
    }
    col_plan_free(p);
    mb_builder_free(&b);
    col_graph_free(g);
    free(in_s), free(in_p), free(w_l), free(w_p), free(w_d);
}

static void breaks(void)
{
    double b[63];
    int64_t n1 = 0, n2 = 0;
    float *pb = ref_f32("out/pae_breaks", &n1), *db = ref_f32("out/distogram_edges", &n2);
    if (!pb || !db || n1 != 63 || n2 != 63) {
        TL_OK(false, "breaks in the reference (63 each)");
    } else {
        double m1 = 0, m2 = 0;
        fold_breaks(0.0, FOLD_PAE_MAX_ERROR_BIN, FOLD_PAE_BINS, b);
        for (int k = 0; k < 63; k++) m1 = fmax(m1, fabs(b[k] - pb[k]));
        fold_breaks(FOLD_DISTOGRAM_FIRST_BREAK, FOLD_DISTOGRAM_LAST_BREAK, FOLD_DISTOGRAM_BINS, b);
        for (int k = 0; k < 63; k++) m2 = fmax(m2, fabs(b[k] - db[k]));
        TL_OK(m1 == 0 && m2 == 0, "bin edges: the aligned-error head's linspace(0, 31, 63) and the distogram's "
              "linspace(2.3125, 21.6875, 63) equal JAX's (max |diff| %.1e, %.1e)", m1, m2);
    }
    free(pb);
    free(db);
}

/* the metrics of confidence.py, from JAX's logits */
static void confidence(int64_t N)
{
    col_err err = {0};
    float *ll = ref_f32("out/plddt_logits", NULL), *pl = ref_f32("out/pae_logits", NULL);
    float *w = ref_f32("in/ptm_weights", NULL), *l24 = ref_f32("in/pae_logits24", NULL);
    double *want_plddt = ref_f64("out/plddt", NULL), *want_pae = ref_f64("out/pae", NULL);
    double *want_max = ref_f64("out/max_pae", NULL), *want_ptm = ref_f64("out/ptm", NULL);
    double *want_ptm_m = ref_f64("out/ptm_masked", NULL), *want_ptm24 = ref_f64("out/ptm24", NULL);
    if (!ll || !pl || !w || !l24 || !want_plddt || !want_pae || !want_max || !want_ptm || !want_ptm_m || !want_ptm24)
        goto out;
    float plddt[64], pae[64 * 64];
    double mx = 0, m = 0, ptm = 0;
    col_status st = fold_plddt(ll, N, FOLD_PLDDT_BINS, plddt, &err);
    for (int64_t i = 0; st == COL_OK && i < N; i++) m = fmax(m, fabs(plddt[i] - want_plddt[i]));
    TL_OK(st == COL_OK && m <= 1e-4, "pLDDT (compute_plddt) of %lld residues: max |err| %.2e (<= 1e-4; values %.2f ..) %s",
          (long long)N, m, plddt[0], st == COL_OK ? "" : err.msg);
    m = 0;
    st = fold_pae(pl, N, FOLD_PAE_BINS, FOLD_PAE_MAX_ERROR_BIN, pae, &mx, &err);
    for (int64_t i = 0; st == COL_OK && i < N * N; i++) m = fmax(m, fabs(pae[i] - want_pae[i]));
    TL_OK(st == COL_OK && m <= 1e-5 && mx == want_max[0],
          "predicted aligned error [%lld, %lld]: max |err| %.2e (<= 1e-5); max_predicted_aligned_error %g (confidence.py %g)",
          (long long)N, (long long)N, m, mx, want_max[0]);
    st = fold_ptm(pl, N, FOLD_PAE_BINS, FOLD_PAE_MAX_ERROR_BIN, NULL, &ptm, &err);
    TL_OK(st == COL_OK && fabs(ptm - want_ptm[0]) <= 1e-6 * fmax(1, fabs(want_ptm[0])) && ptm > 0,
          "pTM, weights all ones (%lld residues, d0 of 19): %.9f vs %.9f", (long long)N, ptm, want_ptm[0]);
    st = fold_ptm(pl, N, FOLD_PAE_BINS, FOLD_PAE_MAX_ERROR_BIN, w, &ptm, &err);
    TL_OK(st == COL_OK && fabs(ptm - want_ptm_m[0]) <= 1e-6 && fabs(ptm - want_ptm[0]) > 1e-6,
          "pTM with two residues weighted 0: %.9f vs %.9f", ptm, want_ptm_m[0]);
    st = fold_ptm(l24, 24, FOLD_PAE_BINS, FOLD_PAE_MAX_ERROR_BIN, NULL, &ptm, &err);
    TL_OK(st == COL_OK && fabs(ptm - want_ptm24[0]) <= 1e-6, "pTM of 24 residues (d0 from 24): %.9f vs %.9f", ptm,
          want_ptm24[0]);

    /* what the metrics refuse */
    ll[3] = NAN;
    st = fold_plddt(ll, N, FOLD_PLDDT_BINS, plddt, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "residue 1"), "pLDDT: a NaN logit is refused: %s", err.msg);
    st = fold_pae(pl, N, 2, FOLD_PAE_MAX_ERROR_BIN, pae, &mx, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "bins"), "PAE: 2 bins are refused: %s", err.msg);
    w[0] = 1.5f;
    st = fold_ptm(pl, N, FOLD_PAE_BINS, FOLD_PAE_MAX_ERROR_BIN, w, &ptm, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "residue 1"), "pTM: a weight of 1.5 is refused: %s", err.msg);
    st = fold_ptm(pl, 0, FOLD_PAE_BINS, FOLD_PAE_MAX_ERROR_BIN, NULL, &ptm, &err);
    TL_OK(st == COL_EINVAL, "pTM: no residues is refused: %s", err.msg);
out:
    free(ll), free(pl), free(w), free(l24), free(want_plddt), free(want_pae);
    free(want_max), free(want_ptm), free(want_ptm_m), free(want_ptm24);
}

/* the builders' checks */
static void builder_errors(void)
{
    struct {
        int which;          /* 0 lddt, 1 pae, 2 distogram */
        int ndim;
        int64_t shape[3];
        const char *want;
    } cases[] = {
        {0, 2, {5, 256}, "predicted_lddt_head: the single representation is not [N, 384]"},
        {1, 3, {5, 4, 128}, "predicted_aligned_error_head: the pair representation is not [N, N, 128]"},
        {2, 2, {5, 128}, "distogram_head: the pair representation is not [N, N, 128]"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        col_graph *g = col_graph_new();
        mb_builder b;
        mb_builder_init(&b, g, false, COL_F32);
        fold_ctx c = {&b, -1, 0};
        col_node *x = col_input(g, "x", COL_F32, cases[k].ndim, cases[k].shape);
        col_node *y = cases[k].which == 0   ? fold_plddt_head(&c, x, C_S, 128, 50)
                      : cases[k].which == 1 ? fold_pae_head(&c, x, C_Z, 64)
                                            : fold_distogram_head(&c, x, C_Z, 64);
        col_err err = {0};
        col_status st = mb_builder_status(&b, &err);
        TL_OK(!y && st == COL_ESHAPE && strstr(err.msg, cases[k].want), "bad input refused: %s", err.msg);
        mb_builder_free(&b);
        col_graph_free(g);
    }
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    fold_ctx c = {&b, -1, 0};
    col_node *x = col_input(g, "x", COL_F32, 3, (int64_t[]){4, 4, C_Z});
    col_err err = {0};
    TL_OK(!fold_pae_head(&c, x, C_Z, 0) && mb_builder_status(&b, &err) == COL_EINVAL && strstr(err.msg, "bins"),
          "0 bins refused: %s", err.msg);
    mb_builder_free(&b);
    col_graph_free(g);
}

int main(void)
{
    tl_cpu_backend(&be);
    col_ckpt *ck = NULL;
    col_err err = {0};
    if (col_ckpt_open(FIXTURES "/heads.safetensors", &ck, &err) != COL_OK) {
        printf("Bail out! %s\n", err.msg);
        return 1;
    }
    ref_ck = ck;
    const col_ckpt_tensor *t = col_ckpt_find(ck, "in/single");
    int64_t N = t && t->ndim == 2 ? t->shape[0] : 0;
    if (N < 1 || N > 64) {
        printf("Bail out! heads.safetensors: in/single is not [N <= 64, 384]\n");
        return 1;
    }
    heads_parity(N);
    breaks();
    confidence(N);
    builder_errors();
    col_ckpt_close(ck);
    col_cpu_backend_free(&be);
    return tl_done();
}
