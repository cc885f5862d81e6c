/* The simulator's communicator: posting calls, matching them as NCCL does,
 * and completing them on the virtual clocks.
 *
 * A rank that calls blocks (yields to the scheduler) until its call is
 * complete. A collective completes when the last member of the group posts
 * it; every member must post the same op, count, dtype, root and reduce op,
 * checked as each one arrives. A transfer completes when the sender's send
 * and the receiver's receive are both posted; a collective's participants'
 * clocks (those of the streams they issued it on: sim/virtual_streams.h) move
 * to max(arrival times) + its cost. A matched transfer starts at
 * the later of its two posts and moves with the other transfers in flight,
 * sharing the links they cross (sim/p2p_flows.h); its sender and receiver
 * resume when the scheduler has moved the flows past its end. Faults are
 * injected before a call gets here, by the decorator that wraps every handle
 * (core/safety/comm_decorator.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cache_model.h"
#include "sim/sim_internal.h"
#include "sim/schedule_log.h"
#include "sim/virtual_streams.h"

usp_status sim_group_create(sim_world *w, const char *name, int size, const int *members, sim_group **out)
{
    if (w->n_groups == w->cap_groups) {
        int cap = w->cap_groups ? 2 * w->cap_groups : 16;
        sim_group **grown = realloc(w->groups, (size_t)cap * sizeof *grown);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory creating group %s", name);
        w->groups = grown;
        w->cap_groups = cap;
    }
    sim_group *g = calloc(1, sizeof *g);
    if (!g)
        return usp_error(USP_ERR_RUNTIME, "out of memory creating group %s", name);
    snprintf(g->name, sizeof g->name, "%s", name);
    g->id = w->n_groups;
    g->size = size;
    g->members = malloc((size_t)size * sizeof *g->members);
    g->posted = calloc((size_t)size, sizeof *g->posted);
    g->calls = calloc((size_t)size, sizeof *g->calls);
    g->collectives = calloc((size_t)size, sizeof *g->collectives);
    w->groups[w->n_groups++] = g; /* owned by the world from here, even half-made */
    if (!g->members || !g->posted || !g->calls || !g->collectives)
        return usp_error(USP_ERR_RUNTIME, "out of memory creating group %s", name);
    memcpy(g->members, members, (size_t)size * sizeof *members);
    USP_CHECK(sim_mirrors_index(w, g));
    *out = g;
    return USP_OK;
}

static void sim_comm_destroy(void *ctx)
{
    sim_comm *sc = ctx;
    sim_rank *r = &sc->world->ranks[sc->group->members[sc->local]];
    for (int i = 0; i < r->n_comms; i++)
        if (r->comms[i] == sc) {
            r->comms[i] = r->comms[--r->n_comms];
            break;
        }
    free(sc);
}

usp_status sim_comm_open(sim_world *w, sim_group *g, int local, usp_comm_t **out)
{
    sim_rank *r = &w->ranks[g->members[local]];
    if (r->n_comms == r->cap_comms) {
        int cap = r->cap_comms ? 2 * r->cap_comms : 8;
        sim_comm **grown = realloc(r->comms, (size_t)cap * sizeof *grown);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory opening group %s", g->name);
        r->comms = grown;
        r->cap_comms = cap;
    }
    sim_comm *sc = calloc(1, sizeof *sc);
    if (!sc)
        return usp_error(USP_ERR_RUNTIME, "out of memory opening group %s", g->name);
    *sc = (sim_comm){.world = w, .group = g, .local = local};
    usp_status s = usp_comm_create_borrowed(&sim_comm_iface, sc, local, g->size, g->members, g->name, w->trace,
                                            &sc->handle); /* the world frees its groups after every handle */
    if (s != USP_OK) {
        free(sc);
        return s;
    }
    r->comms[r->n_comms++] = sc;
    *out = sc->handle;
    return USP_OK;
}

