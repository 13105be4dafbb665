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
 * The grids (lm_par_grid.c; rank (i, j, k) of q x q x d, activations between
 * the layers [rows, T, C/q], hidden block j):
 *   2D, 2.5D: rows block k*q + i of d*q. A FIRST or SECOND weight [in, out]:
 *     block (i, j) of q x q (stored [out, in]: the same block), the same on
 *     every depth k; Y = X W with X gathered over the row and W over the
 *     column (SUMMA's bytes), output block j (whole heads: H/q per rank).
 *   3D: rows block i*q + k of q^2. FIRST [C, F]: in block j*q + i of q^2, out
 *     block k; SECOND [F, C]: in block k, out block j*q + i; X gathered over
 *     the depth (FIRST) or the row (SECOND), W over the column, the partial
 *     products reduce-scattered over the row (FIRST) or the depth (SECOND)
 *     along the rows. Between a FIRST and its SECOND the rows are block
 *     i*q + j and the width block k: only per-row work goes there.
 *   Every grid: biases, norms, embeddings, positions and the head hold their
 *   hidden block (FIRST biases: their output block), copied over the ranks
 *   seeing other rows; norms sum their statistics over the row; the head
 *   sums its partial logits over the row, or (a vocabulary divisible by q,
 *   when that moves fewer bytes) splits the vocabulary over the row.
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
    /* 1D only: Megatron's sequence-parallel regions - between the projections (norms, dropout, residual) each
     * tensor-parallel rank holds a share of the positions, so their activations take 1/tp of the memory; the
     * all-reduce after a SECOND projection becomes a reduce-scatter and the copy before a FIRST one an all-gather
     * (the same bytes) */
    bool seq_split;
} col_par_layout;

/* Fills q and d from mode and tp (COL_EINVAL, one line, when tp is not a square (2D), q*q*d (2.5D, d given), or a
 * cube (3D)), and checks the model against the layout: heads (and key/value heads) divisible by the ranks that
 * split them, hidden and MLP widths by the ranks splitting them, Ulysses' heads by sp, sequence length by sp. */
col_status col_par_layout_check(col_par_layout *l, const col_lm_config *c, int seq, int batch, col_err *err);

/* col_param_role (what a parameter is to the layer using it) is in lm.h: the specs carry it. */

/* The block of a whole tensor a rank holds: along each of the (up to 2) dimensions, the dimension is `groups`
 * equal segments (3 for GPT-2's fused q|k|v columns, else 1), each cut into `parts` equal parts, and the rank
 * holds part `index` of every segment (concatenated). replicas: how many ranks of the model-parallel group hold
 * this same block (for the gradient norm: each block is counted once). */
typedef struct {
    int parts[2], index[2], groups[2];
    int replicas;
    /* a dimension that does not divide (the vocabulary: GPT-2's 50257): parts of ceil(n / parts) elements, the
     * last one padded past n (zeros in the block, never written to the whole tensor); groups must be 1 */
    bool ceil[2];
} col_shard;

/* The local shape of a block (shape of the whole tensor in), and whether the block is the whole tensor. */
void col_shard_shape(const col_shard *s, int ndim, const int64_t *whole, int64_t *local);
bool col_shard_whole(const col_shard *s);
/* Copies between a whole tensor (row-major, ndim <= 2, elements of esize bytes) and a block of it: to_block
 * copies the block's elements out of whole into block, else block's into whole. */
void col_shard_copy(const col_shard *s, int ndim, const int64_t *whole_shape, size_t esize, void *whole, void *block,
                    bool to_block);

/* ---- a rank's place in a layout, and what its mode builds ---- */
typedef struct col_lm_par col_lm_par;

/* The functions of a tensor-parallel mode (lm_par_1d.c, lm_par_grid.c). Activations between the layers are
 * [b, t, h] on each rank: rows(), the step's rows this rank computes (1D: all; the grids: a share), t the
 * positions (the sequence-parallel share), h = hidden_local() of the hidden size. Builders follow graph.h's
 * rules (NULL after an error, recorded in g). */
