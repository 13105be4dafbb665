/* lm_par.h - tensor and sequence parallelism for the language models (issue 18).
 *
 * A model-parallel group of processes computes one copy of the model: its
 * tensor-parallel ranks split the layers' matrices (1D: Megatron's column- then
 * row-parallel pairs; 2D: SUMMA over a q x q grid (Optimus); 2.5D: q x q x d
 * (Tesseract); 3D: q x q x q), and its sequence-parallel ranks split each row's
 * positions (ring attention or Ulysses' all-to-all of heads). Every rank builds
 * the same graph structure with its local shapes; the collectives are graph
 * nodes with gradients (comm_graph.h), so autodiff gives every rank the exact
 * gradients of its own parts of the weights.
 *
 * Gradient semantics: the loss is replicated (every rank of the group computes
 * the same scalar, the mean loss over all the group's rows and positions, and
 * seeds it with 1). A tensor is replicated over a communicator (identical on its
 * ranks, and so is its gradient) or partitioned over it. A weight held whole by
 * several ranks that see different data (a bias or a norm weight in 2D, any
 * weight under sequence parallelism) enters the graph through
 * col_comm_graph_copy over them, whose backward sums their gradients, so every
 * copy receives the whole gradient and stays identical after the step.
 *
 * Parameters: each family marks every parameter spec with its role
 * (col_param_role); a mode's shard function turns a role into the block of
 * the whole tensor this rank holds (col_shard). Sessions hold only their
 * blocks: initialised as the whole model's values at those elements, loaded as
 * those blocks of a Hugging Face checkpoint, saved gathered into one Hugging
 * Face directory whatever the layout.
 *
 * Nothing here prints or exits. */
#ifndef COL_MODELS_LM_PAR_H
#define COL_MODELS_LM_PAR_H

#include <stdbool.h>
#include <stdint.h>

#include "lm.h"

struct col_comm;

typedef enum { COL_TP_1D = 0, COL_TP_2D, COL_TP_25D, COL_TP_3D, COL_TP_MODE_COUNT } col_tp_mode;
typedef enum { COL_SP_RING = 0, COL_SP_ULYSSES, COL_SP_MODE_COUNT } col_sp_mode;

/* "1d", "2d", "2.5d", "3d"; "ring", "ulysses" */
const char *col_tp_mode_name(col_tp_mode m);
const char *col_sp_mode_name(col_sp_mode m);
/* from those names; COL_EINVAL with a message listing the names otherwise */
col_status col_tp_mode_parse(const char *s, col_tp_mode *m, col_err *err);
col_status col_sp_mode_parse(const char *s, col_sp_mode *m, col_err *err);

/* A layout's process counts: tp ranks = 1D: n; 2D: q*q; 2.5D: q*q*d; 3D: q*q*q. */
typedef struct {
    col_tp_mode mode;
    int tp;        /* tensor-parallel ranks (1: none) */
    int q, d;      /* the grid's side and depth (2D: d = 1; 3D: d = q; 1D: q = tp, d = 1) */
    col_sp_mode sp_mode;
    int sp;        /* sequence-parallel ranks (1: none) */
} col_par_layout;

/* Fills q and d from mode and tp (COL_EINVAL, one line, when tp is not a square (2D), q*q*d (2.5D, d given), or a
 * cube (3D)), and checks the model against the layout: heads (and key/value heads) divisible by the ranks that
 * split them, hidden and MLP widths by the ranks splitting them, Ulysses' heads by sp, sequence length by sp. */
col_status col_par_layout_check(col_par_layout *l, const col_lm_config *c, int seq, int batch, col_err *err);

/* What a parameter is to the layer using it; a mode's shard function decides its block from this. */
typedef enum {
    COL_ROLE_REPLICATED = 0, /* held whole by every rank (positions, OPT's projections, a value head) */
    COL_ROLE_FIRST,          /* a projection widening from the hidden size: attention's q/k/v, MLP's fc/gate/up */
    COL_ROLE_FIRST_BIAS,     /* its bias [out] */
    COL_ROLE_SECOND,         /* a projection back to the hidden size: attention's output, MLP's down/fc2 */
    COL_ROLE_SECOND_BIAS,    /* its bias [hidden] */
    COL_ROLE_NORM,           /* a norm's weight or bias [hidden] */
    COL_ROLE_EMBED,          /* the token embedding [vocab, hidden] (also the head when tied) */
    COL_ROLE_POS,            /* learned positions [positions, hidden] */
    COL_ROLE_HEAD,           /* an untied lm_head [vocab, hidden] */
} col_param_role;

/* The block of a whole tensor a rank holds: along each of the (up to 2) dimensions, the dimension is `groups`
 * equal segments (3 for GPT-2's fused q|k|v columns, else 1), each cut into `parts` equal parts, and the rank
 * holds part `index` of every segment (concatenated). replicas: how many ranks of the model-parallel group hold
 * this same block (for the gradient norm: each block is counted once). */
typedef struct {
    int parts[2], index[2], groups[2];
    int replicas;
} col_shard;

/* The local shape of a block (shape of the whole tensor in), and whether the block is the whole tensor. */
void col_shard_shape(const col_shard *s, int ndim, const int64_t *whole, int64_t *local);
bool col_shard_whole(const col_shard *s);
/* Copies between a whole tensor (row-major, ndim <= 2, elements of esize bytes) and a block of it: to_block
 * copies the block's elements out of whole into block, else block's into whole. */
void col_shard_copy(const col_shard *s, int ndim, const int64_t *whole_shape, size_t esize, void *whole, void *block,
                    bool to_block);

#endif
