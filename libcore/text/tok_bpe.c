/* tok_bpe.c - the BPE model: hash maps for token strings and merge ranks,
 * reading the merges, the merge loop, and the per-call encoding context with
 * its word cache that turns one word into ids (col_tok_word). Calls only
 * tok_util.c.
 *
 * The merge loop is Hugging Face's (tokenizers/src/models/bpe/word.rs): the
 * word's symbols form a linked list, candidate pairs sit in a min-heap
 * ordered by (rank, position), and a popped pair is applied only if the two
 * symbols are still neighbours with the same merge: O(n log n) per word, so
 * a 1 MB word without spaces is not quadratic. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

/* ---- string -> id ---- */

col_status col_strmap_init(col_strmap *m, size_t n_keys, col_err *err)
{
    size_t cap = pow2_at_least(2 * n_keys + 1);
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots)
        return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory for a map of %zu tokens", n_keys);
    m->mask = cap - 1;
    return COL_OK;
}

/* memcmp(a, b, n) == 0 without a call for short keys */
static inline bool bytes_eq(const char *a, const char *b, size_t n)
{
    uint64_t x, y, u, v;
    if (n >= 8 && n <= 16) {
        memcpy(&x, a, 8), memcpy(&y, b, 8), memcpy(&u, a + n - 8, 8), memcpy(&v, b + n - 8, 8);
        return x == y && u == v;
    }
    if (n >= 4 && n < 8) {
        uint32_t p, q, r, w;
        memcpy(&p, a, 4), memcpy(&q, b, 4), memcpy(&r, a + n - 4, 4), memcpy(&w, b + n - 4, 4);
        return p == q && r == w;
    }
    if (n < 4) {
        for (size_t i = 0; i < n; i++)
            if (a[i] != b[i])
                return false;
        return true;
    }
    return memcmp(a, b, n) == 0;
}

static int32_t strmap_find(const col_strmap *m, const char *s, size_t n, uint64_t h, uint64_t **slot)
{
    uint64_t tag = h >> 32 << 32;
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        uint64_t v = m->slots[i];
        if (v == 0) {
            *slot = &m->slots[i];
            return -1;
        }
        if ((v & 0xFFFFFFFF00000000ull) == tag) {
            int32_t id = (int32_t)(uint32_t)v - 1;
            if (m->len[id] == n && bytes_eq(m->arena + m->off[id], s, n)) {
                *slot = &m->slots[i];
                return id;
            }
        }
    }
}

int32_t col_strmap_put(col_strmap *m, int32_t id)
{
    const char *s = m->arena + m->off[id];
    size_t n = m->len[id];
    uint64_t h = col_tok_hash(s, n), *slot;
    int32_t old = strmap_find(m, s, n, h, &slot);
    if (old >= 0)
        return old;
    *slot = (h >> 32 << 32) | ((uint64_t)id + 1);
    return -1;
}

int32_t col_strmap_get(const col_strmap *m, const char *s, size_t n)
{
    if (!m->slots)
        return -1;
    uint64_t *slot;
    return strmap_find(m, s, n, col_tok_hash(s, n), &slot);
}

void col_strmap_free(col_strmap *m)
{
    free(m->slots);
    m->slots = NULL;
}

/* ---- (left, right) -> (rank, merged) ---- */

static uint64_t pair_key(int32_t a, int32_t b)
{
    return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static uint64_t pair_hash(uint64_t k)
{
    k *= 0x9E3779B97F4A7C15ull;
    return k ^ (k >> 31);
}

col_status col_mergemap_init(col_mergemap *m, size_t n, col_err *err)
{
    size_t cap = pow2_at_least(n + n / 2 + 1); /* load <= 2/3 */
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots)
        return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory for %zu merges", n);
    for (size_t i = 0; i < cap; i++)
        m->slots[i].rank = -1;
    m->mask = cap - 1;
    return COL_OK;
}

