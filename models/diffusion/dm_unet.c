/* dm_unet.c - UNet2DConditionModel's forward pass (SD 1.x / 2.x) on a mb_builder. */
#include "dm_unet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct {
    mb_builder *b;
    col_graph *g;
    const dm_unet_config *c;
    int64_t B;
    col_node *temb_act;  /* silu(time embedding) [B, time_embed_dim]: every resnet's time_emb_proj input */
    col_node *context;   /* [B, S, cross_attention_dim] */
} unet;

/* ---- layers: weights named under the builder's current prefix ---- */

/* through mb_linear: LoRA adapters on the projections the builder's spec targets (to_q, to_k, ...) */
static col_node *linear(unet *u, col_node *x, int64_t in, int64_t out, bool bias, const char *name)
{
    return mb_linear(u->b, x, out, in, bias, "%s", name);
}

static col_node *conv(unet *u, col_node *x, int64_t cin, int64_t cout, int k, int stride, int pad, const char *name)
{
    col_node *w = mb_weight(u->b, 4, (int64_t[]){cout, cin, k, k}, "%s.weight", name);
    col_node *bb = mb_weight(u->b, 1, &cout, "%s.bias", name);
    if (!w || !bb)
        return NULL;
    return col_conv2d(u->g, col_contiguous(u->g, x), w, bb, stride, pad);
}

static col_node *group_norm(unet *u, col_node *x, int64_t ch, float eps, const char *name)
{
    col_node *w = mb_weight(u->b, 1, &ch, "%s.weight", name);
    col_node *bb = mb_weight(u->b, 1, &ch, "%s.bias", name);
    if (!w || !bb)
        return NULL;
    return col_group_norm(u->g, x, w, bb, u->c->norm_num_groups, eps);
}

static col_node *layer_norm(unet *u, col_node *x, int64_t ch, const char *name)
{
    col_node *w = mb_weight(u->b, 1, &ch, "%s.weight", name);
    col_node *bb = mb_weight(u->b, 1, &ch, "%s.bias", name);
    if (!w || !bb)
        return NULL;
    return col_layernorm(u->g, x, w, bb, 1e-5f); /* BasicTransformerBlock's norm_eps */
}

/* ResnetBlock2D (time_embedding_norm "default", output_scale_factor osf) */
static col_node *resnet(unet *u, col_node *x, int64_t cin, int64_t cout, float osf)
{
    col_graph *g = u->g;
    float eps = u->c->norm_eps;
    col_node *h = col_silu(g, group_norm(u, x, cin, eps, "norm1"));
    h = conv(u, h, cin, cout, 3, 1, 1, "conv1");
    col_node *t = linear(u, u->temb_act, u->c->time_embed_dim, cout, true, "time_emb_proj");
    t = col_reshape(g, t, 4, (int64_t[]){u->B, cout, 1, 1});
    h = col_add(g, h, t);
    h = col_silu(g, group_norm(u, h, cout, eps, "norm2"));
    h = conv(u, h, cout, cout, 3, 1, 1, "conv2");
    if (cin != cout)
        x = conv(u, x, cin, cout, 1, 1, 0, "conv_shortcut");
    col_node *y = col_add(g, x, h);
    return osf == 1.0f ? y : col_scale(g, y, 1.0f / osf, 0.0f);
}

/* diffusers' Attention (processor AttnProcessor2_0): x [B,T,C] attends to kv [B,S,kv_dim] */
static col_node *attention(unet *u, col_node *x, col_node *kv, int64_t C, int64_t kv_dim, int heads, const char *name)
{
    col_graph *g = u->g;
    int64_t d = C / heads, T = x ? x->t.shape[1] : 0, S = kv ? kv->t.shape[1] : 0;
    mb_push(u->b, "%s.", name);
    col_node *q = linear(u, x, C, C, false, "to_q");
    col_node *k = linear(u, kv, kv_dim, C, false, "to_k");
    col_node *v = linear(u, kv, kv_dim, C, false, "to_v");
    static const int to_heads[4] = {0, 2, 1, 3};
    q = col_permute(g, col_reshape(g, q, 4, (int64_t[]){u->B, T, heads, d}), to_heads);
    k = col_permute(g, col_reshape(g, k, 4, (int64_t[]){u->B, S, heads, d}), to_heads);
    v = col_permute(g, col_reshape(g, v, 4, (int64_t[]){u->B, S, heads, d}), to_heads);
    /* diffusers' scale dim_head**-0.5 is a Python float, rounded to f32 by the kernel */
    col_node *o = col_attention(g, q, k, v, 0, (float)(1.0 / sqrt((double)d)));
    o = col_reshape(g, col_permute(g, o, to_heads), 3, (int64_t[]){u->B, T, C});
    o = linear(u, o, C, C, true, "to_out.0");
    mb_pop(u->b);
    return o;
}

