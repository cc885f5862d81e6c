/* The report of an explored deadlock (explore_report.h). */
#include "sim/explore_report.h"

#include <stdlib.h>
#include <string.h>

/* The started call of `rank` (its lowest lane's), or -1. */
static long started_call(const xmodel *m, const xstate *s, int rank)
{
    const xrank *x = &m->ranks[rank];
    for (int l = 0; l < x->lanes; l++) {
        int pos = s[x->offset + l] / 2;
        if (pos < x->lane_len[l] && xstarted(m, s, rank, x->lane_items[l][pos]))
            return x->lane_items[l][pos];
    }
    return -1;
}

/* Why a head that is not running waits, appended to b. */
static void describe_head(usp_strbuf *b, const xmodel *m, const xstate *s, int rank, long item)
{
    const sim_sched_item *it = xitem(m, rank, item);
    const xrank *x = &m->ranks[rank];
    if (!xissued(m, s, rank, item)) {
        usp_strbuf_printf(b, "not issued yet: the host waits for its streams");
        return;
    }
    if (it->kind == SIM_SCHED_WAIT) {
        const sim_sched_item *rec = xitem(m, rank, it->record);
        usp_strbuf_printf(b, "waits for an event recorded on stream %d", rec->lane);
        for (long k = it->record - 1; k >= 0; k--) /* name what the event follows on its stream */
            if (x->log->items[k].kind == SIM_SCHED_CALL && x->log->items[k].lane == rec->lane) {
                usp_strbuf_printf(b, " after ");
                usp_comm_fingerprint_name(b, &x->log->items[k].call);
                break;
            }
        return;
    }
    usp_comm_fingerprint_name(b, &it->call);
    if (xstarted(m, s, rank, item)) {
        int *waits = malloc(((size_t)m->n + 1) * sizeof *waits), n = waits ? xwaits_for(m, s, rank, item, waits) : 0;
        usp_strbuf_printf(b, " started, waiting for rank");
        for (int k = 0; k < n && k < 8; k++)
            usp_strbuf_printf(b, "%s %d", k ? "," : "", waits[k]);
        if (n > 8)
            usp_strbuf_printf(b, " and %d more", n - 8);
        free(waits);
        return;
    }
    long prev = x->prev_on_group[item];
    if (prev >= 0 && !xstarted(m, s, rank, prev) && !xdone(m, s, rank, prev))
        usp_strbuf_printf(b, " ready, after %s #%llu on its group", usp_comm_kind_name(xitem(m, rank, prev)->call.op),
                          (unsigned long long)xitem(m, rank, prev)->call.seq);
    else
        usp_strbuf_printf(b, " ready, not started: the GPU runs %d collective kernel%s at once", m->slots,
                          m->slots == 1 ? "" : "s");
}

static void describe_gpus(usp_strbuf *b, const xmodel *m, const xstate *s)
{
    usp_strbuf_printf(b, "GPU states (the head of each stream with work left):\n");
    for (int r = 0; r < m->n; r++) {
        const xrank *x = &m->ranks[r];
        int any = 0;
        usp_strbuf_printf(b, "  rank %d:", r);
        for (int l = 0; l < x->lanes; l++) {
            int pos = s[x->offset + l] / 2;
            if (pos >= x->lane_len[l])
                continue;
            usp_strbuf_printf(b, "%s stream %d: ", any++ ? ";" : "", l);
            describe_head(b, m, s, r, x->lane_items[l][pos]);
        }
        usp_strbuf_printf(b, "%s\n", any ? "" : " done");
    }
}

/* The item of `rank` that is the same collective as `other_rank`'s `item`, or -1. */
static long same_call(const xmodel *m, int rank, int other_rank, long item)
{
    const sim_sched_item *it = xitem(m, other_rank, item);
    const sim_group *g = m->world->groups[it->group];
    if (m->ranks[other_rank].matches[item] < 0)
        return -1;
    for (int k = 0; k < g->size; k++)
        if (g->members[k] == rank)
            return m->member_items[m->ranks[other_rank].matches[item] + k];
    return -1;
}

/* "rank a's GPU started X [stream] before Y [stream]" for the two calls of a conflicting pair. */
static void describe_order(usp_strbuf *b, const xmodel *m, int rank, long first, long second)
{
    usp_strbuf_printf(b, "  rank %d's GPU started ", rank);
    usp_comm_fingerprint_name(b, &xitem(m, rank, first)->call);
    usp_strbuf_printf(b, " [stream %d]", xitem(m, rank, first)->lane);
    if (second >= 0) {
        usp_strbuf_printf(b, " before ");
        usp_comm_fingerprint_name(b, &xitem(m, rank, second)->call);
        usp_strbuf_printf(b, " [stream %d]%s", xitem(m, rank, second)->lane,
                          second < first ? ", though its host issued that one first" : "");
    }
    usp_strbuf_printf(b, "\n");
}

