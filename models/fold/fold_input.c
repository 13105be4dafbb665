/* fold_input.c - FASTA sequences and a3m alignments for AlphaFold2.
 *
 * The a3m reader follows alphafold.data.parsers.parse_a3m (parse_fasta,
 * _a3m_deletions), then pipeline.make_msa_features (the repeated-row filter
 * of DeepMind's AlphaFold 2.3; HHBLITS_AA_TO_ID) and
 * data_transforms.correct_msa_restypes (MAP_HHBLITS_AATYPE_TO_OUR_AATYPE). */
#include "fold_input.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "textio.h"

#define FASTA_MAX_BYTES ((size_t)256 << 20)
#define A3M_MAX_BYTES ((size_t)2 << 30)

static const char RESTYPES[] = "ARNDCQEGHILKMFPSTWYV";

int fold_aatype_of(char c)
{
    if (c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
    if (c == 'X') return FOLD_AA_UNKNOWN;
    const char *p = c ? strchr(RESTYPES, c) : NULL;
    return p ? (int)(p - RESTYPES) : -1;
}

/* residue_constants.HHBLITS_AA_TO_ID composed with MAP_HHBLITS_AATYPE_TO_OUR_AATYPE:
 * an a3m column letter (uppercase or '-') to its restype id; -1 for anything else. */
static int a3m_id_of(char c)
{
    switch (c) {
    case 'B': return 3;                 /* HHblits 2 = D */
    case 'Z': return 6;                 /* HHblits 3 = E */
    case 'U': return 4;                 /* HHblits 1 = C */
    case 'J': case 'O': case 'X': return FOLD_AA_UNKNOWN;
    case '-': return FOLD_AA_GAP;
    default: return (c >= 'A' && c <= 'Z') ? fold_aatype_of(c) : -1;
    }
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }

/* Lines split at '\n' or '\r' (so "\r\n" and old Mac files both work), with
 * the surrounding whitespace removed; `start` is the untrimmed line (for columns). */
typedef struct {
    const char *p;
    size_t len, pos;
    int64_t line;
} line_reader;

static bool next_line(line_reader *r, const char **start, const char **s, size_t *n)
{
    if (r->pos >= r->len) return false;
    const char *b = r->p + r->pos;
    size_t L = 0, rest = r->len - r->pos;
    while (L < rest && b[L] != '\n' && b[L] != '\r') L++;
    r->pos += L + (L < rest ? 1 : 0);
    if (L < rest && b[L] == '\r' && L + 1 < rest && b[L + 1] == '\n') r->pos++; /* "\r\n" is one end */
    r->line++;
    *start = b;
    while (L && is_space(b[0])) b++, L--;
    while (L && is_space(b[L - 1])) L--;
    *s = b;
    *n = L;
    return true;
}

/* A character for a message: 'c' when printable, else its byte value. */
static const char *char_desc(char c, char buf[24])
{
    unsigned char u = (unsigned char)c;
    if (u > 0x20 && u < 0x7f) snprintf(buf, 24, "'%c'", c);
    else snprintf(buf, 24, "byte 0x%02x", u);
    return buf;
}

/* A record for a message: "'NAME'" (at most 60 characters, unprintable ones as '?') or "#K" without a name. */
static const char *rec_label(const char *name, size_t n, int64_t index, char buf[80])
{
    if (!n) {
        snprintf(buf, 80, "#%lld", (long long)index);
        return buf;
    }
    size_t k = 0;
    buf[k++] = '\'';
    for (size_t i = 0; i < n && i < 60; i++) {
        unsigned char u = (unsigned char)name[i];
        buf[k++] = (u >= 0x20 && u < 0x7f) ? (char)u : '?';
    }
    if (n > 60) buf[k++] = '.', buf[k++] = '.', buf[k++] = '.';
    buf[k++] = '\'';
    buf[k] = 0;
    return buf;
}

static size_t first_word(const char *s, size_t n)
{
    size_t k = 0;
    while (k < n && !is_space(s[k])) k++;
    return k;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* Grows *buf (elements of size el) to hold at least need; false on overflow or no memory. */
static bool grow(void **buf, size_t *cap, size_t need, size_t el)
{
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2 / el) return false;
        c *= 2;
    }
    void *p = realloc(*buf, c * el);
    if (!p) return false;
    *buf = p;
    *cap = c;
    return true;
}

