/* loss_plot.c - the loss curves as a PNG with cairo (loss_plot.h) */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cairo.h>

#include "loss_plot.h"
#include "textio.h"

enum { MARGIN_L = 72, MARGIN_R = 24, MARGIN_T = 40, MARGIN_B = 52 };

typedef struct {
    double x0, x1, y0, y1; /* data range */
    double px0, px1, py0, py1; /* the plot area in pixels (py0 the bottom) */
} frame;

static double px(const frame *f, double x) { return f->px0 + (x - f->x0) / (f->x1 - f->x0) * (f->px1 - f->px0); }
static double py(const frame *f, double y) { return f->py0 - (y - f->y0) / (f->y1 - f->y0) * (f->py0 - f->py1); }

/* 1, 2 or 5 times a power of ten, near range / n */
static double nice_step(double range, int n)
{
    double raw = range / n, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void extend(const loss_series *s, double *x0, double *x1, double *y0, double *y1)
{
    for (size_t i = 0; s && i < s->n; i++) {
        if (!isfinite(s->y[i]) || !isfinite(s->x[i]))
            continue;
        *x0 = fmin(*x0, s->x[i]), *x1 = fmax(*x1, s->x[i]);
        *y0 = fmin(*y0, s->y[i]), *y1 = fmax(*y1, s->y[i]);
    }
}

static void text_at(cairo_t *cr, double x, double y, const char *s, double ax, double ay)
{
    cairo_text_extents_t te;
    cairo_text_extents(cr, s, &te);
    cairo_move_to(cr, x - te.width * ax - te.x_bearing, y + te.height * ay);
    cairo_show_text(cr, s);
}

static void axes(cairo_t *cr, const frame *f)
{
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, f->px0 + 0.5, f->py1 + 0.5, f->px1 - f->px0, f->py0 - f->py1);
    cairo_stroke(cr);
    cairo_set_font_size(cr, 12);
    char lab[32];
    double sx = nice_step(f->x1 - f->x0, 6), sy = nice_step(f->y1 - f->y0, 5);
    for (double v = ceil(f->x0 / sx) * sx; v <= f->x1 + 1e-9 * sx; v += sx) {
        double x = floor(px(f, v)) + 0.5;
        cairo_move_to(cr, x, f->py0), cairo_line_to(cr, x, f->py0 + 5);
        snprintf(lab, sizeof lab, "%.0f", v);
        text_at(cr, x, f->py0 + 9, lab, 0.5, 1);
    }
    int dec = sy >= 1 ? 0 : (int)ceil(-log10(sy) - 1e-9);
    for (double v = ceil(f->y0 / sy) * sy; v <= f->y1 + 1e-9 * sy; v += sy) {
        double y = floor(py(f, v)) + 0.5;
        cairo_move_to(cr, f->px0 - 5, y), cairo_line_to(cr, f->px0, y);
        snprintf(lab, sizeof lab, "%.*f", dec, v);
        text_at(cr, f->px0 - 8, y, lab, 1, 0.5);
    }
    cairo_stroke(cr);
    cairo_set_font_size(cr, 14);
    text_at(cr, (f->px0 + f->px1) / 2, f->py0 + 30, "step", 0.5, 1);
    cairo_save(cr);
    cairo_translate(cr, 18, (f->py0 + f->py1) / 2);
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, 0, 0, "loss", 0.5, 0.5);
    cairo_restore(cr);
    text_at(cr, (f->px0 + f->px1) / 2, 14, "training and validation loss", 0.5, 1);
}

