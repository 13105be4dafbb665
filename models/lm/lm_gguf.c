/* lm_gguf.c - a GGUF file as a model (lm_gguf.h): config, tensor names, dequantization. */
#include "lm_gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h"

/* ---- the config ---- */

typedef struct {
    const col_gguf *g;
    const char *arch; /* the key prefix: "llama" or "gpt2" */
    col_err *err;
} meta;

/* arch.key as an integer in [lo, hi]; absent: *v unchanged if !required */
static col_status meta_int(meta *m, const char *key, int64_t lo, int64_t hi, bool required, int *v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", m->arch, key);
    if (col_gguf_find_key(m->g, k) < 0) {
        if (!required)
            return COL_OK;
        return col_err_set(m->err, COL_EFORMAT, "%s has no metadata \"%s\", which a %s model needs",
                           col_gguf_name(m->g), k, m->arch);
    }
    int64_t x;
    col_status st = col_gguf_get_int(m->g, k, &x, m->err);
    if (st != COL_OK)
        return st;
    if (x < lo || x > hi)
        return col_err_set(m->err, COL_EFORMAT, "%s: metadata \"%s\" is %lld, outside %lld..%lld", col_gguf_name(m->g),
                           k, (long long)x, (long long)lo, (long long)hi);
    *v = (int)x;
    return COL_OK;
}

static col_status meta_float(meta *m, const char *key, double lo, double hi, bool required, float *v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", m->arch, key);
    if (col_gguf_find_key(m->g, k) < 0) {
        if (!required)
            return COL_OK;
        return col_err_set(m->err, COL_EFORMAT, "%s has no metadata \"%s\", which a %s model needs",
                           col_gguf_name(m->g), k, m->arch);
    }
    double x;
    col_status st = col_gguf_get_num(m->g, k, &x, m->err);
    if (st != COL_OK)
        return st;
    if (!(x >= lo && x <= hi))
        return col_err_set(m->err, COL_EFORMAT, "%s: metadata \"%s\" is %g, outside [%g, %g]", col_gguf_name(m->g), k,
                           x, lo, hi);
    *v = (float)x;
    return COL_OK;
}

/* a token id of tokenizer.ggml.<key>, or -1 when absent or out of the vocabulary */
static int token_id(const col_gguf *g, const char *key, int vocab)
{
    char k[96];
    snprintf(k, sizeof k, "tokenizer.ggml.%s", key);
    int64_t v;
    col_err e = {0};
    if (col_gguf_find_key(g, k) < 0 || col_gguf_get_int(g, k, &v, &e) != COL_OK || v < 0 || v >= vocab)
        return -1;
    return (int)v;
}

/* the rows of a 2D tensor (PyTorch's first dim), or -1 when absent or not 2D */
static int64_t rows_of(const col_gguf *g, const char *name)
{
    const col_gguf_tensor *t = col_gguf_tensor_find(g, name);
    return t && t->n_dims == 2 ? t->ne[1] : -1;
}

/* LLaMA-3's frequency scaling, which the converter stores as factors per frequency (rope_freqs.weight):
 * the parameters of transformers' "llama3" rope that give them (factor: the largest; low 1, high 4 and
 * 8192 original positions, as every LLaMA 3.x has), checked against every factor. */
static col_status rope_freqs(const col_gguf *g, col_lm_config *c, col_err *err)
{
    const col_gguf_tensor *t = col_gguf_tensor_find(g, "rope_freqs.weight");
    if (!t)
        return COL_OK;
    int dims = c->rope.rotary_dims ? c->rope.rotary_dims : c->head_dim;
    if (t->type != COL_GGML_F32 || t->n_dims != 1 || t->ne[0] != dims / 2)
        return col_err_set(err, COL_EFORMAT, "%s: rope_freqs.weight must be %d f32 factors", col_gguf_name(g),
                           dims / 2);
    float f[4096];
    if (dims / 2 > 4096)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: %d rotary dims are too many", col_gguf_name(g), dims);
    memcpy(f, t->data, sizeof(float) * (size_t)(dims / 2));
    float factor = 1;
    for (int i = 0; i < dims / 2; i++)
        factor = f[i] > factor ? f[i] : factor;
    const double lo = 1, hi = 4, orig = 8192, pi = 3.14159265358979323846;
    for (int i = 0; i < dims / 2; i++) { /* transformers' _compute_llama3_parameters, per frequency */
        double freq = 1.0 / pow(c->rope.theta, 2.0 * i / dims), wavelen = 2 * pi / freq, want;
        if (wavelen < orig / hi)
            want = 1;
        else if (wavelen > orig / lo)
            want = factor;
        else {
            double s = (orig / wavelen - lo) / (hi - lo);
            want = 1 / ((1 - s) / factor + s);
        }
        if (fabs(want - f[i]) > 1e-4 * want)
            return col_err_set(err, COL_EUNSUPPORTED, "%s: rope_freqs.weight holds frequency factors that are not "
                               "LLaMA-3's (factor %g, low 1, high 4, 8192 positions): only that scaling is supported",
                               col_gguf_name(g), factor);
    }
    c->rope.llama3_factor = factor, c->rope.llama3_low_freq_factor = (float)lo;
    c->rope.llama3_high_freq_factor = (float)hi, c->rope.llama3_original_max_pos = (float)orig;
    return COL_OK;
}

