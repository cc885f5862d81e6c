/* Mirrors (sim_config.mirrors): ranks that run nothing of their own after
 * their splits, because another rank's run is theirs.
 *
 * On shapes, the ranks of one Ulysses group (one position of the ring) run
 * the same program: the same ops on the same shapes, the same calls at the
 * same virtual times, the same transfers over routes of the same links.
 * Ranks come in blocks of M (rank % M is the Ulysses index); the first rank
 * of a block runs, the others are its mirrors. A mirror runs its own program
 * until its first call that is not a split (its splits make its groups: its
 * colours are its own), then parks there. From then on:
 * - a collective its block's first rank posts is posted for the mirrors that
 *   are members of the group too, with the same op, so the collective
 *   completes when it would have and is priced over every member;
 * - a transfer src -> dst of first ranks is queued M times, src + l -> dst + l
 *   for each mirror lane l, at the same start, so the links carry what they
 *   would; only the first rank's waits on it. Where every link is one GPU's
 *   own (NVSwitch, and a NIC a GPU between nodes), lanes share no link and
 *   the copies, which could not slow lane 0's transfers, are not queued;
 * - usp_rank_gather writes the first rank's figures into its mirrors' slots,
 *   and the world's accessors give a mirror its first rank's peak, clocks,
 *   backend and status.
 * The symmetry the mirrors stand on is checked as the run goes: a transfer
 * to or from a mirror, a split after a mirror parked, a mirror gathering, or
 * the M copies of a transfer ending at different times (a topology whose
 * lanes do not route alike) aborts the run, and sim_world_mirrors_failed
 * says so: the caller then simulates every rank. When the run ends, the
 * parked mirrors return an error from their call and unwind. */
#include <stdlib.h>

#include "sim/sim_internal.h"

/* 1 when a link may carry transfers of two GPUs' (two lanes'): PCIe switches and host bridges, or a
 * NIC shared by GPUs. On NVSwitch a transfer crosses its sender's and receiver's NVLinks, and between
 * nodes their NICs (sim/topology.h): with a NIC a GPU, each link is one GPU's. */
static int lanes_share_links(const sim_topology *t)
{
    return t->fabric != SIM_FABRIC_NVSWITCH || (t->nodes > 1 && t->nics_per_node != t->gpus_per_node);
}

const sim_rank *sim_mirror_source(const sim_world *w, int rank)
{
    return &w->ranks[sim_is_mirror(w, rank) ? rank - rank % w->mirrors : rank];
}

usp_status sim_mirrors_setup(sim_world *w)
{
    w->mirrors = w->config.mirrors > 1 ? w->config.mirrors : 1;
    if (w->mirrors == 1)
        return USP_OK;
    if (w->n % w->mirrors != 0)
        return usp_error(USP_ERR_CONFIG, "mirrors in blocks of %d ranks do not divide the world of %d",
                         w->mirrors, w->n);
    if (w->config.trace || w->config.n_faults > 0 || w->config.record_schedule)
        return usp_error(USP_ERR_CONFIG, "mirrors in blocks of %d ranks with a trace, faults or a schedule log: "
                         "every rank's events are its own there, so every rank must run", w->mirrors);
    w->mirror_flows = lanes_share_links(&w->config.cost.topology);
    USP_CHECK(usp_malloc((void **)&w->local_scratch, (size_t)w->n * sizeof *w->local_scratch, "the mirrors"));
    for (int i = 0; i < w->n; i++)
        w->local_scratch[i] = -1;
    return USP_OK;
}

usp_status sim_mirrors_index(sim_world *w, sim_group *g)
{
    const int M = w->mirrors;
    int any = 0;
    for (int i = 0; M > 1 && i < g->size && !any; i++)
        any = sim_is_mirror(w, g->members[i]);
    if (!any)
        return USP_OK;
    USP_CHECK(usp_malloc((void **)&g->mirror_locals, (size_t)g->size * (size_t)(M - 1) * sizeof *g->mirror_locals,
                         "a group's mirrors"));
    for (int i = 0; i < g->size; i++)
        w->local_scratch[g->members[i]] = i;
    for (int i = 0; i < g->size; i++)
        for (int l = 1; l < M; l++) {
            int m = g->members[i] + l;
            g->mirror_locals[(size_t)i * (size_t)(M - 1) + (size_t)(l - 1)] =
                sim_is_mirror(w, g->members[i]) ? -1 : w->local_scratch[m];
        }
    for (int i = 0; i < g->size; i++)
        w->local_scratch[g->members[i]] = -1;
    return USP_OK;
}

