/* mt_resident.c - the compute tier of one plan of a graph (see mt_resident.h
 * and docs/MEMTIER_PLANNER.md, "How the compute tier runs a plan"); the
 * transfer queue is in mt_resident_io.c. */
#include "mt_resident.h"
#include "units.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "mt_resident_internal.h"
#include "nvme.h"

/* starting guesses for the links, until the traced run measures them */
#define GUESS_COMPUTE_BW 10e9 /* host <-> compute tier: a memcpy */
#define GUESS_NVME_BW 2e9     /* an NVMe SSD */
#define GUESS_FLOPS 50e9      /* for the op time estimates */
#define GUESS_MEM_BW 10e9

typedef struct {
    col_node *n;    /* the leaf (or, for a gradient, the parameter) to rebind */
    int chunk;
    size_t off;
    bool grad;      /* rebind the gradient buffer, not the data */
} use;

/* the chunk space, shareable between the compute tiers of several graphs */
typedef struct {
    char *mem;          /* made on first use */
    size_t bytes, alloc; /* the largest need of its users; what mem holds */
    int refs;
    const col_backend *dev; /* mem is this backend's memory (its table's alloc/free); NULL: host memory */
} arena;

struct mt_resident {
    mt_pool *pool;
    col_plan *plan;
    mt_plan *mp;
    int nops;
    int *op_of;          /* schedule index -> op number, -1 for leaves and views */
    use *uses;           /* per op, CSR: uses[start[k] .. start[k+1]) */
    int *start;
    int nchunks;
    size_t *cap;         /* per chunk: the bytes a transfer moves (an NVMe chunk: mt_chunk_io_bytes) */
    size_t *fp;          /* per chunk: its space in the arena (cap rounded up to the granule) */
    bool *nvme;          /* per chunk: its home is the NVMe tier */
    void **copy;         /* per chunk: its compute-tier copy, NULL when not resident */
    bool *dirty;
    void **shadow;       /* checking mode: per host-home chunk, its home's bytes from before its fetch */
    bool forget_dirty;   /* fault injection for tests: ops that write a chunk do not mark it dirty */
    uint64_t *fetch_seq; /* per chunk: the transfer bringing it in (WAIT waits for it) */
    uint64_t *last_seq;  /* per chunk: the last transfer touching its copy */
    size_t granule;      /* MT_ALIGN, or MT_NVME_ALIGN when NVMe chunks are in play */
    const col_backend *dev; /* the device plan's backend (a memory table): the tier is its memory; else NULL */
    arena *ar;
    size_t need;         /* this graph's chunk space: budget minus the activations */
    int *order;          /* resident chunks by address in the arena */
    int nres;
    size_t resident;     /* arena bytes of resident chunks */
    size_t act;          /* the graph's activation arena and scratch: on the compute tier throughout */
    long step;
    bool poison;
    mt_xq *xq;
    /* the tracer */
    bool tracing;
    double *op_s;        /* measured compute time per op */
    double mark;         /* when the current op's actions ended */
    void **op_ev;        /* a device with asynchronous transfers: per op, events around its kernels in the traced
                            run ([2k] after its transfers' waits, [2k + 1] after its kernels), made then */
    int cur;             /* the op running, -1 before the first */
    uint64_t timed[MT_NLINKS]; /* this run's bytes per link the busy times cover */
    mt_resident_stats st;
};

void mt_resident_poison_home(mt_resident *r, bool on) { r->poison = on; }
void mt_resident_forget_dirty(mt_resident *r, bool on) { r->forget_dirty = on; }

/* checking mode: chunk c's shadow buffer, made at its first fetch */
static col_status shadow_of(mt_resident *r, int c, void **out, col_err *err)
{
    *out = NULL;
    if (!r->poison || r->nvme[c])
        return COL_OK;
    if (!r->shadow[c] && !(r->shadow[c] = malloc(r->cap[c] ? r->cap[c] : 1)))
        return col_err_set(err, COL_ENOMEM, "memtier: out of memory for the checking mode's copy of chunk %d", c);
    *out = r->shadow[c];
    return COL_OK;
}

void mt_resident_set_async(mt_resident *r, bool on)
{
    mt_xq_set_async(r->xq, on);
    r->st.async = mt_xq_async(r->xq); /* a device tier stays synchronous */
}

