/* Data movement of matched collectives and transfers in the simulator.
 *
 * All ranks live in one address space, so a collective is a set of copies
 * from the senders' buffers to the receivers'. Before anything moves, every
 * buffer is checked to lie inside memory its rank allocated through its own
 * backend: ranks share no memory, and a buffer too small for the count is an
 * error here rather than a silent overwrite. Reductions run in rank order,
 * so every rank gets the same bits, run after run.
 *
 * A rank whose backend defers its work (the lazy backend) gets its data late,
 * as a real backend would give it: the copies land in a staging buffer, and
 * a host function on the receiver's stream moves them into the receive
 * buffer when that stream reaches the call. Work on another stream that reads
 * the buffer without waiting for an event recorded after the call then reads
 * the old contents, and its test fails.
 *
 * Ranks whose buffers are device memory (sim_config.device_memory) cannot be
 * memcpy'd: sim/staged_move.c runs the same host movement (sim_move_host) on
 * copies of their regions, and sim_comm.c picks which path a call takes. */
#include <stdlib.h>
#include <string.h>

#include "core/comm/reduce.h"
#include "sim/sim_internal.h"

#define PARALLEL_BYTES ((size_t)1 << 20) /* below this, threads cost more than they give */
#define REDUCE_CHUNK 16384               /* elements reduced per task */

static size_t extent_v(const size_t *counts, const size_t *offsets, int n)
{
    size_t end = 0;
    for (int j = 0; j < n; j++)
        if (counts[j] && offsets[j] + counts[j] > end)
            end = offsets[j] + counts[j];
    return end;
}

void sim_buffer_extents(const usp_comm_op *op, int i, int n, size_t *send, size_t *recv)
{
    size_t es = usp_dtype_size(op->dtype), c = op->count * es;
    *send = *recv = 0;
    switch (op->kind) {
    case USP_OP_ALL_TO_ALL: *send = *recv = (size_t)n * c; break;
    case USP_OP_ALL_TO_ALL_V:
        *send = extent_v(op->send_counts, op->send_offsets, n) * es;
        *recv = extent_v(op->recv_counts, op->recv_offsets, n) * es;
        break;
    case USP_OP_ALL_GATHER: *send = c, *recv = (size_t)n * c; break;
    case USP_OP_REDUCE_SCATTER: *send = (size_t)n * c, *recv = c; break;
    case USP_OP_ALL_REDUCE: *send = *recv = c; break;
    case USP_OP_BROADCAST: *send = i == op->root ? c : 0, *recv = c; break;
    case USP_OP_SEND: *send = c; break;
    case USP_OP_RECV: *recv = op->recv_count * es; break;
    case USP_OP_SENDRECV: *send = c, *recv = op->recv_count * es; break;
    default: break;
    }
}

static usp_status check_buffer(const sim_rank *r, const usp_comm_op *op, const char *which, const void *p,
                               size_t bytes)
{
    if (bytes == 0 || usp_backend_owns(r->backend, p, bytes))
        return USP_OK;
    return usp_error(USP_ERR_RUNTIME,
                     "rank %d passed a %s buffer of %zu bytes to %s at %s:%d that is not inside one buffer "
                     "it allocated through its backend (too small for the count, or not its own: ranks "
                     "share no memory)", r->id, which, bytes, usp_comm_kind_name(op->kind), op->site.file,
                     op->site.line);
}

static usp_status check_buffers(const sim_rank *r, const usp_comm_op *op, int i, int n)
{
    size_t send, recv;
    sim_buffer_extents(op, i, n, &send, &recv);
    USP_CHECK(check_buffer(r, op, "send", op->send, send));
    USP_CHECK(check_buffer(r, op, "receive", op->recv, recv));
    int in_place_ok = op->kind == USP_OP_ALL_REDUCE || op->kind == USP_OP_BROADCAST;
    uintptr_t s = (uintptr_t)op->send, d = (uintptr_t)op->recv;
    if (send && recv && !(in_place_ok && s == d) && s < d + recv && d < s + send)
        return usp_error(USP_ERR_RUNTIME, "rank %d: %s at %s:%d with overlapping send and receive buffers",
                         r->id, usp_comm_kind_name(op->kind), op->site.file, op->site.line);
    return USP_OK;
}

/* Elements [first, first+n) of the reduction of the members' send buffers
 * (each read at element offset `src_at`), written to every member's recv at
 * element offset `dst_at` (all members for all_reduce, one for reduce_scatter). */
