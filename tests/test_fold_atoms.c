/* test_fold_atoms.c - AlphaFold's residue tables (fold_residues.h) and the
 * frames/atoms steps of the structure module (fold_atoms.h) against DeepMind's
 * code: tools/refgen/make_fold_atoms_fixtures.py wrote the residue constants
 * as arrays and random backbones (all 20 amino acids and X) passed through
 * all_atom.torsion_angles_to_frames, frames_and_literature_positions_to_atom14_pos,
 * atom14_to_atom37 as folding.py uses it, and modules.pseudo_beta_fn in JAX
 * (float32). Positions within 1e-4 Angstrom, masks and tables exactly; then
 * the errors for residue types out of range and missing arrays. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "fold_atoms.h"
#include "fold_residues.h"
#include "testlib.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/fold_atoms"
#endif

#define POS_TOL 1e-4

/* the tensor NAME of the file as float, numel floats, checked against the
 * shape (ndim, shape); NULL (and a note) if absent or shaped otherwise */
static float *load(const col_ckpt *c, const char *name, int ndim, const int64_t *shape)
{
    const col_ckpt_tensor *t = col_ckpt_find(c, name);
    if (!t) {
        TL_NOTE("fixture has no '%s'", name);
        return NULL;
    }
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    float *f = malloc(sizeof(float) * (size_t)(n + 1));
    col_err err = {0};
    if (!f || col_ckpt_read_f32(t, ndim, shape, f, &err) != COL_OK) {
        TL_NOTE("%s", err.msg);
        free(f);
        return NULL;
    }
    return f;
}

#define LOAD(c, name, ...) load((c), (name), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                                (int64_t[]){__VA_ARGS__})

/* a zero-padded ASCII name of the fixture equals s */
static bool name_is(const float *bytes, int width, const char *s)
{
    int n = (int)strlen(s);
    if (n >= width)
        return false;
    for (int i = 0; i < width; i++)
        if ((int)bytes[i] != (i < n ? (unsigned char)s[i] : 0))
            return false;
    return true;
}

static bool u8_equal(const uint8_t *tab, const float *ref, int n)
{
    if (!ref)
        return false;
    for (int i = 0; i < n; i++)
        if ((float)tab[i] != ref[i])
            return false;
    return true;
}

static bool f32_equal(const float *tab, const float *ref, int n)
{
    if (!ref)
        return false;
    for (int i = 0; i < n; i++)
        if (tab[i] != ref[i])
            return false;
    return true;
}

