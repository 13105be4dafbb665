/* units.h - byte counts as people read them. One convention everywhere (progress lines, colossal-top,
 * error messages, logs): binary units, spelled B, KiB, MiB, GiB, TiB. */
#ifndef COL_UNITS_H
#define COL_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* Longest text col_fmt_bytes writes, with its terminating NUL ("1023.9 TiB" and room to spare). */
#define COL_BYTES_STR 16

/* Writes b into buf (n bytes, COL_BYTES_STR suffices) with the largest unit in which it reads at least 1,
 * one decimal from KiB up: "512 B", "1.5 KiB", "12.0 MiB", "3.4 GiB". Returns buf. */
char *col_fmt_bytes(char *buf, size_t n, uint64_t b);

/* The same with a fixed unit: the value in MiB ("12.0 MiB"), for columns that must line up. */
char *col_fmt_mib(char *buf, size_t n, uint64_t b);

#endif
