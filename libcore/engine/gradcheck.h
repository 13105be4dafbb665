/* gradcheck.h - compare autodiff gradients with central finite differences.
 *
 * The function under test is built by a callback from leaf nodes; the check
 * builds loss = sum(f(inputs) * R) for a fixed random R, runs backward, and
 * compares each float input's analytic gradient with
 * (loss(x + h) - loss(x - h)) / 2h, evaluated in double on the host from the
 * graph's f32 outputs. Used by the op tests, and by a test of the checker
 * itself that plants a wrong backward kernel and expects a failure.
 */
#ifndef COL_GRADCHECK_H
#define COL_GRADCHECK_H

#include "backend.h"
#include "graph.h"

#define COL_GC_MAX_INPUTS 6

typedef struct {
    col_dtype dtype;
    int ndim;
    int64_t shape[COL_MAX_DIMS];
    const void *data;   /* contiguous values; copied */
    bool no_grad;       /* float input that is not differentiated (e.g. a mask) */
} col_gc_input;

/* Builds f(inputs). leaves[i] are the graph nodes of the inputs (float
 * inputs are parameters). Return NULL on error (the graph keeps it). */
typedef col_node *(*col_gc_build_fn)(col_graph *g, col_node **leaves, void *user);

typedef struct {
    double h;               /* finite-difference step (default 1e-3) */
    double rtol, atol;      /* per element: |a - n| <= atol + rtol * |n|  (defaults 1e-2, 1e-3) */
    int max_points;         /* elements checked per input, spread evenly (default 48; 0 = default) */
    uint64_t seed;          /* for R */
} col_gc_opts;

typedef struct {
    int checked;            /* elements compared */
    int failed;             /* elements outside tolerance */
    double max_abs_err;     /* largest |analytic - numeric| */
    int worst_input;
    int64_t worst_index;
    double worst_analytic, worst_numeric;
} col_gc_result;

/* Returns COL_OK if the graph could be built and run (whether or not the
 * gradients matched: see res->failed). */
col_status col_gradcheck(const col_backend *be, col_gc_build_fn build, void *user, int ninputs,
                         const col_gc_input *inputs, const col_gc_opts *opts, col_gc_result *res, col_err *err);

#endif
