/* test_sd_lora - LoRA files merged into a tiny Stable Diffusion's UNet and
 * text encoder as they are read, against tools/refgen/make_sd_lora_fixtures.py:
 * diffusers' fused weights (load_lora_weights + fuse_lora) for the same adapter
 * as diffusers / PEFT saves it, in kohya's names and in kohya's LDM names,
 * two files stacked with their own weights, a 1x1 convolution adapted by a
 * Linear-shaped pair, and the errors of bad files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "sd_ldm_names.h"
#include "sd_lora.h"
#include "testlib.h"

#ifndef FIXTURES
#error "FIXTURES must name tests/fixtures/sd_lora"
#endif

#define W_A 0.7f
#define W_B (-0.5f)

static char tmpdir[256];
static col_ckpt *ref, *base_ck[SD_NCOMPONENTS];
static mb_source base[SD_NCOMPONENTS];
static mb_ckpt_source base_ctx[SD_NCOMPONENTS];

static size_t numel(int ndim, const int64_t *s)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)s[i];
    return n;
}

static sd_lora *open_lora(const char *file)
{
    char path[512];
    if (!strchr(file, '/')) snprintf(path, sizeof path, "%s/%s", FIXTURES, file);
    else snprintf(path, sizeof path, "%s", file);
    sd_lora *l = NULL;
    col_err err = {0};
    TL_OK(sd_lora_open(path, &l, &err) == COL_OK, "open %s: %s", file, err.msg);
    return l;
}

/* max |a - b| / max |b| */
static double rel(const float *a, const float *b, size_t n)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / (m > 0 ? m : 1);
}

/* every reference tensor "<set>.<comp>.<name>" (for "ab", the others from "a") read through the merged
 * sources equals the reference within 1e-6 relative; an unadapted tensor is the base's, bitwise */
static void check_merged(const char *what, sd_lora **l, const float *w, int n, const char *set)
{
    static const sd_component comps[] = {SD_UNET, SD_TEXT_ENCODER};
    for (int ci = 0; ci < 2; ci++) {
        sd_component c = comps[ci];
        sd_lora_source *s = NULL;
        col_err err = {0};
        TL_OK(sd_lora_source_create(&base[c], c, l, w, n, &s, &err) == COL_OK, "%s: merge into the %s: %s", what,
              sd_component_name(c), err.msg);
        if (!s) continue;
        const mb_source *src = sd_lora_source_get(s);
        char pre[64], pre_a[64];
        snprintf(pre, sizeof pre, "%s.%s.", set, sd_component_name(c));
        snprintf(pre_a, sizeof pre_a, "a.%s.", sd_component_name(c));
        int count = 0, good = 0, asked_prefixed = 0;
        double worst = 0;
        char first_bad[1400] = "";
        for (int i = 0; i < col_ckpt_count(ref); i++) {
            const col_ckpt_tensor *t = col_ckpt_get(ref, i);
            const char *name;
            if (!strncmp(t->name, pre, strlen(pre))) {
                name = t->name + strlen(pre);
            } else if (strcmp(set, "a") && !strncmp(t->name, pre_a, strlen(pre_a))) {
                char ab[300];   /* a weight B does not adapt: A's alone */
                snprintf(ab, sizeof ab, "%s%s", pre, t->name + strlen(pre_a));
                if (col_ckpt_find(ref, ab)) continue;
                name = t->name + strlen(pre_a);
            } else {
                continue;
            }
            char alt[300];
            if (c == SD_TEXT_ENCODER && (count & 1)) {   /* the text encoder's names with "text_model." too */
                snprintf(alt, sizeof alt, "text_model.%s", name);
                name = alt;
                asked_prefixed++;
            }
            count++;
            size_t ne = numel(t->ndim, t->shape);
            float *want = malloc(ne * sizeof *want), *got = malloc(ne * sizeof *got);
            bool ok = want && got && col_ckpt_read_f32(t, t->ndim, t->shape, want, &err) == COL_OK &&
                      src->read(src, name, t->ndim, t->shape, got, &err) == COL_OK;
            double r = ok ? rel(got, want, ne) : 1;
            worst = fmax(worst, r);
            if (ok && r <= 1e-6)
                good++;
            else if (!first_bad[0])
                snprintf(first_bad, sizeof first_bad, "%s: %s, rel %.2e", name, ok ? "differs" : err.msg, r);
            free(want);
            free(got);
        }
        TL_OK(count > 0 && good == count && sd_lora_source_adapted(s) == count,
              "%s: the %d adapted %s weights are diffusers' fused ones (max rel %.2e; %d adapted; first bad: %s)", what,
              count, sd_component_name(c), worst, sd_lora_source_adapted(s), first_bad);
        if (c == SD_TEXT_ENCODER) TL_OK(asked_prefixed > 0, "%s: text-encoder names asked with \"text_model.\"", what);
        /* a tensor no file adapts comes from the base untouched */
        const char *plain = c == SD_UNET ? "conv_in.weight" : "embeddings.token_embedding.weight";
        const col_ckpt_tensor *bt = col_ckpt_find(base_ck[c], plain);
        size_t ne = bt ? numel(bt->ndim, bt->shape) : 0;
        float *a = malloc(ne * sizeof *a + 4), *b = malloc(ne * sizeof *b + 4);
        TL_OK(bt && col_ckpt_read_f32(bt, bt->ndim, bt->shape, a, &err) == COL_OK &&
                  src->read(src, plain, bt->ndim, bt->shape, b, &err) == COL_OK && !memcmp(a, b, ne * sizeof *a) &&
                  src->has(src, plain) && !src->has(src, "no.such.weight"),
              "%s: the %s's %s is the base's, bitwise", what, sd_component_name(c), plain);
        free(a);
        free(b);
        sd_lora_source_free(s);
    }
}

