/* test_threads.c - the libraries leave the process environment alone (the
 * environ array, its entries and their text are the same before and after
 * the CPU backend is made, runs a GEMM and is freed); a cgroup CPU quota
 * read from fake cgroup trees; the CPUs available; the backend's thread
 * count; OpenBLAS's build and thread count; a GEMM from inside a parallel
 * region. This program makes no process settings of its own
 * (apps/procsetup.c is tested in test_procsetup). */
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testlib.h"
#include "blas.h"
#include "graph.h"
#include "ops.h"
#include "plan.h"
#include "rng.h"
#include "cpus.h"

extern char **environ;

typedef struct {
    char **array;   /* environ itself */
    size_t n;
    char **entries; /* the pointers in it */
    char **text;    /* copies of what they pointed to */
} env_snap;

static env_snap env_take(void)
{
    env_snap s = {.array = environ};
    while (environ[s.n])
        s.n++;
    s.entries = malloc((s.n + 1) * sizeof *s.entries);
    s.text = malloc((s.n + 1) * sizeof *s.text);
    for (size_t i = 0; i < s.n; i++)
        s.entries[i] = environ[i], s.text[i] = strdup(environ[i]);
    return s;
}

/* NULL if environ is as in s, else what differs */
static const char *env_diff(const env_snap *s)
{
    static char why[256];
    if (environ != s->array)
        return "the environ array was replaced (a variable was added or removed)";
    for (size_t i = 0; i <= s->n; i++) {
        if (i == s->n)
            return environ[i] ? "a variable was added" : NULL;
        if (!environ[i])
            return "a variable was removed";
        if (environ[i] != s->entries[i] || strcmp(environ[i], s->text[i])) {
            snprintf(why, sizeof why, "entry %zu changed: %.40s -> %.40s", i, s->text[i], environ[i]);
            return why;
        }
    }
    return NULL;
}

static void env_free(env_snap *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->text[i]);
    free(s->entries);
    free(s->text);
}

/* c = a @ b (M x K @ K x N) through the backend; false if it fails */
static bool matmul(const col_backend *be, const float *a, const float *b, float *c, int64_t M, int64_t K, int64_t N)
{
    col_graph *g = col_graph_new();
    int64_t sa[2] = {M, K}, sb[2] = {K, N};
    col_node *x = col_input(g, "a", COL_F32, 2, sa), *w = col_input(g, "b", COL_F32, 2, sb);
    col_bind(x, (void *)a, NULL), col_bind(w, (void *)b, NULL);
    col_node *y = col_matmul(g, x, w);
    col_mark_output(y);
    col_plan *p = NULL;
    col_err err = {0};
    bool ok = col_plan_create(g, &p, &err) == COL_OK && col_plan_run(p, be, &err) == COL_OK;
    if (ok)
        memcpy(c, col_data(y), sizeof(float) * (size_t)(M * N));
    col_plan_free(p);
    col_graph_free(g);
    return ok;
}

enum { M = 96, K = 256, N = 320 };

static void test_environment(void)
{
    /* unset, so a library that "helpfully" sets it (as blas.c once did) is caught */
    unsetenv("OPENBLAS_CORETYPE");
    env_snap s = env_take();
    col_backend be;
    col_err err = {0};
    bool ok = col_cpu_backend_init(&be, &err) == COL_OK;
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N), *c = malloc(sizeof(float) * M * N);
    col_fill_uniform(a, M * K, 1, -1, 1);
    col_fill_uniform(b, K * N, 2, -1, 1);
    ok = ok && matmul(&be, a, b, c, M, K, N);
    col_blas blas;
    ok = ok && col_blas_load(&blas, &err) == COL_OK;
    if (ok)
        col_blas_unload(&blas);
    col_cpu_backend_free(&be);
    TL_OK(ok, "backend made, GEMM run, OpenBLAS loaded again, backend freed%s%s", ok ? "" : ": ", ok ? "" : err.msg);
    const char *d = env_diff(&s);
    TL_OK(d == NULL, "the process environment is the same after all that (%zu variables)%s%s", s.n, d ? ": " : "",
          d ? d : "");
    TL_OK(getenv("OPENBLAS_CORETYPE") == NULL, "OPENBLAS_CORETYPE still unset");
    env_free(&s);
    free(a), free(b), free(c);
}

