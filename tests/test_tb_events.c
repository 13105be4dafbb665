/* test_tb_events.c - TensorBoard event files (apps/tb_events.c) read back: the TFRecord framing's lengths and
 * masked CRC-32Cs, and each Event decoded with protobuf-c: the file version, the session start, the scalars with
 * their tags, steps and values. (tools/refgen/check_tensorboard.py reads such a file with TensorBoard itself.) */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "tb_event.pb-c.h"
#include "tb_events.h"
#include "testlib.h"

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

int main(void)
{
    /* every TensorFlow event file starts with the 24-byte file-version event: its header is
     * 18 00 00 00 00 00 00 00 a3 7f 4b 22 (the masked CRC of the length, as TensorFlow writes it) */
    const uint8_t len24[8] = {24, 0, 0, 0, 0, 0, 0, 0};
    TL_OK(tb_masked_crc32c(len24, 8) == 0x224b7fa3u, "masked CRC-32C of length 24: %08x (TensorFlow's 224b7fa3)",
          tb_masked_crc32c(len24, 8));
    char dir[] = "/tmp/test_tb_eventsXXXXXX";
    tl_mkdtemp(dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    tb_writer *w = NULL;
    col_err err = {0};
    col_status st = tb_writer_open(dfd, dir, 11, &w, &err);
    TL_OK(st == COL_OK, "open: %s", err.msg);
    const char *tags[] = {"train/loss", "train/learning_rate", "eval/loss"};
    const float vals[] = {3.25f, 1e-3f, 2.5f};
    for (int s = 11; st == COL_OK && s <= 13; s++)
        for (int k = 0; k < 3 && st == COL_OK; k++)
            st = tb_writer_scalar(w, s, tags[k], vals[k] * (float)s, &err);
    char name[300];
    snprintf(name, sizeof name, "%s", w ? tb_writer_name(w) : "");
    TL_OK(st == COL_OK && tb_writer_close(w, &err) == COL_OK, "9 scalars written: %s", err.msg);
    TL_OK(strncmp(name, "events.out.tfevents.", 20) == 0, "the name TensorBoard looks for: %s", name);
    /* a second writer never replaces the first file */
    tb_writer *w2 = NULL;
    TL_OK(tb_writer_open(dfd, dir, 1, &w2, &err) == COL_OK && strcmp(tb_writer_name(w2), name) != 0,
          "a second file gets another name (%s)", w2 ? tb_writer_name(w2) : err.msg);
    tb_writer_close(w2, &err);
    int fd = openat(dfd, name, O_RDONLY);
    static uint8_t buf[1 << 16];
    ssize_t len = fd >= 0 ? read(fd, buf, sizeof buf) : -1;
    close(fd);
    int records = 0, bad_crc = 0, bad = 0, scalars = 0;
    for (ssize_t at = 0; len > 0 && at < len;) {
        if (at + 12 > len) {
            bad++;
            break;
        }
        uint64_t n = le(buf + at, 8);
        if ((uint32_t)le(buf + at + 8, 4) != tb_masked_crc32c(buf + at, 8))
            bad_crc++;
        if (at + 12 + (ssize_t)n + 4 > len) {
            bad++;
            break;
        }
        const uint8_t *data = buf + at + 12;
        if ((uint32_t)le(data + n, 4) != tb_masked_crc32c(data, n))
            bad_crc++;
        /* the masked CRC is TensorFlow's mask over the plain CRC-32C */
        uint32_t c = mt_crc32c_sw(0, data, n), masked = ((c >> 15) | (c << 17)) + 0xa282ead8u;
        if (masked != (uint32_t)le(data + n, 4))
            bad_crc++;
        Colossal__Tb__Event *ev = colossal__tb__event__unpack(NULL, n, data);
        if (!ev) {
            bad++;
        } else if (records == 0) {
            TL_OK(ev->what_case == COLOSSAL__TB__EVENT__WHAT_FILE_VERSION &&
                      !strcmp(ev->file_version, "brain.Event:2") && ev->wall_time > 1.6e9,
                  "record 1: file_version brain.Event:2 (wall time %.0f)", ev->wall_time);
        } else if (records == 1) {
            TL_OK(ev->what_case == COLOSSAL__TB__EVENT__WHAT_SESSION_LOG &&
                      ev->session_log->status == COLOSSAL__TB__SESSION_LOG__SESSION_STATUS__START && ev->step == 11,
                  "record 2: SessionLog START at the first step (%lld)", (long long)ev->step);
        } else {
            int i = records - 2, s = 11 + i / 3, k = i % 3;
            if (ev->what_case == COLOSSAL__TB__EVENT__WHAT_SUMMARY && ev->summary->n_value == 1 &&
                !strcmp(ev->summary->value[0]->tag, tags[k]) && ev->step == s &&
                ev->summary->value[0]->value_case == COLOSSAL__TB__SUMMARY_VALUE__VALUE_SIMPLE_VALUE &&
                ev->summary->value[0]->simple_value == vals[k] * (float)s)
                scalars++;
        }
        if (ev)
            colossal__tb__event__free_unpacked(ev, NULL);
        records++;
        at += 12 + (ssize_t)n + 4;
    }
    TL_OK(records == 11 && bad == 0, "11 records, each framed whole (%d, %d bad)", records, bad);
    TL_OK(bad_crc == 0, "every length and payload CRC matches (%d bad)", bad_crc);
    TL_OK(scalars == 9, "the 9 scalars: tag, step and value as written (%d)", scalars);
    close(dfd);
    tl_remove_tree(dir);
    return tl_done();
}
