/* colossal-top - shows every running colossal process (each program that
 * uses memtier publishes its statistics: mt_stats.h): its owner, CPU and
 * resident memory, memory per tier (used / budget; used / the machine's
 * memory without a budget), where the chunks are, bandwidth per link, how
 * a step's time splits between compute, waiting for transfers and the
 * optimizer, and the loss. Refreshes every second (-d SECONDS) like top;
 * keys switch views (1 2 3), select a process (j/k, arrows), sort (s, F6),
 * filter (/), show the help (h, ?, F1) and quit (q).
 *
 * The ranks of a parallel run (each publishes its own statistics with the
 * same run id) are shown together under the run's header, one line each,
 * by rank.
 *
 * --json prints one snapshot of all processes for scripts (each with its
 * run id, rank, world size, device and collectives' traffic, and the runs
 * with their ranks' pids); --once draws one frame as text on stdout. Errors: one line on stderr, exit 1; usage
 * errors exit 2. */
#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <wchar.h>

#include <cjson/cJSON.h>

#include "timer.h"
#include "top_procs.h"
#include "cliopt.h"
#include "top_view.h"

#define MAX_PROCS 256

static void usage(FILE *f)
{
    fprintf(f, "usage: colossal-top [-d SECONDS] [-p PID[,PID...]] [--view 1|2|3] [--sort KEY] [--filter TEXT]\n"
               "                    [--json | --once]\n"
               "  -d, --delay SECONDS  refresh period (default 1; 0.1 to 3600)\n"
               "  -p, --pid PIDS       show only these processes (ids separated by commas)\n"
               "  --view N             start in view N: 1 overview, 2 chunk map, 3 links and step time\n"
               "  --sort KEY           pid (default), memory, rate (steps per second) or name\n"
               "  --filter TEXT        only processes whose program, run name or command line holds TEXT\n"
               "  --json               print one snapshot of the running colossal processes as JSON and exit\n"
               "  --once               draw one frame as text on stdout and exit (size from $COLUMNS x $LINES)\n"
               "  -h, --help           print this help and exit; --version: print the version and exit\n"
               "keys: h ? F1 help, 1 2 3 or Tab views, j/k or arrows select, s or F6 sort, / filter, q quits\n"
               "%s", cli_exit_help);
}

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "colossal-top: %s%s%s; see colossal-top --help\n", msg, arg ? ": " : "", arg ? arg : "");
    return 2;
}

/* Which processes to show: all, or those given with -p. */
typedef struct {
    int pids[64];
    int n; /* 0: all */
} pid_filter;

static bool wanted(const pid_filter *f, int pid)
{
    for (int i = 0; i < f->n; i++)
        if (f->pids[i] == pid)
            return true;
    return f->n == 0;
}

static bool parse_pids(const char *s, pid_filter *f)
{
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v <= 0 || v > INT_MAX || (*end && *end != ',') || f->n == 64)
            return false;
        f->pids[f->n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return f->n > 0;
}

/* Reads every running publisher into procs (rates against prev); returns
 * how many, or -1 with err set. Processes that end between the listing and
 * the read are left out. */
static int scan(top_proc *procs, const top_proc *prev, int nprev, const pid_filter *filter, col_err *err)
{
    mt_stats_entry es[MAX_PROCS];
    int n = 0;
    if (mt_stats_list(es, MAX_PROCS, &n, NULL, err) != COL_OK)
        return -1;
    if (n > MAX_PROCS)
        n = MAX_PROCS;
    mt_stats_snapshot *s = malloc(sizeof *s);
    if (!s) {
        col_err_set(err, COL_ENOMEM, "out of memory");
        return -1;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!wanted(filter, es[i].pid))
            continue;
        top_proc *p = &procs[k];
        memset(p, 0, sizeof *p);
        p->pid = es[i].pid;
        if (es[i].state == MT_STATS_BAD_VERSION) {
            snprintf(p->problem, sizeof p->problem, "publishes statistics format version %u; this colossal-top reads "
                     "version %u", es[i].version, MT_STATS_VERSION);
            top_proc_sys(p, NULL);
            k++;
            continue;
        }
        col_err e = {0};
        col_status st;
        bool gone = false;
        for (int attempt = 0; attempt < 3; attempt++) { /* a busy machine may stall a read: try again */
            st = mt_stats_read(es[i].pid, s, &e);
            gone = st == COL_EIO || (st == COL_ESTATE && strstr(e.msg, "gone"));
            if (st != COL_ESTATE || gone)
                break;
        }
        if (gone)
            continue; /* it ended meanwhile */
        const top_proc *before = NULL;
        for (int j = 0; j < nprev && !before; j++)
            if (prev[j].pid == es[i].pid)
                before = &prev[j];
        if (st != COL_OK)
            snprintf(p->problem, sizeof p->problem, "%s", e.msg);
        else
            top_proc_set(p, s, before);
        top_proc_sys(p, before);
        k++;
    }
    free(s);
    top_procs_group(procs, k);
    return k;
}

