/* test_sd_textvae.c - the Stable Diffusion text encoder (CLIPTextModel) and
 * VAE (AutoencoderKL) graphs against transformers and diffusers: tiny random
 * models and their outputs made by tools/refgen/make_sd_textvae_fixtures.py
 * (tests/fixtures/sd_textvae/), loaded with dm_bind_checkpoint and run on the
 * CPU backend in f32; and the config readers' errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "dm_builder.h"
#include "dm_clip_text.h"
#include "ops.h"
#include "plan.h"
#include "testlib.h"
#include "backend_cpu.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/sd_textvae"
#endif

#define MAX_NMSE 1e-8

static col_backend be;
static double worst_nmse;

/* a reference tensor as f32 (ids too: they are small integers); shape into shape[], ndim into *nd */
static float *ref(const col_ckpt *r, const char *name, int *nd, int64_t *shape)
{
    const col_ckpt_tensor *t = r ? col_ckpt_find(r, name) : NULL;
    if (!t) {
        TL_NOTE("reference has no '%s'", name);
        return NULL;
    }
    int64_t cnt = 1;
    for (int d = 0; d < t->ndim; d++) {
        cnt *= t->shape[d];
        if (shape) shape[d] = t->shape[d];
    }
    if (nd) *nd = t->ndim;
    float *f = malloc(sizeof(float) * (size_t)cnt);
    col_err err = {0};
    if (!f || col_ckpt_read_f32(t, t->ndim, t->shape, f, &err) != COL_OK) {
        TL_NOTE("%s: %s", name, err.msg);
        free(f);
        return NULL;
    }
    return f;
}

/* sum (a - r)^2 / sum r^2 over node n's data against reference tensor name */
static double compare(const col_ckpt *r, const char *name, const col_node *n)
{
    int nd;
    int64_t shape[COL_MAX_DIMS];
    float *want = ref(r, name, &nd, shape);
    if (!want) return INFINITY;
    bool same = n && n->t.ndim == nd;
    for (int d = 0; same && d < nd; d++) same = n->t.shape[d] == shape[d];
    if (!same) {
        TL_NOTE("%s: the graph's output has another shape", name);
        free(want);
        return INFINITY;
    }
    const float *got = col_data(n);
    double num = 0, den = 0;
    for (int64_t i = 0; i < col_numel(&n->t); i++) {
        double e = (double)got[i] - want[i];
        num += e * e;
        den += (double)want[i] * want[i];
    }
    free(want);
    double v = den > 0 ? num / den : INFINITY;
    if (!(v <= MAX_NMSE)) TL_NOTE("%s: NMSE %.3g", name, v);
    if (v > worst_nmse || isnan(v)) worst_nmse = isnan(v) ? INFINITY : fmax(worst_nmse, v);
    return v;
}

/* an input leaf bound to caller memory */
static col_node *input(col_graph *g, const char *name, col_dtype dt, int nd, const int64_t *shape, void *data)
{
    col_node *n = col_input(g, name, dt, nd, shape);
    col_err err = {0};
    if (n && col_bind(n, data, &err) != COL_OK) TL_NOTE("bind %s: %s", name, err.msg);
    return n;
}

/* plans outs (n of them) of g and runs it on the CPU: the plan (its arena holds
 * the outputs until col_plan_free), or NULL with a note */
static col_plan *run(col_graph *g, col_node *const *outs, int n)
{
    col_plan *p = NULL;
    col_err err = {0};
    col_status st = col_plan_create_for(g, NULL, outs, n, &p, &err);
    if (st == COL_OK) st = col_plan_run(p, &be, &err);
    if (st != COL_OK) {
        TL_NOTE("plan/run: %s", err.msg);
        col_plan_free(p);
        return NULL;
    }
    return p;
}

static int32_t *ids_of(const col_ckpt *r, const char *name, int64_t *shape)
{
    int nd;
    float *f = ref(r, name, &nd, shape);
    if (!f || nd != 2) {
        free(f);
        return NULL;
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(shape[0] * shape[1]));
    for (int64_t i = 0; i < shape[0] * shape[1]; i++) ids[i] = (int32_t)f[i];
    free(f);
    return ids;
}

/* ---- CLIP text encoder ---- */

