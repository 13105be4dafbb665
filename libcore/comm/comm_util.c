/* comm_util.c - what the transports share: the communicator struct, the peer
 * table and the messages made from it, dtype conversion and the rank-ordered
 * fold behind COL_ORDER_RANK. */
#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"

col_comm *col_comm_alloc(const col_comm_transport *t, int rank, int size)
{
    col_comm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->peers = calloc((size_t)(size > 0 ? size : 1), sizeof *c->peers);
    if (!c->peers) {
        free(c);
        return NULL;
    }
    c->t = t;
    c->rank = rank;
    c->size = size;
    c->local_rank = 0;
    c->local_size = 1;
    c->timeout_s = COL_COMM_DEFAULT_TIMEOUT_S;
    c->order = COL_ORDER_TRANSPORT;
    return c;
}

void col_comm_dealloc(col_comm *c)
{
    if (!c)
        return;
    free(c->peers);
    free(c);
}

void col_comm_peer_self(col_comm_peer *p, int world_rank)
{
    memset(p, 0, sizeof *p);
    p->world_rank = world_rank;
    p->pid = (int)getpid();
    if (gethostname(p->host, sizeof p->host - 1) != 0)
        snprintf(p->host, sizeof p->host, "?");
    p->host[sizeof p->host - 1] = '\0';
}

void col_comm_set_local(col_comm *c)
{
    const char *me = c->peers[c->rank].host;
    int lr = 0, ls = 0;
    for (int r = 0; r < c->size; r++) {
        if (strcmp(c->peers[r].host, me) != 0)
            continue;
        if (r < c->rank)
            lr++;
        ls++;
    }
    c->local_rank = lr;
    c->local_size = ls;
}

static const char *const red_names[COL_RED_COUNT] = {"sum", "max", "min", "avg"};

const char *col_red_op_name(col_red_op op)
{
    return (unsigned)op < COL_RED_COUNT ? red_names[op] : "?";
}

static const char *const op_names[COL_COMM_OP_COUNT] = {
    "all-reduce", "reduce-scatter", "all-gather", "broadcast", "all-to-all", "send", "recv", "barrier",
};

const char *col_comm_op_name(col_comm_op op)
{
    return (unsigned)op < COL_COMM_OP_COUNT ? op_names[op] : "?";
}

/* "rank 2" in c, with its world rank when that differs */
static void rank_name(const col_comm *c, int r, char *buf, size_t n)
{
    if (c->peers[r].world_rank != r)
        snprintf(buf, n, "rank %d (world rank %d)", r, c->peers[r].world_rank);
    else
        snprintf(buf, n, "rank %d", r);
}

void col_comm_describe(const col_comm_req *r, char *buf, size_t n)
{
    const col_comm *c = r->comm;
    char peer[64] = "";
    if (r->op == COL_COMM_SEND || r->op == COL_COMM_RECV)
        rank_name(c, r->peer, peer, sizeof peer);
    switch (r->op) {
    case COL_COMM_BARRIER:
        snprintf(buf, n, "barrier on %d ranks", c->size);
        break;
    case COL_COMM_SEND:
    case COL_COMM_RECV:
        snprintf(buf, n, "%s of %zu %s %s %s (tag %d)", col_comm_op_name(r->op), r->count, col_dtype_name(r->dt),
                 r->op == COL_COMM_SEND ? "to" : "from", peer, r->tag);
        break;
    case COL_COMM_BROADCAST:
        snprintf(buf, n, "broadcast of %zu %s from rank %d on %d ranks", r->count, col_dtype_name(r->dt), r->peer,
                 c->size);
        break;
    case COL_COMM_ALL_REDUCE:
    case COL_COMM_REDUCE_SCATTER:
        snprintf(buf, n, "%s (%s) of %zu %s on %d ranks", col_comm_op_name(r->op), col_red_op_name(r->red), r->count,
                 col_dtype_name(r->dt), c->size);
        break;
    default:
        snprintf(buf, n, "%s of %zu %s on %d ranks", col_comm_op_name(r->op), r->count, col_dtype_name(r->dt),
                 c->size);
        break;
    }
}

bool col_comm_peer_gone(const col_comm_peer *p)
{
    char host[COL_COMM_HOST_MAX] = "";
    if (gethostname(host, sizeof host - 1) != 0 || strcmp(host, p->host) != 0 || p->pid <= 0)
        return false;
    if (kill((pid_t)p->pid, 0) != 0 && errno == ESRCH)
        return true;
    /* a process killed but not yet reaped by its launcher is a zombie: gone as well */
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/stat", p->pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool zombie = false;
    if (fgets(line, sizeof line, f)) {
        const char *rp = strrchr(line, ')'); /* "pid (comm) S ...": the state follows the last ')' */
        zombie = rp && (rp[1] == ' ') && (rp[2] == 'Z' || rp[2] == 'X');
    }
    fclose(f);
    return zombie;
}

/* appends printf-style text to buf (which holds a string of length *len) */
static void append(char *buf, size_t n, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t n, size_t *len, const char *fmt, ...)
{
    if (*len >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *len, n - *len, fmt, ap);
    va_end(ap);
    if (k > 0)
        *len = (size_t)k < n - *len ? *len + (size_t)k : n;
}

