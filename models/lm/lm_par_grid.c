/* lm_par_grid.c - the grid modes of tensor parallelism: 2D (SUMMA over a
 * q x q grid, Optimus), 2.5D (q x q x d, Tesseract) and 3D (q x q x q,
 * Agarwal et al. / Colossal-AI's 3D). Rank (i, j, k): i the row, j the column,
 * k the depth (lm_par.h; p->row holds the ranks of the same (i, k), p->col
 * those of the same (j, k), p->dep those of the same (i, j)). B rows, T
 * positions, C the hidden size, F a FIRST projection's width, V the vocabulary.
 *
 * 2D and 2.5D (d = 1 is 2D). Activations between the layers: rows block
 * k*q + i of d*q (each depth layer its own rows), hidden block j of q:
 * [B/(dq), T, C/q]. A FIRST or SECOND weight [in, out] is cut in q x q blocks,
 * rank (i, j, k) holding block (i, j) (rows of `in` block i, columns of `out`
 * block j; stored [out, in] (nn.Linear): the same block transposed; GPT-2's
 * q|k|v columns: part j of each), the same block on every depth k. Y = X W:
 * X gathered along the row (every j: [b, T, in]) and W along the column
 * (every i: [in, out/q]), then the local product gives this rank's
 * [b, T, out/q], whole heads of q, k and v. Its bias: block j. SUMMA's q
 * broadcast steps move the same bytes as these two all-gathers; their
 * backward passes are reduce-scatters. Every block of a weight is held by
 * the d ranks of a depth column, which see other rows: `use` passes it
 * through col_comm_graph_copy over p->dep (2.5D), so its gradient is summed.
 *
 * 3D. Activations between the layers: rows block i*q + k of q^2, hidden
 * block j of q: [B/q^2, T, C/q]. FIRST weight [C, F]: `in` block j*q + i of
 * q^2 (C), `out` block k of q (F, q|k|v: part k of each). X is gathered over
 * the depth (rows block i), W over the column (in block j), the product
 * [B/q, T, F/q] is a partial sum over j, reduce-scattered over the row along
 * the rows: [B/q^2 (block i*q + j), T, F/q (block k)], plus the bias (block
 * k). SECOND weight [F, C]: `in` block k of q, `out` block j*q + i of q^2:
 * X gathered over the row (rows block i), W over the column (out block j),
 * the product [B/q, T, C/q] is a partial sum over k, reduce-scattered over
 * the depth: rows block i*q + k, hidden block j again, plus the bias (block
 * j). So between a FIRST and its SECOND (attention, the MLP's activation)
 * the rows are block i*q + j and the width block k (the roles of the row and
 * the depth swap, as Colossal-AI alternates its input and output groups).
 * Every weight block is held once.
 *
 * Every mode: norms reduce their row's partial sums (sum x, sum (x-mean)^2;
 * RMSNorm: sum x^2) over the row, so each rank normalises its own block
 * exactly; their weight and bias: block j. The token embedding, learned
 * positions and an untied head [*, C]: columns block j, the lookup local.
 * The biases, norms and embeddings are held by every rank of their column
 * and depth (3D FIRST bias: of their row and column), which see other rows:
 * `use` copies them over those. The head (loss_grid): the partial logits
 * of each hidden block summed over the row, or vocabulary-parallel over the
 * row, whichever moves fewer bytes; the sums of the losses of all rows
 * all-reduced over the column and the depth (and sequence-parallel ranks). Attention is local: whole heads
 * (H/q per rank) of whole rows.
 *
 * Bytes per rank of one linear [in -> out], forward and backward (comm.h's
 * model: an all-gather or reduce-scatter moves (P-1) blocks, an all-reduce
 * 2(P-1)/P of the tensor), with M = b*s*h the whole step's activations:
 *   2D, 2.5D: X's gather and its reduce-scatter back 2(q-1)/(d q^2) B*T*in,
 *     W's gather and back 2(q-1)/q^2 in*out, 2.5D the depth's sum of dW
 *     2(d-1)/(d q^2) in*out. A square linear: 2(q-1)/(d q^2) M + the weights.
 *     SUMMA (Optimus) broadcasts X and W again in the backward pass: 6(q-1)/q^2
 *     per rank where the gathered copies are kept here (4(q-1)/q^2, counting
 *     h*h like M as the papers' square matrices do; the published 6(q-1)/q is a
 *     row's q ranks together). 2.5D at q = d = 2: 1.0 M per rank (x q = 2.0
 *     against the published 3(q-1)(d+1)/(dq) = 2.25).
 *   3D: X's gather and back 2(q-1)/q^3 B*T*in, Y's reduce-scatter and its
 *     gather back 2(q-1)/q^3 B*T*out, W's gather and back 2(q-1)/q^3 in*out:
 *     a square linear 6(q-1)/q^3 M, the published figure.
 * Apart from the linears: each norm all-reduces [b, T, 1] twice (RMSNorm
 * once) over the row, forward and backward; the head all-reduces the logits
 * [b*T, V] over the row (forward only); the replicated blocks' gradients are
 * all-reduced over their copies. tests/test_lm_par_grid.c checks every rank's
 * bytes against this count. Each FIRST linear gathers its X itself: separate
 * q, k and v projections (LLaMA, OPT) gather the same X three times. */
