/* test_sd_textvae.c - the Stable Diffusion text encoder (CLIPTextModel) and
 * VAE (AutoencoderKL) graphs against transformers and diffusers: tiny random
 * models and their outputs made by tools/refgen/make_sd_textvae_fixtures.py
 * (tests/fixtures/sd_textvae/), loaded with mb_bind_checkpoint and run on the
 * CPU backend in f32; and the config readers' errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "mb_builder.h"
#include "dm_clip_text.h"
#include "dm_vae.h"
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
    bool same = n && n->t.ndim == nd && col_is_contiguous(&n->t);
    for (int d = 0; same && d < nd; d++) same = n->t.shape[d] == shape[d];
    if (!same) {
        TL_NOTE("%s: the graph's output has another shape or is not contiguous", name);
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
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    mb_push(&b, "%s", dm_clip_text_prefix(ck));
    col_node *x = input(g, "ids", COL_I32, 2, shape, ids);
    dm_clip_text_out o1, o2;
    st = dm_clip_text_build(&b, &c, x, 1, &o1);
    int nparams = b.n;
    if (st == COL_OK) st = dm_clip_text_build(&b, &c, x, 2, &o2);
    if (st == COL_OK) st = mb_bind_checkpoint(&b, ck, &err);
    else mb_builder_status(&b, &err);
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
    mb_builder_free(&b);
    col_graph_free(g);
    free(ids);

    /* [2,5] with i64 ids: a shorter sequence, only last_hidden_state planned */
    ids = ids_of(r, "ids5", shape);
    int64_t *ids64 = malloc(sizeof(int64_t) * (size_t)(ids ? shape[0] * shape[1] : 1));
    for (int64_t i = 0; ids && i < shape[0] * shape[1]; i++) ids64[i] = ids[i];
    g = col_graph_new();
    mb_builder_init(&b, g, false, COL_F32);
    mb_push(&b, "%s", dm_clip_text_prefix(ck));
    x = input(g, "ids", COL_I64, 2, shape, ids64);
    st = dm_clip_text_build(&b, &c, x, 0, &o1);
    if (st == COL_OK) st = mb_bind_checkpoint(&b, ck, &err);
    if (st == COL_OK && o1.skipped == NULL && (p = run(g, &o1.last_hidden, 1))) {
        double e = compare(r, "last5", o1.last_hidden);
        TL_OK(e <= MAX_NMSE, "%s: [2,5] last_hidden_state NMSE %.2e", name, e);
    } else {
        TL_OK(false, "%s: [2,5] runs %s", name, err.msg);
    }
    col_plan_free(p);
    p = NULL;
    mb_builder_free(&b);
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
        mb_builder b;
        mb_builder_init(&b, g, false, COL_F32);
        dm_clip_text_out o;
        col_node *x = col_input(g, "ids", cases[i].dt, 2, (int64_t[]){1, cases[i].T});
        st = dm_clip_text_build(&b, &c, x, cases[i].skip, &o);
        mb_builder_status(&b, &err);
        TL_OK(st == cases[i].st && strstr(err.msg, cases[i].msg) && !o.last_hidden, "CLIP build refuses: %s",
              err.msg);
        mb_builder_free(&b);
        col_graph_free(g);
    }
}

/* ---- VAE ---- */

/* a reference tensor bound to a new input leaf of g (the caller frees *mem) */
static col_node *ref_input(col_graph *g, const col_ckpt *r, const char *name, float **mem)
{
    int nd;
    int64_t shape[COL_MAX_DIMS];
    *mem = ref(r, name, &nd, shape);
    return *mem ? input(g, name, COL_F32, nd, shape, *mem) : NULL;
}

