/* The simulator as a runtime (see sim_runtime.h): an adapter from the
 * runtime interface to sim_world, which does the work. */
#include "sim/sim_runtime.h"

#include <stdlib.h>

#include "backends/meta/meta_backend.h"
#include "core/runtime/runtime_impl.h"
#include "sim/world.h"

typedef struct sim_runtime {
    sim_config config;
    sim_world *world;
} sim_runtime;

static usp_status sim_runtime_run(void *ctx, usp_rank_main_fn fn, void *arg)
{
    return sim_world_run(((sim_runtime *)ctx)->world, fn, arg);
}

static int sim_runtime_world_size(const void *ctx) { return sim_world_size(((const sim_runtime *)ctx)->world); }
static const char *sim_runtime_report(const void *ctx) { return sim_world_report(((const sim_runtime *)ctx)->world); }

static const usp_trace_t *sim_runtime_trace(const void *ctx)
{
    return sim_world_trace(((const sim_runtime *)ctx)->world);
}

static usp_runtime_cluster sim_runtime_cluster(const void *ctx)
{
    const sim_topology *t = &((const sim_runtime *)ctx)->config.cost.topology;
    return (usp_runtime_cluster){.name = t->name, .nodes = t->nodes, .modelled = 1,
                                 .device_memory_bytes = t->gpu.memory_bytes};
}

static void sim_runtime_free(void *ctx)
{
    sim_runtime *rt = ctx;
    if (rt)
        sim_world_destroy(rt->world);
    free(rt);
}

static const usp_runtime_i sim_runtime_iface = {
    .api_version = USP_RUNTIME_API_VERSION,
    .name = "sim",
    .run = sim_runtime_run,
    .world_size = sim_runtime_world_size,
    .report = sim_runtime_report,
    .trace = sim_runtime_trace,
    .cluster = sim_runtime_cluster,
    .destroy = sim_runtime_free,
};

usp_status sim_runtime_create(const usp_runtime_options *o, usp_runtime_t **out)
{
    sim_runtime *rt;
    USP_CHECK(usp_calloc((void **)&rt, 1, sizeof *rt, "the simulator runtime"));
    sim_fault *faults = NULL;
    usp_status s = o->n_inject > 0 ? usp_calloc((void **)&faults, (size_t)o->n_inject, sizeof *faults, "the faults")
                                   : USP_OK;
    for (int i = 0; i < o->n_inject && s == USP_OK; i++)
        s = sim_fault_parse(o->inject[i], &faults[i]);
    rt->config = sim_config_default(o->world_size);
    if (o->shapes_only) /* docs/planning.md */
        rt->config.make_backend = usp_backend_meta_create;
    else if (o->sim_backend) /* docs/runtimes.md: e.g. every rank's kernels on the one GPU */
        rt->config.make_backend = o->sim_backend, rt->config.device_memory = o->sim_device_memory;
    rt->config.faults = faults, rt->config.n_faults = o->n_inject, rt->config.trace = o->trace;
    rt->config.record_schedule = o->record_schedule;
    if (s == USP_OK && (o->cluster || o->nodes))
        s = sim_topology_for_world(o->cluster, o->nodes, o->world_size, &rt->config.cost.topology);
    if (s == USP_OK)
        s = sim_gpu_use_attention_kernel_named(&rt->config.cost.topology.gpu, o->attention_kernel);
    if (s == USP_OK)
        s = sim_world_create(&rt->config, &rt->world); /* copies the faults */
    rt->config.faults = NULL;
    free(faults);
    if (s != USP_OK) {
        sim_runtime_free(rt);
        return s;
    }
    return usp_runtime_make(&sim_runtime_iface, rt, out);
}

const sim_world *sim_runtime_world(const usp_runtime_t *rt)
{
    return rt && rt->iface == &sim_runtime_iface ? ((const sim_runtime *)rt->context)->world : NULL;
}

const sim_topology *sim_runtime_topology(const usp_runtime_t *rt)
{
    return rt && rt->iface == &sim_runtime_iface ? &((const sim_runtime *)rt->context)->config.cost.topology : NULL;
}
