/* dm_unet_config.c - UNet2DConditionModel's config.json, and the timestep projection. */
#include "dm_unet.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dm_json.h"
#include "textio.h"

/* ---- JSON fields: absent or null ones keep their default (dm_json.h for single values) ---- */

static const cJSON *field(const cJSON *o, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return x && !cJSON_IsNull(x) ? x : NULL;
}

static bool is_int(const cJSON *x, int lo, int hi)
{
    return cJSON_IsNumber(x) && x->valuedouble == floor(x->valuedouble) && x->valuedouble >= lo &&
           x->valuedouble <= hi;
}

/* an int for every block, or a list of n ints (n = -1: the list sets the count) */
static col_status get_ints(const cJSON *o, const char *key, int lo, int hi, int *n, int *v, const char *name,
                           col_err *err)
{
    const cJSON *x = field(o, key);
    if (!x)
        return COL_OK;
    if (cJSON_IsNumber(x) && *n >= 0) {
        if (!is_int(x, lo, hi))
            return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be an integer in %d..%d", name, key, lo, hi);
        for (int i = 0; i < *n; i++)
            v[i] = (int)x->valuedouble;
        return COL_OK;
    }
    int k = cJSON_IsArray(x) ? cJSON_GetArraySize(x) : -1;
    if (*n >= 0 && k != *n)
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be an integer or a list of %d integers (one per block)",
                           name, key, *n);
    if (k < 1 || k > DM_UNET_MAX_BLOCKS)
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be a list of 1 to %d integers", name, key,
                           DM_UNET_MAX_BLOCKS);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, x)
    {
        if (cJSON_IsArray(e))
            return col_err_set(err, COL_EUNSUPPORTED,
                               "%s: \"%s\" with a list per block (different counts per layer) is not supported", name,
                               key);
        if (!is_int(e, lo, hi))
            return col_err_set(err, COL_EFORMAT, "%s: \"%s\" entries must be integers in %d..%d", name, key, lo, hi);
        v[i++] = (int)e->valuedouble;
    }
    *n = k;
    return COL_OK;
}

/* a field that must be absent, null, false or the given string */
static col_status must_be(const cJSON *o, const char *key, const char *allowed, const char *why, const char *name,
                          col_err *err)
{
    const cJSON *x = field(o, key);
    if (!x || cJSON_IsFalse(x))
        return COL_OK;
    const char *s = cJSON_GetStringValue(x);
    if (allowed && s && strcmp(s, allowed) == 0)
        return COL_OK;
    char val[48];
    if (s)
        snprintf(val, sizeof val, "\"%.40s\"", s);
    else if (cJSON_IsNumber(x))
        snprintf(val, sizeof val, "%g", x->valuedouble);
    else
        snprintf(val, sizeof val, "%s", cJSON_IsTrue(x) ? "true" : "set");
    return col_err_set(err, COL_EUNSUPPORTED, "%s: \"%s\" %s is not supported%s", name, key, val, why ? why : "");
}

static col_status block_types(const cJSON *o, const char *key, const char *plain, const char *cross, int n, bool *attn,
                              const char *name, col_err *err)
{
    const cJSON *x = field(o, key);
    if (!x)
        return COL_OK; /* the default: set by the caller */
    if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != n)
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must list %d block types, one per block_out_channels entry",
                           name, key, n);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, x)
    {
        const char *s = cJSON_GetStringValue(e);
        if (s && strncmp(s, "UNetRes", 7) == 0) /* diffusers drops this prefix */
            s += 7;
        if (s && strcmp(s, plain) == 0)
            attn[i] = false;
        else if (s && strcmp(s, cross) == 0)
            attn[i] = true;
        else
            return col_err_set(err, COL_EUNSUPPORTED, "%s: %s entry \"%.60s\" is not supported (%s or %s)", name, key,
                               s ? s : "(not a string)", plain, cross);
        i++;
    }
    return COL_OK;
}

#define TRY(call)                \
    do {                         \
        col_status st_ = (call); \
        if (st_ != COL_OK) {     \
            cJSON_Delete(root);  \
            return st_;          \
        }                        \
    } while (0)

