/* units.c - byte counts in binary units (units.h) */
#include "units.h"

#include <stdio.h>

char *col_fmt_bytes(char *buf, size_t n, uint64_t b)
{
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
    if (!buf || n == 0)
        return buf;
    if (b < 1024) {
        snprintf(buf, n, "%u B", (unsigned)b);
        return buf;
    }
    double v = (double)b / 1024.0;
    int u = 0;
    /* move up while the value would print as 1024.0 or more in this unit */
    while (u < 3 && v >= 1023.95) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, n, "%.1f %s", v, unit[u]);
    return buf;
}

char *col_fmt_mib(char *buf, size_t n, uint64_t b)
{
    if (buf && n)
        snprintf(buf, n, "%.1f MiB", (double)b / (1024.0 * 1024.0));
    return buf;
}