static size_t round_to(size_t x, size_t g) { return (x + g - 1) / g * g; }

/* ---- the arena ---- */

static void arena_mem_free(arena *a)
{
    if (a->dev)
        a->dev->mem->free(a->dev, a->mem);
    else
        free(a->mem);
    a->mem = NULL;
    a->alloc = 0;
}

static void arena_release(arena *a)
{
    if (a && --a->refs == 0) {
        arena_mem_free(a);
        free(a);
    }
}

/* memory for the arena at its current size: aligned for NVMe I/O (2 MiB
 * from 2 MiB up, for huge pages), zeroed once, which also faults it in */
static col_status arena_ready(arena *a, col_err *err)
{
    if (a->mem && a->alloc >= a->bytes)
        return COL_OK;
    arena_mem_free(a);
    if (a->dev) { /* device memory: offsets from its base keep the granule's alignment, nothing to fault in */
        size_t n = round_to(a->bytes + 1, MT_NVME_ALIGN);
        void *p = NULL;
        col_status st = a->dev->mem->alloc(a->dev, n, &p, err);
        if (st != COL_OK)
            return st;
        a->mem = p;
        a->alloc = n;
        return COL_OK;
    }
    size_t al = a->bytes >= ((size_t)2 << 20) ? (size_t)2 << 20 : MT_NVME_ALIGN, n = round_to(a->bytes + 1, al);
    a->mem = aligned_alloc(al, n);
    a->alloc = a->mem ? n : 0;
    if (!a->mem) {
        char b[32];
        col_fmt_bytes(b, sizeof b, n);
        return col_err_set_on(err, COL_SETTING_COMPUTE_BUDGET, COL_ENOMEM,
                              "memtier: out of memory for the compute tier's %s of chunk space", b);
    }
#ifdef MADV_HUGEPAGE
    if (al > MT_NVME_ALIGN)
        madvise(a->mem, n, MADV_HUGEPAGE);
#endif
    memset(a->mem, 0, n);
    return COL_OK;
}

static void free_op_events(mt_resident *r);

/* moves bytes from src down to dst < src in the arena: a memmove, or on a
 * device the table's copy (non-overlapping ranges) in pieces of at most the
 * distance moved, front to back, each ordered after the one before */
static col_status slide(mt_resident *r, char *dst, const char *src, size_t bytes, col_err *err)
{
    if (!r->dev) {
        memmove(dst, src, bytes);
        return COL_OK;
    }
    size_t step = (size_t)(src - dst);
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < step ? bytes - done : step;
        col_status st = r->dev->mem->copy(r->dev, dst + done, src + done, n, err);
        if (st != COL_OK)
            return st;
        done += n;
    }
    return COL_OK;
}

/* Space for chunk c in the arena, *at: the first gap that fits, or, when the
 * free space is there but in pieces, after letting the transfers finish and
 * sliding the resident chunks together (safe: every op rebinds its chunks
 * after the actions). NULL when it does not fit (a planner bug). */
static col_status get_buffer(mt_resident *r, int c, void **at, col_err *err)
{
    *at = NULL;
    col_status st = arena_ready(r->ar, err);
    if (st != COL_OK)
        return st;
    char *base = r->ar->mem;
    size_t need = r->fp[c], off = 0;
    int pos = 0;
    for (; pos < r->nres; pos++) {
        char *p = r->copy[r->order[pos]];
        if ((size_t)(p - base) >= off + need)
            break;
        off = (size_t)(p - base) + r->fp[r->order[pos]];
    }
    if (pos == r->nres && off + need > r->need) { /* no gap: compact */
        if ((st = mt_xq_drain(r->xq, err)) != COL_OK)
            return st;
        if (r->dev && !r->dev->mem->copy)
            return col_err_set(err, COL_EINVAL, "memtier: the compute tier on backend %s must compact its arena to "
                               "fit chunk %d, but the backend's memory table has no device-to-device copy",
                               r->dev->name ? r->dev->name : "?", c);
        off = 0;
        for (int i = 0; i < r->nres; i++) {
            int x = r->order[i];
            if (r->copy[x] != base + off) {
                if ((st = slide(r, base + off, r->copy[x], r->cap[x], err)) != COL_OK)
                    return st;
                r->st.compacted += r->cap[x];
            }
            r->copy[x] = base + off;
            off += r->fp[x];
        }
        mt_xq_fence_next(r->xq); /* the slides are kernels-queue copies: a fetch into what they freed waits */
        if (off + need > r->need)
            return col_err_set_on(err, COL_SETTING_COMPUTE_BUDGET, COL_ENOMEM, "memtier: the compute tier (%zu bytes) "
                                  "cannot hold chunk %d (%zu bytes) beside %zu resident", r->st.budget, c, r->fp[c],
                                  r->resident);
    }
    memmove(r->order + pos + 1, r->order + pos, sizeof *r->order * (size_t)(r->nres - pos));
    r->order[pos] = c;
    r->nres++;
    *at = base + off;
    return COL_OK;
}

