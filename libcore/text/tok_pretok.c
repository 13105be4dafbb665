/* tok_pretok.c - the text before BPE: normalizer steps (col_tok_normalize;
 * NFC, Lowercase and white-space runs from tok_unicode.c), the pre-tokenizer
 * splits (a regex: PCRE2 with UTF and UCP, JIT-compiled when the library
 * can, its matches and gaps or only its matches, optionally each piece split
 * again by a second regex; or before each Metaspace character), col_tok_words,
 * which hands each word to BPE (tok_bpe.c), and reading tokenizer.json's
 * normalizer and pre_tokenizer. Calls tok_unicode.c, tok_bpe.c and tok_util.c.
 *
 * Hugging Face runs its regexes with Oniguruma, whose \s is Unicode's
 * White_Space property (PCRE2's has U+180E and lacks U+0085) and whose
 * Unicode tables are newer than PCRE2 10.42's, so patterns are rewritten
 * to give \s, \p{L} and \p{N} Oniguruma's sets. The regexes then split
 * every code point as Hugging Face does on the GPT-2 and LLaMA-3 patterns. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "tok_unicode.h"


/* ---- regex ---- */

/* Two compiled forms of one pattern: `wide` with Oniguruma's full sets, and
 * `plain`, exact for text without code points from U+1000 up (no byte >=
 * 0xE1), which is faster because PCRE2's JIT tests \p{L} more cheaply than
 * a class with dozens of ranges. */
struct col_regex {
    pcre2_code *plain, *wide;
};

/* Unicode 16's White_Space, and the letters (L) and digits (N) assigned
 * after Unicode 14, which PCRE2 10.42 knows and Oniguruma 6.9.10 (in
 * Hugging Face tokenizers 0.23) sees as \p{L} / \p{N}. Found by comparing
 * every code point's class under both (tools/refgen's venv). */
static const char SPACE_SET[] = "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
                                "\\x{202F}\\x{205F}\\x{3000}";
static const char LETTER_EXTRA[] =
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}\\x{10D4A}-\\x{10D65}"
    "\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}"
    "\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}"
    "\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}"
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}"
    "\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
static const char DIGIT_EXTRA[] =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}\\x{16130}-\\x{16139}"
    "\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

/* one escape \s, \S, \p{L}, \p{N} as Oniguruma reads it, or NULL: `in` says
 * whether it stands inside a character class */
static bool put_class(col_tbuf *o, const char *p, size_t n, size_t *used, bool in, bool full)
{
    const char *set = NULL, *extra = "";
    bool neg = false;
    if (n >= 2 && (p[1] == 's' || (p[1] == 'S' && !in))) {
        set = full ? SPACE_SET : "\\s\\x{85}";
        neg = p[1] == 'S';
        *used = 2;
    } else if (full && n >= 5 && p[1] == 'p' && p[2] == '{' && (p[3] == 'L' || p[3] == 'N') && p[4] == '}') {
        set = p[3] == 'L' ? "\\p{L}" : "\\p{N}";
        extra = p[3] == 'L' ? LETTER_EXTRA : DIGIT_EXTRA;
        *used = 5;
    } else
        return false;
    return (in || col_tbuf_put(o, neg ? "[^" : "[", neg ? 2 : 1)) && col_tbuf_put(o, set, strlen(set)) &&
           col_tbuf_put(o, extra, strlen(extra)) && (in || col_tbuf_put(o, "]", 1));
}

/* Copies the pattern with \s, \S, \p{L}, \p{N} widened to Oniguruma's sets
 * (full), or only \s and \S given U+0085 (!full). */
