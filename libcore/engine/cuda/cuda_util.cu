/* cuda_util.cu - what the CUDA backend's files share: CUDA and cuBLAS errors
 * as col_status, and strided tensor descriptors for the kernels. It calls
 * nothing of the backend's own files. */
#include <string.h>

#include "cuda_internal.h"

col_status cu_status(cudaError_t e, col_err *err, const char *what)
{
    if (e == cudaSuccess)
        return COL_OK;
    col_status code = COL_EINTERNAL;
    switch (e) {
    case cudaErrorMemoryAllocation: code = COL_ENOMEM; break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice: code = COL_EUNSUPPORTED; break;
    default: break;
    }
    return col_err_set(err, code, "%s: CUDA error %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

col_status cu_blas_status(cublasStatus_t s, col_err *err, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return COL_OK;
    col_status code = s == CUBLAS_STATUS_ALLOC_FAILED ? COL_ENOMEM
                      : s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_ARCH_MISMATCH ? COL_EUNSUPPORTED
                                                                                              : COL_EINTERNAL;
    return col_err_set(err, code, "%s: cuBLAS error %s: %s", what, cublasLtGetStatusName(s), cublasLtGetStatusString(s));
}

col_status cu_launch(col_err *err, const char *what) { return cu_status(cudaGetLastError(), err, what); }

cu_td cu_td_of(const col_tensor *t)
{
    cu_td d;
    memset(&d, 0, sizeof d);
    /* drop size-1 dims, then merge d-1 into d when stride[d-1] == stride[d] * shape[d] */
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1)
            continue;
        if (d.ndim > 0 && d.stride[d.ndim - 1] == t->stride[i] * t->shape[i]) {
            d.shape[d.ndim - 1] *= t->shape[i];
            d.stride[d.ndim - 1] = t->stride[i];
        } else {
            d.shape[d.ndim] = t->shape[i];
            d.stride[d.ndim] = t->stride[i];
            d.ndim++;
        }
    }
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) { /* empty: nothing is addressed */
            d.ndim = 0;
            break;
        }
    d.contig = d.ndim == 0 || (d.ndim == 1 && d.stride[0] == 1);
    return d;
}
