/* fold_model.c - AlphaFold2 inference: the parameter file, the per-size plan,
 * the recycling loop and the host steps between passes. */
#include "fold_model.h"
#include "units.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "fold_atoms.h"
#include "fold_confidence.h"
#include "fold_heads.h"
#include "fold_residues.h"
#include "fold_source.h"
#include "fold_structure.h"
#include "fold_trunk.h"
#include "graph.h"
#include "ops.h"
#include "plan.h"
#include "timer.h"

struct fold_model {
    col_ckpt *ckpt;
    fold_config cfg;
    fold_source_ctx src_ctx;
    mb_source src;
    mb_store *store;
    const fold_dap *dap;
};

/* One pass's graph at one size and chunk. */
typedef struct {
    col_graph *g;
    mb_builder b;
    mb_exec *x;
    fold_trunk_inputs in;
    fold_trunk_outputs trunk;
    fold_sm_outputs sm;
    col_node *plddt_logits, *pae_logits;
    col_node *outs[12];
    int n_outs;
} pass_graph;

col_status fold_model_open(const char *params, const col_backend *be, const mb_store_config *sc, fold_model **out,
                           col_err *err)
{
    *out = NULL;
    fold_model *m = calloc(1, sizeof *m);
    if (!m) return col_err_set(err, COL_ENOMEM, "fold: out of memory");
    col_status st = col_ckpt_open(params, &m->ckpt, err);
    if (st == COL_OK) {
        st = fold_config_read(m->ckpt, &m->cfg, err);
        if (st != COL_OK) col_err_prefix(err, "%s", params);
    }
    if (st == COL_OK) st = mb_store_create(sc, be, &m->store, err);
    if (st != COL_OK) {
        fold_model_free(m);
        return st;
    }
    fold_source_init(&m->src, &m->src_ctx, m->ckpt);
    *out = m;
    return COL_OK;
}

mb_store *fold_model_store(fold_model *m) { return m->store; }

void fold_model_free(fold_model *m)
{
    if (!m) return;
    mb_store_free(m->store);
    col_ckpt_close(m->ckpt);
    free(m);
}

const fold_config *fold_model_config(const fold_model *m)
{
    return &m->cfg;
}

void fold_model_set_dap(fold_model *m, const fold_dap *dap)
{
    m->dap = dap;
}

static void pass_free(pass_graph *p)
{
    mb_exec_free(p->x);
    mb_builder_free(&p->b);
    col_graph_free(p->g);
    memset(p, 0, sizeof *p);
}

/* Builds (and with bind, binds and plans) one pass at the given size. */
static col_status pass_build(fold_model *m, const fold_sizes *sz, int64_t chunk, bool plan, pass_graph *p,
                             col_err *err)
{
    memset(p, 0, sizeof *p);
    const fold_config *cfg = &m->cfg;
    p->g = col_graph_new();
    if (!p->g) return col_err_set(err, COL_ENOMEM, "fold: out of memory");
    mb_builder_init(&p->b, p->g, false, COL_F32);
    mb_push(&p->b, "%s", FOLD_ROOT);
    fold_ctx c = {.b = &p->b, .layer = -1, .chunk = chunk, .dap = m->dap};
    fold_trunk_build(&c, cfg, sz, &p->in, &p->trunk);
    fold_structure_module_build(&c, cfg, sz->n_res, p->trunk.single, p->trunk.pair, &p->sm);
    p->plddt_logits = fold_plddt_head(&c, p->sm.single, cfg->c_s, cfg->plddt_channels, cfg->plddt_bins);
    p->pae_logits = cfg->ptm ? fold_pae_head(&c, p->trunk.pair, cfg->c_z, cfg->pae_bins) : NULL;
    mb_pop(&p->b);
    col_node *o[] = {p->trunk.single, p->trunk.pair, p->trunk.msa_first_row, p->sm.single, p->sm.rotation,
                     p->sm.translation, p->sm.angles, p->plddt_logits, p->pae_logits};
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++)
        if (o[i]) p->outs[p->n_outs++] = o[i];
    col_status st = mb_builder_status(&p->b, err);
    if (st == COL_OK && plan) st = mb_store_bind(m->store, &p->b, &m->src, err);
    if (st == COL_OK && plan) st = mb_exec_create(m->store, p->g, p->outs, p->n_outs, &p->x, err);
    if (st != COL_OK) pass_free(p);
    return st;
}

