/* fold_layers.h - the building blocks of the AlphaFold2 graphs: parameters
 * under DeepMind's names, linear layers and layer norms as Haiku defines them,
 * and the chunking every row-wise module shares.
 *
 * DeepMind's parameter files name each array "MODULE//PARAM" with the Haiku
 * module path, e.g.
 *   alphafold/alphafold_iteration/evoformer/evoformer_iteration/msa_transition/transition1//weights
 * and the arrays of a stack of identical blocks (Evoformer, extra-MSA stack)
 * carry the block as a leading dimension. A fold_ctx builds one block of such
 * a stack when layer >= 0: fold_w then asks the builder for "NAME@LAYER", which
 * fold_source (fold_source.h) reads as slice LAYER of the stacked array NAME,
 * so each block's weights are tensors of their own (memtier moves them one
 * block at a time).
 *
 * Layouts: activations are row-major with the channel last, as AlphaFold's
 * (msa [S, N, c_m], pair [N, N, c_z], single [N, c_s]); Haiku linear weights
 * are [in, out] (x @ W), attention projections [c_in, heads, c] and
 * [heads, c, c_out].
 */
#ifndef COL_FOLD_LAYERS_H
#define COL_FOLD_LAYERS_H
#include <stdbool.h>
#include <stdint.h>
#include "graph.h"
#include "mb_builder.h"

typedef struct fold_dap fold_dap; /* fold_dap.h: dynamic axial parallelism over several processes */

typedef struct {
    mb_builder *b;      /* names, the graph (b->g) and the first error */
    int layer;          /* >= 0: weights are slice `layer` of stacked arrays; -1: plain arrays */
    int64_t chunk;      /* rows per chunk in the row-wise modules; 0: one chunk (unchunked) */
    const fold_dap *dap; /* the trunk's processes (fold_trunk.h); NULL: one process */
} fold_ctx;

/* The weight b->prefix + NAME (+ "@layer" when c->layer >= 0) of the given shape. */
col_node *fold_w(fold_ctx *c, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* hk.Linear as AlphaFold uses it: x [..., in] @ MODULE//weights [in, out]
 * (+ MODULE//bias [out] when bias). module is relative to b->prefix. */
col_node *fold_linear(fold_ctx *c, col_node *x, int64_t in, int64_t out, bool bias, const char *module);

/* hk.LayerNorm over the last axis (create_scale and create_offset, eps 1e-5):
 * MODULE//scale [ch], MODULE//offset [ch]. */
col_node *fold_layer_norm(fold_ctx *c, col_node *x, int64_t ch, const char *module);

/* Rows per chunk for `rows` rows (c->chunk, or all of them when 0), and the
 * number of chunks. */
int64_t fold_chunk_rows(const fold_ctx *c, int64_t rows);
int fold_chunk_count(const fold_ctx *c, int64_t rows);

#endif
