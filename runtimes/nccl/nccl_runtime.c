/* One process per GPU under mpirun or srun (see nccl_runtime.h). */
#include "runtimes/nccl/nccl_runtime.h"

#include <stdio.h>
#include <stdlib.h>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_runtime.h"
#include "runtimes/process/mpi_launch.h"
#include "runtimes/process/mpi_self_launch.h"
#include "runtimes/process/mpi_trace_gather.h"
#include "runtimes/nccl/nccl_comm.h"
#include "runtimes/nccl/nccl_translate.h"
#include "core/runtime/runtime_impl.h"
#include "core/runtime/launcher_env.h"

typedef struct nccl_runtime {
    mpi_launch launch; /* first: the shared slots of mpi_launch.h take the context as one */
    int gpu;
} nccl_runtime;

static usp_status nccl_runtime_run(void *ctx, usp_rank_main_fn fn, void *arg)
{
    nccl_runtime *rt = ctx;
    mpi_launch *l = &rt->launch;
    usp_backend_t *backend = NULL;
    nccl_process *nccl = NULL;
    usp_comm_t *world = NULL, *inner = NULL;
    usp_status s = usp_backend_cuda_create(rt->gpu, &backend);
    if (s == USP_OK)
        s = nccl_process_create(&l->process, backend, rt->gpu, &nccl);
    if (s == USP_OK) { /* the watchdog now also watches the GPU's side of each call, and aborts NCCL's */
        mpi_watchdog_set_poll(l->watchdog, nccl_process_poll, nccl);
        mpi_launch_set_backend_abort(&l->process, nccl_process_abort, nccl);
    }
    if (s == USP_OK)
        s = nccl_comm_world(nccl, MPI_COMM_WORLD, &inner);
    if (s == USP_OK)
        s = mpi_launch_wrap_world(l, inner, &world);
    if (s == USP_OK) {
        usp_rank_ctx rank = mpi_launch_rank_ctx(l, world, backend);
        s = mpi_launch_trace_ops(l, backend, &rank); /* CUDA events around each op (the event_elapsed slot) */
        if (s == USP_OK)
            s = fn(&rank, arg);
        if (s == USP_OK) /* what the rank left enqueued has run, and NCCL's errors are known */
            s = nccl_process_finish(nccl);
    }
    s = mpi_launch_trace_gather(l, backend, s); /* every rank takes part, failed or not */
    /* a failed rank's record first, then the abort (peers may never come to what it left enqueued) */
    s = mpi_launch_end_rank(l, s, world != NULL);
    mpi_watchdog_set_poll(l->watchdog, NULL, NULL);
    mpi_launch_set_backend_abort(&l->process, NULL, NULL); /* waits for an abort under way */
    usp_comm_destroy(world);
    nccl_process_destroy(nccl);
    usp_backend_destroy(backend);
    return s;
}

static const usp_runtime_i nccl_runtime_iface = {
    .api_version = USP_RUNTIME_API_VERSION,
    .name = "nccl",
    .run = nccl_runtime_run,
    .world_size = mpi_launch_world_size,
    .report = mpi_launch_report,
    .trace = mpi_launch_trace,
    .prints = mpi_launch_prints,
    .cluster = mpi_launch_cluster,
    .destroy = mpi_launch_free,
};

usp_status nccl_runtime_create(const usp_runtime_options *o, usp_runtime_t **out)
{
    int gpus = 0;
    USP_CHECK(cuda_runtime_find_gpus(o, &gpus));
    if (!usp_launcher_processes(NULL)) {
        if (o->world_size == 1) /* one GPU, no launcher: the one-rank runtime */
            return cuda_runtime_create(o, out);
        return usp_error(USP_ERR_CONFIG, "--backend nccl --gpus %d: one process per GPU, started by a launcher; "
                         "start %d: mpirun -np %d usp ... --backend nccl (one node; --map-by ppr:G:node on G-GPU "
                         "nodes), or srun -n %d --gpus-per-task=1 usp ... --backend nccl (Slurm)", o->world_size,
                         o->world_size, o->world_size, o->world_size);
    }
    nccl_runtime *rt;
    USP_CHECK(usp_calloc((void **)&rt, 1, sizeof *rt, "the NCCL runtime"));
    usp_status s = mpi_launch_start(&rt->launch, o, (mpi_launch_names){.backend = "nccl", .count_option = "--gpus",
                                                                         .note = ""});
    if (s == USP_OK)
        s = nccl_translate_gpu(rt->launch.local_rank, rt->launch.local_size, gpus, &rt->gpu);
    if (s != USP_OK) {
        rt->launch.result = s; /* not finalised: every process refuses alike, and exits */
        mpi_launch_free(rt);
        return s;
    }
    char gpu[128];
    usp_cuda_device_describe(rt->gpu, gpu, sizeof gpu);
    snprintf(rt->launch.machine, sizeof rt->launch.machine, "%d GPUs (NCCL; rank 0 on %s)", rt->launch.size, gpu);
    s = mpi_launch_trace_start(&rt->launch, o);
    if (s != USP_OK) {
        mpi_launch_free(rt);
        return s;
    }
    return usp_runtime_make(&nccl_runtime_iface, rt, out);
}

usp_status nccl_runtime_launch(const usp_runtime_options *o, char *const *argv)
{
    if (!mpi_self_launch_needed(o->world_size))
        return USP_OK;
    int gpus = 0; /* before anything is started: no GPU, or too few, is one message, not one per process */
    USP_CHECK(cuda_runtime_find_gpus(o, &gpus));
    if (o->world_size > gpus)
        return usp_error(USP_ERR_CONFIG, "--backend nccl --gpus %d: this machine has %d GPU%s (as CUDA sees them: "
                         "CUDA_VISIBLE_DEVICES may hide some), and each rank is a process on a GPU of its own; give "
                         "--gpus %d or fewer here, or spread the %d ranks over nodes: mpirun -np %d -H "
                         "a:%d,b:%d,... usp ... --backend nccl, or srun -n %d --gpus-per-task=1 usp ... --backend nccl",
                         o->world_size, gpus, gpus == 1 ? "" : "s", gpus, o->world_size, o->world_size, gpus, gpus,
                         o->world_size);
    return mpi_self_launch(&(mpi_self_launch_request){.processes = o->world_size, .backend = "nccl",
                                                      .count_option = "--gpus", .argv = argv});
}
