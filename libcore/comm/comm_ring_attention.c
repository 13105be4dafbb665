/* comm_ring_attention.c - ring self-attention over the ranks of a communicator
 * (comm_graph.h, col_comm_graph_ring_attention; issue 18's sequence parallelism).
 *
 * The graph: one EXTERN node with a gradient computes the forward pass on the
 * plan's host memory and gives one flat f32 output, o [B,H,Tl,D] then the
 * log-sum-exp of each query row [B,H,Tl] (which the backward reads); the
 * caller gets o as a contiguous view of it. Its gradient builder makes a
 * second EXTERN node (sources q, k, v, the forward's output, its gradient and
 * the parameters) whose flat output is dq [B,H,Tl,D], dk then dv
 * [B,Hkv,Tl,D], and hands each source its part as a view. The causal flag
 * and the scale reach both functions as a small f32 [2] source {scale, causal}
 * (an extern function sees only its user pointer, here the communicator, and
 * its tensors).
 *
 * Forward: step s = 0 .. P-1 holds the key/value block of rank (r - s) mod P
 * (K and V packed in one buffer); during the step's computation that block
 * goes on to rank r+1 and the next arrives from rank r-1 (asynchronous
 * point-to-point, polled between heads), P-1 passes. Each block's scores are
 * merged into the running output with the online softmax (a running max m and
 * sum l per query row, flash attention). Under the causal mask (by global
 * position: block j holds positions [j*Tl, (j+1)*Tl)) a block from a later
 * rank is skipped but still passed on, and the rank's own block is masked
 * above its diagonal.
 *
 * Backward (flash attention's, with p = exp(s - lse) from the saved lse and
 * D = rowsum(dO * o)): the blocks go around again, P-1 passes of K|V, each
 * with its gradient accumulator dK|dV travelling one step behind: a rank adds
 * its contribution to the block it holds into the accumulator that arrives
 * from rank r-1 during its computation and sends the sum on; the owner keeps
 * its own contribution (step 0) and, after the last step, adds the
 * accumulator of all the other ranks, which arrives from rank r-1: P-1 passes
 * of dK|dV. 2(P-1) block passes (of K|V or dK|dV) in all, Colossal-AI's count.
 *
 * Working memory (malloc'd for each call, freed on return): forward two K|V
 * blocks, the running max and a row of scores; backward two K|V blocks,
 * three accumulators and D: O(Tl), whatever P. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm_graph.h"

enum { TAG_KV = 29101, TAG_DKV = 29102 }; /* point-to-point tags of the two kinds of passes */

typedef struct {
    int64_t B, H, Hkv, T, D; /* T: this rank's block of positions (Tl) */
    float scale;
    bool causal;
} ring_dims;

static int64_t nq_of(const ring_dims *d) { return d->B * d->H * d->T * d->D; }
static int64_t nkv_of(const ring_dims *d) { return d->B * d->Hkv * d->T * d->D; }
static int64_t rows_of(const ring_dims *d) { return d->B * d->H * d->T; }

/* ---- at run time ---- */

/* host memory and an MPI communicator, the sources' shapes as built */
static col_status run_check(col_comm *c, const col_backend *be, const col_tensor *const *src, int nsrc, int want,
                            ring_dims *d, col_err *err)
{
    if (be->mem)
        return col_err_set(err, COL_EUNSUPPORTED,
                           "ring attention runs on host plans over MPI; this plan's data are the %s backend's memory "
                           "(plan the graph for a host backend)", be->name ? be->name : "device");
    if (strcmp(col_comm_transport_name(c), "mpi") != 0)
        return col_err_set(err, COL_EUNSUPPORTED,
                           "ring attention runs on host plans over MPI; this communicator's transport is %s",
                           col_comm_transport_name(c));
    if (nsrc != want || src[0]->ndim != 4 || src[1]->ndim != 4 || col_numel(src[want - 1]) != 2)
        return col_err_set(err, COL_EINTERNAL, "ring attention: the node's sources are not those it was built with");
    const float *pv = src[want - 1]->data; /* {scale, causal} */
    *d = (ring_dims){.B = src[0]->shape[0], .H = src[0]->shape[1], .T = src[0]->shape[2], .D = src[0]->shape[3],
                     .Hkv = src[1]->shape[1], .scale = pv[0], .causal = pv[1] != 0.0f};
    return COL_OK;
}