col_status fold_model_arena_bytes(fold_model *m, int64_t n_res, int64_t n_seq, int64_t n_extra, int64_t chunk,
                                  size_t *bytes, col_err *err)
{
    /* sized by the plan's schedule and liveness alone: nothing is allocated, no weight is read */
    pass_graph p;
    fold_sizes sz = {n_res, n_seq, n_extra};
    col_status st = pass_build(m, &sz, chunk, false, &p, err);
    if (st != COL_OK) return st;
    /* the weights live in the store, not in the arena: mark their leaves bound (to a stand-in address: this
     * graph is measured, never run) as the store's binding would */
    for (int i = 0; i < p.b.n; i++)
        if (p.b.params[i].node) p.b.params[i].node->bound = p.g;
    size_t arena = 0, scratch = 0;
    st = col_plan_measure_for(p.g, p.outs, p.n_outs, &arena, &scratch, err);
    *bytes = arena + scratch;
    pass_free(&p);
    return st;
}

col_status fold_model_auto_chunk(fold_model *m, int64_t n_res, int64_t n_seq, int64_t n_extra, size_t budget,
                                 int64_t *chunk, col_err *err)
{
    *chunk = 0;
    if (budget == 0) return COL_OK;
    size_t smallest = 0;
    for (int64_t ck = n_res; ; ck = (ck + 1) / 2) {
        size_t b = 0;
        col_status st = fold_model_arena_bytes(m, n_res, n_seq, n_extra, ck >= n_res ? 0 : ck, &b, err);
        if (st != COL_OK) return st;
        smallest = b;
        if (b <= budget) {
            *chunk = ck >= n_res ? 0 : ck;
            return COL_OK;
        }
        if (ck == 1) break;
    }
    *chunk = 1;
    char need[COL_BYTES_STR], have[COL_BYTES_STR];
    col_err_set(err, COL_ENOMEM, "fold: %lld residues need %s of activations even in chunks of one row, more "
                "than the %s budget", (long long)n_res, col_fmt_bytes(need, sizeof need, (uint64_t)smallest),
                col_fmt_bytes(have, sizeof have, (uint64_t)budget));
    col_err_add_setting(err, COL_SETTING_COMPUTE_BUDGET);
    return COL_ENOMEM;
}

static col_status upload(pass_graph *p, col_node *n, const void *src, size_t bytes, col_err *err)
{
    return n ? mb_exec_upload(p->x, n, src, bytes, err) : COL_OK;
}

static col_status download(pass_graph *p, col_node *n, void *dst, size_t bytes, col_err *err)
{
    return mb_exec_download(p->x, n, dst, bytes, err);
}

void fold_result_free(fold_result *r)
{
    if (!r) return;
    free(r->atom37);
    free(r->atom37_mask);
    free(r->plddt);
    free(r->pae);
    free(r->single);
    free(r->pair);
    free(r->msa_first_row);
    free(r->sm_single);
    memset(r, 0, sizeof *r);
}

/* The final layer's atoms (folding.py: torsion angles to frames, literature positions to atom14, to atom37). */
static col_status atoms_of(const int32_t *aatype, int64_t n, const float *rot, const float *trans,
                           const float *angles, float *atom37, float *mask37, col_err *err)
{
    float *frames = malloc((size_t)n * FOLD_NUM_GROUPS * FOLD_FRAME_FLOATS * sizeof(float));
    float *atom14 = malloc((size_t)n * FOLD_NUM_ATOM14 * 3 * sizeof(float));
    col_status st = frames && atom14 ? COL_OK : col_err_set(err, COL_ENOMEM, "fold: out of memory");
    if (st == COL_OK) st = fold_torsion_angles_to_frames(aatype, n, rot, trans, angles, frames, err);
    if (st == COL_OK) st = fold_frames_to_atom14(aatype, n, frames, atom14, NULL, err);
    if (st == COL_OK) st = fold_atom14_to_atom37(aatype, n, atom14, atom37, mask37, err);
    free(frames);
    free(atom14);
    return st;
}

