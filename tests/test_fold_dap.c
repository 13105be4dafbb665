/* test_fold_dap.c - AlphaFold2's trunk with dynamic axial parallelism (models/fold/fold_dap.h) under mpirun
 * with 1, 2 and 4 processes (tests/test_fold_dap.sh).
 *
 * Every rank builds the trunk (embedders, extra-MSA stack, Evoformer; one recycling pass) with DAP over all
 * the ranks, runs it and compares its outputs (single, pair, msa_first_row, whole on every rank) with
 *   - the one-process trunk (fold_ctx.dap NULL), which each rank also builds and runs: |difference| <= 1e-5
 *     + 1e-6 |value| (1e-5 where the values are small; float32's rounding of the single-sequence case's pair,
 *     whose values reach 284, is 3.05e-5);
 *   - AlphaFold's first pass (the 'first/...' arrays of tests/fixtures/fold_model/NAME_ref.safetensors, from
 *     tools/refgen/make_fold_model_fixtures.py): max-abs <= 5e-4.
 * The fixtures: narrow.npz (2+2 blocks at narrow widths) and real.npz (1+1 at AlphaFold's widths), with an
 * MSA (N 14, S 4, S_e 3) and a single sequence (S 1, S_e 0: padding-only ranks, no extra MSA); N 14 and
 * S_e 3 do not divide by 4 (or 2). The narrow case also runs chunked. Then random features (N 64, S 32,
 * S_e 37) at the real widths: DAP against one process, and each rank's plan arena for 1, 2 and 4 processes
 * (plans of the same trunk over groups of that many ranks split from the world) must shrink with more.
 *
 * The parameter files are DeepMind's .npz format; when col_ckpt_open cannot read them (a build without the
 * npz reader) the fixture checks are skipped with a TAP SKIP line. FOLD_DAP_PARAMS=DIR takes DIR/narrow.* and
 * DIR/real.* (e.g. .safetensors with the same array names) instead. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "checkpoint.h"
#include "comm.h"
#include "fold_config.h"
#include "fold_dap.h"
#include "fold_source.h"
#include "fold_trunk.h"
#include "graph.h"
#include "mb_store.h"
#include "ops.h"
#include "plan.h"
#include "testlib.h"
#include "mpi_testutil.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/fold_model"
#endif

static col_backend be;
static col_comm *world;
static int rank, size;

#define check(ok, detail, ...) tl_mpi_check((ok), (detail), __VA_ARGS__)

/* a check that cannot be made here: one TAP skip line (rank 0) */
static void skip(const char *what, const char *why)
{
    tl_count++;
    if (rank == 0) printf("ok %d - %s # SKIP %s\n", tl_count, what, why);
    fflush(stdout);
}

/* ---- the trunk's inputs ---- */

typedef struct {
    int64_t N, S, Se;
    float *target_feat, *msa_feat, *has_del, *del_val, *prev_row, *prev_pair;
    int32_t *extra_msa, *relpos, *prev_bin;
} feats;

static void feats_free(feats *f)
{
    free(f->target_feat), free(f->msa_feat), free(f->has_del), free(f->del_val), free(f->prev_row);
    free(f->prev_pair), free(f->extra_msa), free(f->relpos), free(f->prev_bin);
    memset(f, 0, sizeof *f);
}

/* array NAME of ck as f32 (malloc'ed; NULL when missing or of another size than n) */
static float *read_f32(const col_ckpt *ck, const char *name, int64_t n)
{
    const col_ckpt_tensor *t = col_ckpt_find(ck, name);
    if (!t) return NULL;
    int64_t k = 1;
    for (int i = 0; i < t->ndim; i++) k *= t->shape[i];
    if (n >= 0 && k != n) return NULL;
    float *p = malloc(sizeof(float) * (size_t)(k + 1));
    col_err e = {0};
    if (p && col_ckpt_read_f32(t, t->ndim, t->shape, p, &e) != COL_OK) {
        free(p);
        return NULL;
    }
    return p;
}

/* the rows of a [rows, N] mask that hold any nonzero, counted up to the last such row */
static int64_t used_rows(const col_ckpt *ck, const char *name, int64_t N)
{
    const col_ckpt_tensor *t = col_ckpt_find(ck, name);
    if (!t || t->ndim != 2 || t->shape[1] != N) return -1;
    float *m = read_f32(ck, name, -1);
    if (!m) return -1;
    int64_t used = 0;
    for (int64_t r = 0; r < t->shape[0]; r++)
        for (int64_t j = 0; j < N; j++)
            if (m[r * N + j] != 0.0f) used = r + 1;
    free(m);
    return used;
}

