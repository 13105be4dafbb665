/* sd_train.c - a Stable Diffusion UNet trained as diffusers' examples train it. */
#include "sd_train.h"
#include "units.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "dm_clip_text.h"
#include "mb_source.h"
#include "mb_store.h"
#include "dm_unet.h"
#include "dm_vae.h"
#include "ops.h"
#include "scheduler.h"

static const char *const LORA_TARGETS[] = {"to_k", "to_q", "to_v", "to_out.0", NULL};

struct sd_trainer {
    sd_train_config cfg;
    const col_backend *be;
    dm_unet_config ucfg;
    dm_clip_text_config tcfg;
    dm_vae_config vcfg;
    dm_sched_config scfg;
    bool scfg_loaded;
    dm_sched *sched;
    col_ckpt *unet_ck, *text_ck, *vae_ck, *lora_ck;
    /* the UNet's training graph */
    col_graph *g;
    mb_builder ub;
    mb_lora_spec lora;
    dm_unet_io io;
    col_node *target, *loss;
    dm_trainer *tr;
    /* the frozen text encoder and VAE encoder */
    mb_store *store;
    col_graph *tg, *vg;
    mb_builder tb, vb;
    col_node *ids, *ehs_node, *pix, *vnoise, *sample;
    mb_exec *tx, *vx;
    col_torch_gen gen, init_gen;
    int B, R, lat_h, lat_w, text_len;
    int64_t lat_n, ehs_n;
    float *latents, *noise, *noisy, *tgt, *ehs, *tproj, *tf;
    int64_t *t;
};

sd_train_config sd_train_defaults(void)
{
    return (sd_train_config){.train = dm_train_defaults(), .batch = 1, .resolution = 512, .prior_weight = 1.0f};
}

int sd_train_text_len(const sd_trainer *s) { return s->text_len; }
const char *sd_train_prediction(const sd_trainer *s)
{
    return s->scfg.prediction_type == DM_PRED_V ? "v_prediction" : "epsilon";
}
dm_trainer *sd_train_session(sd_trainer *s) { return s->tr; }
col_torch_gen *sd_train_generator(sd_trainer *s) { return &s->gen; }

void sd_train_free(sd_trainer *s)
{
    if (!s) return;
    dm_trainer_free(s->tr);
    mb_exec_free(s->tx);
    mb_exec_free(s->vx);
    mb_store_free(s->store);
    mb_builder_free(&s->ub);
    mb_builder_free(&s->tb);
    mb_builder_free(&s->vb);
    col_graph_free(s->g);
    col_graph_free(s->tg);
    col_graph_free(s->vg);
    dm_sched_free(s->sched);
    if (s->scfg_loaded) dm_sched_config_free(&s->scfg);
    col_ckpt_close(s->unet_ck);
    col_ckpt_close(s->text_ck);
    col_ckpt_close(s->vae_ck);
    col_ckpt_close(s->lora_ck);
    free(s->latents);
    free(s->noise);
    free(s->noisy);
    free(s->tgt);
    free(s->ehs);
    free(s->tproj);
    free(s->tf);
    free(s->t);
    free(s);
}

static col_status check(const sd_train_config *c, col_err *err)
{
    if (c->batch < 1 || c->batch > 4096) return col_err_set(err, COL_EINVAL, "training: a batch of %d images", c->batch);
    if (c->n_class < 0 || c->n_class >= c->batch)
        return col_err_set(err, COL_EINVAL, "training: %d class images in a batch of %d (prior preservation needs "
                           "instance images too)", c->n_class, c->batch);
    if (c->n_class && !(c->prior_weight >= 0 && isfinite(c->prior_weight)))
        return col_err_set(err, COL_EINVAL, "training: a prior loss weight of %g", (double)c->prior_weight);
    if (c->resolution < 8 || c->resolution > 4096)
        return col_err_set(err, COL_EINVAL, "training: a resolution of %d pixels (8..4096)", c->resolution);
    if (c->lora_rank < 0 || c->lora_rank > 1024)
        return col_err_set(err, COL_EINVAL, "training: a LoRA rank of %d (1..1024, or 0 for full training)", c->lora_rank);
    if (c->lora_alpha < 0 || !isfinite(c->lora_alpha))
        return col_err_set(err, COL_EINVAL, "training: a LoRA alpha of %g", (double)c->lora_alpha);
    return COL_OK;
}

/* ---- LoRA adapters: fresh (PEFT's gaussian init) or from a file ---- */