static void test_tables(void)
{
    col_ckpt *c = NULL;
    col_err err = {0};
    if (col_ckpt_open(FIXTURES "/tables.safetensors", &c, &err) != COL_OK) {
        TL_OK(false, "open tables fixture: %s", err.msg);
        return;
    }
    enum { R = FOLD_NUM_RESTYPES, A14 = FOLD_NUM_ATOM14, A37 = FOLD_NUM_ATOM37, G = FOLD_NUM_GROUPS };
    float *f = LOAD(c, "tables/letters", R);
    bool ok = f != NULL;
    for (int i = 0; ok && i < R; i++)
        ok = (int)f[i] == fold_restype_letters[i];
    TL_OK(ok && strlen(fold_restype_letters) == R, "residue letters %s as residue_constants.restypes_with_x",
          fold_restype_letters);
    free(f);

    f = LOAD(c, "tables/names3", R, 4);
    ok = f != NULL;
    for (int i = 0; ok && i < R; i++)
        ok = name_is(f + i * 4, 4, fold_restype_names3[i]);
    TL_OK(ok, "three-letter names");
    free(f);

    f = LOAD(c, "tables/atom37_names", A37, 4);
    float *e = LOAD(c, "tables/atom37_elements", A37, 4);
    ok = f && e;
    for (int i = 0; ok && i < A37; i++)
        ok = name_is(f + i * 4, 4, fold_atom37_names[i]) && name_is(e + i * 4, 4, fold_atom37_elements[i]);
    TL_OK(ok, "atom37 names and elements");
    free(f);
    free(e);

    f = LOAD(c, "tables/atom14_names", R, A14, 4);
    ok = f != NULL;
    for (int i = 0; ok && i < R * A14; i++)
        ok = name_is(f + i * 4, 4, fold_atom14_names[i / A14][i % A14]);
    TL_OK(ok, "atom14 names per residue type");
    free(f);

    struct {
        const char *name;
        const uint8_t *tab;
        int n;
        int64_t shape[3];
        int ndim;
    } u8[] = {
        {"atom14_to_atom37", &fold_restype_atom14_to_atom37[0][0], R * A14, {R, A14}, 2},
        {"atom37_to_atom14", &fold_restype_atom37_to_atom14[0][0], R * A37, {R, A37}, 2},
        {"atom14_mask", &fold_restype_atom14_mask[0][0], R * A14, {R, A14}, 2},
        {"atom37_mask", &fold_restype_atom37_mask[0][0], R * A37, {R, A37}, 2},
        {"atom14_to_rigid_group", &fold_restype_atom14_to_rigid_group[0][0], R * A14, {R, A14}, 2},
        {"chi_angles_mask", &fold_chi_angles_mask[0][0], R * 4, {R, 4}, 2},
        {"chi_pi_periodic", &fold_chi_pi_periodic[0][0], R * 4, {R, 4}, 2},
        {"chi_angles_atom_indices", &fold_chi_angles_atom_indices[0][0][0], R * 16, {R, 4, 4}, 3},
    };
    for (size_t k = 0; k < sizeof u8 / sizeof u8[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "tables/%s", u8[k].name);
        f = load(c, name, u8[k].ndim, u8[k].shape);
        TL_OK(u8_equal(u8[k].tab, f, u8[k].n), "table %s equals residue_constants'", u8[k].name);
        free(f);
    }
    f = LOAD(c, "tables/atom14_rigid_group_positions", R, A14, 3);
    TL_OK(f32_equal(&fold_restype_atom14_rigid_group_positions[0][0][0], f, R * A14 * 3),
          "literature positions equal residue_constants' (float32, bit for bit)");
    free(f);
    f = LOAD(c, "tables/rigid_group_default_frame", R, G, 4, 4);
    TL_OK(f32_equal(&fold_restype_rigid_group_default_frame[0][0][0][0], f, R * G * 16),
          "default frames equal residue_constants' (float32, bit for bit)");
    if (f)
        TL_NOTE("e.g. ARG psi frame t = (%g, %g, %g), python (%g, %g, %g)",
                fold_restype_rigid_group_default_frame[1][3][0][3], fold_restype_rigid_group_default_frame[1][3][1][3],
                fold_restype_rigid_group_default_frame[1][3][2][3], f[(1 * G + 3) * 16 + 3], f[(1 * G + 3) * 16 + 7],
                f[(1 * G + 3) * 16 + 11]);
    free(f);

    f = LOAD(c, "tables/indices", 6);
    TL_OK(f && f[0] == FOLD_RESTYPE_GLY && f[1] == FOLD_ATOM37_N && f[2] == FOLD_ATOM37_CA && f[3] == FOLD_ATOM37_C &&
              f[4] == FOLD_ATOM37_CB && f[5] == FOLD_ATOM37_O,
          "glycine's residue type and the backbone atom37 indices");
    free(f);

    /* the lookups: letters as sequence_to_onehot(map_unknown_to_x) reads them */
    const col_ckpt_tensor *lt = col_ckpt_find(c, "tables/lookup_letters");
    int nl = lt && lt->ndim == 1 ? (int)lt->shape[0] : 0;
    f = nl ? LOAD(c, "tables/lookup_letters", nl) : NULL;
    float *want = nl ? LOAD(c, "tables/lookup_restype", nl) : NULL;
    ok = f && want;
    for (int i = 0; ok && i < nl; i++)
        ok = fold_restype_of_letter((char)f[i]) == (int)want[i];
    TL_OK(ok && nl > 21, "residue type of %d letters (unknown upper-case letters -> X)", nl);
    free(f);
    free(want);
    TL_OK(fold_restype_of_letter('a') == -1 && fold_restype_of_letter('-') == -1 && fold_restype_of_letter(0) == -1,
          "lower case, gap and NUL are no residue");
    ok = true;
    for (int i = 0; i < R; i++)
        ok = ok && fold_restype_of_name3(fold_restype_names3[i]) == i;
    for (int i = 0; i < A37; i++)
        ok = ok && fold_atom37_index(fold_atom37_names[i]) == i;
    TL_OK(ok && fold_restype_of_name3("XYZ") == -1 && fold_restype_of_name3(NULL) == -1 &&
              fold_atom37_index("HA") == -1 && fold_atom37_index("") == -1,
          "three-letter names and atom names found, others not");

    /* the maps invert each other on the atoms that exist */
    ok = true;
    for (int r = 0; r < R; r++)
        for (int k = 0; k < A37; k++)
            if (fold_restype_atom37_mask[r][k])
                ok = ok && fold_restype_atom14_mask[r][fold_restype_atom37_to_atom14[r][k]] &&
                     fold_restype_atom14_to_atom37[r][fold_restype_atom37_to_atom14[r][k]] == k;
    TL_OK(ok, "atom37 -> atom14 -> atom37 is the identity on existing atoms");
    col_ckpt_close(c);
}

