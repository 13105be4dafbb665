/* stats_publisher - a test tool: publishes fixed, scripted statistics in
 * its shared-memory segment (as a training process would), so the
 * colossal-top tests know exactly what must appear.
 *
 * usage: stats_publisher [--program NAME] [--run NAME] [--seconds N] [--tui] [--random SEED] [--device]
 *                        [--rank R --world-size N --run-id ID]
 * Prints "ready PID" once published, republishes the same values every
 * 100 ms (only the update time changes), and removes its segment on
 * SIGTERM/SIGINT or after N seconds (default 20), so a failed test leaves
 * nothing behind. --tui shows its own statistics on the terminal the way
 * colossal-finetune --tui does (top_tui_open / top_tui_show / top_tui_close)
 * and ends when q is pressed. --random publishes random bytes instead (a
 * reader must treat the contents as untrusted: no NUL in the run name,
 * NaN losses, impossible counts).
 *
 * The values (binary prefixes: M = 2^20, G = 2^30):
 *   tiers   compute 48M of 64M, host 12M of 64M, nvme 1.5G (no budget)
 *   kinds   params: compute 32M, host 8M; grads: compute 16M;
 *           optimizer: host 4M, nvme 1.5G
 *   links   host->compute 3G, compute->host 1G, host->nvme 1.5G, nvme->host 512M
 *   nvme written 1.5G; step 120 of 600; 1234.5 tokens/s
 *   losses  4.0, 3.875, ..., 2.5 (13 losses, step 0.125)
 *   step time last: compute 0.5 s, wait 0.25 s, optimizer 0.25 s;
 *           all steps: 60, 30, 30 s
 *   chunks  10: params c C c h, grads c(in use) c, optimizer H n n -
 *           (c compute, h host, n nvme, - no memory; upper case dirty)
 *   device  none (the compute tier is host memory); with --device the
 *           compute tier is on "cuda:0: Test GPU (sm_90, 132 SMs)" with
 *           30G of its 80G in use (with --rank R: "cuda:R: Test GPU ...")
 *   a rank  with --rank R --world-size N --run-id ID: rank R of the N ranks
 *           of run ID, which sent (R+1) G and received (R+1)/2 G over the
 *           collectives, blocked 1.5 (R+1) s, in 100 (R+1) operations
 * and, for colossal-top's sorting and bars:
 *   --scale K      the compute and host tiers' bytes (used, budget, kinds) and the step times K times as large
 *   --other-mib N  N MiB more on the compute tier than its chunks hold (activations)
 *   --no-budget    no budget for the compute and host tiers
 *   --busy         spins between publishes (a process using a whole core) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mt_stats.h"
#include "top_view.h"

static volatile sig_atomic_t g_stop; /* set by the signal handler: the only way to reach it */
static void on_signal(int sig) { g_stop = sig; }

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static void script(mt_stats_data *d, const char *run)
{
    memset(d, 0, sizeof *d);
    mt_stats_set_run(d, run);
    d->tier_used[MT_TIER_GPU] = 48 * MiB, d->tier_budget[MT_TIER_GPU] = 64 * MiB;
    d->tier_used[MT_TIER_HOST] = 12 * MiB, d->tier_budget[MT_TIER_HOST] = 64 * MiB;
    d->tier_used[MT_TIER_NVME] = 3 * GiB / 2;
    d->kind_bytes[MT_PARAM][MT_TIER_GPU] = 32 * MiB;
    d->kind_bytes[MT_PARAM][MT_TIER_HOST] = 8 * MiB;
    d->kind_bytes[MT_GRAD][MT_TIER_GPU] = 16 * MiB;
    d->kind_bytes[MT_OPTSTATE][MT_TIER_HOST] = 4 * MiB;
    d->kind_bytes[MT_OPTSTATE][MT_TIER_NVME] = 3 * GiB / 2;
    d->link_bytes[MT_LINK_H2C] = 3 * GiB;
    d->link_bytes[MT_LINK_C2H] = 1 * GiB;
    d->link_bytes[MT_LINK_H2N] = 3 * GiB / 2;
    d->link_bytes[MT_LINK_N2H] = 512 * MiB;
    d->nvme_written = 3 * GiB / 2;
    d->step = 120, d->total_steps = 600;
    d->tokens_per_s = 1234.5;
    for (int i = 0; i <= 12; i++)
        mt_stats_push_loss(d, 4.0 - 0.125 * i);
    d->step_compute = 0.5, d->step_wait = 0.25, d->step_optim = 0.25;
    d->total_compute = 60, d->total_wait = 30, d->total_optim = 30;
    static const struct {
        mt_tier t;
        mt_kind k;
        bool dirty, in_use;
    } chunks[] = {{MT_TIER_GPU, MT_PARAM, false, false},    {MT_TIER_GPU, MT_PARAM, true, false},
                  {MT_TIER_GPU, MT_PARAM, false, false},    {MT_TIER_HOST, MT_PARAM, false, false},
                  {MT_TIER_GPU, MT_GRAD, false, true},      {MT_TIER_GPU, MT_GRAD, false, false},
                  {MT_TIER_HOST, MT_OPTSTATE, true, false}, {MT_TIER_NVME, MT_OPTSTATE, false, false},
                  {MT_TIER_NVME, MT_OPTSTATE, false, false}, {MT_TIER_NONE, MT_OPTSTATE, false, false}};
    d->nchunks = sizeof chunks / sizeof chunks[0];
    for (uint32_t i = 0; i < d->nchunks; i++)
        d->chunk_map[i] = mt_stats_chunk_code(chunks[i].t, chunks[i].k, chunks[i].dirty, chunks[i].in_use);
}