/* "MODULE.lora_A.weight" -> module and which (0 A, 1 B); false for another name */
static bool lora_split(const char *name, char *module, size_t n, int *which)
{
    const char *a = strstr(name, ".lora_A.weight"), *b = strstr(name, ".lora_B.weight");
    const char *at = a ? a : b;
    if (!at || strlen(at) != strlen(".lora_A.weight") || (size_t)(at - name) >= n) return false;
    memcpy(module, name, (size_t)(at - name));
    module[at - name] = '\0';
    *which = a ? 0 : 1;
    return true;
}

static col_status init_adapter(void *user, const mb_param *p, float *dst, col_err *err)
{
    sd_trainer *s = user;
    char module[MB_NAME_MAX], name[MB_NAME_MAX + 32];
    int which;
    if (!lora_split(p->name, module, sizeof module, &which))
        return col_err_set(err, COL_EFORMAT, "the UNet weights have no tensor %s", p->name);
    int64_t n = 1;
    for (int d = 0; d < p->ndim; d++) n *= p->shape[d];
    if (s->lora_ck) { /* diffusers' names, then PEFT's with and without the unet. prefix */
        static const char *const fmts[4][2] = {{"unet.%s.lora.down.weight", "unet.%s.lora.up.weight"},
                                               {"unet.%s.lora_A.weight", "unet.%s.lora_B.weight"},
                                               {"%s.lora_A.weight", "%s.lora_B.weight"},
                                               {"%s.lora.down.weight", "%s.lora.up.weight"}};
        for (int f = 0; f < 4; f++) {
            snprintf(name, sizeof name, fmts[f][which], module);
            const col_ckpt_tensor *t = col_ckpt_find(s->lora_ck, name);
            if (t) return col_ckpt_read_f32(t, p->ndim, p->shape, dst, err);
        }
        return col_err_set(err, COL_EFORMAT, "the LoRA weights have no adapter for %s (rank %d)", module,
                           s->cfg.lora_rank);
    }
    if (which == 1) {
        memset(dst, 0, sizeof(float) * (size_t)n);
        return COL_OK;
    }
    col_torch_randn(&s->init_gen, dst, n); /* nn.init.normal_(lora_A, std=1/r) */
    float sd = 1.0f / (float)s->cfg.lora_rank;
    for (int64_t i = 0; i < n; i++) dst[i] = dst[i] * sd;
    return COL_OK;
}

/* ---- building ---- */

static col_status open_ckpt(const char *path, col_ckpt **out, col_err *err)
{
    return col_ckpt_open(path, out, err);
}

static col_status build_unet(sd_trainer *s, col_err *err)
{
    const sd_train_config *c = &s->cfg;
    s->g = col_graph_new();
    if (!s->g) return col_err_set(err, COL_ENOMEM, "training: out of memory");
    mb_builder_init(&s->ub, s->g, c->lora_rank == 0, COL_F32);
    if (c->lora_rank) {
        s->lora = (mb_lora_spec){.rank = c->lora_rank, .alpha = c->lora_alpha > 0 ? c->lora_alpha : (float)c->lora_rank,
                                 .targets = LORA_TARGETS};
        s->ub.lora = &s->lora;
    }
    col_status st = dm_unet_build(&s->ub, &s->ucfg, s->B, s->lat_h, s->lat_w, s->text_len, &s->io, err);
    if (st != COL_OK) return st;
    col_graph *g = s->g;
    s->target = col_input(g, "target", COL_F32, 4, s->io.out->t.shape);
    col_node *d = col_sub(g, s->io.out, s->target);
    col_node *sq = col_mul(g, d, d);
    if (!c->n_class) {
        s->loss = col_mean(g, sq, 0xfu, 0);
    } else { /* train_dreambooth.py: mse(instance half) + prior_loss_weight * mse(class half) */
        int ni = s->B - c->n_class;
        col_node *li = col_mean(g, col_slice(g, sq, 0, 0, ni), 0xfu, 0);
        col_node *lc = col_mean(g, col_slice(g, sq, 0, ni, c->n_class), 0xfu, 0);
        s->loss = col_add(g, li, col_scale(g, lc, c->prior_weight, 0.0f));
    }
    if ((st = mb_builder_status(&s->ub, err)) != COL_OK) return st;
    mb_ckpt_source sc;
    mb_source src;
    mb_source_ckpt(&src, &sc, s->unet_ck, NULL);
    col_torch_gen_seed(&s->init_gen, c->seed + 1);
    return dm_trainer_create(&c->train, s->be, &s->ub, s->loss, &src, init_adapter, s, &s->tr, err);
}

