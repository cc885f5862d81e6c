/* How a rank's process waits for its MPI requests. With a core each, MPI's
 * own busy wait answers fastest. With more processes than cores on a node
 * (four ranks on a two-core laptop, CI), a busy wait takes the core that the
 * rank it waits for needs to get there (measured: the mpi run's step went from
 * 0.7x to 1.4x the simulator's when the machine was loaded), so the process
 * naps between tests instead, from 1 us doubling to 1 ms. */
#ifndef USP_MPI_WAIT_H
#define USP_MPI_WAIT_H

#include <mpi.h>

/* MPI_Waitall of `n` requests, napping between MPI_Testall calls when `nap` is set. */
int mpi_wait_all(int nap, int n, MPI_Request *requests, MPI_Status *statuses);

#endif