static int is_collective(usp_comm_kind kind)
{
    return kind != USP_OP_SEND && kind != USP_OP_RECV && kind != USP_OP_SENDRECV;
}

/* --- completing calls ---------------------------------------------------- */

/* The call's lane (its stream's: sim/virtual_streams.h) reaches its end; the others run on. */
static void finish_op(sim_rank *r)
{
    r->state = RANK_READY;
    *sim_lane_clock(r, sim_stream_lane(r, r->op->stream)) = r->op->t_end;
}

/* NCCL's ncclCommSplit: groups by color, members ordered by (key, old rank). */
static usp_status complete_split(sim_world *w, sim_group *g)
{
    int *members = malloc((size_t)g->size * sizeof *members);
    if (!members)
        return usp_error(USP_ERR_RUNTIME, "out of memory splitting %s", g->name);
    usp_status s = USP_OK;
    int *done = calloc((size_t)g->size, sizeof *done);
    for (int i = 0; done && i < g->size && s == USP_OK; i++) {
        const usp_comm_op *lead = g->posted[i];
        if (done[i] || lead->color == USP_SPLIT_NOCOLOR)
            continue;
        int n = 0;
        for (int j = 0; j < g->size; j++) /* insertion sort by (key, rank) */
            if (!done[j] && g->posted[j]->color == lead->color) {
                done[j] = 1;
                int at = n++;
                while (at > 0 && g->posted[members[at - 1]]->key > g->posted[j]->key)
                    members[at] = members[at - 1], at--;
                members[at] = j;
            }
        int *world_ranks = malloc((size_t)n * sizeof *world_ranks);
        sim_group *ng = NULL;
        if (!world_ranks) {
            s = usp_error(USP_ERR_RUNTIME, "out of memory splitting %s", g->name);
            break;
        }
        for (int k = 0; k < n; k++)
            world_ranks[k] = g->members[members[k]];
        s = sim_group_create(w, g->posted[members[0]]->name, n, world_ranks, &ng);
        for (int k = 0; k < n && s == USP_OK; k++)
            s = sim_comm_open(w, ng, k, g->posted[members[k]]->split_out);
        free(world_ranks);
    }
    if (!done && s == USP_OK)
        s = usp_error(USP_ERR_RUNTIME, "out of memory splitting %s", g->name);
    free(done);
    free(members);
    return s;
}

/* Seconds the group's matched collective takes on the modelled cluster: every
 * member's bytes to every peer under NCCL's algorithm, priced by the flow model.
 * The traffic is a list of the pairs that move bytes (usp_comm_op_peers): a ring
 * collective over n members is n entries, where an n x n matrix was 128 MB and
 * n^2 steps at every world collective of W = 4096. */
static usp_status price_collective(sim_world *w, sim_group *g, double held, double *seconds)
{
    size_t n = (size_t)g->size;
    usp_comm_kind kind = g->posted[0]->kind;
    size_t cap = kind == USP_OP_ALL_TO_ALL || kind == USP_OP_ALL_TO_ALL_V ? n * n : n;
    int src_stack[256], dst_stack[256], *src = src_stack, *dst = dst_stack;
    uint64_t bytes_stack[256], *bytes = bytes_stack;
    if (cap > 256) {
        void *block;
        USP_CHECK(usp_malloc(&block, cap * (2 * sizeof(int) + sizeof(uint64_t)), "the traffic of a collective"));
        bytes = block, src = (int *)(bytes + cap), dst = src + cap;
    }
    size_t entries = 0;
    for (size_t i = 0; i < n; i++) {
        int k = usp_comm_op_peers(g->posted[i], (int)i, g->size, dst + entries, bytes + entries);
        for (int e = 0; e < k; e++)
            src[entries + (size_t)e] = (int)i;
        entries += (size_t)k;
    }
    w->traffic_entries += entries;
    sim_traffic t = {.n = entries, .src = src, .dst = dst, .bytes = bytes, .held = held};
    usp_status s = sim_cost_collective_traffic(&w->config.cost, kind, g->size, g->members, &t, SIM_ALGO_AUTO,
                                               seconds, NULL);
    if (bytes != bytes_stack)
        free(bytes);
    return s;
}

