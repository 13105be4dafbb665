/* mt_stats.h - live statistics of a running colossal process, published in
 * a small POSIX shared-memory segment that colossal-top reads.
 *
 * A process that trains creates one publisher: the segment
 * "/colossal-<pid>" (mode 0600; on Linux the file /dev/shm/colossal-<pid>).
 * It keeps a plain mt_stats_data of its own, changes fields as the run goes
 * and calls mt_stats_publish() (e.g. once per step), which copies the
 * struct into the segment under a sequence lock: the writer makes the
 * counter odd, copies, makes it even again. Readers copy the data out and
 * retry until they saw the same even counter before and after, so they
 * never see a half-written update and never make the writer wait.
 *
 * The segment starts with a header (magic, format version, size, pid,
 * program name, start time) written once before the magic is set. Readers
 * only trust, and only ever remove, segments that carry the magic; a
 * segment of another version is reported, not read.
 *
 * Tiers are indexed by mt_tier (MT_TIER_HOST, MT_TIER_GPU = the compute
 * tier: a GPU's memory, or the budgeted host arena on the CPU, MT_TIER_NVME);
 * kinds by mt_kind. No global state: the publisher is an
 * object, the reader calls are plain functions.
 */
#ifndef MT_STATS_H
#define MT_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memtier.h"
#include "status.h"

#define MT_STATS_MAGIC 0x53544154534c4f43ULL /* the bytes "COLSTATS" (little-endian); any other value: not ours */
#define MT_STATS_VERSION 4u /* 4: the models of a run of several (RLHF: policy, reference, reward, critic); */
/* 2: the compute tier's device (name, memory used and total); 3: the rank of a
                              parallel run (run id, world rank and size) and its collectives' traffic */
#define MT_STATS_MAX_CHUNKS 4096 /* the chunk map holds the first this many chunks */
#define MT_STATS_MAX_MODELS 4     /* models of one run shown apart */
#define MT_STATS_LOSS_RING 256   /* the last this many losses */
#define MT_STATS_NAME_MAX 64     /* program and run names, NUL included */
#define MT_STATS_SHM_PREFIX "colossal-"

/* Cumulative bytes per link (mt_link, memtier.h). */

/* One byte per chunk in the chunk map. */
#define MT_STATS_CHUNK_TIER_MASK 0x03u /* mt_tier 0..2, or MT_STATS_CHUNK_NO_TIER */
#define MT_STATS_CHUNK_NO_TIER 0x03u   /* planned but holding no memory (MT_TIER_NONE) */
#define MT_STATS_CHUNK_KIND_SHIFT 2
#define MT_STATS_CHUNK_KIND_MASK 0x0cu
#define MT_STATS_CHUNK_DIRTY 0x10u
#define MT_STATS_CHUNK_IN_USE 0x20u /* needed by the step running now */

/* What a process publishes. A plain struct: fill it, then publish it. All
 * times are seconds. Sizes are a multiple of 8 bytes (the segment copies
 * it in 8-byte words). */
