/* dm_clip_text_config.c - transformers' CLIPTextConfig (text_encoder/config.json). */
#include <cjson/cJSON.h>
#include <string.h>

#include "dm_clip_text.h"
#include "dm_json.h"

dm_clip_text_config dm_clip_text_defaults(void)
{
    return (dm_clip_text_config){.vocab_size = 49408, .hidden = 512, .intermediate = 2048, .heads = 8, .layers = 12,
                                 .max_positions = 77, .act = DM_CLIP_QUICK_GELU, .ln_eps = 1e-5f,
                                 .projection_dim = 512};
}

col_status dm_clip_text_check_config(const dm_clip_text_config *c, col_err *err)
{
    if (c->vocab_size <= 0 || c->hidden <= 0 || c->intermediate <= 0 || c->heads <= 0 || c->layers <= 0 ||
        c->max_positions <= 0)
        return col_err_set(err, COL_EINVAL,
                           "CLIP text config: vocabulary, hidden size, MLP width, heads, layers and positions must all "
                           "be positive");
    if (c->hidden % c->heads != 0)
        return col_err_set(err, COL_EINVAL, "CLIP text config: hidden size %d is not a multiple of %d heads", c->hidden,
                           c->heads);
    if (!(c->ln_eps > 0))
        return col_err_set(err, COL_EINVAL, "CLIP text config: layer_norm_eps must be positive");
    return COL_OK;
}

#define TRY(call)                  \
    do {                           \
        col_status st_ = (call);   \
        if (st_ != COL_OK) {       \
            dm_json_free(root);    \
            return st_;            \
        }                          \
    } while (0)

static col_status parse_root(cJSON *root, const char *name, dm_clip_text_config *out, col_err *err)
{
    dm_clip_text_config c = dm_clip_text_defaults();
    const char *type = NULL, *act = NULL;
    const int BIG = 1 << 24;
    TRY(dm_json_string(root, "model_type", &type, name, err));
    if (type && strcmp(type, "clip_text_model") != 0) {
        col_status st = col_err_set(err, COL_EUNSUPPORTED,
                                    "%s: model_type \"%s\" is not a CLIP text encoder (clip_text_model)", name, type);
        dm_json_free(root);
        return st;
    }
    TRY(dm_json_int(root, "vocab_size", 1, BIG, &c.vocab_size, name, err));
    TRY(dm_json_int(root, "hidden_size", 1, 65536, &c.hidden, name, err));
    TRY(dm_json_int(root, "intermediate_size", 1, 1 << 20, &c.intermediate, name, err));
    TRY(dm_json_int(root, "num_attention_heads", 1, 4096, &c.heads, name, err));
    TRY(dm_json_int(root, "num_hidden_layers", 1, 1024, &c.layers, name, err));
    TRY(dm_json_int(root, "max_position_embeddings", 1, 1 << 20, &c.max_positions, name, err));
    TRY(dm_json_int(root, "projection_dim", 1, 65536, &c.projection_dim, name, err));
    TRY(dm_json_float(root, "layer_norm_eps", 1e-30, 1, &c.ln_eps, name, err));
    TRY(dm_json_string(root, "hidden_act", &act, name, err));
    if (act) {
        if (strcmp(act, "quick_gelu") == 0)
            c.act = DM_CLIP_QUICK_GELU;
        else if (strcmp(act, "gelu") == 0)
            c.act = DM_CLIP_GELU;
        else if (strcmp(act, "gelu_new") == 0 || strcmp(act, "gelu_pytorch_tanh") == 0)
            c.act = DM_CLIP_GELU_TANH;
        else {
            col_status st = col_err_set(err, COL_EUNSUPPORTED,
                                        "%s: hidden_act \"%s\" is not supported (quick_gelu, gelu, gelu_new, "
                                        "gelu_pytorch_tanh)",
                                        name, act);
            dm_json_free(root);
            return st;
        }
    }
    dm_json_free(root);
    col_err e;
    col_status st = dm_clip_text_check_config(&c, &e);
    if (st != COL_OK)
        return col_err_set(err, st, "%s: %s", name, e.msg);
    *out = c;
    return COL_OK;
}

col_status dm_clip_text_parse_config(const char *json, size_t len, const char *name, dm_clip_text_config *c,
                                     col_err *err)
{
    cJSON *root;
    col_status st = dm_json_parse(json, len, name, &root, err);
    return st != COL_OK ? st : parse_root(root, name, c, err);
}

col_status dm_clip_text_load_config(const char *path, dm_clip_text_config *c, col_err *err)
{
    char file[4096];
    cJSON *root;
    col_status st = dm_json_load(path, file, sizeof file, &root, err);
    return st != COL_OK ? st : parse_root(root, file, c, err);
}

const char *dm_clip_text_prefix(const col_ckpt *c)
{
    return c && col_ckpt_find(c, "text_model.embeddings.token_embedding.weight") ? "text_model." : "";
}
