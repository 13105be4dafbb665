/* top_view.c - the screens of colossal-top (and colossal-finetune --tui). */
#include "top_view.h"
#include "top_procs.h"
#include "procmem.h"

#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

enum { PAIR_COMPUTE = 1, PAIR_HOST, PAIR_NVME, PAIR_NONE, PAIR_WARN, PAIR_LOSS,
       PAIR_MAP_COMPUTE, PAIR_MAP_HOST, PAIR_MAP_NVME, PAIR_MAP_NONE };

/* the tiers in the order shown: nearest the compute first */
static const mt_tier k_tiers[MT_NTIERS] = {MT_TIER_GPU, MT_TIER_HOST, MT_TIER_NVME};
static const char *const k_kind_label[MT_NKINDS] = {"params", "grads", "optimizer"};

typedef struct {
    WINDOW *w;
    int rows, cols;
    const top_ui *ui;
} canvas;

/* ---- small formatting helpers ---- */

/* bytes as col_fmt_bytes writes them; a rate or a count from another process may be anything */
static void fmt_bytes(double b, char *buf, size_t n)
{
    col_fmt_bytes(buf, n, b >= 0 && b < 1.8e19 ? (uint64_t)b : 0);
}

static void fmt_secs(double s, char *buf, size_t n)
{
    if (!(s >= 0) || s > 1e9)
        s = 0;
    long t = (long)s;
    if (t < 60)
        snprintf(buf, n, "%lds", t);
    else if (t < 3600)
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, n, "%ldd%02ldh", t / 86400, t / 3600 % 24);
}

static void fmt_loss(const mt_stats_data *d, char *buf, size_t n)
{
    if (d->nlosses == 0 && d->step == 0)
        snprintf(buf, n, "-");
    else if (!isfinite(d->loss))
        snprintf(buf, n, "%s", isnan(d->loss) ? "nan" : "inf");
    else
        snprintf(buf, n, "%.4f", d->loss);
}

static attr_t pair(const canvas *c, int p) { return c->ui->color ? (attr_t)COLOR_PAIR(p) : A_NORMAL; }

static int tier_pair(mt_tier t, bool map)
{
    switch (t) {
    case MT_TIER_GPU: return map ? PAIR_MAP_COMPUTE : PAIR_COMPUTE;
    case MT_TIER_HOST: return map ? PAIR_MAP_HOST : PAIR_HOST;
    case MT_TIER_NVME: return map ? PAIR_MAP_NVME : PAIR_NVME;
    default: return map ? PAIR_MAP_NONE : PAIR_NONE;
    }
}

