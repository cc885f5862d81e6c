/* Communicator wrappers: build the op descriptor, check its arguments,
 * number it, hand it to the backend, and record the trace event. */
#include "core/comm/comm_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int usp_comm_rank(const usp_comm_t *c) { return c->rank; }
int usp_comm_size(const usp_comm_t *c) { return c->size; }
const char *usp_comm_name(const usp_comm_t *c) { return c->name; }

int usp_comm_world_rank(const usp_comm_t *c, int rank)
{
    USP_ASSERT(rank >= 0 && rank < c->size, "rank %d of group %s of size %d", rank, c->name, c->size);
    return c->world_ranks[rank];
}

const char *usp_reduce_op_name(usp_reduce_op op) { return op == USP_REDUCE_MAX ? "max" : "sum"; }

static usp_status comm_create(const usp_comm_i *iface, void *ctx, int rank, int size, const int *world_ranks,
                              int copy, const char *name, usp_trace_t *trace, usp_comm_t **out)
{
    USP_ASSERT(iface && iface->api_version == USP_COMM_API_VERSION, "communicator interface version");
    USP_ASSERT(rank >= 0 && rank < size, "rank %d of %d", rank, size);
    usp_comm_t *c;
    USP_CHECK(usp_calloc((void **)&c, 1, sizeof *c, "a communicator"));
    if (copy) {
        usp_status s = usp_malloc((void **)&c->world_ranks, (size_t)size * sizeof(int), "a group's ranks");
        if (s != USP_OK) {
            free(c);
            return s;
        }
        memcpy(c->world_ranks, world_ranks, (size_t)size * sizeof(int));
    } else {
        c->world_ranks = (int *)world_ranks; /* never written through: the owner's array */
    }
    c->owns_world_ranks = copy;
    c->iface = iface;
    c->context = ctx;
    c->rank = rank;
    c->size = size;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->trace = trace;
    c->trace_group = trace ? usp_trace_intern_group(trace, c->name) : -1;
    if (trace && c->trace_group < 0) {
        if (copy)
            free(c->world_ranks);
        free(c);
        return usp_error(USP_ERR_RUNTIME, "out of memory naming group %s in the trace", name);
    }
    *out = c;
    return USP_OK;
}

usp_status usp_comm_create(const usp_comm_i *iface, void *ctx, int rank, int size, const int *world_ranks,
                           const char *name, usp_trace_t *trace, usp_comm_t **out)
{
    return comm_create(iface, ctx, rank, size, world_ranks, 1, name, trace, out);
}

usp_status usp_comm_create_borrowed(const usp_comm_i *iface, void *ctx, int rank, int size, const int *world_ranks,
                                    const char *name, usp_trace_t *trace, usp_comm_t **out)
{
    return comm_create(iface, ctx, rank, size, world_ranks, 0, name, trace, out);
}

void usp_comm_destroy(usp_comm_t *c)
{
    if (!c)
        return;
    if (c->iface->destroy)
        c->iface->destroy(c->context);
    if (c->owns_world_ranks)
        free(c->world_ranks);
    free(c);
}

int usp_comm_op_peers(const usp_comm_op *op, int rank, int size, int *peers, uint64_t *bytes)
{
    uint64_t es = usp_dtype_size(op->dtype);
    int next = (rank + 1) % size, n = 0;
    if (size == 1 && op->kind != USP_OP_SEND && op->kind != USP_OP_SENDRECV)
        return 0;
    uint64_t one = 0; /* the ring collectives' single entry, to `next` */
    switch (op->kind) {
    case USP_OP_ALL_TO_ALL:
    case USP_OP_ALL_TO_ALL_V:
        for (int j = 0; j < size; j++) {
            uint64_t b = j == rank ? 0 : (op->kind == USP_OP_ALL_TO_ALL ? op->count : op->send_counts[j]) * es;
            if (b)
                peers[n] = j, bytes[n++] = b;
        }
        return n;
    case USP_OP_ALL_GATHER:
    case USP_OP_REDUCE_SCATTER: /* n-1 ring steps of one block */
        one = (uint64_t)(size - 1) * op->count * es;
        break;
    case USP_OP_ALL_REDUCE: /* reduce-scatter + all-gather: 2(n-1) steps of S/n */
        one = 2 * (uint64_t)(size - 1) * op->count * es / (uint64_t)size;
        break;
    case USP_OP_BROADCAST: /* a chain from the root: everyone but the last forwards S */
        one = next != op->root ? op->count * es : 0;
        break;
    case USP_OP_SEND:
    case USP_OP_SENDRECV:
        if (op->peer != rank && op->count > 0 && es > 0)
            peers[n] = op->peer, bytes[n++] = op->count * es;
        return n;
    default:
        return 0;
    }
    if (one)
        peers[n] = next, bytes[n++] = one;
    return n;
}

