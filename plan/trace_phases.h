/* A usp Chrome trace file read back (viz/chrome_trace.h wrote it): the time
 * one training step spent in each phase, the same way for a measured run
 * (usp train --backend mpi|nccl --trace), a simulated one (--backend sim) and
 * the planner's modelled step, so that plan/compare.h sets them side by side.
 *
 * A phase sums the durations of the step's slices of one kind: compute ops by
 * their name (attention, GEMMs, the rest), calls by their op (all-to-all,
 * point-to-point ring transfers, all-reduce, the other collectives), each call
 * from when the rank posted it to when it completed, and of that the wait for
 * the last member of its group to post the same call (found by the group's
 * name and the call's sequence number on every rank's track: max post - own
 * post, no barrier added; on MPI the processes of one host share a clock).
 * The wait of a point-to-point call is taken over its whole group, an upper
 * bound for a sendrecv, which waits for one neighbour. A slice belongs to
 * the step whose span holds its start. Phases are the mean over the ranks,
 * the step the longest rank's. */
#ifndef USP_PLAN_TRACE_PHASES_H
#define USP_PLAN_TRACE_PHASES_H

#include <jansson.h>
#include <stdint.h>

#include "core/base/status.h"
#include "plan/op_rows.h"

typedef enum plan_phase {
    PLAN_PHASE_ATTENTION,      /* attention_forward, attention_backward, attention_merge */
    PLAN_PHASE_GEMM,           /* gemm */
    PLAN_PHASE_OTHER_COMPUTE,  /* every other op: norms, activations, copies, loss, optimizer */
    PLAN_PHASE_ALL_TO_ALL,     /* all_to_all, all_to_all_v (Ulysses) */
    PLAN_PHASE_RING,           /* send, recv, sendrecv (the ring's K/V blocks) */
    PLAN_PHASE_ALL_REDUCE,     /* all_reduce (gradients, loss) */
    PLAN_PHASE_OTHER_COMM,     /* reduce_scatter, all_gather, broadcast, barrier (ZeRO, weights) */
    PLAN_PHASES
} plan_phase;

/* The phase's name in tables and JSON ("all_to_all"). */
const char *plan_phase_name(plan_phase p);

/* 1 for the communication phases. */
int plan_phase_is_comm(plan_phase p);

/* A trace file's document, checked to be a usp trace. */
typedef struct plan_trace {
    json_t *doc;
    const char *name;   /* the file, for messages */
} plan_trace;

/* One step's time by phase. */
typedef struct plan_step_phases {
    int64_t step;                 /* which step (of a median over steps: the last of them) */
    int64_t steps_compared;       /* steps whose median each figure is (1: step alone) */
    int64_t steps;                /* how many steps every rank completed */
    int ranks;                    /* ranks with that step */
    double phase_s[PLAN_PHASES];  /* mean over the ranks */
    double wait_s[PLAN_PHASES];   /* of it, a call's wait for its group's last member to post it (the rest:
                                     transfer); the mean over the ranks */
    double compute_s, comm_s;     /* the sums of the compute and communication phases */
    double step_s;                /* the longest rank's step */
    /* Each phase, then compute, communication and the step (PLAN_ROW_*): the lowest and the highest of their
     * values over the steps compared (of one step, its own): how far the median could have moved. */
    double lo_s[PLAN_PHASES + 3], hi_s[PLAN_PHASES + 3]; /* PLAN_ROWS: the enum below */
    plan_op_rows ops;             /* the step op by op (a call: its transfer), the mean over the ranks; of a median
                                     over steps, each row's median */
} plan_step_phases;

/* The rows of a comparison after the phases, as lo_s and hi_s index them. */
enum { PLAN_ROW_COMPUTE = PLAN_PHASES, PLAN_ROW_COMM, PLAN_ROW_STEP, PLAN_ROWS };

/* Reads the trace file `path`. Not JSON (a truncated file), not a Chrome trace, or not one usp wrote:
 * USP_ERR_CONFIG naming the file and what is wrong. */
usp_status plan_trace_read(const char *path, plan_trace *out);

/* plan_trace_read of `text`, named `name` in messages. */
usp_status plan_trace_parse(const char *name, const char *text, plan_trace *out);

/* The run's options (otherData.usp_run: what usp train wrote), or NULL when the trace has none. */
const json_t *plan_trace_run_options(const plan_trace *t);

/* What its clock counts (otherData.clock), or "". */
const char *plan_trace_clock(const plan_trace *t);

/* Step `step` of the trace (0: the last step every rank completed) by phase. A trace without steps, or
 * without that step on some rank: USP_ERR_CONFIG naming the file. */
usp_status plan_trace_step_phases(const plan_trace *t, int64_t step, plan_step_phases *out);

/* The last `k` steps every rank completed, each figure (a phase, its transfer, the sums, the step) the median
 * of its k values, with its lowest and highest value (lo_s, hi_s); a phase's wait is its median less its
 * transfer's. On a machine shared with other work one
 * step's figures move by tens of percent, a median of several by much less. k 1 is plan_trace_step_phases of the
 * last step; more steps than the ranks completed: USP_ERR_CONFIG naming the file, k and what it has. */
usp_status plan_trace_median_phases(const plan_trace *t, int k, plan_step_phases *out);

/* Frees the document (a zeroed trace is fine). */
void plan_trace_free(plan_trace *t);

#endif