col_status dm_unet_parse_config(const char *json, size_t len, const char *name, dm_unet_config *out, col_err *err)
{
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return col_err_set(err, COL_EFORMAT, "%s is not a JSON object", name);
    }
    const char *cls = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "_class_name"));
    if (cls && strcmp(cls, "UNet2DConditionModel") != 0) {
        col_err_set(err, COL_EUNSUPPORTED, "%s: \"_class_name\" \"%.60s\" is not a UNet2DConditionModel", name, cls);
        cJSON_Delete(root);
        return COL_EUNSUPPORTED;
    }
    /* diffusers' defaults (SD 1.x's sizes) */
    dm_unet_config c = {.in_channels = 4, .out_channels = 4, .n_blocks = 4,
                        .block_out_channels = {320, 640, 1280, 1280},
                        .cross_attention_dim = 1280, .norm_num_groups = 32, .norm_eps = 1e-5f,
                        .flip_sin_to_cos = true, .freq_shift = 0, .mid_block_scale_factor = 1,
                        .downsample_padding = 1, .conv_in_kernel = 3, .conv_out_kernel = 3};
    const int BIG = 1 << 20;
    TRY(dm_json_int(root, "in_channels", 1, BIG, &c.in_channels, name, err));
    TRY(dm_json_int(root, "out_channels", 1, BIG, &c.out_channels, name, err));
    int n = -1;
    TRY(get_ints(root, "block_out_channels", 1, BIG, &n, c.block_out_channels, name, err));
    if (n > 0)
        c.n_blocks = n;
    n = c.n_blocks;
    for (int i = 0; i < n; i++) {
        c.layers_per_block[i] = 2, c.transformer_layers[i] = 1, c.heads[i] = 8;
        c.down_cross_attn[i] = i < n - 1; /* CrossAttnDownBlock2D x3, DownBlock2D */
        c.up_cross_attn[i] = i > 0;       /* UpBlock2D, CrossAttnUpBlock2D x3 */
    }
    TRY(get_ints(root, "layers_per_block", 1, 64, &n, c.layers_per_block, name, err));
    TRY(get_ints(root, "transformer_layers_per_block", 1, 64, &n, c.transformer_layers, name, err));
    if (field(root, "num_attention_heads"))
        TRY(col_err_set(err, COL_EUNSUPPORTED,
                        "%s: \"num_attention_heads\" is not supported (diffusers refuses it too: heads are given "
                        "as \"attention_head_dim\")",
                        name));
    TRY(get_ints(root, "attention_head_dim", 1, 4096, &n, c.heads, name, err));
    TRY(block_types(root, "down_block_types", "DownBlock2D", "CrossAttnDownBlock2D", n, c.down_cross_attn, name, err));
    TRY(block_types(root, "up_block_types", "UpBlock2D", "CrossAttnUpBlock2D", n, c.up_cross_attn, name, err));
    const char *mid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "mid_block_type"));
    const cJSON *midx = cJSON_GetObjectItemCaseSensitive(root, "mid_block_type");
    if (midx && (!mid || strcmp(mid, "UNetMidBlock2DCrossAttn") != 0))
        TRY(col_err_set(err, COL_EUNSUPPORTED, "%s: \"mid_block_type\" %s%.60s%s is not supported (UNetMidBlock2DCrossAttn)",
                        name, mid ? "\"" : "", mid ? mid : "null", mid ? "\"" : ""));
    /* cross_attention_dim: one int, or a list whose entries agree (one context for every block) */
    int cad[DM_UNET_MAX_BLOCKS] = {0};
    int nc = n;
    cad[0] = c.cross_attention_dim;
    TRY(get_ints(root, "cross_attention_dim", 1, BIG, &nc, cad, name, err));
    for (int i = 1; i < n; i++)
        if (field(root, "cross_attention_dim") && cad[i] != cad[0])
            TRY(col_err_set(err, COL_EUNSUPPORTED, "%s: a different \"cross_attention_dim\" per block is not supported",
                            name));
    c.cross_attention_dim = cad[0];
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "norm_num_groups");
    if (g && cJSON_IsNull(g))
        TRY(col_err_set(err, COL_EUNSUPPORTED, "%s: \"norm_num_groups\" null (no conv_norm_out) is not supported", name));
    TRY(dm_json_int(root, "norm_num_groups", 1, BIG, &c.norm_num_groups, name, err));
    TRY(dm_json_float(root, "norm_eps", 1e-12, 1, &c.norm_eps, name, err));
    TRY(dm_json_bool(root, "use_linear_projection", &c.use_linear_projection, name, err));
    TRY(dm_json_bool(root, "upcast_attention", &c.upcast_attention, name, err));
    TRY(dm_json_bool(root, "center_input_sample", &c.center_input_sample, name, err));
    TRY(dm_json_bool(root, "flip_sin_to_cos", &c.flip_sin_to_cos, name, err));
    TRY(dm_json_float(root, "freq_shift", -1e6, 1e6, &c.freq_shift, name, err));
    TRY(dm_json_float(root, "mid_block_scale_factor", 1e-6, 1e6, &c.mid_block_scale_factor, name, err));
    TRY(dm_json_int(root, "downsample_padding", 0, 1, &c.downsample_padding, name, err));
    TRY(dm_json_int(root, "conv_in_kernel", 1, 15, &c.conv_in_kernel, name, err));
    TRY(dm_json_int(root, "conv_out_kernel", 1, 15, &c.conv_out_kernel, name, err));
    c.time_embed_dim = 4 * c.block_out_channels[0];
    TRY(dm_json_int(root, "time_embedding_dim", 1, BIG, &c.time_embed_dim, name, err));
    int ns = 2;
    const cJSON *ss = field(root, "sample_size");
    if (ss && cJSON_IsNumber(ss)) {
        TRY(dm_json_int(root, "sample_size", 1, BIG, &c.sample_size[0], name, err));
        c.sample_size[1] = c.sample_size[0];
    } else if (ss) {
        TRY(get_ints(root, "sample_size", 1, BIG, &ns, c.sample_size, name, err));
    }
    /* what this builder does not make */
    static const char *sdxl = " (SDXL's added embeddings are not built yet)";
    const char *act = cJSON_GetStringValue(field(root, "act_fn"));
    if (field(root, "act_fn") && (!act || (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)))
        TRY(col_err_set(err, COL_EUNSUPPORTED, "%s: \"act_fn\" \"%.40s\" is not supported (silu only)", name,
                        act ? act : "(not a string)"));
    TRY(must_be(root, "time_embedding_type", "positional", " (positional only)", name, err));
    TRY(must_be(root, "time_embedding_act_fn", NULL, NULL, name, err));
    TRY(must_be(root, "timestep_post_act", NULL, NULL, name, err));
    TRY(must_be(root, "time_cond_proj_dim", NULL, " (LCM's timestep condition)", name, err));
    TRY(must_be(root, "class_embed_type", NULL, " (class embeddings)", name, err));
    TRY(must_be(root, "num_class_embeds", NULL, " (class embeddings)", name, err));
    TRY(must_be(root, "class_embeddings_concat", NULL, " (class embeddings)", name, err));
    TRY(must_be(root, "projection_class_embeddings_input_dim", NULL, sdxl, name, err));
    TRY(must_be(root, "addition_embed_type", NULL, sdxl, name, err));
    TRY(must_be(root, "addition_time_embed_dim", NULL, sdxl, name, err));
    TRY(must_be(root, "encoder_hid_dim", NULL, " (a projection of encoder_hidden_states)", name, err));
    TRY(must_be(root, "encoder_hid_dim_type", NULL, " (a projection of encoder_hidden_states)", name, err));
    TRY(must_be(root, "reverse_transformer_layers_per_block", NULL, NULL, name, err));
    TRY(must_be(root, "dual_cross_attention", NULL, NULL, name, err));
    TRY(must_be(root, "mid_block_only_cross_attention", NULL, NULL, name, err));
    TRY(must_be(root, "cross_attention_norm", NULL, NULL, name, err));
    TRY(must_be(root, "resnet_time_scale_shift", "default", " (default only)", name, err));
    TRY(must_be(root, "attention_type", "default", " (default only)", name, err));
    const cJSON *oca = field(root, "only_cross_attention");
    if (oca && cJSON_IsArray(oca)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, oca)
        {
            if (!cJSON_IsFalse(e))
                TRY(col_err_set(err, COL_EUNSUPPORTED, "%s: \"only_cross_attention\" is not supported", name));
        }
    } else {
        TRY(must_be(root, "only_cross_attention", NULL, NULL, name, err));
    }
    cJSON_Delete(root);
    col_err why = {0};
    if (dm_unet_check_config(&c, &why) != COL_OK)
        return col_err_set(err, why.code, "%s: %s", name, why.msg);
    *out = c;
    return COL_OK;
}
#undef TRY

