/* The lint of a schedule: calls of different groups that may be in flight on
 * one GPU at once, found without a search.
 *
 * NCCL's maintainers: CUDA does not promise that two streams progress
 * independently, so two NCCL calls launched concurrently on two streams can
 * deadlock; a stream dependency must make them run in the order they were
 * submitted (NVIDIA/nccl issues 195 and 783). So for each rank, two calls on
 * different groups (each with another member) and different streams, with
 * nothing that orders one before the other (their streams, an event between
 * them, or a synchronize of the host) are a finding, whether or not an
 * explored order happens to hang. The other rule of NCCL's documentation,
 * that ranks sharing two groups issue their calls in the same relative order,
 * needs no lint here: a run that breaks it deadlocks the plain simulator,
 * whose hosts block in every call.
 *
 * Happens-before on a rank: vector clocks over its streams, in issue order
 * (an item knows, per stream, how many items of it are complete before it
 * starts: its own stream's earlier items, what the events it waits for knew,
 * what the host knew when it issued it). */
#ifndef USP_SIM_SCHEDULE_LINT_H
#define USP_SIM_SCHEDULE_LINT_H

#include <stdint.h>

#include "core/base/strbuf.h"
#include "sim/world.h"

typedef struct sim_lint_result {
    uint64_t pairs;       /* pairs of calls that may be in flight at once, over all ranks */
    int ranks;            /* ranks with at least one */
    usp_strbuf report;    /* the findings, a few of them in full ("" when none) */
} sim_lint_result;

/* Lints the logs of a world run with record_schedule. USP_ERR_CONFIG when a rank logged nothing;
 * USP_ERR_RUNTIME when out of memory. */
usp_status sim_schedule_lint(const sim_world *w, sim_lint_result *out);

/* Frees what a result holds (a zeroed one is fine). */
void sim_lint_result_free(sim_lint_result *r);

#endif
