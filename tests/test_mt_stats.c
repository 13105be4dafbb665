/* test_mt_stats.c - the shared-memory statistics segment: publish and read
 * back, the seqlock under a writer thread that never stops, stale segments
 * of dead processes, foreign segments, other format versions. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memtier.h"
#include "mt_stats.h"
#include "testlib.h"

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool shm_exists(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/colossal-%d", pid);
    return access(path, F_OK) == 0;
}

static bool listed(int pid, mt_stats_state *state, uint32_t *version)
{
    mt_stats_entry es[256];
    int n = 0;
    col_err e = {0};
    if (mt_stats_list(es, 256, &n, NULL, &e) != COL_OK)
        return false;
    for (int i = 0; i < n && i < 256; i++)
        if (es[i].pid == pid) {
            if (state)
                *state = es[i].state;
            if (version)
                *version = es[i].version;
            return true;
        }
    return false;
}

/* A child that waits until its pipe closes: a live pid the test controls. */
static pid_t live_child(int *wfd)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t c = fork();
    if (c == 0) {
        close(fds[1]);
        char b;
        while (read(fds[0], &b, 1) > 0) {
        }
        _exit(0);
    }
    close(fds[0]);
    *wfd = fds[1];
    return c;
}

static void end_child(pid_t c, int wfd)
{
    close(wfd);
    waitpid(c, NULL, 0);
}

/* Writes a segment by hand: the version-independent prefix (magic,
 * version, header bytes, size, pid), then `total` bytes in all. */
static void write_segment(int pid, uint64_t magic, uint32_t version, size_t total)
{
    char name[64];
    snprintf(name, sizeof name, "/colossal-%d", pid);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return;
    unsigned char buf[8192] = {0};
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 31 + 7);
    uint32_t hb = 128;
    uint64_t size = total;
    int64_t p = pid;
    memcpy(buf, &magic, 8);
    memcpy(buf + 8, &version, 4);
    memcpy(buf + 12, &hb, 4);
    memcpy(buf + 16, &size, 8);
    memcpy(buf + 24, &p, 8);
    if (write(fd, buf, total < sizeof buf ? total : sizeof buf) < 0)
        TL_NOTE("write: %s", strerror(errno));
    close(fd);
}

static void remove_segment(int pid)
{
    char name[64];
    snprintf(name, sizeof name, "/colossal-%d", pid);
    shm_unlink(name);
}

/* ---- the struct helpers ---- */

