#include "hf_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "textio.h"

/* ---- the model config ---- */

/* The families' names here and in their table entries (lm_family.h) are the
 * same (test_hf_models checks): reading config.json does not go through the
 * table, which carries the graph builders, so the parser links alone
 * (fuzz_config). */
const char *col_arch_name(col_arch a)
{
    switch (a) {
    case COL_ARCH_GPT2: return "gpt2";
    case COL_ARCH_OPT: return "opt";
    case COL_ARCH_LLAMA: return "llama";
    }
    return "?";
}

col_status col_lm_check_config(const col_lm_config *c, col_err *err)
{
    const char *a = col_arch_name(c->arch);
    if (c->vocab_size <= 0 || c->max_positions <= 0 || c->hidden <= 0 || c->n_layer <= 0 || c->n_head <= 0 ||
        c->ffn <= 0 || c->head_dim <= 0)
        return col_err_set(err, COL_EINVAL,
                           "%s config: vocab size, positions, hidden size, layers, heads, head_dim and MLP width must "
                           "all be positive",
                           a);
    if (c->arch != COL_ARCH_LLAMA && (c->hidden % c->n_head != 0 || c->head_dim != c->hidden / c->n_head))
        return col_err_set(err, COL_EINVAL, "%s config: hidden size %d is not n_head %d times head_dim %d", a, c->hidden,
                           c->n_head, c->head_dim);
    if (c->n_kv_head <= 0 || c->n_head % c->n_kv_head != 0)
        return col_err_set(err, COL_EINVAL, "%s config: %d attention heads are not a multiple of %d key/value heads", a,
                           c->n_head, c->n_kv_head);
    if (c->arch == COL_ARCH_LLAMA && (c->head_dim % 2 != 0))
        return col_err_set(err, COL_EINVAL, "%s config: head_dim %d must be even for rotary embeddings", a, c->head_dim);
    if (c->arch == COL_ARCH_OPT && c->word_embed_proj_dim <= 0)
        return col_err_set(err, COL_EINVAL, "%s config: word_embed_proj_dim must be positive", a);
    if (!(c->norm_eps > 0))
        return col_err_set(err, COL_EINVAL, "%s config: the norm epsilon must be positive", a);
    if (!(c->dropout >= 0 && c->dropout < 1))
        return col_err_set(err, COL_EINVAL, "%s config: dropout %g is outside [0, 1)", a, c->dropout);
    return COL_OK;
}

/* ---- JSON field helpers: absent fields keep their default ---- */

static col_status get_int(const cJSON *o, const char *key, int lo, int hi, int *v, const char *name, col_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x))
        return COL_OK;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < lo || x->valuedouble > hi)
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be an integer in %d..%d", name, key, lo, hi);
    *v = (int)x->valuedouble;
    return COL_OK;
}

static col_status get_float(const cJSON *o, const char *key, double lo, double hi, float *v, const char *name,
                            col_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x))
        return COL_OK;
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= lo && x->valuedouble <= hi))
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be a number in [%g, %g]", name, key, lo, hi);
    *v = (float)x->valuedouble;
    return COL_OK;
}

static col_status get_bool(const cJSON *o, const char *key, bool *v, const char *name, col_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x))
        return COL_OK;
    if (!cJSON_IsBool(x))
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be true or false", name, key);
    *v = cJSON_IsTrue(x);
    return COL_OK;
}

/* the first integer of a field that may be an int or a list (eos_token_id) */
static col_status get_token(const cJSON *o, const char *key, int *v, const char *name, col_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (x && cJSON_IsArray(x))
        x = cJSON_GetArrayItem(x, 0);
    if (!x || cJSON_IsNull(x))
        return COL_OK;
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 1e9)
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be a token id", name, key);
    *v = (int)x->valuedouble;
    return COL_OK;
}