/* Text at (y, x), clipped to the window; returns the column after it. */
static int put(const canvas *c, int y, int x, attr_t a, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int put(const canvas *c, int y, int x, attr_t a, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    int len = (int)strlen(buf);
    if (y < 0 || y >= c->rows || x < 0 || x >= c->cols)
        return x + len;
    wattron(c->w, a);
    mvwaddnstr(c->w, y, x, buf, c->cols - x);
    wattroff(c->w, a);
    return x + len;
}

static void put_wide(const canvas *c, int y, int x, attr_t a, const wchar_t *s, int n)
{
    if (y < 0 || y >= c->rows || x < 0 || x >= c->cols)
        return;
    if (n > c->cols - x)
        n = c->cols - x;
    wattron(c->w, a);
    mvwaddnwstr(c->w, y, x, s, n);
    wattroff(c->w, a);
}

/* What a tier's bar measures against: its budget; without one, the memory it draws from, named in *of: the
 * GPU's (" gpu": the compute tier on a GPU) or the machine's (" machine": the compute tier in host memory, the
 * host tier); 0 when there is nothing to measure against (NVMe without a budget). */
static uint64_t tier_total(const top_ui *ui, const mt_stats_data *d, mt_tier t, const char **of)
{
    *of = "";
    if (d->tier_budget[t])
        return d->tier_budget[t];
    if (t == MT_TIER_GPU && d->device_total) {
        *of = " gpu";
        return d->device_total;
    }
    if ((t == MT_TIER_GPU || t == MT_TIER_HOST) && ui->machine_memory) {
        *of = " machine";
        return ui->machine_memory;
    }
    return 0;
}

/* The text beside a tier's bar: "used/budget" (without a budget "used/total machine", tier_total), and for
 * the compute tier on a GPU the device's memory as well: "1.2 GiB/75.0 GiB  cuda:0 31.2 GiB/79.1 GiB" (the
 * device's name up to its first ": "). */
static void tier_text(const top_ui *ui, const mt_stats_data *d, mt_tier t, char *buf, size_t n)
{
    char u[16], b[16];
    const char *of;
    uint64_t total = tier_total(ui, d, t, &of);
    fmt_bytes((double)d->tier_used[t], u, sizeof u);
    if (total)
        fmt_bytes((double)total, b, sizeof b);
    else
        snprintf(b, sizeof b, "-");
    int k = snprintf(buf, n, "%s/%s%s", u, b, of);
    if (t == MT_TIER_GPU && d->device_total && k > 0 && (size_t)k < n) {
        char du[16], dt[16];
        fmt_bytes((double)d->device_used, du, sizeof du);
        fmt_bytes((double)d->device_total, dt, sizeof dt);
        const char *colon = strstr(d->device, ": ");
        int len = colon ? (int)(colon - d->device) : (int)strlen(d->device);
        snprintf(buf + k, n - (size_t)k, "  %.*s%s%s/%s", len > 16 ? 16 : len, d->device, len ? " " : "gpu ", du, dt);
    }
}

/* A bar: "label [|||||.....] text" in width columns, filled by used of budget (tier_total; 0: empty), the text
 * in a column of tw characters (0: its own length, at least 11). */
static void draw_bar(const canvas *c, int y, int x, int width, mt_tier t, uint64_t used, uint64_t budget,
                     const char *text, int tw)
{
    if (tw <= 0)
        tw = (int)strlen(text) > 11 ? (int)strlen(text) : 11; /* a fixed column, so the bars line up */
    const char *label = mt_stats_tier_name(t);
    int inner = width - 8 - 3 - tw;
    put(c, y, x, pair(c, tier_pair(t, false)) | A_BOLD, "%-7s", label);
    if (inner < 4) {
        put(c, y, x + 8, A_NORMAL, "%s", text);
        return;
    }
    int fill = 0;
    bool over = budget && used > budget;
    if (budget)
        fill = over ? inner : (int)((double)inner * (double)used / (double)budget + 0.5);
    if (fill == 0 && used > 0 && budget)
        fill = 1; /* something is there: show it */
    put(c, y, x + 8, A_BOLD, "[");
    char bar[512];
    int nb = inner < (int)sizeof bar - 1 ? inner : (int)sizeof bar - 1;
    for (int i = 0; i < nb; i++)
        bar[i] = i < fill ? '|' : ' ';
    bar[nb] = 0;
    put(c, y, x + 9, over ? pair(c, PAIR_WARN) | A_BOLD : pair(c, tier_pair(t, false)), "%s", bar);
    put(c, y, x + 9 + nb, A_BOLD, "]");
    put(c, y, x + 11 + nb, over ? pair(c, PAIR_WARN) : A_NORMAL, "%s", text);
}

/* The last `width` losses, one character each, scaled between their min and max. */
static void draw_spark(const canvas *c, int y, int x, int width, const mt_stats_data *d)
{
    static const wchar_t blocks[] = L"\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588";
    static const char ascii[] = "._-~=+*#";
    if (width <= 0)
        return;
    float v[MT_STATS_LOSS_RING];
    int n = mt_stats_recent_losses(d, v, width < MT_STATS_LOSS_RING ? width : MT_STATS_LOSS_RING);
    if (n == 0) {
        put(c, y, x, A_DIM, "(no loss yet)");
        return;
    }
    float lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i]))
            lo = fminf(lo, v[i]), hi = fmaxf(hi, v[i]);
    wchar_t ws[MT_STATS_LOSS_RING + 1];
    char cs[MT_STATS_LOSS_RING + 1];
    for (int i = 0; i < n; i++) {
        int lvl = 3;
        if (!isfinite(v[i]))
            lvl = -1;
        else if (hi > lo)
            lvl = (int)lrintf((v[i] - lo) / (hi - lo) * 7.0f);
        ws[i] = lvl < 0 ? L'?' : blocks[lvl];
        cs[i] = lvl < 0 ? '?' : ascii[lvl];
    }
    ws[n] = 0, cs[n] = 0;
    if (c->ui->unicode)
        put_wide(c, y, x, pair(c, PAIR_LOSS), ws, n);
    else
        put(c, y, x, pair(c, PAIR_LOSS), "%s", cs);
}

/* "compute 60%  wait 15%  optimizer 25%" of the last step */
static void fmt_split(const mt_stats_data *d, char *buf, size_t n)
{
    double sum = d->step_compute + d->step_wait + d->step_optim;
    if (!(sum > 0)) {
        snprintf(buf, n, "no step timed yet");
        return;
    }
    snprintf(buf, n, "step %.*fs: compute %.0f%% wait %.0f%% optim %.0f%%", sum < 10 ? 3 : 1, sum,
             100 * d->step_compute / sum, 100 * d->step_wait / sum, 100 * d->step_optim / sum);
}

