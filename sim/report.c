/* Reports of a stalled run: deadlocks, collective mismatches and crashed
 * ranks, with every rank's state and the chain of waits, e.g.
 *   rank 2 waits in all_to_all #5 on ulysses[0] (core/x.c:88) for rank 3
 *   -> rank 3 waits in all_reduce #5 on dp[1] (core/y.c:40) for rank 1 -> ...
 * The same state is kept as a structured wait-for graph (sim_world_wait_graph)
 * that viz draws: the text and the picture come from one snapshot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

_Static_assert(sizeof ((sim_wait_rank *)0)->group >= USP_COMM_NAME_MAX, "a group name fits a wait-graph rank");

void sim_abort(sim_world *w, usp_status status)
{
    if (w->abort_status == USP_OK) {
        w->abort_status = status;
        const char *text = usp_strbuf_text(&w->report);
        size_t n = strcspn(text, "\n");
        if (n >= sizeof w->abort_reason)
            n = sizeof w->abort_reason - 1;
        memcpy(w->abort_reason, text, n);
        w->abort_reason[n] = '\0';
    }
    for (int i = 0; i < w->n; i++) {
        sim_rank *r = &w->ranks[i];
        if (r->state == RANK_BLOCKED) {
            r->wake = status;
            r->state = RANK_READY;
        }
    }
    for (int g = 0; g < w->n_groups; g++) {
        memset(w->groups[g]->posted, 0, (size_t)w->groups[g]->size * sizeof *w->groups[g]->posted);
        w->groups[g]->n_posted = 0;
    }
    sim_p2p_flows_clear(w->p2p); /* their ranks were woken above: nothing will complete them */
}

/* World ranks `r` waits for: the members missing from its collective, or the
 * peers of its unmatched transfer parts. Returns how many (at most `max`). */
static int waits_for(const sim_world *w, const sim_rank *r, int *out, int max)
{
    const sim_group *g = r->op_comm->group;
    int n = 0;
    if (r->op->kind != USP_OP_SEND && r->op->kind != USP_OP_RECV && r->op->kind != USP_OP_SENDRECV) {
        for (int j = 0; j < g->size && n < max; j++)
            if (!g->posted[j] && g->members[j] != r->id) /* a mismatching rank is not posted, nor waiting for itself */
                out[n++] = g->members[j];
        return n;
    }
    (void)w;
    if (r->send_pending && n < max)
        out[n++] = g->members[r->op->peer];
    if (r->recv_pending && n < max) {
        int src = g->members[r->op->kind == USP_OP_RECV ? r->op->peer : r->op->recv_peer];
        if (n == 0 || out[0] != src)
            out[n++] = src;
    }
    return n;
}

/* Index of world rank `id` in `g`, or -1. */
static int member_index(const sim_group *g, int id)
{
    for (int j = 0; j < g->size; j++)
        if (g->members[j] == id)
            return j;
    return -1;
}

/* Calls rank `id` issued on `g`. */
static uint64_t calls_on(const sim_group *g, int id)
{
    int j = member_index(g, id);
    return j < 0 ? 0 : g->calls[j];
}

/* "all_to_all #5 on ulysses[0] (core/x.c:88)" for the call rank r is blocked in. */
static void describe_blocked(usp_strbuf *b, const sim_rank *r)
{
    usp_strbuf_printf(b, "%s #%llu on %s (%s:%d)", usp_comm_kind_name(r->op->kind),
                      (unsigned long long)r->op_seq, r->op_comm->group->name, r->op->site.file,
                      r->op->site.line);
}

static void describe_crash(usp_strbuf *b, const sim_rank *r)
{
    usp_strbuf_printf(b, "crashed (injected) at its call %llu: %s #%llu on %s (%s:%d)",
                      (unsigned long long)r->crash.call, usp_comm_kind_name(r->crash.kind),
                      (unsigned long long)r->crash.seq, r->crash.group->name, r->crash.site.file,
                      r->crash.site.line);
}

/* One line per rank, after the faults that were injected. */
static void describe_ranks(sim_world *w)
{
    usp_strbuf *b = &w->report;
    if (w->injected.len)
        usp_strbuf_printf(b, "injected faults:\n%s", usp_strbuf_text(&w->injected));
    usp_strbuf_printf(b, "rank states:\n");
    for (int i = 0; i < w->n; i++) {
        const sim_rank *r = &w->ranks[i];
        usp_strbuf_printf(b, "  rank %d: ", i);
        if (r->state == RANK_BLOCKED) {
            usp_strbuf_printf(b, "blocked in ");
            describe_blocked(b, r);
            usp_strbuf_printf(b, " ");
            sim_describe_op(b, r->op);
            int who[8], n = waits_for(w, r, who, 8);
            for (int k = 0; k < n; k++)
                usp_strbuf_printf(b, "%s%d", k == 0 ? ", waiting for rank " : ", ", who[k]);
        } else if (r->crash.crashed) {
            describe_crash(b, r);
        } else if (r->state == RANK_DONE) {
            usp_strbuf_printf(b, "exited (%s) after %llu calls", usp_status_name(r->result),
                              (unsigned long long)r->calls_any);
            if (r->result != USP_OK)
                usp_strbuf_printf(b, ": %.200s", r->error.message);
        } else {
            usp_strbuf_printf(b, "runnable");
        }
        usp_strbuf_printf(b, " [t=%.6f s]\n", r->clock);
    }
}