static void vae_encode(const char *name, const dm_vae_config *c, const col_ckpt *ck, const col_ckpt *r,
                       const char *tag, bool noisy)
{
    char key[64];
    col_err err = {0};
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    float *xm = NULL, *nm = NULL;
    snprintf(key, sizeof key, "%s.x", tag);
    col_node *x = ref_input(g, r, key, &xm);
    snprintf(key, sizeof key, "%s.noise", tag);
    col_node *noise = noisy ? ref_input(g, r, key, &nm) : NULL;
    dm_vae_encoded e;
    col_status st = dm_vae_build_encoder(&b, c, x, noise, &e);
    if (st == COL_OK) st = mb_bind_checkpoint(&b, ck, &err);
    else mb_builder_status(&b, &err);
    col_plan *p = NULL;
    if (st == COL_OK && (noisy ? e.sample != NULL : e.sample == NULL) &&
        (p = run(g, (col_node *[]){e.mean, e.logvar, noisy ? e.sample : e.mean}, 3))) {
        double em, el, es = 0;
        snprintf(key, sizeof key, "%s.mean", tag);
        em = compare(r, key, e.mean);
        snprintf(key, sizeof key, "%s.logvar", tag);
        el = compare(r, key, e.logvar);
        if (noisy) {
            snprintf(key, sizeof key, "%s.sample", tag);
            es = compare(r, key, e.sample);
        }
        char extra[48] = ", no noise: no sample";
        if (noisy) snprintf(extra, sizeof extra, ", sample %.2e", es);
        TL_OK(em <= MAX_NMSE && el <= MAX_NMSE && es <= MAX_NMSE, "%s: encode %lldx%lld: mean NMSE %.2e, logvar %.2e%s",
              name, (long long)x->t.shape[2], (long long)x->t.shape[3], em, el, extra);
    } else {
        TL_OK(false, "%s: encode %s runs %s", name, tag, err.msg);
    }
    col_plan_free(p);
    mb_builder_free(&b);
    col_graph_free(g);
    free(xm);
    free(nm);
}

static void vae_decode(const char *name, const dm_vae_config *c, const col_ckpt *ck, const col_ckpt *r,
                       const char *tag)
{
    char key[64];
    col_err err = {0};
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    float *zm = NULL;
    snprintf(key, sizeof key, "%s.z", tag);
    col_node *z = ref_input(g, r, key, &zm), *y = NULL;
    col_status st = dm_vae_build_decoder(&b, c, z, &y);
    if (st == COL_OK) st = mb_bind_checkpoint(&b, ck, &err);
    else mb_builder_status(&b, &err);
    col_plan *p = NULL;
    if (st == COL_OK && (p = run(g, &y, 1))) {
        snprintf(key, sizeof key, "%s.out", tag);
        double e = compare(r, key, y);
        TL_OK(e <= MAX_NMSE, "%s: decode %lldx%lld latents to %lldx%lld: NMSE %.2e", name, (long long)z->t.shape[2],
              (long long)z->t.shape[3], (long long)y->t.shape[2], (long long)y->t.shape[3], e);
    } else {
        TL_OK(false, "%s: decode %s runs %s", name, tag, err.msg);
    }
    col_plan_free(p);
    mb_builder_free(&b);
    col_graph_free(g);
    free(zm);
}

/* tiled decoding: a tile decoder that keeps one graph per tile shape */
typedef struct {
    const dm_vae_config *c;
    const col_ckpt *ck;
    int64_t B;
    struct {
        int64_t h, w;
        col_graph *g;
        mb_builder b;
        col_node *z, *y;
        col_plan *p;
    } shape[8];
    int n, calls;
} tile_decoder;

static col_status decode_tile(void *user, const float *z, int64_t th, int64_t tw, float *out, col_err *err)
{
    tile_decoder *d = user;
    int k = 0;
    while (k < d->n && (d->shape[k].h != th || d->shape[k].w != tw)) k++;
    if (k == d->n) {
        if (d->n == 8) return col_err_set(err, COL_EINTERNAL, "test: more than 8 tile shapes");
        d->n++;
        d->shape[k].h = th, d->shape[k].w = tw;
        d->shape[k].g = col_graph_new();
        mb_builder_init(&d->shape[k].b, d->shape[k].g, false, COL_F32);
        d->shape[k].z = col_input(d->shape[k].g, "z", COL_F32, 4, (int64_t[]){d->B, d->c->latent_channels, th, tw});
        col_status st = dm_vae_build_decoder(&d->shape[k].b, d->c, d->shape[k].z, &d->shape[k].y);
        if (st == COL_OK) st = mb_bind_checkpoint(&d->shape[k].b, d->ck, err);
        else mb_builder_status(&d->shape[k].b, err);
        if (st == COL_OK) st = col_plan_create_for(d->shape[k].g, NULL, &d->shape[k].y, 1, &d->shape[k].p, err);
        if (st != COL_OK) return st;
    }
    d->calls++;
    size_t zb = sizeof(float) * (size_t)col_numel(&d->shape[k].z->t);
    size_t yb = sizeof(float) * (size_t)col_numel(&d->shape[k].y->t);
    col_status st = col_plan_upload(d->shape[k].p, d->shape[k].z, z, zb, err);
    if (st == COL_OK) st = col_plan_run(d->shape[k].p, &be, err);
    if (st == COL_OK) st = col_plan_download(d->shape[k].p, d->shape[k].y, out, yb, err);
    return st;
}