/* BasicTransformerBlock: self-attention, cross-attention, GEGLU feed-forward, each pre-LayerNorm with a residual */
static col_node *transformer_block(unet *u, col_node *h, int64_t C, int heads)
{
    col_graph *g = u->g;
    col_node *n = layer_norm(u, h, C, "norm1");
    h = col_add(g, h, attention(u, n, n, C, C, heads, "attn1"));
    n = layer_norm(u, h, C, "norm2");
    h = col_add(g, h, attention(u, n, u->context, C, u->c->cross_attention_dim, heads, "attn2"));
    n = layer_norm(u, h, C, "norm3");
    int64_t inner = 4 * C;
    col_node *f = linear(u, n, C, 2 * inner, true, "ff.net.0.proj");
    /* GEGLU: the first half is the value, the second the gate */
    col_node *val = col_slice(g, f, 2, 0, inner), *gate = col_slice(g, f, 2, inner, inner);
    f = col_mul(g, val, col_gelu(g, gate));
    f = linear(u, f, inner, C, true, "ff.net.2");
    return col_add(g, h, f);
}

/* Transformer2DModel over continuous input x [B,C,H,W] */
static col_node *transformer(unet *u, col_node *x, int64_t C, int heads, int layers)
{
    col_graph *g = u->g;
    if (!x)
        return NULL;
    int64_t H = x->t.shape[2], W = x->t.shape[3];
    static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
    col_node *h = group_norm(u, x, C, 1e-6f, "norm");
    bool lin = u->c->use_linear_projection;
    if (!lin)
        h = conv(u, h, C, C, 1, 1, 0, "proj_in");
    h = col_reshape(g, col_permute(g, h, to_nhwc), 3, (int64_t[]){u->B, H * W, C});
    if (lin)
        h = linear(u, h, C, C, true, "proj_in");
    for (int l = 0; l < layers; l++) {
        mb_push(u->b, "transformer_blocks.%d.", l);
        h = transformer_block(u, h, C, heads);
        mb_pop(u->b);
    }
    if (lin)
        h = linear(u, h, C, C, true, "proj_out");
    h = col_permute(g, col_reshape(g, h, 4, (int64_t[]){u->B, H, W, C}), to_nchw);
    if (!lin)
        h = conv(u, h, C, C, 1, 1, 0, "proj_out");
    return col_add(g, col_contiguous(g, h), x);
}

/* Downsample2D: 3x3 conv, stride 2; padding 0 means one zero row/column after the end */
static col_node *downsample(unet *u, col_node *x, int64_t C)
{
    col_node *w = mb_weight(u->b, 4, (int64_t[]){C, C, 3, 3}, "downsamplers.0.conv.weight");
    col_node *bb = mb_weight(u->b, 1, &C, "downsamplers.0.conv.bias");
    if (!w || !bb)
        return NULL;
    int p = u->c->downsample_padding;
    col_conv2d_cfg cfg = {.stride_h = 2, .stride_w = 2, .pad_top = p, .pad_left = p, .pad_bottom = 1, .pad_right = 1};
    return col_conv2d_ex(u->g, x, w, bb, &cfg);
}

/* Upsample2D: nearest to (h, w) - twice the size, or one less where the skip is odd - then a 3x3 conv */
static col_node *upsample(unet *u, col_node *x, int64_t C, int64_t h, int64_t w)
{
    col_graph *g = u->g;
    if (!x)
        return NULL;
    int64_t H = x->t.shape[2], W = x->t.shape[3];
    if (h > 2 * H || w > 2 * W || h < 2 * H - 1 || w < 2 * W - 1)
        return mb_fail(u->b, COL_EINTERNAL, "UNet: upsampling %lldx%lld to %lldx%lld", (long long)H, (long long)W,
                       (long long)h, (long long)w);
    /* nearest to size 2H-1 reads source row floor(i * H / (2H-1)) = floor(i / 2): the 2x result, cut */
    col_node *y = col_upsample_nearest(g, x, 2);
    if (h < 2 * H)
        y = col_slice(g, y, 2, 0, h);
    if (w < 2 * W)
        y = col_slice(g, y, 3, 0, w);
    return conv(u, y, C, C, 3, 1, 1, "upsamplers.0.conv");
}