#include "lm_par.h"
#include "lm_par_internal.h"

#ifdef COL_WITH_COMM /* without MPI no layout opens (col_lm_par_open) */
#include "comm_graph.h"
#include "lm_layers.h"

static int side(const col_lm_par *p) { return p->layout.q > 1 ? p->layout.q : 1; }
static int depth(const col_lm_par *p) { return p->layout.d > 1 ? p->layout.d : 1; }
static int sp_size(const col_lm_par *p) { return p->layout.sp > 1 ? p->layout.sp : 1; }
static bool cube(const col_lm_par *p) { return p->layout.mode == COL_TP_3D; }

/* ---- the collectives, the identity over a missing communicator (one rank) ---- */

static col_node *gather(col_graph *g, struct col_comm *c, col_node *x, int axis, bool split)
{
    if (!c || !x)
        return x;
    return col_comm_graph_all_gather_grad(g, c, x, axis, split ? COL_CG_SPLIT : COL_CG_SAME);
}

static col_node *reduce_scatter(col_graph *g, struct col_comm *c, col_node *x, int axis)
{
    if (!c || !x)
        return x;
    return col_comm_graph_reduce_scatter(g, c, x, axis);
}

/* the sum over c's ranks; split: the ranks then use it differently (its gradient summed over them) */
static col_node *sum_over(col_graph *g, struct col_comm *c, col_node *x, bool split)
{
    if (!c || !x)
        return x;
    return col_comm_graph_all_reduce(g, c, x, COL_RED_SUM, split ? COL_CG_SPLIT : COL_CG_SAME);
}

static col_node *copy_over(col_graph *g, struct col_comm *c, col_node *x)
{
    if (!c || !x)
        return x;
    return col_comm_graph_copy(g, c, x);
}

/* ---- blocks ---- */

/* dimension dim of the block: `parts` parts (of each of `groups` segments), part `index` */
static void cut(col_shard *s, int dim, int parts, int index, int groups)
{
    s->parts[dim] = parts;
    s->index[dim] = index;
    s->groups[dim] = groups > 0 ? groups : 1;
}

static void shard_grid(const col_lm_par *p, const col_param_spec *s, col_shard *out)
{
    int q = side(p), d = depth(p), sp = sp_size(p);
    *out = (col_shard){.parts = {1, 1}, .index = {0, 0}, .groups = {1, 1}, .replicas = sp * p->layout.tp};
    if (q == 1)
        return;
    int G = s->groups > 0 ? s->groups : 1;
    int in = s->in_out ? 0 : 1, o = 1 - in; /* the stored dimensions of `in` and `out` */
    switch (s->role) {
    case COL_ROLE_FIRST:
        if (s->ndim != 2)
            break;
        if (cube(p))
            cut(out, in, q * q, p->j * q + p->i, 1), cut(out, o, q, p->k, G), out->replicas = sp;
        else
            cut(out, in, q, p->i, 1), cut(out, o, q, p->j, G), out->replicas = sp * d;
        return;
    case COL_ROLE_SECOND:
        if (s->ndim != 2)
            break;
        if (cube(p))
            cut(out, in, q, p->k, 1), cut(out, o, q * q, p->j * q + p->i, G), out->replicas = sp;
        else
            cut(out, in, q, p->i, 1), cut(out, o, q, p->j, G), out->replicas = sp * d;
        return;
    case COL_ROLE_FIRST_BIAS:
        cut(out, 0, q, cube(p) ? p->k : p->j, G);
        out->replicas = sp * q * d;
        return;
    case COL_ROLE_SECOND_BIAS:
    case COL_ROLE_NORM:
        cut(out, 0, q, p->j, G);
        out->replicas = sp * q * d;
        return;
    case COL_ROLE_EMBED:
    case COL_ROLE_POS:
    case COL_ROLE_HEAD:
        if (s->ndim != 2)
            break;
        cut(out, 1, q, p->j, 1);
        out->replicas = sp * q * d;
        return;
    default:
        break;
    }
}