void col_mergemap_put(col_mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    uint64_t k = pair_key(a, b);
    for (uint64_t i = pair_hash(k) & m->mask;; i = (i + 1) & m->mask) {
        col_merge_slot *s = &m->slots[i];
        if (s->rank < 0 || s->key == k) {
            s->key = k;
            s->rank = rank;
            s->id = id;
            return;
        }
    }
}

const col_merge_slot *col_mergemap_get(const col_mergemap *m, int32_t a, int32_t b)
{
    if (!m->slots)
        return NULL;
    uint64_t k = pair_key(a, b);
    for (uint64_t i = pair_hash(k) & m->mask;; i = (i + 1) & m->mask) {
        const col_merge_slot *s = &m->slots[i];
        if (s->rank < 0)
            return NULL;
        if (s->key == k)
            return s;
    }
}

void col_mergemap_free(col_mergemap *m)
{
    free(m->slots);
    m->slots = NULL;
}

/* ---- reading merges (tokenizer.json's array, merges.txt) ---- */

typedef struct {
    char *p;
    size_t cap;
} scratch;

static col_status add_merge(col_tokenizer *t, const char *a, size_t al, const char *b, size_t bl, int32_t rank,
                            scratch *sc, const char *name, col_err *err)
{
    char s1[64], s2[64], s3[64];
    if (al + bl > sc->cap) {
        size_t cap = 2 * (al + bl) + 64;
        char *p = realloc(sc->p, cap);
        if (!p)
            return col_tok_fail(err, COL_ENOMEM, name, "out of memory");
        sc->p = p;
        sc->cap = cap;
    }
    memcpy(sc->p, a, al);
    memcpy(sc->p + al, b, bl);
    int32_t ia = col_strmap_get(&t->by_name, a, al), ib = col_strmap_get(&t->by_name, b, bl),
            ic = col_strmap_get(&t->by_name, sc->p, al + bl);
    if (ia < 0 || ib < 0 || ic < 0) {
        const char *bad = ia < 0 ? a : ib < 0 ? b : sc->p;
        size_t badl = ia < 0 ? al : ib < 0 ? bl : al + bl;
        return col_tok_fail(err, COL_EFORMAT, name, "merge %d ('%s' '%s') uses '%s', which is not in the vocabulary",
                            rank + 1, col_tok_show(a, al, s1), col_tok_show(b, bl, s2), col_tok_show(bad, badl, s3));
    }
    col_mergemap_put(&t->merges, ia, ib, rank, ic);
    return COL_OK;
}

col_status col_tok_json_merges(col_tokenizer *t, const cJSON *merges, const char *name, col_err *err)
{
    char s1[64];
    if (!cJSON_IsArray(merges))
        return col_tok_fail(err, COL_EFORMAT, name, "model.merges is not an array");
    int n = cJSON_GetArraySize(merges);
    col_status st = col_mergemap_init(&t->merges, (size_t)n, err);
    scratch sc = {0};
    int32_t rank = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, merges) {
        if (st != COL_OK)
            break;
        const char *a, *b;
        size_t al, bl;
        if (cJSON_IsString(x)) {
            const char *sp = strchr(x->valuestring, ' ');
            if (!sp) {
                st = col_tok_fail(err, COL_EFORMAT, name, "merge %d ('%s') is not two tokens separated by a space",
                                  rank + 1, col_tok_show(x->valuestring, strlen(x->valuestring), s1));
                break;
            }
            a = x->valuestring, al = (size_t)(sp - a), b = sp + 1, bl = strlen(b);
        } else if (cJSON_GetArraySize(x) == 2 && cJSON_IsString(x->child) && cJSON_IsString(x->child->next)) {
            a = x->child->valuestring, al = strlen(a), b = x->child->next->valuestring, bl = strlen(b);
        } else {
            st = col_tok_fail(err, COL_EFORMAT, name, "merge %d is neither \"a b\" nor [\"a\", \"b\"]", rank + 1);
            break;
        }
        st = add_merge(t, a, al, b, bl, rank++, &sc, name, err);
    }
    free(sc.p);
    return st;
}

