/* plan_probe.c - the planner's probe of this machine and its cache (plan_probe.h). */
#include "plan_probe.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "backend_cpu.h"
#include "graph.h"
#include "ops.h"
#include "plan.h"
#include "textio.h"
#include "timer.h"

#ifdef COL_WITH_COMM
#include "comm.h"
#endif

enum { CACHE_MAX = 1 << 16, BIG_FLOATS = 1 << 20 };
#define CACHE_VERSION 1
#define ASSUMED_LAT 20e-6

bool plan_probe_cache_path(int nproc, char *buf, size_t size)
{
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char host[256] = "host";
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "host");
    for (char *c = host; *c; c++) /* a file name, whatever the host calls itself */
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
              *c == '.' || *c == '_'))
            *c = '_';
    int w;
    if (x && x[0] == '/')
        w = snprintf(buf, size, "%s/colossal/probe-%s-%d.json", x, host, nproc);
    else if (home && home[0])
        w = snprintf(buf, size, "%s/.cache/colossal/probe-%s-%d.json", home, host, nproc);
    else
        return false;
    return w > 0 && (size_t)w < size;
}

/* mkdir -p of path's directory */
static void make_dirs(const char *path)
{
    char d[4096];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (!slash)
        return;
    *slash = '\0';
    for (char *p = d + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(d, 0755);
            *p = '/';
        }
    mkdir(d, 0755);
}

/* ---- the cache: {"version":1,"threads":T,"link_bw":..,"link_lat":..,"mem_bw":..,"matmul":{"MxKxN":flops}} ---- */
typedef struct {
    double link_bw, link_lat, mem_bw, flops; /* 0: not cached */
} cached;

static bool good(const cJSON *j, double lo, double hi, double *out)
{
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || j->valuedouble < lo || j->valuedouble > hi)
        return false;
    *out = j->valuedouble;
    return true;
}

/* Reads what the cache holds for this shape; a cache that is not what we write counts as empty. */
static void cache_read(const char *path, const char *shape, cached *c, cJSON **doc)
{
    *c = (cached){0};
    *doc = NULL;
    char *text = NULL;
    size_t len = 0;
    if (!path[0] || col_read_file(path, CACHE_MAX, &text, &len, NULL) != COL_OK)
        return;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    double v = 0, t = 0;
    if (!j || !cJSON_IsObject(j) || !good(cJSON_GetObjectItem(j, "version"), CACHE_VERSION, CACHE_VERSION, &v) ||
        !good(cJSON_GetObjectItem(j, "threads"), 1, 1e6, &t) || (int)t != omp_get_max_threads()) {
        cJSON_Delete(j);
        return;
    }
    cached r = {0};
    const cJSON *mm = cJSON_GetObjectItem(j, "matmul");
    /* all or nothing: a field out of range makes the whole file suspect */
    if (!good(cJSON_GetObjectItem(j, "mem_bw"), 1e6, 1e15, &r.mem_bw) ||
        (cJSON_GetObjectItem(j, "link_bw") && !good(cJSON_GetObjectItem(j, "link_bw"), 1e3, 1e15, &r.link_bw)) ||
        (cJSON_GetObjectItem(j, "link_lat") && !good(cJSON_GetObjectItem(j, "link_lat"), 0, 10, &r.link_lat)) ||
        !cJSON_IsObject(mm)) {
        cJSON_Delete(j);
        return;
    }
    const cJSON *f;
    cJSON_ArrayForEach(f, mm)
    {
        double x;
        if (!good(f, 1e3, 1e18, &x)) {
            cJSON_Delete(j);
            return;
        }
        if (f->string && strcmp(f->string, shape) == 0)
            r.flops = x;
    }
    *c = r;
    *doc = j;
}

static col_status cache_write(const char *path, cJSON *doc, const char *shape, const cached *c, col_err *err)
{
    cJSON *j = doc ? doc : cJSON_CreateObject();
    if (!j)
        return col_err_set(err, COL_ENOMEM, "out of memory");
    const char *keys[] = {"version", "threads", "mem_bw", "link_bw", "link_lat"};
    double vals[] = {CACHE_VERSION, omp_get_max_threads(), c->mem_bw, c->link_bw, c->link_lat};
    for (int i = 0; i < 5; i++) {
        if (i >= 3 && !(c->link_bw > 0))
            continue;
        cJSON_DeleteItemFromObject(j, keys[i]);
        cJSON_AddNumberToObject(j, keys[i], vals[i]);
    }
    cJSON *mm = cJSON_GetObjectItem(j, "matmul");
    if (!cJSON_IsObject(mm)) {
        cJSON_DeleteItemFromObject(j, "matmul");
        mm = cJSON_AddObjectToObject(j, "matmul");
    }
    if (mm) {
        cJSON_DeleteItemFromObject(mm, shape);
        cJSON_AddNumberToObject(mm, shape, c->flops);
    }
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s)
        return col_err_set(err, COL_ENOMEM, "out of memory");
    make_dirs(path);
    col_status st = col_write_file_atomic(path, s, strlen(s), err);
    free(s);
    return st;
}