static void wait_quietly(col_comm_req **reqs, int n)
{
    col_err ignored = {0};
    col_comm_wait_all(reqs, n, &ignored);
    for (int i = 0; i < n; i++)
        reqs[i] = NULL;
}

/* moves the outstanding transfers along (MPI progresses only inside its calls) */
static col_status poll(col_comm_req **reqs, int n, col_err *err)
{
    for (int i = 0; i < n; i++) {
        bool done = false;
        col_status st = reqs[i] ? col_comm_test(reqs[i], &done, err) : COL_OK;
        if (st != COL_OK)
            return st;
    }
    return COL_OK;
}

static float dot(const float *a, const float *b, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* A block of keys kv (K then V, [B,Hkv,T,D] each), diagonal = the rank's own block (causal: key j <= query i),
 * merged into o (unnormalised), m and l with the online softmax; row: T floats */
static col_status fwd_block(const ring_dims *d, const float *q, const float *kv, bool diagonal, float *o, float *m,
                            float *l, float *row, col_comm_req **reqs, int nreq, col_err *err)
{
    int64_t T = d->T, D = d->D, grp = d->H / d->Hkv, nkv = nkv_of(d);
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++) {
            int64_t bh = b * d->H + h, kvh = b * d->Hkv + h / grp;
            const float *kh = kv + kvh * T * D, *vh = kv + nkv + kvh * T * D;
            for (int64_t i = 0; i < T; i++) {
                const float *qi = q + (bh * T + i) * D;
                float *oi = o + (bh * T + i) * D;
                int64_t jn = diagonal && d->causal ? i + 1 : T;
                float mx = -INFINITY;
                for (int64_t j = 0; j < jn; j++) {
                    row[j] = dot(qi, kh + j * D, D) * d->scale;
                    mx = row[j] > mx ? row[j] : mx;
                }
                float mold = m[bh * T + i], mnew = mold > mx ? mold : mx;
                float alpha = mold == -INFINITY ? 0.0f : expf(mold - mnew), sum = 0.0f;
                for (int64_t e = 0; e < D; e++)
                    oi[e] *= alpha;
                for (int64_t j = 0; j < jn; j++) {
                    float p = expf(row[j] - mnew);
                    sum += p;
                    const float *vj = vh + j * D;
                    for (int64_t e = 0; e < D; e++)
                        oi[e] += p * vj[e];
                }
                l[bh * T + i] = l[bh * T + i] * alpha + sum;
                m[bh * T + i] = mnew;
            }
            col_status st = poll(reqs, nreq, err);
            if (st != COL_OK)
                return st;
        }
    return COL_OK;
}

/* sources q, k, v, params; out: o then lse */
static col_status ring_fwd_fn(void *user, const col_backend *be, col_tensor *out, const col_tensor *const *src,
                              int nsrc, col_err *err)
{
    col_comm *c = user;
    ring_dims d;
    col_status st = run_check(c, be, src, nsrc, 4, &d, err);
    if (st != COL_OK)
        return st;
    int P = col_comm_size(c), r = col_comm_rank(c), next = (r + 1) % P, prev = (r + P - 1) % P;
    int64_t nq = nq_of(&d), nkv = nkv_of(&d), rows = rows_of(&d);
    if (col_numel(out) != nq + rows)
        return col_err_set(err, COL_EINTERNAL, "ring attention: the node's output is not the size it was built with");
    float *o = out->data, *l = o + nq; /* l becomes the lse at the end */
    float *kvbuf = malloc(sizeof(float) * (size_t)(4 * nkv)), *m = malloc(sizeof(float) * (size_t)rows),
          *row = malloc(sizeof(float) * (size_t)d.T);
    if (!kvbuf || !m || !row) {
        free(kvbuf), free(m), free(row);
        return col_err_set(err, COL_ENOMEM, "ring attention: out of memory for two key/value blocks of %lld floats",
                           (long long)(2 * nkv));
    }
    memset(o, 0, sizeof(float) * (size_t)(nq + rows));
    for (int64_t i = 0; i < rows; i++)
        m[i] = -INFINITY;
    memcpy(kvbuf, src[1]->data, sizeof(float) * (size_t)nkv);
    memcpy(kvbuf + nkv, src[2]->data, sizeof(float) * (size_t)nkv);
    col_comm_req *reqs[2] = {NULL, NULL};
    for (int s = 0; s < P && st == COL_OK; s++) {
        int from = (r - s + P) % P; /* the block's owner: positions [from*T, (from+1)*T) */
        float *cur = kvbuf + (s % 2) * 2 * nkv, *nxt = kvbuf + ((s + 1) % 2) * 2 * nkv;
        if (s < P - 1) {
            st = col_comm_recv_async(c, nxt, (size_t)(2 * nkv), COL_F32, prev, TAG_KV, &reqs[0], err);
            if (st == COL_OK)
                st = col_comm_send_async(c, cur, (size_t)(2 * nkv), COL_F32, next, TAG_KV, &reqs[1], err);
        }
        if (st == COL_OK && !(d.causal && from > r))
            st = fwd_block(&d, src[0]->data, cur, from == r, o, m, l, row, reqs, 2, err);
        if (st == COL_OK) {
            st = col_comm_wait_all(reqs, 2, err);
            reqs[0] = reqs[1] = NULL;
        }
    }
    wait_quietly(reqs, 2);
    if (st == COL_OK)
        for (int64_t i = 0; i < rows; i++) {
            float inv = 1.0f / l[i];
            for (int64_t e = 0; e < d.D; e++)
                o[i * d.D + e] *= inv;
            l[i] = m[i] + logf(l[i]);
        }
    free(kvbuf), free(m), free(row);
    return st;
}

