/* tok_encode.c - col_tok_encode: added tokens are found in the raw text
 * first (a byte trie, leftmost longest); each stretch of text between them
 * is normalized and cut into words (tok_pretok.c), each word goes through
 * BPE (tok_bpe.c); the post-processor's ids go around the result. Calls
 * tok_pretok.c, tok_bpe.c and tok_util.c. */
#include <stdlib.h>

#include "tok_internal.h"

/* the longest added token at s[0..n) that flags allow, or -1 */
static int32_t match_added(const col_tokenizer *t, const unsigned char *s, size_t n, bool special, size_t *len)
{
    int32_t best = -1;
    int32_t node = t->trie_root[s[0]];
    for (size_t k = 0; node >= 0;) {
        int32_t tok = t->trie[node].token;
        if (tok >= 0 && (special || !(t->flags[tok] & COL_TOKF_SPECIAL))) {
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
    const unsigned char *u = (const unsigned char *)text;
    bool special = flags & COL_TOK_PARSE_SPECIAL;
    size_t seg = 0;
    for (size_t p = 0; st == COL_OK && t->n_trie > 0 && p < len;) {
        size_t ml = 0;
        int32_t tok = t->trie_root[u[p]] < 0 ? -1 : match_added(t, u + p, len - p, special, &ml);
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
        st = col_tok_segment(t, c, text + seg, ms - seg, seg == 0, err);
        if (st == COL_OK)
            st = col_tok_push_id(c, tok, err);
        seg = p = me;
    }
    if (st == COL_OK)
        st = col_tok_segment(t, c, text + seg, len - seg, seg == 0, err);
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