static void reduce_chunk(usp_comm_op **ops, int size, size_t src_at, size_t n, int dst_member, size_t dst_at,
                         void *scratch)
{
    const usp_comm_op *op0 = ops[0];
    size_t es = usp_dtype_size(op0->dtype);
    memcpy(scratch, (const char *)ops[0]->send + src_at * es, n * es);
    for (int r = 1; r < size; r++)
        usp_reduce_into(scratch, (const char *)ops[r]->send + src_at * es, n, op0->dtype, op0->reduce);
    for (int r = 0; r < size; r++)
        if (dst_member < 0 || dst_member == r)
            memcpy((char *)ops[r]->recv + dst_at * es, scratch, n * es);
}

static usp_status reduce(usp_comm_op **ops, int size)
{
    const usp_comm_op *op0 = ops[0];
    size_t es = usp_dtype_size(op0->dtype), count = op0->count;
    int scatter = op0->kind == USP_OP_REDUCE_SCATTER;
    size_t chunks_per_block = (count + REDUCE_CHUNK - 1) / REDUCE_CHUNK;
    size_t blocks = scatter ? (size_t)size : 1, tasks = blocks * chunks_per_block;
    int parallel = count * es * blocks > PARALLEL_BYTES;
    int failed = 0;
    #pragma omp parallel if (parallel) reduction(| : failed)
    {
        void *scratch = malloc(REDUCE_CHUNK * es);
        failed = !scratch;
        #pragma omp for schedule(static)
        for (size_t t = 0; t < tasks; t++) {
            if (!scratch)
                continue;
            size_t block = t / chunks_per_block, first = t % chunks_per_block * REDUCE_CHUNK;
            size_t n = count - first < REDUCE_CHUNK ? count - first : REDUCE_CHUNK;
            reduce_chunk(ops, size, block * count + first, n, scatter ? (int)block : -1, first, scratch);
        }
        free(scratch);
    }
    return failed ? usp_error(USP_ERR_RUNTIME, "out of memory in a reduction") : USP_OK;
}

static void all_to_all(usp_comm_op **ops, int size)
{
    size_t block = ops[0]->count * usp_dtype_size(ops[0]->dtype);
    int parallel = block * (size_t)size * (size_t)size > PARALLEL_BYTES;
    #pragma omp parallel for collapse(2) schedule(static) if (parallel)
    for (int i = 0; i < size; i++)
        for (int j = 0; j < size; j++)
            memcpy((char *)ops[j]->recv + (size_t)i * block, (const char *)ops[i]->send + (size_t)j * block, block);
}

static void all_to_all_v(usp_comm_op **ops, int size)
{
    size_t es = usp_dtype_size(ops[0]->dtype), total = 0;
    for (int i = 0; i < size; i++)
        for (int j = 0; j < size; j++)
            total += ops[i]->send_counts[j] * es;
    #pragma omp parallel for collapse(2) schedule(static) if (total > PARALLEL_BYTES)
    for (int i = 0; i < size; i++)
        for (int j = 0; j < size; j++)
            if (ops[i]->send_counts[j])
                memcpy((char *)ops[j]->recv + ops[j]->recv_offsets[i] * es,
                       (const char *)ops[i]->send + ops[i]->send_offsets[j] * es, ops[i]->send_counts[j] * es);
}

static void all_gather(usp_comm_op **ops, int size)
{
    size_t block = ops[0]->count * usp_dtype_size(ops[0]->dtype);
    #pragma omp parallel for collapse(2) schedule(static) if (block * (size_t)size * (size_t)size > PARALLEL_BYTES)
    for (int j = 0; j < size; j++)
        for (int i = 0; i < size; i++)
            memcpy((char *)ops[j]->recv + (size_t)i * block, ops[i]->send, block);
}

static void broadcast(usp_comm_op **ops, int size)
{
    const usp_comm_op *root = ops[ops[0]->root];
    size_t bytes = root->count * usp_dtype_size(root->dtype);
    for (int j = 0; j < size; j++)
        if (ops[j]->recv != root->send)
            memcpy(ops[j]->recv, root->send, bytes);
}

typedef struct late_delivery {
    void *dst;
    size_t bytes;
    unsigned char data[];
} late_delivery;