void usp_comm_op_traffic(const usp_comm_op *op, int rank, int size, uint64_t *bytes_to)
{
    memset(bytes_to, 0, (size_t)size * sizeof *bytes_to);
    if (op->kind == USP_OP_ALL_TO_ALL || op->kind == USP_OP_ALL_TO_ALL_V) { /* a whole row */
        uint64_t es = usp_dtype_size(op->dtype);
        for (int j = 0; size > 1 && j < size; j++)
            bytes_to[j] = j == rank ? 0 : (op->kind == USP_OP_ALL_TO_ALL ? op->count : op->send_counts[j]) * es;
        return;
    }
    int peer;
    uint64_t bytes;
    if (usp_comm_op_peers(op, rank, size, &peer, &bytes) == 1) /* one entry at most */
        bytes_to[peer] = bytes;
}

static int reducible(usp_dtype dtype)
{
    return dtype == USP_F32 || dtype == USP_F64 || dtype == USP_I64 || dtype == USP_BF16;
}

static usp_status bad_call(const usp_comm_t *c, const usp_comm_op *op, const char *why)
{
    return usp_error(USP_ERR_RUNTIME, "%s on %s at %s:%d: %s", usp_comm_kind_name(op->kind), c->name,
                     op->site.file, op->site.line, why);
}

/* Arguments that are wrong whatever the other ranks do. */
static usp_status check_op(const usp_comm_t *c, const usp_comm_op *op)
{
    if (op->dtype < 0 || op->dtype >= USP_DTYPE_COUNT)
        return bad_call(c, op, "unknown dtype");
    int reduces = op->kind == USP_OP_ALL_REDUCE || op->kind == USP_OP_REDUCE_SCATTER;
    if (reduces && !reducible(op->dtype))
        return bad_call(c, op, "reductions are over f32, f64, i64 and bf16 only");
    if (op->kind == USP_OP_BROADCAST && (op->root < 0 || op->root >= c->size))
        return bad_call(c, op, "root is not a member of the group");
    int p2p = op->kind == USP_OP_SEND || op->kind == USP_OP_RECV || op->kind == USP_OP_SENDRECV;
    if (p2p && (op->peer < 0 || op->peer >= c->size))
        return bad_call(c, op, "peer is not a member of the group");
    if (op->kind == USP_OP_SENDRECV && (op->recv_peer < 0 || op->recv_peer >= c->size))
        return bad_call(c, op, "source peer is not a member of the group");
    if (op->kind == USP_OP_ALL_TO_ALL_V &&
        (!op->send_counts || !op->send_offsets || !op->recv_counts || !op->recv_offsets))
        return bad_call(c, op, "counts and offsets arrays are required");
    if (op->kind == USP_OP_SPLIT && (!op->split_out || !op->name || op->color < USP_SPLIT_NOCOLOR))
        return bad_call(c, op, "split needs a name, an output handle and a color >= -1");
    return USP_OK;
}

static usp_status record_trace(usp_comm_t *c, const usp_comm_op *op)
{
    usp_comm_t *g = op->issued_on ? op->issued_on : c;
    if (!g->trace || op->kind == USP_OP_SPLIT)
        return USP_OK;
    uint64_t stack_bytes[64], *bytes = stack_bytes;
    usp_trace_peer stack_peers[64], *peers = stack_peers;
    if (g->size > 64) {
        bytes = malloc((size_t)g->size * sizeof *bytes);
        peers = malloc((size_t)g->size * sizeof *peers);
        if (!bytes || !peers) {
            free(bytes), free(peers);
            return usp_error(USP_ERR_RUNTIME, "out of memory recording a trace event");
        }
    }
    usp_comm_op_traffic(op, g->rank, g->size, bytes);
    size_t n = 0;
    for (int j = 0; j < g->size; j++)
        if (bytes[j])
            peers[n++] = (usp_trace_peer){g->world_ranks[j], bytes[j]};
    usp_trace_event e = {
        .rank = g->world_ranks[g->rank], .group = g->trace_group, .kind = op->kind, .seq = op->seq,
        .file = op->site.file, .line = op->site.line,
        .t_post = op->t_post, .t_start = op->t_start, .t_end = op->t_end,
    };
    usp_status s = usp_trace_record(g->trace, &e, peers, n);
    if (bytes != stack_bytes)
        free(bytes), free(peers);
    return s;
}

static usp_status comm_issue(usp_comm_t *c, usp_comm_op *op)
{
    USP_CHECK(check_op(c, op));
    op->seq = ++c->n_calls;
    USP_CHECK(c->iface->issue(c->context, op));
    return op->not_issued ? USP_OK : record_trace(c, op);
}

