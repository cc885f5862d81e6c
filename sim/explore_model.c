/* The explorer's model (explore_model.h): the logs cut into streams, the
 * partners of every call, and the moves on a state. */
#include "sim/explore_model.h"

#include <stdlib.h>
#include <string.h>

const sim_sched_item *xitem(const xmodel *m, int rank, long item) { return &m->ranks[rank].log->items[item]; }

static int lane_of(const xmodel *m, int rank, long item) { return xitem(m, rank, item)->lane; }

static int *slot(const xmodel *m, xstate *s, int rank, int lane) { return &s[m->ranks[rank].offset + lane]; }

static int value(const xmodel *m, const xstate *s, int rank, int lane) { return s[m->ranks[rank].offset + lane]; }

static int host_at(const xmodel *m, const xstate *s, int rank)
{
    return s[m->ranks[rank].offset + m->ranks[rank].lanes];
}

int xissued(const xmodel *m, const xstate *s, int rank, long item)
{
    const xrank *x = &m->ranks[rank];
    int h = host_at(m, s, rank);
    return h >= x->n_host || item < x->host_items[h];
}

int xdone(const xmodel *m, const xstate *s, int rank, long item)
{
    int pos = m->ranks[rank].lane_pos[item];
    return pos >= 0 && value(m, s, rank, lane_of(m, rank, item)) / 2 > pos;
}

int xstarted(const xmodel *m, const xstate *s, int rank, long item)
{
    int pos = m->ranks[rank].lane_pos[item], v = pos >= 0 ? value(m, s, rank, lane_of(m, rank, item)) : 0;
    return pos >= 0 && v / 2 == pos && (v & 1);
}

static int is_p2p(const sim_sched_item *it) { return it->send_to >= 0 || it->recv_from >= 0; }

static const sim_group *group_of(const xmodel *m, const sim_sched_item *it) { return m->world->groups[it->group]; }

/* 1 when `peer` has not started its call `match` that a transfer needs (-1: it never issues one). */
static int peer_missing(const xmodel *m, const xstate *s, int peer, long match)
{
    return match < 0 || !(xstarted(m, s, peer, match) || xdone(m, s, peer, match));
}

int xwaits_for(const xmodel *m, const xstate *s, int rank, long item, int *out)
{
    const sim_sched_item *it = xitem(m, rank, item);
    int n = 0;
    if (is_p2p(it)) {
        if (it->send_to >= 0 && peer_missing(m, s, it->send_to, m->p2p_send_match[rank][item]))
            out[n++] = it->send_to;
        if (it->recv_from >= 0 && peer_missing(m, s, it->recv_from, m->p2p_recv_match[rank][item]) &&
            (n == 0 || out[0] != it->recv_from))
            out[n++] = it->recv_from;
        return n;
    }
    const sim_group *g = group_of(m, it);
    const long *mine = &m->member_items[m->ranks[rank].matches[item]];
    for (int k = 0; k < g->size; k++) {
        int who = g->members[k];
        if (mine[k] < 0 || (!xstarted(m, s, who, mine[k]) && who != rank))
            out[n++] = who;
    }
    return n;
}

int xrunning(const xmodel *m, const xstate *s, int rank)
{
    int n = 0;
    for (int l = 0; l < m->ranks[rank].lanes; l++)
        n += value(m, s, rank, l) & 1;
    return n;
}

int xready(const xmodel *m, const xstate *s, int rank, long *out)
{
    const xrank *x = &m->ranks[rank];
    int n = 0;
    for (int l = 0; l < x->lanes; l++) {
        int v = value(m, s, rank, l), pos = v / 2;
        if (pos >= x->lane_len[l] || (v & 1))
            continue;
        long item = x->lane_items[l][pos];
        if (x->log->items[item].kind != SIM_SCHED_CALL || !xissued(m, s, rank, item))
            continue;
        long prev = x->prev_on_group[item]; /* calls on one group start in the order they were issued */
        if (prev >= 0 && !xstarted(m, s, rank, prev) && !xdone(m, s, rank, prev))
            continue;
        out[n++] = item;
    }
    return n;
}

void xstart(const xmodel *m, xstate *s, int rank, long item) { *slot(m, s, rank, lane_of(m, rank, item)) |= 1; }

