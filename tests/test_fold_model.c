/* test_fold_model - AlphaFold2 end to end against DeepMind's JAX code
 * (tools/refgen/make_fold_model_fixtures.py, tests/fixtures/fold_model/):
 * random parameters in DeepMind's npz layout at the real widths (1
 * Evoformer block, 1 extra-MSA block) and at narrow widths with 2 + 2
 * blocks (the depth and widths read from the arrays' shapes), fed the
 * features AlphaFold's own pipeline made, with recycling. Compared: the
 * trunk's representations, the structure module's activation, the final
 * atom positions, pLDDT, PAE and pTM; a chunked run against the unchunked
 * one; the errors of files that are not AlphaFold parameters.
 *
 * Built with FOLD_TEST_CUDA (tests/test_fold_model_emu: the CUDA backend's
 * kernels through the emulator; tests/test_fold_model_cuda on a GPU) the
 * narrow case runs on the CUDA backend with its weights moving through a
 * compute tier of a few MiB. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#ifdef FOLD_TEST_CUDA
#include "backend_cuda.h"
#endif
#include "checkpoint.h"
#include "fold_model.h"
#include "testlib.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/fold_model"
#endif

static const col_ckpt_tensor *get(const col_ckpt *c, const char *name)
{
    const col_ckpt_tensor *t = col_ckpt_find(c, name);
    TL_OK(t != NULL, "reference holds %s", name);
    return t;
}

/* a copy of a reference tensor as f32 (or i32 when ints) */
static void *copy(const col_ckpt *c, const char *name, bool ints)
{
    const col_ckpt_tensor *t = get(c, name);
    if (!t) return NULL;
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    void *p = malloc(n * 4 + 4);
    if (ints) {
        float *f = malloc(n * 4 + 4);
        col_err err = {0};
        col_ckpt_read_f32(t, t->ndim, t->shape, f, &err);
        for (size_t i = 0; i < n; i++) ((int32_t *)p)[i] = (int32_t)lrintf(f[i]);
        free(f);
    } else {
        col_err err = {0};
        col_ckpt_read_f32(t, t->ndim, t->shape, p, &err);
    }
    return p;
}

static int64_t rows_with_mask(const col_ckpt *c, const char *name)
{
    const col_ckpt_tensor *t = get(c, name);
    if (!t) return 0;
    float *m = copy(c, name, false);
    int64_t rows = 0;
    for (int64_t r = 0; r < t->shape[0]; r++) {
        bool any = false;
        for (int64_t j = 0; j < t->shape[1]; j++) any |= m[r * t->shape[1] + j] > 0;
        if (any) rows = r + 1;
    }
    free(m);
    return rows;
}

static double max_abs(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;   /* NaN counts */
    }
    return m;
}

/* max |a - b| relative to the larger of 1 and max |a| */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double span = 1;
    for (size_t i = 0; i < n; i++) span = fmax(span, fabs((double)a[i]));
    return max_abs(a, b, n) / span;
}

static void compare(const char *cs, const col_ckpt *ref, const char *name, const float *got, size_t n, double tol)
{
    float *want = copy(ref, name, false);
    if (!want) return;
    double e = max_abs(got, want, n);
    TL_OK(e <= tol, "%s: %s max-abs %.3g (bound %.0e)", cs, name, e, tol);
    free(want);
}

typedef struct {
    fold_inputs in;
    void *bufs[8];
} inputs;

static bool load_inputs(const col_ckpt *ref, inputs *x)
{
    memset(x, 0, sizeof *x);
    const col_ckpt_tensor *tf = get(ref, "feat/target_feat");
    if (!tf) return false;
    x->in.n_res = tf->shape[0];
    x->in.n_seq = rows_with_mask(ref, "feat/msa_mask");
    x->in.n_extra = rows_with_mask(ref, "feat/extra_msa_mask");
    x->in.aatype = x->bufs[0] = copy(ref, "feat/aatype", true);
    x->in.residue_index = x->bufs[1] = copy(ref, "feat/residue_index", true);
    x->in.target_feat = x->bufs[2] = copy(ref, "feat/target_feat", false);
    x->in.msa_feat = x->bufs[3] = copy(ref, "feat/msa_feat", false);   /* the real rows come first */
    x->in.extra_msa = x->bufs[4] = copy(ref, "feat/extra_msa", true);
    x->in.extra_has_deletion = x->bufs[5] = copy(ref, "feat/extra_has_deletion", false);
    x->in.extra_deletion_value = x->bufs[6] = copy(ref, "feat/extra_deletion_value", false);
    return x->in.aatype && x->in.msa_feat;
}

