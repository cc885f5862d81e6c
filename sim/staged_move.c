/* Data movement for ranks whose buffers are device memory (sim_config.device_memory):
 * every simulated rank's kernels on one GPU, each rank with a backend of its own.
 *
 * The host cannot memcpy device pointers, so at a call's rendezvous each member's
 * stream is synchronised (the work enqueued before the call is done, as NCCL would
 * find it when its stream reaches the call), the regions the call reads and writes
 * are downloaded through the member's own backend (which owns the pointers), the
 * host movement of collectives.c runs on those copies, and the received regions
 * go back up on the call's stream. Downloading the receive region too keeps the
 * bytes a call leaves alone (all_to_all_v's gaps) as they were; an in-place call
 * (send == recv) has one host copy for both, so the host code sees the aliasing it
 * would see in place. The sums are the host path's, in rank order: the same bits.
 * The copies are the simulator's own work, not the modelled cluster's, so they
 * move no virtual clock (sim_rank.mute_costs). Slow (two PCIe crossings a call),
 * and simple: the point is to run the distributed schedules' GPU kernels on one GPU. */
#include <stdlib.h>

#include "sim/sim_internal.h"

/* Host copies of one member's regions. */
typedef struct staged {
    usp_comm_op host;        /* the member's op with send and recv pointing at the copies */
    void *send, *recv;       /* malloc'd (recv NULL when it aliases send) */
    size_t send_bytes, recv_bytes;
} staged;

/* Downloads `bytes` at `src` of r's buffers into a new host buffer *out on `stream` (not yet synchronised). */
static usp_status download(sim_rank *r, usp_stream_t *stream, const void *src, size_t bytes, void **out)
{
    *out = NULL;
    if (bytes == 0)
        return USP_OK;
    USP_CHECK(usp_malloc(out, bytes, "a staged copy of a collective's buffer"));
    r->world->staged_bytes += bytes;
    return usp_buffer_copy(r->backend, *out, src, bytes, USP_COPY_DEVICE_TO_HOST, stream);
}

/* Waits for r's work before the call on `stream` (a backend that completes every op at once has none). */
static usp_status settle(sim_rank *r, usp_stream_t *stream)
{
    return usp_backend_defers(r->backend) ? usp_backend_synchronize(r->backend, stream) : USP_OK;
}

/* Member i's regions, downloaded into st once its stream has reached the call. */
static usp_status stage_in(sim_rank *r, const usp_comm_op *op, int i, int n, staged *st)
{
    sim_buffer_extents(op, i, n, &st->send_bytes, &st->recv_bytes);
    st->host = *op;
    USP_CHECK(download(r, op->stream, op->send, st->send_bytes, &st->send));
    int alias = op->send == op->recv && st->send_bytes && st->recv_bytes; /* in place (checks allow no other overlap) */
    if (!alias)
        USP_CHECK(download(r, op->stream, op->recv, st->recv_bytes, &st->recv));
    USP_CHECK(settle(r, op->stream));
    st->host.send = st->send;
    st->host.recv = alias ? st->send : st->recv;
    return USP_OK;
}

/* Uploads member's received region on the call's stream: the host copy is read before the call returns. */
static usp_status stage_out(sim_rank *r, const usp_comm_op *op, const staged *st)
{
    if (st->recv_bytes == 0)
        return USP_OK;
    r->world->staged_bytes += st->recv_bytes;
    return usp_buffer_copy(r->backend, op->recv, st->host.recv, st->recv_bytes, USP_COPY_HOST_TO_DEVICE, op->stream);
}

usp_status sim_staged_collective(sim_world *w, sim_group *g)
{
    const int n = g->size;
    USP_CHECK(sim_check_collective(w, g));
    if (!usp_backend_has_numerics(w->ranks[g->members[0]].backend))
        return USP_OK;
    staged *st;
    usp_comm_op **ops;
    USP_CHECK(usp_calloc((void **)&st, (size_t)n, sizeof *st, "the staged copies of a collective"));
    usp_status s = usp_calloc((void **)&ops, (size_t)n, sizeof *ops, "the staged copies of a collective");
    for (int i = 0; i < n; i++)
        w->ranks[g->members[i]].mute_costs = 1;
    for (int i = 0; i < n && s == USP_OK; i++) {
        s = stage_in(&w->ranks[g->members[i]], g->posted[i], i, n, &st[i]);
        ops[i] = &st[i].host;
    }
    if (s == USP_OK)
        s = sim_move_host(ops, n);
    for (int i = 0; i < n && s == USP_OK; i++) /* nothing is uploaded unless every member's move succeeded */
        s = stage_out(&w->ranks[g->members[i]], g->posted[i], &st[i]);
    for (int i = 0; i < n; i++) {
        w->ranks[g->members[i]].mute_costs = 0;
        free(st[i].send);
        free(st[i].recv);
    }
    free(ops);
    free(st);
    return s;
}

usp_status sim_staged_p2p(sim_world *w, const sim_rank *sender, const sim_rank *receiver)
{
    USP_CHECK(sim_check_p2p(sender, receiver));
    if (!usp_backend_has_numerics(sender->backend))
        return USP_OK;
    sim_rank *from = &w->ranks[sender->id], *to = &w->ranks[receiver->id]; /* their backends do the copies */
    const usp_comm_op *s = sender->op, *d = receiver->op;
    const size_t bytes = s->count * usp_dtype_size(s->dtype);
    void *host = NULL;
    from->mute_costs = to->mute_costs = 1;
    usp_status st = download(from, s->stream, s->send, bytes, &host);
    if (st == USP_OK)
        st = settle(from, s->stream);
    if (st == USP_OK && bytes) { /* the whole received count is written: nothing to keep around it */
        to->world->staged_bytes += bytes;
        st = usp_buffer_copy(to->backend, d->recv, host, bytes, USP_COPY_HOST_TO_DEVICE, d->stream);
    }
    from->mute_costs = to->mute_costs = 0;
    free(host);
    return st;
}
