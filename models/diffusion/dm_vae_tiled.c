/* dm_vae_tiled.c - decoding large latents in overlapping tiles, blended as
 * diffusers' AutoencoderKL.tiled_decode does. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dm_vae.h"

dm_vae_tiling dm_vae_tiling_of(const dm_vae_config *c)
{
    dm_vae_tiling t;
    t.tile_sample = c->sample_size;
    t.tile_latent = c->sample_size / dm_vae_downscale(c);
    t.overlap_latent = (int)(t.tile_latent * (1.0 - 0.25));
    t.blend = (int)(t.tile_sample * 0.25);
    t.row_limit = t.tile_sample - t.blend;
    return t;
}

bool dm_vae_needs_tiling(const dm_vae_tiling *t, int64_t h, int64_t w)
{
    return h > t->tile_latent || w > t->tile_latent;
}

typedef struct {
    float *data;      /* [B,C,H,W] */
    int64_t H, W;
} tile;

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* b's first rows blended with a's last ones, in place (diffusers' blend_v) */
static void blend_v(const tile *a, tile *b, int64_t BC, int64_t extent)
{
    extent = min64(min64(a->H, b->H), extent);
    for (int64_t y = 0; y < extent; y++) {
        float wa = (float)(1.0 - (double)y / (double)extent), wb = (float)((double)y / (double)extent);
        for (int64_t p = 0; p < BC; p++) {
            const float *ar = a->data + (p * a->H + a->H - extent + y) * a->W;
            float *br = b->data + (p * b->H + y) * b->W;
            for (int64_t x = 0; x < b->W; x++) br[x] = ar[x] * wa + br[x] * wb;
        }
    }
}

/* b's first columns blended with a's last ones, in place (blend_h) */
static void blend_h(const tile *a, tile *b, int64_t BC, int64_t extent)
{
    extent = min64(min64(a->W, b->W), extent);
    for (int64_t p = 0; p < BC; p++)
        for (int64_t y = 0; y < b->H; y++) {
            const float *ar = a->data + (p * a->H + y) * a->W + a->W - extent;
            float *br = b->data + (p * b->H + y) * b->W;
            for (int64_t x = 0; x < extent; x++) {
                float wa = (float)(1.0 - (double)x / (double)extent), wb = (float)((double)x / (double)extent);
                br[x] = ar[x] * wa + br[x] * wb;
            }
        }
}

static void free_row(tile *row, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        free(row[j].data);
        row[j].data = NULL;
    }
}

col_status dm_vae_decode_tiled(const dm_vae_config *c, const dm_vae_tiling *t, const float *z, int64_t B, int64_t h,
                               int64_t w, dm_vae_tile_fn fn, void *user, float *out, col_err *err)
{
    col_err e;
    col_status st = dm_vae_check_config(c, &e);
    if (st != COL_OK) return col_err_set(err, st, "%s", e.msg);
    int64_t f = dm_vae_downscale(c), L = c->latent_channels, C = c->out_channels;
    if (B < 1 || h < 1 || w < 1 || !z || !out || !fn)
        return col_err_set(err, COL_EINVAL, "VAE tiled decode: needs latents of positive sizes, an output and a tile "
                           "decoder");
    if (t->tile_latent < 1 || t->overlap_latent < 1 || t->blend < 0 || t->row_limit < 1 ||
        t->row_limit != (int64_t)t->overlap_latent * f)
        return col_err_set(err, COL_EUNSUPPORTED,
                           "VAE tiled decode: tiles of %d latents every %d keep %d pixels, which does not tile the "
                           "image (%lld pixels per latent)",
                           t->tile_latent, t->overlap_latent, t->row_limit, (long long)f);
    int64_t ov = t->overlap_latent, nj = (w + ov - 1) / ov, H = h * f, W = w * f;
    tile *prev = calloc((size_t)nj, sizeof *prev), *cur = calloc((size_t)nj, sizeof *cur);
    float *zt = malloc(sizeof(float) * (size_t)(B * L * t->tile_latent * t->tile_latent));
    if (!prev || !cur || !zt) {
        free(prev), free(cur), free(zt);
        return col_err_set(err, COL_ENOMEM, "VAE tiled decode: no memory for the tiles");
    }
    int64_t oy = 0;
    for (int64_t i = 0; i < h && st == COL_OK; i += ov) {
        int64_t th = min64(t->tile_latent, h - i), ox = 0, kept_h = 0;
        for (int64_t j = 0, jj = 0; j < w && st == COL_OK; j += ov, jj++) {
            int64_t tw = min64(t->tile_latent, w - j);
            for (int64_t p = 0; p < B * L; p++) /* the tile's latents, contiguous */
                for (int64_t y = 0; y < th; y++)
                    memcpy(zt + (p * th + y) * tw, z + (p * h + i + y) * w + j, sizeof(float) * (size_t)tw);
            tile *tl = &cur[jj];
            tl->H = th * f, tl->W = tw * f;
            tl->data = malloc(sizeof(float) * (size_t)(B * C * tl->H * tl->W));
            if (!tl->data) {
                st = col_err_set(err, COL_ENOMEM, "VAE tiled decode: no memory for a tile");
                break;
            }
            st = fn(user, zt, th, tw, tl->data, err);
            if (st != COL_OK) break;
            if (i > 0) blend_v(&prev[jj], tl, B * C, t->blend);
            if (jj > 0) blend_h(&cur[jj - 1], tl, B * C, t->blend);
            int64_t kh = min64(t->row_limit, tl->H), kw = min64(t->row_limit, tl->W);
            for (int64_t p = 0; p < B * C; p++) /* its top-left kh x kw pixels into the image */
                for (int64_t y = 0; y < kh; y++)
                    memcpy(out + (p * H + oy + y) * W + ox, tl->data + (p * tl->H + y) * tl->W,
                           sizeof(float) * (size_t)kw);
            ox += kw;
            kept_h = kh;
        }
        free_row(prev, nj);
        tile *swap = prev;
        prev = cur, cur = swap;
        oy += kept_h;
    }
    free_row(prev, nj);
    free_row(cur, nj);
    free(prev), free(cur), free(zt);
    return st;
}
