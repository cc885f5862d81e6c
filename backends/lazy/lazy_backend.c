/* The lazy backend's slots: copies and ops each check their buffers are live,
 * save their arguments and queue a runner that calls the cpu backend later
 * (lazy_backend.h). Every op goes through one slot, `run`. */
#include "backends/lazy/lazy_backend.h"

#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/lazy/lazy_device.h"
#include "core/ops/backend_impl.h"
#include "core/ops/dtype.h"

#define CPU usp_backend_cpu_interface()

/* What the copy just queued reads and writes, for the order checker (lazy_device_check): a list of
 * usp_access. */
#define ACCESSES(...)                                                        \
    lazy_device_check(ctx, stream, op->name, (const usp_access[]){__VA_ARGS__}, \
                      (int)(sizeof((const usp_access[]){__VA_ARGS__}) / sizeof(usp_access)))

static usp_status lazy_alloc(void *ctx, size_t bytes, void **out) { return lazy_device_alloc(ctx, bytes, out); }
static void lazy_free(void *ctx, void *ptr) { lazy_device_free(ctx, ptr); }

static usp_status run_copy(const lazy_op *o)
{
    memmove(o->p[0], o->owned ? o->owned : o->p[1], o->z[0]);
    return USP_OK;
}

static usp_status lazy_copy(void *ctx, void *dst, const void *src, size_t bytes, usp_copy_kind kind,
                            usp_stream_t *stream)
{
    lazy_op *op;
    if (kind == USP_COPY_HOST_TO_DEVICE) { /* the host source is read now: staged until the copy runs */
        void *staged = malloc(bytes);
        if (!staged)
            return usp_error(USP_ERR_RUNTIME, "out of memory staging a %zu-byte upload on the lazy backend", bytes);
        memcpy(staged, src, bytes);
        usp_status s = lazy_device_enqueue(ctx, stream, "copy", run_copy, &op, 1, dst);
        if (s != USP_OK) {
            free(staged);
            return s;
        }
        op->owned = staged;
    } else if (kind == USP_COPY_DEVICE_TO_HOST) {
        USP_CHECK(lazy_device_enqueue(ctx, stream, "copy", run_copy, &op, 1, src));
        op->p[1] = (void *)src;
        memset(dst, 0xFF, bytes); /* poison: the data is there only after synchronisation */
        op->writes_host = 1;
    } else {
        USP_CHECK(lazy_device_enqueue(ctx, stream, "copy", run_copy, &op, 2, dst, src));
    }
    op->p[0] = dst;
    op->z[0] = bytes;
    if (kind == USP_COPY_HOST_TO_DEVICE)
        return ACCESSES({dst, bytes, 1});
    if (kind == USP_COPY_DEVICE_TO_HOST)
        return ACCESSES({src, bytes, 0});
    return ACCESSES({dst, bytes, 1}, {src, bytes, 0});
}

static usp_status run_zero(const lazy_op *o) { return CPU->zero(NULL, o->p[0], o->z[0], NULL); }
static usp_status lazy_zero(void *ctx, void *ptr, size_t bytes, usp_stream_t *stream)
{
    lazy_op *op;
    USP_CHECK(lazy_device_enqueue(ctx, stream, "zero", run_zero, &op, 1, ptr));
    op->z[0] = bytes;
    return ACCESSES({ptr, bytes, 1});
}

static usp_status lazy_synchronize(void *ctx, usp_stream_t *stream) { return lazy_device_synchronize(ctx, stream); }

static usp_status run_op(const lazy_op *o) { return CPU->run(NULL, &o->desc); }

/* Every op: its buffers checked live, its descriptor kept (with a copy of the host memory it reads:
 * rope's frequencies), a runner queued that calls the cpu kernels later, and what it reads and writes
 * (its operands, by their roles in its kind's row) handed to the order checker. A blocking op
 * (sum_squares, whose result is host memory) waits for its stream and runs now. */