static void put_buffer(mt_resident *r, int chunk)
{
    for (int i = 0; i < r->nres; i++)
        if (r->order[i] == chunk) {
            memmove(r->order + i, r->order + i + 1, sizeof *r->order * (size_t)(r->nres - i - 1));
            r->nres--;
            return;
        }
}

col_status mt_resident_share_arena(mt_resident *r, mt_resident *with, col_err *err)
{
    if (!r || !with)
        return col_err_set(err, COL_EINVAL, "memtier: mt_resident_share_arena needs two compute tiers");
    if (r->ar == with->ar)
        return COL_OK;
    if (r->dev != with->dev)
        return col_err_set(err, COL_EINVAL, "memtier: compute tiers on different memories cannot share an arena");
    arena *a = with->ar;
    if (r->need > a->bytes)
        a->bytes = r->need; /* memory already made is remade on next use: nothing is resident between runs */
    a->refs++;
    arena_release(r->ar);
    r->ar = a;
    return COL_OK;
}

/* ---- the uses of every op, and the planner's input ---- */

/* the pool chunk a leaf's memory lies in (through a view to its base) */
static bool leaf_use(const mt_pool *pool, col_node *s, use *u)
{
    col_node *leaf = (s->flags & COL_NODE_VIEW) ? s->view_base : s;
    if (leaf->op != COL_OP_LEAF || !leaf->bound || !mt_locate(pool, leaf->bound, &u->chunk, &u->off))
        return false;
    u->n = leaf;
    u->grad = false;
    return true;
}

static double node_bytes(const col_node *n)
{
    int64_t blk = col_dtype_block(n->t.dtype); /* values per block: quantized weights take part of a byte each */
    return blk > 0 ? (double)col_numel(&n->t) * (double)col_dtype_block_bytes(n->t.dtype) / (double)blk : 0.0;
}

/* a first guess at an op's time, from its FLOPs (matmul, attention) and the bytes it touches */
static double op_estimate(const col_node *n)
{
    double bytes = node_bytes(n), flops = 0;
    for (int j = 0; j < n->nsrc; j++)
        bytes += node_bytes(n->src[j]);
    const col_tensor *a = n->nsrc > 0 ? &n->src[0]->t : NULL, *b = n->nsrc > 1 ? &n->src[1]->t : NULL;
    if (n->op == COL_OP_MATMUL && a && a->ndim >= 1)
        flops = 2.0 * (double)col_numel(&n->t) * (double)a->shape[a->ndim - 1];
    else if ((n->op == COL_OP_ATTENTION || n->op == COL_OP_ATTENTION_BWD) && b && a->ndim == 4 && b->ndim == 4)
        flops = (n->op == COL_OP_ATTENTION ? 4.0 : 10.0) * (double)a->shape[0] * (double)a->shape[1] *
                (double)a->shape[2] * (double)b->shape[2] * (double)a->shape[3];
    return 2e-6 + flops / GUESS_FLOPS + bytes / GUESS_MEM_BW;
}

