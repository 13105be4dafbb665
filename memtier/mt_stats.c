/* mt_stats.c - the shared-memory statistics segment: publisher and reader. */
#include "mt_stats.h"
#include "timer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The segment: this header, then mt_stats_data as 8-byte words. The first
 * five fields (magic, version, header_bytes, size, pid) keep their places in
 * every format version, so a reader can tell a segment of another version
 * and whose it is without understanding the rest. */
typedef struct {
    _Atomic uint64_t magic; /* stored last, with release: a reader that sees it sees the header */
    uint32_t version;
    uint32_t header_bytes;
    uint64_t size;          /* bytes of the whole segment */
    int64_t pid;
    /* ---- version 1 from here ---- */
    uint64_t start_ticks;   /* the process's start time in /proc/<pid>/stat: tells a reused pid */
    double start_time;
    char program[MT_STATS_NAME_MAX];
    _Atomic uint64_t seq;   /* odd while the writer copies */
    uint64_t reserved[5];
} seg_header;

#define PREFIX_BYTES (offsetof(seg_header, pid) + sizeof(int64_t))
#define DATA_WORDS (sizeof(mt_stats_data) / 8)
#define SEG_BYTES (sizeof(seg_header) + sizeof(mt_stats_data))

_Static_assert(sizeof(mt_stats_data) % 8 == 0, "mt_stats_data is copied in 8-byte words");
_Static_assert(sizeof(seg_header) % 8 == 0, "the data after the header must be 8-byte aligned");
_Static_assert(sizeof(_Atomic uint64_t) == 8, "segment words are 8 bytes");
_Static_assert(MT_NTIERS == 3 && MT_NKINDS == 3, "the chunk code has 2 bits for the tier and for the kind");

struct mt_stats_pub {
    seg_header *h;
    char name[32];
};

