/* Open MPI as a runtime (see mpi_runtime.h). */
#include "backends/mpi/mpi_runtime.h"

#include <errno.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/mpi/mpi_check.h"
#include "backends/mpi/mpi_comm.h"
#include "backends/mpi/mpi_watchdog.h"
#include "core/comm_decorator.h"
#include "core/flight_recorder.h"
#include "core/runtime_impl.h"

#define DEFAULT_TIMEOUT_S 600.0 /* PyTorch's NCCL watchdog default (TORCH_NCCL_... timeout, 10 minutes) */
#define RECORDED_CALLS 256

typedef struct mpi_runtime {
    int rank, size, nodes, threads;
    double timeout_s;
    const char *dump_dir;
    int check_collectives;
    usp_comm_decorator *decorator;
    mpi_check *check;
    usp_flight_recorder *recorder;
    mpi_watchdog *watchdog;
    MPI_Comm gather_comm;
    usp_status result;
    mpi_comm_process process;
} mpi_runtime;

int mpi_launcher_world_size(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0)
            return atoi(v);
    }
    return 0;
}

static double mpi_clock(const void *runtime) { return MPI_Wtime() - ((const mpi_runtime *)runtime)->process.t0; }

/* usp_rank_gather over MPI_Gather on a communicator of its own: outside the program's calls. */
static usp_status mpi_gather(const usp_rank_ctx *ctx, const void *mine, size_t bytes, void *all)
{
    const mpi_runtime *rt = ctx->gather_ctx;
    if (bytes > (size_t)0x7fffffff)
        return usp_error(USP_ERR_RUNTIME, "usp_rank_gather of %zu bytes a rank: MPI counts stop at 2 GiB", bytes);
    int rc = MPI_Gather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, 0, rt->gather_comm);
    char text[MPI_MAX_ERROR_STRING];
    return rc == MPI_SUCCESS ? USP_OK
                             : usp_error(USP_ERR_RUNTIME, "usp_rank_gather: MPI_Gather failed: %s",
                                         mpi_error_text(rc, text, sizeof text));
}

/* The rank's world group: MPI's, wrapped by the decorator (which then owns it). */
static usp_status make_world(mpi_runtime *rt, usp_comm_t **out)
{
    usp_comm_t *inner;
    USP_CHECK(mpi_comm_world(&rt->process, MPI_COMM_WORLD, &inner));
    usp_status s = usp_comm_decorator_wrap(rt->decorator, inner, out);
    if (s != USP_OK)
        usp_comm_destroy(inner);
    return s;
}

/* What the flight record says of a rank whose main function returned `s`;
 * a rank that failed writes it now (its peers may wait in a call with it). */
static void record_end(mpi_runtime *rt, usp_status s, const char *message)
{
    usp_comm_fingerprint at;
    uint64_t call = 0;
    double t = MPI_Wtime() - rt->process.t0;
    int crashed = usp_comm_decorator_crashed(rt->decorator, rt->rank, &at, &call);
    const char *error = s == USP_OK ? NULL : message;
    if (crashed)
        usp_flight_recorder_crashed(rt->recorder, &at, call, error, t);
    else
        usp_flight_recorder_exited(rt->recorder, s, error, t);
    usp_status rs = usp_flight_recorder_set_injected(rt->recorder, usp_comm_decorator_injected(rt->decorator));
    if (rs == USP_OK && s != USP_OK)
        rs = mpi_watchdog_dump(rt->watchdog, crashed ? "crash" : "failed");
    if (rs != USP_OK)
        fprintf(stderr, "usp: rank %d: writing its flight record failed: %s\n", rt->rank, usp_error_message());
}

static usp_status mpi_runtime_run(void *ctx, usp_rank_main_fn fn, void *arg)
{
    mpi_runtime *rt = ctx;
    usp_backend_t *backend = NULL;
    usp_comm_t *world = NULL;
    usp_status s = usp_backend_cpu_create(&backend);
    rt->process = (mpi_comm_process){.backend = backend, .watchdog = rt->watchdog, .check = rt->check,
                                     .recorder = rt->recorder, .decorator = rt->decorator,
                                     .t0 = rt->process.t0};
    if (s == USP_OK)
        s = make_world(rt, &world);
    if (s == USP_OK) {
        usp_rank_ctx rank = {.rank = rt->rank, .world_size = rt->size, .world = world, .backend = backend,
                             .clock = mpi_clock, .runtime = rt, .gather = mpi_gather, .gather_ctx = rt};
        s = fn(&rank, arg);
        if (s == USP_OK)
            s = usp_comm_decorator_check_fired(rt->decorator);
    }
    char message[USP_ERROR_MESSAGE_MAX]; /* kept: writing the record may set another */
    snprintf(message, sizeof message, "%s", s == USP_OK ? "" : usp_error_message());
    if (world)
        record_end(rt, s, message);
    if (s != USP_OK) /* the message names the rank: every process prints its own */
        s = strncmp(message, "rank ", 5) == 0 ? usp_error(s, "%s", message)
                                              : usp_error(s, "rank %d: %s", rt->rank, message);
    usp_comm_destroy(world);
    usp_backend_destroy(backend);
    rt->result = s;
    return s;
}

static int mpi_runtime_world_size(const void *ctx) { return ((const mpi_runtime *)ctx)->size; }
static int mpi_runtime_prints(const void *ctx) { return ((const mpi_runtime *)ctx)->rank == 0; }
static const char *mpi_runtime_report(const void *ctx) { return mpi_check_report(((const mpi_runtime *)ctx)->check); }

static usp_runtime_cluster mpi_runtime_cluster(const void *ctx)
{
    return (usp_runtime_cluster){.name = "this machine (MPI)", .nodes = ((const mpi_runtime *)ctx)->nodes,
                                 .modelled = 0};
}