/* Follows the first wait of each rank from `start` until a rank repeats or is not blocked. */
static void describe_chain(sim_world *w, int start)
{
    usp_strbuf *b = &w->report;
    char *seen = calloc((size_t)w->n, 1);
    const sim_group *via = NULL;
    usp_strbuf_printf(b, "wait chain: ");
    for (int id = start;;) {
        const sim_rank *r = &w->ranks[id];
        if (seen && seen[id]) {
            usp_strbuf_printf(b, "a cycle\n");
            break;
        }
        if (seen)
            seen[id] = 1;
        if (r->state != RANK_BLOCKED) {
            if (r->crash.crashed) {
                usp_strbuf_printf(b, "rank %d ", id);
                describe_crash(b, r);
            } else {
                usp_strbuf_printf(b, "rank %d exited after %llu calls on %s", id,
                                  (unsigned long long)(via ? calls_on(via, id) : r->calls_any),
                                  via ? via->name : "its groups");
            }
            usp_strbuf_printf(b, "\n");
            break;
        }
        int who[1];
        usp_strbuf_printf(b, "rank %d waits in ", id);
        describe_blocked(b, r);
        if (waits_for(w, r, who, 1) == 0) {
            usp_strbuf_printf(b, "\n");
            break;
        }
        usp_strbuf_printf(b, " for rank %d; ", who[0]);
        via = r->op_comm->group;
        id = who[0];
    }
    free(seen);
}

/* Keeps every rank's state as the first report sees it: the abort that follows
 * clears the groups' posted slots, and the ranks unwind. `a` and `b` are the
 * two ranks of a mismatch (NULL otherwise). */
static void snapshot(sim_world *w, sim_report_kind kind, const sim_rank *a, const sim_rank *b)
{
    if (w->snapshot_kind != SIM_REPORT_NONE)
        return;
    w->snapshot_kind = kind;
    for (int i = 0; i < w->n; i++) {
        sim_rank *r = &w->ranks[i];
        sim_rank_snapshot *s = &r->snap;
        *s = (sim_rank_snapshot){.state = r->state, .crashed = r->crash.crashed, .op = -1, .send_to = -1,
                                 .recv_from = -1, .mismatched = r == a || r == b, .calls = r->calls_any,
                                 .result = r->result, .clock = r->clock};
        if (r->state == RANK_BLOCKED && r->op) {
            const sim_group *g = r->op_comm->group;
            s->op = (int)r->op->kind;
            s->group = g;
            s->seq = r->op_seq;
            s->site = r->op->site;
            s->posted = g->posted[r->op_comm->local] == r->op;
            if (r->send_pending)
                s->send_to = g->members[r->op->peer];
            if (r->recv_pending)
                s->recv_from = g->members[r->op->kind == USP_OP_RECV ? r->op->peer : r->op->recv_peer];
            usp_strbuf call = {0};
            sim_describe_op(&call, r->op);
            snprintf(s->call, sizeof s->call, "%s", usp_strbuf_text(&call));
            usp_strbuf_free(&call);
        } else if (r->crash.crashed) {
            s->op = (int)r->crash.kind;
            s->group = r->crash.group;
            s->seq = r->crash.seq;
            s->site = r->crash.site;
        }
    }
}