static void vae_tiled(const char *name, const dm_vae_config *c, const col_ckpt *ck, const col_ckpt *r)
{
    int nd;
    int64_t zs[4] = {0};
    float *z = ref(r, "tiled.z", &nd, zs);
    dm_vae_tiling t = dm_vae_tiling_of(c);
    int64_t f = dm_vae_downscale(c), H = zs[2] * f, W = zs[3] * f, n = zs[0] * c->out_channels * H * W;
    tile_decoder d = {.c = c, .ck = ck, .B = zs[0]};
    col_err err = {0};
    float *out = malloc(sizeof(float) * (size_t)n);
    /* a graph over the output, for compare(): its data is out */
    col_graph *g = col_graph_new();
    col_node *y = input(g, "y", COL_F32, 4, (int64_t[]){zs[0], c->out_channels, H, W}, out);
    bool tiles = z && nd == 4 && dm_vae_needs_tiling(&t, zs[2], zs[3]) &&
                 !dm_vae_needs_tiling(&t, t.tile_latent, t.tile_latent);
    col_status st = tiles ? dm_vae_decode_tiled(c, &t, z, zs[0], zs[2], zs[3], decode_tile, &d, out, &err) : COL_EINVAL;
    float *sz = ref(r, "tiled.sizes", NULL, NULL);
    TL_OK(sz && t.tile_latent == sz[0] && t.tile_sample == sz[1] && t.overlap_latent == sz[2] && t.blend == sz[3] &&
              t.row_limit == sz[4],
          "%s: tiling as diffusers': latent tiles of %d, %d pixels, every %d, blend %d, keep %d", name, t.tile_latent,
          t.tile_sample, t.overlap_latent, t.blend, t.row_limit);
    free(sz);
    int64_t rows = (zs[2] + t.overlap_latent - 1) / t.overlap_latent;
    int64_t cols = (zs[3] + t.overlap_latent - 1) / t.overlap_latent;
    if (st == COL_OK) {
        double e = compare(r, "tiled.out", y);
        TL_OK(e <= MAX_NMSE && d.calls == rows * cols && d.n == 4,
              "%s: tiled decode of %lldx%lld latents (tiles of %d every %d, blend %d px): %d tiles of %d shapes, "
              "NMSE %.2e", name, (long long)zs[2], (long long)zs[3], t.tile_latent, t.overlap_latent, t.blend, d.calls,
              d.n, e);
    } else {
        TL_OK(false, "%s: tiled decode runs %s", name, err.msg);
    }
    for (int k = 0; k < d.n; k++) {
        col_plan_free(d.shape[k].p);
        mb_builder_free(&d.shape[k].b);
        col_graph_free(d.shape[k].g);
    }
    col_graph_free(g);
    free(out);
    free(z);
}

