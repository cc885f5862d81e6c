/* Point-to-point transfers sharing links over virtual time (see p2p_flows.h).
 *
 * A flow moves at a constant rate between events, so its bytes left are kept
 * as (bytes at t_upd, rate) and brought up to date only when its rate changes.
 * Its predicted finish, t_upd + bytes / rate, sits in a heap; a re-sharing
 * bumps the flow's version and pushes a new entry, and entries of an older
 * version are skipped when they surface. */
#include "sim/p2p_flows.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/flow_model.h"

typedef enum flow_state { FLOW_FREE, FLOW_QUEUED, FLOW_MOVING } flow_state;

typedef struct p2p_flow {
    flow_state state;
    int src, dst;
    int n_links, links[SIM_ROUTE_MAX];
    double bytes;      /* queued: to move; moving: left at t_upd */
    double rate;       /* bytes/s since t_upd (0 until the first sharing) */
    double t_upd;
    double latency;    /* base + route latency, added when the last byte leaves the links */
    unsigned version;  /* finish entries of older versions are stale; never reset, as slots are reused */
    unsigned seen;     /* the epoch of the re-sharing that collected it */
    int next_free;
} p2p_flow;

/* The moving flows that cross one link of the topology. */
typedef struct link_use {
    int *flows;
    int n, cap;
    double capacity;   /* line rate x efficiency, bytes/s */
    unsigned seen;     /* re-sharing epoch */
    int dense;         /* its index in the flow set of that re-sharing */
    int dirty;         /* on the dirty list */
} link_use;

typedef struct event {
    double t;
    uint64_t tie;      /* starts: submission order; finishes: the flow slot */
    int flow;
    unsigned version;
} event;

typedef struct event_heap {
    event *a;
    int n, cap;
} event_heap;

struct sim_p2p_flows {
    sim_topology topology;
    double now;
    p2p_flow *flows;
    int cap_flows, free_head, pending;
    link_use *links;
    int n_links;
    event_heap starts, finishes;
    uint64_t submitted;
    int *dirty;               /* links whose flows changed since the last sharing */
    int n_dirty, cap_dirty;
    unsigned epoch;
    /* re-sharing scratch: the collected flows and their flow set */
    int *comp, *path_start, *path;
    double *bytes, *capacity, *rate;
    int cap_comp, cap_dense, cap_rate, cap_bytes, cap_path_start, cap_path;
};

/* Makes room for `need` items of `size` bytes in *array (capacity *cap, doubled). */
static usp_status reserve(void **array, int *cap, int need, size_t size, const char *what)
{
    if (need <= *cap)
        return USP_OK;
    int n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *grown = realloc(*array, (size_t)n * size);
    if (!grown)
        return usp_error(USP_ERR_RUNTIME, "out of memory for %s", what);
    *array = grown;
    *cap = n;
    return USP_OK;
}

/* --- event heaps, ordered by (t, tie) -------------------------------------- */

static int event_before(const event *a, const event *b) { return a->t < b->t || (a->t == b->t && a->tie < b->tie); }

static usp_status heap_push(event_heap *h, event e)
{
    USP_CHECK(reserve((void **)&h->a, &h->cap, h->n + 1, sizeof *h->a, "the transfer events"));
    int at = h->n++;
    while (at > 0 && event_before(&e, &h->a[(at - 1) / 2])) {
        h->a[at] = h->a[(at - 1) / 2];
        at = (at - 1) / 2;
    }
    h->a[at] = e;
    return USP_OK;
}

static void heap_pop(event_heap *h)
{
    event last = h->a[--h->n];
    int at = 0;
    for (;;) {
        int child = 2 * at + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && event_before(&h->a[child + 1], &h->a[child]))
            child++;
        if (!event_before(&h->a[child], &last))
            break;
        h->a[at] = h->a[child];
        at = child;
    }
    if (h->n > 0)
        h->a[at] = last;
}

/* The earliest finish that is still current (stale entries are dropped), or NULL. */
static const event *next_finish(sim_p2p_flows *f)
{
    while (f->finishes.n > 0) {
        const event *e = &f->finishes.a[0];
        const p2p_flow *fl = &f->flows[e->flow];
        if (fl->state == FLOW_MOVING && fl->version == e->version)
            return e;
        heap_pop(&f->finishes);
    }
    return NULL;
}

