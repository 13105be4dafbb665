/* test_nvme.c - the NVMe tier's slot store: CRC-32C known answers (hardware
 * and software), round trips with many requests in flight, every injected
 * fault (I/O error, ENOSPC, short transfer, corrupted data), the size limit,
 * bad directories (each error marking the setting at fault), cleanup, and a real full file system (a 1 MiB tmpfs,
 * when running as root where mount works). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "nvme.h"
#include "testlib.h"

#define SLOT ((size_t)64 << 10)

static void tl_skip(const char *why)
{
    printf("ok %d # SKIP %s\n", ++tl_count, why);
}

/* ---- CRC-32C ---- */

/* bit-at-a-time reference, straight from the definition */
static uint32_t crc_bitwise(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t xrand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

static void fill(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(xrand() >> 24);
}

static void test_crc(void)
{
    TL_NOTE("crc32c: hardware (SSE4.2) %s", mt_crc32c_hw_available() ? "available" : "not available: hw = sw");
    const char *s = "123456789";
    TL_OK(mt_crc32c_sw(0, s, 9) == 0xE3069283u, "crc32c sw(\"123456789\") = %08x", mt_crc32c_sw(0, s, 9));
    TL_OK(mt_crc32c_hw(0, s, 9) == 0xE3069283u, "crc32c hw(\"123456789\") = %08x", mt_crc32c_hw(0, s, 9));
    TL_OK(mt_crc32c(0, s, 9) == 0xE3069283u, "crc32c(\"123456789\")");
    /* RFC 3720 appendix B.4 */
    unsigned char v[4][32];
    uint32_t want[4] = {0x8A9136AAu, 0x62A8AB43u, 0x46DD794Eu, 0x113FDB5Cu};
    for (int i = 0; i < 32; i++) {
        v[0][i] = 0;
        v[1][i] = 0xff;
        v[2][i] = (unsigned char)i;
        v[3][i] = (unsigned char)(31 - i);
    }
    for (int k = 0; k < 4; k++)
        TL_OK(mt_crc32c_sw(0, v[k], 32) == want[k] && mt_crc32c_hw(0, v[k], 32) == want[k],
              "RFC 3720 B.4 vector %d: sw %08x hw %08x want %08x", k, mt_crc32c_sw(0, v[k], 32),
              mt_crc32c_hw(0, v[k], 32), want[k]);
    TL_OK(mt_crc32c_sw(0, "", 0) == 0 && mt_crc32c_hw(0, "", 0) == 0, "crc32c of nothing is 0");

    size_t n = 200000;
    unsigned char *b = malloc(n + 16);
    fill(b, n + 16);
    size_t lens[] = {1, 7, 8, 9, 63, 4096, 12287, 12288, 12289, 40000, 65536 + 3, 200000};
    int bad_sw = 0, bad_hw = 0;
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
        for (int off = 0; off < 8; off++) {
            uint32_t ref = crc_bitwise(b + off, lens[i]);
            bad_sw += mt_crc32c_sw(0, b + off, lens[i]) != ref;
            bad_hw += mt_crc32c_hw(0, b + off, lens[i]) != ref;
        }
    TL_OK(bad_sw == 0, "crc32c sw = bitwise reference on 96 lengths/offsets (%d differ)", bad_sw);
    TL_OK(bad_hw == 0, "crc32c hw (incl. 3-way chains) = bitwise reference on 96 lengths/offsets (%d differ)", bad_hw);
    uint32_t whole = crc_bitwise(b, n);
    TL_OK(mt_crc32c_hw(mt_crc32c_hw(0, b, 77777), b + 77777, n - 77777) == whole &&
              mt_crc32c_sw(mt_crc32c_sw(0, b, 5), b + 5, n - 5) == whole,
          "crc32c continues across pieces");
    b[1234] ^= 1;
    TL_OK(mt_crc32c(0, b, n) != whole, "one flipped bit changes the crc");
    free(b);
}

/* ---- helpers ---- */

static char root[256];

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static mt_nvme *open_store(const char *dir, int qd, uint64_t max, bool buffered, const mt_nvme_faults *f)
{
    mt_nvme_config cfg = {.dir = dir, .slot_bytes = SLOT, .queue_depth = qd, .max_bytes = max, .buffered = buffered,
                          .faults = f};
    mt_nvme *nv = NULL;
    col_err err = {0};
    if (mt_nvme_open(&cfg, &nv, &err) != COL_OK) {
        printf("Bail out! mt_nvme_open %s: %s\n", dir, err.msg);
        exit(1);
    }
    return nv;
}

/* ---- round trips ---- */

#define NS 48

static void test_roundtrip(bool buffered)
{
    const char *mode = buffered ? "buffered" : "default";
    int qd = 8;
    mt_nvme *nv = open_store(root, qd, 0, buffered, NULL);
    mt_nvme_stats st;
    mt_nvme_stats_get(nv, &st);
    TL_NOTE("%s: store file %s, %s I/O, registered file %d", mode, mt_nvme_path(nv),
            st.direct ? "O_DIRECT" : "buffered", st.registered_file);
    if (buffered)
        TL_OK(!st.direct, "buffered: the store does not use O_DIRECT");
    TL_OK(count_entries(root) == 0, "%s: the scratch file is unlinked while open", mode);

    unsigned char *src[NS], *dst[NS];
    for (int i = 0; i < NS; i++) {
        src[i] = mt_nvme_alloc_buffer(SLOT);
        dst[i] = mt_nvme_alloc_buffer(SLOT);
        fill(src[i], SLOT);
        memset(dst[i], 0xA5, SLOT);
    }
    col_err err = {0};
    /* the first 8 destination buffers are registered, the rest are not */
    col_status rs_ = mt_nvme_register(nv, (void *const *)dst, 8, SLOT, &err);
    TL_OK(rs_ == COL_OK, "%s: register 8 buffers: %s", mode, err.msg);

    /* writes: keep qd in flight, waiting for the oldest before a new one */
    mt_nvme_req ring[NS];
    int ok = 1, peak = 0;
    for (int i = 0; i < NS; i++) {
        if (i >= qd)
            ok &= mt_nvme_wait(nv, ring[i - qd], &err) == COL_OK;
        ok &= mt_nvme_write(nv, i, src[i], &ring[i], &err) == COL_OK;
        peak = i + 1 - (i >= qd ? i + 1 - qd : 0);
    }
    for (int i = NS - qd; i < NS; i++)
        ok &= mt_nvme_wait(nv, ring[i], &err) == COL_OK;
    TL_OK(ok && peak == qd, "%s: %d slots written with %d in flight: %s", mode, NS, peak, err.msg);

    /* reads in a shuffled order, polled rather than waited for */
    int order[NS];
    for (int i = 0; i < NS; i++)
        order[i] = i;
    for (int i = NS - 1; i > 0; i--) {
        int j = (int)(xrand() % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int next = 0, finished = 0, polls = 0;
    mt_nvme_req pend[8] = {0};
    while (finished < NS && ok) {
        for (int k = 0; k < qd; k++) {
            if (!pend[k] && next < NS) {
                int s = order[next++];
                ok &= mt_nvme_read(nv, s, dst[s], &pend[k], &err) == COL_OK;
            }
            if (pend[k]) {
                bool done = false;
                ok &= mt_nvme_poll(nv, pend[k], &done, &err) == COL_OK;
                polls++;
                if (done) {
                    pend[k] = 0;
                    finished++;
                }
            }
        }
    }
    int same = 0;
    for (int i = 0; i < NS; i++)
        same += memcmp(src[i], dst[i], SLOT) == 0;
    TL_OK(ok && same == NS, "%s: %d/%d slots read back identical in shuffled order (%d polls): %s", mode, same, NS,
          polls, err.msg);

    /* overlap: write slot i-1 and read slot i+1 while "computing" on i */
    ok = 1;
    for (int i = 1; i + 1 < 12; i++) {
        mt_nvme_req w, r;
        fill(src[i - 1], 4096);
        ok &= mt_nvme_write(nv, i - 1, src[i - 1], &w, &err) == COL_OK;
        ok &= mt_nvme_read(nv, i + 1, dst[i + 1], &r, &err) == COL_OK;
        ok &= mt_nvme_wait(nv, r, &err) == COL_OK && mt_nvme_wait(nv, w, &err) == COL_OK;
        ok &= memcmp(dst[i + 1], src[i + 1], SLOT) == 0;
    }
    for (int i = 0; i < 10; i++)
        ok &= mt_nvme_read_sync(nv, i, dst[i], &err) == COL_OK && memcmp(dst[i], src[i], SLOT) == 0;
    TL_OK(ok, "%s: overwrites and overlapped write/read keep every slot right: %s", mode, err.msg);

    mt_nvme_stats_get(nv, &st);
    uint64_t wr = (uint64_t)(NS + 10) * SLOT, rd = (uint64_t)(NS + 10 + 10) * SLOT;
    TL_OK(st.bytes_written == wr && st.bytes_read == rd && st.writes == NS + 10 && st.reads == NS + 20 &&
              st.slots_written == NS && st.file_bytes == (uint64_t)NS * SLOT && st.registered_buffers == 8,
          "%s: accounting: written %llu (want %llu), read %llu (want %llu), %d slots, file %llu", mode,
          (unsigned long long)st.bytes_written, (unsigned long long)wr, (unsigned long long)st.bytes_read,
          (unsigned long long)rd, st.slots_written, (unsigned long long)st.file_bytes);
    mt_nvme_reset_counters(nv);
    mt_nvme_write_sync(nv, 3, src[3], &err);
    mt_nvme_stats_get(nv, &st);
    TL_OK(st.bytes_written_since == SLOT && st.bytes_read_since == 0 && st.bytes_written == wr + SLOT,
          "%s: counters since reset: %llu written, %llu read", mode, (unsigned long long)st.bytes_written_since,
          (unsigned long long)st.bytes_read_since);
    mt_nvme_close(nv);
    TL_OK(count_entries(root) == 0, "%s: no file left after close", mode);
    for (int i = 0; i < NS; i++) {
        free(src[i]);
        free(dst[i]);
    }
}

/* ---- misuse ---- */

static void test_misuse(void)
{
    mt_nvme *nv = open_store(root, 2, 0, false, NULL);
    unsigned char *b = mt_nvme_alloc_buffer(SLOT * 3), *c = b + SLOT, *d = b + 2 * SLOT;
    fill(b, SLOT * 3);
    col_err err = {0};
    mt_nvme_req r1, r2, r3;
    TL_OK(mt_nvme_read(nv, 0, b, &r1, &err) == COL_ESTATE && strstr(err.msg, "slot 0") &&
              strstr(err.msg, "never written"),
          "read of an unwritten slot: %s", err.msg);
    TL_OK(mt_nvme_write(nv, 0, b + 8, &r1, &err) == COL_EINVAL && r1 == 0, "unaligned buffer: %s", err.msg);
    TL_OK(mt_nvme_write(nv, -1, b, &r1, &err) == COL_EINVAL, "negative slot: %s", err.msg);
    TL_OK(mt_nvme_write(nv, 0, b, &r1, &err) == COL_OK, "write slot 0");
    TL_OK(mt_nvme_read(nv, 0, c, &r2, &err) == COL_ESTATE && strstr(err.msg, "in flight"),
          "second request on a busy slot: %s", err.msg);
    TL_OK(mt_nvme_write(nv, 1, c, &r2, &err) == COL_OK, "write slot 1");
    TL_OK(mt_nvme_write(nv, 2, d, &r3, &err) == COL_ESTATE && strstr(err.msg, "outstanding"),
          "a request past the queue depth: %s", err.msg);
    TL_OK(mt_nvme_wait(nv, r1, &err) == COL_OK && mt_nvme_wait(nv, r2, &err) == COL_OK, "both writes finish");
    TL_OK(mt_nvme_wait(nv, r1, &err) == COL_EINVAL, "a spent handle is refused: %s", err.msg);
    TL_OK(mt_nvme_wait(nv, 0, &err) == COL_EINVAL, "handle 0 is refused");
    void *bad[1] = {b + 8};
    TL_OK(mt_nvme_register(nv, bad, 1, SLOT, &err) == COL_EINVAL, "registering an unaligned buffer: %s", err.msg);
    void *small[1] = {b};
    TL_OK(mt_nvme_register(nv, small, 1, SLOT / 2, &err) == COL_EINVAL, "registering a buffer below a slot: %s",
          err.msg);
    mt_nvme_close(nv);
    free(b);

    unsigned char *big = mt_nvme_alloc_buffer(3 << 20);
    size_t nz = 0;
    for (size_t i = 0; big && i < (4u << 20); i++) /* rounded up to 4 MiB */
        nz += big[i] != 0;
    TL_OK(big && (uintptr_t)big % (2u << 20) == 0 && nz == 0, "a 3 MiB buffer is 2 MiB-aligned and zeroed");
    free(big);
    TL_OK(mt_nvme_alloc_buffer(0) == NULL, "a buffer of 0 bytes is refused");

    mt_nvme_config cfg = {.dir = root, .slot_bytes = 1000};
    TL_OK(mt_nvme_open(&cfg, &nv, &err) == COL_EINVAL && !nv, "slot size not a multiple of 4096: %s", err.msg);
    cfg.slot_bytes = SLOT;
    cfg.queue_depth = -3;
    TL_OK(mt_nvme_open(&cfg, &nv, &err) == COL_EINVAL, "negative queue depth: %s", err.msg);
    cfg.queue_depth = 0;
    cfg.max_bytes = SLOT - 1;
    TL_OK(mt_nvme_open(&cfg, &nv, &err) == COL_EINVAL && strstr(err.msg, "less than one slot") &&
              col_err_has_setting(&err, COL_SETTING_NVME_MAX),
          "a size limit below one slot (the size limit marked): %s", err.msg);
    TL_OK(count_entries(root) == 0, "no file left after failed opens");
}

static void test_bad_dir(void)
{
    char path[512];
    col_err err = {0};
    mt_nvme *nv = (mt_nvme *)1;
    snprintf(path, sizeof path, "%s/missing", root);
    mt_nvme_config cfg = {.dir = path, .slot_bytes = SLOT};
    TL_OK(mt_nvme_open(&cfg, &nv, &err) == COL_EIO && !nv && strstr(err.msg, "does not exist") &&
              strstr(err.msg, path) && err.settings == 1u << COL_SETTING_NVME_DIR,
          "missing directory (the directory marked): %s", err.msg);
    snprintf(path, sizeof path, "%s/afile", root);
    FILE *f = fopen(path, "w");
    fclose(f);
    TL_OK(mt_nvme_open(&cfg, &nv, &err) == COL_EIO && strstr(err.msg, "not a directory; choose another NVMe directory") &&
              err.settings == 1u << COL_SETTING_NVME_DIR,
          "a file (the directory marked): %s", err.msg);
    unlink(path);
    cfg.dir = NULL;
    TL_OK(mt_nvme_open(&cfg, &nv, &err) == COL_EINVAL && col_err_has_setting(&err, COL_SETTING_NVME_DIR),
          "no directory: %s", err.msg);
    if (geteuid() == 0) {
        tl_skip("unwritable directory: root may write anywhere");
        return;
    }
    snprintf(path, sizeof path, "%s/ro", root);
    mkdir(path, 0500);
    cfg.dir = path;
    TL_OK(mt_nvme_open(&cfg, &nv, &err) == COL_EIO && strstr(err.msg, "not writable") &&
              col_err_has_setting(&err, COL_SETTING_NVME_DIR),
          "read-only directory: %s", err.msg);
    TL_OK(count_entries(path) == 0, "nothing created in the read-only directory");
    rmdir(path);
}

/* ---- faults ---- */

typedef struct {
    int submits[2];     /* submissions seen per op */
    int fail_op, fail_k, fail_errno; /* fail the fail_k-th submission of fail_op */
    int short_op, short_slot, short_times, short_to; /* shorten completions */
    int err_op, err_slot, err_errno; /* turn a completion into an error */
    int flip_slot;      /* corrupt the buffer after reading this slot */
} faults;

static int before_submit(void *user, int op, int slot, size_t bytes)
{
    faults *f = user;
    (void)slot;
    (void)bytes;
    f->submits[op]++;
    return op == f->fail_op && f->submits[op] == f->fail_k ? -f->fail_errno : 0;
}

static void after_complete(void *user, int op, int slot, void *buf, int *res)
{
    faults *f = user;
    if (op == f->short_op && slot == f->short_slot && f->short_times > 0 && *res > f->short_to) {
        f->short_times--;
        *res = f->short_to;
    }
    if (op == f->err_op && slot == f->err_slot)
        *res = -f->err_errno;
    if (op == MT_NVME_OP_READ && slot == f->flip_slot && *res > 100)
        ((unsigned char *)buf)[100] ^= 0x40;
}

static faults no_faults(void)
{
    return (faults){.fail_op = -1, .short_op = -1, .err_op = -1, .flip_slot = -1};
}

static void test_faults(void)
{
    faults fs = no_faults();
    mt_nvme_faults hook = {before_submit, after_complete, &fs};
    mt_nvme *nv = open_store(root, 4, 0, false, &hook);
    const char *path = mt_nvme_path(nv);
    unsigned char *a = mt_nvme_alloc_buffer(SLOT), *b = mt_nvme_alloc_buffer(SLOT);
    col_err err = {0};
    mt_nvme_stats st;

    /* I/O error on the 3rd write: that slot stays unwritten, the others work */
    fs.fail_op = MT_NVME_OP_WRITE, fs.fail_k = 3, fs.fail_errno = EIO;
    int ok = 1;
    for (int i = 0; i < 5; i++) {
        fill(a, SLOT);
        col_status s = mt_nvme_write_sync(nv, i, a, &err);
        ok &= i == 2 ? s == COL_EIO && strstr(err.msg, "write of slot 2") && strstr(err.msg, path) &&
                           strstr(err.msg, "Input/output error")
                     : s == COL_OK;
        if (i == 2)
            TL_NOTE("injected EIO: %s", err.msg);
    }
    TL_OK(ok && !mt_nvme_slot_valid(nv, 2) && mt_nvme_slot_valid(nv, 3), "EIO on the 3rd write fails slot 2 only");
    TL_OK(mt_nvme_read_sync(nv, 2, b, &err) == COL_ESTATE, "the failed slot cannot be read: %s", err.msg);
    fs.fail_op = -1;

    /* an error reported by the completion of a read */
    fs.err_op = MT_NVME_OP_READ, fs.err_slot = 1, fs.err_errno = EIO;
    TL_OK(mt_nvme_read_sync(nv, 1, b, &err) == COL_EIO && strstr(err.msg, "read of slot 1"),
          "EIO completing a read: %s", err.msg);
    fs.err_op = -1;
    TL_OK(mt_nvme_read_sync(nv, 1, b, &err) == COL_OK, "the slot reads fine once the fault is gone");

    /* ENOSPC from the device: a space error naming the directory */
    fs.fail_op = MT_NVME_OP_WRITE, fs.fail_k = fs.submits[MT_NVME_OP_WRITE] + 1, fs.fail_errno = ENOSPC;
    TL_OK(mt_nvme_write_sync(nv, 7, a, &err) == COL_ENOMEM && strstr(err.msg, root) &&
              strstr(err.msg, "out of space") && strstr(err.msg, "free") && strstr(err.msg, "65536 bytes") &&
              err.settings == 1u << COL_SETTING_NVME_DIR,
          "ENOSPC on a write (the directory marked): %s", err.msg);
    fs.fail_op = -1;

    /* a short write, retried once for the remainder: succeeds */
    mt_nvme_stats_get(nv, &st);
    uint64_t retries0 = st.retries;
    fill(a, SLOT);
    fs.short_op = MT_NVME_OP_WRITE, fs.short_slot = 4, fs.short_times = 1, fs.short_to = 10000;
    err = (col_err){0};
    TL_OK(mt_nvme_write_sync(nv, 4, a, &err) == COL_OK, "a short write is completed by one retry: %s", err.msg);
    TL_OK(mt_nvme_read_sync(nv, 4, b, &err) == COL_OK && !memcmp(a, b, SLOT), "the retried slot reads back right");
    fs.short_op = MT_NVME_OP_READ, fs.short_slot = 4, fs.short_times = 1, fs.short_to = 4096;
    memset(b, 0, SLOT);
    TL_OK(mt_nvme_read_sync(nv, 4, b, &err) == COL_OK && !memcmp(a, b, SLOT), "a short read is completed by one retry");
    mt_nvme_stats_get(nv, &st);
    TL_OK(st.retries == retries0 + 2, "two retries counted (%llu)", (unsigned long long)(st.retries - retries0));

    /* short twice: an error that says how much moved */
    fs.short_op = MT_NVME_OP_READ, fs.short_slot = 4, fs.short_times = 2, fs.short_to = 0;
    TL_OK(mt_nvme_read_sync(nv, 4, b, &err) == COL_EIO && strstr(err.msg, "short NVMe read of slot 4") &&
              strstr(err.msg, "0 of 65536"),
          "a read short again after the retry: %s", err.msg);
    fs.short_op = MT_NVME_OP_WRITE, fs.short_slot = 4, fs.short_times = 2, fs.short_to = 8192;
    TL_OK(mt_nvme_write_sync(nv, 4, a, &err) == COL_EIO && strstr(err.msg, "short NVMe write of slot 4") &&
              !mt_nvme_slot_valid(nv, 4),
          "a write short again after the retry leaves the slot unwritten: %s", err.msg);
    fs.short_op = -1;

    /* data changed on the way back: the CRC catches it */
    fs.flip_slot = 3;
    TL_OK(mt_nvme_read_sync(nv, 3, b, &err) == COL_EIO &&
              strstr(err.msg, "checksum mismatch in NVMe slot 3 of") && strstr(err.msg, path),
          "a flipped byte after a read: %s", err.msg);
    fs.flip_slot = -1;
    TL_OK(mt_nvme_read_sync(nv, 3, b, &err) == COL_OK, "the next read of the slot passes its check");
    mt_nvme_stats_get(nv, &st);
    TL_OK(st.crc_errors == 1 && st.io_errors == 5, "error counters: %llu crc, %llu io",
          (unsigned long long)st.crc_errors, (unsigned long long)st.io_errors);

    /* several in flight, one fails: drain reports it, the others finish */
    mt_nvme_req r[4];
    unsigned char *m = mt_nvme_alloc_buffer(4 * SLOT);
    fill(m, 4 * SLOT);
    fs.fail_op = MT_NVME_OP_WRITE, fs.fail_k = fs.submits[MT_NVME_OP_WRITE] + 2, fs.fail_errno = EIO;
    ok = 1;
    for (int i = 0; i < 4; i++)
        ok &= mt_nvme_write(nv, 10 + i, m + i * SLOT, &r[i], &err) == COL_OK;
    col_status ds = mt_nvme_drain(nv, &err);
    TL_OK(ok && ds == COL_EIO && strstr(err.msg, "slot 11") && !mt_nvme_slot_valid(nv, 11) &&
              mt_nvme_slot_valid(nv, 10) && mt_nvme_slot_valid(nv, 13),
          "drain of 4 writes reports the one that failed: %s", err.msg);
    fs.fail_op = -1;
    TL_OK(mt_nvme_wait(nv, r[0], &err) == COL_EINVAL, "drain spends the handles");
    free(m);
    mt_nvme_close(nv);
    free(a);
    free(b);
    TL_OK(count_entries(root) == 0, "faults: no file left after close");
}

/* ---- space limits ---- */

static void test_max(void)
{
    mt_nvme *nv = open_store(root, 4, 4 * SLOT + 100, false, NULL);
    unsigned char *a = mt_nvme_alloc_buffer(SLOT);
    col_err err = {0};
    int ok = 1;
    for (int i = 0; i < 4; i++)
        ok &= mt_nvme_write_sync(nv, i, a, &err) == COL_OK;
    TL_OK(ok, "a size limit of 4 slots: slots 0..3 fit");
    TL_OK(mt_nvme_write_sync(nv, 4, a, &err) == COL_ENOMEM && strstr(err.msg, "size limit of 262244 bytes") &&
              strstr(err.msg, "holds 4 slots") && strstr(err.msg, root) && strstr(err.msg, "free") &&
              strstr(err.msg, "raise the size limit") && err.settings == 1u << COL_SETTING_NVME_MAX,
          "slot 4 is past the size limit (the size limit marked): %s", err.msg);
    TL_OK(mt_nvme_write_sync(nv, 3, a, &err) == COL_OK, "rewriting a slot inside the limit still works");
    mt_nvme_stats st;
    mt_nvme_stats_get(nv, &st);
    TL_OK(st.file_bytes == 4 * SLOT, "file holds 4 slots (%llu bytes)", (unsigned long long)st.file_bytes);
    mt_nvme_close(nv);
    free(a);
}

/* A real full file system: a 1 MiB tmpfs (needs root and a working mount). */
static void test_tiny_fs(void)
{
    char mnt[300];
    snprintf(mnt, sizeof mnt, "%s/tiny", root);
    if (geteuid() != 0) {
        tl_skip("full file system: needs root to mount a 1 MiB tmpfs");
        return;
    }
    mkdir(mnt, 0700);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=1M") != 0) {
        char why[160];
        snprintf(why, sizeof why, "full file system: mount tmpfs failed (%s)", strerror(errno));
        tl_skip(why);
        rmdir(mnt);
        return;
    }
    mt_nvme_config cfg = {.dir = mnt, .slot_bytes = 256 << 10, .queue_depth = 2};
    mt_nvme *nv = NULL;
    col_err err = {0};
    if (mt_nvme_open(&cfg, &nv, &err) != COL_OK) {
        TL_OK(false, "open on a 1 MiB tmpfs: %s", err.msg);
    } else {
        mt_nvme_stats st;
        mt_nvme_stats_get(nv, &st);
        TL_NOTE("1 MiB tmpfs: %s I/O", st.direct ? "O_DIRECT" : "buffered (O_DIRECT refused)");
        unsigned char *a = mt_nvme_alloc_buffer(cfg.slot_bytes);
        fill(a, cfg.slot_bytes);
        int i = 0;
        col_status s = COL_OK;
        for (; i < 8 && s == COL_OK; i++)
            s = mt_nvme_write_sync(nv, i, a, &err);
        TL_OK(s == COL_ENOMEM && i >= 2 && i <= 5 && strstr(err.msg, mnt) && strstr(err.msg, "file system is full"),
              "1 MiB tmpfs fills up at slot %d of 256 KiB: %s", i - 1, err.msg);
        unsigned char *b = mt_nvme_alloc_buffer(cfg.slot_bytes);
        TL_OK(mt_nvme_read_sync(nv, 0, b, &err) == COL_OK && !memcmp(a, b, cfg.slot_bytes),
              "slots written before the file system filled still read back");
        mt_nvme_close(nv);
        free(a);
        free(b);
        TL_OK(count_entries(mnt) == 0, "tiny tmpfs is empty after close");
    }
    umount2(mnt, MNT_DETACH);
    rmdir(mnt);
}

int main(void)
{
    test_crc();
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/test_nvme.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        printf("Bail out! cannot create a directory under %s\n", tmp && *tmp ? tmp : "/tmp");
        return 1;
    }
    test_roundtrip(false);
    test_roundtrip(true);
    test_misuse();
    test_bad_dir();
    test_faults();
    test_max();
    test_tiny_fs();
    TL_OK(count_entries(root) == 0 && rmdir(root) == 0, "test directory %s left empty", root);
    return tl_done();
}
