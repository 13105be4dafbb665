/* sd_single_file.c - an LDM single-file checkpoint read as diffusers components. */
#include "sd_single_file.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sd_ldm_names.h"
#include "sd_sf_internal.h"

#define P_UNET "model.diffusion_model."
#define P_VAE "first_stage_model."
#define P_CLIP "cond_stage_model.transformer."
#define P_OPENCLIP "cond_stage_model.model."

typedef struct {
    char *name;                    /* diffusers' name (the text encoder's without "text_model.") */
    const col_ckpt_tensor *t;
    int part;                      /* -1: the whole tensor; 0, 1, 2: q, k, v rows of a fused projection */
} sf_entry;

typedef struct {
    const sd_single_file *f;
    sd_component c;
    sf_entry *e;
    int n, cap;
    bool present;
} sf_comp;

struct sd_single_file {
    char path[SD_PATH_MAX];
    col_ckpt *ck;
    const char *root;              /* "" or "state_dict." (a .ckpt's weights nest under it) */
    sd_family fam;
    bool v, big, openclip;
    sf_unet_info unet;
    sf_vae_info vae;
    sf_text_info text;
    sf_comp comp[SD_NCOMPONENTS];
    mb_source src[SD_NCOMPONENTS];
    char *config[SD_NCOMPONENTS];
    char *sched;
};

/* ---- finding tensors ---- */

