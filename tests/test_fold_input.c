/* test_fold_input - AlphaFold2's inputs: FASTA and a3m parsing against
 * AlphaFold's parsers.parse_fasta / make_sequence_features and parse_a3m /
 * make_msa_features / correct_msa_restypes, the model's input features
 * against fold_ref.features_of (DeepMind's data pipeline, shuffles the
 * identity), and the message of every bad input.
 * Fixtures: tools/refgen/make_fold_input_fixtures.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "fold_features.h"
#include "fold_input.h"
#include "testlib.h"
#include "textio.h"

/* ---------------------------------------------------------------- fixture access */

static col_ckpt *open_case(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.safetensors", FIXTURES, name);
    col_ckpt *c = NULL;
    col_err err = {0};
    if (col_ckpt_open(path, &c, &err) != COL_OK) {
        printf("Bail out! %s\n", err.msg);
        exit(1);
    }
    return c;
}

static const col_ckpt_tensor *need(const col_ckpt *c, const char *name)
{
    const col_ckpt_tensor *t = col_ckpt_find(c, name);
    if (!t) {
        printf("Bail out! fixture tensor %s missing\n", name);
        exit(1);
    }
    return t;
}

static int64_t numel(const col_ckpt_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* A U8 tensor as a NUL-terminated string (malloc'd); *len its bytes. */
static char *text_of(const col_ckpt *c, const char *name, size_t *len)
{
    const col_ckpt_tensor *t = need(c, name);
    size_t n = (size_t)numel(t);
    char *s = malloc(n + 1);
    if (n) memcpy(s, t->data, n);
    s[n] = 0;
    if (len) *len = n;
    return s;
}

/* An I32 tensor (malloc'd copy); *n its elements. */
static int32_t *ints_of(const col_ckpt *c, const char *name, int64_t *n)
{
    const col_ckpt_tensor *t = need(c, name);
    if (t->dtype != COL_ST_I32) {
        printf("Bail out! %s is not int32\n", name);
        exit(1);
    }
    int64_t k = numel(t);
    int32_t *v = malloc((size_t)(k ? k : 1) * sizeof *v);
    if (k) memcpy(v, t->data, (size_t)k * sizeof *v);
    if (n) *n = k;
    return v;
}

static int32_t int_of(const col_ckpt *c, const char *name)
{
    int32_t *v = ints_of(c, name, NULL);
    int32_t x = v[0];
    free(v);
    return x;
}

static bool same_ints(const int32_t *a, const int32_t *b, int64_t n)
{
    return n == 0 || !memcmp(a, b, (size_t)n * sizeof *a);
}

/* max |a - ref| over a float tensor of the fixture, of the given element count (-1 when the counts differ) */
static double max_err(const col_ckpt *c, const char *name, const float *a, int64_t n)
{
    const col_ckpt_tensor *t = need(c, name);
    if (numel(t) != n) return -1;
    float *ref = malloc((size_t)(n ? n : 1) * sizeof *ref);
    col_err err = {0};
    if (col_ckpt_read_f32(t, t->ndim, t->shape, ref, &err) != COL_OK) {
        free(ref);
        return -1;
    }
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
    }
    free(ref);
    return m;
}

/* writes text to DIR/name and returns the path (static buffer) */
static const char *write_tmp(const char *dir, const char *name, const char *text, size_t len)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    col_err err = {0};
    if (col_write_file_atomic(path, text, len, &err) != COL_OK) {
        printf("Bail out! %s\n", err.msg);
        exit(1);
    }
    return path;
}

/* ---------------------------------------------------------------- (a) parsers */