/* The one-line description of a process; returns the next row. */
static int draw_proc_line(const canvas *c, int y, const top_proc *p, bool selected)
{
    attr_t a = selected ? A_REVERSE | A_BOLD : A_BOLD;
    if (selected)
        put(c, y, 0, a, "%*s", c->cols, "");
    int x = put(c, y, 0, a, "%s%-7d ", selected ? ">" : " ", p->pid);
    if (c->ui->lister) { /* USER CPU% RSS, as the system sees the process */
        char cpu[16] = "-", rss[16] = "-";
        if (p->cpu_percent >= 0)
            snprintf(cpu, sizeof cpu, "%.1f", p->cpu_percent < 1e5 ? p->cpu_percent : 1e5);
        if (p->rss_bytes)
            fmt_bytes((double)p->rss_bytes, rss, sizeof rss);
        x = put(c, y, x, a, "%-8.8s %6s %10s  ", p->user[0] ? p->user : "-", cpu, rss);
    }
    if (!p->ok) {
        put(c, y, x, a, "?");
        put(c, y + 1, 9, pair(c, PAIR_WARN), "%s", p->problem);
        return y + 2;
    }
    const mt_stats_data *d = &p->snap.d;
    char loss[32], up[32];
    fmt_loss(d, loss, sizeof loss);
    fmt_secs(c->ui->now - p->snap.start_time, up, sizeof up);
    x = put(c, y, x, a, "%-18s %-16s step %lld/%lld  loss %s  %.0f tok/s  up %s", p->snap.program,
            d->run[0] ? d->run : "-", (long long)d->step, (long long)d->total_steps, loss, d->tokens_per_s, up);
    double quiet = c->ui->now - d->updated;
    if (d->updated == 0)
        put(c, y, x + 2, a | pair(c, PAIR_WARN), "(nothing published yet)");
    else if (quiet > 10 + 5 * c->ui->delay) {
        char q[32];
        fmt_secs(quiet, q, sizeof q);
        put(c, y, x + 2, a | pair(c, PAIR_WARN), "(no update for %s)", q);
    }
    return y + 1;
}

/* The texts beside the three bars; returns the longest's length (one column for all three, so the bars line up). */
static int tier_texts(const top_ui *ui, const mt_stats_data *d, char text[MT_NTIERS][96])
{
    int tw = 0;
    for (int t = 0; t < MT_NTIERS; t++) {
        tier_text(ui, d, k_tiers[t], text[t], 96);
        if ((int)strlen(text[t]) > tw)
            tw = (int)strlen(text[t]);
    }
    return tw;
}

/* Whether a process's bars leave room beside them (half the width, a bar of at least 10) for the loss and the
 * step's split; else those go below. */
static bool side_by_side(const canvas *c, const mt_stats_data *d)
{
    char text[MT_NTIERS][96];
    return c->cols >= 100 && (c->cols - 4) / 2 - 11 - tier_texts(c->ui, d, text) >= 10;
}

static int proc_block_rows(const canvas *c, const top_proc *p)
{
    if (!p->ok)
        return 3;
    return side_by_side(c, &p->snap.d) ? 5 : 6;
}

static bool is_rank(const top_proc *p) { return top_same_run(p, p); }

/* rows of procs[i] in the overview: a process's block, or a rank's line (after
 * its run's header and column names when it is the first rank shown, and a
 * blank line after the last) */
static int overview_rows(const canvas *c, const top_proc *procs, int n, int i)
{
    if (!is_rank(&procs[i]))
        return proc_block_rows(c, &procs[i]);
    bool first = i == 0 || !top_same_run(&procs[i - 1], &procs[i]);
    bool last = i == n - 1 || !top_same_run(&procs[i + 1], &procs[i]);
    return (first ? 2 : 0) + 1 + (last ? 1 : 0);
}

/* "48.0 MiB/64.0 MiB", or "1.5 GiB" without a budget */
static void tier_cell(const mt_stats_data *d, mt_tier t, char *buf, size_t n)
{
    char u[16], b[16];
    fmt_bytes((double)d->tier_used[t], u, sizeof u);
    if (!d->tier_budget[t]) {
        snprintf(buf, n, "%s", u);
        return;
    }
    fmt_bytes((double)d->tier_budget[t], b, sizeof b);
    snprintf(buf, n, "%s/%s", u, b);
}

/* the device's short name: up to its first ": " ("cuda:0"), "host" for host memory */
static void device_short(const mt_stats_data *d, char *buf, size_t n)
{
    const char *colon = strstr(d->device, ": ");
    int len = colon ? (int)(colon - d->device) : (int)strlen(d->device);
    if (len == 0)
        snprintf(buf, n, "host");
    else
        snprintf(buf, n, "%.*s", len, d->device);
}

static void fmt_wait(double s, char *buf, size_t n)
{
    if (!(s >= 0) || s > 1e9)
        s = 0;
    if (s < 60)
        snprintf(buf, n, "%.1fs", s);
    else
        fmt_secs(s, buf, n);
}

/* The header of a parallel run: its id, program, run name, how many of its
 * ranks publish, its uptime (rank 0's, else the first shown), then the
 * column names. procs[i..] are its ranks, in order. Returns the next row. */