static col_status get_act(const cJSON *o, const char *key, col_act *act, const char *name, col_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x))
        return COL_OK;
    const char *s = cJSON_GetStringValue(x);
    static const struct {
        const char *name;
        col_act act;
    } acts[] = {{"gelu_new", COL_ACT_GELU_TANH}, {"gelu_pytorch_tanh", COL_ACT_GELU_TANH}, {"gelu_fast", COL_ACT_GELU_TANH},
                {"gelu", COL_ACT_GELU},          {"relu", COL_ACT_RELU},               {"silu", COL_ACT_SILU},
                {"swish", COL_ACT_SILU}};
    for (size_t i = 0; s && i < sizeof acts / sizeof acts[0]; i++)
        if (strcmp(s, acts[i].name) == 0) {
            *act = acts[i].act;
            return COL_OK;
        }
    return col_err_set(err, COL_EUNSUPPORTED, "%s: activation \"%s\" is not supported (gelu_new, gelu, relu, silu)", name,
                       s ? s : "(not a string)");
}

#define TRY(call)                      \
    do {                               \
        col_status st_ = (call);       \
        if (st_ != COL_OK) {           \
            cJSON_Delete(root);        \
            return st_;                \
        }                              \
    } while (0)

col_status col_hf_parse_config(const char *json, size_t len, const char *name, col_lm_config *out, col_err *err)
{
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return col_err_set(err, COL_EFORMAT, "%s is not a JSON object", name);
    }
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "model_type"));
    col_lm_config c = {.n_kv_head = 0, .bos_id = -1, .eos_id = -1, .pad_id = -1, .norm_eps = 1e-5f, .pre_ln = true};
    const int BIG = 1 << 24;
    if (type && strcmp(type, "gpt2") == 0) {
        c.arch = COL_ARCH_GPT2;
        c.act = COL_ACT_GELU_TANH;
        c.tie_embeddings = true;
        c.vocab_size = 50257, c.max_positions = 1024, c.hidden = 768, c.n_layer = 12, c.n_head = 12;
        TRY(get_int(root, "vocab_size", 1, BIG, &c.vocab_size, name, err));
        TRY(get_int(root, "n_positions", 1, BIG, &c.max_positions, name, err));
        TRY(get_int(root, "n_embd", 1, BIG, &c.hidden, name, err));
        TRY(get_int(root, "n_layer", 1, 4096, &c.n_layer, name, err));
        TRY(get_int(root, "n_head", 1, 4096, &c.n_head, name, err));
        c.ffn = 4 * c.hidden;
        TRY(get_int(root, "n_inner", 1, BIG, &c.ffn, name, err));
        TRY(get_float(root, "layer_norm_epsilon", 0, 1, &c.norm_eps, name, err));
        TRY(get_act(root, "activation_function", &c.act, name, err));
        TRY(get_float(root, "resid_pdrop", 0, 0.99, &c.dropout, name, err));
        TRY(get_bool(root, "tie_word_embeddings", &c.tie_embeddings, name, err));
    } else if (type && strcmp(type, "opt") == 0) {
        c.arch = COL_ARCH_OPT;
        c.act = COL_ACT_RELU;
        c.tie_embeddings = true;
        c.vocab_size = 50272, c.max_positions = 2048, c.hidden = 768, c.n_layer = 12, c.n_head = 12, c.ffn = 3072;
        TRY(get_int(root, "vocab_size", 1, BIG, &c.vocab_size, name, err));
        TRY(get_int(root, "max_position_embeddings", 1, BIG, &c.max_positions, name, err));
        TRY(get_int(root, "hidden_size", 1, BIG, &c.hidden, name, err));
        TRY(get_int(root, "num_hidden_layers", 1, 4096, &c.n_layer, name, err));
        TRY(get_int(root, "num_attention_heads", 1, 4096, &c.n_head, name, err));
        TRY(get_int(root, "ffn_dim", 1, BIG, &c.ffn, name, err));
        c.word_embed_proj_dim = c.hidden;
        TRY(get_int(root, "word_embed_proj_dim", 1, BIG, &c.word_embed_proj_dim, name, err));
        TRY(get_bool(root, "do_layer_norm_before", &c.pre_ln, name, err));
        TRY(get_bool(root, "tie_word_embeddings", &c.tie_embeddings, name, err));
        TRY(get_act(root, "activation_function", &c.act, name, err));
        TRY(get_float(root, "dropout", 0, 0.99, &c.dropout, name, err));
        bool bias = true, affine = true;
        TRY(get_bool(root, "enable_bias", &bias, name, err));
        TRY(get_bool(root, "layer_norm_elementwise_affine", &affine, name, err));
        if (!bias || !affine) {
            cJSON_Delete(root);
            return col_err_set(err, COL_EUNSUPPORTED, "%s: OPT without biases or without norm weights is not supported",
                               name);
        }
    } else if (type && strcmp(type, "llama") == 0) {
        c.arch = COL_ARCH_LLAMA;
        c.act = COL_ACT_SILU;
        c.vocab_size = 32000, c.max_positions = 2048, c.hidden = 4096, c.n_layer = 32, c.n_head = 32, c.ffn = 11008;
        c.rope.theta = 10000.0f;
        TRY(get_int(root, "vocab_size", 1, BIG, &c.vocab_size, name, err));
        TRY(get_int(root, "max_position_embeddings", 1, BIG, &c.max_positions, name, err));
        TRY(get_int(root, "hidden_size", 1, BIG, &c.hidden, name, err));
        TRY(get_int(root, "num_hidden_layers", 1, 4096, &c.n_layer, name, err));
        TRY(get_int(root, "num_attention_heads", 1, 4096, &c.n_head, name, err));
        TRY(get_int(root, "num_key_value_heads", 1, 4096, &c.n_kv_head, name, err));
        TRY(get_int(root, "intermediate_size", 1, BIG, &c.ffn, name, err));
        TRY(get_int(root, "head_dim", 1, 65536, &c.head_dim, name, err));
        TRY(get_float(root, "rms_norm_eps", 0, 1, &c.norm_eps, name, err));
        TRY(get_float(root, "rope_theta", 1, 1e12, &c.rope.theta, name, err));
        TRY(get_bool(root, "tie_word_embeddings", &c.tie_embeddings, name, err));
        TRY(get_bool(root, "attention_bias", &c.attn_bias, name, err));
        TRY(get_bool(root, "mlp_bias", &c.mlp_bias, name, err));
        TRY(get_act(root, "hidden_act", &c.act, name, err));
        if (c.act != COL_ACT_SILU) {
            cJSON_Delete(root);
            return col_err_set(err, COL_EUNSUPPORTED, "%s: LLaMA with hidden_act other than silu is not supported", name);
        }
        float pr = 1.0f;
        TRY(get_float(root, "partial_rotary_factor", 0, 1, &pr, name, err));
        /* transformers 4.x: rope_theta + rope_scaling; 5.x: rope_parameters holding both */
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
        if (!rs || cJSON_IsNull(rs))
            rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
        if (rs && !cJSON_IsNull(rs)) {
            if (!cJSON_IsObject(rs)) {
                cJSON_Delete(root);
                return col_err_set(err, COL_EFORMAT, "%s: rope settings must be an object", name);
            }
            TRY(get_float(rs, "rope_theta", 1, 1e12, &c.rope.theta, name, err));
            const char *rt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rs, "rope_type"));
            if (!rt)
                rt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rs, "type"));
            if (rt && strcmp(rt, "llama3") == 0) {
                c.rope.llama3_factor = 8, c.rope.llama3_low_freq_factor = 1, c.rope.llama3_high_freq_factor = 4;
                c.rope.llama3_original_max_pos = 8192;
                TRY(get_float(rs, "factor", 1, 1e6, &c.rope.llama3_factor, name, err));
                TRY(get_float(rs, "low_freq_factor", 1e-6, 1e6, &c.rope.llama3_low_freq_factor, name, err));
                TRY(get_float(rs, "high_freq_factor", 1e-6, 1e6, &c.rope.llama3_high_freq_factor, name, err));
                TRY(get_float(rs, "original_max_position_embeddings", 1, 1e9, &c.rope.llama3_original_max_pos, name,
                              err));
            } else if (rt && strcmp(rt, "default") != 0) {
                col_err_set(err, COL_EUNSUPPORTED, "%s: rope type \"%s\" is not supported (default or llama3)", name, rt);
                cJSON_Delete(root);
                return COL_EUNSUPPORTED;
            }
        }
        if (!c.head_dim && c.n_head > 0)
            c.head_dim = c.hidden / c.n_head;
        c.rope.rotary_dims = (int)(pr * (float)c.head_dim);
        if (c.rope.rotary_dims == c.head_dim)
            c.rope.rotary_dims = 0;
    } else {
        col_err_set(err, COL_EUNSUPPORTED, "%s: model_type \"%s\" is not supported (gpt2, opt, llama)", name,
                    type ? type : "(missing)");
        cJSON_Delete(root);
        return COL_EUNSUPPORTED;
    }
    TRY(get_token(root, "bos_token_id", &c.bos_id, name, err));
    TRY(get_token(root, "eos_token_id", &c.eos_id, name, err));
    TRY(get_token(root, "pad_token_id", &c.pad_id, name, err));
    /* a value model: the first "architectures" entry is a *ForSequenceClassification class of one label */
    cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const char *cls = cJSON_IsArray(archs) ? cJSON_GetStringValue(cJSON_GetArrayItem(archs, 0)) : NULL;
    if (cls && strstr(cls, "ForSequenceClassification")) {
        cJSON *labels = cJSON_GetObjectItemCaseSensitive(root, "id2label");
        cJSON *nl = cJSON_GetObjectItemCaseSensitive(root, "num_labels");
        int n = cJSON_IsObject(labels) ? cJSON_GetArraySize(labels) : cJSON_IsNumber(nl) ? (int)nl->valuedouble : 2;
        if (n != 1) {
            col_err_set(err, COL_EUNSUPPORTED, "%s: %s with %d labels: only a value model of one label (a reward "
                        "model, num_labels 1) is supported", name, cls, n);
            cJSON_Delete(root);
            return COL_EUNSUPPORTED;
        }
        c.value_head = true;
    }
    cJSON_Delete(root);
    if (!c.n_kv_head)
        c.n_kv_head = c.n_head;
    if (!c.head_dim && c.n_head > 0)
        c.head_dim = c.hidden / c.n_head;
    col_err why = {0};
    if (col_lm_check_config(&c, &why) != COL_OK)
        return col_err_set(err, COL_EFORMAT, "%s: %s", name, why.msg);
    *out = c;
    return COL_OK;
}
#undef TRY

