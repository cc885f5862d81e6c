/* The schedule log (schedule_log.h): each rank appends what its host issues. */
#include "sim/schedule_log.h"

#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

/* A new item at the end of r's log, or NULL when r does not log (or the log ran out of memory). */
static sim_sched_item *append(sim_rank *r)
{
    sim_sched_log *log = r->sched;
    if (!log || log->failed)
        return NULL;
    if (log->n == log->cap) {
        size_t cap = log->cap ? 2 * log->cap : 256;
        sim_sched_item *grown = realloc(log->items, cap * sizeof *grown);
        if (!grown) {
            log->failed = 1;
            return NULL;
        }
        log->items = grown, log->cap = cap;
    }
    sim_sched_item *it = &log->items[log->n++];
    memset(it, 0, sizeof *it);
    it->send_to = it->recv_from = -1;
    it->record = -1;
    return it;
}

/* The point-to-point counts of (group, peer), made on first use (NULL on failure). */
static sim_sched_pair_count *pair(sim_sched_log *log, int group, int peer)
{
    for (int i = 0; i < log->n_pairs; i++)
        if (log->pairs[i].group == group && log->pairs[i].peer == peer)
            return &log->pairs[i];
    if (log->n_pairs == log->cap_pairs) {
        int cap = log->cap_pairs ? 2 * log->cap_pairs : 8;
        sim_sched_pair_count *grown = realloc(log->pairs, (size_t)cap * sizeof *grown);
        if (!grown) {
            log->failed = 1;
            return NULL;
        }
        log->pairs = grown, log->cap_pairs = cap;
    }
    log->pairs[log->n_pairs] = (sim_sched_pair_count){.group = group, .peer = peer};
    return &log->pairs[log->n_pairs++];
}

static void note_lane(sim_sched_log *log, int lane)
{
    if (lane + 1 > log->lanes)
        log->lanes = lane + 1;
}

void sim_sched_note_call(sim_rank *r, const sim_group *g, int local, const usp_comm_op *op, uint64_t seq_on_group,
                         int lane)
{
    sim_sched_item *it = append(r);
    if (!it)
        return;
    sim_sched_log *log = r->sched;
    it->group = g->id;
    it->call = usp_comm_fingerprint_of(op, g->name, seq_on_group);
    /* a collective's (or split's) index among the member's on the group: the simulator's own count, which
     * its matching of the call is about to advance */
    it->seq = g->collectives[local];
    if (op->kind == USP_OP_SPLIT) { /* ncclCommSplit: the hosts meet; no stream is involved */
        it->kind = SIM_SCHED_MEET;
        it->lane = -1;
        return;
    }
    it->kind = SIM_SCHED_CALL;
    it->lane = lane;
    note_lane(log, lane);
    int sends = op->kind == USP_OP_SEND || op->kind == USP_OP_SENDRECV;
    int recvs = op->kind == USP_OP_RECV || op->kind == USP_OP_SENDRECV;
    if (!sends && !recvs)
        return;
    int to = op->kind == USP_OP_RECV ? -1 : g->members[op->peer];
    int from = op->kind == USP_OP_RECV ? g->members[op->peer]
               : op->kind == USP_OP_SENDRECV ? g->members[op->recv_peer] : -1;
    sim_sched_pair_count *pt = to >= 0 ? pair(log, g->id, to) : NULL;
    sim_sched_pair_count *pf = from >= 0 ? pair(log, g->id, from) : NULL;
    if ((to >= 0 && !pt) || (from >= 0 && !pf)) {
        log->n--;
        return;
    }
    it->send_to = to, it->recv_from = from;
    if (pt)
        it->send_seq = pt->sends++;
    if (pf)
        it->recv_seq = pf->recvs++;
}

long sim_sched_note_record(sim_rank *r, int lane)
{
    sim_sched_item *it = append(r);
    if (!it)
        return -1;
    it->kind = SIM_SCHED_RECORD;
    it->lane = lane;
    note_lane(r->sched, lane);
    return (long)(r->sched->n - 1);
}

void sim_sched_note_wait(sim_rank *r, int lane, long record)
{
    sim_sched_item *it = append(r);
    if (!it)
        return;
    it->kind = SIM_SCHED_WAIT;
    it->lane = lane;
    it->record = record;
    note_lane(r->sched, lane);
}

void sim_sched_note_sync(sim_rank *r, int lane)
{
    sim_sched_log *log = r->sched;
    /* Two syncs in a row, or a sync of a lane after one of all, add nothing: keep the log short. */
    if (log && log->n > 0 && log->items[log->n - 1].kind == SIM_SCHED_SYNC &&
        (log->items[log->n - 1].lane == -1 || log->items[log->n - 1].lane == lane))
        return;
    sim_sched_item *it = append(r);
    if (!it)
        return;
    it->kind = SIM_SCHED_SYNC;
    it->lane = lane;
}

void sim_sched_log_free(sim_sched_log *log)
{
    if (!log)
        return;
    free(log->items);
    free(log->pairs);
    free(log);
}