static _Atomic uint64_t *seg_words(const seg_header *h)
{
    return (_Atomic uint64_t *)(void *)((char *)(void *)(uintptr_t)h + sizeof(seg_header));
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double mono_now(void) { return col_seconds(); }

static void copy_name(char *dst, const char *src)
{
    snprintf(dst, MT_STATS_NAME_MAX, "%s", src ? src : "");
}

/* Field 22 of /proc/<pid>/stat (start time in clock ticks after boot); 0
 * when it cannot be read, which turns the check off. */
static uint64_t proc_start_ticks(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* the command name (field 2) may hold spaces and ')': fields 3.. follow the last ')' */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++;
    for (int field = 3; field < 22 && *p; field++) {
        while (*p == ' ')
            p++;
        while (*p && *p != ' ')
            p++;
    }
    return strtoull(p, NULL, 10);
}

/* The process that made a segment is gone: no such pid, or the pid now
 * belongs to a process started at another time. */
static bool process_gone(int pid, uint64_t start_ticks)
{
    if (pid <= 0)
        return true;
    if (kill(pid, 0) == -1 && errno == ESRCH)
        return true;
    if (start_ticks) {
        uint64_t now_ticks = proc_start_ticks(pid);
        if (now_ticks && now_ticks != start_ticks)
            return true;
    }
    return false;
}

/* ---- helpers on the plain struct ---- */

void mt_stats_set_run(mt_stats_data *d, const char *run) { copy_name(d->run, run); }

void mt_stats_set_device(mt_stats_data *d, const char *device) { copy_name(d->device, device); }

void mt_stats_set_rank(mt_stats_data *d, const char *run_id, int rank, int size)
{
    copy_name(d->run_id, run_id);
    if (size < 1)
        size = 1;
    d->world_size = size;
    d->world_rank = rank < 0 ? 0 : rank >= size ? size - 1 : rank;
}

void mt_stats_set_comm(mt_stats_data *d, uint64_t sent, uint64_t recv, double wait_s, uint64_t ops)
{
    d->comm_sent = sent, d->comm_recv = recv, d->comm_wait = wait_s, d->comm_ops = ops;
}

bool mt_stats_is_rank(const mt_stats_data *d) { return d->run_id[0] && d->world_size > 1; }

void mt_stats_push_loss(mt_stats_data *d, double loss)
{
    d->loss_ring[d->nlosses % MT_STATS_LOSS_RING] = (float)loss;
    d->nlosses++;
    d->loss = loss;
}

int mt_stats_recent_losses(const mt_stats_data *d, float *out, int n)
{
    uint32_t have = d->nlosses < MT_STATS_LOSS_RING ? d->nlosses : MT_STATS_LOSS_RING;
    if (n < 0)
        n = 0;
    if ((uint32_t)n > have)
        n = (int)have;
    uint32_t first = d->nlosses - (uint32_t)n;
    for (int i = 0; i < n; i++)
        out[i] = d->loss_ring[(first + (uint32_t)i) % MT_STATS_LOSS_RING];
    return n;
}

void mt_stats_add_step_times(mt_stats_data *d, double compute, double wait, double optim)
{
    d->step_compute = compute, d->step_wait = wait, d->step_optim = optim;
    d->total_compute += compute, d->total_wait += wait, d->total_optim += optim;
}

void mt_stats_fill_from_pool(mt_stats_data *d, const mt_pool *pool)
{
    mt_pool_stats ps;
    mt_stats(pool, &ps);
    for (int k = 0; k < MT_NKINDS; k++)
        for (int t = 0; t < MT_NTIERS; t++)
            d->kind_bytes[k][t] = ps.bytes[k][t];
    d->tier_used[MT_TIER_HOST] = ps.host_bytes;
    uint64_t nvme = 0;
    for (int k = 0; k < MT_NKINDS; k++)
        nvme += ps.bytes[k][MT_TIER_NVME];
    d->tier_used[MT_TIER_NVME] = nvme;
    int n = mt_chunk_count(pool);
    d->nchunks = n > 0 ? (uint32_t)n : 0;
    memset(d->chunk_map, 0, sizeof d->chunk_map);
    for (int i = 0; i < n && i < MT_STATS_MAX_CHUNKS; i++) {
        mt_chunk_info ci;
        if (mt_chunk_get(pool, i, &ci, NULL) == COL_OK)
            d->chunk_map[i] = mt_stats_chunk_code(ci.tier, ci.kind, ci.dirty, false);
    }
}

void mt_stats_add_model(mt_stats_data *d, const char *name, const mt_pool *pool, bool first)
{
    if (first)
        d->nmodels = 0;
    if (d->nmodels >= MT_STATS_MAX_MODELS)
        return;
    mt_pool_stats ps;
    mt_stats(pool, &ps);
    uint32_t m = d->nmodels++;
    snprintf(d->models[m].name, sizeof d->models[m].name, "%s", name);
    for (int t = 0; t < MT_NTIERS; t++) {
        uint64_t b = 0;
        for (int k = 0; k < MT_NKINDS; k++)
            b += ps.bytes[k][t];
        d->models[m].bytes[t] = b;
    }
    d->models[m].bytes[MT_TIER_HOST] = ps.host_bytes;
    if (first)
        return;
    for (int k = 0; k < MT_NKINDS; k++)
        for (int t = 0; t < MT_NTIERS; t++)
            d->kind_bytes[k][t] += ps.bytes[k][t];
    d->tier_used[MT_TIER_HOST] += ps.host_bytes;
    d->tier_used[MT_TIER_NVME] += d->models[m].bytes[MT_TIER_NVME];
}

const char *mt_stats_tier_name(mt_tier tier)
{
    switch (tier) {
    case MT_TIER_GPU: return "compute";
    case MT_TIER_HOST: return "host";
    case MT_TIER_NVME: return "nvme";
    default: return "none";
    }
}

const char *mt_stats_link_name(mt_link link) { return mt_link_name(link); }

/* ---- publisher ---- */

/* Looks at an existing segment of our name: removes it when its process is
 * gone; COL_ESTATE when this very process made it. */
static col_status replace_stale(const char *name, int pid, uint64_t my_ticks, col_err *e)
{
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0)
        return errno == ENOENT ? COL_OK : col_err_set(e, COL_EIO, "cannot open %s: %s", name, strerror(errno));
    struct stat sb;
    bool ours_now = false;
    if (fstat(fd, &sb) == 0 && (size_t)sb.st_size >= sizeof(seg_header)) {
        void *m = mmap(NULL, sizeof(seg_header), PROT_READ, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) {
            const seg_header *sh = m;
            ours_now = atomic_load_explicit(&sh->magic, memory_order_acquire) == MT_STATS_MAGIC &&
                       sh->version == MT_STATS_VERSION && sh->pid == pid && my_ticks &&
                       sh->start_ticks == my_ticks;
            munmap(m, sizeof(seg_header));
        }
    }
    close(fd);
    if (ours_now)
        return col_err_set(e, COL_ESTATE, "this process already publishes its statistics in %s", name);
    /* the name holds our pid, so whoever made it is not running any more */
    shm_unlink(name);
    return COL_OK;
}

