/* mb_source.h - where a component's weights come from, by diffusers name.
 *
 * The diffusers layout stores each tensor under the name the graph builders
 * ask for (mb_builder.h); other layouts (a single-file LDM checkpoint, a
 * checkpoint with LoRA adapters merged in) are sources that map the name to
 * their own tensors and may compute the result (slice a fused projection,
 * reshape a 1x1 convolution, add an adapter's product). */
#ifndef COL_MB_SOURCE_H
#define COL_MB_SOURCE_H

#include <stdint.h>

#include "checkpoint.h"
#include "status.h"

typedef struct mb_source mb_source;
struct mb_source {
    /* Fills dst (the product of shape floats) with the tensor diffusers calls name. A tensor the
     * source does not hold: COL_EFORMAT naming it; another shape: COL_ESHAPE naming both. */
    col_status (*read)(const mb_source *s, const char *name, int ndim, const int64_t *shape, float *dst,
                       col_err *err);
    /* Whether the source holds name (any shape). */
    int (*has)(const mb_source *s, const char *name);
    const void *ctx;
};

/* A checkpoint whose names are diffusers' (col_ckpt_open on a diffusers component's weights);
 * prefix (may be NULL) is put before every name, e.g. a component inside a bigger file. */
typedef struct {
    const col_ckpt *ckpt;
    char prefix[64];
} mb_ckpt_source;
void mb_source_ckpt(mb_source *out, mb_ckpt_source *ctx, const col_ckpt *c, const char *prefix);

#endif
