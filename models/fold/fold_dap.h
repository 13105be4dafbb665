/* fold_dap.h - FastFold's Dynamic Axial Parallelism (DAP; Cheng et al.,
 * "FastFold", 2022) for AlphaFold2's trunk (fold_trunk.h): p processes each
 * hold a slice of the MSA and pair activations, compute only their part of
 * each module and exchange what the others need with all-gathers and
 * all-to-alls inside the plan (libcore/comm/comm_graph.h). Activation
 * memory and work divide by p; the outputs are the one-process trunk's up to
 * float rounding.
 *
 * The slices. A dimension of `full` rows is cut into p parts of
 * part = ceil(full / p) rows: rank r holds rows r*part .. r*part + part - 1,
 * those >= full being padding (rows of zeros, or whatever the modules make
 * of them: never read by a real row). Every rank's slice has the same shape,
 * as the collectives need; after a collective the padding is cut off. The
 * MSA [S, N, c] is split by rows (sequences) for its row-wise work, by
 * columns (residues) for its column-wise work; the pair [N, N, c_z] by rows
 * i or by columns j. Per block (monomer order), as FastFold's Evoformer:
 *   row attention with pair bias   MSA rows; the bias [N, N, H] from the local
 *                                  pair rows, all-gathered
 *   all-to-all                     MSA rows -> columns
 *   column (global) attention,     MSA columns
 *   MSA transition
 *   outer product mean             output rows i of the local columns; the
 *                                  right projection all-gathered over residues
 *   all-to-all                     MSA columns -> rows
 *   triangle mult. outgoing        pair rows; the right projection all-gathered
 *   all-to-all                     pair rows -> columns
 *   triangle mult. incoming        pair columns; the right projection
 *                                  all-gathered over columns
 *   all-to-all                     pair columns -> rows
 *   triangle attention starting    pair rows; the bias [H, N, N] all-gathered
 *   all-to-all                     pair rows -> columns
 *   triangle attention ending      pair columns; the bias all-gathered
 *   pair transition                pair columns
 *   all-to-all                     pair columns -> rows
 * The trunk's inputs are whole on every rank (each uploads the same
 * features); each rank embeds its own rows. At the end the pair, the single
 * and the MSA's first row are gathered whole on every rank.
 *
 * Every rank builds the same trunk (the same sizes, widths and chunking)
 * with its own fold_dap, and runs its plans' collectives in the same order
 * (comm.h's rule). The collectives run on the MPI transport for host plans
 * (the CPU backend), on NCCL for plans on a GPU (comm_graph.h).
 */
#ifndef COL_FOLD_DAP_H
#define COL_FOLD_DAP_H
#include <stdint.h>

#include "comm.h"
#include "fold_config.h"
#include "fold_layers.h"

struct fold_dap {
    col_comm *comm;  /* the trunk's processes; must outlive the plans built with it */
    int rank, size;  /* col_comm_rank and col_comm_size of comm */
};

/* d for the processes of comm. COL_EINVAL without a communicator;
 * COL_EUNSUPPORTED in a build without MPI (no collectives). */
col_status fold_dap_init(fold_dap *d, col_comm *comm, col_err *err);

/* The rows of `full` each rank holds, padding included (ceil(full / size)),
 * and the first of this rank's (rank * part). d NULL: full and 0. */
int64_t fold_dap_part(const fold_dap *d, int64_t full);
int64_t fold_dap_first(const fold_dap *d, int64_t full);
/* How many of this rank's rows are real (not padding): 0 .. part. */
int64_t fold_dap_real(const fold_dap *d, int64_t full);

/* ---- graph pieces (the trunk's; each is x itself for c->dap NULL or one
 * process) ---- */

/* This rank's slice along axis of x (whose dimension axis is full): its rows,
 * then the padding as rows of zeros; part rows. */
col_node *fold_dap_local(fold_ctx *c, col_node *x, int axis, int64_t full);

/* Every rank's slice x (part rows along axis) gathered along axis, the
 * padding cut off: full rows (a view when the padding is cut off an inner
 * axis). */
col_node *fold_dap_gather(fold_ctx *c, col_node *x, int axis, int64_t full);

/* x [part(rows), cols, ch] split by rows -> [rows, part(cols), ch] split by
 * columns, and back: x [rows, part(cols), ch] -> [part(rows), cols, ch]
 * (one all-to-all each). */
col_node *fold_dap_row_to_col(fold_ctx *c, col_node *x, int64_t rows, int64_t cols);
col_node *fold_dap_col_to_row(fold_ctx *c, col_node *x, int64_t rows, int64_t cols);

/* One block of a stack (the Evoformer's or the extra-MSA stack's, weights as
 * fold_trunk's) on this rank's slices: *msa [part(n_rows), n_res, c] (NULL:
 * no MSA rows, the pair path alone) and *pair [part(n_res), n_res, c_z],
 * both split by rows, replaced by the block's outputs in the same layout.
 * Errors go to the builder (the outputs are then NULL). */
void fold_dap_block(fold_ctx *c, const fold_stack_dims *d, int64_t c_z, int64_t n_res, int64_t n_rows,
                    col_node **msa, col_node **pair);

#endif
