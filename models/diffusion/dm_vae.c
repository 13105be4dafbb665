/* dm_vae.c - diffusers AutoencoderKL's encoder and decoder as graphs. */
#include "dm_vae.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"

#define VAE_EPS 1e-6f

typedef struct {
    mb_builder *b;
    const dm_vae_config *c;
} vae_ctx;

static col_node *vec(mb_builder *b, int64_t n, const char *name, const char *what)
{
    return mb_weight(b, 1, (int64_t[]){n}, "%s.%s", name, what);
}

/* nn.Conv2d(cin, cout, k) named name, stride 1, padding k/2 */
static col_node *conv(mb_builder *b, col_node *x, int cin, int cout, int k, const char *name)
{
    col_node *w = mb_weight(b, 4, (int64_t[]){cout, cin, k, k}, "%s.weight", name);
    col_node *bias = vec(b, cout, name, "bias");
    return col_conv2d(b->g, x, w, bias, 1, k / 2);
}

static col_node *group_norm(vae_ctx *v, col_node *x, int ch, const char *name)
{
    col_node *w = vec(v->b, ch, name, "weight"); /* weight, then bias: parameters in a fixed order */
    col_node *bias = vec(v->b, ch, name, "bias");
    return col_group_norm(v->b->g, x, w, bias, v->c->norm_groups, VAE_EPS);
}

/* ResnetBlock2D without a time embedding: x (+ 1x1 conv_shortcut when the
 * channels change) + conv2(silu(norm2(conv1(silu(norm1(x)))))) */
static col_node *resnet(vae_ctx *v, col_node *x, int cin, int cout)
{
    col_graph *g = v->b->g;
    col_node *h = col_silu(g, group_norm(v, x, cin, "norm1"));
    h = conv(v->b, h, cin, cout, 3, "conv1");
    h = col_silu(g, group_norm(v, h, cout, "norm2"));
    h = conv(v->b, h, cout, cout, 3, "conv2");
    if (cin != cout) x = conv(v->b, x, cin, cout, 1, "conv_shortcut");
    return col_add(g, x, h);
}

static col_node *proj(vae_ctx *v, col_node *x, int ch, const char *name)
{
    col_node *w = mb_weight(v->b, 2, (int64_t[]){ch, ch}, "%s.weight", name);
    col_node *bias = vec(v->b, ch, name, "bias");
    return col_linear(v->b->g, x, w, bias);
}

/* the mid block's Attention: one head of width C over the H*W positions,
 * x + to_out(attn(to_q, to_k, to_v of group_norm(x))) */
static col_node *attention(vae_ctx *v, col_node *x, int ch)
{
    col_graph *g = v->b->g;
    if (!x) return NULL;
    int64_t B = x->t.shape[0], H = x->t.shape[2], W = x->t.shape[3], S = H * W;
    bool old = v->c->legacy_attention;
    col_node *h = group_norm(v, x, ch, "group_norm");
    h = col_transpose(g, col_reshape(g, h, 3, (int64_t[]){B, ch, S}), 1, 2); /* [B,S,C] */
    int64_t s4[4] = {B, 1, S, ch};
    col_node *q = col_reshape(g, proj(v, h, ch, old ? "query" : "to_q"), 4, s4);
    col_node *k = col_reshape(g, proj(v, h, ch, old ? "key" : "to_k"), 4, s4);
    col_node *val = col_reshape(g, proj(v, h, ch, old ? "value" : "to_v"), 4, s4);
    col_node *o = col_attention(g, q, k, val, 0, 1.0f / sqrtf((float)ch));
    o = proj(v, col_reshape(g, o, 3, (int64_t[]){B, S, ch}), ch, old ? "proj_attn" : "to_out.0");
    o = col_reshape(g, col_transpose(g, o, 1, 2), 4, (int64_t[]){B, ch, H, W});
    return col_add(g, x, o);
}

/* UNetMidBlock2D: resnet, attention (unless mid_block_add_attention is false), resnet */
static col_node *mid_block(vae_ctx *v, col_node *x, int ch)
{
    mb_builder *b = v->b;
    mb_push(b, "mid_block.resnets.0.");
    x = resnet(v, x, ch, ch);
    mb_pop(b);
    if (v->c->mid_attention) {
        mb_push(b, "mid_block.attentions.0.");
        x = attention(v, x, ch);
        mb_pop(b);
    }
    mb_push(b, "mid_block.resnets.1.");
    x = resnet(v, x, ch, ch);
    mb_pop(b);
    return x;
}

/* conv_norm_out, SiLU, conv_out */
static col_node *head(vae_ctx *v, col_node *x, int cin, int cout)
{
    x = col_silu(v->b->g, group_norm(v, x, cin, "conv_norm_out"));
    return conv(v->b, x, cin, cout, 3, "conv_out");
}

/* clamp(x, lo, hi) exactly: max(x, lo) as a max over [x, lo] pairs, min(y, hi) = -max(-y, -hi) */
static col_node *clamp(col_graph *g, col_node *x, float lo, float hi)
{
    if (!x) return NULL;
    int64_t n = col_numel(&x->t), pair[2] = {n, 1};
    col_node *c = col_reshape(g, x, 2, pair);
    col_node *lo_hi[2] = {c, col_fill(g, COL_F32, 2, pair, lo)};
    c = col_max(g, col_concat(g, 2, lo_hi, 1), 2u, 1);
    col_node *neg[2] = {col_scale(g, c, -1.0f, 0.0f), col_fill(g, COL_F32, 2, pair, -hi)};
    c = col_scale(g, col_max(g, col_concat(g, 2, neg, 1), 2u, 1), -1.0f, 0.0f);
    return col_reshape(g, c, x->t.ndim, x->t.shape);
}

