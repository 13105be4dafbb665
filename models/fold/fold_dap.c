/* fold_dap.c - dynamic axial parallelism for AlphaFold2's trunk: the slices, the collectives around them and
 * one Evoformer block on the slices (fold_dap.h). */
#include "fold_dap.h"

#include "fold_msa.h"
#include "fold_pair.h"
#include "ops.h"
#ifdef COL_WITH_COMM
#include "comm_graph.h"
#endif

col_status fold_dap_init(fold_dap *d, col_comm *comm, col_err *err)
{
    if (!d || !comm) return col_err_set(err, COL_EINVAL, "fold: dynamic axial parallelism needs a communicator");
#ifdef COL_WITH_COMM
    d->comm = comm;
    d->rank = col_comm_rank(comm);
    d->size = col_comm_size(comm);
    return COL_OK;
#else
    return col_err_set(err, COL_EUNSUPPORTED,
                       "fold: dynamic axial parallelism needs the collectives, and this build has no MPI");
#endif
}

/* several processes (else every piece is the identity) */
static bool parallel(const fold_ctx *c) { return c->dap && c->dap->size > 1; }

int64_t fold_dap_part(const fold_dap *d, int64_t full)
{
    if (!d || d->size <= 1 || full <= 0) return full;
    return (full + d->size - 1) / d->size;
}

int64_t fold_dap_first(const fold_dap *d, int64_t full)
{
    if (!d || d->size <= 1) return 0;
    return (int64_t)d->rank * fold_dap_part(d, full);
}

int64_t fold_dap_real(const fold_dap *d, int64_t full)
{
    int64_t part = fold_dap_part(d, full), first = fold_dap_first(d, full);
    return full - first < 0 ? 0 : full - first < part ? full - first : part;
}

/* the communicator and its shape agree, or an error in the builder */
static bool dap_ok(fold_ctx *c)
{
    const fold_dap *d = c->dap;
    if (d->comm && d->size >= 1 && d->rank >= 0 && d->rank < d->size) return true;
    mb_fail(c->b, COL_EINVAL, "%s: dynamic axial parallelism: rank %d of %d processes%s", c->b->prefix, d->rank,
            d->size, d->comm ? "" : " without a communicator");
    return false;
}

static col_node *all_gather(fold_ctx *c, col_node *x, int axis)
{
    if (!x || !dap_ok(c)) return NULL;
#ifdef COL_WITH_COMM
    return col_comm_graph_all_gather(c->b->g, c->dap->comm, x, axis);
#else
    (void)axis;
    return mb_fail(c->b, COL_EUNSUPPORTED, "%s: dynamic axial parallelism needs MPI, which this build has not",
                   c->b->prefix);
#endif
}

static col_node *all_to_all(fold_ctx *c, col_node *x, int split_axis, int concat_axis)
{
    if (!x || !dap_ok(c)) return NULL;
#ifdef COL_WITH_COMM
    return col_comm_graph_all_to_all(c->b->g, c->dap->comm, x, split_axis, concat_axis);
#else
    (void)split_axis, (void)concat_axis;
    return mb_fail(c->b, COL_EUNSUPPORTED, "%s: dynamic axial parallelism needs MPI, which this build has not",
                   c->b->prefix);
#endif
}

/* x with `to` rows along axis: its own, then rows of zeros */
static col_node *pad(fold_ctx *c, col_node *x, int axis, int64_t to)
{
    if (!x || x->t.shape[axis] >= to) return x;
    int64_t sh[COL_MAX_DIMS];
    for (int i = 0; i < x->t.ndim; i++) sh[i] = x->t.shape[i];
    sh[axis] = to - x->t.shape[axis];
    col_node *parts[2] = {x, col_fill(c->b->g, x->t.dtype, x->t.ndim, sh, 0.0f)};
    return col_concat(c->b->g, 2, parts, axis);
}

/* x's dimension axis is n (an error in the builder otherwise) */
static bool has_rows(fold_ctx *c, const col_node *x, int axis, int64_t n, const char *what)
{
    if (!x) return false;
    if (axis < x->t.ndim && x->t.shape[axis] == n) return true;
    char s[96];
    mb_fail(c->b, COL_ESHAPE, "%s: dynamic axial parallelism: %s %s has not %lld along dimension %d",
            c->b->prefix, what, col_shape_str(&x->t, s, sizeof s), (long long)n, axis);
    return false;
}

