/* fold_source.h - AlphaFold2 weights by name from a DeepMind parameter file.
 *
 * A parameter file (params_model_N(_ptm).npz, opened with col_ckpt_open)
 * names each array "MODULE//PARAM"; a stack of blocks stores one array with
 * the block as its leading dimension. The graph builders ask for the weights
 * of block k as "MODULE//PARAM@k" (fold_layers.h); this source answers with
 * slice k of the stacked array, and with the array itself for a plain name.
 * The message of a missing or mis-shaped array names the file's array and
 * the block. */
#ifndef COL_FOLD_SOURCE_H
#define COL_FOLD_SOURCE_H
#include "checkpoint.h"
#include "mb_builder.h"
#include "mb_source.h"

typedef struct {
    const col_ckpt *ckpt;
} fold_source_ctx;

void fold_source_init(mb_source *out, fold_source_ctx *ctx, const col_ckpt *c);

/* The number of blocks of the stack whose arrays include NAME (the leading
 * dimension of that array), or -1 when the file has no NAME. */
int64_t fold_source_stack_depth(const col_ckpt *c, const char *name);

#endif
