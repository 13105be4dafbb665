/* loss_plot.h - the loss curves of a run as a PNG, drawn with cairo: the training loss per step (a blue line)
 * and the validation loss at each evaluation (orange, a dot per point), against the step, with labelled axes
 * and a legend. */
#ifndef COL_APPS_LOSS_PLOT_H
#define COL_APPS_LOSS_PLOT_H

#include <stddef.h>

#include "status.h"

typedef struct {
    const double *x, *y; /* step, loss; non-finite losses are left out (the line breaks there) */
    size_t n;
} loss_series;

enum { LOSS_PLOT_WIDTH = 800, LOSS_PLOT_HEIGHT = 500 };

/* The colours of the two curves (RGB in 0..255), for readers of the image. */
#define LOSS_PLOT_TRAIN_RGB 31, 119, 180
#define LOSS_PLOT_EVAL_RGB 255, 127, 14

/* Writes path (replaced atomically) as a width x height PNG of the training and validation series. */
col_status loss_plot_write(const char *path, const loss_series *train, const loss_series *eval, int width, int height,
                           col_err *err);

#endif