/* the tensor root + prefix + name, or NULL */
static const col_ckpt_tensor *tensor(const sd_single_file *f, const char *prefix, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static const col_ckpt_tensor *tensor(const sd_single_file *f, const char *prefix, const char *fmt, ...)
{
    char name[512];
    int k = snprintf(name, sizeof name, "%s%s", f->root, prefix);
    va_list ap;
    va_start(ap, fmt);
    int m = k >= 0 && (size_t)k < sizeof name ? vsnprintf(name + k, sizeof name - (size_t)k, fmt, ap) : -1;
    va_end(ap);
    if (m < 0 || (size_t)(k + m) >= sizeof name) return NULL;
    return col_ckpt_find(f->ck, name);
}

/* the name of a tensor below root + prefix, or NULL */
static const char *below(const sd_single_file *f, const col_ckpt_tensor *t, const char *prefix)
{
    size_t r = strlen(f->root), p = strlen(prefix);
    if (strncmp(t->name, f->root, r) || strncmp(t->name + r, prefix, p)) return NULL;
    return t->name + r + p;
}

/* the largest N + 1 of the tensors named prefix + head + "N." (0 if none) */
static int count_numbered(const sd_single_file *f, const char *prefix, const char *head)
{
    int n = 0, hl = (int)strlen(head);
    for (int i = 0; i < col_ckpt_count(f->ck); i++) {
        const char *s = below(f, col_ckpt_get(f->ck, i), prefix);
        if (!s || strncmp(s, head, (size_t)hl)) continue;
        char *end;
        long v = strtol(s + hl, &end, 10);
        if (end != s + hl && *end == '.' && v >= 0 && v < 100000 && v + 1 > n) n = (int)v + 1;
    }
    return n;
}

static col_status missing(const sd_single_file *f, const char *prefix, const char *what, col_err *err)
{
    return col_err_set(err, COL_EFORMAT, "%s: the Stable Diffusion checkpoint has no %s%s%s", f->path, f->root,
                       prefix, what);
}

/* a dimension of a tensor that must exist, or -1 (err set) */
static int dim(const sd_single_file *f, const char *prefix, const char *name, int ndim, int d, col_err *err)
{
    const col_ckpt_tensor *t = tensor(f, prefix, "%s", name);
    if (!t) return missing(f, prefix, name, err), -1;
    if (t->ndim != ndim || t->shape[d] < 1 || t->shape[d] > (1 << 20))
        return col_err_set(err, COL_EFORMAT, "%s: %s%s%s has %d dimensions, not %d", f->path, f->root, prefix, name,
                           t->ndim, ndim), -1;
    return (int)t->shape[d];
}

/* ---- the structure of each component ---- */

static col_status unet_info(sd_single_file *f, col_err *err)
{
    sf_unet_info *u = &f->unet;
    int nin = count_numbered(f, P_UNET, "input_blocks."), nout = count_numbered(f, P_UNET, "output_blocks.");
    int ndown = 0;
    for (int i = 1; i < nin; i++) ndown += tensor(f, P_UNET, "input_blocks.%d.0.op.weight", i) != NULL;
    u->levels = ndown + 1;
    if (u->levels > SF_MAX_LEVELS || nin < 2)
        return col_err_set(err, COL_EFORMAT, "%s: the UNet has %d input blocks and %d downsamplers, not a Stable "
                           "Diffusion UNet", f->path, nin, ndown);
    int res = nin - 1 - ndown;
    u->lpb = res / u->levels;
    if (res % u->levels || u->lpb < 1 || nout != u->levels * (u->lpb + 1))
        return col_err_set(err, COL_EFORMAT, "%s: the UNet's %d input blocks, %d downsamplers and %d output blocks "
                           "do not make levels of equal depth", f->path, nin, ndown, nout);
    char nm[160];
    for (int i = 1; i < nin + nout; i++) {   /* no block left out */
        int in = i < nin, b = in ? i : i - nin;
        if (in && (i - 1) % (u->lpb + 1) == u->lpb) continue;   /* a downsampler */
        snprintf(nm, sizeof nm, "%s_blocks.%d.0.out_layers.3.weight", in ? "input" : "output", b);
        if (!tensor(f, P_UNET, "%s", nm)) return missing(f, P_UNET, nm, err);
    }
    for (int l = 0; l < u->levels; l++) {
        int first = 1 + l * (u->lpb + 1);
        if (l < u->levels - 1 && !tensor(f, P_UNET, "input_blocks.%d.0.op.weight", first + u->lpb))
            return col_err_set(err, COL_EFORMAT, "%s: the UNet's downsampler after level %d is not input block %d",
                               f->path, l, first + u->lpb);
        snprintf(nm, sizeof nm, "input_blocks.%d.0.out_layers.3.weight", first);
        if ((u->ch[l] = dim(f, P_UNET, nm, 4, 0, err)) < 0) return err->code;
        u->attn_down[l] = tensor(f, P_UNET, "input_blocks.%d.1.proj_in.weight", first) != NULL;
        u->attn_up[l] = tensor(f, P_UNET, "output_blocks.%d.1.proj_in.weight", l * (u->lpb + 1)) != NULL;
    }
    if ((u->in_ch = dim(f, P_UNET, "input_blocks.0.0.weight", 4, 1, err)) < 0 ||
        (u->conv_in_kernel = dim(f, P_UNET, "input_blocks.0.0.weight", 4, 2, err)) < 0 ||
        (u->out_ch = dim(f, P_UNET, "out.2.weight", 4, 0, err)) < 0 ||
        (u->conv_out_kernel = dim(f, P_UNET, "out.2.weight", 4, 2, err)) < 0 ||
        (u->time_dim = dim(f, P_UNET, "time_embed.0.weight", 2, 0, err)) < 0 ||
        (u->cross_dim = dim(f, P_UNET, "middle_block.1.transformer_blocks.0.attn2.to_k.weight", 2, 1, err)) < 0)
        return err->code;
    const col_ckpt_tensor *pin = tensor(f, P_UNET, "middle_block.1.proj_in.weight");
    if (!pin) return missing(f, P_UNET, "middle_block.1.proj_in.weight", err);
    u->linear_proj = pin->ndim == 2;
    u->depth = 0;
    while (tensor(f, P_UNET, "middle_block.1.transformer_blocks.%d.norm1.weight", u->depth)) u->depth++;
    for (int l = 0; l < u->levels; l++)   /* the same depth everywhere (SD 1.x/2.x have one) */
        if (u->attn_down[l] && (!tensor(f, P_UNET, "input_blocks.%d.1.transformer_blocks.%d.norm1.weight",
                                        1 + l * (u->lpb + 1), u->depth - 1) ||
                                tensor(f, P_UNET, "input_blocks.%d.1.transformer_blocks.%d.norm1.weight",
                                       1 + l * (u->lpb + 1), u->depth)))
            return col_err_set(err, COL_EUNSUPPORTED, "%s: the UNet's attention blocks differ in depth (not Stable "
                               "Diffusion 1.x/2.x)", f->path);
    return COL_OK;
}

static col_status vae_info(sd_single_file *f, col_err *err)
{
    sf_vae_info *a = &f->vae;
    a->levels = count_numbered(f, P_VAE, "encoder.down.");
    int up = count_numbered(f, P_VAE, "decoder.up.");
    if (a->levels < 1 || a->levels > SF_MAX_LEVELS || up != a->levels)
        return col_err_set(err, COL_EFORMAT, "%s: the VAE has %d encoder and %d decoder levels", f->path, a->levels,
                           up);
    a->lpb = count_numbered(f, P_VAE, "encoder.down.0.block.");
    char nm[160];
    for (int l = 0; l < a->levels; l++) {
        snprintf(nm, sizeof nm, "encoder.down.%d.block.0.conv2.weight", l);
        if ((a->ch[l] = dim(f, P_VAE, nm, 4, 0, err)) < 0) return err->code;
        snprintf(nm, sizeof nm, "decoder.up.%d.block.0.conv2.weight", l);
        if (!tensor(f, P_VAE, "%s", nm)) return missing(f, P_VAE, nm, err);
    }
    if ((a->in_ch = dim(f, P_VAE, "encoder.conv_in.weight", 4, 1, err)) < 0 ||
        (a->out_ch = dim(f, P_VAE, "decoder.conv_out.weight", 4, 0, err)) < 0 ||
        (a->latent = dim(f, P_VAE, "decoder.conv_in.weight", 4, 1, err)) < 0)
        return err->code;
    a->mid_attn = tensor(f, P_VAE, "encoder.mid.attn_1.q.weight") != NULL;
    a->quant = tensor(f, P_VAE, "quant_conv.weight") != NULL;
    a->post_quant = tensor(f, P_VAE, "post_quant_conv.weight") != NULL;
    return COL_OK;
}

static col_status text_info(sd_single_file *f, const char *clip_pre, col_err *err)
{
    sf_text_info *t = &f->text;
    if (f->openclip) {
        int blocks = count_numbered(f, P_OPENCLIP, "transformer.resblocks.");
        t->layers = blocks - 1;   /* SD 2.x encodes with the penultimate resblock */
        if (t->layers < 1)
            return col_err_set(err, COL_EFORMAT, "%s: the OpenCLIP text encoder has %d resblocks (SD 2.x uses all "
                               "but the last, so it needs two or more)", f->path, blocks);
        for (int i = 0; i < blocks; i++)   /* no resblock left out */
            if (!tensor(f, P_OPENCLIP, "transformer.resblocks.%d.ln_1.weight", i))
                return col_err_set(err, COL_EFORMAT, "%s: the OpenCLIP text encoder has no %s%stransformer.resblocks."
                                   "%d.ln_1.weight", f->path, f->root, P_OPENCLIP, i);
        if ((t->vocab = dim(f, P_OPENCLIP, "token_embedding.weight", 2, 0, err)) < 0 ||
            (t->hidden = dim(f, P_OPENCLIP, "token_embedding.weight", 2, 1, err)) < 0 ||
            (t->positions = dim(f, P_OPENCLIP, "positional_embedding", 2, 0, err)) < 0 ||
            (t->ff = dim(f, P_OPENCLIP, "transformer.resblocks.0.mlp.c_fc.weight", 2, 0, err)) < 0)
            return err->code;
        return COL_OK;
    }
    char p[80];
    snprintf(p, sizeof p, "%s%s", P_CLIP, clip_pre);
    t->layers = count_numbered(f, p, "encoder.layers.");
    if (t->layers < 1) return missing(f, p, "encoder.layers.0.*", err);
    for (int i = 0; i < t->layers; i++)
        if (!tensor(f, p, "encoder.layers.%d.layer_norm1.weight", i))
            return col_err_set(err, COL_EFORMAT, "%s: the CLIP text encoder has no %s%sencoder.layers.%d.layer_norm1.weight",
                               f->path, f->root, p, i);
    if ((t->vocab = dim(f, p, "embeddings.token_embedding.weight", 2, 0, err)) < 0 ||
        (t->hidden = dim(f, p, "embeddings.token_embedding.weight", 2, 1, err)) < 0 ||
        (t->positions = dim(f, p, "embeddings.position_embedding.weight", 2, 0, err)) < 0 ||
        (t->ff = dim(f, p, "encoder.layers.0.mlp.fc1.weight", 2, 0, err)) < 0)
        return err->code;
    return COL_OK;
}

/* ---- the name maps ---- */

static col_status add(sd_single_file *f, sd_component c, const char *name, const col_ckpt_tensor *t, int part,
                      col_err *err)
{
    sf_comp *m = &f->comp[c];
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 256;
        sf_entry *e = realloc(m->e, (size_t)cap * sizeof *e);
        if (!e) return col_err_set(err, COL_ENOMEM, "out of memory mapping %s", f->path);
        m->e = e;
        m->cap = cap;
    }
    char *s = strdup(name);
    if (!s) return col_err_set(err, COL_ENOMEM, "out of memory mapping %s", f->path);
    m->e[m->n++] = (sf_entry){s, t, part};
    return COL_OK;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const sf_entry *)a)->name, ((const sf_entry *)b)->name);
}