/* ---- measurements ---- */

/* flop/s of [m, k] x [k, n] matmuls through the CPU backend: at least 3 runs and 0.2 s, at most 1 s */
static col_status time_matmul(int m, int k, int n, double *flops, col_err *err)
{
    col_backend be;
    col_status st = col_cpu_backend_init(&be, err);
    if (st != COL_OK)
        return st;
    col_graph *g = col_graph_new();
    float *a = malloc(sizeof *a * (size_t)m * (size_t)k), *b = malloc(sizeof *b * (size_t)k * (size_t)n);
    col_plan *p = NULL;
    if (!g || !a || !b) {
        st = col_err_set(err, COL_ENOMEM, "probe: out of memory");
        goto out;
    }
    for (size_t i = 0; i < (size_t)m * (size_t)k; i++)
        a[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < (size_t)k * (size_t)n; i++)
        b[i] = (float)(i % 5) * 0.01f;
    int64_t sa[2] = {m, k}, sb[2] = {k, n};
    col_node *na = col_input(g, "a", COL_F32, 2, sa), *nb = col_input(g, "b", COL_F32, 2, sb);
    col_node *y = col_matmul(g, na, nb);
    if (!y || (st = col_graph_status(g)) != COL_OK) {
        st = col_err_copy(err, col_graph_error(g));
        goto out;
    }
    col_mark_output(y);
    if ((st = col_bind(na, a, err)) != COL_OK || (st = col_bind(nb, b, err)) != COL_OK ||
        (st = col_plan_create(g, &p, err)) != COL_OK || (st = col_plan_run(p, &be, err)) != COL_OK) /* warm */
        goto out;
    int runs = 0;
    double t0 = col_seconds(), t = 0;
    while ((runs < 3 || t < 0.2) && t < 1.0) {
        if ((st = col_plan_run(p, &be, err)) != COL_OK)
            goto out;
        runs++;
        t = col_seconds() - t0;
    }
    *flops = 2.0 * m * (double)k * n * runs / (t > 0 ? t : 1e-9);
out:
    col_plan_free(p);
    col_graph_free(g);
    free(a), free(b);
    col_cpu_backend_free(&be);
    return st;
}

/* bytes/s of memcpy (read + write counted) */
static double time_memcpy(void)
{
    size_t n = 32u << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a), free(b);
        return 1e9;
    }
    memset(a, 1, n), memset(b, 2, n);
    int runs = 0;
    double t0 = col_seconds(), t = 0;
    while (runs < 4 || (t < 0.1 && runs < 64)) {
        memcpy(runs % 2 ? a : b, runs % 2 ? b : a, n);
        runs++;
        t = col_seconds() - t0;
    }
    volatile char sink = a[n / 2] + b[n / 3];
    (void)sink;
    free(a), free(b);
    return 2.0 * (double)n * runs / (t > 0 ? t : 1e-9);
}

#ifdef COL_WITH_COMM
/* seconds per all-reduce of count floats, the processes started together */
static col_status time_all_reduce(struct col_comm *c, float *buf, size_t count, int reps, double *sec, col_err *err)
{
    col_status st = col_comm_barrier(c, err);
    double t0 = col_seconds();
    for (int i = 0; i < reps && st == COL_OK; i++)
        st = col_comm_all_reduce(c, buf, buf, count, COL_F32, COL_RED_SUM, err);
    double t = (col_seconds() - t0) / reps, mx = 0;
    float tf = (float)t, m = 0;
    if (st == COL_OK && (st = col_comm_all_reduce(c, &tf, &m, 1, COL_F32, COL_RED_MAX, err)) == COL_OK)
        mx = m; /* the slowest process's time: when the collective ended for all */
    *sec = mx;
    return st;
}