static void test_helpers(void)
{
    mt_stats_data *d = calloc(1, sizeof *d);
    for (int i = 0; i < 300; i++)
        mt_stats_push_loss(d, 1000.0 + i);
    float got[300];
    int n = mt_stats_recent_losses(d, got, 300);
    bool seq = n == MT_STATS_LOSS_RING;
    for (int i = 0; i < n && seq; i++)
        seq = got[i] == (float)(1000 + 300 - MT_STATS_LOSS_RING + i);
    TL_OK(seq, "the loss ring keeps the last %d losses, oldest first (got %d)", MT_STATS_LOSS_RING, n);
    n = mt_stats_recent_losses(d, got, 3);
    TL_OK(n == 3 && got[0] == 1297.0f && got[2] == 1299.0f && d->loss == 1299.0, "the 3 most recent losses");
    TL_OK(!mt_stats_is_rank(d), "a zeroed struct is a process on its own");
    mt_stats_set_rank(d, "run-a", 1, 1);
    TL_OK(!mt_stats_is_rank(d) && d->world_rank == 0, "a run of one rank is a process on its own");
    mt_stats_set_rank(d, "", 1, 4);
    TL_OK(!mt_stats_is_rank(d), "ranks without a run id are processes on their own");
    mt_stats_set_rank(d, "run-a", 7, 4);
    TL_OK(mt_stats_is_rank(d) && d->world_rank == 3 && d->world_size == 4, "a rank past the size is clamped");
    mt_stats_set_rank(d, "run-a", -2, 0);
    TL_OK(d->world_rank == 0 && d->world_size == 1, "a negative rank and size are clamped to 0 of 1");
    memset(d, 0, sizeof *d);
    mt_stats_push_loss(d, 2.5);
    TL_OK(mt_stats_recent_losses(d, got, 10) == 1 && got[0] == 2.5f, "a ring with one loss gives one");

    mt_stats_add_step_times(d, 1.0, 0.25, 0.5);
    mt_stats_add_step_times(d, 2.0, 0.5, 0.125);
    TL_OK(d->step_compute == 2.0 && d->step_wait == 0.5 && d->step_optim == 0.125 && d->total_compute == 3.0 &&
              d->total_wait == 0.75 && d->total_optim == 0.625,
          "step times: the last step and the running totals");

    bool codes = true;
    for (int t = -1; t < MT_NTIERS; t++)
        for (int k = 0; k < MT_NKINDS; k++)
            for (int f = 0; f < 4; f++) {
                uint8_t c = mt_stats_chunk_code((mt_tier)t, (mt_kind)k, f & 1, f & 2);
                codes = codes && mt_stats_chunk_tier(c) == (mt_tier)t && mt_stats_chunk_kind(c) == (mt_kind)k &&
                        !!(c & MT_STATS_CHUNK_DIRTY) == !!(f & 1) && !!(c & MT_STATS_CHUNK_IN_USE) == !!(f & 2);
            }
    TL_OK(codes, "chunk codes keep tier (none included), kind and both flags");
    TL_OK(mt_stats_chunk_kind(0x0c) == MT_NKINDS, "a chunk code with kind 3 names no kind");

    char long_name[200];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    mt_stats_set_run(d, long_name);
    TL_OK(strlen(d->run) == MT_STATS_NAME_MAX - 1, "a long run name is truncated to fit");
    TL_OK(!strcmp(mt_stats_tier_name(MT_TIER_GPU), "compute") && !strcmp(mt_stats_link_name(MT_LINK_N2H), "nvme->host"),
          "tier and link names");

    /* from a pool: 1024-byte chunks, two params fill two chunks, one grad, one oversize optimizer state */
    mt_pool *pool;
    col_err e = {0};
    mt_config cfg = {.chunk_bytes = 1024, .host_budget = 1024 * 4 + 3008};
    if (mt_create(&cfg, &pool, &e) == COL_OK) {
        mt_ref r;
        mt_alloc(pool, MT_PARAM, 1000, &r, &e);
        mt_alloc(pool, MT_PARAM, 1000, &r, &e);
        mt_alloc(pool, MT_GRAD, 100, &r, &e);
        mt_alloc(pool, MT_OPTSTATE, 3000, &r, &e);
        col_status refused = mt_alloc(pool, MT_OPTSTATE, 5000, &r, &e); /* past the budget: a planned chunk */
        mt_mark_dirty(pool, 1);
        memset(d, 0, sizeof *d);
        d->chunk_map[10] = 0xff;
        mt_stats_fill_from_pool(d, pool);
        TL_OK(refused == COL_ENOMEM, "the fifth allocation is refused by the budget");
        TL_OK(d->nchunks == 5, "pool: 5 chunks (got %u)", d->nchunks);
        TL_OK(d->tier_used[MT_TIER_HOST] == 1024 * 3 + 3008 && d->tier_used[MT_TIER_NVME] == 0,
              "pool: host bytes %llu", (unsigned long long)d->tier_used[MT_TIER_HOST]);
        TL_OK(d->kind_bytes[MT_PARAM][MT_TIER_HOST] == 2048 && d->kind_bytes[MT_GRAD][MT_TIER_HOST] == 1024 &&
                  d->kind_bytes[MT_OPTSTATE][MT_TIER_HOST] == 3008,
              "pool: bytes per kind on the host tier");
        TL_OK(d->chunk_map[0] == mt_stats_chunk_code(MT_TIER_HOST, MT_PARAM, false, false) &&
                  d->chunk_map[1] == mt_stats_chunk_code(MT_TIER_HOST, MT_PARAM, true, false) &&
                  d->chunk_map[2] == mt_stats_chunk_code(MT_TIER_HOST, MT_GRAD, false, false) &&
                  d->chunk_map[3] == mt_stats_chunk_code(MT_TIER_HOST, MT_OPTSTATE, false, false) &&
                  mt_stats_chunk_tier(d->chunk_map[4]) == MT_TIER_NONE && d->chunk_map[10] == 0,
              "pool: the chunk map (kinds, the dirty one, the refused one without a tier, the rest cleared)");
        /* a run of several models: the first pool is already in the totals, a second one is added to them */
        mt_stats_add_model(d, "policy", pool, true);
        mt_stats_add_model(d, "reference", pool, false);
        TL_OK(d->nmodels == 2 && !strcmp(d->models[1].name, "reference") &&
                  d->models[0].bytes[MT_TIER_HOST] == 1024 * 3 + 3008 && d->models[1].bytes[MT_TIER_NVME] == 0,
              "models: each one's bytes per tier");
        TL_OK(d->tier_used[MT_TIER_HOST] == 2 * (1024 * 3 + 3008) && d->kind_bytes[MT_PARAM][MT_TIER_HOST] == 4096,
              "models: the second model's memory joins the totals (host %llu)",
              (unsigned long long)d->tier_used[MT_TIER_HOST]);
        for (int k = 0; k < MT_STATS_MAX_MODELS + 2; k++)
            mt_stats_add_model(d, "more", pool, false);
        TL_OK(d->nmodels == MT_STATS_MAX_MODELS, "models: at most %d recorded", MT_STATS_MAX_MODELS);
        mt_stats_add_model(d, "again", pool, true);
        TL_OK(d->nmodels == 1, "models: the first model starts the list again");
        mt_destroy(pool);
    } else {
        TL_OK(false, "mt_create: %s", e.msg);
    }
    free(d);
}