/* every byte random: what a reader must survive */
static void randomize(mt_stats_data *d, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    unsigned char *b = (unsigned char *)d;
    for (size_t i = 0; i < sizeof *d; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b[i] = (unsigned char)(x >> 24);
    }
}

int main(int argc, char **argv)
{
    long long seed = -1;
    const char *program = "colossal-finetune", *run = "gpt2-test";
    double seconds = 20;
    bool tui = false, device = false, no_budget = false, busy = false;
    long scale = 1, other_mib = 0;
    int rank = -1, world_size = 0;
    const char *run_id = NULL;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--program"))
            program = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--run"))
            run = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--seconds"))
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--tui"))
            tui = true;
        else if (!strcmp(argv[i], "--device"))
            device = true;
        else if (i + 1 < argc && !strcmp(argv[i], "--rank"))
            rank = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--world-size"))
            world_size = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--run-id"))
            run_id = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--random"))
            seed = atoll(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--scale"))
            scale = atol(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--other-mib"))
            other_mib = atol(argv[++i]);
        else if (!strcmp(argv[i], "--no-budget"))
            no_budget = true;
        else if (!strcmp(argv[i], "--busy"))
            busy = true;
        else {
            fprintf(stderr, "usage: stats_publisher [--program NAME] [--run NAME] [--seconds N] [--tui] "
                            "[--random SEED] [--device] [--rank R --world-size N --run-id ID] [--scale K] "
                            "[--other-mib N] [--no-budget] [--busy]\n");
            return 2;
        }
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    mt_stats_pub *pub;
    col_err e = {0};
    if (mt_stats_create(program, &pub, &e) != COL_OK) {
        fprintf(stderr, "stats_publisher: %s\n", e.msg);
        return 1;
    }
    mt_stats_data *d = malloc(sizeof *d);
    mt_stats_snapshot *snap = malloc(sizeof *snap);
    top_tui *t = NULL;
    int rc = 0;
    if (!d || !snap) {
        rc = 1;
        goto done;
    }
    if (seed >= 0)
        randomize(d, (uint64_t)seed);
    else
        script(d, run);
    if (seed < 0 && scale > 1) {
        static const mt_tier scaled[2] = {MT_TIER_GPU, MT_TIER_HOST};
        for (int i = 0; i < 2; i++) {
            d->tier_used[scaled[i]] *= (uint64_t)scale, d->tier_budget[scaled[i]] *= (uint64_t)scale;
            for (int k = 0; k < MT_NKINDS; k++)
                d->kind_bytes[k][scaled[i]] *= (uint64_t)scale;
        }
        d->step_compute *= (double)scale, d->step_wait *= (double)scale, d->step_optim *= (double)scale;
    }
    if (seed < 0 && other_mib > 0)
        d->tier_used[MT_TIER_GPU] += (uint64_t)other_mib * MiB;
    if (no_budget)
        d->tier_budget[MT_TIER_GPU] = d->tier_budget[MT_TIER_HOST] = 0;
    if (device) {
        char name[MT_STATS_NAME_MAX];
        snprintf(name, sizeof name, "cuda:%d: Test GPU (sm_90, 132 SMs)", rank > 0 ? rank : 0);
        mt_stats_set_device(d, name);
        d->device_used = 30 * GiB, d->device_total = 80 * GiB;
    }
    if (rank >= 0 && run_id) {
        uint64_t k = (uint64_t)rank + 1;
        mt_stats_set_rank(d, run_id, rank, world_size);
        mt_stats_set_comm(d, k * GiB, k * GiB / 2, 1.5 * (double)k, 100 * k);
    }
    mt_stats_publish(pub, d);
    if (tui && !(t = top_tui_open("stats_publisher"))) {
        fprintf(stderr, "stats_publisher: --tui needs a terminal\n");
        rc = 1;
        goto done;
    }
    if (!tui) {
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
    }
    for (int tick = 0; !g_stop && tick < (int)(seconds * 10); tick++) {
        struct timespec ts = {0, 100 * 1000 * 1000}, t0, t1;
        if (busy) { /* a tenth of a second of work */
            clock_gettime(CLOCK_MONOTONIC, &t0);
            do
                clock_gettime(CLOCK_MONOTONIC, &t1);
            while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 100000000L && !g_stop);
        } else
            nanosleep(&ts, NULL);
        mt_stats_publish(pub, d);
        if (t) {
            mt_stats_pub_snapshot(pub, snap);
            if (top_tui_show(t, snap))
                break;
        }
    }
done:
    top_tui_close(t);
    mt_stats_destroy(pub);
    free(d), free(snap);
    return rc;
}
