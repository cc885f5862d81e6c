/* Open MPI as a runtime (core/runtime.h): one process per rank, started by a
 * launcher (mpirun -np W, or srun -n W), each running its rank's main
 * function on the cpu backend with the MPI communicator (mpi_comm.h),
 * wrapped in the decorator (--inject), watched by the watchdog (--timeout,
 * --dump-dir) and, with --check-collectives, fingerprint-checked
 * (mpi_check.h): the launch and safety net of mpi_launch.h, which the nccl
 * runtime shares. Rank 0's process prints the command's output; every
 * process prints its own errors, prefixed with its rank. Threads: each
 * process takes its share of the node's cores (cores / processes on the
 * node), so four processes on two cores do not fight. The registry of the
 * `usp` command names it "mpi". */
#ifndef USP_MPI_RUNTIME_H
#define USP_MPI_RUNTIME_H

#include "backends/mpi/mpi_launch.h" /* mpi_launcher_world_size */
#include "core/runtime.h"

/* Initialises MPI and makes the runtime of this process. A world size that
 * is not the launcher's process count, or --meta, is USP_ERR_CONFIG; so is a
 * world of more than one rank in a process no launcher started (the message
 * gives the launch line). */
usp_status mpi_runtime_create(const usp_runtime_options *o, usp_runtime_t **out);

#endif
