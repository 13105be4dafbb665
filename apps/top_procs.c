/* top_procs.c - the list of processes colossal-top shows (top_procs.h). */
#include "top_procs.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "procmem.h"
#include "timer.h"

bool top_same_run(const top_proc *a, const top_proc *b)
{
    return a->ok && b->ok && mt_stats_is_rank(&a->snap.d) && mt_stats_is_rank(&b->snap.d) &&
           !strcmp(a->snap.d.run_id, b->snap.d.run_id);
}

typedef struct {
    int group; /* the lowest pid of the process's run (its own pid when on its own) */
    int rank;  /* in the run; 0 when on its own */
    int pid;
    int index;
} group_key;

static int cmp_group_key(const void *a, const void *b)
{
    const group_key *x = a, *y = b;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

void top_procs_group(top_proc *procs, int n)
{
    if (n < 2)
        return;
    group_key *k = malloc((size_t)n * sizeof *k);
    top_proc *tmp = malloc((size_t)n * sizeof *tmp);
    if (!k || !tmp) { /* out of memory: shown in pid order, ungrouped */
        free(k), free(tmp);
        return;
    }
    for (int i = 0; i < n; i++) {
        k[i] = (group_key){procs[i].pid, 0, procs[i].pid, i};
        if (!top_same_run(&procs[i], &procs[i])) /* not a rank of a run */
            continue;
        k[i].rank = procs[i].snap.d.world_rank;
        for (int j = 0; j < n; j++)
            if (procs[j].pid < k[i].group && top_same_run(&procs[i], &procs[j]))
                k[i].group = procs[j].pid;
    }
    qsort(k, (size_t)n, sizeof *k, cmp_group_key);
    for (int i = 0; i < n; i++)
        tmp[i] = procs[k[i].index];
    memcpy(procs, tmp, (size_t)n * sizeof *tmp);
    free(k), free(tmp);
}

double top_proc_step_rate(const top_proc *p)
{
    if (!p->ok)
        return 0;
    const mt_stats_data *d = &p->snap.d;
    double s = d->step_compute + d->step_wait + d->step_optim;
    return s > 0 && s < 1e9 ? 1.0 / s : 0;
}

/* ---- sorting: blocks (a process on its own, or a run's ranks) by a key ---- */

typedef struct {
    int start, len;
    bool ok;
    double value; /* memory or rate: larger first */
    const top_proc *first;
} block;

static int cmp_name(const top_proc *a, const top_proc *b)
{
    int c = strcmp(a->snap.program, b->snap.program);
    if (!c)
        c = strcmp(a->snap.d.run, b->snap.d.run);
    return c ? c : (a->pid > b->pid) - (a->pid < b->pid);
}

static int cmp_value(const void *x, const void *y)
{
    const block *a = x, *b = y;
    if (a->ok != b->ok)
        return a->ok ? -1 : 1;
    if (a->value != b->value)
        return a->value > b->value ? -1 : 1;
    return (a->start > b->start) - (a->start < b->start);
}

static int cmp_block_name(const void *x, const void *y)
{
    const block *a = x, *b = y;
    if (a->ok != b->ok)
        return a->ok ? -1 : 1;
    if (!a->ok)
        return (a->start > b->start) - (a->start < b->start);
    int c = cmp_name(a->first, b->first);
    return c ? c : (a->start > b->start) - (a->start < b->start);
}

void top_procs_sort(top_proc *procs, int n, top_sort key)
{
    if (n < 2 || key == TOP_SORT_PID || key >= TOP_NSORTS)
        return;
    block *b = malloc((size_t)n * sizeof *b);
    top_proc *tmp = malloc((size_t)n * sizeof *tmp);
    if (!b || !tmp) { /* out of memory: left in pid order */
        free(b), free(tmp);
        return;
    }
    int nb = 0;
    for (int i = 0; i < n;) {
        block *k = &b[nb++];
        *k = (block){.start = i, .len = 1, .ok = procs[i].ok, .first = &procs[i]};
        while (i + k->len < n && top_same_run(&procs[i], &procs[i + k->len]))
            k->len++;
        for (int j = i; j < i + k->len; j++) {
            const mt_stats_data *d = &procs[j].snap.d;
            if (key == TOP_SORT_MEMORY && procs[j].ok)
                k->value += (double)d->tier_used[MT_TIER_GPU] + (double)d->tier_used[MT_TIER_HOST];
            double r = top_proc_step_rate(&procs[j]);
            if (key == TOP_SORT_RATE && (j == i || r < k->value))
                k->value = r; /* a run goes at its slowest rank's pace */
        }
        i += k->len;
    }
    qsort(b, (size_t)nb, sizeof *b, key == TOP_SORT_NAME ? cmp_block_name : cmp_value);
    int m = 0;
    for (int i = 0; i < nb; i++)
        for (int j = 0; j < b[i].len; j++)
            tmp[m++] = procs[b[i].start + j];
    memcpy(procs, tmp, (size_t)n * sizeof *tmp);
    free(b), free(tmp);
}

int top_procs_filter(top_proc *procs, int n, const char *filter)
{
    if (!filter || !*filter)
        return n;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const top_proc *p = &procs[i];
        bool keep = strcasestr(p->cmdline, filter) ||
                    (p->ok && (strcasestr(p->snap.program, filter) || strcasestr(p->snap.d.run, filter)));
        if (keep && k != i)
            procs[k] = procs[i];
        k += keep;
    }
    return k;
}

