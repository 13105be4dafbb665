/* tok_unicode.c - NFC, Lowercase and white-space runs as Hugging Face
 * tokenizers applies them (tok_unicode.h), on the tables of
 * tok_unicode_data.c. Calls only tok_util.c.
 *
 * NFC of a stretch of valid UTF-8: every character is decomposed fully
 * (tables, Hangul by arithmetic), each run of marks is put in canonical order
 * (a stable sort by combining class), then characters are composed left to
 * right onto the last starter when nothing between blocks them. Costs are
 * linear but for the sort: insertion sort for short runs of marks, counting
 * sort by class for long ones, so a megabyte of marks is not quadratic. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "tok_unicode.h"

bool col_tbuf_put(col_tbuf *b, const char *s, size_t n)
{
    if (n > SIZE_MAX / 4 - b->n)
        return false;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return false;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    return true;
}

static bool put_cp(col_tbuf *b, uint32_t cp)
{
    char u[4];
    size_t k;
    if (cp < 0x80) {
        u[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3F)), u[2] = (char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 0x3F)), u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    return col_tbuf_put(b, u, k);
}

/* ---- tables ---- */

int col_uni_ccc(uint32_t cp)
{
    if (cp < 0x300)
        return 0;
    size_t lo = 0, hi = col_uni_n_ccc;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (col_uni_ccc_runs[mid][1] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < col_uni_n_ccc && col_uni_ccc_runs[lo][0] <= cp ? (int)col_uni_ccc_runs[lo][2] : 0;
}

/* the index of cp in col_uni_decomp, or -1 */
static long decomp_index(uint32_t cp)
{
    if (cp < 0xC0)
        return -1;
    size_t lo = 0, hi = col_uni_n_decomp;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (col_uni_decomp[mid][0] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < col_uni_n_decomp && col_uni_decomp[lo][0] == cp ? (long)lo : -1;
}

/* the primary composite of (a, b), or 0 */
static uint32_t compose_pair(uint32_t a, uint32_t b)
{
    enum { SB = 0xAC00, LB = 0x1100, VB = 0x1161, TB = 0x11A7 };
    if (a >= LB && a < LB + 19 && b >= VB && b < VB + 21)
        return SB + ((a - LB) * 21 + (b - VB)) * 28;
    if (a >= SB && a < SB + 11172 && (a - SB) % 28 == 0 && b > TB && b < TB + 28)
        return a + (b - TB);
    size_t lo = 0, hi = col_uni_n_compose;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *e = col_uni_decomp[col_uni_compose[mid]];
        if (e[1] < a || (e[1] == a && e[2] < b))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < col_uni_n_compose) {
        const uint32_t *e = col_uni_decomp[col_uni_compose[lo]];
        if (e[1] == a && e[2] == b)
            return e[0];
    }
    return 0;
}

/* ---- NFC ---- */

typedef struct {
    uint32_t *cp;
    uint8_t *cc;
    size_t n, cap;
} cpbuf;

static bool cp_push(cpbuf *d, uint32_t cp)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 256;
        uint32_t *p = realloc(d->cp, cap * sizeof *p);
        if (p)
            d->cp = p;
        uint8_t *c = realloc(d->cc, cap);
        if (c)
            d->cc = c;
        if (!p || !c)
            return false;
        d->cap = cap;
    }
    d->cc[d->n] = (uint8_t)col_uni_ccc(cp);
    d->cp[d->n++] = cp;
    return true;
}

static bool decompose(cpbuf *d, uint32_t cp, int depth)
{
    if (cp >= 0xAC00 && cp < 0xAC00 + 11172) {
        uint32_t s = cp - 0xAC00;
        return cp_push(d, 0x1100 + s / 588) && cp_push(d, 0x1161 + s % 588 / 28) &&
               (s % 28 == 0 || cp_push(d, 0x11A7 + s % 28));
    }
    long i = depth < 8 ? decomp_index(cp) : -1;
    if (i < 0)
        return cp_push(d, cp);
    return decompose(d, col_uni_decomp[i][1], depth + 1) &&
           (col_uni_decomp[i][2] == 0 || decompose(d, col_uni_decomp[i][2], depth + 1));
}