col_status col_tok_text_merges(col_tokenizer *t, const char *text, size_t len, const char *name, col_err *err)
{
    char s1[64];
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    col_status st = col_mergemap_init(&t->merges, lines, err);
    scratch sc = {0};
    int32_t rank = 0;
    size_t lineno = 0;
    for (const char *p = text, *end = text + len; p < end && st == COL_OK;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        lineno++;
        size_t n = (size_t)(e - p);
        if (n && p[n - 1] == '\r')
            n--;
        if (n > 0 && !(lineno == 1 && n >= 8 && memcmp(p, "#version", 8) == 0)) {
            const char *sp = memchr(p, ' ', n);
            if (!sp || memchr(sp + 1, ' ', (size_t)(p + n - sp - 1)))
                st = col_tok_fail(err, COL_EFORMAT, name, "line %zu ('%s') is not two tokens separated by a space",
                                  lineno, col_tok_show(p, n, s1));
            else
                st = add_merge(t, p, (size_t)(sp - p), sp + 1, (size_t)(p + n - sp - 1), rank++, &sc, name, err);
        }
        p = e + 1;
    }
    free(sc.p);
    return st;
}

/* ---- the merge loop ---- */

/* heap of (rank << 32 | position), smallest first */
static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m)
            break;
        if (c + 1 < m && h[c + 1] < h[c])
            c++;
        if (v <= h[c])
            break;
        h[i] = h[c];
        i = c;
    }
    if (m)
        h[i] = v;
    return top;
}

static void push_pair(const col_mergemap *mm, uint64_t *heap, size_t *hn, const int32_t *id, int32_t l, int32_t r)
{
    const col_merge_slot *s = col_mergemap_get(mm, id[l], id[r]);
    if (s)
        heap_push(heap, hn, (uint64_t)(uint32_t)s->rank << 32 | (uint32_t)l);
}

/* Merges id[0..n) in place; returns the number of symbols left. prv, nxt:
 * n entries; heap: 3n entries. */
static size_t bpe_merge(const col_mergemap *mm, int32_t *id, int32_t *prv, int32_t *nxt, uint64_t *heap, size_t n)
{
    if (n < 2)
        return n;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        prv[i] = (int32_t)i - 1;
        nxt[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(mm, heap, &hn, id, (int32_t)i, (int32_t)i + 1);
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        int32_t pos = (int32_t)(uint32_t)top, rank = (int32_t)(top >> 32);
        int32_t r = nxt[pos];
        if (id[pos] < 0 || r < 0)
            continue;
        const col_merge_slot *s = col_mergemap_get(mm, id[pos], id[r]);
        if (!s || s->rank != rank)
            continue;
        id[pos] = s->id;
        id[r] = -1;
        nxt[pos] = nxt[r];
        if (nxt[r] >= 0)
            prv[nxt[r]] = pos;
        if (prv[pos] >= 0)
            push_pair(mm, heap, &hn, id, prv[pos], pos);
        if (nxt[pos] >= 0)
            push_pair(mm, heap, &hn, id, pos, nxt[pos]);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = nxt[i])
        id[k++] = id[i];
    return k;
}

/* ---- encoding context ---- */

#define CACHE_MAX_WORD 64
#define CACHE_MAX_ENTRIES (1u << 16)

typedef struct {
    uint32_t tag;             /* high half of the hash */
    uint16_t key_len, n_ids;  /* key_len 0: empty */
    uint32_t key_off, ids_off;
} cache_ent;

struct col_tok_ctx {
    const col_tokenizer *t;
    int32_t *out;
    size_t n_out, cap_out;
    int32_t *sym, *prv, *nxt;
    uint64_t *heap;
    size_t cap_sym;
    cache_ent *ce;
    size_t ce_mask, ce_n;
    char *ck;
    size_t ck_n, ck_cap;
    int32_t *cv;
    size_t cv_n, cv_cap;
};

