/* sd_lora.c - LoRA files read and merged into a component's weights as they load. */
#include "sd_lora.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sd_ldm_names.h"

typedef enum { R_DOWN, R_UP, R_ALPHA } lr_role;

typedef struct {
    sd_component comp;
    bool kohya;                    /* module in kohya's underscore spelling (without "lora_unet_" / "lora_te_") */
    char *module;                  /* else diffusers' dotted module path (the text encoder's without "text_model.") */
    const col_ckpt_tensor *t[3];   /* down, up, alpha (may be NULL) */
} lr_module;

typedef struct {
    char *pattern;
    double alpha;
} lr_pattern;

typedef struct {
    bool has_alpha, rslora;
    double alpha;
    lr_pattern *pat;
    int npat;
} lr_meta;

struct sd_lora {
    char path[SD_PATH_MAX];
    col_ckpt *ck;
    lr_module *m;
    int n;
    lr_meta meta[SD_NCOMPONENTS];
};

/* ---- reading the file's names ---- */

typedef struct {
    sd_component comp;
    bool kohya;
    char *module;
    lr_role role;
    const col_ckpt_tensor *t;
} lr_piece;

static bool ends_with(const char *s, const char *suf, size_t *cut)
{
    size_t a = strlen(s), b = strlen(suf);
    if (a <= b || strcmp(s + a - b, suf)) return false;
    *cut = a - b;
    return true;
}

/* 0: a LoRA piece; -1: unknown; 1: a kind of adapter not merged (*kind names it) */
static int parse_kohya(const char *name, lr_piece *p, const char **kind)
{
    const char *rest;
    if (!strncmp(name, "lora_unet_", 10)) {
        p->comp = SD_UNET;
        rest = name + 10;
    } else if (!strncmp(name, "lora_te_", 8)) {
        p->comp = SD_TEXT_ENCODER;
        rest = name + 8;
    } else if (!strncmp(name, "lora_te1_", 9) || !strncmp(name, "lora_te2_", 9)) {
        *kind = "an SDXL LoRA (two text encoders)";
        return 1;
    } else {
        return -1;
    }
    const char *dot = strchr(rest, '.');
    if (!dot || dot == rest) return -1;
    const char *suf = dot + 1;
    if (!strcmp(suf, "lora_down.weight")) p->role = R_DOWN;
    else if (!strcmp(suf, "lora_up.weight")) p->role = R_UP;
    else if (!strcmp(suf, "alpha")) p->role = R_ALPHA;
    else {
        *kind = !strcmp(suf, "dora_scale") ? "DoRA"
                : !strncmp(suf, "lora_mid", 8) ? "a Tucker-decomposed LoCon (lora_mid)"
                : !strncmp(suf, "hada_", 5) ? "LoHa"
                : !strncmp(suf, "lokr_", 5) ? "LoKr" : NULL;
        return *kind ? 1 : -1;
    }
    p->kohya = true;
    p->module = strndup(rest, (size_t)(dot - rest));
    return p->module ? 0 : -2;
}