/* ---- publish / read ---- */

static void test_publish_read(void)
{
    mt_stats_pub *pub = NULL;
    col_err e = {0};
    double t0 = wall();
    col_status st = mt_stats_create("test-program", &pub, &e);
    TL_OK(st == COL_OK, "create: %s", st == COL_OK ? "ok" : e.msg);
    if (st != COL_OK)
        return;
    int me = (int)getpid();
    char want[64];
    snprintf(want, sizeof want, "/colossal-%d", me);
    TL_OK(!strcmp(mt_stats_pub_name(pub), want) && shm_exists(me), "the segment is %s", want);
    struct stat sb;
    snprintf(want, sizeof want, "/dev/shm/colossal-%d", me);
    bool have = stat(want, &sb) == 0;
    TL_OK(have && (sb.st_mode & 0777) == 0600, "mode 0600 (got %o)", have ? (unsigned)(sb.st_mode & 0777) : 0u);

    mt_stats_pub *again = NULL;
    st = mt_stats_create("twice", &again, &e);
    TL_OK(st == COL_ESTATE && !again, "a second publisher in the same process is refused: %s", e.msg);

    mt_stats_state state;
    TL_OK(listed(me, &state, NULL) && state == MT_STATS_LIVE, "the list holds this process, live");

    mt_stats_data *d = calloc(1, sizeof *d);
    mt_stats_set_run(d, "gpt2-tiny");
    d->tier_used[MT_TIER_GPU] = 12u << 20;
    d->tier_budget[MT_TIER_GPU] = 64u << 20;
    d->tier_used[MT_TIER_HOST] = 5000000000ull;
    d->kind_bytes[MT_OPTSTATE][MT_TIER_NVME] = 77;
    d->link_bytes[MT_LINK_H2N] = 123456789012ull;
    d->nvme_written = 42;
    d->step = 17, d->total_steps = 600;
    d->tokens_per_s = 1234.5;
    mt_stats_add_step_times(d, 0.5, 0.25, 0.125);
    for (int i = 0; i < 20; i++)
        mt_stats_push_loss(d, 5.0 - 0.1 * i);
    mt_stats_set_rank(d, "node1-4711-1700000000", 2, 3);
    mt_stats_set_comm(d, 5000000000ull, 6000000000ull, 12.5, 321);
    d->nchunks = 9000;
    for (int i = 0; i < MT_STATS_MAX_CHUNKS; i++)
        d->chunk_map[i] = mt_stats_chunk_code((mt_tier)(i % 3), (mt_kind)((i / 3) % 3), i & 8, i & 16);
    mt_stats_publish(pub, d);

    mt_stats_snapshot *s = calloc(1, sizeof *s);
    st = mt_stats_read(me, s, &e);
    TL_OK(st == COL_OK, "read: %s", st == COL_OK ? "ok" : e.msg);
    TL_OK(s->pid == me && !strcmp(s->program, "test-program"), "read: pid and program name");
    TL_OK(s->start_time >= t0 - 1 && s->start_time <= wall() + 1, "read: start time is now");
    TL_OK(s->d.updated >= t0 - 1 && s->d.updated <= wall() + 1 && d->updated == 0,
          "publish stamps the copy, not the caller's struct");
    TL_OK(!strcmp(s->d.run_id, "node1-4711-1700000000") && s->d.world_rank == 2 && s->d.world_size == 3 &&
          s->d.comm_sent == 5000000000ull && s->d.comm_recv == 6000000000ull && s->d.comm_wait == 12.5 &&
          s->d.comm_ops == 321 && mt_stats_is_rank(&s->d), "read: the run id, rank, size and collectives' traffic");
    s->d.updated = 0;
    TL_OK(!memcmp(&s->d, d, sizeof *d), "read: every published byte comes back");
    mt_stats_snapshot *own = calloc(1, sizeof *own);
    mt_stats_pub_snapshot(pub, own);
    own->d.updated = 0;
    TL_OK(own->pid == me && !memcmp(&own->d, d, sizeof *d), "the publisher's own snapshot is the same");

    /* names are untrusted: control characters and broken UTF-8 become '?', valid UTF-8 stays */
    snprintf(d->run, sizeof d->run, "a\nb\x01" "c\xff" "d\xc3\xa9" "e\xe0\x80\x80" "f\xc3");
    mt_stats_publish(pub, d);
    st = mt_stats_read(me, s, &e);
    TL_OK(st == COL_OK && !strcmp(s->d.run, "a?b?c?d\xc3\xa9" "e???f?"), "a run name is made printable: %s",
          s->d.run);
    memset(d->run, 'x', sizeof d->run); /* no NUL at all */
    mt_stats_publish(pub, d);
    st = mt_stats_read(me, s, &e);
    TL_OK(st == COL_OK && strlen(s->d.run) == MT_STATS_NAME_MAX - 1, "a run name without a NUL is cut to fit");
    mt_stats_set_device(d, "cuda:0: \x1b[2Jgpu\xff");
    memset(d->device + strlen(d->device), 'y', sizeof d->device - strlen(d->device)); /* and no NUL */
    mt_stats_publish(pub, d);
    st = mt_stats_read(me, s, &e);
    TL_OK(st == COL_OK && !strncmp(s->d.device, "cuda:0: ?[2Jgpu?yy", 18) &&
          strlen(s->d.device) == MT_STATS_NAME_MAX - 1, "so is the device's name: %s", s->d.device);

    memset(d->run_id, '\x1b', sizeof d->run_id); /* escapes, and no NUL */
    mt_stats_publish(pub, d);
    st = mt_stats_read(me, s, &e);
    TL_OK(st == COL_OK && strspn(s->d.run_id, "?") == MT_STATS_NAME_MAX - 1 && !s->d.run_id[MT_STATS_NAME_MAX - 1],
          "so is the run id: %.20s...", s->d.run_id);

    mt_stats_destroy(pub);
    TL_OK(!shm_exists(me) && !listed(me, NULL, NULL), "destroy removes the segment");
    st = mt_stats_read(me, s, &e);
    TL_OK(st == COL_EIO, "reading an ended process: %s", e.msg);
    mt_stats_destroy(NULL);
    free(d), free(s), free(own);
}

