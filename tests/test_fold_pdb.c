/* test_fold_pdb.c - the output files of a prediction: PDB and mmCIF text (fold_pdb.h) byte for byte
 * against DeepMind's protein.to_pdb and protein.to_mmcif for a random protein of 12 residues (glycine,
 * X inside and last, a gap in the numbering, masks at 0.5 and just below, rounding ties) and one of two
 * chains (chains A and C, gaps, numbers below 1, model type Multimer); the JSON files (fold_json.h)
 * against AlphaFold's pae / confidence JSON and ColabFold's scores JSON for values with rounding ties;
 * and the errors the writers give for bad input.
 * Fixtures: tools/refgen/make_fold_out_fixtures.py (tests/fixtures/fold_out/). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "fold_json.h"
#include "fold_pdb.h"
#include "testlib.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/fold_out"
#endif

/* a tensor's raw bytes (copied, NUL-terminated) when it has the dtype; NULL and a failed check if not */
static void *raw(const col_ckpt *ck, const char *name, col_st_dtype dt, int64_t *n)
{
    const col_ckpt_tensor *t = col_ckpt_find(ck, name);
    if (!t || t->dtype != dt) {
        TL_OK(false, "fixture tensor '%s' present as %s", name, col_st_dtype_name(dt));
        return NULL;
    }
    char *p = calloc(t->nbytes + 8, 1);
    memcpy(p, t->data, t->nbytes);
    if (n) *n = (int64_t)(t->nbytes / col_st_dtype_size(dt));
    return p;
}

/* text equal to the reference's bytes; on a difference, the first line that differs */
static void same_text(const col_strbuf *got, const char *want, int64_t want_len, const char *what)
{
    bool eq = !got->oom && (int64_t)got->len == want_len && memcmp(got->p, want, got->len) == 0;
    if (!eq && got->p) {
        size_t k = 0, line = 1, ls = 0;
        while (k < got->len && (int64_t)k < want_len && got->p[k] == want[k]) {
            if (got->p[k] == '\n') line++, ls = k + 1;
            k++;
        }
        TL_NOTE("%s: first difference at byte %zu, line %zu:\n#  got  '%.100s'\n#  want '%.100s'", what, k, line,
                got->p + ls, want + ls);
    }
    TL_OK(eq, "%s: %zu bytes, byte-equal to the Python writer's %lld", what, got->len, (long long)want_len);
}

static void protein_case(const char *file, bool chains_null, bool multimer)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", FIXTURES, file);
    col_ckpt *ck = NULL;
    col_err err = {0};
    if (col_ckpt_open(path, &ck, &err) != COL_OK) {
        TL_OK(false, "%s: %s", file, err.msg);
        return;
    }
    int64_t n = 0, npos = 0, nmask = 0, npl = 0, ncif = 0, npdb = 0;
    int32_t *aatype = raw(ck, "in/aatype", COL_ST_I32, &n), *resi = raw(ck, "in/residue_index", COL_ST_I32, NULL),
            *chain = raw(ck, "in/chain_index", COL_ST_I32, NULL);
    float *pos = raw(ck, "in/atom_positions", COL_ST_F32, &npos), *mask = raw(ck, "in/atom_mask", COL_ST_F32, &nmask),
          *plddt = raw(ck, "in/plddt", COL_ST_F32, &npl);
    char *pdb = raw(ck, "out/pdb", COL_ST_U8, &npdb), *cif = raw(ck, "out/cif", COL_ST_U8, &ncif);
    if (aatype && resi && chain && pos && mask && plddt && pdb && cif && npos == n * 111 && nmask == n * 37 && npl == n) {
        fold_protein p = {n, aatype, resi, chains_null ? NULL : chain, pos, mask, plddt};
        col_strbuf b = {0};
        col_status st = fold_pdb_write(&p, &b, &err);
        char what[200];
        snprintf(what, sizeof what, "%s: PDB of %lld residues (protein.to_pdb)%s", file, (long long)n,
                 chains_null ? ", no chain index given" : "");
        if (st != COL_OK) TL_OK(false, "%s: %s", what, err.msg);
        else same_text(&b, pdb, npdb, what);
        free(b.p);
        b = (col_strbuf){0};
        st = fold_mmcif_write(&p, "test", multimer, &b, &err);
        snprintf(what, sizeof what, "%s: mmCIF (protein.to_mmcif, file id 'test', %s)", file,
                 multimer ? "Multimer" : "Monomer");
        if (st != COL_OK) TL_OK(false, "%s: %s", what, err.msg);
        else same_text(&b, cif, ncif, what);
        free(b.p);
    }
    free(aatype), free(resi), free(chain), free(pos), free(mask), free(plddt), free(pdb), free(cif);
    col_ckpt_close(ck);
}