static void check_fasta(const char *name, const char *dir)
{
    col_ckpt *c = open_case(name);
    size_t len;
    char *text = text_of(c, "in/fasta", &len);
    fold_fasta f;
    col_err err = {0};
    col_status st = fold_fasta_parse(text, len, &f, &err);
    int n = int_of(c, "out/n");
    TL_OK(st == COL_OK && f.n == n, "%s: parsed, %d records (reference %d) %s", name, f.n, n, st ? err.msg : "");
    for (int k = 0; st == COL_OK && k < n && k < f.n; k++) {
        char key[64];
        snprintf(key, sizeof key, "out/%d/description", k);
        char *desc = text_of(c, key, NULL);
        snprintf(key, sizeof key, "out/%d/residues", k);
        char *res = text_of(c, key, NULL);
        int64_t na, ni;
        snprintf(key, sizeof key, "out/%d/aatype", k);
        int32_t *aatype = ints_of(c, key, &na);
        snprintf(key, sizeof key, "out/%d/residue_index", k);
        int32_t *ri = ints_of(c, key, &ni);
        const fold_sequence *s = &f.seqs[k];
        size_t wl = strcspn(desc, " \t");
        TL_OK(!strcmp(s->description, desc) && strlen(s->name) == wl && !strncmp(s->name, desc, wl),
              "%s record %d: name '%s', description '%s' (reference '%s')", name, k, s->name, s->description, desc);
        TL_OK(!strcmp(s->residues, res) && s->n_res == na && na == ni && same_ints(s->aatype, aatype, na) &&
                  same_ints(s->residue_index, ri, ni),
              "%s record %d: %lld residues, aatype and residue_index as make_sequence_features", name, k,
              (long long)s->n_res);
        free(desc), free(res), free(aatype), free(ri);
    }
    /* the same from a file */
    fold_fasta g;
    const char *path = write_tmp(dir, "in.fasta", text, len);
    st = fold_fasta_read(path, &g, &err);
    TL_OK(st == COL_OK && g.n == f.n && g.n > 0 && !strcmp(g.seqs[g.n - 1].residues, f.seqs[f.n - 1].residues),
          "%s: read from a file, the same records %s", name, st ? err.msg : "");
    fold_fasta_free(&g);
    fold_fasta_free(&f);
    free(text);
    col_ckpt_close(c);
}

static void check_a3m(const char *name, const char *dir)
{
    col_ckpt *c = open_case(name);
    size_t len;
    char *text = text_of(c, "in/a3m", &len);
    char *query = text_of(c, "in/sequence", NULL);
    const col_ckpt_tensor *tm = need(c, "out/msa");
    int64_t S = tm->shape[0], N = tm->shape[1], n;
    int32_t *msa = ints_of(c, "out/msa", &n);
    int32_t *dels = ints_of(c, "out/deletions", &n);
    int64_t rows = 0; /* the '>' lines: every row of the text, repeats included */
    for (size_t i = 0; i < len; i++) rows += text[i] == '>' && (i == 0 || text[i - 1] == '\n');
    for (int q = 0; q < 3; q++) {
        fold_msa m;
        col_err err = {0};
        col_status st = q == 2 ? fold_a3m_read(write_tmp(dir, "in.a3m", text, len), query, &m, &err)
                               : fold_a3m_parse(text, len, q ? query : NULL, &m, &err);
        const char *how = q == 0 ? "without the query" : q == 1 ? "with the query" : "from a file";
        TL_OK(st == COL_OK && m.n_seq == S && m.n_res == N && same_ints(m.msa, msa, S * N) &&
                  same_ints(m.deletions, dels, S * N),
              "%s (%s): %lld x %lld ids and deletions as parse_a3m + make_msa_features + correct_msa_restypes %s", name,
              how, (long long)m.n_seq, (long long)m.n_res, st ? err.msg : "");
        TL_OK(st != COL_OK || m.n_duplicates == rows - S, "%s (%s): %lld repeated rows dropped of %lld", name, how,
              (long long)m.n_duplicates, (long long)rows);
        fold_msa_free(&m);
    }
    free(text), free(query), free(msa), free(dels);
    col_ckpt_close(c);
}

/* ---------------------------------------------------------------- (b) features */