/* --- flows and links --------------------------------------------------------- */

usp_status sim_p2p_flows_create(const sim_topology *t, sim_p2p_flows **out)
{
    sim_p2p_flows *f;
    USP_CHECK(usp_calloc((void **)&f, 1, sizeof *f, "the transfers in flight"));
    f->topology = *t;
    f->free_head = -1;
    f->n_links = sim_topology_links(t);
    usp_status s = usp_calloc((void **)&f->links, (size_t)f->n_links, sizeof *f->links, "the links' flows");
    if (s != USP_OK) {
        free(f);
        return s;
    }
    for (int l = 0; l < f->n_links; l++) {
        double latency;
        sim_topology_link(t, l, &f->links[l].capacity, &latency);
    }
    *out = f;
    return USP_OK;
}

void sim_p2p_flows_destroy(sim_p2p_flows *f)
{
    if (!f)
        return;
    for (int l = 0; l < f->n_links; l++)
        free(f->links[l].flows);
    free(f->links), free(f->flows), free(f->starts.a), free(f->finishes.a), free(f->dirty);
    free(f->comp), free(f->path_start), free(f->path), free(f->bytes), free(f->capacity), free(f->rate);
    free(f);
}

double sim_p2p_flows_now(const sim_p2p_flows *f) { return f->now; }
int sim_p2p_flows_pending(const sim_p2p_flows *f) { return f->pending; }

static usp_status mark_dirty(sim_p2p_flows *f, int link)
{
    if (f->links[link].dirty)
        return USP_OK;
    USP_CHECK(reserve((void **)&f->dirty, &f->cap_dirty, f->n_dirty + 1, sizeof *f->dirty, "the changed links"));
    f->links[link].dirty = 1;
    f->dirty[f->n_dirty++] = link;
    return USP_OK;
}

static usp_status flow_alloc(sim_p2p_flows *f, int *id)
{
    if (f->free_head < 0) {
        int old = f->cap_flows;
        USP_CHECK(reserve((void **)&f->flows, &f->cap_flows, old + 1, sizeof *f->flows, "the transfers in flight"));
        for (int i = f->cap_flows - 1; i >= old; i--) /* lowest slot first: reuse order is deterministic */
            f->flows[i] = (p2p_flow){.state = FLOW_FREE, .next_free = f->free_head}, f->free_head = i;
    }
    *id = f->free_head;
    f->free_head = f->flows[*id].next_free;
    f->pending++;
    return USP_OK;
}

static void flow_free(sim_p2p_flows *f, int id)
{
    f->flows[id].state = FLOW_FREE;
    f->flows[id].next_free = f->free_head;
    f->free_head = id;
    f->pending--;
}

usp_status sim_p2p_flows_submit(sim_p2p_flows *f, double start, int src, int dst, uint64_t bytes)
{
    USP_ASSERT(start >= f->now, "a transfer starts at %.17g, before the flows' time %.17g", start, f->now);
    int id;
    USP_CHECK(flow_alloc(f, &id));
    p2p_flow *fl = &f->flows[id];
    unsigned version = fl->version;
    *fl = (p2p_flow){.state = FLOW_QUEUED, .src = src, .dst = dst, .bytes = (double)bytes, .version = version};
    fl->n_links = sim_topology_route(&f->topology, src, dst, fl->links);
    fl->latency = f->topology.base_latency + sim_topology_route_latency(&f->topology, fl->links, fl->n_links);
    usp_status s = heap_push(&f->starts, (event){.t = start, .tie = f->submitted++, .flow = id});
    if (s != USP_OK)
        flow_free(f, id);
    return s;
}

/* A queued flow starts moving at f->now: it joins its links' lists. */
static usp_status flow_start(sim_p2p_flows *f, int id)
{
    p2p_flow *fl = &f->flows[id];
    fl->state = FLOW_MOVING, fl->rate = 0.0, fl->t_upd = f->now;
    for (int i = 0; i < fl->n_links; i++) {
        link_use *u = &f->links[fl->links[i]];
        USP_CHECK(reserve((void **)&u->flows, &u->cap, u->n + 1, sizeof *u->flows, "a link's flows"));
        u->flows[u->n++] = id;
        USP_CHECK(mark_dirty(f, fl->links[i]));
    }
    return USP_OK;
}

