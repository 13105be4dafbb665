/* device.h - the --device option of colossal's apps: which backend runs the
 * graphs (cpu, or a GPU: cuda, cuda:N), the default choice, the backend made
 * and freed, a one-line description, the device's memory and the compute
 * budget taken when the user names none.
 *
 * Files: device.c parses the option and holds the budget rule (no backend:
 * option parsers and fuzzers link it alone); device_open.c makes the
 * backends and reaches a GPU through the glue of device_gpu.h, which one of
 * two files provides, chosen when the program is linked (Makefile.am):
 * device_cuda.c (the CUDA backend: libengine_cuda.a, or an emulation
 * exporting the same col_cuda_* symbols) or device_nocuda.c (a build without
 * CUDA: no GPU is ever found). No #ifdef decides it. */
#ifndef COL_APPS_DEVICE_H
#define COL_APPS_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"
#include "status.h"

typedef enum {
    APP_DEVICE_AUTO, /* not given: a usable GPU if there is one, else the CPU */
    APP_DEVICE_CPU,
    APP_DEVICE_GPU,  /* cuda, cuda:N */
} app_device_kind;

typedef struct {
    app_device_kind kind;
    int index;     /* the GPU's number (cuda:N; "cuda" is 0) */
    char text[16]; /* as given ("cuda", "cuda:1"), for messages */
    int local;     /* this process's rank among a parallel run's processes on its host (0 alone): the automatic
                      choice and "cuda" take GPU local modulo the GPUs there, one GPU per process */
} app_device_choice;

/* The lines of --help for --device. */
extern const char app_device_help[];

/* "cpu", "cuda" or "cuda:N" (N a decimal GPU number) into *c; false with a
 * message naming --device (msg, n bytes) for anything else. */
bool app_device_parse(const char *v, app_device_choice *c, char *msg, size_t n);

/* The compute budget for a device with free and total bytes of memory when
 * the user gives none: the free memory less a reserve of 512 MiB + 1/32 of
 * the total for what the device holds outside the budget (kernel modules
 * loaded as they are first used, the BLAS library's own buffers, other
 * processes' growth), rounded down to a MiB. 0 when less than
 * APP_DEVICE_MIN_BUDGET would be left. */
enum { APP_DEVICE_MIN_BUDGET = 64 << 20 };
size_t app_device_budget_rule(size_t free_bytes, size_t total_bytes);
/* The reserve the rule keeps back for a device of total bytes. */
size_t app_device_reserve(size_t total_bytes);

/* ---- the backend (device_open.c) ---- */

typedef struct {
    col_backend be;
    bool ready;         /* be is made (free it with app_device_close) */
    bool gpu;           /* a GPU: be has device memory (be.mem) */
    int index;          /* the GPU's number */
    char name[24];      /* "cpu", "cuda:0" */
    char label[360];    /* "cuda:0: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)", "cpu" */
    char desc[400];     /* the label with the GPU's memory ("..., 79.1 GiB"), or "cpu: 2 threads, OpenBLAS Haswell" */
    char note[400];     /* the automatic choice took the CPU although a GPU was seen: why ("" otherwise) */
} app_device;

/* Makes the backend of the choice. APP_DEVICE_AUTO takes GPU 0 when the
 * glue finds one and its backend can be made, else the CPU (note says why
 * when a GPU was there). Returns 0, or an exit code with one line in err:
 * 2 when a GPU was asked for and none is usable (not built with CUDA, no
 * driver, no such device, too old: the line names --device and what to
 * do), 1 for any other failure. *d is all zeros on failure. */
int app_device_open(const app_device_choice *c, app_device *d, col_err *err);
void app_device_close(app_device *d);

/* The device's free and total memory now (the driver's figures: every
 * process on it counts); false (zeros) on the CPU or when it cannot be
 * read. */
bool app_device_memory(const app_device *d, size_t *free_bytes, size_t *total_bytes);

/* On a GPU with *budget 0 (no --gpu-mem given): sets *budget by
 * app_device_budget_rule from the memory free now and writes a line saying
 * so into line ("compute tier 75.2 GiB: the 78.4 GiB free on cuda:0 less
 * 3.0 GiB kept back"). Nothing to do (line "") on the CPU or when a budget
 * was given. 0, or 1 with err set when the device has too little free. */
int app_device_default_budget(const app_device *d, size_t *budget, char *line, size_t n, col_err *err);

#endif
