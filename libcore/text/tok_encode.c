/* tok_encode.c - col_tok_encode: added tokens are found in the raw text
 * first (a byte trie, leftmost longest); each stretch of text between them
 * is normalized (tok_pretok.c), then the "normalized" added tokens are found
 * in it, and each piece between those is cut into words (tok_pretok.c); each
 * word goes through BPE (tok_bpe.c); the post-processor's ids go around the
 * result. col_tok_encode_padded: the fixed-length form of a CLIP text
 * encoder's input. Calls tok_pretok.c, tok_bpe.c and tok_util.c. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* the longest added token at s[0..n) that flags allow (special ones only
 * with special; those matched in normalized text only with normalized), or -1 */
static int32_t match_added(const col_tokenizer *t, const unsigned char *s, size_t n, bool special, bool normalized,
                           size_t *len)
{
    int32_t best = -1;
    int32_t node = t->trie_root[s[0]];
    for (size_t k = 0; node >= 0;) {
        int32_t tok = t->trie[node].token;
        if (tok >= 0 && (special || !(t->flags[tok] & COL_TOKF_SPECIAL)) &&
            !(t->flags[tok] & COL_TOKF_NORMALIZED) == !normalized) {
            best = tok;
            *len = k + 1;
        }
        if (++k >= n)
            break;
        node = t->trie[node].child;
        while (node >= 0 && t->trie[node].byte != s[k])
            node = t->trie[node].sibling;
    }
    return best;
}

static size_t space_at(const unsigned char *s, size_t n)
{
    uint32_t cp;
    size_t k = col_utf8_char(s, n, &cp);
    return k && col_unicode_space(cp) ? k : 0;
}

static size_t space_before(const unsigned char *s, size_t n)
{
    for (size_t k = 1; k <= 4 && k <= n; k++) {
        uint32_t cp;
        if (col_utf8_char(s + n - k, k, &cp) == k)
            return col_unicode_space(cp) ? k : 0;
    }
    return 0;
}

static col_status stretch(const col_tokenizer *t, col_tok_ctx *c, const char *s, size_t n, bool first, bool special,
                          col_err *err);

/* Cuts text[0..len) at the added tokens of one kind, as Hugging Face does:
 * first those matched in the raw text (each stretch between them is then
 * normalized: stretch()), then in each normalized stretch those matched in
 * normalized text (each piece between them goes to the pre-tokenizer).
 * first: the text starts the input. */
static col_status cut(const col_tokenizer *t, col_tok_ctx *c, const char *text, size_t len, bool normalized,
                      bool special, bool first, col_err *err)
{
    const unsigned char *u = (const unsigned char *)text;
    size_t seg = 0;
    col_status st = COL_OK;
    for (size_t p = 0; st == COL_OK && t->n_trie > 0 && p < len;) {
        size_t ml = 0;
        int32_t tok = t->trie_root[u[p]] < 0 ? -1 : match_added(t, u + p, len - p, special, normalized, &ml);
        if (tok < 0) {
            p++;
            continue;
        }
        size_t ms = p, me = p + ml, k;
        if (t->flags[tok] & COL_TOKF_LSTRIP)
            while (ms > seg && (k = space_before(u + seg, ms - seg)) > 0)
                ms -= k;
        if (t->flags[tok] & COL_TOKF_RSTRIP)
            while (me < len && (k = space_at(u + me, len - me)) > 0)
                me += k;
        bool at_start = first && seg == 0;
        st = normalized ? col_tok_words(t, c, text + seg, ms - seg, at_start, err)
                        : stretch(t, c, text + seg, ms - seg, at_start, special, err);
        if (st == COL_OK)
            st = col_tok_push_id(c, tok, err);
        seg = p = me;
    }
    if (st != COL_OK)
        return st;
    bool at_start = first && seg == 0;
    return normalized ? col_tok_words(t, c, text + seg, len - seg, at_start, err)
                      : stretch(t, c, text + seg, len - seg, at_start, special, err);
}