/* The gradients of a block kv (K then V): dq += ..., dkv (dK then dV, of the block) += ... */
static col_status bwd_block(const ring_dims *d, const float *q, const float *lse, const float *dO, const float *dd,
                            const float *kv, bool diagonal, float *dq, float *dkv, col_comm_req **reqs, int nreq,
                            col_err *err)
{
    int64_t T = d->T, D = d->D, grp = d->H / d->Hkv, nkv = nkv_of(d);
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++) {
            int64_t bh = b * d->H + h, kvh = b * d->Hkv + h / grp;
            const float *kh = kv + kvh * T * D, *vh = kv + nkv + kvh * T * D;
            float *dkh = dkv + kvh * T * D, *dvh = dkv + nkv + kvh * T * D;
            for (int64_t i = 0; i < T; i++) {
                int64_t qi_ = bh * T + i;
                const float *qi = q + qi_ * D, *doi = dO + qi_ * D;
                float *dqi = dq + qi_ * D;
                int64_t jn = diagonal && d->causal ? i + 1 : T;
                for (int64_t j = 0; j < jn; j++) {
                    const float *kj = kh + j * D, *vj = vh + j * D;
                    float p = expf(dot(qi, kj, D) * d->scale - lse[qi_]);
                    float ds = p * (dot(doi, vj, D) - dd[qi_]) * d->scale;
                    float *dkj = dkh + j * D, *dvj = dvh + j * D;
                    for (int64_t e = 0; e < D; e++) {
                        dqi[e] += ds * kj[e];
                        dkj[e] += ds * qi[e];
                        dvj[e] += p * doi[e];
                    }
                }
            }
            col_status st = poll(reqs, nreq, err);
            if (st != COL_OK)
                return st;
        }
    return COL_OK;
}

