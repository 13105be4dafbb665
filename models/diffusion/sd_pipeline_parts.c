/* sd_pipeline_parts.c - the pipeline's tokenizer and scheduler. */
#include <stdio.h>
#include <string.h>

#include "sd_pipeline_internal.h"

/* the CLIP tokenizer colossal carries (assets/tokenizers/clip), installed or in the source tree */
static col_status bundled_clip(char *dir, size_t n, col_err *err)
{
    static const char *const roots[] = {COL_ASSET_DIR "/tokenizers/clip", COL_SRC_ASSET_DIR "/tokenizers/clip"};
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
        char probe[4200];
        snprintf(probe, sizeof probe, "%s/vocab.json", roots[i]);
        FILE *f = fopen(probe, "rb");
        if (f) {
            fclose(f);
            snprintf(dir, n, "%s", roots[i]);
            return COL_OK;
        }
    }
    return col_err_set(err, COL_EIO, "the bundled CLIP tokenizer is missing (looked in %s and %s): reinstall colossal",
                       roots[0], roots[1]);
}

col_status sd_prompt_open(sd_pipeline *p, const char *dir, const char *pad, col_err *err)
{
    char bundled[4200];
    col_status st = COL_OK;
    if (!dir && (st = bundled_clip(bundled, sizeof bundled, err)) != COL_OK) return st;
    col_tokenizer *t = NULL;
    st = col_tok_load(dir ? dir : bundled, &t, err);
    if (st != COL_OK) return col_err_prefix(err, "the model's tokenizer");
    if (pad && (st = col_tok_set_pad(t, pad, err)) != COL_OK) {
        col_tok_free(t);
        return st;
    }
    int32_t ids = col_tok_vocab_size(t);
    if (ids > p->text.vocab_size) {
        col_tok_free(t);
        return col_err_set(err, COL_EFORMAT, "the tokenizer has %d ids but the text encoder only %d embeddings: the model needs its own "
                           "tokenizer",
                           (int)ids, p->text.vocab_size);
    }
    p->tok = t;
    return COL_OK;
}

void sd_prompt_close(sd_pipeline *p)
{
    col_tok_free(p->tok);
    p->tok = NULL;
}

col_status sd_prompt_ids(sd_pipeline *p, const char *text, int32_t *ids, col_err *err)
{
    size_t n_text = 0;
    col_status st =
        col_tok_encode_padded(p->tok, text, strlen(text), SD_TOKENS, ids, &n_text, err);
    return st == COL_OK ? COL_OK : col_err_prefix(err, "the prompt");
}

/* diffusers' scheduler classes as --scheduler names them */
static const struct {
    const char *cls;
    dm_sched_kind kind;
} classes[] = {{"DDIMScheduler", DM_SCHED_DDIM},
               {"PNDMScheduler", DM_SCHED_PNDM},
               {"EulerDiscreteScheduler", DM_SCHED_EULER},
               {"EulerAncestralDiscreteScheduler", DM_SCHED_EULER_A},
               {"DPMSolverMultistepScheduler", DM_SCHED_AUTO}, /* dpm++2m, or -karras as the config says */
               {"LCMScheduler", DM_SCHED_LCM},
               {"DDPMScheduler", DM_SCHED_DDPM}};

col_status sd_sched_open(sd_pipeline *p, col_err *err)
{
    /* model_index.json's class wins over the config's _class_name, as in diffusers' from_pretrained */
    dm_sched_kind kind = DM_SCHED_AUTO;
    const char *cls = p->files.scheduler_class;
    if (cls[0]) {
        size_t i = 0, n = sizeof classes / sizeof classes[0];
        while (i < n && strcmp(classes[i].cls, cls) != 0) i++;
        if (i == n) { /* usable with a scheduler named in its place (sd_sched_start says so otherwise) */
            p->default_sched[0] = '\0';
            return COL_OK;
        }
        kind = classes[i].kind;
    }
    col_err e2 = {0};
    col_status st = dm_sched_config_parse(p->sched_json, kind, &p->sched_cfg, &e2);
    if (st == COL_EUNSUPPORTED) { /* a setting of the model's scheduler this module lacks: another may do */
        p->default_sched[0] = '\0';
        return COL_OK;
    }
    if (st != COL_OK) return col_err_copy(err, &e2);
    p->has_sched_cfg = true;
    snprintf(p->default_sched, sizeof p->default_sched, "%s", dm_sched_kind_name(p->sched_cfg.kind));
    return COL_OK;
}

void sd_sched_close(sd_pipeline *p)
{
    if (p->has_sched_cfg) dm_sched_config_free(&p->sched_cfg);
}

const char *sd_pipeline_default_scheduler(const sd_pipeline *p)
{
    return p->default_sched;
}

col_status sd_sched_start(sd_pipeline *p, const char *name, int steps, float strength, dm_sched **out, col_err *err)
{
    *out = NULL;
    dm_sched_config c;
    col_status st;
    if ((!name || !*name) && !p->default_sched[0])
        return col_err_set(err, COL_EUNSUPPORTED,
                           "the model's scheduler (%s) is not one colossal has: choose one (ddim, pndm, euler, "
                           "euler-a, dpm++2m, dpm++2m-karras, lcm, ddpm)",
                           p->files.scheduler_class[0] ? p->files.scheduler_class : "scheduler_config.json");
    if (!name || !*name || strcmp(name, p->default_sched) == 0) {
        st = dm_sched_config_parse(p->sched_json, p->sched_cfg.kind, &c, err);
    } else {
        dm_sched_kind k = dm_sched_kind_from_name(name);
        if ((int)k < 0) return col_err_set(err, COL_EINVAL, "unknown scheduler '%s'", name);
        /* another class reads the model's scheduler_config.json as diffusers' Class.from_config does */
        st = dm_sched_config_parse(p->sched_json, k, &c, err);
    }
    if (st != COL_OK) return st;
    st = dm_sched_create(&c, out, err);
    dm_sched_config_free(&c);
    if (st == COL_OK) st = dm_sched_set_timesteps(*out, steps, strength, err);
    if (st != COL_OK) {
        dm_sched_free(*out);
        *out = NULL;
    }
    return st;
}
