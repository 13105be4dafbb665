/* lm_par_1d.c - 1D tensor parallelism (Megatron-LM): the FIRST projections
 * of attention and the MLP split by their outputs (whole heads, whole MLP
 * columns: column-parallel), the SECOND ones by their inputs (row-parallel,
 * their partial sums all-reduced), the token embedding and the head split by
 * the vocabulary (never gathering the whole logits while training).
 *
 * With P ranks, rank r:
 *   FIRST  weight [in, out] / [out, in]: part r of out (GPT-2's q|k|v: part r of each); bias: part r
 *   SECOND weight: part r of in; bias whole
 *   EMBED, HEAD [vocab, hidden]: rows [r V/P, (r+1) V/P)
 *   norms, positions, the others: whole (replicated: every rank computes the same from the same data)
 * With seq_split (Megatron's sequence parallelism) the regions between the
 * projections hold this rank's share of the positions instead: each
 * all-reduce becomes a reduce-scatter along the positions and each copy into a
 * column-parallel product an all-gather (the same bytes), and the norms'
 * and positions' weights are copied over the ranks (their gradients add).
 * Activations between the layers are whole [b, t, C] on every rank. Per
 * layer the forward pass all-reduces twice (after attention's and the MLP's
 * SECOND projection) and so does the backward pass (before each FIRST
 * projection: col_comm_graph_copy's gradient): Megatron's 4 all-reduces of
 * b*s*h per layer.
 *
 * The vocabulary-parallel cross-entropy of a row with logits l (this rank
 * holds l_v for v in its part) and target t: with m the maximum over every
 * rank's part (a constant to the gradient) and s = sum over ranks of
 * sum_v exp(l_v - m), CE = log s + m - l_t, where l_t comes from the rank
 * holding t (the others add 0). The integer tests on the targets (counted,
 * held here) are exact float arithmetic on small integers: [t >= a] =
 * relu(t - a + 1) - relu(t - a). */
#include "lm_par.h"

#ifdef COL_WITH_COMM /* without MPI no layout opens (col_lm_par_open) */
#include "comm_graph.h"
#include "lm_layers.h"
#include "lm_par_internal.h"

static int tp_size(const col_lm_par *p) { return p->layout.tp > 1 ? p->layout.tp : 1; }

static void shard_1d(const col_lm_par *p, const col_param_spec *s, col_shard *out)
{
    int P = tp_size(p), sp = p->layout.sp > 1 ? p->layout.sp : 1;
    *out = (col_shard){.parts = {1, 1}, .index = {0, 0}, .groups = {1, 1}, .replicas = sp};
    int dim = -1;
    switch (s->role) {
    case COL_ROLE_FIRST: dim = s->in_out ? 1 : 0; break;
    case COL_ROLE_SECOND: dim = s->in_out ? 0 : 1; break;
    case COL_ROLE_FIRST_BIAS: dim = 0; break;
    case COL_ROLE_EMBED:
    case COL_ROLE_HEAD: dim = 0; break;
    default: break;
    }
    if (dim < 0 || P == 1) {
        out->replicas = sp * P;
        return;
    }
    out->parts[dim] = P;
    out->index[dim] = p->tp_rank;
    out->groups[dim] = s->groups > 0 ? s->groups : 1;
    /* the vocabulary need not divide: equal parts, the last one padded (Megatron pads the vocabulary too) */
    out->ceil[dim] = s->role == COL_ROLE_EMBED || s->role == COL_ROLE_HEAD;
}

static void rows_1d(const col_lm_par *p, int B, int *row0, int *n)
{
    (void)p;
    *row0 = 0;
    *n = B;
}

static int64_t hidden_1d(const col_lm_par *p, int64_t C) { return (void)p, C; }
static int heads_1d(const col_lm_par *p, int H) { return H / tp_size(p); }

/* Megatron's sequence-parallel regions: between the projections this rank holds its share of the positions */
static bool split_regions(const col_lm_par *p) { return p->tp && p->layout.seq_split; }

/* every weight block is held by the sequence-parallel ranks, which see other positions: their gradients add; so
 * are the weights the split regions use whole on their share of the positions (norms, the SECOND biases; not the
 * positions' table: its lookup covers every position, and the split after it gathers the gradient whole) */
static col_node *use_1d(col_graph *g, const col_lm_par *p, col_param_role r, col_node *w)
{
    bool whole = r == COL_ROLE_NORM || r == COL_ROLE_SECOND_BIAS || r == COL_ROLE_REPLICATED;
    if (split_regions(p) && whole)
        w = col_comm_graph_copy(g, p->tp, w);
    return p->sp ? col_comm_graph_copy(g, p->sp, w) : w;
}

/* x [b, t, C] of the replicated region (or this rank's positions of it) as the whole input of a column-parallel
 * product */