/* A started call whose partners have all started: it completes (a collective: on every member). */
static int complete_call(const xmodel *m, xstate *s, int rank, long item)
{
    const sim_sched_item *it = xitem(m, rank, item);
    if (is_p2p(it)) {
        int peers[2];
        if (xwaits_for(m, s, rank, item, peers) > 0)
            return 0;
        *slot(m, s, rank, it->lane) += 1; /* 2 pos + 1 -> 2 (pos + 1) */
        return 1;
    }
    const sim_group *g = group_of(m, it);
    const long *mine = &m->member_items[m->ranks[rank].matches[item]];
    for (int k = 0; k < g->size; k++)
        if (mine[k] < 0 || !xstarted(m, s, g->members[k], mine[k]))
            return 0;
    for (int k = 0; k < g->size; k++)
        *slot(m, s, g->members[k], lane_of(m, g->members[k], mine[k])) += 1;
    return 1;
}

/* Moves rank's lane heads that need no choice; 1 when something moved. */
static int settle_lanes(const xmodel *m, xstate *s, int rank)
{
    const xrank *x = &m->ranks[rank];
    int moved = 0;
    for (int l = 0; l < x->lanes; l++) {
        for (;;) {
            int v = value(m, s, rank, l), pos = v / 2;
            if (pos >= x->lane_len[l])
                break;
            long item = x->lane_items[l][pos];
            const sim_sched_item *it = &x->log->items[item];
            if (!xissued(m, s, rank, item))
                break;
            int step = it->kind == SIM_SCHED_RECORD ||
                       (it->kind == SIM_SCHED_WAIT && (it->record < 0 || xdone(m, s, rank, it->record)));
            if (step)
                *slot(m, s, rank, l) += 2;
            else if (!(it->kind == SIM_SCHED_CALL && (v & 1) && complete_call(m, s, rank, item)))
                break;
            moved = 1;
        }
    }
    return moved;
}

/* Passes rank's next host item when it can; 1 when it did. */
static int settle_host(const xmodel *m, xstate *s, int rank)
{
    const xrank *x = &m->ranks[rank];
    int h = host_at(m, s, rank);
    if (h >= x->n_host)
        return 0;
    const sim_sched_item *it = &x->log->items[x->host_items[h]];
    if (it->kind == SIM_SCHED_SYNC) {
        for (int l = 0; l < x->lanes; l++)
            if ((it->lane < 0 || it->lane == l) && value(m, s, rank, l) / 2 < x->host_need[h][l])
                return 0;
        s[x->offset + x->lanes]++;
        return 1;
    }
    const sim_group *g = group_of(m, it); /* a meet: every member's host is at its own item of it */
    const long *mine = &m->member_items[x->matches[x->host_items[h]]];
    for (int k = 0; k < g->size; k++) {
        const xrank *o = &m->ranks[g->members[k]];
        int oh = host_at(m, s, g->members[k]);
        if (mine[k] < 0 || oh >= o->n_host || o->host_items[oh] != mine[k])
            return 0;
    }
    for (int k = 0; k < g->size; k++)
        s[m->ranks[g->members[k]].offset + m->ranks[g->members[k]].lanes]++;
    return 1;
}

void xsettle(const xmodel *m, xstate *s)
{
    long ready[XMODEL_MAX_LANES];
    for (;;) {
        /* first every move that starts nothing, to the end: an event wait that passes can make a second head
         * ready, and a head started alone before it would hide the GPU's choice */
        for (int moved = 1; moved;) {
            moved = 0;
            for (int r = 0; r < m->n; r++) {
                moved |= settle_lanes(m, s, r);
                moved |= settle_host(m, s, r);
            }
        }
        int started = 0;
        for (int r = 0; r < m->n; r++) {
            int free_slots = m->slots - xrunning(m, s, r);
            if (free_slots <= 0)
                continue;
            int n = xready(m, s, r, ready);
            if (n > 0 && n <= free_slots) { /* every ready head starts: no choice to make */
                for (int i = 0; i < n; i++)
                    xstart(m, s, r, ready[i]);
                started = 1;
            }
        }
        if (!started)
            return;
    }
}

int xfinished(const xmodel *m, const xstate *s)
{
    for (int r = 0; r < m->n; r++) {
        const xrank *x = &m->ranks[r];
        for (int l = 0; l < x->lanes; l++)
            if (value(m, s, r, l) / 2 < x->lane_len[l])
                return 0;
        if (host_at(m, s, r) < x->n_host)
            return 0;
    }
    return 1;
}

int xchooser(const xmodel *m, const xstate *s, long *ready, int *n_ready)
{
    for (int r = 0; r < m->n; r++) {
        int free_slots = m->slots - xrunning(m, s, r);
        if (free_slots <= 0)
            continue;
        int n = xready(m, s, r, ready);
        if (n > free_slots) {
            *n_ready = n;
            return r;
        }
    }
    *n_ready = 0;
    return -1;
}

void xmodel_initial(const xmodel *m, xstate *s) { memset(s, 0, (size_t)m->state_ints * sizeof *s); }