static col_status collect(mt_resident *r, mt_plan_op *ops, int **lists, col_err *err)
{
    int n = col_plan_length(r->plan), nuse = 0, cap = 64;
    r->uses = malloc(sizeof *r->uses * (size_t)cap);
    r->start = calloc((size_t)n + 1, sizeof *r->start);
    *lists = NULL;
    if (!r->uses || !r->start)
        return col_err_set(err, COL_ENOMEM, "memtier: out of memory");
    for (int i = 0, k = 0; i < n; i++) {
        col_node *node = col_plan_node(r->plan, i);
        if (r->op_of[i] < 0)
            continue;
        r->start[k] = nuse;
        ops[k].time_s = op_estimate(node);
        /* an ACCUMULATE reads its gradient chunk only, not the parameter's data */
        for (int j = node->op == COL_OP_ACCUMULATE ? node->nsrc : 0; j <= node->nsrc; j++) {
            use u;
            bool found;
            if (j < node->nsrc) {
                found = leaf_use(r->pool, node->src[j], &u);
            } else { /* a gradient accumulated into pool memory */
                found = node->op == COL_OP_ACCUMULATE && node->src[1]->grad_data &&
                        mt_locate(r->pool, node->src[1]->grad_data, &u.chunk, &u.off);
                u.n = node->src[1];
                u.grad = true;
            }
            if (!found)
                continue;
            if (nuse == cap) {
                use *nu = realloc(r->uses, sizeof *nu * (size_t)(cap *= 2));
                if (!nu)
                    return col_err_set(err, COL_ENOMEM, "memtier: out of memory");
                r->uses = nu;
            }
            r->uses[nuse++] = u;
        }
        k++;
        r->start[k] = nuse;
    }
    /* the planner's view: op k reads the chunks of its uses and writes its gradient chunks */
    *lists = malloc(sizeof **lists * (size_t)(2 * nuse + 1));
    if (!*lists)
        return col_err_set(err, COL_ENOMEM, "memtier: out of memory");
    int *reads = *lists, *writes = *lists + nuse;
    for (int k = 0; k < r->nops; k++) {
        int a = r->start[k], b = r->start[k + 1], nw = 0;
        for (int x = a; x < b; x++) {
            reads[x] = r->uses[x].chunk;
            if (r->uses[x].grad)
                writes[a + nw++] = r->uses[x].chunk;
        }
        ops[k].reads = b > a ? reads + a : NULL;
        ops[k].nreads = b - a;
        ops[k].writes = nw ? writes + a : NULL;
        ops[k].nwrites = nw;
        ops[k].act_bytes = r->act;
    }
    return COL_OK;
}

/* the chunks: what a transfer moves, where they live, their space in the arena */
static col_status chunk_sizes(mt_resident *r, mt_plan_chunk *chunks, col_err *err)
{
    bool *used = calloc((size_t)r->nchunks + 1, sizeof *used);
    if (!used)
        return col_err_set(err, COL_ENOMEM, "memtier: out of memory");
    for (int x = 0; x < r->start[r->nops]; x++)
        used[r->uses[x].chunk] = true;
    col_status st = COL_OK;
    r->granule = MT_ALIGN;
    for (int c = 0; c < r->nchunks && st == COL_OK; c++) {
        mt_chunk_info info;
        st = mt_chunk_get(r->pool, c, &info, err);
        r->nvme[c] = st == COL_OK && info.tier == MT_TIER_NVME;
        r->cap[c] = r->nvme[c] ? mt_chunk_io_bytes(r->pool, c) : info.used ? info.used : MT_ALIGN;
        if (r->nvme[c] && used[c])
            r->granule = MT_NVME_ALIGN; /* every offset in the arena a multiple of it: compaction keeps them aligned */
    }
    for (int c = 0; c < r->nchunks && st == COL_OK; c++) {
        /* chunks the graph never touches (optimizer states) take no room; the planner leaves them alone */
        r->fp[c] = used[c] ? round_to(r->cap[c], r->granule) : r->granule;
        chunks[c] = (mt_plan_chunk){.bytes = r->fp[c], .home = used[c] && r->nvme[c] ? MT_TIER_NVME : MT_TIER_HOST};
    }
    free(used);
    return st;
}