static void vae_model(const char *name, const dm_vae_config *want)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, name);
    col_err err = {0};
    dm_vae_config c;
    col_status st = dm_vae_load_config(dir, &c, &err);
    bool same = st == COL_OK && c.n_blocks == want->n_blocks && c.layers_per_block == want->layers_per_block &&
                c.norm_groups == want->norm_groups && c.latent_channels == 4 && c.in_channels == 3 &&
                c.out_channels == 3 && c.mid_attention == want->mid_attention &&
                c.use_quant_conv == want->use_quant_conv && c.use_post_quant_conv == want->use_post_quant_conv &&
                c.scaling_factor == want->scaling_factor && c.has_shift_factor == want->has_shift_factor &&
                c.shift_factor == want->shift_factor && c.force_upcast == want->force_upcast &&
                c.sample_size == want->sample_size;
    for (int i = 0; same && i < c.n_blocks; i++) same = c.block_out[i] == want->block_out[i];
    TL_OK(same, "%s: config.json read (%d blocks, %d layers, %d groups, scaling %g, shift %g) %s", name, c.n_blocks,
          c.layers_per_block, c.norm_groups, c.scaling_factor, c.shift_factor, st == COL_OK ? "" : err.msg);
    if (st != COL_OK) return;
    col_ckpt *ck = NULL, *r = NULL;
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    st = col_ckpt_open(path, &ck, &err);
    snprintf(path, sizeof path, "%s/%s_ref.safetensors", FIXTURES, name);
    if (st == COL_OK) st = col_ckpt_open(path, &r, &err);
    if (st == COL_OK) c.legacy_attention = dm_vae_legacy_attention(ck, "");
    TL_OK(st == COL_OK && c.legacy_attention == want->legacy_attention, "%s: checkpoint opened, %s attention names %s",
          name, c.legacy_attention ? "query/key/value/proj_attn" : "to_q/to_k/to_v/to_out.0",
          st == COL_OK ? "" : err.msg);
    if (st == COL_OK) {
        /* encoder and decoder together use every tensor of the file, each once */
        col_graph *g = col_graph_new();
        mb_builder b;
        mb_builder_init(&b, g, false, COL_F32);
        dm_vae_encoded e;
        col_node *y, *x = col_input(g, "x", COL_F32, 4, (int64_t[]){1, 3, 16, 16});
        col_node *z = col_input(g, "z", COL_F32, 4, (int64_t[]){1, 4, 2, 2});
        st = dm_vae_build_encoder(&b, &c, x, NULL, &e);
        int nenc = b.n;
        if (st == COL_OK) st = dm_vae_build_decoder(&b, &c, z, &y);
        if (st == COL_OK) st = mb_bind_checkpoint(&b, ck, &err);
        else mb_builder_status(&b, &err);
        TL_OK(st == COL_OK && b.n == col_ckpt_count(ck),
              "%s: the encoder's %d and the decoder's %d weights are the file's %d tensors %s", name, nenc, b.n - nenc,
              col_ckpt_count(ck), st == COL_OK ? "" : err.msg);
        mb_builder_free(&b);
        col_graph_free(g);
        vae_encode(name, &c, ck, r, "enc", true);
        vae_encode(name, &c, ck, r, "enc2", false);
        vae_decode(name, &c, ck, r, "dec");
        vae_decode(name, &c, ck, r, "dec2");
        vae_tiled(name, &c, ck, r);
    }
    col_ckpt_close(ck);
    col_ckpt_close(r);
}

static void vae_models(void)
{
    dm_vae_config a = dm_vae_defaults();
    a.n_blocks = 2, a.block_out[0] = 8, a.block_out[1] = 16, a.norm_groups = 4, a.sample_size = 16;
    vae_model("vae_a", &a);
    dm_vae_config b = dm_vae_defaults();
    b.n_blocks = 3, b.block_out[0] = 4, b.block_out[1] = 8, b.block_out[2] = 8, b.layers_per_block = 2;
    b.norm_groups = 2, b.sample_size = 32, b.legacy_attention = true;
    vae_model("vae_b", &b);
    dm_vae_config c = dm_vae_defaults();
    c.n_blocks = 2, c.block_out[0] = 8, c.block_out[1] = 8, c.norm_groups = 2, c.sample_size = 16;
    c.mid_attention = false, c.use_quant_conv = false, c.use_post_quant_conv = false, c.force_upcast = false;
    c.scaling_factor = 0.3611f, c.shift_factor = 0.1159f, c.has_shift_factor = true;
    vae_model("vae_c", &c);
}

/* a VAE config parsed from text: the status, and the message must contain want */
static void vae_config_error(const char *json, col_status want_st, const char *want, const char *what)
{
    dm_vae_config c;
    col_err err = {0};
    col_status st = dm_vae_parse_config(json, strlen(json), "vae.json", &c, &err);
    TL_OK(st == want_st && strstr(err.msg, want) && strstr(err.msg, "vae.json"), "VAE config %s: %s", what, err.msg);
}

/* a build on a fresh graph that must fail with st and a message containing want */
static void vae_build_error(const dm_vae_config *c, bool decode, const int64_t *xs, const int64_t *ns,
                            col_status want_st, const char *want)
{
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    col_err err = {0};
    col_node *x = col_input(g, "x", COL_F32, 4, xs), *y = NULL;
    col_node *noise = ns ? col_input(g, "noise", COL_F32, 4, ns) : NULL;
    dm_vae_encoded e = {0};
    col_status st = decode ? dm_vae_build_decoder(&b, c, x, &y) : dm_vae_build_encoder(&b, c, x, noise, &e);
    mb_builder_status(&b, &err);
    TL_OK(st == want_st && strstr(err.msg, want) && !y && !e.mean, "VAE %s refuses: %s", decode ? "decoder" : "encoder",
          err.msg);
    mb_builder_free(&b);
    col_graph_free(g);
}