/* the text encoder and the VAE's encoder, frozen, in a store within what the host budget leaves */
static col_status build_frozen(sd_trainer *s, col_err *err)
{
    const dm_train_config *tc = &s->cfg.train;
    size_t budget = 0;
    if (tc->host_budget) {
        mt_pool_stats ps;
        mt_stats(dm_trainer_pool(s->tr), &ps);
        char hb[COL_BYTES_STR];
        if (ps.host_bytes >= tc->host_budget)
            return col_err_set_on(err, COL_SETTING_HOST_BUDGET, COL_ENOMEM, "the host budget of %s is taken by "
                                  "the UNet's weights, gradients and optimizer states: the text encoder and the VAE "
                                  "need more", col_fmt_bytes(hb, sizeof hb, tc->host_budget));
        budget = tc->host_budget - ps.host_bytes;
    }
    mb_store_config mc = {.host_budget = budget, .compute_budget = tc->compute_budget, .chunk_bytes = tc->chunk_bytes};
    col_status st = mb_store_create(&mc, s->be, &s->store, err);
    if (st != COL_OK) return st;
    /* text encoder: ids [B, T] -> last_hidden_state */
    s->tg = col_graph_new();
    s->vg = col_graph_new();
    if (!s->tg || !s->vg) return col_err_set(err, COL_ENOMEM, "training: out of memory");
    mb_builder_init(&s->tb, s->tg, false, COL_F32);
    s->ids = col_input(s->tg, "ids", COL_I32, 2, (int64_t[]){s->B, s->text_len});
    dm_clip_text_out to;
    if ((st = dm_clip_text_build(&s->tb, &s->tcfg, s->ids, 0, &to)) != COL_OK) return mb_builder_status(&s->tb, err);
    s->ehs_node = to.last_hidden;
    mb_ckpt_source tsc;
    mb_source tsrc;
    mb_source_ckpt(&tsrc, &tsc, s->text_ck, dm_clip_text_prefix(s->text_ck));
    if ((st = mb_store_bind(s->store, &s->tb, &tsrc, err)) != COL_OK) return st;
    if ((st = mb_exec_create(s->store, s->tg, &s->ehs_node, 1, &s->tx, err)) != COL_OK) return st;
    /* VAE encoder: pixels [B, 3, R, R] and the sample's noise -> latent_dist.sample() */
    mb_builder_init(&s->vb, s->vg, false, COL_F32);
    s->pix = col_input(s->vg, "pixels", COL_F32, 4, (int64_t[]){s->B, s->vcfg.in_channels, s->R, s->R});
    s->vnoise = col_input(s->vg, "noise", COL_F32, 4, (int64_t[]){s->B, s->vcfg.latent_channels, s->lat_h, s->lat_w});
    dm_vae_encoded enc;
    if ((st = dm_vae_build_encoder(&s->vb, &s->vcfg, s->pix, s->vnoise, &enc)) != COL_OK)
        return mb_builder_status(&s->vb, err);
    s->sample = enc.sample;
    mb_ckpt_source vsc;
    mb_source vsrc;
    mb_source_ckpt(&vsrc, &vsc, s->vae_ck, NULL);
    if ((st = mb_store_bind(s->store, &s->vb, &vsrc, err)) != COL_OK) return st;
    return mb_exec_create(s->store, s->vg, &s->sample, 1, &s->vx, err);
}

static col_status load_configs(sd_trainer *s, const sd_model_files *f, col_err *err)
{
    col_status st = dm_unet_load_config(f->config[SD_UNET], &s->ucfg, err);
    if (st == COL_OK) st = dm_clip_text_load_config(f->config[SD_TEXT_ENCODER], &s->tcfg, err);
    if (st == COL_OK) st = dm_vae_load_config(f->config[SD_VAE], &s->vcfg, err);
    if (st == COL_OK && (st = dm_sched_config_load(f->scheduler, DM_SCHED_DDPM, &s->scfg, err)) == COL_OK)
        s->scfg_loaded = true;
    if (st != COL_OK) return st;
    if (s->scfg.prediction_type == DM_PRED_SAMPLE)
        return col_err_set(err, COL_EUNSUPPORTED, "%s: prediction_type \"sample\": training learns epsilon or "
                           "v_prediction only", f->scheduler);
    if ((st = dm_sched_create(&s->scfg, &s->sched, err)) != COL_OK) return st;
    int f8 = dm_vae_downscale(&s->vcfg);
    if (s->cfg.resolution % f8)
        return col_err_set(err, COL_EINVAL, "training: the resolution %d is not a multiple of the VAE's %d",
                           s->cfg.resolution, f8);
    if (s->vcfg.latent_channels != s->ucfg.in_channels)
        return col_err_set(err, COL_EUNSUPPORTED, "training: the UNet takes %d channels, the VAE makes %d (an "
                           "inpainting UNet is not trained here)", s->ucfg.in_channels, s->vcfg.latent_channels);
    s->R = s->cfg.resolution;
    s->lat_h = s->lat_w = s->R / f8;
    s->text_len = s->tcfg.max_positions;
    return COL_OK;
}

