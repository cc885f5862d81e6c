/* The launch and safety net shared by the mpi and nccl runtimes (see mpi_launch.h). */
#include "runtimes/process/mpi_launch.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtimes/process/mpi_clock.h"
#include "core/runtime/runtime_impl.h"
#include "core/runtime/launcher_env.h"

#define DEFAULT_TIMEOUT_S 600.0 /* PyTorch's NCCL watchdog default (TORCH_NCCL_... timeout, 10 minutes) */
#define RECORDED_CALLS 256

const char *mpi_error_text(int code, char *buf, size_t size)
{
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(code, text, &n) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", code);
    snprintf(buf, size, "%s", text);
    return buf;
}

usp_status mpi_launch_issue(mpi_comm_process *p, usp_comm_t *self, mpi_call_counts *n, usp_comm_op *op,
                            mpi_transport_fn run, void *handle)
{
    op->issued_on = self;
    if (mpi_launch_aborted(p)) /* the watchdog or a failure aborted the communicators: never touch them again */
        return usp_error(USP_ERR_RANK_FAILED, "%s on %s at %s:%d: not issued: the rank's communicators were "
                         "aborted", usp_comm_kind_name(op->kind), self->name, op->site.file, op->site.line);
    if (p->backend) /* the send buffer holds what the stream wrote */
        USP_CHECK(usp_backend_synchronize(p->backend, op->stream));
    if (p->decorator && p->recorder) { /* a fault fired on the way here: a hang's record names it */
        const char *injected = usp_comm_decorator_injected(p->decorator);
        if (strlen(injected) != p->injected_seen && usp_flight_recorder_set_injected(p->recorder, injected) == USP_OK)
            p->injected_seen = strlen(injected);
    }
    usp_comm_fingerprint fp = usp_comm_fingerprint_of(op, self->name, ++n->issued);
    op->t_post = MPI_Wtime() - p->t0;
    uint64_t entry = mpi_watchdog_enter(p->watchdog, &fp, op->t_post);
    int p2p = op->kind == USP_OP_SEND || op->kind == USP_OP_RECV || op->kind == USP_OP_SENDRECV;
    uint64_t collective = p2p ? n->collectives : ++n->collectives;
    usp_status s = p->check ? mpi_check_call(p->check, self, op, &fp, collective) : USP_OK;
    if (s == USP_OK)
        launch_fault_before_call(p->faults, op->kind); /* a stall never returns: posted, never started */
    op->t_start = MPI_Wtime() - p->t0;
    if (s == USP_OK && !p->asynchronous) /* MPI: started means handed to MPI, which is what happens now */
        mpi_watchdog_started(p->watchdog, op->t_start);
    if (s == USP_OK)
        s = run(handle, op, entry);
    op->t_end = MPI_Wtime() - p->t0;
    /* an asynchronous transport completes the entry when the device has run the call (a split blocks) */
    mpi_watchdog_leave(p->watchdog, op->t_end, s, !p->asynchronous || op->kind == USP_OP_SPLIT);
    return s;
}

usp_status mpi_launch_init_enter(mpi_comm_process *p, int op, usp_call_site site)
{
    usp_comm_fingerprint fp = {.op = op, .peer = -1, .recv_peer = -1, .root = 0, .seq = ++p->init_calls,
                               .site = site};
    snprintf(fp.group, sizeof fp.group, "%s", MPI_LAUNCH_INIT_GROUP);
    double t = MPI_Wtime() - p->t0;
    if (launch_fault_init_crash(p->faults)) { /* dies before its part: the others wait inside the step */
        usp_flight_recorder_crashed(p->recorder, &fp, 0, "crashed (injected) while the world communicator was "
                                    "made", t);
        return usp_error(USP_ERR_RANK_FAILED, "crashed (injected: init-crash) while the world communicator was made, "
                         "before %s #%llu on %s at %s:%d", usp_comm_kind_name((usp_comm_kind)op),
                         (unsigned long long)fp.seq, fp.group, site.file, site.line);
    }
    mpi_watchdog_enter(p->watchdog, &fp, t);
    mpi_watchdog_started(p->watchdog, t); /* a step of the world's making is under way once entered */
    return USP_OK;
}

void mpi_launch_init_leave(mpi_comm_process *p, usp_status s)
{
    mpi_watchdog_leave(p->watchdog, MPI_Wtime() - p->t0, s, 1);
}

int mpi_launch_aborted(const mpi_comm_process *p) { return atomic_load(&p->aborted); }

/* The launch's abort (the watchdog's hook, after the record is written): marks the communicators
 * aborted, so that no call touches them again, then aborts the backend's (NCCL's), once. */