col_node *fold_dap_local(fold_ctx *c, col_node *x, int axis, int64_t full)
{
    if (!parallel(c)) return x;
    if (!has_rows(c, x, axis, full, "the whole input")) return NULL;
    int64_t part = fold_dap_part(c->dap, full), first = fold_dap_first(c->dap, full);
    int64_t real = fold_dap_real(c->dap, full);
    if (real == 0) {
        int64_t sh[COL_MAX_DIMS];
        for (int i = 0; i < x->t.ndim; i++) sh[i] = x->t.shape[i];
        sh[axis] = part;
        return col_fill(c->b->g, x->t.dtype, x->t.ndim, sh, 0.0f);
    }
    return pad(c, col_slice(c->b->g, x, axis, first, real), axis, part);
}

col_node *fold_dap_gather(fold_ctx *c, col_node *x, int axis, int64_t full)
{
    if (!parallel(c)) return x;
    if (!has_rows(c, x, axis, fold_dap_part(c->dap, full), "a slice")) return NULL;
    col_node *y = all_gather(c, x, axis);
    if (y && y->t.shape[axis] != full) y = col_slice(c->b->g, y, axis, 0, full);
    return y;
}

col_node *fold_dap_row_to_col(fold_ctx *c, col_node *x, int64_t rows, int64_t cols)
{
    if (!parallel(c)) return x;
    int64_t rp = fold_dap_part(c->dap, rows), cp = fold_dap_part(c->dap, cols);
    if (!has_rows(c, x, 0, rp, "a slice of rows") || !has_rows(c, x, 1, cols, "a slice of rows")) return NULL;
    col_node *y = all_to_all(c, pad(c, x, 1, cp * c->dap->size), 1, 0);     /* [size*rp, cp, ch] */
    if (y && rp * c->dap->size != rows) y = col_slice(c->b->g, y, 0, 0, rows);
    return y;
}

col_node *fold_dap_col_to_row(fold_ctx *c, col_node *x, int64_t rows, int64_t cols)
{
    if (!parallel(c)) return x;
    int64_t rp = fold_dap_part(c->dap, rows), cp = fold_dap_part(c->dap, cols);
    if (!has_rows(c, x, 0, rows, "a slice of columns") || !has_rows(c, x, 1, cp, "a slice of columns")) return NULL;
    col_node *y = all_to_all(c, pad(c, x, 0, rp * c->dap->size), 0, 1);     /* [rp, size*cp, ch] */
    if (y && cp * c->dap->size != cols) y = col_contiguous(c->b->g, col_slice(c->b->g, y, 1, 0, cols));
    return y;
}

/* ---- one block on the slices ---- */

static col_node *add(fold_ctx *c, col_node *x, col_node *y) { return col_add(c->b->g, x, y); }

/* the [part(N), N, c_z] update of a pair split by rows (or [N, part(N), c_z] split by columns) from the
 * triangle multiplication MODULE, whose right projection is all-gathered along axis (1: rows, 2: columns) */
static col_node *tri_mul(fold_ctx *c, const char *module, col_node *z, int64_t ci, int64_t n, bool outgoing)
{
    col_graph *g = c->b->g;
    col_node *act, *left, *right;
    if (!fold_triangle_multiplication_projections(c, module, z, ci, &act, &left, &right)) return NULL;
    if (outgoing) /* rows i here: out[c, i, j] = sum_k left[c, i, k] right[c, j, k], every row j of right */
        return fold_triangle_multiplication_combine(c, module, left,
                                                    col_transpose(g, fold_dap_gather(c, right, 1, n), 1, 2), act);
    /* columns j here: out[c, i, j] = sum_k right[c, k, i] left[c, k, j], every column i of right */
    return fold_triangle_multiplication_combine(c, module, col_transpose(g, fold_dap_gather(c, right, 2, n), 1, 2),
                                                left, act);
}

/* the update of the triangle attention MODULE: around the starting node on a pair split by rows, around the
 * ending node on one split by columns; the bias [H, N, N] all-gathered */