col_status col_hf_load_config(const char *dir, col_lm_config *out, col_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text;
    size_t len;
    col_status st = col_read_file(path, (size_t)16 << 20, &text, &len, err);
    if (st != COL_OK)
        return st;
    st = col_hf_parse_config(text, len, path, out, err);
    free(text);
    return st;
}

/* ---- writing ---- */

static const char *act_name(col_act a)
{
    switch (a) {
    case COL_ACT_GELU_TANH: return "gelu_new";
    case COL_ACT_GELU: return "gelu";
    case COL_ACT_RELU: return "relu";
    case COL_ACT_SILU: return "silu";
    }
    return "?";
}

/* the transformers class a config's "architectures" names */
static const char *arch_class(col_arch a, bool value_head)
{
    switch (a) {
    case COL_ARCH_GPT2: return value_head ? "GPT2ForSequenceClassification" : "GPT2LMHeadModel";
    case COL_ARCH_OPT: return value_head ? "OPTForSequenceClassification" : "OPTForCausalLM";
    case COL_ARCH_LLAMA: return value_head ? "LlamaForSequenceClassification" : "LlamaForCausalLM";
    }
    return "?";
}

col_status col_hf_config_json(const col_lm_config *c, char **json, col_err *err)
{
    *json = NULL;
    col_status st = col_lm_check_config(c, err);
    if (st != COL_OK)
        return st;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return col_err_set(err, COL_ENOMEM, "config.json: out of memory");
#define NUM(k, v) cJSON_AddNumberToObject(o, k, (double)(v))
#define BOOL(k, v) cJSON_AddBoolToObject(o, k, (v) ? 1 : 0)
#define STR(k, v) cJSON_AddStringToObject(o, k, v)
    STR("model_type", col_arch_name(c->arch));
    NUM("vocab_size", c->vocab_size);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "architectures"),
                         cJSON_CreateString(arch_class(c->arch, c->value_head)));
    if (c->value_head) { /* one label: the reward (AutoModelForSequenceClassification, num_labels 1) */
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "id2label"), "0", "LABEL_0");
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "label2id"), "LABEL_0", 0);
    }
    if (c->arch == COL_ARCH_GPT2) {
        NUM("n_positions", c->max_positions);
        NUM("n_ctx", c->max_positions);
        NUM("n_embd", c->hidden);
        NUM("n_layer", c->n_layer);
        NUM("n_head", c->n_head);
        NUM("n_inner", c->ffn);
        NUM("layer_norm_epsilon", c->norm_eps);
        STR("activation_function", act_name(c->act));
        NUM("resid_pdrop", c->dropout);
        NUM("embd_pdrop", c->dropout);
        NUM("attn_pdrop", 0);
    } else {
        /* the sizes OPT and LLaMA configs name alike */
        NUM("max_position_embeddings", c->max_positions);
        NUM("hidden_size", c->hidden);
        NUM("num_hidden_layers", c->n_layer);
        NUM("num_attention_heads", c->n_head);
    }
    if (c->arch == COL_ARCH_OPT) {
        NUM("ffn_dim", c->ffn);
        NUM("word_embed_proj_dim", c->word_embed_proj_dim);
        BOOL("do_layer_norm_before", c->pre_ln);
        STR("activation_function", act_name(c->act));
        NUM("dropout", c->dropout);
        NUM("attention_dropout", 0);
        BOOL("enable_bias", true);
    } else if (c->arch == COL_ARCH_LLAMA) {
        NUM("num_key_value_heads", c->n_kv_head);
        NUM("head_dim", c->head_dim);
        NUM("intermediate_size", c->ffn);
        NUM("rms_norm_eps", c->norm_eps);
        NUM("rope_theta", c->rope.theta);
        STR("hidden_act", "silu");
        BOOL("attention_bias", c->attn_bias);
        BOOL("mlp_bias", c->mlp_bias);
        if (c->rope.llama3_factor > 0) {
            cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");
            cJSON_AddStringToObject(rs, "rope_type", "llama3");
            cJSON_AddNumberToObject(rs, "factor", c->rope.llama3_factor);
            cJSON_AddNumberToObject(rs, "low_freq_factor", c->rope.llama3_low_freq_factor);
            cJSON_AddNumberToObject(rs, "high_freq_factor", c->rope.llama3_high_freq_factor);
            cJSON_AddNumberToObject(rs, "original_max_position_embeddings", c->rope.llama3_original_max_pos);
        }
        if (c->rope.rotary_dims && c->rope.rotary_dims != c->head_dim)
            NUM("partial_rotary_factor", (double)c->rope.rotary_dims / c->head_dim);
    }
    BOOL("tie_word_embeddings", c->tie_embeddings);
    if (c->bos_id >= 0)
        NUM("bos_token_id", c->bos_id);
    if (c->eos_id >= 0)
        NUM("eos_token_id", c->eos_id);
    if (c->pad_id >= 0)
        NUM("pad_token_id", c->pad_id);
    STR("torch_dtype", "float32");