col_status fold_model_predict(fold_model *m, const fold_inputs *in, const fold_run_config *rc, fold_result *out,
                              col_err *err)
{
    memset(out, 0, sizeof *out);
    const fold_config *cfg = &m->cfg;
    const int64_t N = in->n_res, S = in->n_seq, Se = in->n_extra;
    if (N < 1 || S < 1 || Se < 0 || N > 1 << 16)
        return col_err_set(err, COL_EINVAL, "fold: bad input sizes (%lld residues, %lld MSA rows, %lld extra rows)",
                           (long long)N, (long long)S, (long long)Se);
    double t0 = col_seconds();
    pass_graph p;
    fold_sizes sz = {N, S, Se};
    col_status st = pass_build(m, &sz, rc->chunk, true, &p, err);
    if (st != COL_OK) return st;
    out->seconds_build = col_seconds() - t0;
    out->arena_bytes = mb_exec_arena_bytes(p.x);
    out->n_res = N;

    const size_t nn = (size_t)N * (size_t)N;
    int32_t *relpos = malloc(nn * sizeof *relpos), *bins = malloc(nn * sizeof *bins);
    float *rot = malloc((size_t)N * 9 * sizeof(float)), *trans = malloc((size_t)N * 3 * sizeof(float));
    float *angles = malloc((size_t)N * 14 * sizeof(float)), *pb = calloc((size_t)N * 3, sizeof(float));
    float *plddt_logits = malloc((size_t)N * (size_t)cfg->plddt_bins * sizeof(float));
    float *pae_logits = cfg->ptm ? malloc(nn * (size_t)cfg->pae_bins * sizeof(float)) : NULL;
    out->single = calloc((size_t)N * (size_t)cfg->c_s, sizeof(float));
    out->pair = calloc(nn * (size_t)cfg->c_z, sizeof(float));
    out->msa_first_row = calloc((size_t)N * (size_t)cfg->c_m, sizeof(float));
    out->sm_single = calloc((size_t)N * (size_t)cfg->c_s, sizeof(float));
    out->atom37 = calloc((size_t)N * 37 * 3, sizeof(float));
    out->atom37_mask = calloc((size_t)N * 37, sizeof(float));
    out->plddt = calloc((size_t)N, sizeof(float));
    out->pae = cfg->ptm ? calloc(nn, sizeof(float)) : NULL;
    if (!relpos || !bins || !rot || !trans || !angles || !pb || !plddt_logits || (cfg->ptm && (!pae_logits || !out->pae)) ||
        !out->single || !out->pair || !out->msa_first_row || !out->sm_single || !out->atom37 || !out->atom37_mask ||
        !out->plddt)
        st = col_err_set(err, COL_ENOMEM, "fold: out of memory for %lld residues", (long long)N);
    if (st == COL_OK) {
        fold_relpos_bins(in->residue_index, N, cfg->max_relative, relpos);
        for (size_t i = 0; i < nn; i++) bins[i] = 15;   /* no previous structure: no distance bin */
    }
    /* inputs that do not change between passes */
    if (st == COL_OK) st = upload(&p, p.in.target_feat, in->target_feat, sizeof(float) * (size_t)N * 22, err);
    if (st == COL_OK) st = upload(&p, p.in.msa_feat, in->msa_feat, sizeof(float) * (size_t)S * N * 49, err);
    if (st == COL_OK) st = upload(&p, p.in.relpos, relpos, nn * sizeof(int32_t), err);
    if (st == COL_OK && Se > 0) {
        st = upload(&p, p.in.extra_msa, in->extra_msa, sizeof(int32_t) * (size_t)Se * N, err);
        if (st == COL_OK) st = upload(&p, p.in.extra_has_deletion, in->extra_has_deletion, sizeof(float) * (size_t)Se * N, err);
        if (st == COL_OK)
            st = upload(&p, p.in.extra_deletion_value, in->extra_deletion_value, sizeof(float) * (size_t)Se * N, err);
    }
    const int passes = rc->recycles + 1;
    double run0 = col_seconds();
    for (int pass = 0; st == COL_OK && pass < passes; pass++) {
        double ts = col_seconds();
        /* recycled inputs: zeros on the first pass (the result buffers start zeroed) */
        st = upload(&p, p.in.prev_msa_first_row, out->msa_first_row, sizeof(float) * (size_t)N * cfg->c_m, err);
        if (st == COL_OK) st = upload(&p, p.in.prev_pair, out->pair, sizeof(float) * nn * cfg->c_z, err);
        if (st == COL_OK) st = upload(&p, p.in.prev_pos_bin, bins, nn * sizeof(int32_t), err);
        if (st == COL_OK) st = mb_exec_run(p.x, err);
        if (st == COL_OK) st = download(&p, p.trunk.single, out->single, sizeof(float) * (size_t)N * cfg->c_s, err);
        if (st == COL_OK) st = download(&p, p.trunk.pair, out->pair, sizeof(float) * nn * cfg->c_z, err);
        if (st == COL_OK)
            st = download(&p, p.trunk.msa_first_row, out->msa_first_row, sizeof(float) * (size_t)N * cfg->c_m, err);
        if (st == COL_OK) st = download(&p, p.sm.single, out->sm_single, sizeof(float) * (size_t)N * cfg->c_s, err);
        if (st == COL_OK) st = download(&p, p.sm.rotation, rot, sizeof(float) * (size_t)N * 9, err);
        if (st == COL_OK) st = download(&p, p.sm.translation, trans, sizeof(float) * (size_t)N * 3, err);
        if (st == COL_OK) st = download(&p, p.sm.angles, angles, sizeof(float) * (size_t)N * 14, err);
        if (st == COL_OK) st = atoms_of(in->aatype, N, rot, trans, angles, out->atom37, out->atom37_mask, err);
        if (st == COL_OK) st = fold_pseudo_beta(in->aatype, N, out->atom37, pb, err);
        if (st == COL_OK) fold_prev_pos_bins(pb, N, bins);
        if (st == COL_OK && rc->progress) st = rc->progress(rc->progress_user, pass, passes, col_seconds() - ts, err);
    }
    if (st == COL_OK)
        st = download(&p, p.plddt_logits, plddt_logits, sizeof(float) * (size_t)N * cfg->plddt_bins, err);
    if (st == COL_OK && cfg->ptm) st = download(&p, p.pae_logits, pae_logits, sizeof(float) * nn * cfg->pae_bins, err);
    if (st == COL_OK) st = fold_plddt(plddt_logits, N, (int)cfg->plddt_bins, out->plddt, err);
    if (st == COL_OK) {
        double s = 0;
        for (int64_t i = 0; i < N; i++) s += out->plddt[i];
        out->mean_plddt = s / (double)N;
        out->ptm = -1;
    }
    if (st == COL_OK && cfg->ptm)
        st = fold_pae(pae_logits, N, (int)cfg->pae_bins, FOLD_PAE_MAX_ERROR_BIN, out->pae, &out->max_pae, err);
    if (st == COL_OK && cfg->ptm) st = fold_ptm(pae_logits, N, (int)cfg->pae_bins, FOLD_PAE_MAX_ERROR_BIN, NULL, &out->ptm, err);
    out->seconds_run = col_seconds() - run0;
    free(relpos);
    free(bins);
    free(rot);
    free(trans);
    free(angles);
    free(pb);
    free(plddt_logits);
    free(pae_logits);
    pass_free(&p);
    if (st != COL_OK) fold_result_free(out);
    return st;
}
