/* Deadlock, mismatch and rank-failure reports and the wait-for graph, from
 * per-rank records (core/safety/comm_report.h). */
#include "core/safety/comm_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/strbuf.h"

_Static_assert(sizeof ((usp_wait_rank *)0)->group >= USP_COMM_NAME_MAX, "a group name fits a wait-graph rank");

/* Keeps the ranks as the run's first report sees them: the backend's own
 * state moves on (the abort that follows clears it, the ranks unwind). Out of
 * memory, nothing is kept: the run gets no picture, its report is whole. */
static void snapshot(usp_report_snapshot *snap, usp_report_kind kind, const usp_rank_record *ranks, int n,
                     const char *injected, int a, int b)
{
    if (snap->kind != USP_REPORT_NONE)
        return;
    size_t n_waits = 0;
    for (int i = 0; i < n; i++)
        n_waits += (size_t)ranks[i].n_waits;
    usp_rank_record *copy = calloc(n > 0 ? (size_t)n : 1, sizeof *copy);
    usp_rank_wait *waits = malloc((n_waits ? n_waits : 1) * sizeof *waits);
    char *faults = strdup(injected);
    if (!copy || !waits || !faults) {
        free(copy), free(waits), free(faults);
        return;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        copy[i] = ranks[i];
        copy[i].error = NULL;
        copy[i].waits = waits + at;
        if (ranks[i].n_waits)
            memcpy(waits + at, ranks[i].waits, (size_t)ranks[i].n_waits * sizeof *waits);
        at += (size_t)ranks[i].n_waits;
    }
    *snap = (usp_report_snapshot){.kind = kind, .n_ranks = n, .ranks = copy, .waits = waits,
                                  .mismatched = {a, b}, .injected = faults};
}

void usp_report_snapshot_free(usp_report_snapshot *snap)
{
    free(snap->ranks);
    free(snap->waits);
    free(snap->injected);
    *snap = (usp_report_snapshot){0};
}

/* What a report says of a rank that left no flight record (only a postmortem has such ranks). */
#define MISSING_TEXT "no flight record: killed, or never started"

/* "all_to_all #5 on ulysses[0] (core/x.c:88)" for the call a rank is blocked in. */
static void describe_blocked(usp_strbuf *b, const usp_rank_record *r) { usp_comm_fingerprint_name(b, &r->call); }

static void describe_crash(usp_strbuf *b, const usp_rank_record *r)
{
    usp_strbuf_printf(b, "crashed (injected) at its call %llu: ", (unsigned long long)r->crash_call);
    usp_comm_fingerprint_name(b, &r->call);
}

/* One line per rank, after the faults that were injected. */
static void describe_ranks(usp_strbuf *b, const usp_rank_record *ranks, int n, const char *injected)
{
    if (*injected)
        usp_strbuf_printf(b, "injected faults:\n%s", injected);
    usp_strbuf_printf(b, "rank states:\n");
    for (int i = 0; i < n; i++) {
        const usp_rank_record *r = &ranks[i];
        usp_strbuf_printf(b, "  rank %d: ", i);
        if (r->state == USP_RANK_BLOCKED) {
            usp_strbuf_printf(b, "blocked in ");
            describe_blocked(b, r);
            usp_strbuf_printf(b, " ");
            usp_comm_fingerprint_describe(b, &r->call);
            for (int k = 0; k < r->n_waits && k < 8; k++)
                usp_strbuf_printf(b, "%s%d", k == 0 ? ", waiting for rank " : ", ", r->waits[k].rank);
        } else if (r->state == USP_RANK_CRASHED) {
            describe_crash(b, r);
        } else if (r->state == USP_RANK_MISSING) {
            usp_strbuf_printf(b, "%s", MISSING_TEXT);
        } else if (r->state == USP_RANK_UNSEEN) {
            usp_strbuf_printf(b, "not a party to these calls (its state is in its own flight record)");
        } else if (r->state == USP_RANK_EXITED) {
            usp_strbuf_printf(b, "exited (%s) after %llu calls", usp_status_name(r->result),
                              (unsigned long long)r->calls);
            if (r->result != USP_OK)
                usp_strbuf_printf(b, ": %.200s", r->error ? r->error : "");
        } else {
            usp_strbuf_printf(b, "runnable");
        }
        usp_strbuf_printf(b, " [t=%.6f s]\n", r->clock);
    }
}

