/* comm_graph.h - collectives as nodes of a define-then-run graph (issue 16:
 * FastFold's dynamic axial parallelism, where each recycling pass of the
 * folding model is one plan and the activations move between ranks inside it).
 *
 * Each builder makes an EXTERN node (ops.h col_extern) whose function runs
 * the collective of comm.h on one contiguous buffer when the plan runs, with
 * the permutes and copies that arrange the data as graph ops around it
 * (col_permute + col_contiguous + col_reshape; none where the layout already
 * fits). The node's data are passed to the transport as the plan holds them:
 * a host plan's (the CPU backend) to the MPI transport, a device plan's (the
 * CUDA backend) to a communicator over NCCL queued on the backend's stream
 * (comm_nccl.h); the other pairings fail when the plan runs, with a message.
 *
 * Every rank of c must run its plans' collective nodes in the same order with
 * the same shapes (comm.h's rule): build the same graph on every rank. c must
 * outlive the plans of g. A collective's failure (a timeout, a dead peer)
 * stops the run with the communicator's status and message; the communicator
 * is then broken (comm.h). No gradient flows through these nodes (inference:
 * backward through one fails). Builders follow graph.h's rules: NULL and the
 * graph's first error on bad arguments, NULL at once after an earlier error. */
#ifndef COL_COMM_GRAPH_H
#define COL_COMM_GRAPH_H

#include "comm.h"
#include "graph.h"

/* Every rank's x (the same shape and dtype on every rank) concatenated along
 * axis in rank order: shape of x with dimension axis times col_comm_size(c).
 * axis in -ndim .. ndim-1 (negative: from the end). */
col_node *col_comm_graph_all_gather(col_graph *g, col_comm *c, col_node *x, int axis);

/* x split into col_comm_size(c) equal parts along split_axis, part k sent to
 * rank k, the parts received concatenated along concat_axis in rank order:
 * shape of x with split_axis divided by the size and concat_axis multiplied
 * by it (the same axis: the shape of x). FastFold's all-to-all: x [N/P, N, C]
 * (rows split over P ranks), split_axis 1, concat_axis 0, gives [N, N/P, C]
 * (columns split), and split_axis 0, concat_axis 1 turns it back. The size of
 * split_axis must divide evenly (COL_ESHAPE otherwise). Axes as above. */
col_node *col_comm_graph_all_to_all(col_graph *g, col_comm *c, col_node *x, int split_axis, int concat_axis);

/* ---- collectives with gradients (issue 18: tensor and sequence parallelism) ----
 *
 * Every rank of c builds the same graph. A tensor is replicated over c (the
 * same values on every rank, and the same gradient) or partitioned (each rank
 * its own part, or its own partial sum); the model's loss is replicated (each
 * rank computes the same scalar and seeds it with 1). Each builder's backward
 * is the one that then gives every rank the gradients the single process
 * computing the whole model gets. `use` says how the output is used:
 *   COL_CG_SAME  the same way on every rank (the work after it is replicated):
 *                its gradient is replicated, and taken as it is;
 *   COL_CG_SPLIT differently on each rank (the work after it is partitioned):
 *                the ranks' gradients are summed.
 * Collective nodes (and their backward nodes) run in graph order on every
 * rank; c must outlive the plans. These run on host plans over MPI and on
 * device plans over NCCL, as the builders above; with a communicator of one
 * rank each is a copy made in the plan's memory, host or device (no
 * transport), so single-process graphs can use them. copy and split never
 * move data between ranks (a copy in the plan's memory, any transport). Each
 * backward is built of these builders (all-reduce SAME <-> copy, all-gather
 * SAME <-> split, all-gather SPLIT <-> reduce-scatter, ...), so a backward
 * pass can be differentiated again. A shift's messages use point-to-point
 * tag 32700 on c. Builders refuse bad arguments as above (axes out of range
 * and sizes that do not split: COL_ESHAPE; a reduction or use that does not
 * exist: COL_EINVAL; avg of integers: COL_EDTYPE). */
typedef enum { COL_CG_SAME = 0, COL_CG_SPLIT } col_cg_use;

/* op over the ranks of x (same shape everywhere). Gradient: sum/avg with COL_CG_SAME: dy as it is (times 1/P for
 * avg) - Megatron's "reduce from the tensor-parallel region"; with COL_CG_SPLIT: the all-reduce (sum or avg) of dy;
 * max/min: none (the result is a constant to autodiff, e.g. a softmax's shift). */
col_node *col_comm_graph_all_reduce(col_graph *g, col_comm *c, col_node *x, col_red_op op, col_cg_use use);
/* x itself; its gradient is the sum over the ranks of dy (Megatron's "copy to the tensor-parallel region"): a
 * replicated x entering partitioned work, or a weight held whole by ranks that see different data. */
col_node *col_comm_graph_copy(col_graph *g, col_comm *c, col_node *x);
/* as col_comm_graph_all_gather, with a gradient: COL_CG_SAME: this rank's part of dy along axis; COL_CG_SPLIT:
 * the reduce-scatter of dy along axis (the sum over ranks of this rank's part). */
col_node *col_comm_graph_all_gather_grad(col_graph *g, col_comm *c, col_node *x, int axis, col_cg_use use);
/* the sum over ranks of x, cut along axis into P parts, part `rank` kept: x's shape with axis divided by P
 * (COL_ESHAPE unless it divides). Gradient: the all-gather of dy along axis. */
col_node *col_comm_graph_reduce_scatter(col_graph *g, col_comm *c, col_node *x, int axis);
/* this rank's part of a replicated x along axis (no transfer). Gradient: the all-gather of dy along axis. */
col_node *col_comm_graph_split(col_graph *g, col_comm *c, col_node *x, int axis);
/* col_comm_graph_all_to_all with a gradient: the all-to-all of dy with the axes swapped. */
col_node *col_comm_graph_all_to_all_grad(col_graph *g, col_comm *c, col_node *x, int split_axis, int concat_axis);
/* A ring pass: x goes to rank (rank + by) mod P, and the result is what rank (rank - by) mod P sent (its x's
 * shape). Gradient: dy passed back by -by. */
col_node *col_comm_graph_shift(col_graph *g, col_comm *c, col_node *x, int by);

/* Ring self-attention (Colossal-AI's sequence parallelism): the sequence of T positions is cut into P = size(c)
 * consecutive blocks, rank r holding positions [r*Tl, (r+1)*Tl); q [B, H, Tl, D], k and v [B, Hkv, Tl, D] (H a
 * multiple of Hkv: grouped queries) of this rank's block. The result [B, H, Tl, D] is attention of this rank's
 * queries over the whole sequence's keys (causal: key position <= query position), softmax(q k^T * scale) v
 * (scale 0: 1/sqrt(D)), as col_attention over the whole sequence gives for these rows. The key/value blocks go
 * around the ring (P - 1 passes forward; the backward passes them again with their gradients), and the softmax is
 * merged block by block (online), so memory grows with Tl, not T. f32. */
col_node *col_comm_graph_ring_attention(col_graph *g, col_comm *c, col_node *q, col_node *k, col_node *v, int causal,
                                        float scale);

#endif