/* ---------------------------------------------------------------- sequences */

void fold_sequence_free(fold_sequence *s)
{
    if (!s) return;
    free(s->name);
    free(s->description);
    free(s->residues);
    free(s->aatype);
    free(s->residue_index);
    memset(s, 0, sizeof *s);
}

/* Fills aatype and residue_index from s->residues (already checked). */
static col_status sequence_ids(fold_sequence *s, col_err *err)
{
    size_t n = (size_t)s->n_res;
    s->aatype = malloc((n ? n : 1) * sizeof(int32_t));
    s->residue_index = malloc((n ? n : 1) * sizeof(int32_t));
    if (!s->aatype || !s->residue_index) return col_err_set(err, COL_ENOMEM, "out of memory for a sequence of %zu residues", n);
    for (size_t i = 0; i < n; i++) {
        s->aatype[i] = fold_aatype_of(s->residues[i]);
        s->residue_index[i] = (int32_t)i;
    }
    return COL_OK;
}

#define ACCEPTED "the 20 standard amino acids ACDEFGHIKLMNPQRSTVWY and X for an unknown one"

col_status fold_sequence_make(const char *name, const char *residues, fold_sequence *out, col_err *err)
{
    if (!out) return col_err_set(err, COL_EINVAL, "fold_sequence_make: no output");
    memset(out, 0, sizeof *out);
    if (!residues) return col_err_set(err, COL_EINVAL, "fold_sequence_make: no residues");
    if (!name) name = "";
    char lb[80], cb[24];
    size_t n = strlen(residues);
    if (!n) return col_err_set(err, COL_EFORMAT, "sequence %s has no residues", rec_label(name, strlen(name), 1, lb));
    if (n > FOLD_MAX_RESIDUES)
        return col_err_set(err, COL_EFORMAT, "sequence %s has %zu residues, more than the %d this reads",
                           rec_label(name, strlen(name), 1, lb), n, FOLD_MAX_RESIDUES);
    for (size_t i = 0; i < n; i++)
        if (fold_aatype_of(residues[i]) < 0)
            return col_err_set(err, COL_EFORMAT, "sequence %s, residue %zu: %s is not a residue letter AlphaFold reads (it reads " ACCEPTED ")",
                               rec_label(name, strlen(name), 1, lb), i + 1, char_desc(residues[i], cb));
    out->name = dup_n(name, strlen(name));
    out->description = dup_n(name, strlen(name));
    out->residues = dup_n(residues, n);
    out->n_res = (int64_t)n;
    if (!out->name || !out->description || !out->residues) {
        fold_sequence_free(out);
        return col_err_set(err, COL_ENOMEM, "out of memory for a sequence of %zu residues", n);
    }
    for (size_t i = 0; i < n; i++)
        if (out->residues[i] >= 'a') out->residues[i] = (char)(out->residues[i] - 'a' + 'A');
    col_status st = sequence_ids(out, err);
    if (st != COL_OK) fold_sequence_free(out);
    return st;
}

void fold_fasta_free(fold_fasta *f)
{
    if (!f) return;
    for (int i = 0; i < f->n; i++) fold_sequence_free(&f->seqs[i]);
    free(f->seqs);
    f->seqs = NULL;
    f->n = 0;
}