/* "to_q" -> "q_proj", ... (the text encoder in diffusers' old attention-processor names) */
static void te_old_names(char *m)
{
    static const char *const from[] = {"self_attn.to_q", "self_attn.to_k", "self_attn.to_v", "self_attn.to_out"};
    static const char *const to[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"};
    size_t cut;
    for (int i = 0; i < 4; i++)
        if (ends_with(m, from[i], &cut) && (cut == 0 || m[cut - 1] == '.')) {
            strcpy(m + cut, to[i]);   /* m has room: the caller allocated 8 bytes more */
            return;
        }
}

static int parse_peft(const char *name, lr_piece *p, const char **kind)
{
    static const char *const unet_roots[] = {"down_blocks.", "mid_block.", "up_blocks.", "conv_in.", "conv_out.",
                                             "time_embedding."};
    const char *rest = NULL;
    if (!strncmp(name, "unet.", 5)) {
        p->comp = SD_UNET;
        rest = name + 5;
    } else if (!strncmp(name, "text_encoder.", 13)) {
        p->comp = SD_TEXT_ENCODER;
        rest = name + 13;
    } else if (!strncmp(name, "text_encoder_2.", 15)) {
        *kind = "an SDXL LoRA (two text encoders)";
        return 1;
    } else {
        for (size_t i = 0; i < sizeof unet_roots / sizeof *unet_roots && !rest; i++)
            if (!strncmp(name, unet_roots[i], strlen(unet_roots[i]))) rest = name;
        if (!rest) return -1;
        p->comp = SD_UNET;
    }
    static const struct { const char *suf; int role; bool old_proc; } sufs[] = {
        {".lora_A.weight", R_DOWN, false}, {".lora_B.weight", R_UP, false},
        {".lora_linear_layer.down.weight", R_DOWN, false}, {".lora_linear_layer.up.weight", R_UP, false},
        {".lora.down.weight", R_DOWN, false}, {".lora.up.weight", R_UP, false},
        {"_lora.down.weight", R_DOWN, true}, {"_lora.up.weight", R_UP, true}, {".alpha", R_ALPHA, false}};
    size_t cut = 0;
    int k = -1;
    for (size_t i = 0; i < sizeof sufs / sizeof *sufs && k < 0; i++)
        if (ends_with(rest, sufs[i].suf, &cut)) k = (int)i;
    if (k < 0) {
        *kind = strstr(rest, "lora_magnitude_vector") ? "DoRA"
                : (strstr(rest, ".lora_A.bias") || strstr(rest, ".lora_B.bias")) ? "LoRA with biases" : NULL;
        return *kind ? 1 : -1;
    }
    if (!strncmp(rest, "text_model.", 11) && p->comp == SD_TEXT_ENCODER) {
        rest += 11;
        cut -= 11;
    }
    char *m = malloc(cut + 16);
    if (!m) return -2;
    memcpy(m, rest, cut);
    m[cut] = '\0';
    char *proc = strstr(m, ".processor.");
    if (proc) memmove(proc, proc + 10, strlen(proc + 10) + 1);   /* "attn1.processor.to_q" -> "attn1.to_q" */
    if (sufs[k].old_proc && p->comp == SD_TEXT_ENCODER) {
        te_old_names(m);
    } else if (sufs[k].old_proc) {
        size_t c2;
        if (ends_with(m, "to_out", &c2)) strcat(m, ".0");
    }
    p->role = sufs[k].role;
    p->kohya = false;
    p->module = m;
    return 0;
}

static int piece_cmp(const void *a, const void *b)
{
    const lr_piece *x = a, *y = b;
    if (x->comp != y->comp) return (int)x->comp - (int)y->comp;
    if (x->kohya != y->kohya) return (int)x->kohya - (int)y->kohya;
    int c = strcmp(x->module, y->module);
    return c ? c : (int)x->role - (int)y->role;
}

static double scalar(const col_ckpt_tensor *t, bool *ok)
{
    float v = 0;
    col_err e = {0};
    *ok = t->ndim <= 1 && (t->ndim == 0 || t->shape[0] == 1) && col_ckpt_read_f32(t, t->ndim, t->shape, &v, &e) == COL_OK;
    return v;
}

/* a module's tensors: down [r, ...], up [out, r, (1, 1)], alpha a number */
static col_status check_module(const sd_lora *l, const lr_module *m, col_err *err)
{
    const col_ckpt_tensor *d = m->t[R_DOWN], *u = m->t[R_UP], *a = m->t[R_ALPHA];
    const col_ckpt_tensor *any = d ? d : u ? u : a;
    if (!d || !u)
        return col_err_set(err, COL_EFORMAT, "%s: %s has no %s", l->path, any->name,
                           !d ? "down (lora_A) beside it" : "up (lora_B) beside it");
    bool ok = d->ndim >= 2 && d->shape[0] >= 1 && (u->ndim == 2 || u->ndim == 4) && u->shape[1] == d->shape[0];
    for (int i = 2; ok && i < u->ndim; i++) ok = u->shape[i] == 1;
    if (!ok)
        return col_err_set(err, COL_EFORMAT, "%s: %s and %s do not make a LoRA pair (down [rank, in, ...], up "
                           "[out, rank] or [out, rank, 1, 1])", l->path, d->name, u->name);
    if (a) {
        double v = scalar(a, &ok);
        if (!ok || !isfinite(v))
            return col_err_set(err, COL_EFORMAT, "%s: %s is not one finite number", l->path, a->name);
    }
    return COL_OK;
}

static col_status group(sd_lora *l, lr_piece *p, int np, col_err *err)
{
    qsort(p, (size_t)np, sizeof *p, piece_cmp);
    l->m = calloc((size_t)np + 1, sizeof *l->m);
    if (!l->m) return col_err_set(err, COL_ENOMEM, "out of memory reading %s", l->path);
    for (int i = 0; i < np;) {
        lr_module *m = &l->m[l->n++];
        m->comp = p[i].comp;
        m->kohya = p[i].kohya;
        m->module = p[i].module;
        p[i].module = NULL;   /* the module's now */
        int j = i;
        for (; j < np && (j == i || (p[j].comp == m->comp && p[j].kohya == m->kohya && !strcmp(p[j].module, m->module)));
             j++) {
            if (m->t[p[j].role])
                return col_err_set(err, COL_EFORMAT, "%s: %s and %s are the same LoRA weight", l->path,
                                   m->t[p[j].role]->name, p[j].t->name);
            m->t[p[j].role] = p[j].t;
        }
        i = j;
        col_status st = check_module(l, m, err);
        if (st) return st;
    }
    return COL_OK;
}

/* PEFT's config as diffusers stores it: {"unet.lora_alpha": 8, "unet.alpha_pattern": {...}, ...} */
static col_status read_metadata(sd_lora *l, col_err *err)
{
    if (strcmp(col_ckpt_format(l->ck), "safetensors")) return COL_OK;
    col_st_file *sf = NULL;
    col_err e2 = {0};
    if (col_st_open(l->path, &sf, &e2) != COL_OK) return COL_OK;   /* a sharded set: no metadata read */
    const char *js = col_st_metadata(sf, "lora_adapter_metadata");
    cJSON *root = js ? cJSON_Parse(js) : NULL;
    col_status st = COL_OK;
    if (js && !cJSON_IsObject(root))
        st = col_err_set(err, COL_EFORMAT, "%s: its lora_adapter_metadata is not a JSON object", l->path);
    static const char *const pre[SD_NCOMPONENTS] = {"unet", NULL, "text_encoder"};
    for (int c = 0; root && st == COL_OK && c < SD_NCOMPONENTS; c++) {
        if (!pre[c]) continue;
        lr_meta *mt = &l->meta[c];
        char key[64];
        snprintf(key, sizeof key, "%s.lora_alpha", pre[c]);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
        if (cJSON_IsNumber(v)) mt->has_alpha = true, mt->alpha = v->valuedouble;
        snprintf(key, sizeof key, "%s.use_rslora", pre[c]);
        mt->rslora = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, key));
        snprintf(key, sizeof key, "%s.use_dora", pre[c]);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, key)))
            st = col_err_set(err, COL_EUNSUPPORTED, "%s is a DoRA adapter; only LoRA / LoCon are merged", l->path);
        snprintf(key, sizeof key, "%s.alpha_pattern", pre[c]);
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(root, key), *it;
        int n = cJSON_IsObject(pat) ? cJSON_GetArraySize(pat) : 0;
        if (n > 0 && !(mt->pat = calloc((size_t)n, sizeof *mt->pat)))
            st = col_err_set(err, COL_ENOMEM, "out of memory reading %s", l->path);
        if (n > 0 && st == COL_OK) cJSON_ArrayForEach(it, pat) {
            if (!cJSON_IsNumber(it) || !it->string) continue;
            if (!(mt->pat[mt->npat].pattern = strdup(it->string))) {
                st = col_err_set(err, COL_ENOMEM, "out of memory reading %s", l->path);
                break;
            }
            mt->pat[mt->npat++].alpha = it->valuedouble;
        }
    }
    cJSON_Delete(root);
    col_st_close(sf);
    return st;
}

