/* fold_structure.c - the structure module: IPA, transitions, backbone updates, angles. */
#include "fold_structure.h"

#include <math.h>
#include <stdio.h>

#include "ops.h"

/* A backbone frame per residue: quaternion q[4], rotation r[9] (row-major), translation t[3]; each [N, 1]. */
typedef struct {
    col_node *q[4], *r[9], *t[3];
} frames;

typedef struct {
    fold_ctx *c;
    col_graph *g;
    int64_t n;
} sm;

static col_node *add(sm *s, col_node *a, col_node *b) { return col_add(s->g, a, b); }
static col_node *sub(sm *s, col_node *a, col_node *b) { return col_sub(s->g, a, b); }
static col_node *mul(sm *s, col_node *a, col_node *b) { return col_mul(s->g, a, b); }
static col_node *scl(sm *s, col_node *a, float k) { return col_scale(s->g, a, k, 0.0f); }

/* x [N, 1] broadcast to [N, w] */
static col_node *wide(sm *s, col_node *x, int64_t w)
{
    return col_expand(s->g, x, 2, (int64_t[]){s->n, w});
}

/* sqrt(x) for x > 0, as exp(log(x) / 2) */
static col_node *sqrt_pos(sm *s, col_node *x)
{
    return col_exp(s->g, col_scale(s->g, col_log(s->g, x), 0.5f, 0.0f));
}

/* quat_to_rot: R from a unit quaternion (a, b, c, d) */
static void rot_of_quat(sm *s, frames *f)
{
    col_node *a = f->q[0], *b = f->q[1], *c = f->q[2], *d = f->q[3];
    col_node *aa = mul(s, a, a), *bb = mul(s, b, b), *cc = mul(s, c, c), *dd = mul(s, d, d);
    col_node *ab = mul(s, a, b), *ac = mul(s, a, c), *ad = mul(s, a, d);
    col_node *bc = mul(s, b, c), *bd = mul(s, b, d), *cd = mul(s, c, d);
    f->r[0] = sub(s, sub(s, add(s, aa, bb), cc), dd);
    f->r[1] = sub(s, scl(s, bc, 2), scl(s, ad, 2));
    f->r[2] = add(s, scl(s, bd, 2), scl(s, ac, 2));
    f->r[3] = add(s, scl(s, bc, 2), scl(s, ad, 2));
    f->r[4] = sub(s, add(s, sub(s, aa, bb), cc), dd);
    f->r[5] = sub(s, scl(s, cd, 2), scl(s, ab, 2));
    f->r[6] = sub(s, scl(s, bd, 2), scl(s, ac, 2));
    f->r[7] = add(s, scl(s, cd, 2), scl(s, ab, 2));
    f->r[8] = add(s, sub(s, sub(s, aa, bb), cc), dd);
}

/* QuatAffine.pre_compose: q += q * (0, v); t += R u; q normalised, R from it. upd [N, 6] = (v, u). */
static void pre_compose(sm *s, frames *f, col_node *upd)
{
    col_node *u[6];
    for (int k = 0; k < 6; k++) u[k] = col_slice(s->g, upd, 1, k, 1);
    col_node *a = f->q[0], *b = f->q[1], *c = f->q[2], *d = f->q[3];
    col_node *v1 = u[0], *v2 = u[1], *v3 = u[2];
    col_node *dq[4];
    dq[0] = sub(s, sub(s, scl(s, mul(s, b, v1), -1.0f), mul(s, c, v2)), mul(s, d, v3));
    dq[1] = sub(s, add(s, mul(s, a, v1), mul(s, c, v3)), mul(s, d, v2));
    dq[2] = add(s, sub(s, mul(s, a, v2), mul(s, b, v3)), mul(s, d, v1));
    dq[3] = sub(s, add(s, mul(s, a, v3), mul(s, b, v2)), mul(s, c, v1));
    col_node *q[4];
    for (int k = 0; k < 4; k++) q[k] = add(s, f->q[k], dq[k]);
    for (int i = 0; i < 3; i++) {
        col_node *ru = add(s, add(s, mul(s, f->r[3 * i], u[3]), mul(s, f->r[3 * i + 1], u[4])),
                           mul(s, f->r[3 * i + 2], u[5]));
        f->t[i] = add(s, f->t[i], ru);
    }
    col_node *norm2 = add(s, add(s, add(s, mul(s, q[0], q[0]), mul(s, q[1], q[1])), mul(s, q[2], q[2])),
                          mul(s, q[3], q[3]));
    col_node *norm = sqrt_pos(s, norm2);
    for (int k = 0; k < 4; k++) f->q[k] = col_div(s->g, q[k], norm);
    rot_of_quat(s, f);
}