bool col_comm_peers_gone(const col_comm_req *r)
{
    const col_comm *c = r->comm;
    if (r->op == COL_COMM_SEND || r->op == COL_COMM_RECV)
        return r->peer >= 0 && r->peer < c->size && col_comm_peer_gone(&c->peers[r->peer]);
    for (int q = 0; q < c->size; q++)
        if (q != c->rank && col_comm_peer_gone(&c->peers[q]))
            return true;
    return false;
}

void col_comm_suspects(const col_comm_req *r, char *buf, size_t n)
{
    const col_comm *c = r->comm;
    const char *me = c->peers[c->rank].host;
    size_t len = 0;
    buf[0] = '\0';
    char name[64];
    if (r->op == COL_COMM_SEND || r->op == COL_COMM_RECV) {
        const col_comm_peer *p = &c->peers[r->peer];
        rank_name(c, r->peer, name, sizeof name);
        if (strcmp(p->host, me) != 0)
            append(buf, n, &len, "%s runs on %s, which cannot be checked from here", name, p->host);
        else if (col_comm_peer_gone(p))
            append(buf, n, &len, "%s (pid %d on %s) has exited", name, p->pid, p->host);
        else
            append(buf, n, &len, "%s (pid %d on %s) is still running: it has not reached the matching call", name,
                   p->pid, p->host);
        return;
    }
    int gone = 0, elsewhere = 0;
    for (int q = 0; q < c->size; q++) {
        if (q == c->rank)
            continue;
        const col_comm_peer *p = &c->peers[q];
        if (strcmp(p->host, me) != 0) {
            elsewhere++;
            continue;
        }
        if (!col_comm_peer_gone(p))
            continue;
        rank_name(c, q, name, sizeof name);
        append(buf, n, &len, "%s%s (pid %d on %s)", gone ? ", " : "", name, p->pid, p->host);
        gone++;
    }
    if (gone)
        append(buf, n, &len, " %s exited", gone == 1 ? "has" : "have");
    else
        append(buf, n, &len, "every rank on this host is still running (one has not reached this call)");
    if (elsewhere)
        append(buf, n, &len, "; %d rank%s on other hosts cannot be checked from here", elsewhere,
               elsewhere == 1 ? "" : "s");
}

void col_comm_backoff(long *pause_ns)
{
    long ns = *pause_ns ? (*pause_ns < 500000 ? *pause_ns * 2 : 1000000) : 1000;
    *pause_ns = ns;
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* ---- dtypes and the fold ---- */

void col_comm_div_f32(float *x, size_t n, float d)
{
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] / d;
}

static float fold_f32(float a, float b, col_red_op op)
{
    switch (op) {
    case COL_RED_MAX:
        return b > a ? b : a;
    case COL_RED_MIN:
        return b < a ? b : a;
    default:
        return a + b;
    }
}

/* integers: wrap-around sums (unsigned arithmetic, no overflow to trap on) */
#define FOLD_INT(T, UT)                                                                                         \
    do {                                                                                                        \
        const T *p = parts;                                                                                     \
        T *o = out;                                                                                             \
        for (size_t i = 0; i < len; i++) {                                                                      \
            T a = p[i];                                                                                         \
            for (int j = 1; j < nparts; j++) {                                                                  \
                T b = p[(size_t)j * len + i];                                                                   \
                a = op == COL_RED_MAX ? (b > a ? b : a)                                                         \
                    : op == COL_RED_MIN ? (b < a ? b : a)                                                       \
                                        : (T)((UT)a + (UT)b);                                                   \
            }                                                                                                   \
            o[i] = a;                                                                                           \
        }                                                                                                       \
    } while (0)

void col_comm_fold(const void *parts, int nparts, size_t len, col_dtype dt, col_red_op op, void *out)
{
    if (nparts < 1 || len == 0)
        return;
    if (dt == COL_I32) {
        FOLD_INT(int32_t, uint32_t);
        return;
    }
    if (dt == COL_I64) {
        FOLD_INT(int64_t, uint64_t);
        return;
    }
    /* floats, a block of elements at a time: acc = part 0, then acc = acc op part j for j = 1, 2, ... */
    enum { BLOCK = 1024 };
    float acc[BLOCK], tmp[BLOCK];
    size_t es = col_dtype_size(dt);
    for (size_t i0 = 0; i0 < len; i0 += BLOCK) {
        size_t m = len - i0 < BLOCK ? len - i0 : BLOCK;
        col_convert(acc, COL_F32, (const char *)parts + i0 * es, dt, (int64_t)m);
        for (int j = 1; j < nparts; j++) {
            col_convert(tmp, COL_F32, (const char *)parts + ((size_t)j * len + i0) * es, dt, (int64_t)m);
            for (size_t i = 0; i < m; i++)
                acc[i] = fold_f32(acc[i], tmp[i], op);
        }
        if (op == COL_RED_AVG)
            col_comm_div_f32(acc, m, (float)nparts);
        col_convert((char *)out + i0 * es, dt, acc, COL_F32, (int64_t)m);
    }
}
