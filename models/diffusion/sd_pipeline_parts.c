/* sd_pipeline_parts.c - the pipeline's tokenizer and scheduler. */
#include <stdio.h>
#include <string.h>

#include "sd_pipeline_internal.h"

col_status sd_prompt_open(sd_pipeline *p, col_err *err)
{
    col_tokenizer *t = NULL;
    col_status st = col_tok_load(p->files.tokenizer, &t, err);
    if (st != COL_OK) return col_err_prefix(err, "the model's tokenizer");
    int32_t ids = col_tok_vocab_size(t);
    if (ids > p->text.vocab_size) {
        col_tok_free(t);
        return col_err_set(err, COL_EFORMAT, "the tokenizer has %d ids but the text encoder only %d embeddings",
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

col_status sd_sched_open(sd_pipeline *p, col_err *err)
{
    col_status st = dm_sched_config_load(p->files.scheduler, DM_SCHED_AUTO, &p->sched_cfg, err);
    if (st != COL_OK) return st;
    snprintf(p->default_sched, sizeof p->default_sched, "%s", dm_sched_kind_name(p->sched_cfg.kind));
    return COL_OK;
}

void sd_sched_close(sd_pipeline *p)
{
    dm_sched_config_free(&p->sched_cfg);
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
    if (!name || !*name || strcmp(name, p->default_sched) == 0) {
        st = dm_sched_config_load(p->files.scheduler, DM_SCHED_AUTO, &c, err);
    } else {
        dm_sched_kind k = dm_sched_kind_from_name(name);
        if ((int)k < 0) return col_err_set(err, COL_EINVAL, "unknown scheduler '%s'", name);
        /* another class reads the model's scheduler_config.json as diffusers' Class.from_config does */
        st = dm_sched_config_load(p->files.scheduler, k, &c, err);
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