/* ---- the seqlock: a writer that never pauses, a reader checking invariants ---- */

typedef struct {
    mt_stats_pub *pub;
    atomic_bool stop;
    long published;
} writer_arg;

/* every field is a function of k: a torn copy mixes two k's */
static void fill_k(mt_stats_data *d, uint64_t k)
{
    snprintf(d->run, sizeof d->run, "run-%llu", (unsigned long long)k);
    snprintf(d->device, sizeof d->device, "cuda:%llu", (unsigned long long)k);
    d->device_used = k * 5, d->device_total = k * 13;
    for (int t = 0; t < MT_NTIERS; t++)
        d->tier_used[t] = k * 7 + (uint64_t)t, d->tier_budget[t] = k * 11 + (uint64_t)t;
    for (int l = 0; l < MT_NLINKS; l++)
        d->link_bytes[l] = k + (uint64_t)l;
    d->step = (int64_t)k, d->total_steps = (int64_t)k * 3;
    d->loss = (double)k;
    d->nchunks = (uint32_t)k;
    for (int i = 0; i < MT_STATS_LOSS_RING; i++)
        d->loss_ring[i] = (float)(k & 0xffff);
    for (int i = 0; i < MT_STATS_MAX_CHUNKS; i++)
        d->chunk_map[i] = (uint8_t)(k + (uint64_t)i);
    d->nvme_written = ~k;
}

