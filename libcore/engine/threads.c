/* threads.c - how many threads host kernels and kernel workspaces are sized
 * for, and how many CPUs this process may use. */
#include "cpus.h"

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"

#ifdef _OPENMP
#include <omp.h>
#endif

int col_max_threads(void)
{
#ifdef _OPENMP
    int n = omp_get_max_threads();
    return n > 0 ? n : 1;
#else
    return 1;
#endif
}

/* CPUs in the calling thread's affinity mask (at least 1) */
static int affinity_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN); /* more CPUs than a cpu_set_t holds, or no affinity */
    return n > 0 ? (int)(n < INT32_MAX ? n : INT32_MAX) : 1;
}

/* the first line of the small file dir/name, or false */
static bool read_line(const char *dir, const char *name, char *buf, size_t n)
{
    char path[4200];
    int len = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= sizeof path)
        return false;
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    return ok;
}

/* CPUs (rounded up) of quota us per period us; 0 when either is not positive */
static int quota_cpus(long long quota, long long period)
{
    if (quota <= 0 || period <= 0)
        return 0;
    long long n = (quota + period - 1) / period;
    return n < INT32_MAX ? (int)n : INT32_MAX;
}

/* the limit set in one cgroup directory, or 0 */
static int dir_limit(const char *dir, bool v2)
{
    char line[128];
    long long quota = 0, period = 0;
    if (v2) /* "QUOTA PERIOD", or "max PERIOD" for none */
        return read_line(dir, "cpu.max", line, sizeof line) && sscanf(line, "%lld %lld", &quota, &period) == 2
                   ? quota_cpus(quota, period)
                   : 0;
    if (!read_line(dir, "cpu.cfs_quota_us", line, sizeof line) || sscanf(line, "%lld", &quota) != 1)
        return 0;
    if (!read_line(dir, "cpu.cfs_period_us", line, sizeof line) || sscanf(line, "%lld", &period) != 1)
        return 0;
    return quota_cpus(quota, period);
}

static int min_limit(int a, int b) { return a == 0 ? b : b == 0 ? a : a < b ? a : b; }

/* the smallest limit from mount/path up to mount itself (0 = none) */
static int walk_limit(const char *mount, const char *path, bool v2)
{
    char dir[4096];
    size_t stop = strlen(mount);
    int len = snprintf(dir, sizeof dir, "%s%s", mount, path);
    if (len < 0 || (size_t)len >= sizeof dir)
        return 0;
    while ((size_t)len > stop && dir[len - 1] == '/')
        dir[--len] = '\0';
    int best = 0;
    for (;;) { /* mount/a/b, mount/a, mount */
        best = min_limit(best, dir_limit(dir, v2));
        char *slash = strrchr(dir + stop, '/');
        if (!slash)
            return best;
        *slash = '\0';
    }
}

/* is "cpu" one of the comma-separated controllers in [c, end)? */
static bool has_cpu_controller(const char *c, const char *end)
{
    while (c < end) {
        const char *comma = memchr(c, ',', (size_t)(end - c));
        const char *e = comma ? comma : end;
        if (e - c == 3 && !memcmp(c, "cpu", 3))
            return true;
        c = e + 1;
    }
    return false;
}

/* the limit for one line of /proc/self/cgroup ("ID:controllers:path") */
static int line_limit(const char *root, const char *line, size_t len)
{
    char copy[4096];
    if (len >= sizeof copy)
        return 0;
    memcpy(copy, line, len);
    copy[len] = '\0';
    char *c1 = strchr(copy, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2 || c2[1] != '/')
        return 0;
    const char *ctl = c1 + 1, *path = c2 + 1;
    char mount[4096];
    if (c2 == ctl) /* v2: "0::/path" */
        return walk_limit(root, path, true);
    if (!has_cpu_controller(ctl, c2))
        return 0;
    *c2 = '\0'; /* v1: mounted as root/CONTROLLERS ("cpu,cpuacct"), often also as root/cpu */
    snprintf(mount, sizeof mount, "%s/%s", root, ctl);
    int n = walk_limit(mount, path, false);
    snprintf(mount, sizeof mount, "%s/cpu", root);
    return min_limit(n, walk_limit(mount, path, false));
}

int col_cgroup_cpu_limit(const char *root, const char *self)
{
    int best = 0;
    while (self && *self) {
        const char *nl = strchr(self, '\n');
        size_t len = nl ? (size_t)(nl - self) : strlen(self);
        best = min_limit(best, line_limit(root, self, len));
        self += len + (nl != NULL);
    }
    return best;
}

int col_cpus_available(void)
{
    int n = affinity_cpus();
    char self[8192];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return n;
    size_t got = fread(self, 1, sizeof self - 1, f);
    fclose(f);
    self[got] = '\0';
    int q = col_cgroup_cpu_limit("/sys/fs/cgroup", self);
    return q > 0 && q < n ? q : n;
}