#undef NUM
#undef BOOL
#undef STR
    *json = cJSON_Print(o);
    cJSON_Delete(o);
    if (!*json)
        return col_err_set(err, COL_ENOMEM, "config.json: out of memory");
    return COL_OK;
}

/* ---- presets ---- */

col_lm_config col_gpt2_config(int vocab, int positions, int hidden, int layers, int heads)
{
    col_lm_config c = {.arch = COL_ARCH_GPT2, .vocab_size = vocab, .max_positions = positions, .hidden = hidden,
                       .n_layer = layers, .n_head = heads, .n_kv_head = heads, .head_dim = heads ? hidden / heads : 0,
                       .ffn = 4 * hidden, .norm_eps = 1e-5f, .tie_embeddings = true, .act = COL_ACT_GELU_TANH,
                       .pre_ln = true, .word_embed_proj_dim = hidden, .bos_id = -1, .eos_id = -1, .pad_id = -1};
    return c;
}

static col_lm_config opt_config(int hidden, int layers, int heads, int proj, bool pre_ln)
{
    col_lm_config c = col_gpt2_config(50272, 2048, hidden, layers, heads);
    c.arch = COL_ARCH_OPT;
    c.act = COL_ACT_RELU;
    c.word_embed_proj_dim = proj;
    c.pre_ln = pre_ln;
    c.bos_id = 2, c.eos_id = 2, c.pad_id = 1;
    return c;
}

