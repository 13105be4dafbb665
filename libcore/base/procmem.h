/* procmem.h - this process's resident memory as the kernel counts it
 * (/proc/self/status), for memory reports and tests that hold a run to its
 * budgets. Linux only; elsewhere the calls report nothing. */
#ifndef COL_PROCMEM_H
#define COL_PROCMEM_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    size_t rss;       /* VmRSS: resident now (anonymous + file-backed + shared), bytes */
    size_t peak;      /* VmHWM: the most resident at once since the start or the last reset */
    size_t anon;      /* RssAnon */
    size_t file;      /* RssFile: mapped file pages (e.g. a memory-mapped checkpoint) */
} col_procmem;

/* Reads the figures; false (and zeros) where they cannot be read. */
bool col_procmem_read(col_procmem *m);
/* The same for another process (its /proc/PID/status; false when it is gone or not readable). */
bool col_procmem_read_pid(int pid, col_procmem *m);
/* The machine's physical memory in bytes (sysconf); 0 where it cannot be told. */
size_t col_machine_memory(void);
/* Starts the peak (VmHWM) over from the current resident size
 * (/proc/self/clear_refs, "5"); false where the kernel does not allow it. */
bool col_procmem_reset_peak(void);

#endif
