/* `--backend nccl` with NCCL and Open MPI in the build: one process per GPU.
 *
 * Under a launcher (mpirun -np N, srun -n N): MPI_Init, rank and size from
 * MPI, the GPU from the process's rank on its node (MPI_Comm_split_type
 * shared; nccl_plan_gpu), the ncclUniqueId broadcast over MPI and
 * ncclCommInitRank (nccl_comm.h), the cuda backend on that GPU; the launch
 * and safety net are the mpi runtime's own (backends/mpi/mpi_launch.h:
 * --inject, --check-collectives, --timeout, --dump-dir, usp postmortem).
 *
 * Without a launcher: one GPU (--gpus 1) is today's one-rank path
 * (backends/cuda/cuda_runtime.h, core/runtime_single.h); --gpus N > 1 is
 * exit 2 with the mpirun and srun lines (no processes are forked and no
 * thread per GPU is started: a launcher is what clusters use, and one path
 * is the one tested). No GPU is exit 2 naming the missing device, before
 * anything else. */
#ifndef USP_NCCL_RUNTIME_H
#define USP_NCCL_RUNTIME_H

#include "core/runtime.h"

/* The GPU runtime for `o` (see above). */
usp_status nccl_runtime_create(const usp_runtime_options *o, usp_runtime_t **out);

#endif
