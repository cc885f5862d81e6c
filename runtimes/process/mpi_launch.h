/* Room runtimes/process/: one process per rank under mpirun or srun, over MPI, and the
 * safety net around its communicator: the launch (this file), self-launch under mpirun
 * (mpi_self_launch.h), --check-collectives (mpi_check.h), the watchdog (mpi_watchdog.h),
 * the trace gather (mpi_trace_gather.h). runtimes/mpi/ and runtimes/nccl/ each use it;
 * neither uses the other. It may use: core/ (runtime/, safety/, comm/, trace/, base/ and
 * the op seam).
 *
 * One process per rank under mpirun or srun, and the safety net around its
 * communicator: what the mpi runtime (cpu backend, MPI communicator) and the
 * nccl runtime (cuda backend, NCCL communicator) share, written once.
 *
 * The launch: MPI_Init, rank and size from MPI, the node's processes
 * (MPI_Comm_split_type shared: the local rank picks a GPU, the node's cores
 * are shared out), usp_rank_gather over MPI_Gather, and the refusals (a world
 * of more than one rank without a launcher, a launcher that started another
 * count). The safety net: the comm decorator (--inject, core/safety/comm_decorator.h),
 * --check-collectives (mpi_check.h), the flight recorder and its watchdog
 * (mpi_watchdog.h, --timeout, --dump-dir, read back by `usp postmortem`),
 * and the one function every call of either communicator goes through,
 * mpi_launch_issue: fingerprint, record, watch, check, then the transport.
 * tests/mpi_test.sh and tests/test_mpi_comm.c exercise all of it under the
 * mpi runtime; the nccl runtime calls the same functions. */
#ifndef USP_MPI_LAUNCH_H
#define USP_MPI_LAUNCH_H

#include <mpi.h>

#include "runtimes/process/launch_fault.h"
#include "runtimes/process/mpi_check.h"
#include "runtimes/process/mpi_watchdog.h"
#include "core/safety/comm_decorator.h"
#include "core/comm/comm_impl.h"
#include "core/ops/ops.h"
#include "core/runtime/rank.h"
#include "core/runtime/runtime.h"

/* What every communicator handle of the process shares. */
typedef struct mpi_comm_process {
    usp_backend_t *backend;  /* synchronised before each call (NULL: not: the transport orders by streams) */
    int asynchronous;        /* 1: a call returns once enqueued, and its transport reports its completion
                                to the recorder (NCCL); 0: a call is complete when the transport returns (MPI) */
    mpi_watchdog *watchdog;  /* NULL: no watchdog */
    mpi_check *check;        /* NULL: no --check-collectives */
    usp_flight_recorder *recorder; /* learns every group the rank opens (NULL: none) */
    const usp_comm_decorator *decorator; /* its fired faults go into the record (NULL: none) */
    size_t injected_seen;    /* bytes of the decorator's fault lines the record has */
    double t0;               /* MPI_Wtime at the start: the clock of t_post, t_start, t_end */
    usp_trace_t *trace;      /* --trace: this rank's calls, ops and steps (NULL: none) */
    launch_faults *faults;   /* --inject's stall, abort-hang, init-crash of this rank (NULL: none) */
    atomic_int aborted;      /* 1 once the communicators were aborted: no call touches them after */
    mpi_watchdog_abort_fn abort_backend; /* what aborts the backend's communicators (NULL: nothing, MPI's) */
    void *abort_ctx;
    uint64_t init_calls;     /* the watched steps of making the world ("init" group) so far */
} mpi_comm_process;

/* The flight recorder's group of the steps that make the world communicator (every rank of the world). */
#define MPI_LAUNCH_INIT_GROUP "init"

/* A handle's count of the calls it issued, and of those, collectives (they
 * match among themselves: point-to-point calls between them may differ by rank). */
typedef struct mpi_call_counts {
    uint64_t issued, collectives;
} mpi_call_counts;

/* Moves `op` (on `handle`), once the safety net let it through; `entry` is
 * its flight recorder entry (0: none), for a transport that completes it later. */
typedef usp_status (*mpi_transport_fn)(void *handle, usp_comm_op *op, uint64_t entry);

/* One call on `self` (counted in *n): the decorator's fired faults into the
 * record, the fingerprint, the recorder and the watchdog, --check-collectives,
 * then run(handle, op, entry). The one path of every call of the mpi and
 * nccl communicators. */
usp_status mpi_launch_issue(mpi_comm_process *p, usp_comm_t *self, mpi_call_counts *n, usp_comm_op *op,
                            mpi_transport_fn run, void *handle);

