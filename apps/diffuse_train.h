/* diffuse_train.h - colossal-diffuse --train: the training images
 * (diffuse_data.c) and the run (diffuse_train.c). */
#ifndef COL_APPS_DIFFUSE_TRAIN_H
#define COL_APPS_DIFFUSE_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "image.h"
#include "status.h"

/* ---- diffuse_data.c ---- */

/* torchvision's Resize(r, BILINEAR) then CenterCrop(r) on a PIL image, as
 * diffusers' training scripts transform their images: the shorter side
 * scaled to r (the longer to int(r * long / short)) with PIL's bilinear
 * filter (a triangle widened by the scale when shrinking: antialiased),
 * computed as Pillow does (separable passes, horizontal first, 22-bit
 * fixed-point weights, each pass rounded to 8 bits; a side already of its
 * size is not filtered), then the centre r x r, its offsets rounded half to
 * even as Python's round(). in is RGB (3 channels); out holds r * r * 3 bytes. */
void df_resize_crop(const col_image *in, int r, uint8_t *out);

typedef struct {
    int n, r;            /* images, their side */
    char **path;         /* [n] */
    char **caption;      /* [n]: the .txt beside each image, or the fixed caption */
    uint8_t *pixels;     /* [n][r][r][3] resized and cropped */
} df_images;

/* Reads every PNG or JPEG in dir (by name order; extensions .png, .jpg,
 * .jpeg in any case, other files ignored) resized to r (df_resize_crop).
 * The caption of NAME.EXT is NAME.txt (trailing white space dropped);
 * caption, when not NULL, is used for every image instead. No image, an
 * image without its caption file, an unreadable image or caption: one line
 * naming it (COL_EIO / COL_EFORMAT). */
col_status df_images_load(const char *dir, const char *caption, int r, df_images *out, col_err *err);
void df_images_free(df_images *d);

/* The image at position g of the run's stream of samples (g = 0, 1, 2, ...
 * over every micro-batch's rows in order): epoch g / n takes the images in a
 * shuffled order drawn from (seed, epoch), and *flip (when flip is asked
 * for) is a coin drawn from (seed, g). Depends on nothing else, so a
 * resumed run takes the same images. */
int df_pick(const df_images *d, uint64_t seed, uint64_t g, bool flip, bool *flipped);

/* Image i as the UNet's input: [3][r][r] floats in [-1, 1] ((v / 255 - 0.5) / 0.5, as
 * torchvision's ToTensor + Normalize([0.5], [0.5])), mirrored left-right when flip. */
void df_pixels(const df_images *d, int i, bool flip, float *out);

#endif