col_status sd_lora_open(const char *path, sd_lora **out, col_err *err)
{
    *out = NULL;
    sd_lora *l = calloc(1, sizeof *l);
    if (!l) return col_err_set(err, COL_ENOMEM, "out of memory opening %s", path);
    snprintf(l->path, sizeof l->path, "%s", path);
    col_status st = col_ckpt_open(path, &l->ck, err);
    int n = st == COL_OK ? col_ckpt_count(l->ck) : 0, np = 0, unknown = 0;
    lr_piece *p = st == COL_OK ? calloc((size_t)n + 1, sizeof *p) : NULL;
    const char *first_unknown = NULL;
    if (st == COL_OK && !p) st = col_err_set(err, COL_ENOMEM, "out of memory opening %s", path);
    for (int i = 0; st == COL_OK && i < n; i++) {
        const col_ckpt_tensor *t = col_ckpt_get(l->ck, i);
        const char *kind = NULL;
        lr_piece pc = {.t = t};
        int rc = parse_kohya(t->name, &pc, &kind);
        if (rc == -1) rc = parse_peft(t->name, &pc, &kind);
        if (rc == -2) st = col_err_set(err, COL_ENOMEM, "out of memory opening %s", path);
        else if (rc == 1) st = col_err_set(err, COL_EUNSUPPORTED, "%s is %s (%s); only LoRA / LoCon for SD 1.x/2.x "
                                           "are merged", path, kind, t->name);
        else if (rc < 0 && !unknown++) first_unknown = t->name;
        else if (rc == 0) p[np++] = pc;
    }
    if (st == COL_OK && np == 0)
        st = col_err_set(err, COL_EFORMAT, "%s holds no LoRA weights (lora_A / lora_B, lora_down / lora_up)%s%s%s",
                         path, unknown ? " (first tensor: " : "", unknown ? first_unknown : "", unknown ? ")" : "");
    else if (st == COL_OK && unknown)
        st = col_err_set(err, COL_EFORMAT, "%s: %d tensor%s not LoRA weights of an SD 1.x/2.x UNet or text encoder "
                         "(first: %s)", path, unknown, unknown > 1 ? "s are" : " is", first_unknown);
    if (st == COL_OK) st = group(l, p, np, err);
    if (st == COL_OK) st = read_metadata(l, err);
    for (int i = 0; p && i < np; i++) free(p[i].module);
    free(p);
    if (st != COL_OK) {
        sd_lora_close(l);
        return st;
    }
    *out = l;
    return COL_OK;
}