/* One step of making the world communicator (MPI_Comm_dup; NCCL's id broadcast, ncclCommInitRank) as a
 * watched call of kind `op` on the group "init": posted, started (it is under way now) and timed by the
 * watchdog like any call. An init-crash fault of this rank fires here instead: the rank dies before its
 * part (its record says where), USP_ERR_RANK_FAILED. */
usp_status mpi_launch_init_enter(mpi_comm_process *p, int op, usp_call_site site);

/* The step entered last ended with `s`. */
void mpi_launch_init_leave(mpi_comm_process *p, usp_status s);

/* Sets what aborts the backend's communicators (NULL: nothing); the launch's abort, run by the watchdog
 * after the record is written or by a failed rank, sets `aborted` first, then calls it. Clearing waits
 * for an abort under way. */
void mpi_launch_set_backend_abort(mpi_comm_process *p, mpi_watchdog_abort_fn abort, void *ctx);

/* 1 once the communicators were aborted (nothing may touch them). */
int mpi_launch_aborted(const mpi_comm_process *p);

/* The split of `parent` by (color, key), MPI_Comm_split's order (NCCL's too):
 * *child (MPI_COMM_NULL for USP_SPLIT_NOCOLOR), this rank's index, the size,
 * and the members' world ranks (*world, malloc'd; NULL without a child). */
usp_status mpi_launch_split_members(MPI_Comm parent, int color, int key, MPI_Comm *child, int *rank, int *size,
                                    int **world);

typedef struct mpi_launch {
    int rank, size;                /* in MPI_COMM_WORLD */
    int nodes, local_rank, local_size, threads; /* the node's processes, this one's index among them */
    double timeout_s;
    const char *dump_dir;
    usp_comm_decorator *decorator;
    mpi_check *check;
    usp_flight_recorder *recorder;
    mpi_watchdog *watchdog;
    MPI_Comm gather_comm;
    usp_status result;             /* the rank's: a failed one does not finalise MPI */
    mpi_comm_process process;
    char machine[192];             /* what the times are for (usp_runtime_cluster's name) */
} mpi_launch;

/* How a runtime names itself in launch errors: "--backend mpi --world 4", "mpirun -np 4 usp ... --backend mpi". */
typedef struct mpi_launch_names {
    const char *backend;           /* "mpi", "nccl" */
    const char *count_option;      /* "--world", "--gpus" */
    const char *note;              /* appended to the mpirun line ("" for none) */
} mpi_launch_names;


/* Initialises MPI and the safety net of `o` (faults, checker, recorder,
 * watchdog). More than one rank without a launcher, or a launcher's count
 * other than o->world_size, is USP_ERR_CONFIG giving the launch line. On
 * failure call mpi_launch_stop too. */
usp_status mpi_launch_start(mpi_launch *l, const usp_runtime_options *o, mpi_launch_names names);

/* Wraps the world handle `inner` in the decorator (which then owns it; on failure `inner` is destroyed). */
usp_status mpi_launch_wrap_world(mpi_launch *l, usp_comm_t *inner, usp_comm_t **out);

/* The rank's context for usp_rank_main_fn: clock (seconds since the start), gather (MPI_Gather). */
usp_rank_ctx mpi_launch_rank_ctx(mpi_launch *l, usp_comm_t *world, usp_backend_t *backend);

/* The rank's main returned `s`: checks every fault fired, writes the flight
 * record of a failed or crashed rank, and returns the status with the rank
 * in its message (every process prints its own errors). */
usp_status mpi_launch_end_rank(mpi_launch *l, usp_status s, int had_world);

/* Stops the watchdog, frees the safety net and finalises MPI (unless the rank
 * failed: its peers may be in a call with it). */
void mpi_launch_stop(mpi_launch *l);

/* The slots of core/runtime/runtime_impl.h for a runtime whose context begins with its
 * mpi_launch (the mpi and nccl runtimes): the world's size, rank 0 prints,
 * the report of --check-collectives, the machine, and the end (mpi_launch_stop,
 * then free of the context). */
int mpi_launch_world_size(const void *ctx);
int mpi_launch_prints(const void *ctx);
const char *mpi_launch_report(const void *ctx);
usp_runtime_cluster mpi_launch_cluster(const void *ctx);
void mpi_launch_free(void *ctx);

/* "MPI_ERR_TRUNCATE: message truncated" for an MPI error code. */
const char *mpi_error_text(int code, char *buf, size_t size);

#endif