static char *widen_classes(const char *p, size_t n, bool full, size_t *outlen)
{
    col_tbuf o = {0};
    bool in_class = false, ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        char ch = p[i];
        size_t used;
        if (ch == '\\' && i + 1 < n) {
            if (put_class(&o, p + i, n - i, &used, in_class, full))
                i += used - 1;
            else
                ok = col_tbuf_put(&o, p + i++, 2);
        } else if (!in_class && ch == '[') {
            in_class = true;
            size_t k = 1;
            if (i + k < n && p[i + k] == '^')
                k++;
            if (i + k < n && p[i + k] == ']') /* a leading ] is literal */
                k++;
            ok = col_tbuf_put(&o, p + i, k);
            i += k - 1;
        } else if (in_class && ch == '[' && i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
            size_t len = 1;
            for (size_t j = i + 2; j + 1 < n; j++)
                if (p[j] == ':' && p[j + 1] == ']') {
                    len = j + 2 - i;
                    break;
                }
            ok = col_tbuf_put(&o, p + i, len);
            i += len - 1;
        } else {
            if (in_class && ch == ']')
                in_class = false;
            ok = col_tbuf_put(&o, &ch, 1);
        }
    }
    if (!ok || !col_tbuf_put(&o, "", 1)) {
        free(o.p);
        return NULL;
    }
    *outlen = o.n - 1;
    return o.p;
}

static col_status compile(const char *pattern, size_t len, bool literal, bool full, pcre2_code **out, col_err *err)
{
    size_t plen = len;
    char *pat = literal ? NULL : widen_classes(pattern, len, full, &plen);
    if (!literal && !pat)
        return col_err_set(err, COL_ENOMEM, "out of memory compiling the pre-tokenizer regex");
    int code;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    *out = pcre2_compile((PCRE2_SPTR)(literal ? pattern : pat), plen, opts, &code, &at, NULL);
    free(pat);
    if (!*out) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return col_err_set(err, COL_EFORMAT, "pre-tokenizer regex does not compile: %s", (char *)msg);
    }
    pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE); /* without JIT, pcre2_match interprets */
    return COL_OK;
}

col_status col_regex_compile(const char *pattern, size_t len, bool literal, col_regex **out, col_err *err)
{
    *out = NULL;
    col_regex *r = calloc(1, sizeof *r);
    if (!r)
        return col_err_set(err, COL_ENOMEM, "out of memory compiling the pre-tokenizer regex");
    col_status st = compile(pattern, len, literal, true, &r->wide, err);
    if (st == COL_OK && !literal)
        st = compile(pattern, len, literal, false, &r->plain, err);
    if (st != COL_OK) {
        col_regex_free(r);
        return st;
    }
    *out = r;
    return COL_OK;
}

void col_regex_free(col_regex *re)
{
    if (!re)
        return;
    pcre2_code_free(re->plain);
    pcre2_code_free(re->wide);
    free(re);
}

/* whether s[0..n) has a byte >= 0xE1 (a code point from U+1000 up) */
static bool has_high(const unsigned char *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull)
            for (size_t k = 0; k < 8; k++)
                if (s[i + k] >= 0xE1)
                    return true;
    }
    for (; i < n; i++)
        if (s[i] >= 0xE1)
            return true;
    return false;
}

/* s[0..n) is valid UTF-8 */
static col_status split_valid(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, bool gaps,
                              col_piece_fn piece, void *user, col_err *err)
{
    size_t gap = 0, at = 0; /* the unmatched text starts at gap; search from at */
    col_status st;
    while (at < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return col_err_set(err, COL_EINVAL, "tokenizer: pre-tokenizer regex failed at byte %zu: %s", at,
                               (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty match: look again one character on */
            uint32_t cp;
            size_t k = col_utf8_char((const unsigned char *)s + ms, n - ms, &cp);
            at = ms + (k ? k : 1);
            continue;
        }
        if (gaps && ms > gap && (st = piece(user, s + gap, ms - gap, err)) != COL_OK)
            return st;
        if ((st = piece(user, s + ms, me - ms, err)) != COL_OK)
            return st;
        gap = at = me;
    }
    if (gaps && n > gap)
        return piece(user, s + gap, n - gap, err);
    return COL_OK;
}

col_status col_regex_split(const col_regex *re, const char *s, size_t n, bool gaps, col_piece_fn piece, void *user,
                           col_err *err)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re->wide, NULL); /* same groups in both */
    if (!md)
        return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory");
    col_status st = COL_OK;
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n && st == COL_OK) {
        size_t v = col_utf8_valid(u + i, n - i);
        if (v > 0) {
            const pcre2_code *code = re->plain && !has_high(u + i, v) ? re->plain : re->wide;
            st = split_valid(code, md, s + i, v, gaps, piece, user, err);
            i += v;
            continue;
        }
        size_t j = i + 1; /* a run of invalid bytes: up to where a valid character starts */
        uint32_t cp;
        while (j < n && col_utf8_char(u + j, n - j, &cp) == 0)
            j++;
        st = piece(user, s + i, j - i, err);
        i = j;
    }
    pcre2_match_data_free(md);
    return st;
}