static col_status finish(mb_builder *b, void *out, size_t size)
{
    col_err e;
    col_status st = mb_builder_status(b, &e);
    if (st != COL_OK) memset(out, 0, size);
    return st;
}

static bool check_input(mb_builder *b, const dm_vae_config *c, col_node *x, int ch, const char *what)
{
    col_err e;
    col_status st = dm_vae_check_config(c, &e);
    if (st != COL_OK) {
        mb_fail(b, st, "%s", e.msg);
        return false;
    }
    if (!x || x->t.dtype != COL_F32 || x->t.ndim != 4 || x->t.shape[1] != ch || x->t.shape[2] < 1 ||
        x->t.shape[3] < 1) {
        mb_fail(b, COL_ESHAPE, "VAE %s: the input must be an f32 [batch, %d, height, width] tensor", what, ch);
        return false;
    }
    return b->status == COL_OK;
}

col_status dm_vae_build_encoder(mb_builder *b, const dm_vae_config *c, col_node *x, col_node *noise,
                                dm_vae_encoded *out)
{
    memset(out, 0, sizeof *out);
    if (!check_input(b, c, x, c->in_channels, "encoder")) return finish(b, out, sizeof *out);
    int64_t H = x->t.shape[2], W = x->t.shape[3];
    for (int i = 1; i < c->n_blocks; i++) {
        if (H < 2 || W < 2) {
            mb_fail(b, COL_ESHAPE, "VAE encoder: a %lldx%lld image is too small for %d downsamplings",
                    (long long)x->t.shape[2], (long long)x->t.shape[3], c->n_blocks - 1);
            return finish(b, out, sizeof *out);
        }
        H /= 2, W /= 2; /* (H + 1 - 3) / 2 + 1 */
    }
    int L = c->latent_channels;
    int64_t B = x->t.shape[0], lshape[4] = {B, L, H, W};
    if (noise && (noise->t.dtype != COL_F32 || noise->t.ndim != 4 || memcmp(noise->t.shape, lshape, sizeof lshape))) {
        mb_fail(b, COL_ESHAPE, "VAE encoder: the noise must be an f32 [%lld, %d, %lld, %lld] tensor", (long long)B, L,
                (long long)H, (long long)W);
        return finish(b, out, sizeof *out);
    }
    col_graph *g = b->g;
    vae_ctx v = {b, c};
    mb_push(b, "encoder.");
    x = conv(b, x, c->in_channels, c->block_out[0], 3, "conv_in");
    int ch = c->block_out[0];
    for (int i = 0; i < c->n_blocks; i++) {
        int co = c->block_out[i];
        for (int j = 0; j < c->layers_per_block; j++) {
            mb_push(b, "down_blocks.%d.resnets.%d.", i, j);
            x = resnet(&v, x, ch, co);
            mb_pop(b);
            ch = co;
        }
        if (i + 1 < c->n_blocks) { /* Downsample2D(padding=0): F.pad (0,1,0,1), then a stride-2 conv */
            col_node *w = mb_weight(b, 4, (int64_t[]){ch, ch, 3, 3}, "down_blocks.%d.downsamplers.0.conv.weight", i);
            col_node *bias = mb_weight(b, 1, (int64_t[]){ch}, "down_blocks.%d.downsamplers.0.conv.bias", i);
            col_conv2d_cfg cfg = {.stride_h = 2, .stride_w = 2, .pad_bottom = 1, .pad_right = 1};
            x = col_conv2d_ex(g, x, w, bias, &cfg);
        }
    }
    x = mid_block(&v, x, ch);
    x = head(&v, x, ch, 2 * L);
    mb_pop(b);
    if (c->use_quant_conv) x = conv(b, x, 2 * L, 2 * L, 1, "quant_conv");
    out->moments = x;
    out->mean = col_contiguous(g, col_slice(g, x, 1, 0, L));
    out->logvar = clamp(g, col_slice(g, x, 1, L, L), -30.0f, 20.0f);
    if (noise) /* mean + exp(logvar / 2) * noise */
        out->sample = col_add(g, out->mean, col_mul(g, col_exp(g, col_scale(g, out->logvar, 0.5f, 0.0f)), noise));
    return finish(b, out, sizeof *out);
}

col_status dm_vae_build_decoder(mb_builder *b, const dm_vae_config *c, col_node *z, col_node **out)
{
    *out = NULL;
    if (!check_input(b, c, z, c->latent_channels, "decoder")) return finish(b, out, sizeof *out);
    col_graph *g = b->g;
    vae_ctx v = {b, c};
    int L = c->latent_channels, n = c->n_blocks;
    if (c->use_post_quant_conv) z = conv(b, z, L, L, 1, "post_quant_conv");
    mb_push(b, "decoder.");
    int ch = c->block_out[n - 1];
    col_node *x = conv(b, z, L, ch, 3, "conv_in");
    x = mid_block(&v, x, ch);
    for (int i = 0; i < n; i++) {
        int co = c->block_out[n - 1 - i];
        for (int j = 0; j <= c->layers_per_block; j++) {
            mb_push(b, "up_blocks.%d.resnets.%d.", i, j);
            x = resnet(&v, x, ch, co);
            mb_pop(b);
            ch = co;
        }
        if (i + 1 < n) { /* Upsample2D: nearest 2x, then a 3x3 conv */
            char name[48];
            snprintf(name, sizeof name, "up_blocks.%d.upsamplers.0.conv", i);
            x = conv(b, col_upsample_nearest(g, x, 2), ch, ch, 3, name);
        }
    }
    x = head(&v, x, ch, c->out_channels);
    mb_pop(b);
    *out = x;
    return finish(b, out, sizeof *out);
}