/* latency per message and bytes/s, from the ring model's time 2(P-1) lat + 2(P-1)/P S / bw at two sizes */
static col_status time_link(struct col_comm *c, double *bw, double *lat, col_err *err)
{
    int P = col_comm_size(c);
    float *buf = calloc(BIG_FLOATS, sizeof *buf);
    if (!buf)
        return col_err_set(err, COL_ENOMEM, "probe: out of memory");
    double ts = 0, tb = 0;
    col_status st = time_all_reduce(c, buf, 1, 3, &ts, err); /* warm */
    if (st == COL_OK)
        st = time_all_reduce(c, buf, 1, 20, &ts, err);
    if (st == COL_OK)
        st = time_all_reduce(c, buf, BIG_FLOATS, 4, &tb, err);
    free(buf);
    if (st != COL_OK)
        return st;
    double f = 2.0 * (P - 1) / P, sb = 4.0 * BIG_FLOATS, ss = 4.0;
    *lat = ts / (2.0 * (P - 1));
    *bw = tb > ts ? f * (sb - ss) / (tb - ts) : f * sb / (tb > 0 ? tb : 1e-9);
    return COL_OK;
}
#endif

col_status plan_probe_run(struct col_comm *world, int m, int k, int n, plan_probe *out, col_err *err)
{
    memset(out, 0, sizeof *out);
    double t0 = col_seconds();
    if (m < 1 || k < 1 || n < 1)
        return col_err_set(err, COL_EINVAL, "probe: a matmul of %d x %d x %d", m, k, n);
    int nproc = 1, rank = 0;
#ifdef COL_WITH_COMM
    if (world)
        nproc = col_comm_size(world), rank = col_comm_rank(world);
#else
    world = NULL;
#endif
    char shape[64];
    snprintf(shape, sizeof shape, "%dx%dx%d", m, k, n);
    if (!plan_probe_cache_path(nproc, out->cache, sizeof out->cache))
        out->cache[0] = '\0';
    cached c = {0};
    cJSON *doc = NULL;
    if (rank == 0)
        cache_read(out->cache, shape, &c, &doc);
    col_status st = COL_OK;
#ifdef COL_WITH_COMM
    if (world) /* process 0's cache for all: 4 doubles as 8 int32 */
        st = col_comm_broadcast(world, &c, sizeof c / sizeof(int32_t), COL_I32, 0, err);
#endif
    bool fresh = false;
    if (st == COL_OK && !(c.flops > 0)) {
        double f = 0;
        st = time_matmul(m, k, n, &f, err);
#ifdef COL_WITH_COMM
        float ff = (float)f, sum = 0;
        if (st == COL_OK && world && (st = col_comm_all_reduce(world, &ff, &sum, 1, COL_F32, COL_RED_SUM, err)) == COL_OK)
            f = sum / nproc;
#endif
        c.flops = f;
        fresh = true;
    }
    if (st == COL_OK && !(c.mem_bw > 0)) {
        double b = time_memcpy();
#ifdef COL_WITH_COMM
        float bf = (float)b, sum = 0;
        if (world && (st = col_comm_all_reduce(world, &bf, &sum, 1, COL_F32, COL_RED_SUM, err)) == COL_OK)
            b = sum / nproc;
#endif
        c.mem_bw = b;
        fresh = true;
    }
#ifdef COL_WITH_COMM
    if (st == COL_OK && world && nproc > 1 && !(c.link_bw > 0)) {
        st = time_link(world, &c.link_bw, &c.link_lat, err);
        fresh = true;
    }
#endif
    if (st != COL_OK) {
        cJSON_Delete(doc);
        return st;
    }
    out->rates = (col_plan_rates){.flops = c.flops, .mem_bw = c.mem_bw, .link_bw = c.link_bw, .link_lat = c.link_lat};
    out->link_measured = nproc > 1;
    if (nproc == 1) {
        out->rates.link_bw = c.mem_bw / 4;
        out->rates.link_lat = ASSUMED_LAT;
        snprintf(out->note, sizeof out->note, "one process: the link between processes is not measured (assumed "
                 "%.2g GB/s, %.0f us per message)", out->rates.link_bw / 1e9, ASSUMED_LAT * 1e6);
    }
    out->from_cache = !fresh;
    if (fresh && rank == 0 && out->cache[0]) {
        col_err werr = {0};
        if (cache_write(out->cache, doc, shape, &c, &werr) != COL_OK)
            snprintf(out->note + strlen(out->note), sizeof out->note - strlen(out->note), "%snot cached: %s",
                     out->note[0] ? "; " : "", werr.msg);
        doc = NULL; /* cache_write took it */
    }
    cJSON_Delete(doc);
    out->seconds = col_seconds() - t0;
    return COL_OK;
}