/* ---- normalizer steps and word splitting ---- */

/* out = s with every a replaced by b (a non-empty, left to right) */
static bool replace_all(col_tbuf *out, const char *s, size_t n, const char *a, size_t alen, const char *b, size_t blen)
{
    size_t i = 0, from = 0;
    while (i + alen <= n) {
        const char *hit = memchr(s + i, a[0], n - i - alen + 1);
        if (!hit)
            break;
        i = (size_t)(hit - s);
        if (memcmp(hit, a, alen) == 0) {
            if (!col_tbuf_put(out, s + from, i - from) || !col_tbuf_put(out, b, blen))
                return false;
            i += alen;
            from = i;
        } else
            i++;
    }
    return col_tbuf_put(out, s + from, n - from);
}

static bool apply_op(const col_norm_op *op, col_tbuf *out, const char *s, size_t n, bool first)
{
    out->n = 0;
    switch (op->kind) {
    case COL_NORM_PREPEND:
        return (n == 0 || col_tbuf_put(out, op->a, op->alen)) && col_tbuf_put(out, s, n);
    case COL_NORM_REPLACE:
        return replace_all(out, s, n, op->a, op->alen, op->b, op->blen);
    case COL_NORM_METASPACE: {
        bool ok = (op->alen == 1 && op->a[0] == ' ') ? col_tbuf_put(out, s, n) : replace_all(out, s, n, " ", 1, op->a, op->alen);
        if (!ok)
            return false;
        bool want = op->scheme == 2 || (op->scheme == 1 && first);
        if (want && out->n > 0 && !(out->n >= op->alen && memcmp(out->p, op->a, op->alen) == 0)) {
            col_tbuf tmp = {0};
            if (!col_tbuf_put(&tmp, op->a, op->alen) || !col_tbuf_put(&tmp, out->p, out->n)) {
                free(tmp.p);
                return false;
            }
            free(out->p);
            *out = tmp;
        }
        return true;
    }
    case COL_NORM_NFC:
        return col_uni_nfc(s, n, out);
    case COL_NORM_LOWER:
        return col_uni_lower(s, n, out);
    case COL_NORM_SPACES:
        return col_uni_spaces(s, n, out);
    }
    return false;
}

static const char SPM_SPACE[] = "\xE2\x96\x81"; /* U+2581 '▁' */

/* cuts before each occurrence of rep[0..rl); with after_other, only where
 * the text before it is not rep itself */
static col_status split_before(const col_tokenizer *t, col_tok_ctx *c, const char *s, size_t n, const char *rep,
                               size_t rl, bool after_other, col_err *err)
{
    (void)t;
    size_t start = 0, i = 1;
    while (i + rl <= n) {
        const char *hit = memchr(s + i, rep[0], n - i - rl + 1);
        if (!hit)
            break;
        i = (size_t)(hit - s);
        if (memcmp(hit, rep, rl) != 0) {
            i++;
            continue;
        }
        bool cut = !after_other || i < rl || memcmp(s + i - rl, rep, rl) != 0;
        if (cut && i > start) {
            col_status st = col_tok_word(c, s + start, i - start, err);
            if (st != COL_OK)
                return st;
            start = i;
        }
        i += rl;
    }
    return col_tok_word(c, s + start, n - start, err);
}

