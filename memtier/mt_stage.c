/* mt_stage.c - host buffers for NVMe chunks (see mt_stage.h). */
#include "mt_stage.h"

#include <stdlib.h>

#include "nvme.h"

typedef struct {
    int chunk;    /* -1: empty */
    void *buf;
    size_t cap;
    bool dirty;
    uint64_t last; /* use tick, for least-recently-used */
} stage_buf;

struct mt_stage {
    mt_pool *pool;
    int n;
    uint64_t tick;
    stage_buf *b;
};

col_status mt_stage_create(mt_pool *pool, int nbuf, mt_stage **out, col_err *err)
{
    *out = NULL;
    if (nbuf < 1)
        return col_err_set(err, COL_EINVAL, "memtier: a stage needs at least one buffer");
    mt_stage *s = calloc(1, sizeof *s);
    stage_buf *b = calloc((size_t)nbuf, sizeof *b);
    if (!s || !b) {
        free(s), free(b);
        return col_err_set(err, COL_ENOMEM, "memtier: out of host memory for the NVMe stage");
    }
    for (int i = 0; i < nbuf; i++)
        b[i].chunk = -1;
    *s = (mt_stage){.pool = pool, .n = nbuf, .b = b};
    *out = s;
    return COL_OK;
}

void mt_stage_free(mt_stage *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        free(s->b[i].buf);
    free(s->b);
    free(s);
}

static col_status write_back(mt_stage *s, stage_buf *b, col_err *err)
{
    if (b->chunk < 0 || !b->dirty)
        return COL_OK;
    col_status st = mt_chunk_write(s->pool, b->chunk, b->buf, err);
    if (st == COL_OK)
        b->dirty = false;
    return st;
}

col_status mt_stage_get(mt_stage *s, mt_ref ref, bool will_write, void **ptr, col_err *err)
{
    *ptr = NULL;
    void *host = mt_ptr(s->pool, ref);
    if (host) { /* a host chunk: in place */
        *ptr = host;
        return COL_OK;
    }
    stage_buf *hit = NULL, *lru = &s->b[0];
    for (int i = 0; i < s->n; i++) {
        if (s->b[i].chunk == ref.chunk)
            hit = &s->b[i];
        if (s->b[i].last < lru->last)
            lru = &s->b[i];
    }
    if (!hit) {
        size_t need = mt_chunk_io_bytes(s->pool, ref.chunk);
        if (need == 0)
            return col_err_set(err, COL_EINVAL, "memtier: chunk %d does not exist", ref.chunk);
        col_status st = write_back(s, lru, err);
        if (st != COL_OK)
            return st;
        if (lru->cap < need) {
            free(lru->buf);
            lru->cap = 0;
            lru->chunk = -1;
            if (!(lru->buf = mt_nvme_alloc_buffer(need)))
                return col_err_set(err, COL_ENOMEM, "memtier: out of host memory for a %zu-byte NVMe stage buffer",
                                   need);
            lru->cap = need;
        }
        lru->chunk = -1;
        if ((st = mt_chunk_read(s->pool, ref.chunk, lru->buf, err)) != COL_OK)
            return st;
        lru->chunk = ref.chunk;
        lru->dirty = false;
        hit = lru;
    }
    hit->last = ++s->tick;
    hit->dirty |= will_write;
    *ptr = (char *)hit->buf + ref.offset;
    return COL_OK;
}

col_status mt_stage_flush(mt_stage *s, col_err *err)
{
    for (int i = 0; i < s->n; i++) {
        col_status st = write_back(s, &s->b[i], err);
        if (st != COL_OK)
            return st;
    }
    return COL_OK;
}
