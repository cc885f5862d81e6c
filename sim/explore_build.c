/* Building the explorer's model (explore_model.h) from the ranks' schedule logs. */
#include <stdlib.h>
#include <string.h>

#include "sim/explore_model.h"

/* Per rank and group, its collective (or meet) items by their index on the group. */
typedef struct by_group {
    long **items; /* [groups][count] */
    uint64_t *count;
} by_group;

static void by_group_free(by_group *b, int groups)
{
    for (int g = 0; b->items && g < groups; g++)
        free(b->items[g]);
    free(b->items);
    free(b->count);
}

/* Lists rank's collective calls (meets: `meets`) per group, by index. */
static usp_status index_by_group(const sim_sched_log *log, int groups, int meets, by_group *out)
{
    out->items = calloc((size_t)groups, sizeof *out->items);
    out->count = calloc((size_t)groups, sizeof *out->count);
    if (!out->items || !out->count)
        return usp_error(USP_ERR_RUNTIME, "out of memory indexing a schedule");
    sim_sched_kind want = meets ? SIM_SCHED_MEET : SIM_SCHED_CALL;
    for (size_t i = 0; i < log->n; i++) {
        const sim_sched_item *it = &log->items[i];
        if (it->kind == want && it->send_to < 0 && it->recv_from < 0 && it->seq + 1 > out->count[it->group])
            out->count[it->group] = it->seq + 1;
    }
    for (int g = 0; g < groups; g++) {
        if (!out->count[g])
            continue;
        out->items[g] = malloc(out->count[g] * sizeof **out->items);
        if (!out->items[g])
            return usp_error(USP_ERR_RUNTIME, "out of memory indexing a schedule");
        for (uint64_t k = 0; k < out->count[g]; k++)
            out->items[g][k] = -1;
    }
    for (size_t i = 0; i < log->n; i++) { /* now that the arrays exist */
        const sim_sched_item *it = &log->items[i];
        if (it->kind == want && it->send_to < 0 && it->recv_from < 0)
            out->items[it->group][it->seq] = (long)i;
    }
    return USP_OK;
}

/* Cuts one rank's log into lanes and host items. */
static usp_status build_rank(const sim_sched_log *log, int groups, xrank *x)
{
    x->log = log;
    x->lanes = log->lanes > 0 ? log->lanes : 1;
    size_t n = log->n;
    x->lane_len = calloc((size_t)x->lanes, sizeof *x->lane_len);
    x->lane_items = calloc((size_t)x->lanes, sizeof *x->lane_items);
    x->lane_pos = malloc((n + 1) * sizeof *x->lane_pos);
    x->prev_on_group = malloc((n + 1) * sizeof *x->prev_on_group);
    x->matches = malloc((n + 1) * sizeof *x->matches);
    x->host_items = malloc((n + 1) * sizeof *x->host_items);
    x->host_need = calloc(n + 1, sizeof *x->host_need);
    long *last = malloc((size_t)(groups + 1) * sizeof *last);
    int *run = calloc((size_t)x->lanes, sizeof *run);
    if (!x->lane_len || !x->lane_items || !x->lane_pos || !x->prev_on_group || !x->matches || !x->host_items ||
        !x->host_need || !last || !run) {
        free(last), free(run);
        return usp_error(USP_ERR_RUNTIME, "out of memory modelling a schedule");
    }
    for (int g = 0; g < groups; g++)
        last[g] = -1;
    for (size_t i = 0; i < n; i++)
        if (log->items[i].lane >= 0 && log->items[i].kind != SIM_SCHED_SYNC)
            x->lane_len[log->items[i].lane]++;
    usp_status s = USP_OK;
    for (int l = 0; l < x->lanes && s == USP_OK; l++)
        if (!(x->lane_items[l] = malloc(((size_t)x->lane_len[l] + 1) * sizeof **x->lane_items)))
            s = usp_error(USP_ERR_RUNTIME, "out of memory modelling a schedule");
    for (size_t i = 0; i < n && s == USP_OK; i++) {
        const sim_sched_item *it = &log->items[i];
        x->matches[i] = -1;
        x->prev_on_group[i] = -1;
        if (it->kind == SIM_SCHED_SYNC || it->kind == SIM_SCHED_MEET) {
            x->lane_pos[i] = -1;
            int h = x->n_host++;
            x->host_items[h] = (long)i;
            if (!(x->host_need[h] = malloc((size_t)x->lanes * sizeof **x->host_need)))
                s = usp_error(USP_ERR_RUNTIME, "out of memory modelling a schedule");
            else
                memcpy(x->host_need[h], run, (size_t)x->lanes * sizeof *run);
            continue;
        }
        x->lane_pos[i] = run[it->lane];
        x->lane_items[it->lane][run[it->lane]++] = (long)i;
        if (it->kind == SIM_SCHED_CALL) {
            x->prev_on_group[i] = last[it->group];
            last[it->group] = (long)i;
        }
    }
    free(last), free(run);
    return s;
}

/* The item of `peer` whose receive part (recv: send part) matches rank's item, or -1. */
static long p2p_match(const sim_sched_log *peer_log, int rank, const sim_sched_item *it, int recv)
{
    for (size_t j = 0; j < peer_log->n; j++) {
        const sim_sched_item *o = &peer_log->items[j];
        if (o->kind != SIM_SCHED_CALL || o->group != it->group)
            continue;
        if (!recv && o->recv_from == rank && o->recv_seq == it->send_seq)
            return (long)j;
        if (recv && o->send_to == rank && o->send_seq == it->recv_seq)
            return (long)j;
    }
    return -1;
}

