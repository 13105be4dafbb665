/* mt_resident.c - the compute tier of one planned graph (see mt_resident.h). */
#include "mt_resident.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "mt_plan.h"

typedef struct {
    col_node *n;    /* the leaf (or, for a gradient, the parameter) to rebind */
    int chunk;
    size_t off;
    bool grad;      /* rebind the gradient buffer, not the data */
} use;

struct mt_resident {
    mt_pool *pool;
    col_plan *plan;
    mt_plan *mp;
    int nops;
    int *op_of;          /* schedule index -> op number, -1 for leaves and views */
    use *uses;           /* per op, CSR: uses[start[k] .. start[k+1]) */
    int *start;
    int nchunks;
    size_t *cap;         /* per chunk: its bytes */
    void **copy;         /* per chunk: its compute-tier copy, NULL when not resident */
    bool *dirty;
    char *arena;         /* the compute tier's chunk space: budget minus the activations, made on first use */
    size_t arena_bytes;
    int *order;          /* resident chunks by address in the arena */
    int nres;
    size_t resident;     /* bytes of resident chunks */
    size_t act;          /* the graph's activation arena and scratch: on the compute tier throughout */
    long step;
    bool poison;
    mt_resident_stats st;
};

void mt_resident_poison_home(mt_resident *r, bool on) { r->poison = on; }

/* a copy across the tiers, on all threads (one thread's memcpy reaches a third of the memory bandwidth) */
static void tier_copy(void *dst, const void *src, size_t n)
{
    enum { BLOCK = 1 << 18 };
    long nb = (long)((n + BLOCK - 1) / BLOCK);
#pragma omp parallel for schedule(static) if (nb > 4)
    for (long b = 0; b < nb; b++) {
        size_t off = (size_t)b * BLOCK, len = n - off < BLOCK ? n - off : BLOCK;
        memcpy((char *)dst + off, (const char *)src + off, len);
    }
}

/* KiB, MiB or GiB with one decimal */
static void fmt_size(size_t b, char *buf, size_t n)
{
    if (b >= (size_t)1 << 30)
        snprintf(buf, n, "%.1f GiB", (double)b / (1 << 30));
    else if (b >= (size_t)1 << 20)
        snprintf(buf, n, "%.1f MiB", (double)b / (1 << 20));
    else
        snprintf(buf, n, "%.1f KiB", (double)b / 1024);
}

static size_t round_up(size_t x) { return (x + MT_ALIGN - 1) / MT_ALIGN * MT_ALIGN; }

/* Space for a chunk of cap bytes in the arena: the first gap that fits, or,
 * when the free space is there but in pieces, after sliding the resident
 * chunks together (safe: every op rebinds its chunks after the actions). */
static void *get_buffer(mt_resident *r, int chunk, size_t cap)
{
    if (!r->arena) {
        r->arena_bytes = r->st.budget > r->act ? r->st.budget - r->act : 0;
        r->arena = aligned_alloc(4096, (r->arena_bytes + 2 * 4096 - 1) / 4096 * 4096); /* a multiple of the alignment */
        if (!r->arena)
            return NULL;
#ifdef MADV_HUGEPAGE
        madvise(r->arena, round_up(r->arena_bytes), MADV_HUGEPAGE);
#endif
    }
    size_t need = round_up(cap), at = 0;
    int pos = 0;
    for (; pos < r->nres; pos++) {
        char *p = r->copy[r->order[pos]];
        if ((size_t)(p - r->arena) >= at + need)
            break;
        at = (size_t)(p - r->arena) + round_up(r->cap[r->order[pos]]);
    }
    if (pos == r->nres && at + need > r->arena_bytes) { /* no gap: compact */
        at = 0;
        for (int i = 0; i < r->nres; i++) {
            int c = r->order[i];
            if (r->copy[c] != r->arena + at) {
                memmove(r->arena + at, r->copy[c], r->cap[c]);
                r->st.compacted += r->cap[c];
            }
            r->copy[c] = r->arena + at;
            at += round_up(r->cap[c]);
        }
        if (at + need > r->arena_bytes)
            return NULL;
    }
    memmove(r->order + pos + 1, r->order + pos, sizeof *r->order * (size_t)(r->nres - pos));
    r->order[pos] = chunk;
    r->nres++;
    return r->arena + at;
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

/* the uses of every op, in CSR form, and the chunk lists the planner reads */
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
        ops[k] = (mt_plan_op){.reads = b > a ? reads + a : NULL, .nreads = b - a, .writes = nw ? writes + a : NULL,
                              .nwrites = nw, .time_s = 1e-3, .act_bytes = r->act};
    }
    return COL_OK;
}