col_status fold_fasta_parse(const char *text, size_t len, fold_fasta *out, col_err *err)
{
    if (!out) return col_err_set(err, COL_EINVAL, "fold_fasta_parse: no output");
    memset(out, 0, sizeof *out);
    if (!text && len) return col_err_set(err, COL_EINVAL, "fold_fasta_parse: no text");
    fold_fasta f = {0};
    size_t cap = 0, rcap = 0;
    bool star = false;
    char lb[80], cb[24];
    col_status st = COL_OK;
    line_reader r = {text, len, 0, 0};
    const char *start, *s;
    size_t n;
    fold_sequence *cur = NULL;
    int64_t hdr_line = 0;
    for (;;) {
        bool more = next_line(&r, &start, &s, &n);
        if (cur && (!more || (n && s[0] == '>'))) { /* the record ends */
            if (!cur->n_res) {
                st = col_err_set(err, COL_EFORMAT, "FASTA record %s (line %lld) has no residues",
                                 rec_label(cur->name, strlen(cur->name), f.n, lb), (long long)hdr_line);
                goto fail;
            }
            char *shrunk = realloc(cur->residues, (size_t)cur->n_res + 1);
            if (shrunk) cur->residues = shrunk;
            if ((st = sequence_ids(cur, err)) != COL_OK) goto fail;
            cur = NULL;
        }
        if (!more) break;
        if (!n) continue;
        if (s[0] == '>') {
            if (f.n == INT32_MAX) {
                st = col_err_set(err, COL_EFORMAT, "the FASTA text has more than %d records", INT32_MAX);
                goto fail;
            }
            if (!grow((void **)&f.seqs, &cap, (size_t)f.n + 1, sizeof *f.seqs)) goto oom;
            cur = &f.seqs[f.n++];
            memset(cur, 0, sizeof *cur);
            const char *d = s + 1;
            size_t dn = n - 1;
            while (dn && is_space(d[0])) d++, dn--;
            cur->description = dup_n(d, dn);
            cur->name = dup_n(d, first_word(d, dn));
            rcap = 64;
            cur->residues = malloc(rcap);
            if (!cur->description || !cur->name || !cur->residues) goto oom;
            cur->residues[0] = 0;
            hdr_line = r.line;
            star = false;
            continue;
        }
        if (!cur) {
            st = col_err_set(err, COL_EFORMAT, "the FASTA text has text on line %lld before its first record "
                             "(a record starts with a line '>NAME', then its residues)", (long long)r.line);
            goto fail;
        }
        for (size_t i = 0; i < n; i++) {
            char c = s[i];
            if (is_space(c)) continue;
            const char *label = rec_label(cur->name, strlen(cur->name), f.n, lb);
            if (star) {
                st = col_err_set(err, COL_EFORMAT, "FASTA record %s, line %lld: %s after the '*' that ends its residues",
                                 label, (long long)r.line, char_desc(c, cb));
                goto fail;
            }
            if (c == '*') {
                star = true;
                continue;
            }
            if (fold_aatype_of(c) < 0) {
                st = col_err_set(err, COL_EFORMAT, "FASTA record %s, residue %lld (line %lld): %s is not a residue letter "
                                 "AlphaFold reads (it reads " ACCEPTED ")",
                                 label, (long long)cur->n_res + 1, (long long)r.line, char_desc(c, cb));
                goto fail;
            }
            if (cur->n_res >= FOLD_MAX_RESIDUES) {
                st = col_err_set(err, COL_EFORMAT, "FASTA record %s has more than %d residues, the most this reads",
                                 label, FOLD_MAX_RESIDUES);
                goto fail;
            }
            if (!grow((void **)&cur->residues, &rcap, (size_t)cur->n_res + 2, 1)) goto oom;
            cur->residues[cur->n_res++] = (c >= 'a') ? (char)(c - 'a' + 'A') : c;
            cur->residues[cur->n_res] = 0;
        }
    }
    if (!f.n) {
        st = col_err_set(err, COL_EFORMAT, "the FASTA text has no record (a record starts with a line '>NAME', then its residues)");
        goto fail;
    }
    *out = f;
    return COL_OK;
oom:
    st = col_err_set(err, COL_ENOMEM, "out of memory reading FASTA text of %zu bytes", len);
fail:
    fold_fasta_free(&f);
    return st;
}

