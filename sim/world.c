/* The scheduler of the simulated cluster: ranks as fibers, one at a time,
 * the runnable rank with the smallest virtual time first, and the transfers
 * in flight moved in time order between them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "sim/cache_model.h"
#include "sim/schedule_log.h"
#include "sim/sim_internal.h"
#include "sim/virtual_streams.h"

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
    USP_CHECK_GOTO(sim_mirrors_setup(w), s, fail); /* before the decorator takes the faults */
    USP_CHECK_GOTO(usp_comm_decorator_create(config->faults, config->n_faults, w->n, &w->decorator), s, fail);
    w->config.faults = NULL, w->config.n_faults = 0; /* the decorator holds the copy */
    if (config->trace)
        USP_CHECK_GOTO(usp_trace_create(&w->trace), s, fail);
    *out = w;
    return USP_OK;
fail:
    sim_world_destroy(w);
    return s;
}

/* An op runs on its stream's lane, from where that lane has got to (sim/virtual_streams.h). */
static void on_compute_cost(void *ctx, const usp_op_cost *cost)
{
    sim_rank *r = ctx;
    if (r->mute_costs)
        return;
    int lane = sim_stream_lane(r, cost->stream);
    double *clock = sim_lane_clock(r, lane);
    double held = r->cache ? sim_cache_touch(r->cache, cost->operands, cost->n_operands) : 0;
    double start = *clock, seconds = sim_cost_compute_held(&r->world->config.cost, cost, held);
    *clock += seconds;
    r->compute_s += seconds;
    sim_lanes_compute(r, lane, start, *clock);
    /* Compute spans only illustrate the timeline (viz/chrome_trace.c): one that cannot be
     * recorded (out of memory) is left out rather than failing the op that ran. */
    if (r->world->trace)
        (void)usp_trace_record_compute(r->world->trace, r->id, cost->op, start, *clock, cost->flops,
                                       cost->bytes);
}

/* The host reads the time once the work it issued is done: every lane's. */
static double rank_clock(const void *runtime) { return sim_lanes_end(runtime); }

static void rank_fiber_main(void *arg)
{
    sim_rank *r = arg;
    sim_world *w = r->world;
    usp_rank_ctx ctx = {.rank = r->id, .world_size = w->n, .world = r->world_comm, .backend = r->backend,
                        .clock = rank_clock, .runtime = r, .gather = sim_rank_gather, .gather_ctx = r,
                        .trace = w->trace};
    r->result = w->main_fn(&ctx, w->main_arg);
}

static usp_status make_ranks(sim_world *w)
{
    USP_CHECK(sim_cost_model_check(&w->config.cost, w->n));
    const int per_node = w->config.cost.topology.gpus_per_node; /* rank r on GPU r: the first node is the fullest */
    w->config.cost.ranks_per_node = w->n < per_node ? w->n : per_node;
    USP_CHECK(sim_p2p_flows_create(&w->config.cost.topology, &w->p2p));
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
        if (w->config.record_schedule)
            USP_CHECK(usp_calloc((void **)&r->sched, 1, sizeof *r->sched, "a rank's schedule log"));
        USP_CHECK((w->config.make_backend ? w->config.make_backend : usp_backend_cpu_create)(&r->backend));
        if (w->mirrors > 1 && usp_backend_has_numerics(r->backend)) /* a mirror's data would be its own */
            return usp_error(USP_ERR_CONFIG, "mirrors with the %s backend: only a run on shapes has ranks "
                             "that do the same", usp_backend_name(r->backend));
        /* A backend that completes every op at once gets streams in virtual time, so that what the
         * code runs beside compute overlaps here too; one with streams of its own keeps them. */
        if (!w->config.cost.no_overlap && !usp_backend_defers(r->backend))
            USP_CHECK(sim_streams_wrap(r, r->backend, &r->backend)); /* on failure it freed the backend */
        usp_backend_set_cost_sink(r->backend, on_compute_cost, r);
        const sim_gpu *gpu = &w->config.cost.topology.gpu;
        if (gpu->cache_bytes > 0 && sim_kernel_model_has_hot(&gpu->kernels))
            USP_CHECK(sim_cache_create(gpu->cache_bytes, &r->cache));
        usp_comm_t *world_comm;
        USP_CHECK(sim_comm_open(w, world_group, i, &world_comm));
        USP_CHECK(usp_comm_decorator_wrap(w->decorator, world_comm, &r->world_comm)); /* on failure the world frees it */
        USP_CHECK(sim_fiber_create(stack, rank_fiber_main, r, &r->fiber));
    }
    return USP_OK;
}

