/* Reports of a stalled run: deadlocks, collective mismatches and crashed
 * ranks, with every rank's state and the chain of waits, e.g.
 *   rank 2 waits in all_to_all #5 on ulysses[0] (core/x.c:88) for rank 3
 *   -> rank 3 waits in all_reduce #5 on dp[1] (core/y.c:40) for rank 1 -> ... */
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

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
}

/* World ranks `r` waits for: the members missing from its collective, or the
 * peers of its unmatched transfer parts. Returns how many (at most `max`). */
static int waits_for(const sim_world *w, const sim_rank *r, int *out, int max)
{
    const sim_group *g = r->op_comm->group;
    int n = 0;
    if (r->op->kind != USP_OP_SEND && r->op->kind != USP_OP_RECV && r->op->kind != USP_OP_SENDRECV) {
        for (int j = 0; j < g->size && n < max; j++)
            if (!g->posted[j])
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

usp_status sim_report_stall(sim_world *w)
{
    int first = -1, crashed_wait = 0;
    for (int i = 0; i < w->n; i++) {
        const sim_rank *r = &w->ranks[i];
        if (r->state != RANK_BLOCKED)
            continue;
        if (first < 0)
            first = i;
        int who[256], n = waits_for(w, r, who, 256);
        for (int k = 0; k < n; k++)
            crashed_wait |= w->ranks[who[k]].crash.crashed;
    }
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
    usp_strbuf_printf(&w->report, "rank failure: ");
    for (int i = 0; i < w->n; i++)
        if (w->ranks[i].crash.crashed) {
            usp_strbuf_printf(&w->report, "rank %d ", i);
            describe_crash(&w->report, &w->ranks[i]);
            usp_strbuf_printf(&w->report, "\n");
        }
    describe_ranks(w);
}