#define TRY(x)                      \
    do {                            \
        col_status st_ = (x);       \
        if (st_ != COL_OK)          \
            return st_;             \
    } while (0)

col_status col_lm_gguf_config(const col_gguf *g, col_lm_config *out, col_err *err)
{
    const char *a;
    size_t alen;
    TRY(col_gguf_get_str(g, "general.architecture", &a, &alen, err));
    col_lm_config c = {.bos_id = -1, .eos_id = -1, .pad_id = -1, .pre_ln = true};
    meta m = {.g = g, .err = err};
    const int BIG = 1 << 24;
    if (alen == 5 && memcmp(a, "llama", 5) == 0) {
        m.arch = "llama";
        c.arch = COL_ARCH_LLAMA, c.act = COL_ACT_SILU, c.rope.theta = 10000.0f;
        int experts = 0;
        TRY(meta_int(&m, "expert_count", 0, BIG, false, &experts));
        if (experts > 0)
            return col_err_set(err, COL_EUNSUPPORTED, "%s: a mixture of %d experts is not supported", col_gguf_name(g),
                               experts);
        TRY(meta_int(&m, "context_length", 1, BIG, true, &c.max_positions));
        TRY(meta_int(&m, "embedding_length", 1, BIG, true, &c.hidden));
        TRY(meta_int(&m, "block_count", 1, 4096, true, &c.n_layer));
        TRY(meta_int(&m, "feed_forward_length", 1, BIG, true, &c.ffn));
        TRY(meta_int(&m, "attention.head_count", 1, 4096, true, &c.n_head));
        c.n_kv_head = c.n_head;
        TRY(meta_int(&m, "attention.head_count_kv", 1, 4096, false, &c.n_kv_head));
        c.head_dim = c.hidden / c.n_head;
        TRY(meta_int(&m, "attention.key_length", 1, 65536, false, &c.head_dim));
        int vlen = c.head_dim;
        TRY(meta_int(&m, "attention.value_length", 1, 65536, false, &vlen));
        if (vlen != c.head_dim)
            return col_err_set(err, COL_EUNSUPPORTED, "%s: key length %d and value length %d differ", col_gguf_name(g),
                               c.head_dim, vlen);
        TRY(meta_float(&m, "attention.layer_norm_rms_epsilon", 0, 1, true, &c.norm_eps));
        TRY(meta_float(&m, "rope.freq_base", 1, 1e12, false, &c.rope.theta));
        int rot = c.head_dim;
        TRY(meta_int(&m, "rope.dimension_count", 2, 65536, false, &rot));
        if (rot > c.head_dim || rot % 2)
            return col_err_set(err, COL_EFORMAT, "%s: llama.rope.dimension_count %d must be even and at most the head "
                               "size %d", col_gguf_name(g), rot, c.head_dim);
        c.rope.rotary_dims = rot == c.head_dim ? 0 : rot;
        const char *rs;
        size_t rslen;
        if (col_gguf_find_key(g, "llama.rope.scaling.type") >= 0 &&
            col_gguf_get_str(g, "llama.rope.scaling.type", &rs, &rslen, err) == COL_OK &&
            !(rslen == 4 && memcmp(rs, "none", 4) == 0))
            return col_err_set(err, COL_EUNSUPPORTED, "%s: rope scaling \"%.*s\" is not supported", col_gguf_name(g),
                               (int)(rslen > 40 ? 40 : rslen), rs);
        c.attn_bias = col_gguf_tensor_find(g, "blk.0.attn_q.bias") != NULL;
        c.mlp_bias = col_gguf_tensor_find(g, "blk.0.ffn_up.bias") != NULL;
    } else if (alen == 4 && memcmp(a, "gpt2", 4) == 0) {
        m.arch = "gpt2";
        c.arch = COL_ARCH_GPT2, c.act = COL_ACT_GELU_TANH;
        TRY(meta_int(&m, "context_length", 1, BIG, true, &c.max_positions));
        TRY(meta_int(&m, "embedding_length", 1, BIG, true, &c.hidden));
        TRY(meta_int(&m, "block_count", 1, 4096, true, &c.n_layer));
        TRY(meta_int(&m, "attention.head_count", 1, 4096, true, &c.n_head));
        c.ffn = 4 * c.hidden;
        TRY(meta_int(&m, "feed_forward_length", 1, BIG, false, &c.ffn));
        TRY(meta_float(&m, "attention.layer_norm_epsilon", 0, 1, true, &c.norm_eps));
        c.n_kv_head = c.n_head;
        c.head_dim = c.hidden / c.n_head;
        /* the converter writes 4 * n_embd whatever n_inner says: the MLP's own rows decide */
        int64_t f = rows_of(g, "blk.0.ffn_up.weight");
        if (f > 0 && f <= BIG)
            c.ffn = (int)f;
    } else
        return col_err_set(err, COL_EUNSUPPORTED, "%s: architecture \"%.*s\" is not supported (llama, gpt2)",
                           col_gguf_name(g), (int)(alen > 40 ? 40 : alen), a);
    /* the vocabulary: the metadata, the token list, the embedding's rows (which must agree) */
    int64_t vocab = rows_of(g, "token_embd.weight");
    if (vocab <= 0 || vocab > BIG)
        return col_err_set(err, COL_EFORMAT, "%s: token_embd.weight is missing or not a 2D tensor of at most 2^24 rows",
                           col_gguf_name(g));
    c.vocab_size = (int)vocab;
    int meta_vocab = c.vocab_size;
    TRY(meta_int(&m, "vocab_size", 1, BIG, false, &meta_vocab));
    if (meta_vocab != c.vocab_size)
        return col_err_set(err, COL_EFORMAT, "%s: %s.vocab_size %d differs from token_embd.weight's %d rows",
                           col_gguf_name(g), m.arch, meta_vocab, c.vocab_size);
    c.tie_embeddings = col_gguf_tensor_find(g, "output.weight") == NULL;
    c.bos_id = token_id(g, "bos_token_id", c.vocab_size);
    c.eos_id = token_id(g, "eos_token_id", c.vocab_size);
    c.pad_id = token_id(g, "padding_token_id", c.vocab_size);
    if (c.arch == COL_ARCH_LLAMA)
        TRY(rope_freqs(g, &c, err));
    col_err why = {0};
    if (col_lm_check_config(&c, &why) != COL_OK)
        return col_err_set(err, COL_EFORMAT, "%s: %s", col_gguf_name(g), why.msg);
    *out = c;
    return COL_OK;
}

