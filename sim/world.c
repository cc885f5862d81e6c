/* The scheduler of the simulated cluster: ranks as fibers, one at a time,
 * the runnable rank with the smallest virtual time first. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "sim/sim_internal.h"

sim_config sim_config_default(int world_size)
{
    return (sim_config){.world_size = world_size, .cost = sim_cost_model_default(world_size), .trace = 1};
}

usp_status sim_world_create(const sim_config *config, sim_world **out)
{
    if (config->world_size < 1)
        return usp_error(USP_ERR_CONFIG, "--world %d: the number of ranks must be at least 1",
                         config->world_size);
    sim_world *w;
    USP_CHECK(usp_calloc((void **)&w, 1, sizeof *w, "the simulated world"));
    w->config = *config;
    w->n = config->world_size;
    usp_status s;
    USP_CHECK_GOTO(usp_calloc((void **)&w->ranks, (size_t)w->n, sizeof *w->ranks, "the ranks"), s, fail);
    if (config->n_faults > 0) {
        USP_CHECK_GOTO(usp_malloc((void **)&w->faults, (size_t)config->n_faults * sizeof *w->faults,
                                  "the faults"), s, fail);
        memcpy(w->faults, config->faults, (size_t)config->n_faults * sizeof *w->faults);
        for (int i = 0; i < config->n_faults; i++)
            if (w->faults[i].rank >= w->n) {
                s = usp_error(USP_ERR_CONFIG, "--inject %s:rank=%d: there are only %d ranks (0 to %d)",
                              sim_fault_kind_name(w->faults[i].kind), w->faults[i].rank, w->n, w->n - 1);
                goto fail;
            }
    }
    w->config.faults = w->faults;
    if (config->trace)
        USP_CHECK_GOTO(usp_trace_create(&w->trace), s, fail);
    *out = w;
    return USP_OK;
fail:
    sim_world_destroy(w);
    return s;
}

static void on_compute_cost(void *ctx, const usp_op_cost *cost)
{
    sim_rank *r = ctx;
    double start = r->clock;
    r->clock += sim_cost_compute(&r->world->config.cost, cost);
    /* Compute spans only illustrate the timeline (viz/chrome_trace.c): one that cannot be
     * recorded (out of memory) is left out rather than failing the op that ran. */
    if (r->world->trace)
        (void)usp_trace_record_compute(r->world->trace, r->id, cost->op, start, r->clock, cost->flops,
                                       cost->bytes);
}

static double rank_clock(const void *runtime) { return ((const sim_rank *)runtime)->clock; }

static void rank_fiber_main(void *arg)
{
    sim_rank *r = arg;
    sim_world *w = r->world;
    usp_rank_ctx ctx = {.rank = r->id, .world_size = w->n, .world = r->world_comm, .backend = r->backend,
                        .clock = rank_clock, .runtime = r};
    r->result = w->main_fn(&ctx, w->main_arg);
}

static usp_status make_ranks(sim_world *w)
{
    USP_CHECK(sim_cost_model_check(&w->config.cost, w->n));
    int *everyone;
    USP_CHECK(usp_malloc((void **)&everyone, (size_t)w->n * sizeof *everyone, "the world group"));
    for (int i = 0; i < w->n; i++)
        everyone[i] = i;
    sim_group *world_group;
    usp_status s = sim_group_create(w, "world", w->n, everyone, &world_group);
    free(everyone);
    USP_CHECK(s);
    size_t stack = w->config.stack_bytes ? w->config.stack_bytes : (size_t)16 << 20;
    for (int i = 0; i < w->n; i++) {
        sim_rank *r = &w->ranks[i];
        r->id = i;
        r->world = w;
        USP_CHECK((w->config.make_backend ? w->config.make_backend : usp_backend_cpu_create)(&r->backend));
        usp_backend_set_cost_sink(r->backend, on_compute_cost, r);
        USP_CHECK(sim_comm_open(w, world_group, i, &r->world_comm));
        USP_CHECK(sim_fiber_create(stack, rank_fiber_main, r, &r->fiber));
    }
    return USP_OK;
}

/* The runnable rank with the smallest virtual time, ties by rank id; NULL if none. */
static sim_rank *next_rank(sim_world *w)
{
    sim_rank *best = NULL;
    for (int i = 0; i < w->n; i++) {
        sim_rank *r = &w->ranks[i];
        if (r->state == RANK_READY && (!best || r->clock < best->clock))
            best = r;
    }
    return best;
}

static void run_scheduler(sim_world *w)
{
    for (;;) {
        sim_rank *r = next_rank(w);
        if (!r) {
            int blocked = 0;
            for (int i = 0; i < w->n; i++)
                blocked |= w->ranks[i].state == RANK_BLOCKED;
            if (!blocked)
                return;
            sim_abort(w, sim_report_stall(w));
            continue;
        }
        w->current = r;
        usp_error_slot *own = usp_error_use_slot(&r->error);
        sim_fiber_resume(r->fiber);
        usp_error_use_slot(own);
        w->current = NULL;
        if (sim_fiber_finished(r->fiber))
            r->state = RANK_DONE;
    }
}

usp_status sim_world_run(sim_world *w, usp_rank_main_fn fn, void *arg)
{
    USP_ASSERT(!w->ran, "a sim_world runs once");
    w->ran = 1;
    w->main_fn = fn;
    w->main_arg = arg;
    USP_CHECK(make_ranks(w));
    run_scheduler(w);
    if (w->abort_status != USP_OK)
        return usp_error(w->abort_status, "%s", usp_strbuf_text(&w->report));
    for (int i = 0; i < w->n; i++)
        if (w->ranks[i].crash.crashed) {
            sim_report_crash(w);
            return usp_error(USP_ERR_RANK_FAILED, "%s", usp_strbuf_text(&w->report));
        }
    for (int i = 0; i < w->n; i++)
        if (w->ranks[i].result != USP_OK)
            return usp_error(w->ranks[i].result, "rank %d: %s", i, w->ranks[i].error.message);
    return USP_OK;
}

const char *sim_world_report(const sim_world *w) { return usp_strbuf_text(&w->report); }
const usp_trace_t *sim_world_trace(const sim_world *w) { return w->trace; }

size_t sim_world_peak_bytes(const sim_world *w, int rank)
{
    return w->ranks[rank].backend ? usp_backend_peak_bytes(w->ranks[rank].backend) : 0;
}

double sim_world_time(const sim_world *w, int rank) { return w->ranks[rank].clock; }
usp_status sim_world_rank_status(const sim_world *w, int rank) { return w->ranks[rank].result; }

void sim_world_destroy(sim_world *w)
{
    if (!w)
        return;
    for (int i = 0; w->ranks && i < w->n; i++) {
        sim_rank *r = &w->ranks[i];
        usp_comm_destroy(r->world_comm);
        while (r->n_comms > 0) /* handles the rank did not free */
            usp_comm_destroy(r->comms[r->n_comms - 1]->handle);
        free(r->comms);
        free(r->deferred_arrays);
        usp_backend_destroy(r->backend);
        sim_fiber_destroy(r->fiber);
    }
    for (int g = 0; g < w->n_groups; g++) {
        sim_group *grp = w->groups[g];
        free(grp->members), free(grp->posted), free(grp->calls), free(grp->collectives), free(grp);
    }
    free(w->groups);
    free(w->ranks);
    free(w->faults);
    usp_trace_destroy(w->trace);
    usp_strbuf_free(&w->report);
    usp_strbuf_free(&w->injected);
    free(w);
}