static void check_features(const char *name)
{
    col_ckpt *c = open_case(name);
    char *seqtext = text_of(c, "in/sequence", NULL);
    fold_sequence seq;
    fold_msa msa = {0};
    col_err err = {0};
    bool have_msa = col_ckpt_find(c, "in/a3m") != NULL;
    col_status st = fold_sequence_make("query", seqtext, &seq, &err);
    if (st == COL_OK && have_msa) {
        size_t len;
        char *a3m = text_of(c, "in/a3m", &len);
        st = fold_a3m_parse(a3m, len, seq.residues, &msa, &err);
        free(a3m);
    }
    fold_feature_config cfg;
    fold_feature_config_default(&cfg);
    cfg.max_msa_clusters = int_of(c, "in/max_msa_clusters");
    cfg.max_extra_msa = int_of(c, "in/max_extra_msa");
    fold_features f = {0};
    if (st == COL_OK) st = fold_features_make(&seq, have_msa ? &msa : NULL, &cfg, &f, &err);
    int64_t Sc = int_of(c, "out/n_clust"), Se = int_of(c, "out/n_extra"), N = seq.n_res, n;
    TL_OK(st == COL_OK && f.n_res == N && f.n_clust == Sc && f.n_extra == Se,
          "%s: features of %lld residues, %lld cluster rows, %lld extra rows (reference %lld, %lld) %s", name,
          (long long)f.n_res, (long long)f.n_clust, (long long)f.n_extra, (long long)Sc, (long long)Se,
          st ? err.msg : "");
    if (st == COL_OK && f.n_clust == Sc && f.n_extra == Se) {
        int32_t *aatype = ints_of(c, "out/aatype", &n);
        int32_t *ri = ints_of(c, "out/residue_index", &n);
        TL_OK(n == N && same_ints(f.aatype, aatype, N) && same_ints(f.residue_index, ri, N),
              "%s: aatype and residue_index", name);
        free(aatype), free(ri);
        double e_t = max_err(c, "out/target_feat", f.target_feat, N * FOLD_TARGET_FEAT);
        double e_m = max_err(c, "out/msa_feat", f.msa_feat, Sc * N * FOLD_MSA_FEAT);
        TL_OK(e_t >= 0 && e_t <= 1e-6, "%s: target_feat [%lld, 22], max |err| %.3g", name, (long long)N, e_t);
        TL_OK(e_m >= 0 && e_m <= 1e-6, "%s: msa_feat [%lld, %lld, 49], max |err| %.3g", name, (long long)Sc,
              (long long)N, e_m);
        if (Se) {
            int32_t *x = ints_of(c, "out/extra_msa", &n);
            TL_OK(n == Se * N && same_ints(f.extra_msa, x, Se * N), "%s: extra_msa [%lld, %lld] ids", name,
                  (long long)Se, (long long)N);
            free(x);
            double e_h = max_err(c, "out/extra_has_deletion", f.extra_has_deletion, Se * N);
            double e_v = max_err(c, "out/extra_deletion_value", f.extra_deletion_value, Se * N);
            TL_OK(e_h >= 0 && e_h <= 1e-6 && e_v >= 0 && e_v <= 1e-6,
                  "%s: extra_has_deletion, extra_deletion_value, max |err| %.3g, %.3g", name, e_h, e_v);
        } else {
            TL_OK(!col_ckpt_find(c, "out/extra_msa"), "%s: no extra row, as the reference", name);
        }
    }
    fold_features_free(&f);
    fold_msa_free(&msa);
    fold_sequence_free(&seq);
    free(seqtext);
    col_ckpt_close(c);
}

/* ---------------------------------------------------------------- (c) bad inputs */

static void want_fasta_error(const char *text, size_t len, const char *a, const char *b)
{
    fold_fasta f;
    col_err err = {0};
    col_status st = fold_fasta_parse(text, len, &f, &err);
    TL_OK(st == COL_EFORMAT && strstr(err.msg, a) && (!b || strstr(err.msg, b)) && f.n == 0 && !f.seqs,
          "FASTA error: %s", st ? err.msg : "(accepted)");
    if (st == COL_OK) fold_fasta_free(&f);
}

static void want_a3m_error(const char *text, size_t len, const char *query, const char *a, const char *b)
{
    fold_msa m;
    col_err err = {0};
    col_status st = fold_a3m_parse(text, len, query, &m, &err);
    TL_OK(st == COL_EFORMAT && strstr(err.msg, a) && (!b || strstr(err.msg, b)) && !m.msa && !m.n_seq,
          "a3m error: %s", st ? err.msg : "(accepted)");
    if (st == COL_OK) fold_msa_free(&m);
}

#define FASTA_ERR(s, a, b) want_fasta_error(s, sizeof(s) - 1, a, b)
#define A3M_ERR(s, q, a, b) want_a3m_error(s, sizeof(s) - 1, q, a, b)