/* The list shown: the processes of all (n) that pass the filter, in the order asked for, into shown; returns
 * how many. */
static int list(top_proc *shown, const top_proc *all, int n, top_sort sort, const char *text)
{
    memcpy(shown, all, (size_t)n * sizeof *shown);
    n = top_procs_filter(shown, n, text);
    top_procs_sort(shown, n, sort);
    return n;
}

/* ---- --json ---- */

static cJSON *tier_triplet(const uint64_t v[MT_NTIERS])
{
    cJSON *o = cJSON_CreateObject();
    static const mt_tier order[MT_NTIERS] = {MT_TIER_GPU, MT_TIER_HOST, MT_TIER_NVME};
    for (int t = 0; t < MT_NTIERS; t++)
        cJSON_AddNumberToObject(o, mt_stats_tier_name(order[t]), (double)v[order[t]]);
    return o;
}

static cJSON *split_json(double compute, double wait, double optim)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "compute", compute);
    cJSON_AddNumberToObject(o, "wait", wait);
    cJSON_AddNumberToObject(o, "optimizer", optim);
    return o;
}

/* the process as the system sees it ("" and -1 where /proc does not tell), after its statistics */
static cJSON *sys_json(cJSON *o, const top_proc *p)
{
    cJSON_AddStringToObject(o, "user", p->user);
    cJSON_AddNumberToObject(o, "cpu_percent", p->cpu_percent >= 0 ? round(p->cpu_percent * 10) / 10 : -1);
    cJSON_AddNumberToObject(o, "rss_bytes", (double)p->rss_bytes);
    cJSON_AddStringToObject(o, "cmdline", p->cmdline);
    return o;
}

