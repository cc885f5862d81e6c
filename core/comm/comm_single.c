/* The one-rank communicator (see comm_single.h). */
#include "core/comm/comm_single.h"

#include <stdlib.h>

#include "core/comm/comm_impl.h"

typedef struct single_handle {
    usp_backend_t *backend;
    usp_comm_t *self;
} single_handle;

static const usp_comm_i single_iface;

static usp_status make(usp_backend_t *backend, const char *name, usp_comm_t **out)
{
    single_handle *h;
    USP_CHECK(usp_calloc((void **)&h, 1, sizeof *h, "a one-rank group"));
    h->backend = backend;
    const int world_rank = 0;
    usp_status s = usp_comm_create(&single_iface, h, 0, 1, &world_rank, name, NULL, &h->self);
    if (s != USP_OK) {
        free(h);
        return s;
    }
    *out = h->self;
    return USP_OK;
}

/* Copies `count` elements from send to recv, in the call's stream (nothing when in place). */
static usp_status copy(single_handle *h, const usp_comm_op *op, void *recv, const void *send, size_t count)
{
    if (recv == send || count == 0)
        return USP_OK;
    return usp_buffer_copy(h->backend, recv, send, count * usp_dtype_size(op->dtype), USP_COPY_DEVICE_TO_DEVICE,
                           op->stream);
}

static usp_status single_issue(void *ctx, usp_comm_op *op)
{
    single_handle *h = ctx;
    op->issued_on = h->self;
    switch (op->kind) {
    case USP_OP_ALL_TO_ALL:
    case USP_OP_ALL_GATHER:
    case USP_OP_REDUCE_SCATTER:
    case USP_OP_ALL_REDUCE:
    case USP_OP_BROADCAST: /* root 0: the wrapper checks it names a member */
        return copy(h, op, op->recv, op->send, op->count);
    case USP_OP_ALL_TO_ALL_V: {
        size_t es = usp_dtype_size(op->dtype);
        if (op->send_counts[0] != op->recv_counts[0])
            return usp_error(USP_ERR_COLLECTIVE, "all_to_all_v on %s at %s:%d: the one rank sends itself %zu elements "
                             "but expects %zu", h->self->name, op->site.file, op->site.line, op->send_counts[0],
                             op->recv_counts[0]);
        return copy(h, op, (char *)op->recv + op->recv_offsets[0] * es,
                    (const char *)op->send + op->send_offsets[0] * es, op->send_counts[0]);
    }
    case USP_OP_SENDRECV: /* to itself */
        if (op->count != op->recv_count)
            return usp_error(USP_ERR_COLLECTIVE, "sendrecv on %s at %s:%d: the one rank sends itself %zu elements but "
                             "expects %zu", h->self->name, op->site.file, op->site.line, op->count, op->recv_count);
        return copy(h, op, op->recv, op->send, op->count);
    case USP_OP_SEND:
    case USP_OP_RECV: /* NCCL would wait forever for the other half */
        return usp_error(USP_ERR_COLLECTIVE, "%s on %s at %s:%d: a lone %s to itself in a world of one rank never "
                         "completes (use sendrecv)", usp_comm_kind_name(op->kind), h->self->name, op->site.file,
                         op->site.line, usp_comm_kind_name(op->kind));
    case USP_OP_BARRIER:
        return USP_OK;
    case USP_OP_SPLIT:
        if (op->color == USP_SPLIT_NOCOLOR)
            return USP_OK;
        return make(h->backend, op->name, op->split_out);
    default: USP_ASSERT(0, "communication kind %d", (int)op->kind);
    }
    return USP_OK;
}

static void single_destroy(void *ctx) { free(ctx); }

static const usp_comm_i single_iface = {
    .api_version = USP_COMM_API_VERSION,
    .name = "single",
    .issue = single_issue,
    .destroy = single_destroy,
};

usp_status usp_comm_single_world(usp_backend_t *backend, usp_comm_t **out)
{
    return make(backend, "world", out);
}