/* ---- names ---- */

typedef struct {
    const char *hf, *gguf; /* suffixes after the layer prefix (or whole names when not per layer) */
    bool transposed;
    int perm;               /* 1: q (n_head), 2: k (n_kv_head) */
} name_map;

static const name_map llama_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight", false, 0},
    {"self_attn.q_proj.weight", "attn_q.weight", false, 1},   {"self_attn.q_proj.bias", "attn_q.bias", false, 1},
    {"self_attn.k_proj.weight", "attn_k.weight", false, 2},   {"self_attn.k_proj.bias", "attn_k.bias", false, 2},
    {"self_attn.v_proj.weight", "attn_v.weight", false, 0},   {"self_attn.v_proj.bias", "attn_v.bias", false, 0},
    {"self_attn.o_proj.weight", "attn_output.weight", false, 0}, {"self_attn.o_proj.bias", "attn_output.bias", false, 0},
    {"post_attention_layernorm.weight", "ffn_norm.weight", false, 0},
    {"mlp.gate_proj.weight", "ffn_gate.weight", false, 0},    {"mlp.gate_proj.bias", "ffn_gate.bias", false, 0},
    {"mlp.up_proj.weight", "ffn_up.weight", false, 0},        {"mlp.up_proj.bias", "ffn_up.bias", false, 0},
    {"mlp.down_proj.weight", "ffn_down.weight", false, 0},    {"mlp.down_proj.bias", "ffn_down.bias", false, 0},
};
static const name_map llama_top[] = {
    {"model.embed_tokens.weight", "token_embd.weight", false, 0},
    {"model.norm.weight", "output_norm.weight", false, 0},
    {"lm_head.weight", "output.weight", false, 0},
};
static const name_map gpt2_layer[] = {
    {"ln_1.weight", "attn_norm.weight", false, 0},       {"ln_1.bias", "attn_norm.bias", false, 0},
    {"attn.c_attn.weight", "attn_qkv.weight", true, 0},  {"attn.c_attn.bias", "attn_qkv.bias", false, 0},
    {"attn.c_proj.weight", "attn_output.weight", true, 0}, {"attn.c_proj.bias", "attn_output.bias", false, 0},
    {"ln_2.weight", "ffn_norm.weight", false, 0},        {"ln_2.bias", "ffn_norm.bias", false, 0},
    {"mlp.c_fc.weight", "ffn_up.weight", true, 0},       {"mlp.c_fc.bias", "ffn_up.bias", false, 0},
    {"mlp.c_proj.weight", "ffn_down.weight", true, 0},   {"mlp.c_proj.bias", "ffn_down.bias", false, 0},
};
static const name_map gpt2_top[] = {
    {"transformer.wte.weight", "token_embd.weight", false, 0},
    {"transformer.wpe.weight", "position_embd.weight", false, 0},
    {"transformer.ln_f.weight", "output_norm.weight", false, 0},
    {"transformer.ln_f.bias", "output_norm.bias", false, 0},
    {"lm_head.weight", "output.weight", false, 0},
};

