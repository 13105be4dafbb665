/* lm_pipeline_ckpt.c - a pipelined run saved as one process saves: one
 * Hugging Face directory (config.json, model.safetensors) and one
 * optimizer.safetensors, with the tensors in a single process's order and
 * layout, so that one process, or a run of any layout, resumes from them.
 *
 * World process 0 (pipeline rank 0 of the first pipeline) writes. For each
 * tensor of the whole model, in spec order, the stage that first holds it
 * (the tied embedding: the first stage) sends it there point to point on the
 * pipeline communicator, one tensor at a time: no process ever holds more
 * than one tensor of another stage. A state that a stage's data parallel
 * group holds in spans is first gathered whole on that group's process 0
 * (which is in the first pipeline). Only the first pipeline takes part in
 * the weights (every pipeline holds the same ones); every process takes part
 * in the states. Under tensor or sequence parallelism (a pipeline per
 * model-parallel position, the pipeline communicator joining equal
 * positions) a stage's blocks are first gathered whole over its tp group
 * (lmt_par_gather), and only the pipelines of tp and sp rank 0 send and
 * write. Process 0 keeps receiving after a write error, so the others
 * always finish; the caller agrees on the outcome. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf_config.h"
#include "units.h"
#include "lm_pipeline.h"
#include "lm_trainer_internal.h"
#include "textio.h"

#ifdef COL_WITH_COMM
#include "comm.h"

enum { TAG_SAVE = 16100 }; /* past the step's tags (at most 2 x 16000) */

typedef struct {
    col_lm_pipeline *p;
    struct col_comm *pipe;
    int P, rank, S, d;       /* d: this process's pipeline (0 writes) */
    bool lead;               /* tp and sp rank 0 (always without tensor or sequence parallelism) */
    bool writer;             /* process 0 of the run: pipeline rank 0 of the first pipeline, lead */
    int np;
    int *owner;              /* per global tensor: the virtual stage that saves it */
    float *buf;              /* one tensor */
    float *whole;            /* under tensor parallelism: one tensor gathered whole from its blocks */
    col_st_writer *w;
    col_status wst;          /* process 0's writing status */
    col_err werr;
} saver;

/* the local stage session holding virtual stage j, and tensor g's index in it (-1: not here) */
static col_lm_trainer *holder(const saver *s, int j, int g, int *local)
{
    *local = -1;
    if (j % s->P != s->rank)
        return NULL;
    col_lm_trainer *t = col_lm_pipeline_stage(s->p, j / s->P, NULL, NULL, NULL);
    for (int i = 0; t && i < col_lm_trainer_n_params(t); i++)
        if (col_lm_trainer_global_index(t, i) == g) {
            *local = i;
            return t;
        }
    return NULL;
}

/* item `item` of the file: kind k (0 weights, 2/3 state slots) of global tensor g, n floats, to the writer */
static col_status one(saver *s, int item, int k, int g, int64_t n, col_err *err)
{
    int j = s->owner[g], local;
    col_lm_trainer *t = holder(s, j, g, &local);
    const float *data = NULL;
    col_status st = COL_OK;
    if (t && k >= 2 && t->dp) { /* spans over the stage's data parallel group: whole on its process 0 */
        st = lmt_dp_gather_state(t, k, local, s->buf, err);
        data = s->buf;
    } else if (t) {
        data = k == 0 ? t->ot[local].w : k == 2 ? t->ot[local].m : t->ot[local].v;
    }
    /* blocks: whole over the tp group (its ranks hold the same stage and data parallel rank) */
    if (st == COL_OK && t && t->par && s->d == 0) {
        st = lmt_par_gather(t, local, data, s->whole, err);
        data = s->whole;
    }
    if (st != COL_OK || s->d != 0 || !s->lead)
        return st;
    int from = j % s->P;
    if (from != 0 && s->rank == from)
        return col_comm_send(s->pipe, data, (size_t)n, COL_F32, 0, TAG_SAVE + item % 8000, err);
    if (s->rank != 0)
        return COL_OK;
    if (from != 0) {
        if ((st = col_comm_recv(s->pipe, s->buf, (size_t)n, COL_F32, from, TAG_SAVE + item % 8000, err)) != COL_OK)
            return st;
        data = s->buf;
    }
    if (s->wst == COL_OK)
        s->wst = col_st_writer_put(s->w, item, 0, data, sizeof(float) * (size_t)n, &s->werr);
    return COL_OK;
}

