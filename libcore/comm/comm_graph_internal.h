/* comm_graph_internal.h - what comm_graph.c gives comm_graph_grad.c (not installed).
 *
 * Every collective node is an EXTERN node made by col_cg_node: its function
 * (one for all of them, in comm_graph.c) gets the node itself as its user
 * pointer and reads what to do from the node's parameters (p.i, below), the
 * communicator among them. A copy, and with one rank any kind made with
 * `alone` set, is a copy of the source's bytes in the plan's memory (host or
 * device: no transport), so single-process graphs, device plans among them,
 * can use the builders with gradients. */
#ifndef COL_COMM_GRAPH_INTERNAL_H
#define COL_COMM_GRAPH_INTERNAL_H

#include "comm_graph.h"

/* what a collective node does */
typedef enum {
    COL_CGK_ALL_GATHER = 1, /* src [n] -> out P blocks of n: block r = rank r's src */
    COL_CGK_ALL_TO_ALL,     /* src P blocks -> out P blocks: out block j = rank j's src block `rank` */
    COL_CGK_ALL_REDUCE,     /* out = op over the ranks of src (op: the node's op) */
    COL_CGK_REDUCE_SCATTER, /* src P blocks of n -> out [n]: the sum over the ranks of their block `rank` */
    COL_CGK_COPY,           /* out = src 0 (a copy in the plan's memory; never a transfer) */
    COL_CGK_SHIFT,          /* out = what rank (rank - by) mod P sent; src goes to rank (rank + by) mod P */
} col_cg_kind;

/* a collective node's parameters, kept in the node's p.i[] (comm in p.i[7]) */
typedef struct {
    col_cg_kind kind;
    int axis, axis2; /* the user's axes (the backward builders read them) */
    col_cg_use use;
    col_red_op op;
    int by;     /* shift: 0 .. P-1 */
    bool alone; /* with one rank: a copy in the plan's memory, host or device (the builders with gradients; those
                   without keep comm_graph.h's rule: the transport must move the plan's memory) */
} col_cg_params;

/* The point-to-point tag of a shift's messages on its communicator. */
#define COL_CG_SHIFT_TAG 32700

/* An EXTERN node computing prm->kind over the ranks of c (p.i holds prm and c), with the gradient builder bwd
 * (NULL: none); name as the node's name. NULL after recording the graph's error. */
col_node *col_cg_node(col_graph *g, col_comm *c, const col_cg_params *prm, col_extern_bwd_fn bwd, col_dtype dt,
                      int ndim, const int64_t *shape, int nsrc, col_node *const *src, const char *name);
/* the parameters and communicator of a node col_cg_node made */
void col_cg_params_of(const col_node *n, col_cg_params *prm);
col_comm *col_cg_comm_of(const col_node *n);

/* g usable, x given (a NULL x: an earlier builder failed), and a communicator (COL_EINVAL) */
bool col_cg_start(col_graph *g, col_comm *c, col_node *x, const char *what);
/* axis in -ndim .. ndim-1 as 0 .. ndim-1, or -1 after recording COL_ESHAPE ("NAME %d is not a dimension of x") */
int col_cg_axis(col_graph *g, const char *what, const char *name, int axis, const col_tensor *x);
/* dimension axis of x splits into size(c) equal parts (COL_ESHAPE "does not split into ... equal parts" if not) */
bool col_cg_divides(col_graph *g, col_comm *c, const char *what, const col_tensor *x, int axis);

/* The arranged collectives (axes already checked, 0 .. ndim-1), each with the gradient builder bwd on its node and
 * prm's axis/use/op fields (kind set here): the result has the user's shape (comm_graph.h). The collective node
 * itself holds blocks: an all-gather's output and an all-to-all's operands are [P, ...], a reduce-scatter's
 * operand is P blocks of its output. */
col_node *col_cg_all_gather(col_graph *g, col_comm *c, col_node *x, int axis, col_extern_bwd_fn bwd,
                            const col_cg_params *prm);
col_node *col_cg_all_to_all(col_graph *g, col_comm *c, col_node *x, int split_axis, int concat_axis,
                            col_extern_bwd_fn bwd, const col_cg_params *prm);
col_node *col_cg_reduce_scatter(col_graph *g, col_comm *c, col_node *x, int axis, col_extern_bwd_fn bwd,
                                const col_cg_params *prm);

#endif