typedef struct {
    int n;
    const char *first;
} unknown;

/* one tensor of the file into the maps; unknown names counted */
static col_status map_one(sd_single_file *f, const col_ckpt_tensor *t, unknown *unk, col_err *err)
{
    char out[256];
    const char *s;
    int rc, conv1x1, fused, layer;
    if ((s = below(f, t, P_UNET))) {
        if (sd_ldm_unet_name(s, f->unet.lpb, out, sizeof out)) goto unknown;
        return add(f, SD_UNET, out, t, -1, err);
    }
    if ((s = below(f, t, P_VAE))) {
        if (sd_ldm_vae_name(s, f->vae.levels, out, sizeof out, &conv1x1)) goto unknown;
        return add(f, SD_VAE, out, t, -1, err);
    }
    if ((s = below(f, t, P_CLIP))) {
        if ((rc = sd_clip_name(s, out, sizeof out)) < 0) goto unknown;
        return rc ? COL_OK : add(f, SD_TEXT_ENCODER, out, t, -1, err);
    }
    if ((s = below(f, t, P_OPENCLIP))) {
        if ((rc = sd_openclip_name(s, out, sizeof out, &fused, &layer)) < 0) goto unknown;
        if (rc || layer == f->text.layers) return COL_OK;   /* unused, or the last resblock */
        if (!fused) return add(f, SD_TEXT_ENCODER, out, t, -1, err);
        char *q = strstr(out, "q_proj");
        col_status st = COL_OK;
        for (int k = 0; k < 3 && !st; k++) {
            q[0] = "qkv"[k];
            st = add(f, SD_TEXT_ENCODER, out, t, k, err);
        }
        return st;
    }
    if ((s = below(f, t, "cond_stage_model."))) goto unknown;   /* a text encoder of another kind */
    return COL_OK;   /* the schedule's buffers, EMA copies, ... */
unknown:
    if (!unk->n++) unk->first = t->name;
    return COL_OK;
}

