/* lm_par_internal.h - what the tensor-parallel modes share (lm_par_1d.c, lm_par_grid.c). Not installed. */
#ifndef COL_MODELS_LM_PAR_INTERNAL_H
#define COL_MODELS_LM_PAR_INTERNAL_H

#include "lm_par.h"

struct col_comm;

/* x [b, t, in] times a weight block w ([in, out] when in_out: GPT-2's Conv1D, else [out, in]: nn.Linear; x cast to
 * w's dtype) -> [b, t, out], plus the bias block b (as f32) when not NULL */
col_node *lmp_product(col_graph *g, col_node *x, col_node *w, col_node *b, bool in_out);
/* [t >= a] of f32 nodes holding small integers (token ids): exact, relu(t - a + 1) - relu(t - a) */
col_node *lmp_at_least(col_graph *g, col_node *t, float a);
/* The cross-entropy [N] of targets t [N] (whole-vocabulary ids, i32; -1 gives a value to be masked by the caller)
 * from this rank's part [v0, v0 + n) of the logits l [N, n], the parts spread over the ranks of c: log of the sum
 * over every part of exp(l - m) + m - l_t, with m the maximum over the parts (a constant to autodiff) and l_t from
 * the rank holding t. Replicated over c (every rank gets the same values). */
col_node *lmp_vocab_ce(col_graph *g, struct col_comm *c, col_node *l, col_node *t, int64_t v0);

#endif
