#include "plan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* What a plan knows about one node of its graph (at[node id]): the plan's
 * own schedule, liveness and arena layout, never written into the node. */
typedef struct {
    size_t offset;              /* arena range start, when arena */
    int first_use, last_use;    /* schedule positions of the storage owner's first and last use */
    bool scheduled;             /* in this plan's schedule */
    bool arena;                 /* owns a range of this plan's arena */
    bool output;                /* one of the plan's outputs: kept alive to the end of a run */
} plan_node;

/* Activation arena and kernel scratch memory, held by one plan or shared by
 * several that never run at the same time (col_plan_share_memory). */
typedef struct {
    void *arena, *scratch;
    size_t arena_cap, scratch_cap;
    int refs;
} plan_mem;

struct col_plan {
    col_graph *g;
    int nnodes;                 /* the graph's node count when planned: later nodes are not in this plan */
    plan_node *at;              /* [nnodes] */
    col_node **order;
    int n;
    plan_mem *mem;              /* never NULL once made */
    size_t arena_bytes, unshared_bytes; /* this plan's need (the memory may be larger, when shared) */
    size_t scratch_bytes;
    bool no_dropout;            /* dropout kernels pass their input through (col_plan_set_dropout) */
    const col_backend *be;      /* device plan: the backend whose memory holds arena and scratch; NULL: host */
    col_node *counter;          /* device plan: the graph's run counter leaf, when scheduled */
    void *counter_dev;          /* its slot of device memory */
};