static void bad_inputs(const char *dir)
{
    FASTA_ERR("", "has no record", "'>NAME'");
    FASTA_ERR("\n  \r\n\n", "has no record", NULL);
    FASTA_ERR("ACDE\n>x\nACD\n", "text on line 1 before its first record", NULL);
    FASTA_ERR(">x\n\n>y\nACD\n", "record 'x' (line 1) has no residues", NULL);
    FASTA_ERR(">y\nACD\n>x\n*\n", "record 'x' (line 3) has no residues", NULL);
    FASTA_ERR(">x desc\nACDB\n", "record 'x', residue 4 (line 2): 'B' is not", "ACDEFGHIKLMNPQRSTVWY and X");
    FASTA_ERR(">x\nAC\n>y\nAC DE\nFz\n", "record 'y', residue 6 (line 5): 'z' is not", NULL);
    const char *others = "JOU1.-?";
    for (const char *o = others; *o; o++) {
        char text[32], want[32];
        snprintf(text, sizeof text, ">p\nMK%cA\n", *o);
        snprintf(want, sizeof want, "residue 3 (line 2): '%c'", *o);
        want_fasta_error(text, strlen(text), want, "it reads the 20 standard amino acids");
    }
    FASTA_ERR(">x\nAC\001D\n", "residue 3 (line 2): byte 0x01", NULL);
    FASTA_ERR(">x\nAC\0D\n", "byte 0x00", NULL);
    FASTA_ERR(">x\nAC*D\n", "record 'x', line 2: 'D' after the '*'", NULL);
    FASTA_ERR(">x\nAC*\n*\n", "'*' after the '*'", NULL);
    FASTA_ERR(">\nACB\n", "record #1, residue 3", NULL);
    /* the length cap: 100000 residues read, one more refused */
    size_t big = FOLD_MAX_RESIDUES + 16;
    char *t = malloc(big + 8);
    memcpy(t, ">long\n", 6);
    memset(t + 6, 'A', FOLD_MAX_RESIDUES);
    fold_fasta f;
    col_err err = {0};
    col_status st = fold_fasta_parse(t, 6 + FOLD_MAX_RESIDUES, &f, &err);
    TL_OK(st == COL_OK && f.n == 1 && f.seqs[0].n_res == FOLD_MAX_RESIDUES, "a sequence of %d residues is read %s",
          FOLD_MAX_RESIDUES, st ? err.msg : "");
    if (st == COL_OK) fold_fasta_free(&f);
    t[6 + FOLD_MAX_RESIDUES] = 'A';
    want_fasta_error(t, 7 + FOLD_MAX_RESIDUES, "record 'long' has more than 100000 residues", NULL);
    memcpy(t, ">q\n", 3);
    want_a3m_error(t, 7 + FOLD_MAX_RESIDUES, NULL, "has more than 100000 residues", NULL);
    free(t);
    /* a long, unprintable name is cut and masked in messages */
    FASTA_ERR(">n\001me_0123456789012345678901234567890123456789012345678901234567890123456789\nB\n",
              "record 'n?me_0123456789012345678901234567890123456789012345678901234...', residue 1", NULL);
    /* a missing file */
    st = fold_fasta_read("/nonexistent/fold/in.fasta", &f, &err);
    TL_OK(st != COL_OK && strstr(err.msg, "/nonexistent/fold/in.fasta"), "missing FASTA file: %s", err.msg);
    /* a bad file's message starts with its path */
    const char *path = write_tmp(dir, "bad.fasta", ">x\nAC1\n", 7);
    st = fold_fasta_read(path, &f, &err);
    TL_OK(st == COL_EFORMAT && !strncmp(err.msg, path, strlen(path)) && strstr(err.msg, "'1'"), "bad FASTA file: %s",
          err.msg);
    fold_sequence s;
    st = fold_sequence_make("abc", "ACDU", &s, &err);
    TL_OK(st == COL_EFORMAT && strstr(err.msg, "sequence 'abc', residue 4: 'U' is not"), "sequence error: %s", err.msg);
    st = fold_sequence_make("abc", "", &s, &err);
    TL_OK(st == COL_EFORMAT && strstr(err.msg, "has no residues"), "sequence error: %s", err.msg);

    A3M_ERR("", NULL, "the MSA text has no row", NULL);
    A3M_ERR("#only a comment\n", NULL, "the MSA text has no row", NULL);
    A3M_ERR("ACD\n>q\nACD\n", NULL, "text on line 1 before its first row", NULL);
    A3M_ERR(">q\nACD\n>r\nAC\n", NULL, "MSA row 2 ('r', line 3) has 2 aligned columns", "the query has 3");
    A3M_ERR(">q\nACD\n>r x\nACdDE\n>s\nACD\n", NULL, "MSA row 2 ('r', line 3) has 4 aligned columns", NULL);
    A3M_ERR(">q\nACD\n>r\nACD\n>s\n\n", NULL, "MSA row 3 ('s', line 5) has 0 aligned columns", NULL);
    A3M_ERR(">q\nACD\n>r\n\nAC1\n", NULL, "MSA row 2 ('r'), line 5, column 3: '1' is not a residue letter", "'-' (a gap)");
    A3M_ERR(">q\nACD\n>r\nA.CD\n", NULL, "'.' is not", "A2M");
    A3M_ERR(">q\nACD*\n", NULL, "'*' is not", NULL);
    A3M_ERR(">q\nAC\0D\n", NULL, "byte 0x00", NULL);
    A3M_ERR(">q\nacd\n>r\nACD\n", NULL, "first row (the query, 'q', line 1) has no aligned residues", NULL);
    A3M_ERR(">q\nACE\n", "ACD", "is not the sequence: residue 3 is 'E' in the MSA and 'D' in the sequence", NULL);
    A3M_ERR(">q\nACDE\n", "ACD", "has 4 aligned residues, the sequence has 3", NULL);
    A3M_ERR(">q\nA-D\n", "ACD", "residue 2 is '-'", NULL);
    A3M_ERR(">q\nBCD\n", "DCD", "residue 1 is 'B' in the MSA and 'D'", NULL);
    /* what is accepted: lowercase query insertions, '#' lines anywhere, whitespace inside rows */
    fold_msa m;
    const char *ok_text = ">q\naCD\n#x\n>r\nC -\n";
    st = fold_a3m_parse(ok_text, strlen(ok_text), "CD", &m, &err);
    TL_OK(st == COL_OK && m.n_seq == 2 && m.deletions[0] == 1 && m.msa[2] == 4 && m.msa[3] == FOLD_AA_GAP,
          "a3m: query insertions, '#' lines and spaces accepted %s", st ? err.msg : "");
    if (st == COL_OK) fold_msa_free(&m);
    st = fold_a3m_read("/nonexistent/fold/in.a3m", NULL, &m, &err);
    TL_OK(st != COL_OK && strstr(err.msg, "/nonexistent/fold/in.a3m"), "missing a3m file: %s", err.msg);

    /* features: inputs that do not fit together */
    fold_sequence q;
    fold_features ft;
    fold_feature_config cfg;
    fold_feature_config_default(&cfg);
    fold_sequence_make("q", "ACD", &q, &err);
    st = fold_a3m_parse(">q\nACDE\n>r\nAC-E\n", 16, NULL, &m, &err);
    st = st ? st : fold_features_make(&q, &m, &cfg, &ft, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "the alignment has 4 columns, the sequence 3 residues") && !ft.msa_feat,
          "features error: %s", err.msg);
    fold_msa_free(&m);
    st = fold_a3m_parse(">q\nACE\n>r\nAC-\n", 14, NULL, &m, &err);
    st = st ? st : fold_features_make(&q, &m, &cfg, &ft, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "first row is not the sequence (residue 3 differs)"), "features error: %s",
          err.msg);
    m.msa[0] = 0, m.msa[2] = 3, m.msa[4] = 22;
    st = fold_features_make(&q, &m, &cfg, &ft, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "row 2, column 2 holds id 22"), "features error: %s", err.msg);
    fold_msa_free(&m);
    cfg.max_msa_clusters = 0;
    st = fold_features_make(&q, NULL, &cfg, &ft, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "cluster count must be at least 1"), "features error: %s", err.msg);
    cfg.max_msa_clusters = 1, cfg.max_extra_msa = -1;
    st = fold_features_make(&q, NULL, &cfg, &ft, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "extra MSA row count at least 0"), "features error: %s", err.msg);
    fold_sequence_free(&q);
}