col_status sd_train_open(const sd_model_files *files, const col_backend *be, const sd_train_config *cfg,
                         sd_trainer **out, col_err *err)
{
    *out = NULL;
    col_status st = check(cfg, err);
    if (st != COL_OK) return st;
    if (files->single_file[0])
        return col_err_set(err, COL_EUNSUPPORTED, "%s is a single-file checkpoint: training starts from a diffusers "
                           "folder", files->single_file);
    sd_trainer *s = calloc(1, sizeof *s);
    if (!s) return col_err_set(err, COL_ENOMEM, "training: out of memory");
    s->cfg = *cfg;
    s->be = be;
    s->B = cfg->batch;
    col_torch_gen_seed(&s->gen, cfg->seed);
    st = load_configs(s, files, err);
    if (st == COL_OK) st = open_ckpt(cfg->unet_weights ? cfg->unet_weights : files->weights[SD_UNET], &s->unet_ck, err);
    if (st == COL_OK) st = open_ckpt(files->weights[SD_TEXT_ENCODER], &s->text_ck, err);
    if (st == COL_OK) st = open_ckpt(files->weights[SD_VAE], &s->vae_ck, err);
    if (st == COL_OK && cfg->lora_rank && cfg->lora_weights) st = open_ckpt(cfg->lora_weights, &s->lora_ck, err);
    if (st == COL_OK) s->vcfg.legacy_attention = dm_vae_legacy_attention(s->vae_ck, "");
    if (st == COL_OK) {
        s->lat_n = (int64_t)s->B * s->vcfg.latent_channels * s->lat_h * s->lat_w;
        s->ehs_n = (int64_t)s->B * s->text_len * s->tcfg.hidden;
        s->latents = malloc(sizeof(float) * (size_t)s->lat_n);
        s->noise = malloc(sizeof(float) * (size_t)s->lat_n);
        s->noisy = malloc(sizeof(float) * (size_t)s->lat_n);
        s->tgt = malloc(sizeof(float) * (size_t)s->lat_n);
        s->ehs = malloc(sizeof(float) * (size_t)s->ehs_n);
        s->tproj = malloc(sizeof(float) * (size_t)s->B * (size_t)s->ucfg.block_out_channels[0]);
        s->tf = malloc(sizeof(float) * (size_t)s->B);
        s->t = malloc(sizeof(int64_t) * (size_t)s->B);
        if (!s->latents || !s->noise || !s->noisy || !s->tgt || !s->ehs || !s->tproj || !s->tf || !s->t)
            st = col_err_set(err, COL_ENOMEM, "training: out of memory");
    }
    if (st == COL_OK && s->ucfg.cross_attention_dim != s->tcfg.hidden)
        st = col_err_set(err, COL_EFORMAT, "the UNet attends to %d-wide text states, the text encoder gives %d",
                         s->ucfg.cross_attention_dim, s->tcfg.hidden);
    if (st == COL_OK) st = build_unet(s, err);
    if (st == COL_OK) st = build_frozen(s, err);
    if (st != COL_OK) {
        sd_train_free(s);
        return st;
    }
    *out = s;
    return COL_OK;
}

/* torch.randint(0, n, (1,), generator): one 32-bit draw modulo n (n < 2^32) */
static int64_t randint(col_torch_gen *g, int64_t n)
{
    return (int64_t)(col_torch_gen_u32(g) % (uint32_t)n);
}

