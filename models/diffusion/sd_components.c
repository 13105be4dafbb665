/* sd_components.c - the pipeline's components as cached graphs on the store: the text encoder, the
 * UNet, the VAE's encoder and decoder; the generator and the image conversions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "sd_pipeline_internal.h"

/* ---- one cached graph of a component ---- */

void sd_graph_free(sd_graph *g)
{
    mb_exec_free(g->x);
    mb_builder_free(&g->b);
    col_graph_free(g->g);
    memset(g, 0, sizeof *g);
}

/* starts a graph for the shape key (batch, h, w): false when the cached one fits */
static bool graph_begin(sd_graph *g, int batch, int h, int w)
{
    if (g->g && g->batch == batch && g->h == h && g->w == w) return false;
    sd_graph_free(g);
    g->g = col_graph_new();
    mb_builder_init(&g->b, g->g, false, COL_F32);
    g->batch = batch, g->h = h, g->w = w;
    return true;
}

/* binds the graph's weights (read from src on first use) and plans it for its outputs */
static col_status graph_end(sd_pipeline *p, sd_graph *g, const mb_source *src, col_node *const *outs, int n,
                            col_err *err)
{
    col_status st = g->g ? mb_builder_status(&g->b, err) : col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    if (st == COL_OK) st = mb_store_bind(p->store, &g->b, src, err);
    if (st == COL_OK) st = mb_exec_create(p->store, g->g, outs, n, &g->x, err);
    if (st != COL_OK) sd_graph_free(g);
    return st;
}

int sd_pipeline_vae_scale(const sd_pipeline *p)
{
    return dm_vae_downscale(&p->vae);
}

/* ---- the components' runs ---- */

/* rows [n, T] of token ids -> embeddings [n, T, hidden] (host memory, n*T*hidden floats) */
col_status sd_encode_text(sd_pipeline *p, const int32_t *ids, int n, float *out, col_err *err)
{
    sd_graph *g = &p->g_text;
    int T = SD_TOKENS;
    if (graph_begin(g, n, T, 0)) {
        g->in[0] = col_input(g->g, "ids", COL_I32, 2, (int64_t[]){n, T});
        dm_clip_text_out o = {0};
        col_status st = dm_clip_text_build(&g->b, &p->text, g->in[0], 0, &o);
        g->out = o.last_hidden;
        if (st != COL_OK) {
            col_err_copy(err, &g->b.err);
            sd_graph_free(g);
            return st;
        }
        if ((st = graph_end(p, g, p->srcp[SD_TEXT_ENCODER], &g->out, 1, err)) != COL_OK) return st;
    }
    size_t bytes = sizeof(float) * (size_t)n * T * p->text.hidden;
    col_status st = mb_exec_upload(g->x, g->in[0], ids, sizeof(int32_t) * (size_t)n * T, err);
    if (st == COL_OK) st = mb_exec_run(g->x, err);
    if (st == COL_OK) st = mb_exec_download(g->x, g->out, out, bytes, err);
    return st;
}

/* one UNet call: x [B, Cin, h, w], t [B], ctx [B, T, hidden] -> eps [B, Cout, h, w] */
col_status sd_run_unet(sd_pipeline *p, const float *x, const float *t, const float *ctx, int B, int h, int w,
                           float *eps, col_err *err)
{
    sd_graph *g = &p->g_unet;
    const dm_unet_config *c = &p->unet;
    if (graph_begin(g, B, h, w)) {
        dm_unet_io io;
        col_status st = dm_unet_build(&g->b, c, B, h, w, SD_TOKENS, &io, err);
        if (st != COL_OK) {
            sd_graph_free(g);
            return st;
        }
        g->in[0] = io.sample, g->in[1] = io.t_proj, g->in[2] = io.context, g->out = io.out;
        if ((st = graph_end(p, g, p->srcp[SD_UNET], &g->out, 1, err)) != COL_OK) return st;
    }
    int dim = c->block_out_channels[0];
    float *tp = malloc(sizeof(float) * (size_t)B * dim);
    if (!tp) return col_err_set(err, COL_ENOMEM, "pipeline: out of memory");
    dm_unet_time_proj(c, t, B, tp);
    size_t px = (size_t)h * w;
    col_status st = mb_exec_upload(g->x, g->in[0], x, sizeof(float) * B * c->in_channels * px, err);
    if (st == COL_OK) st = mb_exec_upload(g->x, g->in[1], tp, sizeof(float) * (size_t)B * dim, err);
    if (st == COL_OK)
        st = mb_exec_upload(g->x, g->in[2], ctx, sizeof(float) * (size_t)B * SD_TOKENS * c->cross_attention_dim, err);
    free(tp);
    if (st == COL_OK) st = mb_exec_run(g->x, err);
    if (st == COL_OK) st = mb_exec_download(g->x, g->out, eps, sizeof(float) * B * c->out_channels * px, err);
    return st;
}

