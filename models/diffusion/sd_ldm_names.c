/* sd_ldm_names.c - LDM and kohya names of Stable Diffusion 1.x/2.x tensors in diffusers' words. */
#include "sd_ldm_names.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int put(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int put(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    return k >= 0 && (size_t)k < cap ? 0 : -1;
}

/* *p starts with lit: step over it */
static int eat(const char **p, const char *lit)
{
    size_t n = strlen(lit);
    if (strncmp(*p, lit, n)) return 0;
    *p += n;
    return 1;
}

/* a component of the path: lit, then the end or a '.' */
static int eat_part(const char **p, const char *lit)
{
    size_t n = strlen(lit);
    if (strncmp(*p, lit, n) || ((*p)[n] && (*p)[n] != '.')) return 0;
    *p += n;
    return 1;
}

/* a decimal number (at most 5 digits), then the end or a '.' */
static int eat_int(const char **p, int *v)
{
    const char *s = *p;
    int n = 0, k = 0;
    while (*s >= '0' && *s <= '9' && k < 6) n = n * 10 + (*s++ - '0'), k++;
    if (k == 0 || k > 5 || (*s && *s != '.')) return 0;
    *v = n;
    *p = s;
    return 1;
}

/* the remainder of a path: nothing, ".weight" or ".bias" */
static int is_leaf(const char *p)
{
    return !*p || !strcmp(p, ".weight") || !strcmp(p, ".bias");
}

/* after "X." with a number: step over the '.' that may follow */
static const char *dot(const char *p)
{
    return *p == '.' ? p + 1 : p;
}

/* ---- UNet ---- */

static const char *const RES_LDM[] = {"in_layers.0", "in_layers.2", "emb_layers.1", "out_layers.0", "out_layers.3",
                                      "skip_connection"};
static const char *const RES_DIF[] = {"norm1", "conv1", "time_emb_proj", "norm2", "conv2", "conv_shortcut"};

/* a resnet's sub-module and leaf; the diffusers name of the module, the leaf in *tail */
static const char *unet_resnet(const char *rest, const char **tail)
{
    for (size_t i = 0; i < sizeof RES_LDM / sizeof *RES_LDM; i++) {
        const char *p = rest;
        if (eat_part(&p, RES_LDM[i]) && is_leaf(p)) {
            *tail = p;
            return RES_DIF[i];
        }
    }
    return NULL;
}

/* a Transformer2DModel's names are diffusers' already: only checked */
static int unet_attention(const char *rest)
{
    static const char *const top[] = {"norm", "proj_in", "proj_out"};
    static const char *const blk[] = {"attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "attn2.to_q",
                                      "attn2.to_k", "attn2.to_v", "attn2.to_out.0", "norm1", "norm2", "norm3",
                                      "ff.net.0.proj", "ff.net.2"};
    const char *p = rest;
    for (size_t i = 0; i < sizeof top / sizeof *top; i++) {
        p = rest;
        if (eat_part(&p, top[i]) && is_leaf(p)) return 1;
    }
    int n;
    p = rest;
    if (!eat(&p, "transformer_blocks.") || !eat_int(&p, &n) || !eat(&p, ".")) return 0;
    for (size_t i = 0; i < sizeof blk / sizeof *blk; i++) {
        const char *q = p;
        if (eat_part(&q, blk[i]) && is_leaf(q)) return 1;
    }
    return 0;
}

int sd_ldm_unet_is_ldm(const char *name)
{
    return !strncmp(name, "input_blocks.", 13) || !strncmp(name, "middle_block.", 13) ||
           !strncmp(name, "output_blocks.", 14) || !strncmp(name, "time_embed.", 11) ||
           (!strncmp(name, "out.", 4) && name[4] >= '0' && name[4] <= '9');
}