static col_node *into_columns(col_graph *g, const col_lm_par *p, col_node *x)
{
    return split_regions(p) ? col_comm_graph_all_gather_grad(g, p->tp, x, 1, COL_CG_SPLIT)
                            : col_comm_graph_copy(g, p->tp, x);
}

/* partial sums [b, t, C] of a row-parallel product summed over the ranks: whole, or this rank's positions */
static col_node *out_of_rows(col_graph *g, const col_lm_par *p, col_node *y)
{
    return split_regions(p) ? col_comm_graph_reduce_scatter(g, p->tp, y, 1)
                            : col_comm_graph_all_reduce(g, p->tp, y, COL_RED_SUM, COL_CG_SAME);
}

col_node *lmp_product(col_graph *g, col_node *x, col_node *w, col_node *b, bool in_out)
{
    if (!x || !w)
        return NULL;
    col_node *xw = col_lm_operand(g, x, w);
    if (!in_out)
        return col_linear(g, xw, w, b ? col_lm_f32(g, b) : NULL);
    int64_t flat[2] = {-1, w->t.shape[0]}, shape[3] = {x->t.shape[0], x->t.shape[1], w->t.shape[1]};
    col_node *y = col_matmul(g, col_reshape(g, xw, 2, flat), w);
    if (b)
        y = col_add(g, y, col_lm_f32(g, b));
    return col_reshape(g, y, 3, shape);
}

static col_node *linear_1d(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, col_node *b,
                           col_param_role r, bool in_out)
{
    if (!p->tp)
        return lmp_product(g, x, w, b, in_out);
    if (r == COL_ROLE_FIRST) /* column-parallel: the whole x in, this rank's outputs (and their bias) out */
        return lmp_product(g, into_columns(g, p, x), w, b, in_out);
    /* row-parallel: this rank's inputs, a partial sum of every output, summed over the ranks, then the bias */
    col_node *y = out_of_rows(g, p, lmp_product(g, x, w, NULL, in_out));
    return b ? col_add(g, y, col_lm_f32(g, b)) : y;
}

static col_node *norm_1d(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, col_node *b, float eps, bool rms)
{
    (void)p;
    return rms ? col_rmsnorm(g, x, col_lm_f32(g, w), eps) : col_layernorm(g, x, col_lm_f32(g, w), col_lm_f32(g, b), eps);
}

col_node *lmp_at_least(col_graph *g, col_node *t, float a)
{
    return col_sub(g, col_relu(g, col_scale(g, t, 1.0f, 1.0f - a)), col_relu(g, col_scale(g, t, 1.0f, -a)));
}
#define at_least lmp_at_least

/* this rank's vocabulary part [v0, v0 + n) of a [vocab, ...] block w: its rows past the vocabulary (the last
 * part's padding) hold zeros */
static void vocab_part(const col_lm_par *p, const col_node *w, int64_t *v0, int64_t *n)
{
    *n = w->t.shape[0];
    *v0 = (int64_t)p->tp_rank * *n;
}

/* logits l [N, n] of this rank's part with its padding columns (past vocab) pushed to -1e30: they weigh nothing in
 * a softmax and get no gradient */
static col_node *mask_padding(col_graph *g, const col_lm_par *p, col_node *l, int64_t vocab)
{
    int64_t n = l ? l->t.shape[1] : 0, v0 = (int64_t)p->tp_rank * n, pad = v0 + n - vocab;
    if (!l || pad <= 0)
        return l;
    int64_t a[2] = {1, n - pad}, b[2] = {1, pad};
    col_node *parts[2] = {col_fill(g, COL_F32, 2, a, 0.0f), col_fill(g, COL_F32, 2, b, -1e30f)};
    return col_add(g, l, col_concat(g, 2, parts, 1));
}

/* ids' f32 values, whether each is in [v0, v0 + n) (f32 0/1), and its index there as i32 (miss where it is not) */
static col_node *local_index(col_graph *g, col_node *ids, int64_t v0, int64_t n, int64_t miss, col_node **held)
{
    col_node *t = col_cast(g, ids, COL_F32);
    *held = col_mul(g, at_least(g, t, (float)v0), col_scale(g, at_least(g, t, (float)(v0 + n)), -1.0f, 1.0f));
    /* (t - v0 - miss) * held + miss */
    col_node *k = col_scale(g, col_mul(g, col_scale(g, t, 1.0f, (float)(-v0 - miss)), *held), 1.0f, (float)miss);
    return col_cast(g, k, COL_I32);
}

