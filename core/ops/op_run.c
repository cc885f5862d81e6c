/* What enqueues work on a backend (core/ops/ops.h): the copies, zero and convert, the stream and event
 * calls, and usp_op_run, the one door every compute op goes through (core/ops/op.h): its checks, its
 * cost, its workspace and the backend's run slot, timed when ops are timed (ops_timer.c). */
#include "core/ops/ops_internal.h"

usp_status usp_buffer_copy(usp_backend_t *be, void *dst, const void *src, size_t bytes,
                           usp_copy_kind kind, usp_stream_t *stream)
{
    if (bytes == 0)
        return USP_OK;
    if (kind != USP_COPY_HOST_TO_DEVICE)
        USP_CHECK(ops_check_range(be, "usp_buffer_copy", "source", src, bytes));
    if (kind != USP_COPY_DEVICE_TO_HOST)
        USP_CHECK(ops_check_range(be, "usp_buffer_copy", "destination", dst, bytes));
    ops_report_cost(be, kind == USP_COPY_DEVICE_TO_DEVICE ? "copy" : "copy_host", 0, 2.0 * (double)bytes,
                    stream);
    return OPS_TIMED(be, stream, be->iface->copy(be->context, dst, src, bytes, kind, stream));
}

usp_status usp_buffer_convert(usp_backend_t *be, void *dst, const void *src, size_t elems, usp_stream_t *stream)
{
    USP_CHECK(ops_check_range(be, "usp_buffer_convert", "source", src, 0)); /* in a buffer: it has a dtype */
    USP_CHECK(ops_check_range(be, "usp_buffer_convert", "destination", dst, 0));
    usp_dtype to = usp_buffer_dtype(be, dst), from = usp_buffer_dtype(be, src);
    size_t dst_bytes = elems * usp_dtype_size(to), src_bytes = elems * usp_dtype_size(from);
    if (to == from)
        return usp_buffer_copy(be, dst, src, dst_bytes, USP_COPY_DEVICE_TO_DEVICE, stream);
    if (elems == 0)
        return USP_OK;
    USP_CHECK(ops_check_range(be, "usp_buffer_convert", "source", src, src_bytes));
    USP_CHECK(ops_check_range(be, "usp_buffer_convert", "destination", dst, dst_bytes));
    if (be->iface->has_numerics && !be->iface->stores_bf16)
        return usp_error(USP_ERR_CONFIG, "the %s backend cannot convert %s to %s: it stores fp32 only",
                         be->iface->name, usp_dtype_name(from), usp_dtype_name(to));
    usp_op op = {.kind = USP_OP_CONVERT, .stream = stream, .p.convert = {(int64_t)elems},
                 .operand = {{(void *)src, from, (int64_t)elems}, {dst, to, (int64_t)elems}}};
    return usp_op_run(be, &op);
}

usp_status usp_buffer_zero(usp_backend_t *be, void *ptr, size_t bytes, usp_stream_t *stream)
{
    if (bytes == 0)
        return USP_OK;
    USP_CHECK(ops_check_range(be, "usp_buffer_zero", "buffer", ptr, bytes));
    ops_report_cost(be, "zero", 0, (double)bytes, stream);
    return OPS_TIMED(be, stream, be->iface->zero(be->context, ptr, bytes, stream));
}

usp_status usp_stream_create(usp_backend_t *be, usp_stream_t **out)
{
    *out = NULL;
    return be->iface->stream_create ? be->iface->stream_create(be->context, out) : USP_OK;
}

usp_status usp_event_create(usp_backend_t *be, usp_event_t **out)
{
    *out = NULL;
    return be->iface->event_create ? be->iface->event_create(be->context, out) : USP_OK;
}

void usp_event_destroy(usp_backend_t *be, usp_event_t *event)
{
    if (event)
        be->iface->event_destroy(be->context, event);
}

usp_status usp_event_record(usp_backend_t *be, usp_event_t *event, usp_stream_t *stream)
{
    return event ? be->iface->event_record(be->context, event, stream) : USP_OK;
}

