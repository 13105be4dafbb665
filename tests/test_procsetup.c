/* test_procsetup.c - the process settings of colossal's programs
 * (apps/procsetup.h), made as a program makes them: first thing in main.
 *
 * Run it as make check does (no OMP_WAIT_POLICY, GOMP_SPINCOUNT,
 * OMP_NUM_THREADS or OPENBLAS_CORETYPE in the environment) and each setting
 * is the program's; set any of them and that one is checked to be left as
 * the user gave it. The wait policy needs the program to execute itself
 * again: /proc/self/environ (the environment the process was started with,
 * which is what libgomp read) shows whether it did. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "testlib.h"
#include "blas.h"
#include "procsetup.h"
#include "cpus.h"

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v ? v : dflt;
}

/* the value of name in the environment this process was started with, or "" */
static const char *start_env(const char *name, char *buf, size_t n)
{
    static char all[65536];
    FILE *f = fopen("/proc/self/environ", "r");
    size_t got = f ? fread(all, 1, sizeof all - 1, f) : 0;
    if (f)
        fclose(f);
    all[got] = '\0';
    size_t len = strlen(name);
    buf[0] = '\0';
    for (size_t i = 0; i < got; i += strlen(all + i) + 1)
        if (!strncmp(all + i, name, len) && all[i + len] == '=') {
            snprintf(buf, n, "%s", all + i + len + 1);
            break;
        }
    return buf;
}

int main(int argc, char **argv)
{
    (void)argc;
    /* what the user gave, remembered across the exec in variables of the test's own */
    if (!getenv("COL_TEST_PID")) {
        char pid[32];
        snprintf(pid, sizeof pid, "%ld", (long)getpid());
        setenv("COL_TEST_PID", pid, 1);
        /* "-" for unset, else "=VALUE" */
        char v[256];
        snprintf(v, sizeof v, "%s%s", getenv("OMP_WAIT_POLICY") ? "=" : "-", env_or("OMP_WAIT_POLICY", ""));
        setenv("COL_TEST_USER_WAIT", v, 1);
        snprintf(v, sizeof v, "%s%s", getenv("OPENBLAS_CORETYPE") ? "=" : "-", env_or("OPENBLAS_CORETYPE", ""));
        setenv("COL_TEST_USER_CORE", v, 1);
        setenv("COL_TEST_USER_SPIN", getenv("GOMP_SPINCOUNT") ? "1" : "0", 1);
    }
    const char *user_wait = getenv("COL_TEST_USER_WAIT"), *user_core = getenv("COL_TEST_USER_CORE");
    bool chose_wait = user_wait[0] == '=' || !strcmp(getenv("COL_TEST_USER_SPIN"), "1"), chose_core = user_core[0] == '=';
    col_proc_setup(argv);

    char buf[256];
    if (chose_wait) {
        const char *now = getenv("OMP_WAIT_POLICY");
        TL_OK(user_wait[0] == '=' ? now && !strcmp(now, user_wait + 1) : now == NULL,
              "the user chose the waiting (OMP_WAIT_POLICY%s, GOMP_SPINCOUNT %s): left as it was",
              user_wait[0] == '=' ? user_wait : " unset",
              getenv("COL_TEST_USER_SPIN")[0] == '1' ? "set" : "unset");
    } else {
        TL_OK(!strcmp(start_env("OMP_WAIT_POLICY", buf, sizeof buf), "passive"),
              "OMP_WAIT_POLICY=passive was in the environment the process started with (what libgomp read): '%s'", buf);
        char pid[32];
        snprintf(pid, sizeof pid, "%ld", (long)getpid());
        TL_OK(!strcmp(pid, getenv("COL_TEST_PID")), "executed again in the same process (pid %s)", pid);
    }
    int cpus = col_cpus_available();
    if (getenv("OMP_NUM_THREADS"))
        TL_OK(true, "# SKIP the user set OMP_NUM_THREADS");
    else
        TL_OK(omp_get_max_threads() == cpus, "OpenMP's thread count is the CPUs available: %d", cpus);

    const char *pref = col_blas_preferred_core(), *core = getenv("OPENBLAS_CORETYPE");
    if (chose_core)
        TL_OK(core && !strcmp(core, user_core + 1), "the user's OPENBLAS_CORETYPE%s is left as it was", user_core);
    else if (!pref)
        TL_OK(core == NULL, "no AVX-512 here: OPENBLAS_CORETYPE left unset, OpenBLAS detects the CPU");
    else
        TL_OK(core && !strcmp(core, pref), "OPENBLAS_CORETYPE=%s asked for on this CPU", pref);
    col_backend be;
    tl_cpu_backend(&be);
    const char *got = col_cpu_backend_blas_core(&be);
    if (core)
        TL_OK(!strcasecmp(got, core), "OpenBLAS runs the kernel set asked for: %s (asked %s)", got, core);
    else
        TL_OK(got[0] != '\0', "OpenBLAS chose its kernel set itself: %s", got);
    TL_OK(col_cpu_backend_threads(&be) == omp_get_max_threads(), "the backend runs on those %d threads",
          col_cpu_backend_threads(&be));
    col_cpu_backend_free(&be);
    col_proc_describe(buf, sizeof buf);
    TL_NOTE("%s", buf);
    return tl_done();
}