static void free_inputs(inputs *x)
{
    for (int i = 0; i < 8; i++) free(x->bufs[i]);
}

static int recycles_of(const char *path)
{
    /* the number of passes the reference ran is in the file name's case: see the script */
    if (strstr(path, "real_msa")) return 1;
    if (strstr(path, "narrow_msa")) return 2;
    return 0;
}

static void run_case(const col_backend *be, const char *params, const char *cs, double rep_tol)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s_ref.safetensors", FIXTURES, cs);
    col_ckpt *ref = NULL;
    col_err err = {0};
    if (col_ckpt_open(path, &ref, &err) != COL_OK) {
        TL_OK(false, "%s: reference readable: %s", cs, err.msg);
        return;
    }
    inputs x;
    fold_model *m = NULL;
    mb_store_config sc = {0};
#ifdef FOLD_TEST_CUDA
    sc.compute_budget = (size_t)4 << 20;   /* the narrow model's 1.8 MB of weights move through 4 MiB */
#endif
    snprintf(path, sizeof path, "%s/%s", FIXTURES, params);
    col_status st = fold_model_open(path, be, &sc, &m, &err);
    TL_OK(st == COL_OK, "%s: open %s: %s", cs, params, st == COL_OK ? "" : err.msg);
    if (st != COL_OK || !load_inputs(ref, &x)) {
        col_ckpt_close(ref);
        fold_model_free(m);
        return;
    }
    const fold_config *cfg = fold_model_config(m);
    fold_run_config rc = {.recycles = recycles_of(cs), .chunk = 0};
    fold_result r;
    st = fold_model_predict(m, &x.in, &rc, &r, &err);
    TL_OK(st == COL_OK, "%s: predict (%lld residues, %lld rows, %lld extra rows): %s", cs, (long long)x.in.n_res,
          (long long)x.in.n_seq, (long long)x.in.n_extra, st == COL_OK ? "" : err.msg);
    if (st == COL_OK) {
        const size_t N = (size_t)x.in.n_res;
        compare(cs, ref, "out/single", r.single, N * cfg->c_s, rep_tol);
        compare(cs, ref, "out/pair", r.pair, N * N * cfg->c_z, rep_tol);
        compare(cs, ref, "out/msa_first_row", r.msa_first_row, N * cfg->c_m, rep_tol);
        compare(cs, ref, "out/structure_module", r.sm_single, N * cfg->c_s, rep_tol);
        float *mask = copy(ref, "out/final_atom_mask", false);
        float *pos = copy(ref, "out/final_atom_positions", false);
        if (mask && pos) {
            size_t bad_mask = 0;
            double e = 0;
            for (size_t i = 0; i < N * 37; i++) {
                bad_mask += mask[i] != r.atom37_mask[i];
                if (mask[i] > 0) {
                    double d = max_abs(pos + 3 * i, r.atom37 + 3 * i, 3);
                    if (!(d <= e)) e = d;
                }
            }
            TL_OK(bad_mask == 0, "%s: atom37 mask equal (%zu differ)", cs, bad_mask);
            TL_OK(e <= 1e-3, "%s: final atom positions max-abs %.3g A (bound 1e-3)", cs, e);
        }
        free(mask);
        free(pos);
        compare(cs, ref, "out/plddt", r.plddt, N, 5e-3);
        if (cfg->ptm) {
            compare(cs, ref, "out/predicted_aligned_error", r.pae, N * N, 5e-3);
            float ptm = (float)r.ptm;
            compare(cs, ref, "out/ptm", &ptm, 1, 1e-4);
        }
        /* chunked: the same result within 1e-5 */
        fold_run_config rc2 = rc;
        rc2.chunk = 3;
        fold_result r2;
        st = fold_model_predict(m, &x.in, &rc2, &r2, &err);
        TL_OK(st == COL_OK, "%s: chunked predict: %s", cs, st == COL_OK ? "" : err.msg);
        if (st == COL_OK) {
            /* the same result within 1e-5 of each output's scale (the chunks' GEMMs add in other orders) */
            double e1 = rel_diff(r.pair, r2.pair, N * N * cfg->c_z), e2 = rel_diff(r.atom37, r2.atom37, N * 37 * 3);
            double e3 = rel_diff(r.single, r2.single, N * cfg->c_s), e4 = rel_diff(r.plddt, r2.plddt, N);
            TL_OK(e1 <= 1e-5 && e2 <= 1e-5 && e3 <= 1e-5 && e4 <= 1e-5,
                  "%s: chunks of 3 rows equal the unchunked run within 1e-5 relative (pair %.2g, single %.2g, atoms "
                  "%.2g, pLDDT %.2g)", cs, e1, e3, e2, e4);
            TL_OK(r2.arena_bytes < r.arena_bytes, "%s: chunking shrinks the activation arena (%zu -> %zu bytes)",
                  cs, r.arena_bytes, r2.arena_bytes);
            /* sizing without running: the same arena; the automatic chunk fits a budget between the two */
            size_t m0 = 0, m3 = 0;
            col_status s0 = fold_model_arena_bytes(m, x.in.n_res, x.in.n_seq, x.in.n_extra, 0, &m0, &err);
            col_status s3 = fold_model_arena_bytes(m, x.in.n_res, x.in.n_seq, x.in.n_extra, 3, &m3, &err);
            TL_OK(s0 == COL_OK && s3 == COL_OK && m0 == r.arena_bytes && m3 == r2.arena_bytes,
                  "%s: the arena sized without a plan equals the plans' (%zu, %zu)", cs, m0, m3);
            size_t budget = (r.arena_bytes + r2.arena_bytes) / 2, got = 0;
            int64_t ck = -1;
            st = fold_model_auto_chunk(m, x.in.n_res, x.in.n_seq, x.in.n_extra, budget, &ck, &err);
            if (st == COL_OK) st = fold_model_arena_bytes(m, x.in.n_res, x.in.n_seq, x.in.n_extra, ck, &got, &err);
            TL_OK(st == COL_OK && ck > 0 && got <= budget, "%s: the automatic chunk (%lld rows) fits %zu bytes (%zu)",
                  cs, (long long)ck, budget, got);
            st = fold_model_auto_chunk(m, x.in.n_res, x.in.n_seq, x.in.n_extra, 1024, &ck, &err);
            TL_OK(st == COL_ENOMEM && strstr(err.msg, "even in chunks of one row"), "%s: a budget nothing fits: %s",
                  cs, err.msg);
            fold_result_free(&r2);
        }
        fold_result_free(&r);
    }
    free_inputs(&x);
    fold_model_free(m);
    col_ckpt_close(ref);
}

