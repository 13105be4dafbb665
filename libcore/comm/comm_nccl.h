/* comm_nccl.h - the NCCL transport of comm.h, on device memory (built when
 * configure finds CUDA and NCCL: libcore/comm/libcomm_nccl.a, linked with
 * -lnccl -lcudart).
 *
 * An NCCL communicator is made from an MPI one of the same processes: rank 0
 * makes NCCL's unique id and the MPI communicator broadcasts it, then every
 * rank joins (ncclCommInitRankConfig). Its operations take device pointers
 * and are queued on the given CUDA stream, in order with what else is queued
 * there: give the CUDA backend's (col_cuda_backend_stream in backend_cuda.h)
 * and a collective runs after the kernels that produce its input and before
 * those queued after it, without the host waiting. A request completes when
 * the stream has run the operation (an event recorded after it); waits are
 * bounded as with MPI, and a timeout or an NCCL error aborts the NCCL
 * communicator (ncclCommAbort) so nothing stays queued forever.
 *
 * The NCCL communicator keeps its own MPI communicator of the same ranks: for
 * splits (ncclCommSplit beside MPI_Comm_split with the same color and key, so
 * ranks agree) and to name a missing rank on a timeout.
 *
 * Differences from the MPI transport: NCCL sums bf16 and f16 in their own
 * precision at each step of its algorithm (not in f32 with one rounding);
 * rank-ordered sums (COL_ORDER_RANK) are COL_EUNSUPPORTED for now; send/recv
 * ignore the tag (messages between two ranks match in order), and a rank's
 * send to itself needs the matching receive started before it is waited for.
 * NCCL refuses two ranks on one GPU.
 */
#ifndef COL_COMM_NCCL_H
#define COL_COMM_NCCL_H

#include "comm.h"

/* A communicator of host's ranks (host: an MPI communicator) on CUDA device
 * `device` (col_comm_device(host, ndev) gives one per process on a host),
 * queuing on `stream` (a cudaStream_t on that device; NULL: the default
 * stream). Collective over host. No device or no NCCL support is
 * COL_EUNSUPPORTED with the reason. */
col_status col_comm_init_nccl(col_comm *host, int device, void *stream, col_comm **out, col_err *err);

#endif
