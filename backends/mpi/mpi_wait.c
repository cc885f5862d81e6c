/* Waiting for MPI requests (see mpi_wait.h). */
#include "backends/mpi/mpi_wait.h"

#include <time.h>

#define SPINS_BEFORE_NAPS 64
#define FIRST_NAP_NS 1000L
#define LONGEST_NAP_NS 1000000L

int mpi_wait_all(int nap, int n, MPI_Request *requests, MPI_Status *statuses)
{
    if (!nap)
        return MPI_Waitall(n, requests, statuses);
    long nap_ns = FIRST_NAP_NS;
    for (int spins = 0;; spins++) {
        int done = 0, rc = MPI_Testall(n, requests, &done, statuses);
        if (rc != MPI_SUCCESS || done)
            return rc;
        if (spins < SPINS_BEFORE_NAPS)
            continue;
        struct timespec t = {0, nap_ns};
        nanosleep(&t, NULL);
        if (nap_ns < LONGEST_NAP_NS)
            nap_ns *= 2;
    }
}