/* the map entry of hf_name and its layer (-1: not per layer) */
static const name_map *lookup_name(col_arch arch, const char *hf_name, int *layer)
{
    const char *prefix = arch == COL_ARCH_LLAMA ? "model.layers." : arch == COL_ARCH_GPT2 ? "transformer.h." : NULL;
    if (!prefix)
        return NULL;
    const name_map *top = arch == COL_ARCH_LLAMA ? llama_top : gpt2_top;
    size_t ntop = arch == COL_ARCH_LLAMA ? sizeof llama_top / sizeof *top : sizeof gpt2_top / sizeof *top;
    const name_map *lay = arch == COL_ARCH_LLAMA ? llama_layer : gpt2_layer;
    size_t nlay = arch == COL_ARCH_LLAMA ? sizeof llama_layer / sizeof *lay : sizeof gpt2_layer / sizeof *lay;
    *layer = -1;
    for (size_t i = 0; i < ntop; i++)
        if (strcmp(hf_name, top[i].hf) == 0)
            return &top[i];
    size_t pl = strlen(prefix);
    if (strncmp(hf_name, prefix, pl) != 0)
        return NULL;
    char *end;
    long l = strtol(hf_name + pl, &end, 10);
    if (end == hf_name + pl || *end != '.' || l < 0 || l > 100000)
        return NULL;
    for (size_t i = 0; i < nlay; i++)
        if (strcmp(end + 1, lay[i].hf) == 0) {
            *layer = (int)l;
            return &lay[i];
        }
    return NULL;
}

bool col_lm_gguf_name(col_arch arch, const char *hf_name, char *out, size_t cap)
{
    int layer;
    const name_map *nm = lookup_name(arch, hf_name, &layer);
    if (!nm)
        return false;
    int n = layer < 0 ? snprintf(out, cap, "%s", nm->gguf) : snprintf(out, cap, "blk.%d.%s", layer, nm->gguf);
    return n > 0 && (size_t)n < cap;
}

int64_t col_lm_gguf_perm_row(int64_t r, int heads, int64_t rows)
{
    int64_t hd = rows / heads, half = hd / 2;
    int64_t h = r / hd, w = r % hd, j = w / half, i = w % half; /* the parameter's row h*hd + j*half + i */
    return h * hd + 2 * i + j;                                 /* is stored at h*hd + 2i + j */
}