/* points [N, 3w] (x block, y block, z block; as AlphaFold splits a projection in 3) to the global frame:
 * three [N, w] nodes R p + t */
static void to_global(sm *s, const frames *f, col_node *p, int64_t w, col_node *out[3])
{
    col_node *x[3];
    for (int k = 0; k < 3; k++) x[k] = col_slice(s->g, p, 1, k * w, w);
    for (int i = 0; i < 3; i++) {
        col_node *acc = wide(s, f->t[i], w);
        col_node *terms = add(s, add(s, mul(s, wide(s, f->r[3 * i], w), x[0]), mul(s, wide(s, f->r[3 * i + 1], w), x[1])),
                              mul(s, wide(s, f->r[3 * i + 2], w), x[2]));
        out[i] = add(s, terms, acc);
    }
}

/* [N, H*k] -> [H, N, k] contiguous */
static col_node *heads_first(sm *s, col_node *x, int64_t h, int64_t k)
{
    return col_contiguous(s->g, col_permute(s->g, col_reshape(s->g, x, 3, (int64_t[]){s->n, h, k}), (int[]){1, 0, 2}));
}

/* [H, N, k] -> [N, H*k] */
static col_node *heads_last(sm *s, col_node *x, int64_t h, int64_t k)
{
    return col_reshape(s->g, col_contiguous(s->g, col_permute(s->g, x, (int[]){1, 0, 2})), 2, (int64_t[]){s->n, h * k});
}