static void json_case(void)
{
    col_ckpt *ck = NULL;
    col_err err = {0};
    if (col_ckpt_open(FIXTURES "/json.safetensors", &ck, &err) != COL_OK) {
        TL_OK(false, "json.safetensors: %s", err.msg);
        return;
    }
    int64_t n = 0, npae = 0, l1 = 0, l2 = 0, l3 = 0, l4 = 0;
    float *plddt = raw(ck, "in/plddt", COL_ST_F32, &n), *pae = raw(ck, "in/pae", COL_ST_F32, &npae);
    double *ptm = raw(ck, "in/ptm", COL_ST_F64, NULL), *max_pae = raw(ck, "in/max_pae", COL_ST_F64, NULL);
    char *w_pae = raw(ck, "out/pae_json", COL_ST_U8, &l1), *w_conf = raw(ck, "out/confidence_json", COL_ST_U8, &l2),
         *w_sc = raw(ck, "out/scores_json", COL_ST_U8, &l3), *w_sc1 = raw(ck, "out/scores_json_plddt_only", COL_ST_U8, &l4);
    if (plddt && pae && ptm && max_pae && w_pae && w_conf && w_sc && w_sc1 && npae == n * n) {
        col_strbuf b = {0};
        if (fold_json_pae(pae, n, max_pae[0], &b, &err) == COL_OK)
            same_text(&b, w_pae, l1, "AlphaFold's PAE JSON (confidence.pae_json, 1 decimal)");
        else
            TL_OK(false, "PAE JSON: %s", err.msg);
        free(b.p);
        b = (col_strbuf){0};
        if (fold_json_confidence(plddt, n, &b, &err) == COL_OK)
            same_text(&b, w_conf, l2, "AlphaFold's confidence JSON (confidence.confidence_json)");
        else
            TL_OK(false, "confidence JSON: %s", err.msg);
        free(b.p);
        b = (col_strbuf){0};
        if (fold_json_scores(plddt, pae, n, ptm[0], &b, &err) == COL_OK)
            same_text(&b, w_sc, l3, "ColabFold's scores JSON (plddt, max_pae, pae, ptm)");
        else
            TL_OK(false, "scores JSON: %s", err.msg);
        free(b.p);
        b = (col_strbuf){0};
        if (fold_json_scores(plddt, NULL, n, 0, &b, &err) == COL_OK)
            same_text(&b, w_sc1, l4, "ColabFold's scores JSON without a PAE");
        else
            TL_OK(false, "scores JSON without a PAE: %s", err.msg);
        free(b.p);

        b = (col_strbuf){0};
        plddt[4] = 100.5f;
        col_status st = fold_json_confidence(plddt, n, &b, &err);
        TL_OK(st == COL_EINVAL && strstr(err.msg, "residue 5"), "confidence JSON: a pLDDT of 100.5 is refused: %s",
              err.msg);
        st = fold_json_pae(pae, 0, 31.75, &b, &err);
        TL_OK(st == COL_EINVAL, "PAE JSON: no residues is refused: %s", err.msg);
        free(b.p);
    }
    free(plddt), free(pae), free(ptm), free(max_pae), free(w_pae), free(w_conf), free(w_sc), free(w_sc1);
    col_ckpt_close(ck);
}

/* what the structure writers refuse */
static void protein_errors(void)
{
    int32_t aatype[2] = {7, 20}, resi[2] = {1, 2}, chain[2] = {0, 0};
    float pos[2 * 111] = {0}, mask[2 * 37] = {0}, plddt[2] = {50, 60};
    mask[1] = 1;   /* one CA */
    fold_protein p = {2, aatype, resi, chain, pos, mask, plddt};
    col_strbuf b = {0};
    col_err err = {0};
    TL_OK(fold_pdb_write(&p, &b, &err) == COL_OK && fold_mmcif_write(&p, "x1", false, &b, &err) == COL_OK,
          "a structure of one atom is written %s", err.msg);
    struct {
        int field, value;
        const char *want;
    } bad[] = {
        {0, 21, "residue 2 has type 21"},    {0, -1, "residue 2 has type -1"},
        {1, 10000, "residue 2 is numbered 10000"}, {1, -1000, "numbered -1000"},
        {2, 62, "residue 2 is in chain 62"}, {2, -1, "in chain -1"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int32_t *f = bad[k].field == 0 ? aatype : bad[k].field == 1 ? resi : chain;
        int32_t keep = f[1];
        f[1] = bad[k].value;
        col_status s1 = fold_pdb_write(&p, &b, &err);
        bool m1 = strstr(err.msg, bad[k].want) != NULL;
        col_status s2 = fold_mmcif_write(&p, "x1", false, &b, &err);
        TL_OK(s1 == COL_EINVAL && m1 && s2 == COL_EINVAL && strstr(err.msg, bad[k].want), "refused: %s", err.msg);
        f[1] = keep;
    }
    mask[1] = 0.49f;
    TL_OK(fold_pdb_write(&p, &b, &err) == COL_EINVAL && strstr(err.msg, "no atoms"), "no atom present: %s", err.msg);
    mask[1] = 1;
    TL_OK(fold_mmcif_write(&p, "a b", false, &b, &err) == COL_EINVAL && strstr(err.msg, "file id"),
          "a file id with a space: %s", err.msg);
    TL_OK(fold_mmcif_write(&p, "", false, &b, &err) == COL_EINVAL, "an empty file id: %s", err.msg);
    p.n_res = 0;
    TL_OK(fold_pdb_write(&p, &b, &err) == COL_EINVAL, "no residues: %s", err.msg);
    free(b.p);
}

int main(void)
{
    protein_case("protein_mono.safetensors", true, false);
    protein_case("protein_mono.safetensors", false, false);
    protein_case("protein_multi.safetensors", false, true);
    json_case();
    protein_errors();
    return tl_done();
}