void sd_lora_close(sd_lora *l)
{
    if (!l) return;
    for (int i = 0; i < l->n; i++) free(l->m[i].module);
    free(l->m);
    for (int c = 0; c < SD_NCOMPONENTS; c++) {
        for (int i = 0; i < l->meta[c].npat; i++) free(l->meta[c].pat[i].pattern);
        free(l->meta[c].pat);
    }
    col_ckpt_close(l->ck);
    free(l);
}

const char *sd_lora_path(const sd_lora *l)
{
    return l->path;
}

int sd_lora_modules(const sd_lora *l, sd_component c)
{
    int n = 0;
    for (int i = 0; i < l->n; i++) n += l->m[i].comp == c;
    return n;
}

/* ---- merging ---- */

typedef struct {
    char *target;      /* diffusers' name of the adapted tensor (the text encoder's without "text_model.") */
    int file;
    const lr_module *m;
    double factor;     /* weight * scale */
} ls_entry;

struct sd_lora_source {
    const mb_source *base;
    sd_component c;
    sd_lora **files;
    ls_entry *e;
    int n, adapted;
    mb_source src;
};

static int entry_cmp(const void *a, const void *b)
{
    const ls_entry *x = a, *y = b;
    int c = strcmp(x->target, y->target);
    return c ? c : x->file - y->file;
}

static const char *te_plain(sd_component c, const char *name)
{
    return c == SD_TEXT_ENCODER && !strncmp(name, "text_model.", 11) ? name + 11 : name;
}

static bool base_has(const sd_lora_source *s, const char *name)
{
    if (s->base->has(s->base, name)) return true;
    if (s->c != SD_TEXT_ENCODER) return false;
    char alt[300];
    return snprintf(alt, sizeof alt, "text_model.%s", name) < (int)sizeof alt && s->base->has(s->base, alt);
}

/* the diffusers tensor a module adapts (0), or -1 */
static int target_of(const lr_module *m, int lpb, char *out, size_t cap)
{
    char path[300], dots[300];
    const char *mod = m->module;
    if (m->kohya) {
        if (sd_kohya_dots(m->module, dots, sizeof dots)) return -1;
        mod = te_plain(m->comp, dots);
        if (m->comp == SD_UNET && sd_ldm_unet_is_ldm(mod)) {
            if (lpb < 1 || sd_ldm_unet_name(mod, lpb, path, sizeof path)) return -1;
            mod = path;
        }
    }
    int k = snprintf(out, cap, "%s.weight", mod);
    return k > 0 && (size_t)k < cap ? 0 : -1;
}