/* one stretch of raw text between added tokens */
static col_status stretch(const col_tokenizer *t, col_tok_ctx *c, const char *s, size_t n, bool first, bool special,
                          col_err *err)
{
    if (n == 0)
        return COL_OK;
    col_tbuf keep;
    col_status st = col_tok_normalize(t, s, n, first, &keep, &s, &n, err);
    if (st == COL_OK)
        st = t->norm_added ? cut(t, c, s, n, true, special, first, err) : col_tok_words(t, c, s, n, first, err);
    free(keep.p);
    return st;
}

col_status col_tok_encode_ex(const col_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                             size_t *n, col_err *err)
{
    *ids = NULL;
    *n = 0;
    if (!t || (!text && len))
        return col_err_set(err, COL_EINVAL, "col_tok_encode: no tokenizer or no text");
    col_tok_ctx *c = NULL;
    col_status st = col_tok_ctx_new(t, &c, err);
    if (st != COL_OK)
        return st;
    for (int i = 0; st == COL_OK && (flags & COL_TOK_ADD_SPECIAL) && i < t->n_prefix; i++)
        st = col_tok_push_id(c, t->prefix_ids[i], err);
    if (st == COL_OK)
        st = cut(t, c, text, len, false, flags & COL_TOK_PARSE_SPECIAL, true, err);
    for (int i = 0; st == COL_OK && (flags & COL_TOK_ADD_SPECIAL) && i < t->n_suffix; i++)
        st = col_tok_push_id(c, t->suffix_ids[i], err);
    if (st == COL_OK) {
        *ids = col_tok_ctx_take(c, n);
        if (!*ids && !(*ids = malloc(sizeof **ids)))
            st = col_err_set(err, COL_ENOMEM, "tokenizer: out of memory");
    }
    col_tok_ctx_free(c);
    return st;
}

col_status col_tok_encode(const col_tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
                          size_t *n, col_err *err)
{
    unsigned flags = COL_TOK_PARSE_SPECIAL | (add_special ? COL_TOK_ADD_SPECIAL : 0u);
    return col_tok_encode_ex(t, text, len, flags, ids, n, err);
}

col_status col_tok_encode_padded(const col_tokenizer *t, const char *text, size_t len, size_t length, int32_t *ids,
                                 size_t *n_text, col_err *err)
{
    if (n_text)
        *n_text = 0;
    if (!t || (!text && len) || !ids)
        return col_err_set(err, COL_EINVAL, "col_tok_encode_padded: no tokenizer, text or output array");
    size_t fixed = (size_t)t->n_prefix + (size_t)t->n_suffix;
    if (length < fixed || length == 0)
        return col_err_set(err, COL_EINVAL, "col_tok_encode_padded: a length of %zu leaves no room for the text "
                           "between the %zu special tokens", length, fixed);
    int32_t *all;
    size_t n;
    col_status st = col_tok_encode_ex(t, text, len, COL_TOK_PARSE_SPECIAL, &all, &n, err);
    if (st != COL_OK)
        return st;
    size_t keep = n < length - fixed ? n : length - fixed, k = 0;
    if (keep < length - fixed && t->pad_id < 0) {
        free(all);
        return col_err_set(err, COL_EINVAL, "col_tok_encode_padded: the tokenizer has no pad token to fill %zu "
                           "places", length - fixed - keep);
    }
    for (int i = 0; i < t->n_prefix; i++)
        ids[k++] = t->prefix_ids[i];
    memcpy(ids + k, all, keep * sizeof *ids);
    k += keep;
    for (int i = 0; i < t->n_suffix; i++)
        ids[k++] = t->suffix_ids[i];
    while (k < length)
        ids[k++] = t->pad_id;
    free(all);
    if (n_text)
        *n_text = n;
    return COL_OK;
}