/* AlphaFold's features of a reference file (the first pass: no recycled inputs) */
static bool feats_from_ref(const col_ckpt *ref, const fold_config *cfg, feats *f, char *why, size_t wn)
{
    memset(f, 0, sizeof *f);
    const col_ckpt_tensor *tf = col_ckpt_find(ref, "feat/target_feat");
    if (!tf || tf->ndim != 2 || tf->shape[1] != cfg->target_feat) {
        snprintf(why, wn, "no feat/target_feat of width %lld", (long long)cfg->target_feat);
        return false;
    }
    int64_t N = f->N = tf->shape[0];
    f->S = used_rows(ref, "feat/msa_mask", N);
    f->Se = used_rows(ref, "feat/extra_msa_mask", N);
    if (f->S < 1 || f->Se < 0) {
        snprintf(why, wn, "feat/msa_mask or feat/extra_msa_mask unreadable");
        return false;
    }
    const int64_t S = f->S, Se = f->Se;
    f->target_feat = read_f32(ref, "feat/target_feat", N * cfg->target_feat);
    float *msa = read_f32(ref, "feat/msa_feat", -1), *ri = read_f32(ref, "feat/residue_index", N);
    f->msa_feat = msa ? malloc(sizeof(float) * (size_t)(S * N * cfg->msa_feat)) : NULL;
    if (f->msa_feat) memcpy(f->msa_feat, msa, sizeof(float) * (size_t)(S * N * cfg->msa_feat)); /* the used rows */
    free(msa);
    f->relpos = malloc(sizeof(int32_t) * (size_t)(N * N));
    f->prev_bin = malloc(sizeof(int32_t) * (size_t)(N * N));
    f->prev_row = calloc((size_t)(N * cfg->c_m), sizeof(float));
    f->prev_pair = calloc((size_t)(N * N * cfg->c_z), sizeof(float));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)N);
    bool ok = f->target_feat && f->msa_feat && ri && f->relpos && f->prev_bin && f->prev_row && f->prev_pair && ids;
    for (int64_t i = 0; ok && i < N; i++) ids[i] = (int32_t)ri[i];
    if (ok) fold_relpos_bins(ids, N, cfg->max_relative, f->relpos);
    for (int64_t i = 0; ok && i < N * N; i++) f->prev_bin[i] = 15; /* no recycled positions */
    free(ids), free(ri);
    if (ok && Se > 0) {
        float *e = read_f32(ref, "feat/extra_msa", -1), *hd = read_f32(ref, "feat/extra_has_deletion", -1),
              *dv = read_f32(ref, "feat/extra_deletion_value", -1);
        f->extra_msa = malloc(sizeof(int32_t) * (size_t)(Se * N));
        f->has_del = malloc(sizeof(float) * (size_t)(Se * N));
        f->del_val = malloc(sizeof(float) * (size_t)(Se * N));
        ok = e && hd && dv && f->extra_msa && f->has_del && f->del_val;
        for (int64_t i = 0; ok && i < Se * N; i++) {
            f->extra_msa[i] = (int32_t)e[i];
            f->has_del[i] = hd[i];
            f->del_val[i] = dv[i];
        }
        free(e), free(hd), free(dv);
    }
    if (!ok) {
        snprintf(why, wn, "a feature of the reference file is missing or of another size");
        feats_free(f);
    }
    return ok;
}

/* a deterministic generator (the same numbers on every rank) */
static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}
static float rng_unit(uint64_t *s) { return (float)(rng_next(s) % 20001) / 10000.0f - 1.0f; }