col_node *lmp_vocab_ce(col_graph *g, struct col_comm *c, col_node *l, col_node *t, int64_t v0)
{
    if (!l || !t)
        return NULL;
    int64_t N = l->t.shape[0], n = l->t.shape[1], n1[1] = {N};
    /* the maximum over every part, a constant shift */
    col_node *m = col_comm_graph_all_reduce(g, c, col_max(g, l, 2u, 1), COL_RED_MAX, COL_CG_SAME);
    col_node *s = col_sum(g, col_exp(g, col_sub(g, l, m)), 2u, 0); /* [N] */
    col_node *lse = col_log(g, col_comm_graph_all_reduce(g, c, s, COL_RED_SUM, COL_CG_SAME));
    /* l_t where t is held here: log p_local(t) + the local log-sum-exp (m_l + log sum exp(l - m_l)) */
    col_node *held, *k = local_index(g, t, v0, n, -1, &held);
    col_node *ml = col_max(g, l, 2u, 1);
    col_node *lsel = col_add(g, col_reshape(g, ml, 1, n1), col_log(g, col_sum(g, col_exp(g, col_sub(g, l, ml)), 2u, 0)));
    col_node *lt = col_mul(g, col_add(g, col_token_logprob(g, l, k, -1), lsel), held);
    lt = col_comm_graph_all_reduce(g, c, lt, COL_RED_SUM, COL_CG_SAME);
    /* CE = log s + m - l_t */
    return col_sub(g, col_add(g, lse, col_reshape(g, m, 1, n1)), lt);
}

static col_node *embed_1d(col_graph *g, const col_lm_par *p, col_node *w, col_node *ids)
{
    if (!p->tp)
        return col_embedding(g, w, ids);
    if (!w || !ids)
        return NULL;
    int64_t v0, n;
    vocab_part(p, w, &v0, &n);
    col_node *held;
    col_node *k = local_index(g, ids, v0, n, 0, &held); /* another rank's id: row 0, zeroed below */
    int64_t sh[3] = {ids->t.shape[0], ids->t.shape[1], 1};
    col_node *e = col_mul(g, col_embedding(g, w, k), col_reshape(g, held, 3, sh));
    return out_of_rows(g, p, e);
}

static col_node *positions_1d(col_graph *g, const col_lm_par *p, col_node *w, col_node *pos)
{
    col_node *e = col_embedding(g, w, pos); /* [t, C] */
    return split_regions(p) ? col_comm_graph_split(g, p->tp, e, 0) : e;
}

/* this rank's logits [b*t, n] of x [b, t, C] with the head block w [n, C] (n = ceil(vocab / P)), padding masked */
static col_node *local_logits(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, int64_t vocab)
{
    if (!x || !w)
        return NULL;
    if (p->tp)
        x = into_columns(g, p, x);
    if (!x)
        return NULL;
    int64_t flat[2] = {x->t.shape[0] * x->t.shape[1], x->t.shape[2]};
    col_node *l = col_matmul(g, col_reshape(g, col_lm_operand(g, x, w), 2, flat), col_transpose(g, w, 0, 1));
    return p->tp ? mask_padding(g, p, l, vocab) : l;
}

/* the whole vocabulary's logits [N, vocab] from every rank's part */
static col_node *gather_logits(col_graph *g, const col_lm_par *p, col_node *l, int64_t vocab)
{
    if (!p->tp || !l)
        return l;
    col_node *all = col_comm_graph_all_gather_grad(g, p->tp, l, 1, COL_CG_SAME);
    return all && all->t.shape[1] != vocab ? col_contiguous(g, col_slice(g, all, 1, 0, vocab)) : all;
}

static col_node *logits_1d(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, int64_t vocab)
{
    return gather_logits(g, p, local_logits(g, p, x, w, vocab), vocab);
}

static col_node *loss_1d(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, col_node *targets,
                         col_node *inv_count, int64_t vocab, bool with_logits, col_node **logits)
{
    col_node *l = local_logits(g, p, x, w, vocab); /* [N, V/P] */
    if (!l || !targets)
        return NULL;
    int64_t N = l->t.shape[0], n1[1] = {N};
    col_node *t = col_reshape(g, targets, 1, n1);
    if (logits)
        *logits = with_logits ? gather_logits(g, p, l, vocab) : NULL;
    col_node *counted = at_least(g, col_cast(g, t, COL_F32), 0.0f);
    int64_t v0, n;
    vocab_part(p, w, &v0, &n);
    col_node *ce = p->tp ? lmp_vocab_ce(g, p->tp, l, t, v0)
                         : col_scale(g, col_token_logprob(g, l, t, -1), -1.0f, 0.0f);
    col_node *sum = col_sum(g, col_mul(g, ce, counted), 1u, 0); /* [] */
    int64_t one[1] = {1};
    col_node *loss = col_mul(g, col_reshape(g, sum, 1, one), inv_count);
    if (p->sp)
        loss = col_comm_graph_all_reduce(g, p->sp, loss, COL_RED_SUM, COL_CG_SAME);
    return loss;
}

const col_tp_ops col_tp_1d_ops = {
    .mode = COL_TP_1D,
    .shard = shard_1d,
    .rows = rows_1d,
    .hidden_local = hidden_1d,
    .heads_local = heads_1d,
    .use = use_1d,
    .linear = linear_1d,
    .norm = norm_1d,
    .embed = embed_1d,
    .positions = positions_1d,
    .loss = loss_1d,
    .logits = logits_1d,
};
#endif