/* price_collective, remembered per group: the price is a function of the group, the cluster and the
 * traffic, and every kind's traffic but all_to_all_v's is a function of (kind, count, dtype, root),
 * on which the members agree (post_collective). A layer's collectives repeat on the same groups with
 * the same shapes: pricing a Ulysses all-to-all of U members routes U^2 transfers through the flow
 * model, a third of a plan's time at W = 4096 before it was remembered. */
static usp_status collective_seconds(sim_world *w, sim_group *g, double *seconds)
{
    const usp_comm_op *op = g->posted[0];
    sim_group_price key = {.kind = op->kind, .dtype = op->dtype, .count = op->count, .root = op->root};
    int cacheable = op->kind != USP_OP_ALL_TO_ALL_V, found = 0, modelled = w->ranks[g->members[0]].cache != NULL;
    for (int i = 0; cacheable && i < g->n_prices && !found; i++) {
        const sim_group_price *p = &g->prices[i];
        if (p->kind == key.kind && p->dtype == key.dtype && p->count == key.count && p->root == key.root)
            key = *p, found = 1;
    }
    if (!found) { /* the price is linear in the fraction held: its ends, priced once */
        USP_CHECK(price_collective(w, g, 0, &key.seconds));
        key.hot_seconds = key.seconds;
        if (modelled && w->config.cost.topology.measured.n > 0) /* without tables the links ignore the cache */
            USP_CHECK(price_collective(w, g, 1, &key.hot_seconds));
    }
    if (!found && cacheable) {
        g->prices[g->next_price] = key;
        g->next_price = (g->next_price + 1) % SIM_GROUP_PRICES;
        g->n_prices += g->n_prices < SIM_GROUP_PRICES;
    }
    double held = 0; /* the mean over the members that ran (a parked mirror's rank stands for it: sim/mirrors.c) */
    int ran = 0;
    for (int i = 0; modelled && i < g->size; i++)
        if (w->ranks[g->members[i]].state != RANK_PARKED)
            held += w->ranks[g->members[i]].call_held, ran++;
    held = ran > 0 ? held / ran : 0;
    *seconds = held * key.hot_seconds + (1 - held) * key.seconds;
    return USP_OK;
}

static void complete_collective(sim_world *w, sim_group *g)
{
    double start = 0.0, seconds = 0.0;
    for (int i = 0; i < g->size; i++)
        start = g->posted[i]->t_post > start ? g->posted[i]->t_post : start;
    usp_comm_kind kind = g->posted[0]->kind;
    usp_status s = kind == USP_OP_SPLIT ? complete_split(w, g) : collective_seconds(w, g, &seconds);
    if (s == USP_OK && kind != USP_OP_SPLIT)
        s = w->config.device_memory ? sim_staged_collective(w, g) : sim_move_collective(w, g);
    if (s != USP_OK) {
        usp_strbuf_printf(&w->report, "%s on %s failed: %s\n", usp_comm_kind_name(kind), g->name,
                          usp_error_message());
        sim_abort(w, s);
        return;
    }
    double end = start + seconds;
    for (int i = 0; i < g->size; i++) {
        sim_rank *r = &w->ranks[g->members[i]];
        if (kind != USP_OP_SPLIT && sim_is_mirror(w, r->id)) { /* its first rank's op stood in (sim/mirrors.c) */
            g->posted[i] = NULL;
            continue;
        }
        r->op->t_start = start;
        r->op->t_end = end;
        finish_op(r);
        g->posted[i] = NULL;
    }
    g->n_posted = 0;
}

/* --- matching ------------------------------------------------------------ */

