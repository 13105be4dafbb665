/* device_nocuda.c - the GPU glue of device_gpu.h in a build without the CUDA
 * backend (configure found no nvcc and cuBLAS): there is never a GPU. */
#include <stdio.h>
#include <string.h>

#include "device_gpu.h"

int app_gpu_count(char *why, size_t n)
{
    snprintf(why, n, "this colossal was built without CUDA (configure found no nvcc and cuBLAS; install the CUDA "
             "toolkit and build again)");
    return 0;
}

col_status app_gpu_init(col_backend *be, int index, col_err *err)
{
    memset(be, 0, sizeof *be);
    return col_err_set(err, COL_EUNSUPPORTED, "no GPU %d: this colossal was built without CUDA", index);
}

void app_gpu_free(col_backend *be) { (void)be; }

const char *app_gpu_name(const col_backend *be)
{
    (void)be;
    return "";
}

col_status app_gpu_mem_info(const col_backend *be, size_t *free_bytes, size_t *total_bytes, col_err *err)
{
    (void)be;
    *free_bytes = *total_bytes = 0;
    return col_err_set(err, COL_EUNSUPPORTED, "no GPU: this colossal was built without CUDA");
}
