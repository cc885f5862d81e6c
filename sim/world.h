/* The simulated cluster: W ranks in one process.
 *
 * Each rank runs the same main function as a fiber; one runs at a time. At
 * every communication call the rank yields, and the scheduler resumes the
 * runnable rank with the smallest virtual time (ties by rank id), so the same
 * inputs give the same trace, byte for byte. Matched point-to-point transfers
 * share links while they move (sim/p2p_flows.h); the scheduler moves them
 * through their starts and finishes in time order, between the ranks' turns. Collectives are matched as NCCL
 * matches them; a mismatch is reported when the second rank arrives, and a
 * deadlock (no rank can run, some are blocked) when it happens: never by a
 * timeout. Either aborts the run: every blocked call returns
 * USP_ERR_COLLECTIVE (or USP_ERR_RANK_FAILED when the ranks wait for a rank
 * that died), so every rank unwinds and frees what it holds. */
#ifndef USP_SIM_WORLD_H
#define USP_SIM_WORLD_H

#include "core/safety/comm_report.h"
#include "core/runtime/rank.h"
#include "core/trace/trace.h"
#include "sim/cost_model.h"
#include "sim/inject.h"

typedef struct sim_world sim_world;

/* Makes the compute backend of one simulated rank. */
typedef usp_status (*sim_backend_factory)(usp_backend_t **out);

typedef struct sim_config {
    int world_size;
    sim_cost_model cost;              /* the cluster (topology and GPUs) ranks run on: rank r on GPU r */
    const usp_fault *faults;          /* copied; applied by the decorator that wraps every handle */
    int n_faults;
    sim_backend_factory make_backend; /* NULL: the cpu backend */
    size_t stack_bytes;               /* each rank's fiber stack; 0: 16 MiB */
    int trace;                        /* 1: record trace events */
    int record_schedule;              /* 1: log what each rank enqueues, for sim_explore (sim/explore.h) */
    /* Ranks in blocks of `mirrors` (0 or 1: none) that run the same program on the same clocks (the
     * Ulysses group of a ring position on shapes: rank % U is its Ulysses index): only each block's first
     * rank runs; the others post their splits, then stand in its calls and transfers (their transfers
     * still share the links) and report its figures. A call or a transfer that breaks the symmetry
     * aborts the run (sim_world_mirrors_failed). Shapes only (no numerics), no trace, no faults, no
     * schedule log. */
    int mirrors;
    /* 1: the ranks' buffers are device memory (a backend such as cuda, every rank's on one GPU): the
     * communicator cannot memcpy them, so each collective and transfer downloads its regions through the
     * ranks' backends, moves them on the host as it would otherwise, and uploads what was received
     * (sim/staged_move.c). Set by whoever sets make_backend; tests set it with cpu or lazy to check the path. */
    int device_memory;
} sim_config;

/* A config for `world_size` ranks: cpu backend, enough dgx-h100 nodes (BF16), trace on, no faults. */
sim_config sim_config_default(int world_size);

/* Creates the world (ranks are made by sim_world_run). */
usp_status sim_world_create(const sim_config *config, sim_world **out);

/* Runs fn(ctx, arg) on every rank until all have returned. Returns USP_OK, the
 * first failing rank's status (its message prefixed with the rank), or the
 * status of a deadlock / mismatch / crash report. One run per world. */
usp_status sim_world_run(sim_world *w, usp_rank_main_fn fn, void *arg);

/* The deadlock, mismatch or crash report of the run ("" when there was none). */
const char *sim_world_report(const sim_world *w);

/* The number of ranks. */
int sim_world_size(const sim_world *w);

/* The run's trace (NULL when tracing is off). */
const usp_trace_t *sim_world_trace(const sim_world *w);

/* The wait-for graph of the run's report (core/safety/comm_report.h: who waited for
 * whom when the run stalled, mismatched or lost a rank, snapshotted as the
 * report was made; viz draws it). Kind USP_REPORT_NONE and no ranks when there
 * was none; free it with usp_wait_graph_free. */
usp_status sim_world_wait_graph(const sim_world *w, usp_wait_graph *out);

/* The graph's former names, from when the simulator alone made reports: kept
 * so that code written against them builds unchanged. */
typedef usp_report_kind sim_report_kind;
#define SIM_REPORT_NONE USP_REPORT_NONE
#define SIM_REPORT_DEADLOCK USP_REPORT_DEADLOCK
#define SIM_REPORT_MISMATCH USP_REPORT_MISMATCH
#define SIM_REPORT_RANK_FAILURE USP_REPORT_RANK_FAILURE
typedef usp_rank_state sim_wait_state;
#define SIM_WAIT_RUNNABLE USP_RANK_RUNNABLE
#define SIM_WAIT_BLOCKED USP_RANK_BLOCKED
#define SIM_WAIT_EXITED USP_RANK_EXITED
#define SIM_WAIT_CRASHED USP_RANK_CRASHED
typedef usp_wait_rank sim_wait_rank;
typedef usp_wait_edge sim_wait_edge;
typedef usp_wait_graph sim_wait_graph;

/* usp_wait_graph_free under its former name. */
static inline void sim_wait_graph_free(usp_wait_graph *g) { usp_wait_graph_free(g); }

/* A rank's peak backend memory, virtual time at the end, and returned status. */
size_t sim_world_peak_bytes(const sim_world *w, int rank);
double sim_world_time(const sim_world *w, int rank);
usp_status sim_world_rank_status(const sim_world *w, int rank);

/* Where a rank's virtual time went: compute is the sum of its ops' roofline
 * times, wait the time from posting a call to the arrival of its last
 * participant (load imbalance, a peer still computing), comm the time from
 * there to the call's end (the transfer as the cost model prices it). A call
 * on a stream of its own runs beside the compute of the default stream
 * (sim/virtual_streams.h); the parts of its wait and comm that overlapped that
 * compute are hidden_wait_s and hidden_comm_s. So when the code keeps the
 * default stream busy while its other streams talk (the ring forward does),
 * end_s = compute_s + wait_s + comm_s - hidden_wait_s - hidden_comm_s, and
 * comm_s - hidden_comm_s is the exposed communication. */
typedef struct sim_rank_times {
    double compute_s, comm_s, wait_s, end_s;
    double hidden_comm_s, hidden_wait_s;
} sim_rank_times;

/* The times of `rank` so far (after sim_world_run: over the whole run). */
sim_rank_times sim_world_rank_times(const sim_world *w, int rank);

/* The simulator's own work on the collectives of a run, in units that tests can bound:
 * traffic entries priced by the cost model, pairs of posted calls compared for a
 * mismatch, ranks offered to the ready queue after a call. Each grows as n for a
 * collective over n ranks (n^2 for the all-to-alls' traffic), so a world of W ranks
 * costs O(W) a world collective rather than O(W^2). */
typedef struct sim_work {
    uint64_t traffic_entries, match_checks, ready_offers;
} sim_work;

sim_work sim_world_work(const sim_world *w);

/* 1 when the run aborted because its mirrors could not stand in (sim_config.mirrors): simulate every rank. */
int sim_world_mirrors_failed(const sim_world *w);

/* Bytes the communicator moved through host copies (sim_config.device_memory): 0 on the direct path. */
uint64_t sim_world_staged_bytes(const sim_world *w);

/* A rank's compute backend (its memory and FLOP counters), NULL before the run made it. */
const usp_backend_t *sim_world_backend(const sim_world *w, int rank);

/* Frees the world, every rank's backend and anything a rank left behind. */
void sim_world_destroy(sim_world *w);

#endif