static void launch_abort(void *ctx)
{
    mpi_comm_process *p = ctx;
    if (atomic_exchange(&p->aborted, 1))
        return;
    launch_fault_in_abort(p->faults); /* abort-hang: never returns; the watchdog's end timer ends the process */
    if (p->abort_backend)
        p->abort_backend(p->abort_ctx);
}

void mpi_launch_set_backend_abort(mpi_comm_process *p, mpi_watchdog_abort_fn abort, void *ctx)
{
    mpi_watchdog_set_abort(p->watchdog, NULL, NULL); /* waits for an abort under way */
    p->abort_backend = abort, p->abort_ctx = ctx;
    mpi_watchdog_set_abort(p->watchdog, launch_abort, p);
}

usp_status mpi_launch_split_members(MPI_Comm parent, int color, int key, MPI_Comm *child, int *rank, int *size,
                                    int **world)
{
    *world = NULL;
    int rc = MPI_Comm_split(parent, color == USP_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, child);
    if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        return usp_error(USP_ERR_RANK_FAILED, "MPI_Comm_split failed: %s", mpi_error_text(rc, text, sizeof text));
    }
    if (*child == MPI_COMM_NULL)
        return USP_OK;
    MPI_Comm_set_errhandler(*child, MPI_ERRORS_RETURN);
    MPI_Comm_rank(*child, rank);
    MPI_Comm_size(*child, size);
    int *members;
    usp_status s = usp_calloc((void **)&members, 2 * (size_t)*size, sizeof *members, "a split's members");
    if (s != USP_OK) {
        MPI_Comm_free(child);
        return s;
    }
    MPI_Group child_group, world_group;
    MPI_Comm_group(*child, &child_group);
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    for (int j = 0; j < *size; j++)
        members[*size + j] = j;
    MPI_Group_translate_ranks(child_group, *size, members + *size, world_group, members);
    MPI_Group_free(&child_group);
    MPI_Group_free(&world_group);
    *world = members; /* the first half; the second was scratch */
    return USP_OK;
}

static double launch_clock(const void *runtime) { return MPI_Wtime() - ((const mpi_launch *)runtime)->process.t0; }

/* usp_rank_gather over MPI_Gather on a communicator of its own: outside the program's calls. */
static usp_status launch_gather(const usp_rank_ctx *ctx, const void *mine, size_t bytes, void *all)
{
    const mpi_launch *l = ctx->gather_ctx;
    if (bytes > (size_t)0x7fffffff)
        return usp_error(USP_ERR_RUNTIME, "usp_rank_gather of %zu bytes a rank: MPI counts stop at 2 GiB", bytes);
    int rc = MPI_Gather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, 0, l->gather_comm);
    char text[MPI_MAX_ERROR_STRING];
    return rc == MPI_SUCCESS ? USP_OK
                             : usp_error(USP_ERR_RUNTIME, "usp_rank_gather: MPI_Gather failed: %s",
                                         mpi_error_text(rc, text, sizeof text));
}

usp_rank_ctx mpi_launch_rank_ctx(mpi_launch *l, usp_comm_t *world, usp_backend_t *backend)
{
    return (usp_rank_ctx){.rank = l->rank, .world_size = l->size, .world = world, .backend = backend,
                          .clock = launch_clock, .runtime = l, .gather = launch_gather, .gather_ctx = l,
                          .trace = l->process.trace};
}

usp_status mpi_launch_wrap_world(mpi_launch *l, usp_comm_t *inner, usp_comm_t **out)
{
    usp_status s = usp_comm_decorator_wrap(l->decorator, inner, out);
    if (s != USP_OK)
        usp_comm_destroy(inner);
    return s;
}

/* What the flight record says of a rank whose main function returned `s`;
 * a rank that failed writes it now (its peers may wait in a call with it). */
static void record_end(mpi_launch *l, usp_status s, const char *message)
{
    usp_comm_fingerprint at;
    uint64_t call = 0;
    double t = MPI_Wtime() - l->process.t0;
    int crashed = usp_comm_decorator_crashed(l->decorator, l->rank, &at, &call);
    int init_crash = s != USP_OK && launch_fault_init_crash(l->process.faults); /* recorded where it died */
    const char *error = s == USP_OK ? NULL : message;
    if (crashed)
        usp_flight_recorder_crashed(l->recorder, &at, call, error, t);
    else if (!init_crash)
        usp_flight_recorder_exited(l->recorder, s, error, t);
    usp_status rs = usp_flight_recorder_set_injected(l->recorder, usp_comm_decorator_injected(l->decorator));
    if (rs == USP_OK && s != USP_OK)
        rs = mpi_watchdog_dump(l->watchdog, crashed || init_crash ? "crash" : "failed");
    if (s == USP_OK) /* stopped cleanly, or never asked: no record */
        mpi_watchdog_forget(l->watchdog);
    if (rs != USP_OK)
        fprintf(stderr, "usp: rank %d: writing its flight record failed: %s\n", l->rank, usp_error_message());
}

