/* fold_pdb.c - PDB and mmCIF text of a predicted structure, as AlphaFold's protein.to_pdb / to_mmcif. */
#include "fold_pdb.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* residue_constants.atom_types and resnames (restypes' three-letter names, then UNK) */
static const char *const ATOM37[37] = {
    "N",   "CA",  "C",   "CB",  "O",   "CG",  "CG1", "CG2", "OG",  "OG1", "SG",  "CD",  "CD1",
    "CD2", "ND1", "ND2", "OD1", "OD2", "SD",  "CE",  "CE1", "CE2", "CE3", "NE",  "NE1", "NE2",
    "OE1", "OE2", "CH2", "NH1", "NH2", "OH",  "CZ",  "CZ2", "CZ3", "NZ",  "OXT"};
static const char *const RESNAME[21] = {"ALA", "ARG", "ASN", "ASP", "CYS", "GLN", "GLU", "GLY", "HIS", "ILE", "LEU",
                                        "LYS", "MET", "PHE", "PRO", "SER", "THR", "TRP", "TYR", "VAL", "UNK"};
/* protein.PDB_CHAIN_IDS */
static const char PDB_CHAINS[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
#define N_CHAINS 62
#define RES_MIN (-999)
#define RES_MAX 9999

static int chain_of(const fold_protein *p, int64_t i) { return p->chain_index ? p->chain_index[i] : 0; }
static bool present(const fold_protein *p, int64_t i, int a) { return !(p->atom_mask[i * 37 + a] < 0.5f); }

static col_status check_protein(const fold_protein *p, const char *what, col_err *err)
{
    if (!p || !p->aatype || !p->residue_index || !p->atom_positions || !p->atom_mask)
        return col_err_set(err, COL_EINVAL, "%s: the structure lacks residue types, numbers, positions or masks", what);
    if (p->n_res < 1 || p->n_res > (int64_t)1 << 20)
        return col_err_set(err, COL_EINVAL, "%s: %lld residues (1 to %d)", what, (long long)p->n_res, 1 << 20);
    bool any = false;
    for (int64_t i = 0; i < p->n_res; i++) {
        if (p->aatype[i] < 0 || p->aatype[i] > 20)
            return col_err_set(err, COL_EINVAL, "%s: residue %lld has type %d (0 to 20)", what, (long long)i + 1,
                               (int)p->aatype[i]);
        if (p->residue_index[i] < RES_MIN || p->residue_index[i] > RES_MAX)
            return col_err_set(err, COL_EINVAL, "%s: residue %lld is numbered %d (%d to %d)", what, (long long)i + 1,
                               (int)p->residue_index[i], RES_MIN, RES_MAX);
        if (chain_of(p, i) < 0 || chain_of(p, i) >= N_CHAINS)
            return col_err_set(err, COL_EINVAL, "%s: residue %lld is in chain %d (0 to %d)", what, (long long)i + 1,
                               chain_of(p, i), N_CHAINS - 1);
        for (int a = 0; a < 37 && !any; a++) any = present(p, i, a);
    }
    if (!any) return col_err_set(err, COL_EINVAL, "%s: the structure has no atoms (every mask is below 0.5)", what);
    return COL_OK;
}

/* Python's format(v, f'>{width}.{prec}f'): as printf, but NaN is "nan" whatever its sign bit */
static void fmt_fixed(char *buf, size_t n, int width, int prec, double v)
{
    if (isnan(v))
        snprintf(buf, n, "%*s", width, "nan");
    else
        snprintf(buf, n, "%*.*f", width, prec, v);
}

static void put_printf(col_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_printf(col_strbuf *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (k < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)k < sizeof line) {
        col_strbuf_put(b, line, (size_t)k);
        return;
    }
    char *big = malloc((size_t)k + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    col_strbuf_put(b, big, (size_t)k);
    free(big);
}

static void put_spaces(col_strbuf *b, size_t n)
{
    static const char sp[] = "                                                                                ";
    while (n > 0) {
        size_t k = n < sizeof sp - 1 ? n : sizeof sp - 1;
        col_strbuf_put(b, sp, k);
        n -= k;
    }
}

/* a PDB line, padded with spaces to 80 columns, and its newline */
static void pdb_line_end(col_strbuf *b, size_t start)
{
    size_t len = b->oom ? 80 : b->len - start;
    if (len < 80) put_spaces(b, 80 - len);
    col_strbuf_put(b, "\n", 1);
}

static void pdb_ter(col_strbuf *b, long long serial, const fold_protein *p, int64_t i)
{
    size_t start = b->len;
    put_printf(b, "TER   %5lld      %3s %c%4d", serial, RESNAME[p->aatype[i]], PDB_CHAINS[chain_of(p, i)],
               (int)p->residue_index[i]);
    pdb_line_end(b, start);
}

col_status fold_pdb_write(const fold_protein *p, col_strbuf *out, col_err *err)
{
    col_status st = check_protein(p, "PDB", err);
    if (st != COL_OK) return st;
    size_t start = out->len;
    col_strbuf_puts(out, "MODEL     1");
    pdb_line_end(out, start);
    long long serial = 1;
    int last = chain_of(p, 0);
    for (int64_t i = 0; i < p->n_res; i++) {
        if (chain_of(p, i) != last) {   /* close the previous chain: the TER record takes a serial */
            pdb_ter(out, serial++, p, i - 1);
            last = chain_of(p, i);
        }
        for (int a = 0; a < 37; a++) {
            if (!present(p, i, a)) continue;
            const float *x = p->atom_positions + (i * 37 + a) * 3;
            char name[8], cx[64], cy[64], cz[64], bf[64];
            snprintf(name, sizeof name, strlen(ATOM37[a]) == 4 ? "%s" : " %s", ATOM37[a]);
            fmt_fixed(cx, sizeof cx, 8, 3, x[0]);
            fmt_fixed(cy, sizeof cy, 8, 3, x[1]);
            fmt_fixed(cz, sizeof cz, 8, 3, x[2]);
            fmt_fixed(bf, sizeof bf, 6, 2, p->plddt ? p->plddt[i] : 0.0);
            start = out->len;
            put_printf(out, "ATOM  %5lld %-4s %3s %c%4d    %s%s%s%6.2f%s          %2c  ", serial, name,
                       RESNAME[p->aatype[i]], PDB_CHAINS[last], (int)p->residue_index[i], cx, cy, cz, 1.0, bf,
                       ATOM37[a][0]);
            pdb_line_end(out, start);
            serial++;
        }
    }
    pdb_ter(out, serial, p, p->n_res - 1);
    start = out->len;
    col_strbuf_puts(out, "ENDMDL");
    pdb_line_end(out, start);
    start = out->len;
    col_strbuf_puts(out, "END");
    pdb_line_end(out, start);
    return out->oom ? col_err_set(err, COL_ENOMEM, "PDB: out of memory") : COL_OK;
}

/* ---- mmCIF: Biopython's MMCIFIO._save_dict, category by category ---- */

/* the values of one category, row-major, NUL-terminated strings in one pool */
typedef struct {
    col_strbuf pool;
    size_t *off;
    size_t n, cap;
    bool oom;
} cif_vals;

static void cv_add(cif_vals *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cv_add(cif_vals *v, const char *fmt, ...)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        size_t *o = realloc(v->off, cap * sizeof *o);
        if (!o) {
            v->oom = true;
            return;
        }
        v->off = o;
        v->cap = cap;
    }
    char s[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof s) {   /* values are short: numbers, names (file ids <= 64) */
        v->oom = true;
        return;
    }
    v->off[v->n++] = v->pool.len;
    col_strbuf_put(&v->pool, s, (size_t)k);
    col_strbuf_put(&v->pool, "", 1);
}

static void cv_reset(cif_vals *v)
{
    v->n = 0;
    v->pool.len = 0;
}

static bool cif_newline(const char *v) { return strchr(v, '\n') || (strstr(v, "' ") && strstr(v, "\" ")); }

static bool cif_quote(const char *v)
{
    return strchr(v, ' ') || strchr(v, '\'') || strchr(v, '"') || (v[0] && strchr("_#$[];", v[0])) ||
           !strncmp(v, "data_", 5) || !strncmp(v, "save_", 5) || !strcmp(v, "loop_") || !strcmp(v, "stop_") ||
           !strcmp(v, "global_");
}

/* MMCIFIO._format_mmcif_col */
static void cif_col(col_strbuf *b, const char *v, size_t width)
{
    size_t len = strlen(v);
    if (cif_newline(v)) {
        col_strbuf_puts(b, "\n;");
        col_strbuf_puts(b, v);
        col_strbuf_puts(b, "\n;\n");
        return;
    }
    if (cif_quote(v)) {
        const char *q = strstr(v, "' ") ? "\"" : "'";
        col_strbuf_puts(b, q);
        col_strbuf_puts(b, v);
        col_strbuf_puts(b, q);
        len += 2;
    } else {
        col_strbuf_puts(b, v);
    }
    if (len < width) put_spaces(b, width - len);
}

/* one category: key-value lines for one row, else a loop_ with its columns padded to their widest value */
static void cif_category(col_strbuf *b, const char *cat, const char *const *items, int nitems, size_t nrows,
                         const char *const *vals)
{
    size_t clen = strlen(cat);
    if (nrows == 1) {
        size_t m = 0;
        for (int c = 0; c < nitems; c++)
            if (strlen(items[c]) > m) m = strlen(items[c]);
        for (int c = 0; c < nitems; c++) {
            col_strbuf_puts(b, cat);
            col_strbuf_puts(b, ".");
            col_strbuf_puts(b, items[c]);
            put_spaces(b, clen + m + 4 - (clen + 1 + strlen(items[c])));
            cif_col(b, vals[c], strlen(vals[c]));
            col_strbuf_puts(b, "\n");
        }
    } else {
        col_strbuf_puts(b, "loop_\n");
        size_t width[32] = {0};
        for (int c = 0; c < nitems; c++) {
            col_strbuf_puts(b, cat);
            col_strbuf_puts(b, ".");
            col_strbuf_puts(b, items[c]);
            col_strbuf_puts(b, "\n");
            for (size_t r = 0; r < nrows; r++) {
                const char *v = vals[r * (size_t)nitems + (size_t)c];
                size_t len = strlen(v) + (cif_quote(v) && !cif_newline(v) ? 2 : 0);
                if (len > width[c]) width[c] = len;
            }
        }
        for (size_t r = 0; r < nrows; r++) {
            for (int c = 0; c < nitems; c++) cif_col(b, vals[r * (size_t)nitems + (size_t)c], width[c] + 1);
            col_strbuf_puts(b, "\n");
        }
    }
    col_strbuf_puts(b, "#\n");
}

/* a category whose values were gathered in v (then cleared) */
static void cif_emit(col_strbuf *b, cif_vals *v, const char *cat, const char *const *items, int nitems)
{
    if (v->oom || v->pool.oom) {
        b->oom = true;
        cv_reset(v);
        return;
    }
    const char **ptr = malloc((v->n ? v->n : 1) * sizeof *ptr);
    if (!ptr) {
        b->oom = true;
        cv_reset(v);
        return;
    }
    for (size_t k = 0; k < v->n; k++) ptr[k] = v->pool.p + v->off[k];
    cif_category(b, cat, items, nitems, v->n / (size_t)nitems, ptr);
    free(ptr);
    cv_reset(v);
}

#define ITEMS(...) (const char *const[]){__VA_ARGS__}, (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *))
/* _int_id_to_str_id(chain + 1): A .. Z, then AA, BA, ... (mmCIF chain names) */
static void chain_label(int chain, char out[8])
{
    int num = chain, k = 0;
    while (num >= 0 && k < 7) {
        out[k++] = (char)('A' + num % 26);
        num = num / 26 - 1;
    }
    out[k] = '\0';
}

/* numpy's pairwise summation (np.mean of the B-factors as AlphaFold takes it) */
static double pairwise_sum(const double *a, size_t n)
{
    if (n < 8) {
        double r = 0.;
        for (size_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        size_t i;
        for (i = 8; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

static const char *const AUTHORS[] = {
    "Jumper, John", "Evans, Richard", "Pritzel, Alexander", "Green, Tim", "Figurnov, Michael", "Ronneberger, Olaf",
    "Tunyasuvunakool, Kathryn", "Bates, Russ", "Zidek, Augustin", "Potapenko, Anna", "Bridgland, Alex",
    "Meyer, Clemens", "Kohl, Simon A. A.", "Ballard, Andrew J.", "Cowie, Andrew", "Romera-Paredes, Bernardino",
    "Nikolov, Stanislav", "Jain, Rishub", "Adler, Jonas", "Back, Trevor", "Petersen, Stig", "Reiman, David",
    "Clancy, Ellen", "Zielinski, Michal", "Steinegger, Martin", "Pacholska, Michalina", "Berghammer, Tamas",
    "Silver, David", "Vinyals, Oriol", "Senior, Andrew W.", "Kavukcuoglu, Koray", "Kohli, Pushmeet",
    "Hassabis, Demis"};
#define N_AUTHORS ((int)(sizeof AUTHORS / sizeof AUTHORS[0]))

static const char DISCLAIMER[] =
    "ALPHAFOLD DATA, COPYRIGHT (2021) DEEPMIND TECHNOLOGIES LIMITED.\n"
    "THE INFORMATION PROVIDED IS THEORETICAL MODELLING ONLY AND CAUTION SHOULD BE\n"
    "EXERCISED IN ITS USE. IT IS PROVIDED \"AS-IS\" WITHOUT ANY WARRANTY OF ANY KIND,\n"
    "WHETHER EXPRESSED OR IMPLIED. NO WARRANTY IS GIVEN THAT USE OF THE INFORMATION\n"
    "SHALL NOT INFRINGE THE RIGHTS OF ANY THIRD PARTY. DISCLAIMER: THE INFORMATION IS\n"
    "NOT INTENDED TO BE A SUBSTITUTE FOR PROFESSIONAL MEDICAL ADVICE, DIAGNOSIS, OR\n"
    "TREATMENT, AND DOES NOT CONSTITUTE MEDICAL OR OTHER PROFESSIONAL ADVICE. IT IS\n"
    "AVAILABLE FOR ACADEMIC AND COMMERCIAL PURPOSES, UNDER CC-BY 4.0 LICENCE.";

static const char *const CHEM_COMP[] = {
    "ALA", "L-peptide linking", "ALANINE",       "ARG", "L-peptide linking", "ARGININE",
    "ASN", "L-peptide linking", "ASPARAGINE",    "ASP", "L-peptide linking", "ASPARTIC ACID",
    "CYS", "L-peptide linking", "CYSTEINE",      "GLN", "L-peptide linking", "GLUTAMINE",
    "GLU", "L-peptide linking", "GLUTAMIC ACID", "HIS", "L-peptide linking", "HISTIDINE",
    "ILE", "L-peptide linking", "ISOLEUCINE",    "LEU", "L-peptide linking", "LEUCINE",
    "LYS", "L-peptide linking", "LYSINE",        "MET", "L-peptide linking", "METHIONINE",
    "PHE", "L-peptide linking", "PHENYLALANINE", "PRO", "L-peptide linking", "PROLINE",
    "SER", "L-peptide linking", "SERINE",        "THR", "L-peptide linking", "THREONINE",
    "TRP", "L-peptide linking", "TRYPTOPHAN",    "TYR", "L-peptide linking", "TYROSINE",
    "VAL", "L-peptide linking", "VALINE",        "GLY", "peptide linking",   "GLYCINE"};

/* _entity_poly_seq: per chain in order of first appearance, numbers min(1, first) .. last, gaps UNK
 * (protein._get_entity_poly_seq, whose order of present residues is the file's) */
static bool cif_poly_seq(const fold_protein *p, cif_vals *v)
{
    bool seen[N_CHAINS] = {false};
    bool *has = malloc(RES_MAX - RES_MIN + 1);
    if (!has) return false;
    for (int64_t first = 0; first < p->n_res; first++) {
        int c = chain_of(p, first);
        if (seen[c]) continue;
        seen[c] = true;
        memset(has, 0, RES_MAX - RES_MIN + 1);
        int lo = p->residue_index[first], hi = lo;
        for (int64_t i = first; i < p->n_res; i++) {
            if (chain_of(p, i) != c) continue;
            int r = p->residue_index[i];
            has[r - RES_MIN] = true;
            if (r < lo) lo = r;
            if (r > hi) hi = r;
        }
        int64_t next = first;   /* the next present residue of the chain, in file order */
        for (int r = lo < 1 ? lo : 1; r <= hi; r++) {
            int aa = 20;
            if (has[r - RES_MIN]) {
                while (next < p->n_res && chain_of(p, next) != c) next++;
                aa = next < p->n_res ? p->aatype[next] : 20;
                next++;
            }
            cv_add(v, "%d", c);
            cv_add(v, "%d", r);
            cv_add(v, "%s", RESNAME[aa]);
        }
    }
    free(has);
    return true;
}

col_status fold_mmcif_write(const fold_protein *p, const char *file_id, bool multimer, col_strbuf *b, col_err *err)
{
    col_status st = check_protein(p, "mmCIF", err);
    if (st != COL_OK) return st;
    char id[65];
    size_t idlen = file_id ? strlen(file_id) : 0;
    if (idlen < 1 || idlen > 64)
        return col_err_set(err, COL_EINVAL, "mmCIF: the file id has %zu characters (1 to 64)", idlen);
    for (size_t k = 0; k <= idlen; k++) {
        unsigned char ch = (unsigned char)file_id[k];
        if (k < idlen && (ch <= ' ' || ch >= 127))
            return col_err_set(err, COL_EINVAL, "mmCIF: the file id has a space or a character that is not printable ASCII");
        id[k] = (char)(ch >= 'a' && ch <= 'z' ? ch - 'a' + 'A' : ch);
    }
    bool chains[N_CHAINS] = {false};
    for (int64_t i = 0; i < p->n_res; i++) chains[chain_of(p, i)] = true;
    cif_vals v = {0};
    char lab[8];

    col_strbuf_puts(b, "data_");
    col_strbuf_puts(b, id);
    col_strbuf_puts(b, "\n#\n");
    cv_add(&v, "%s", id);
    cif_emit(b, &v, "_entry", ITEMS("id"));
    for (int c = 0; c < N_CHAINS; c++)
        if (chains[c]) chain_label(c, lab), cv_add(&v, "%s", lab), cv_add(&v, "%d", c);
    cif_emit(b, &v, "_struct_asym", ITEMS("id", "entity_id"));
    for (int c = 0; c < N_CHAINS; c++)
        if (chains[c]) chain_label(c, lab), cv_add(&v, "%d", c), cv_add(&v, "polypeptide(L)"), cv_add(&v, "%s", lab);
    cif_emit(b, &v, "_entity_poly", ITEMS("entity_id", "type", "pdbx_strand_id"));
    for (int c = 0; c < N_CHAINS; c++)
        if (chains[c]) cv_add(&v, "%d", c), cv_add(&v, "polymer");
    cif_emit(b, &v, "_entity", ITEMS("id", "type"));
    if (!cif_poly_seq(p, &v)) v.oom = true;
    cif_emit(b, &v, "_entity_poly_seq", ITEMS("entity_id", "num", "mon_id"));
    cif_category(b, "_chem_comp", ITEMS("id", "type", "name"), 20, CHEM_COMP);

    /* _atom_site, and the B-factors as written for the global pLDDT */
    size_t n_atoms = 0;
    for (int64_t i = 0; i < p->n_res; i++)
        for (int a = 0; a < 37; a++) n_atoms += present(p, i, a);
    double *bs = malloc(n_atoms * sizeof *bs);
    if (!bs) {
        free(v.off);
        free(v.pool.p);
        return col_err_set(err, COL_ENOMEM, "mmCIF: out of memory");
    }
    bool types[128] = {false};
    size_t serial = 0;
    for (int64_t i = 0; i < p->n_res; i++) {
        int c = chain_of(p, i);
        chain_label(c, lab);
        for (int a = 0; a < 37; a++) {
            if (!present(p, i, a)) continue;
            const float *x = p->atom_positions + (i * 37 + a) * 3;
            char cx[64], cy[64], cz[64], bf[64];
            fmt_fixed(cx, sizeof cx, 0, 3, x[0]);
            fmt_fixed(cy, sizeof cy, 0, 3, x[1]);
            fmt_fixed(cz, sizeof cz, 0, 3, x[2]);
            fmt_fixed(bf, sizeof bf, 0, 2, p->plddt ? p->plddt[i] : 0.0);
            bs[serial++] = strtod(bf, NULL);
            types[(unsigned char)ATOM37[a][0]] = true;
            cv_add(&v, "ATOM");
            cv_add(&v, "%zu", serial);
            cv_add(&v, "%c", ATOM37[a][0]);
            cv_add(&v, "%s", ATOM37[a]);
            cv_add(&v, ".");
            cv_add(&v, "%s", RESNAME[p->aatype[i]]);
            cv_add(&v, "%s", lab);
            cv_add(&v, "%d", c);
            cv_add(&v, "%d", (int)p->residue_index[i]);
            cv_add(&v, ".");
            cv_add(&v, "%s", cx);
            cv_add(&v, "%s", cy);
            cv_add(&v, "%s", cz);
            cv_add(&v, "1.00");
            cv_add(&v, "%s", bf);
            cv_add(&v, "%d", (int)p->residue_index[i]);
            cv_add(&v, "%s", lab);
            cv_add(&v, "1");
        }
    }
    cif_emit(b, &v, "_atom_site",
             ITEMS("group_PDB", "id", "type_symbol", "label_atom_id", "label_alt_id", "label_comp_id", "label_asym_id",
                   "label_entity_id", "label_seq_id", "pdbx_PDB_ins_code", "Cartn_x", "Cartn_y", "Cartn_z", "occupancy",
                   "B_iso_or_equiv", "auth_seq_id", "auth_asym_id", "pdbx_PDB_model_num"));
    char global[64];
    fmt_fixed(global, sizeof global, 0, 2, pairwise_sum(bs, n_atoms) / (double)n_atoms);
    free(bs);

    /* mmcif_metadata.add_metadata_to_mmcif */
    cif_category(b, "_audit_conform", ITEMS("dict_name", "dict_version", "dict_location"), 1,
                 (const char *const[]){"mmcif_ma.dic", "1.3.9",
                                       "https://raw.githubusercontent.com/ihmwg/ModelCIF/master/dist/mmcif_ma.dic"});
    cif_category(b, "_pdbx_data_usage", ITEMS("id", "type", "details", "url", "name"), 2,
                 (const char *const[]){"1", "license", "Data in this file is available under a CC-BY-4.0 license.",
                                       "https://creativecommons.org/licenses/by/4.0/", "CC-BY-4.0", "2", "disclaimer",
                                       DISCLAIMER, "?", "?"});
    for (int k = 0; k < N_AUTHORS; k++) cv_add(&v, "%s", AUTHORS[k]), cv_add(&v, "%d", k + 1);
    cif_emit(b, &v, "_audit_author", ITEMS("name", "pdbx_ordinal"));
    for (int k = 0; k < N_AUTHORS; k++) cv_add(&v, "primary"), cv_add(&v, "%s", AUTHORS[k]), cv_add(&v, "%d", k + 1);
    cif_emit(b, &v, "_citation_author", ITEMS("citation_id", "name", "ordinal"));
    cif_category(b, "_citation",
                 ITEMS("id", "title", "journal_full", "journal_volume", "page_first", "page_last", "year",
                       "journal_id_ASTM", "country", "journal_id_ISSN", "journal_id_CSD", "book_publisher",
                       "pdbx_database_id_PubMed", "pdbx_database_id_DOI"),
                 1,
                 (const char *const[]){"primary", "Highly accurate protein structure prediction with AlphaFold",
                                       "Nature", "596", "583", "589", "2021", "NATUAS", "UK", "0028-0836", "0006", "?",
                                       "34265844", "10.1038/s41586-021-03819-2"});
    cif_category(b, "_ma_data", ITEMS("id", "name", "content_type"), 1,
                 (const char *const[]){"1", "Model", "model coordinates"});
    for (int c = 0; c < N_CHAINS; c++)
        if (chains[c]) chain_label(c, lab), cv_add(&v, "%s", lab), cv_add(&v, "%d", c), cv_add(&v, ".");
    cif_emit(b, &v, "_ma_target_entity_instance", ITEMS("asym_id", "entity_id", "details"));
    for (int c = 0; c < N_CHAINS; c++)
        if (chains[c]) cv_add(&v, "%d", c), cv_add(&v, "1"), cv_add(&v, ".");
    cif_emit(b, &v, "_ma_target_entity", ITEMS("entity_id", "data_id", "origin"));
    cif_category(b, "_ma_model_list",
                 ITEMS("ordinal_id", "model_id", "model_group_id", "model_name", "model_group_name", "data_id",
                       "model_type"),
                 1,
                 (const char *const[]){"1", "1", "1", "Top ranked model",
                                       multimer ? "AlphaFold Multimer v2.3.2 model" : "AlphaFold Monomer v2.3.2 model",
                                       "1", "Ab initio model"});
    cif_category(b, "_software",
                 ITEMS("pdbx_ordinal", "name", "version", "type", "description", "classification", "date"), 1,
                 (const char *const[]){"1", "AlphaFold", "v2.3.2", "package", "Structure prediction", "other", "?"});
    cif_category(b, "_ma_software_group", ITEMS("ordinal_id", "group_id", "software_id"), 1,
                 (const char *const[]){"1", "1", "1"});
    cif_category(b, "_ma_protocol_step", ITEMS("ordinal_id", "protocol_id", "step_id", "method_type"), 3,
                 (const char *const[]){"1", "1", "1", "coevolution MSA", "2", "1", "2", "template search", "3", "1",
                                       "3", "modeling"});
    cif_category(b, "_ma_qa_metric", ITEMS("id", "name", "type", "mode", "software_group_id"), 2,
                 (const char *const[]){"1", "pLDDT", "pLDDT", "global", "1", "2", "pLDDT", "pLDDT", "local", "1"});
    cif_category(b, "_ma_qa_metric_global", ITEMS("ordinal_id", "model_id", "metric_id", "metric_value"), 1,
                 (const char *const[]){"1", "1", "1", global});
    for (const char *t = "CNOS"; *t; t++)   /* sorted(set(type symbols)) */
        if (types[(unsigned char)*t]) cv_add(&v, "%c", *t);
    cif_emit(b, &v, "_atom_type", ITEMS("symbol"));

    free(v.off);
    free(v.pool.p);
    return b->oom ? col_err_set(err, COL_ENOMEM, "mmCIF: out of memory") : COL_OK;
}