static cJSON *proc_json(const top_proc *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "pid", p->pid);
    if (!p->ok) {
        cJSON_AddStringToObject(o, "error", p->problem);
        return sys_json(o, p);
    }
    const mt_stats_snapshot *s = &p->snap;
    const mt_stats_data *d = &s->d;
    cJSON_AddStringToObject(o, "program", s->program);
    cJSON_AddStringToObject(o, "run", d->run);
    cJSON_AddNumberToObject(o, "start_time", s->start_time);
    cJSON_AddNumberToObject(o, "updated", d->updated);
    /* a parallel run (run_id "" and world_size 1: a process on its own) and the rank's collectives */
    bool rank = mt_stats_is_rank(d);
    cJSON_AddStringToObject(o, "run_id", rank ? d->run_id : "");
    cJSON_AddNumberToObject(o, "rank", rank ? d->world_rank : 0);
    cJSON_AddNumberToObject(o, "world_size", rank ? d->world_size : 1);
    cJSON_AddStringToObject(o, "device", d->device);
    cJSON *cm = cJSON_AddObjectToObject(o, "comm");
    cJSON_AddNumberToObject(cm, "sent", (double)d->comm_sent);
    cJSON_AddNumberToObject(cm, "recv", (double)d->comm_recv);
    cJSON_AddNumberToObject(cm, "wait", d->comm_wait);
    cJSON_AddNumberToObject(cm, "ops", (double)d->comm_ops);
    cJSON_AddNumberToObject(o, "step", (double)d->step);
    cJSON_AddNumberToObject(o, "total_steps", (double)d->total_steps);
    cJSON_AddNumberToObject(o, "loss", d->loss);
    cJSON_AddNumberToObject(o, "tokens_per_s", d->tokens_per_s);
    cJSON *tiers = cJSON_AddObjectToObject(o, "tiers");
    static const mt_tier order[MT_NTIERS] = {MT_TIER_GPU, MT_TIER_HOST, MT_TIER_NVME};
    for (int t = 0; t < MT_NTIERS; t++) {
        cJSON *x = cJSON_AddObjectToObject(tiers, mt_stats_tier_name(order[t]));
        cJSON_AddNumberToObject(x, "used", (double)d->tier_used[order[t]]);
        cJSON_AddNumberToObject(x, "budget", (double)d->tier_budget[order[t]]);
        if (order[t] == MT_TIER_GPU && d->device_total) { /* on a GPU: the device and its memory (every process's) */
            cJSON_AddStringToObject(x, "device", d->device);
            cJSON_AddNumberToObject(x, "device_used", (double)d->device_used);
            cJSON_AddNumberToObject(x, "device_total", (double)d->device_total);
        }
    }
    cJSON *kinds = cJSON_AddObjectToObject(o, "kinds");
    static const char *const kn[MT_NKINDS] = {"params", "grads", "optimizer"};
    for (int k = 0; k < MT_NKINDS; k++)
        cJSON_AddItemToObject(kinds, kn[k], tier_triplet(d->kind_bytes[k]));
    cJSON *links = cJSON_AddObjectToObject(o, "links");
    for (int l = 0; l < MT_NLINKS; l++)
        cJSON_AddNumberToObject(links, mt_stats_link_name((mt_link)l), (double)d->link_bytes[l]);
    cJSON_AddNumberToObject(o, "nvme_written", (double)d->nvme_written);
    cJSON *st = cJSON_AddObjectToObject(o, "step_time");
    cJSON_AddItemToObject(st, "last", split_json(d->step_compute, d->step_wait, d->step_optim));
    cJSON_AddItemToObject(st, "total", split_json(d->total_compute, d->total_wait, d->total_optim));
    float losses[MT_STATS_LOSS_RING];
    int nl = mt_stats_recent_losses(d, losses, MT_STATS_LOSS_RING);
    cJSON *la = cJSON_AddArrayToObject(o, "losses");
    for (int i = 0; i < nl; i++)
        cJSON_AddItemToArray(la, cJSON_CreateNumber((double)losses[i]));
    /* the chunk map as strings, one character per chunk: tier c/h/n/-, kind p/g/o, flags d (dirty) u (in use) */
    int shown = d->nchunks < MT_STATS_MAX_CHUNKS ? (int)d->nchunks : MT_STATS_MAX_CHUNKS;
    char *tier = malloc((size_t)shown + 1), *kind = malloc((size_t)shown + 1), *flags = malloc((size_t)shown + 1);
    cJSON *models = cJSON_AddArrayToObject(o, "models"); /* a run of several models: each one's share */
    for (uint32_t m = 0; m < d->nmodels && m < MT_STATS_MAX_MODELS; m++) {
        cJSON *x = tier_triplet(d->models[m].bytes);
        cJSON_AddStringToObject(x, "name", d->models[m].name);
        cJSON_AddItemToArray(models, x);
    }
    cJSON *ch = cJSON_AddObjectToObject(o, "chunks");
    cJSON_AddNumberToObject(ch, "count", d->nchunks);
    if (tier && kind && flags) {
        for (int i = 0; i < shown; i++) {
            uint8_t c = d->chunk_map[i];
            mt_tier t = mt_stats_chunk_tier(c);
            mt_kind k = mt_stats_chunk_kind(c);
            tier[i] = t == MT_TIER_GPU ? 'c' : t == MT_TIER_HOST ? 'h' : t == MT_TIER_NVME ? 'n' : '-';
            kind[i] = k == MT_PARAM ? 'p' : k == MT_GRAD ? 'g' : k == MT_OPTSTATE ? 'o' : '?';
            flags[i] = (c & MT_STATS_CHUNK_DIRTY) ? ((c & MT_STATS_CHUNK_IN_USE) ? 'b' : 'd')
                                                   : ((c & MT_STATS_CHUNK_IN_USE) ? 'u' : '.');
        }
        tier[shown] = kind[shown] = flags[shown] = 0;
        cJSON_AddStringToObject(ch, "tier", tier);
        cJSON_AddStringToObject(ch, "kind", kind);
        cJSON_AddStringToObject(ch, "flags", flags);
    }
    free(tier), free(kind), free(flags);
    return sys_json(o, p);
}