/* the normalizer steps (pre: only the pre-tokenizer's Metaspace / ByteLevel
 * prefix steps, which come last) */
static col_status run_ops(const col_tokenizer *t, const char *s, size_t n, bool first, bool pre, col_tbuf *keep,
                          const char **out, size_t *outn, col_err *err)
{
    col_tbuf a = {0}, b = {0};
    for (int k = 0; n > 0 && k < t->n_norm; k++) {
        if ((t->norm[k].kind == COL_NORM_METASPACE) != pre)
            continue;
        if (!apply_op(&t->norm[k], &b, s, n, first)) {
            free(a.p);
            free(b.p);
            return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory normalizing %zu bytes", n);
        }
        col_tbuf tmp = a; /* b holds the result: it becomes the input of the next step */
        a = b;
        b = tmp;
        s = a.p;
        n = a.n;
    }
    free(b.p);
    *keep = a;
    *out = s;
    *outn = n;
    return COL_OK;
}

col_status col_tok_normalize(const col_tokenizer *t, const char *s, size_t n, bool first, col_tbuf *keep,
                             const char **out, size_t *outn, col_err *err)
{
    return run_ops(t, s, n, first, false, keep, out, outn, err);
}

typedef struct {
    const col_tokenizer *t;
    col_tok_ctx *c;
} split2;

/* a piece of the first split, cut again by the second regex (ByteLevel's after a Split) */
static col_status split_again(void *user, const char *s, size_t n, col_err *err)
{
    split2 *x = user;
    return col_regex_split(x->t->re2, s, n, true, col_tok_word, x->c, err);
}

static col_status words(const col_tokenizer *t, col_tok_ctx *c, const char *s, size_t n, col_err *err)
{
    switch (t->split) {
    case COL_SPLIT_REGEX:
        if (t->re2) {
            split2 x = {t, c};
            return col_regex_split(t->re, s, n, !t->matches_only, split_again, &x, err);
        }
        return col_regex_split(t->re, s, n, !t->matches_only, col_tok_word, c, err);
    case COL_SPLIT_METASPACE:
        return split_before(t, c, s, n, t->meta_repl, t->meta_repl_len, false, err);
    case COL_SPLIT_SPM_WORDS:
        return split_before(t, c, s, n, SPM_SPACE, 3, true, err);
    default:
        return col_tok_word(c, s, n, err);
    }
}

col_status col_tok_words(const col_tokenizer *t, col_tok_ctx *c, const char *s, size_t n, bool first, col_err *err)
{
    if (n == 0)
        return COL_OK;
    col_tbuf keep;
    col_status st = run_ops(t, s, n, first, true, &keep, &s, &n, err);
    if (st == COL_OK && n > 0)
        st = words(t, c, s, n, err);
    free(keep.p);
    return st;
}

/* ---- tokenizer.json: normalizer and pre_tokenizer ---- */

const char col_gpt2_regex[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";


static const char *type_of(const cJSON *o)
{
    return cJSON_IsObject(o) ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "type")) : NULL;
}

static col_status add_op(col_tokenizer *t, col_norm_kind kind, const char *a, const char *b, int scheme,
                         const char *name, col_err *err)
{
    col_norm_op *ops = realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *ops);
    if (!ops)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory", name);
    t->norm = ops;
    col_norm_op *op = &ops[t->n_norm];
    *op = (col_norm_op){kind, strdup(a), strdup(b ? b : ""), strlen(a), b ? strlen(b) : 0, scheme};
    t->n_norm++;
    if (!op->a || !op->b)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory", name);
    return COL_OK;
}