static void curve(cairo_t *cr, const frame *f, const loss_series *s, double r, double g, double b, bool dots)
{
    if (!s || s->n == 0)
        return;
    cairo_set_source_rgb(cr, r / 255, g / 255, b / 255);
    cairo_set_line_width(cr, 2);
    bool open = false;
    for (size_t i = 0; i < s->n; i++) {
        if (!isfinite(s->y[i]) || !isfinite(s->x[i])) {
            open = false;
            continue;
        }
        (open ? cairo_line_to : cairo_move_to)(cr, px(f, s->x[i]), py(f, s->y[i]));
        open = true;
    }
    cairo_stroke(cr);
    for (size_t i = 0; dots && i < s->n; i++)
        if (isfinite(s->y[i]) && isfinite(s->x[i])) {
            cairo_arc(cr, px(f, s->x[i]), py(f, s->y[i]), 3.5, 0, 2 * M_PI);
            cairo_fill(cr);
        }
}

static void legend(cairo_t *cr, const frame *f, bool has_eval)
{
    static const double col[2][3] = {{LOSS_PLOT_TRAIN_RGB}, {LOSS_PLOT_EVAL_RGB}};
    static const char *const name[2] = {"training", "validation"};
    cairo_set_font_size(cr, 12);
    for (int k = 0; k < (has_eval ? 2 : 1); k++) {
        double y = f->py1 + 16 + 18 * k, x = f->px1 - 110;
        cairo_set_source_rgb(cr, col[k][0] / 255, col[k][1] / 255, col[k][2] / 255);
        cairo_set_line_width(cr, 2);
        cairo_move_to(cr, x, y), cairo_line_to(cr, x + 24, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        text_at(cr, x + 30, y, name[k], 0, 0.5);
    }
}

static cairo_status_t to_fd(void *closure, const unsigned char *data, unsigned int len)
{
    return col_write_all(*(int *)closure, data, len) ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

col_status loss_plot_write(const char *path, const loss_series *train, const loss_series *eval, int width, int height,
                           col_err *err)
{
    frame f = {INFINITY, -INFINITY, INFINITY, -INFINITY, MARGIN_L, width - MARGIN_R, height - MARGIN_B, MARGIN_T};
    extend(train, &f.x0, &f.x1, &f.y0, &f.y1);
    extend(eval, &f.x0, &f.x1, &f.y0, &f.y1);
    if (!(f.x0 <= f.x1)) /* nothing to draw: an empty frame over steps 0..1 */
        f.x0 = 0, f.x1 = 1, f.y0 = 0, f.y1 = 1;
    if (f.x1 - f.x0 < 1)
        f.x1 = f.x0 + 1;
    double pad = (f.y1 - f.y0) * 0.05;
    if (!(pad > 0))
        pad = fabs(f.y0) * 0.05 + 0.05;
    f.y0 -= pad, f.y1 += pad;
    cairo_surface_t *sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
    cairo_t *cr = cairo_create(sf);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    axes(cr, &f);
    cairo_save(cr);
    cairo_rectangle(cr, f.px0, f.py1, f.px1 - f.px0, f.py0 - f.py1);
    cairo_clip(cr);
    curve(cr, &f, train, LOSS_PLOT_TRAIN_RGB, false);
    curve(cr, &f, eval, LOSS_PLOT_EVAL_RGB, true);
    cairo_restore(cr);
    legend(cr, &f, eval && eval->n > 0);
    cairo_status_t cs = cairo_status(cr);
    cairo_destroy(cr);
    col_atomic_file af;
    col_status st = cs == CAIRO_STATUS_SUCCESS ? col_atomic_begin(path, &af, err)
                                               : col_err_set(err, COL_ENOMEM, "%s: drawing: %s", path,
                                                             cairo_status_to_string(cs));
    if (st == COL_OK) {
        cs = cairo_surface_write_to_png_stream(sf, to_fd, &af.fd);
        st = col_atomic_end(&af, path, cs == CAIRO_STATUS_SUCCESS, err);
        if (st == COL_OK && cs != CAIRO_STATUS_SUCCESS)
            st = col_err_set(err, COL_EIO, "%s: %s", path, cairo_status_to_string(cs));
    }
    cairo_surface_destroy(sf);
    return st;
}
