/* procmem.c - see procmem.h. */
#include "procmem.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* "Name:   1234 kB" -> bytes into *out when the line is the field asked for */
static void field(const char *line, const char *name, size_t *out)
{
    size_t n = strlen(name);
    unsigned long long kb;
    if (strncmp(line, name, n) == 0 && line[n] == ':' && sscanf(line + n + 1, "%llu", &kb) == 1)
        *out = (size_t)kb * 1024;
}

static bool read_status(const char *path, col_procmem *m)
{
    *m = (col_procmem){0};
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        field(line, "VmRSS", &m->rss);
        field(line, "VmHWM", &m->peak);
        field(line, "RssAnon", &m->anon);
        field(line, "RssFile", &m->file);
    }
    fclose(f);
    return m->rss > 0;
}

bool col_procmem_read(col_procmem *m) { return read_status("/proc/self/status", m); }

bool col_procmem_read_pid(int pid, col_procmem *m)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    return read_status(path, m);
}

size_t col_machine_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

bool col_procmem_reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "we");
    if (!f)
        return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}