usp_status sim_report_stall(sim_world *w)
{
    int first = -1, crashed_wait = 0, failed = -1;
    for (int i = 0; i < w->n; i++) {
        const sim_rank *r = &w->ranks[i];
        if (r->state != RANK_BLOCKED)
            continue;
        if (first < 0)
            first = i;
        int who[256], n = waits_for(w, r, who, 256);
        for (int k = 0; k < n; k++) {
            crashed_wait |= w->ranks[who[k]].crash.crashed;
            if (failed < 0 && w->ranks[who[k]].state == RANK_DONE && w->ranks[who[k]].result != USP_OK)
                failed = who[k];
        }
    }
    if (failed >= 0 && !crashed_wait) { /* the cause is that rank's own error: say it first, with its status */
        const sim_rank *f = &w->ranks[failed];
        snapshot(w, SIM_REPORT_RANK_FAILURE, NULL, NULL);
        usp_strbuf_printf(&w->report, "rank %d failed: %s\nthe other ranks wait for it:\n", failed, f->error.message);
        describe_chain(w, first);
        describe_ranks(w);
        return f->result;
    }
    snapshot(w, crashed_wait ? SIM_REPORT_RANK_FAILURE : SIM_REPORT_DEADLOCK, NULL, NULL);
    usp_strbuf *b = &w->report;
    if (crashed_wait)
        usp_strbuf_printf(b, "rank failure: ranks wait for a rank that crashed\n");
    else
        usp_strbuf_printf(b, "deadlock: no rank can run and %s blocked\n",
                          first >= 0 ? "some are" : "none is");
    describe_chain(w, first);
    describe_ranks(w);
    return crashed_wait ? USP_ERR_RANK_FAILED : USP_ERR_COLLECTIVE;
}

void sim_report_mismatch(sim_world *w, const sim_group *g, const sim_rank *a, const sim_rank *b,
                         const char *what)
{
    snapshot(w, SIM_REPORT_MISMATCH, a, b);
    usp_strbuf *t = &w->report;
    int collective = a->op->kind != USP_OP_SEND && a->op->kind != USP_OP_RECV && a->op->kind != USP_OP_SENDRECV;
    usp_strbuf_printf(t, "collective mismatch on %s: %s\n", g->name, what);
    const sim_rank *both[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        const sim_rank *r = both[k];
        usp_strbuf_printf(t, "  rank %d calls ", r->id);
        sim_describe_op(t, r->op);
        usp_strbuf_printf(t, " as its call #%llu", (unsigned long long)r->op_seq);
        int j = member_index(g, r->id);
        if (collective && j >= 0)
            usp_strbuf_printf(t, " (collective #%llu)", (unsigned long long)g->collectives[j]);
        usp_strbuf_printf(t, " on %s at %s:%d\n", g->name, r->op->site.file, r->op->site.line);
    }
    describe_ranks(w);
}

void sim_report_crash(sim_world *w)
{
    snapshot(w, SIM_REPORT_RANK_FAILURE, NULL, NULL);
    usp_strbuf_printf(&w->report, "rank failure: ");
    for (int i = 0; i < w->n; i++)
        if (w->ranks[i].crash.crashed) {
            usp_strbuf_printf(&w->report, "rank %d ", i);
            describe_crash(&w->report, &w->ranks[i]);
            usp_strbuf_printf(&w->report, "\n");
        }
    describe_ranks(w);
}

/* --- the wait-for graph ---------------------------------------------------- */

static int is_p2p(int op) { return op == USP_OP_SEND || op == USP_OP_RECV || op == USP_OP_SENDRECV; }

/* The ranks `id` waited for in the snapshot, in the order the text report
 * names them (group order; send before receive); `out` has room for w->n. */
static int snapshot_waits(const sim_world *w, int id, int *out)
{
    const sim_rank_snapshot *s = &w->ranks[id].snap;
    int n = 0;
    if (s->state != RANK_BLOCKED || !s->group)
        return 0;
    if (!is_p2p(s->op)) { /* every member that has not posted this collective */
        for (int j = 0; j < s->group->size; j++) {
            int m = s->group->members[j];
            const sim_rank_snapshot *o = &w->ranks[m].snap;
            if (m != id && !(o->state == RANK_BLOCKED && o->group == s->group && o->posted))
                out[n++] = m;
        }
        return n;
    }
    if (s->send_to >= 0)
        out[n++] = s->send_to;
    if (s->recv_from >= 0 && (n == 0 || out[0] != s->recv_from))
        out[n++] = s->recv_from;
    return n;
}

static int edge_order(const void *pa, const void *pb)
{
    const sim_wait_edge *a = pa, *b = pb;
    return a->from != b->from ? (a->from > b->from) - (a->from < b->from) : (a->to > b->to) - (a->to < b->to);
}

static void highlight_edge(sim_wait_graph *g, int from, int to)
{
    sim_wait_edge key = {.from = from, .to = to};
    sim_wait_edge *e = bsearch(&key, g->edges, g->n_edges, sizeof *g->edges, edge_order);
    if (e)
        e->highlight = 1;
}

/* Marks the report's wait chain: the first wait of each rank from the first
 * blocked one (as describe_chain prints it), until a rank repeats (the cycle)
 * or is not blocked (the missing participant). */