static void rows_grid(const col_lm_par *p, int B, int *row0, int *n)
{
    int q = side(p), blocks = q, b = p->i;
    if (p->layout.mode == COL_TP_25D)
        blocks = q * depth(p), b = p->k * q + p->i;
    else if (cube(p))
        blocks = q * q, b = p->i * q + p->k;
    *n = B / blocks;
    *row0 = b * *n;
}

static int64_t hidden_grid(const col_lm_par *p, int64_t C) { return C / side(p); }
static int heads_grid(const col_lm_par *p, int H) { return H / side(p); }

static col_node *use_grid(col_graph *g, const col_lm_par *p, col_param_role r, col_node *w)
{
    w = copy_over(g, p->sp, w);
    switch (r) {
    case COL_ROLE_FIRST:
    case COL_ROLE_SECOND: /* 2.5D: the depth's copies; 2D and 3D: every block held once */
        return p->layout.mode == COL_TP_25D ? copy_over(g, p->dep, w) : w;
    case COL_ROLE_FIRST_BIAS:
        if (cube(p)) /* FIRST's outputs: rows block i*q + j, width block k */
            return copy_over(g, p->col, copy_over(g, p->row, w));
        return copy_over(g, p->dep, copy_over(g, p->col, w));
    default:
        return copy_over(g, p->dep, copy_over(g, p->col, w));
    }
}

/* ---- the products ---- */

static col_node *linear_grid(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, col_node *b,
                             col_param_role r, bool in_out)
{
    if (!x || !w)
        return NULL;
    if (r != COL_ROLE_FIRST && r != COL_ROLE_SECOND)
        return col_graph_fail(g, COL_EINVAL, "a tensor-parallel linear is a FIRST or a SECOND projection (role %d)",
                              (int)r);
    x = col_lm_operand(g, x, w);
    int in = in_out ? 0 : 1; /* w's stored dimension of `in` */
    if (!cube(p)) {
        col_node *X = gather(g, p->row, x, 2, true), *W = gather(g, p->col, w, in, true);
        return lmp_product(g, X, W, b, in_out);
    }
    bool first = r == COL_ROLE_FIRST;
    col_node *X = gather(g, first ? p->dep : p->row, x, 0, true);
    col_node *W = gather(g, p->col, w, first ? in : 1 - in, true);
    col_node *y = reduce_scatter(g, first ? p->row : p->dep, lmp_product(g, X, W, NULL, in_out), 0);
    return b && y ? col_add(g, y, col_lm_f32(g, b)) : y;
}

/* ---- norms: the row's partial sums over the hidden blocks ---- */

static col_node *norm_grid(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, col_node *b, float eps,
                           bool rms)
{
    if (!p->row)
        return rms ? col_rmsnorm(g, x, col_lm_f32(g, w), eps)
                   : col_layernorm(g, x, col_lm_f32(g, w), col_lm_f32(g, b), eps);
    if (!x || !w || (!rms && !b))
        return NULL;
    int last = x->t.ndim - 1;
    float inv_c = 1.0f / (float)(x->t.shape[last] * side(p));
    col_node *xc = col_lm_f32(g, x);
    if (!rms) { /* x - mean(x) */
        col_node *s1 = sum_over(g, p->row, col_sum(g, xc, 1u << last, 1), true);
        xc = col_sub(g, xc, col_scale(g, s1, inv_c, 0.0f));
    }
    col_node *s2 = sum_over(g, p->row, col_sum(g, col_mul(g, xc, xc), 1u << last, 1), true);
    /* 1 / sqrt(var + eps) = exp(-log(var + eps) / 2) */
    col_node *r = col_exp(g, col_scale(g, col_log(g, col_scale(g, s2, inv_c, eps)), -0.5f, 0.0f));
    col_node *y = col_mul(g, col_mul(g, xc, r), col_lm_f32(g, w));
    return rms ? y : col_add(g, y, col_lm_f32(g, b));
}

/* ---- embeddings, head, loss ---- */

static col_node *embed_grid(col_graph *g, const col_lm_par *p, col_node *w, col_node *ids)
{
    (void)p;
    return col_embedding(g, w, ids); /* w: [V, C/q], every id's hidden block j */
}

static col_node *positions_grid(col_graph *g, const col_lm_par *p, col_node *w, col_node *pos)
{
    (void)p;
    return col_embedding(g, w, pos);
}

/* The head, two ways; both give the exact whole-vocabulary cross-entropy of this rank's rows:
 *   partial logits: x [N, C/q] times w [V, C/q]^T, a partial sum of every logit, all-reduced over the row
 *     (2(q-1)/q N*V per rank, forward only); any vocabulary size;
 *   vocabulary-parallel (V divisible by q): x gathered over the row [N, C], w's blocks exchanged over the row
 *     (all-to-all: [V/q, C], vocabulary part j), the logits of part j [N, V/q], and the cross-entropy over the
 *     parts as 1D's (lm_par_1d.c): 2(q-1)/q (N*C + V*C/q + 3N) per rank, forward and backward.
 * (GPT-2's 50257 words divide by no q: its head sums partial logits.)
 * The cheaper by that count is built (the same choice on every rank: the same shapes). */
