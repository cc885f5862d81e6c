/* Exploration: the orders in which the ranks' GPUs may start the heads of
 * their streams, searched for one that deadlocks.
 *
 * The model of a GPU (of NCCL on it): each rank's program is its schedule log
 * (sim/schedule_log.h). A stream runs its items in order; an event wait passes
 * once the record it waits for has passed; the host issues nothing after a
 * synchronize until the lanes it waits for have run, nor after a split until
 * every member's host is there. A collective kernel that has started holds
 * one of the GPU's `slots` (K) until every member of its group has started
 * the same collective (the k-th on that group); a send or receive holds its
 * slot until its peer has started the matching call (NCCL connects peers
 * lazily, at their first transfer, and needs both there: this model asks it
 * of every transfer, the strict side). Calls on one group start in the order
 * the host issued them. Compute takes no slot and orders nothing its stream
 * does not, so it is left out. Which of a GPU's ready heads starts first is
 * the GPU's choice: timing, not the program, decides it.
 *
 * The search: after every step the moves that cannot change the outcome are
 * made at once (records, event waits, completions, starts with a free slot for
 * every ready head); only a rank with more ready heads (all on different groups)
 * than free slots is a choice, and only one rank's choice is branched on at a
 * time (choices of different ranks commute). States are remembered, so a state
 * reached twice is searched once. A state where nothing can move and some work
 * is left is a deadlock. This is partial-order reduction for this model: with
 * K = 1, a rank with a free slot runs nothing, so no other rank's move changes
 * its ready heads, and deferring its choice finds nothing new. */
#ifndef USP_SIM_EXPLORE_H
#define USP_SIM_EXPLORE_H

#include <stdint.h>

#include "core/safety/comm_report.h"
#include "core/base/strbuf.h"
#include "sim/world.h"

typedef struct sim_explore_options {
    int slots;            /* K: collective kernels one GPU runs at once (1: the strictest) */
    uint64_t max_states;  /* stop after this many distinct states (0: 2,000,000) */
} sim_explore_options;

typedef struct sim_explore_result {
    int deadlock;         /* 1: an order deadlocks (report, snapshot) */
    int exhaustive;       /* 1: every order was searched (0: cut at max_states) */
    uint64_t states;      /* distinct states searched */
    uint64_t choices;     /* states where a GPU had a choice */
    uint64_t orders;      /* orders searched to their end (or to the deadlock) */
    uint64_t items;       /* calls, records and waits in the ranks' logs */
    double seconds;
    usp_strbuf report;    /* the deadlock's report ("" when none) */
    usp_report_snapshot snapshot; /* the deadlocked state, for usp_report_wait_graph */
} sim_explore_result;

/* Explores the logs of a world run with record_schedule (sim/world.h) that ended
 * without a report. USP_ERR_CONFIG when the world logged nothing or ran without
 * virtual streams; USP_ERR_RUNTIME when out of memory. A deadlock is a result,
 * not an error. */
usp_status sim_explore(const sim_world *w, const sim_explore_options *o, sim_explore_result *out);

/* Frees what a result holds (a zeroed one is fine). */
void sim_explore_result_free(sim_explore_result *r);

#endif