col_status col_tok_ctx_new(const col_tokenizer *t, col_tok_ctx **out, col_err *err)
{
    col_tok_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory");
    c->t = t;
    c->cap_out = 64;
    c->out = malloc(c->cap_out * sizeof *c->out);
    if (!c->out) {
        free(c);
        return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory");
    }
    *out = c;
    return COL_OK;
}

void col_tok_ctx_free(col_tok_ctx *c)
{
    if (!c)
        return;
    free(c->out);
    free(c->sym);
    free(c->prv);
    free(c->nxt);
    free(c->heap);
    free(c->ce);
    free(c->ck);
    free(c->cv);
    free(c);
}

int32_t *col_tok_ctx_take(col_tok_ctx *c, size_t *n)
{
    int32_t *ids = c->out;
    *n = c->n_out;
    c->out = NULL;
    c->n_out = c->cap_out = 0;
    return ids;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem)
            return false;
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

static col_status push_ids(col_tok_ctx *c, const int32_t *ids, size_t n, col_err *err)
{
    if (!grow((void **)&c->out, &c->cap_out, c->n_out + n, sizeof *c->out))
        return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory for %zu ids", c->n_out + n);
    memcpy(c->out + c->n_out, ids, n * sizeof *ids);
    c->n_out += n;
    return COL_OK;
}

col_status col_tok_push_id(col_tok_ctx *c, int32_t id, col_err *err)
{
    return push_ids(c, &id, 1, err);
}

static const cache_ent *cache_get(const col_tok_ctx *c, const char *s, size_t n, uint64_t h)
{
    if (!c->ce)
        return NULL;
    for (size_t i = h & c->ce_mask;; i = (i + 1) & c->ce_mask) {
        const cache_ent *e = &c->ce[i];
        if (e->key_len == 0)
            return NULL;
        if (e->tag == (uint32_t)(h >> 32) && e->key_len == n && bytes_eq(c->ck + e->key_off, s, n))
            return e;
    }
}

/* best effort: a full or failed cache only costs speed */
static void cache_put(col_tok_ctx *c, const char *s, size_t n, uint64_t h, const int32_t *ids, size_t k)
{
    if (c->ce_n >= CACHE_MAX_ENTRIES)
        return;
    if (!c->ce || 2 * (c->ce_n + 1) > c->ce_mask + 1) { /* (re)build at twice the size */
        size_t cap = c->ce ? 2 * (c->ce_mask + 1) : 1024;
        cache_ent *ne = calloc(cap, sizeof *ne);
        if (!ne)
            return;
        for (size_t i = 0; c->ce && i <= c->ce_mask; i++) {
            if (c->ce[i].key_len == 0)
                continue;
            size_t j = col_tok_hash(c->ck + c->ce[i].key_off, c->ce[i].key_len) & (cap - 1);
            while (ne[j].key_len)
                j = (j + 1) & (cap - 1);
            ne[j] = c->ce[i];
        }
        free(c->ce);
        c->ce = ne;
        c->ce_mask = cap - 1;
    }
    if (!grow((void **)&c->ck, &c->ck_cap, c->ck_n + n, 1) ||
        !grow((void **)&c->cv, &c->cv_cap, c->cv_n + k, sizeof *c->cv))
        return;
    size_t i = h & c->ce_mask;
    while (c->ce[i].key_len)
        i = (i + 1) & c->ce_mask;
    c->ce[i] = (cache_ent){(uint32_t)(h >> 32), (uint16_t)n, (uint16_t)k, (uint32_t)c->ck_n, (uint32_t)c->cv_n};
    memcpy(c->ck + c->ck_n, s, n);
    memcpy(c->cv + c->cv_n, ids, k * sizeof *ids);
    c->ck_n += n;
    c->cv_n += k;
    c->ce_n++;
}

/* initial symbols of a SentencePiece-style word: one per character, with
 * byte fallback or <unk> for characters not in the vocabulary */
