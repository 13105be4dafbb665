/* test_diffuse_data - colossal-diffuse --train's images (apps/diffuse_data.c):
 * the resize and centre crop against what torchvision's Resize + CenterCrop
 * make with Pillow (tools/refgen/make_sd_train_fixtures.py, tests/fixtures/sd_train/resize),
 * the folder with its captions, the order (each epoch a permutation, the
 * same for the same seed), the pixels' scaling and flip, and the errors a
 * user meets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "diffuse_train.h"
#include "testlib.h"
#include "textio.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/sd_train"
#endif

static void resize(void)
{
    static const struct {
        const char *name;
        int r;
    } cases[] = {{"down", 16}, {"up", 16}, {"odd", 12}, {"square", 16}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char src[512], want[512];
        snprintf(src, sizeof src, FIXTURES "/resize/%s.png", cases[c].name);
        snprintf(want, sizeof want, FIXTURES "/resize/%s_%d.png", cases[c].name, cases[c].r);
        col_image a = {0}, b = {0};
        col_err e = {0};
        int r = cases[c].r, diff = -1, maxd = 0;
        if (col_image_read(src, 3, &a, &e) == COL_OK && col_image_read(want, 3, &b, &e) == COL_OK && b.width == r) {
            uint8_t *out = malloc((size_t)r * r * 3);
            df_resize_crop(&a, r, out);
            diff = 0;
            for (int i = 0; i < r * r * 3; i++) {
                int d = abs((int)out[i] - (int)b.data[i]);
                diff += d != 0;
                maxd = d > maxd ? d : maxd;
            }
            free(out);
        }
        TL_OK(diff == 0, "%s (%dx%d -> %d): Pillow's bilinear resize and torchvision's centre crop exactly (%d bytes "
              "differ, by up to %d) %s", cases[c].name, a.width, a.height, r, diff, maxd, e.msg);
        col_image_free(&a);
        col_image_free(&b);
    }
}

static void folder(void)
{
    df_images d;
    col_err e = {0};
    col_status st = df_images_load(FIXTURES "/images", NULL, 16, &d, &e);
    TL_OK(st == COL_OK && d.n == 4, "the training folder: 4 images, PNG and JPEG (%s)", e.msg);
    if (st != COL_OK) return;
    TL_OK(strstr(d.path[0], "cat.png") && strcmp(d.caption[0], "a photo of a cat") == 0 &&
              strcmp(d.caption[3], "a wide blue gradient") == 0 && strstr(d.path[3], "wide.jpg"),
          "by name, each with its caption (trailing newline dropped)");
    col_image im = {0};
    st = col_image_read(FIXTURES "/images/cat.png", 3, &im, &e);
    TL_OK(st == COL_OK && memcmp(im.data, d.pixels, 16 * 16 * 3) == 0, "an image of the size wanted is kept as it is");
    float px[3 * 16 * 16], fl[3 * 16 * 16];
    df_pixels(&d, 0, false, px);
    df_pixels(&d, 0, true, fl);
    bool ok = st == COL_OK;
    for (int ch = 0; ok && ch < 3; ch++)
        for (int y = 0; ok && y < 16; y++)
            for (int x = 0; ok && x < 16; x++) {
                float want = ((float)im.data[(y * 16 + x) * 3 + ch] / 255.0f - 0.5f) / 0.5f;
                ok = px[(ch * 16 + y) * 16 + x] == want && fl[(ch * 16 + y) * 16 + 15 - x] == want;
            }
    TL_OK(ok, "pixels as ToTensor + Normalize([0.5], [0.5]) give them, CHW; the flip mirrors the columns");
    col_image_free(&im);
    /* the order: every epoch a permutation, the same for the same seed, another for another */
    bool perm = true, same = true, other = false, some_flip = false, some_not = false;
    for (int ep = 0; ep < 6; ep++) {
        int seen[4] = {0};
        for (int k = 0; k < 4; k++) {
            bool f;
            int i = df_pick(&d, 42, (uint64_t)(ep * 4 + k), true, &f);
            perm = perm && i >= 0 && i < 4 && !seen[i]++;
            same = same && df_pick(&d, 42, (uint64_t)(ep * 4 + k), false, NULL) == i;
            other = other || df_pick(&d, 43, (uint64_t)(ep * 4 + k), false, NULL) != i;
            some_flip = some_flip || f;
            some_not = some_not || !f;
        }
    }
    TL_OK(perm && same && other, "each epoch takes every image once, in an order set by the seed");
    TL_OK(some_flip && some_not, "flips come out both ways");
    df_images_free(&d);
    st = df_images_load(FIXTURES "/images", "a photo of sks dog", 8, &d, &e);
    TL_OK(st == COL_OK && d.n == 4 && strcmp(d.caption[2], "a photo of sks dog") == 0,
          "one prompt for every image (DreamBooth's instance prompt)");
    df_images_free(&d);
}

static void errors(void)
{
    char dir[] = "/tmp/test_diffuse_data_XXXXXX";
    if (!mkdtemp(dir)) return;
    df_images d;
    col_err e = {0};
    col_status st = df_images_load(dir, NULL, 16, &d, &e);
    TL_OK(st == COL_EIO && strstr(e.msg, "no PNG or JPEG"), "an empty folder: %s", e.msg);
    char p[600], q[600];
    snprintf(p, sizeof p, "%s/a.png", dir);
    char *png = NULL;
    size_t len = 0;
    col_read_file(FIXTURES "/images/cat.png", 1 << 20, &png, &len, &e);
    col_write_file_atomic(p, png, len, &e);
    st = df_images_load(dir, NULL, 16, &d, &e);
    TL_OK(st == COL_EIO && strstr(e.msg, "a.png has no caption") && strstr(e.msg, "a.txt"), "an image without its caption: %s",
          e.msg);
    snprintf(q, sizeof q, "%s/a.txt", dir);
    col_write_file_atomic(q, "a cat\n", 6, &e);
    snprintf(p, sizeof p, "%s/b.jpg", dir);
    col_write_file_atomic(p, "not a jpeg", 10, &e);
    snprintf(q, sizeof q, "%s/b.txt", dir);
    col_write_file_atomic(q, "broken", 6, &e);
    st = df_images_load(dir, NULL, 16, &d, &e);
    TL_OK(st == COL_EFORMAT && strstr(e.msg, "b.jpg") && !strchr(e.msg, '\n'), "an unreadable image: %s", e.msg);
    unlink(p);
    st = df_images_load(dir, NULL, 16, &d, &e);
    TL_OK(st == COL_OK && d.n == 1, "other files are left alone (%s)", e.msg);
    df_images_free(&d);
    st = df_images_load("/nonexistent/images", NULL, 16, &d, &e);
    TL_OK(st == COL_EIO && strstr(e.msg, "/nonexistent/images"), "a folder that is not there: %s", e.msg);
    free(png);
    snprintf(p, sizeof p, "rm -rf %s", dir);
    if (system(p) != 0) TL_NOTE("cleanup failed");
}

int main(void)
{
    resize();
    folder();
    errors();
    return tl_done();
}
