/* cuda_launch.h - the one way the CUDA backend launches a kernel:
 *
 *     CU_LAUNCH(kernel, grid, block, shmem, stream)(args...);
 *
 * is exactly kernel<<<grid, block, shmem, stream>>>(args...) under nvcc.
 * Built with -DCOL_CUDA_EMU (g++, the host emulator of emu/cuda_emu.h) it
 * runs the kernel's threads on the CPU instead, so the same kernel sources
 * are tested without a GPU. The kernel may be a template-id with commas
 * (k_att_fwd<DM, BR, BC>): the macro counts its arguments and glues every
 * argument before the last four back into the kernel's name. All four launch
 * parameters are required. */
#ifndef COL_CUDA_LAUNCH_H
#define COL_CUDA_LAUNCH_H

#define CU_UNPAREN_(...) __VA_ARGS__
#define CU_LAUNCH_PICK_(_1, _2, _3, _4, _5, _6, _7, _8, _9, N, ...) N
#define CU_LAUNCH(...)                                                                                          \
    CU_LAUNCH_PICK_(__VA_ARGS__, CU_LAUNCH9_, CU_LAUNCH8_, CU_LAUNCH7_, CU_LAUNCH6_, CU_LAUNCH5_, CU_LAUNCH_ARGS_, \
                    CU_LAUNCH_ARGS_, CU_LAUNCH_ARGS_, CU_LAUNCH_ARGS_)(__VA_ARGS__)
#define CU_LAUNCH5_(k, g, b, s, st) CU_LAUNCH_K_((k), g, b, s, st)
#define CU_LAUNCH6_(k1, k2, g, b, s, st) CU_LAUNCH_K_((k1, k2), g, b, s, st)
#define CU_LAUNCH7_(k1, k2, k3, g, b, s, st) CU_LAUNCH_K_((k1, k2, k3), g, b, s, st)
#define CU_LAUNCH8_(k1, k2, k3, k4, g, b, s, st) CU_LAUNCH_K_((k1, k2, k3, k4), g, b, s, st)
#define CU_LAUNCH9_(k1, k2, k3, k4, k5, g, b, s, st) CU_LAUNCH_K_((k1, k2, k3, k4, k5), g, b, s, st)
/* fewer than five arguments: a compile error that says why */
#define CU_LAUNCH_ARGS_(...) static_assert(false, "CU_LAUNCH(kernel, grid, block, shmem, stream): all five are needed")

#ifdef COL_CUDA_EMU
#include "cuda_emu.h"
#define CU_LAUNCH_K_(k, g, b, s, st) ::cuemu::launch_of(CU_UNPAREN_ k, g, b, s, st, #k, __FILE__, __LINE__)
#else
#define CU_LAUNCH_K_(k, g, b, s, st) CU_UNPAREN_ k<<<g, b, s, st>>>
#endif

#endif