col_status mt_stats_create(const char *program, mt_stats_pub **pub, col_err *e)
{
    *pub = NULL;
    mt_stats_pub *p = calloc(1, sizeof *p);
    if (!p)
        return col_err_set(e, COL_ENOMEM, "out of memory for the statistics publisher");
    int pid = (int)getpid();
    uint64_t ticks = proc_start_ticks(pid);
    snprintf(p->name, sizeof p->name, "/" MT_STATS_SHM_PREFIX "%d", pid);
    int fd = -1;
    for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
        fd = shm_open(p->name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 && errno == EEXIST && attempt == 0) {
            col_status st = replace_stale(p->name, pid, ticks, e);
            if (st != COL_OK)
                return free(p), st;
        } else if (fd < 0) {
            col_status st = col_err_set(e, COL_EIO, "cannot create the statistics segment %s: %s", p->name,
                                        strerror(errno));
            return free(p), st;
        }
    }
    if (ftruncate(fd, (off_t)SEG_BYTES) != 0) {
        col_err_set(e, COL_EIO, "cannot size the statistics segment %s: %s", p->name, strerror(errno));
        close(fd), shm_unlink(p->name), free(p);
        return COL_EIO;
    }
    void *m = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        col_err_set(e, COL_EIO, "cannot map the statistics segment %s: %s", p->name, strerror(errno));
        shm_unlink(p->name), free(p);
        return COL_EIO;
    }
    p->h = m; /* zero-filled by ftruncate: seq 0, data all zeros */
    p->h->version = MT_STATS_VERSION;
    p->h->header_bytes = (uint32_t)sizeof(seg_header);
    p->h->size = SEG_BYTES;
    p->h->pid = pid;
    p->h->start_ticks = ticks;
    p->h->start_time = wall_now();
    copy_name(p->h->program, program);
    atomic_store_explicit(&p->h->magic, MT_STATS_MAGIC, memory_order_release);
    *pub = p;
    return COL_OK;
}

void mt_stats_publish(mt_stats_pub *pub, const mt_stats_data *d)
{
    /* the seqlock writer: odd, fence, the words, even (release). Words are
     * relaxed atomics so a reader copying at the same time is no data race. */
    _Atomic uint64_t *w = seg_words(pub->h);
    uint64_t s = atomic_load_explicit(&pub->h->seq, memory_order_relaxed);
    atomic_store_explicit(&pub->h->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    const unsigned char *src = (const unsigned char *)d;
    for (size_t i = 0; i < DATA_WORDS; i++) {
        uint64_t v;
        memcpy(&v, src + 8 * i, 8);
        atomic_store_explicit(&w[i], v, memory_order_relaxed);
    }
    double now = wall_now();
    uint64_t v;
    memcpy(&v, &now, 8);
    atomic_store_explicit(&w[offsetof(mt_stats_data, updated) / 8], v, memory_order_relaxed);
    atomic_store_explicit(&pub->h->seq, s + 2, memory_order_release);
}

static void copy_words_out(const seg_header *h, mt_stats_data *d)
{
    const _Atomic uint64_t *w = seg_words(h);
    unsigned char *dst = (unsigned char *)d;
    for (size_t i = 0; i < DATA_WORDS; i++) {
        uint64_t v = atomic_load_explicit(&w[i], memory_order_relaxed);
        memcpy(dst + 8 * i, &v, 8);
    }
}

/* untrusted text from another process (mt_stats.h) */
void mt_stats_printable(char *s, size_t cap)
{
    s[cap - 1] = 0;
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        int len = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 && *p >= 0xc2 ? 2 : (*p & 0xf0) == 0xe0 ? 3
                  : (*p & 0xf8) == 0xf0 && *p <= 0xf4 ? 4 : 0;
        bool good = len > 0;
        for (int i = 1; i < len && good; i++)
            good = (p[i] & 0xc0) == 0x80;
        /* overlong 3- and 4-byte forms, UTF-16 surrogates, past U+10FFFF */
        if (good && len == 3)
            good = !(p[0] == 0xe0 && p[1] < 0xa0) && !(p[0] == 0xed && p[1] >= 0xa0);
        if (good && len == 4)
            good = !(p[0] == 0xf0 && p[1] < 0x90) && !(p[0] == 0xf4 && p[1] >= 0x90);
        if (!good || (len == 1 && (*p < 0x20 || *p == 0x7f))) {
            *p++ = '?';
            continue;
        }
        p += len;
    }
}

