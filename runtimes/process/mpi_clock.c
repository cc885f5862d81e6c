/* Clocks aligned to rank 0's (see mpi_clock.h). */
#include "runtimes/process/mpi_clock.h"

#define ROUND_TRIPS 8
#define TAG 0x75c1 /* on the launch's own communicator: no other message carries it */

/* Rank 0's clock minus this one's, from the fastest of ROUND_TRIPS exchanges with rank 0. */
static int measure_offset(MPI_Comm comm, double *offset)
{
    double best = -1;
    for (int k = 0; k < ROUND_TRIPS; k++) {
        double theirs, sent = MPI_Wtime(), now;
        if (MPI_Send(&sent, 1, MPI_DOUBLE, 0, TAG, comm) != MPI_SUCCESS ||
            MPI_Recv(&theirs, 1, MPI_DOUBLE, 0, TAG, comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return 0;
        now = MPI_Wtime();
        if (best < 0 || now - sent < best)
            best = now - sent, *offset = theirs - 0.5 * (sent + now);
    }
    return 1;
}

/* Rank 0: answers every other rank's ROUND_TRIPS pings with its clock, one rank after another. */
static int answer_pings(MPI_Comm comm, int size)
{
    for (int r = 1; r < size; r++)
        for (int k = 0; k < ROUND_TRIPS; k++) {
            double ping, now;
            if (MPI_Recv(&ping, 1, MPI_DOUBLE, r, TAG, comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                return 0;
            now = MPI_Wtime();
            if (MPI_Send(&now, 1, MPI_DOUBLE, r, TAG, comm) != MPI_SUCCESS)
                return 0;
        }
    return 1;
}

usp_status mpi_clock_align(MPI_Comm comm, double *t0)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    double offset = 0, origin = *t0;
    int ok = rank == 0 ? answer_pings(comm, size) : measure_offset(comm, &offset);
    if (!ok || MPI_Bcast(&origin, 1, MPI_DOUBLE, 0, comm) != MPI_SUCCESS)
        return usp_error(USP_ERR_RUNTIME, "aligning the processes' clocks with rank 0's: an MPI message failed");
    *t0 = origin - offset; /* rank 0's origin, read on this process's clock */
    return USP_OK;
}