/* random features of the given sizes, the recycled inputs included */
static bool feats_random(const fold_config *cfg, int64_t N, int64_t S, int64_t Se, uint64_t seed, feats *f)
{
    memset(f, 0, sizeof *f);
    f->N = N, f->S = S, f->Se = Se;
    f->target_feat = calloc((size_t)(N * cfg->target_feat), sizeof(float));
    f->msa_feat = calloc((size_t)(S * N * cfg->msa_feat), sizeof(float));
    f->prev_row = malloc(sizeof(float) * (size_t)(N * cfg->c_m));
    f->prev_pair = malloc(sizeof(float) * (size_t)(N * N * cfg->c_z));
    f->relpos = malloc(sizeof(int32_t) * (size_t)(N * N));
    f->prev_bin = malloc(sizeof(int32_t) * (size_t)(N * N));
    f->extra_msa = malloc(sizeof(int32_t) * (size_t)(Se * N + 1));
    f->has_del = malloc(sizeof(float) * (size_t)(Se * N + 1));
    f->del_val = malloc(sizeof(float) * (size_t)(Se * N + 1));
    int32_t *ri = malloc(sizeof(int32_t) * (size_t)N);
    if (!f->target_feat || !f->msa_feat || !f->prev_row || !f->prev_pair || !f->relpos || !f->prev_bin ||
        !f->extra_msa || !f->has_del || !f->del_val || !ri) {
        free(ri);
        feats_free(f);
        return false;
    }
    for (int64_t i = 0; i < N; i++) {
        f->target_feat[i * cfg->target_feat + (int64_t)(rng_next(&seed) % 21)] = 1.0f;
        ri[i] = (int32_t)(i + (i > N / 2 ? 40 : 0)); /* a chain break */
    }
    for (int64_t i = 0; i < S * N * cfg->msa_feat; i++) f->msa_feat[i] = rng_next(&seed) % 4 == 0 ? 1.0f : 0.0f;
    for (int64_t i = 0; i < N * cfg->c_m; i++) f->prev_row[i] = rng_unit(&seed);
    for (int64_t i = 0; i < N * N * cfg->c_z; i++) f->prev_pair[i] = rng_unit(&seed);
    for (int64_t i = 0; i < N * N; i++) f->prev_bin[i] = (int32_t)(rng_next(&seed) % 16);
    for (int64_t i = 0; i < Se * N; i++) {
        f->extra_msa[i] = (int32_t)(rng_next(&seed) % 23);
        f->has_del[i] = rng_next(&seed) % 5 == 0 ? 1.0f : 0.0f;
        f->del_val[i] = f->has_del[i] * 0.5f * (rng_unit(&seed) + 1.0f);
    }
    fold_relpos_bins(ri, N, cfg->max_relative, f->relpos);
    free(ri);
    return true;
}

/* ---- one trunk: built, planned and (when run) run ---- */

typedef struct {
    float *out[3]; /* single, pair, msa_first_row */
    int64_t n[3];
    size_t arena;
} result;

static void result_free(result *r)
{
    for (int k = 0; k < 3; k++) free(r->out[k]);
    memset(r, 0, sizeof *r);
}

static col_status upload(mb_exec *x, col_node *n, const void *p, size_t bytes, col_status st, col_err *err)
{
    return st != COL_OK || !n ? st : mb_exec_upload(x, n, p, bytes, err);
}