static void bad_files(const col_backend *be)
{
    col_err err = {0};
    fold_model *m = NULL;
    mb_store_config sc = {0};
    col_status st = fold_model_open(FIXTURES "/real_msa_ref.safetensors", be, &sc, &m, &err);
    TL_OK(st == COL_EFORMAT && strstr(err.msg, "has no array alphafold/alphafold_iteration/"),
          "a file without AlphaFold's arrays: %s", err.msg);
    fold_model_free(m);
    st = fold_model_open(FIXTURES "/no-such.npz", be, &sc, &m, &err);
    TL_OK(st == COL_EIO, "a missing parameter file: %s", err.msg);
    fold_model_free(m);
}

int main(void)
{
    col_backend be;
#ifdef FOLD_TEST_CUDA
    col_err berr = {0};
    if (col_cuda_backend_init(&be, 0, &berr) != COL_OK) {
        printf("1..0 # SKIP no CUDA device: %s\n", berr.msg);
        return 0;
    }
    col_cuda_backend_set_tf32(&be, false);   /* f32 GEMMs, as the reference */
    run_case(&be, "narrow.npz", "narrow_msa", 5e-4);
    bad_files(&be);
    col_cuda_backend_free(&be);
#else
    tl_cpu_backend(&be);
    run_case(&be, "real.npz", "real_msa", 5e-4);
    run_case(&be, "real.npz", "real_single", 5e-4);
    run_case(&be, "narrow.npz", "narrow_msa", 5e-4);
    bad_files(&be);
    col_cpu_backend_free(&be);
#endif
    return tl_done();
}