/* Finds every collective's and meet's members' items, and every transfer's peer item. */
static usp_status match_calls(xmodel *m, by_group *calls, by_group *meets)
{
    const sim_world *w = m->world;
    size_t need = 0;
    for (int r = 0; r < m->n; r++)
        for (size_t i = 0; i < m->ranks[r].log->n; i++) {
            const sim_sched_item *it = &m->ranks[r].log->items[i];
            if ((it->kind == SIM_SCHED_CALL && it->send_to < 0 && it->recv_from < 0) || it->kind == SIM_SCHED_MEET)
                need += (size_t)w->groups[it->group]->size;
        }
    m->member_items = malloc((need + 1) * sizeof *m->member_items);
    size_t ranks = m->n > 0 ? (size_t)m->n : 1;
    m->p2p_send_match = calloc(ranks, sizeof *m->p2p_send_match);
    m->p2p_recv_match = calloc(ranks, sizeof *m->p2p_recv_match);
    if (!m->member_items || !m->p2p_send_match || !m->p2p_recv_match)
        return usp_error(USP_ERR_RUNTIME, "out of memory matching a schedule's calls");
    for (int r = 0; r < m->n; r++) {
        xrank *x = &m->ranks[r];
        m->p2p_send_match[r] = malloc((x->log->n + 1) * sizeof **m->p2p_send_match);
        m->p2p_recv_match[r] = malloc((x->log->n + 1) * sizeof **m->p2p_recv_match);
        if (!m->p2p_send_match[r] || !m->p2p_recv_match[r])
            return usp_error(USP_ERR_RUNTIME, "out of memory matching a schedule's calls");
        for (size_t i = 0; i < x->log->n; i++) {
            const sim_sched_item *it = &x->log->items[i];
            m->p2p_send_match[r][i] = it->send_to >= 0 ? p2p_match(m->ranks[it->send_to].log, r, it, 0) : -1;
            m->p2p_recv_match[r][i] = it->recv_from >= 0 ? p2p_match(m->ranks[it->recv_from].log, r, it, 1) : -1;
            int group_call = it->kind == SIM_SCHED_CALL && it->send_to < 0 && it->recv_from < 0;
            if (!group_call && it->kind != SIM_SCHED_MEET)
                continue;
            const sim_group *g = w->groups[it->group];
            x->matches[i] = (long)m->n_member_items;
            for (int k = 0; k < g->size; k++) {
                const by_group *b = it->kind == SIM_SCHED_MEET ? &meets[g->members[k]] : &calls[g->members[k]];
                m->member_items[m->n_member_items++] = it->seq < b->count[it->group] ? b->items[it->group][it->seq]
                                                                                      : -1;
            }
        }
    }
    return USP_OK;
}

usp_status xmodel_build(const sim_world *w, int slots, xmodel *m)
{
    memset(m, 0, sizeof *m);
    m->world = w, m->n = w->n, m->slots = slots;
    for (int r = 0; r < w->n; r++)
        if (!w->ranks[r].sched || w->ranks[r].sched->failed)
            return usp_error(USP_ERR_CONFIG, "rank %d logged no schedule to explore (%s)", r,
                             w->ranks[r].sched ? "out of memory while logging" : "the run did not log one");
        else if (w->ranks[r].sched->lanes > XMODEL_MAX_LANES)
            return usp_error(USP_ERR_CONFIG, "rank %d used %d streams; exploration follows at most %d", r,
                             w->ranks[r].sched->lanes, XMODEL_MAX_LANES);
    m->ranks = calloc((size_t)w->n, sizeof *m->ranks);
    by_group *calls = calloc((size_t)w->n, sizeof *calls), *meets = calloc((size_t)w->n, sizeof *meets);
    usp_status s = m->ranks && calls && meets ? USP_OK : usp_error(USP_ERR_RUNTIME, "out of memory modelling a schedule");
    for (int r = 0; r < w->n && s == USP_OK; r++) {
        s = build_rank(w->ranks[r].sched, w->n_groups, &m->ranks[r]);
        m->ranks[r].offset = m->state_ints;
        m->state_ints += m->ranks[r].lanes + 1;
        if (s == USP_OK)
            s = index_by_group(w->ranks[r].sched, w->n_groups, 0, &calls[r]);
        if (s == USP_OK)
            s = index_by_group(w->ranks[r].sched, w->n_groups, 1, &meets[r]);
    }
    if (s == USP_OK)
        s = match_calls(m, calls, meets);
    for (int r = 0; r < w->n; r++) {
        if (calls)
            by_group_free(&calls[r], w->n_groups);
        if (meets)
            by_group_free(&meets[r], w->n_groups);
    }
    free(calls), free(meets);
    if (s != USP_OK)
        xmodel_free(m);
    return s;
}

void xmodel_free(xmodel *m)
{
    for (int r = 0; m->ranks && r < m->n; r++) {
        xrank *x = &m->ranks[r];
        for (int l = 0; x->lane_items && l < x->lanes; l++)
            free(x->lane_items[l]);
        for (int h = 0; x->host_need && h < x->n_host; h++)
            free(x->host_need[h]);
        free(x->lane_items), free(x->lane_len), free(x->lane_pos), free(x->host_items), free(x->host_need);
        free(x->prev_on_group), free(x->matches);
        if (m->p2p_send_match)
            free(m->p2p_send_match[r]);
        if (m->p2p_recv_match)
            free(m->p2p_recv_match[r]);
    }
    free(m->ranks), free(m->member_items), free(m->p2p_send_match), free(m->p2p_recv_match);
    memset(m, 0, sizeof *m);
}