typedef struct {
    col_tp_mode mode;
    /* the block of a parameter (its spec's role, groups and whole shape) this rank holds */
    void (*shard)(const col_lm_par *p, const col_param_spec *s, col_shard *out);
    /* the step's rows this rank computes: [*row0, *row0 + *n) of B */
    void (*rows)(const col_lm_par *p, int B, int *row0, int *n);
    /* the activations' hidden width on this rank (of C), and the attention heads it computes (of H) */
    int64_t (*hidden_local)(const col_lm_par *p, int64_t C);
    int (*heads_local)(const col_lm_par *p, int H);
    /* the node the layers read for parameter leaf w of role r: w itself, or w through col_comm_graph_copy over
     * the ranks holding the same block while seeing other data (so its gradient is summed over them) */
    col_node *(*use)(col_graph *g, const col_lm_par *p, col_param_role r, col_node *w);
    /* x [b, t, in_l] times a FIRST or SECOND weight's block (stored [in, out] when in_out: GPT-2's Conv1D, else
     * [out, in]: nn.Linear) plus its bias block (or NULL) -> [b, t, out_l]: FIRST gives this rank's share of the
     * widened activations (whole heads), SECOND the hidden layout again */
    col_node *(*linear)(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, col_node *b, col_param_role r,
                        bool in_out);
    /* LayerNorm (b may be NULL only with rms) or RMSNorm over the whole hidden size of x [b, t, h] */
    col_node *(*norm)(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, col_node *b, float eps, bool rms);
    /* the token embedding: the EMBED block w, ids [b, t] (the whole vocabulary's ids) -> [b, t, h] */
    col_node *(*embed)(col_graph *g, const col_lm_par *p, col_node *w, col_node *ids);
    /* learned positions: the POS block w (a REPLICATED role's leaf under 1D), pos [t] -> [t, h] */
    col_node *(*positions)(col_graph *g, const col_lm_par *p, col_node *w, col_node *pos);
    /* The head and the loss: x [b, t, h] (after the final norm), the head's block w (EMBED when tied, else
     * HEAD: [vocab, hidden] as stored), targets [b, t] of this rank's rows and positions (whole-vocabulary ids,
     * -1 ignored), inv_count an f32 [1] input holding 1 / (the targets counted in the whole step of the
     * model-parallel group). Returns the replicated mean cross-entropy of the whole step (the sum over every
     * rank's counted targets times inv_count, summed over the ranks splitting rows and positions: sp as well,
     * p->sp). *logits (when not NULL) gets this rank's logits [b*t, vocab] gathered whole (for evaluation and
     * decoding; NULL in a training graph: with_logits false). */
    col_node *(*loss)(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, col_node *targets,
                      col_node *inv_count, int64_t vocab, bool with_logits, col_node **logits);
    /* The whole-vocabulary logits of x [b, t, h] with the head block w: [b*t, vocab] on every rank (forward
     * graphs, decoding). (vocab: the model's vocabulary, which a block's rows may pad past.) */
    col_node *(*logits)(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, int64_t vocab);
} col_tp_ops;

struct col_lm_par {
    col_par_layout layout;
    const col_tp_ops *ops;
    /* the communicators (NULL where the count is 1): tp the tensor-parallel group (rank tp_rank), sp the
     * sequence-parallel group (rank sp_rank), and for the grids the rows, columns and depth of the tp group
     * (1D: none): rank tp_rank = (k * q + i) * q + j, with i the row, j the column, k the depth; row = the ranks
     * of the same i and k (their j differ), col = same j and k, dep = same i and j. */
    struct col_comm *tp, *sp, *row, *col, *dep;
    int tp_rank, sp_rank, i, j, k;
};

/* The modes' tables: 1D (lm_par_1d.c), the grids 2D, 2.5D and 3D (lm_par_grid.c). */
extern const col_tp_ops col_tp_1d_ops, col_tp_2d_ops, col_tp_25d_ops, col_tp_3d_ops;
const col_tp_ops *col_tp_ops_of(col_tp_mode m);

/* A rank's place from the model-parallel group mp (tp x sp ranks, rank m = sp_rank * tp + tp_rank; NULL when
 * both are 1) and a checked layout: the communicators split from mp (collective over mp), the mode's table.
 * col_lm_par_close frees the communicators it made (not mp). */
col_status col_lm_par_open(col_lm_par *p, const col_par_layout *l, struct col_comm *mp, col_err *err);
void col_lm_par_close(col_lm_par *p);

/* Whether the tp and sp groups hold more than one rank. */
static inline bool col_par_active(const col_lm_par *p) { return p && (p->layout.tp > 1 || p->layout.sp > 1); }

#endif