static void deliver(void *arg)
{
    late_delivery *d = arg;
    memcpy(d->dst, d->data, d->bytes);
    free(d);
}

/* When `r`'s backend defers its work: points op->recv at a staging copy of its `bytes` (the parts a
 * call leaves alone must come back unchanged) and returns it; otherwise returns NULL. */
static usp_status stage_receive(const sim_rank *r, usp_comm_op *op, size_t bytes, late_delivery **out)
{
    *out = NULL;
    if (bytes == 0 || r->virtual_streams || !usp_backend_defers(r->backend)) /* virtual streams: at once */
        return USP_OK;
    late_delivery *d = malloc(sizeof *d + bytes);
    if (!d)
        return usp_error(USP_ERR_RUNTIME, "out of memory staging %zu received bytes for rank %d", bytes, r->id);
    d->dst = op->recv;
    d->bytes = bytes;
    memcpy(d->data, op->recv, bytes);
    op->recv = d->data;
    *out = d;
    return USP_OK;
}

/* Points op->recv back at the receive buffer and queues the delivery on the receiver's stream. */
static usp_status queue_delivery(const sim_rank *r, usp_comm_op *op, late_delivery *d)
{
    if (!d)
        return USP_OK;
    op->recv = d->dst;
    return usp_launch_host_func(r->backend, op->stream, deliver, d);
}

usp_status sim_move_host(usp_comm_op **ops, int size)
{
    switch (ops[0]->kind) {
    case USP_OP_ALL_TO_ALL: all_to_all(ops, size); break;
    case USP_OP_ALL_TO_ALL_V: all_to_all_v(ops, size); break;
    case USP_OP_ALL_GATHER: all_gather(ops, size); break;
    case USP_OP_REDUCE_SCATTER:
    case USP_OP_ALL_REDUCE: return reduce(ops, size);
    case USP_OP_BROADCAST: broadcast(ops, size); break;
    default: break;
    }
    return USP_OK;
}

usp_status sim_check_collective(const sim_world *w, const sim_group *g)
{
    for (int i = 0; i < g->size; i++)
        USP_CHECK(check_buffers(sim_mirror_source(w, g->members[i]), g->posted[i], i, g->size));
    return USP_OK;
}

usp_status sim_move_collective(sim_world *w, sim_group *g)
{
    USP_CHECK(sim_check_collective(w, g));
    if (!usp_backend_has_numerics(w->ranks[g->members[0]].backend))
        return USP_OK;
    usp_comm_op **ops = g->posted;
    late_delivery **late = calloc((size_t)g->size, sizeof *late);
    if (!late)
        return usp_error(USP_ERR_RUNTIME, "out of memory moving a collective's data");
    usp_status s = USP_OK;
    for (int i = 0; i < g->size && s == USP_OK; i++) {
        size_t send, recv;
        sim_buffer_extents(ops[i], i, g->size, &send, &recv);
        s = stage_receive(&w->ranks[g->members[i]], ops[i], recv, &late[i]);
    }
    if (s == USP_OK)
        s = sim_move_host(ops, g->size);
    for (int i = 0; i < g->size; i++) {
        usp_status d = s == USP_OK ? queue_delivery(&w->ranks[g->members[i]], ops[i], late[i]) : USP_OK;
        if (s != USP_OK && late[i]) { /* nothing delivered: the receive buffer stays as it was */
            ops[i]->recv = late[i]->dst;
            free(late[i]);
        }
        s = s == USP_OK ? d : s;
    }
    free(late);
    return s;
}

usp_status sim_check_p2p(const sim_rank *sender, const sim_rank *receiver)
{
    int n = sender->op_comm->group->size;
    USP_CHECK(check_buffers(sender, sender->op, sender->op_comm->local, n));
    return check_buffers(receiver, receiver->op, receiver->op_comm->local, n);
}

usp_status sim_move_p2p(sim_world *w, const sim_rank *sender, const sim_rank *receiver)
{
    const usp_comm_op *s = sender->op;
    (void)w;
    USP_CHECK(sim_check_p2p(sender, receiver));
    if (!usp_backend_has_numerics(sender->backend))
        return USP_OK;
    size_t bytes = s->count * usp_dtype_size(s->dtype);
    late_delivery *late;
    USP_CHECK(stage_receive(receiver, receiver->op, bytes, &late));
    memcpy(receiver->op->recv, s->send, bytes);
    return queue_delivery(receiver, receiver->op, late);
}