/* one file: the items (kind, global tensor) in order; meta for its header */
static col_status save_file(saver *s, const char *path, int n, const int *kind, const int *glob,
                            const col_param_spec *specs, const char *const *names, const char *const *meta,
                            col_err *err)
{
    col_st_out *out = calloc((size_t)n + 1, sizeof *out);
    if (!out)
        return col_err_set(err, COL_ENOMEM, "pipeline: out of memory saving %s", path);
    for (int q = 0; q < n; q++) {
        const col_param_spec *sp = &specs[glob[q]];
        out[q] = (col_st_out){.name = names[q], .ndim = sp->ndim, .shape = {sp->shape[0], sp->shape[1]}};
    }
    s->wst = COL_OK;
    s->werr = (col_err){0};
    if (s->writer)
        s->wst = col_st_writer_begin_aligned(path, out, n, meta, COL_LM_WEIGHT_ALIGN, &s->w, &s->werr);
    col_status st = COL_OK;
    for (int q = 0; q < n && st == COL_OK; q++)
        st = one(s, q, kind[q], glob[q], col_param_numel(&specs[glob[q]]), err);
    if (s->writer) {
        if (s->wst == COL_OK && st == COL_OK)
            s->wst = col_st_writer_end(s->w, true, &s->werr);
        else if (s->w)
            col_st_writer_end(s->w, false, NULL);
        s->w = NULL;
        if (st == COL_OK && s->wst != COL_OK)
            st = col_err_copy(err, &s->werr);
    }
    free(out);
    return st;
}