col_status dm_unet_check_config(const dm_unet_config *c, col_err *err)
{
    int n = c->n_blocks;
    if (n < 1 || n > DM_UNET_MAX_BLOCKS)
        return col_err_set(err, COL_EINVAL, "UNet config: %d blocks (1..%d)", n, DM_UNET_MAX_BLOCKS);
    if (c->in_channels < 1 || c->out_channels < 1 || c->cross_attention_dim < 1 || c->time_embed_dim < 1 ||
        c->norm_num_groups < 1)
        return col_err_set(err, COL_EINVAL,
                           "UNet config: channels, cross_attention_dim, time_embedding_dim and norm_num_groups must be "
                           "positive");
    if (!(c->norm_eps > 0) || !(c->mid_block_scale_factor > 0))
        return col_err_set(err, COL_EINVAL, "UNet config: norm_eps and mid_block_scale_factor must be positive");
    if (c->conv_in_kernel % 2 == 0 || c->conv_out_kernel % 2 == 0 || c->conv_in_kernel < 1 || c->conv_out_kernel < 1)
        return col_err_set(err, COL_EUNSUPPORTED, "UNet config: conv_in_kernel %d / conv_out_kernel %d must be odd",
                           c->conv_in_kernel, c->conv_out_kernel);
    if (c->downsample_padding != 0 && c->downsample_padding != 1)
        return col_err_set(err, COL_EUNSUPPORTED, "UNet config: downsample_padding %d (0 or 1)", c->downsample_padding);
    int G = c->norm_num_groups;
    for (int i = 0; i < n; i++) {
        int ch = c->block_out_channels[i];
        if (ch < 1 || c->layers_per_block[i] < 1 || c->transformer_layers[i] < 1 || c->heads[i] < 1)
            return col_err_set(err, COL_EINVAL,
                               "UNet config: block %d needs positive channels, layers, transformer layers and heads", i);
        if (ch % G != 0)
            return col_err_set(err, COL_EINVAL, "UNet config: norm_num_groups %d does not divide block %d's %d channels",
                               G, i, ch);
        /* the heads of a block: down block i and up block n-1-i have heads[i] */
        bool attn = c->down_cross_attn[i] || c->up_cross_attn[n - 1 - i] || i == n - 1;
        if (attn && ch % c->heads[i] != 0)
            return col_err_set(err, COL_EINVAL,
                               "UNet config: block %d's %d channels are not a multiple of its %d attention heads "
                               "(\"attention_head_dim\" counts heads)",
                               i, ch, c->heads[i]);
    }
    /* the inputs of every resnet GroupNorm: the up blocks' concatenations */
    for (int j = 0; j < n; j++) {
        int d = n - 1 - j;
        int ch = c->block_out_channels[d], prev = j == 0 ? c->block_out_channels[n - 1] : c->block_out_channels[d + 1];
        int skip_last = c->block_out_channels[d > 0 ? d - 1 : 0];
        int nl = c->layers_per_block[d] + 1;
        for (int k = 0; k < nl; k++) {
            int in = (k == 0 ? prev : ch) + (k == nl - 1 ? skip_last : ch);
            if (in % G != 0)
                return col_err_set(err, COL_EINVAL,
                                   "UNet config: norm_num_groups %d does not divide up block %d's %d input channels", G,
                                   j, in);
        }
    }
    if (c->block_out_channels[0] < 2)
        return col_err_set(err, COL_EINVAL, "UNet config: block_out_channels[0] must be at least 2 (time projection)");
    return COL_OK;
}

