/* Open MPI as a runtime (see mpi_runtime.h): the cpu backend and the MPI
 * communicator inside the launch and safety net of mpi_launch.h. */
#include "runtimes/mpi/mpi_runtime.h"

#include <stdio.h>
#include <stdlib.h>

#include "backends/cpu/cpu_backend.h"
#include "runtimes/mpi/mpi_comm.h"
#include "runtimes/process/mpi_launch.h"
#include "runtimes/process/mpi_self_launch.h"
#include "runtimes/process/mpi_trace_gather.h"
#include "core/runtime/runtime_impl.h"

typedef struct mpi_runtime {
    mpi_launch launch; /* first: the shared slots of mpi_launch.h take the context as one */
} mpi_runtime;

static usp_status mpi_runtime_run(void *ctx, usp_rank_main_fn fn, void *arg)
{
    mpi_runtime *rt = ctx;
    mpi_launch *l = &rt->launch;
    usp_backend_t *backend = NULL;
    usp_comm_t *world = NULL, *inner = NULL;
    usp_status s = usp_backend_cpu_create(&backend);
    l->process.backend = backend; /* MPI reads host memory: each call synchronises the stream first */
    if (s == USP_OK)
        s = mpi_comm_world(&l->process, MPI_COMM_WORLD, &inner);
    if (s == USP_OK)
        s = mpi_launch_wrap_world(l, inner, &world);
    if (s == USP_OK) {
        usp_rank_ctx rank = mpi_launch_rank_ctx(l, world, backend);
        s = mpi_launch_trace_ops(l, backend, &rank);
        if (s == USP_OK)
            s = fn(&rank, arg);
    }
    s = mpi_launch_trace_gather(l, backend, s);
    s = mpi_launch_end_rank(l, s, world != NULL);
    usp_comm_destroy(world);
    usp_backend_destroy(backend);
    return s;
}

static const usp_runtime_i mpi_runtime_iface = {
    .api_version = USP_RUNTIME_API_VERSION,
    .name = "mpi",
    .run = mpi_runtime_run,
    .world_size = mpi_launch_world_size,
    .report = mpi_launch_report,
    .trace = mpi_launch_trace,
    .prints = mpi_launch_prints,
    .cluster = mpi_launch_cluster,
    .destroy = mpi_launch_free,
};

usp_status mpi_runtime_create(const usp_runtime_options *o, usp_runtime_t **out)
{
    if (o->shapes_only)
        return usp_error(USP_ERR_CONFIG, "--meta with --backend mpi: a run on shapes only is the simulator's "
                         "(drop --backend mpi)");
    mpi_runtime *rt;
    USP_CHECK(usp_calloc((void **)&rt, 1, sizeof *rt, "the MPI runtime"));
    usp_status s = mpi_launch_start(&rt->launch, o, (mpi_launch_names){.backend = "mpi", .count_option = "--world",
        .note = " (add --oversubscribe beyond the cores, --allow-run-as-root as root)"});
    if (s != USP_OK) {
        rt->launch.result = s; /* not finalised: every process refuses alike, and exits */
        mpi_launch_free(rt);
        return s;
    }
    snprintf(rt->launch.machine, sizeof rt->launch.machine, "this machine (MPI)");
    s = mpi_launch_trace_start(&rt->launch, o);
    if (s != USP_OK) {
        mpi_launch_free(rt);
        return s;
    }
    return usp_runtime_make(&mpi_runtime_iface, rt, out);
}

usp_status mpi_runtime_launch(const usp_runtime_options *o, char *const *argv)
{
    if (o->shapes_only || !mpi_self_launch_needed(o->world_size))
        return USP_OK;
    return mpi_self_launch(&(mpi_self_launch_request){.processes = o->world_size, .backend = "mpi",
                                                      .count_option = "--world", .argv = argv});
}
