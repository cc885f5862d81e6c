/* The simulator's side of the reports of a stalled run (deadlocks, collective
 * mismatches, crashed ranks): every rank's state as one record, handed to the
 * backend-neutral reports and wait-for graph (core/safety/comm_report.h), so a real
 * backend that fills the same records prints the same report. */
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

void sim_abort(sim_world *w, usp_status status)
{
    if (w->abort_status == USP_OK) {
        w->abort_status = status;
        const char *text = usp_strbuf_text(&w->report);
        /* whole, however long its names are; out of memory: the ranks' messages say less, the report is whole */
        w->abort_reason = strndup(text, strcspn(text, "\n"));
    }
    usp_comm_decorator_stop(w->decorator); /* no fault fires after the report that ended the run */
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

static int is_p2p(usp_comm_kind kind) { return kind == USP_OP_SEND || kind == USP_OP_RECV || kind == USP_OP_SENDRECV; }

/* Whom blocked rank `r` waits for: the members missing from its collective,
 * or the peers of its unmatched transfer parts (send first), each with the
 * calls it issued on r's group. Writes them to `out` when it is not NULL;
 * returns how many. */
static int waits_for(const sim_rank *r, usp_rank_wait *out)
{
    const sim_group *g = r->op_comm->group;
    int n = 0;
    if (!is_p2p(r->op->kind)) {
        for (int j = 0; j < g->size; j++)
            if (!g->posted[j] && g->members[j] != r->id) { /* a mismatching rank is not posted, nor waiting for itself */
                if (out)
                    out[n] = (usp_rank_wait){g->members[j], g->calls[j]};
                n++;
            }
        return n;
    }
    int src = r->op->kind == USP_OP_RECV ? r->op->peer : r->op->recv_peer;
    if (r->send_pending) {
        if (out)
            out[n] = (usp_rank_wait){g->members[r->op->peer], g->calls[r->op->peer]};
        n++;
    }
    if (r->recv_pending && (n == 0 || g->members[r->op->peer] != g->members[src])) {
        if (out)
            out[n] = (usp_rank_wait){g->members[src], g->calls[src]};
        n++;
    }
    return n;
}

/* Every rank as the reports see it; the records' waits live in *pool. Free both. */
static usp_status make_records(const sim_world *w, usp_rank_record **records, usp_rank_wait **pool)
{
    size_t n_waits = 0;
    for (int i = 0; i < w->n; i++)
        if (w->ranks[i].state == RANK_BLOCKED)
            n_waits += (size_t)waits_for(&w->ranks[i], NULL);
    *records = NULL, *pool = NULL;
    USP_CHECK(usp_calloc((void **)records, (size_t)w->n, sizeof **records, "the ranks' records for a report"));
    usp_status s = usp_calloc((void **)pool, n_waits ? n_waits : 1, sizeof **pool, "the ranks' waits for a report");
    if (s != USP_OK) {
        free(*records);
        *records = NULL;
        return s;
    }
    size_t at = 0;
    for (int i = 0; i < w->n; i++) {
        const sim_rank *r = &w->ranks[i];
        usp_rank_record *rec = &(*records)[i];
        usp_comm_fingerprint crash_at;
        uint64_t crash_call;
        int crashed = usp_comm_decorator_crashed(w->decorator, i, &crash_at, &crash_call);
        *rec = (usp_rank_record){
            .state = r->state == RANK_BLOCKED ? USP_RANK_BLOCKED
                     : crashed ? USP_RANK_CRASHED
                     : r->state == RANK_DONE ? USP_RANK_EXITED : USP_RANK_RUNNABLE,
            .call.op = -1, .calls = usp_comm_decorator_calls(w->decorator, i), .result = r->result,
            .error = r->error.message, .clock = r->clock};
        if (rec->state == USP_RANK_BLOCKED) {
            const sim_group *g = r->op_comm->group;
            rec->call = usp_comm_fingerprint_of(r->op, g->name, r->op_seq);
            rec->collective_seq = g->collectives[r->op_comm->local];
            rec->waits = *pool + at;
            rec->n_waits = waits_for(r, *pool + at);
            at += (size_t)rec->n_waits;
        } else if (rec->state == USP_RANK_CRASHED) {
            rec->call = crash_at;
            rec->crash_call = crash_call;
        }
    }
    return USP_OK;
}

usp_status sim_report_stall(sim_world *w)
{
    usp_rank_record *records;
    usp_rank_wait *pool;
    usp_status s = make_records(w, &records, &pool);
    if (s != USP_OK) {
        usp_strbuf_printf(&w->report, "no rank can run and some are blocked; no report: %s\n", usp_error_message());
        return s;
    }
    s = usp_report_stall(&w->snapshot, records, w->n, usp_comm_decorator_injected(w->decorator), &w->report);
    free(records), free(pool);
    return s;
}

void sim_report_mismatch(sim_world *w, const sim_group *g, const sim_rank *a, const sim_rank *b, const char *what)
{
    usp_rank_record *records;
    usp_rank_wait *pool;
    if (make_records(w, &records, &pool) != USP_OK) {
        usp_strbuf_printf(&w->report, "collective mismatch on %s: %s (ranks %d and %d); no report: %s\n", g->name,
                          what, a->id, b->id, usp_error_message());
        return;
    }
    usp_report_mismatch(&w->snapshot, records, w->n, usp_comm_decorator_injected(w->decorator), g->name, a->id,
                        b->id, what, &w->report);
    free(records), free(pool);
}

void sim_report_crash(sim_world *w)
{
    usp_rank_record *records;
    usp_rank_wait *pool;
    if (make_records(w, &records, &pool) != USP_OK) {
        usp_strbuf_printf(&w->report, "rank failure; no report: %s\n", usp_error_message());
        return;
    }
    usp_report_crash(&w->snapshot, records, w->n, usp_comm_decorator_injected(w->decorator), &w->report);
    free(records), free(pool);
}

usp_status sim_world_wait_graph(const sim_world *w, usp_wait_graph *out)
{
    return usp_report_wait_graph(&w->snapshot, usp_strbuf_text(&w->report), out);
}