static bool consistent(const mt_stats_data *d)
{
    uint64_t k = (uint64_t)d->step;
    char run[MT_STATS_NAME_MAX];
    snprintf(run, sizeof run, "run-%llu", (unsigned long long)k);
    char dev[MT_STATS_NAME_MAX];
    snprintf(dev, sizeof dev, "cuda:%llu", (unsigned long long)k);
    bool ok = !strcmp(d->run, run) && !strcmp(d->device, dev) && d->device_used == k * 5 && d->device_total == k * 13 && d->total_steps == (int64_t)k * 3 && d->loss == (double)k &&
              d->nchunks == (uint32_t)k && d->nvme_written == ~k;
    for (int t = 0; t < MT_NTIERS; t++)
        ok = ok && d->tier_used[t] == k * 7 + (uint64_t)t && d->tier_budget[t] == k * 11 + (uint64_t)t;
    for (int l = 0; l < MT_NLINKS; l++)
        ok = ok && d->link_bytes[l] == k + (uint64_t)l;
    for (int i = 0; i < MT_STATS_LOSS_RING; i++)
        ok = ok && d->loss_ring[i] == (float)(k & 0xffff);
    for (int i = 0; i < MT_STATS_MAX_CHUNKS; i++)
        ok = ok && d->chunk_map[i] == (uint8_t)(k + (uint64_t)i);
    return ok;
}

static void *writer(void *p)
{
    writer_arg *w = p;
    mt_stats_data *d = calloc(1, sizeof *d);
    for (uint64_t k = 1; !atomic_load(&w->stop); k++) {
        fill_k(d, k);
        mt_stats_publish(w->pub, d);
        w->published++;
    }
    free(d);
    return NULL;
}

static void test_concurrent(void)
{
    writer_arg w = {0};
    col_err e = {0};
    if (mt_stats_create("hammer", &w.pub, &e) != COL_OK) {
        TL_OK(false, "create: %s", e.msg);
        return;
    }
    /* a consistent k = 0 first: a fresh segment is all zeros, which the invariant does not hold for */
    mt_stats_data *d0 = calloc(1, sizeof *d0);
    fill_k(d0, 0);
    mt_stats_publish(w.pub, d0);
    free(d0);
    pthread_t th;
    pthread_create(&th, NULL, writer, &w);
    mt_stats_snapshot *s = calloc(1, sizeof *s);
    int good = 0, torn = 0, busy = 0, other = 0;
    int64_t last = 0;
    bool monotonic = true;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 4000; i++) {
        col_status st = mt_stats_read((int)getpid(), s, &e);
        if (st == COL_OK) {
            if (consistent(&s->d))
                good++;
            else
                torn++;
            monotonic = monotonic && s->d.step >= last;
            last = s->d.step;
        } else if (st == COL_ESTATE) {
            busy++;
        } else {
            other++;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec) > 1.5)
            break;
    }
    atomic_store(&w.stop, true);
    pthread_join(th, NULL);
    TL_NOTE("writer published %ld times; reads: %d consistent, %d torn, %d gave up, %d failed", w.published, good,
            torn, busy, other);
    TL_OK(torn == 0, "no reader ever sees a half-written update (%d torn)", torn);
    TL_OK(good >= 10 && other == 0, "readers get through a writer that never pauses (%d reads)", good);
    TL_OK(monotonic, "reads never go back in time");
    mt_stats_destroy(w.pub);
    free(s);
}

/* ---- stale, foreign and other-version segments ---- */