static int print_json(const top_proc *procs, int n)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "format_version", MT_STATS_VERSION);
    cJSON *arr = cJSON_AddArrayToObject(root, "processes");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, proc_json(&procs[i]));
    /* the parallel runs: their ranks' pids by rank (procs come grouped: top_procs_group) */
    cJSON *runs = cJSON_AddArrayToObject(root, "runs");
    for (int i = 0; i < n; i++) {
        const mt_stats_data *d = &procs[i].snap.d;
        if (!procs[i].ok || !mt_stats_is_rank(d) || (i > 0 && top_same_run(&procs[i - 1], &procs[i])))
            continue;
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "run_id", d->run_id);
        cJSON_AddNumberToObject(r, "world_size", d->world_size);
        cJSON *ranks = cJSON_AddArrayToObject(r, "ranks");
        for (int j = i; j < n && top_same_run(&procs[j], &procs[i]); j++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "rank", procs[j].snap.d.world_rank);
            cJSON_AddNumberToObject(x, "pid", procs[j].pid);
            cJSON_AddItemToArray(ranks, x);
        }
        cJSON_AddItemToArray(runs, r);
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s) {
        fprintf(stderr, "colossal-top: out of memory writing JSON\n");
        return 1;
    }
    puts(s);
    free(s);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- --once: the frame drawn into an off-screen pad, printed as text ---- */

static int env_int(const char *name, int dflt, int lo, int hi)
{
    const char *v = getenv(name);
    char *end;
    long x = v && *v ? strtol(v, &end, 10) : dflt;
    if (v && *v && *end)
        x = dflt;
    return x < lo ? lo : x > hi ? hi : (int)x;
}

static int print_once(top_ui *ui, const top_proc *procs, int n)
{
    int cols = env_int("COLUMNS", 100, 1, 1000), rows = env_int("LINES", 30, 1, 1000);
    FILE *out = fopen("/dev/null", "w"), *in = fopen("/dev/null", "r");
    SCREEN *scr = NULL;
    static const char *const terms[] = {"xterm", "vt100", "ansi"};
    for (int i = 0; i < 3 && !scr && out && in; i++)
        scr = newterm(terms[i], out, in);
    if (!scr) {
        fprintf(stderr, "colossal-top: curses cannot start (no xterm, vt100 or ansi terminal description): "
                        "use --json\n");
        if (out)
            fclose(out);
        if (in)
            fclose(in);
        return 1;
    }
    WINDOW *pad = newpad(rows, cols);
    int rc = 0;
    if (!pad) {
        fprintf(stderr, "colossal-top: cannot make a %dx%d frame\n", cols, rows);
        rc = 1;
    } else {
        top_view_setup(ui);
        ui->color = false; /* text only */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ui->now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
        top_view_draw(pad, ui, procs, n);
        wchar_t *line = malloc(sizeof(wchar_t) * ((size_t)cols + 1));
        for (int y = 0; line && y < rows; y++) {
            int got = mvwinnwstr(pad, y, 0, line, cols);
            if (got == ERR)
                got = 0;
            line[got] = 0;
            int end = (int)wcslen(line);
            while (end > 0 && line[end - 1] == L' ')
                end--;
            line[end] = 0;
            printf("%ls\n", line);
        }
        free(line);
        delwin(pad);
    }
    endwin();
    delscreen(scr);
    fclose(out);
    fclose(in);
    return fflush(stdout) == 0 ? rc : 1;
}