/* Why two members' k-th collectives are not one collective, or NULL. */
static const char *collective_difference(const usp_comm_op *a, int ia, const usp_comm_op *b, int ib)
{
    if (a->kind != b->kind)
        return "different ops";
    if (a->kind == USP_OP_SPLIT || a->kind == USP_OP_BARRIER)
        return NULL;
    if (a->dtype != b->dtype)
        return "different dtypes";
    if (a->kind == USP_OP_ALL_TO_ALL_V) {
        if (a->send_counts[ib] != b->recv_counts[ia])
            return "all_to_all_v counts disagree: what the first sends the second does not expect";
        if (b->send_counts[ia] != a->recv_counts[ib])
            return "all_to_all_v counts disagree: what the second sends the first does not expect";
        return NULL;
    }
    if (a->count != b->count)
        return "different counts";
    if ((a->kind == USP_OP_ALL_REDUCE || a->kind == USP_OP_REDUCE_SCATTER) && a->reduce != b->reduce)
        return "different reduce ops";
    if (a->kind == USP_OP_BROADCAST && a->root != b->root)
        return "different roots";
    return NULL;
}

/* Checks r's collective against those posted before it on the group. The
 * posted ones agree with each other (each was checked when it came), so for
 * every kind but all_to_all_v the first of them (lowest index) stands for
 * all: the one the pairwise scan would name, at O(1) per arrival rather than
 * O(n) (O(n^2) a collective: 16M checks at every world collective of W = 4096).
 * all_to_all_v's counts are pairwise and are checked against every member. */
static void post_collective(sim_world *w, sim_rank *r, sim_comm *sc)
{
    sim_group *g = sc->group;
    g->collectives[sc->local]++;
    int pairwise = r->op->kind == USP_OP_ALL_TO_ALL_V;
    int from = pairwise ? 0 : g->first_posted, to = pairwise ? g->size : g->n_posted > 0 ? from + 1 : 0;
    for (int j = from; j < to; j++) {
        if (!g->posted[j] && j != sc->local)
            continue;
        const usp_comm_op *other = j == sc->local ? r->op : g->posted[j]; /* itself: its own counts */
        const char *why = collective_difference(other, j, r->op, sc->local);
        w->match_checks++;
        if (why) {
            sim_report_mismatch(w, g, &w->ranks[g->members[j]], r, why);
            sim_abort(w, USP_ERR_COLLECTIVE);
            return;
        }
    }
    g->posted[sc->local] = r->op;
    if (g->n_posted == 0 || sc->local < g->first_posted)
        g->first_posted = sc->local;
    g->n_posted += 1 + sim_mirrors_post(w, g, sc->local, r->op);
    if (g->n_posted == g->size)
        complete_collective(w, g);
}

/* The group-local source of a receive posted by `r`, or -1. */
static int recv_source(const sim_rank *r)
{
    return r->op->kind == USP_OP_RECV ? r->op->peer : r->op->recv_peer;
}