static void test_stale(void)
{
    int fds[2];
    if (pipe(fds) != 0)
        return;
    pid_t c = fork();
    if (c == 0) {
        /* a process that dies without cleaning up */
        mt_stats_pub *pub;
        col_err e = {0};
        char ok = mt_stats_create("doomed", &pub, &e) == COL_OK ? 'y' : 'n';
        if (write(fds[1], &ok, 1) != 1)
            _exit(2);
        _exit(0);
    }
    close(fds[1]);
    char ok = 0;
    if (read(fds[0], &ok, 1) != 1)
        ok = 0;
    close(fds[0]);
    waitpid(c, NULL, 0);
    TL_OK(ok == 'y' && shm_exists(c), "a process that died left /dev/shm/colossal-%d behind", (int)c);
    mt_stats_entry es[256];
    int n = 0, removed = 0;
    col_err e = {0};
    col_status st = mt_stats_list(es, 256, &n, &removed, &e);
    TL_OK(st == COL_OK && removed >= 1 && !shm_exists(c), "the list removes the dead process's segment (%d removed)",
          removed);
    bool found = false;
    for (int i = 0; i < n && i < 256; i++)
        found = found || es[i].pid == c;
    TL_OK(!found, "and does not list it");

    /* reading a dead process's segment directly: refused and removed */
    if (pipe(fds) != 0)
        return;
    c = fork();
    if (c == 0) {
        mt_stats_pub *pub;
        char k = mt_stats_create("doomed", &pub, &e) == COL_OK ? 'y' : 'n';
        if (write(fds[1], &k, 1) != 1)
            _exit(2);
        _exit(0);
    }
    close(fds[1]);
    if (read(fds[0], &ok, 1) != 1)
        ok = 0;
    close(fds[0]);
    waitpid(c, NULL, 0);
    mt_stats_snapshot *s = calloc(1, sizeof *s);
    st = mt_stats_read((int)c, s, &e);
    TL_OK(ok == 'y' && st == COL_ESTATE && !shm_exists(c), "reading a dead process's segment: %s", e.msg);

    /* a foreign segment under our name pattern: never listed, never removed */
    int wfd;
    pid_t live = live_child(&wfd);
    write_segment((int)live, 0x1122334455667788ull, MT_STATS_VERSION, 4096);
    TL_OK(shm_exists(live) && !listed((int)live, NULL, NULL), "a segment with the wrong magic is not listed");
    st = mt_stats_read((int)live, s, &e);
    TL_OK(st == COL_EFORMAT, "reading it: %s", e.msg);
    end_child(live, wfd);
    listed((int)live, NULL, NULL);
    TL_OK(shm_exists(live), "it is left alone even when its pid is dead (only our magic is removed)");
    remove_segment((int)live);

    /* too short to hold even the prefix */
    live = live_child(&wfd);
    write_segment((int)live, MT_STATS_MAGIC, MT_STATS_VERSION, 12);
    TL_OK(!listed((int)live, NULL, NULL) && mt_stats_read((int)live, s, &e) == COL_EFORMAT,
          "a 12-byte segment: not listed, not read (%s)", e.msg);
    remove_segment((int)live);

    /* our magic and this version, but cut short: refused, not read past its end */
    write_segment((int)live, MT_STATS_MAGIC, MT_STATS_VERSION, 4096);
    TL_OK(mt_stats_read((int)live, s, &e) == COL_EFORMAT, "a truncated segment of this version: %s", e.msg);
    remove_segment((int)live);

    /* another version: listed as such, read refused with both versions named */
    write_segment((int)live, MT_STATS_MAGIC, 99, 8192);
    mt_stats_state state = MT_STATS_LIVE;
    uint32_t version = 0;
    TL_OK(listed((int)live, &state, &version) && state == MT_STATS_BAD_VERSION && version == 99,
          "a version-99 segment is listed as another version");
    st = mt_stats_read((int)live, s, &e);
    char mine[32];
    snprintf(mine, sizeof mine, "reads version %u", MT_STATS_VERSION);
    TL_OK(st == COL_EUNSUPPORTED && strstr(e.msg, "version 99") && strstr(e.msg, mine),
          "reading it is refused clearly: %s", e.msg);
    remove_segment((int)live);
    /* the previous version (a program of an older build still running): the same */
    write_segment((int)live, MT_STATS_MAGIC, MT_STATS_VERSION - 1, 8192);
    TL_OK(listed((int)live, &state, &version) && state == MT_STATS_BAD_VERSION && version == MT_STATS_VERSION - 1 &&
          mt_stats_read((int)live, s, &e) == COL_EUNSUPPORTED, "a segment of the previous version %u is listed and "
          "refused as another version: %s", MT_STATS_VERSION - 1, e.msg);
    end_child(live, wfd);
    listed((int)live, NULL, NULL);
    TL_OK(!shm_exists(live), "once its process is gone, the other-version segment (our magic) is removed");
    free(s);
}

int main(void)
{
    test_helpers();
    test_publish_read();
    test_concurrent();
    test_stale();
    return tl_done();
}
