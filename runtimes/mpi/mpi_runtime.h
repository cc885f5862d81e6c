/* Open MPI as a runtime (core/runtime/runtime.h): one process per rank, started by a
 * launcher (mpirun -np W, or srun -n W), each running its rank's main
 * function on the cpu backend with the MPI communicator (mpi_comm.h),
 * wrapped in the decorator (--inject), watched by the watchdog (--timeout,
 * --dump-dir) and, with --check-collectives, fingerprint-checked
 * (mpi_check.h): the launch and safety net of mpi_launch.h, which the nccl
 * runtime shares. Rank 0's process prints the command's output; every
 * process prints its own errors, prefixed with its rank. Threads: each
 * process takes its share of the node's cores (cores / processes on the
 * node), so four processes on two cores do not fight. The registry of the
 * `usp` command names it "mpi". Without a launcher, `usp train --world W`
 * starts its W processes under mpirun itself (mpi_runtime_launch). */
#ifndef USP_MPI_RUNTIME_H
#define USP_MPI_RUNTIME_H

#include "runtimes/process/mpi_launch.h"
#include "core/runtime/runtime.h"

/* Initialises MPI and makes the runtime of this process. A world size that
 * is not the launcher's process count, or --meta, is USP_ERR_CONFIG; so is a
 * world of more than one rank in a process no launcher started (the message
 * gives the launch line). */
usp_status mpi_runtime_create(const usp_runtime_options *o, usp_runtime_t **out);

/* `--backend mpi --world W` (W > 1) in a process no launcher started: starts
 * the W processes, this command line (`argv`) under mpirun
 * (mpi_self_launch.h), and does not return. USP_OK when there is nothing to
 * start (one rank, under a launcher, --meta: mpi_runtime_create refuses it);
 * USP_ERR_CONFIG when they cannot be started. */
usp_status mpi_runtime_launch(const usp_runtime_options *o, char *const *argv);

#endif