static col_lm_config llama_config(int vocab, int positions, int hidden, int layers, int heads, int kv, int ffn,
                                  float theta, bool llama3)
{
    col_lm_config c = col_gpt2_config(vocab, positions, hidden, layers, heads);
    c.arch = COL_ARCH_LLAMA;
    c.act = COL_ACT_SILU;
    c.n_kv_head = kv;
    c.ffn = ffn;
    c.tie_embeddings = false;
    c.rope.theta = theta;
    if (llama3) {
        c.rope.llama3_factor = 8, c.rope.llama3_low_freq_factor = 1, c.rope.llama3_high_freq_factor = 4;
        c.rope.llama3_original_max_pos = 8192;
    }
    c.bos_id = llama3 ? 128000 : 1, c.eos_id = llama3 ? 128001 : 2;
    return c;
}

const char *const col_lm_preset_names[] = {"gpt2",     "gpt2-medium",     "gpt2-large",      "gpt2-xl",    "opt-125m",
                                           "opt-350m", "opt-1.3b",        "llama-7b-shaped", "llama3-8b-shaped",
                                           "llama-1b-shaped", "gpt2-tiny", "llama-tiny", "gpt2-bytes", NULL};

col_status col_lm_preset(const char *name, col_lm_config *out, col_err *err)
{
    if (strcmp(name, "gpt2") == 0) *out = col_gpt2_config(50257, 1024, 768, 12, 12);
    else if (strcmp(name, "gpt2-medium") == 0) *out = col_gpt2_config(50257, 1024, 1024, 24, 16);
    else if (strcmp(name, "gpt2-large") == 0) *out = col_gpt2_config(50257, 1024, 1280, 36, 20);
    else if (strcmp(name, "gpt2-xl") == 0) *out = col_gpt2_config(50257, 1024, 1600, 48, 25);
    else if (strcmp(name, "opt-125m") == 0) *out = opt_config(768, 12, 12, 768, true);
    else if (strcmp(name, "opt-350m") == 0) *out = opt_config(1024, 24, 16, 512, false);
    else if (strcmp(name, "opt-1.3b") == 0) *out = opt_config(2048, 24, 32, 2048, true);
    else if (strcmp(name, "llama-7b-shaped") == 0) *out = llama_config(32000, 4096, 4096, 32, 32, 32, 11008, 1e4f, false);
    else if (strcmp(name, "llama3-8b-shaped") == 0) *out = llama_config(128256, 8192, 4096, 32, 32, 8, 14336, 5e5f, true);
    else if (strcmp(name, "llama-1b-shaped") == 0) *out = llama_config(32000, 2048, 2048, 16, 32, 8, 5632, 1e4f, false);
    else if (strcmp(name, "gpt2-tiny") == 0) *out = col_gpt2_config(257, 128, 64, 2, 4);
    else if (strcmp(name, "gpt2-bytes") == 0) *out = col_gpt2_config(257, 128, 192, 3, 6);
    else if (strcmp(name, "llama-tiny") == 0) *out = llama_config(257, 128, 64, 2, 4, 2, 128, 1e4f, false);
    else {
        char list[512] = "";
        for (int i = 0; col_lm_preset_names[i]; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", col_lm_preset_names[i]);
        return col_err_set(err, COL_EINVAL, "unknown architecture preset '%s' (known: %s)", name, list);
    }
    if (out->arch == COL_ARCH_OPT)
        out->ffn = 4 * out->hidden;
    return COL_OK;
}
