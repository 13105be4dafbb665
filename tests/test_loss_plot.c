/* test_loss_plot.c - loss.png (apps/loss_plot.c) read back with libpng: a PNG of the asked size, white with black
 * axes and text, the training curve in its blue and the validation points in their orange where the data puts
 * them; an empty history still gives a valid (empty) frame. */
#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>

#include "loss_plot.h"
#include "testlib.h"

typedef struct {
    int w, h;
    uint8_t *rgb; /* w * h * 3 */
} image;

static bool read_png(const char *path, image *im)
{
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&pi, path))
        return false;
    pi.format = PNG_FORMAT_RGB;
    im->w = (int)pi.width, im->h = (int)pi.height;
    im->rgb = malloc(PNG_IMAGE_SIZE(pi));
    if (!im->rgb || !png_image_finish_read(&pi, NULL, im->rgb, 0, NULL)) {
        png_image_free(&pi);
        return false;
    }
    return true;
}

static int count(const image *im, int r, int g, int b, int tol)
{
    int n = 0;
    for (int i = 0; i < im->w * im->h; i++) {
        const uint8_t *p = im->rgb + 3 * i;
        n += abs(p[0] - r) <= tol && abs(p[1] - g) <= tol && abs(p[2] - b) <= tol;
    }
    return n;
}

/* the mean row of the pixels of colour (r,g,b) in columns [x0, x1) */
static double mean_row(const image *im, int x0, int x1, int r, int g, int b)
{
    double sum = 0;
    int n = 0;
    for (int y = 0; y < im->h; y++)
        for (int x = x0; x < x1; x++) {
            const uint8_t *p = im->rgb + 3 * (y * im->w + x);
            if (abs(p[0] - r) <= 8 && abs(p[1] - g) <= 8 && abs(p[2] - b) <= 8)
                sum += y, n++;
        }
    return n ? sum / n : -1;
}

int main(void)
{
    char dir[] = "/tmp/test_loss_plotXXXXXX", path[128];
    tl_mkdtemp(dir);
    snprintf(path, sizeof path, "%s/loss.png", dir);
    enum { N = 200 };
    double x[N], y[N], ex[4], ey[4];
    for (int i = 0; i < N; i++)
        x[i] = i + 1, y[i] = 5.0 * exp(-i / 50.0) + 1.0; /* 6 at step 1 falling to about 1.1 */
    for (int k = 0; k < 4; k++)
        ex[k] = 50.0 * (k + 1), ey[k] = y[(int)ex[k] - 1] + 0.3;
    y[100] = NAN; /* a skipped step: the line breaks there */
    loss_series tr = {x, y, N}, ev = {ex, ey, 4};
    col_err err = {0};
    col_status st = loss_plot_write(path, &tr, &ev, LOSS_PLOT_WIDTH, LOSS_PLOT_HEIGHT, &err);
    TL_OK(st == COL_OK, "written: %s", err.msg);
    image im = {0};
    TL_OK(read_png(path, &im), "libpng reads it as a PNG");
    TL_OK(im.w == LOSS_PLOT_WIDTH && im.h == LOSS_PLOT_HEIGHT, "%d x %d (%d x %d asked)", im.w, im.h, LOSS_PLOT_WIDTH,
          LOSS_PLOT_HEIGHT);
    int total = im.w * im.h, white = count(&im, 255, 255, 255, 0), black = count(&im, 0, 0, 0, 40);
    int blue = count(&im, LOSS_PLOT_TRAIN_RGB, 8), orange = count(&im, LOSS_PLOT_EVAL_RGB, 8);
    TL_OK(white > total / 2 && white < total - 2000, "not blank: %d of %d pixels white", white, total);
    TL_OK(black > 1500, "black axes, ticks and labels: %d pixels", black);
    TL_OK(blue > 600, "the training curve: %d blue pixels", blue);
    TL_OK(orange > 4 * 20, "four validation dots: %d orange pixels", orange);
    /* the curve falls: its pixels on the left are higher up (a smaller row) than on the right */
    double left = mean_row(&im, 80, 200, LOSS_PLOT_TRAIN_RGB), right = mean_row(&im, 600, 770, LOSS_PLOT_TRAIN_RGB);
    TL_OK(left >= 0 && right >= 0 && left < right - 100, "the loss falls left to right (rows %.0f then %.0f)", left,
          right);
    free(im.rgb);
    if (getenv("LOSS_PLOT_KEEP")) { /* to look at it */
        char cmd[256];
        snprintf(cmd, sizeof cmd, "cp %s %s", path, getenv("LOSS_PLOT_KEEP"));
        if (system(cmd) != 0)
            TL_NOTE("could not keep the image");
    }
    /* nothing logged yet: still a PNG, with its frame */
    st = loss_plot_write(path, NULL, NULL, 320, 200, &err);
    image e = {0};
    bool read = st == COL_OK && read_png(path, &e);
    TL_OK(read && e.w == 320 && e.h == 200 && count(&e, 0, 0, 0, 40) > 100 && count(&e, LOSS_PLOT_TRAIN_RGB, 8) <= 48,
          "an empty history: a 320 x 200 frame (%d black pixels), no curve (%d blue: the legend's 24 x 2 swatch)",
          read ? count(&e, 0, 0, 0, 40) : -1,
          read ? count(&e, LOSS_PLOT_TRAIN_RGB, 8) : -1);
    free(e.rgb);
    /* a directory that is not there: one error naming the file */
    st = loss_plot_write("/nonexistent-dir/loss.png", &tr, NULL, 100, 100, &err);
    TL_OK(st != COL_OK && strstr(err.msg, "/nonexistent-dir/loss.png"), "an unwritable path: %s", err.msg);
    tl_remove_tree(dir);
    return tl_done();
}
