/* tb_events.c - TensorBoard event files (tb_events.h) */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "tb_event.pb-c.h"
#include "tb_events.h"

struct tb_writer {
    FILE *f;
    char dir[1024];
    char name[256];
};

uint32_t tb_masked_crc32c(const void *data, size_t len)
{
    uint32_t crc = mt_crc32c(0, data, len);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static double wall_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

static col_status write_failed(tb_writer *w, col_err *err)
{
    return col_err_set(err, COL_EIO, "%s/%s: %s", w->dir, w->name, strerror(errno ? errno : EIO));
}

/* one Event as a TFRecord */
static col_status write_event(tb_writer *w, const Colossal__Tb__Event *ev, col_err *err)
{
    size_t n = colossal__tb__event__get_packed_size(ev);
    uint8_t head[12], tail[4], small[512];
    uint8_t *buf = n <= sizeof small ? small : malloc(n);
    if (!buf)
        return col_err_set(err, COL_ENOMEM, "TensorBoard event: out of memory");
    colossal__tb__event__pack(ev, buf);
    put_le(head, n, 8);
    put_le(head + 8, tb_masked_crc32c(head, 8), 4);
    put_le(tail, tb_masked_crc32c(buf, n), 4);
    errno = 0;
    bool ok = fwrite(head, 1, sizeof head, w->f) == sizeof head && fwrite(buf, 1, n, w->f) == n &&
              fwrite(tail, 1, sizeof tail, w->f) == sizeof tail;
    if (buf != small)
        free(buf);
    return ok ? COL_OK : write_failed(w, err);
}

col_status tb_writer_open(int dirfd, const char *dir, int64_t first_step, tb_writer **out, col_err *err)
{
    *out = NULL;
    tb_writer *w = calloc(1, sizeof *w);
    if (!w)
        return col_err_set(err, COL_ENOMEM, "TensorBoard events: out of memory");
    char host[128] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0] || strchr(host, '/'))
        snprintf(host, sizeof host, "localhost");
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    int fd = -1;
    for (int k = 0; k < 100 && fd < 0; k++) {
        snprintf(w->name, sizeof w->name, "events.out.tfevents.%lld.%s.%ld.%d", (long long)time(NULL), host,
                 (long)getpid(), k);
        fd = openat(dirfd, w->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0 || !(w->f = fdopen(fd, "wb"))) {
        col_status st = write_failed(w, err);
        if (fd >= 0)
            close(fd);
        free(w);
        return st;
    }
    Colossal__Tb__Event ev = COLOSSAL__TB__EVENT__INIT;
    ev.wall_time = wall_now();
    ev.what_case = COLOSSAL__TB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    col_status st = write_event(w, &ev, err);
    Colossal__Tb__SessionLog sl = COLOSSAL__TB__SESSION_LOG__INIT;
    sl.status = COLOSSAL__TB__SESSION_LOG__SESSION_STATUS__START;
    ev.step = first_step;
    ev.what_case = COLOSSAL__TB__EVENT__WHAT_SESSION_LOG;
    ev.session_log = &sl;
    if (st == COL_OK)
        st = write_event(w, &ev, err);
    if (st == COL_OK)
        st = tb_writer_flush(w, err);
    if (st != COL_OK) {
        fclose(w->f);
        free(w);
        return st;
    }
    *out = w;
    return COL_OK;
}

col_status tb_writer_scalar(tb_writer *w, int64_t step, const char *tag, float value, col_err *err)
{
    Colossal__Tb__SummaryValue v = COLOSSAL__TB__SUMMARY_VALUE__INIT, *vp = &v;
    v.tag = (char *)tag;
    v.value_case = COLOSSAL__TB__SUMMARY_VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = value;
    Colossal__Tb__Summary s = COLOSSAL__TB__SUMMARY__INIT;
    s.n_value = 1;
    s.value = &vp;
    Colossal__Tb__Event ev = COLOSSAL__TB__EVENT__INIT;
    ev.wall_time = wall_now();
    ev.step = step;
    ev.what_case = COLOSSAL__TB__EVENT__WHAT_SUMMARY;
    ev.summary = &s;
    return write_event(w, &ev, err);
}

col_status tb_writer_flush(tb_writer *w, col_err *err)
{
    errno = 0;
    return fflush(w->f) == 0 ? COL_OK : write_failed(w, err);
}

const char *tb_writer_name(const tb_writer *w) { return w->name; }

col_status tb_writer_close(tb_writer *w, col_err *err)
{
    if (!w)
        return COL_OK;
    errno = 0;
    col_status st = fclose(w->f) == 0 ? COL_OK : write_failed(w, err);
    free(w);
    return st;
}
