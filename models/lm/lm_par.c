/* lm_par.c - layouts of tensor and sequence parallelism: names, the model's checks, and blocks of
 * tensors (lm_par.h). Pure functions: the parsers' fuzzers link it. A rank's place in a layout is in
 * lm_par_open.c. */
#include "lm_par.h"

#include <string.h>

static const char *const tp_names[COL_TP_MODE_COUNT] = {"1d", "2d", "2.5d", "3d"};
static const char *const sp_names[COL_SP_MODE_COUNT] = {"ring", "ulysses"};

const char *col_tp_mode_name(col_tp_mode m) { return m >= 0 && m < COL_TP_MODE_COUNT ? tp_names[m] : "?"; }
const char *col_sp_mode_name(col_sp_mode m) { return m >= 0 && m < COL_SP_MODE_COUNT ? sp_names[m] : "?"; }

col_status col_tp_mode_parse(const char *s, col_tp_mode *m, col_err *err)
{
    for (int i = 0; s && i < COL_TP_MODE_COUNT; i++)
        if (strcmp(s, tp_names[i]) == 0)
            return *m = (col_tp_mode)i, COL_OK;
    return col_err_set(err, COL_EINVAL, "unknown tensor-parallel mode '%s' (1d, 2d, 2.5d or 3d)", s ? s : "");
}

col_status col_sp_mode_parse(const char *s, col_sp_mode *m, col_err *err)
{
    for (int i = 0; s && i < COL_SP_MODE_COUNT; i++)
        if (strcmp(s, sp_names[i]) == 0)
            return *m = (col_sp_mode)i, COL_OK;
    return col_err_set(err, COL_EINVAL, "unknown sequence-parallel mode '%s' (ring or ulysses)", s ? s : "");
}

/* the integer r with r^k = n, or 0 */
static int iroot(int n, int k)
{
    for (int r = 1; r <= n; r++) {
        long p = 1;
        for (int i = 0; i < k; i++)
            p *= r;
        if (p == n)
            return r;
        if (p > n)
            break;
    }
    return 0;
}

/* whether `what` (value v) divides evenly into n parts; the message otherwise */
static col_status divides(int64_t v, int n, const char *what, const char *by, col_err *err)
{
    if (n <= 1 || v % n == 0)
        return COL_OK;
    return col_err_set(err, COL_EINVAL, "the model's %s (%lld) cannot be split between %d %s: choose a layout whose "
                       "count divides it", what, (long long)v, n, by);
}