/* sources q, k, v, the forward's output (o, lse), its gradient, params; out: dq, dk, dv */
static col_status ring_bwd_fn(void *user, const col_backend *be, col_tensor *out, const col_tensor *const *src,
                              int nsrc, col_err *err)
{
    col_comm *c = user;
    ring_dims d;
    col_status st = run_check(c, be, src, nsrc, 6, &d, err);
    if (st != COL_OK)
        return st;
    int P = col_comm_size(c), r = col_comm_rank(c), next = (r + 1) % P, prev = (r + P - 1) % P;
    int64_t nq = nq_of(&d), nkv = nkv_of(&d), rows = rows_of(&d);
    if (col_numel(out) != nq + 2 * nkv || col_numel(src[3]) != nq + rows || col_numel(src[4]) != nq + rows)
        return col_err_set(err, COL_EINTERNAL, "ring attention: the backward node is not the size it was built with");
    const float *q = src[0]->data, *o = src[3]->data, *lse = o + nq, *dO = src[4]->data;
    float *dq = out->data, *own = dq + nq; /* own: dK|dV of this rank's block */
    size_t kvb = sizeof(float) * (size_t)(2 * nkv);
    float *work = malloc(5 * kvb), *dd = malloc(sizeof(float) * (size_t)rows);
    if (!work || !dd) {
        free(work), free(dd);
        return col_err_set(err, COL_ENOMEM, "ring attention: out of memory for the backward's blocks (%lld floats)",
                           (long long)(10 * nkv));
    }
    float *kvbuf[2] = {work, work + 2 * nkv}, *dloc = work + 4 * nkv, *sendbuf = work + 6 * nkv,
          *accin = work + 8 * nkv;
    for (int64_t i = 0; i < rows; i++)
        dd[i] = dot(dO + i * d.D, o + i * d.D, d.D);
    memset(out->data, 0, sizeof(float) * (size_t)(nq + 2 * nkv));
    memcpy(kvbuf[0], src[1]->data, sizeof(float) * (size_t)nkv);
    memcpy(kvbuf[0] + nkv, src[2]->data, sizeof(float) * (size_t)nkv);
    /* reqs: 0 recv K|V, 1 send K|V, 2 recv dK|dV, 3 send dK|dV (outlives its step) */
    col_comm_req *reqs[4] = {NULL, NULL, NULL, NULL};
    size_t n2 = (size_t)(2 * nkv);
    for (int s = 0; s < P && st == COL_OK; s++) {
        int from = (r - s + P) % P;
        float *cur = kvbuf[s % 2], *target = s == 0 ? own : dloc;
        if (s < P - 1) {
            st = col_comm_recv_async(c, kvbuf[(s + 1) % 2], n2, COL_F32, prev, TAG_KV, &reqs[0], err);
            if (st == COL_OK)
                st = col_comm_send_async(c, cur, n2, COL_F32, next, TAG_KV, &reqs[1], err);
        }
        /* the accumulator of this block from the ranks before (none yet at step 1: it was its owner's at step 0) */
        if (st == COL_OK && s >= 2)
            st = col_comm_recv_async(c, accin, n2, COL_F32, prev, TAG_DKV, &reqs[2], err);
        if (st == COL_OK && s > 0)
            memset(dloc, 0, kvb);
        if (st == COL_OK && !(d.causal && from > r))
            st = bwd_block(&d, q, lse, dO, dd, cur, from == r, dq, target, reqs, 4, err);
        if (st == COL_OK && s > 0) {
            if (s >= 2 && (st = col_comm_wait(reqs[2], err), reqs[2] = NULL, st == COL_OK))
                for (size_t i = 0; i < n2; i++)
                    dloc[i] += accin[i];
            if (st == COL_OK) { /* the previous step's send is done before its buffer is reused */
                st = col_comm_wait(reqs[3], err);
                reqs[3] = NULL;
            }
            if (st == COL_OK) {
                float *t = sendbuf;
                sendbuf = dloc, dloc = t;
                st = col_comm_send_async(c, sendbuf, n2, COL_F32, next, TAG_DKV, &reqs[3], err);
            }
        }
        if (st == COL_OK) {
            st = col_comm_wait_all(reqs, 2, err);
            reqs[0] = reqs[1] = NULL;
        }
    }
    /* this rank's block comes back with every other rank's contribution */
    if (st == COL_OK && P > 1 && (st = col_comm_recv(c, accin, n2, COL_F32, prev, TAG_DKV, err)) == COL_OK)
        for (size_t i = 0; i < n2; i++)
            own[i] += accin[i];
    if (st == COL_OK) {
        st = col_comm_wait(reqs[3], err);
        reqs[3] = NULL;
    }
    wait_quietly(reqs, 4);
    free(work), free(dd);
    return st;
}

/* ---- the graph ---- */

/* the gradient of source s (q, k or v) of the forward node n: a view of the one backward node, made at the first
 * call and found again at the next */
static col_node *ring_bwd(col_graph *g, col_node *n, col_node *dy, int s, void *user)
{
    if (s > 2)
        return NULL; /* the parameters: constants */
    col_node *bn = NULL;
    for (int i = col_graph_count(g) - 1; i > n->id && !bn; i--) {
        col_node *x = col_graph_node(g, i);
        if (x->op == COL_OP_EXTERN && x->ext_fn == ring_bwd_fn && x->nsrc == 6 && x->src[3] == n)
            bn = x;
    }
    const col_tensor *qt = &n->src[0]->t, *kt = &n->src[1]->t;
    int64_t nq = col_numel(qt), nkv = col_numel(kt);
    if (!bn) {
        col_node *srcs[6] = {n->src[0], n->src[1], n->src[2], n, dy, n->src[3]};
        int64_t len = nq + 2 * nkv;
        if (!(bn = col_extern(g, ring_bwd_fn, user, COL_F32, 1, &len, 6, srcs)))
            return NULL;
        snprintf(bn->name, sizeof bn->name, "ring_attention_bwd");
    }
    int64_t start = s == 0 ? 0 : s == 1 ? nq : nq + nkv;
    const col_tensor *like = &n->src[s]->t;
    return col_reshape(g, col_slice(g, bn, 0, start, s == 0 ? nq : nkv), like->ndim, like->shape);
}