/* Rank records for usp_report_stall: a rank with a started call is blocked in it, waiting first for a
 * rank that is blocked too (so the chain follows the cycle); waits[] has room for n * n. */
static void make_records(const xmodel *m, const xstate *s, usp_rank_record *rec, usp_rank_wait *waits, int *tmp)
{
    for (int r = 0; r < m->n; r++) {
        long item = started_call(m, s, r);
        rec[r] = (usp_rank_record){.state = USP_RANK_RUNNABLE, .call = {.op = -1}};
        if (item < 0)
            continue;
        rec[r].state = USP_RANK_BLOCKED;
        rec[r].call = xitem(m, r, item)->call;
        rec[r].collective_seq = xitem(m, r, item)->seq;
        int n = xwaits_for(m, s, r, item, tmp), k = 0;
        usp_rank_wait *w = waits + (size_t)r * (size_t)m->n;
        for (int pass = 0; pass < 2; pass++) /* the blocked ones first */
            for (int i = 0; i < n; i++)
                if ((started_call(m, s, tmp[i]) >= 0) == (pass == 0))
                    w[k++] = (usp_rank_wait){.rank = tmp[i]};
        rec[r].waits = w, rec[r].n_waits = n;
    }
}

/* The conflicting pair: a rank a on the wait cycle waits in X for b, whose GPU started Y instead. */
static void describe_conflict(usp_strbuf *b, const xmodel *m, const xstate *s, const usp_rank_record *rec)
{
    int a = -1;
    for (int r = 0; r < m->n && a < 0; r++)
        if (rec[r].state == USP_RANK_BLOCKED)
            a = r;
    /* follow the first waits n times: from any start that ends on the cycle, if there is one */
    for (int k = 0; k < m->n && a >= 0; k++)
        a = rec[a].state == USP_RANK_BLOCKED && rec[a].n_waits > 0 ? rec[a].waits[0].rank : -1;
    if (a < 0 || rec[a].state != USP_RANK_BLOCKED || rec[a].n_waits == 0 ||
        rec[rec[a].waits[0].rank].state != USP_RANK_BLOCKED)
        return;
    int bk = rec[a].waits[0].rank;
    long x_a = started_call(m, s, a), y_b = started_call(m, s, bk);
    long x_b = same_call(m, bk, a, x_a), y_a = same_call(m, a, bk, y_b);
    usp_strbuf_printf(b, "the orders that conflict:\n");
    describe_order(b, m, a, x_a, y_a);
    describe_order(b, m, bk, y_b, x_b);
    usp_strbuf_printf(b, "  a GPU starts whichever of its streams' heads is ready first: only an event (or one stream) "
                         "between the two calls fixes their order\n");
}

usp_status xreport_deadlock(const xmodel *m, const xstate *s, sim_explore_result *out)
{
    usp_rank_record *rec = calloc((size_t)m->n, sizeof *rec);
    usp_rank_wait *waits = calloc((size_t)m->n * (size_t)m->n + 1, sizeof *waits);
    int *tmp = calloc((size_t)m->n + 1, sizeof *tmp);
    if (!rec || !waits || !tmp) {
        free(rec), free(waits), free(tmp);
        return usp_error(USP_ERR_RUNTIME, "out of memory reporting an explored deadlock");
    }
    make_records(m, s, rec, waits, tmp);
    usp_strbuf stall = {0};
    usp_report_stall(&out->snapshot, rec, m->n, "", &stall);
    const char *text = usp_strbuf_text(&stall), *chain = strstr(text, "wait chain:");
    const char *end = chain ? strchr(chain, '\n') : NULL;
    usp_strbuf_printf(&out->report, "deadlock in an order the GPUs may run the schedule in: every GPU with work "
                      "left waits (%d collective kernel%s per GPU at once)\n", m->slots, m->slots == 1 ? "" : "s");
    if (chain && end)
        usp_strbuf_printf(&out->report, "%.*s\n", (int)(end - chain), chain);
    describe_conflict(&out->report, m, s, rec);
    describe_gpus(&out->report, m, s);
    usp_strbuf_free(&stall);
    free(rec), free(waits), free(tmp);
    return USP_OK;
}
