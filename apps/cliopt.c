/* cliopt.c - see cliopt.h. */
#include "cliopt.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/cli_version.h" /* COL_GIT_REV: generated at build time (Makefile.am), "" outside a git checkout */

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

const char cli_exit_help[] =
    "Exit status: 0 success; 1 failure (a file, the model, the data, the device); 2 usage error (an unknown\n"
    "option, a bad value, a missing argument, a GPU asked for that cannot be used).\n";

const char *cli_version_line(const char *prog, char *buf, size_t n)
{
    if (COL_GIT_REV[0])
        snprintf(buf, n, "%s %s (git %s)", prog, PACKAGE_VERSION, COL_GIT_REV);
    else
        snprintf(buf, n, "%s %s", prog, PACKAGE_VERSION);
    return buf;
}

void cli_print_version(const char *prog)
{
    char line[256];
    printf("%s\n", cli_version_line(prog, line, sizeof line));
}

enum { NAME_MAX_LEN = 64 };

/* The optimal string alignment distance of a (la bytes) and b (lb bytes), both at most NAME_MAX_LEN:
 * insertions, deletions, substitutions and swaps of two neighbours each cost 1. */
static int edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
    int d[NAME_MAX_LEN + 1][NAME_MAX_LEN + 1];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

/* the name part of "--name=value", its length in *len */
static const char *option_name(const char *arg, size_t *len)
{
    while (*arg == '-')
        arg++;
    const char *eq = strchr(arg, '=');
    *len = eq ? (size_t)(eq - arg) : strlen(arg);
    return arg;
}

const char *cli_suggest(const char *arg, const struct option *opts)
{
    size_t la;
    const char *a = option_name(arg, &la);
    if (la == 0 || la > NAME_MAX_LEN)
        return NULL;
    const char *best = NULL;
    int best_d = 3;
    for (const struct option *o = opts; o->name; o++) {
        size_t lb = strlen(o->name);
        if (lb > NAME_MAX_LEN)
            continue;
        int d = edit_distance(a, la, o->name, lb);
        size_t longer = la > lb ? la : lb;
        /* one edit in a name of 3 or more letters, two in one of 6 or more: close enough to be a typo */
        if (d < best_d && (size_t)(3 * d) <= longer) {
            best = o->name;
            best_d = d;
        }
    }
    return best;
}

const char *cli_unknown_option(const char *arg, const struct option *opts, char *buf, size_t n)
{
    size_t la;
    const char *a = option_name(arg, &la);
    int nprefix = 0;
    for (const struct option *o = opts; o->name && la > 0; o++)
        nprefix += strncmp(o->name, a, la) == 0;
    if (arg[0] == '-' && arg[1] == '-' && nprefix > 1) {
        size_t at = (size_t)snprintf(buf, n, "option '%.*s' is ambiguous:", (int)(la + 2), arg);
        int shown = 0;
        for (const struct option *o = opts; o->name && at < n; o++)
            if (strncmp(o->name, a, la) == 0)
                at += (size_t)snprintf(buf + at, n - at, "%s --%s", shown++ ? "," : "", o->name);
        return buf;
    }
    const char *near = NULL;
    for (const struct option *o = opts; o->name && nprefix == 1 && !near; o++)
        if (la > 0 && strncmp(o->name, a, la) == 0)
            near = o->name; /* the one option it abbreviates (for a parser that takes whole names only) */
    if (!near && arg[0] == '-' && arg[1] == '-')
        near = cli_suggest(arg, opts);
    if (near)
        snprintf(buf, n, "unknown option '%s'; did you mean '--%s'?", arg, near);
    else
        snprintf(buf, n, "unknown option '%s'", arg);
    return buf;
}

int cli_bad(char *msg, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, n, fmt, ap);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

void cli_usage_error(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see %s --help)\n", prog);
    va_end(ap);
    exit(CLI_EXIT_USAGE);
}

bool cli_to_ll(const char *s, long long lo, long long hi, long long *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno || x < lo || x > hi)
        return false;
    *v = x;
    return true;
}

long long cli_parse_int(const char *prog, const char *s, const char *opt, long long lo, long long hi)
{
    long long v;
    if (!cli_to_ll(s, lo, hi, &v))
        cli_usage_error(prog, "%s must be an integer in %lld..%lld (got '%s')", opt, lo, hi, s);
    return v;
}