typedef struct {
    char run[MT_STATS_NAME_MAX];            /* what runs, e.g. the model name */
    uint64_t tier_used[MT_NTIERS];          /* bytes held in each tier now */
    uint64_t tier_budget[MT_NTIERS];        /* 0 = no budget */
    char device[MT_STATS_NAME_MAX];         /* the device the compute tier is on, e.g. "cuda:0: NVIDIA H100 80GB
                                               HBM3 (sm_90, 132 SMs), 79.1 GiB"; "" when it is host memory */
    uint64_t device_used, device_total;     /* that device's memory in use (every process's, as its driver
                                               reports it) and its size; 0 when the compute tier is host memory */
    uint64_t kind_bytes[MT_NKINDS][MT_NTIERS];
    uint64_t link_bytes[MT_NLINKS];         /* cumulative bytes moved per link */
    uint64_t nvme_written;                  /* cumulative bytes written to NVMe */
    int64_t step, total_steps;              /* steps done (this one counted), steps planned */
    double loss;                            /* of the last step */
    double tokens_per_s;
    double step_compute, step_wait, step_optim;    /* the last step: compute, waiting for transfers, optimizer */
    double total_compute, total_wait, total_optim; /* all steps of this run so far */
    /* A parallel run (version 3): each rank publishes its own segment with the same run_id. run_id "" (and
       world_size 0 or 1): a process on its own. mt_stats_set_rank, mt_stats_set_comm. */
    char run_id[MT_STATS_NAME_MAX];         /* the same on every rank of one run, e.g. rank 0's host, pid and
                                               start time, broadcast by the app */
    int32_t world_rank, world_size;         /* this process's rank in the run, and how many ranks it has */
    uint64_t comm_sent, comm_recv;          /* cumulative bytes of the collectives (col_comm_stats' model) */
    double comm_wait;                       /* cumulative seconds blocked waiting for the collectives */
    uint64_t comm_ops;                      /* collective and point-to-point operations completed */
    double updated;                         /* wall-clock time (epoch seconds) of the last publish; set by publish */
    /* A run of several models (version 4; RLHF: the policy, its reference, a reward model, a critic): each one's
       bytes per tier (its parameters, gradients and optimizer states), the first nmodels entries; the totals above
       are their sums. nmodels 0: one model, the totals are its own. */
    uint32_t nmodels, pad_models;
    struct {
        char name[32];
        uint64_t bytes[MT_NTIERS];
    } models[MT_STATS_MAX_MODELS];
    uint32_t nchunks;                       /* true number of chunks (may exceed MT_STATS_MAX_CHUNKS) */
    uint32_t nlosses;                       /* losses pushed so far; the ring holds the last min(nlosses, RING) */
    float loss_ring[MT_STATS_LOSS_RING];    /* loss of push n at loss_ring[n % MT_STATS_LOSS_RING] */
    uint8_t chunk_map[MT_STATS_MAX_CHUNKS]; /* chunk i: mt_stats_chunk_code() */
} mt_stats_data;

/* A consistent copy of one process's segment. */
typedef struct {
    int pid;
    char program[MT_STATS_NAME_MAX];
    double start_time; /* epoch seconds when the publisher was created */
    mt_stats_data d;
} mt_stats_snapshot;

/* ---- helpers on the plain struct ---- */

/* Sets d->run (truncated to fit). */
void mt_stats_set_run(mt_stats_data *d, const char *run);
/* Sets d->device (truncated to fit; NULL or "": the compute tier is host memory). */
void mt_stats_set_device(mt_stats_data *d, const char *device);
/* This process is rank `rank` of the `size` ranks of the parallel run run_id
 * (truncated to fit; every rank must pass the same string). Out-of-range
 * values are clamped: size at least 1, rank within 0 .. size-1. */
void mt_stats_set_rank(mt_stats_data *d, const char *run_id, int rank, int size);
/* The rank's cumulative traffic over the collectives (bytes sent and
 * received, seconds blocked, operations): call it each step with the sums. */
void mt_stats_set_comm(mt_stats_data *d, uint64_t sent, uint64_t recv, double wait_s, uint64_t ops);
/* Whether d is a rank of a parallel run (a run id and more than one rank). */
bool mt_stats_is_rank(const mt_stats_data *d);
/* Appends a loss to the ring and sets d->loss. */
void mt_stats_push_loss(mt_stats_data *d, double loss);
/* Up to n of the most recent losses, oldest first, into out; returns how many. */
int mt_stats_recent_losses(const mt_stats_data *d, float *out, int n);
/* Records one step's split: sets the step_* fields and adds them to the total_* fields. */
void mt_stats_add_step_times(mt_stats_data *d, double compute, double wait, double optim);
/* Fills tier_used (host and NVMe tiers; the compute tier is left as is: the
 * caller knows its arena), kind_bytes, nchunks and chunk_map from a pool.
 * The in-use flag of every chunk is cleared. */
void mt_stats_fill_from_pool(mt_stats_data *d, const mt_pool *pool);
/* After mt_stats_fill_from_pool of the first model's pool (which this call names, pool the same): records the
 * model's share as models[nmodels++]; a later model's pool (not the first) is also added to tier_used and
 * kind_bytes (its chunks are not in the map). Beyond MT_STATS_MAX_MODELS models nothing is recorded. */
void mt_stats_add_model(mt_stats_data *d, const char *name, const mt_pool *pool, bool first);