/* ---- the model ---- */

static bool check_inputs(mb_builder *b, const dm_unet_config *c, col_node *sample, col_node *t_proj, col_node *context)
{
    if (!sample || !t_proj || !context) {
        mb_fail(b, COL_EINVAL, "UNet: an input is missing");
        return false;
    }
    const col_tensor *s = &sample->t, *t = &t_proj->t, *x = &context->t;
    if (s->dtype != COL_F32 || t->dtype != COL_F32 || x->dtype != COL_F32) {
        mb_fail(b, COL_EDTYPE, "UNet: sample, t_proj and encoder_hidden_states must be f32");
        return false;
    }
    if (s->ndim != 4 || s->shape[1] != c->in_channels || s->shape[0] < 1 || s->shape[2] < 1 || s->shape[3] < 1) {
        mb_fail(b, COL_ESHAPE, "UNet: sample must be [B, %d, H, W]", c->in_channels);
        return false;
    }
    int64_t B = s->shape[0];
    if (t->ndim != 2 || t->shape[0] != B || t->shape[1] != c->block_out_channels[0]) {
        mb_fail(b, COL_ESHAPE, "UNet: t_proj must be [%lld, %d] (the timestep projection, one row per sample)",
                (long long)B, c->block_out_channels[0]);
        return false;
    }
    if (x->ndim != 3 || x->shape[0] != B || x->shape[1] < 1 || x->shape[2] != c->cross_attention_dim) {
        mb_fail(b, COL_ESHAPE, "UNet: encoder_hidden_states must be [%lld, S, %d]", (long long)B,
                c->cross_attention_dim);
        return false;
    }
    /* the sizes down the UNet: each level's must come back from the next by 2x nearest upsampling
     * (cut by one where odd), which holds for padding 1 (ceil(h/2)) but not for padding 0 */
    for (int a = 2; a <= 3; a++) {
        int64_t h = s->shape[a];
        for (int i = 0; i + 1 < c->n_blocks; i++) {
            int64_t next = c->downsample_padding ? (h - 1) / 2 + 1 : (h >= 2 ? (h - 2) / 2 + 1 : 0);
            if (next < 1 || (2 * next != h && 2 * next - 1 != h)) {
                mb_fail(b, COL_EUNSUPPORTED,
                        "UNet: a %lldx%lld latent: with downsample_padding %d, size %lld goes down to %lld, which "
                        "2x nearest upsampling does not bring back (use sizes divisible by %d)",
                        (long long)s->shape[2], (long long)s->shape[3], c->downsample_padding, (long long)h,
                        (long long)next, 1 << (c->n_blocks - 1));
                return false;
            }
            h = next;
        }
    }
    return true;
}