int main(int argc, char **argv)
{
    double delay = 1.0;
    bool json = false, once = false;
    top_view_kind view = TOP_VIEW_OVERVIEW;
    pid_filter filter = {.n = 0};
    top_sort sort = TOP_SORT_PID;
    char text[64] = ""; /* --filter */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--version")) {
            cli_print_version("colossal-top");
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--once")) {
            once = true;
        } else if (!strcmp(a, "--sort")) {
            if (i + 1 >= argc)
                return usage_error("missing value after", a);
            if (!top_sort_parse(argv[++i], &sort))
                return usage_error("--sort takes pid, memory, rate or name", argv[i]);
        } else if (!strcmp(a, "--filter")) {
            if (i + 1 >= argc)
                return usage_error("missing value after", a);
            if (strlen(argv[++i]) >= sizeof text)
                return usage_error("--filter takes at most 63 bytes", argv[i]);
            snprintf(text, sizeof text, "%s", argv[i]);
        } else if (!strcmp(a, "-p") || !strcmp(a, "--pid")) {
            if (i + 1 >= argc)
                return usage_error("missing value after", a);
            if (!parse_pids(argv[++i], &filter))
                return usage_error("-p takes process ids separated by commas", argv[i]);
        } else if (!strcmp(a, "-d") || !strcmp(a, "--delay") || !strcmp(a, "--view")) {
            if (i + 1 >= argc)
                return usage_error("missing value after", a);
            char *end;
            errno = 0;
            double v = strtod(argv[++i], &end);
            if (!strcmp(a, "--view")) {
                if (*end || errno || (v != 1 && v != 2 && v != 3))
                    return usage_error("--view takes 1, 2 or 3", argv[i]);
                view = (top_view_kind)(int)v;
            } else {
                if (*end || errno || !(v >= 0.1 && v <= 3600))
                    return usage_error("-d takes seconds from 0.1 to 3600", argv[i]);
                delay = v;
            }
        } else {
            static const struct option known[] = {
                {"delay", required_argument, 0, 0}, {"pid", required_argument, 0, 0}, {"view", required_argument, 0, 0},
                {"json", no_argument, 0, 0}, {"once", no_argument, 0, 0}, {"help", no_argument, 0, 0},
                {"version", no_argument, 0, 0}, {"sort", required_argument, 0, 0}, {"filter", required_argument, 0, 0},
                {0, 0, 0, 0}};
            char msg[512];
            if (a[0] == '-')
                return usage_error(cli_unknown_option(a, known, msg, sizeof msg), NULL);
            return usage_error("unknown argument", a);
        }
    }
    if (json && once)
        return usage_error("--json and --once are alternatives", NULL);
    setlocale(LC_ALL, "");

    top_proc *cur = calloc(MAX_PROCS, sizeof *cur), *prev = calloc(MAX_PROCS, sizeof *prev);
    top_proc *shown = calloc(MAX_PROCS, sizeof *shown);
    if (!cur || !prev || !shown) {
        fprintf(stderr, "colossal-top: out of memory\n");
        free(cur), free(prev), free(shown);
        return 1;
    }
    col_err err = {0};
    int rc = 0;
    if (json || once) {
        int n = scan(cur, NULL, 0, &filter, &err);
        if (n < 0) {
            fprintf(stderr, "colossal-top: %s\n", err.msg);
            rc = 1;
        } else {
            int total = n;
            n = list(shown, cur, n, sort, text);
            if (json)
                rc = print_json(shown, n);
            else {
                top_ui ui = {.view = view, .delay = delay, .title = "colossal-top", .lister = true, .sort = sort,
                             .total = total};
                snprintf(ui.filter, sizeof ui.filter, "%s", text);
                rc = print_once(&ui, shown, n);
            }
        }
        free(cur), free(prev), free(shown);
        return rc;
    }

    top_tui *t = top_tui_open("colossal-top");
    if (!t) {
        fprintf(stderr, "colossal-top: the standard input and output must be a terminal; for scripts use --json "
                        "or --once\n");
        free(cur), free(prev);
        return 1;
    }
    top_ui *ui = top_tui_ui(t);
    ui->delay = delay;
    ui->view = view;
    ui->lister = true;
    ui->sort = sort;
    snprintf(ui->filter, sizeof ui->filter, "%s", text);
    int nprev = 0, nshown = 0;
    for (bool quit = false; !quit;) {
        int n = scan(cur, prev, nprev, &filter, &err);
        if (n < 0) {
            top_tui_close(t);
            fprintf(stderr, "colossal-top: %s\n", err.msg);
            rc = 1;
            break;
        }
        double end = col_seconds() + delay;
        for (;;) { /* until the time is up: the list made again whenever the sort or the filter changes */
            int pid = ui->selected >= 0 && ui->selected < nshown ? shown[ui->selected].pid : 0;
            ui->total = n;
            nshown = list(shown, cur, n, ui->sort, ui->filter);
            for (int i = 0; i < nshown && pid; i++)
                if (shown[i].pid == pid)
                    ui->selected = i; /* the selection follows its process */
            top_tui_frame(t, shown, nshown);
            top_wait_result w = top_tui_wait(t, shown, nshown, (int)lround(fmax(0, end - col_seconds()) * 1000));
            if (w != TOP_WAIT_LIST) {
                quit = w == TOP_WAIT_QUIT;
                break;
            }
        }
        top_proc *tmp = prev;
        prev = cur, cur = tmp, nprev = n;
    }
    if (rc == 0)
        top_tui_close(t);
    free(cur), free(prev), free(shown);
    return rc;
}
