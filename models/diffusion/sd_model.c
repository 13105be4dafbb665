/* sd_model.c - a diffusers folder's files. */
#include "sd_model.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf_cache.h"
#include "textio.h"

static const char *const comp_dir[SD_NCOMPONENTS] = {"unet", "vae", "text_encoder"};

const char *sd_component_name(sd_component c)
{
    return c >= 0 && c < SD_NCOMPONENTS ? comp_dir[c] : "?";
}

static bool is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* the first existing weight file of a component folder */
static bool find_weights(const char *dir, sd_component c, char *out, size_t n)
{
    static const char *const unet_names[] = {"diffusion_pytorch_model", NULL};
    static const char *const text_names[] = {"model", "pytorch_model", NULL};
    static const char *const suffixes[] = {".safetensors", ".safetensors.index.json", ".fp16.safetensors", ".bin",
                                           ".bin.index.json", ".fp16.bin", NULL};
    const char *const *names = c == SD_TEXT_ENCODER ? text_names : unet_names;
    char cand[SD_PATH_MAX];
    for (int s = 0; suffixes[s]; s++)
        for (int i = 0; names[i]; i++) {
            int k = snprintf(cand, sizeof cand, "%s/%s%s", dir, names[i], suffixes[s]);
            if (k > 0 && (size_t)k < sizeof cand && (size_t)k < n && is_file(cand)) {
                memcpy(out, cand, (size_t)k + 1);
                return true;
            }
        }
    return false;
}

static col_status path(char *out, size_t n, const char *a, const char *b, col_err *err)
{
    int k = snprintf(out, n, "%s/%s", a, b);
    if (k < 0 || (size_t)k >= n) return col_err_set(err, COL_EINVAL, "model path too long: %s/%s", a, b);
    return COL_OK;
}

col_status sd_model_locate(const char *model, sd_model_files *out, col_err *err)
{
    memset(out, 0, sizeof *out);
    if (is_file(model)) {
        if (strlen(model) >= sizeof out->single_file) return col_err_set(err, COL_EINVAL, "model path too long");
        snprintf(out->single_file, sizeof out->single_file, "%s", model);
        snprintf(out->pipeline, sizeof out->pipeline, "single-file checkpoint");
        return COL_OK;
    }
    col_status st = col_hf_resolve(model, out->dir, sizeof out->dir, err);
    if (st != COL_OK) return st;
    char index[SD_PATH_MAX + 32];
    snprintf(index, sizeof index, "%s/model_index.json", out->dir);
    if (!is_file(index)) {
        return col_err_set(err, COL_EIO,
                           "%s has no model_index.json: not a diffusers model folder (unet/, vae/, text_encoder/, "
                           "tokenizer/, scheduler/)",
                           out->dir);
    }
    char *json = NULL;
    size_t len = 0;
    if ((st = col_read_file(index, 1 << 20, &json, &len, err)) != COL_OK) return st;
    cJSON *root = cJSON_ParseWithLength(json, len);
    free(json);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return col_err_set(err, COL_EFORMAT, "%s is not a JSON object", index);
    }
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(root, "_class_name");
    snprintf(out->pipeline, sizeof out->pipeline, "%s", cJSON_IsString(cls) ? cls->valuestring : "");
    out->inpainting = strstr(out->pipeline, "Inpaint") != NULL;
    const char *need[] = {"unet", "vae", "text_encoder", "tokenizer", "scheduler"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, need[i]);
        if (!cJSON_IsArray(c) || cJSON_GetArraySize(c) != 2 || !cJSON_IsString(cJSON_GetArrayItem(c, 1))) {
            cJSON_Delete(root);
            if (strcmp(need[i], "text_encoder") == 0 && cJSON_GetObjectItemCaseSensitive(root, "text_encoder_2"))
                return col_err_set(err, COL_EUNSUPPORTED, "%s: SDXL-style pipelines are not supported yet", index);
            return col_err_set(err, COL_EFORMAT, "%s names no %s component (a pair like [\"diffusers\", \"Class\"])",
                               index, need[i]);
        }
    }
    const cJSON *sc = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "scheduler"), 1);
    snprintf(out->scheduler_class, sizeof out->scheduler_class, "%s", sc->valuestring);
    cJSON_Delete(root);
    for (int c = 0; c < SD_NCOMPONENTS; c++) {
        char dir[SD_PATH_MAX];
        if ((st = path(dir, sizeof dir, out->dir, comp_dir[c], err)) != COL_OK) return st;
        if (!is_dir(dir)) return col_err_set(err, COL_EIO, "the model has no %s folder (%s)", comp_dir[c], dir);
        if ((st = path(out->config[c], sizeof out->config[c], dir, "config.json", err)) != COL_OK) return st;
        if (!is_file(out->config[c])) return col_err_set(err, COL_EIO, "%s is missing", out->config[c]);
        if (!find_weights(dir, c, out->weights[c], sizeof out->weights[c]))
            return col_err_set(err, COL_EIO,
                               "%s holds no weights (%s.safetensors, .fp16.safetensors or .bin); download them with "
                               "the model",
                               dir, c == SD_TEXT_ENCODER ? "model" : "diffusion_pytorch_model");
    }
    if ((st = path(out->tokenizer, sizeof out->tokenizer, out->dir, "tokenizer", err)) != COL_OK) return st;
    if (!is_dir(out->tokenizer)) return col_err_set(err, COL_EIO, "the model has no tokenizer folder (%s)", out->tokenizer);
    if ((st = path(out->scheduler, sizeof out->scheduler, out->dir, "scheduler/scheduler_config.json", err)) != COL_OK)
        return st;
    if (!is_file(out->scheduler)) return col_err_set(err, COL_EIO, "%s is missing", out->scheduler);
    return COL_OK;
}