int sd_ldm_unet_name(const char *s, int lpb, char *out, size_t cap)
{
    const char *p = s, *tail;
    int a, b;
    if (lpb < 1) return -1;
    if (eat(&p, "time_embed.")) {
        if (!eat_int(&p, &a) || (a != 0 && a != 2) || !is_leaf(p)) return -1;
        return put(out, cap, "time_embedding.linear_%d%s", a ? 2 : 1, p);
    }
    if (eat(&p, "out.")) {
        if (!eat_int(&p, &a) || (a != 0 && a != 2) || !is_leaf(p)) return -1;
        return put(out, cap, "%s%s", a ? "conv_out" : "conv_norm_out", p);
    }
    if (eat(&p, "middle_block.")) {
        if (!eat_int(&p, &a) || a > 2) return -1;
        const char *rest = dot(p);
        if (a == 1) return unet_attention(rest) ? put(out, cap, "mid_block.attentions.0.%s", rest) : -1;
        const char *m = unet_resnet(rest, &tail);
        return m ? put(out, cap, "mid_block.resnets.%d.%s%s", a / 2, m, tail) : -1;
    }
    int down = eat(&p, "input_blocks.");
    if (!down && !eat(&p, "output_blocks.")) return -1;
    if (!eat_int(&p, &a) || !eat(&p, ".") || !eat_int(&p, &b)) return -1;
    const char *rest = dot(p);
    if (down) {
        if (a == 0) return b == 0 && is_leaf(p) ? put(out, cap, "conv_in%s", p) : -1;
        int l = (a - 1) / (lpb + 1), j = (a - 1) % (lpb + 1);
        if (j == lpb) {
            p = rest;
            return b == 0 && eat_part(&p, "op") && is_leaf(p)
                       ? put(out, cap, "down_blocks.%d.downsamplers.0.conv%s", l, p) : -1;
        }
        if (b == 1) return unet_attention(rest) ? put(out, cap, "down_blocks.%d.attentions.%d.%s", l, j, rest) : -1;
        const char *m = b == 0 ? unet_resnet(rest, &tail) : NULL;
        return m ? put(out, cap, "down_blocks.%d.resnets.%d.%s%s", l, j, m, tail) : -1;
    }
    int i = a / (lpb + 1), j = a % (lpb + 1);
    if (b == 0) {
        const char *m = unet_resnet(rest, &tail);
        return m ? put(out, cap, "up_blocks.%d.resnets.%d.%s%s", i, j, m, tail) : -1;
    }
    const char *q = rest;
    if ((b == 1 || b == 2) && eat_part(&q, "conv"))
        return j == lpb && is_leaf(q) ? put(out, cap, "up_blocks.%d.upsamplers.0.conv%s", i, q) : -1;
    if (b == 1) return unet_attention(rest) ? put(out, cap, "up_blocks.%d.attentions.%d.%s", i, j, rest) : -1;
    return -1;
}

/* ---- VAE ---- */

static const char *vae_resnet(const char *rest, const char **tail)
{
    static const char *const ldm[] = {"norm1", "conv1", "norm2", "conv2", "nin_shortcut"};
    static const char *const dif[] = {"norm1", "conv1", "norm2", "conv2", "conv_shortcut"};
    for (size_t i = 0; i < sizeof ldm / sizeof *ldm; i++) {
        const char *p = rest;
        if (eat_part(&p, ldm[i]) && is_leaf(p)) {
            *tail = p;
            return dif[i];
        }
    }
    return NULL;
}

int sd_ldm_vae_name(const char *s, int levels, char *out, size_t cap, int *conv1x1)
{
    const char *p = s, *tail;
    int n, m;
    if (conv1x1) *conv1x1 = 0;
    if (eat_part(&p, "quant_conv") || eat_part(&p, "post_quant_conv")) return is_leaf(p) ? put(out, cap, "%s", s) : -1;
    const char *side = eat(&p, "encoder.") ? "encoder" : eat(&p, "decoder.") ? "decoder" : NULL;
    if (!side) return -1;
    const char *q = p;
    if (eat_part(&q, "conv_in") || eat_part(&q, "conv_out")) return is_leaf(q) ? put(out, cap, "%s", s) : -1;
    q = p;
    if (eat_part(&q, "norm_out")) return is_leaf(q) ? put(out, cap, "%s.conv_norm_out%s", side, q) : -1;
    if (eat(&p, "mid.")) {
        n = eat(&p, "block_1.") ? 0 : eat(&p, "block_2.") ? 1 : -1;
        if (n >= 0) {
            const char *r = vae_resnet(p, &tail);
            return r ? put(out, cap, "%s.mid_block.resnets.%d.%s%s", side, n, r, tail) : -1;
        }
        if (!eat(&p, "attn_1.")) return -1;
        static const char *const ldm[] = {"norm", "q", "k", "v", "proj_out"};
        static const char *const dif[] = {"group_norm", "to_q", "to_k", "to_v", "to_out.0"};
        for (int i = 0; i < 5; i++) {
            q = p;
            if (eat_part(&q, ldm[i]) && is_leaf(q)) {
                if (conv1x1) *conv1x1 = i > 0;
                return put(out, cap, "%s.mid_block.attentions.0.%s%s", side, dif[i], q);
            }
        }
        return -1;
    }
    int enc = side[0] == 'e';
    if (!eat(&p, enc ? "down." : "up.") || !eat_int(&p, &n) || !eat(&p, ".")) return -1;
    int blk = enc ? n : levels - 1 - n;
    if (n >= levels || blk < 0) return -1;
    const char *blocks = enc ? "down_blocks" : "up_blocks";
    q = p;
    if (eat(&q, enc ? "downsample.conv" : "upsample.conv") && is_leaf(q))
        return put(out, cap, "%s.%s.%d.%s.0.conv%s", side, blocks, blk, enc ? "downsamplers" : "upsamplers", q);
    if (!eat(&p, "block.") || !eat_int(&p, &m) || !eat(&p, ".")) return -1;
    const char *r = vae_resnet(p, &tail);
    return r ? put(out, cap, "%s.%s.%d.resnets.%d.%s%s", side, blocks, blk, m, r, tail) : -1;
}

/* ---- text encoders ---- */

