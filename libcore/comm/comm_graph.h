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

#endif