static col_status spm_symbols(col_tok_ctx *c, const char *s, size_t n, size_t *ns, col_err *err)
{
    const col_tokenizer *t = c->t;
    const unsigned char *u = (const unsigned char *)s;
    size_t k = 0;
    bool last_unk = false;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t len = col_utf8_char(u + i, n - i, &cp);
        if (len == 0)
            len = 1;
        int32_t id = col_strmap_get(&t->by_name, s + i, len);
        if (id >= 0) {
            c->sym[k++] = id;
            last_unk = false;
        } else {
            bool fb = t->byte_fallback;
            for (size_t j = 0; fb && j < len; j++)
                fb = t->byte_id[u[i + j]] >= 0;
            if (fb) {
                for (size_t j = 0; j < len; j++)
                    c->sym[k++] = t->byte_id[u[i + j]];
                last_unk = false;
            } else if (t->unk_id >= 0) {
                if (!(t->fuse_unk && last_unk))
                    c->sym[k++] = t->unk_id;
                last_unk = true;
            } else if (len == 1 && u[i] >= 0x80) {
                return col_err_set(err, COL_EINVAL,
                                   "tokenizer: cannot encode byte 0x%02X: no byte fallback and no unk token", u[i]);
            } else {
                return col_err_set(err, COL_EINVAL,
                                   "tokenizer: cannot encode U+%04X: not in the vocabulary, no byte fallback and no "
                                   "unk token", (unsigned)cp);
            }
        }
        i += len;
    }
    *ns = k;
    return COL_OK;
}

col_status col_tok_word(void *ctx, const char *s, size_t n, col_err *err)
{
    col_tok_ctx *c = ctx;
    const col_tokenizer *t = c->t;
    const col_strmap *keys = t->byte_level ? &t->by_key : &t->by_name;
    if (n == 0)
        return COL_OK;
    uint64_t h = col_tok_hash(s, n), *slot;
    bool cache = n <= CACHE_MAX_WORD;
    if (cache) {
        const cache_ent *e = cache_get(c, s, n, h);
        if (e)
            return push_ids(c, c->cv + e->ids_off, e->n_ids, err);
    }
    if (t->ignore_merges) {
        int32_t id = strmap_find(keys, s, n, h, &slot);
        if (id >= 0) {
            if (cache)
                cache_put(c, s, n, h, &id, 1);
            return push_ids(c, &id, 1, err);
        }
    }
    if (n > (size_t)INT32_MAX / 4)
        return col_err_set(err, COL_EINVAL, "tokenizer: a word of %zu bytes is too long", n);
    /* a word has at most n symbols (one per byte) */
    size_t cap = c->cap_sym;
    if (n > cap) {
        size_t nc = cap ? cap : 64;
        while (nc < n)
            nc *= 2;
        int32_t *a = realloc(c->sym, nc * sizeof *a);
        if (a)
            c->sym = a;
        int32_t *b = realloc(c->prv, nc * sizeof *b);
        if (b)
            c->prv = b;
        int32_t *d = realloc(c->nxt, nc * sizeof *d);
        if (d)
            c->nxt = d;
        uint64_t *hp = realloc(c->heap, 3 * nc * sizeof *hp);
        if (hp)
            c->heap = hp;
        if (!a || !b || !d || !hp)
            return col_err_set(err, COL_ENOMEM, "tokenizer: out of memory for a word of %zu bytes", n);
        c->cap_sym = nc;
    }
    size_t ns = n;
    if (t->byte_level) {
        const unsigned char *u = (const unsigned char *)s;
        for (size_t i = 0; i < n; i++)
            c->sym[i] = t->byte_id[u[i]];
        if (t->eow_len) /* CLIP: the word's last symbol carries the end-of-word suffix */
            c->sym[n - 1] = t->byte_id_eow[u[n - 1]];
    } else {
        col_status st = spm_symbols(c, s, n, &ns, err);
        if (st != COL_OK)
            return st;
    }
    ns = bpe_merge(&t->merges, c->sym, c->prv, c->nxt, c->heap, ns);
    if (cache)
        cache_put(c, s, n, h, c->sym, ns);
    return push_ids(c, c->sym, ns, err);
}