/* A moving flow leaves its links; the flows left on them are re-shared. */
static usp_status flow_finish(sim_p2p_flows *f, int id)
{
    p2p_flow *fl = &f->flows[id];
    for (int i = 0; i < fl->n_links; i++) {
        link_use *u = &f->links[fl->links[i]];
        for (int k = 0; k < u->n; k++)
            if (u->flows[k] == id) {
                memmove(u->flows + k, u->flows + k + 1, (size_t)(u->n - k - 1) * sizeof *u->flows);
                u->n--;
                break;
            }
        USP_CHECK(mark_dirty(f, fl->links[i]));
    }
    return USP_OK;
}

/* --- re-sharing ---------------------------------------------------------------- */

/* Adds link l (not yet seen in this epoch) to the flow set and its flows to the collection. */
static usp_status collect_link(sim_p2p_flows *f, int l, int *n_comp, int *n_dense)
{
    link_use *u = &f->links[l];
    u->seen = f->epoch;
    u->dense = (*n_dense)++;
    USP_CHECK(reserve((void **)&f->capacity, &f->cap_dense, *n_dense, sizeof *f->capacity, "a link sharing"));
    f->capacity[u->dense] = u->capacity;
    for (int k = 0; k < u->n; k++) {
        p2p_flow *fl = &f->flows[u->flows[k]];
        if (fl->seen == f->epoch)
            continue;
        fl->seen = f->epoch;
        USP_CHECK(reserve((void **)&f->comp, &f->cap_comp, *n_comp + 1, sizeof *f->comp, "a link sharing"));
        f->comp[(*n_comp)++] = u->flows[k];
    }
    return USP_OK;
}

/* The flows connected to a changed link through shared links: max-min sharing
 * decomposes over such components, so nothing else changes rate. */
static usp_status collect_changed(sim_p2p_flows *f, int *n_comp, int *n_dense)
{
    f->epoch++;
    *n_comp = *n_dense = 0;
    for (int d = 0; d < f->n_dirty; d++)
        if (f->links[f->dirty[d]].seen != f->epoch)
            USP_CHECK(collect_link(f, f->dirty[d], n_comp, n_dense));
    for (int c = 0; c < *n_comp; c++) { /* breadth first: *n_comp grows as links are added */
        const p2p_flow *fl = &f->flows[f->comp[c]];
        for (int i = 0; i < fl->n_links; i++)
            if (f->links[fl->links[i]].seen != f->epoch)
                USP_CHECK(collect_link(f, fl->links[i], n_comp, n_dense));
    }
    return USP_OK;
}

/* Rates of the collected flows into f->rate: a flow alone on its links takes
 * the slowest of them; otherwise the flow model shares the links (progressive
 * filling over the collected flows and links). */
static usp_status share_collected(sim_p2p_flows *f, int n_comp, int n_dense)
{
    USP_CHECK(reserve((void **)&f->rate, &f->cap_rate, n_comp, sizeof *f->rate, "a link sharing"));
    if (n_comp == 1) {
        const p2p_flow *fl = &f->flows[f->comp[0]];
        double slowest = INFINITY;
        for (int i = 0; i < fl->n_links; i++)
            slowest = fmin(slowest, f->links[fl->links[i]].capacity);
        f->rate[0] = slowest;
        return USP_OK;
    }
    int entries = 0;
    for (int c = 0; c < n_comp; c++)
        entries += f->flows[f->comp[c]].n_links;
    USP_CHECK(reserve((void **)&f->bytes, &f->cap_bytes, n_comp, sizeof *f->bytes, "a link sharing"));
    USP_CHECK(reserve((void **)&f->path_start, &f->cap_path_start, n_comp + 1, sizeof *f->path_start,
                      "a link sharing"));
    USP_CHECK(reserve((void **)&f->path, &f->cap_path, entries, sizeof *f->path, "a link sharing"));
    f->path_start[0] = 0;
    for (int c = 0, p = 0; c < n_comp; c++) {
        const p2p_flow *fl = &f->flows[f->comp[c]];
        for (int i = 0; i < fl->n_links; i++)
            f->path[p++] = f->links[fl->links[i]].dense;
        f->path_start[c + 1] = p;
        f->bytes[c] = fl->bytes > 0.0 ? fl->bytes : 0.0;
    }
    sim_flow_set set = {.n_flows = n_comp, .bytes = f->bytes, .path_start = f->path_start, .links = f->path,
                        .n_links = n_dense, .capacity = f->capacity};
    return sim_flow_rates(&set, f->rate);
}

