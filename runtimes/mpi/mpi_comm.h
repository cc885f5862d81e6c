/* The communicator over MPI (core/comm/comm_impl.h): one process per rank, each
 * call one MPI call on the group's MPI communicator.
 *
 * Blocking, and so stricter than core/comm/comm.h asks: a call first synchronises
 * the rank's backend (its send buffer then holds what the stream wrote), and
 * returns when the data has arrived. On the cpu backend, whose ops are done
 * when they return, nothing is lost by it; a backend with real streams
 * (CUDA) takes the NCCL communicator instead.
 *
 * Reductions are not MPI's: MPI_Allreduce may sum in any order, and the
 * simulator sums in rank order. all_reduce and reduce_scatter move the
 * operands with MPI_Alltoall(v) and sum them here in rank order
 * (core/comm/reduce.h), so an MPI run gives the simulator's bits: a reduce-scatter
 * then an all-gather, as NCCL's ring does, with the same bytes on the wire.
 *
 * Every call passes through mpi_launch_issue (mpi_launch.h, shared with the
 * nccl communicator): the process's watchdog (mpi_watchdog.h), which
 * ends a call that does not complete in time, and, with --check-collectives,
 * through a fingerprint exchange (mpi_check.h) that stops a mismatched call
 * before MPI can hang or corrupt. */
#ifndef USP_MPI_COMM_H
#define USP_MPI_COMM_H

#include <mpi.h>

#include "runtimes/process/mpi_launch.h"
#include "core/comm/comm_impl.h"

/* The world group ("world") over `comm` (which the handle duplicates). */
usp_status mpi_comm_world(mpi_comm_process *p, MPI_Comm comm, usp_comm_t **out);


#endif
