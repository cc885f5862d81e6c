/* The runtime registry (see runtime_registry.h). A runtime that needs what
 * this build lacks is listed without a constructor, so that asking for it
 * says what it needs instead of "unknown". */
#include "tools/runtime_registry.h"

#include <stdio.h>
#include <string.h>

#include "backends/registry/compute_backends.h"
#include "core/parallel/schedule.h"
#include "core/runtime/launcher_env.h"
#include "sim/sim_runtime.h"
#ifdef USP_HAVE_MPI
#include "runtimes/mpi/mpi_runtime.h"
#endif
#ifdef USP_HAVE_CUDA
#include "backends/cuda/cuda_runtime.h"
#endif
#ifdef USP_HAVE_NCCL
#include "runtimes/nccl/nccl_runtime.h"
#endif

typedef struct runtime_entry {
    const char *name;
    usp_status (*create)(const usp_runtime_options *o, usp_runtime_t **out); /* NULL: not in this build */
    const char *needs;                                                        /* what it needs at build time */
    /* starts a process per rank when no launcher started this one (NULL: the runtime needs none) */
    usp_status (*launch)(const usp_runtime_options *o, char *const *argv);
} runtime_entry;

static const runtime_entry runtimes[] = {
    {.name = "sim", .create = sim_runtime_create},
#if defined(USP_HAVE_NCCL) /* one process per GPU under a launcher; one GPU without */
    {.name = "nccl", .create = nccl_runtime_create, .launch = nccl_runtime_launch},
#elif defined(USP_HAVE_CUDA) /* one GPU: no NCCL or no Open MPI in this build */
    {.name = "nccl", .create = cuda_runtime_create},
#else
    {.name = "nccl", .needs = "the CUDA Toolkit (nvcc, cuBLAS)"},
#endif
#ifdef USP_HAVE_MPI
    {.name = "mpi", .create = mpi_runtime_create, .launch = mpi_runtime_launch},
#else
    {.name = "mpi", .needs = "Open MPI (apt-get install libopenmpi-dev openmpi-bin)"},
#endif
};

static const runtime_entry *find(const char *name)
{
    for (size_t i = 0; i < sizeof runtimes / sizeof *runtimes; i++)
        if (strcmp(runtimes[i].name, name) == 0)
            return &runtimes[i];
    return NULL;
}

void runtime_registry_describe(char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof runtimes / sizeof *runtimes && at < size; i++) {
        const runtime_entry *e = &runtimes[i];
        at += (size_t)snprintf(buf + at, size - at, "%s%s (%s%s)", i ? ", " : "", e->name,
                               e->create ? "in this build" : "needs ", e->create ? "" : e->needs);
    }
}

usp_status runtime_registry_check(const char *name)
{
    const runtime_entry *e = find(name);
    if (e && e->create)
        return USP_OK;
    char known[256];
    runtime_registry_describe(known, sizeof known);
    if (e)
        return usp_error(USP_ERR_CONFIG, "--backend %s: not in this build (the %s runtime needs %s at build time); "
                         "the runtimes are %s", name, name, e->needs, known);
    return usp_error(USP_ERR_CONFIG, "--backend %s: unknown runtime; the runtimes (where the ranks run) are %s", name,
                     known);
}

usp_status runtime_registry_create(const char *name, const usp_runtime_options *o, usp_runtime_t **out)
{
    USP_CHECK(runtime_registry_check(name));
    return find(name)->create(o, out);
}

usp_status runtime_registry_launch(const char *name, const usp_runtime_options *o, char *const *argv)
{
    USP_CHECK(runtime_registry_check(name));
    const runtime_entry *e = find(name);
    return e->launch ? e->launch(o, argv) : USP_OK;
}

usp_status runtime_registry_check_launcher(const char *name, const char *command)
{
    const char *var = NULL;
    int n = usp_launcher_processes(&var);
    if (strcmp(name, "sim") != 0 || n <= 1)
        return USP_OK;
    return usp_error(USP_ERR_CONFIG, "--backend sim under a launcher of %d processes (%s=%d): each process would "
                     "simulate every rank on its own; add --backend mpi to run one rank a process, or run usp %s "
                     "without the launcher to simulate them in one", n, var, n, command);
}

const char *runtime_registry_attention_help(int planned)
{
    static char help[2][512]; /* the command line is read on one thread */
    char schedules[256];
    usp_schedules_describe(schedules, sizeof schedules);
    snprintf(help[planned != 0], sizeof help[0], "the attention schedule%s: %s. sp (default) runs the mesh's, ulysses "
             "on U x 1, ring on 1 x R, hybrid on U x R%s (docs/attention.md)", planned ? " planned" : "", schedules,
             planned ? ", each split's with --sweep" : "; local: each rank attends to its own shard only");
    return help[planned != 0];
}

int runtime_registry_default_world(const char *name)
{
#ifdef USP_HAVE_MPI
    int launched = usp_launcher_processes(NULL);
    if ((strcmp(name, "mpi") == 0 || strcmp(name, "nccl") == 0) && launched > 0)
        return launched;
#endif
    return strcmp(name, "nccl") == 0 ? 1 : 4; /* GPUs: one unless a launcher started more */
}

usp_status runtime_registry_sim_compute(const char *runtime, const char *compute, int shapes_only,
                                        usp_runtime_options *o)
{
    if (!compute)
        return USP_OK;
    if (strcmp(runtime, "sim") != 0)
        return usp_error(USP_ERR_CONFIG, "--sim-compute %s with --backend %s: it picks the compute of the "
                         "simulator's ranks (--backend sim); %s runs its own", compute, runtime, runtime);
    if (shapes_only)
        return usp_error(USP_ERR_CONFIG, "--sim-compute %s with --meta: a run on shapes computes nothing (drop "
                         "one of them)", compute);
    if (strcmp(compute, "meta") == 0)
        return usp_error(USP_ERR_CONFIG, "--sim-compute meta: a run on shapes only is --meta");
    USP_CHECK(usp_compute_backend_check("--sim-compute", compute));
    if (o) { /* cpu is the simulator's default; a backend on a GPU has its buffers moved through host copies */
        const usp_compute_backend *b = usp_compute_backend_find(compute);
        o->sim_backend = strcmp(compute, "cpu") == 0 ? NULL : b->create;
        o->sim_device_memory = b->device_memory;
    }
    return USP_OK;
}