/* Follows the first wait of each rank from `start` until a rank repeats or is not blocked. */
static void describe_chain(usp_strbuf *b, const usp_rank_record *ranks, int n, int start)
{
    char *seen = calloc((size_t)n, 1);
    const usp_rank_wait *via = NULL; /* how the previous rank waits for this one */
    const char *via_group = NULL;
    usp_strbuf_printf(b, "wait chain: ");
    for (int id = start; id >= 0;) {
        const usp_rank_record *r = &ranks[id];
        if (seen && seen[id]) {
            usp_strbuf_printf(b, "a cycle\n");
            break;
        }
        if (seen)
            seen[id] = 1;
        if (r->state != USP_RANK_BLOCKED) {
            if (r->state == USP_RANK_CRASHED) {
                usp_strbuf_printf(b, "rank %d ", id);
                describe_crash(b, r);
            } else if (r->state == USP_RANK_MISSING) {
                usp_strbuf_printf(b, "rank %d never came (%s)", id, MISSING_TEXT);
            } else {
                usp_strbuf_printf(b, "rank %d exited after %llu calls on %s", id,
                                  (unsigned long long)(via ? via->calls_on_group : r->calls),
                                  via ? via_group : "its groups");
            }
            usp_strbuf_printf(b, "\n");
            break;
        }
        usp_strbuf_printf(b, "rank %d waits in ", id);
        describe_blocked(b, r);
        if (r->n_waits == 0) {
            usp_strbuf_printf(b, "\n");
            break;
        }
        usp_strbuf_printf(b, " for rank %d; ", r->waits[0].rank);
        via = &r->waits[0];
        via_group = r->call.group;
        id = via->rank;
    }
    free(seen);
}

usp_status usp_report_stall(usp_report_snapshot *snap, const usp_rank_record *ranks, int n, const char *injected,
                            usp_strbuf *text)
{
    int first = -1, crashed_wait = 0, missing_wait = 0, failed = -1;
    for (int i = 0; i < n; i++) {
        const usp_rank_record *r = &ranks[i];
        if (r->state != USP_RANK_BLOCKED)
            continue;
        if (first < 0)
            first = i;
        for (int k = 0; k < r->n_waits && k < 256; k++) {
            const usp_rank_record *o = &ranks[r->waits[k].rank];
            crashed_wait |= o->state == USP_RANK_CRASHED;
            missing_wait |= o->state == USP_RANK_MISSING;
            if (failed < 0 && o->state == USP_RANK_EXITED && o->result != USP_OK)
                failed = r->waits[k].rank;
        }
    }
    /* the cause is that rank's own error: say it first, with its status */
    if (failed >= 0 && !crashed_wait && !missing_wait) {
        const usp_rank_record *f = &ranks[failed];
        snapshot(snap, USP_REPORT_RANK_FAILURE, ranks, n, injected, -1, -1);
        usp_strbuf_printf(text, "rank %d failed: %s\nthe other ranks wait for it:\n", failed, f->error ? f->error : "");
        describe_chain(text, ranks, n, first);
        describe_ranks(text, ranks, n, injected);
        return f->result;
    }
    int lost = crashed_wait || missing_wait;
    snapshot(snap, lost ? USP_REPORT_RANK_FAILURE : USP_REPORT_DEADLOCK, ranks, n, injected, -1, -1);
    if (crashed_wait)
        usp_strbuf_printf(text, "rank failure: ranks wait for a rank that crashed\n");
    else if (missing_wait)
        usp_strbuf_printf(text, "rank failure: ranks wait for a rank that left no flight record (killed, or never "
                                "started)\n");
    else
        usp_strbuf_printf(text, "deadlock: no rank can run and %s blocked\n", first >= 0 ? "some are" : "none is");
    describe_chain(text, ranks, n, first);
    describe_ranks(text, ranks, n, injected);
    return lost ? USP_ERR_RANK_FAILED : USP_ERR_COLLECTIVE;
}