col_node *dm_unet(mb_builder *b, const dm_unet_config *c, col_node *sample, col_node *t_proj, col_node *context)
{
    if (b->status != COL_OK)
        return NULL;
    col_err why = {0};
    if (dm_unet_check_config(c, &why) != COL_OK)
        return mb_fail(b, why.code, "%s", why.msg);
    if (!check_inputs(b, c, sample, t_proj, context))
        return NULL;
    col_graph *g = b->g;
    unet u = {.b = b, .g = g, .c = c, .B = sample->t.shape[0], .context = context};
    int n = c->n_blocks;
    const int *ch = c->block_out_channels;

    /* time embedding */
    mb_push(b, "time_embedding.");
    col_node *emb = linear(&u, t_proj, ch[0], c->time_embed_dim, true, "linear_1");
    emb = linear(&u, col_silu(g, emb), c->time_embed_dim, c->time_embed_dim, true, "linear_2");
    mb_pop(b);
    u.temb_act = col_silu(g, emb);

    col_node *x = c->center_input_sample ? col_scale(g, sample, 2.0f, -1.0f) : sample;
    x = conv(&u, x, c->in_channels, ch[0], c->conv_in_kernel, 1, (c->conv_in_kernel - 1) / 2, "conv_in");

    /* the skip connections, in the order the up blocks take them back */
    int nskip = 1;
    for (int i = 0; i < n; i++)
        nskip += c->layers_per_block[i] + (i < n - 1);
    col_node **skip = calloc((size_t)nskip, sizeof *skip);
    if (!skip)
        return mb_fail(b, COL_ENOMEM, "UNet: no memory for the skip list");
    int top = 0;
    skip[top++] = x;

    for (int i = 0; i < n; i++) {
        mb_push(b, "down_blocks.%d.", i);
        for (int l = 0; l < c->layers_per_block[i]; l++) {
            mb_push(b, "resnets.%d.", l);
            x = resnet(&u, x, l == 0 ? ch[i > 0 ? i - 1 : 0] : ch[i], ch[i], 1.0f);
            mb_pop(b);
            if (c->down_cross_attn[i]) {
                mb_push(b, "attentions.%d.", l);
                x = transformer(&u, x, ch[i], c->heads[i], c->transformer_layers[i]);
                mb_pop(b);
            }
            skip[top++] = x;
        }
        if (i < n - 1) {
            x = downsample(&u, x, ch[i]);
            skip[top++] = x;
        }
        mb_pop(b);
    }

    mb_push(b, "mid_block.");
    mb_push(b, "resnets.0.");
    x = resnet(&u, x, ch[n - 1], ch[n - 1], c->mid_block_scale_factor);
    mb_pop(b);
    mb_push(b, "attentions.0.");
    x = transformer(&u, x, ch[n - 1], c->heads[n - 1], c->transformer_layers[n - 1]);
    mb_pop(b);
    mb_push(b, "resnets.1.");
    x = resnet(&u, x, ch[n - 1], ch[n - 1], c->mid_block_scale_factor);
    mb_pop(b);
    mb_pop(b);

    for (int j = 0; j < n; j++) {
        int d = n - 1 - j; /* the down block this up block mirrors */
        int64_t prev = j == 0 ? ch[n - 1] : ch[d + 1];
        mb_push(b, "up_blocks.%d.", j);
        int nl = c->layers_per_block[d] + 1;
        for (int l = 0; l < nl; l++) {
            col_node *s = skip[--top];
            int64_t cin = (l == 0 ? prev : ch[d]) + (s ? s->t.shape[1] : 0);
            col_node *cat[2] = {x, s};
            x = x && s ? col_concat(g, 2, cat, 1) : NULL;
            mb_push(b, "resnets.%d.", l);
            x = resnet(&u, x, cin, ch[d], 1.0f);
            mb_pop(b);
            if (c->up_cross_attn[j]) {
                mb_push(b, "attentions.%d.", l);
                x = transformer(&u, x, ch[d], c->heads[d], c->transformer_layers[d]);
                mb_pop(b);
            }
        }
        if (j < n - 1) {
            col_node *next = skip[top - 1]; /* the size the next block's skips have */
            x = next ? upsample(&u, x, ch[d], next->t.shape[2], next->t.shape[3]) : NULL;
        }
        mb_pop(b);
    }
    free(skip);

    x = col_silu(g, group_norm(&u, x, ch[0], c->norm_eps, "conv_norm_out"));
    x = conv(&u, x, ch[0], c->out_channels, c->conv_out_kernel, 1, (c->conv_out_kernel - 1) / 2, "conv_out");
    if (mb_builder_status(b, &why) != COL_OK)
        return NULL;
    return x;
}

col_status dm_unet_build(mb_builder *b, const dm_unet_config *c, int batch, int height, int width, int context_len,
                         dm_unet_io *io, col_err *err)
{
    memset(io, 0, sizeof *io);
    if (batch < 1 || height < 1 || width < 1 || context_len < 1)
        return col_err_set(err, COL_EINVAL, "UNet: batch %d, latent %dx%d and context length %d must be positive",
                           batch, height, width, context_len);
    col_graph *g = b->g;
    io->sample = col_input(g, "sample", COL_F32, 4, (int64_t[]){batch, c->in_channels, height, width});
    io->t_proj = col_input(g, "t_proj", COL_F32, 2, (int64_t[]){batch, c->block_out_channels[0]});
    io->context = col_input(g, "encoder_hidden_states", COL_F32, 3,
                            (int64_t[]){batch, context_len, c->cross_attention_dim});
    io->out = dm_unet(b, c, io->sample, io->t_proj, io->context);
    col_status st = mb_builder_status(b, err);
    if (st != COL_OK)
        return st;
    if (!io->out)
        return col_err_set(err, COL_EINTERNAL, "UNet: no output and no error");
    col_mark_output(io->out);
    return COL_OK;
}
