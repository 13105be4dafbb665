/* device_cuda.c - the GPU glue of device_gpu.h over the CUDA backend
 * (backend_cuda.h). Linked with libengine_cuda.a in a build with CUDA, or
 * with an emulation of the CUDA backend that exports the same symbols. */
#include <stdio.h>

#include "backend_cuda.h"
#include "device_gpu.h"

int app_gpu_count(char *why, size_t n)
{
    int count = 0;
    col_err e = {0};
    if (!col_cuda_device_count(&count, &e)) {
        snprintf(why, n, "%s", e.msg[0] ? e.msg : "the CUDA runtime found no GPU");
        return 0;
    }
    return count;
}

col_status app_gpu_init(col_backend *be, int index, col_err *err) { return col_cuda_backend_init(be, index, err); }

void app_gpu_free(col_backend *be) { col_cuda_backend_free(be); }

const char *app_gpu_name(const col_backend *be) { return col_cuda_backend_device_name(be); }

col_status app_gpu_mem_info(const col_backend *be, size_t *free_bytes, size_t *total_bytes, col_err *err)
{
    return col_cuda_mem_info(be, free_bytes, total_bytes, err);
}