usp_status mpi_launch_end_rank(mpi_launch *l, usp_status s, int had_world)
{
    int run_failed = s != USP_OK; /* not a fault that never fired, found after the run: no peer waits for that */
    if (s == USP_OK && had_world)
        s = usp_comm_decorator_check_fired(l->decorator);
    if (s == USP_OK && had_world)
        s = launch_faults_check_fired(l->process.faults);
    char message[USP_ERROR_MESSAGE_MAX]; /* kept: writing the record may set another */
    snprintf(message, sizeof message, "%s", s == USP_OK ? "" : usp_error_message());
    if (l->recorder) /* with or without a world: a rank that failed making it says so too */
        record_end(l, s, message);
    if (run_failed) /* the record is written: tell the others, then abort (bounded) what its peers may wait in */
        mpi_watchdog_abort(l->watchdog, s, message);
    if (s != USP_OK) /* the message names the rank: every process prints its own */
        s = strncmp(message, "rank ", 5) == 0 ? usp_error(s, "%s", message)
                                              : usp_error(s, "rank %d: %s", l->rank, message);
    l->result = s;
    return s;
}

int mpi_launch_world_size(const void *ctx) { return ((const mpi_launch *)ctx)->size; }
int mpi_launch_prints(const void *ctx) { return ((const mpi_launch *)ctx)->rank == 0; }
const char *mpi_launch_report(const void *ctx) { return mpi_check_report(((const mpi_launch *)ctx)->check); }

usp_runtime_cluster mpi_launch_cluster(const void *ctx)
{
    const mpi_launch *l = ctx;
    return (usp_runtime_cluster){.name = l->machine, .nodes = l->nodes, .modelled = 0};
}

void mpi_launch_free(void *ctx)
{
    if (!ctx)
        return;
    mpi_launch_stop(ctx);
    free(ctx);
}

void mpi_launch_stop(mpi_launch *l)
{
    mpi_watchdog_stop(l->watchdog);
    l->watchdog = NULL;
    mpi_check_destroy(l->check);
    l->check = NULL;
    usp_comm_decorator_destroy(l->decorator);
    l->decorator = NULL;
    usp_flight_recorder_destroy(l->recorder);
    l->recorder = NULL;
    usp_trace_destroy(l->process.trace);
    l->process.trace = NULL;
    launch_faults_destroy(l->process.faults);
    l->process.faults = NULL;
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
        if (l->gather_comm != MPI_COMM_NULL && !mpi_launch_aborted(&l->process)) /* aborted: left untouched */
            MPI_Comm_free(&l->gather_comm);
        /* A failed rank does not finalise: its peers may be inside a call with it, and a
         * process that exits unfinalised with an error makes the launcher end the job. */
        if (l->result == USP_OK)
            MPI_Finalize();
    }
}

/* Processes on this node and nodes in the job; each process gets cores / processes threads. */
static void share_the_node(mpi_launch *l)
{
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &l->local_size);
    MPI_Comm_rank(node, &l->local_rank);
    MPI_Comm_free(&node);
    int leader = l->local_rank == 0;
    MPI_Allreduce(&leader, &l->nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    long cores = sysconf(_SC_NPROCESSORS_ONLN) / l->local_size;
    if (cores > omp_get_num_procs()) /* a launcher that binds the process to fewer cores */
        cores = omp_get_num_procs();
    l->threads = cores > 0 ? (int)cores : 1;
    if (!getenv("OMP_NUM_THREADS")) /* a user's explicit choice stands */
        omp_set_num_threads(l->threads);
}

/* The faults of --inject: the safety net's own (launch_fault.h), and the decorator that injects the others. */
static usp_status make_decorator(mpi_launch *l, const usp_runtime_options *o)
{
    usp_fault *faults = NULL;
    int n = 0;
    usp_status s = o->n_inject > 0 ? usp_calloc((void **)&faults, (size_t)o->n_inject, sizeof *faults, "the faults")
                                   : USP_OK;
    for (int i = 0; i < o->n_inject && s == USP_OK; i++)
        if (!launch_fault_is_ours(o->inject[i]))
            s = usp_fault_parse(o->inject[i], &faults[n++]);
    if (s == USP_OK)
        s = launch_faults_create(o->inject, o->n_inject, l->rank, l->size, &l->process.faults);
    if (s == USP_OK)
        s = usp_comm_decorator_create(faults, n, l->size, &l->decorator);
    free(faults);
    return s;
}

