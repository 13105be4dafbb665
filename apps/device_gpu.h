/* device_gpu.h - what apps/device_open.c needs of a GPU backend. Two files
 * define these, and a program links one (Makefile.am): device_cuda.c over
 * the CUDA backend (backend_cuda.h: libengine_cuda.a, or an emulation of it
 * with the same symbols) and device_nocuda.c for a build without CUDA. */
#ifndef COL_APPS_DEVICE_GPU_H
#define COL_APPS_DEVICE_GPU_H

#include <stddef.h>

#include "backend.h"
#include "status.h"

/* The number of GPUs the backend can see; 0 when there is none, with the
 * reason in why (n bytes: no driver, no device, a build without CUDA). */
int app_gpu_count(char *why, size_t n);
/* Makes a backend on GPU index (be has a memory table). COL_EUNSUPPORTED
 * when the GPU cannot be used (too old, no such device), with the reason. */
col_status app_gpu_init(col_backend *be, int index, col_err *err);
void app_gpu_free(col_backend *be);
/* "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" */
const char *app_gpu_name(const col_backend *be);
/* The GPU's free and total memory as its driver reports them. */
col_status app_gpu_mem_info(const col_backend *be, size_t *free_bytes, size_t *total_bytes, col_err *err);

#endif