static void mpi_runtime_free(void *ctx)
{
    mpi_runtime *rt = ctx;
    if (!rt)
        return;
    mpi_watchdog_stop(rt->watchdog);
    mpi_check_destroy(rt->check);
    usp_comm_decorator_destroy(rt->decorator);
    usp_flight_recorder_destroy(rt->recorder);
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
        if (rt->gather_comm != MPI_COMM_NULL)
            MPI_Comm_free(&rt->gather_comm);
        /* A failed rank does not finalise: its peers may be inside a call with it, and a
         * process that exits unfinalised with an error makes the launcher end the job. */
        if (rt->result == USP_OK)
            MPI_Finalize();
    }
    free(rt);
}

static const usp_runtime_i mpi_runtime_iface = {
    .api_version = USP_RUNTIME_API_VERSION,
    .name = "mpi",
    .run = mpi_runtime_run,
    .world_size = mpi_runtime_world_size,
    .report = mpi_runtime_report,
    .prints = mpi_runtime_prints,
    .cluster = mpi_runtime_cluster,
    .destroy = mpi_runtime_free,
};

/* Processes on this node and nodes in the job; each process gets cores / processes threads. */
static void share_the_node(mpi_runtime *rt)
{
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int local = 1, local_rank = 0;
    MPI_Comm_size(node, &local);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_free(&node);
    int leader = local_rank == 0;
    MPI_Allreduce(&leader, &rt->nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    long cores = sysconf(_SC_NPROCESSORS_ONLN) / local;
    if (cores > omp_get_num_procs()) /* a launcher that binds the process to fewer cores */
        cores = omp_get_num_procs();
    rt->threads = cores > 0 ? (int)cores : 1;
    if (!getenv("OMP_NUM_THREADS")) /* a user's explicit choice stands */
        omp_set_num_threads(rt->threads);
}

static usp_status start(mpi_runtime *rt, const usp_runtime_options *o)
{
    int launched = mpi_launcher_world_size();
    if (!launched && o->world_size > 1)
        return usp_error(USP_ERR_CONFIG, "--backend mpi --world %d: this process was not started by a launcher, so "
                         "it would be a world of one; start %d processes: mpirun -np %d usp ... --backend mpi "
                         "(add --oversubscribe beyond the cores, --allow-run-as-root as root), or srun -n %d usp ...",
                         o->world_size, o->world_size, o->world_size, o->world_size);
    int initialized = 0, provided;
    MPI_Initialized(&initialized);
    if (!initialized && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return usp_error(USP_ERR_RUNTIME, "MPI_Init_thread failed");
    rt->process.t0 = MPI_Wtime();
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); /* errors come back as codes, never an abort */
    MPI_Comm_rank(MPI_COMM_WORLD, &rt->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &rt->size);
    if (rt->size != o->world_size)
        return usp_error(USP_ERR_CONFIG, "--world %d: the launcher started %d processes; give --world %d, or start "
                         "%d processes", o->world_size, rt->size, rt->size, o->world_size);
    if (MPI_Comm_dup(MPI_COMM_WORLD, &rt->gather_comm) != MPI_SUCCESS)
        return usp_error(USP_ERR_RUNTIME, "MPI_Comm_dup for the runtime's gathers failed");
    share_the_node(rt);
    if (rt->dump_dir && mkdir(rt->dump_dir, 0777) != 0 && errno != EEXIST)
        return usp_error(USP_ERR_CONFIG, "--dump-dir %s: cannot create it (%s)", rt->dump_dir, strerror(errno));
    usp_fault *faults = NULL;
    usp_status s = o->n_inject > 0 ? usp_calloc((void **)&faults, (size_t)o->n_inject, sizeof *faults, "the faults")
                                   : USP_OK;
    for (int i = 0; i < o->n_inject && s == USP_OK; i++)
        s = usp_fault_parse(o->inject[i], &faults[i]);
    if (s == USP_OK)
        s = usp_comm_decorator_create(faults, o->n_inject, rt->size, &rt->decorator);
    free(faults);
    if (s == USP_OK && o->check_collectives)
        s = mpi_check_create(MPI_COMM_WORLD, rt->decorator, rt->process.t0, &rt->check);
    if (s == USP_OK)
        s = usp_flight_recorder_create(rt->rank, rt->size, RECORDED_CALLS, &rt->recorder);
    if (s == USP_OK)
        s = mpi_watchdog_start(rt->rank, rt->timeout_s, rt->dump_dir, rt->recorder, &rt->watchdog);
    return s;
}

usp_status mpi_runtime_create(const usp_runtime_options *o, usp_runtime_t **out)
{
    if (o->shapes_only)
        return usp_error(USP_ERR_CONFIG, "--meta with --backend mpi: a run on shapes only is the simulator's "
                         "(drop --backend mpi)");
    if (o->timeout_s < 0)
        return usp_error(USP_ERR_CONFIG, "--timeout %g: give a number of seconds above 0", o->timeout_s);
    mpi_runtime *rt;
    USP_CHECK(usp_calloc((void **)&rt, 1, sizeof *rt, "the MPI runtime"));
    rt->gather_comm = MPI_COMM_NULL;
    rt->timeout_s = o->timeout_s > 0 ? o->timeout_s : DEFAULT_TIMEOUT_S;
    rt->dump_dir = o->dump_dir;
    rt->check_collectives = o->check_collectives;
    usp_status s = start(rt, o);
    if (s != USP_OK) {
        rt->result = s; /* not finalised: every process refuses alike, and exits */
        mpi_runtime_free(rt);
        return s;
    }
    return usp_runtime_make(&mpi_runtime_iface, rt, out);
}
