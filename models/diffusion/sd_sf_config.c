/* sd_sf_config.c - the config.json texts of a diffusers folder, written for a
 * single-file checkpoint: the keys and the layout diffusers 0.42 and
 * transformers 5.23 write (sorted keys, two-space indent), the sizes found in
 * the file, the rest as the published SD 1.5 / 2.x-base / 2.x-v configs. */
#include "sd_sf_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIFFUSERS_VERSION "0.42.1"
#define TRANSFORMERS_VERSION "5.23.0"

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
    int items;     /* entries written at the top level */
} jbuf;

static void jb_add(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jb_add(jbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 2048) + (size_t)k;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* "key": then the value's text */
static void jb_key(jbuf *b, const char *key)
{
    jb_add(b, "%s\n  \"%s\": ", b->items++ ? "," : "{", key);
}

static void jb_raw(jbuf *b, const char *key, const char *raw)
{
    jb_key(b, key);
    jb_add(b, "%s", raw);
}

static void jb_str(jbuf *b, const char *key, const char *v)
{
    jb_key(b, key);
    jb_add(b, "\"%s\"", v);
}

static void jb_int(jbuf *b, const char *key, int v)
{
    jb_key(b, key);
    jb_add(b, "%d", v);
}

static void jb_bool(jbuf *b, const char *key, bool v)
{
    jb_raw(b, key, v ? "true" : "false");
}

static void jb_ints(jbuf *b, const char *key, const int *v, int n)
{
    jb_key(b, key);
    jb_add(b, "[");
    for (int i = 0; i < n; i++) jb_add(b, "%s\n    %d", i ? "," : "", v[i]);
    jb_add(b, "\n  ]");
}

static void jb_strs(jbuf *b, const char *key, const char *const *v, int n)
{
    jb_key(b, key);
    jb_add(b, "[");
    for (int i = 0; i < n; i++) jb_add(b, "%s\n    \"%s\"", i ? "," : "", v[i]);
    jb_add(b, "\n  ]");
}

static char *jb_end(jbuf *b)
{
    jb_add(b, "\n}\n");
    if (b->oom) {
        free(b->s);
        return NULL;
    }
    return b->s;
}

int sd_sf_groups(const int *ch, int n)
{
    int g = 0;
    for (int i = 0; i < n; i++) {
        int a = g, c = ch[i];
        while (c) {
            int t = a % c;
            a = c;
            c = t;
        }
        g = a;
    }
    for (int d = 32; d > 1; d--)
        if (g % d == 0) return d;
    return 1;
}

char *sd_sf_unet_config(const sf_unet_info *u, sd_family fam, bool big)
{
    jbuf b = {0};
    const char *down[SF_MAX_LEVELS], *up[SF_MAX_LEVELS];
    int heads[SF_MAX_LEVELS];
    for (int i = 0; i < u->levels; i++) {
        down[i] = u->attn_down[i] ? "CrossAttnDownBlock2D" : "DownBlock2D";
        up[i] = u->attn_up[i] ? "CrossAttnUpBlock2D" : "UpBlock2D";
        heads[i] = u->ch[i] / 64 > 1 ? u->ch[i] / 64 : 1;
    }
    jb_str(&b, "_class_name", "UNet2DConditionModel");
    jb_str(&b, "_diffusers_version", DIFFUSERS_VERSION);
    jb_str(&b, "act_fn", "silu");
    jb_raw(&b, "addition_embed_type", "null");
    jb_int(&b, "addition_embed_type_num_heads", 64);
    jb_raw(&b, "addition_time_embed_dim", "null");
    if (fam == SD_FAMILY_SD1)
        jb_int(&b, "attention_head_dim", 8);   /* diffusers' name for SD 1's 8 heads */
    else
        jb_ints(&b, "attention_head_dim", heads, u->levels);
    jb_str(&b, "attention_type", "default");
    jb_ints(&b, "block_out_channels", u->ch, u->levels);
    jb_bool(&b, "center_input_sample", false);
    jb_raw(&b, "class_embed_type", "null");
    jb_bool(&b, "class_embeddings_concat", false);
    jb_int(&b, "conv_in_kernel", u->conv_in_kernel);
    jb_int(&b, "conv_out_kernel", u->conv_out_kernel);
    jb_int(&b, "cross_attention_dim", u->cross_dim);
    jb_raw(&b, "cross_attention_norm", "null");
    jb_strs(&b, "down_block_types", down, u->levels);
    jb_int(&b, "downsample_padding", 1);
    jb_raw(&b, "dropout", "0.0");
    jb_bool(&b, "dual_cross_attention", false);
    jb_raw(&b, "encoder_hid_dim", "null");
    jb_raw(&b, "encoder_hid_dim_type", "null");
    jb_bool(&b, "flip_sin_to_cos", true);
    jb_int(&b, "freq_shift", 0);
    jb_int(&b, "in_channels", u->in_ch);
    jb_int(&b, "layers_per_block", u->lpb);
    jb_raw(&b, "mid_block_only_cross_attention", "null");
    jb_int(&b, "mid_block_scale_factor", 1);
    jb_str(&b, "mid_block_type", "UNetMidBlock2DCrossAttn");
    jb_raw(&b, "norm_eps", "1e-05");
    jb_int(&b, "norm_num_groups", sd_sf_groups(u->ch, u->levels));
    jb_raw(&b, "num_attention_heads", "null");
    jb_raw(&b, "num_class_embeds", "null");
    jb_bool(&b, "only_cross_attention", false);
    jb_int(&b, "out_channels", u->out_ch);
    jb_raw(&b, "projection_class_embeddings_input_dim", "null");
    jb_raw(&b, "resnet_out_scale_factor", "1.0");
    jb_bool(&b, "resnet_skip_time_act", false);
    jb_str(&b, "resnet_time_scale_shift", "default");
    jb_raw(&b, "reverse_transformer_layers_per_block", "null");
    jb_int(&b, "sample_size", big ? 96 : 64);
    jb_raw(&b, "time_cond_proj_dim", "null");
    jb_raw(&b, "time_embedding_act_fn", "null");
    if (u->time_dim == 4 * u->ch[0])
        jb_raw(&b, "time_embedding_dim", "null");
    else
        jb_int(&b, "time_embedding_dim", u->time_dim);
    jb_str(&b, "time_embedding_type", "positional");
    jb_raw(&b, "timestep_post_act", "null");
    jb_int(&b, "transformer_layers_per_block", u->depth);
    jb_strs(&b, "up_block_types", up, u->levels);
    jb_bool(&b, "upcast_attention", big);    /* SD 2.1-v's config asks for it (no effect in f32) */
    jb_bool(&b, "use_linear_projection", u->linear_proj);
    return jb_end(&b);
}

char *sd_sf_vae_config(const sf_vae_info *a, bool big)
{
    jbuf b = {0};
    const char *down[SF_MAX_LEVELS], *up[SF_MAX_LEVELS];
    for (int i = 0; i < a->levels; i++) {
        down[i] = "DownEncoderBlock2D";
        up[i] = "UpDecoderBlock2D";
    }
    jb_str(&b, "_class_name", "AutoencoderKL");
    jb_str(&b, "_diffusers_version", DIFFUSERS_VERSION);
    jb_str(&b, "act_fn", "silu");
    jb_ints(&b, "block_out_channels", a->ch, a->levels);
    jb_strs(&b, "down_block_types", down, a->levels);
    jb_bool(&b, "force_upcast", true);
    jb_int(&b, "in_channels", a->in_ch);
    jb_int(&b, "latent_channels", a->latent);
    jb_raw(&b, "latents_mean", "null");
    jb_raw(&b, "latents_std", "null");
    jb_int(&b, "layers_per_block", a->lpb);
    jb_bool(&b, "mid_block_add_attention", a->mid_attn);
    jb_int(&b, "norm_num_groups", sd_sf_groups(a->ch, a->levels));
    jb_int(&b, "out_channels", a->out_ch);
    jb_int(&b, "sample_size", big ? 768 : 512);
    jb_raw(&b, "scaling_factor", "0.18215");
    jb_raw(&b, "shift_factor", "null");
    jb_strs(&b, "up_block_types", up, a->levels);
    jb_bool(&b, "use_post_quant_conv", a->post_quant);
    jb_bool(&b, "use_quant_conv", a->quant);
    return jb_end(&b);
}

char *sd_sf_text_config(const sf_text_info *t, sd_family fam)
{
    jbuf b = {0};
    static const char *const arch[] = {"CLIPTextModel"};
    jb_strs(&b, "architectures", arch, 1);
    jb_raw(&b, "attention_dropout", "0.0");
    jb_int(&b, "bos_token_id", 0);
    jb_str(&b, "dtype", "float32");
    jb_int(&b, "eos_token_id", 2);
    jb_str(&b, "hidden_act", fam == SD_FAMILY_SD1 ? "quick_gelu" : "gelu");
    jb_int(&b, "hidden_size", t->hidden);
    jb_raw(&b, "initializer_factor", "1.0");
    jb_raw(&b, "initializer_range", "0.02");
    jb_int(&b, "intermediate_size", t->ff);
    jb_raw(&b, "layer_norm_eps", "1e-05");
    jb_int(&b, "max_position_embeddings", t->positions);
    jb_str(&b, "model_type", "clip_text_model");
    jb_int(&b, "num_attention_heads", t->hidden / 64 > 1 ? t->hidden / 64 : 1);
    jb_int(&b, "num_hidden_layers", t->layers);
    jb_int(&b, "pad_token_id", 1);
    jb_int(&b, "projection_dim", fam == SD_FAMILY_SD1 ? 768 : 512);
    jb_str(&b, "transformers_version", TRANSFORMERS_VERSION);
    jb_int(&b, "vocab_size", t->vocab);
    return jb_end(&b);
}

char *sd_sf_scheduler_config(bool v)
{
    jbuf b = {0};
    jb_str(&b, "_class_name", v ? "DDIMScheduler" : "PNDMScheduler");
    jb_str(&b, "_diffusers_version", DIFFUSERS_VERSION);
    jb_raw(&b, "beta_end", "0.012");
    jb_str(&b, "beta_schedule", "scaled_linear");
    jb_raw(&b, "beta_start", "0.00085");
    jb_bool(&b, "clip_sample", false);
    if (v) {
        jb_raw(&b, "clip_sample_range", "1.0");
        jb_raw(&b, "dynamic_thresholding_ratio", "0.995");
    }
    jb_int(&b, "num_train_timesteps", 1000);
    jb_str(&b, "prediction_type", v ? "v_prediction" : "epsilon");
    if (v) {
        jb_bool(&b, "rescale_betas_zero_snr", false);
        jb_raw(&b, "sample_max_value", "1.0");
    }
    jb_bool(&b, "set_alpha_to_one", false);
    jb_bool(&b, "skip_prk_steps", true);
    jb_int(&b, "steps_offset", 1);
    if (v) jb_bool(&b, "thresholding", false);
    jb_str(&b, "timestep_spacing", "leading");
    jb_raw(&b, "trained_betas", "null");
    return jb_end(&b);
}
