/* threads.c - how many threads host kernels and kernel workspaces are sized for. */
#include "backend.h"

#ifdef _OPENMP
#include <omp.h>
#endif

int col_max_threads(void)
{
#ifdef _OPENMP
    int n = omp_get_max_threads();
    return n > 0 ? n : 1;
#else
    return 1;
#endif
}
