/* dataset.c - training data: llm.c token files, plain text and .jsonl chat
 * conversations turned into one token stream (+ loss mask), and the batches
 * cut from it. See dataset.h. */
#include "dataset.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rng.h"
#include "textio.h"

struct col_dataset {
    int32_t *tokens;      /* [n], or NULL for a mapped token file */
    uint8_t *mask;        /* [n] or NULL: all trained */
    size_t n, n_train;
    int64_t n_conv, n_val_conv;
    /* a mapped llm.c token file (tokens == NULL): */
    void *map;                 /* the whole file, map_len bytes */
    size_t map_len;
    const unsigned char *body; /* the tokens: map + the header */
    size_t tsize;              /* 2 or 4 bytes a token */
    uint32_t limit;            /* every token is below it (checked at load, and again as read) */
    uint64_t hash;             /* col_dataset_hash, computed at load */
    char *path;                /* for messages */
};

/* ---- a growing token stream ---- */

typedef struct {
    int32_t *ids;
    uint8_t *mask;
    size_t n, cap;
} stream;

static col_status stream_push(stream *s, const int32_t *ids, size_t n, bool train, col_err *err)
{
    if (s->n + n > s->cap) {
        size_t cap = s->cap ? s->cap : 1024;
        while (cap < s->n + n)
            cap *= 2;
        int32_t *ni = realloc(s->ids, cap * sizeof *ni);
        if (ni)
            s->ids = ni;
        uint8_t *nm = realloc(s->mask, cap);
        if (nm)
            s->mask = nm;
        if (!ni || !nm)
            return col_err_set(err, COL_ENOMEM, "dataset: out of memory for %zu tokens", s->n + n);
        s->cap = cap;
    }
    memcpy(s->ids + s->n, ids, n * sizeof *ids);
    memset(s->mask + s->n, train ? 1 : 0, n);
    s->n += n;
    return COL_OK;
}

/* ---- chat templates ---- */

struct col_chat_out {
    const col_tokenizer *tok;
    stream *s;
};

const char *col_chat_role_name(col_chat_role r)
{
    switch (r) {
    case COL_ROLE_SYSTEM: return "system";
    case COL_ROLE_USER: return "user";
    case COL_ROLE_ASSISTANT: return "assistant";
    }
    return NULL;
}

static col_status emit(col_chat_out *out, const char *text, size_t len, unsigned flags, bool train, col_err *err)
{
    if (len == 0)
        return COL_OK;
    int32_t *ids = NULL;
    size_t n = 0;
    col_status st = col_tok_encode_ex(out->tok, text, len, flags, &ids, &n, err);
    if (st == COL_OK)
        st = stream_push(out->s, ids, n, train, err);
    free(ids);
    return st;
}

col_status col_chat_emit_text(col_chat_out *out, const char *text, size_t len, bool train, col_err *err)
{
    return emit(out, text, len, COL_TOK_PARSE_SPECIAL, train, err);
}

col_status col_chat_emit_content(col_chat_out *out, const char *text, size_t len, bool train, col_err *err)
{
    return emit(out, text, len, 0, train, err);
}

col_status col_chat_emit_id(col_chat_out *out, int32_t id, bool train, col_err *err)
{
    if (id < 0 || id >= col_tok_vocab_size(out->tok))
        return col_err_set(err, COL_EINVAL, "chat template: token id %d outside [0, %d)", (int)id,
                           (int)col_tok_vocab_size(out->tok));
    return stream_push(out->s, &id, 1, train, err);
}

static col_status chatml_render(void *user, const col_chat_msg *m, col_chat_out *out, col_err *err)
{
    (void)user;
    // <|im_start|>{role}\n  (never trained)
    const char *role = col_chat_role_name(m->role);
    char head[64];
    int hl = snprintf(head, sizeof head, "<|im_start|>%s\n", role);
    col_status st = col_chat_emit_text(out, head, (size_t)hl, false, err);
    // {content}<|im_end|>  (trained for the assistant)
    bool train = m->role == COL_ROLE_ASSISTANT;
    if (st == COL_OK)
        st = col_chat_emit_content(out, m->content, m->content_len, train, err);
    if (st == COL_OK)
        st = col_chat_emit_text(out, "<|im_end|>", 10, train, err);
    // \n  (never trained)
    if (st == COL_OK)
        st = col_chat_emit_text(out, "\n", 1, false, err);
    return st;
}