static bool vocab_parallel(const col_lm_par *p, const col_node *x, const col_node *w)
{
    int q = side(p);
    if (!p->row || w->t.shape[0] % q)
        return false;
    double N = (double)x->t.shape[0] * (double)x->t.shape[1], V = (double)w->t.shape[0];
    double C = (double)x->t.shape[2] * q;
    return N * C + V * C / q + 3 * N < N * V; /* both counts over 2(q-1)/q */
}

/* x [b, t, C/q] -> [b*t, C/q] (as w's dtype) */
static col_node *rows_of(col_graph *g, col_node *x, const col_node *w)
{
    int64_t flat[2] = {x->t.shape[0] * x->t.shape[1], x->t.shape[2]};
    return col_reshape(g, col_lm_operand(g, x, w), 2, flat);
}

/* the logits [N, V] of this rank's rows: its hidden block's partial products summed over the row */
static col_node *partial_logits(col_graph *g, const col_lm_par *p, col_node *x, col_node *w)
{
    col_node *l = col_matmul(g, rows_of(g, x, w), col_transpose(g, w, 0, 1));
    return sum_over(g, p->row, col_lm_f32(g, l), false);
}

/* the logits [N, V/q] of vocabulary part j */
static col_node *part_logits(col_graph *g, const col_lm_par *p, col_node *x, col_node *w)
{
    col_node *X = gather(g, p->row, rows_of(g, x, w), 1, true);                 /* [N, C] */
    col_node *W = col_comm_graph_all_to_all_grad(g, p->row, w, 0, 1);           /* [V/q, C] */
    return col_lm_f32(g, col_matmul(g, X, col_transpose(g, W, 0, 1)));
}

static col_node *logits_grid(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, int64_t vocab)
{
    (void)vocab; /* the grids' head blocks hold whole vocabulary parts: no padding */
    if (!x || !w)
        return NULL;
    if (!vocab_parallel(p, x, w))
        return partial_logits(g, p, x, w);
    return gather(g, p->row, part_logits(g, p, x, w), 1, false);
}

static col_node *loss_grid(col_graph *g, const col_lm_par *p, col_node *x, col_node *w, col_node *targets,
                           col_node *inv_count, int64_t vocab, bool with_logits, col_node **logits)
{
    (void)vocab; /* whole vocabulary parts (no padding) */
    if (logits)
        *logits = NULL;
    if (!x || !w || !targets || !inv_count)
        return NULL;
    int64_t n1[1] = {x->t.shape[0] * x->t.shape[1]}, one[1] = {1};
    col_node *t = col_reshape(g, targets, 1, n1), *tf = col_cast(g, t, COL_F32), *ce;
    if (vocab_parallel(p, x, w)) {
        col_node *l = part_logits(g, p, x, w);
        if (!l)
            return NULL;
        if (logits && with_logits)
            *logits = gather(g, p->row, l, 1, false);
        ce = lmp_vocab_ce(g, p->row, l, t, (int64_t)p->j * l->t.shape[1]);
    } else {
        col_node *l = partial_logits(g, p, x, w);
        if (logits && with_logits)
            *logits = l;
        ce = col_scale(g, col_token_logprob(g, l, t, -1), -1.0f, 0.0f);
    }
    ce = col_mul(g, ce, lmp_at_least(g, tf, 0.0f)); /* the counted targets */
    col_node *loss = col_mul(g, col_reshape(g, col_sum(g, ce, 1u, 0), 1, one), inv_count);
    /* the row's ranks computed the same; the other rows are the column's and the depth's (and other positions) */
    loss = sum_over(g, p->col, loss, false);
    loss = sum_over(g, p->dep, loss, false);
    return sum_over(g, p->sp, loss, false);
}

#define GRID_OPS(m)                                                                                                  \
    {                                                                                                                \
        .mode = (m), .shard = shard_grid, .rows = rows_grid, .hidden_local = hidden_grid, .heads_local = heads_grid, \
        .use = use_grid, .linear = linear_grid, .norm = norm_grid, .embed = embed_grid,                              \
        .positions = positions_grid, .loss = loss_grid, .logits = logits_grid,                                       \
    }

const col_tp_ops col_tp_2d_ops = GRID_OPS(COL_TP_2D);
const col_tp_ops col_tp_25d_ops = GRID_OPS(COL_TP_25D);
const col_tp_ops col_tp_3d_ops = GRID_OPS(COL_TP_3D);
#endif