/* Re-shares the links of every flow connected to a change since the last
 * sharing; their bytes left are brought to f->now first, at their old rates. */
static usp_status reshare(sim_p2p_flows *f)
{
    int n_comp, n_dense;
    USP_CHECK(collect_changed(f, &n_comp, &n_dense));
    for (int d = 0; d < f->n_dirty; d++)
        f->links[f->dirty[d]].dirty = 0;
    f->n_dirty = 0;
    if (n_comp == 0)
        return USP_OK;
    for (int c = 0; c < n_comp; c++) {
        p2p_flow *fl = &f->flows[f->comp[c]];
        fl->bytes -= fl->rate * (f->now - fl->t_upd);
        fl->t_upd = f->now;
    }
    USP_CHECK(share_collected(f, n_comp, n_dense));
    for (int c = 0; c < n_comp; c++) {
        int id = f->comp[c];
        p2p_flow *fl = &f->flows[id];
        fl->rate = f->rate[c];
        fl->version++;
        /* Bytes that rounding left at or below 0 (or a rate of 0) finish now. */
        double finish = fl->bytes > 0.0 && fl->rate > 0.0 ? f->now + fl->bytes / fl->rate : f->now;
        USP_CHECK(heap_push(&f->finishes, (event){.t = finish, .tie = (uint64_t)id, .flow = id, .version = fl->version}));
    }
    return USP_OK;
}

/* --- events ---------------------------------------------------------------- */

usp_status sim_p2p_flows_next(sim_p2p_flows *f, double horizon, int *has, double *t)
{
    *has = 0;
    double start = f->starts.n > 0 ? f->starts.a[0].t : INFINITY;
    if (start <= f->now) { /* starts at the current time need no sharing to be ordered */
        *has = start <= horizon, *t = start;
        return USP_OK;
    }
    if (horizon <= f->now) /* a moving flow finishes after now: nothing is due by the horizon */
        return USP_OK;
    if (f->n_dirty > 0)
        USP_CHECK(reshare(f));
    const event *e = next_finish(f);
    double finish = e ? e->t : INFINITY;
    *t = start < finish ? start : finish;
    *has = *t <= horizon && *t < INFINITY;
    return USP_OK;
}

usp_status sim_p2p_flows_advance(sim_p2p_flows *f, double t, sim_p2p_done_fn done, void *ctx)
{
    if (t > f->now && f->n_dirty > 0)
        USP_CHECK(reshare(f)); /* the rates that held until t */
    /* Finishes within a relative 1e-9 of the interval happen at t: equal flows
     * that rounding set apart would otherwise cost a re-sharing each. */
    double cutoff = t + 1e-9 * (t - f->now);
    f->now = t > f->now ? t : f->now;
    for (const event *e; (e = next_finish(f)) != NULL && e->t <= cutoff;) {
        int id = e->flow;
        heap_pop(&f->finishes);
        USP_CHECK(flow_finish(f, id));
        p2p_flow fl = f->flows[id];
        flow_free(f, id);
        done(ctx, fl.src, fl.dst, f->now + fl.latency);
    }
    while (f->starts.n > 0 && f->starts.a[0].t <= f->now) {
        int id = f->starts.a[0].flow;
        heap_pop(&f->starts);
        p2p_flow *fl = &f->flows[id];
        if (fl->bytes > 0.0 && fl->n_links > 0) {
            USP_CHECK(flow_start(f, id));
            continue;
        }
        int src = fl->src, dst = fl->dst;
        double end = f->now + fl->latency;
        flow_free(f, id);
        done(ctx, src, dst, end);
    }
    return USP_OK;
}

void sim_p2p_flows_clear(sim_p2p_flows *f)
{
    if (!f)
        return;
    for (int l = 0; l < f->n_links; l++)
        f->links[l].n = 0, f->links[l].dirty = 0;
    f->n_dirty = 0;
    f->starts.n = f->finishes.n = 0;
    f->free_head = -1;
    for (int i = f->cap_flows - 1; i >= 0; i--)
        f->flows[i].state = FLOW_FREE, f->flows[i].next_free = f->free_head, f->free_head = i;
    f->pending = 0;
}