/* The single-sequence features from fold_msa_single equal those made with no MSA. */
static void single_sequence(void)
{
    fold_sequence q;
    col_err err = {0};
    fold_sequence_make("q", "MKTAYXAK", &q, &err);
    fold_msa m;
    fold_msa_single(&q, &m, &err);
    fold_feature_config cfg;
    fold_feature_config_default(&cfg);
    TL_OK(cfg.max_msa_clusters == 512 && cfg.max_extra_msa == 5120, "the default sizes are model_3's (512, 5120)");
    fold_features a, b;
    col_status s1 = fold_features_make(&q, NULL, &cfg, &a, &err);
    col_status s2 = fold_features_make(&q, &m, &cfg, &b, &err);
    TL_OK(s1 == COL_OK && s2 == COL_OK && a.n_clust == 1 && a.n_extra == 0 && b.n_clust == 1 &&
              !memcmp(a.msa_feat, b.msa_feat, sizeof(float) * 8 * FOLD_MSA_FEAT),
          "no MSA = fold_msa_single's one row");
    fold_features_free(&a);
    fold_features_free(&b);
    fold_msa_free(&m);
    fold_sequence_free(&q);
}

int main(void)
{
    char dir[] = "/tmp/test_fold_input_XXXXXX";
    tl_mkdtemp(dir);
    check_fasta("fasta_multi", dir);
    check_fasta("fasta_single", dir);
    check_fasta("fasta_noname", dir);
    check_a3m("a3m_basic", dir);
    check_a3m("a3m_colabfold", dir);
    check_a3m("a3m_query_only", dir);
    check_features("feat_single");
    check_features("feat_small");
    check_features("feat_big");
    check_features("feat_noextra");
    check_features("feat_ties");
    single_sequence();
    bad_inputs(dir);
    TL_OK(tl_remove_tree(dir), "temporary directory removed");
    return tl_done();
}