static int draw_run_header(const canvas *c, int y, const top_proc *procs, int n, int i)
{
    int k = 0;
    const top_proc *r0 = &procs[i];
    for (int j = i; j < n && top_same_run(&procs[j], &procs[i]); j++, k++)
        if (procs[j].snap.d.world_rank == 0)
            r0 = &procs[j];
    const mt_stats_data *d = &r0->snap.d;
    char up[32];
    fmt_secs(c->ui->now - r0->snap.start_time, up, sizeof up);
    int x = put(c, y, 0, A_BOLD, " run %s  %s  %s  ", d->run_id, r0->snap.program, d->run[0] ? d->run : "-");
    x = put(c, y, x, k < d->world_size ? A_BOLD | pair(c, PAIR_WARN) : A_BOLD, "%d of %d ranks", k, d->world_size);
    put(c, y, x, A_BOLD, "  up %s", up);
    put(c, y + 1, 0, A_DIM, " %-7s %4s %-8s %-17s %-17s %-17s %9s %7s %9s %9s %6s", "pid", "rank", "device",
        "compute", "host", "nvme", "step", "loss", "sent", "recv", "wait");
    return y + 2;
}

/* One rank's line: pid, rank, device, the tiers, step, loss, collectives' bytes and wait. */
static int draw_rank_line(const canvas *c, int y, const top_proc *p, bool selected)
{
    const mt_stats_data *d = &p->snap.d;
    attr_t a = selected ? A_REVERSE | A_BOLD : A_NORMAL;
    if (selected)
        put(c, y, 0, a, "%*s", c->cols, "");
    char dev[MT_STATS_NAME_MAX], t[MT_NTIERS][40], step[48], loss[32], sent[16], recv[16], wait[32];
    device_short(d, dev, sizeof dev);
    for (int i = 0; i < MT_NTIERS; i++)
        tier_cell(d, k_tiers[i], t[i], sizeof t[i]);
    snprintf(step, sizeof step, "%lld/%lld", (long long)d->step, (long long)d->total_steps);
    fmt_loss(d, loss, sizeof loss);
    fmt_bytes((double)d->comm_sent, sent, sizeof sent);
    fmt_bytes((double)d->comm_recv, recv, sizeof recv);
    fmt_wait(d->comm_wait, wait, sizeof wait);
    int x = put(c, y, 0, a, "%s%-7d %4d %-8.8s %-17s %-17s %-17s %9s %7s %9s %9s %6s", selected ? ">" : " ", p->pid,
                (int)d->world_rank, dev, t[0], t[1], t[2], step, loss, sent, recv, wait);
    double quiet = c->ui->now - d->updated;
    if (d->updated == 0)
        put(c, y, x + 1, a | pair(c, PAIR_WARN), "(nothing published yet)");
    else if (quiet > 10 + 5 * c->ui->delay) {
        char q[32];
        fmt_secs(quiet, q, sizeof q);
        put(c, y, x + 1, a | pair(c, PAIR_WARN), "(no update for %s)", q);
    }
    return y + 1;
}

static void draw_overview(const canvas *c, const top_proc *procs, int n)
{
    int sel = c->ui->selected;
    /* scroll so the selected process is on screen */
    int first = 0, bottom = 2;
    for (int i = 0; i <= sel && i < n; i++)
        bottom += overview_rows(c, procs, n, i);
    while (first < sel && bottom > c->rows)
        bottom -= overview_rows(c, procs, n, first++);
    int y = 2;
    for (int i = first; i < n && y < c->rows; i++) {
        const top_proc *p = &procs[i];
        int next = y + overview_rows(c, procs, n, i);
        if (is_rank(p)) {
            if (i == first || !top_same_run(&procs[i - 1], p))
                y = draw_run_header(c, y, procs, n, i);
            draw_rank_line(c, y, p, i == sel);
            y = next;
            continue;
        }
        y = draw_proc_line(c, y, p, i == sel);
        if (p->ok) {
            const mt_stats_data *d = &p->snap.d;
            bool side = side_by_side(c, d);
            int bw = side ? (c->cols - 4) / 2 : c->cols - 4;
            char text[MT_NTIERS][96];
            int tw = tier_texts(c->ui, d, text);
            for (int t = 0; t < MT_NTIERS; t++) {
                const char *of;
                uint64_t total = tier_total(c->ui, d, k_tiers[t], &of);
                draw_bar(c, y + t, 4, bw, k_tiers[t], d->tier_used[k_tiers[t]], total, text[t], tw);
            }
            char split[128];
            fmt_split(d, split, sizeof split);
            int rx = side ? 4 + bw + 3 : 4, ry = side ? y : y + 3;
            int sx = put(c, ry, rx, A_BOLD, "loss ");
            draw_spark(c, ry, sx, c->cols - sx - 1, d);
            if (side) {
                put(c, ry + 1, rx, A_NORMAL, "%s", split);
                double in = 0, out = 0;
                for (int l = 0; l < MT_NLINKS; l++)
                    if (p->rate[l] > 0)
                        *(l == MT_LINK_H2C || l == MT_LINK_N2H ? &in : &out) += p->rate[l];
                char a[16], b[16];
                fmt_bytes(in, a, sizeof a), fmt_bytes(out, b, sizeof b);
                put(c, ry + 2, rx, A_NORMAL, "links: %s/s toward compute, %s/s away", a, b);
            }
        }
        y = next;
    }
}