/* A rank about to resume from a call that completed: from posting to the last
 * member's arrival it waited, from there to the end its data moved. A call on a
 * stream of its own is kept for the compute that will run beside it. */
static void account_call(sim_rank *r)
{
    if (!r->op || r->wake != USP_OK)
        return;
    r->wait_s += r->op->t_start - r->op->t_post;
    r->comm_s += r->op->t_end - r->op->t_start;
    usp_status s = sim_lanes_call_done(r, sim_stream_lane(r, r->op->stream), r->op->t_post, r->op->t_start,
                                       r->op->t_end);
    if (s != USP_OK) { /* the call completed, its report would not: the rank learns it from its call */
        usp_strbuf_printf(&r->world->report, "rank %d: %s\n", r->id, usp_error_message());
        sim_abort(r->world, s);
    }
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

/* The ready queue: READY ranks in a binary heap by (clock, id), the order of
 * next_rank, so that picking the next rank costs O(log W) rather than a scan
 * of every rank at every call (at W = 512 the scan was a quarter of a plan's
 * run time). A rank becomes READY only when a call it waits in completes: a
 * collective when a participant posts (sim_comm.c), a transfer when the
 * scheduler moves the flows past its end (on_woken queues those ranks); so
 * after rank r yields, the ranks that may have become READY are r and the
 * participants of r's call: its group's members for a collective, its peers
 * for a transfer.
 * A READY rank's clock does not move until it runs, so keys never go stale.
 * An abort wakes every rank: from then on the scheduler scans. */
typedef struct ready_queue {
    int *heap;               /* [n] rank ids */
    int n;
    unsigned char *queued;   /* [world] 1 while the rank is in the heap */
} ready_queue;

static int ready_before(const sim_world *w, int a, int b)
{
    double ca = w->ranks[a].clock, cb = w->ranks[b].clock;
    return ca < cb || (ca == cb && a < b);
}

static void ready_push(ready_queue *q, const sim_world *w, int id)
{
    if (q->queued[id] || w->ranks[id].state != RANK_READY)
        return;
    q->queued[id] = 1;
    int at = q->n++;
    while (at > 0 && ready_before(w, id, q->heap[(at - 1) / 2])) {
        q->heap[at] = q->heap[(at - 1) / 2];
        at = (at - 1) / 2;
    }
    q->heap[at] = id;
}

static sim_rank *ready_pop(ready_queue *q, sim_world *w)
{
    while (q->n > 0) {
        int top = q->heap[0], last = q->heap[--q->n], at = 0;
        for (;;) { /* sift `last` down from the root */
            int child = 2 * at + 1;
            if (child >= q->n)
                break;
            if (child + 1 < q->n && ready_before(w, q->heap[child + 1], q->heap[child]))
                child++;
            if (!ready_before(w, q->heap[child], last))
                break;
            q->heap[at] = q->heap[child];
            at = child;
        }
        if (q->n > 0)
            q->heap[at] = last;
        q->queued[top] = 0;
        if (w->ranks[top].state == RANK_READY)
            return &w->ranks[top];
    }
    return NULL;
}

/* The rank ready_pop would return, left in the queue; NULL if none. */
static sim_rank *ready_peek(ready_queue *q, sim_world *w)
{
    sim_rank *r = ready_pop(q, w);
    if (r)
        ready_push(q, w, r->id);
    return r;
}

/* r has yielded inside a call: queue it and the call's participants that are READY now.
 * A collective wakes its members only when r's post completed it (r is then READY
 * too); otherwise r is the only one whose state changed, and offering every member
 * at every arrival was O(n^2) a collective (16M at each world collective of W = 4096). */
static void ready_push_participants(ready_queue *q, sim_world *w, const sim_rank *r)
{
    w->ready_offers++;
    ready_push(q, w, r->id);
    if (!r->op)
        return;
    const sim_group *g = r->op_comm->group;
    usp_comm_kind kind = r->op->kind;
    if (kind != USP_OP_SEND && kind != USP_OP_RECV && kind != USP_OP_SENDRECV) {
        if (r->state != RANK_READY)
            return;
        for (int i = 0; i < g->size; i++)
            ready_push(q, w, g->members[i]);
        w->ready_offers += (uint64_t)g->size;
        return;
    }
    w->ready_offers++;
    ready_push(q, w, g->members[r->op->peer]);
    if (kind == USP_OP_SENDRECV)
        ready_push(q, w, g->members[r->op->recv_peer]);
}

/* A rank whose transfer completed: onto the ready queue (when there is one). */
typedef struct woken_ctx {
    ready_queue *q;
    sim_world *w;
    int queue;
} woken_ctx;

static void on_woken(void *ctx, int rank)
{
    woken_ctx *c = ctx;
    if (c->queue)
        ready_push(c->q, c->w, rank);
}

/* Moves the transfers in flight through their events up to `horizon` (the next
 * rank's clock): a transfer that starts or finishes before a rank runs must be
 * seen first, so that the flows' time never passes a rank that may still post
 * (sim/p2p_flows.h). Returns 1 when an event was processed. */
static int move_transfers(sim_world *w, double horizon, woken_ctx *ctx)
{
    int has;
    double t;
    usp_status s = sim_p2p_flows_next(w->p2p, horizon, &has, &t);
    if (s == USP_OK && has)
        s = sim_transfers_advance(w, t, on_woken, ctx);
    if (s != USP_OK) {
        usp_strbuf_printf(&w->report, "transfers in flight failed: %s\n", usp_error_message());
        sim_abort(w, s);
        return 1;
    }
    return has;
}

static void run_scheduler(sim_world *w)
{
    ready_queue q = {.heap = malloc((size_t)w->n * sizeof *q.heap), .queued = calloc((size_t)w->n, 1)};
    int queue = q.heap && q.queued; /* out of memory: scan */
    for (int i = 0; queue && i < w->n; i++)
        ready_push(&q, w, i);
    for (;;) {
        queue &= w->abort_status == USP_OK;
        sim_rank *r = queue ? ready_peek(&q, w) : next_rank(w);
#ifndef NDEBUG /* debug builds check the queue against the scan (small worlds: the scan is O(W)) */
        USP_ASSERT(!queue || w->n > 64 || r == next_rank(w), "the ready queue chose rank %d, the scan rank %d",
                   r ? r->id : -1, next_rank(w) ? next_rank(w)->id : -1);
#endif
        woken_ctx woken = {&q, w, queue};
        if (move_transfers(w, r ? r->clock : INFINITY, &woken))
            continue;
        if (queue && r)
            ready_pop(&q, w);
        if (!r) {
            int blocked = 0;
            for (int i = 0; i < w->n; i++)
                blocked |= w->ranks[i].state == RANK_BLOCKED;
            if (!blocked)
                break;
            sim_abort(w, sim_report_stall(w));
            continue;
        }
        account_call(r);
        w->current = r;
        usp_error_slot *own = usp_error_use_slot(&r->error);
        sim_fiber_resume(r->fiber);
        usp_error_use_slot(own);
        w->current = NULL;
        if (sim_fiber_finished(r->fiber))
            r->state = RANK_DONE;
        else if (queue)
            ready_push_participants(&q, w, r);
    }
    free(q.heap);
    free(q.queued);
}

usp_status sim_world_run(sim_world *w, usp_rank_main_fn fn, void *arg)
{
    USP_ASSERT(!w->ran, "a sim_world runs once");
    w->ran = 1;
    w->main_fn = fn;
    w->main_arg = arg;
    USP_CHECK(make_ranks(w));
    run_scheduler(w);
    sim_mirrors_finish(w);
    if (w->abort_status != USP_OK)
        return usp_error(w->abort_status, "%s", usp_strbuf_text(&w->report));
    for (int i = 0; i < w->n; i++)
        if (usp_comm_decorator_crashed(w->decorator, i, NULL, NULL)) {
            sim_report_crash(w);
            return usp_error(USP_ERR_RANK_FAILED, "%s", usp_strbuf_text(&w->report));
        }
    for (int i = 0; i < w->n; i++)
        if (w->ranks[i].result != USP_OK && !sim_is_mirror(w, i))
            return usp_error(w->ranks[i].result, "rank %d: %s", i, w->ranks[i].error.message);
    return usp_comm_decorator_check_fired(w->decorator); /* a fault that never fired would let a failing test pass */
}

const char *sim_world_report(const sim_world *w) { return usp_strbuf_text(&w->report); }
int sim_world_size(const sim_world *w) { return w->n; }
const usp_trace_t *sim_world_trace(const sim_world *w) { return w->trace; }

size_t sim_world_peak_bytes(const sim_world *w, int rank)
{
    const sim_rank *r = sim_mirror_source(w, rank);
    return r->backend ? usp_backend_peak_bytes(r->backend) : 0;
}

double sim_world_time(const sim_world *w, int rank) { return sim_lanes_end(sim_mirror_source(w, rank)); }

sim_rank_times sim_world_rank_times(const sim_world *w, int rank)
{
    const sim_rank *r = sim_mirror_source(w, rank);
    return (sim_rank_times){.compute_s = r->compute_s, .comm_s = r->comm_s, .wait_s = r->wait_s,
                            .end_s = sim_lanes_end(r), .hidden_comm_s = r->hidden_comm_s,
                            .hidden_wait_s = r->hidden_wait_s};
}

sim_work sim_world_work(const sim_world *w)
{
    return (sim_work){.traffic_entries = w->traffic_entries, .match_checks = w->match_checks,
                      .ready_offers = w->ready_offers};
}

uint64_t sim_world_staged_bytes(const sim_world *w) { return w->staged_bytes; }

const usp_backend_t *sim_world_backend(const sim_world *w, int rank) { return sim_mirror_source(w, rank)->backend; }
usp_status sim_world_rank_status(const sim_world *w, int rank) { return sim_mirror_source(w, rank)->result; }
int sim_world_mirrors_failed(const sim_world *w) { return w->mirrors_failed; }

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
        usp_backend_destroy(r->backend);
        sim_lanes_free(r);
        sim_sched_log_free(r->sched);
        sim_fiber_destroy(r->fiber);
        sim_cache_destroy(r->cache);
    }
    for (int g = 0; g < w->n_groups; g++) {
        sim_group *grp = w->groups[g];
        free(grp->members), free(grp->posted), free(grp->calls), free(grp->collectives), free(grp->mirror_locals);
        free(grp);
    }
    free(w->groups);
    free(w->ranks);
    free(w->local_scratch);
    sim_p2p_flows_destroy(w->p2p);
    usp_comm_decorator_destroy(w->decorator); /* after the backend's handles: it frees only its wrappers */
    sim_gathers_free(w);
    usp_trace_destroy(w->trace);
    usp_strbuf_free(&w->report);
    free(w->abort_reason);
    usp_report_snapshot_free(&w->snapshot);
    free(w);
}