col_status mt_resident_create(mt_pool *pool, col_plan *plan, size_t budget, mt_resident **out, col_err *err)
{
    *out = NULL;
    mt_resident *r = calloc(1, sizeof *r);
    if (!r)
        return col_err_set(err, COL_ENOMEM, "memtier: out of memory");
    r->pool = pool;
    r->plan = plan;
    const col_backend *pb = col_plan_backend(plan);
    r->dev = pb && pb->mem ? pb : NULL;
    r->st.budget = budget;
    r->act = col_plan_arena_bytes(plan) + col_plan_scratch_bytes(plan);
    r->st.peak = r->st.activations = r->act;
    /* Without CUDA the transfer thread's memcpy takes a core the compute threads need: measured on the
     * 2-core VM, the synchronous step is faster (docs/PERF.md). A GPU's copy engine changes that. */
    r->need = budget > r->act ? budget - r->act : 0;
    r->cur = -1;
    int n = col_plan_length(plan);
    r->op_of = malloc(sizeof *r->op_of * (size_t)(n > 0 ? n : 1));
    r->nchunks = mt_chunk_count(pool);
    size_t m = (size_t)r->nchunks + 1;
    r->cap = calloc(m, sizeof *r->cap);
    r->fp = calloc(m, sizeof *r->fp);
    r->nvme = calloc(m, sizeof *r->nvme);
    r->copy = calloc(m, sizeof *r->copy);
    r->dirty = calloc(m, sizeof *r->dirty);
    r->shadow = calloc(m, sizeof *r->shadow);
    r->fetch_seq = calloc(m, sizeof *r->fetch_seq);
    r->last_seq = calloc(m, sizeof *r->last_seq);
    r->order = calloc(m, sizeof *r->order);
    r->ar = calloc(1, sizeof *r->ar);
    mt_plan_chunk *chunks = calloc(m, sizeof *chunks);
    mt_plan_op *ops = NULL;
    int *lists = NULL;
    col_status st = COL_OK;
    if (!r->op_of || !r->cap || !r->fp || !r->nvme || !r->copy || !r->dirty || !r->shadow || !r->fetch_seq || !r->last_seq ||
        !r->order || !r->ar || !chunks)
        st = col_err_set(err, COL_ENOMEM, "memtier: out of memory");
    if (r->ar)
        *r->ar = (arena){.bytes = r->need, .refs = 1, .dev = r->dev};
    for (int i = 0; i < n && st == COL_OK; i++) {
        col_node *node = col_plan_node(plan, i);
        r->op_of[i] = node->op == COL_OP_LEAF || node->op == COL_OP_VIEW ? -1 : r->nops++;
    }
    if (st == COL_OK && r->nops == 0)
        st = col_err_set(err, COL_EINVAL, "memtier: the graph has no ops to run");
    if (st == COL_OK && (!(ops = calloc((size_t)r->nops, sizeof *ops)) ||
                         !(r->op_s = calloc((size_t)r->nops, sizeof *r->op_s))))
        st = col_err_set(err, COL_ENOMEM, "memtier: out of memory");
    if (st == COL_OK)
        st = collect(r, ops, &lists, err);
    if (st == COL_OK)
        st = chunk_sizes(r, chunks, err);
    if (st == COL_OK) { /* on a device, NVMe chunks go through a host staging buffer as large as the largest */
        size_t stage = 0;
        for (int c = 0; r->dev && c < r->nchunks; c++)
            if (r->nvme[c] && r->cap[c] > stage)
                stage = r->cap[c];
        st = mt_xq_create(pool, r->nchunks, r->dev, stage, &r->xq, err);
    }
    if (st == COL_OK) /* host memory: synchronous until mt_resident_set_async; a device: its copy queue if it has one */
        r->st.async = mt_xq_async(r->xq);
    if (st == COL_OK && r->dev && col_mem_async(r->dev->mem) &&
        !(r->op_ev = calloc(2 * (size_t)r->nops, sizeof *r->op_ev)))
        st = col_err_set(err, COL_ENOMEM, "memtier: out of memory");
    if (st == COL_OK) {
        mt_plan_input in = {.nchunks = r->nchunks, .chunks = chunks, .nops = r->nops, .ops = ops, .budget = budget,
                            .prefetch = MT_PREFETCH_AUTO, .max_warmup = -1};
        in.links.bw[MT_LINK_H2C] = in.links.bw[MT_LINK_C2H] = GUESS_COMPUTE_BW;
        in.links.bw[MT_LINK_N2H] = in.links.bw[MT_LINK_H2N] = GUESS_NVME_BW;
        st = mt_plan_create(&in, &r->mp, err);
        if (st == COL_ENOMEM) { /* name the smallest budget that works, from an unlimited plan */
            mt_plan *probe = NULL;
            col_err e2 = {0};
            in.budget = 0;
            in.prefetch = MT_PREFETCH_OFF;
            if (mt_plan_create(&in, &probe, &e2) == COL_OK) {
                mt_plan_summary sum;
                mt_plan_get_summary(probe, &sum);
                char have[32], need[32], act[32];
                col_fmt_bytes(have, sizeof have, budget);
                col_fmt_bytes(need, sizeof need, sum.min_budget);
                col_fmt_bytes(act, sizeof act, r->act);
                st = col_err_set_on(err, COL_SETTING_COMPUTE_BUDGET, COL_ENOMEM, "memtier: a compute tier of %s "
                                    "is too small: running this graph needs at least %zu bytes (%s) on it, %s of them "
                                    "activations", have, sum.min_budget, need, act);
            }
            mt_plan_free(probe);
        }
        if (st == COL_OK) {
            mt_plan_summary sum;
            mt_plan_get_summary(r->mp, &sum);
            r->st.min_budget = sum.min_budget;
        }
    }
    free(chunks);
    free(ops);
    free(lists);
    if (st != COL_OK) {
        mt_resident_free(r);
        return st;
    }
    *out = r;
    return COL_OK;
}