static void draw_chunks(const canvas *c, const top_proc *p)
{
    int y = draw_proc_line(c, 2, p, false) + 1;
    if (!p->ok)
        return;
    const mt_stats_data *d = &p->snap.d;
    int shown = d->nchunks < MT_STATS_MAX_CHUNKS ? (int)d->nchunks : MT_STATS_MAX_CHUNKS;
    if ((int)d->nchunks > shown)
        put(c, y++, 1, A_NORMAL, "%u chunks; the map holds the first %d", d->nchunks, shown);
    else
        put(c, y++, 1, A_NORMAL, "%u chunks", d->nchunks);
    /* legend */
    int x = 1;
    static const char letters[] = "chn";
    for (int t = 0; t < MT_NTIERS; t++) {
        x = put(c, y, x, pair(c, tier_pair(k_tiers[t], true)), "%c", letters[t]);
        x = put(c, y, x + 1, A_NORMAL, "%s  ", mt_stats_tier_name(k_tiers[t]));
    }
    x = put(c, y, x, pair(c, PAIR_MAP_NONE), "-");
    put(c, y, x + 1, A_NORMAL, "no memory   upper case: dirty   reverse: in use");
    y += 2;
    /* bytes per kind and tier */
    put(c, y++, 1, A_BOLD, "%-10s %10s %10s %10s", "", "compute", "host", "nvme");
    for (int k = 0; k < MT_NKINDS; k++) {
        char b[MT_NTIERS][16];
        for (int t = 0; t < MT_NTIERS; t++)
            fmt_bytes((double)d->kind_bytes[k][k_tiers[t]], b[t], sizeof b[t]);
        put(c, y++, 1, A_NORMAL, "%-10s %10s %10s %10s", k_kind_label[k], b[0], b[1], b[2]);
    }
    /* each tier's total: the figure the overview's bar shows (tier_used); what the chunks do not hold (the compute
       tier's activations and workspace) is "other", so the column adds up to it */
    char other[MT_NTIERS][16], total[MT_NTIERS][16];
    bool any_other = false;
    for (int t = 0; t < MT_NTIERS; t++) {
        uint64_t used = d->tier_used[k_tiers[t]], chunks = 0;
        for (int k = 0; k < MT_NKINDS; k++)
            chunks += d->kind_bytes[k][k_tiers[t]];
        any_other |= used > chunks;
        fmt_bytes(used > chunks ? (double)(used - chunks) : 0, other[t], sizeof other[t]);
        fmt_bytes((double)used, total[t], sizeof total[t]);
    }
    if (any_other)
        put(c, y++, 1, A_NORMAL, "%-10s %10s %10s %10s", "other", other[0], other[1], other[2]);
    put(c, y++, 1, A_BOLD, "%-10s %10s %10s %10s", "total", total[0], total[1], total[2]);
    for (uint32_t m = 0; m < d->nmodels && m < MT_STATS_MAX_MODELS; m++) { /* a run of several models */
        char b[MT_NTIERS][16];
        for (int t = 0; t < MT_NTIERS; t++)
            fmt_bytes((double)d->models[m].bytes[k_tiers[t]], b[t], sizeof b[t]);
        put(c, y++, 1, A_NORMAL, "%-10.10s %10s %10s %10s", d->models[m].name, b[0], b[1], b[2]);
    }
    y++;
    /* one grid per kind, in allocation order */
    int per_line = c->cols - 2 > 1 ? c->cols - 2 : 1;
    for (int k = 0; k < MT_NKINDS && y < c->rows; k++) {
        int count[MT_NTIERS + 1] = {0}, total = 0;
        for (int i = 0; i < shown; i++)
            if (mt_stats_chunk_kind(d->chunk_map[i]) == (mt_kind)k) {
                mt_tier t = mt_stats_chunk_tier(d->chunk_map[i]);
                count[t == MT_TIER_GPU ? 0 : t == MT_TIER_HOST ? 1 : t == MT_TIER_NVME ? 2 : 3]++;
                total++;
            }
        put(c, y++, 1, A_BOLD, "%s: %d chunks (compute %d, host %d, nvme %d, none %d)", k_kind_label[k], total,
            count[0], count[1], count[2], count[3]);
        int kinds_left = MT_NKINDS - k;
        int max_lines = (c->rows - y) / kinds_left - 1;
        if (max_lines < 1)
            max_lines = 1;
        int col = 0, line = 0, drawn = 0;
        for (int i = 0; i < shown && line < max_lines && y + line < c->rows; i++) {
            uint8_t code = d->chunk_map[i];
            if (mt_stats_chunk_kind(code) != (mt_kind)k)
                continue;
            mt_tier t = mt_stats_chunk_tier(code);
            char ch = t == MT_TIER_GPU ? 'c' : t == MT_TIER_HOST ? 'h' : t == MT_TIER_NVME ? 'n' : '-';
            if (code & MT_STATS_CHUNK_DIRTY && ch != '-')
                ch = (char)(ch - 'a' + 'A');
            attr_t a = pair(c, tier_pair(t, true)) | ((code & MT_STATS_CHUNK_IN_USE) ? A_REVERSE : A_NORMAL);
            put(c, y + line, 1 + col, a, "%c", ch);
            drawn++;
            if (++col == per_line)
                col = 0, line++;
        }
        if (drawn < total) {
            int ly = y + (line < max_lines ? line : max_lines - 1);
            char more[32];
            snprintf(more, sizeof more, " +%d more", total - drawn);
            put(c, ly, c->cols - 13 > 1 ? c->cols - 13 : 1, A_BOLD, "%-12s", more);
        }
        y += (drawn + per_line - 1) / per_line + 1;
        if (drawn == 0)
            y++;
    }
}

