/* progress.c - a progress line fitted to the terminal (progress.h) */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "progress.h"

/* set by the handler, read and cleared by progress_resized: a signal handler can reach nothing else */
static volatile sig_atomic_t g_resized;
static void on_winch(int sig)
{
    (void)sig;
    g_resized = 1;
}

void progress_watch_resize(void)
{
    struct sigaction sa = {.sa_handler = on_winch, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGWINCH, &sa, NULL);
}

bool progress_resized(void)
{
    if (!g_resized)
        return false;
    g_resized = 0;
    return true;
}

int progress_width(int fd)
{
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
        return ws.ws_col - 1;
    const char *c = getenv("COLUMNS");
    char *end;
    long v = c && *c ? strtol(c, &end, 10) : 0;
    if (v > 1 && v < 100000 && !*end)
        return (int)v - 1;
    return 79;
}

enum { MAX_FIELDS = 32 };

static const char *sep_of(const progress_field *f) { return f->sep ? f->sep : "  "; }

/* the length of the kept fields joined */
static size_t joined(const progress_field *f, const bool *keep, int n)
{
    size_t total = 0;
    for (int i = 0, first = 1; i < n; i++)
        if (keep[i]) {
            total += strlen(f[i].text) + (first ? 0 : strlen(sep_of(&f[i])));
            first = 0;
        }
    return total;
}

size_t progress_fit(const progress_field *f, int n, int width, char *buf, size_t size)
{
    bool keep[MAX_FIELDS];
    int kept = 0;
    if (n > MAX_FIELDS)
        n = MAX_FIELDS;
    for (int i = 0; i < n; i++)
        kept += keep[i] = f[i].text && f[i].text[0];
    while (kept > 1 && joined(f, keep, n) > (size_t)(width > 0 ? width : 0)) {
        int drop = -1;
        for (int i = 0; i < n; i++)
            if (keep[i] && (drop < 0 || f[i].rank >= f[drop].rank))
                drop = i;
        keep[drop] = false;
        kept--;
    }
    size_t at = 0;
    if (size == 0)
        return 0;
    for (int i = 0, first = 1; i < n; i++) {
        if (!keep[i])
            continue;
        for (const char *s = first ? "" : sep_of(&f[i]); *s && at + 1 < size; s++)
            buf[at++] = *s;
        for (const char *s = f[i].text; *s && at + 1 < size; s++)
            buf[at++] = *s;
        first = 0;
    }
    if (width >= 0 && at > (size_t)width)
        at = (size_t)width;
    buf[at] = '\0';
    return at;
}
