/* test_fold_structure - the structure module alone against DeepMind's JAX
 * code: the last pass's single and pair representations of the end-to-end
 * references (tools/refgen/make_fold_model_fixtures.py) go into our
 * structure module; its activation (representations['structure_module'])
 * and, through the host's frames-to-atoms code, the final atom37 positions
 * are compared with AlphaFold's. Real widths (IPA with 12 heads, c_s 384,
 * 8 layers) and narrow ones. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "checkpoint.h"
#include "fold_atoms.h"
#include "fold_config.h"
#include "fold_source.h"
#include "fold_structure.h"
#include "graph.h"
#include "mb_store.h"
#include "ops.h"
#include "testlib.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/fold_model"
#endif

static float *read_all(const col_ckpt *c, const char *name, size_t *count)
{
    const col_ckpt_tensor *t = col_ckpt_find(c, name);
    TL_OK(t != NULL, "reference holds %s", name);
    if (!t) return NULL;
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    float *p = malloc(n * sizeof *p + 4);
    col_err err = {0};
    if (col_ckpt_read_f32(t, t->ndim, t->shape, p, &err) != COL_OK) {
        free(p);
        return NULL;
    }
    if (count) *count = n;
    return p;
}

static void run(const col_backend *be, const char *params, const char *cs, double act_tol, double pos_tol)
{
    char path[512];
    col_err err = {0};
    col_ckpt *pc = NULL, *ref = NULL;
    snprintf(path, sizeof path, "%s/%s", FIXTURES, params);
    col_status st = col_ckpt_open(path, &pc, &err);
    TL_OK(st == COL_OK, "%s: open %s: %s", cs, params, st == COL_OK ? "" : err.msg);
    snprintf(path, sizeof path, "%s/%s_ref.safetensors", FIXTURES, cs);
    if (st == COL_OK) st = col_ckpt_open(path, &ref, &err);
    fold_config cfg;
    if (st == COL_OK) st = fold_config_read(pc, &cfg, &err);
    if (st != COL_OK) {
        TL_OK(false, "%s: setup: %s", cs, err.msg);
        col_ckpt_close(pc);
        col_ckpt_close(ref);
        return;
    }
    const int64_t N = col_ckpt_find(ref, "feat/target_feat")->shape[0];
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    mb_push(&b, "%s", FOLD_ROOT);
    fold_ctx c = {&b, -1, 0};
    col_node *s = col_input(g, "single", COL_F32, 2, (int64_t[]){N, cfg.c_s});
    col_node *z = col_input(g, "pair", COL_F32, 3, (int64_t[]){N, N, cfg.c_z});
    fold_sm_outputs o;
    fold_structure_module_build(&c, &cfg, N, s, z, &o);
    mb_store *store = NULL;
    mb_exec *x = NULL;
    mb_store_config sc = {0};
    fold_source_ctx sx;
    mb_source src;
    fold_source_init(&src, &sx, pc);
    col_node *outs[4] = {o.single, o.rotation, o.translation, o.angles};
    st = mb_builder_status(&b, &err);
    if (st == COL_OK) st = mb_store_create(&sc, be, &store, &err);
    if (st == COL_OK) st = mb_store_bind(store, &b, &src, &err);
    if (st == COL_OK) st = mb_exec_create(store, g, outs, 4, &x, &err);
    TL_OK(st == COL_OK, "%s: build and bind every weight under DeepMind's names (%d tensors): %s", cs,
          store ? mb_store_count(store) : 0, st == COL_OK ? "" : err.msg);
    size_t ns = 0, nz = 0, nact = 0;
    float *single = read_all(ref, "out/single", &ns), *pair = read_all(ref, "out/pair", &nz);
    float *want_act = read_all(ref, "out/structure_module", &nact);
    float *want_pos = read_all(ref, "out/final_atom_positions", NULL), *mask = read_all(ref, "out/final_atom_mask", NULL);
    float *faa = read_all(ref, "feat/aatype", NULL);
    if (st == COL_OK && single && pair && want_act && want_pos && mask && faa) {
        st = mb_exec_upload(x, s, single, ns * 4, &err);
        if (st == COL_OK) st = mb_exec_upload(x, z, pair, nz * 4, &err);
        if (st == COL_OK) st = mb_exec_run(x, &err);
        TL_OK(st == COL_OK, "%s: run: %s", cs, st == COL_OK ? "" : err.msg);
        float *act = malloc(nact * 4), *rot = malloc((size_t)N * 9 * 4), *tr = malloc((size_t)N * 3 * 4);
        float *ang = malloc((size_t)N * 14 * 4), *fr = malloc((size_t)N * 8 * 12 * 4);
        float *a14 = malloc((size_t)N * 14 * 3 * 4), *a37 = malloc((size_t)N * 37 * 3 * 4), *m37 = malloc((size_t)N * 37 * 4);
        int32_t *aa = malloc((size_t)N * 4);
        for (int64_t i = 0; i < N; i++) aa[i] = (int32_t)faa[i];
        if (st == COL_OK) st = mb_exec_download(x, o.single, act, nact * 4, &err);
        if (st == COL_OK) st = mb_exec_download(x, o.rotation, rot, (size_t)N * 36, &err);
        if (st == COL_OK) st = mb_exec_download(x, o.translation, tr, (size_t)N * 12, &err);
        if (st == COL_OK) st = mb_exec_download(x, o.angles, ang, (size_t)N * 56, &err);
        if (st == COL_OK) st = fold_torsion_angles_to_frames(aa, N, rot, tr, ang, fr, &err);
        if (st == COL_OK) st = fold_frames_to_atom14(aa, N, fr, a14, NULL, &err);
        if (st == COL_OK) st = fold_atom14_to_atom37(aa, N, a14, a37, m37, &err);
        if (st == COL_OK) {
            double e = 0, ep = 0, span = 0;
            for (size_t i = 0; i < nact; i++) e = fmax(e, fabs((double)act[i] - want_act[i]));
            size_t bad = 0;
            for (int64_t i = 0; i < N * 37; i++) {
                bad += m37[i] != mask[i];
                if (mask[i] > 0)
                    for (int k = 0; k < 3; k++) {
                        ep = fmax(ep, fabs((double)a37[3 * i + k] - want_pos[3 * i + k]));
                        span = fmax(span, fabs((double)want_pos[3 * i + k]));
                    }
            }
            TL_OK(e <= act_tol, "%s: structure module activation max-abs %.3g (bound %.0e)", cs, e, act_tol);
            TL_OK(bad == 0, "%s: atom37 masks equal", cs);
            TL_OK(ep <= pos_tol, "%s: final atom positions max-abs %.3g A (bound %.0e; coordinates up to %.0f A)", cs,
                  ep, pos_tol, span);
        }
        free(act), free(rot), free(tr), free(ang), free(fr), free(a14), free(a37), free(m37), free(aa);
    }
    free(single), free(pair), free(want_act), free(want_pos), free(mask), free(faa);
    mb_exec_free(x);
    mb_builder_free(&b);
    col_graph_free(g);
    mb_store_free(store);
    col_ckpt_close(pc);
    col_ckpt_close(ref);
}

int main(void)
{
    col_backend be;
    tl_cpu_backend(&be);
    run(&be, "real.npz", "real_msa", 5e-4, 1e-3);
    run(&be, "real.npz", "real_single", 5e-4, 1e-3);
    run(&be, "narrow.npz", "narrow_msa", 5e-4, 1e-3);
    col_cpu_backend_free(&be);
    return tl_done();
}
