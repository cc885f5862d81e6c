/* The one-rank runtime (see runtime_single.h). */
#include "core/runtime/runtime_single.h"

#include <stdlib.h>
#include <time.h>

#include "core/comm/comm_single.h"
#include "core/runtime/runtime_impl.h"

typedef struct single_runtime {
    const char *machine;
    usp_backend_maker make;
    void *arg;
    struct timespec t0;
    usp_trace_t *trace;   /* usp_runtime_single_record_trace (NULL: none) */
} single_runtime;

/* Seconds since the run began. Ops may still be queued: a caller that times
 * device work synchronises first (the training loop's gradient norm does). */
static double wall_clock(const void *runtime)
{
    const single_runtime *rt = runtime;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - rt->t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - rt->t0.tv_nsec);
}

static usp_status single_run(void *ctx, usp_rank_main_fn fn, void *arg)
{
    single_runtime *rt = ctx;
    usp_backend_t *backend = NULL;
    usp_comm_t *world = NULL;
    usp_status s = rt->make(rt->arg, &backend);
    if (s == USP_OK)
        s = usp_comm_single_world(backend, &world);
    if (s == USP_OK) {
        clock_gettime(CLOCK_MONOTONIC, &rt->t0);
        usp_rank_ctx rank = {.rank = 0, .world_size = 1, .world = world, .backend = backend, .clock = wall_clock,
                             .runtime = rt, .trace = rt->trace};
        if (rt->trace)
            s = usp_backend_time_ops(backend, rt->trace, 0, wall_clock, rt);
        if (s == USP_OK)
            s = fn(&rank, arg);
        if (s == USP_OK) /* what the rank left queued has run, and its errors are known */
            s = usp_backend_synchronize(backend, NULL);
        if (s == USP_OK && rt->trace) /* device-timed ops: their events are read now */
            s = usp_backend_flush_op_times(backend);
    }
    usp_comm_destroy(world);
    usp_backend_destroy(backend);
    return s;
}

static int single_world_size(const void *ctx)
{
    (void)ctx;
    return 1;
}

static usp_runtime_cluster single_cluster(const void *ctx)
{
    const single_runtime *rt = ctx;
    return (usp_runtime_cluster){.name = rt->machine, .nodes = 1, .modelled = 0};
}

static const usp_trace_t *single_trace(const void *ctx) { return ((const single_runtime *)ctx)->trace; }

static void single_destroy(void *ctx)
{
    single_runtime *rt = ctx;
    usp_trace_destroy(rt->trace);
    free(rt);
}

static const usp_runtime_i single_runtime_iface = {
    .api_version = USP_RUNTIME_API_VERSION,
    .name = "single",
    .run = single_run,
    .world_size = single_world_size,
    .cluster = single_cluster,
    .trace = single_trace,
    .destroy = single_destroy,
};

usp_status usp_runtime_single_create(const char *machine, usp_backend_maker make, void *arg, usp_runtime_t **out)
{
    single_runtime *rt;
    USP_CHECK(usp_calloc((void **)&rt, 1, sizeof *rt, "a one-rank runtime"));
    *rt = (single_runtime){.machine = machine, .make = make, .arg = arg};
    return usp_runtime_make(&single_runtime_iface, rt, out);
}

usp_status usp_runtime_single_record_trace(usp_runtime_t *rt)
{
    single_runtime *single = rt->context;
    USP_ASSERT(rt->iface == &single_runtime_iface, "usp_runtime_single_record_trace of a %s runtime",
               rt->iface->name);
    return single->trace ? USP_OK : usp_trace_create(&single->trace);
}
