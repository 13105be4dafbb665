/* dm_vae_config.c - diffusers AutoencoderKL's config.json. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "dm_json.h"
#include "dm_vae.h"

dm_vae_config dm_vae_defaults(void)
{
    return (dm_vae_config){.in_channels = 3, .out_channels = 3, .latent_channels = 4, .n_blocks = 1,
                           .block_out = {64}, .layers_per_block = 1, .norm_groups = 32, .sample_size = 32,
                           .scaling_factor = 0.18215f, .force_upcast = true, .use_quant_conv = true,
                           .use_post_quant_conv = true, .mid_attention = true};
}

int dm_vae_downscale(const dm_vae_config *c)
{
    return 1 << (c->n_blocks - 1);
}

col_status dm_vae_check_config(const dm_vae_config *c, col_err *err)
{
    if (c->in_channels <= 0 || c->out_channels <= 0 || c->latent_channels <= 0 || c->layers_per_block <= 0 ||
        c->norm_groups <= 0)
        return col_err_set(err, COL_EINVAL,
                           "VAE config: channels, latent channels, layers per block and norm groups must be positive");
    if (c->n_blocks < 1 || c->n_blocks > DM_VAE_MAX_BLOCKS)
        return col_err_set(err, COL_EINVAL, "VAE config: %d blocks, 1 to %d are supported", c->n_blocks,
                           DM_VAE_MAX_BLOCKS);
    for (int i = 0; i < c->n_blocks; i++)
        if (c->block_out[i] <= 0 || c->block_out[i] % c->norm_groups != 0)
            return col_err_set(err, COL_EINVAL, "VAE config: block %d has %d channels, not a positive multiple of %d "
                               "norm groups", i, c->block_out[i], c->norm_groups);
    if (!(c->scaling_factor > 0))
        return col_err_set(err, COL_EINVAL, "VAE config: the scaling factor must be positive");
    return COL_OK;
}

bool dm_vae_legacy_attention(const col_ckpt *c, const char *prefix)
{
    char name[MB_NAME_MAX];
    static const char *where[2] = {"encoder", "decoder"};
    for (int i = 0; c && i < 2; i++) {
        snprintf(name, sizeof name, "%s%s.mid_block.attentions.0.query.weight", prefix ? prefix : "", where[i]);
        if (col_ckpt_find(c, name)) return true;
    }
    return false;
}

/* every entry of a block type list must be want */
static col_status block_types(const cJSON *root, const char *key, const char *want, int *n, const char *name,
                              col_err *err)
{
    const char *types[DM_VAE_MAX_BLOCKS];
    int cnt = -1;
    col_status st = dm_json_string_list(root, key, DM_VAE_MAX_BLOCKS, types, &cnt, name, err);
    if (st != COL_OK || cnt < 0) return st; /* absent: *n stays */
    for (int i = 0; i < cnt; i++)
        if (strcmp(types[i], want) != 0)
            return col_err_set(err, COL_EUNSUPPORTED, "%s: \"%s\"[%d] is \"%s\", only %s is supported", name, key, i,
                               types[i], want);
    *n = cnt;
    return COL_OK;
}

static col_status parse_fields(const cJSON *root, const char *name, dm_vae_config *c, col_err *err)
{
    const char *cls = NULL, *act = NULL;
    col_status st;
#define GET(call)                       \
    if ((st = (call)) != COL_OK) return st
    GET(dm_json_string(root, "_class_name", &cls, name, err));
    if (cls && strcmp(cls, "AutoencoderKL") != 0)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: _class_name \"%s\" is not AutoencoderKL", name, cls);
    GET(dm_json_int(root, "in_channels", 1, 64, &c->in_channels, name, err));
    GET(dm_json_int(root, "out_channels", 1, 64, &c->out_channels, name, err));
    GET(dm_json_int(root, "latent_channels", 1, 1024, &c->latent_channels, name, err));
    GET(dm_json_int(root, "layers_per_block", 1, 64, &c->layers_per_block, name, err));
    GET(dm_json_int(root, "norm_num_groups", 1, 1 << 16, &c->norm_groups, name, err));
    GET(dm_json_int(root, "sample_size", 1, 1 << 20, &c->sample_size, name, err));
    GET(dm_json_int_list(root, "block_out_channels", 1, 1 << 16, DM_VAE_MAX_BLOCKS, c->block_out, &c->n_blocks,
                         name, err));
    int nd = 1, nu = 1; /* diffusers' defaults: one block of each type */
    GET(block_types(root, "down_block_types", "DownEncoderBlock2D", &nd, name, err));
    GET(block_types(root, "up_block_types", "UpDecoderBlock2D", &nu, name, err));
    if (nd != c->n_blocks || nu != c->n_blocks)
        return col_err_set(err, COL_EFORMAT, "%s: %d down and %d up block types for %d block_out_channels", name, nd,
                           nu, c->n_blocks);
    GET(dm_json_string(root, "act_fn", &act, name, err));
    if (act && strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: act_fn \"%s\" is not supported (silu)", name, act);
    GET(dm_json_float(root, "scaling_factor", 1e-30, 1e30, &c->scaling_factor, name, err));
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(root, "shift_factor");
    if (sf && !cJSON_IsNull(sf)) {
        GET(dm_json_float(root, "shift_factor", -1e30, 1e30, &c->shift_factor, name, err));
        c->has_shift_factor = true;
    }
    GET(dm_json_bool(root, "force_upcast", &c->force_upcast, name, err));
    GET(dm_json_bool(root, "use_quant_conv", &c->use_quant_conv, name, err));
    GET(dm_json_bool(root, "use_post_quant_conv", &c->use_post_quant_conv, name, err));
    GET(dm_json_bool(root, "mid_block_add_attention", &c->mid_attention, name, err));
#undef GET
    col_err e;
    st = dm_vae_check_config(c, &e);
    if (st != COL_OK) return col_err_set(err, st, "%s: %s", name, e.msg);
    return COL_OK;
}

static col_status parse_root(cJSON *root, const char *name, dm_vae_config *out, col_err *err)
{
    dm_vae_config c = dm_vae_defaults();
    col_status st = parse_fields(root, name, &c, err);
    dm_json_free(root);
    if (st == COL_OK) *out = c;
    return st;
}

col_status dm_vae_parse_config(const char *json, size_t len, const char *name, dm_vae_config *c, col_err *err)
{
    cJSON *root;
    col_status st = dm_json_parse(json, len, name, &root, err);
    return st != COL_OK ? st : parse_root(root, name, c, err);
}

col_status dm_vae_load_config(const char *path, dm_vae_config *c, col_err *err)
{
    char file[4096];
    cJSON *root;
    col_status st = dm_json_load(path, file, sizeof file, &root, err);
    return st != COL_OK ? st : parse_root(root, file, c, err);
}