col_status fold_fasta_read(const char *path, fold_fasta *out, col_err *err)
{
    if (out) memset(out, 0, sizeof *out);
    char *data = NULL;
    size_t len = 0;
    col_status st = col_read_file(path, FASTA_MAX_BYTES, &data, &len, err);
    if (st != COL_OK) return st;
    st = fold_fasta_parse(data, len, out, err);
    free(data);
    if (st != COL_OK) col_err_prefix(err, "%s", path);
    return st;
}

/* ---------------------------------------------------------------- alignments */

void fold_msa_free(fold_msa *m)
{
    if (!m) return;
    free(m->msa);
    free(m->deletions);
    memset(m, 0, sizeof *m);
}

col_status fold_msa_single(const fold_sequence *seq, fold_msa *out, col_err *err)
{
    if (!out) return col_err_set(err, COL_EINVAL, "fold_msa_single: no output");
    memset(out, 0, sizeof *out);
    if (!seq || !seq->aatype || seq->n_res < 1 || seq->n_res > FOLD_MAX_RESIDUES)
        return col_err_set(err, COL_EINVAL, "fold_msa_single: not a parsed sequence");
    size_t n = (size_t)seq->n_res;
    out->msa = malloc(n * sizeof(int32_t));
    out->deletions = calloc(n, sizeof(int32_t));
    if (!out->msa || !out->deletions) {
        fold_msa_free(out);
        return col_err_set(err, COL_ENOMEM, "out of memory for an alignment of %zu residues", n);
    }
    for (size_t i = 0; i < n; i++) {
        if (seq->aatype[i] < 0 || seq->aatype[i] > FOLD_AA_UNKNOWN) {
            fold_msa_free(out);
            return col_err_set(err, COL_EINVAL, "fold_msa_single: residue id %d out of range", (int)seq->aatype[i]);
        }
        out->msa[i] = seq->aatype[i];
    }
    out->n_seq = 1;
    out->n_res = (int64_t)n;
    return COL_OK;
}

/* The rows kept so far: their aligned letters and deletion counts, and a hash
 * set over the letters (pipeline.make_msa_features: seen_sequences). */
typedef struct {
    char *letters;          /* [n_kept][n_res] (row 0 grows while its length is unknown) */
    int32_t *dels;
    size_t lcap, dcap;
    int64_t n_res;          /* -1 until the query row ends */
    int64_t n_kept;
    uint32_t *slots;        /* kept row + 1, 0 = empty */
    uint64_t *hashes;
    size_t nslots;
} a3m_rows;

