/* backend_cuda.h - the CUDA backend (issue 6): the same kernel table as the
 * CPU backend, run on one GPU.
 *
 * Built only when configure finds nvcc and cuBLAS (libcore/libcore_cuda.a).
 * Every kernel runs on the backend's stream and returns as soon as it is
 * queued (its launch error, if any, becomes a col_status): node data must be
 * device memory. A few kernels synchronise the stream to report bad input
 * (token ids or targets out of range) as COL_EINVAL, as the CPU ones do.
 * Kernels do not use col_exec.scratch: their workspace is the backend's
 * (col_cuda_backend_init allocates it), so a plan's scratch may be NULL.
 *
 * CUDA errors become col_status codes carrying the CUDA message: out of device
 * memory is COL_ENOMEM, no device or driver COL_EUNSUPPORTED, anything else
 * COL_EINTERNAL. Nothing here aborts or prints.
 */
#ifndef COL_BACKEND_CUDA_H
#define COL_BACKEND_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices in *n. False (and *n = 0) without a driver
 * or a GPU; then why (if non-NULL) says what the CUDA runtime reported. */
bool col_cuda_device_count(int *n, col_err *why);

/* A backend on device `device`: its stream, cuBLASLt handle and workspace.
 * COL_EUNSUPPORTED with the reason when there is no such device. */
col_status col_cuda_backend_init(col_backend *be, int device, col_err *err);
void col_cuda_backend_free(col_backend *be);

/* f32 matmuls in TF32 (10-bit mantissa inputs, f32 accumulation) when on;
 * off (full f32) after init. */
void col_cuda_backend_set_tf32(col_backend *be, bool on);
bool col_cuda_backend_tf32(const col_backend *be);
/* "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" */
const char *col_cuda_backend_device_name(const col_backend *be);

/* ---- device memory (on the backend's device, ordered on its stream) ---- */
/* *out = bytes of device memory (256-byte aligned); COL_ENOMEM when out of memory. */
col_status col_cuda_alloc(const col_backend *be, size_t bytes, void **out, col_err *err);
void col_cuda_free(const col_backend *be, void *p);
/* Copies that return when the data has arrived (host memory may be pageable). */
col_status col_cuda_to_device(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err);
col_status col_cuda_to_host(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err);
/* Device to device, queued on the stream. */
col_status col_cuda_copy(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err);
/* Sets bytes of device memory to the byte value, queued on the stream. */
col_status col_cuda_memset(const col_backend *be, void *dst, int value, size_t bytes, col_err *err);
/* Waits for everything queued on the backend's stream; reports the first
 * asynchronous error (a kernel fault) as a col_status. */
col_status col_cuda_sync(const col_backend *be, col_err *err);

#ifdef __cplusplus
}
#endif

#endif
