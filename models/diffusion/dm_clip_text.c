/* dm_clip_text.c - the CLIP text encoder (transformers CLIPTextModel) as a graph. */
#include "dm_clip_text.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"

/* ---- the graph ---- */

static col_node *vec(mb_builder *b, int64_t n, const char *name)
{
    return mb_weight(b, 1, (int64_t[]){n}, "%s", name);
}

static col_node *linear(mb_builder *b, col_node *x, int64_t in, int64_t out, const char *name)
{
    col_node *w = mb_weight(b, 2, (int64_t[]){out, in}, "%s.weight", name);
    col_node *bias = mb_weight(b, 1, (int64_t[]){out}, "%s.bias", name);
    return col_linear(b->g, x, w, bias);
}

static col_node *layer_norm(mb_builder *b, const dm_clip_text_config *c, col_node *x, const char *name)
{
    char w[64], bb[64];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(bb, sizeof bb, "%s.bias", name);
    col_node *wn = vec(b, c->hidden, w); /* weight, then bias: parameters in a fixed order */
    col_node *bn = vec(b, c->hidden, bb);
    return col_layernorm(b->g, x, wn, bn, c->ln_eps);
}

static col_node *activation(col_graph *g, dm_clip_act act, col_node *x)
{
    switch (act) {
    case DM_CLIP_QUICK_GELU: return col_mul(g, x, col_sigmoid(g, col_scale(g, x, 1.702f, 0.0f)));
    case DM_CLIP_GELU: return col_gelu(g, x);
    case DM_CLIP_GELU_TANH: return col_gelu_tanh(g, x);
    }
    return NULL;
}

/* one pre-LN layer: x + attn(ln1(x)), then + mlp(ln2(.)) */
static col_node *encoder_layer(mb_builder *b, const dm_clip_text_config *c, col_node *x, int64_t B, int64_t T)
{
    col_graph *g = b->g;
    int64_t C = c->hidden, H = c->heads, D = C / H;
    col_node *a = layer_norm(b, c, x, "layer_norm1");
    col_node *qkv[3];
    static const char *names[3] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"};
    for (int i = 0; i < 3; i++) {
        col_node *p = linear(b, a, C, C, names[i]);
        qkv[i] = col_transpose(g, col_reshape(g, p, 4, (int64_t[]){B, T, H, D}), 1, 2);
    }
    col_node *o = col_attention(g, qkv[0], qkv[1], qkv[2], 1, 1.0f / sqrtf((float)D));
    o = col_reshape(g, col_transpose(g, o, 1, 2), 3, (int64_t[]){B, T, C});
    x = col_add(g, x, linear(b, o, C, C, "self_attn.out_proj"));
    col_node *m = layer_norm(b, c, x, "layer_norm2");
    m = activation(g, c->act, linear(b, m, C, c->intermediate, "mlp.fc1"));
    return col_add(g, x, linear(b, m, c->intermediate, C, "mlp.fc2"));
}

col_status dm_clip_text_build(mb_builder *b, const dm_clip_text_config *c, col_node *ids, int clip_skip,
                              dm_clip_text_out *out)
{
    col_err e;
    memset(out, 0, sizeof *out);
    col_status st = dm_clip_text_check_config(c, &e);
    if (st != COL_OK) {
        mb_fail(b, st, "%s", e.msg);
        return mb_builder_status(b, &e);
    }
    if (!ids || ids->t.ndim != 2 || (ids->t.dtype != COL_I32 && ids->t.dtype != COL_I64))
        mb_fail(b, COL_ESHAPE, "CLIP text encoder: the token ids must be an i32 or i64 [batch, tokens] tensor");
    else if (ids->t.shape[1] < 1 || ids->t.shape[1] > c->max_positions)
        mb_fail(b, COL_ESHAPE, "CLIP text encoder: %lld tokens, the model takes 1 to %d",
                (long long)ids->t.shape[1], c->max_positions);
    else if (clip_skip < 0 || clip_skip > c->layers)
        mb_fail(b, COL_EINVAL, "CLIP text encoder: clip skip %d is outside 0..%d (the number of layers)", clip_skip,
                c->layers);
    if (b->status != COL_OK)
        return b->status;
    col_graph *g = b->g;
    int64_t B = ids->t.shape[0], T = ids->t.shape[1], C = c->hidden;

    col_node *tok = mb_weight(b, 2, (int64_t[]){c->vocab_size, C}, "embeddings.token_embedding.weight");
    col_node *pos = mb_weight(b, 2, (int64_t[]){c->max_positions, C}, "embeddings.position_embedding.weight");
    col_node *x = col_add(g, col_embedding(g, tok, ids), col_embedding(g, pos, col_arange(g, NULL, T, 0)));
    col_node *kept = clip_skip == c->layers ? x : NULL;
    for (int l = 0; l < c->layers; l++) {
        mb_push(b, "encoder.layers.%d.", l);
        x = encoder_layer(b, c, x, B, T);
        mb_pop(b);
        if (l + 1 == c->layers - clip_skip)
            kept = x;
    }
    out->last_hidden = layer_norm(b, c, x, "final_layer_norm");
    if (clip_skip > 0)
        out->skipped = layer_norm(b, c, kept, "final_layer_norm");
    st = mb_builder_status(b, &e);
    if (st != COL_OK)
        memset(out, 0, sizeof *out);
    return st;
}