static inline uint8_t mt_stats_chunk_code(mt_tier tier, mt_kind kind, bool dirty, bool in_use)
{
    unsigned t = (tier >= 0 && tier < MT_NTIERS) ? (unsigned)tier : MT_STATS_CHUNK_NO_TIER;
    return (uint8_t)(t | ((unsigned)kind << MT_STATS_CHUNK_KIND_SHIFT) | (dirty ? MT_STATS_CHUNK_DIRTY : 0u) |
                     (in_use ? MT_STATS_CHUNK_IN_USE : 0u));
}
/* mt_tier of a chunk code; MT_TIER_NONE for a chunk without memory */
static inline mt_tier mt_stats_chunk_tier(uint8_t c)
{
    unsigned t = c & MT_STATS_CHUNK_TIER_MASK;
    return t == MT_STATS_CHUNK_NO_TIER ? MT_TIER_NONE : (mt_tier)t;
}
/* mt_kind of a chunk code; MT_NKINDS for a code that names no kind */
static inline mt_kind mt_stats_chunk_kind(uint8_t c)
{
    unsigned k = (c & MT_STATS_CHUNK_KIND_MASK) >> MT_STATS_CHUNK_KIND_SHIFT;
    return k < MT_NKINDS ? (mt_kind)k : MT_NKINDS;
}

/* Untrusted text (cap bytes) made safe to print, in place: it ends at its first NUL (or at cap - 1), control
 * characters and bytes that are not well-formed UTF-8 become '?'. */
void mt_stats_printable(char *s, size_t cap);

/* "compute", "host", "nvme" (display names of the tiers); "none" otherwise */
const char *mt_stats_tier_name(mt_tier tier);
/* "host->compute", "compute->host", "host->nvme", "nvme->host" */
const char *mt_stats_link_name(mt_link link);

/* ---- publisher ---- */

typedef struct mt_stats_pub mt_stats_pub;

/* Creates /colossal-<pid> for this process. program: e.g. "colossal-finetune"
 * (truncated to fit). A segment of the same name left by a dead process
 * with this pid is replaced; COL_ESTATE when this process already has one. */
col_status mt_stats_create(const char *program, mt_stats_pub **pub, col_err *e);
/* Copies d into the segment (setting its `updated` to now; d itself is not
 * changed). Never blocks. */
void mt_stats_publish(mt_stats_pub *pub, const mt_stats_data *d);
/* What this publisher published last, as a reader would see it (e.g. for a
 * process drawing its own statistics). */
void mt_stats_pub_snapshot(const mt_stats_pub *pub, mt_stats_snapshot *snap);
/* The segment's name, e.g. "/colossal-1234". */
const char *mt_stats_pub_name(const mt_stats_pub *pub);
/* Unmaps and removes the segment. NULL is ignored. */
void mt_stats_destroy(mt_stats_pub *pub);

/* ---- reader ---- */

typedef enum {
    MT_STATS_LIVE,        /* ours, this version, the process is running */
    MT_STATS_BAD_VERSION, /* ours, but another format version: cannot be read by this build */
} mt_stats_state;

typedef struct {
    int pid;
    mt_stats_state state;
    uint32_t version; /* the segment's format version */
} mt_stats_entry;

/* Lists the publishers in /dev/shm (segments named colossal-<pid>), sorted
 * by pid: up to max entries in out, *n = how many were found in all (may be
 * > max). Segments with our magic whose process is gone (kill(pid, 0) says
 * ESRCH) are removed on the way and counted in *removed (may be NULL);
 * segments without our magic, or too short to hold a header, are left
 * alone and not listed. */
col_status mt_stats_list(mt_stats_entry *out, int max, int *n, int *removed, col_err *e);
/* Copies the segment of pid out consistently; the program, run, run id and
 * device names are made printable (control characters and bytes that are not UTF-8
 * become '?'). COL_EIO: no such segment (the
 * process ended); COL_EFORMAT: not a colossal segment; COL_EUNSUPPORTED:
 * another format version (the message names both versions); COL_ESTATE:
 * the process is gone (stale segment, removed) or kept writing for longer
 * than a reader waits (try again). */
col_status mt_stats_read(int pid, mt_stats_snapshot *snap, col_err *e);

/* Same, for a segment given by its shm name ("/name"): for tests and tools. */
col_status mt_stats_read_name(const char *shm_name, mt_stats_snapshot *snap, col_err *e);

#endif