static void header_to_snapshot(const seg_header *h, mt_stats_snapshot *snap)
{
    snap->pid = (int)h->pid;
    memcpy(snap->program, h->program, MT_STATS_NAME_MAX);
    mt_stats_printable(snap->program, MT_STATS_NAME_MAX);
    snap->start_time = h->start_time;
}

void mt_stats_pub_snapshot(const mt_stats_pub *pub, mt_stats_snapshot *snap)
{
    header_to_snapshot(pub->h, snap);
    copy_words_out(pub->h, &snap->d); /* we are the only writer: no retry needed */
}

const char *mt_stats_pub_name(const mt_stats_pub *pub) { return pub->name; }

void mt_stats_destroy(mt_stats_pub *pub)
{
    if (!pub)
        return;
    munmap(pub->h, SEG_BYTES);
    shm_unlink(pub->name);
    free(pub);
}

/* ---- reader ---- */

typedef enum { SEG_MISSING, SEG_FOREIGN, SEG_OURS } seg_kind;

typedef struct {
    seg_kind kind;
    uint32_t version;
    int pid;
    uint64_t start_ticks; /* version 1 only */
} seg_info;

/* Maps a segment read-only; *len receives the mapped length. */
static const seg_header *map_segment(const char *name, size_t *len)
{
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0)
        return NULL;
    struct stat sb;
    void *m = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && sb.st_size > 0 && (uint64_t)sb.st_size <= ((uint64_t)64 << 20)) {
        *len = (size_t)sb.st_size;
        m = mmap(NULL, *len, PROT_READ, MAP_SHARED, fd, 0);
    }
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

/* Whose segment and which version; only the version-independent prefix is trusted. */
static seg_info classify(const seg_header *h, size_t len)
{
    seg_info si = {SEG_FOREIGN, 0, 0, 0};
    if (len < PREFIX_BYTES || atomic_load_explicit(&h->magic, memory_order_acquire) != MT_STATS_MAGIC)
        return si;
    si.kind = SEG_OURS;
    si.version = h->version;
    si.pid = h->pid > 0 && h->pid <= INT_MAX ? (int)h->pid : 0;
    if (si.version == MT_STATS_VERSION && len >= sizeof(seg_header))
        si.start_ticks = h->start_ticks;
    return si;
}

static bool name_pid(const char *name, int *pid)
{
    size_t np = strlen(MT_STATS_SHM_PREFIX);
    if (strncmp(name, MT_STATS_SHM_PREFIX, np) != 0 || !name[np])
        return false;
    long v = 0;
    for (const char *c = name + np; *c; c++) {
        if (*c < '0' || *c > '9' || v > INT_MAX / 10)
            return false;
        v = v * 10 + (*c - '0');
    }
    if (v <= 0 || v > INT_MAX)
        return false;
    *pid = (int)v;
    return true;
}

static int cmp_entry(const void *a, const void *b)
{
    int pa = ((const mt_stats_entry *)a)->pid, pb = ((const mt_stats_entry *)b)->pid;
    return (pa > pb) - (pa < pb);
}

