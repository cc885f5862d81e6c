/* The simulated cluster: W ranks in one process.
 *
 * Each rank runs the same main function as a fiber; one runs at a time. At
 * every communication call the rank yields, and the scheduler resumes the
 * runnable rank with the smallest virtual time (ties by rank id), so the same
 * inputs give the same trace, byte for byte. Collectives are matched as NCCL
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
    sim_cost_model cost;
    const sim_fault *faults; /* copied */
    int n_faults;
    sim_backend_factory make_backend; /* NULL: the cpu backend */
    size_t stack_bytes;               /* each rank's fiber stack; 0: 16 MiB */
    int trace;                        /* 1: record trace events */
} sim_config;

/* A config for `world_size` ranks: cpu backend, constant cost model, trace on, no faults. */
sim_config sim_config_default(int world_size);

/* Creates the world (ranks are made by sim_world_run). */
usp_status sim_world_create(const sim_config *config, sim_world **out);

/* Runs fn(ctx, arg) on every rank until all have returned. Returns USP_OK, the
 * first failing rank's status (its message prefixed with the rank), or the
 * status of a deadlock / mismatch / crash report. One run per world. */
usp_status sim_world_run(sim_world *w, usp_rank_main_fn fn, void *arg);

/* The deadlock, mismatch or crash report of the run ("" when there was none). */
const char *sim_world_report(const sim_world *w);

/* The run's trace (NULL when tracing is off). */
const usp_trace_t *sim_world_trace(const sim_world *w);

/* A rank's peak backend memory, virtual time at the end, and returned status. */
size_t sim_world_peak_bytes(const sim_world *w, int rank);
double sim_world_time(const sim_world *w, int rank);
usp_status sim_world_rank_status(const sim_world *w, int rank);

/* Frees the world, every rank's backend and anything a rank left behind. */
void sim_world_destroy(sim_world *w);

#endif