/* ---- altered copies of a fixture ---- */

typedef struct {
    col_st_out t[1024];
    float *data[1024];
    int n;
} tensors;

static void load_all(const char *file, tensors *ts)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", FIXTURES, file);
    col_ckpt *c = NULL;
    col_err err = {0};
    ts->n = 0;
    if (col_ckpt_open(path, &c, &err) != COL_OK) return;
    for (int i = 0; i < col_ckpt_count(c) && i < 1024; i++) {
        const col_ckpt_tensor *t = col_ckpt_get(c, i);
        ts->data[i] = malloc(numel(t->ndim, t->shape) * sizeof(float) + 4);
        col_ckpt_read_f32(t, t->ndim, t->shape, ts->data[i], &err);
        ts->t[i] = (col_st_out){strdup(t->name), t->ndim, {0}, ts->data[i]};
        memcpy(ts->t[i].shape, t->shape, sizeof t->shape);
        ts->n++;
    }
    col_ckpt_close(c);
}

static void free_all(tensors *ts)
{
    for (int i = 0; i < ts->n; i++) {
        free((char *)ts->t[i].name);
        free(ts->data[i]);
    }
    ts->n = 0;
}

static int find(const tensors *ts, const char *name)
{
    for (int i = 0; i < ts->n; i++)
        if (!strcmp(ts->t[i].name, name)) return i;
    return -1;
}

/* writes ts as tmpdir/file and opens it as a LoRA */
static col_status write_open(const tensors *ts, const char *file, sd_lora **l, col_err *err)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, file);
    col_err werr = {0};
    *l = NULL;
    if (col_st_write_f32(path, ts->t, ts->n, NULL, &werr) != COL_OK) return col_err_copy(err, &werr);
    return sd_lora_open(path, l, err);
}