/* stable sort of d[a..b) by class */
static bool sort_marks(cpbuf *d, size_t a, size_t b)
{
    if (b - a <= 32) {
        for (size_t i = a + 1; i < b; i++) {
            uint32_t cp = d->cp[i];
            uint8_t cc = d->cc[i];
            size_t j = i;
            for (; j > a && d->cc[j - 1] > cc; j--) {
                d->cp[j] = d->cp[j - 1];
                d->cc[j] = d->cc[j - 1];
            }
            d->cp[j] = cp;
            d->cc[j] = cc;
        }
        return true;
    }
    size_t count[257] = {0}, n = b - a;
    uint32_t *tmp = malloc(n * sizeof *tmp);
    if (!tmp)
        return false;
    for (size_t i = a; i < b; i++)
        count[d->cc[i] + 1]++;
    for (int k = 1; k < 257; k++)
        count[k] += count[k - 1];
    for (size_t i = a; i < b; i++)
        tmp[count[d->cc[i]]++] = d->cp[i];
    for (size_t i = 0; i < n; i++) {
        d->cp[a + i] = tmp[i];
        d->cc[a + i] = (uint8_t)col_uni_ccc(tmp[i]);
    }
    free(tmp);
    return true;
}

/* NFC of valid UTF-8 s[0..n) */
static bool nfc_valid(const unsigned char *s, size_t n, col_tbuf *out, cpbuf *d)
{
    d->n = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = col_utf8_char(s + i, n - i, &cp);
        if (!decompose(d, cp, 0))
            return false;
        i += k;
    }
    for (size_t i = 0; i < d->n;) { /* canonical order */
        if (d->cc[i] == 0) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < d->n && d->cc[j])
            j++;
        if (j - i > 1 && !sort_marks(d, i, j))
            return false;
        i = j;
    }
    size_t k = 0;   /* composed length */
    long starter = -1;
    int last = 0;   /* class of the last character kept */
    for (size_t i = 0; i < d->n; i++) {
        uint32_t cp = d->cp[i];
        int cc = d->cc[i];
        if (starter >= 0 && (last < cc || (last == 0 && (size_t)starter == k - 1))) {
            uint32_t c = compose_pair(d->cp[starter], cp);
            if (c) {
                d->cp[starter] = c;
                continue;
            }
        }
        if (cc == 0)
            starter = (long)k;
        last = cc;
        d->cp[k++] = cp;
    }
    for (size_t i = 0; i < k; i++)
        if (!put_cp(out, d->cp[i]))
            return false;
    return true;
}

bool col_uni_nfc(const char *s, size_t n, col_tbuf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n && u[i] < 0xCC) /* below U+0300 every text is in NFC */
        i++;
    if (i == n)
        return col_tbuf_put(out, s, n);
    cpbuf d = {0};
    bool ok = true;
    i = 0;
    while (ok && i < n) {
        size_t v = col_utf8_valid(u + i, n - i);
        if (v > 0) {
            ok = nfc_valid(u + i, v, out, &d);
            i += v;
            continue;
        }
        size_t j = i + 1;
        uint32_t cp;
        while (j < n && col_utf8_char(u + j, n - j, &cp) == 0)
            j++;
        ok = col_tbuf_put(out, s + i, j - i);
        i = j;
    }
    free(d.cp);
    free(d.cc);
    return ok;
}

/* ---- Lowercase, spaces ---- */

static uint32_t lower_cp(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    size_t lo = 0, hi = col_uni_n_lower;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uint32_t)col_uni_lower_runs[mid][1] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < col_uni_n_lower) {
        const int32_t *r = col_uni_lower_runs[lo];
        if ((uint32_t)r[0] <= cp && (cp - (uint32_t)r[0]) % (uint32_t)r[3] == 0)
            return (uint32_t)((int32_t)cp + r[2]);
    }
    return cp;
}

bool col_uni_lower(const char *s, size_t n, col_tbuf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t from = 0; /* s[from..i) is copied as it is */
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = col_utf8_char(u + i, n - i, &cp);
        if (k == 0) {
            i++;
            continue;
        }
        uint32_t lc = cp == 0x130 ? 'i' : lower_cp(cp);
        if (lc != cp) {
            if (!col_tbuf_put(out, s + from, i - from) || !put_cp(out, lc) || (cp == 0x130 && !put_cp(out, 0x307)))
                return false;
            from = i + k;
        }
        i += k;
    }
    return col_tbuf_put(out, s + from, n - from);
}

bool col_uni_spaces(const char *s, size_t n, col_tbuf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t from = 0; /* s[from..i) is copied as it is */
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = col_utf8_char(u + i, n - i, &cp);
        if (k == 0 || !col_unicode_space(cp)) {
            i += k ? k : 1;
            continue;
        }
        size_t j = i;
        while (j < n && (k = col_utf8_char(u + j, n - j, &cp)) > 0 && col_unicode_space(cp))
            j += k;
        if (!(j - i == 1 && u[i] == ' ')) { /* a single ' ' stays as it is */
            if (!col_tbuf_put(out, s + from, i - from) || !col_tbuf_put(out, " ", 1))
                return false;
            from = j;
        }
        i = j;
    }
    return col_tbuf_put(out, s + from, n - from);
}
