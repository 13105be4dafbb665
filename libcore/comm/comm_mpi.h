/* comm_mpi.h - the MPI transport of comm.h, on host memory (always built).
 *
 * col_comm_init_mpi (comm.h) makes the communicator of the whole run; the
 * calls here are for programs that already hold an MPI communicator. Each
 * col_comm works on its own duplicate of the MPI communicator, with MPI's
 * error handler set to return errors (not abort the job), so its traffic
 * never meets the program's own and an MPI error becomes a col_status.
 *
 * How the operations map onto MPI: the non-blocking collectives
 * (MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast,
 * MPI_Ialltoall, MPI_Ibarrier) and MPI_Isend/MPI_Irecv. bf16 and f16 have no
 * MPI type: their reductions are staged, the elements converted to f32, MPI
 * reduces f32, and the result is rounded once to the dtype when the request
 * completes (twice the bytes on the wire, one rounding). With COL_ORDER_RANK
 * floating-point sums take two steps: an all-to-all gives each rank its share
 * of every rank's input (MPI_Ialltoallv), the rank adds the shares in rank
 * order (comm_util.c), and an all-gather (MPI_Iallgatherv) returns the sums
 * to everyone; reduce-scatter stops after the first step. That moves what a
 * ring algorithm moves and gets the same bits whatever MPI's algorithms are.
 *
 * MPI counts are ints: an operation whose buffers hold more than 2^31 - 1
 * elements is COL_EUNSUPPORTED (the caller splits it).
 */
#ifndef COL_COMM_MPI_H
#define COL_COMM_MPI_H

#include <mpi.h>

#include "comm.h"

/* A communicator of the processes of mc (MPI initialised by the program).
 * Collective over mc; waits at most the default timeout for the others. */
col_status col_comm_from_mpi(MPI_Comm mc, col_comm **out, col_err *err);
/* c's own MPI communicator (MPI_COMM_NULL when c is not an MPI one). */
MPI_Comm col_comm_mpi_handle(const col_comm *c);

#endif
