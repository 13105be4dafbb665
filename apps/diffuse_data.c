/* diffuse_data.c - colossal-diffuse --train's images: read, resized and
 * cropped as diffusers' scripts' torchvision transforms do, shuffled per
 * epoch from the seed. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "diffuse_train.h"
#include "textio.h"

/* ---- Pillow's bilinear resampling (Resample.c), 8 bits per channel ---- */

enum { PREC = 22 }; /* Pillow's PRECISION_BITS: 32 - 8 - 2 */

typedef struct {
    int ksize;
    int *bounds;  /* [out][2]: first input index, count */
    int *k;       /* [out][ksize] fixed-point weights */
} coeffs;

static double triangle(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

static bool make_coeffs(int in, int out, coeffs *c)
{
    double scale = (double)in / out, fs = scale < 1.0 ? 1.0 : scale, support = 1.0 * fs;
    c->ksize = (int)ceil(support) * 2 + 1;
    c->bounds = malloc(sizeof(int) * 2 * (size_t)out);
    c->k = calloc((size_t)out * (size_t)c->ksize, sizeof(int));
    double *w = malloc(sizeof(double) * (size_t)c->ksize);
    if (!c->bounds || !c->k || !w) {
        free(w);
        return false;
    }
    for (int xx = 0; xx < out; xx++) {
        double center = (xx + 0.5) * scale, ww = 0, ss = 1.0 / fs;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in) xmax = in;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            w[x] = triangle((x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        for (int x = 0; x < xmax; x++) {
            double v = ww != 0.0 ? w[x] / ww : w[x];
            c->k[xx * c->ksize + x] = v < 0 ? (int)(-0.5 + v * (1 << PREC)) : (int)(0.5 + v * (1 << PREC));
        }
        c->bounds[2 * xx] = xmin;
        c->bounds[2 * xx + 1] = xmax;
    }
    free(w);
    return true;
}

static uint8_t clip8(int v)
{
    v >>= PREC;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* src [h][w][3] -> dst [h][ow][3] */
static void pass_h(const uint8_t *src, int w, int h, int ow, const coeffs *c, uint8_t *dst)
{
    for (int y = 0; y < h; y++)
        for (int xx = 0; xx < ow; xx++) {
            const int *k = c->k + xx * c->ksize;
            int xmin = c->bounds[2 * xx], n = c->bounds[2 * xx + 1];
            for (int ch = 0; ch < 3; ch++) {
                int ss = 1 << (PREC - 1);
                for (int x = 0; x < n; x++) ss += src[((size_t)y * w + xmin + x) * 3 + ch] * k[x];
                dst[((size_t)y * ow + xx) * 3 + ch] = clip8(ss);
            }
        }
}

/* src [h][w][3] -> dst [oh][w][3] */
static void pass_v(const uint8_t *src, int w, int oh, const coeffs *c, uint8_t *dst)
{
    for (int yy = 0; yy < oh; yy++) {
        const int *k = c->k + yy * c->ksize;
        int ymin = c->bounds[2 * yy], n = c->bounds[2 * yy + 1];
        for (int x = 0; x < w * 3; x++) {
            int ss = 1 << (PREC - 1);
            for (int y = 0; y < n; y++) ss += src[(size_t)(ymin + y) * w * 3 + x] * k[y];
            dst[(size_t)yy * w * 3 + x] = clip8(ss);
        }
    }
}

/* Python's round(x / 2) for an integer x >= 0: halves go to the even neighbour */
static int half_even(int x)
{
    int q = x / 2;
    return (x % 2 && q % 2) ? q + 1 : q;
}

void df_resize_crop(const col_image *in, int r, uint8_t *out)
{
    int w = in->width, h = in->height, nw, nh;
    if (w <= h) nw = r, nh = (int)((double)r * h / w); /* torchvision: int(size * long / short) */
    else nh = r, nw = (int)((double)r * w / h);
    uint8_t *tmp = NULL, *res = NULL;
    const uint8_t *cur = in->data;
    coeffs c = {0};
    bool ok = true;
    if (nw != w) { /* Pillow skips a pass whose size does not change */
        tmp = malloc((size_t)h * nw * 3);
        ok = tmp && make_coeffs(w, nw, &c);
        if (ok) pass_h(cur, w, h, nw, &c, tmp);
        free(c.bounds), free(c.k);
        c = (coeffs){0};
        cur = tmp;
    }
    if (ok && nh != h) {
        res = malloc((size_t)nh * nw * 3);
        ok = res && make_coeffs(h, nh, &c);
        if (ok) pass_v(cur, nw, nh, &c, res);
        free(c.bounds), free(c.k);
        cur = res;
    }
    if (!ok) { /* out of memory: a black image rather than a crash (the caller checked sizes) */
        memset(out, 0, (size_t)r * r * 3);
    } else {
        int top = half_even(nh - r), left = half_even(nw - r);
        for (int y = 0; y < r; y++) memcpy(out + (size_t)y * r * 3, cur + ((size_t)(top + y) * nw + left) * 3, (size_t)r * 3);
    }
    free(tmp);
    free(res);
}

/* ---- the folder ---- */

static bool is_image_name(const char *n)
{
    const char *dot = strrchr(n, '.');
    return dot && dot != n &&
           (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void df_images_free(df_images *d)
{
    for (int i = 0; i < d->n; i++) {
        if (d->path) free(d->path[i]);
        if (d->caption) free(d->caption[i]);
    }
    free(d->path);
    free(d->caption);
    free(d->pixels);
    memset(d, 0, sizeof *d);
}

static col_status read_caption(const char *img, char **out, col_err *err)
{
    char path[4200];
    const char *dot = strrchr(img, '.');
    snprintf(path, sizeof path, "%.*s.txt", (int)(dot - img), img);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return col_err_set(err, COL_EIO, "%s has no caption: write it into %s, or give --instance-prompt for every image",
                           img, path);
    size_t len = 0;
    col_status st = col_read_file(path, 1 << 20, out, &len, err);
    if (st != COL_OK) return st;
    while (len > 0 && isspace((unsigned char)(*out)[len - 1])) (*out)[--len] = '\0';
    if (memchr(*out, '\0', len))
        return col_err_set(err, COL_EFORMAT, "%s is not a text caption (it holds a zero byte)", path);
    return COL_OK;
}

col_status df_images_load(const char *dir, const char *caption, int r, df_images *out, col_err *err)
{
    memset(out, 0, sizeof *out);
    out->r = r;
    DIR *d = opendir(dir);
    if (!d) return col_err_set(err, COL_EIO, "cannot read the image folder %s: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0;
    col_status st = COL_OK;
    for (struct dirent *e; st == COL_OK && (e = readdir(d));) {
        if (!is_image_name(e->d_name)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, sizeof *nn * (size_t)cap);
            if (!nn) st = col_err_set(err, COL_ENOMEM, "out of memory listing %s", dir);
            else names = nn;
        }
        if (st == COL_OK && !(names[n++] = strdup(e->d_name))) st = col_err_set(err, COL_ENOMEM, "out of memory");
    }
    closedir(d);
    if (st == COL_OK && n == 0) st = col_err_set(err, COL_EIO, "%s holds no PNG or JPEG images", dir);
    if (st == COL_OK) {
        qsort(names, (size_t)n, sizeof *names, by_name);
        out->path = calloc((size_t)n, sizeof *out->path);
        out->caption = calloc((size_t)n, sizeof *out->caption);
        out->pixels = malloc((size_t)n * r * r * 3);
        if (!out->path || !out->caption || !out->pixels) st = col_err_set(err, COL_ENOMEM, "out of memory for %d images", n);
        else out->n = n;
    }
    for (int i = 0; i < out->n && st == COL_OK; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        if (!(out->path[i] = malloc(len))) {
            st = col_err_set(err, COL_ENOMEM, "out of memory");
            break;
        }
        snprintf(out->path[i], len, "%s/%s", dir, names[i]);
        if (caption) st = (out->caption[i] = strdup(caption)) ? COL_OK : col_err_set(err, COL_ENOMEM, "out of memory");
        else st = read_caption(out->path[i], &out->caption[i], err);
        col_image im = {0};
        if (st == COL_OK) st = col_image_read(out->path[i], 3, &im, err);
        if (st == COL_OK) df_resize_crop(&im, r, out->pixels + (size_t)i * r * r * 3);
        col_image_free(&im);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (st != COL_OK) df_images_free(out);
    return st;
}

/* ---- the order ---- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

int df_pick(const df_images *d, uint64_t seed, uint64_t g, bool flip, bool *flipped)
{
    uint64_t epoch = g / (uint64_t)d->n, pos = g % (uint64_t)d->n;
    /* Fisher-Yates of epoch's order, only as far as pos: swaps past it do not move it */
    int *perm = malloc(sizeof *perm * (size_t)d->n);
    int pick = (int)pos;
    if (perm) {
        for (int i = 0; i < d->n; i++) perm[i] = i;
        uint64_t s = mix(seed ^ mix(epoch + 0x5eed));
        for (int i = 0; i <= (int)pos; i++) {
            s = mix(s);
            int j = i + (int)(s % (uint64_t)(d->n - i));
            int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        pick = perm[pos];
        free(perm);
    }
    if (flipped) *flipped = flip && (mix(seed ^ mix(g ^ 0xf11bULL)) & 1);
    return pick;
}

void df_pixels(const df_images *d, int i, bool flip, float *out)
{
    int r = d->r;
    const uint8_t *p = d->pixels + (size_t)i * r * r * 3;
    for (int ch = 0; ch < 3; ch++)
        for (int y = 0; y < r; y++)
            for (int x = 0; x < r; x++) {
                int sx = flip ? r - 1 - x : x;
                out[((size_t)ch * r + y) * r + x] = ((float)p[((size_t)y * r + sx) * 3 + ch] / 255.0f - 0.5f) / 0.5f;
            }
}