col_status col_lm_gguf_find(const col_gguf *g, const col_lm_config *cfg, int index, col_lm_gguf_tensor *out,
                            col_err *err)
{
    int n = col_lm_param_count(cfg);
    if (index < 0 || index >= n)
        return col_err_set(err, COL_EINVAL, "parameter %d of %d does not exist", index, n);
    col_param_spec *specs = malloc(sizeof *specs * (size_t)n);
    if (!specs)
        return col_err_set(err, COL_ENOMEM, "out of memory for %d parameter specs", n);
    col_lm_param_specs(cfg, specs);
    col_param_spec s = specs[index];
    free(specs);
    int layer;
    const name_map *nm = lookup_name(cfg->arch, s.name, &layer);
    char gname[128];
    if (!nm || !col_lm_gguf_name(cfg->arch, s.name, gname, sizeof gname))
        return col_err_set(err, COL_EUNSUPPORTED, "%s: parameter %s has no GGUF tensor for %s models", col_gguf_name(g),
                           s.name, col_arch_name(cfg->arch));
    const col_gguf_tensor *t = col_gguf_tensor_find(g, gname);
    if (!t)
        return col_err_set(err, COL_EFORMAT, "%s has no tensor %s (the model's %s)", col_gguf_name(g), gname, s.name);
    const void *data;
    uint64_t nbytes;
    TRY(col_gguf_tensor_data(g, t, &data, &nbytes, err));
    /* the stored shape, PyTorch order, must be the parameter's (transposed for Conv1D) */
    int64_t want0 = nm->transposed ? s.shape[1] : s.shape[0], want1 = nm->transposed ? s.shape[0] : s.shape[1];
    bool ok = s.ndim == 1 ? t->n_dims == 1 && t->ne[0] == s.shape[0]
                          : t->n_dims == 2 && t->ne[1] == want0 && t->ne[0] == want1;
    if (!ok)
        return col_err_set(err, COL_EFORMAT, "%s: tensor %s has ne [%lld, %lld, %lld, %lld] (%d dims, innermost first), "
                           "not the %s [%lld%s%lld]%s the model's %s needs", col_gguf_name(g), gname,
                           (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], t->n_dims,
                           s.ndim == 1 ? "vector" : "matrix", (long long)want0, s.ndim == 1 ? "" : ", ",
                           s.ndim == 1 ? 0LL : (long long)want1, nm->transposed ? " (stored transposed)" : "", s.name);
    int heads = nm->perm == 1 ? cfg->n_head : nm->perm == 2 ? cfg->n_kv_head : 0;
    int64_t rows = s.ndim == 1 ? 1 : t->ne[1];
    if (heads && s.ndim == 1) /* a permuted bias: its elements are the rows */
        rows = t->ne[0];
    if (heads && (rows % heads || (rows / heads) % 2))
        return col_err_set(err, COL_EFORMAT, "%s: tensor %s has %lld rows, not an even number per each of %d heads",
                           col_gguf_name(g), gname, (long long)rows, heads);
    *out = (col_lm_gguf_tensor){.t = t, .data = data, .nbytes = nbytes, .rows = s.ndim == 1 ? 1 : t->ne[1],
                                .cols = t->ne[0], .row_bytes = col_ggml_row_bytes(t->type, t->ne[0]),
                                .transposed = nm->transposed, .row_perm_heads = heads};
    return COL_OK;
}

/* ---- dequantization (ggml's block layouts) ---- */

enum { QK = 32, QK_K = 256 };

static float f16_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return col_f16_to_f32(h);
}

/* Q4_K's 6-bit scale and min of sub-block j (ggml's get_scale_min_k4) */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

bool col_lm_gguf_can_dequantize(uint32_t type)
{
    switch (type) {
    case COL_GGML_F32: case COL_GGML_F16: case COL_GGML_BF16: case COL_GGML_Q8_0: case COL_GGML_Q4_0:
    case COL_GGML_Q4_K: case COL_GGML_Q6_K:
        return true;
    default:
        return false;
    }
}

