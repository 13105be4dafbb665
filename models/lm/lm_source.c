/* lm_source.c - opening the model a command line names (see lm_source.h). */
#include "lm_source.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "hf_config.h"
#include "lm_gguf.h"
#include "tok_gguf.h"
#include "textio.h"

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool exists_in(const char *dir, const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* the tokenizers in assets/tokenizers/ */
static const char *const bundled_names[] = {"gpt2", "llama2", "llama3", "bytes", "clip"};
#define NBUNDLED (sizeof bundled_names / sizeof bundled_names[0])

const char *col_bundled_tokenizer_names(char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < NBUNDLED && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s", i ? ", " : "", bundled_names[i]);
    return buf;
}

const char *col_bundled_tokenizer(const char *name, char *buf, size_t size)
{
    const char *const *names = bundled_names;
    static const char *const roots[] = {COL_ASSET_DIR "/tokenizers", COL_SRC_ASSET_DIR "/tokenizers"};
    for (size_t i = 0; i < NBUNDLED; i++) {
        if (strcmp(name, names[i]) != 0)
            continue;
        for (size_t r = 0; r < sizeof roots / sizeof roots[0]; r++) {
            snprintf(buf, size, "%s/%s", roots[r], name);
            if (access(buf, R_OK) == 0)
                return buf;
        }
        snprintf(buf, size, "%s/%s", roots[0], name);
        return buf;
    }
    return NULL;
}

/* the bundled tokenizer a preset architecture is trained with */
static const char *preset_tokenizer(const char *preset)
{
    if (strstr(preset, "-tiny") || strstr(preset, "-bytes"))
        return "bytes";
    if (strncmp(preset, "llama3", 6) == 0)
        return "llama3";
    if (strncmp(preset, "llama", 5) == 0)
        return "llama2";
    return "gpt2";
}

static col_status open_tokenizer(col_lm_source *s, const char *path, col_err *err)
{
    char buf[4096];
    const char *p = path;
    if (access(path, F_OK) != 0 && col_bundled_tokenizer(path, buf, sizeof buf))
        p = buf;
    else if (access(path, F_OK) != 0)
        return col_err_set_on(err, COL_SETTING_TOKENIZER, COL_EIO, "tokenizer %s not found: give a tokenizer directory "
                              "or file, or a bundled tokenizer (%s)", path, col_bundled_tokenizer_names(buf, sizeof buf));
    col_status st = col_tok_load(p, &s->tok, err);
    if (st != COL_OK)
        return st;
    snprintf(s->tok_dir, sizeof s->tok_dir, "%s", p);
    if (!is_dir(p)) { /* a tokenizer.json or vocab.json file: its directory */
        char *slash = strrchr(s->tok_dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(s->tok_dir, sizeof s->tok_dir, ".");
    }
    return COL_OK;
}

/* whether a tokenizer_config.json text holds a chat_template at all (not null) */
static bool has_chat_template(const char *json, size_t len)
{
    cJSON *root = cJSON_ParseWithLength(json, len);
    const cJSON *ct = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "chat_template") : NULL;
    bool has = ct && !cJSON_IsNull(ct);
    cJSON_Delete(root);
    return has;
}

/* the chat template family of tok_dir/tokenizer_config.json, if it names one */
static void detect_chat(col_lm_source *s)
{
    char path[4200], *json = NULL;
    size_t len = 0;
    col_err e = {0};
    snprintf(path, sizeof path, "%s/tokenizer_config.json", s->tok_dir);
    if (access(path, R_OK) != 0 || col_read_file(path, (size_t)64 << 20, &json, &len, &e) != COL_OK)
        return;
    s->has_chat = col_chat_detect(json, len, &s->chat, &e) == COL_OK;
    if (!s->has_chat && has_chat_template(json, len))
        snprintf(s->chat_unknown, sizeof s->chat_unknown, "%s", e.msg);
    free(json);
}

/* whether path is a regular file starting with GGUF's magic */
static bool is_gguf(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return false;
    FILE *f = fopen(path, "rb");
    char m[4] = {0};
    bool yes = f && fread(m, 1, 4, f) == 4 && memcmp(m, "GGUF", 4) == 0;
    if (f)
        fclose(f);
    return yes;
}

/* a GGUF file: its config, its tokenizer (unless one is given) and its chat template */
static col_status open_gguf(const char *model, const char *tokenizer, bool need_tokenizer, col_lm_source *out,
                            col_err *err)
{
    snprintf(out->dir, sizeof out->dir, "%s", model);
    col_status st = col_gguf_open(model, &out->gguf, err);
    if (st == COL_OK)
        st = col_lm_gguf_config(out->gguf, &out->config, err);
    if (st == COL_OK && tokenizer) {
        if ((st = open_tokenizer(out, tokenizer, err)) != COL_OK)
            col_err_add_setting(err, COL_SETTING_TOKENIZER);
    } else if (st == COL_OK && col_gguf_find_key(out->gguf, "tokenizer.ggml.model") >= 0) {
        st = col_tok_from_gguf(out->gguf, &out->tok, err);
    } else if (st == COL_OK && need_tokenizer) {
        st = col_err_set_on(err, COL_SETTING_TOKENIZER, COL_EIO, "%s carries no tokenizer (no tokenizer.ggml.model): "
                            "give one apart from the model", model);
    }
    const char *tmpl = NULL;
    size_t tlen = 0;
    col_err e = {0};
    if (st == COL_OK && out->tok && !tokenizer &&
        col_gguf_get_str(out->gguf, "tokenizer.chat_template", &tmpl, &tlen, &e) == COL_OK) {
        char *t = strndup(tmpl, tlen);
        if (t) {
            out->has_chat = col_chat_detect_template(t, &out->chat, &e) == COL_OK;
            if (!out->has_chat)
                snprintf(out->chat_unknown, sizeof out->chat_unknown, "%s", e.msg);
            free(t);
        }
    }
    if (st == COL_OK && out->tok && col_tok_vocab_size(out->tok) > out->config.vocab_size)
        st = col_err_set(err, COL_EFORMAT, "the tokenizer has %d ids but the model's vocabulary has %d: they do not "
                         "belong together", (int)col_tok_vocab_size(out->tok), out->config.vocab_size);
    if (st != COL_OK)
        col_lm_source_close(out);
    return st;
}

col_status col_lm_source_open(const char *model, const char *tokenizer, bool need_tokenizer, col_lm_source *out,
                              col_err *err)
{
    memset(out, 0, sizeof *out);
    col_status st = COL_OK;
    if (!model || !*model)
        return col_err_set(err, COL_EINVAL, "no model given");
    if (is_gguf(model))
        return open_gguf(model, tokenizer, need_tokenizer, out, err);
    if (access(model, F_OK) != 0 && !strchr(model, '/')) {
        /* not a path, not a hub id: a built-in architecture */
        if (col_lm_preset(model, &out->config, err) != COL_OK) {
            char list[512] = "";
            for (int i = 0; col_lm_preset_names[i]; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                         col_lm_preset_names[i]);
            return col_err_set(err, COL_EIO, "model '%s' is not a directory, a hub id (org/name) or a built-in "
                               "architecture (%s)", model, list);
        }
        snprintf(out->preset, sizeof out->preset, "%s", model);
    } else {
        if ((st = col_hf_resolve(model, out->dir, sizeof out->dir, err)) != COL_OK)
            return st;
        if ((st = col_hf_load_config(out->dir, &out->config, err)) != COL_OK ||
            (st = col_ckpt_open(out->dir, &out->weights, err)) != COL_OK) {
            col_lm_source_close(out);
            return st;
        }
    }
    if (out->dir[0] && exists_in(out->dir, "adapter_config.json") && exists_in(out->dir, "adapter_model.safetensors")) {
        char path[4200], *json = NULL;
        size_t len = 0;
        snprintf(path, sizeof path, "%s/adapter_config.json", out->dir);
        st = col_read_file(path, (size_t)1 << 20, &json, &len, err);
        if (st == COL_OK)
            st = col_lora_read_config_json(json, len, path, &out->config, &out->lora, err);
        free(json);
        out->has_adapter = st == COL_OK;
    }
    if (st != COL_OK)
        ;
    else if (tokenizer) {
        if ((st = open_tokenizer(out, tokenizer, err)) != COL_OK)
            col_err_add_setting(err, COL_SETTING_TOKENIZER);
    } else if (out->preset[0])
        st = open_tokenizer(out, preset_tokenizer(out->preset), err);
    else if (exists_in(out->dir, "tokenizer.json") || exists_in(out->dir, "vocab.json"))
        st = open_tokenizer(out, out->dir, err);
    else if (need_tokenizer)
        st = col_err_set_on(err, COL_SETTING_TOKENIZER, COL_EIO,
                            "%s has no tokenizer files (tokenizer.json, or vocab.json + merges.txt): copy them from "
                            "the base model or give a tokenizer apart from the model", out->dir);
    if (st == COL_OK && out->tok && col_tok_vocab_size(out->tok) > out->config.vocab_size) {
        st = col_err_set(err, COL_EFORMAT, "the tokenizer in %s has %d ids but the model's vocabulary has %d: they do "
                         "not belong together", out->tok_dir, (int)col_tok_vocab_size(out->tok),
                         out->config.vocab_size);
        if (tokenizer)
            col_err_add_setting(err, COL_SETTING_TOKENIZER);
    }
    if (st != COL_OK) {
        col_lm_source_close(out);
        return st;
    }
    if (out->tok)
        detect_chat(out);
    if (out->preset[0] && out->tok) { /* a preset's special ids are its tokenizer's */
        out->config.bos_id = col_tok_bos_id(out->tok);
        out->config.eos_id = col_tok_eos_id(out->tok);
    }
    return COL_OK;
}

void col_lm_source_close(col_lm_source *s)
{
    if (!s)
        return;
    col_ckpt_close(s->weights);
    col_gguf_close(s->gguf);
    col_tok_free(s->tok);
    s->gguf = NULL;
    s->weights = NULL;
    s->tok = NULL;
}

static bool same_dir(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

col_status col_lm_source_copy_tokenizer(const col_lm_source *s, const char *dir, col_err *err)
{
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "vocab.json",     "merges.txt",            "tokenizer.model"};
    if (!s->tok_dir[0] || same_dir(s->tok_dir, dir))
        return COL_OK;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char src[4200], dst[4200], *data = NULL;
        size_t len = 0;
        snprintf(src, sizeof src, "%s/%s", s->tok_dir, files[i]);
        if (access(src, F_OK) != 0)
            continue;
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        col_status st = col_read_file(src, (size_t)1 << 30, &data, &len, err);
        if (st == COL_OK)
            st = col_write_file_atomic(dst, data, len, err);
        free(data);
        if (st != COL_OK)
            return st;
    }
    return COL_OK;
}