static int is_p2p(int op) { return op == USP_OP_SEND || op == USP_OP_RECV || op == USP_OP_SENDRECV; }

void usp_report_mismatch(usp_report_snapshot *snap, const usp_rank_record *ranks, int n, const char *injected,
                         const char *group, int a, int b, const char *why, usp_strbuf *text)
{
    snapshot(snap, USP_REPORT_MISMATCH, ranks, n, injected, a, b);
    int collective = !is_p2p(ranks[a].call.op);
    usp_strbuf_printf(text, "collective mismatch on %s: %s\n", group, why);
    const int both[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        const usp_rank_record *r = &ranks[both[k]];
        usp_strbuf_printf(text, "  rank %d calls ", both[k]);
        usp_comm_fingerprint_describe(text, &r->call);
        usp_strbuf_printf(text, " as its call #%llu", (unsigned long long)r->call.seq);
        if (collective)
            usp_strbuf_printf(text, " (collective #%llu)", (unsigned long long)r->collective_seq);
        usp_strbuf_printf(text, " on %s at %s:%d\n", r->call.group[0] ? r->call.group : group, r->call.site.file,
                          r->call.site.line); /* a call on the wrong group names its own */
    }
    describe_ranks(text, ranks, n, injected);
}

void usp_report_crash(usp_report_snapshot *snap, const usp_rank_record *ranks, int n, const char *injected,
                      usp_strbuf *text)
{
    snapshot(snap, USP_REPORT_RANK_FAILURE, ranks, n, injected, -1, -1);
    usp_strbuf_printf(text, "rank failure: ");
    int lost = 0;
    for (int i = 0; i < n; i++)
        if (ranks[i].state == USP_RANK_CRASHED) {
            usp_strbuf_printf(text, "rank %d ", i), lost++;
            describe_crash(text, &ranks[i]);
            usp_strbuf_printf(text, "\n");
        } else if (ranks[i].state == USP_RANK_MISSING) {
            usp_strbuf_printf(text, "rank %d left %s\n", i, MISSING_TEXT), lost++;
        }
    for (int i = 0, any = lost; i < n && !any; i++) /* none crashed or went missing: the cause is a rank's own error */
        if (ranks[i].state == USP_RANK_EXITED && ranks[i].result != USP_OK)
            usp_strbuf_printf(text, "rank %d failed: %s\n", i, ranks[i].error ? ranks[i].error : "");
    describe_ranks(text, ranks, n, injected);
}

/* --- the wait-for graph ---------------------------------------------------- */

static int edge_order(const void *pa, const void *pb)
{
    const usp_wait_edge *a = pa, *b = pb;
    return a->from != b->from ? (a->from > b->from) - (a->from < b->from) : (a->to > b->to) - (a->to < b->to);
}

static void highlight_edge(usp_wait_graph *g, int from, int to)
{
    usp_wait_edge key = {.from = from, .to = to};
    usp_wait_edge *e = bsearch(&key, g->edges, g->n_edges, sizeof *g->edges, edge_order);
    if (e)
        e->highlight = 1;
}

/* Marks the report's wait chain: the first wait of each rank from the first
 * blocked one (as describe_chain prints it), until a rank repeats (the cycle)
 * or is not blocked (the missing participant). `path` and `at` have room for n. */
static void mark_chain(const usp_report_snapshot *snap, usp_wait_graph *g, int *path, int *at)
{
    int n = snap->n_ranks, start = -1;
    for (int i = 0; i < n && start < 0; i++)
        if (snap->ranks[i].state == USP_RANK_BLOCKED)
            start = i;
    for (int i = 0; i < n; i++)
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
        const usp_rank_record *r = &snap->ranks[id];
        if (r->state != USP_RANK_BLOCKED) { /* everyone on the way waits for a rank that is gone */
            g->ranks[id].missing = 1;
            for (int k = 0; k + 1 < len; k++)
                highlight_edge(g, path[k], path[k + 1]);
            return;
        }
        id = r->n_waits > 0 ? r->waits[0].rank : -1;
    }
}