/* Matches sender's send with receiver's receive when both are posted on `g`. */
static void try_transfer(sim_world *w, sim_group *g, sim_rank *sender, sim_rank *receiver)
{
    if (sender->state != RANK_BLOCKED || receiver->state != RANK_BLOCKED || !sender->send_pending ||
        !receiver->recv_pending || sender->op_comm->group != g || receiver->op_comm->group != g ||
        sender->op->peer != receiver->op_comm->local || recv_source(receiver) != sender->op_comm->local)
        return;
    const usp_comm_op *s = sender->op, *d = receiver->op;
    const char *why = s->dtype != d->dtype ? "send and receive dtypes differ"
                      : s->count != d->recv_count ? "send and receive counts differ" : NULL;
    if (why) {
        sim_report_mismatch(w, g, sender, receiver, why);
        sim_abort(w, USP_ERR_COLLECTIVE);
        return;
    }
    usp_status st = w->config.device_memory ? sim_staged_p2p(w, sender, receiver) : sim_move_p2p(w, sender, receiver);
    if (st != USP_OK) {
        usp_strbuf_printf(&w->report, "transfer on %s failed: %s\n", g->name, usp_error_message());
        sim_abort(w, st);
        return;
    }
    double start = s->t_post > d->t_post ? s->t_post : d->t_post;
    /* The flows move in time order, up to the clock of the earliest ready rank's default stream (sim/world.c);
     * a call posted on a stream whose clock is behind that starts when the flows are: an approximation
     * (sim/virtual_streams.h), never needed by the ring, which posts at its compute stream's time. */
    double flows_now = sim_p2p_flows_now(w->p2p);
    start = start > flows_now ? start : flows_now;
    uint64_t bytes = s->count * usp_dtype_size(s->dtype);
    st = sim_p2p_flows_submit(w->p2p, start, sender->id, receiver->id, bytes);
    if (st == USP_OK) /* the mirrors' copies of the transfer share the links with it (sim/mirrors.c) */
        st = sim_mirrors_submit(w, start, sender->id, receiver->id, bytes);
    if (st != USP_OK) {
        usp_strbuf_printf(&w->report, "transfer on %s failed: %s\n", g->name, usp_error_message());
        sim_abort(w, st);
        return;
    }
    sender->send_pending = receiver->recv_pending = 0;
    sim_rank *both[2] = {sender, receiver};
    for (int i = 0; i < 2; i++) {
        usp_comm_op *op = both[i]->op;
        op->t_start = start > op->t_start ? start : op->t_start;
        both[i]->in_flight++;
    }
}

/* One part of r's call (its send or its receive) has arrived at t_end. */
static void transfer_part_done(sim_rank *r, double t_end, void (*woke)(void *ctx, int rank), void *ctx)
{
    usp_comm_op *op = r->op;
    op->t_end = t_end > op->t_end ? t_end : op->t_end;
    if (--r->in_flight == 0 && !r->send_pending && !r->recv_pending) {
        finish_op(r);
        woke(ctx, r->id);
    }
}

typedef struct transfer_done_ctx {
    sim_world *w;
    void (*woke)(void *ctx, int rank);
    void *woke_ctx;
} transfer_done_ctx;

static void transfer_done(void *ctx, int src, int dst, double t_end)
{
    transfer_done_ctx *c = ctx;
    if (sim_mirrors_flow_done(c->w, src, dst, t_end))
        return;
    transfer_part_done(&c->w->ranks[src], t_end, c->woke, c->woke_ctx);
    transfer_part_done(&c->w->ranks[dst], t_end, c->woke, c->woke_ctx);
}

usp_status sim_transfers_advance(sim_world *w, double t, void (*woke)(void *ctx, int rank), void *ctx)
{
    transfer_done_ctx c = {w, woke, ctx};
    USP_CHECK(sim_p2p_flows_advance(w->p2p, t, transfer_done, &c));
    if (w->mirrors_failed) /* found while the flows moved: the scheduler aborts the run */
        return usp_error(USP_ERR_RUNTIME, "the mirrors broke their symmetry");
    return USP_OK;
}

static void post_p2p(sim_world *w, sim_rank *r, sim_comm *sc)
{
    sim_group *g = sc->group;
    usp_comm_kind kind = r->op->kind;
    r->send_pending = kind == USP_OP_SEND || kind == USP_OP_SENDRECV;
    r->recv_pending = kind == USP_OP_RECV || kind == USP_OP_SENDRECV;
    r->op->t_start = r->op->t_end = r->op->t_post;
    if (r->send_pending)
        try_transfer(w, g, r, &w->ranks[g->members[r->op->peer]]);
    if (r->recv_pending && w->abort_status == USP_OK)
        try_transfer(w, g, &w->ranks[g->members[recv_source(r)]], r);
}

/* Tells r's backend what the call reads and writes on its stream (usp_backend_note_access). */
static usp_status note_access(sim_rank *r, const sim_comm *sc, const usp_comm_op *op)
{
    size_t send, recv;
    sim_buffer_extents(op, sc->local, sc->group->size, &send, &recv);
    const usp_access a[2] = {{op->send, send, 0}, {op->recv, recv, 1}};
    return usp_backend_note_access(r->backend, op->stream, usp_comm_kind_name(op->kind), a, 2);
}

