/* bench_nvme.c - sequential write and read throughput of the NVMe tier's
 * slot store (memtier/nvme.h): CRC-32C, io_uring, registered buffers and
 * all, as a trainer would see it.
 *
 *   bench_nvme DIR [--size-mib N] [--slot-mib N] [--qd N] [--runs N] [--buffered] [--no-register]
 *
 * Each run writes size-mib of slots 0, 1, 2, ... in order with qd requests
 * in flight (waiting for the oldest before submitting the next), then reads
 * them back the same way. Prints each run and the medians in GB/s (10^9
 * bytes per second); bench_nvme.sh compares them with fio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "nvme.h"

static void usage(void)
{
    fprintf(stderr, "usage: bench_nvme DIR [--size-mib N] [--slot-mib N] [--qd N] [--runs N] [--buffered] "
                    "[--no-register]\n");
    exit(2);
}

static long arg_long(const char *flag, const char *v, long lo, long hi)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) {
        fprintf(stderr, "bench_nvme: %s needs a number in %ld..%ld\n", flag, lo, hi);
        exit(2);
    }
    return x;
}

/* One pass over nslots slots (write or read), qd in flight; seconds. */
static double pass(mt_nvme *nv, bool write, int nslots, unsigned char **bufs, int qd)
{
    mt_nvme_req *req = calloc((size_t)nslots, sizeof *req);
    col_err err = {0};
    double t0 = bench_now();
    for (int i = 0; i < nslots + qd; i++) {
        col_status st = COL_OK;
        if (i >= qd)
            st = mt_nvme_wait(nv, req[i - qd], &err);
        if (st == COL_OK && i < nslots)
            st = write ? mt_nvme_write(nv, i, bufs[i % qd], &req[i], &err)
                       : mt_nvme_read(nv, i, bufs[i % qd], &req[i], &err);
        if (st != COL_OK) {
            fprintf(stderr, "bench_nvme: %s\n", err.msg);
            exit(1);
        }
    }
    double t = bench_now() - t0;
    free(req);
    return t;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-')
        usage();
    const char *dir = argv[1];
    long size_mib = 1024, slot_mib = 4, qd = 8, runs = 3;
    bool buffered = false, reg = true;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--size-mib"))
            size_mib = arg_long(a, v, 1, 1L << 24), i++;
        else if (!strcmp(a, "--slot-mib"))
            slot_mib = arg_long(a, v, 1, 1024), i++;
        else if (!strcmp(a, "--qd"))
            qd = arg_long(a, v, 1, MT_NVME_MAX_QUEUE_DEPTH), i++;
        else if (!strcmp(a, "--runs"))
            runs = arg_long(a, v, 1, 99), i++;
        else if (!strcmp(a, "--buffered"))
            buffered = true;
        else if (!strcmp(a, "--no-register"))
            reg = false;
        else
            usage();
    }
    size_t slot = (size_t)slot_mib << 20;
    int nslots = (int)(size_mib / slot_mib);
    if (nslots < 1) {
        fprintf(stderr, "bench_nvme: --size-mib must hold at least one slot of %ld MiB\n", slot_mib);
        return 2;
    }
    mt_nvme_config cfg = {.dir = dir, .slot_bytes = slot, .queue_depth = (int)qd, .buffered = buffered};
    mt_nvme *nv;
    col_err err = {0};
    if (mt_nvme_open(&cfg, &nv, &err) != COL_OK) {
        fprintf(stderr, "bench_nvme: %s\n", err.msg);
        return 1;
    }
    unsigned char **bufs = calloc((size_t)qd, sizeof *bufs);
    uint64_t x = 88172645463325252ull;
    for (long i = 0; i < qd; i++) {
        bufs[i] = mt_nvme_alloc_buffer(slot);
        if (!bufs[i]) {
            fprintf(stderr, "bench_nvme: out of memory for %ld buffers of %ld MiB\n", qd, slot_mib);
            return 1;
        }
        uint64_t *w = (uint64_t *)bufs[i];
        for (size_t k = 0; k < slot / 8; k++) { /* incompressible data */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            w[k] = x;
        }
    }
    if (reg && mt_nvme_register(nv, (void *const *)bufs, (int)qd, slot, &err) != COL_OK)
        fprintf(stderr, "bench_nvme: %s (going on without registered buffers)\n", err.msg);
    mt_nvme_stats st;
    mt_nvme_stats_get(nv, &st);
    double bytes = (double)nslots * (double)slot;
    printf("bench_nvme: dir %s, %d slots of %ld MiB (%.0f MiB), queue depth %ld, %s I/O, registered buffers %d, "
           "registered file %d\n",
           dir, nslots, slot_mib, bytes / (1 << 20), qd, st.direct ? "O_DIRECT" : "buffered", st.registered_buffers,
           st.registered_file);
    double *w = calloc((size_t)runs, sizeof *w), *r = calloc((size_t)runs, sizeof *r);
    for (long i = 0; i < runs; i++) {
        w[i] = bytes / pass(nv, true, nslots, bufs, (int)qd) / 1e9;
        r[i] = bytes / pass(nv, false, nslots, bufs, (int)qd) / 1e9;
        printf("run %ld: write %.3f GB/s, read %.3f GB/s\n", i + 1, w[i], r[i]);
        fflush(stdout);
    }
    mt_nvme_stats_get(nv, &st);
    printf("median write %.3f GB/s\nmedian read %.3f GB/s\n", bench_median(w, (int)runs), bench_median(r, (int)runs));
    printf("NVMe bytes written %llu, read %llu, retries %llu\n", (unsigned long long)st.bytes_written,
           (unsigned long long)st.bytes_read, (unsigned long long)st.retries);
    mt_nvme_close(nv);
    for (long i = 0; i < qd; i++)
        free(bufs[i]);
    free(bufs);
    free(w);
    free(r);
    return 0;
}