/* The graph's view of one rank. */
static usp_wait_rank wait_rank_of(const usp_report_snapshot *snap, int i)
{
    const usp_rank_record *r = &snap->ranks[i];
    int has_call = r->call.op >= 0 && (r->state == USP_RANK_BLOCKED || r->state == USP_RANK_CRASHED);
    usp_wait_rank w = {.state = r->state, .op = has_call ? r->call.op : -1, .seq = has_call ? r->call.seq : 0,
                       .file = has_call ? r->call.site.file : NULL, .line = has_call ? r->call.site.line : 0,
                       .calls = r->calls, .result = r->result, .clock = r->clock,
                       .mismatched = snap->kind == USP_REPORT_MISMATCH && (i == snap->mismatched[0] || i == snap->mismatched[1])};
    if (has_call)
        snprintf(w.group, sizeof w.group, "%s", r->call.group);
    if (has_call && r->state == USP_RANK_BLOCKED) {
        usp_strbuf call = {0};
        usp_comm_fingerprint_describe(&call, &r->call);
        snprintf(w.call, sizeof w.call, "%s", usp_strbuf_text(&call));
        usp_strbuf_free(&call);
    }
    return w;
}

usp_status usp_report_wait_graph(const usp_report_snapshot *snap, const char *report_text, usp_wait_graph *out)
{
    *out = (usp_wait_graph){.kind = snap->kind};
    if (snap->kind == USP_REPORT_NONE)
        return USP_OK;
    /* grown, not cut: 16 injected faults of a long group name each outgrow any fixed line */
    usp_strbuf title = {0}, injected = {0};
    usp_strbuf_printf(&title, "%.*s", (int)strcspn(report_text, "\n"), report_text);
    const char *faults = snap->injected; /* "  rank 2: ...\n" per fault: keep the lines, not the indent */
    while (faults && *faults) {
        faults += strspn(faults, " ");
        size_t len = strcspn(faults, "\n");
        usp_strbuf_printf(&injected, "%s%.*s", injected.len ? "\n" : "", (int)len, faults);
        faults += len + (faults[len] == '\n');
    }
    out->title = strdup(usp_strbuf_text(&title));
    out->injected = strdup(usp_strbuf_text(&injected));
    int failed = title.failed || injected.failed;
    usp_strbuf_free(&title), usp_strbuf_free(&injected);
    if (failed || !out->title || !out->injected) {
        usp_wait_graph_free(out);
        return usp_error(USP_ERR_RUNTIME, "out of memory building the wait-for graph");
    }
    int n = snap->n_ranks, *scratch = NULL;
    size_t n_edges = 0;
    for (int i = 0; i < n; i++)
        n_edges += snap->ranks[i].state == USP_RANK_BLOCKED ? (size_t)snap->ranks[i].n_waits : 0;
    usp_status s;
    USP_CHECK_GOTO(usp_calloc((void **)&out->ranks, (size_t)n, sizeof *out->ranks, "the wait-for graph"), s, fail);
    USP_CHECK_GOTO(usp_calloc((void **)&out->edges, n_edges ? n_edges : 1, sizeof *out->edges, "the wait-for graph"),
                   s, fail);
    USP_CHECK_GOTO(usp_calloc((void **)&scratch, 2 * (size_t)n, sizeof *scratch, "the wait-for graph"), s, fail);
    out->n_ranks = n;
    for (int i = 0; i < n; i++) {
        out->ranks[i] = wait_rank_of(snap, i);
        const usp_rank_record *r = &snap->ranks[i];
        for (int k = 0; r->state == USP_RANK_BLOCKED && k < r->n_waits; k++)
            out->edges[out->n_edges++] = (usp_wait_edge){.from = i, .to = r->waits[k].rank};
    }
    if (out->n_edges)
        qsort(out->edges, out->n_edges, sizeof *out->edges, edge_order);
    if (out->kind != USP_REPORT_MISMATCH)
        mark_chain(snap, out, scratch, scratch + n);
    free(scratch);
    return USP_OK;
fail:
    free(scratch);
    usp_wait_graph_free(out);
    return s;
}

void usp_wait_graph_free(usp_wait_graph *g)
{
    free(g->title), free(g->injected);
    free(g->ranks);
    free(g->edges);
    *g = (usp_wait_graph){0};
}
