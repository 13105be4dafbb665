/* fold_atoms.c - backbone frames and torsions to atom positions
 * (fold_atoms.h), after DeepMind's alphafold/model/all_atom.py and r3.py. */
#include "fold_atoms.h"

#include <stddef.h>

/* a rigid transform in double: x -> R x + t */
typedef struct {
    double r[3][3];
    double t[3];
} rigid;

/* a then b: (Ra Rb, ta + Ra tb) (r3.rigids_mul_rigids) */
static rigid rigid_mul(const rigid *a, const rigid *b)
{
    rigid c;
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++)
            c.r[i][j] = a->r[i][0] * b->r[0][j] + a->r[i][1] * b->r[1][j] + a->r[i][2] * b->r[2][j];
        c.t[i] = a->t[i] + a->r[i][0] * b->t[0] + a->r[i][1] * b->t[1] + a->r[i][2] * b->t[2];
    }
    return c;
}

static rigid rigid_of_flat12(const float *f)
{
    rigid g;
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++)
            g.r[i][j] = f[i * 3 + j];
        g.t[i] = f[9 + i];
    }
    return g;
}

static void rigid_to_flat12(const rigid *g, float *f)
{
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++)
            f[i * 3 + j] = (float)g->r[i][j];
        f[9 + i] = (float)g->t[i];
    }
}

/* aatype in range, arrays present: the checks every function makes */
static col_status check_args(const char *fn, const int32_t *aatype, int64_t n_res, const void *in, const void *out,
                             col_err *err)
{
    if (n_res < 0)
        return col_err_set(err, COL_EINVAL, "%s: negative residue count %lld", fn, (long long)n_res);
    if (n_res == 0)
        return COL_OK;
    if (!aatype || !in || !out)
        return col_err_set(err, COL_EINVAL, "%s: missing input or output array", fn);
    for (int64_t i = 0; i < n_res; i++)
        if (aatype[i] < 0 || aatype[i] >= FOLD_NUM_RESTYPES)
            return col_err_set(err, COL_EINVAL, "%s: residue %lld has residue type %ld, not 0..%d", fn, (long long)i,
                               (long)aatype[i], FOLD_NUM_RESTYPES - 1);
    return COL_OK;
}

col_status fold_torsion_angles_to_frames(const int32_t *aatype, int64_t n_res, const float *rot, const float *trans,
                                         const float *angles, float *frames, col_err *err)
{
    col_status st = check_args("torsion angles to frames", aatype, n_res, rot, frames, err);
    if (st != COL_OK)
        return st;
    if (n_res > 0 && (!trans || !angles))
        return col_err_set(err, COL_EINVAL, "torsion angles to frames: missing input array");
    for (int64_t i = 0; i < n_res; i++) {
        const int a = aatype[i];
        rigid backb;
        for (int r = 0; r < 3; r++) {
            for (int c = 0; c < 3; c++)
                backb.r[r][c] = rot[i * 9 + r * 3 + c];
            backb.t[r] = trans[i * 3 + r];
        }
        /* each group in its parent: default frame times the rotation about x */
        rigid local[FOLD_NUM_GROUPS];
        for (int g = 0; g < FOLD_NUM_GROUPS; g++) {
            const float(*m)[4] = fold_restype_rigid_group_default_frame[a][g];
            double s = 0.0, c = 1.0;   /* the backbone group: no rotation */
            if (g > 0) {
                s = angles[(i * FOLD_NUM_TORSIONS + (g - 1)) * 2 + 0];
                c = angles[(i * FOLD_NUM_TORSIONS + (g - 1)) * 2 + 1];
            }
            for (int r = 0; r < 3; r++) {
                /* [m0 m1 m2] . [[1 0 0] [0 c -s] [0 s c]] */
                local[g].r[r][0] = m[r][0];
                local[g].r[r][1] = m[r][1] * c + m[r][2] * s;
                local[g].r[r][2] = -m[r][1] * s + m[r][2] * c;
                local[g].t[r] = m[r][3];
            }
        }
        /* chi2..chi4 hang off the previous chi group */
        for (int g = 5; g < FOLD_NUM_GROUPS; g++)
            local[g] = rigid_mul(&local[g - 1], &local[g]);
        for (int g = 0; g < FOLD_NUM_GROUPS; g++) {
            rigid glob = rigid_mul(&backb, &local[g]);
            rigid_to_flat12(&glob, frames + (i * FOLD_NUM_GROUPS + g) * FOLD_FRAME_FLOATS);
        }
    }
    return COL_OK;
}

col_status fold_frames_to_atom14(const int32_t *aatype, int64_t n_res, const float *frames, float *atom14,
                                 float *atom14_mask, col_err *err)
{
    col_status st = check_args("frames to atom14 positions", aatype, n_res, frames, atom14, err);
    if (st != COL_OK)
        return st;
    for (int64_t i = 0; i < n_res; i++) {
        const int a = aatype[i];
        rigid g[FOLD_NUM_GROUPS];
        for (int k = 0; k < FOLD_NUM_GROUPS; k++)
            g[k] = rigid_of_flat12(frames + (i * FOLD_NUM_GROUPS + k) * FOLD_FRAME_FLOATS);
        for (int j = 0; j < FOLD_NUM_ATOM14; j++) {
            const int exists = fold_restype_atom14_mask[a][j];
            const rigid *f = &g[fold_restype_atom14_to_rigid_group[a][j]];
            const float *p = fold_restype_atom14_rigid_group_positions[a][j];
            float *o = atom14 + (i * FOLD_NUM_ATOM14 + j) * 3;
            for (int r = 0; r < 3; r++)
                o[r] = exists ? (float)(f->r[r][0] * p[0] + f->r[r][1] * p[1] + f->r[r][2] * p[2] + f->t[r]) : 0.0f;
            if (atom14_mask)
                atom14_mask[i * FOLD_NUM_ATOM14 + j] = (float)exists;
        }
    }
    return COL_OK;
}

col_status fold_atom14_to_atom37(const int32_t *aatype, int64_t n_res, const float *atom14, float *atom37,
                                 float *atom37_mask, col_err *err)
{
    col_status st = check_args("atom14 to atom37", aatype, n_res, atom14, atom37, err);
    if (st != COL_OK)
        return st;
    for (int64_t i = 0; i < n_res; i++) {
        const int a = aatype[i];
        for (int k = 0; k < FOLD_NUM_ATOM37; k++) {
            const int exists = fold_restype_atom37_mask[a][k];
            const float *src = atom14 + (i * FOLD_NUM_ATOM14 + fold_restype_atom37_to_atom14[a][k]) * 3;
            float *o = atom37 + (i * FOLD_NUM_ATOM37 + k) * 3;
            for (int r = 0; r < 3; r++)
                o[r] = exists ? src[r] : 0.0f;
            if (atom37_mask)
                atom37_mask[i * FOLD_NUM_ATOM37 + k] = (float)exists;
        }
    }
    return COL_OK;
}

col_status fold_pseudo_beta(const int32_t *aatype, int64_t n_res, const float *atom37, float *out, col_err *err)
{
    col_status st = check_args("pseudo-beta", aatype, n_res, atom37, out, err);
    if (st != COL_OK)
        return st;
    for (int64_t i = 0; i < n_res; i++) {
        const int k = aatype[i] == FOLD_RESTYPE_GLY ? FOLD_ATOM37_CA : FOLD_ATOM37_CB;
        for (int r = 0; r < 3; r++)
            out[i * 3 + r] = atom37[(i * FOLD_NUM_ATOM37 + k) * 3 + r];
    }
    return COL_OK;
}
