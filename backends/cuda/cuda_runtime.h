/* Training on one GPU: one process, one rank (core/runtime/runtime_single.h),
 * --gpus 1. `--backend nccl` is this runtime in a build without NCCL or Open
 * MPI, and the nccl runtime's path without a launcher (runtimes/nccl/). The GPU is the process's local rank
 * (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID) modulo the GPUs it
 * sees, else 0. */
#ifndef USP_CUDA_RUNTIME_H
#define USP_CUDA_RUNTIME_H

#include "core/runtime/runtime.h"

/* What every GPU runtime checks first: not --meta, and a GPU (*gpus: how many
 * this process sees); none is USP_ERR_CONFIG naming the missing device. */
usp_status cuda_runtime_find_gpus(const usp_runtime_options *o, int *gpus);

/* The GPU runtime for `o`; no GPU is USP_ERR_CONFIG naming the missing device. */
usp_status cuda_runtime_create(const usp_runtime_options *o, usp_runtime_t **out);

#endif
