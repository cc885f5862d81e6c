/* The one-GPU runtime (see cuda_runtime.h). */
#include "backends/cuda/cuda_runtime.h"

#include <stdio.h>
#include <stdlib.h>

#include "backends/cuda/cuda_backend.h"
#include "core/runtime/runtime_single.h"

/* The GPU a process uses: its launcher's local rank, modulo the GPUs it sees. */
static int local_gpu(int gpus)
{
    const char *vars[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) >= 0)
            return atoi(v) % gpus;
    }
    return 0;
}

static int chosen_gpu; /* the runtime's one rank runs on it */
static char machine[160];

static usp_status make_backend(void *arg, usp_backend_t **out)
{
    (void)arg;
    return usp_backend_cuda_create(chosen_gpu, out);
}

usp_status cuda_runtime_find_gpus(const usp_runtime_options *o, int *gpus)
{
    if (o->shapes_only)
        return usp_error(USP_ERR_CONFIG, "--meta with --backend nccl: a run on shapes only is the simulator's "
                         "(drop --backend nccl; --topology dgx-h100 models H100s)");
    char why[256];
    *gpus = usp_cuda_device_count(why, sizeof why);
    if (*gpus == 0)
        return usp_error(USP_ERR_CONFIG, "--backend nccl --gpus %d: no NVIDIA GPU here (CUDA says: %s); train on a "
                         "GPU machine, or use --backend sim on this one", o->world_size, why);
    return USP_OK;
}

usp_status cuda_runtime_create(const usp_runtime_options *o, usp_runtime_t **out)
{
    int gpus = 0;
    USP_CHECK(cuda_runtime_find_gpus(o, &gpus));
    if (o->world_size != 1)
        return usp_error(USP_ERR_CONFIG, "--backend nccl --gpus %d: this build trains on one GPU (--gpus 1); more "
                         "GPUs need the nccl runtime, built when NCCL and Open MPI are found. Plan the %d-GPU run "
                         "with usp plan --world %d, or run its schedule on --backend sim", o->world_size, o->world_size,
                         o->world_size);
    if (o->n_inject > 0)
        return usp_error(USP_ERR_CONFIG, "--inject with --backend nccl on one GPU: a fault needs peers to fail "
                         "against; inject on --backend sim or mpi");
    chosen_gpu = local_gpu(gpus);
    char gpu[128];
    usp_cuda_device_describe(chosen_gpu, gpu, sizeof gpu);
    snprintf(machine, sizeof machine, "GPU %d: %s", chosen_gpu, gpu);
    USP_CHECK(usp_runtime_single_create(machine, make_backend, NULL, out));
    usp_status s = o->trace ? usp_runtime_single_record_trace(*out) : USP_OK;
    if (s != USP_OK)
        usp_runtime_destroy(*out), *out = NULL;
    return s;
}