int sim_mirrors_post(sim_world *w, sim_group *g, int local, usp_comm_op *op)
{
    if (!g->mirror_locals || op->kind == USP_OP_SPLIT) /* a mirror posts its own splits */
        return 0;
    const int *at = g->mirror_locals + (size_t)local * (size_t)(w->mirrors - 1);
    int posted = 0;
    for (int l = 0; l < w->mirrors - 1; l++)
        if (at[l] >= 0) {
            g->posted[at[l]] = op, g->calls[at[l]]++, g->collectives[at[l]]++;
            posted++;
        }
    return posted;
}

void sim_mirrors_fail(sim_world *w, const char *why, int rank)
{
    if (!w->mirrors_failed)
        usp_strbuf_printf(&w->report, "rank %d: its Ulysses group's mirrors (blocks of %d ranks) cannot stand in "
                          "for one another: %s\n", rank, w->mirrors, why);
    w->mirrors_failed = 1;
}

usp_status sim_mirrors_submit(sim_world *w, double start, int src, int dst, uint64_t bytes)
{
    if (w->mirrors == 1 || !w->mirror_flows)
        return USP_OK;
    if (w->ranks[src].mirror_ends != 0) { /* a mirror's copy of its previous send still moves */
        sim_mirrors_fail(w, "a transfer's copies ended at different times", src);
        return usp_error(USP_ERR_RUNTIME, "the mirrors broke their symmetry");
    }
    for (int l = 1; l < w->mirrors; l++)
        USP_CHECK(sim_p2p_flows_submit(w->p2p, start, src + l, dst + l, bytes));
    return USP_OK;
}

int sim_mirrors_flow_done(sim_world *w, int src, int dst, double t_end)
{
    (void)dst;
    if (w->mirrors == 1 || !w->mirror_flows)
        return 0;
    sim_rank *first = &w->ranks[src - src % w->mirrors];
    if (first->mirror_ends++ == 0)
        first->mirror_end = t_end;
    else if (t_end != first->mirror_end) /* the caller aborts after the flows moved (sim_transfers_advance) */
        sim_mirrors_fail(w, "a transfer's copies ended at different times", src);
    if (first->mirror_ends == w->mirrors)
        first->mirror_ends = 0;
    return sim_is_mirror(w, src);
}

/* A mirror's first call that is not a split: it parks until the run is over, then returns an error. */
static usp_status park(sim_world *w, sim_rank *r)
{
    if (r->state != RANK_PARKED) { /* parked already: it unwinds (sim_mirrors_finish) */
        r->state = RANK_PARKED;
        sim_fiber_yield(r->fiber);
    }
    return usp_error(USP_ERR_RUNTIME, "rank %d mirrors rank %d: its own run stops at its first call", r->id,
                     r->id - r->id % w->mirrors);
}

usp_status sim_mirrors_intercept(sim_world *w, sim_rank *r, sim_comm *sc, const usp_comm_op *op, int *handled)
{
    *handled = 0;
    if (w->mirrors == 1)
        return USP_OK;
    if (sim_is_mirror(w, r->id) && op->kind != USP_OP_SPLIT) {
        *handled = 1;
        return park(w, r);
    }
    const char *why = NULL;
    const int *members = sc->group->members;
    if (op->kind == USP_OP_SPLIT)
        for (int l = 1; l < w->mirrors && !why && !sim_is_mirror(w, r->id); l++)
            why = w->ranks[r->id + l].state == RANK_PARKED ? "a split after the first call" : NULL;
    if ((op->kind == USP_OP_SEND || op->kind == USP_OP_SENDRECV) && sim_is_mirror(w, members[op->peer]))
        why = "a transfer to a mirror";
    if ((op->kind == USP_OP_RECV && sim_is_mirror(w, members[op->peer])) ||
        (op->kind == USP_OP_SENDRECV && sim_is_mirror(w, members[op->recv_peer])))
        why = "a transfer from a mirror";
    if (!why)
        return USP_OK;
    *handled = 1;
    sim_mirrors_fail(w, why, r->id);
    sim_abort(w, USP_ERR_RUNTIME);
    return usp_error(USP_ERR_RUNTIME, "%s", why);
}

void sim_mirrors_finish(sim_world *w)
{
    for (int i = 0; w->mirrors > 1 && i < w->n; i++) {
        sim_rank *r = &w->ranks[i];
        if (!sim_is_mirror(w, i) && r->mirror_ends != 0)
            sim_mirrors_fail(w, "a transfer's copies did not all end", i);
        if (r->state != RANK_PARKED)
            continue;
        w->current = r;
        usp_error_slot *own = usp_error_use_slot(&r->error);
        sim_fiber_resume(r->fiber); /* its call returns an error; every later call returns at once */
        usp_error_use_slot(own);
        w->current = NULL;
        r->state = sim_fiber_finished(r->fiber) ? RANK_DONE : RANK_PARKED;
    }
    if (w->mirrors_failed && w->abort_status == USP_OK)
        sim_abort(w, USP_ERR_RUNTIME);
}