#define ALIGN 64
static size_t align_up(size_t x) { return (x + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

/* plan memory: the device plan's backend table, host aligned_alloc otherwise */
static col_status plan_alloc(const col_plan *p, size_t bytes, void **out, col_err *err, const char *what)
{
    *out = NULL;
    if (p->be) {
        col_err why = {0};
        col_status st = p->be->mem->alloc(p->be, align_up(bytes), out, &why);
        if (st != COL_OK) {
            *out = NULL;
            return col_err_set(err, st, "plan: cannot allocate %zu bytes of %s on the %s backend: %s", bytes, what,
                               p->be->name, why.msg);
        }
        if (!*out || ((uintptr_t)*out & (ALIGN - 1)))
            return col_err_set(err, COL_EINTERNAL, "plan: the %s backend returned %s for %zu bytes of %s",
                               p->be->name, *out ? "memory not 64-byte aligned" : "NULL", bytes, what);
        return COL_OK;
    }
    *out = aligned_alloc(ALIGN, align_up(bytes));
    if (!*out)
        return col_err_set(err, COL_ENOMEM, "plan: cannot allocate %zu bytes of %s", bytes, what);
    return COL_OK;
}

static void plan_release(const col_plan *p, void *ptr)
{
    if (!ptr)
        return;
    if (p->be)
        p->be->mem->free(p->be, ptr);
    else
        free(ptr);
}

size_t col_extra_offset(const col_node *n)
{
    return align_up(col_tensor_bytes(&n->t)); /* whole blocks for a quantized leaf */
}

void *col_extra(const col_node *n) { return (char *)n->t.data + col_extra_offset(n); }

static col_node *owner_of(col_node *n) { return (n->flags & COL_NODE_VIEW) ? n->view_base : n; }

static bool owns_arena(const col_node *n)
{
    if (n->flags & COL_NODE_VIEW)
        return false;
    if (n->op == COL_OP_ACCUMULATE || n->op == COL_OP_KV_WRITE)
        return false;
    if (n->op == COL_OP_LEAF && n->bound)
        return false;
    return true;
}

static size_t storage_bytes(const col_node *n)
{
    size_t b = col_extra_offset(n);
    if (n->extra_bytes)
        b += align_up(n->extra_bytes);
    return b ? b : ALIGN;
}

/* the nodes n depends on: its sources, then its view base */
static int ndeps(const col_node *n) { return n->nsrc + ((n->flags & COL_NODE_VIEW) ? 1 : 0); }
static col_node *dep(const col_node *n, int c) { return c < n->nsrc ? n->src[c] : n->view_base; }

/* n is a node of this plan's schedule (a node of another graph, or one
 * added after planning, is not) */
static bool in_plan(const col_plan *p, const col_node *n)
{
    return n && n->id >= 0 && n->id < p->nnodes && p->g->nodes[n->id] == n && p->at[n->id].scheduled;
}

/* ---- the schedule ---- */

/* iterative post-order DFS emission of n and its unemitted dependencies */
static int emit(col_plan *p, col_node *root, char *state, col_node **stack, int *child)
{
    int sp = 0;
    stack[sp] = root;
    child[sp] = 0;
    sp++;
    while (sp) {
        col_node *n = stack[sp - 1];
        if (child[sp - 1] < ndeps(n)) {
            col_node *d = dep(n, child[sp - 1]++);
            if (state[d->id] == 0) {
                state[d->id] = 1;
                stack[sp] = d;
                child[sp] = 0;
                sp++;
            } else if (state[d->id] == 1) {
                return -1; /* cycle: impossible for graphs built by the API */
            }
            continue;
        }
        state[n->id] = 2;
        p->at[n->id].scheduled = true;
        p->order[p->n++] = n;
        sp--;
    }
    return 0;
}

/* 1: state 3 for the plan's outputs and everything they need */
static void mark_needed(col_plan *p, char *state, col_node **stack)
{
    int sp = 0;
    for (int i = 0; i < p->nnodes; i++)
        if (p->at[i].output) {
            state[i] = 3;
            stack[sp++] = p->g->nodes[i];
        }
    while (sp) {
        col_node *n = stack[--sp];
        for (int c = 0; c < ndeps(n); c++) {
            col_node *d = dep(n, c);
            if (state[d->id] != 3) {
                state[d->id] = 3;
                stack[sp++] = d;
            }
        }
    }
}

/* 2: emit needed nodes in creation order, each after its dependencies, so
 * recomputation clones (created last) run just before their first use */
static col_status emit_needed(col_plan *p, char *state, col_node **stack, int *child, col_err *err)
{
    for (int i = 0; i < p->nnodes; i++)
        state[i] = state[i] == 3 ? 0 : 2;
    for (int i = 0; i < p->nnodes; i++) {
        col_node *n = p->g->nodes[i];
        if (state[n->id] != 0)
            continue;
        state[n->id] = 1;
        if (emit(p, n, state, stack, child) != 0)
            return col_err_set(err, COL_EINTERNAL, "plan: the graph has a cycle at node %s", n->name);
    }
    return COL_OK;
}

/* 3: a gradient is added into its parameter's buffer as soon as it is
 * complete, so it does not hold arena space until the end */
static col_status hoist_accumulates(col_plan *p, col_err *err)
{
    col_node **hoisted = calloc((size_t)p->n + 1, sizeof *hoisted);
    int *first_acc = malloc(sizeof(int) * ((size_t)p->nnodes + 1)), *next_acc = malloc(sizeof(int) * ((size_t)p->n + 1));
    if (!hoisted || !first_acc || !next_acc) {
        free(hoisted);
        free(first_acc);
        free(next_acc);
        return col_err_set(err, COL_ENOMEM, "plan: out of memory");
    }
    /* per gradient node, the ACCUMULATE nodes reading it (a linked list of positions) */
    for (int i = 0; i < p->nnodes; i++)
        first_acc[i] = -1;
    for (int i = p->n - 1; i >= 0; i--) {
        col_node *n = p->order[i];
        if (n->op == COL_OP_ACCUMULATE) {
            next_acc[i] = first_acc[n->src[0]->id];
            first_acc[n->src[0]->id] = i;
        }
    }
    int k = 0;
    for (int i = 0; i < p->n; i++) {
        col_node *n = p->order[i];
        if (n->op == COL_OP_ACCUMULATE)
            continue;
        hoisted[k++] = n;
        for (int j = first_acc[n->id]; j >= 0; j = next_acc[j])
            hoisted[k++] = p->order[j];
    }
    free(p->order);
    p->order = hoisted;
    free(first_acc);
    free(next_acc);
    return COL_OK;
}

static col_status schedule(col_plan *p, col_err *err)
{
    char *state = calloc((size_t)p->nnodes + 1, 1);
    col_node **stack = calloc((size_t)p->nnodes + 1, sizeof *stack);
    int *child = calloc((size_t)p->nnodes + 1, sizeof *child);
    col_status st = COL_OK;
    if (!state || !stack || !child)
        st = col_err_set(err, COL_ENOMEM, "plan: out of memory for %d nodes", p->nnodes);
    if (st == COL_OK) {
        mark_needed(p, state, stack);
        st = emit_needed(p, state, stack, child, err);
    }
    free(state);
    free(stack);
    free(child);
    if (st == COL_OK)
        st = hoist_accumulates(p, err);
    if (st == COL_OK && p->n == 0)
        st = col_err_set(err, COL_EINVAL, "plan: nothing to compute (mark an output or call backward)");
    return st;
}

/* ---- liveness and the arena ---- */

static void liveness(col_plan *p)
{
    for (int i = 0; i < p->nnodes; i++)
        p->at[i].first_use = p->at[i].last_use = -1;
    for (int i = 0; i < p->n; i++) {
        col_node *n = p->order[i];
        plan_node *o = &p->at[owner_of(n)->id];
        if (o->first_use < 0)
            o->first_use = i;
        if (o->last_use < i)
            o->last_use = i;
        for (int s = 0; s < n->nsrc; s++) {
            plan_node *so = &p->at[owner_of(n->src[s])->id];
            if (so->last_use < i)
                so->last_use = i;
        }
        if (p->at[n->id].output)
            o->last_use = p->n;
        if (n->op == COL_OP_LEAF) {
            p->at[n->id].first_use = 0;
            p->at[n->id].last_use = p->n;
        }
        if (n->scratch_bytes > p->scratch_bytes)
            p->scratch_bytes = n->scratch_bytes;
    }
}

typedef struct {
    col_node *n;
    size_t size;
} owner_t;

typedef struct {
    size_t start, end;
} range_t;

static int by_size_desc(const void *a, const void *b)
{
    const owner_t *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return x->n->id - y->n->id;
}

static int by_start(const void *a, const void *b)
{
    const range_t *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* the lowest offset where size bytes fit between the ranges (sorted by start) */
static size_t first_fit(const range_t *r, int nr, size_t size)
{
    size_t off = 0;
    for (int j = 0; j < nr; j++) {
        if (off + size <= r[j].start)
            break;
        if (r[j].end > off)
            off = r[j].end;
    }
    return off;
}

/* greedy by size: each owner, largest first, at the lowest offset free of
 * the owners already placed whose liveness overlaps its own */
static col_status assign_offsets(col_plan *p, col_err *err)
{
    int cnt = 0;
    owner_t *own = calloc((size_t)p->n + 1, sizeof *own);
    col_node **placed = calloc((size_t)p->n + 1, sizeof *placed);
    range_t *conf = calloc((size_t)p->n + 1, sizeof *conf);
    if (!own || !placed || !conf) {
        free(own);
        free(placed);
        free(conf);
        return col_err_set(err, COL_ENOMEM, "plan: out of memory");
    }
    for (int i = 0; i < p->n; i++)
        if (owns_arena(p->order[i])) {
            p->at[p->order[i]->id].arena = true;
            own[cnt].n = p->order[i];
            own[cnt].size = storage_bytes(p->order[i]);
            p->unshared_bytes += own[cnt].size;
            cnt++;
        }
    qsort(own, (size_t)cnt, sizeof *own, by_size_desc);
    int nplaced = 0;
    size_t top = 0;
    for (int k = 0; k < cnt; k++) {
        plan_node *a = &p->at[own[k].n->id];
        int nc = 0;
        for (int j = 0; j < nplaced; j++) {
            const plan_node *b = &p->at[placed[j]->id];
            if (b->first_use <= a->last_use && a->first_use <= b->last_use)
                conf[nc++] = (range_t){b->offset, b->offset + storage_bytes(placed[j])};
        }
        qsort(conf, (size_t)nc, sizeof *conf, by_start);
        a->offset = first_fit(conf, nc, own[k].size);
        if (a->offset + own[k].size > top)
            top = a->offset + own[k].size;
        placed[nplaced++] = own[k].n;
    }
    p->arena_bytes = top;
    free(own);
    free(placed);
    free(conf);
    return COL_OK;
}

/* ---- addresses ---- */

/* a bound leaf's address: its bound memory, except for the run counter of a
 * device plan while it is bound to the graph's host word */
static void *leaf_addr(const col_plan *p, const col_node *n)
{
    if (p->counter_dev && n == p->counter && n->bound == &p->g->rng_counter_value)
        return p->counter_dev;
    return n->bound;
}

/* node n's address in plan p (n in its schedule): bound memory, its range of
 * the arena, its view base's, the cache it writes into, or the gradient
 * buffer it accumulates into */
static void *node_addr(const col_plan *p, const col_node *n)
{
    if (n->op == COL_OP_LEAF && n->bound)
        return leaf_addr(p, n);
    if (n->flags & COL_NODE_VIEW) {
        char *b = node_addr(p, n->view_base);
        if (!b)
            return NULL;
        if (col_dtype_is_quant(n->t.dtype)) /* whole blocks (views.c checks the offset) */
            return b + col_dtype_row_bytes(n->t.dtype, n->view_offset);
        return b + n->view_offset * (int64_t)col_dtype_size(n->t.dtype);
    }
    if (n->op == COL_OP_KV_WRITE)
        return node_addr(p, n->src[0]); /* writes into, and stands for, the cache leaf */
    if (n->op == COL_OP_ACCUMULATE)
        return n->src[1]->grad_data;
    return p->at[n->id].arena ? (char *)p->mem->arena + p->at[n->id].offset : NULL;
}

/* what a run needs bound from the caller */
static col_status check_bound(const col_node *n, col_err *err)
{
    if (n->op == COL_OP_ACCUMULATE && !n->src[1]->grad_data)
        return col_err_set(err, COL_ESTATE, "run: parameter %s has no gradient buffer bound (col_bind_grad)",
                           n->src[1]->name);
    if (n->op == COL_OP_LEAF && (n->flags & COL_NODE_PARAM) && !n->bound)
        return col_err_set(err, COL_ESTATE, "run: parameter %s has no data bound (col_bind)", n->name);
    return COL_OK;
}

/* points n->t.data (and a view's bound base leaf's) at n's address in plan p */
static col_status bind_node(const col_plan *p, col_node *n, col_err *err)
{
    col_status st = check_bound(n, err);
    if (st != COL_OK)
        return st;
    col_node *b = n->view_base;
    if ((n->flags & COL_NODE_VIEW) && b->op == COL_OP_LEAF && b->bound)
        b->t.data = leaf_addr(p, b);
    n->t.data = node_addr(p, n);
    return COL_OK;
}

/* every node of the schedule at its address in this plan (sources come
 * before the nodes reading them, so views follow their bases) */
static void bind_all(const col_plan *p)
{
    for (int i = 0; i < p->n; i++)
        p->order[i]->t.data = node_addr(p, p->order[i]);
}

void *col_plan_data(const col_plan *p, const col_node *n) { return p && in_plan(p, n) ? node_addr(p, n) : NULL; }

/* ---- creation ---- */

static col_status plan_new(col_graph *g, const col_backend *be, col_plan **out, col_err *err)
{
    *out = NULL;
    if (col_graph_status(g) != COL_OK)
        return col_err_set(err, g->err.code, "%s", g->err.msg);
    if (g->cur_segment)
        return col_err_set(err, COL_ESTATE, "plan: a checkpoint segment is still open");
    if (be && be->mem) {
        const col_backend_mem *m = be->mem;
        if (!m->alloc || !m->free || !m->to_device || !m->to_host || !m->sync)
            return col_err_set(err, COL_EINVAL, "plan: the %s backend's memory table is incomplete", be->name);
    }
    col_plan *p = calloc(1, sizeof *p);
    if (p) {
        p->at = calloc((size_t)g->n + 1, sizeof *p->at);
        p->order = calloc((size_t)g->n + 1, sizeof *p->order);
    }
    if (!p || !p->at || !p->order) {
        col_plan_free(p);
        return col_err_set(err, COL_ENOMEM, "plan: out of memory for %d nodes", g->n);
    }
    p->g = g;
    p->nnodes = g->n;
    p->be = be && be->mem ? be : NULL;
    *out = p;
    return COL_OK;
}

/* schedule, liveness, arena and memory of a plan whose outputs are marked;
 * frees p on failure */
static col_status plan_finish(col_plan *p, col_plan **out, col_err *err)
{
    col_status st = schedule(p, err);
    if (st == COL_OK) {
        liveness(p);
        st = assign_offsets(p, err);
    }
    if (st == COL_OK && !(p->mem = calloc(1, sizeof *p->mem)))
        st = col_err_set(err, COL_ENOMEM, "plan: out of memory");
    if (st == COL_OK) {
        p->mem->refs = 1;
        if (p->arena_bytes && (st = plan_alloc(p, p->arena_bytes, &p->mem->arena, err, "activation arena")) == COL_OK)
            p->mem->arena_cap = p->arena_bytes;
    }
    if (st == COL_OK && p->scratch_bytes &&
        (st = plan_alloc(p, p->scratch_bytes, &p->mem->scratch, err, "kernel scratch")) == COL_OK)
        p->mem->scratch_cap = p->scratch_bytes;
    /* the run counter lives in host memory (graph.c): a device plan copies it to a slot of its own */
    col_node *c = p->g->rng_counter;
    if (st == COL_OK && p->be && c && in_plan(p, c)) {
        p->counter = c;
        st = plan_alloc(p, sizeof(int64_t), &p->counter_dev, err, "run counter");
    }
    if (st != COL_OK) {
        col_plan_free(p);
        return st;
    }
    /* the nodes get this plan's addresses now, so col_data works and inputs can be filled before running */
    bind_all(p);
    *out = p;
    return COL_OK;
}

col_status col_plan_create(col_graph *g, col_plan **out, col_err *err) { return col_plan_create_on(g, NULL, out, err); }

col_status col_plan_create_on(col_graph *g, const col_backend *be, col_plan **out, col_err *err)
{
    col_plan *p;
    col_status st = plan_new(g, be, &p, err);
    if (st != COL_OK)
        return st;
    for (int i = 0; i < p->nnodes; i++)
        p->at[i].output = (g->nodes[i]->flags & COL_NODE_OUTPUT) != 0;
    return plan_finish(p, out, err);
}

col_status col_plan_create_for(col_graph *g, const col_backend *be, col_node *const *outputs, int n, col_plan **out,
                               col_err *err)
{
    col_plan *p;
    col_status st = plan_new(g, be, &p, err);
    if (st != COL_OK)
        return st;
    if (!outputs || n < 1) {
        col_plan_free(p);
        return col_err_set(err, COL_EINVAL, "plan: no outputs given");
    }
    for (int k = 0; k < n; k++) {
        col_node *o = outputs[k];
        if (!o || o->id < 0 || o->id >= p->nnodes || g->nodes[o->id] != o) {
            col_plan_free(p);
            return col_err_set(err, COL_EINVAL, "plan: output %d is %s", k, o ? "not a node of this graph" : "NULL");
        }
        p->at[o->id].output = true;
    }
    return plan_finish(p, out, err);
}

col_status col_plan_measure_for(col_graph *g, col_node *const *outputs, int n, size_t *arena, size_t *scratch,
                                col_err *err)
{
    *arena = *scratch = 0;
    col_plan *p;
    col_status st = plan_new(g, NULL, &p, err);
    if (st != COL_OK)
        return st;
    for (int k = 0; st == COL_OK && k < n; k++) {
        col_node *o = outputs ? outputs[k] : NULL;
        if (!o || o->id < 0 || o->id >= p->nnodes || g->nodes[o->id] != o)
            st = col_err_set(err, COL_EINVAL, "plan: output %d is %s", k, o ? "not a node of this graph" : "NULL");
        else
            p->at[o->id].output = true;
    }
    if (st == COL_OK && n < 1)
        st = col_err_set(err, COL_EINVAL, "plan: no outputs given");
    if (st == COL_OK)
        st = schedule(p, err);
    if (st == COL_OK) {
        liveness(p);
        st = assign_offsets(p, err);
    }
    if (st == COL_OK) {
        *arena = p->arena_bytes;
        *scratch = p->scratch_bytes;
    }
    col_plan_free(p);
    return st;
}

static void mem_release(const col_plan *p, plan_mem *m)
{
    if (m && --m->refs == 0) {
        plan_release(p, m->arena);
        plan_release(p, m->scratch);
        free(m);
    }
}

col_status col_plan_share_memory(col_plan *p, col_plan *with, col_err *err)
{
    if (!p || !with)
        return col_err_set(err, COL_EINVAL, "plan: col_plan_share_memory needs two plans");
    if (p->mem == with->mem)
        return COL_OK;
    if (p->be != with->be)
        return col_err_set(err, COL_EINVAL, "plan: plans on different memories cannot share it");
    plan_mem *m = with->mem;
    void *arena = NULL, *scratch = NULL; /* made before anything changes: a failure leaves both plans as they were */
    col_status st = COL_OK;
    if (p->arena_bytes > m->arena_cap)
        st = plan_alloc(p, p->arena_bytes, &arena, err, "activation arena");
    if (st == COL_OK && p->scratch_bytes > m->scratch_cap)
        st = plan_alloc(p, p->scratch_bytes, &scratch, err, "kernel scratch");
    if (st != COL_OK) {
        plan_release(p, arena);
        return st;
    }
    if (arena) {
        plan_release(p, m->arena);
        m->arena = arena;
        m->arena_cap = p->arena_bytes;
    }
    if (scratch) {
        plan_release(p, m->scratch);
        m->scratch = scratch;
        m->scratch_cap = p->scratch_bytes;
    }
    mem_release(p, p->mem);
    p->mem = m;
    m->refs++;
    bind_all(p);
    return COL_OK;
}

size_t col_plan_memory_bytes(const col_plan *p) { return p && p->mem ? p->mem->arena_cap + p->mem->scratch_cap : 0; }

void col_plan_free(col_plan *p)
{
    if (!p)
        return;
    free(p->order);
    free(p->at);
    mem_release(p, p->mem);
    plan_release(p, p->counter_dev);
    free(p);
}

void col_plan_set_dropout(col_plan *p, bool on) { p->no_dropout = !on; }

/* ---- running ---- */

/* the backend may run this plan: the device plan's own backend, or any host backend for a host plan */
static col_status check_backend(const col_plan *p, const col_backend *be, col_err *err)
{
    if (!be)
        return col_err_set(err, COL_EINVAL, "run: no backend given");
    if (p->be && be != p->be)
        return col_err_set(err, COL_EINVAL,
                           "run: this plan's memory belongs to the %s backend it was made for (col_plan_create_on); "
                           "it cannot run on another backend (%s)", p->be->name, be->name ? be->name : "unnamed");
    if (!p->be && be->mem)
        return col_err_set(err, COL_EINVAL,
                           "run: this plan's memory is host memory; the %s backend needs a plan made for it "
                           "(col_plan_create_on)", be->name ? be->name : "unnamed");
    return COL_OK;
}

/* an EXTERN node: the caller's function, given copies of the tensors (it cannot change the graph's) */
static col_status run_extern(const col_node *n, const col_backend *be, col_err *err)
{
    col_tensor out = n->t, src[COL_MAX_SRC];
    const col_tensor *sp[COL_MAX_SRC];
    for (int j = 0; j < n->nsrc; j++) {
        src[j] = n->src[j]->t;
        sp[j] = &src[j];
    }
    col_err why = {0};
    col_status st = n->ext_fn(n->ext_user, be, &out, sp, n->nsrc, &why);
    if (st == COL_OK)
        return COL_OK;
    if (!why.msg[0])
        return col_err_set(err, st, "run: the function of extern node %s failed (%s) without a message", n->name,
                           col_status_name(st));
    why.code = st;
    return col_err_copy(err, &why);
}

static col_status run_ops(col_plan *p, const col_backend *be, col_plan_hook hook, void *user, col_err *err)
{
    /* this plan's addresses into the nodes: another plan of the graph may have run since, and
     * bound leaves may have been rebound */
    for (int i = 0; i < p->n; i++) {
        col_status st = bind_node(p, p->order[i], err);
        if (st != COL_OK)
            return st;
    }
    if (p->counter_dev && p->counter->bound == &p->g->rng_counter_value) {
        col_status st = be->mem->to_device(be, p->counter_dev, &p->g->rng_counter_value, sizeof(int64_t), err);
        if (st != COL_OK)
            return st;
    }
    col_exec ex = {
        .scratch = p->mem->scratch, .scratch_bytes = p->scratch_bytes, .be = be, .dropout_off = p->no_dropout};
    for (int i = 0; i < p->n; i++) {
        col_node *n = p->order[i];
        if (n->op == COL_OP_LEAF || n->op == COL_OP_VIEW)
            continue;
        /* EXTERN: the caller's function, called here, not through the backend's table */
        col_kernel_fn k = n->op == COL_OP_EXTERN ? NULL : be->kernel[n->op];
        if (!k && n->op != COL_OP_EXTERN)
            return col_err_set(err, COL_EUNSUPPORTED, "run: the %s backend has no kernel for %s", be->name,
                               col_op_name(n->op));
        col_status st = COL_OK;
        if (hook) {
            /* the hook may have rebound what this op reads or accumulates into */
            st = hook(user, p, i, n, err);
            for (int j = 0; j < n->nsrc && st == COL_OK; j++)
                st = bind_node(p, n->src[j], err);
            if (st == COL_OK)
                st = bind_node(p, n, err);
        }
        if (st == COL_OK)
            st = k ? k(n, &ex, err) : run_extern(n, be, err);
        if (st != COL_OK)
            return st;
    }
    return COL_OK;
}

col_status col_plan_run_hooked(col_plan *p, const col_backend *be, col_plan_hook hook, void *user, col_err *err)
{
    col_status st = check_backend(p, be, err);
    if (st != COL_OK)
        return st;
    st = run_ops(p, be, hook, user, err);
    if (p->be) {
        /* queued kernels finish (also after an error: nothing may still write when this returns);
         * the first error is the one reported */
        col_err e2 = {0};
        col_status s2 = be->mem->sync(be, st == COL_OK ? err : &e2);
        if (st == COL_OK)
            st = s2;
    }
    return st;
}

col_status col_plan_run(col_plan *p, const col_backend *be, col_err *err)
{
    return col_plan_run_hooked(p, be, NULL, NULL, err);
}

/* ---- copies in and out ---- */

/* the address of node n's data in this plan for a copy of `bytes`; *in_host:
 * it is host memory (a host plan, or the run counter's host word in a device plan) */
static col_status copy_target(col_plan *p, col_node *n, size_t bytes, const void *host, void **addr, bool *in_host,
                              col_err *err, const char *what)
{
    *addr = NULL;
    *in_host = !p->be;
    if (!n)
        return col_err_set(err, COL_EINVAL, "%s: no node given", what);
    if (!in_plan(p, n))
        return col_err_set(err, COL_EINVAL, "%s: node %s is not in this plan (nothing it computes needs it)", what,
                           n->name);
    size_t size = col_tensor_bytes(&n->t);
    if (bytes > size)
        return col_err_set(err, COL_EINVAL, "%s: %zu bytes do not fit node %s (%zu bytes)", what, bytes, n->name, size);
    if (bytes && !host)
        return col_err_set(err, COL_EINVAL, "%s: NULL host buffer for node %s", what, n->name);
    if ((n->flags & COL_NODE_VIEW) && !col_is_contiguous(&n->t))
        return col_err_set(err, COL_EINVAL, "%s: node %s is a strided view; copy its contiguous base", what, n->name);
    col_status st = check_bound(n, err);
    if (st != COL_OK)
        return st;
    void *a = node_addr(p, n);
    if (n->op == COL_OP_LEAF && p->counter_dev && a == p->counter_dev) {
        /* the counter's value is the graph's host word (each run copies it to the device) */
        *addr = n->bound;
        *in_host = true;
        return COL_OK;
    }
    if (!a && bytes)
        return col_err_set(err, COL_EINVAL, "%s: node %s has no storage (a bound leaf with nothing bound?)", what,
                           n->name);
    *addr = a;
    return COL_OK;
}

col_status col_plan_upload(col_plan *p, col_node *n, const void *src, size_t bytes, col_err *err)
{
    void *dst;
    bool in_host;
    col_status st = copy_target(p, n, bytes, src, &dst, &in_host, err, "plan upload");
    if (st != COL_OK || !bytes)
        return st;
    if (!in_host)
        return p->be->mem->to_device(p->be, dst, src, bytes, err);
    memcpy(dst, src, bytes);
    return COL_OK;
}

col_status col_plan_download(col_plan *p, col_node *n, void *dst, size_t bytes, col_err *err)
{
    void *src;
    bool in_host;
    col_status st = copy_target(p, n, bytes, dst, &src, &in_host, err, "plan download");
    if (st != COL_OK || !bytes)
        return st;
    if (!in_host)
        return p->be->mem->to_host(p->be, dst, src, bytes, err);
    memcpy(dst, src, bytes);
    return COL_OK;
}

const col_backend *col_plan_backend(const col_plan *p) { return p ? p->be : NULL; }

int col_plan_length(const col_plan *p) { return p->n; }
col_node *col_plan_node(const col_plan *p, int i) { return (i >= 0 && i < p->n) ? p->order[i] : NULL; }
size_t col_plan_arena_bytes(const col_plan *p) { return p->arena_bytes; }
size_t col_plan_unshared_bytes(const col_plan *p) { return p->unshared_bytes; }
size_t col_plan_scratch_bytes(const col_plan *p) { return p->scratch_bytes; }
