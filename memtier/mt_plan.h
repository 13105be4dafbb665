/* mt_plan.h - the chunk placement planner: which chunks sit on the compute
 * tier for every op of a training step, when to fetch them, what to evict.
 *
 * Input is plain data (no pointers into a graph): the chunks (bytes and home
 * tier), the static schedule (one entry per op: the chunks it reads and
 * writes, its compute time, the activation bytes live on the compute tier
 * while it runs), the compute-tier budget and the link bandwidths. The
 * schedule repeats every training step; the planner treats it as cyclic.
 *
 * Output, for every op, the actions to take before it runs, in this order:
 * evictions (DROP a clean chunk, WRITEBACK a dirty one), fetches (the op's
 * missing chunks first, then prefetches for later ops), then WAITs for the
 * fetches the op needs. Eviction is Belady's rule: the resident chunk whose
 * next use (wrapping into the next step) is furthest away, never one the op
 * needs nor one with a fetch in flight. Prefetches look ahead by a time
 * horizon: a chunk needed by op u is fetched before op t when waiting until
 * op t+1 would leave less compute time than the horizon before u. The
 * horizon is chosen by simulating a few candidates derived from the chunk
 * transfer times (MT_PREFETCH_AUTO) and keeping the fastest.
 *
 * Steps: the first plan_step(s) start cold (every chunk at home); the planner
 * plans step after step until the tier state at a step's start repeats, and
 * from then on one steady plan serves every step. Should no fixed point be
 * found, the steady plan ends with a tail of actions (after the last op)
 * that returns the tier to the state its first op assumes.
 *
 * docs/MEMTIER_PLANNER.md explains the rules with a worked example.
 * Plans are immutable once made except through mt_plan_update_timing; no
 * global state.
 */
#ifndef MT_PLAN_H
#define MT_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memtier.h"
#include "status.h"

/* Links (mt_link, memtier.h): a chunk whose home is NVMe travels
 * NVMe->host->compute (both hops, one after the other) and back the same way. */

typedef struct {
    size_t bytes;  /* > 0 */
    mt_tier home;  /* MT_TIER_HOST or MT_TIER_NVME: where it lives when not on the compute tier */
} mt_plan_chunk;

typedef struct {
    const int *reads;   /* chunk ids (duplicates allowed); NULL when nreads == 0 */
    int nreads;
    const int *writes;  /* chunk ids written (they become dirty); they must be resident too */
    int nwrites;
    double time_s;      /* expected compute time, >= 0 */
    size_t act_bytes;   /* activation bytes live on the compute tier from this op's actions to its end */
} mt_plan_op;

typedef struct {
    double bw[MT_NLINKS]; /* bytes/s, > 0; INFINITY = a hop that costs no time (e.g. compute tier == host) */
    double latency_s;     /* per transfer and per hop, >= 0 */
} mt_plan_links;

typedef enum {
    MT_PREFETCH_AUTO = 0, /* choose the horizon by simulation */
    MT_PREFETCH_OFF,      /* fetch on demand only */
    MT_PREFETCH_FIXED     /* use prefetch_s */
} mt_prefetch_mode;

typedef struct {
    int nchunks;
    const mt_plan_chunk *chunks;
    int nops;                   /* > 0 */
    const mt_plan_op *ops;
    size_t budget;              /* compute-tier bytes for chunks + activations; 0 = unlimited */
    mt_plan_links links;
    mt_prefetch_mode prefetch;
    double prefetch_s;          /* the horizon for MT_PREFETCH_FIXED, >= 0 (0 = no prefetch) */
    int max_warmup;             /* steps searched for a steady state; 0 = 8; -1 = every step starts and
                                 * ends with nothing resident (the tail writes back and evicts all) */
} mt_plan_input;

typedef enum {
    MT_PA_DROP,      /* evict; the home copy is still valid */
    MT_PA_WRITEBACK, /* copy to home, then evict (the chunk is dirty) */
    MT_PA_FETCH,     /* start a copy home -> compute tier; its space is reserved from now */
    MT_PA_WAIT,      /* wait until the chunk's fetch has arrived */
    MT_PA_FLUSH      /* copy to home and stay resident (only in a tail) */
} mt_plan_act_kind;

typedef struct {
    mt_plan_act_kind kind;
    int chunk;
    int for_op; /* FETCH: the op (index in the schedule) that first uses it; the next step's when
                 * for_op <= the op the fetch is issued at; -1 for other kinds */
} mt_plan_action;

typedef struct mt_plan mt_plan;

typedef struct {
    int nops, nchunks;
    int warmup_steps;     /* steps 0 .. warmup_steps-1 have their own plans; later ones the steady plan */
    double prefetch_s;    /* the horizon in use */
    size_t min_budget;    /* the smallest budget any plan can run in: max over ops of chunks + activations */
    int tail_actions;     /* actions after the last op of a steady step (0 when a fixed point was found) */
    int steady_fetches, steady_writebacks, steady_drops; /* per steady step */
    double step_s, stall_s; /* simulated steady step time and the compute time lost waiting in it */
} mt_plan_summary;

/* Validates in, copies it, plans. Errors (COL_EINVAL unless said): an empty
 * schedule, a chunk id out of range, a bad size, home, time, bandwidth or
 * latency; COL_ENOMEM when a chunk is larger than the budget or an op's
 * chunks plus its activation bytes do not fit (the message names the
 * smallest budget that would work; COL_SETTING_COMPUTE_BUDGET is marked). */
col_status mt_plan_create(const mt_plan_input *in, mt_plan **out, col_err *e);
void mt_plan_free(mt_plan *p);

/* The actions before op `op` of training step `step` (0-based); *n gets
 * their count. NULL (and *n = 0) for an op out of range or a negative step. */
const mt_plan_action *mt_plan_actions(const mt_plan *p, long step, int op, int *n);
/* The actions after the last op of `step` (usually none). */
const mt_plan_action *mt_plan_tail(const mt_plan *p, long step, int *n);

void mt_plan_get_summary(const mt_plan *p, mt_plan_summary *s);

/* Measurements of a traced step. Every member may say "keep the estimate". */
typedef struct {
    const double *op_s;      /* nops measured times; NULL = keep; a negative entry keeps that op's */
    const size_t *act_bytes; /* nops measured activation peaks; NULL = keep */
    double bw[MT_NLINKS];    /* measured bandwidths; 0 = keep */
    double latency_s;        /* < 0 = keep */
} mt_plan_trace;

/* Replaces the estimates with the trace and plans again (same budget and
 * prefetch mode). On failure the plan is unchanged. */
col_status mt_plan_update_timing(mt_plan *p, const mt_plan_trace *tr, col_err *e);

/* The timing model run on the plan: one compute stream; each link a FIFO
 * that moves one transfer at a time (latency + bytes / bandwidth); actions
 * are issued when the previous op ends; a fetch's copy to the compute tier
 * starts no earlier than the write-backs issued before it have left (their
 * space is what it reuses) and than the chunk's own last write-back has
 * landed home; an op starts when its waits are done. */
typedef struct {
    double step_s;   /* end of this step's last op (and tail) minus the previous step's */
    double stall_s;  /* time the compute stream waited for transfers */
    double compute_s;
    uint64_t bytes[MT_NLINKS];
    int fetches, writebacks, drops, flushes;
} mt_plan_step_sim;

/* Simulates steps 0 .. nsteps-1 (nsteps >= 1) into steps[]. */
col_status mt_plan_simulate(const mt_plan *p, int nsteps, mt_plan_step_sim *steps, col_err *e);

const char *mt_plan_act_name(mt_plan_act_kind k);

#endif
