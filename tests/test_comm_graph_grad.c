/* test_comm_graph_grad.c - collectives with gradients (libcore/comm/comm_graph.h) under mpirun with 1, 2 and 4
 * processes (tests/test_comm_graph_grad.sh). */
#include <stdio.h>

#include <mpi.h>

#include "comm.h"
#include "comm_graph.h"
#include "plan.h"
#include "testlib.h"
#include "mpi_testutil.h"

int main(int argc, char **argv)
{
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    tl_mpi_check(true, "", "skeleton");
    MPI_Finalize();
    return rank == 0 ? tl_done() : 0;
}