static void clip_model(const char *name, dm_clip_act act, int layers, const char *prefix)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, name);
    col_err err = {0};
    dm_clip_text_config c;
    col_status st = dm_clip_text_load_config(dir, &c, &err);
    TL_OK(st == COL_OK && c.hidden == 32 && c.intermediate == 37 && c.heads == 4 && c.layers == layers &&
              c.vocab_size == 1000 && c.max_positions == 77 && c.act == act && c.projection_dim == 16,
          "%s: config.json read (%d layers, act %d) %s", name, c.layers, (int)c.act, st == COL_OK ? "" : err.msg);
    if (st != COL_OK) return;
    col_ckpt *ck = NULL, *r = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st = col_ckpt_open(path, &ck, &err);
    snprintf(path, sizeof path, "%s/%s_ref.safetensors", FIXTURES, name);
    if (st == COL_OK) st = col_ckpt_open(path, &r, &err);
    TL_OK(st == COL_OK && strcmp(dm_clip_text_prefix(ck), prefix) == 0, "%s: checkpoint opened, tensor prefix '%s' %s",
          name, ck ? dm_clip_text_prefix(ck) : "?", st == COL_OK ? "" : err.msg);
    if (st != COL_OK) goto out;

    /* [3,77]: last_hidden_state and clip skip 1 and 2, built twice on one graph (the weights are shared) */
    int64_t shape[2];
    int32_t *ids = ids_of(r, "ids", shape);
    col_graph *g = col_graph_new();
    dm_builder b;
    dm_builder_init(&b, g, false, COL_F32);
    dm_push(&b, "%s", dm_clip_text_prefix(ck));
    col_node *x = input(g, "ids", COL_I32, 2, shape, ids);
    dm_clip_text_out o1, o2;
    st = dm_clip_text_build(&b, &c, x, 1, &o1);
    int nparams = b.n;
    if (st == COL_OK) st = dm_clip_text_build(&b, &c, x, 2, &o2);
    if (st == COL_OK) st = dm_bind_checkpoint(&b, ck, &err);
    else dm_builder_status(&b, &err);
    TL_OK(st == COL_OK && b.n == nparams && nparams == 2 + 16 * layers + 2 && ck && col_ckpt_count(ck) == nparams,
          "%s: graph built, %d weights bound from the checkpoint (a second build reuses them) %s", name, b.n,
          st == COL_OK ? "" : err.msg);
    col_plan *p = NULL;
    if (st == COL_OK && (p = run(g, (col_node *[]){o1.last_hidden, o1.skipped, o2.skipped}, 3))) {
        double e0 = compare(r, "last_hidden_state", o1.last_hidden), e1 = compare(r, "skip1", o1.skipped),
               e2 = compare(r, "skip2", o2.skipped);
        TL_OK(e0 <= MAX_NMSE && e1 <= MAX_NMSE && e2 <= MAX_NMSE,
              "%s: [3,77] last_hidden_state NMSE %.2e, clip skip 1 %.2e, clip skip 2 %.2e", name, e0, e1, e2);
    } else {
        TL_OK(false, "%s: [3,77] runs", name);
    }
    col_plan_free(p);
    p = NULL;
    dm_builder_free(&b);
    col_graph_free(g);
    free(ids);

    /* [2,5] with i64 ids: a shorter sequence, only last_hidden_state planned */
    ids = ids_of(r, "ids5", shape);
    int64_t *ids64 = malloc(sizeof(int64_t) * (size_t)(ids ? shape[0] * shape[1] : 1));
    for (int64_t i = 0; ids && i < shape[0] * shape[1]; i++) ids64[i] = ids[i];
    g = col_graph_new();
    dm_builder_init(&b, g, false, COL_F32);
    dm_push(&b, "%s", dm_clip_text_prefix(ck));
    x = input(g, "ids", COL_I64, 2, shape, ids64);
    st = dm_clip_text_build(&b, &c, x, 0, &o1);
    if (st == COL_OK) st = dm_bind_checkpoint(&b, ck, &err);
    if (st == COL_OK && o1.skipped == NULL && (p = run(g, &o1.last_hidden, 1))) {
        double e = compare(r, "last5", o1.last_hidden);
        TL_OK(e <= MAX_NMSE, "%s: [2,5] last_hidden_state NMSE %.2e", name, e);
    } else {
        TL_OK(false, "%s: [2,5] runs %s", name, err.msg);
    }
    col_plan_free(p);
    p = NULL;
    dm_builder_free(&b);
    col_graph_free(g);
    free(ids);
    free(ids64);
