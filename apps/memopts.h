/* memopts.h - the memory-tier options every colossal app takes (--cpu-mem,
 * --gpu-mem, --chunk-size, --nvme-dir, --nvme-max, --nvme-kinds,
 * --nvme-queue-depth): parsed by name from text, shown in --help the same
 * way, applied to a session's configuration. */
#ifndef COL_APPS_MEMOPTS_H
#define COL_APPS_MEMOPTS_H

#include <stdbool.h>
#include <stddef.h>

#include "lm_trainer.h"

typedef struct {
    size_t cpu_mem;        /* host budget for parameters, gradients and states; 0 = unlimited */
    size_t gpu_mem;        /* compute-tier budget; 0 = no compute tier (everything in place) */
    size_t chunk_size;     /* memtier chunk bytes; 0 = automatic */
    char nvme_dir[4096];   /* "" = no NVMe tier */
    size_t nvme_max;       /* 0 = unlimited */
    unsigned nvme_kinds;   /* COL_LM_* bits; 0 = automatic */
    int nvme_queue_depth;  /* 0 = the default */
} mem_opts;

/* The long options (without "--"), NULL-terminated; all take a value. */
extern const char *const mem_opt_names[];

/* Sets option name from v: 1 when set, 0 when v is bad (msg says why, n
 * bytes), -1 when name is not a memory option. */
int mem_opt_set(mem_opts *m, const char *name, const char *v, char *msg, size_t n);

/* The lines of --help for these options. */
extern const char mem_opts_help[];

/* Copies the options into a session's configuration. */
void mem_opts_apply(const mem_opts *m, col_lm_train_config *tc);

/* The option (without "--", one of mem_opt_names) that sets s, for naming it
 * beside a library error that marks s (apperr.h); NULL for the settings of
 * other options. */
const char *mem_opt_of(col_setting s);

/* Parses a size such as 512M, 8G, 1.5GiB or 4096 (bytes; K/M/G/T are powers of 1024). */
bool mem_parse_size(const char *v, size_t *out);

#endif
