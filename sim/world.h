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

#include "core/rank.h"
#include "core/trace.h"
#include "sim/cost_model.h"
#include "sim/inject.h"

typedef struct sim_world sim_world;

/* Makes the compute backend of one simulated rank. */
typedef usp_status (*sim_backend_factory)(usp_backend_t **out);

typedef struct sim_config {
    int world_size;
    sim_cost_model cost;              /* the cluster (topology and GPUs) ranks run on: rank r on GPU r */
    const sim_fault *faults; /* copied */
    int n_faults;
    sim_backend_factory make_backend; /* NULL: the cpu backend */
    size_t stack_bytes;               /* each rank's fiber stack; 0: 16 MiB */
    int trace;                        /* 1: record trace events */
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

/* The wait-for graph of a report: who waited for whom when the run stalled,
 * mismatched or lost a rank, snapshotted as the report was made (viz draws it).
 * Edges point from a waiting rank to a rank it waits for: every member that
 * has not posted the waiter's collective, or the peer of an unmatched send or
 * receive. The highlighted path is the report's own wait chain (first wait of
 * each rank from the first blocked one): its cycle, or the rank it ends at
 * that will never come (exited or crashed: the missing participant). */
typedef enum sim_report_kind {
    SIM_REPORT_NONE,
    SIM_REPORT_DEADLOCK,
    SIM_REPORT_MISMATCH,
    SIM_REPORT_RANK_FAILURE,
} sim_report_kind;

typedef enum sim_wait_state {
    SIM_WAIT_RUNNABLE, /* not in a call (a mismatch stopped the run before it got there) */
    SIM_WAIT_BLOCKED,
    SIM_WAIT_EXITED,
    SIM_WAIT_CRASHED,
} sim_wait_state;

typedef struct sim_wait_rank {
    sim_wait_state state;
    int op;             /* usp_comm_kind it is blocked in or crashed at; -1 when none */
    char group[64];     /* that call's group ("" when none; USP_COMM_NAME_MAX) */
    uint64_t seq;       /* the call's index on the group */
    const char *file;   /* its call site (NULL when none) */
    int line;
    char call[112];     /* blocked: the op with its arguments, "all_to_all(count=2048, f32)" */
    uint64_t calls;     /* calls the rank issued */
    usp_status result;  /* exited: what its main function returned */
    double clock;       /* virtual seconds */
    int in_cycle;       /* on the highlighted wait cycle */
    int missing;        /* the chain ends here: a rank that exited or crashed while others wait for it */
    int mismatched;     /* one of the two ranks whose calls disagree */
} sim_wait_rank;

typedef struct sim_wait_edge {
    int from, to;       /* world ranks: `from` waits for `to` */
    int highlight;      /* on the report's wait chain: its cycle, or the way to the missing rank */
} sim_wait_edge;

typedef struct sim_wait_graph {
    sim_report_kind kind;
    char title[256];    /* the report's first line */
    char injected[512]; /* the faults that fired, one line each ("rank 2: skip at its call 1, ..."), or "" */
    int n_ranks;
    sim_wait_rank *ranks;  /* [n_ranks] */
    size_t n_edges;
    sim_wait_edge *edges;  /* [n_edges], by waiting rank, then waited-for rank */
} sim_wait_graph;

/* The wait-for graph of the run's report (kind SIM_REPORT_NONE and no ranks when
 * there was none), built into `out`; free it with sim_wait_graph_free. */
usp_status sim_world_wait_graph(const sim_world *w, sim_wait_graph *out);

/* Frees a graph from sim_world_wait_graph (its arrays; a zeroed graph is fine). */
void sim_wait_graph_free(sim_wait_graph *g);

/* A rank's peak backend memory, virtual time at the end, and returned status. */
size_t sim_world_peak_bytes(const sim_world *w, int rank);
double sim_world_time(const sim_world *w, int rank);
usp_status sim_world_rank_status(const sim_world *w, int rank);

/* Where a rank's virtual time went. Every call blocks in the simulator, so
 * end_s = compute_s + wait_s + comm_s: compute is the sum of its ops' roofline
 * times, wait the time from posting a call to the arrival of its last
 * participant (load imbalance, a peer still computing), comm the time from
 * there to the call's end (the transfer as the cost model prices it). */
typedef struct sim_rank_times {
    double compute_s, comm_s, wait_s, end_s;
} sim_rank_times;

/* The times of `rank` so far (after sim_world_run: over the whole run). */
sim_rank_times sim_world_rank_times(const sim_world *w, int rank);

/* A rank's compute backend (its memory and FLOP counters), NULL before the run made it. */
const usp_backend_t *sim_world_backend(const sim_world *w, int rank);

/* Frees the world, every rank's backend and anything a rank left behind. */
void sim_world_destroy(sim_world *w);

#endif