/* writes text to root/rel (making the directories) */
static void put(const char *root, const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0700);
            *p = '/';
        }
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_cgroup(void)
{
    char root[] = "/tmp/col_test_cgroup_XXXXXX";
    if (!mkdtemp(root)) {
        TL_OK(false, "temporary directory");
        return;
    }
    /* v2: a 1.5-CPU quota on the parent, none on the process's group or the root */
    put(root, "v2/cpu.max", "max 100000\n");
    put(root, "v2/app.slice/cpu.max", "150000 100000\n");
    put(root, "v2/app.slice/run.scope/cpu.max", "max 100000\n");
    char r2[1100];
    snprintf(r2, sizeof r2, "%s/v2", root);
    TL_OK(col_cgroup_cpu_limit(r2, "0::/app.slice/run.scope\n") == 2, "v2: 1.5 CPUs on a parent group round up to 2");
    TL_OK(col_cgroup_cpu_limit(r2, "0::/\n") == 0, "v2: no quota at the root: no limit");
    put(root, "v2/app.slice/run.scope/cpu.max", "50000 100000\n");
    TL_OK(col_cgroup_cpu_limit(r2, "0::/app.slice/run.scope\n") == 1, "v2: the smallest quota on the way up counts");
    /* v1: cpu,cpuacct hierarchy; a container whose own group is the mount's root */
    put(root, "v1/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "300000\n");
    put(root, "v1/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    put(root, "v1/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    put(root, "v1/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    char r1[1100];
    snprintf(r1, sizeof r1, "%s/v1", root);
    const char *self1 = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n";
    TL_OK(col_cgroup_cpu_limit(r1, self1) == 3, "v1: cfs quota 300000 / 100000 = 3 CPUs");
    TL_OK(col_cgroup_cpu_limit(r1, "4:cpu,cpuacct:/other\n") == 0, "v1: quota -1: no limit");
    put(root, "v1/cpu,cpuacct/cpu.cfs_quota_us", "200000\n");
    TL_OK(col_cgroup_cpu_limit(r1, "4:cpu,cpuacct:/not/mounted/here\n") == 2,
          "v1: a group path not under the mount falls back to the mount's own quota");
    TL_OK(col_cgroup_cpu_limit(r1, "4:cpuacct:/docker/abc\n") == 0, "v1: a line without the cpu controller is ignored");
    TL_OK(col_cgroup_cpu_limit(root, "garbage\n\n::\n0::relative\n") == 0 && col_cgroup_cpu_limit(root, "") == 0,
          "malformed /proc/self/cgroup text: no limit");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    TL_OK(system(cmd) == 0, "cleaned up %s", root);
}

static void test_counts(void)
{
    cpu_set_t set;
    int aff = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    int n = col_cpus_available();
    TL_OK(n >= 1 && (aff == 0 || n <= aff), "%d CPUs available (affinity mask: %d)", n, aff);
    col_backend be;
    tl_cpu_backend(&be);
    int t = col_cpu_backend_threads(&be), omp = omp_get_max_threads();
    if (getenv("OMP_NUM_THREADS"))
        TL_OK(t == omp, "OMP_NUM_THREADS set: the backend takes OpenMP's count (%d)", t);
    else
        TL_OK(t == (omp < n ? omp : n), "the backend runs %d threads: OpenMP's %d capped by the %d CPUs available", t,
              omp, n);
    int par = col_cpu_backend_blas_parallel(&be);
    const char *omp_build = "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0";
    if (access(omp_build, R_OK) == 0)
        TL_OK(par == COL_BLAS_OPENMP, "the OpenMP build of OpenBLAS is loaded (shares our threads): parallel = %d", par);
    else
        TL_OK(true, "# SKIP no %s on this machine", omp_build);
    col_cpu_backend_free(&be);
}

static void test_blas_threads(void)
{
    col_blas b;
    col_err err = {0};
    if (col_blas_load(&b, &err) != COL_OK) {
        TL_OK(false, "load OpenBLAS: %s", err.msg);
        return;
    }
    int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    int r = col_blas_threads_begin(&b, 1);
    bool one = b.parallel != COL_BLAS_OPENMP || omp_get_max_threads() == 1;
    col_blas_threads_end(&b, r);
    TL_OK(one && omp_get_max_threads() == 2 && (b.parallel != COL_BLAS_OPENMP || r == 2),
          "OpenBLAS calls on 1 thread between begin and end, OpenMP's count restored after (%d)", omp_get_max_threads());
    TL_OK(col_blas_threads_begin(&b, 2) == 0, "asking for the count already there changes nothing");
    int inside = -1;
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        inside = col_blas_threads_begin(&b, 1);
    }
    TL_OK(b.parallel != COL_BLAS_OPENMP || inside == 0,
          "inside a parallel region the OpenMP build is left alone (it runs on the calling thread)");
    omp_set_num_threads(saved);
    col_blas_unload(&b);
}

/* GEMMs from the threads of a parallel region run on their calling thread
 * alone (no nested team): they give the bits of a one-thread GEMM (OpenBLAS's
 * bits can depend on its thread count: for this shape they do) */
static void test_gemm_in_parallel(void)
{
    col_backend be;
    tl_cpu_backend(&be);
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *c1 = malloc(sizeof(float) * M * N), *c[2] = {malloc(sizeof(float) * M * N), malloc(sizeof(float) * M * N)};
    col_fill_uniform(a, M * K, 3, -1, 1);
    col_fill_uniform(b, K * N, 4, -1, 1);
    int before = omp_get_max_threads();
    omp_set_num_threads(1);
    bool ok = matmul(&be, a, b, c1, M, K, N), in[2] = {false, false};
    omp_set_num_threads(before);
#pragma omp parallel num_threads(2)
    {
        int id = omp_get_thread_num();
        if (id < 2)
            in[id] = matmul(&be, a, b, c[id], M, K, N);
    }
    bool same = ok && in[0] && in[1] && !memcmp(c1, c[0], sizeof(float) * M * N) && !memcmp(c1, c[1], sizeof(float) * M * N);
    TL_OK(same, "GEMMs run inside a parallel region give the bits of a one-thread GEMM");
    TL_OK(omp_get_max_threads() == before, "OpenMP's thread count is unchanged after (%d)", before);
    free(a), free(b), free(c1), free(c[0]), free(c[1]);
    col_cpu_backend_free(&be);
}

int main(void)
{
    test_environment();
    test_cgroup();
    test_counts();
    test_blas_threads();
    test_gemm_in_parallel();
    return tl_done();
}
