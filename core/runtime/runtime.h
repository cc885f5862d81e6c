/* Room core/runtime/: what one rank holds (rank.h), the runtime that runs a rank's main
 * function on every rank (this file; the slots: runtime_impl.h), and the one-rank runtime
 * (runtime_single.h). sim/, runtimes/mpi/ and runtimes/nccl/ fill it. It may use: comm/,
 * core/ (ops), base/, trace/.
 *
 * The runtime: what runs a rank's main function on every rank of a world.
 *
 * A command builds its run (usp_train_rank, usp_selftest_rank, ...) once and
 * hands it to a runtime; which runtime is a choice of the command line
 * (--backend), made through a registry of the runtimes this build has
 * (tools/runtime_registry.h), never by building one by hand. The simulator
 * (sim/sim_runtime.h) is one: every rank a fiber in this process on a
 * modelled cluster. The MPI and NCCL launchers will be others: one process per
 * rank, where only rank 0's process prints.
 *
 * A rank reports to its command in two ways, neither of which prints:
 * figures every rank has (peak memory, step times) go through
 * usp_rank_gather into a result on rank 0, and progress goes out as records
 * through a callback of the run (core/train/train.h), which the command formats. */
#ifndef USP_RUNTIME_H
#define USP_RUNTIME_H

#include <stdatomic.h>

#include "core/runtime/rank.h"
#include "core/trace/trace.h"

typedef struct usp_runtime usp_runtime_t;

/* What a command asks of a runtime. A runtime refuses (USP_ERR_CONFIG, naming
 * the option) what it cannot do, as the simulator refuses nothing here. */
typedef struct usp_runtime_options {
    int world_size;             /* ranks */
    int shapes_only;            /* run on the meta backend: shapes, memory and modelled time, no numbers */
    const char *cluster;        /* the cluster the times are for: a preset or a JSON file (NULL: dgx-h100) */
    int nodes;                  /* its nodes (0: as many as the world needs) */
    const char *attention_kernel; /* the modelled attention kernel: fa2, fa3, sdpa (NULL: the GPU's default) */
    const char *const *inject;  /* fault specs, KIND:rank=R[,op=OP][,call=K][,group=G] */
    int n_inject;
    int trace;                  /* record a trace of every call and op (usp_runtime_trace) */
    int record_schedule;        /* the simulator: log what each rank enqueues, for --explore (sim/explore.h) */
    /* The simulator's compute (usp train --sim-compute): each rank's backend (NULL: cpu; shapes_only takes meta),
     * and 1 when its buffers are device memory, which the communicator then moves through host copies. */
    usp_status (*sim_backend)(usp_backend_t **out);
    int sim_device_memory;
    /* Real backends (the simulator checks every call and never hangs, so it needs none of them): */
    int check_collectives;      /* exchange call fingerprints before each call: a mismatch is a report, not a hang */
    double timeout_s;           /* the watchdog: a call not complete after this many seconds ends the run (0: 600) */
    const char *dump_dir;       /* where the watchdog writes each rank's flight recorder (NULL: nowhere) */
    atomic_int *stop;         /* a run that stops cleanly on SIGINT or SIGTERM (usp_train_config.stop): a
                                    watchdog that catches them writes the signal here instead of ending the
                                    process, and ends it only if a call then stays blocked (NULL: it ends it) */
} usp_runtime_options;

/* The machine a run's times are for. */
typedef struct usp_runtime_cluster {
    const char *name;  /* "dgx-h100", or the file's name */
    int nodes;
    int modelled;      /* 1: times are the simulator's model of it; 0: measured on it */
    double device_memory_bytes; /* a rank's device memory in the model (GPU capacity); 0: not modelled */
} usp_runtime_cluster;

/* The runtime's name ("sim"). */
const char *usp_runtime_name(const usp_runtime_t *rt);

/* The number of ranks it runs. */
int usp_runtime_world_size(const usp_runtime_t *rt);

/* 1 when this process prints the command's output (progress, summary, files):
 * the simulator's one process, rank 0's under a launcher. */
int usp_runtime_prints(const usp_runtime_t *rt);

/* Runs fn(ctx, arg) on every rank until all have returned. Returns USP_OK, the
 * first failing rank's status (its message prefixed with the rank), or the
 * status of a deadlock / mismatch / crash report (usp_runtime_report). Once
 * per runtime. */
usp_status usp_runtime_run(usp_runtime_t *rt, usp_rank_main_fn fn, void *arg);

/* The deadlock, mismatch or crash report of the run ("" when there was none). */
const char *usp_runtime_report(const usp_runtime_t *rt);

/* The run's trace (NULL when it records none). */
const usp_trace_t *usp_runtime_trace(const usp_runtime_t *rt);

/* The machine the run's times are for. */
usp_runtime_cluster usp_runtime_cluster_of(const usp_runtime_t *rt);

/* Frees the runtime and everything its ranks left behind (NULL: nothing). */
void usp_runtime_destroy(usp_runtime_t *rt);

#endif