/* latents [C, h, w] (already divided by the scaling factor) -> image [3, H, W] in [-1, 1] */
col_status sd_vae_decode(sd_pipeline *p, const float *z, int h, int w, float *img, col_err *err)
{
    /* the graph of this shape, or a free slot, or the first one rebuilt */
    sd_graph *g = &p->g_dec[0];
    for (int i = 0; i < 4; i++)
        if (p->g_dec[i].g && p->g_dec[i].h == h && p->g_dec[i].w == w) {
            g = &p->g_dec[i];
            break;
        } else if (!p->g_dec[i].g) {
            g = &p->g_dec[i];
        }
    int s = sd_pipeline_vae_scale(p);
    if (graph_begin(g, 1, h, w)) {
        g->in[0] = col_input(g->g, "latents", COL_F32, 4, (int64_t[]){1, p->vae.latent_channels, h, w});
        col_status st = dm_vae_build_decoder(&g->b, &p->vae, g->in[0], &g->out);
        if (st != COL_OK) {
            col_err_copy(err, &g->b.err);
            sd_graph_free(g);
            return st;
        }
        st = graph_end(p, g, p->srcp[SD_VAE], &g->out, 1, err);
        if (st != COL_OK) return st;
    }
    col_status st = mb_exec_upload(g->x, g->in[0], z, sizeof(float) * (size_t)p->vae.latent_channels * h * w, err);
    if (st == COL_OK) st = mb_exec_run(g->x, err);
    if (st == COL_OK)
        st = mb_exec_download(g->x, g->out, img, sizeof(float) * 3 * (size_t)h * s * w * s, err);
    return st;
}

/* image [3, H, W] in [-1, 1] -> the latent distribution's mean and log-variance [C, H/s, W/s] */
col_status sd_vae_encode(sd_pipeline *p, const float *img, int H, int W, float *mean, float *logvar, col_err *err)
{
    sd_graph *g = &p->g_enc;
    if (graph_begin(g, 1, H, W)) {
        g->in[0] = col_input(g->g, "image", COL_F32, 4, (int64_t[]){1, 3, H, W});
        dm_vae_encoded m = {0};
        col_status st = dm_vae_build_encoder(&g->b, &p->vae, g->in[0], NULL, &m);
        if (st != COL_OK) {
            col_err_copy(err, &g->b.err);
            sd_graph_free(g);
            return st;
        }
        g->out = m.mean, g->out2 = m.logvar;
        col_node *outs[2] = {m.mean, m.logvar};
        st = graph_end(p, g, p->srcp[SD_VAE], outs, 2, err);
        if (st != COL_OK) return st;
    }
    int s = sd_pipeline_vae_scale(p);
    size_t n = (size_t)p->vae.latent_channels * (H / s) * (W / s);
    col_status st = mb_exec_upload(g->x, g->in[0], img, sizeof(float) * 3 * (size_t)H * W, err);
    if (st == COL_OK) st = mb_exec_run(g->x, err);
    if (st == COL_OK) st = mb_exec_download(g->x, g->out, mean, sizeof(float) * n, err);
    if (st == COL_OK) st = mb_exec_download(g->x, g->out2, logvar, sizeof(float) * n, err);
    return st;
}

/* ---- the generator: torch's CPU generator or Philox ---- */

void sd_randn(sd_rng *r, float *out, int64_t n)
{
    if (r->philox) { /* element i of the run's stream: counter-based, the same on any device */
        for (int64_t i = 0; i < n; i++) out[i] = col_rand_normal(r->seed, r->offset + (uint64_t)i);
        r->offset += (uint64_t)n;
    } else {
        col_torch_randn(&r->torch, out, n);
    }
}

/* a sample of the VAE's diagonal Gaussian: mean + exp(logvar / 2) * noise, logvar clamped as diffusers does */
void sd_gaussian_sample(const float *mean, const float *logvar, const float *noise, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float lv = logvar[i] < -30.0f ? -30.0f : logvar[i] > 20.0f ? 20.0f : logvar[i];
        out[i] = mean[i] + expf(0.5f * lv) * noise[i];
    }
}

/* 8-bit RGB [H, W, 3] -> [3, H, W] floats in [-1, 1] (VaeImageProcessor: x / 255, then 2x - 1) */
void sd_image_to_tensor(const col_image *im, float *out)
{
    size_t px = (size_t)im->width * im->height;
    for (size_t i = 0; i < px; i++)
        for (int c = 0; c < 3; c++) out[c * px + i] = 2.0f * ((float)im->data[3 * i + c] / 255.0f) - 1.0f;
}

/* [3, H, W] in [-1, 1] -> 8-bit RGB: (x / 2 + 0.5) clamped to [0, 1], times 255, rounded half to even */
col_status sd_tensor_to_image(const float *x, int W, int H, col_image *out, col_err *err)
{
    size_t px = (size_t)W * H;
    out->data = malloc(px * 3);
    if (!out->data) return col_err_set(err, COL_ENOMEM, "pipeline: out of memory for the image");
    out->width = W, out->height = H, out->channels = 3;
    for (size_t i = 0; i < px; i++)
        for (int c = 0; c < 3; c++) {
            float v = x[c * px + i] / 2.0f + 0.5f;
            v = v < 0 ? 0 : v > 1 ? 1 : v;
            out->data[3 * i + c] = (uint8_t)rintf(v * 255.0f);
        }
    return COL_OK;
}

static col_status decode_tile(void *user, const float *z, int64_t th, int64_t tw, float *out, col_err *err)
{
    return sd_vae_decode(user, z, (int)th, (int)tw, out, err);
}

col_status sd_vae_decode_image(sd_pipeline *p, const float *z, int h, int w, float *img, col_err *err)
{
    dm_vae_tiling t = dm_vae_tiling_of(&p->vae);
    if (!dm_vae_needs_tiling(&t, h, w)) return sd_vae_decode(p, z, h, w, img, err);
    return dm_vae_decode_tiled(&p->vae, &t, z, 1, h, w, decode_tile, p, img, err);
}
