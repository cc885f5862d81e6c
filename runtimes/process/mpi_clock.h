/* One time origin for every process of a launch, so that a trace's or a
 * flight record's timestamps compare across ranks.
 *
 * Each process used to count from its own return from MPI_Init, which the
 * processes leave at different times: 2 processes on one machine were 320 us
 * apart, and `usp plan --compare` read that as a 320 us wait in every
 * collective and a negative transfer on the other rank. Clocks of different
 * nodes differ by more. So each rank measures its clock's offset from rank 0's
 * by ping-pong (Cristian's method: rank 0's reading against the midpoint of the
 * round trip, the fastest of a few round trips kept; the error is at most half
 * that round trip, microseconds within a node) and counts from the instant
 * rank 0 counts from. */
#ifndef USP_LAUNCH_MPI_CLOCK_H
#define USP_LAUNCH_MPI_CLOCK_H

#include <mpi.h>

#include "core/base/status.h"

/* Collective over `comm`: *t0 in, this process's MPI_Wtime of its own origin; out, this process's MPI_Wtime of
 * rank 0's origin. */
usp_status mpi_clock_align(MPI_Comm comm, double *t0);

#endif