col_status col_lm_pipeline_save(col_lm_pipeline *p, const char *dir, bool optimizer, col_err *err)
{
    saver s = {.p = p};
    col_lm_pipeline_layout(p, &s.pipe, &s.P, &s.rank, &s.S, &s.d);
    col_lm_trainer *t0 = col_lm_pipeline_stage(p, 0, NULL, NULL, NULL);
    const col_lm_train_config *tc = col_lm_trainer_config(t0);
    const col_lm_config *mc = &tc->model;
    s.lead = lmt_par_lead(t0);
    s.writer = s.rank == 0 && s.d == 0 && s.lead;
    s.np = col_lm_param_count(mc);
    col_param_spec *specs = calloc((size_t)s.np, sizeof *specs);
    int *idx = calloc((size_t)s.np, sizeof *idx), *kind = calloc(2 * (size_t)s.np + 1, sizeof *kind);
    int *glob = calloc(2 * (size_t)s.np + 1, sizeof *glob);
    const char **names = calloc(2 * (size_t)s.np + 1, sizeof *names);
    char (*sname)[160] = calloc(2 * (size_t)s.np + 1, sizeof *sname);
    s.owner = malloc(sizeof *s.owner * (size_t)s.np);
    int64_t most = 1;
    col_status st = COL_OK;
    if (!specs || !idx || !kind || !glob || !names || !sname || !s.owner)
        st = col_err_set(err, COL_ENOMEM, "pipeline: out of memory saving %s", dir);
    if (st == COL_OK) {
        col_lm_param_specs(mc, specs);
        for (int g = 0; g < s.np; g++) {
            s.owner[g] = -1;
            most = col_param_numel(&specs[g]) > most ? col_param_numel(&specs[g]) : most;
        }
        for (int j = s.S - 1; j >= 0; j--) { /* the first stage holding a tensor saves it */
            int lo, hi;
            col_pp_stage_layers(mc->n_layer, s.S, j, &lo, &hi);
            int n = col_lm_stage_params(mc, lo, hi, idx);
            for (int q = 0; q < n; q++)
                s.owner[idx[q]] = j;
        }
        s.buf = malloc(sizeof(float) * (size_t)most);
        if (t0->par)
            s.whole = malloc(sizeof(float) * (size_t)most);
        char b[COL_BYTES_STR];
        if (!s.buf || (t0->par && !s.whole))
            st = col_err_set(err, COL_ENOMEM, "pipeline: no memory for a %s tensor",
                             col_fmt_bytes(b, sizeof b, (uint64_t)most * 4));
    }
    for (int v = 0; st == COL_OK && v < col_lm_pipeline_n_stages(p); v++) /* the weights whole (ZeRO) */
        st = col_lm_trainer_sync_params(col_lm_pipeline_stage(p, v, NULL, NULL, NULL), err);
    bool writer = s.writer;
    char path[4200];
    if (st == COL_OK && writer) {
        struct stat sb;
        if (stat(dir, &sb) != 0 && mkdir(dir, 0755) != 0)
            st = col_err_set(err, COL_EIO, "cannot create %s", dir);
        char *json = NULL;
        if (st == COL_OK && (st = col_hf_config_json(mc, &json, err)) == COL_OK) {
            snprintf(path, sizeof path, "%s/config.json", dir);
            st = col_write_file_atomic(path, json, strlen(json), err);
        }
        free(json);
    }
    /* (process 0's own failures so far leave the others waiting in no collective: they come next) */
    if (st == COL_OK) {
        for (int g = 0; g < s.np; g++)
            kind[g] = 0, glob[g] = g, names[g] = specs[g].name;
        static const char *const meta[] = {"format", "pt", NULL};
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st = save_file(&s, path, s.np, kind, glob, specs, names, meta, err);
    }
    int slots = col_opt_state_slots(tc->opt.kind, tc->opt.momentum), n = 0;
    if (st == COL_OK && optimizer) {
        for (int slot = 0; slot < slots && slot < 2; slot++)
            for (int g = 0; g < s.np; g++, n++) {
                kind[n] = 2 + slot, glob[n] = g;
                snprintf(sname[n], sizeof sname[n], "%s.%s", slot ? "exp_avg_sq" : "exp_avg", specs[g].name);
                names[n] = sname[n];
            }
        char steps[32], seed[32];
        snprintf(steps, sizeof steps, "%" PRId64, col_lm_trainer_steps(t0));
        snprintf(seed, sizeof seed, "%" PRIu64, tc->seed);
        const char *meta[] = {"step", steps, "seed", seed, "optimizer", col_opt_kind_name(tc->opt.kind), NULL};
        snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
        st = save_file(&s, path, n, kind, glob, specs, names, meta, err);
    }
    free(specs), free(idx), free(kind), free(glob), free(names), free(sname), free(s.owner), free(s.buf), free(s.whole);
    return st;
}

col_status col_lm_pipeline_load(col_lm_pipeline *p, const char *dir, const col_ckpt *weights, bool optimizer,
                                col_err *err)
{
    col_status st = COL_OK;
    for (int v = 0; st == COL_OK && v < col_lm_pipeline_n_stages(p); v++) {
        col_lm_trainer *t = col_lm_pipeline_stage(p, v, NULL, NULL, NULL);
        /* a stage takes its own tensors from the whole model's file */
        st = col_lm_trainer_load_ex(t, weights, COL_LOAD_IGNORE_EXTRA, NULL, err);
        if (st == COL_OK && optimizer)
            st = col_lm_trainer_load_optimizer(t, dir, err);
    }
    return st;
}

#else

col_status col_lm_pipeline_save(col_lm_pipeline *p, const char *dir, bool optimizer, col_err *err)
{
    (void)p, (void)dir, (void)optimizer;
    return col_err_set(err, COL_EUNSUPPORTED, "pipeline: this build has no MPI");
}

col_status col_lm_pipeline_load(col_lm_pipeline *p, const char *dir, const col_ckpt *weights, bool optimizer,
                                col_err *err)
{
    (void)p, (void)dir, (void)weights, (void)optimizer;
    return col_err_set(err, COL_EUNSUPPORTED, "pipeline: this build has no MPI");
}
#endif