static col_node *tri_att(fold_ctx *c, const char *module, const char *norm, col_node *z, const fold_attn_dims *d,
                         int64_t n, bool starting)
{
    col_graph *g = c->b->g;
    if (!z) return NULL;
    if (d->c_in != z->t.shape[2] || d->c_out != d->c_in)
        return mb_fail(c->b, COL_EINVAL, "%s%s: the attention's input and output widths must be the pair's %lld",
                       c->b->prefix, module, (long long)z->t.shape[2]);
    col_node *x = fold_layer_norm(c, z, d->c_in, norm);
    col_node *bias = fold_dap_gather(c, fold_triangle_attention_bias(c, module, x, d->heads), starting ? 1 : 2, n);
    bias = col_contiguous(g, starting ? bias : col_transpose(g, bias, 1, 2));
    bias = col_reshape(g, bias, 4, (int64_t[]){1, d->heads, n, n});
    if (starting) return fold_triangle_attention_rows(c, module, d, x, bias);
    /* the local columns j as the attended rows: [part(N), N, c_z], back to [N, part(N), c_z] */
    return col_transpose(g, fold_triangle_attention_rows(c, module, d, col_permute(g, x, (int[]){1, 0, 2}), bias), 0,
                         1);
}

void fold_dap_block(fold_ctx *c, const fold_stack_dims *d, int64_t c_z, int64_t n_res, int64_t n_rows,
                    col_node **msa, col_node **pair)
{
    col_graph *g = c->b->g;
    const int64_t N = n_res;
    col_node *m = *msa, *z = *pair;
    if (m) {
        const char *ra = "msa_row_attention_with_pair_bias", *opm = "outer_product_mean";
        col_node *bias = fold_dap_gather(c, fold_msa_row_attention_pair_bias(c, ra, z, d->row.heads), 0, N);
        m = add(c, m, fold_msa_row_attention_with_bias(c, ra, m, bias, &d->row));
        m = fold_dap_row_to_col(c, m, n_rows, N);                                 /* [S, part(N), c] */
        if (d->global_col)
            m = add(c, m, fold_msa_column_global_attention(c, "msa_column_global_attention", m, &d->col));
        else
            m = add(c, m, fold_msa_column_attention(c, "msa_column_attention", m, &d->col));
        m = add(c, m, fold_transition(c, "msa_transition", m, d->msa_transition_factor));
        col_node *left, *right;
        if (fold_outer_product_mean_projections(c, opm, m, d->opm_channels, &left, &right))
            z = add(c, z, fold_outer_product_mean_combine(c, opm, left, fold_dap_gather(c, right, 1, N), c_z));
        else
            z = NULL;
        m = fold_dap_col_to_row(c, m, n_rows, N);                                 /* [part(S), N, c] */
    } else if (z) {
        /* no rows (an empty extra MSA): output_b / (1e-3 + 0), as the one-process trunk */
        col_node *b = fold_w(c, 1, (int64_t[]){c_z}, "outer_product_mean//output_b");
        if (b) z = add(c, z, col_expand(g, col_scale(g, b, 1.0f / 1e-3f, 0.0f), 3, z->t.shape));
    }
    z = add(c, z, tri_mul(c, "triangle_multiplication_outgoing", z, d->tri_mul_out, N, true));
    z = fold_dap_row_to_col(c, z, N, N);                                           /* [N, part(N), c_z] */
    z = add(c, z, tri_mul(c, "triangle_multiplication_incoming", z, d->tri_mul_in, N, false));
    z = fold_dap_col_to_row(c, z, N, N);                                           /* [part(N), N, c_z] */
    z = add(c, z, tri_att(c, "triangle_attention_starting_node", "triangle_attention_starting_node/query_norm", z,
                          &d->tri_att_start, N, true));
    z = fold_dap_row_to_col(c, z, N, N);
    z = add(c, z, tri_att(c, "triangle_attention_ending_node", "triangle_attention_ending_node/query_norm", z,
                          &d->tri_att_end, N, false));
    z = add(c, z, fold_transition(c, "pair_transition", z, d->pair_transition_factor));
    z = fold_dap_col_to_row(c, z, N, N);
    *msa = m;
    *pair = z;
}