void mt_resident_free(mt_resident *r)
{
    if (!r)
        return;
    mt_xq_free(r->xq); /* first: the thread may still write into the arena */
    free_op_events(r);
    free(r->op_ev);
    mt_plan_free(r->mp);
    arena_release(r->ar);
    free(r->order);
    free(r->op_of);
    free(r->op_s);
    free(r->uses);
    free(r->start);
    free(r->cap);
    free(r->fp);
    free(r->nvme);
    free(r->copy);
    free(r->dirty);
    for (int c = 0; r->shadow && c < r->nchunks; c++)
        free(r->shadow[c]);
    free(r->shadow);
    free(r->fetch_seq);
    free(r->last_seq);
    free(r);
}

/* ---- running ---- */

/* queues the copy of chunk c home (write-back, flush) */
static col_status store(mt_resident *r, int c, col_err *err)
{
    mt_xfer x = {.chunk = c, .store = true, .buf = r->copy[c], .home = r->nvme[c] ? NULL : mt_chunk_host(r->pool, c),
                 .bytes = r->cap[c]};
    if (r->shadow[c] && r->poison && !r->nvme[c]) {
        /* checking mode. A clean chunk: home gets back what it held before the fetch, not the tier's copy,
         * so a write on the tier that was never marked dirty (a lost write-back) shows in the results. A
         * dirty one: its copy goes home and becomes what a later clean eviction puts back (a flush) */
        x.restore = !r->dirty[c];
        x.shadow = r->shadow[c];
    }
    col_status st = mt_xq_push(r->xq, &x, &r->last_seq[c], err);
    if (st != COL_OK)
        return st;
    r->st.bytes[MT_LINK_C2H] += r->cap[c];
    if (r->nvme[c])
        r->st.bytes[MT_LINK_H2N] += r->cap[c];
    r->timed[r->nvme[c] ? MT_LINK_H2N : MT_LINK_C2H] += r->cap[c];
    r->st.writebacks++;
    r->dirty[c] = false;
    return COL_OK;
}

static void evict(mt_resident *r, int c)
{
    mt_xq_fence_next(r->xq); /* kernels queued so far may still read its space */
    put_buffer(r, c);
    r->copy[c] = NULL;
    r->resident -= r->fp[c];
}