/* The call's buffers, as its rank's cache model sees them: the fraction it held, then they are the most recent. */
static double touch_cache(sim_rank *r, const sim_comm *sc, const usp_comm_op *op)
{
    size_t send, recv;
    sim_buffer_extents(op, sc->local, sc->group->size, &send, &recv);
    const usp_range touched[2] = {{op->send, op->send ? send : 0}, {op->recv, op->recv ? recv : 0}};
    return sim_cache_touch(r->cache, touched, 2);
}

/* Posts the call and yields until it is complete or the run is aborted. */
static usp_status post_and_wait(sim_comm *sc, usp_comm_op *op)
{
    sim_world *w = sc->world;
    sim_rank *r = w->current;
    /* The call runs at once here, in its stream's order on a real backend: the work queued before it
     * on that stream (on an asynchronous backend) must have run, so that the send buffer holds its data.
     * Virtual streams complete every op at once: there, running the queue would only join the clocks.
     * Not a host wait of the program: a device-side collective (NCCL) has none. What the call reads
     * and writes is checked in the stream's order where the backend checks it (lazy). */
    if (op->kind != USP_OP_SPLIT && !r->virtual_streams) {
        USP_CHECK(usp_backend_run_queued(r->backend, op->stream));
        USP_CHECK(note_access(r, sc, op));
    }
    if (op->kind != USP_OP_SPLIT && r->cache) /* the call reads its send buffer and writes its recv buffer */
        r->call_held = touch_cache(r, sc, op);
    op->issued_on = sc->handle;
    op->t_post = *sim_lane_clock(r, sim_stream_lane(r, op->stream));
    r->op = op;
    r->op_comm = sc;
    r->op_seq = ++sc->group->calls[sc->local];
    sim_sched_note_call(r, sc->group, sc->local, op, r->op_seq, sim_stream_lane(r, op->stream));
    r->state = RANK_BLOCKED;
    r->wake = USP_OK;
    if (is_collective(op->kind))
        post_collective(w, r, sc);
    else
        post_p2p(w, r, sc);
    sim_fiber_yield(r->fiber);
    usp_status wake = r->wake;
    r->op = NULL;
    r->send_pending = r->recv_pending = r->in_flight = 0;
    if (wake != USP_OK)
        return usp_error(wake, "%s on %s at %s:%d did not complete: %s", usp_comm_kind_name(op->kind),
                         sc->group->name, op->site.file, op->site.line,
                         w->abort_reason ? w->abort_reason : "the run was aborted");
    return USP_OK;
}

static usp_status sim_comm_issue(void *ctx, usp_comm_op *op)
{
    sim_comm *sc = ctx;
    sim_world *w = sc->world;
    sim_rank *r = w->current;
    USP_ASSERT(r && r->id == sc->group->members[sc->local],
               "rank %d used a handle of rank %d: ranks share no state", r ? r->id : -1,
               sc->group->members[sc->local]);
    op->issued_on = sc->handle;
    op->t_post = op->t_start = op->t_end = *sim_lane_clock(r, sim_stream_lane(r, op->stream));
    if (w->abort_status != USP_OK)
        return usp_error(w->abort_status, "%s on %s at %s:%d: the run was aborted: %s",
                         usp_comm_kind_name(op->kind), sc->group->name, op->site.file, op->site.line,
                         w->abort_reason ? w->abort_reason : "the run was aborted");
    int handled;
    usp_status s = sim_mirrors_intercept(w, r, sc, op, &handled);
    return handled ? s : post_and_wait(sc, op);
}

const usp_comm_i sim_comm_iface = {
    .api_version = USP_COMM_API_VERSION,
    .name = "sim",
    .issue = sim_comm_issue,
    .destroy = sim_comm_destroy,
};