/* folding.InvariantPointAttention: act [N, c_s], act_2d [N, N, c_z] (the normed pair) */
static col_node *ipa(sm *s, const fold_config *cfg, const frames *f, col_node *act, col_node *act_2d)
{
    fold_ctx *c = s->c;
    col_graph *g = s->g;
    const int64_t N = s->n, H = cfg->ipa_heads, sqk = cfg->ipa_scalar_qk, sv = cfg->ipa_scalar_v;
    const int64_t pqk = cfg->ipa_point_qk, pv = cfg->ipa_point_v, cs = cfg->c_s, cz = cfg->c_z;
    mb_push(c->b, "invariant_point_attention/");
    col_node *qs = fold_linear(c, act, cs, H * sqk, true, "q_scalar");
    col_node *kvs = col_reshape(g, fold_linear(c, act, cs, H * (sqk + sv), true, "kv_scalar"), 3,
                                (int64_t[]){N, H, sqk + sv});
    const float scalar_w = sqrtf(1.0f / (3.0f * (float)sqk));
    col_node *q = heads_first(s, scl(s, qs, scalar_w), H, sqk);
    col_node *k = col_contiguous(g, col_permute(g, col_slice(g, kvs, 2, 0, sqk), (int[]){1, 0, 2}));
    col_node *v = col_contiguous(g, col_permute(g, col_slice(g, kvs, 2, sqk, sv), (int[]){1, 0, 2}));

    /* points: q [N, H*pqk] per coordinate, kv [N, H*(pqk+pv)] per coordinate, in the global frame */
    col_node *qg[3], *kvg[3];
    to_global(s, f, fold_linear(c, act, cs, H * 3 * pqk, true, "q_point_local"), H * pqk, qg);
    to_global(s, f, fold_linear(c, act, cs, H * 3 * (pqk + pv), true, "kv_point_local"), H * (pqk + pv), kvg);
    col_node *qp[3], *kp[3], *vp[3];
    for (int i = 0; i < 3; i++) {
        qp[i] = heads_first(s, qg[i], H, pqk);                                    /* [H, N, pqk] */
        col_node *kv = col_reshape(g, kvg[i], 3, (int64_t[]){N, H, pqk + pv});
        kp[i] = col_contiguous(g, col_permute(g, col_slice(g, kv, 2, 0, pqk), (int[]){1, 0, 2}));
        vp[i] = col_contiguous(g, col_permute(g, col_slice(g, kv, 2, pqk, pv), (int[]){1, 0, 2}));
    }
    col_node *Q = col_concat(g, 3, qp, 2), *K = col_concat(g, 3, kp, 2);   /* [H, N, 3 pqk] */
    /* |q - k|^2 = |q|^2 + |k|^2 - 2 q.k */
    col_node *qk = col_matmul(g, Q, col_transpose(g, K, 1, 2));           /* [H, N, N] */
    col_node *qq = col_sum(g, mul(s, Q, Q), 1u << 2, 1);                  /* [H, N, 1] */
    col_node *kk = col_reshape(g, col_sum(g, mul(s, K, K), 1u << 2, 1), 3, (int64_t[]){H, 1, N});
    const int64_t hnn[3] = {H, N, N};
    col_node *dist2 = add(s, add(s, col_expand(g, qq, 3, hnn), col_expand(g, kk, 3, hnn)), scl(s, qk, -2.0f));
    /* point weights: sqrt(1 / (3 * pqk * 9/2)) * softplus(trainable_point_weights), times -1/2 */
    col_node *tpw = fold_w(c, 1, (int64_t[]){H}, "/trainable_point_weights");
    col_node *sp = col_log(g, col_scale(g, col_exp(g, tpw), 1.0f, 1.0f));
    const float point_w = sqrtf(1.0f / (3.0f * (float)pqk * 9.0f / 2.0f));
    col_node *pw = col_expand(g, col_reshape(g, scl(s, sp, point_w), 3, (int64_t[]){H, 1, 1}), 3, hnn);
    col_node *logits = add(s, col_matmul(g, q, col_transpose(g, k, 1, 2)), scl(s, mul(s, pw, dist2), -0.5f));
    /* pair bias: attention_2d(act_2d) [N, N, H] -> [H, N, N] * sqrt(1/3) */
    col_node *a2d = fold_linear(c, act_2d, cz, H, true, "attention_2d");
    a2d = col_contiguous(g, col_permute(g, a2d, (int[]){2, 0, 1}));
    logits = add(s, logits, scl(s, a2d, sqrtf(1.0f / 3.0f)));
    col_node *attn = col_softmax(g, logits, NULL, 0);                      /* [H, N, N] */

    col_node *res_scalar = heads_last(s, col_matmul(g, attn, v), H, sv);   /* [N, H*sv] */
    col_node *res_pt[3];
    for (int i = 0; i < 3; i++) res_pt[i] = heads_last(s, col_matmul(g, attn, vp[i]), H, pv);   /* global [N, H*pv] */
    /* back to the local frame: R^T (p - t) */
    col_node *d[3], *loc[3];
    for (int i = 0; i < 3; i++) d[i] = sub(s, res_pt[i], wide(s, f->t[i], H * pv));
    for (int j = 0; j < 3; j++)
        loc[j] = add(s, add(s, mul(s, wide(s, f->r[j], H * pv), d[0]), mul(s, wide(s, f->r[3 + j], H * pv), d[1])),
                     mul(s, wide(s, f->r[6 + j], H * pv), d[2]));
    col_node *norm = sqrt_pos(s, col_scale(g, add(s, add(s, mul(s, loc[0], loc[0]), mul(s, loc[1], loc[1])),
                                                  mul(s, loc[2], loc[2])), 1.0f, 1e-8f));
    /* attention over the pair: einsum('hij,ijc->ihc') as [N_i, H, N_j] @ [N_i, N_j, c_z] */
    col_node *o2d = col_matmul(g, col_contiguous(g, col_permute(g, attn, (int[]){1, 0, 2})), act_2d);
    o2d = col_reshape(g, o2d, 2, (int64_t[]){N, H * cz});
    col_node *feats[6] = {res_scalar, loc[0], loc[1], loc[2], norm, o2d};
    col_node *cat = col_concat(g, 6, feats, 1);
    int64_t width = H * sv + 4 * H * pv + H * cz;
    col_node *out = fold_linear(c, cat, width, cs, true, "output_projection");
    mb_pop(c->b);
    return out;
}