col_status sd_train_micro(sd_trainer *s, const float *pixels, const int32_t *ids, float *loss, col_err *err)
{
    size_t pix_bytes = sizeof(float) * (size_t)s->B * (size_t)s->vcfg.in_channels * (size_t)s->R * (size_t)s->R;
    size_t lat_bytes = sizeof(float) * (size_t)s->lat_n;
    /* latents = vae.encode(pixels).latent_dist.sample(gen) * scaling_factor */
    col_torch_randn(&s->gen, s->noise, s->lat_n);
    col_status st = mb_exec_upload(s->vx, s->pix, pixels, pix_bytes, err);
    if (st == COL_OK) st = mb_exec_upload(s->vx, s->vnoise, s->noise, lat_bytes, err);
    if (st == COL_OK) st = mb_exec_run(s->vx, err);
    if (st == COL_OK) st = mb_exec_download(s->vx, s->sample, s->latents, lat_bytes, err);
    if (st != COL_OK) return st;
    float sf = s->vcfg.scaling_factor;
    for (int64_t i = 0; i < s->lat_n; i++) s->latents[i] *= sf;
    /* noise, timesteps, DDPM noising and the target */
    col_torch_randn(&s->gen, s->noise, s->lat_n);
    for (int b = 0; b < s->B; b++) {
        s->t[b] = randint(&s->gen, s->scfg.num_train_timesteps);
        s->tf[b] = (float)s->t[b];
    }
    int64_t per = s->lat_n / s->B;
    st = dm_sched_add_noise(s->sched, s->latents, s->noise, s->t, s->B, per, s->noisy, err);
    if (st == COL_OK) {
        if (s->scfg.prediction_type == DM_PRED_V)
            st = dm_sched_get_velocity(s->sched, s->latents, s->noise, s->t, s->B, per, s->tgt, err);
        else
            memcpy(s->tgt, s->noise, lat_bytes);
    }
    /* the text encoder's last hidden state */
    if (st == COL_OK) st = mb_exec_upload(s->tx, s->ids, ids, sizeof(int32_t) * (size_t)s->B * (size_t)s->text_len, err);
    if (st == COL_OK) st = mb_exec_run(s->tx, err);
    if (st == COL_OK) st = mb_exec_download(s->tx, s->ehs_node, s->ehs, sizeof(float) * (size_t)s->ehs_n, err);
    if (st != COL_OK) return st;
    dm_unet_time_proj(&s->ucfg, s->tf, s->B, s->tproj);
    st = dm_trainer_upload(s->tr, s->io.sample, s->noisy, lat_bytes, err);
    if (st == COL_OK)
        st = dm_trainer_upload(s->tr, s->io.t_proj, s->tproj,
                               sizeof(float) * (size_t)s->B * (size_t)s->ucfg.block_out_channels[0], err);
    if (st == COL_OK) st = dm_trainer_upload(s->tr, s->io.context, s->ehs, sizeof(float) * (size_t)s->ehs_n, err);
    if (st == COL_OK) st = dm_trainer_upload(s->tr, s->target, s->tgt, lat_bytes, err);
    if (st == COL_OK) st = dm_trainer_backward(s->tr, loss, err);
    return st;
}

col_status sd_train_apply(sd_trainer *s, dm_step_info *info, col_err *err)
{
    return dm_trainer_step(s->tr, info, err);
}

void sd_train_last(const sd_trainer *s, sd_train_trace *tr)
{
    *tr = (sd_train_trace){.latents = s->latents, .noise = s->noise, .noisy = s->noisy, .target = s->tgt,
                           .ehs = s->ehs, .timesteps = s->t, .latent_numel = s->lat_n, .ehs_numel = s->ehs_n};
}

/* ---- saving ---- */

static bool unet_name(void *user, const mb_param *p, char *out, size_t n)
{
    (void)user;
    char module[MB_NAME_MAX];
    int which;
    if (lora_split(p->name, module, sizeof module, &which)) return false;
    snprintf(out, n, "%s", p->name);
    return true;
}

static bool lora_name(void *user, const mb_param *p, char *out, size_t n)
{
    (void)user;
    char module[MB_NAME_MAX];
    int which;
    if (!p->trainable || !lora_split(p->name, module, sizeof module, &which)) return false;
    snprintf(out, n, "unet.%s.lora.%s.weight", module, which ? "up" : "down");
    return true;
}

col_status sd_train_save_unet(const sd_trainer *s, const char *path, col_err *err)
{
    const char *meta[] = {"format", "pt", NULL};
    return dm_trainer_save(s->tr, path, unet_name, NULL, meta, err);
}

col_status sd_train_save_lora(const sd_trainer *s, const char *path, col_err *err)
{
    if (!s->cfg.lora_rank) return col_err_set(err, COL_ESTATE, "saving LoRA weights: this run trains the whole UNet");
    const char *meta[] = {"format", "pt", NULL};
    return dm_trainer_save(s->tr, path, lora_name, NULL, meta, err);
}
