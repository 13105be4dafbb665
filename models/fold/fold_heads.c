/* fold_heads.c - AlphaFold2's pLDDT, aligned-error and distogram heads on the graph. */
#include "fold_heads.h"

#include "ops.h"

/* x is [N, ch] (rank 2) or [N, N, ch] (rank 3, square); anything else fails naming the head. */
static bool check_input(fold_ctx *c, const col_node *x, int rank, int64_t ch, const char *head, const char *what)
{
    if (!x) return false;   /* an earlier builder failed and recorded why */
    const col_tensor *t = &x->t;
    bool ok = t->ndim == rank && t->shape[rank - 1] == ch && t->shape[0] > 0 && (rank == 2 || t->shape[1] == t->shape[0]);
    if (!ok) {
        mb_fail(c->b, COL_ESHAPE, "%s%s: the %s representation is not [N, %s%lld]", c->b->prefix, head, what,
                rank == 3 ? "N, " : "", (long long)ch);
        return false;
    }
    return true;
}

static bool check_width(fold_ctx *c, const char *head, const char *what, int64_t v)
{
    if (v > 0) return true;
    mb_fail(c->b, COL_EINVAL, "%s%s: %s must be positive (%lld)", c->b->prefix, head, what, (long long)v);
    return false;
}

col_node *fold_plddt_head(fold_ctx *c, col_node *single, int64_t c_s, int64_t channels, int64_t num_bins)
{
    const char *h = "predicted_lddt_head";
    if (!check_width(c, h, "the single channels", c_s) || !check_width(c, h, "the hidden channels", channels) ||
        !check_width(c, h, "the number of bins", num_bins) || !check_input(c, single, 2, c_s, h, "single"))
        return NULL;
    col_graph *g = c->b->g;
    col_node *x = fold_layer_norm(c, single, c_s, "predicted_lddt_head/input_layer_norm");
    x = col_relu(g, fold_linear(c, x, c_s, channels, true, "predicted_lddt_head/act_0"));
    x = col_relu(g, fold_linear(c, x, channels, channels, true, "predicted_lddt_head/act_1"));
    return fold_linear(c, x, channels, num_bins, true, "predicted_lddt_head/logits");
}

col_node *fold_pae_head(fold_ctx *c, col_node *pair, int64_t c_z, int64_t num_bins)
{
    const char *h = "predicted_aligned_error_head";
    if (!check_width(c, h, "the pair channels", c_z) || !check_width(c, h, "the number of bins", num_bins) ||
        !check_input(c, pair, 3, c_z, h, "pair"))
        return NULL;
    return fold_linear(c, pair, c_z, num_bins, true, "predicted_aligned_error_head/logits");
}

col_node *fold_distogram_head(fold_ctx *c, col_node *pair, int64_t c_z, int64_t num_bins)
{
    const char *h = "distogram_head";
    if (!check_width(c, h, "the pair channels", c_z) || !check_width(c, h, "the number of bins", num_bins) ||
        !check_input(c, pair, 3, c_z, h, "pair"))
        return NULL;
    col_graph *g = c->b->g;
    col_node *half = fold_linear(c, pair, c_z, num_bins, true, "distogram_head/half_logits");
    if (!half) return NULL;
    /* logits = half_logits + jnp.swapaxes(half_logits, -2, -3) */
    return col_add(g, half, col_contiguous(g, col_transpose(g, half, 0, 1)));
}
