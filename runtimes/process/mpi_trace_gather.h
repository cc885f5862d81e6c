/* --trace on a launched run (the mpi and nccl runtimes): every process records
 * its own rank's calls, ops and steps (mpi_launch_trace_start), and after the
 * run rank 0 gathers them into one trace of the whole world
 * (mpi_launch_trace_gather), which the command writes as one file with a
 * track per rank, as the simulator's. Times are each process's MPI_Wtime
 * since its start; MPI_Init returns on every rank at about the same moment,
 * so the tracks line up to within that (no clock synchronisation is done). */
#ifndef USP_MPI_TRACE_GATHER_H
#define USP_MPI_TRACE_GATHER_H

#include "runtimes/process/mpi_launch.h"

/* With o->trace: this rank's trace, which its communicators record into (before they are made). */
usp_status mpi_launch_trace_start(mpi_launch *l, const usp_runtime_options *o);

/* Times `backend`'s ops into the trace on `rank`'s clock (nothing without a trace). */
usp_status mpi_launch_trace_ops(mpi_launch *l, usp_backend_t *backend, const usp_rank_ctx *rank);

/* After the rank's main returned `s` (every rank calls it): when every rank succeeded, rank 0's trace
 * becomes the world's, the others' are sent to it; when one failed, no rank sends and rank 0 keeps
 * its own. Returns `s`, or the gather's error. Nothing without a trace. */
usp_status mpi_launch_trace_gather(mpi_launch *l, usp_backend_t *backend, usp_status s);

/* The runtime slot: the trace on rank 0 after the gather (NULL without --trace). */
const usp_trace_t *mpi_launch_trace(const void *ctx);

#endif