static double max_abs(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m))   /* NaN too */
            m = d;
    }
    return m;
}

static void test_case(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", FIXTURES, name);
    col_ckpt *c = NULL;
    col_err err = {0};
    if (col_ckpt_open(path, &c, &err) != COL_OK) {
        TL_OK(false, "open %s: %s", path, err.msg);
        return;
    }
    const col_ckpt_tensor *ta = col_ckpt_find(c, "in/aatype");
    const int64_t n = ta && ta->ndim == 1 ? ta->shape[0] : 0;
    float *aat_f = n ? LOAD(c, "in/aatype", n) : NULL;
    float *rot = n ? LOAD(c, "in/rot", n, 3, 3) : NULL, *trans = n ? LOAD(c, "in/trans", n, 3) : NULL;
    float *ang = n ? LOAD(c, "in/angles", n, 7, 2) : NULL;
    float *w_fr = n ? LOAD(c, "out/frames", n, 8, 12) : NULL, *w_14 = n ? LOAD(c, "out/atom14", n, 14, 3) : NULL;
    float *w_m14 = n ? LOAD(c, "out/atom14_mask", n, 14) : NULL, *w_37 = n ? LOAD(c, "out/atom37", n, 37, 3) : NULL;
    float *w_m37 = n ? LOAD(c, "out/atom37_mask", n, 37) : NULL, *w_pb = n ? LOAD(c, "out/pseudo_beta", n, 3) : NULL;
    if (!(aat_f && rot && trans && ang && w_fr && w_14 && w_m14 && w_37 && w_m37 && w_pb)) {
        TL_OK(false, "%s: read the fixture's arrays", name);
        goto done;
    }
    int32_t *aat = malloc(sizeof(int32_t) * (size_t)n);
    float *fr = malloc(sizeof(float) * (size_t)(n * 8 * 12)), *a14 = malloc(sizeof(float) * (size_t)(n * 14 * 3));
    float *m14 = malloc(sizeof(float) * (size_t)(n * 14)), *a37 = malloc(sizeof(float) * (size_t)(n * 37 * 3));
    float *m37 = malloc(sizeof(float) * (size_t)(n * 37)), *pb = malloc(sizeof(float) * (size_t)(n * 3));
    bool seen[FOLD_NUM_RESTYPES] = {0};
    int kinds = 0;
    for (int64_t i = 0; i < n; i++) {
        aat[i] = (int32_t)aat_f[i];
        if (aat[i] >= 0 && aat[i] < FOLD_NUM_RESTYPES && !seen[aat[i]]) {
            seen[aat[i]] = true;
            kinds++;
        }
    }
    TL_OK(kinds == (strcmp(name, "all21") == 0 ? FOLD_NUM_RESTYPES : kinds) && kinds > 1,
          "%s: %lld residues of %d residue types", name, (long long)n, kinds);

    col_status st = fold_torsion_angles_to_frames(aat, n, rot, trans, ang, fr, &err);
    double e = max_abs(fr, w_fr, n * 8 * 12);
    TL_OK(st == COL_OK && e <= POS_TOL, "%s: frames of the 8 rigid groups vs torsion_angles_to_frames: max-abs %.3g",
          name, e);
    st = fold_frames_to_atom14(aat, n, fr, a14, m14, &err);
    e = max_abs(a14, w_14, n * 14 * 3);
    TL_OK(st == COL_OK && e <= POS_TOL, "%s: atom14 positions vs frames_and_literature_positions_to_atom14_pos: "
          "max-abs %.3g A", name, e);
    TL_OK(st == COL_OK && max_abs(m14, w_m14, n * 14) == 0, "%s: atom14 mask exactly", name);
    st = fold_atom14_to_atom37(aat, n, a14, a37, m37, &err);
    e = max_abs(a37, w_37, n * 37 * 3);
    TL_OK(st == COL_OK && e <= POS_TOL, "%s: atom37 positions vs final_atom_positions: max-abs %.3g A", name, e);
    TL_OK(st == COL_OK && max_abs(m37, w_m37, n * 37) == 0, "%s: atom37 mask exactly", name);
    /* the reference's own atom14 through ours: the gather alone, exact */
    st = fold_atom14_to_atom37(aat, n, w_14, a37, NULL, &err);
    TL_OK(st == COL_OK && max_abs(a37, w_37, n * 37 * 3) == 0, "%s: atom14 -> atom37 of the reference's atom14 exactly",
          name);
    st = fold_pseudo_beta(aat, n, w_37, pb, &err);
    e = max_abs(pb, w_pb, n * 3);
    TL_OK(st == COL_OK && e == 0, "%s: pseudo-beta of the reference's atom37 exactly", name);
    fold_atom14_to_atom37(aat, n, a14, a37, NULL, &err);
    st = fold_pseudo_beta(aat, n, a37, pb, &err);
    e = max_abs(pb, w_pb, n * 3);
    TL_OK(st == COL_OK && e <= POS_TOL, "%s: pseudo-beta end to end vs pseudo_beta_fn: max-abs %.3g A", name, e);

    /* untrusted residue types and missing arrays */
    if (n > 3) {
        int32_t keep = aat[3];
        aat[3] = FOLD_NUM_RESTYPES;
        col_err e1 = {0}, e2 = {0}, e3 = {0}, e4 = {0};
        bool refused = fold_torsion_angles_to_frames(aat, n, rot, trans, ang, fr, &e1) == COL_EINVAL &&
                       fold_frames_to_atom14(aat, n, fr, a14, NULL, &e2) == COL_EINVAL &&
                       fold_atom14_to_atom37(aat, n, a14, a37, NULL, &e3) == COL_EINVAL;
        aat[3] = -1;
        refused = refused && fold_pseudo_beta(aat, n, a37, pb, &e4) == COL_EINVAL;
        TL_OK(refused && strstr(e1.msg, "residue 3") && strstr(e4.msg, "residue type -1"),
              "%s: residue types out of range refused (%s)", name, e1.msg);
        aat[3] = keep;
    }
    col_err e5 = {0}, e6 = {0};
    TL_OK(fold_torsion_angles_to_frames(aat, n, rot, NULL, ang, fr, &e5) == COL_EINVAL &&
              fold_frames_to_atom14(aat, -1, fr, a14, NULL, &e6) == COL_EINVAL && e5.msg[0] && e6.msg[0],
          "%s: missing array and negative count refused (%s; %s)", name, e5.msg, e6.msg);
    TL_OK(fold_torsion_angles_to_frames(NULL, 0, NULL, NULL, NULL, NULL, &err) == COL_OK &&
              fold_pseudo_beta(NULL, 0, NULL, NULL, &err) == COL_OK,
          "%s: no residues, nothing to do", name);
    free(aat);
    free(fr);
    free(a14);
    free(m14);
    free(a37);
    free(m37);
    free(pb);
done:
    free(aat_f);
    free(rot);
    free(trans);
    free(ang);
    free(w_fr);
    free(w_14);
    free(w_m14);
    free(w_37);
    free(w_m37);
    free(w_pb);
    col_ckpt_close(c);
}

int main(void)
{
    test_tables();
    test_case("all21");
    test_case("rand16");
    return tl_done();
}