int sd_openclip_name(const char *s, char *out, size_t cap, int *fused, int *layer)
{
    const char *p = s;
    int n;
    *fused = 0;
    *layer = -1;
    if (!strcmp(s, "text_projection") || !strcmp(s, "logit_scale") || !strcmp(s, "attn_mask")) return 1;
    if (!strcmp(s, "token_embedding.weight")) return put(out, cap, "embeddings.token_embedding.weight");
    if (!strcmp(s, "positional_embedding")) return put(out, cap, "embeddings.position_embedding.weight");
    if (eat_part(&p, "ln_final")) return *p && is_leaf(p) ? put(out, cap, "final_layer_norm%s", p) : -1;
    if (!eat(&p, "transformer.resblocks.") || !eat_int(&p, &n) || !eat(&p, ".")) return -1;
    *layer = n;
    if (!strcmp(p, "attn.in_proj_weight") || !strcmp(p, "attn.in_proj_bias")) {
        *fused = 1;
        return put(out, cap, "encoder.layers.%d.self_attn.q_proj.%s", n, p[13] == 'w' ? "weight" : "bias");
    }
    static const char *const ldm[] = {"ln_1", "ln_2", "attn.out_proj", "mlp.c_fc", "mlp.c_proj"};
    static const char *const dif[] = {"layer_norm1", "layer_norm2", "self_attn.out_proj", "mlp.fc1", "mlp.fc2"};
    for (int i = 0; i < 5; i++) {
        const char *q = p;
        if (eat_part(&q, ldm[i]) && *q && is_leaf(q)) return put(out, cap, "encoder.layers.%d.%s%s", n, dif[i], q);
    }
    return -1;
}

int sd_clip_name(const char *s, char *out, size_t cap)
{
    const char *p = s;
    int n;
    eat(&p, "text_model.");
    if (!strcmp(p, "embeddings.position_ids")) return 1;
    if (!strcmp(p, "embeddings.token_embedding.weight") || !strcmp(p, "embeddings.position_embedding.weight") ||
        !strcmp(p, "final_layer_norm.weight") || !strcmp(p, "final_layer_norm.bias"))
        return put(out, cap, "%s", p);
    const char *q = p;
    if (!eat(&q, "encoder.layers.") || !eat_int(&q, &n) || !eat(&q, ".")) return -1;
    static const char *const mods[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                       "self_attn.out_proj", "layer_norm1", "layer_norm2", "mlp.fc1", "mlp.fc2"};
    for (int i = 0; i < 8; i++) {
        const char *r = q;
        if (eat_part(&r, mods[i]) && *r && is_leaf(r)) return put(out, cap, "%s", p);
    }
    return -1;
}

/* ---- kohya ---- */

/* names holding underscores, as '_'-joined words */
static const char *const COMPOUND[] = {
    "down_blocks", "up_blocks", "mid_block", "input_blocks", "output_blocks", "middle_block", "transformer_blocks",
    "to_q", "to_k", "to_v", "to_out", "proj_in", "proj_out", "time_emb_proj", "conv_shortcut", "conv_in", "conv_out",
    "conv_norm_out", "time_embedding", "time_embed", "linear_1", "linear_2", "in_layers", "out_layers", "emb_layers",
    "skip_connection", "text_model", "self_attn", "q_proj", "k_proj", "v_proj", "out_proj", "layer_norm1",
    "layer_norm2", "final_layer_norm", "token_embedding", "position_embedding", "text_projection"};

int sd_kohya_dots(const char *kohya, char *out, size_t cap)
{
    char buf[512];
    const char *word[64];
    int nw = 0;
    if (snprintf(buf, sizeof buf, "%s", kohya) >= (int)sizeof buf || !*buf) return -1;
    for (char *s = buf;;) {
        if (nw == 64) return -1;
        word[nw++] = s;
        char *u = strchr(s, '_');
        if (!u) break;
        *u = '\0';
        s = u + 1;
    }
    size_t len = 0;
    for (int i = 0; i < nw;) {
        int best = 1;   /* words taken by the longest compound starting here */
        for (size_t c = 0; c < sizeof COMPOUND / sizeof *COMPOUND; c++) {
            const char *cp = COMPOUND[c];
            int k = 0;
            while (i + k < nw) {
                size_t wl = strlen(word[i + k]);
                if (strncmp(cp, word[i + k], wl) || (cp[wl] && cp[wl] != '_')) break;
                k++;
                cp += wl;
                if (!*cp) break;
                cp++;
            }
            if (!*cp && k > best) best = k;
        }
        for (int k = 0; k < best; k++) {
            const char *sep = k ? "_" : (len ? "." : "");
            int w = snprintf(out + len, cap > len ? cap - len : 0, "%s%s", sep, word[i + k]);
            if (w < 0 || len + (size_t)w >= cap) return -1;
            len += (size_t)w;
        }
        if (!*word[i]) return -1;   /* "__" or a trailing '_' */
        i += best;
    }
    return 0;
}