static col_status parse_norm(col_tokenizer *t, const cJSON *n, const char *name, col_err *err)
{
    if (!n || cJSON_IsNull(n))
        return COL_OK;
    const char *type = type_of(n);
    if (!type)
        return col_tok_fail(err, COL_EFORMAT, name, "normalizer: an entry has no \"type\"");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *x;
        if (!cJSON_IsArray(list))
            return col_tok_fail(err, COL_EFORMAT, name, "normalizer: Sequence has no \"normalizers\" array");
        cJSON_ArrayForEach(x, list) {
            col_status st = parse_norm(t, x, name, err);
            if (st != COL_OK)
                return st;
        }
        return COL_OK;
    }
    if (strcmp(type, "Prepend") == 0) {
        const char *a = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(n, "prepend"));
        if (!a)
            return col_tok_fail(err, COL_EFORMAT, name, "normalizer: Prepend has no \"prepend\" string");
        return add_op(t, COL_NORM_PREPEND, a, NULL, 0, name, err);
    }
    if (strcmp(type, "Replace") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
        const char *a = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pat, "String"));
        const char *b = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(n, "content"));
        const char *rx = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pat, "Regex"));
        if (rx && strcmp(rx, "\\s+") == 0 && b && strcmp(b, " ") == 0) /* CLIP's: white-space runs -> ' ' */
            return add_op(t, COL_NORM_SPACES, " ", NULL, 0, name, err);
        if (cJSON_GetObjectItemCaseSensitive(pat, "Regex"))
            return col_tok_fail(err, COL_EUNSUPPORTED, name,
                                "normalizer: Replace with a Regex pattern other than \\s+ -> \" \" is not supported");
        if (!a || !*a || !b)
            return col_tok_fail(err, COL_EFORMAT, name,
                                "normalizer: Replace needs a non-empty pattern.String and a content string");
        return add_op(t, COL_NORM_REPLACE, a, b, 0, name, err);
    }
    if (strcmp(type, "NFC") == 0)
        return add_op(t, COL_NORM_NFC, "", NULL, 0, name, err);
    if (strcmp(type, "Lowercase") == 0)
        return add_op(t, COL_NORM_LOWER, "", NULL, 0, name, err);
    char tmp[64];
    return col_tok_fail(err, COL_EUNSUPPORTED, name, "normalizer type '%s' is not supported",
                        col_tok_show(type, strlen(type), tmp));
}