/* The trunk over dap (NULL: one process) on f with params ck; run or only planned (r->arena). */
static col_status trunk(const col_ckpt *ck, const fold_config *cfg, const feats *f, const fold_dap *dap,
                        int64_t chunk, bool run, result *r, col_err *err)
{
    memset(r, 0, sizeof *r);
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    mb_push(&b, "%s", FOLD_ROOT);
    fold_ctx c = {&b, -1, chunk, dap};
    fold_sizes sz = {f->N, f->S, f->Se};
    fold_trunk_inputs in;
    fold_trunk_outputs out;
    fold_trunk_build(&c, cfg, &sz, &in, &out);
    col_status st = mb_builder_status(&b, err);
    mb_store *store = NULL;
    mb_exec *x = NULL;
    mb_store_config sc = {0};
    fold_source_ctx sctx;
    mb_source src;
    fold_source_init(&src, &sctx, ck);
    col_node *outs[3] = {out.single, out.pair, out.msa_first_row};
    if (st == COL_OK) st = mb_store_create(&sc, &be, &store, err);
    if (st == COL_OK) st = mb_store_bind(store, &b, &src, err);
    if (st == COL_OK) st = mb_exec_create(store, g, outs, 3, &x, err);
    if (st == COL_OK) r->arena = mb_exec_arena_bytes(x);
    if (st == COL_OK && run) {
        const int64_t N = f->N, S = f->S, Se = f->Se;
        const size_t fs = sizeof(float), is = sizeof(int32_t);
        st = upload(x, in.target_feat, f->target_feat, fs * (size_t)(N * cfg->target_feat), st, err);
        st = upload(x, in.msa_feat, f->msa_feat, fs * (size_t)(S * N * cfg->msa_feat), st, err);
        st = upload(x, in.relpos, f->relpos, is * (size_t)(N * N), st, err);
        st = upload(x, in.prev_pos_bin, f->prev_bin, is * (size_t)(N * N), st, err);
        st = upload(x, in.prev_pair, f->prev_pair, fs * (size_t)(N * N * cfg->c_z), st, err);
        st = upload(x, in.prev_msa_first_row, f->prev_row, fs * (size_t)(N * cfg->c_m), st, err);
        if (Se > 0) {
            st = upload(x, in.extra_msa, f->extra_msa, is * (size_t)(Se * N), st, err);
            st = upload(x, in.extra_has_deletion, f->has_del, fs * (size_t)(Se * N), st, err);
            st = upload(x, in.extra_deletion_value, f->del_val, fs * (size_t)(Se * N), st, err);
        }
        if (dap) { /* every rank runs the plan's collectives, or none does */
            int mine = st == COL_OK, all = 0;
            MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            if (mine && !all) st = col_err_set(err, COL_EIO, "another rank failed before the run");
        }
        if (st == COL_OK) st = mb_exec_run(x, err);
        for (int k = 0; st == COL_OK && k < 3; k++) {
            r->n[k] = col_numel(&outs[k]->t);
            r->out[k] = malloc(fs * (size_t)r->n[k]);
            st = r->out[k] ? mb_exec_download(x, outs[k], r->out[k], fs * (size_t)r->n[k], err)
                           : col_err_set(err, COL_ENOMEM, "out of memory");
        }
    }
    mb_exec_free(x);
    mb_store_free(store);
    col_graph_free(g);
    if (st != COL_OK) result_free(r);
    return st;
}