/* The dump directory, and (rank 0, before the launch's first collective: no rank's watchdog runs yet)
 * no marker of an earlier run in it. */
static usp_status prepare_dump_dir(const mpi_launch *l)
{
    if (!l->dump_dir)
        return USP_OK;
    if (mkdir(l->dump_dir, 0777) != 0 && errno != EEXIST)
        return usp_error(USP_ERR_CONFIG, "--dump-dir %s: cannot create it (%s)", l->dump_dir, strerror(errno));
    char marker[4096];
    if (l->rank == 0 && snprintf(marker, sizeof marker, "%s/" MPI_WATCHDOG_MARKER, l->dump_dir) < (int)sizeof marker)
        unlink(marker);
    return USP_OK;
}

/* The flight recorder (which knows the "init" group and that this backend marks starts) and its watchdog. */
static usp_status start_watching(mpi_launch *l, const usp_runtime_options *o)
{
    USP_CHECK(usp_flight_recorder_create(l->rank, l->size, RECORDED_CALLS, &l->recorder));
    usp_flight_recorder_records_starts(l->recorder);
    int *all;
    USP_CHECK(usp_malloc((void **)&all, (size_t)l->size * sizeof *all, "the world's ranks"));
    for (int j = 0; j < l->size; j++)
        all[j] = j;
    usp_status s = usp_flight_recorder_add_group(l->recorder, MPI_LAUNCH_INIT_GROUP, l->size, all, l->rank);
    free(all);
    if (s == USP_OK)
        s = mpi_watchdog_start(l->rank, l->size, l->timeout_s, l->dump_dir, l->recorder, &l->watchdog);
    if (s == USP_OK)
        mpi_watchdog_set_stop(l->watchdog, o->stop);
    return s;
}

usp_status mpi_launch_start(mpi_launch *l, const usp_runtime_options *o, mpi_launch_names names)
{
    *l = (mpi_launch){.gather_comm = MPI_COMM_NULL, .dump_dir = o->dump_dir,
                      .timeout_s = o->timeout_s > 0 ? o->timeout_s : DEFAULT_TIMEOUT_S};
    if (o->timeout_s < 0)
        return usp_error(USP_ERR_CONFIG, "--timeout %g: give a number of seconds above 0", o->timeout_s);
    int launched = usp_launcher_processes(NULL);
    if (!launched && o->world_size > 1)
        return usp_error(USP_ERR_CONFIG, "--backend %s %s %d: this process was not started by a launcher, so "
                         "it would be a world of one; start %d processes: mpirun -np %d usp ... --backend %s%s, "
                         "or srun -n %d usp ...", names.backend, names.count_option, o->world_size, o->world_size,
                         o->world_size, names.backend, names.note, o->world_size);
    int initialized = 0, provided;
    MPI_Initialized(&initialized);
    if (!initialized && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return usp_error(USP_ERR_RUNTIME, "MPI_Init_thread failed");
    l->process.t0 = MPI_Wtime();
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); /* errors come back as codes, never an abort */
    MPI_Comm_rank(MPI_COMM_WORLD, &l->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &l->size);
    if (l->size != o->world_size)
        return usp_error(USP_ERR_CONFIG, "%s %d: the launcher started %d processes; give %s %d, or start "
                         "%d processes", names.count_option, o->world_size, l->size, names.count_option, l->size,
                         o->world_size);
    usp_status s = prepare_dump_dir(l); /* before any collective (MPI_Comm_dup is one): see prepare_dump_dir */
    if (s != USP_OK)
        return s;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &l->gather_comm) != MPI_SUCCESS)
        return usp_error(USP_ERR_RUNTIME, "MPI_Comm_dup for the runtime's gathers failed");
    share_the_node(l);
    s = mpi_clock_align(l->gather_comm, &l->process.t0); /* before anything is timed */
    if (s == USP_OK)
        s = make_decorator(l, o);
    if (s == USP_OK && o->check_collectives)
        s = mpi_check_create(MPI_COMM_WORLD, l->decorator, l->process.t0, &l->check);
    if (s == USP_OK)
        s = start_watching(l, o);
    mpi_comm_process *p = &l->process;
    p->watchdog = l->watchdog, p->check = l->check, p->recorder = l->recorder, p->decorator = l->decorator;
    if (s == USP_OK)
        mpi_launch_set_backend_abort(p, NULL, NULL); /* the launch's abort: MPI's communicators are only marked */
    return s;
}