usp_status usp_comm_all_to_all_at(usp_comm_t *c, const void *send, void *recv, size_t count,
                                  usp_dtype dtype, usp_stream_t *stream, usp_call_site site)
{
    usp_comm_op op = {.kind = USP_OP_ALL_TO_ALL, .send = send, .recv = recv, .count = count,
                      .dtype = dtype, .stream = stream, .site = site};
    return comm_issue(c, &op);
}

usp_status usp_comm_all_to_all_v_at(usp_comm_t *c, const void *send, const size_t *send_counts,
                                    const size_t *send_offsets, void *recv, const size_t *recv_counts,
                                    const size_t *recv_offsets, usp_dtype dtype, usp_stream_t *stream,
                                    usp_call_site site)
{
    usp_comm_op op = {.kind = USP_OP_ALL_TO_ALL_V, .send = send, .recv = recv, .dtype = dtype,
                      .send_counts = send_counts, .send_offsets = send_offsets,
                      .recv_counts = recv_counts, .recv_offsets = recv_offsets,
                      .stream = stream, .site = site};
    return comm_issue(c, &op);
}

usp_status usp_comm_all_gather_at(usp_comm_t *c, const void *send, void *recv, size_t count,
                                  usp_dtype dtype, usp_stream_t *stream, usp_call_site site)
{
    usp_comm_op op = {.kind = USP_OP_ALL_GATHER, .send = send, .recv = recv, .count = count,
                      .dtype = dtype, .stream = stream, .site = site};
    return comm_issue(c, &op);
}

usp_status usp_comm_reduce_scatter_at(usp_comm_t *c, const void *send, void *recv, size_t count,
                                      usp_dtype dtype, usp_reduce_op reduce, usp_stream_t *stream,
                                      usp_call_site site)
{
    usp_comm_op op = {.kind = USP_OP_REDUCE_SCATTER, .send = send, .recv = recv, .count = count,
                      .dtype = dtype, .reduce = reduce, .stream = stream, .site = site};
    return comm_issue(c, &op);
}

usp_status usp_comm_all_reduce_at(usp_comm_t *c, const void *send, void *recv, size_t count,
                                  usp_dtype dtype, usp_reduce_op reduce, usp_stream_t *stream,
                                  usp_call_site site)
{
    usp_comm_op op = {.kind = USP_OP_ALL_REDUCE, .send = send, .recv = recv, .count = count,
                      .dtype = dtype, .reduce = reduce, .stream = stream, .site = site};
    return comm_issue(c, &op);
}

usp_status usp_comm_broadcast_at(usp_comm_t *c, const void *send, void *recv, size_t count,
                                 usp_dtype dtype, int root, usp_stream_t *stream, usp_call_site site)
{
    usp_comm_op op = {.kind = USP_OP_BROADCAST, .send = send, .recv = recv, .count = count,
                      .dtype = dtype, .root = root, .stream = stream, .site = site};
    return comm_issue(c, &op);
}

usp_status usp_comm_send_at(usp_comm_t *c, const void *send, size_t count, usp_dtype dtype, int peer,
                            usp_stream_t *stream, usp_call_site site)
{
    usp_comm_op op = {.kind = USP_OP_SEND, .send = send, .count = count, .dtype = dtype, .peer = peer,
                      .stream = stream, .site = site};
    return comm_issue(c, &op);
}

usp_status usp_comm_recv_at(usp_comm_t *c, void *recv, size_t count, usp_dtype dtype, int peer,
                            usp_stream_t *stream, usp_call_site site)
{
    usp_comm_op op = {.kind = USP_OP_RECV, .recv = recv, .count = count, .recv_count = count,
                      .dtype = dtype, .peer = peer, .stream = stream, .site = site};
    return comm_issue(c, &op);
}

usp_status usp_comm_sendrecv_at(usp_comm_t *c, const void *send, size_t send_count, int dst, void *recv,
                                size_t recv_count, int src, usp_dtype dtype, usp_stream_t *stream,
                                usp_call_site site)
{
    usp_comm_op op = {.kind = USP_OP_SENDRECV, .send = send, .count = send_count, .peer = dst,
                      .recv = recv, .recv_count = recv_count, .recv_peer = src, .dtype = dtype,
                      .stream = stream, .site = site};
    return comm_issue(c, &op);
}

usp_status usp_comm_barrier_at(usp_comm_t *c, usp_stream_t *stream, usp_call_site site)
{
    usp_comm_op op = {.kind = USP_OP_BARRIER, .dtype = USP_U8, .stream = stream, .site = site};
    return comm_issue(c, &op);
}

usp_status usp_comm_split_at(usp_comm_t *c, int color, int key, const char *name, usp_comm_t **out,
                             usp_call_site site)
{
    *out = NULL;
    usp_comm_op op = {.kind = USP_OP_SPLIT, .dtype = USP_U8, .color = color, .key = key, .name = name,
                      .split_out = out, .site = site};
    return comm_issue(c, &op);
}