/* binding the weights of config c from checkpoint file dir/...: fails naming want */
static void vae_bind_error(const char *dir, const dm_vae_config *c, const char *want, const char *what)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s/diffusion_pytorch_model.safetensors", FIXTURES, dir);
    col_ckpt *ck = NULL;
    col_err err = {0};
    col_graph *g = col_graph_new();
    mb_builder b;
    mb_builder_init(&b, g, false, COL_F32);
    dm_vae_encoded e;
    col_node *x = col_input(g, "x", COL_F32, 4, (int64_t[]){1, c->in_channels, 16, 16});
    col_status st = col_ckpt_open(path, &ck, &err);
    if (st == COL_OK) st = dm_vae_build_encoder(&b, c, x, NULL, &e);
    if (st == COL_OK) st = mb_bind_checkpoint(&b, ck, &err);
    else mb_builder_status(&b, &err);
    TL_OK(st != COL_OK && strstr(err.msg, want), "VAE weights %s: %s", what, err.msg);
    mb_builder_free(&b);
    col_graph_free(g);
    col_ckpt_close(ck);
}

static col_status fail_tile(void *user, const float *z, int64_t th, int64_t tw, float *out, col_err *err)
{
    (void)user, (void)z, (void)out;
    return col_err_set(err, COL_EIO, "test: tile %lldx%lld at", (long long)th, (long long)tw);
}