usp_status usp_stream_wait_event(usp_backend_t *be, usp_stream_t *stream, usp_event_t *event)
{
    return event ? be->iface->stream_wait_event(be->context, stream, event) : USP_OK;
}

usp_status usp_launch_host_func(usp_backend_t *be, usp_stream_t *stream, void (*fn)(void *arg), void *arg)
{
    if (!be->iface->launch_host_func) {
        fn(arg);
        return USP_OK;
    }
    return be->iface->launch_host_func(be->context, stream, fn, arg);
}

/* The view v of an operand that does what info says: checked against the live buffers as its role asks
 * (ops_view; in bytes, check_range), or left as the builder set it when it has no elements (a GEMM's a
 * and b at k = 0). */
static usp_status check_operand(const usp_backend_t *be, const char *op, usp_operand_info info, usp_view *v)
{
    if (v->count == 0)
        return USP_OK;
    if (info.flags & USP_OPERAND_BYTES) {
        USP_CHECK(ops_check_range(be, op, info.name, v->data, (size_t)v->count));
        v->dtype = USP_U8;
        return USP_OK;
    }
    const unsigned dtypes = info.flags & (USP_OPERAND_F32 | USP_OPERAND_IDS) ? OPS_F32 : OPS_STORED;
    return ops_view(be, op, info.name, v->data, v->count, dtypes, !!(info.flags & USP_OPERAND_OPTIONAL),
                    v);
}

/* The workspace of op's SCRATCH operand `at`, as the backend sizes it: allocated (counted under the kind's
 * category) on a backend with or without numerics alike, so that a shapes-only run counts it too. */
static usp_status alloc_scratch(usp_backend_t *be, usp_op *op, int at)
{
    op->operand[at] = (usp_view){.data = NULL, .dtype = USP_U8, .count = 0};
    const size_t bytes = be->iface->workspace_bytes ? be->iface->workspace_bytes(be->context, op) : 0;
    if (bytes == 0)
        return USP_OK;
    USP_CHECK(usp_buffer_alloc(be, bytes, ops_kind_scratch(op->kind), &op->operand[at].data));
    op->operand[at].count = (int64_t)bytes;
    return USP_OK;
}

usp_status usp_op_run(usp_backend_t *be, usp_op *op)
{
    int nothing;
    USP_CHECK(ops_kind_check(op, &nothing));
    if (nothing)
        return USP_OK;
    be->operands->n = 0; /* the ranges of this op only, even after a failed one */
    usp_operand_info info[USP_OP_OPERANDS_MAX];
    const int n = usp_op_operands(op, info);
    const char *name = usp_op_name(op);
    int scratch = -1;
    for (int i = 0; i < n; i++) {
        if (info[i].flags & USP_OPERAND_SCRATCH)
            scratch = i;
        else
            USP_CHECK(check_operand(be, name, info[i], &op->operand[i]));
    }
    const usp_backend_i *f = be->iface;
    if (f->has_numerics && (!f->run || (f->supports && !f->supports(be->context, op))))
        return usp_error(USP_ERR_RUNTIME, "the %s backend has no %s op%s", f->name, name,
                         f->run ? " (its supports slot says so)" : ": its usp_backend_i has no run slot");
    const ops_work w = ops_kind_cost(op);
    if (op->kind == USP_OP_ATTENTION_FORWARD || op->kind == USP_OP_ATTENTION_BACKWARD)
        be->attention_flops += w.flops;
    ops_report_cost_outputs(be, usp_op_cost_name(op), w.dtype, w.flops, w.bytes, w.outputs, op->stream);
    if (usp_op_blocking(op))
        ops_count_host_wait(be); /* the host reads the result */
    if (scratch >= 0)
        USP_CHECK(alloc_scratch(be, op, scratch));
    const usp_status st = OPS_TIMED(be, op->stream, f->run ? f->run(be->context, op) : USP_OK);
    if (scratch >= 0)
        usp_buffer_free(be, op->operand[scratch].data);
    return st;
}