static void test_names(void)
{
    static const char *const cases[][2] = {
        {"down_blocks_0_attentions_1_transformer_blocks_0_attn1_to_out_0", "down_blocks.0.attentions.1.transformer_blocks.0.attn1.to_out.0"},
        {"text_model_encoder_layers_11_self_attn_out_proj", "text_model.encoder.layers.11.self_attn.out_proj"},
        {"mid_block_resnets_1_time_emb_proj", "mid_block.resnets.1.time_emb_proj"},
        {"input_blocks_4_1_proj_in", "input_blocks.4.1.proj_in"},
        {"up_blocks_2_attentions_0_transformer_blocks_0_ff_net_0_proj", "up_blocks.2.attentions.0.transformer_blocks.0.ff.net.0.proj"},
    };
    char out[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        TL_OK(sd_kohya_dots(cases[i][0], out, sizeof out) == 0 && !strcmp(out, cases[i][1]), "kohya %s -> %s (%s)",
              cases[i][0], cases[i][1], out);
    TL_OK(sd_kohya_dots("down_blocks__0", out, sizeof out) == -1 && sd_kohya_dots("", out, sizeof out) == -1,
          "an empty word is refused");
}

/* a_peft respelt as older diffusers wrote LoRA files (no metadata: each module's alpha as a ".alpha"
 * tensor): "attn1.processor.to_q_lora.down.weight", ".lora.down.weight", the text encoder's
 * "self_attn.to_q_lora.down.weight" and "mlp.fc1.lora_linear_layer.down.weight" */
static void test_old_spellings(void)
{
    tensors *ts = calloc(1, sizeof *ts);
    load_all("a_peft.safetensors", ts);
    int n0 = ts->n, alphas = 0;
    static float alpha_v[1024];
    for (int i = 0; i < n0; i++) {
        const char *n = ts->t[i].name;
        size_t cut;
        bool down = strstr(n, ".lora_A.weight") != NULL;
        const char *suf = down ? ".lora_A.weight" : ".lora_B.weight";
        cut = strlen(n) - strlen(suf);
        char mod[300], out[400];
        snprintf(mod, sizeof mod, "%.*s", (int)cut, n);
        bool te = !strncmp(mod, "text_encoder.", 13);
        const char *attn = te ? strstr(mod, "self_attn.") : strstr(mod, ".attn");
        const char *dn = down ? "down" : "up";
        if (te && attn) {   /* text_encoder.encoder.layers.0.self_attn.q_proj -> ...self_attn.to_q_lora */
            const char *p = attn + 10;
            const char *to = !strncmp(p, "out_proj", 8) ? "to_out" : !strncmp(p, "q_proj", 6) ? "to_q"
                             : !strncmp(p, "k_proj", 6) ? "to_k" : "to_v";
            snprintf(out, sizeof out, "text_encoder.text_model.%.*s%s_lora.%s.weight", (int)(p - mod - 13), mod + 13,
                     to, dn);
        } else if (te) {
            snprintf(out, sizeof out, "text_encoder.text_model.%s.lora_linear_layer.%s.weight", mod + 13, dn);
        } else if (attn && strstr(mod, ".to_")) {   /* unet....attn1.to_out.0 -> ...attn1.processor.to_out_lora */
            const char *to = strstr(mod, ".to_") + 1;
            char proj[8];
            snprintf(proj, sizeof proj, "%.4s", to);
            if (!strncmp(to, "to_out", 6)) snprintf(proj, sizeof proj, "to_out");
            snprintf(out, sizeof out, "%.*sprocessor.%s_lora.%s.weight", (int)(to - mod), mod, proj, dn);
        } else {
            snprintf(out, sizeof out, "%s.lora.%s.weight", mod, dn);
        }
        free((char *)ts->t[i].name);
        ts->t[i].name = strdup(out);
        if (down && ts->n < 1024) {   /* PEFT's metadata: lora_alpha 8 (UNet), 4 (text), proj_out 2 */
            alpha_v[alphas] = te ? 4.0f : strstr(mod, "proj_out") ? 2.0f : 8.0f;
            snprintf(out, sizeof out, "%s.alpha", mod);
            ts->data[ts->n] = NULL;
            ts->t[ts->n++] = (col_st_out){strdup(out), 0, {0}, &alpha_v[alphas++]};
        }
    }
    sd_lora *l = NULL;
    col_err err = {0};
    TL_OK(alphas == 91 && write_open(ts, "old.safetensors", &l, &err) == COL_OK,
          "a_peft in older diffusers spellings with %d .alpha tensors: %s", alphas, err.msg);
    if (l) check_merged("older diffusers spellings", &l, (const float[]){W_A}, 1, "a");
    sd_lora_close(l);
    free_all(ts);
    free(ts);
}

static void test_errors(void)
{
    tensors *ts = calloc(1, sizeof *ts);
    sd_lora *l = NULL, *l2 = NULL;
    sd_lora_source *s = NULL;
    col_err err = {0};
    float w1 = 1.0f, buf[4096];
    const char *q = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
    char nm[256];

    /* a misspelt module: the merge refuses it, counting and naming */
    load_all("a_kohya.safetensors", ts);
    TL_OK(ts->n > 200, "load a_kohya.safetensors (%d tensors)", ts->n);
    int renamed = 0;
    for (int i = 0; i < ts->n; i++) {
        const char *n = ts->t[i].name;
        const char *hit = strstr(n, "_attn1_to_q.");
        if (!hit && !strstr(n, "_attn2_to_v.")) continue;
        char *nn = malloc(strlen(n) + 2);
        size_t cut = (size_t)(strchr(n, '.') - n);
        memcpy(nn, n, cut);
        sprintf(nn + cut, "x%s", n + cut);   /* ..._to_qx.lora_down.weight */
        free((char *)ts->t[i].name);
        ts->t[i].name = nn;
        renamed += strstr(nn, "down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_qx.lora_down") != NULL;
    }
    TL_OK(renamed == 1 && write_open(ts, "typo.safetensors", &l, &err) == COL_OK, "a file with misspelt modules opens: %s",
          err.msg);
    if (l) {
        /* attn1.to_q and attn2.to_v in four transformer blocks */
        TL_OK(sd_lora_source_create(&base[SD_UNET], SD_UNET, &l, &w1, 1, &s, &err) == COL_EFORMAT && !s &&
                  strstr(err.msg, "8 LoRA modules match no tensor of the unet") && strstr(err.msg, "to_qx"),
              "but merging it names the count and the first: %s", err.msg);
        TL_OK(sd_lora_source_create(&base[SD_TEXT_ENCODER], SD_TEXT_ENCODER, &l, &w1, 1, &s, &err) == COL_OK,
              "its text-encoder part merges: %s", err.msg);
        sd_lora_source_free(s);
        sd_lora_close(l);
    }
    free_all(ts);

    /* a Linear-shaped pair on a 1x1 convolution (proj_in / proj_out) merges alike */
    load_all("a_kohya.safetensors", ts);
    int squeezed = 0;
    for (int i = 0; i < ts->n; i++)
        if ((strstr(ts->t[i].name, "_proj_in.") || strstr(ts->t[i].name, "_proj_out.")) && ts->t[i].ndim == 4) {
            ts->t[i].ndim = 2;
            squeezed++;
        }
    TL_OK(squeezed == 16 && write_open(ts, "linear.safetensors", &l, &err) == COL_OK,
          "a_kohya with its %d proj_in/proj_out tensors 2-D: %s", squeezed, err.msg);
    if (l) {
        check_merged("Linear-shaped pairs on 1x1 convolutions", &l, (const float[]){W_A}, 1, "a");
        sd_lora_close(l);
    }

    /* a pair whose product does not fit its tensor: the read names both */
    int up = (snprintf(nm, sizeof nm, "%s.lora_up.weight", q), find(ts, nm));
    TL_OK(up >= 0, "find %s", nm);
    if (up >= 0) {
        col_st_out keep = ts->t[up];
        static float zeros[64];
        ts->t[up].shape[0] += 1;   /* [9, 4]: one row more than to_q's 8 */
        ts->t[up].data = zeros;
        TL_OK(write_open(ts, "wide.safetensors", &l, &err) == COL_OK &&
                  sd_lora_source_create(&base[SD_UNET], SD_UNET, &l, &w1, 1, &s, &err) == COL_OK,
              "a pair too wide for its tensor opens and merges: %s", err.msg);
        const char *tq = "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight";
        TL_OK(s && sd_lora_source_get(s)->read(sd_lora_source_get(s), tq, 2, (int64_t[]){8, 8}, buf, &err) ==
                           COL_ESHAPE && strstr(err.msg, "does not fit the unet's") && strstr(err.msg, "[9, 4]"),
              "reading the tensor names the pair and the shapes: %s", err.msg);
        sd_lora_source_free(s);
        sd_lora_close(l);
        ts->t[up].shape[1] += 1;   /* [9, 5]: its rank is not the down's */
        TL_OK(write_open(ts, "rank.safetensors", &l, &err) == COL_EFORMAT && strstr(err.msg, "do not make a LoRA pair"),
              "a down and an up of different ranks: %s", err.msg);
        ts->t[up] = keep;
        /* a down without its up */
        ts->t[up].name = "lora_unet_no_such_module.lora_up.weight";
        TL_OK(write_open(ts, "noup.safetensors", &l, &err) == COL_EFORMAT && strstr(err.msg, "has no"),
              "a down without its up: %s", err.msg);
        ts->t[up].name = "lora_unet_x.hada_w1_a";
        TL_OK(write_open(ts, "loha.safetensors", &l, &err) == COL_EUNSUPPORTED && strstr(err.msg, "LoHa"),
              "LoHa: %s", err.msg);
        ts->t[up].name = "lora_unet_x.dora_scale";
        TL_OK(write_open(ts, "dora.safetensors", &l, &err) == COL_EUNSUPPORTED && strstr(err.msg, "DoRA"),
              "DoRA: %s", err.msg);
        ts->t[up].name = "lora_te2_text_model_encoder_layers_0_mlp_fc1.lora_up.weight";
        TL_OK(write_open(ts, "sdxl.safetensors", &l, &err) == COL_EUNSUPPORTED && strstr(err.msg, "SDXL"),
              "an SDXL LoRA: %s", err.msg);
        ts->t[up].name = "model.some.weight";
        TL_OK(write_open(ts, "junk.safetensors", &l, &err) == COL_EFORMAT &&
                  strstr(err.msg, "1 tensor is not LoRA weights") && strstr(err.msg, "model.some.weight"),
              "a tensor that is no LoRA weight: %s", err.msg);
        ts->t[up] = keep;
    }
    free_all(ts);
    /* one weight spelt two ways in a file */
    load_all("a_peft.safetensors", ts);
    int a = find(ts, "unet.down_blocks.0.attentions.0.proj_in.lora_A.weight");
    TL_OK(a >= 0 && ts->n < 1024, "find a_peft's proj_in lora_A");
    if (a >= 0 && ts->n < 1024) {
        ts->t[ts->n] = ts->t[a];
        ts->t[ts->n].name = "unet.down_blocks.0.attentions.0.proj_in.lora.down.weight";
        ts->data[ts->n] = NULL;
        ts->n++;
        TL_OK(write_open(ts, "twice.safetensors", &l, &err) == COL_EFORMAT && strstr(err.msg, "same LoRA weight"),
              "one down spelt two ways: %s", err.msg);
        ts->t[--ts->n].name = NULL;
    }
    free_all(ts);
    free(ts);
#ifdef HF_FIXTURES
    TL_OK(sd_lora_open(HF_FIXTURES "/gpt2/model.safetensors", &l, &err) == COL_EFORMAT &&
              strstr(err.msg, "holds no LoRA weights"),
          "a GPT-2 checkpoint: %s", err.msg);
#endif
    TL_OK(sd_lora_open(FIXTURES "/missing.safetensors", &l, &err) == COL_EIO, "a missing file: %s", err.msg);
    /* a base that lacks the adapted tensors (the text encoder's adapters onto the UNet) */
    l2 = open_lora("b_kohya.safetensors");
    if (l2) {
        TL_OK(sd_lora_modules(l2, SD_UNET) == 24 && sd_lora_modules(l2, SD_TEXT_ENCODER) == 4 &&
                  sd_lora_modules(l2, SD_VAE) == 0,
              "b_kohya adapts 24 UNet modules (to_k, to_out.0 of 8 attentions, conv2 of 8 resnets) and 4 of the "
              "text encoder (fc1, fc2 of 2 layers)");
        TL_OK(sd_lora_source_create(&base[SD_UNET], SD_TEXT_ENCODER, &l2, &w1, 1, &s, &err) == COL_EFORMAT &&
                  strstr(err.msg, "4 LoRA modules match no tensor of the text_encoder"),
              "merged onto another component's weights: %s", err.msg);
        sd_lora_close(l2);
    }
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/colsdloraXXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    col_err err = {0};
    TL_OK(col_ckpt_open(FIXTURES "/reference.safetensors", &ref, &err) == COL_OK &&
              col_ckpt_open(BASE_MODEL "/unet/diffusion_pytorch_model.safetensors", &base_ck[SD_UNET], &err) == COL_OK &&
              col_ckpt_open(BASE_MODEL "/text_encoder/model.safetensors", &base_ck[SD_TEXT_ENCODER], &err) == COL_OK,
          "open the reference and the base model: %s", err.msg);
    if (!ref || !base_ck[SD_UNET] || !base_ck[SD_TEXT_ENCODER]) return tl_done();
    mb_source_ckpt(&base[SD_UNET], &base_ctx[SD_UNET], base_ck[SD_UNET], NULL);
    mb_source_ckpt(&base[SD_TEXT_ENCODER], &base_ctx[SD_TEXT_ENCODER], base_ck[SD_TEXT_ENCODER], NULL);

    test_names();
    static const char *const a_files[] = {"a_peft.safetensors", "a_kohya.safetensors", "a_kohya_ldm.safetensors"};
    for (int i = 0; i < 3; i++) {
        sd_lora *l = open_lora(a_files[i]);
        if (!l) continue;
        check_merged(a_files[i], &l, (const float[]){W_A}, 1, "a");
        sd_lora_close(l);
    }
    sd_lora *ab[2] = {open_lora("a_peft.safetensors"), open_lora("b_kohya.safetensors")};
    if (ab[0] && ab[1]) check_merged("a_peft at 0.7 and b_kohya at -0.5 stacked", ab, (const float[]){W_A, W_B}, 2, "ab");
    sd_lora_close(ab[0]);
    sd_lora_close(ab[1]);
    test_old_spellings();
    test_errors();

    const char *const made[] = {"old", "typo", "linear", "wide", "rank", "twice", "noup", "loha", "dora", "sdxl", "junk"};
    for (size_t i = 0; i < sizeof made / sizeof *made; i++) {
        char p[400];
        snprintf(p, sizeof p, "%s/%s.safetensors", tmpdir, made[i]);
        unlink(p);
    }
    rmdir(tmpdir);
    col_ckpt_close(ref);
    col_ckpt_close(base_ck[SD_UNET]);
    col_ckpt_close(base_ck[SD_TEXT_ENCODER]);
    return tl_done();
}
