/* --explore (explore_cli.h). */
#include "tools/explore_cli.h"

#include <string.h>

#include "sim/explore.h"
#include "sim/schedule_lint.h"
#include "sim/sim_runtime.h"
#include "tools/cli.h"
#include "viz/wait_graph.h"

usp_status explore_options_check(const explore_options *o, const char *backend)
{
    if (!o->explore && o->slots != 1)
        return usp_error(USP_ERR_CONFIG, "--gpu-slots %d without --explore: it sets the explored GPUs (add --explore)",
                         o->slots);
    if (!o->explore && o->max_states)
        return usp_error(USP_ERR_CONFIG, "--explore-states %d without --explore: it bounds the exploration (add "
                         "--explore)", o->max_states);
    if (o->explore && backend && strcmp(backend, "sim") != 0)
        return usp_error(USP_ERR_CONFIG, "--explore with --backend %s: the exploration replays the simulator's run "
                         "(use --backend sim, the default)", backend);
    return USP_OK;
}

static usp_status write_wait_graph(const sim_explore_result *res, const char *dot, const char *command, FILE *err)
{
    usp_wait_graph g;
    USP_CHECK(usp_report_wait_graph(&res->snapshot, usp_strbuf_text(&res->report), &g));
    usp_status s = viz_write_wait_graph(&g, "--dot", dot);
    if (s == USP_OK)
        fprintf(err, "usp %s: wait-for picture of the explored deadlock in %s\n", command, dot);
    usp_wait_graph_free(&g);
    return s;
}

usp_status explore_after_run(const usp_runtime_t *rt, const explore_options *o, const char *command,
                             const char *dot, FILE *out, FILE *err, int *exit_code)
{
    const sim_world *w = sim_runtime_world(rt);
    if (!w)
        return usp_error(USP_ERR_CONFIG, "--explore: the run was not the simulator's");
    sim_lint_result lint;
    USP_CHECK(sim_schedule_lint(w, &lint));
    sim_explore_options eo = {.slots = o->slots, .max_states = (uint64_t)o->max_states};
    sim_explore_result res;
    usp_status s = sim_explore(w, &eo, &res);
    if (s != USP_OK) {
        sim_lint_result_free(&lint);
        return s;
    }
    fprintf(out, "usp %s: explored %s order%s in which the GPUs may start their streams' calls: %llu to their end, "
            "%llu states, %llu choices, %.2f s (%d collective kernel%s per GPU at once; %llu calls, records and "
            "waits)\n", command, res.exhaustive ? "every" : res.deadlock ? "the" : "some",
            res.exhaustive ? "" : "s", (unsigned long long)res.orders, (unsigned long long)res.states,
            (unsigned long long)res.choices, res.seconds, o->slots, o->slots == 1 ? "" : "s",
            (unsigned long long)res.items);
    if (!res.exhaustive && !res.deadlock)
        fprintf(out, "usp %s: the search stopped at --explore-states %llu: orders beyond it were not searched\n",
                command, (unsigned long long)res.states);
    fflush(out); /* the findings on err come after it */
    if (lint.pairs == 0)
        fprintf(out, "usp %s: lint: no two calls of different groups can be in flight at once on a GPU\n", command);
    else
        cli_error(err, command, "lint: %llu pair%s of calls on different groups may be in flight at once on one "
                  "GPU (on %d rank%s); a GPU may start either first, and NCCL calls on two streams can deadlock:\n%s",
                  (unsigned long long)lint.pairs, lint.pairs == 1 ? "" : "s", lint.ranks, lint.ranks == 1 ? "" : "s",
                  usp_strbuf_text(&lint.report));
    if (res.deadlock)
        cli_error(err, command, "%s", usp_strbuf_text(&res.report));
    if (res.deadlock && dot)
        s = write_wait_graph(&res, dot, command, err);
    if (res.deadlock || lint.pairs > 0)
        *exit_code = (int)USP_ERR_COLLECTIVE;
    sim_explore_result_free(&res);
    sim_lint_result_free(&lint);
    return s;
}