out:
    col_ckpt_close(ck);
    col_ckpt_close(r);
}

/* a config parsed from text: the status, and the message must contain want */
static void clip_config_error(const char *json, col_status want_st, const char *want, const char *what)
{
    dm_clip_text_config c;
    col_err err = {0};
    col_status st = dm_clip_text_parse_config(json, strlen(json), "te.json", &c, &err);
    TL_OK(st == want_st && strstr(err.msg, want) && strstr(err.msg, "te.json"), "CLIP config %s: %s", what, err.msg);
}

static void clip_errors(void)
{
    dm_clip_text_config c;
    col_err err = {0};
    col_status st = dm_clip_text_load_config(FIXTURES "/no_such_dir", &c, &err);
    TL_OK(st == COL_EIO && strstr(err.msg, "no_such_dir"), "CLIP config: a missing file is COL_EIO: %s", err.msg);
    clip_config_error("[1,2]", COL_EFORMAT, "not a JSON object", "not an object");
    clip_config_error("{\"model_type\": \"clip_vision_model\"}", COL_EUNSUPPORTED, "clip_vision_model", "vision");
    clip_config_error("{\"hidden_act\": \"swish\"}", COL_EUNSUPPORTED, "swish", "activation");
    clip_config_error("{\"hidden_size\": 30, \"num_attention_heads\": 4}", COL_EINVAL, "multiple of 4 heads",
                      "hidden not a multiple of heads");
    clip_config_error("{\"num_hidden_layers\": 0}", COL_EFORMAT, "num_hidden_layers", "zero layers");
    clip_config_error("{\"layer_norm_eps\": \"1e-5\"}", COL_EFORMAT, "layer_norm_eps", "eps as a string");
    clip_config_error("{\"hidden_size\": 32.5}", COL_EFORMAT, "hidden_size", "fractional width");
    c = dm_clip_text_defaults();
    st = dm_clip_text_parse_config("{}", 2, "te.json", &c, &err);
    TL_OK(st == COL_OK && c.hidden == 512 && c.layers == 12 && c.vocab_size == 49408 && c.act == DM_CLIP_QUICK_GELU,
          "CLIP config: an empty object gives transformers' defaults");

    /* build errors: too many tokens, bad clip skip, float ids */
    c.hidden = 8, c.heads = 2, c.layers = 2, c.intermediate = 8, c.vocab_size = 10, c.max_positions = 4;
    struct {
        int64_t T;
        col_dtype dt;
        int skip;
        col_status st;
        const char *msg;
    } cases[] = {{5, COL_I32, 0, COL_ESHAPE, "5 tokens, the model takes 1 to 4"},
                 {4, COL_I32, 3, COL_EINVAL, "clip skip 3"},
                 {4, COL_F32, 0, COL_ESHAPE, "i32 or i64"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        col_graph *g = col_graph_new();
        dm_builder b;
        dm_builder_init(&b, g, false, COL_F32);
        dm_clip_text_out o;
        col_node *x = col_input(g, "ids", cases[i].dt, 2, (int64_t[]){1, cases[i].T});
        st = dm_clip_text_build(&b, &c, x, cases[i].skip, &o);
        dm_builder_status(&b, &err);
        TL_OK(st == cases[i].st && strstr(err.msg, cases[i].msg) && !o.last_hidden, "CLIP build refuses: %s",
              err.msg);
        dm_builder_free(&b);
        col_graph_free(g);
    }
}

int main(void)
{
    tl_cpu_backend(&be);
    clip_model("clip_qg", DM_CLIP_QUICK_GELU, 3, "");
    clip_model("clip_gelu", DM_CLIP_GELU, 5, "text_model.");
    clip_errors();
    TL_NOTE("worst NMSE against the references: %.3g", worst_nmse);
    col_cpu_backend_free(&be);
    return tl_done();
}
