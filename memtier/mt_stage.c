/* mt_stage.c - host buffers for NVMe chunks (see mt_stage.h). */
#include "mt_stage.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "nvme.h"

#define HUGE ((size_t)2 << 20) /* a transparent huge page */

/* A buffer of bytes (a multiple of MT_NVME_ALIGN), mapped on its own: freed,
 * it goes back to the system at once, whatever malloc's thresholds (freed
 * heap blocks of tens of MB would stay resident between the others). From
 * 2 MiB up it lies on a 2 MiB boundary with huge pages advised, as
 * mt_nvme_alloc_buffer's, for fewer I/O segments. NULL when out of memory. */
static void *buf_map(size_t bytes)
{
    size_t align = bytes >= HUGE ? HUGE : 0, len = bytes + align;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (!align)
        return p;
    char *a = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    if (a + bytes < p + len)
        munmap(a + bytes, (size_t)(p + len - (a + bytes)));
#ifdef MADV_HUGEPAGE
    madvise(a, bytes, MADV_HUGEPAGE); /* advice only */
#endif
    return a;
}

static void buf_unmap(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

typedef enum { EMPTY, LOADING, READY, WRITING } buf_state;

typedef struct {
    int chunk;       /* -1: empty */
    void *buf;
    size_t cap;
    buf_state state;
    bool dirty;      /* READY and changed since read or written */
    uint64_t last;   /* use tick, for least-recently-used */
    mt_chunk_io io;  /* LOADING / WRITING */
} stage_buf;

struct mt_stage {
    mt_pool *pool;
    int n;
    uint64_t tick;
    stage_buf *b;
    size_t limit;       /* the most bytes the buffers may hold together; 0 = no limit */
    size_t held, peak;  /* bytes the buffers hold now, and at most so far */
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

/* finishes a transfer in flight; a failed load leaves the buffer empty */
static col_status settle(mt_stage *s, stage_buf *b, col_err *err)
{
    if (b->state != LOADING && b->state != WRITING)
        return COL_OK;
    col_status st = mt_chunk_io_wait(s->pool, &b->io, err);
    if (st != COL_OK && b->state == LOADING)
        b->chunk = -1, b->state = EMPTY;
    else
        b->state = READY; /* a failed write stays dirty */
    if (st == COL_OK && b->io.write)
        b->dirty = false;
    return st;
}

void mt_stage_free(mt_stage *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++) {
        col_err e = {0};
        settle(s, &s->b[i], &e); /* the kernel must be done with a buffer before it is freed */
        buf_unmap(s->b[i].buf, s->b[i].cap);
    }
    free(s->b);
    free(s);
}

/* waits for every transfer in flight (before synchronous I/O takes the queue) */
static col_status settle_all(mt_stage *s, col_err *err)
{
    col_status first = COL_OK;
    for (int i = 0; i < s->n; i++) {
        col_err e2 = {0};
        col_status st = settle(s, &s->b[i], &e2);
        if (st != COL_OK && first == COL_OK)
            first = col_err_copy(err, &e2);
    }
    return first;
}

static col_status write_back(mt_stage *s, stage_buf *b, col_err *err)
{
    col_status st = settle(s, b, err);
    if (st != COL_OK || b->chunk < 0 || !b->dirty)
        return st;
    st = mt_chunk_write(s->pool, b->chunk, b->buf, err);
    if (st == COL_OK)
        b->dirty = false;
    return st;
}

static stage_buf *find(mt_stage *s, int chunk)
{
    for (int i = 0; i < s->n; i++)
        if (s->b[i].chunk == chunk)
            return &s->b[i];
    return NULL;
}

/* how many buffers holding a chunk were used after b */
static int newer_than(const mt_stage *s, const stage_buf *b)
{
    int newer = 0;
    for (int j = 0; j < s->n; j++)
        newer += s->b[j].chunk >= 0 && s->b[j].last > b->last;
    return newer;
}

/* the least recently used buffer, skipping the `keep` most recent ones */
static stage_buf *victim(mt_stage *s, int keep)
{
    stage_buf *v = NULL;
    for (int i = 0; i < s->n; i++) {
        stage_buf *b = &s->b[i];
        if (b->chunk < 0)
            return b;
        if (keep > 0 && (b->state == LOADING || b->state == WRITING))
            continue; /* busy: read-ahead does not wait */
        if (newer_than(s, b) >= keep && (!v || b->last < v->last))
            v = b;
    }
    return v;
}

static void buf_release(mt_stage *s, stage_buf *b)
{
    buf_unmap(b->buf, b->cap);
    s->held -= b->cap;
    b->buf = NULL;
    b->cap = 0;
    b->chunk = -1;
    b->state = EMPTY;
    b->dirty = false;
}

/* Frees the memory of idle buffers other than keep_b, least recently used
 * first, until need more bytes fit the limit: only buffers beyond the keep
 * most recently used, and dirty ones only when write (written back first).
 * false when the limit cannot be met that way. */
static bool shed(mt_stage *s, const stage_buf *keep_b, size_t need, int keep, bool write, col_status *st,
                 col_err *err)
{
    while (s->limit && s->held + need > s->limit) {
        stage_buf *v = NULL;
        for (int i = 0; i < s->n; i++) {
            stage_buf *b = &s->b[i];
            if (b == keep_b || !b->cap || b->state == LOADING || b->state == WRITING || (b->dirty && !write))
                continue;
            if (b->chunk >= 0 && keep > 0 && newer_than(s, b) < keep)
                continue;
            if (!v || (v->chunk >= 0 && (b->chunk < 0 || b->last < v->last)))
                v = b;
        }
        if (!v)
            return false;
        if (v->dirty && (*st = write_back(s, v, err)) != COL_OK)
            return false;
        buf_release(s, v);
    }
    return true;
}

/* room in buffer b for a chunk of need bytes (b is empty or clean and
 * settled), within the limit when the others allow it */
static col_status make_room(mt_stage *s, stage_buf *b, size_t need, col_err *err)
{
    need = (need + MT_NVME_ALIGN - 1) / MT_NVME_ALIGN * MT_NVME_ALIGN;
    b->chunk = -1;
    b->state = EMPTY;
    /* under a limit a buffer is its chunk's size, so that what the buffers hold is what their chunks take */
    if (s->limit ? b->cap == need : b->cap >= need)
        return COL_OK;
    buf_release(s, b);
    col_status st = COL_OK;
    if (!shed(s, b, need, 0, true, &st, err) && st != COL_OK)
        return st;
    if (!(b->buf = buf_map(need)))
        return col_err_set(err, COL_ENOMEM, "memtier: out of host memory for a %zu-byte NVMe stage buffer", need);
    b->cap = need;
    s->held += need;
    if (s->held > s->peak)
        s->peak = s->held;
    return COL_OK;
}

col_status mt_stage_get(mt_stage *s, mt_ref ref, bool will_write, void **ptr, col_err *err)
{
    *ptr = NULL;
    void *host = mt_ptr(s->pool, ref);
    if (host) { /* a host chunk: in place */
        *ptr = host;
        return COL_OK;
    }
    stage_buf *hit = find(s, ref.chunk);
    col_status st = COL_OK;
    if (hit) {
        st = settle(s, hit, err); /* a prefetch arriving, or a write-back leaving */
    } else {
        size_t need = mt_chunk_io_bytes(s->pool, ref.chunk);
        if (need == 0)
            return col_err_set(err, COL_EINVAL, "memtier: chunk %d does not exist", ref.chunk);
        hit = victim(s, 0);
        if ((st = settle_all(s, err)) == COL_OK && (st = write_back(s, hit, err)) == COL_OK &&
            (st = make_room(s, hit, need, err)) == COL_OK &&
            (st = mt_chunk_read(s->pool, ref.chunk, hit->buf, err)) == COL_OK) {
            hit->chunk = ref.chunk;
            hit->state = READY;
            hit->dirty = false;
        }
    }
    if (st != COL_OK)
        return st;
    hit->last = ++s->tick;
    hit->dirty |= will_write;
    *ptr = (char *)hit->buf + ref.offset;
    return COL_OK;
}

col_status mt_stage_prefetch(mt_stage *s, mt_ref ref, int keep, col_err *err)
{
    if (mt_ptr(s->pool, ref) || find(s, ref.chunk) || s->n <= keep ||
        mt_chunk_slots(s->pool, ref.chunk) > MT_CHUNK_IO_MAX)
        return COL_OK;
    /* at most one read and one write in flight: each takes up to MT_CHUNK_IO_MAX of the queue */
    bool reading = false, writing = false;
    for (int i = 0; i < s->n; i++)
        reading |= s->b[i].state == LOADING, writing |= s->b[i].state == WRITING;
    if (reading)
        return COL_OK;
    /* the oldest buffer beyond the keep most recent: write it behind when dirty, then try the next oldest */
    for (int tries = 0; tries < 2; tries++) {
        stage_buf *v = victim(s, keep);
        if (!v || v->state == LOADING || v->state == WRITING)
            return COL_OK; /* busy: no room to read ahead now */
        if (v->chunk >= 0 && v->dirty) {
            if (writing || mt_chunk_slots(s->pool, v->chunk) > MT_CHUNK_IO_MAX)
                return COL_OK;
            writing = true;
            col_status st = mt_chunk_io_start(s->pool, v->chunk, v->buf, true, &v->io, err);
            if (st != COL_OK)
                return st;
            v->state = v->io.n ? WRITING : READY;
            if (!v->io.n)
                v->dirty = false;
            v->last = 0; /* leave it out of the next victim search only while it is busy */
            continue;
        }
        size_t need = mt_chunk_io_bytes(s->pool, ref.chunk);
        col_status st = COL_OK;
        if (v->cap != need && s->limit && s->held - v->cap + need > s->limit &&
            !shed(s, v, need - v->cap, keep, false, &st, err))
            return st; /* no room within the limit: no read-ahead */
        st = make_room(s, v, need, err);
        if (st == COL_OK)
            st = mt_chunk_io_start(s->pool, ref.chunk, v->buf, false, &v->io, err);
        if (st != COL_OK)
            return st;
        v->chunk = ref.chunk;
        v->state = v->io.n ? LOADING : READY;
        v->dirty = false;
        v->last = s->tick; /* not yet used: the oldest of the recent */
        return COL_OK;
    }
    return COL_OK;
}

col_status mt_stage_flush(mt_stage *s, col_err *err)
{
    col_status first = settle_all(s, err);
    for (int i = 0; i < s->n; i++) {
        col_status st = write_back(s, &s->b[i], err);
        if (st != COL_OK && first == COL_OK)
            first = st;
    }
    return first;
}

void mt_stage_forget(mt_stage *s)
{
    col_err e = {0};
    for (int i = 0; i < s->n; i++) {
        settle(s, &s->b[i], &e); /* a transfer in flight must land before the buffer is reused */
        s->b[i].chunk = -1;
        s->b[i].state = EMPTY;
        s->b[i].dirty = false;
    }
}

void mt_stage_set_limit(mt_stage *s, size_t bytes)
{
    s->limit = bytes;
    col_status st = COL_OK;
    shed(s, NULL, 0, 0, false, &st, NULL);
}

size_t mt_stage_limit(const mt_stage *s) { return s->limit; }
size_t mt_stage_held(const mt_stage *s) { return s->held; }
size_t mt_stage_peak(const mt_stage *s) { return s->peak; }
