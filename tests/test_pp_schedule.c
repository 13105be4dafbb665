/* test_pp_schedule.c - the pipeline schedules (models/lm/lm_pipeline.c) as
 * pure functions, without MPI: every rank's list holds F then B once per
 * micro-batch for each of its virtual stages; run together (sends never
 * block, a receive waits for its send) the ranks' lists finish without
 * deadlock, every F after the previous stage's F of that micro-batch and
 * every B after the next stage's B; 1F1B keeps at most P micro-batches in
 * flight on a rank. Bad layouts are refused with one line. */
#include <stdlib.h>
#include <string.h>

#include "lm_pipeline.h"
#include "testlib.h"

enum { MAXOPS = 4096 };

/* the ranks' lists run together: each rank runs its next op when what it receives has been sent; returns
 * whether all finished; *why on failure */
static bool simulate(int P, int v, int M, int *max_inflight, char *why, size_t wn)
{
    int S = P * v;
    col_pp_op *ops = malloc(sizeof *ops * (size_t)P * MAXOPS);
    int *n = calloc((size_t)P, sizeof *n), *pc = calloc((size_t)P, sizeof *pc);
    char *fdone = calloc((size_t)S * M, 1), *bdone = calloc((size_t)S * M, 1);
    bool ok = true;
    *max_inflight = 0;
    for (int r = 0; r < P && ok; r++) {
        col_err err = {0};
        ok = col_pp_schedule(r, P, v, M, ops + (size_t)r * MAXOPS, &n[r], &err) == COL_OK && n[r] == 2 * v * M;
        if (!ok) {
            snprintf(why, wn, "rank %d: %s (%d ops)", r, err.msg, n[r]);
            break;
        }
        /* every (stage of this rank, micro-batch): one F, one B, the F first */
        int *seen = calloc((size_t)S * M, sizeof *seen);
        for (int i = 0; i < n[r] && ok; i++) {
            col_pp_op o = ops[(size_t)r * MAXOPS + i];
            int x = o.stage * M + o.mb;
            ok = o.stage >= 0 && o.stage < S && o.stage % P == r && o.mb >= 0 && o.mb < M &&
                 seen[x] == (o.kind == 'F' ? 0 : 1);
            seen[x]++;
            if (!ok)
                snprintf(why, wn, "rank %d op %d: %c stage %d mb %d out of place", r, i, o.kind, o.stage, o.mb);
        }
        free(seen);
        int inflight = 0;
        for (int i = 0; i < n[r] && ok; i++) {
            inflight += ops[(size_t)r * MAXOPS + i].kind == 'F' ? 1 : -1;
            *max_inflight = inflight > *max_inflight ? inflight : *max_inflight;
        }
    }
    for (bool progress = true; ok && progress;) {
        progress = false;
        for (int r = 0; r < P; r++) {
            while (pc[r] < n[r]) {
                col_pp_op o = ops[(size_t)r * MAXOPS + pc[r]];
                bool ready = o.kind == 'F' ? o.stage == 0 || fdone[(o.stage - 1) * M + o.mb]
                                           : fdone[o.stage * M + o.mb] &&
                                                 (o.stage == S - 1 || bdone[(o.stage + 1) * M + o.mb]);
                if (!ready)
                    break;
                (o.kind == 'F' ? fdone : bdone)[o.stage * M + o.mb] = 1;
                pc[r]++;
                progress = true;
            }
        }
    }
    for (int r = 0; r < P && ok; r++)
        if (pc[r] < n[r]) {
            col_pp_op o = ops[(size_t)r * MAXOPS + pc[r]];
            snprintf(why, wn, "deadlock: rank %d waits at op %d (%c stage %d mb %d)", r, pc[r], o.kind, o.stage, o.mb);
            ok = false;
        }
    free(ops), free(n), free(pc), free(fdone), free(bdone);
    return ok;
}

int main(void)
{
    static const int layouts[][3] = {{1, 1, 1}, {1, 1, 4}, {2, 1, 1}, {2, 1, 4}, {4, 1, 2}, {4, 1, 8}, {3, 1, 7},
                                     {8, 1, 3}, {2, 2, 2}, {2, 2, 4}, {4, 2, 4}, {4, 2, 8}, {2, 3, 6}, {4, 4, 12},
                                     {1, 3, 5}};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        int P = layouts[i][0], v = layouts[i][1], M = layouts[i][2], inflight = 0;
        char why[600] = "";
        bool ok = simulate(P, v, M, &inflight, why, sizeof why);
        TL_OK(ok, "P=%d v=%d M=%d: each stage's micro-batches F then B once, the ranks' lists run together to the "
              "end %s", P, v, M, why);
        if (v == 1)
            TL_OK(ok && inflight <= P && inflight <= M, "P=%d M=%d 1F1B: at most %d micro-batches in flight on a "
                  "rank (%d)", P, M, P < M ? P : M, inflight);
    }
    /* 1F1B's shape on the first rank of 4 with 6 micro-batches: 3 warm-up forwards, then F/B in turn */
    col_pp_op ops[12];
    int n = 0;
    col_err err = {0};
    bool ok = col_pp_schedule(0, 4, 1, 6, ops, &n, &err) == COL_OK && n == 12;
    const char *want = "FFFFBFBFBBBB";
    for (int i = 0; ok && i < n; i++)
        ok = ops[i].kind == want[i] && ops[i].stage == 0;
    TL_OK(ok, "1F1B, rank 0 of 4, 6 micro-batches: %s", want);
    ok = col_pp_schedule(3, 4, 1, 6, ops, &n, &err) == COL_OK;
    for (int i = 0; ok && i < n; i++)
        ok = ops[i].kind == (i % 2 ? 'B' : 'F') && ops[i].mb == i / 2;
    TL_OK(ok, "1F1B, the last rank: F and B of each micro-batch in turn");
    /* layers split over stages */
    int lo, hi, sum = 0;
    for (int j = 0; j < 3; j++) {
        col_pp_stage_layers(7, 3, j, &lo, &hi);
        sum += hi - lo;
        TL_OK(hi - lo == (j == 0 ? 3 : 2) && (j > 0 || lo == 0), "7 layers over 3 stages: stage %d [%d, %d)", j, lo, hi);
    }
    TL_OK(sum == 7, "the stages cover the 7 layers");
    /* bad layouts */
    struct {
        int L, P, v, M;
        const char *what;
    } bad[] = {{2, 4, 1, 4, "at most one stage per layer"},
               {8, 2, 2, 3, "multiple of the pipeline"},
               {8, 0, 1, 4, "at least 1"},
               {8, 2, 1, 0, "at least 1"},
               {100, 4, 4, 2000, "tag apart"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        col_err e = {0};
        col_status st = col_pp_check(bad[i].L, bad[i].P, bad[i].v, bad[i].M, &e);
        TL_OK(st == COL_EINVAL && strstr(e.msg, bad[i].what) && !strchr(e.msg, '\n'), "refused: %s", e.msg);
    }
    ok = col_pp_schedule(2, 2, 1, 4, ops, &n, &err) == COL_EINVAL && n == 0;
    TL_OK(ok, "a rank outside the pipeline is refused: %s", err.msg);
    return tl_done();
}
