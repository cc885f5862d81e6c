/* `--backend nccl` with NCCL and Open MPI in the build: one process per GPU.
 *
 * Under a launcher (mpirun -np N, srun -n N): MPI_Init, rank and size from
 * MPI, the GPU from the process's rank on its node (MPI_Comm_split_type
 * shared; nccl_translate_gpu), the ncclUniqueId broadcast over MPI and
 * ncclCommInitRank (nccl_comm.h), the cuda backend on that GPU; the launch
 * and safety net are the mpi runtime's own (runtimes/process/mpi_launch.h:
 * --inject, --check-collectives, --timeout, --dump-dir, usp postmortem).
 *
 * Without a launcher: one GPU (--gpus 1) is the one-rank path
 * (backends/cuda/cuda_runtime.h, core/runtime/runtime_single.h); `usp train --gpus N`
 * (N > 1) starts its N processes itself under mpirun (nccl_runtime_launch,
 * runtimes/process/mpi_self_launch.h): forked processes under the launcher, not
 * a thread per GPU, so that one node runs the path clusters run, safety net
 * included. No GPU is exit 2 naming the missing device, before anything
 * else; so are more GPUs than the machine has, before anything is started. */
#ifndef USP_NCCL_RUNTIME_H
#define USP_NCCL_RUNTIME_H

#include "core/runtime/runtime.h"

/* The GPU runtime for `o` (see above). */
usp_status nccl_runtime_create(const usp_runtime_options *o, usp_runtime_t **out);

/* `--backend nccl --gpus N` (N > 1) in a process no launcher started: checks
 * the machine has N GPUs, then starts the N processes, this command line
 * (`argv`) under mpirun, and does not return. USP_OK when there is nothing
 * to start (one GPU, under a launcher); USP_ERR_CONFIG naming the missing
 * device, the GPU count, or what else keeps it from starting them. */
usp_status nccl_runtime_launch(const usp_runtime_options *o, char *const *argv);

#endif