/* obj[key] = the text of token id (when the tokenizer has it and obj has no key) */
static bool add_token_name(cJSON *obj, const char *key, const col_tokenizer *tok, int32_t id)
{
    size_t n = 0;
    const char *b = tok && id >= 0 ? col_tok_token_bytes(tok, id, &n) : NULL;
    if (!b || n == 0 || cJSON_HasObjectItem(obj, key))
        return true;
    char *name = strndup(b, n);
    bool ok = name && cJSON_AddStringToObject(obj, key, name);
    free(name);
    return ok;
}

/* dir/generation_config.json as transformers reads it for generate(): bos_token_id, and eos_token_id listing the
 * tokenizer's end of text and every stop string of family f that is one token of it (ChatML's <|im_end|>,
 * LLaMA-3's <|eot_id|>): a chat model's generate() then ends its reply where colossal-chat does, as the chat
 * models on the Hub have it. Nothing when the tokenizer has none of them. */
static col_status write_generation_config(const col_lm_source *s, const char *dir, col_chat_family f, col_err *err)
{
    int32_t eos[8];
    int n = 0;
    if (s->tok && col_tok_eos_id(s->tok) >= 0)
        eos[n++] = col_tok_eos_id(s->tok);
    const col_chat_family_info *fi = col_chat_info(f);
    for (int k = 0; s->tok && fi && fi->stop && fi->stop[k] && n < 8; k++) {
        int32_t *ids = NULL;
        size_t m = 0;
        if (col_tok_encode(s->tok, fi->stop[k], strlen(fi->stop[k]), false, &ids, &m, NULL) == COL_OK && m == 1) {
            bool have = false;
            for (int j = 0; j < n; j++)
                have = have || eos[j] == ids[0];
            if (!have)
                eos[n++] = ids[0];
        }
        free(ids);
    }
    if (n == 0)
        return COL_OK;
    cJSON *root = cJSON_CreateObject(), *list = cJSON_CreateArray();
    bool ok = root && list && cJSON_AddItemToObject(root, "eos_token_id", list);
    if (!ok)
        cJSON_Delete(list);
    for (int j = 0; ok && j < n; j++)
        ok = cJSON_AddItemToArray(list, cJSON_CreateNumber(eos[j]));
    if (ok && s->tok && col_tok_bos_id(s->tok) >= 0)
        ok = cJSON_AddNumberToObject(root, "bos_token_id", col_tok_bos_id(s->tok)) != NULL;
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return col_err_set(err, COL_ENOMEM, "out of memory writing %s/generation_config.json", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    col_status st = col_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}

col_status col_lm_source_write_chat_template(const col_lm_source *s, const char *dir, col_chat_family f,
                                             col_err *err)
{
    const char *tmpl = col_chat_jinja(f);
    if (!tmpl)
        return col_err_set(err, COL_EINVAL, "chat template: unknown family %d", (int)f);
    char path[4200], *json = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    cJSON *root = NULL;
    if (access(path, F_OK) == 0) {
        col_status st = col_read_file(path, (size_t)64 << 20, &json, &len, err);
        if (st != COL_OK)
            return st;
        root = cJSON_ParseWithLength(json, len);
        free(json);
        if (!cJSON_IsObject(root)) {
            cJSON_Delete(root);
            return col_err_set(err, COL_EFORMAT, "%s: not a JSON object: the chat template cannot be added to it",
                               path);
        }
    } else if ((root = cJSON_CreateObject()) && !cJSON_AddStringToObject(root, "tokenizer_class",
                                                                        "PreTrainedTokenizerFast")) {
        cJSON_Delete(root);
        root = NULL;
    }
    bool ok = root != NULL;
    if (ok) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "chat_template");
        ok = cJSON_AddStringToObject(root, "chat_template", tmpl) &&
             add_token_name(root, "bos_token", s->tok, s->tok ? col_tok_bos_id(s->tok) : -1) &&
             add_token_name(root, "eos_token", s->tok, s->tok ? col_tok_eos_id(s->tok) : -1);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return col_err_set(err, COL_ENOMEM, "out of memory writing %s", path);
    col_status st = col_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return st == COL_OK ? write_generation_config(s, dir, f, err) : st;
}