/* the largest |a - b| of n values (NaN counts as infinite) */
static double max_abs(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* the largest |a - b| / (1e-5 + 1e-6 |b|) of n values: <= 1 when every a is b within 1e-5 plus 1e-6 of its
 * size (float32 rounds values of 256 and more to multiples of 3.05e-5: the single-sequence pair reaches 284) */
static double max_rel(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / (1e-5 + 1e-6 * fabs((double)b[i]));
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* the largest of every rank's value */
static double worst(double v)
{
    double all = v;
    MPI_Allreduce(&v, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

static const char *const out_names[3] = {"single", "pair", "msa_first_row"};

/* DAP over the world against one process (and AlphaFold's outputs when ref) */
static void compare(const char *name, const col_ckpt *ck, const fold_config *cfg, const feats *f,
                    const col_ckpt *ref, int64_t chunk, const fold_dap *dap)
{
    res ok = {true, ""};
    col_err err = {0};
    result one, par;
    col_status st = trunk(ck, cfg, f, NULL, chunk, true, &one, &err);
    expect_ok(&ok, st, &err, "the one-process trunk");
    st = trunk(ck, cfg, f, dap, chunk, true, &par, &err); /* on every rank (its collectives) */
    expect_ok(&ok, st, &err, "the trunk over the ranks");
    check(ok.ok, ok.detail, "%s (N %lld, S %lld, S_e %lld, chunk %lld): the trunk builds and runs on %d ranks", name,
          (long long)f->N, (long long)f->S, (long long)f->Se, (long long)chunk, size);
    if (!ok.ok) {
        result_free(&one);
        result_free(&par);
        return;
    }
    double e[3], w[3], q = 0;
    for (int k = 0; k < 3; k++) {
        bool same = one.n[k] == par.n[k];
        e[k] = same ? max_abs(par.out[k], one.out[k], one.n[k]) : INFINITY;
        w[k] = worst(e[k]);
        double qk = same ? max_rel(par.out[k], one.out[k], one.n[k]) : INFINITY;
        q = qk > q || isnan(qk) ? qk : q;
    }
    check(q <= 1.0, "", "%s: over %d ranks = one process: max-abs single %.3g, pair %.3g, msa_first_row %.3g (the "
          "worst rank; bound 1e-5 + 1e-6 |value|: %.2f of it)", name, size, w[0], w[1], w[2], worst(q));
    if (ref) {
        double a[3];
        for (int k = 0; k < 3; k++) {
            char n[64];
            snprintf(n, sizeof n, "first/%s", out_names[k]);
            float *want = read_f32(ref, n, par.n[k]);
            e[k] = want ? max_abs(par.out[k], want, par.n[k]) : INFINITY;
            a[k] = worst(e[k]);
            free(want);
        }
        check(e[0] <= 5e-4 && e[1] <= 5e-4 && e[2] <= 5e-4, "", "%s: over %d ranks against AlphaFold: max-abs single "
              "%.3g, pair %.3g, msa_first_row %.3g (bound 5e-4)", name, size, a[0], a[1], a[2]);
    }
    result_free(&one);
    result_free(&par);
}

/* ---- the fixtures ---- */

/* FOLD_DAP_PARAMS/NAME.{safetensors,npz} or FIXTURES/NAME.npz; NULL and why when unreadable */
static col_ckpt *open_params(const char *name, char *why, size_t wn)
{
    const char *dir = getenv("FOLD_DAP_PARAMS");
    static const char *const exts[2] = {"safetensors", "npz"};
    col_err err = {0};
    for (int k = 0; k < 2; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.%s", dir && *dir ? dir : FIXTURES, name, exts[k]);
        if (!dir && k == 0) continue;
        col_ckpt *ck = NULL;
        if (col_ckpt_open(path, &ck, &err) == COL_OK) return ck;
        snprintf(why, wn, "%.600s: %.500s", path, err.msg);
    }
    return NULL;
}

static void test_fixture(const char *params, const char *refname, const fold_dap *dap, int64_t chunk)
{
    char what[160], why[1200] = "", path[600];
    snprintf(what, sizeof what, "%s with %s (chunk %lld): DAP over %d ranks = one process, and AlphaFold's first "
             "pass", refname, params, (long long)chunk, size);
    col_ckpt *ck = open_params(params, why, sizeof why);
    if (!ck) {
        skip(what, "the parameter file is not readable here (an .npz without the npz reader; FOLD_DAP_PARAMS=DIR "
                   "takes DIR/NAME.safetensors)");
        if (rank == 0) printf("#   %s\n", why);
        return;
    }
    snprintf(path, sizeof path, "%s/%s.safetensors", FIXTURES, refname);
    col_ckpt *ref = NULL;
    col_err err = {0};
    fold_config cfg;
    feats f = {0};
    res ok = {true, ""};
    if (col_ckpt_open(path, &ref, &err) != COL_OK) fail(&ok, "%s", err.msg);
    else if (fold_config_read(ck, &cfg, &err) != COL_OK) fail(&ok, "%s", err.msg);
    else if (!feats_from_ref(ref, &cfg, &f, why, sizeof why)) fail(&ok, "%s", why);
    check(ok.ok, ok.detail, "%s: the parameters, the reference and its features read", refname);
    if (ok.ok) compare(refname, ck, &cfg, &f, ref, chunk, dap);
    feats_free(&f);
    col_ckpt_close(ref);
    col_ckpt_close(ck);
}

/* ---- random features at a larger size: equality and each rank's arena for 1, 2, 4 ranks ---- */

static void test_arena(const fold_dap *dap)
{
    const int64_t N = 64, S = 32, Se = 37;
    char what[160], why[700] = "";
    snprintf(what, sizeof what, "random features N %lld, S %lld, S_e %lld at the real widths: DAP = one process; "
             "the arena per rank shrinks with more ranks", (long long)N, (long long)S, (long long)Se);
    col_ckpt *ck = open_params("real", why, sizeof why);
    if (!ck) {
        skip(what, "the parameter file is not readable here");
        return;
    }
    fold_config cfg;
    feats f = {0};
    col_err err = {0};
    res ok = {true, ""};
    if (fold_config_read(ck, &cfg, &err) != COL_OK) fail(&ok, "%s", err.msg);
    else if (!feats_random(&cfg, N, S, Se, 20240611u, &f)) fail(&ok, "out of memory");
    check(ok.ok, ok.detail, "random features N %lld, S %lld, S_e %lld made", (long long)N, (long long)S,
          (long long)Se);
    if (ok.ok) compare("random", ck, &cfg, &f, NULL, 0, dap);
    /* the arena of the plan over q ranks for q = 1, 2, 4 <= size (groups of q split from the world) */
    size_t arena[3] = {0, 0, 0};
    int qs[3] = {1, 2, 4}, nq = 0;
    res ar = {true, ""};
    for (int k = 0; ok.ok && k < 3 && qs[k] <= size; k++, nq++) {
        col_comm *group = NULL;
        fold_dap gd;
        const fold_dap *d = NULL;
        col_status st = COL_OK;
        if (qs[k] > 1) {
            st = col_comm_split(world, rank / qs[k], rank, &group, &err);
            if (st == COL_OK) st = fold_dap_init(&gd, group, &err);
            d = &gd;
        }
        result r;
        if (st == COL_OK) st = trunk(ck, &cfg, &f, d, 0, false, &r, &err);
        if (st == COL_OK) arena[k] = r.arena;
        expect_ok(&ar, st, &err, "a plan");
        col_comm_free(group);
    }
    bool shrinks = ar.ok;
    for (int k = 1; k < nq; k++) shrinks = shrinks && arena[k] < arena[k - 1];
    char line[200] = "";
    for (int k = 0; k < nq; k++) {
        size_t l = strlen(line);
        snprintf(line + l, sizeof line - l, "%s%d: %.2f MiB", k ? ", " : "", qs[k], (double)arena[k] / 1048576.0);
    }
    check(shrinks && arena[0] > 0, ar.detail, "random N %lld, S %lld: the plan's arena per rank for 1, 2, 4 ranks "
          "(as many as run here) shrinks: %s", (long long)N, (long long)S, line);
    feats_free(&f);
    col_ckpt_close(ck);
}

/* ---- the slices and the collectives around them, exactly ---- */

/* X[i, j, c] of the test's whole tensor */
static float xval(int64_t i, int64_t j, int64_t c) { return (float)(i * 100 + j * 10 + c) + 0.5f; }

/* A whole tensor X [R, C, 3] on every rank: this rank's rows (fold_dap_local), the columns of the row slices
 * (fold_dap_row_to_col), back to rows (fold_dap_col_to_row), the rows and the columns gathered
 * (fold_dap_gather): each exactly what it must hold, padding zeros included. */
static void test_layout(const fold_dap *dap, int64_t R, int64_t C)
{
    const int64_t ch = 3, rp = fold_dap_part(dap, R), cp = fold_dap_part(dap, C);
    const int64_t r0 = fold_dap_first(dap, R), c0 = fold_dap_first(dap, C);
    res ok = {true, ""};
    col_err err = {0};
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    fold_ctx c = {&b, -1, 0, dap};
    col_node *x = col_input(g, "x", COL_F32, 3, (int64_t[]){R, C, ch});
    col_node *loc = fold_dap_local(&c, x, 0, R);
    col_node *cols = fold_dap_row_to_col(&c, loc, R, C);
    col_node *back = fold_dap_col_to_row(&c, cols, R, C);
    col_node *g0 = col_contiguous(g, fold_dap_gather(&c, loc, 0, R));
    col_node *g1 = col_contiguous(g, fold_dap_gather(&c, cols, 1, C));
    col_node *outs[5] = {loc, cols, back, g0, g1};
    const int64_t shapes[5][3] = {{rp, C, ch}, {R, cp, ch}, {rp, C, ch}, {R, C, ch}, {R, C, ch}};
    col_plan *p = NULL;
    col_status st = mb_builder_status(&b, &err);
    for (int k = 0; st == COL_OK && k < 5; k++)
        for (int d = 0; d < 3; d++)
            if (outs[k]->t.shape[d] != shapes[k][d]) {
                fail(&ok, "output %d has dimension %d of %lld, not %lld", k, d, (long long)outs[k]->t.shape[d],
                     (long long)shapes[k][d]);
                st = COL_ESHAPE;
            }
    if (st == COL_OK) st = col_plan_create_for(g, &be, outs, 5, &p, &err);
    float *xs = malloc(sizeof(float) * (size_t)(R * C * ch)), *got = malloc(sizeof(float) * (size_t)(R * C * ch));
    for (int64_t i = 0; xs && i < R; i++)
        for (int64_t j = 0; j < C; j++)
            for (int64_t k = 0; k < ch; k++) xs[(i * C + j) * ch + k] = xval(i, j, k);
    if (st == COL_OK && col_plan_data(p, x)) /* a rank of padding alone reads nothing of x */
        st = col_plan_upload(p, x, xs, sizeof(float) * (size_t)(R * C * ch), &err);
    int mine = st == COL_OK, all = 0; /* every rank runs the plan's collectives, or none does */
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (mine && !all) st = col_err_set(&err, COL_EIO, "another rank failed before the run");
    if (st == COL_OK) st = col_plan_run(p, &be, &err);
    expect_ok(&ok, st, &err, "the graph");
    static const char *const names[5] = {"local rows", "columns", "rows again", "rows gathered", "columns gathered"};
    for (int k = 0; st == COL_OK && ok.ok && k < 5; k++) {
        const int64_t *sh = shapes[k];
        st = col_plan_download(p, outs[k], got, sizeof(float) * (size_t)(sh[0] * sh[1] * ch), &err);
        expect_ok(&ok, st, &err, "a download");
        for (int64_t i = 0; st == COL_OK && ok.ok && i < sh[0]; i++)
            for (int64_t j = 0; ok.ok && j < sh[1]; j++)
                for (int64_t q = 0; ok.ok && q < ch; q++) {
                    int64_t gi = i, gj = j; /* the whole tensor's row and column */
                    if (k == 0 || k == 2) gi = r0 + i;
                    if (k == 1) gj = c0 + j;
                    float want = gi < R && gj < C ? xval(gi, gj, q) : 0.0f;
                    float v = got[(i * sh[1] + j) * ch + q];
                    if (v != want)
                        fail(&ok, "%s [%lld, %lld, %lld] is %g, not %g", names[k], (long long)i, (long long)j,
                             (long long)q, v, want);
                }
    }
    check(ok.ok, ok.detail, "X [%lld, %lld, 3] on %d ranks (%lld rows and %lld columns a rank, padding included): "
          "this rank's rows, its columns (all-to-all), its rows again, the rows and the columns all-gathered hold "
          "X exactly", (long long)R, (long long)C, size, (long long)rp, (long long)cp);
    free(xs), free(got);
    col_plan_free(p);
    col_graph_free(g);
}

/* ---- refusals ---- */

static void test_refusals(void)
{
    fold_config cfg = {.c_m = 8, .c_z = 8, .c_s = 8, .c_e = 8, .target_feat = 22, .msa_feat = 49};
    col_err err = {0};
    fold_dap bad = {world, size + 1, size};
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    mb_push(&b, "%s", FOLD_ROOT);
    fold_ctx c = {&b, -1, 0, &bad};
    fold_sizes sz = {8, 2, 0};
    fold_trunk_inputs in;
    fold_trunk_outputs out;
    fold_trunk_build(&c, &cfg, &sz, &in, &out);
    col_status st = mb_builder_status(&b, &err);
    check(st == COL_EINVAL && strstr(err.msg, "rank") && !out.pair, err.msg,
          "a rank outside the processes is refused when the trunk is built: %s", err.msg);
    col_graph_free(g);
    err = (col_err){0};
    check(fold_dap_init(&bad, NULL, &err) == COL_EINVAL, err.msg, "no communicator is refused: %s", err.msg);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    col_err err = {0};
    fold_dap dap;
    bool ok = col_comm_init_mpi(&world, &err) == COL_OK && col_cpu_backend_init(&be, &err) == COL_OK &&
              fold_dap_init(&dap, world, &err) == COL_OK;
    if (!ok) {
        if (rank == 0) printf("Bail out! %s\n", err.msg);
        MPI_Finalize();
        return 1;
    }
    col_comm_set_timeout(world, 60.0, &err);
    test_layout(&dap, 7, 5);  /* divides by none of 2 and 4 */
    test_layout(&dap, 8, 4);  /* by both */
    test_layout(&dap, 1, 3);  /* ranks of padding alone */
    test_fixture("narrow", "narrow_msa_ref", &dap, 0);
    test_fixture("narrow", "narrow_msa_ref", &dap, 3);
    test_fixture("real", "real_msa_ref", &dap, 0);
    test_fixture("real", "real_single_ref", &dap, 0);
    test_arena(&dap);
    test_refusals();
    col_cpu_backend_free(&be);
    col_comm_free(world);
    MPI_Finalize();
    return rank == 0 ? tl_done() : 0;
}