col_status col_lm_gguf_dequantize(uint32_t type, const void *src, int64_t n, float *dst, col_err *err)
{
    const uint8_t *p = src;
    if (!col_lm_gguf_can_dequantize(type)) {
        const char *tn = col_ggml_type_name(type);
        return col_err_set(err, COL_EUNSUPPORTED, "ggml type %s%s%u cannot be dequantized here (F32, F16, BF16, Q8_0, "
                           "Q4_0, Q4_K, Q6_K)", tn ? tn : "", tn ? " = " : "", type);
    }
    if (n < 0 || (n > 0 && col_ggml_row_bytes(type, n) == 0))
        return col_err_set(err, COL_EINVAL, "%lld elements of %s are not whole blocks", (long long)n,
                           col_ggml_type_name(type));
    switch (type) {
    case COL_GGML_F32:
        memcpy(dst, p, (size_t)n * 4);
        break;
    case COL_GGML_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = f16_at(p + 2 * i);
        break;
    case COL_GGML_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = col_bf16_to_f32(h);
        }
        break;
    case COL_GGML_Q8_0: /* {f16 d; int8 q[32]} */
        for (int64_t b = 0; b < n / QK; b++, p += 34) {
            float d = f16_at(p);
            for (int j = 0; j < QK; j++)
                *dst++ = (float)(int8_t)p[2 + j] * d;
        }
        break;
    case COL_GGML_Q4_0: /* {f16 d; u8 q[16]}: low nibbles are elements 0..15, high ones 16..31, offset 8 */
        for (int64_t b = 0; b < n / QK; b++, p += 18, dst += QK) {
            float d = f16_at(p);
            for (int j = 0; j < QK / 2; j++) {
                dst[j] = (float)((p[2 + j] & 0xF) - 8) * d;
                dst[j + QK / 2] = (float)((p[2 + j] >> 4) - 8) * d;
            }
        }
        break;
    case COL_GGML_Q4_K: /* {f16 d, dmin; u8 scales[12]; u8 q[128]}: 8 sub-blocks of 32 with 6-bit scale and min */
        for (int64_t b = 0; b < n / QK_K; b++, p += 144) {
            float d = f16_at(p), dmin = f16_at(p + 2);
            const uint8_t *sc = p + 4, *q = p + 16;
            for (int j = 0, is = 0; j < QK_K; j += 64, q += 32, is += 2) {
                uint8_t s1, m1, s2, m2;
                scale_min_k4(is, sc, &s1, &m1);
                scale_min_k4(is + 1, sc, &s2, &m2);
                float d1 = d * s1, mm1 = dmin * m1, d2 = d * s2, mm2 = dmin * m2;
                for (int l = 0; l < 32; l++)
                    *dst++ = d1 * (float)(q[l] & 0xF) - mm1;
                for (int l = 0; l < 32; l++)
                    *dst++ = d2 * (float)(q[l] >> 4) - mm2;
            }
        }
        break;
    case COL_GGML_Q6_K: /* {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 6-bit values offset 32, 16 scales */
        for (int64_t b = 0; b < n / QK_K; b++, p += 210) {
            float d = f16_at(p + 208);
            const uint8_t *ql = p, *qh = p + 128;
            const int8_t *sc = (const int8_t *)(p + 192);
            for (int h = 0; h < QK_K; h += 128, dst += 128, ql += 64, qh += 32, sc += 8)
                for (int l = 0; l < 32; l++) {
                    int is = l / 16;
                    int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    dst[l] = d * (float)sc[is] * (float)q1;
                    dst[l + 32] = d * (float)sc[is + 2] * (float)q2;
                    dst[l + 64] = d * (float)sc[is + 4] * (float)q3;
                    dst[l + 96] = d * (float)sc[is + 6] * (float)q4;
                }
        }
        break;
    }
    return COL_OK;
}

col_status col_lm_gguf_read_f32(const col_gguf *g, const col_lm_config *cfg, int index, float *dst, col_err *err)
{
    col_lm_gguf_tensor t;
    TRY(col_lm_gguf_find(g, cfg, index, &t, err));
    int64_t numel = t.rows * t.cols;
    if (!t.transposed && !t.row_perm_heads)
        return col_lm_gguf_dequantize(t.t->type, t.data, numel, dst, err);
    float *tmp = malloc(sizeof *tmp * (size_t)(numel ? numel : 1));
    if (!tmp)
        return col_err_set(err, COL_ENOMEM, "out of memory reading %s (%lld values)", t.t->name, (long long)numel);
    col_status st = col_lm_gguf_dequantize(t.t->type, t.data, numel, tmp, err);
    if (st == COL_OK && t.transposed) /* stored [rows, cols]: the parameter is [cols, rows] */
        for (int64_t r = 0; r < t.rows; r++)
            for (int64_t c = 0; c < t.cols; c++)
                dst[c * t.rows + r] = tmp[r * t.cols + c];
    else if (st == COL_OK) { /* rows (a vector's elements) permuted per head */
        int64_t rows = t.rows == 1 ? t.cols : t.rows, cols = t.rows == 1 ? 1 : t.cols;
        for (int64_t r = 0; r < rows; r++)
            memcpy(dst + r * cols, tmp + col_lm_gguf_perm_row(r, t.row_perm_heads, rows) * cols,
                   sizeof *dst * (size_t)cols);
    }
    free(tmp);
    return st;
}