static usp_status lazy_run(void *ctx, const usp_op *desc)
{
    usp_op now = *desc;
    now.stream = NULL;
    if (usp_op_blocking(desc)) {
        USP_CHECK(lazy_device_synchronize(ctx, desc->stream));
        return CPU->run(NULL, &now);
    }
    usp_operand_info info[USP_OP_OPERANDS_MAX];
    const int n = usp_op_operands(desc, info);
    void *ptrs[USP_OP_OPERANDS_MAX];
    usp_access access[USP_OP_OPERANDS_MAX];
    int k = 0;
    for (int i = 0; i < n; i++) {
        ptrs[i] = desc->operand[i].data;
        if (desc->operand[i].data)
            access[k++] = (usp_access){desc->operand[i].data, usp_view_bytes(desc->operand[i]),
                                       !!(info[i].flags & USP_OPERAND_WRITTEN)};
    }
    lazy_op *op;
    USP_CHECK(lazy_device_enqueue_array(ctx, desc->stream, usp_op_name(desc), run_op, &op, n, ptrs));
    op->desc = now;
    size_t bytes;
    const void *host = usp_op_host_input(desc, &bytes);
    if (host) { /* read before the call returns: the op keeps a copy */
        if (!(op->owned = malloc(bytes)))
            return usp_error(USP_ERR_RUNTIME, "out of memory keeping the host input of %s on the lazy backend",
                             op->name);
        usp_op_set_host_input(&op->desc, memcpy(op->owned, host, bytes));
    }
    return lazy_device_check(ctx, desc->stream, op->name, access, k);
}

static int lazy_supports(void *ctx, const usp_op *op)
{
    (void)ctx;
    return CPU->supports(NULL, op);
}

static size_t lazy_workspace_bytes(void *ctx, const usp_op *op)
{
    (void)ctx;
    return CPU->workspace_bytes(NULL, op);
}

static usp_status lazy_stream_create(void *ctx, usp_stream_t **out) { return lazy_device_stream_create(ctx, out); }
static void lazy_stream_destroy(void *ctx, usp_stream_t *s) { lazy_device_stream_destroy(ctx, s); }
static usp_status lazy_event_create(void *ctx, usp_event_t **out) { return lazy_device_event_create(ctx, out); }
static void lazy_event_destroy(void *ctx, usp_event_t *e) { lazy_device_event_destroy(ctx, e); }
static usp_status lazy_event_record(void *ctx, usp_event_t *e, usp_stream_t *s)
{
    return lazy_device_event_record(ctx, e, s);
}
static usp_status lazy_stream_wait_event(void *ctx, usp_stream_t *s, usp_event_t *e)
{
    return lazy_device_stream_wait_event(ctx, s, e);
}
static usp_status lazy_launch_host_func(void *ctx, usp_stream_t *s, void (*fn)(void *), void *arg)
{
    return lazy_device_launch_host_func(ctx, s, fn, arg);
}
static usp_status lazy_run_queued(void *ctx, usp_stream_t *s) { return lazy_device_run_queued(ctx, s); }
static usp_status lazy_note_access(void *ctx, usp_stream_t *s, const char *what, const usp_access *a, int n)
{
    return lazy_device_check(ctx, s, what, a, n);
}
static void lazy_destroy(void *ctx) { lazy_device_destroy(ctx); }
static size_t lazy_cache_bytes(void *ctx) { return CPU->cache_bytes(ctx); } /* the cpu kernels' cache */

static const usp_backend_i lazy_backend_iface = {
    .api_version = USP_BACKEND_API_VERSION,
    .name = "lazy",
    .has_numerics = 1,
    .stores_bf16 = 1, /* as the cpu kernels it runs (backends/cpu/cpu_widen.h) */
    .alloc = lazy_alloc,
    .free = lazy_free,
    .copy = lazy_copy,
    .zero = lazy_zero,
    .synchronize = lazy_synchronize,
    .stream_create = lazy_stream_create,
    .stream_destroy = lazy_stream_destroy,
    .event_create = lazy_event_create,
    .event_destroy = lazy_event_destroy,
    .event_record = lazy_event_record,
    .stream_wait_event = lazy_stream_wait_event,
    .launch_host_func = lazy_launch_host_func,
    .run_queued = lazy_run_queued,
    .note_access = lazy_note_access,
    .cache_bytes = lazy_cache_bytes,
    .supports = lazy_supports,
    .workspace_bytes = lazy_workspace_bytes,
    .run = lazy_run,
    .destroy = lazy_destroy,
};

usp_status usp_backend_lazy_create(usp_backend_t **out)
{
    lazy_device *d;
    USP_CHECK(lazy_device_create(&d));
    usp_status s = usp_backend_create(&lazy_backend_iface, d, out);
    if (s != USP_OK)
        lazy_device_destroy(d);
    else
        lazy_device_set_owner(d, *out);
    return s;
}
