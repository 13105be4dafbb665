/* tb_events.h - TensorBoard event files: the scalars of a run as TensorFlow's Event protocol buffers (encoded by
 * protobuf-c from apps/tb_event.proto, TensorFlow's field numbers) in TFRecord framing, so `tensorboard --logdir`
 * and TensorBoard's EventAccumulator read them.
 *
 * A TFRecord is: the payload's length (uint64, little-endian), the masked CRC-32C of those 8 bytes (uint32 LE),
 * the payload, the masked CRC-32C of the payload (uint32 LE); masked as TensorFlow does:
 * ((crc >> 15) | (crc << 17)) + 0xa282ead8.
 *
 * A file starts with the event {file_version: "brain.Event:2"}, then a SessionLog START at the first step this
 * process will log: TensorBoard drops the events of earlier files at that step and after, so a run resumed from
 * an earlier save shows each step once. */
#ifndef COL_APPS_TB_EVENTS_H
#define COL_APPS_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct tb_writer tb_writer;

/* Creates a new file events.out.tfevents.<seconds>.<host>.<pid>.<n> in the directory dirfd (dir names it in
 * messages), never following or replacing an entry there, and writes the file version and the session start at
 * first_step. */
col_status tb_writer_open(int dirfd, const char *dir, int64_t first_step, tb_writer **w, col_err *err);
/* One scalar (tag, e.g. "train/loss") at step, stamped with the wall-clock time. */
col_status tb_writer_scalar(tb_writer *w, int64_t step, const char *tag, float value, col_err *err);
/* Pushes what was written to the file (each step's end). */
col_status tb_writer_flush(tb_writer *w, col_err *err);
/* The file's name (in its directory). */
const char *tb_writer_name(const tb_writer *w);
/* Flushes and closes; NULL is ignored. */
col_status tb_writer_close(tb_writer *w, col_err *err);

/* TensorFlow's masked CRC-32C of len bytes (the checksums of the framing). */
uint32_t tb_masked_crc32c(const void *data, size_t len);

#endif