static const char *const k_sort_names[TOP_NSORTS] = {"pid", "memory", "step rate", "name"};

const char *top_sort_name(top_sort key) { return key < TOP_NSORTS ? k_sort_names[key] : "pid"; }

bool top_sort_parse(const char *s, top_sort *key)
{
    for (int i = 0; i < TOP_NSORTS; i++)
        if (!strcmp(s, k_sort_names[i]) || (i == TOP_SORT_RATE && !strcmp(s, "rate"))) {
            *key = (top_sort)i;
            return true;
        }
    return false;
}

/* the filter prompt (top_procs.h) */
void top_filter_key(top_ui *ui, int key)
{
    size_t len = strlen(ui->filter);
    if (key == 27 || key == 21) { /* Esc clears and closes, Ctrl-U clears */
        ui->filter[0] = 0;
        ui->filtering = key != 27;
    } else if (key == '\n' || key == '\r' || key == KEY_ENTER) {
        ui->filtering = false;
    } else if (key == KEY_BACKSPACE || key == 127 || key == 8) {
        while (len > 0 && ((unsigned char)ui->filter[len - 1] & 0xc0) == 0x80)
            len--; /* a whole UTF-8 character */
        if (len > 0)
            len--;
        ui->filter[len] = 0;
    } else if (key >= 32 && key < 256 && key != 127 && len + 1 < sizeof ui->filter) {
        ui->filter[len] = (char)key;
        ui->filter[len + 1] = 0;
    }
}

/* ---- /proc/PID ---- */

/* utime + stime (fields 14 and 15 of /proc/PID/stat) and the start time after boot (field 22), in clock ticks;
 * false when they cannot be read */
static bool cpu_ticks(int pid, uint64_t *ticks, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the command name (field 2) may hold spaces and ')' */
    unsigned long long ut, st, t0;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %llu",
                     &ut, &st, &t0) != 3)
        return false;
    *ticks = ut + st;
    *start = t0;
    return true;
}

/* seconds since boot (/proc/uptime); 0 when it cannot be read */
static double uptime(void)
{
    FILE *f = fopen("/proc/uptime", "re");
    double s = 0;
    if (f) {
        if (fscanf(f, "%lf", &s) != 1)
            s = 0;
        fclose(f);
    }
    return s;
}

static void read_cmdline(int pid, char *out, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
    out[0] = 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    size_t n = fread(out, 1, cap - 1, f);
    fclose(f);
    while (n > 0 && out[n - 1] == 0)
        n--;
    for (size_t i = 0; i < n; i++)
        if (out[i] == 0)
            out[i] = ' ';
    out[n] = 0;
    mt_stats_printable(out, cap);
}

static void read_user(int pid, char *out, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d", pid);
    struct stat sb;
    out[0] = 0;
    if (stat(path, &sb) != 0)
        return;
    struct passwd pw, *res = NULL;
    char buf[1024];
    if (getpwuid_r(sb.st_uid, &pw, buf, sizeof buf, &res) == 0 && res && res->pw_name)
        snprintf(out, cap, "%s", res->pw_name);
    else
        snprintf(out, cap, "%u", (unsigned)sb.st_uid);
    mt_stats_printable(out, cap);
}

void top_proc_sys(top_proc *p, const top_proc *prev)
{
    read_user(p->pid, p->user, sizeof p->user);
    read_cmdline(p->pid, p->cmdline, sizeof p->cmdline);
    col_procmem m;
    p->rss_bytes = col_procmem_read_pid(p->pid, &m) ? m.rss : 0;
    p->cpu_percent = -1;
    p->cpu_ticks = 0;
    p->cpu_at = col_seconds();
    uint64_t start;
    long hz = sysconf(_SC_CLK_TCK);
    if (!cpu_ticks(p->pid, &p->cpu_ticks, &start) || hz <= 0)
        return;
    if (prev && prev->pid == p->pid && prev->cpu_at > 0 && p->cpu_at > prev->cpu_at && p->cpu_ticks >= prev->cpu_ticks) {
        p->cpu_percent = 100.0 * (double)(p->cpu_ticks - prev->cpu_ticks) / (double)hz / (p->cpu_at - prev->cpu_at);
        return;
    }
    /* the first look (and --json, --once): the average since the process started, as ps shows it */
    double alive = uptime() - (double)start / (double)hz;
    if (alive > 0)
        p->cpu_percent = 100.0 * (double)p->cpu_ticks / (double)hz / alive;
}