/* the actions before op k (k = nops: the tail) */
static col_status apply(mt_resident *r, const mt_plan_action *a, int n, int k, col_err *err)
{
    col_status st = COL_OK;
    for (int i = 0; i < n && st == COL_OK; i++) {
        int c = a[i].chunk;
        switch (a[i].kind) {
        case MT_PA_FETCH: {
            /* a prefetch for the next step (for_op < k; the op's own fetches have for_op == k): every
             * step ends with nothing resident, so the tail would only drop it again */
            if (r->copy[c] || a[i].for_op < k)
                break;
            void *buf, *shadow;
            if ((st = shadow_of(r, c, &shadow, err)) != COL_OK || (st = get_buffer(r, c, &buf, err)) != COL_OK)
                break;
            mt_xfer x = {.chunk = c, .poison = r->poison && !r->nvme[c], .shadow = shadow, .buf = buf,
                         .home = r->nvme[c] ? NULL : mt_chunk_host(r->pool, c), .bytes = r->cap[c]};
            if ((st = mt_xq_push(r->xq, &x, &r->fetch_seq[c], err)) != COL_OK) {
                put_buffer(r, c);
                break;
            }
            r->last_seq[c] = r->fetch_seq[c];
            r->copy[c] = buf;
            r->st.bytes[MT_LINK_H2C] += r->cap[c];
            if (r->nvme[c])
                r->st.bytes[MT_LINK_N2H] += r->cap[c];
            r->timed[r->nvme[c] ? MT_LINK_N2H : MT_LINK_H2C] += r->cap[c];
            r->st.fetches++;
            r->resident += r->fp[c];
            if (r->act + r->resident > r->st.peak)
                r->st.peak = r->act + r->resident;
            break;
        }
        case MT_PA_WRITEBACK:
        case MT_PA_FLUSH:
        case MT_PA_DROP:
            if (!r->copy[c])
                break;
            /* never lose a write; in checking mode the host home holds NaNs until its bytes are put back */
            if (a[i].kind != MT_PA_DROP || r->dirty[c] || (r->poison && !r->nvme[c]))
                st = store(r, c, err);
            else
                r->st.drops++;
            if (st == COL_OK && a[i].kind != MT_PA_FLUSH)
                evict(r, c); /* its space is free at once: a fetch into it queues behind the write-back */
            break;
        case MT_PA_WAIT:
            if (r->copy[c])
                st = mt_xq_order(r->xq, r->fetch_seq[c], err);
            break;
        }
    }
    return st;
}

/* records op event i on the kernels' queue (traced run on a device with asynchronous transfers) */
static col_status op_event(mt_resident *r, int i, col_err *err)
{
    const col_backend_mem *m = r->dev->mem;
    col_status st = r->op_ev[i] ? COL_OK : m->event_create(r->dev, &r->op_ev[i], err);
    return st == COL_OK ? m->event_record(r->dev, COL_QUEUE_COMPUTE, r->op_ev[i], err) : st;
}

/* frees the traced run's op events */
static void free_op_events(mt_resident *r)
{
    for (int i = 0; r->op_ev && i < 2 * r->nops; i++) {
        r->dev->mem->event_free(r->dev, r->op_ev[i]);
        r->op_ev[i] = NULL;
    }
}

/* the traced run's op times on the device, from its events (the host only queued the kernels), once
 * everything has completed; then the events go */
static col_status device_op_times(mt_resident *r, col_err *err)
{
    const col_backend_mem *m = r->dev->mem;
    col_status st = m->sync(r->dev, err);
    for (int k = 0; k < r->nops && st == COL_OK; k++) {
        double s = 0;
        if (r->op_ev[2 * k] && r->op_ev[2 * k + 1] &&
            (st = m->event_elapsed(r->dev, r->op_ev[2 * k], r->op_ev[2 * k + 1], &s, err)) == COL_OK)
            r->op_s[k] = s;
    }
    free_op_events(r);
    return st;
}

static col_status hook(void *user, const col_plan *p, int i, col_node *n, col_err *err)
{
    (void)p, (void)n;
    mt_resident *r = user;
    int k = r->op_of[i], na;
    if (k < 0)
        return COL_OK;
    if (r->tracing && r->cur >= 0 && !r->op_ev)
        r->op_s[r->cur] += col_seconds() - r->mark;
    col_status st = COL_OK;
    if (r->tracing && r->op_ev && r->cur >= 0) /* the kernels of the op before have been queued */
        st = op_event(r, 2 * r->cur + 1, err);
    const mt_plan_action *a = mt_plan_actions(r->mp, r->step, k, &na);
    if (st == COL_OK)
        st = apply(r, a, na, k, err);
    for (int x = r->start[k]; x < r->start[k + 1] && st == COL_OK; x++) {
        const use *u = &r->uses[x];
        if (!r->copy[u->chunk])
            return col_err_set(err, COL_ESTATE, "memtier: op %d needs chunk %d, which the plan left off the compute "
                               "tier", k, u->chunk);
        /* nothing may still be moving its bytes (the plan's WAITs make this a no-op); on a device with
         * asynchronous transfers the op's kernels wait for them there, not the host */
        if ((st = mt_xq_order(r->xq, r->last_seq[u->chunk], err)) != COL_OK)
            break;
        void *addr = (char *)r->copy[u->chunk] + u->off;
        if (u->grad) {
            r->dirty[u->chunk] = !r->forget_dirty;
            st = col_bind_grad(u->n, addr, err);
        } else {
            st = col_bind(u->n, addr, err);
        }
    }
    if (st == COL_OK && r->tracing && r->op_ev) /* its transfers are waited for: its kernels come next */
        st = op_event(r, 2 * k, err);
    r->cur = k;
    r->mark = col_seconds();
    return st;
}