static uint64_t row_hash(const char *s, int64_t n)
{
    uint64_t h = 1469598103934665603ull;        /* FNV-1a */
    for (int64_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* True when the row being written (row n_kept) repeats a kept one; else adds it to the set. */
static int row_seen(a3m_rows *a)
{
    const char *row = a->letters + a->n_kept * a->n_res;
    uint64_t h = row_hash(row, a->n_res);
    if ((size_t)(a->n_kept + 1) * 2 > a->nslots) {  /* keep the load under a half */
        size_t ns = a->nslots ? a->nslots * 2 : 256;
        uint32_t *sl = calloc(ns, sizeof *sl);
        uint64_t *hs = calloc(ns, sizeof *hs);
        if (!sl || !hs || a->n_kept >= UINT32_MAX - 1) {
            free(sl);
            free(hs);
            return -1;
        }
        for (size_t i = 0; i < a->nslots; i++)
            if (a->slots[i]) {
                size_t j = (size_t)a->hashes[i] & (ns - 1);
                while (sl[j]) j = (j + 1) & (ns - 1);
                sl[j] = a->slots[i];
                hs[j] = a->hashes[i];
            }
        free(a->slots);
        free(a->hashes);
        a->slots = sl;
        a->hashes = hs;
        a->nslots = ns;
    }
    size_t j = (size_t)h & (a->nslots - 1);
    for (; a->slots[j]; j = (j + 1) & (a->nslots - 1))
        if (a->hashes[j] == h && !memcmp(a->letters + (int64_t)(a->slots[j] - 1) * a->n_res, row, (size_t)a->n_res))
            return 1;
    a->slots[j] = (uint32_t)(a->n_kept + 1);
    a->hashes[j] = h;
    return 0;
}

static void a3m_rows_free(a3m_rows *a)
{
    free(a->letters);
    free(a->dels);
    free(a->slots);
    free(a->hashes);
}

col_status fold_a3m_parse(const char *text, size_t len, const char *query, fold_msa *out, col_err *err)
{
    if (!out) return col_err_set(err, COL_EINVAL, "fold_a3m_parse: no output");
    memset(out, 0, sizeof *out);
    if (!text && len) return col_err_set(err, COL_EINVAL, "fold_a3m_parse: no text");
    a3m_rows a = {0};
    a.n_res = -1;
    col_status st = COL_OK;
    char lb[80], cb[24];
    line_reader r = {text, len, 0, 0};
    const char *start, *s, *name = NULL;
    size_t n, name_len = 0;
    int64_t row = -1;           /* rows seen (kept or not), the current one */
    int64_t row_line = 0, cols = 0, ins = 0, dups = 0;
    for (;;) {
        bool more = next_line(&r, &start, &s, &n);
        if (row >= 0 && (!more || (n && s[0] == '>'))) { /* the row ends */
            const char *label = rec_label(name, name_len, row + 1, lb);
            if (row == 0) {
                if (!cols) {
                    st = col_err_set(err, COL_EFORMAT, "the MSA's first row (the query, %s, line %lld) has no aligned residues",
                                     label, (long long)row_line);
                    goto fail;
                }
                const char *letters = a.letters;
                if (query) {
                    size_t qn = strlen(query);
                    if ((size_t)cols != qn) {
                        st = col_err_set(err, COL_EFORMAT, "the MSA's first row (the query, %s, line %lld) has %lld aligned "
                                         "residues, the sequence has %zu: the MSA is not the sequence's",
                                         label, (long long)row_line, (long long)cols, qn);
                        goto fail;
                    }
                    for (size_t i = 0; i < qn; i++)
                        if (letters[i] != query[i]) {
                            st = col_err_set(err, COL_EFORMAT, "the MSA's first row (the query, %s, line %lld) is not the "
                                             "sequence: residue %zu is '%c' in the MSA and %s in the sequence",
                                             label, (long long)row_line, i + 1, letters[i], char_desc(query[i], cb));
                            goto fail;
                        }
                }
                a.n_res = cols;
            } else if (cols != a.n_res) {
                st = col_err_set(err, COL_EFORMAT, "MSA row %lld (%s, line %lld) has %lld aligned columns (uppercase "
                                 "letters and '-'), the query has %lld", (long long)row + 1, label,
                                 (long long)row_line, (long long)cols, (long long)a.n_res);
                goto fail;
            }
            int seen = row_seen(&a);
            if (seen < 0) goto oom;
            if (seen) dups++;
            else a.n_kept++;
        }
        if (!more) break;
        if (!n || s[0] == '#') continue;
        if (s[0] == '>') {
            row++;
            row_line = r.line;
            name = s + 1;
            name_len = n - 1;
            while (name_len && is_space(name[0])) name++, name_len--;
            name_len = first_word(name, name_len);
            cols = ins = 0;
            if (row > 0) { /* room for one more row at n_kept */
                size_t need = (size_t)(a.n_kept + 1) * (size_t)a.n_res;
                if (!grow((void **)&a.letters, &a.lcap, need, 1) || !grow((void **)&a.dels, &a.dcap, need, sizeof(int32_t)))
                    goto oom;
            }
            continue;
        }
        if (row < 0) {
            st = col_err_set(err, COL_EFORMAT, "the MSA text has text on line %lld before its first row "
                             "(a row starts with a line '>NAME', then its aligned residues)", (long long)r.line);
            goto fail;
        }
        for (size_t i = 0; i < n; i++) {
            char c = s[i];
            if (is_space(c)) continue;
            if (c >= 'a' && c <= 'z') { /* an insertion: _a3m_deletions counts it at the next column */
                if (++ins > INT32_MAX) {
                    st = col_err_set(err, COL_EFORMAT, "MSA row %lld (%s, line %lld) has more than %d insertions in a row",
                                     (long long)row + 1, rec_label(name, name_len, row + 1, lb), (long long)row_line, INT32_MAX);
                    goto fail;
                }
                continue;
            }
            if (a3m_id_of(c) < 0) {
                st = col_err_set(err, COL_EFORMAT, "MSA row %lld (%s), line %lld, column %lld: %s is not a residue letter, "
                                 "'-' (a gap) or a lowercase letter (an insertion)%s", (long long)row + 1,
                                 rec_label(name, name_len, row + 1, lb), (long long)r.line,
                                 (long long)(s + i - start) + 1, char_desc(c, cb),
                                 c == '.' ? " ('.' is A2M's gap in an insert column: the file is not a3m)" : "");
                goto fail;
            }
            if (row == 0) {
                if (cols >= FOLD_MAX_RESIDUES) {
                    st = col_err_set(err, COL_EFORMAT, "the MSA's first row (the query, %s) has more than %d residues, "
                                     "the most this reads", rec_label(name, name_len, 1, lb), FOLD_MAX_RESIDUES);
                    goto fail;
                }
                if (!grow((void **)&a.letters, &a.lcap, (size_t)cols + 1, 1) ||
                    !grow((void **)&a.dels, &a.dcap, (size_t)cols + 1, sizeof(int32_t)))
                    goto oom;
                a.letters[cols] = c;
                a.dels[cols] = (int32_t)ins;
            } else if (cols < a.n_res) {
                a.letters[a.n_kept * a.n_res + cols] = c;
                a.dels[a.n_kept * a.n_res + cols] = (int32_t)ins;
            }
            cols++;
            ins = 0;
        }
    }
    if (row < 0) {
        st = col_err_set(err, COL_EFORMAT, "the MSA text has no row (a row starts with a line '>NAME', then its aligned residues)");
        goto fail;
    }
    size_t cells = (size_t)a.n_kept * (size_t)a.n_res;
    out->msa = malloc(cells * sizeof(int32_t));
    if (!out->msa) goto oom;
    for (size_t i = 0; i < cells; i++) out->msa[i] = a3m_id_of(a.letters[i]);
    int32_t *dels = realloc(a.dels, cells * sizeof(int32_t));
    out->deletions = dels ? dels : a.dels;
    a.dels = NULL;
    out->n_seq = a.n_kept;
    out->n_res = a.n_res;
    out->n_duplicates = dups;
    a3m_rows_free(&a);
    return COL_OK;
oom:
    st = col_err_set(err, COL_ENOMEM, "out of memory reading an MSA of %zu bytes", len);
fail:
    a3m_rows_free(&a);
    fold_msa_free(out);
    return st;
}

col_status fold_a3m_read(const char *path, const char *query, fold_msa *out, col_err *err)
{
    if (out) memset(out, 0, sizeof *out);
    char *data = NULL;
    size_t len = 0;
    col_status st = col_read_file(path, A3M_MAX_BYTES, &data, &len, err);
    if (st != COL_OK) return st;
    st = fold_a3m_parse(data, len, query, out, err);
    free(data);
    if (st != COL_OK) col_err_prefix(err, "%s", path);
    return st;
}