static double module_alpha(const sd_lora *l, const lr_module *m, const char *target, double rank)
{
    bool ok;
    if (m->t[R_ALPHA]) return scalar(m->t[R_ALPHA], &ok);
    const lr_meta *mt = &l->meta[m->comp];
    size_t len = strlen(target) - 7;   /* without ".weight" */
    for (int i = 0; i < mt->npat; i++) {   /* PEFT's pattern: the module's name or its last components */
        size_t pl = strlen(mt->pat[i].pattern);
        if (pl <= len && !strncmp(target + len - pl, mt->pat[i].pattern, pl) && (pl == len || target[len - pl - 1] == '.'))
            return mt->pat[i].alpha;
    }
    return mt->has_alpha ? mt->alpha : rank;
}

static col_status lr_read(const mb_source *src, const char *name, int ndim, const int64_t *shape, float *dst,
                          col_err *err);
static int lr_has(const mb_source *src, const char *name)
{
    return base_has(src->ctx, te_plain(((const sd_lora_source *)src->ctx)->c, name));
}

col_status sd_lora_source_create(const mb_source *base, sd_component c, sd_lora *const *loras, const float *weights,
                                 int n, sd_lora_source **out, col_err *err)
{
    *out = NULL;
    sd_lora_source *s = calloc(1, sizeof *s);
    int total = 0;
    for (int f = 0; f < n; f++) total += sd_lora_modules(loras[f], c);
    if (!s || !(s->e = calloc((size_t)total + 1, sizeof *s->e)) || !(s->files = calloc((size_t)n + 1, sizeof *s->files))) {
        sd_lora_source_free(s);
        return col_err_set(err, COL_ENOMEM, "out of memory merging LoRA files");
    }
    s->base = base;
    s->c = c;
    memcpy(s->files, loras, (size_t)n * sizeof *loras);
    s->src = (mb_source){lr_read, lr_has, s};
    int lpb = 0;   /* the UNet's layers per block, for LDM names */
    while (c == SD_UNET && lpb < 16) {
        char nm[64];
        snprintf(nm, sizeof nm, "down_blocks.0.resnets.%d.conv1.weight", lpb);
        if (!base->has(base, nm)) break;
        lpb++;
    }
    col_status st = COL_OK;
    for (int f = 0; f < n && st == COL_OK; f++) {
        int unmatched = 0;
        char first[700] = "";
        for (int i = 0; i < loras[f]->n && st == COL_OK; i++) {
            const lr_module *m = &loras[f]->m[i];
            if (m->comp != c) continue;
            char target[300];
            int bad = target_of(m, lpb, target, sizeof target);
            if (bad || !base_has(s, target)) {
                if (!unmatched++)
                    snprintf(first, sizeof first, "%s, %s%s", m->t[R_DOWN]->name, bad ? "a name not understood" : "read as ",
                             bad ? "" : target);
                continue;
            }
            double rank = (double)m->t[R_DOWN]->shape[0];
            double alpha = module_alpha(loras[f], m, target, rank);
            double scale = loras[f]->meta[c].rslora ? alpha / sqrt(rank) : alpha / rank;
            ls_entry *e = &s->e[s->n];
            if (!(e->target = strdup(target))) st = col_err_set(err, COL_ENOMEM, "out of memory merging LoRA files");
            e->file = f;
            e->m = m;
            e->factor = (double)weights[f] * scale;
            s->n += st == COL_OK;
        }
        if (st == COL_OK && unmatched)
            st = col_err_set(err, COL_EFORMAT, "%s: %d LoRA module%s match%s no tensor of the %s (first: %s)",
                             loras[f]->path, unmatched, unmatched > 1 ? "s" : "", unmatched > 1 ? "" : "es",
                             sd_component_name(c), first);
    }
    if (st == COL_OK) {
        qsort(s->e, (size_t)s->n, sizeof *s->e, entry_cmp);
        for (int i = 0; i < s->n && st == COL_OK; i++) {
            if (i && !strcmp(s->e[i].target, s->e[i - 1].target) && s->e[i].file == s->e[i - 1].file)
                st = col_err_set(err, COL_EFORMAT, "%s: %s and %s both adapt the %s's %s", s->files[s->e[i].file]->path,
                                 s->e[i - 1].m->t[R_DOWN]->name, s->e[i].m->t[R_DOWN]->name, sd_component_name(c),
                                 s->e[i].target);
            s->adapted += !i || strcmp(s->e[i].target, s->e[i - 1].target);
        }
    }
    if (st != COL_OK) {
        sd_lora_source_free(s);
        return st;
    }
    *out = s;
    return COL_OK;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* dst (the tensor, ndim/shape) += factor * up @ down */
static col_status merge(const sd_lora_source *s, const ls_entry *e, int ndim, const int64_t *shape, float *dst,
                        col_err *err)
{
    const col_ckpt_tensor *d = e->m->t[R_DOWN], *u = e->m->t[R_UP];
    int64_t r = d->shape[0], out = u->shape[0], k = 1, numel = 1;
    for (int i = 1; i < d->ndim; i++) k *= d->shape[i];
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    if (ndim < 1 || shape[0] != out || numel != out * k) {
        char want[96], dn[96], up[96];
        shape_str(want, sizeof want, ndim, shape);
        shape_str(dn, sizeof dn, d->ndim, d->shape);
        shape_str(up, sizeof up, u->ndim, u->shape);
        return col_err_set(err, COL_ESHAPE, "%s: the LoRA pair %s %s and up %s does not fit the %s's %s, which is %s",
                           s->files[e->file]->path, d->name, dn, up, sd_component_name(s->c), e->target, want);
    }
    float *df = malloc((size_t)(r * k) * sizeof *df), *uf = malloc((size_t)(out * r) * sizeof *uf);
    double *row = malloc((size_t)k * sizeof *row);
    col_status st = !df || !uf || !row ? col_err_set(err, COL_ENOMEM, "out of memory merging %s", d->name) : COL_OK;
    if (st == COL_OK) st = col_ckpt_read_f32(d, d->ndim, d->shape, df, err);
    if (st == COL_OK) st = col_ckpt_read_f32(u, u->ndim, u->shape, uf, err);
    for (int64_t o = 0; st == COL_OK && o < out; o++) {
        for (int64_t j = 0; j < k; j++) row[j] = 0;
        for (int64_t q = 0; q < r; q++) {
            double a = uf[o * r + q];
            const float *dq = df + q * k;
            for (int64_t j = 0; j < k; j++) row[j] += a * dq[j];
        }
        float *w = dst + o * k;
        for (int64_t j = 0; j < k; j++) w[j] = (float)((double)w[j] + e->factor * row[j]);
    }
    free(df);
    free(uf);
    free(row);
    return st;
}

static col_status lr_read(const mb_source *src, const char *name, int ndim, const int64_t *shape, float *dst,
                          col_err *err)
{
    const sd_lora_source *s = src->ctx;
    char alt[300];
    const char *bn = name;   /* the text encoder's name as the base spells it, with or without "text_model." */
    if (s->c == SD_TEXT_ENCODER && !s->base->has(s->base, name)) {
        const char *plain = te_plain(s->c, name);
        if (plain != name) bn = plain;
        else if (snprintf(alt, sizeof alt, "text_model.%s", name) < (int)sizeof alt && s->base->has(s->base, alt))
            bn = alt;
    }
    col_status st = s->base->read(s->base, bn, ndim, shape, dst, err);
    if (st != COL_OK || s->n == 0) return st;
    ls_entry key = {(char *)te_plain(s->c, name), -1, NULL, 0};
    /* the first entry of the target: lower bound (file -1 sorts before every file) */
    int lo = 0, hi = s->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (entry_cmp(&s->e[mid], &key) < 0) lo = mid + 1;
        else hi = mid;
    }
    for (int i = lo; i < s->n && st == COL_OK && !strcmp(s->e[i].target, key.target); i++)
        st = merge(s, &s->e[i], ndim, shape, dst, err);
    return st;
}

const mb_source *sd_lora_source_get(const sd_lora_source *s)
{
    return &s->src;
}

int sd_lora_source_adapted(const sd_lora_source *s)
{
    return s->adapted;
}

void sd_lora_source_free(sd_lora_source *s)
{
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->e[i].target);
    free(s->e);
    free(s->files);
    free(s);
}