/* points every rebound leaf and gradient back at its home address (an NVMe chunk's placeholder) */
static void rebind_home(mt_resident *r)
{
    for (int x = 0; x < r->start[r->nops]; x++) {
        const use *u = &r->uses[x];
        void *home = (char *)mt_chunk_addr(r->pool, u->chunk) + u->off;
        if (u->grad)
            col_bind_grad(u->n, home, NULL);
        else
            col_bind(u->n, home, NULL);
    }
}

/* empties the tier after the tail: a copy goes home when dirty (or, in
 * checking mode, a host chunk always), unless its fetch failed */
static col_status empty_tier(mt_resident *r, col_err *err)
{
    col_err e2 = {0};
    col_status st = mt_xq_drain(r->xq, err), st2 = COL_OK;
    for (int c = 0; c < r->nchunks; c++) {
        if (!r->copy[c])
            continue;
        if (!mt_xq_chunk_failed(r->xq, c) && (r->dirty[c] || (r->poison && !r->nvme[c])) && st2 == COL_OK)
            st2 = store(r, c, &e2);
        evict(r, c);
        r->dirty[c] = false;
    }
    col_status st3 = mt_xq_drain(r->xq, st == COL_OK ? err : NULL);
    if (st == COL_OK && st2 != COL_OK)
        st = col_err_copy(err, &e2);
    return st != COL_OK ? st : st3;
}

/* after the traced run: the plan from measured op times and bandwidths */
static col_status retime(mt_resident *r, col_err *err)
{
    mt_plan_trace tr = {.op_s = r->op_s, .latency_s = -1};
    for (int l = 0; l < MT_NLINKS; l++)
        tr.bw[l] = r->timed[l] > 0 && r->st.busy_s[l] > 0 ? (double)r->timed[l] / r->st.busy_s[l] : 0;
    return mt_plan_update_timing(r->mp, &tr, err);
}

col_status mt_resident_run(mt_resident *r, const col_backend *be, long step, col_err *err)
{
    double t0 = col_seconds();
    mt_xq_begin_run(r->xq);
    r->step = step;
    r->tracing = !r->st.traced;
    r->cur = -1;
    memset(r->timed, 0, sizeof r->timed);
    if (r->tracing)
        memset(r->op_s, 0, sizeof *r->op_s * (size_t)r->nops);
    col_status st = col_plan_run_hooked(r->plan, be, hook, r, err);
    if (r->tracing && r->cur >= 0 && !r->op_ev)
        r->op_s[r->cur] += col_seconds() - r->mark;
    if (st == COL_OK && r->tracing && r->cur >= 0 && r->op_ev)
        st = op_event(r, 2 * r->cur + 1, err);
    if (st == COL_OK) {
        int nt;
        const mt_plan_action *tail = mt_plan_tail(r->mp, step, &nt);
        st = apply(r, tail, nt, r->nops, err);
    }
    /* whatever the plan left: back home, so the optimizer and other graphs see the step's results */
    col_status st2 = empty_tier(r, st == COL_OK ? err : NULL);
    if (st == COL_OK)
        st = st2;
    rebind_home(r);
    mt_xq_times(r->xq, &r->st.wait_s, r->st.busy_s);
    r->st.run_s = col_seconds() - t0;
    r->st.total_run_s += r->st.run_s;
    r->st.total_wait_s += r->st.wait_s;
    for (int l = 0; l < MT_NLINKS; l++)
        r->st.total_busy_s[l] += r->st.busy_s[l];
    if (st != COL_OK)
        return st;
    r->st.runs++;
    if (r->tracing) {
        if ((r->op_ev && (st = device_op_times(r, err)) != COL_OK) || (st = retime(r, err)) != COL_OK)
            return st;
        r->st.traced = true;
    }
    return COL_OK;
}

void mt_resident_get_stats(const mt_resident *r, mt_resident_stats *s)
{
    *s = r->st;
    s->arena = r->ar->bytes;
    s->shared = r->ar->refs > 1;
}

void mt_resident_get_plan_summary(const mt_resident *r, mt_plan_summary *s) { mt_plan_get_summary(r->mp, s); }