static col_status set_regex(col_tokenizer *t, const char *pat, size_t len, bool literal, const char *name,
                            col_err *err)
{
    if (t->split != COL_SPLIT_NONE)
        return col_tok_fail(err, COL_EUNSUPPORTED, name, "pre_tokenizer: more than one split is not supported");
    col_status st = col_regex_compile(pat, len, literal, &t->re, err);
    if (st != COL_OK) {
        char msg[COL_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return col_tok_fail(err, st, name, "%s", msg);
    }
    t->split = COL_SPLIT_REGEX;
    return COL_OK;
}

static col_status parse_pre(col_tokenizer *t, const cJSON *p, const char *name, col_err *err)
{
    if (!p || cJSON_IsNull(p))
        return COL_OK;
    const char *type = type_of(p);
    if (!type)
        return col_tok_fail(err, COL_EFORMAT, name, "pre_tokenizer: an entry has no \"type\"");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers"), *x;
        if (!cJSON_IsArray(list))
            return col_tok_fail(err, COL_EFORMAT, name, "pre_tokenizer: Sequence has no \"pretokenizers\" array");
        cJSON_ArrayForEach(x, list) {
            col_status st = parse_pre(t, x, name, err);
            if (st != COL_OK)
                return st;
        }
        return COL_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        int aps = col_tok_json_bool(p, "add_prefix_space", 1), re = col_tok_json_bool(p, "use_regex", 1);
        if (aps < 0 || re < 0)
            return col_tok_fail(err, COL_EFORMAT, name, "pre_tokenizer: ByteLevel has a field that is not a boolean");
        t->byte_level = true;
        if (aps && t->split != COL_SPLIT_NONE)
            return col_tok_fail(err, COL_EUNSUPPORTED, name,
                                "pre_tokenizer: ByteLevel add_prefix_space after a split is not supported");
        col_status st = aps ? add_op(t, COL_NORM_METASPACE, " ", NULL, 2, name, err) : COL_OK;
        if (st == COL_OK && re && t->split == COL_SPLIT_REGEX && !t->re2) /* each piece split again */
            st = col_regex_compile(col_gpt2_regex, strlen(col_gpt2_regex), false, &t->re2, err);
        else if (st == COL_OK && re)
            st = set_regex(t, col_gpt2_regex, strlen(col_gpt2_regex), false, name, err);
        return st;
    }
    if (strcmp(type, "Split") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *rx = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *lit = cJSON_GetObjectItemCaseSensitive(pat, "String");
        const char *beh = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "behavior"));
        int inv = col_tok_json_bool(p, "invert", 0);
        if ((!cJSON_IsString(rx) && !cJSON_IsString(lit)) || !beh || inv < 0)
            return col_tok_fail(err, COL_EFORMAT, name,
                                "pre_tokenizer: Split needs pattern.Regex or pattern.String and a behavior");
        bool keep_matches = strcmp(beh, "Removed") == 0 && inv; /* CLIP's: only the matches are words */
        if ((strcmp(beh, "Isolated") != 0 || inv) && !keep_matches)
            return col_tok_fail(err, COL_EUNSUPPORTED, name,
                                "pre_tokenizer: only Split with behavior \"Isolated\" (invert false) or \"Removed\" "
                                "(invert true) is supported");
        t->matches_only = keep_matches;
        const char *s = cJSON_IsString(rx) ? rx->valuestring : lit->valuestring;
        if (!*s)
            return col_tok_fail(err, COL_EFORMAT, name, "pre_tokenizer: Split has an empty pattern");
        return set_regex(t, s, strlen(s), !cJSON_IsString(rx), name, err);
    }
    if (strcmp(type, "Metaspace") == 0) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "replacement");
        const char *repl = r ? cJSON_GetStringValue(r) : "\xE2\x96\x81";
        const char *scheme = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "prepend_scheme"));
        int aps = col_tok_json_bool(p, "add_prefix_space", 1), split = col_tok_json_bool(p, "split", 1);
        uint32_t cp;
        if (!repl || !*repl || strlen(repl) >= sizeof t->meta_repl ||
            col_utf8_char((const unsigned char *)repl, strlen(repl), &cp) != strlen(repl) || aps < 0 || split < 0)
            return col_tok_fail(err, COL_EFORMAT, name, "pre_tokenizer: Metaspace needs one replacement character");
        int sch = aps ? 2 : 0;
        if (scheme)
            sch = strcmp(scheme, "always") == 0 ? 2 : strcmp(scheme, "first") == 0 ? 1 : strcmp(scheme, "never") == 0 ? 0 : -1;
        if (sch < 0)
            return col_tok_fail(err, COL_EFORMAT, name, "pre_tokenizer: Metaspace prepend_scheme must be always, first or never");
        col_status st = add_op(t, COL_NORM_METASPACE, repl, NULL, sch, name, err);
        if (st != COL_OK || !split)
            return st;
        if (t->split != COL_SPLIT_NONE)
            return col_tok_fail(err, COL_EUNSUPPORTED, name, "pre_tokenizer: more than one split is not supported");
        t->split = COL_SPLIT_METASPACE;
        memcpy(t->meta_repl, repl, strlen(repl));
        t->meta_repl_len = strlen(repl);
        return COL_OK;
    }
    char tmp[64];
    return col_tok_fail(err, COL_EUNSUPPORTED, name, "pre_tokenizer type '%s' is not supported",
                        col_tok_show(type, strlen(type), tmp));
}

col_status col_tok_parse_pre(col_tokenizer *t, const cJSON *normalizer, const cJSON *pre_tokenizer,
                             const char *name, col_err *err)
{
    col_status st = parse_norm(t, normalizer, name, err);
    return st != COL_OK ? st : parse_pre(t, pre_tokenizer, name, err);
}