static col_status build_maps(sd_single_file *f, col_err *err)
{
    unknown unk = {0};
    col_status st;
    for (int i = 0; i < col_ckpt_count(f->ck); i++)
        if ((st = map_one(f, col_ckpt_get(f->ck, i), &unk, err))) return st;
    if (unk.n)
        return col_err_set(err, COL_EFORMAT, "%s: %d tensor%s not part of a Stable Diffusion 1.x/2.x UNet, VAE or "
                           "text encoder (first: %s)", f->path, unk.n, unk.n > 1 ? "s are" : " is", unk.first);
    for (int c = 0; c < SD_NCOMPONENTS; c++) {
        sf_comp *m = &f->comp[c];
        if (m->n > 1) qsort(m->e, (size_t)m->n, sizeof *m->e, entry_cmp); /* (no entries: e may be NULL) */
        for (int i = 1; i < m->n; i++)
            if (!strcmp(m->e[i - 1].name, m->e[i].name))
                return col_err_set(err, COL_EFORMAT, "%s: %s and %s are both the %s's %s", f->path,
                                   m->e[i - 1].t->name, m->e[i].t->name, sd_component_name(c), m->e[i].name);
    }
    return COL_OK;
}

/* ---- the sources ---- */

static const sf_entry *lookup(const sf_comp *m, const char *name)
{
    if (m->c == SD_TEXT_ENCODER && !strncmp(name, "text_model.", 11)) name += 11;
    sf_entry key = {(char *)name, NULL, 0};
    return m->n ? bsearch(&key, m->e, (size_t)m->n, sizeof *m->e, entry_cmp) : NULL;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* ndim without trailing 1s past the second dimension (a 1x1 convolution is a Linear) */
static int squeezed(int ndim, const int64_t *s)
{
    while (ndim > 2 && s[ndim - 1] == 1) ndim--;
    return ndim;
}

static col_status sf_read(const mb_source *src, const char *name, int ndim, const int64_t *shape, float *dst,
                          col_err *err)
{
    const sf_comp *m = src->ctx;
    const sf_entry *e = lookup(m, name);
    if (!e)
        return col_err_set(err, COL_EFORMAT, "%s: the single-file checkpoint has no tensor for the %s's %s",
                           m->f->path, sd_component_name(m->c), name);
    const col_ckpt_tensor *t = e->t;
    char want[96], have[96];
    bool fits;
    if (e->part < 0) {
        int a = squeezed(ndim, shape), b = squeezed(t->ndim, t->shape);
        fits = a == b;
        for (int i = 0; fits && i < a; i++) fits = shape[i] == t->shape[i];
    } else {
        fits = t->ndim == ndim && ndim >= 1 && t->shape[0] == 3 * shape[0];
        for (int i = 1; fits && i < ndim; i++) fits = shape[i] == t->shape[i];
    }
    if (!fits) {
        shape_str(want, sizeof want, ndim, shape);
        shape_str(have, sizeof have, t->ndim, t->shape);
        return col_err_set(err, COL_ESHAPE, "%s: the %s's %s should be %s, but %s%s is %s", m->f->path,
                           sd_component_name(m->c), name, want, t->name, e->part >= 0 ? " (q, k, v stacked)" : "",
                           have);
    }
    if (e->part < 0) return col_ckpt_read_f32(t, t->ndim, t->shape, dst, err);
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= (size_t)shape[i];
    float *all = malloc(3 * numel * sizeof *all);
    if (!all) return col_err_set(err, COL_ENOMEM, "out of memory reading %s from %s", t->name, m->f->path);
    col_status st = col_ckpt_read_f32(t, t->ndim, t->shape, all, err);
    if (st == COL_OK) memcpy(dst, all + (size_t)e->part * numel, numel * sizeof *dst);
    free(all);
    return st;
}

static int sf_has(const mb_source *src, const char *name)
{
    return lookup(src->ctx, name) != NULL;
}

/* ---- opening ---- */

static col_status detect(sd_single_file *f, col_err *err)
{
    static const char *const roots[] = {"", "state_dict.", "state_dict.state_dict."};
    for (size_t r = 0; r < sizeof roots / sizeof *roots; r++) {
        f->root = roots[r];
        if (tensor(f, "", "conditioner.embedders.0.transformer.text_model.embeddings.token_embedding.weight") ||
            tensor(f, "", "conditioner.embedders.0.model.token_embedding.weight"))
            return col_err_set(err, COL_EUNSUPPORTED, "%s is a Stable Diffusion XL checkpoint; only SD 1.x and 2.x "
                               "single files are read", f->path);
        if (tensor(f, P_UNET, "input_blocks.0.0.weight")) return COL_OK;
    }
    f->root = "";
    if (col_ckpt_find(f->ck, "conv_in.weight") && col_ckpt_find(f->ck, "down_blocks.0.resnets.0.conv1.weight"))
        return col_err_set(err, COL_EFORMAT, "%s is one diffusers component, not a single-file checkpoint (open "
                           "its diffusers folder instead)", f->path);
    return col_err_set(err, COL_EFORMAT, "%s is not a Stable Diffusion 1.x/2.x checkpoint in the original layout "
                       "(it has no %sinput_blocks.0.0.weight)", f->path, P_UNET);
}

col_status sd_single_file_open(const char *path, sd_prediction prediction, sd_single_file **out, col_err *err)
{
    *out = NULL;
    sd_single_file *f = calloc(1, sizeof *f);
    if (!f) return col_err_set(err, COL_ENOMEM, "out of memory opening %s", path);
    snprintf(f->path, sizeof f->path, "%s", path);
    col_status st = col_ckpt_open(path, &f->ck, err);
    if (st == COL_OK) st = detect(f, err);
    if (st == COL_OK) st = unet_info(f, err);
    const char *clip_pre = NULL;
    if (st == COL_OK) {
        f->openclip = tensor(f, P_OPENCLIP, "token_embedding.weight") != NULL;
        clip_pre = tensor(f, P_CLIP, "text_model.embeddings.token_embedding.weight") ? "text_model."
                   : tensor(f, P_CLIP, "embeddings.token_embedding.weight") ? "" : NULL;
        if (f->openclip && clip_pre)
            st = col_err_set(err, COL_EFORMAT, "%s holds both a CLIP (SD 1.x) and an OpenCLIP (SD 2.x) text encoder",
                             path);
    }
    if (st == COL_OK) {
        f->comp[SD_UNET].present = true;
        f->comp[SD_TEXT_ENCODER].present = f->openclip || clip_pre;
        for (int i = 0; i < col_ckpt_count(f->ck) && !f->comp[SD_VAE].present; i++)
            f->comp[SD_VAE].present = below(f, col_ckpt_get(f->ck, i), P_VAE) != NULL;
    }
    if (st == COL_OK && f->comp[SD_VAE].present) st = vae_info(f, err);
    if (st == COL_OK && f->comp[SD_TEXT_ENCODER].present) st = text_info(f, clip_pre, err);
    if (st == COL_OK) {
        bool sd2 = f->openclip || (!clip_pre && (f->unet.cross_dim == 1024 ||
                                                 (f->unet.cross_dim != 768 && f->unet.linear_proj)));
        f->fam = sd2 ? SD_FAMILY_SD2 : SD_FAMILY_SD1;
        bool inpaint = f->unet.in_ch == 9;
        f->v = prediction == SD_PREDICTION_V || (prediction == SD_PREDICTION_AUTO && sd2 && !inpaint);
        f->big = sd2 && f->v;
        st = build_maps(f, err);
    }
    for (int c = 0; st == COL_OK && c < SD_NCOMPONENTS; c++) {
        sf_comp *m = &f->comp[c];
        m->f = f;
        m->c = (sd_component)c;
        if (!m->present) continue;
        f->src[c] = (mb_source){sf_read, sf_has, m};
        f->config[c] = c == SD_UNET ? sd_sf_unet_config(&f->unet, f->fam, f->big)
                       : c == SD_VAE ? sd_sf_vae_config(&f->vae, f->big)
                                     : sd_sf_text_config(&f->text, f->fam);
        if (!f->config[c]) st = col_err_set(err, COL_ENOMEM, "out of memory writing the configs of %s", path);
    }
    if (st == COL_OK && !(f->sched = sd_sf_scheduler_config(f->v)))
        st = col_err_set(err, COL_ENOMEM, "out of memory writing the configs of %s", path);
    if (st != COL_OK) {
        sd_single_file_close(f);
        return st;
    }
    *out = f;
    return COL_OK;
}

void sd_single_file_close(sd_single_file *f)
{
    if (!f) return;
    for (int c = 0; c < SD_NCOMPONENTS; c++) {
        for (int i = 0; i < f->comp[c].n; i++) free(f->comp[c].e[i].name);
        free(f->comp[c].e);
        free(f->config[c]);
    }
    free(f->sched);
    col_ckpt_close(f->ck);
    free(f);
}

sd_family sd_single_file_family(const sd_single_file *f)
{
    return f->fam;
}

bool sd_single_file_v_prediction(const sd_single_file *f)
{
    return f->v;
}

bool sd_single_file_inpainting(const sd_single_file *f)
{
    return f->unet.in_ch == 9;
}

const char *sd_single_file_pipeline(const sd_single_file *f)
{
    return sd_single_file_inpainting(f) ? "StableDiffusionInpaintPipeline" : "StableDiffusionPipeline";
}

bool sd_single_file_has(const sd_single_file *f, sd_component c)
{
    return c >= 0 && c < SD_NCOMPONENTS && f->comp[c].present;
}

const mb_source *sd_single_file_source(const sd_single_file *f, sd_component c)
{
    return sd_single_file_has(f, c) ? &f->src[c] : NULL;
}

int sd_single_file_count(const sd_single_file *f, sd_component c)
{
    return sd_single_file_has(f, c) ? f->comp[c].n : 0;
}

const char *sd_single_file_config(const sd_single_file *f, sd_component c)
{
    return sd_single_file_has(f, c) ? f->config[c] : NULL;
}

const char *sd_single_file_scheduler_config(const sd_single_file *f)
{
    return f->sched;
}

const char *sd_single_file_tokenizer(const sd_single_file *f)
{
    (void)f;
    return "clip";
}

const char *sd_single_file_pad_token(const sd_single_file *f)
{
    return f->fam == SD_FAMILY_SD2 ? "!" : "<|endoftext|>";
}
