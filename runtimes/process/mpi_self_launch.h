/* One node without a launcher: `usp train --backend mpi --world N` or
 * `--backend nccl --gpus N` (N > 1) typed with no mpirun or srun in front.
 * usp starts its N processes itself by re-executing as
 *
 *     mpirun -np N [--oversubscribe] /proc/self/exe ARGS...
 *
 * (execv: the job's exit code is mpirun's, which is that of the first rank
 * to fail). Forked processes under the launcher the build already needs,
 * rather than a thread per GPU, so that a one-node run goes through the very
 * launch and safety net a cluster run does (mpi_launch.h: --inject,
 * --check-collectives, the watchdog, flight records).
 *
 * The mpirun: $USP_MPIRUN when set (the user's choice, and how the tests
 * take mpirun away), else `mpirun` on PATH, else the one CMake found when usp
 * was built. --oversubscribe only when N exceeds the node's slots (Open MPI
 * counts the cores this process may run on). The children inherit the
 * marker USP_SELF_LAUNCHED=1: a process that has it and yet sees no launcher
 * refuses instead of launching again (the recursion guard). As root, Open
 * MPI's own consent (OMPI_ALLOW_RUN_AS_ROOT=1, OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
 * must already be in the environment: usp never gives it for the user. */
#ifndef USP_MPI_SELF_LAUNCH_H
#define USP_MPI_SELF_LAUNCH_H

#include <stddef.h>

#include "core/base/status.h"

#define MPI_SELF_LAUNCH_MARKER "USP_SELF_LAUNCHED" /* set to 1 in the launched processes */
#define MPI_SELF_LAUNCH_MPIRUN "USP_MPIRUN"        /* the mpirun to use, over PATH and the build's */

/* What is launched, and how the messages name it. */
typedef struct mpi_self_launch_request {
    int processes;            /* -np: the world size */
    const char *backend;      /* "mpi", "nccl" */
    const char *count_option; /* "--world", "--gpus" */
    char *const *argv;        /* this process's command line; argv[0] is replaced by the running executable */
} mpi_self_launch_request;

/* 1 when a world of `processes` ranks must be started here: more than one
 * rank and no launcher in this process's environment. */
int mpi_self_launch_needed(int processes);

/* The mpirun to start the processes with, into path: $USP_MPIRUN when set,
 * else mpirun on PATH, else the build's. None executable is USP_ERR_CONFIG
 * naming what was tried, the package to install and the lines to type. */
usp_status mpi_self_launch_find_mpirun(const mpi_self_launch_request *r, char *path, size_t size);

/* Open MPI's default slots on this node: the physical cores this process
 * may run on (hardware threads of one core count once); at least 1. */
int mpi_self_launch_slots(void);

/* {mpirun, "-np", "N", ["--oversubscribe",] exe, argv[1], ..., NULL} into
 * *out (one malloc'd block: free(*out) frees it all). */
usp_status mpi_self_launch_command(const char *mpirun, const char *exe, int processes, int oversubscribe,
                                   char *const *argv, char ***out);

/* `args` as one shell line, each word quoted where a shell would split or
 * expand it, into buf (cut at size). */
void mpi_self_launch_quote(char *const *args, char *buf, size_t size);

/* Starts r->processes copies of this command under mpirun, after one line on
 * stderr ("usp: launching 4 processes: mpirun -np 4 ..."). Does not return
 * when it launched; returns USP_ERR_CONFIG when it cannot: the recursion
 * guard, no mpirun, root without Open MPI's consent. */
usp_status mpi_self_launch(const mpi_self_launch_request *r);

#endif