static const col_chat_template chatml = {"chatml", chatml_render, NULL};

const col_chat_template *col_chat_template_chatml(void) { return &chatml; }

/* ---- file kinds ---- */

enum { LLMC_MAGIC16 = 20240520, LLMC_MAGIC32 = 20240801, LLMC_HEADER = 256 };

static uint32_t rd_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t rd_tok(const unsigned char *p, size_t tsize)
{
    return tsize == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : rd_u32(p);
}

/* FNV-1a 64 over a token's 4 little-endian bytes (col_dataset_hash) */
static const uint64_t fnv_basis = 0xcbf29ce484222325ull;
static uint64_t fnv_tok(uint64_t h, uint32_t v)
{
    for (int b = 0; b < 4; b++) {
        h ^= (v >> (8 * b)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The extension of path ignoring a compression suffix: ".bin" for
 * "x.bin.gz"; "" when none. */
static void base_ext(const char *path, char out[16])
{
    static const char *const comp[] = {".gz", ".xz", ".zst", ".bz2", ".lz4", ".lzma"};
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    size_t len = strlen(name);
    for (size_t i = 0; i < sizeof comp / sizeof comp[0]; i++) {
        size_t cl = strlen(comp[i]);
        if (len > cl && strcmp(name + len - cl, comp[i]) == 0) {
            len -= cl;
            break;
        }
    }
    out[0] = 0;
    for (size_t i = len; i-- > 0;) {
        if (name[i] == '.') {
            size_t el = len - i;
            if (el < 16) {
                memcpy(out, name + i, el);
                out[el] = 0;
            }
            return;
        }
    }
}

/* Checks an llm.c header against the file's length len: buf holds the first
 * min(len, 1024) bytes. Sets *tsize (2 or 4) and *count. */
static col_status llmc_header(const char *path, const unsigned char *buf, size_t len, size_t *tsize_out,
                              uint32_t *count_out, col_err *err)
{
    if (len < LLMC_HEADER * 4)
        return col_err_set(err, COL_EFORMAT, "%s: llm.c token file truncated: %zu bytes, the header alone is %d",
                           path, len, LLMC_HEADER * 4);
    uint32_t magic = rd_u32(buf), version = rd_u32(buf + 4), count = rd_u32(buf + 8);
    size_t tsize;
    if (magic == LLMC_MAGIC16) {
        tsize = 2;
        if (version != 1)
            return col_err_set(err, COL_EFORMAT, "%s: llm.c token file version %u, expected 1 for uint16 tokens",
                               path, version);
    } else if (magic == LLMC_MAGIC32) {
        tsize = 4;
        if (version != 2 && version != 7)
            return col_err_set(err, COL_EFORMAT,
                               "%s: llm.c token file version %u, expected 2 or 7 for uint32 tokens", path, version);
    } else {
        return col_err_set(err, COL_EFORMAT, "%s: bad llm.c magic %u (expected %d or %d)", path, magic,
                           LLMC_MAGIC16, LLMC_MAGIC32);
    }
    size_t body = len - LLMC_HEADER * 4;
    if (body % tsize != 0 || body / tsize != count) {
        if (body / tsize < count)
            return col_err_set(err, COL_EFORMAT,
                               "%s: llm.c token file truncated: header says %u tokens, the file holds %zu bytes of "
                               "tokens (%zu expected)", path, count, body, (size_t)count * tsize);
        return col_err_set(err, COL_EFORMAT,
                           "%s: llm.c token count mismatch: header says %u tokens (%zu bytes), the file holds %zu "
                           "bytes after the header", path, count, (size_t)count * tsize, body);
    }
    *tsize_out = tsize;
    *count_out = count;
    return COL_OK;
}

/* The largest token + 1 allowed for vocab (0: any int32). */
static uint32_t tok_limit(int32_t vocab) { return vocab > 0 ? (uint32_t)vocab : (uint32_t)INT32_MAX + 1; }

static col_status bad_token(const char *path, size_t i, uint32_t v, int32_t vocab, col_err *err)
{
    return col_err_set(err, COL_EFORMAT, "%s: token %zu is %u, outside the vocabulary [0, %d)", path, i, v,
                       vocab > 0 ? (int)vocab : INT32_MAX);
}

/* llm.c token file in buf[0..len) -> s (mask all ones). */
static col_status load_llmc(const char *path, const unsigned char *buf, size_t len, int32_t vocab, stream *s,
                            col_err *err)
{
    size_t tsize;
    uint32_t count;
    col_status st = llmc_header(path, buf, len, &tsize, &count, err);
    if (st != COL_OK)
        return st;
    s->ids = malloc((count ? count : 1) * sizeof *s->ids);
    s->mask = malloc(count ? count : 1);
    if (!s->ids || !s->mask)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory for %u tokens", path, count);
    s->n = s->cap = count;
    memset(s->mask, 1, count);
    const unsigned char *p = buf + LLMC_HEADER * 4;
    for (size_t i = 0; i < count; i++) {
        uint32_t v = rd_tok(p + tsize * i, tsize);
        if (v >= tok_limit(vocab))
            return bad_token(path, i, v, vocab, err);
        s->ids[i] = (int32_t)v;
    }
    return COL_OK;
}

/* ---- uncompressed llm.c token files, mapped ---- */

/* The load checks the file in slices (a multiple of the page size and of 4:
 * no token straddles two), dropping each after: it holds one slice at most. */
enum { SCAN_SLICE = 1 << 24, RELEASE_ALIGN = 1 << 21 };

/* Maps path into ds if it is an uncompressed llm.c token file (the magic in
 * its first 4 bytes; else *mapped is false, nothing done: col_read_file reads
 * it, or says why it cannot). The header is checked against the size before
 * mapping, every token against the vocabulary in one pass that also hashes.
 * Limits: a file shortened by another process after the size check raises
 * SIGBUS on a read past its new end; only a process-wide signal handler could
 * catch that, which a library must not install. The load refuses a file that
 * changed (size, mtime, inode) while it was checked; batches check tokens
 * again, so a file rewritten later gives an error, never an out-of-range
 * token; other changes to a loaded file are read as they are. */
static col_status map_llmc(const char *path, int32_t vocab, col_dataset *ds, bool *mapped, col_err *err)
{
    *mapped = false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return COL_OK;
    unsigned char head[LLMC_HEADER * 4];
    struct stat sb, sa = {0};
    ssize_t got = 0;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size <= SIZE_MAX)
        got = pread(fd, head, sizeof head, 0);
    uint32_t magic = got >= 4 ? rd_u32(head) : 0;
    if (magic != LLMC_MAGIC16 && magic != LLMC_MAGIC32) {
        close(fd);
        return COL_OK;
    }
    *mapped = true;
    size_t len = (size_t)sb.st_size, tsize = 0;
    uint32_t count = 0;
    col_status st;
    if ((size_t)got < (len < sizeof head ? len : sizeof head))
        st = col_err_set(err, COL_EIO, "%s: changed while being read (shorter than its size)", path);
    else
        st = llmc_header(path, head, len, &tsize, &count, err);
    if (st == COL_OK && count == 0)
        st = col_err_set(err, COL_EFORMAT, "%s: no tokens", path);
    void *map = MAP_FAILED;
    if (st == COL_OK && (map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
        st = col_err_set(err, COL_EIO, "%s: cannot map the file: %s", path, strerror(errno));
    if (st != COL_OK) {
        close(fd);
        return st;
    }
    const unsigned char *p = map;
    uint32_t limit = tok_limit(vocab);
    uint64_t h = fnv_basis;
    madvise(map, len, MADV_SEQUENTIAL);
    size_t i = 0;
    for (size_t off = 0; off < len && st == COL_OK; off += SCAN_SLICE) {
        size_t end = len - off > SCAN_SLICE ? off + SCAN_SLICE : len;
        for (size_t b = off < LLMC_HEADER * 4 ? LLMC_HEADER * 4 : off; b < end; b += tsize, i++) {
            uint32_t v = rd_tok(p + b, tsize);
            if (v >= limit) {
                st = bad_token(path, i, v, vocab, err);
                break;
            }
            h = fnv_tok(h, v);
        }
        /* clean pages of a private mapping: read from the file again if touched */
        madvise((void *)(p + off), end - off, MADV_DONTNEED);
    }
    madvise(map, len, MADV_NORMAL);
    if (st == COL_OK && (fstat(fd, &sa) != 0 || sa.st_size != sb.st_size || sa.st_ino != sb.st_ino ||
                         sa.st_mtim.tv_sec != sb.st_mtim.tv_sec || sa.st_mtim.tv_nsec != sb.st_mtim.tv_nsec))
        st = col_err_set(err, COL_EIO, "%s: changed while being read (%lld bytes, now %lld): load it again", path,
                         (long long)sb.st_size, (long long)sa.st_size);
    close(fd);
    if (st == COL_OK && !(ds->path = strdup(path)))
        st = col_err_set(err, COL_ENOMEM, "%s: out of memory", path);
    if (st != COL_OK) {
        munmap(map, len);
        return st;
    }
    ds->map = map;
    ds->map_len = len;
    ds->body = p + LLMC_HEADER * 4;
    ds->tsize = tsize;
    ds->limit = limit;
    ds->hash = h;
    ds->n = count;
    return COL_OK;
}

static col_status load_text(const char *path, const char *buf, size_t len, const col_tokenizer *tok, stream *s,
                            col_err *err)
{
    int32_t *ids = NULL;
    size_t n = 0;
    col_status st = col_tok_encode_ex(tok, buf, len, 0, &ids, &n, err);
    if (st != COL_OK) {
        char msg[COL_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        return col_err_set(err, st, "%s: %s", path, msg);
    }
    s->ids = ids;
    s->n = s->cap = n;
    s->mask = malloc(n ? n : 1);
    if (!s->mask)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory for %zu tokens", path, n);
    memset(s->mask, 1, n);
    return COL_OK;
}

/* One .jsonl line (text[0..len), not NUL-terminated) -> tokens appended to
 * s. Returns COL_OK with *skip set for a blank line. */
static col_status chat_line(const char *path, long lineno, const char *text, size_t len, const col_tokenizer *tok,
                            const col_chat_template *tmpl, stream *s, bool *skip, col_err *err)
{
    *skip = false;
    size_t a = 0;
    while (a < len && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r'))
        a++;
    if (a == len) {
        *skip = true;
        return COL_OK;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root)
        return col_err_set(err, COL_EFORMAT, "%s:%ld: not valid JSON", path, lineno);
    col_status st = COL_OK;
    for (const char *p = end; p < text + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != 0) {
            st = col_err_set(err, COL_EFORMAT, "%s:%ld: not valid JSON (text after the object)", path, lineno);
            goto out;
        }
    const cJSON *msgs = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "messages") : NULL;
    if (!cJSON_IsArray(msgs)) {
        st = col_err_set(err, COL_EFORMAT, "%s:%ld: no \"messages\" array", path, lineno);
        goto out;
    }
    int nm = cJSON_GetArraySize(msgs);
    if (nm == 0) {
        st = col_err_set(err, COL_EFORMAT, "%s:%ld: empty \"messages\" array", path, lineno);
        goto out;
    }
    // check every message before rendering any
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs)
    {
        const cJSON *role = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
        const cJSON *content = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "content") : NULL;
        if (!cJSON_IsObject(m)) {
            st = col_err_set(err, COL_EFORMAT, "%s:%ld: message %d is not an object", path, lineno, i);
            goto out;
        }
        if (!cJSON_IsString(role) || (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "user") &&
                                      strcmp(role->valuestring, "assistant"))) {
            char shown[48];
            snprintf(shown, sizeof shown, "%s", cJSON_IsString(role) ? role->valuestring : "(not a string)");
            st = col_err_set(err, COL_EFORMAT,
                             "%s:%ld: message %d has unknown role \"%s\" (expected system, user or assistant)", path,
                             lineno, i, role ? shown : "(missing)");
            goto out;
        }
        if (!cJSON_IsString(content)) {
            st = col_err_set(err, COL_EFORMAT, "%s:%ld: message %d content is %s", path, lineno, i,
                             content ? "not a string" : "missing");
            goto out;
        }
        i++;
    }
    col_chat_out co = {tok, s};
    i = 0;
    cJSON_ArrayForEach(m, msgs)
    {
        const char *r = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
        const char *c = cJSON_GetObjectItemCaseSensitive(m, "content")->valuestring;
        col_chat_msg msg = {
            .role = !strcmp(r, "system") ? COL_ROLE_SYSTEM : !strcmp(r, "user") ? COL_ROLE_USER : COL_ROLE_ASSISTANT,
            .content = c,
            .content_len = strlen(c),
            .index = i++,
            .n_messages = nm,
        };
        st = tmpl->render(tmpl->user, &msg, &co, err);
        if (st != COL_OK) {
            char inner[COL_ERR_MSG_MAX];
            snprintf(inner, sizeof inner, "%s", err ? err->msg : "");
            st = col_err_set(err, st, "%s:%ld: template %s: %s", path, lineno, tmpl->name ? tmpl->name : "?", inner);
            goto out;
        }
    }
out:
    cJSON_Delete(root);
    return st;
}

/* .jsonl chat data -> s; conv_end gets the stream length after each
 * conversation ([*n_conv]). */
static col_status load_chat(const char *path, const char *buf, size_t len, const col_tokenizer *tok,
                            const col_chat_template *tmpl, stream *s, size_t **conv_end, int64_t *n_conv,
                            col_err *err)
{
    size_t cap = 0;
    *conv_end = NULL;
    *n_conv = 0;
    long lineno = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(buf + at, '\n', len - at);
        size_t l = nl ? (size_t)(nl - (buf + at)) : len - at;
        lineno++;
        bool skip;
        col_status st = chat_line(path, lineno, buf + at, l, tok, tmpl, s, &skip, err);
        if (st != COL_OK)
            return st;
        at += l + 1;
        if (skip)
            continue;
        if ((size_t)*n_conv == cap) {
            cap = cap ? 2 * cap : 64;
            size_t *ne = realloc(*conv_end, cap * sizeof *ne);
            if (!ne)
                return col_err_set(err, COL_ENOMEM, "%s: out of memory", path);
            *conv_end = ne;
        }
        (*conv_end)[(*n_conv)++] = s->n;
    }
    if (*n_conv == 0)
        return col_err_set(err, COL_EFORMAT, "%s: no conversations (the file is empty or blank)", path);
    bool trained = false;
    for (size_t i = 0; i < s->n && !trained; i++)
        trained = s->mask[i] != 0;
    if (!trained)
        return col_err_set(err, COL_EFORMAT, "%s: no usable conversation: no token is trained on (no assistant turn)",
                           path);
    return COL_OK;
}

bool col_dataset_is_chat_path(const char *path)
{
    char ext[16];
    base_ext(path, ext);
    return strcmp(ext, ".jsonl") == 0;
}

static col_status check_pct(double p, col_err *err)
{
    if (!(p >= 0.0 && p < 100.0))
        return col_err_set(err, COL_EINVAL, "dataset: validation percentage %g outside [0, 100)", p);
    return COL_OK;
}

/* The number of held-out items out of n for pct %. */
static size_t held_out(size_t n, double pct) { return (size_t)((double)n * pct / 100.0); }

col_status col_dataset_load(const char *path, const col_dataset_opts *opts, col_dataset **out, col_err *err)
{
    *out = NULL;
    col_dataset_opts o = opts ? *opts : (col_dataset_opts){0};
    if (check_pct(o.val_percent, err) != COL_OK)
        return COL_EINVAL;
    int32_t vocab = o.vocab_size > 0 ? o.vocab_size : o.tok ? col_tok_vocab_size(o.tok) : 0;
    col_status st = COL_OK;
    if (o.kind == COL_DATA_AUTO || o.kind == COL_DATA_LLMC) {
        col_dataset *ds = calloc(1, sizeof *ds);
        if (!ds)
            return col_err_set(err, COL_ENOMEM, "%s: out of memory", path);
        bool mapped;
        if ((st = map_llmc(path, vocab, ds, &mapped, err)) == COL_OK && mapped) {
            ds->n_train = ds->n - held_out(ds->n, o.val_percent);
            *out = ds;
            return COL_OK;
        }
        col_dataset_free(ds);
        if (st != COL_OK)
            return st;
    }
    char *buf = NULL;
    size_t len = 0;
    st = col_read_file(path, o.max_bytes, &buf, &len, err);
    if (st != COL_OK)
        return st;

    col_data_kind kind = o.kind;
    char ext[16];
    base_ext(path, ext);
    if (kind == COL_DATA_AUTO) {
        uint32_t magic = len >= 4 ? rd_u32((const unsigned char *)buf) : 0;
        if (magic == LLMC_MAGIC16 || magic == LLMC_MAGIC32 || !strcmp(ext, ".bin"))
            kind = COL_DATA_LLMC;
        else if (!strcmp(ext, ".jsonl"))
            kind = COL_DATA_CHAT;
        else
            kind = COL_DATA_TEXT;
    }
    stream s = {0};
    size_t *conv_end = NULL;
    int64_t n_conv = 0;
    if (kind != COL_DATA_LLMC && !o.tok) {
        st = col_err_set(err, COL_EINVAL, "%s: a tokenizer is needed for %s data", path,
                         kind == COL_DATA_CHAT ? "chat" : "text");
    } else if (kind == COL_DATA_LLMC) {
        st = load_llmc(path, (const unsigned char *)buf, len, vocab, &s, err);
    } else if (kind == COL_DATA_CHAT) {
        st = load_chat(path, buf, len, o.tok, o.tmpl ? o.tmpl : &chatml, &s, &conv_end, &n_conv, err);
    } else {
        st = load_text(path, buf, len, o.tok, &s, err);
    }
    free(buf);
    if (st == COL_OK && kind != COL_DATA_LLMC && vocab > 0) {
        for (size_t i = 0; i < s.n; i++)
            if (s.ids[i] < 0 || s.ids[i] >= vocab) {
                st = col_err_set(err, COL_EINVAL, "%s: token %zu is %d, outside the vocabulary [0, %d)", path, i,
                                 (int)s.ids[i], (int)vocab);
                break;
            }
    }
    if (st == COL_OK && s.n == 0)
        st = col_err_set(err, COL_EFORMAT, "%s: no tokens", path);
    col_dataset *ds = NULL;
    if (st == COL_OK && !(ds = calloc(1, sizeof *ds)))
        st = col_err_set(err, COL_ENOMEM, "%s: out of memory", path);
    if (st != COL_OK) {
        free(s.ids);
        free(s.mask);
        free(conv_end);
        return st;
    }
    ds->tokens = s.ids;
    ds->n = s.n;
    ds->n_train = s.n - held_out(s.n, o.val_percent);
    if (kind == COL_DATA_CHAT) {
        ds->mask = s.mask;
        ds->n_conv = n_conv;
        ds->n_val_conv = (int64_t)held_out((size_t)n_conv, o.val_percent);
        if (ds->n_val_conv >= n_conv)
            ds->n_val_conv = n_conv - 1;
        ds->n_train = conv_end[n_conv - 1 - ds->n_val_conv];
    } else {
        free(s.mask);
    }
    free(conv_end);
    *out = ds;
    return COL_OK;
}

col_status col_dataset_from_tokens(const int32_t *tokens, const uint8_t *mask, size_t n, double val_percent,
                                   col_dataset **out, col_err *err)
{
    *out = NULL;
    if (check_pct(val_percent, err) != COL_OK)
        return COL_EINVAL;
    if (n == 0)
        return col_err_set(err, COL_EINVAL, "dataset: no tokens");
    col_dataset *ds = calloc(1, sizeof *ds);
    if (!ds || !(ds->tokens = malloc(n * sizeof *tokens)) || (mask && !(ds->mask = malloc(n)))) {
        col_dataset_free(ds);
        return col_err_set(err, COL_ENOMEM, "dataset: out of memory for %zu tokens", n);
    }
    memcpy(ds->tokens, tokens, n * sizeof *tokens);
    if (mask)
        for (size_t i = 0; i < n; i++)
            ds->mask[i] = mask[i] != 0;
    ds->n = n;
    ds->n_train = n - held_out(n, val_percent);
    *out = ds;
    return COL_OK;
}

void col_dataset_free(col_dataset *ds)
{
    if (!ds)
        return;
    if (ds->map)
        munmap(ds->map, ds->map_len);
    free(ds->path);
    free(ds->tokens);
    free(ds->mask);
    free(ds);
}

size_t col_dataset_n_tokens(const col_dataset *ds) { return ds->n; }
size_t col_dataset_n_train(const col_dataset *ds) { return ds->n_train; }
const int32_t *col_dataset_tokens(const col_dataset *ds) { return ds->tokens; }

int32_t col_dataset_token_at(const col_dataset *ds, size_t i)
{
    return ds->tokens ? ds->tokens[i] : (int32_t)rd_tok(ds->body + i * ds->tsize, ds->tsize);
}

uint64_t col_dataset_hash(const col_dataset *ds)
{
    if (!ds->tokens)
        return ds->hash;
    uint64_t h = fnv_basis;
    for (size_t i = 0; i < ds->n; i++)
        h = fnv_tok(h, (uint32_t)ds->tokens[i]);
    return h;
}
const uint8_t *col_dataset_mask(const col_dataset *ds) { return ds->mask; }
int64_t col_dataset_n_conversations(const col_dataset *ds) { return ds->n_conv; }
int64_t col_dataset_n_val_conversations(const col_dataset *ds) { return ds->n_val_conv; }

/* ---- batches ---- */

col_batch_state col_batch_state_init(col_batch_mode mode, uint64_t seed)
{
    col_batch_state st = {0};
    st.mode = (uint32_t)mode;
    if (mode == COL_BATCH_SHUFFLED) {
        col_rng r;
        col_rng_init(&r, seed);
        st.seed = r.seed;
        st.counter = r.counter;
    }
    return st;
}

/* One row: inputs[0..T) = tok[start..start+T), targets = the next tokens, -1
 * where masked. A mapped file's tokens are converted here and checked again
 * (the file may have been rewritten since the load). */
static col_status fill_row(const col_dataset *ds, size_t start, int T, int32_t *in, int32_t *tg, col_err *err)
{
    if (!ds->tokens) {
        const unsigned char *p = ds->body + start * ds->tsize;
        uint32_t prev = rd_tok(p, ds->tsize);
        bool bad = prev >= ds->limit;
        for (int t = 0; t < T; t++) {
            uint32_t v = rd_tok(p + (size_t)(t + 1) * ds->tsize, ds->tsize);
            bad |= v >= ds->limit;
            in[t] = (int32_t)prev;
            tg[t] = (int32_t)v;
            prev = v;
        }
        /* Drop the pages read from the mapping, so RSS stays at what a batch
         * needs. A fault may map a large page-cache folio whole (up to 2 MiB
         * around the tokens), hence the wider range. The page cache keeps
         * the data; a clean private page just faults back in, so this is
         * harmless to other threads reading the same rows. */
        size_t a = (size_t)(p - (const unsigned char *)ds->map), e = a + ((size_t)T + 1) * ds->tsize;
        a &= ~(size_t)(RELEASE_ALIGN - 1);
        e = (e + RELEASE_ALIGN - 1) & ~(size_t)(RELEASE_ALIGN - 1);
        e = e < ds->map_len ? e : ds->map_len; /* never past the mapping: the next one may be anything */
        madvise((unsigned char *)ds->map + a, e - a, MADV_DONTNEED);
        if (bad)
            return col_err_set(err, COL_EFORMAT, "%s: a token outside the vocabulary in [%zu, %zu): the file changed "
                               "since it was loaded", ds->path, start, start + (size_t)T + 1);
        return COL_OK;
    }
    const int32_t *x = ds->tokens + start;
    for (int t = 0; t < T; t++) {
        in[t] = x[t];
        tg[t] = x[t + 1];
    }
    if (ds->mask) {
        const uint8_t *m = ds->mask + start + 1;
        for (int t = 0; t < T; t++)
            if (!m[t])
                tg[t] = -1;
    }
    return COL_OK;
}

static col_status check_bt(int B, int T, col_err *err)
{
    if (B <= 0 || T <= 0 || (int64_t)B * T > INT32_MAX)
        return col_err_set(err, COL_EINVAL, "dataset batch: B=%d, T=%d must be positive (B*T < 2^31)", B, T);
    return COL_OK;
}

col_status col_dataset_next_batch(const col_dataset *ds, col_batch_state *st, int B, int T, int32_t *inputs,
                                  int32_t *targets, col_err *err)
{
    if (check_bt(B, T, err) != COL_OK)
        return COL_EINVAL;
    size_t n = ds->n_train, bt = (size_t)B * (size_t)T;
    if (st->mode == COL_BATCH_SEQUENTIAL) {
        if (n < bt + 1)
            return col_err_set(err, COL_EINVAL,
                               "dataset: %zu training tokens, a sequential batch of B=%d, T=%d needs B*T+1 = %zu",
                               n, B, T, bt + 1);
        if (st->pos + bt + 1 > n) // resumed with a state from other data or other B, T
            st->pos = 0;
        for (int b = 0; b < B; b++)
            if (fill_row(ds, st->pos + (size_t)b * T, T, inputs + (size_t)b * T, targets + (size_t)b * T, err))
                return COL_EFORMAT;
        st->pos += bt;
        if (st->pos + bt + 1 > n)
            st->pos = 0;
    } else if (st->mode == COL_BATCH_SHUFFLED) {
        if (n < (size_t)T + 1)
            return col_err_set(err, COL_EINVAL,
                               "dataset: %zu training tokens, a shuffled window of T=%d needs T+1 = %zu", n, T,
                               (size_t)T + 1);
        col_rng r = {st->seed, st->counter};
        for (int b = 0; b < B; b++) {
            size_t start = (size_t)col_rng_below(&r, (uint64_t)(n - (size_t)T));
            if (fill_row(ds, start, T, inputs + (size_t)b * T, targets + (size_t)b * T, err) != COL_OK)
                return COL_EFORMAT;
        }
        st->seed = r.seed;
        st->counter = r.counter;
    } else {
        return col_err_set(err, COL_EINVAL, "dataset: unknown batch mode %u in the batch state", st->mode);
    }
    st->step++;
    return COL_OK;
}

int64_t col_dataset_n_val_batches(const col_dataset *ds, int B, int T)
{
    if (B <= 0 || T <= 0)
        return 0;
    size_t nv = ds->n - ds->n_train, bt = (size_t)B * (size_t)T;
    if (nv < bt + 1)
        return 0;
    return (int64_t)((nv - 1) / bt);
}

col_status col_dataset_val_batch(const col_dataset *ds, int64_t k, int B, int T, int32_t *inputs, int32_t *targets,
                                 col_err *err)
{
    if (check_bt(B, T, err) != COL_OK)
        return COL_EINVAL;
    size_t nv = ds->n - ds->n_train, bt = (size_t)B * (size_t)T;
    if (nv < bt + 1)
        return col_err_set(err, COL_EINVAL,
                           "dataset: %zu validation tokens, a validation batch of B=%d, T=%d needs B*T+1 = %zu", nv,
                           B, T, bt + 1);
    int64_t nb = col_dataset_n_val_batches(ds, B, T);
    if (k < 0 || k >= nb)
        return col_err_set(err, COL_EINVAL, "dataset: validation batch %lld outside [0, %lld)", (long long)k,
                           (long long)nb);
    size_t start = ds->n_train + (size_t)k * bt;
    for (int b = 0; b < B; b++)
        if (fill_row(ds, start + (size_t)b * T, T, inputs + (size_t)b * T, targets + (size_t)b * T, err) != COL_OK)
            return COL_EFORMAT;
    return COL_OK;
}