col_node *col_comm_graph_ring_attention(col_graph *g, col_comm *c, col_node *q, col_node *k, col_node *v, int causal,
                                        float scale)
{
    if (!g || col_graph_status(g) != COL_OK || !q || !k || !v)
        return NULL;
    char b1[96], b2[96], b3[96];
    if (!col_check(g, c != NULL, COL_EINVAL, "comm graph: ring attention: no communicator given") ||
        !col_check(g, q->t.dtype == COL_F32 && k->t.dtype == COL_F32 && v->t.dtype == COL_F32, COL_EDTYPE,
                   "comm graph: ring attention: needs f32 q, k, v, got %s, %s, %s", col_dtype_name(q->t.dtype),
                   col_dtype_name(k->t.dtype), col_dtype_name(v->t.dtype)) ||
        !col_check(g, q->t.ndim == 4 && k->t.ndim == 4 && v->t.ndim == 4, COL_ESHAPE,
                   "comm graph: ring attention: q, k, v must be [B,H,Tl,D], got q %s, k %s, v %s",
                   col_shape_str(&q->t, b1, sizeof b1), col_shape_str(&k->t, b2, sizeof b2),
                   col_shape_str(&v->t, b3, sizeof b3)) ||
        !col_check(g, col_same_shape(&k->t, &v->t), COL_ESHAPE,
                   "comm graph: ring attention: k %s and v %s differ in shape", col_shape_str(&k->t, b1, sizeof b1),
                   col_shape_str(&v->t, b2, sizeof b2)))
        return NULL;
    int64_t B = q->t.shape[0], H = q->t.shape[1], T = q->t.shape[2], D = q->t.shape[3], Hkv = k->t.shape[1];
    if (!col_check(g, B > 0 && H > 0 && T > 0 && D > 0 && Hkv > 0, COL_ESHAPE,
                   "comm graph: ring attention: empty q %s or k %s", col_shape_str(&q->t, b1, sizeof b1),
                   col_shape_str(&k->t, b2, sizeof b2)) ||
        !col_check(g, k->t.shape[0] == B && k->t.shape[2] == T && k->t.shape[3] == D, COL_ESHAPE,
                   "comm graph: ring attention: q %s and k %s differ in batch, block length or head_dim (each rank "
                   "holds the same positions of q, k and v)", col_shape_str(&q->t, b1, sizeof b1),
                   col_shape_str(&k->t, b2, sizeof b2)) ||
        !col_check(g, H % Hkv == 0, COL_ESHAPE,
                   "comm graph: ring attention: %lld query heads are not a multiple of %lld kv heads",
                   (long long)H, (long long)Hkv) ||
        !col_check(g, col_numel(&q->t) <= INT64_MAX / 16 && col_numel(&k->t) <= INT64_MAX / 16, COL_ESHAPE,
                   "comm graph: ring attention: q %s or k %s is too large", col_shape_str(&q->t, b1, sizeof b1),
                   col_shape_str(&k->t, b2, sizeof b2)) ||
        !col_check(g, scale >= 0.0f && isfinite(scale), COL_EINVAL,
                   "comm graph: ring attention: scale %g (0 for 1/sqrt(head_dim), or a positive number)",
                   (double)scale))
        return NULL;
    int64_t one = 1;
    col_node *pv[2] = {col_fill(g, COL_F32, 1, &one, scale > 0.0f ? scale : 1.0f / sqrtf((float)D)),
                       col_fill(g, COL_F32, 1, &one, causal ? 1.0f : 0.0f)};
    col_node *src[4] = {q, k, v, col_concat(g, 2, pv, 0)};
    int64_t len = B * H * T * (D + 1); /* o [B,H,Tl,D] then the lse [B,H,Tl] */
    col_node *n = col_extern_grad(g, ring_fwd_fn, ring_bwd, c, COL_F32, 1, &len, 4, src);
    if (!n)
        return NULL;
    snprintf(n->name, sizeof n->name, "ring_attention");
    int64_t shape[4] = {B, H, T, D};
    return col_reshape(g, col_slice(g, n, 0, 0, B * H * T * D), 4, shape);
}