col_status mt_resident_create(mt_pool *pool, col_plan *plan, size_t budget, mt_resident **out, col_err *err)
{
    *out = NULL;
    mt_resident *r = calloc(1, sizeof *r);
    if (!r)
        return col_err_set(err, COL_ENOMEM, "memtier: out of memory");
    r->pool = pool;
    r->plan = plan;
    r->st.budget = budget;
    r->act = col_plan_arena_bytes(plan) + col_plan_scratch_bytes(plan);
    r->st.peak = r->act;
    int n = col_plan_length(plan);
    r->op_of = malloc(sizeof *r->op_of * (size_t)(n > 0 ? n : 1));
    r->nchunks = mt_chunk_count(pool);
    r->cap = calloc((size_t)r->nchunks + 1, sizeof *r->cap);
    r->copy = calloc((size_t)r->nchunks + 1, sizeof *r->copy);
    r->dirty = calloc((size_t)r->nchunks + 1, sizeof *r->dirty);
    r->order = calloc((size_t)r->nchunks + 1, sizeof *r->order);
    mt_plan_chunk *chunks = calloc((size_t)r->nchunks + 1, sizeof *chunks);
    mt_plan_op *ops = NULL;
    int *lists = NULL;
    col_status st = COL_OK;
    if (!r->op_of || !r->cap || !r->copy || !r->dirty || !r->order || !chunks)
        st = col_err_set(err, COL_ENOMEM, "memtier: out of memory");
    for (int i = 0; i < n && st == COL_OK; i++) {
        col_node *node = col_plan_node(plan, i);
        r->op_of[i] = node->op == COL_OP_LEAF || node->op == COL_OP_VIEW ? -1 : r->nops++;
    }
    for (int c = 0; c < r->nchunks && st == COL_OK; c++) {
        mt_chunk_info info;
        st = mt_chunk_get(pool, c, &info, err);
        r->cap[c] = info.used ? info.used : MT_ALIGN;
        chunks[c] = (mt_plan_chunk){.bytes = r->cap[c], .home = MT_TIER_HOST};
    }
    if (st == COL_OK && r->nops == 0)
        st = col_err_set(err, COL_EINVAL, "memtier: the graph has no ops to run");
    if (st == COL_OK && !(ops = calloc((size_t)r->nops, sizeof *ops)))
        st = col_err_set(err, COL_ENOMEM, "memtier: out of memory");
    if (st == COL_OK)
        st = collect(r, ops, &lists, err);
    if (st == COL_OK) {
        /* without CUDA the compute tier is host memory: transfers cost no modelled time */
        mt_plan_input in = {.nchunks = r->nchunks, .chunks = chunks, .nops = r->nops, .ops = ops, .budget = budget,
                            .prefetch = MT_PREFETCH_OFF, .max_warmup = -1};
        for (int l = 0; l < MT_NLINKS; l++)
            in.links.bw[l] = 1e10;
        st = mt_plan_create(&in, &r->mp, err);
        if (st == COL_ENOMEM) { /* name the smallest budget that works, from an unlimited plan */
            mt_plan *probe = NULL;
            col_err e2 = {0};
            in.budget = 0;
            if (mt_plan_create(&in, &probe, &e2) == COL_OK) {
                mt_plan_summary sum;
                mt_plan_get_summary(probe, &sum);
                char have[32], need[32], act[32];
                fmt_size(budget, have, sizeof have);
                fmt_size(sum.min_budget, need, sizeof need);
                fmt_size(r->act, act, sizeof act);
                st = col_err_set(err, COL_ENOMEM, "memtier: a compute tier of %s is too small: this training step "
                                 "needs at least %zu bytes (%s) on it, %s of them activations", have, sum.min_budget,
                                 need, act);
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
    mt_plan_free(r->mp);
    free(r->arena);
    free(r->order);
    free(r->op_of);
    free(r->uses);
    free(r->start);
    free(r->cap);
    free(r->copy);
    free(r->dirty);
    free(r);
}

static col_status apply(mt_resident *r, const mt_plan_action *a, int n, col_err *err)
{
    for (int i = 0; i < n; i++) {
        int c = a[i].chunk;
        void *home = mt_chunk_host(r->pool, c);
        switch (a[i].kind) {
        case MT_PA_FETCH:
            if (r->copy[c])
                break;
            if (!(r->copy[c] = get_buffer(r, c, r->cap[c])))
                return col_err_set(err, COL_ENOMEM, "memtier: the compute tier (%zu bytes) cannot hold chunk %d "
                                   "(%zu bytes) beside %zu resident", r->st.budget, c, r->cap[c], r->resident);
            tier_copy(r->copy[c], home, r->cap[c]);
            if (r->poison)
                memset(home, 0xff, r->cap[c]);
            r->st.bytes[MT_LINK_H2C] += r->cap[c];
            r->st.fetches++;
            r->resident += r->cap[c];
            if (r->act + r->resident > r->st.peak)
                r->st.peak = r->act + r->resident;
            break;
        case MT_PA_WRITEBACK:
        case MT_PA_FLUSH:
        case MT_PA_DROP:
            if (!r->copy[c])
                break;
            if (a[i].kind != MT_PA_DROP || r->dirty[c] || r->poison) { /* never lose a write */
                tier_copy(home, r->copy[c], r->cap[c]);
                r->st.bytes[MT_LINK_C2H] += r->cap[c];
                r->st.writebacks++;
                r->dirty[c] = false;
            } else {
                r->st.drops++;
            }
            if (a[i].kind != MT_PA_FLUSH) {
                put_buffer(r, c);
                r->copy[c] = NULL;
                r->resident -= r->cap[c];
            }
            break;
        case MT_PA_WAIT: /* copies are synchronous */
            break;
        }
    }
    return COL_OK;
}

static col_status hook(void *user, const col_plan *p, int i, col_node *n, col_err *err)
{
    (void)p, (void)n;
    mt_resident *r = user;
    int k = r->op_of[i], na;
    if (k < 0)
        return COL_OK;
    const mt_plan_action *a = mt_plan_actions(r->mp, r->step, k, &na);
    col_status st = apply(r, a, na, err);
    for (int x = r->start[k]; x < r->start[k + 1] && st == COL_OK; x++) {
        const use *u = &r->uses[x];
        if (!r->copy[u->chunk])
            return col_err_set(err, COL_ESTATE, "memtier: op %d needs chunk %d, which the plan left off the compute "
                               "tier", k, u->chunk);
        void *addr = (char *)r->copy[u->chunk] + u->off;
        if (u->grad) {
            r->dirty[u->chunk] = true;
            st = col_bind_grad(u->n, addr, err);
        } else {
            st = col_bind(u->n, addr, err);
        }
    }
    return st;
}

/* points every rebound leaf and gradient back at its home copy */
static void rebind_home(mt_resident *r)
{
    for (int x = 0; x < r->start[r->nops]; x++) {
        const use *u = &r->uses[x];
        void *home = (char *)mt_chunk_host(r->pool, u->chunk) + u->off;
        if (u->grad)
            col_bind_grad(u->n, home, NULL);
        else
            col_bind(u->n, home, NULL);
    }
}

col_status mt_resident_run(mt_resident *r, const col_backend *be, long step, col_err *err)
{
    r->step = step;
    col_status st = col_plan_run_hooked(r->plan, be, hook, r, err);
    int nt;
    const mt_plan_action *tail = mt_plan_tail(r->mp, step, &nt);
    col_status st2 = apply(r, tail, nt, err);
    /* whatever the plan left: back home, so the optimizer and other graphs see the step's results */
    for (int c = 0; c < r->nchunks && st2 == COL_OK; c++)
        if (r->copy[c]) {
            mt_plan_action wb = {.kind = MT_PA_WRITEBACK, .chunk = c, .for_op = -1};
            st2 = apply(r, &wb, 1, err);
        }
    rebind_home(r);
    return st != COL_OK ? st : st2;
}

void mt_resident_get_stats(const mt_resident *r, mt_resident_stats *s) { *s = r->st; }
