/* backend_cuda.h - the CUDA backend (issue 6): the same kernel table as the
 * CPU backend, run on one GPU.
 *
 * Built only when configure finds nvcc and cuBLAS (libcore/engine/cuda/libengine_cuda.a).
 * Every kernel runs on the backend's stream and returns as soon as it is
 * queued (its launch error, if any, becomes a col_status): node data must be
 * device memory. No kernel stops the host: bad input (token ids or targets
 * out of range, a key/value cache position past the cache) is reported as
 * COL_EINVAL at the next synchronisation, with the CPU kernel's message:
 * col_cuda_sync, a synchronous copy (col_cuda_to_host, col_cuda_to_device)
 * or the memory table's sync (a plan's run ends with it). Until then the
 * kernels skip what is bad (zeros or nothing written, never out of bounds).
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
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "optim.h"

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
/* Matmul calls since init that found their shape's cuBLASLt descriptors
 * and algorithm in the backend's cache (*hits) and that built them (*misses). */
void col_cuda_backend_matmul_cache(const col_backend *be, uint64_t *hits, uint64_t *misses);
/* "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" */
const char *col_cuda_backend_device_name(const col_backend *be);
/* The backend's stream (a cudaStream_t; the kernels' queue, COL_QUEUE_COMPUTE)
 * and device, for code that queues its own work in order with the kernels:
 * the NCCL collectives (libcore/comm/comm_nccl.h). NULL and -1 for a backend
 * that is not initialised. */
void *col_cuda_backend_stream(const col_backend *be);
int col_cuda_backend_device(const col_backend *be);

/* ---- device memory (cuda_mem.cu; on the backend's device, ordered on its stream) ---- */
/* *out = bytes of device memory (256-byte aligned); COL_ENOMEM when out of memory. */
col_status col_cuda_alloc(const col_backend *be, size_t bytes, void **out, col_err *err);
void col_cuda_free(const col_backend *be, void *p);
/* Copies that return when the data has arrived (host memory may be pageable);
 * they wait for the kernels queued before them, and report their bad input. */
col_status col_cuda_to_device(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err);
col_status col_cuda_to_host(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err);
/* Device to device, queued on the stream. */
col_status col_cuda_copy(const col_backend *be, void *dst, const void *src, size_t bytes, col_err *err);
/* Sets bytes of device memory to the byte value, queued on the stream. */
col_status col_cuda_memset(const col_backend *be, void *dst, int value, size_t bytes, col_err *err);
/* Waits for everything queued on the backend's stream; reports the first
 * asynchronous error (a kernel fault) as a col_status, else the first bad
 * input the kernels queued since the last synchronisation met (COL_EINVAL). */
col_status col_cuda_sync(const col_backend *be, col_err *err);
/* The backend's device memory as the driver reports it (cudaMemGetInfo):
 * bytes free now (what every process on the device has not taken) and the
 * device's total. */
col_status col_cuda_mem_info(const col_backend *be, size_t *free_bytes, size_t *total_bytes, col_err *err);

/* The backend's memory table (be->mem after col_cuda_backend_init): the
 * functions above, so col_plan_create_on(g, be, ...) puts a plan's arena and
 * scratch in device memory (plan.h). */
const col_backend_mem *col_cuda_mem_table(void);

/* ---- optimizer on the device (cuda_optim.cu) ---- */
/* col_opt_step (optim.h) with every buffer of ts (w, g, m, v) in the
 * backend's device memory (the ts array itself is host memory): the same
 * checks, and the same formulas with the same operations in the same order
 * (no fused multiply-adds, IEEE division and square root), so each element
 * gets what col_opt_step computes. AdamW and SGD (momentum, Nesterov);
 * LAMB and LARS are COL_EUNSUPPORTED. The tensors are updated by one kernel
 * launch per group of up to 32 tensors, queued on the backend's stream:
 * col_cuda_sync (or a copy to the host) waits for it. A buffer that is not
 * device-accessible memory is COL_EINVAL; on any error nothing is queued. */
col_status col_cuda_opt_step(const col_backend *be, const col_opt_config *c, float lr, int64_t step, col_opt_tensor *ts,
                             int nt, col_err *err);

/* ---- timing on the backend's stream (cuda_mem.cu; for benchmarks) ---- */
typedef struct col_cuda_event col_cuda_event;
col_status col_cuda_event_create(const col_backend *be, col_cuda_event **ev, col_err *err);
void col_cuda_event_free(col_cuda_event *ev);
/* Queues the event on the backend's stream: it completes when the work
 * queued before it has. */
col_status col_cuda_event_record(const col_backend *be, col_cuda_event *ev, col_err *err);
/* *ms = GPU time from a to b (both recorded, a first); waits for b. */
col_status col_cuda_event_ms(const col_cuda_event *a, const col_cuda_event *b, float *ms, col_err *err);

#ifdef __cplusplus
}
#endif

#endif