col_status mt_stats_list(mt_stats_entry *out, int max, int *n, int *removed, col_err *e)
{
    *n = 0;
    if (removed)
        *removed = 0;
    DIR *dir = opendir("/dev/shm");
    if (!dir)
        return col_err_set(e, COL_EIO, "cannot list /dev/shm: %s", strerror(errno));
    struct dirent *de;
    while ((de = readdir(dir))) {
        int pid;
        if (!name_pid(de->d_name, &pid))
            continue;
        char name[NAME_MAX + 2];
        snprintf(name, sizeof name, "/%s", de->d_name);
        size_t len = 0;
        const seg_header *h = map_segment(name, &len);
        if (!h)
            continue;
        seg_info si = classify(h, len);
        munmap((void *)(uintptr_t)h, len);
        if (si.kind != SEG_OURS || si.pid != pid)
            continue; /* not ours (or not what its name says): leave it alone */
        if (process_gone(pid, si.start_ticks)) {
            if (shm_unlink(name) == 0 && removed)
                (*removed)++;
            continue;
        }
        if (*n < max)
            out[*n] = (mt_stats_entry){pid, si.version == MT_STATS_VERSION ? MT_STATS_LIVE : MT_STATS_BAD_VERSION,
                                       si.version};
        (*n)++;
    }
    closedir(dir);
    qsort(out, (size_t)(*n < max ? *n : max), sizeof *out, cmp_entry);
    return COL_OK;
}

col_status mt_stats_read_name(const char *name, mt_stats_snapshot *snap, col_err *e)
{
    size_t len = 0;
    const seg_header *h = map_segment(name, &len);
    if (!h)
        return col_err_set(e, COL_EIO, "no statistics segment %s (the process may have ended)", name);
    col_status st = COL_OK;
    seg_info si = classify(h, len);
    if (si.kind != SEG_OURS)
        st = col_err_set(e, COL_EFORMAT, "%s is not a colossal statistics segment (wrong magic)", name);
    else if (si.version != MT_STATS_VERSION)
        st = col_err_set(e, COL_EUNSUPPORTED, "%s has statistics format version %u but this program reads version "
                         "%u: use the colossal-top of the same build as the running program", name, si.version,
                         MT_STATS_VERSION);
    else if (len < SEG_BYTES || h->header_bytes != sizeof(seg_header) || h->size != SEG_BYTES)
        st = col_err_set(e, COL_EFORMAT, "%s is %zu bytes with a %u-byte header: not the version %u layout", name,
                         len, h->header_bytes, MT_STATS_VERSION);
    else if (process_gone(si.pid, si.start_ticks)) {
        shm_unlink(name);
        st = col_err_set(e, COL_ESTATE, "%s belongs to process %d, which is gone: removed", name, si.pid);
    }
    if (st != COL_OK) {
        munmap((void *)(uintptr_t)h, len);
        return st;
    }
    header_to_snapshot(h, snap);
    /* the seqlock reader: spin briefly, then yield, give up after 200 ms */
    double deadline = mono_now() + 0.2;
    bool ok = false;
    for (unsigned tries = 0; !ok; tries++) {
        uint64_t s1 = atomic_load_explicit(&h->seq, memory_order_acquire);
        if (!(s1 & 1)) {
            copy_words_out(h, &snap->d);
            atomic_thread_fence(memory_order_acquire);
            ok = atomic_load_explicit(&h->seq, memory_order_relaxed) == s1;
        }
        if (!ok && tries % 64 == 63) {
            if (mono_now() > deadline)
                break;
            sched_yield();
        }
    }
    munmap((void *)(uintptr_t)h, len);
    if (!ok)
        return col_err_set(e, COL_ESTATE, "%s: the process kept writing its statistics for 200 ms: try again", name);
    mt_stats_printable(snap->d.run, MT_STATS_NAME_MAX);
    mt_stats_printable(snap->d.device, MT_STATS_NAME_MAX);
    mt_stats_printable(snap->d.run_id, MT_STATS_NAME_MAX);
    return COL_OK;
}

col_status mt_stats_read(int pid, mt_stats_snapshot *snap, col_err *e)
{
    char name[32];
    snprintf(name, sizeof name, "/" MT_STATS_SHM_PREFIX "%d", pid);
    col_status st = mt_stats_read_name(name, snap, e);
    if (st == COL_OK && snap->pid != pid)
        return col_err_set(e, COL_EFORMAT, "%s holds the statistics of process %d, not %d", name, snap->pid, pid);
    return st;
}