/* MultiRigidSidechain's angle ResNet on the final act and the initial act */
static void angles(sm *s, const fold_config *cfg, col_node *act, col_node *initial, fold_sm_outputs *out)
{
    fold_ctx *c = s->c;
    col_graph *g = s->g;
    const int64_t cs = cfg->c_s, ch = cfg->angle_channels;
    mb_push(c->b, "rigid_sidechain/");
    col_node *x = add(s, fold_linear(c, col_relu(g, act), cs, ch, true, "input_projection"),
                      fold_linear(c, col_relu(g, initial), cs, ch, true, "input_projection_1"));
    for (int64_t b = 0; b < cfg->angle_blocks; b++) {
        char n1[32], n2[32];
        snprintf(n1, sizeof n1, b ? "resblock1_%lld" : "resblock1", (long long)b);
        snprintf(n2, sizeof n2, b ? "resblock2_%lld" : "resblock2", (long long)b);
        col_node *y = fold_linear(c, col_relu(g, x), ch, ch, true, n1);
        y = fold_linear(c, col_relu(g, y), ch, ch, true, n2);
        x = add(s, x, y);
    }
    col_node *un = col_reshape(g, fold_linear(c, col_relu(g, x), ch, 14, true, "unnormalized_angles"), 3,
                               (int64_t[]){s->n, 7, 2});
    /* l2_normalize: x / sqrt(max(sum x^2, 1e-12)); max(v, e) = relu(v - e) + e (exact for v >> e) */
    col_node *ss = col_sum(g, mul(s, un, un), 1u << 2, 1);
    ss = col_scale(g, col_relu(g, col_scale(g, ss, 1.0f, -1e-12f)), 1.0f, 1e-12f);
    col_node *nrm = col_expand(g, sqrt_pos(s, ss), 3, (int64_t[]){s->n, 7, 2});
    out->unnormalized_angles = un;
    out->angles = col_div(g, un, nrm);
    mb_pop(c->b);
}

void fold_structure_module_build(fold_ctx *c, const fold_config *cfg, int64_t n_res, col_node *single,
                                 col_node *pair, fold_sm_outputs *out)
{
    sm s = {c, c->b->g, n_res};
    col_graph *g = s.g;
    const int64_t N = n_res, cs = cfg->c_s;
    int saved = c->layer;
    c->layer = -1;
    mb_push(c->b, "structure_module/");
    col_node *act = fold_layer_norm(c, single, cs, "single_layer_norm");
    col_node *initial = act;
    act = fold_linear(c, act, cs, cs, true, "initial_projection");
    col_node *act_2d = fold_layer_norm(c, pair, cfg->c_z, "pair_layer_norm");

    frames f;
    const int64_t n1[2] = {N, 1};
    f.q[0] = col_fill(g, COL_F32, 2, n1, 1.0f);
    for (int k = 1; k < 4; k++) f.q[k] = col_fill(g, COL_F32, 2, n1, 0.0f);
    for (int k = 0; k < 3; k++) f.t[k] = col_fill(g, COL_F32, 2, n1, 0.0f);
    rot_of_quat(&s, &f);

    mb_push(c->b, "fold_iteration/");
    for (int layer = 0; layer < cfg->sm_layers; layer++) {
        act = add(&s, act, ipa(&s, cfg, &f, act, act_2d));
        act = fold_layer_norm(c, act, cs, "attention_layer_norm");
        col_node *in = act;
        for (int64_t i = 0; i < cfg->sm_transition_layers; i++) {
            char name[32];
            snprintf(name, sizeof name, i ? "transition_%lld" : "transition", (long long)i);
            act = fold_linear(c, act, cs, cs, true, name);
            if (i < cfg->sm_transition_layers - 1) act = col_relu(g, act);
        }
        act = add(&s, act, in);
        act = fold_layer_norm(c, act, cs, "transition_layer_norm");
        pre_compose(&s, &f, fold_linear(c, act, cs, 6, true, "affine_update"));
    }
    angles(&s, cfg, act, initial, out);
    mb_pop(c->b);
    mb_pop(c->b);
    c->layer = saved;

    out->single = act;
    col_node *rows[3];
    for (int i = 0; i < 3; i++) rows[i] = col_concat(g, 3, &f.r[3 * i], 1);      /* [N, 3] */
    out->rotation = col_reshape(g, col_concat(g, 3, rows, 1), 3, (int64_t[]){N, 3, 3});
    col_node *t10[3];
    for (int i = 0; i < 3; i++) t10[i] = scl(&s, f.t[i], 10.0f);                 /* position_scale */
    out->translation = col_concat(g, 3, t10, 1);
}