col_status dm_unet_load_config(const char *path, dm_unet_config *out, col_err *err)
{
    char buf[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        int k = snprintf(buf, sizeof buf, "%s/config.json", path);
        if (k < 0 || (size_t)k >= sizeof buf)
            return col_err_set(err, COL_EINVAL, "UNet config path too long: %.200s...", path);
        path = buf;
    }
    char *text;
    size_t len;
    col_status s = col_read_file(path, (size_t)1 << 20, &text, &len, err);
    if (s != COL_OK)
        return s;
    s = dm_unet_parse_config(text, len, path, out, err);
    free(text);
    return s;
}

/* ---- the timestep projection ---- */

void dm_timestep_embedding(const float *t, int n, int dim, bool flip_sin_to_cos, float shift, float *out)
{
    int half = dim / 2;
    /* torch: exponent = -ln(10000) * arange(half) (f32), / (half - shift), exp, * t; each step rounds to f32 */
    const float neg_log = (float)-log(10000.0);
    float denom = (float)half - shift;
    for (int r = 0; r < n; r++) {
        float *o = out + (size_t)r * (size_t)dim;
        for (int k = 0; k < half; k++) {
            float e = (neg_log * (float)k) / denom;
            float a = t[r] * expf(e);
            float s = sinf(a), co = cosf(a);
            o[flip_sin_to_cos ? half + k : k] = s;
            o[flip_sin_to_cos ? k : half + k] = co;
        }
        if (dim % 2)
            o[dim - 1] = 0;
    }
}

void dm_unet_time_proj(const dm_unet_config *c, const float *t, int n, float *out)
{
    dm_timestep_embedding(t, n, c->block_out_channels[0], c->flip_sin_to_cos, c->freq_shift, out);
}
