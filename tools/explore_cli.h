/* --explore, --gpu-slots and --explore-states of the commands that run a
 * schedule on the simulator (usp selftest, usp train): after a run that
 * passed, the lint and the exploration of the GPUs' orders (sim/explore.h,
 * sim/schedule_lint.h), their lines, and exit code 3 when either finds a hang. */
#ifndef USP_TOOLS_EXPLORE_CLI_H
#define USP_TOOLS_EXPLORE_CLI_H

#include <stdio.h>

#include "core/runtime/runtime.h"

typedef struct explore_options {
    int explore;        /* --explore */
    int slots;          /* --gpu-slots K (default 1) */
    int max_states;     /* --explore-states N (0: the explorer's default) */
} explore_options;

#define EXPLORE_CLI_OPTIONS(o)                                                                                   \
    {"--explore", CLI_FLAG, &(o).explore, NULL,                                                               \
     "after the run, search the orders in which each GPU may start its streams' calls for a deadlock, and lint " \
     "the schedule for calls of two groups that may be in flight at once (exit 3 on either)", 0, -1},            \
    {"--gpu-slots", CLI_INT, &(o).slots, "K",                                                                 \
     "with --explore: collective kernels one GPU runs at once (default 1, the strictest)", 1, 64},              \
    {"--explore-states", CLI_INT, &(o).max_states, "N",                                                       \
     "with --explore: stop the search after N distinct states (default 2000000)", 1, 1000000000}

/* USP_ERR_CONFIG naming the option when --gpu-slots or --explore-states is given without --explore, or
 * --explore on a backend other than the simulator. */
usp_status explore_options_check(const explore_options *o, const char *backend);

/* After a run of `rt` (the simulator, created with record_schedule) that passed: lints and explores, prints
 * to `out` (findings to `err`, prefixed with the command), writes the wait-for graph of an explored
 * deadlock to `dot` (NULL: none); *exit_code = 3 when either found a hang. */
usp_status explore_after_run(const usp_runtime_t *rt, const explore_options *o, const char *command,
                             const char *dot, FILE *out, FILE *err, int *exit_code);

#endif