static void mark_chain(const sim_world *w, sim_wait_graph *g, const int *first_wait, int *path, int *at)
{
    int start = -1;
    for (int i = 0; i < w->n && start < 0; i++)
        if (w->ranks[i].snap.state == RANK_BLOCKED)
            start = i;
    for (int i = 0; i < w->n; i++)
        at[i] = -1;
    int len = 0;
    for (int id = start; id >= 0;) {
        if (at[id] >= 0) { /* the cycle is path[at[id]..len) and back to id */
            for (int k = at[id]; k < len; k++) {
                g->ranks[path[k]].in_cycle = 1;
                highlight_edge(g, path[k], k + 1 < len ? path[k + 1] : id);
            }
            return;
        }
        at[id] = len;
        path[len++] = id;
        if (w->ranks[id].snap.state != RANK_BLOCKED) { /* everyone on the way waits for a rank that is gone */
            g->ranks[id].missing = 1;
            for (int k = 0; k + 1 < len; k++)
                highlight_edge(g, path[k], path[k + 1]);
            return;
        }
        id = first_wait[id];
    }
}

usp_status sim_world_wait_graph(const sim_world *w, sim_wait_graph *out)
{
    *out = (sim_wait_graph){.kind = w->snapshot_kind};
    if (w->snapshot_kind == SIM_REPORT_NONE)
        return USP_OK;
    const char *text = usp_strbuf_text(&w->report);
    snprintf(out->title, sizeof out->title, "%.*s", (int)strcspn(text, "\n"), text);
    const char *faults = usp_strbuf_text(&w->injected); /* "  rank 2: ...\n" per fault: keep the lines, not the indent */
    for (size_t at = 0; *faults && at + 1 < sizeof out->injected;) {
        faults += strspn(faults, " ");
        size_t n = strcspn(faults, "\n");
        at += (size_t)snprintf(out->injected + at, sizeof out->injected - at, "%s%.*s", at ? "\n" : "", (int)n, faults);
        faults += n + (faults[n] == '\n');
    }
    int n = w->n, *scratch = NULL;
    size_t cap = 0;
    usp_status s;
    USP_CHECK_GOTO(usp_calloc((void **)&out->ranks, (size_t)n, sizeof *out->ranks, "the wait-for graph"), s, fail);
    USP_CHECK_GOTO(usp_calloc((void **)&scratch, 4 * (size_t)n, sizeof *scratch, "the wait-for graph"), s, fail);
    int *waits = scratch, *first_wait = scratch + n, *path = scratch + 2 * n, *at = scratch + 3 * n;
    out->n_ranks = n;
    for (int i = 0; i < n; i++) {
        const sim_rank_snapshot *snap = &w->ranks[i].snap;
        sim_wait_rank *r = &out->ranks[i];
        r->state = snap->crashed ? SIM_WAIT_CRASHED
                   : snap->state == RANK_BLOCKED ? SIM_WAIT_BLOCKED
                   : snap->state == RANK_DONE ? SIM_WAIT_EXITED : SIM_WAIT_RUNNABLE;
        r->op = snap->op;
        snprintf(r->group, sizeof r->group, "%s", snap->group ? snap->group->name : "");
        r->seq = snap->seq;
        r->file = snap->group ? snap->site.file : NULL;
        r->line = snap->group ? snap->site.line : 0;
        snprintf(r->call, sizeof r->call, "%s", snap->call);
        r->calls = snap->calls;
        r->result = snap->result;
        r->clock = snap->clock;
        r->mismatched = snap->mismatched;
        int k = snapshot_waits(w, i, waits);
        first_wait[i] = k > 0 ? waits[0] : -1;
        if (out->n_edges + (size_t)k > cap) {
            size_t grown_cap = cap ? 2 * cap : 64;
            while (grown_cap < out->n_edges + (size_t)k)
                grown_cap *= 2;
            sim_wait_edge *grown = realloc(out->edges, grown_cap * sizeof *grown);
            if (!grown) {
                s = usp_error(USP_ERR_RUNTIME, "out of memory building the wait-for graph (%zu edges)",
                              out->n_edges + (size_t)k);
                goto fail;
            }
            out->edges = grown;
            cap = grown_cap;
        }
        for (int j = 0; j < k; j++)
            out->edges[out->n_edges++] = (sim_wait_edge){.from = i, .to = waits[j]};
    }
    if (out->n_edges)
        qsort(out->edges, out->n_edges, sizeof *out->edges, edge_order);
    if (out->kind != SIM_REPORT_MISMATCH)
        mark_chain(w, out, first_wait, path, at);
    free(scratch);
    return USP_OK;
fail:
    free(scratch);
    sim_wait_graph_free(out);
    return s;
}

void sim_wait_graph_free(sim_wait_graph *g)
{
    free(g->ranks);
    free(g->edges);
    *g = (sim_wait_graph){0};
}