static void draw_links(const canvas *c, const top_proc *p)
{
    int y = draw_proc_line(c, 2, p, false) + 1;
    if (!p->ok)
        return;
    const mt_stats_data *d = &p->snap.d;
    put(c, y++, 1, A_BOLD, "%-16s %12s %14s", "link", "total", "rate");
    for (int l = 0; l < MT_NLINKS; l++) {
        char tot[16], rate[24];
        fmt_bytes((double)d->link_bytes[l], tot, sizeof tot);
        if (p->rate[l] < 0)
            snprintf(rate, sizeof rate, "-");
        else
            fmt_bytes(p->rate[l], rate, sizeof rate), strcat(rate, "/s");
        put(c, y++, 1, A_NORMAL, "%-16s %12s %14s", mt_stats_link_name((mt_link)l), tot, rate);
    }
    char nw[16];
    fmt_bytes((double)d->nvme_written, nw, sizeof nw);
    put(c, y++, 1, A_NORMAL, "%-16s %12s", "nvme written", nw);
    y++;
    if (is_rank(p)) { /* a rank of a parallel run: its collectives, all its communicators together */
        char sent[16], recv[16], wait[32];
        fmt_bytes((double)d->comm_sent, sent, sizeof sent);
        fmt_bytes((double)d->comm_recv, recv, sizeof recv);
        fmt_wait(d->comm_wait, wait, sizeof wait);
        put(c, y++, 1, A_BOLD, "collectives: rank %d of %d, run %s", (int)d->world_rank, (int)d->world_size,
            d->run_id);
        put(c, y++, 1, A_NORMAL, "sent %s  received %s  blocked %s  %llu ops", sent, recv, wait,
            (unsigned long long)d->comm_ops);
        y++;
    }
    put(c, y++, 1, A_BOLD, "%-16s %12s %14s", "step time", "last step", "all steps");
    const char *names[3] = {"compute", "waiting", "optimizer"};
    double last[3] = {d->step_compute, d->step_wait, d->step_optim};
    double all[3] = {d->total_compute, d->total_wait, d->total_optim};
    double sl = last[0] + last[1] + last[2], sa = all[0] + all[1] + all[2];
    for (int i = 0; i < 3; i++)
        put(c, y++, 1, A_NORMAL, "%-16s %11.3fs %8.1fs %3.0f%%", names[i], last[i], all[i],
            sa > 0 ? 100 * all[i] / sa : 0.0);
    /* the last step's split as one bar */
    int bw = c->cols - 4;
    if (bw > 2 && sl > 0) {
        static const char ch[3] = {'C', 'W', 'O'};
        static const int pairs[3] = {PAIR_COMPUTE, PAIR_WARN, PAIR_NVME};
        int x = 2, used = 0;
        for (int i = 0; i < 3; i++) {
            int w = i == 2 ? bw - used : (int)((double)bw * last[i] / sl + 0.5);
            if (w > bw - used)
                w = bw - used;
            char buf[512];
            int nb = w < (int)sizeof buf - 1 ? w : (int)sizeof buf - 1;
            memset(buf, ch[i], (size_t)(nb > 0 ? nb : 0));
            buf[nb > 0 ? nb : 0] = 0;
            x = put(c, y, x, pair(c, pairs[i]) | A_REVERSE, "%s", buf);
            used += nb > 0 ? nb : 0;
        }
        y++;
        put(c, y++, 2, A_DIM, "C compute  W waiting for transfers  O optimizer (last step)");
    }
    y++;
    char loss[32];
    fmt_loss(d, loss, sizeof loss);
    put(c, y++, 1, A_NORMAL, "step %lld/%lld   %.0f tok/s   loss %s", (long long)d->step, (long long)d->total_steps,
        d->tokens_per_s, loss);
    int sx = put(c, y, 1, A_BOLD, "loss ");
    draw_spark(c, y, sx, c->cols - sx - 1, d);
}