col_status col_par_layout_check(col_par_layout *l, const col_lm_config *c, int seq, int batch, col_err *err)
{
    if (l->tp < 1)
        l->tp = 1;
    if (l->sp < 1)
        l->sp = 1;
    int tp = l->tp;
    switch (l->mode) {
    case COL_TP_1D:
        l->q = tp, l->d = 1;
        break;
    case COL_TP_2D:
        l->q = iroot(tp, 2), l->d = 1;
        if (!l->q)
            return col_err_set(err, COL_EINVAL, "2D tensor parallelism needs a square number of processes (q x q), "
                               "not %d", tp);
        break;
    case COL_TP_25D:
        if (l->d < 1)
            l->d = 1;
        l->q = tp % l->d == 0 ? iroot(tp / l->d, 2) : 0;
        if (!l->q)
            return col_err_set(err, COL_EINVAL, "2.5D tensor parallelism needs q x q x d processes (depth d = %d), "
                               "not %d", l->d, tp);
        break;
    case COL_TP_3D:
        l->q = l->d = iroot(tp, 3);
        if (!l->q)
            return col_err_set(err, COL_EINVAL, "3D tensor parallelism needs a cube number of processes (q x q x q), "
                               "not %d", tp);
        break;
    default:
        return col_err_set(err, COL_EINVAL, "unknown tensor-parallel mode %d", (int)l->mode);
    }
    /* the ranks that split the heads and the widths: 1D all of them, the grids one side of q */
    int split = l->mode == COL_TP_1D ? tp : l->q;
    col_status st = divides(c->n_head, split, "attention heads", "tensor-parallel parts", err);
    if (st == COL_OK)
        st = divides(c->n_kv_head, split, "key/value heads", "tensor-parallel parts", err);
    if (st == COL_OK)
        st = divides(c->ffn, split, "MLP width", "tensor-parallel parts", err);
    if (st == COL_OK && l->mode != COL_TP_1D)
        st = divides(c->hidden, l->mode == COL_TP_3D ? l->q * l->q : l->q, "hidden size", "tensor-parallel parts", err);
    if (st == COL_OK && tp > 1 && c->word_embed_proj_dim != 0 && c->word_embed_proj_dim != c->hidden)
        st = col_err_set(err, COL_EUNSUPPORTED, "tensor parallelism does not split OPT's embedding projections "
                         "(word_embed_proj_dim %d != hidden %d) yet", c->word_embed_proj_dim, c->hidden);
    if (st == COL_OK)
        st = divides(seq, l->sp, "sequence length", "sequence-parallel parts", err);
    if (st == COL_OK && l->seq_split && (l->mode != COL_TP_1D || tp < 2))
        st = col_err_set(err, COL_EINVAL, "sequence-parallel regions split 1D tensor parallelism's norms by positions: "
                         "they need 1D tensor parallelism over 2 or more processes");
    if (st == COL_OK && l->seq_split)
        st = divides(seq / l->sp, tp, "positions per sequence-parallel part", "tensor-parallel parts (the regions "
                     "between the projections split them)", err);
    if (st == COL_OK && l->sp > 1 && l->sp_mode == COL_SP_ULYSSES)
        st = divides(c->n_head / split, l->sp, "attention heads per tensor-parallel part",
                     "sequence-parallel parts (Ulysses gives each whole heads)", err);
    if (st == COL_OK && l->sp > 1 && l->sp_mode == COL_SP_ULYSSES)
        st = divides(c->n_kv_head / split, l->sp, "key/value heads per tensor-parallel part",
                     "sequence-parallel parts (Ulysses gives each whole heads)", err);
    int rows = l->mode == COL_TP_1D ? 1 : l->mode == COL_TP_2D ? l->q : l->mode == COL_TP_25D ? l->q * l->d
                                                                                              : l->q * l->q;
    if (st == COL_OK && rows > 1 && batch % rows)
        st = col_err_set(err, COL_EINVAL, "%s tensor parallelism splits each step's rows between %d processes: the "
                         "rows per step (%d) must be a multiple of %d", col_tp_mode_name(l->mode), rows, batch, rows);
    return st;
}

/* the block's length along dimension d of a whole length n */
static int64_t block_len(const col_shard *s, int d, int64_t n)
{
    int64_t parts = s->parts[d] > 0 ? s->parts[d] : 1;
    return s->ceil[d] ? (n + parts - 1) / parts : n / parts;
}

void col_shard_shape(const col_shard *s, int ndim, const int64_t *whole, int64_t *local)
{
    for (int d = 0; d < ndim && d < 2; d++)
        local[d] = block_len(s, d, whole[d]);
}

bool col_shard_whole(const col_shard *s) { return s->parts[0] <= 1 && s->parts[1] <= 1; }

/* along one dimension of n elements: local index k -> whole index (>= n: padding) */
static int64_t whole_index(const col_shard *s, int d, int64_t n, int64_t k)
{
    int groups = s->groups[d] > 0 ? s->groups[d] : 1;
    if (s->ceil[d])
        return (int64_t)s->index[d] * block_len(s, d, n) + k;
    int parts = s->parts[d] > 0 ? s->parts[d] : 1;
    int64_t seg = n / groups, part = seg / parts;
    return (k / part) * seg + (int64_t)s->index[d] * part + k % part;
}

void col_shard_copy(const col_shard *s, int ndim, const int64_t *whole_shape, size_t esize, void *whole, void *block,
                    bool to_block)
{
    int64_t n0 = whole_shape[0], n1 = ndim > 1 ? whole_shape[1] : 1;
    int64_t l0 = block_len(s, 0, n0), l1 = ndim > 1 ? block_len(s, 1, n1) : 1;
    char *w = whole, *b = block;
    for (int64_t i = 0; i < l0; i++) {
        int64_t wi = whole_index(s, 0, n0, i);
        for (int64_t j = 0; j < l1; j++) {
            int64_t wj = ndim > 1 ? whole_index(s, 1, n1, j) : 0;
            char *pb = b + (size_t)(i * l1 + j) * esize;
            if (wi >= n0 || wj >= n1) { /* padding: zeros in the block, nothing in the whole tensor */
                if (to_block)
                    memset(pb, 0, esize);
                continue;
            }
            char *pw = w + (size_t)(wi * n1 + wj) * esize;
            if (to_block)
                memcpy(pb, pw, esize);
            else
                memcpy(pw, pb, esize);
        }
    }
}