static void vae_errors(void)
{
    dm_vae_config c;
    col_err err = {0};
    col_status st = dm_vae_load_config(FIXTURES "/no_such_vae", &c, &err);
    TL_OK(st == COL_EIO && strstr(err.msg, "no_such_vae"), "VAE config: a missing file is COL_EIO: %s", err.msg);
    st = dm_vae_parse_config("{}", 2, "vae.json", &c, &err);
    TL_OK(st == COL_OK && c.n_blocks == 1 && c.block_out[0] == 64 && c.norm_groups == 32 && c.use_quant_conv &&
              c.mid_attention && c.force_upcast && !c.has_shift_factor && c.scaling_factor == 0.18215f,
          "VAE config: an empty object gives diffusers' defaults");
    vae_config_error("\"x\"", COL_EFORMAT, "not a JSON object", "not an object");
    vae_config_error("{\"_class_name\": \"AutoencoderTiny\"}", COL_EUNSUPPORTED, "AutoencoderTiny", "class");
    vae_config_error("{\"block_out_channels\": [8, 16], \"down_block_types\": [\"DownEncoderBlock2D\", "
                     "\"AttnDownEncoderBlock2D\"], \"up_block_types\": [\"UpDecoderBlock2D\", \"UpDecoderBlock2D\"]}",
                     COL_EUNSUPPORTED, "AttnDownEncoderBlock2D", "unknown down block");
    vae_config_error("{\"block_out_channels\": [8], \"up_block_types\": [\"UpDecoderBlock2D\", \"Upsample\"]}",
                     COL_EUNSUPPORTED, "Upsample", "unknown up block");
    vae_config_error("{\"block_out_channels\": [8, 16], \"norm_num_groups\": 4}", COL_EFORMAT,
                     "1 down and 1 up block types for 2 block_out_channels", "block counts differ");
    vae_config_error("{\"block_out_channels\": [8, 12], \"norm_num_groups\": 8, \"down_block_types\": "
                     "[\"DownEncoderBlock2D\", \"DownEncoderBlock2D\"], \"up_block_types\": [\"UpDecoderBlock2D\", "
                     "\"UpDecoderBlock2D\"]}",
                     COL_EINVAL, "block 1 has 12 channels, not a positive multiple of 8", "groups do not divide");
    vae_config_error("{\"block_out_channels\": 64}", COL_EFORMAT, "block_out_channels", "channels not a list");
    vae_config_error("{\"block_out_channels\": [1,1,1,1,1,1,1,1,1]}", COL_EFORMAT, "1 to 8", "too many blocks");
    vae_config_error("{\"block_out_channels\": [32, -1]}", COL_EFORMAT, "block_out_channels\"[1]", "negative width");
    vae_config_error("{\"act_fn\": \"gelu\"}", COL_EUNSUPPORTED, "act_fn \"gelu\"", "activation");
    vae_config_error("{\"scaling_factor\": -0.5}", COL_EFORMAT, "scaling_factor", "negative scaling");
    vae_config_error("{\"shift_factor\": \"0.1\"}", COL_EFORMAT, "shift_factor", "shift as a string");
    vae_config_error("{\"force_upcast\": 1}", COL_EFORMAT, "force_upcast", "upcast not a boolean");
    vae_config_error("{\"layers_per_block\": 0}", COL_EFORMAT, "layers_per_block", "no layers");
    vae_config_error("{\"latent_channels\": 4.5}", COL_EFORMAT, "latent_channels", "fractional latent channels");

    dm_vae_config t = dm_vae_defaults();
    t.n_blocks = 3, t.block_out[0] = 4, t.block_out[1] = 4, t.block_out[2] = 4, t.norm_groups = 2;
    vae_build_error(&t, false, (int64_t[]){1, 4, 16, 16}, NULL, COL_ESHAPE, "[batch, 3, height, width]");
    vae_build_error(&t, false, (int64_t[]){1, 3, 3, 16}, NULL, COL_ESHAPE, "3x16 image is too small for 2");
    vae_build_error(&t, false, (int64_t[]){2, 3, 16, 16}, (int64_t[]){2, 4, 8, 8}, COL_ESHAPE,
                    "noise must be an f32 [2, 4, 4, 4]");
    vae_build_error(&t, true, (int64_t[]){1, 3, 4, 4}, NULL, COL_ESHAPE,
                    "VAE decoder: the input must be an f32 [batch, 4,");
    t.norm_groups = 3;
    vae_build_error(&t, true, (int64_t[]){1, 4, 4, 4}, NULL, COL_EINVAL, "not a positive multiple of 3");

    /* tilings that do not tile the image, a tile decoder that fails */
    dm_vae_config tc = dm_vae_defaults();
    tc.n_blocks = 2, tc.block_out[0] = 4, tc.block_out[1] = 4, tc.norm_groups = 2, tc.sample_size = 18;
    dm_vae_tiling tt = dm_vae_tiling_of(&tc);
    float zt[4 * 10 * 10], yt[3 * 20 * 20];
    memset(zt, 0, sizeof zt);
    st = dm_vae_decode_tiled(&tc, &tt, zt, 1, 10, 10, fail_tile, NULL, yt, &err);
    TL_OK(st == COL_EUNSUPPORTED && strstr(err.msg, "does not tile"), "VAE tiled decode, sample_size 18: %s", err.msg);
    tc.sample_size = 16;
    tt = dm_vae_tiling_of(&tc);
    st = dm_vae_decode_tiled(&tc, &tt, zt, 1, 10, 10, fail_tile, NULL, yt, &err);
    TL_OK(st == COL_EIO && strstr(err.msg, "tile 8x8 at"), "VAE tiled decode passes the tile decoder's error on: %s",
          err.msg);

    /* weights that do not fit the config: a legacy-named file read with the new names, another model's file */
    dm_vae_config b = dm_vae_defaults();
    b.n_blocks = 3, b.block_out[0] = 4, b.block_out[1] = 8, b.block_out[2] = 8, b.layers_per_block = 2;
    b.norm_groups = 2;
    vae_bind_error("vae_b", &b, "no tensor encoder.mid_block.attentions.0.to_q.weight", "with the wrong names");
    vae_bind_error("vae_a", &b, "has shape [8,3,3,3] but [4,3,3,3]", "of another model");
    b.block_out[0] = 8, b.block_out[1] = 8, b.n_blocks = 2, b.layers_per_block = 1;
    vae_bind_error("vae_c", &b, "no tensor encoder.mid_block.attentions.0.group_norm.weight",
                   "without the mid-block attention");
}

int main(void)
{
    tl_cpu_backend(&be);
    clip_model("clip_qg", DM_CLIP_QUICK_GELU, 3, "");
    clip_model("clip_gelu", DM_CLIP_GELU, 5, "text_model.");
    clip_errors();
    vae_models();
    vae_errors();
    TL_NOTE("worst NMSE against the references: %.3g", worst_nmse);
    col_cpu_backend_free(&be);
    return tl_done();
}
