/* cuda_emu_internal.h - what the emulator's files share: its errors, the
 * registry of device and pinned memory, the device's limits. Not for the
 * backend's files (they see cuda_emu.h). */
#ifndef COL_CUDA_EMU_INTERNAL_H
#define COL_CUDA_EMU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <initializer_list>

#include "cuda_emu.h"

namespace cuemu {

/* the emulated device (cudaGetDeviceProperties) */
constexpr int SM_COUNT = 4;                       /* few: grids sized by SMs stay small */
constexpr size_t SMEM_STATIC_MAX = 48 * 1024;     /* dynamic shared memory without cudaFuncSetAttribute */
constexpr size_t SMEM_OPTIN_MAX = 232448;         /* with it (an H100's 227 KiB) */
constexpr size_t SMEM_CANARY = 4096;              /* checked bytes past the launch's dynamic shared memory */
constexpr int MAX_THREADS = 1024;

/* Sets this host thread's last error (cudaGetLastError) and the emulator's
 * message for it (cudaGetErrorString of that code returns it); returns e. */
cudaError_t fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* memory the emulated device can reach */
enum mem_kind { MEM_NONE, MEM_DEVICE, MEM_MANAGED, MEM_PINNED, MEM_REGISTERED };
struct region {
    uintptr_t base;
    size_t bytes;
    mem_kind kind;
};
/* the region holding p (p == base + bytes counts: one past the end); false if none */
bool find_region(const void *p, region *out);
/* a stream handle the runtime knows (0 and the two special ones included) */
bool stream_ok(cudaStream_t s);
/* the dynamic shared memory limit set for a kernel (cudaFuncSetAttribute), or 0 */
int func_smem_limit(const void *kernel);

/* ---- for the API's files (cuda_emu_runtime.cc keeps the registry) ---- */
/* the kind of [p, p + n) (MEM_NONE: pageable host memory); an error if it starts in a region and runs past its end */
cudaError_t classify(const char *what, const char *role, const void *p, size_t n, mem_kind *k);
/* device, managed, pinned or registered: memory a kernel or a to-device copy may use */
bool device_side(mem_kind k);
/* a copy's checks: both ranges inside their regions, the direction the pointers' kinds allow, no overlap */
cudaError_t check_copy(const char *what, void *dst, const void *src, size_t n, cudaMemcpyKind kind);
cudaError_t check_stream(const char *what, cudaStream_t s);
/* new memory of n bytes of kind k (NaN bytes), counted against the device's size when device or managed */
cudaError_t alloc_device(void **p, size_t n, mem_kind k, const char *what);
cudaError_t add_region(void *p, size_t n, mem_kind k);
/* forgets the region starting at p if its kind is one of kinds (*out: it); false if there is none */
bool drop_region(const void *p, std::initializer_list<mem_kind> kinds, region *out);
/* streams and events the runtime made and has not destroyed */
bool handle_ok(const void *h, bool is_event);
void handle_add(const void *h, bool is_event);
bool handle_drop(const void *h, bool is_event);

} /* namespace cuemu */

/* the buffer behind every `extern __shared__` array (cuda_emu.h maps their names onto it) */
extern thread_local unsigned char cuemu_dyn_smem[];

#endif