/* Row 1 of colossal-top: the column names of the process lines with the sort and the filter, or the filter
 * prompt while it is open. */
static void draw_list_line(const canvas *c)
{
    const top_ui *ui = c->ui;
    if (ui->filtering) {
        int x = put(c, 1, 0, A_BOLD, " filter: %s", ui->filter);
        x = put(c, 1, x, A_REVERSE, " ");
        put(c, 1, x + 1, A_DIM, " program, run name or command line; Enter keeps it, Esc clears it");
        return;
    }
    int x = put(c, 1, 0, A_DIM, " %-7s %-8s %6s %10s  %-18s %-16s", "PID", "USER", "CPU%", "RSS", "PROGRAM", "RUN");
    char right[128];
    int k = snprintf(right, sizeof right, "sort: %s", top_sort_name(ui->sort));
    if (ui->filter[0])
        snprintf(right + k, sizeof right - (size_t)k, "  filter: %s", ui->filter);
    int len = (int)strlen(right), rx = c->cols - len - 1;
    put(c, 1, rx > x + 1 ? rx : x + 2, A_BOLD, "%s", right);
}

/* Nothing to show: what to start, or that the filter hides every process. */
static void draw_hint(const canvas *c)
{
    const top_ui *ui = c->ui;
    int y = c->rows / 2;
    if (ui->lister && ui->filter[0] && ui->total > 0) {
        put(c, y, 1, A_BOLD, "no process matches the filter \"%s\" (%d running): / edits it, Esc clears it",
            ui->filter, ui->total);
        return;
    }
    static const char *const lines[] = {
        "no colossal process is running",
        "start one and it shows here: colossal-finetune MODEL DATA (colossal-finetune alone trains a small",
        "default model), or colossal-chat, colossal-serve or colossal-diffuse; h lists the keys",
    };
    for (int i = 0; i < 3; i++)
        put(c, y + i, 1, i == 0 ? A_BOLD : A_NORMAL, "%s", lines[i]);
}

/* The help screen: every key (h, ? or F1 open it, any key closes it). */
static void draw_help(const canvas *c)
{
    const top_ui *ui = c->ui;
    static const char *const keys[][2] = {
        {"1 2 3, Tab, Left/Right", "views: 1 overview, 2 chunk map, 3 links and step time"},
        {"j k, Up/Down, Home End", "select a process (the chunk map and links views show the selected one)"},
        {"s, F6", "sort by pid, memory (compute + host tiers), step rate, name; a run's ranks stay together"},
        {"/", "filter: a part of the program, run name or command line; Enter keeps it, Esc clears it"},
        {"Esc", "clears the filter; with none set, quits"},
        {"h, ?, F1", "this help; any key closes it"},
        {"q", "quit"},
    };
    int y = 2;
    put(c, y++, 1, A_BOLD, "%s keys", ui->title);
    y++;
    for (int i = 0; i < (int)(sizeof keys / sizeof keys[0]); i++) {
        bool list_key = i == 2 || i == 3;
        if (list_key && !ui->lister)
            continue; /* a program showing its own run has nothing to sort or filter */
        put(c, y, 3, A_BOLD, "%-24s", keys[i][0]);
        put(c, y++, 28, A_NORMAL, "%s", keys[i][1]);
    }
    if (ui->lister) {
        y++;
        put(c, y++, 1, A_NORMAL, "now: view %d, sort by %s%s%s%s", (int)ui->view, top_sort_name(ui->sort),
            ui->filter[0] ? ", filter \"" : "", ui->filter, ui->filter[0] ? "\"" : "");
        put(c, y++, 1, A_DIM, "columns: USER owns the process, CPU%% of one core since the last refresh, RSS resident");
        put(c, y, 1, A_DIM, "bars: used/budget; without a budget, used/the machine's memory (or the GPU's)");
    }
}

void top_view_draw(WINDOW *w, const top_ui *ui, const top_proc *procs, int n)
{
    canvas c = {w, 0, 0, ui};
    getmaxyx(w, c.rows, c.cols);
    werase(w);
    if (c.rows < 1 || c.cols < 1)
        return;
    if (c.rows < 4 || c.cols < 30) {
        put(&c, 0, 0, A_BOLD, "%s: window too small", ui->title);
        return;
    }
    /* title: program, process count, the views with the current one marked */
    put(&c, 0, 0, A_REVERSE, "%*s", c.cols, "");
    int x = put(&c, 0, 0, A_REVERSE | A_BOLD, "%s", ui->title);
    if (ui->delay > 0 && ui->lister && ui->filter[0])
        x = put(&c, 0, x, A_REVERSE, "  %d of %d processes  every %.1fs   ", n, ui->total, ui->delay);
    else if (ui->delay > 0)
        x = put(&c, 0, x, A_REVERSE, "  %d process%s  every %.1fs   ", n, n == 1 ? "" : "es", ui->delay);
    else
        x = put(&c, 0, x, A_REVERSE, "  this run   ");
    static const char *const views[] = {"1 overview", "2 chunks", "3 links"};
    for (int v = 0; v < 3; v++) {
        bool cur = (int)ui->view == v + 1;
        x = put(&c, 0, x, A_REVERSE | (cur ? A_BOLD : A_NORMAL), cur ? "[%s]" : " %s ", views[v]);
        x = put(&c, 0, x, A_REVERSE, " ");
    }
    put(&c, 0, x + 1, A_REVERSE, "h help  q quit");
    if (ui->help) {
        draw_help(&c);
        return;
    }
    if (ui->lister)
        draw_list_line(&c);
    if (n == 0) {
        draw_hint(&c);
        return;
    }
    int sel = ui->selected < 0 ? 0 : ui->selected >= n ? n - 1 : ui->selected;
    switch (ui->view) {
    case TOP_VIEW_CHUNKS: draw_chunks(&c, &procs[sel]); break;
    case TOP_VIEW_LINKS: draw_links(&c, &procs[sel]); break;
    default: draw_overview(&c, procs, n); break;
    }
}

bool top_view_key(top_ui *ui, int key, int n)
{
    if (key == KEY_RESIZE)
        return true;
    if (ui->lister && ui->filtering) {
        top_filter_key(ui, key);
        return true;
    }
    if (ui->help) {
        ui->help = false;
        return true;
    }
    switch (key) {
    case 'h': case '?': case KEY_F(1): ui->help = true; break;
    case 's': case KEY_F(6):
        if (ui->lister)
            ui->sort = (top_sort)((ui->sort + 1) % TOP_NSORTS);
        break;
    case '/':
        ui->filtering = ui->lister;
        break;
    case 27:
        if (!ui->lister || !ui->filter[0])
            return false;
        ui->filter[0] = 0;
        break;
    case 'q': case 'Q': return false;
    case '1': ui->view = TOP_VIEW_OVERVIEW; break;
    case '2': ui->view = TOP_VIEW_CHUNKS; break;
    case '3': ui->view = TOP_VIEW_LINKS; break;
    case '\t': case KEY_RIGHT: ui->view = ui->view % 3 + 1; break;
    case KEY_BTAB: case KEY_LEFT: ui->view = (ui->view + 1) % 3 + 1; break;
    case 'k': case KEY_UP: ui->selected--; break;
    case 'j': case KEY_DOWN: ui->selected++; break;
    case KEY_HOME: ui->selected = 0; break;
    case KEY_END: ui->selected = n - 1; break;
    default: break;
    }
    if (ui->selected >= n)
        ui->selected = n - 1;
    if (ui->selected < 0)
        ui->selected = 0;
    return true;
}

void top_proc_set(top_proc *p, const mt_stats_snapshot *s, const top_proc *prev)
{
    p->pid = s->pid;
    p->ok = true;
    p->problem[0] = 0;
    p->snap = *s;
    for (int l = 0; l < MT_NLINKS; l++) {
        p->rate[l] = -1;
        if (!prev || !prev->ok || prev->pid != s->pid)
            continue;
        double dt = s->d.updated - prev->snap.d.updated;
        if (dt > 0 && s->d.link_bytes[l] >= prev->snap.d.link_bytes[l])
            p->rate[l] = (double)(s->d.link_bytes[l] - prev->snap.d.link_bytes[l]) / dt;
        else if (dt == 0)
            p->rate[l] = prev->rate[l]; /* nothing new published: keep the last rate */
    }
}

void top_view_setup(top_ui *ui)
{
    ui->machine_memory = col_machine_memory();
    const char *cs = nl_langinfo(CODESET);
    ui->unicode = cs && !strcmp(cs, "UTF-8");
    ui->color = has_colors() && start_color() == OK;
    if (!ui->color)
        return;
    use_default_colors();
    init_pair(PAIR_COMPUTE, COLOR_GREEN, -1);
    init_pair(PAIR_HOST, COLOR_CYAN, -1);
    init_pair(PAIR_NVME, COLOR_MAGENTA, -1);
    init_pair(PAIR_NONE, COLOR_WHITE, -1);
    init_pair(PAIR_WARN, COLOR_RED, -1);
    init_pair(PAIR_LOSS, COLOR_YELLOW, -1);
    init_pair(PAIR_MAP_COMPUTE, COLOR_BLACK, COLOR_GREEN);
    init_pair(PAIR_MAP_HOST, COLOR_BLACK, COLOR_CYAN);
    init_pair(PAIR_MAP_NVME, COLOR_BLACK, COLOR_MAGENTA);
    init_pair(PAIR_MAP_NONE, COLOR_WHITE, -1);
}
