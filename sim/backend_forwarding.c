/* The slots of a backend decorator that pass memory, copies and every op to the
 * backend it wraps (sim/backend_forwarding.h), on that backend's default stream. */
#include "sim/backend_forwarding.h"

#include <stddef.h>

/* Every decorator context starts with its target (backend_forwarding.h). */
#define TARGET(ctx) ((const sim_forward_target *)(ctx))

static usp_status fwd_alloc(void *ctx, size_t bytes, void **out)
{
    return TARGET(ctx)->iface->alloc(TARGET(ctx)->ctx, bytes, out);
}

static void fwd_free(void *ctx, void *ptr)
{
    TARGET(ctx)->iface->free(TARGET(ctx)->ctx, ptr);
}

static usp_status fwd_copy(void *ctx, void *dst, const void *src, size_t bytes, usp_copy_kind kind,
                           usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->copy(TARGET(ctx)->ctx, dst, src, bytes, kind, NULL);
}

static usp_status fwd_zero(void *ctx, void *ptr, size_t bytes, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->zero(TARGET(ctx)->ctx, ptr, bytes, NULL);
}

static size_t fwd_cache_bytes(void *ctx)
{
    return TARGET(ctx)->iface->cache_bytes(TARGET(ctx)->ctx);
}

static int fwd_supports(void *ctx, const usp_op *op)
{
    return TARGET(ctx)->iface->supports(TARGET(ctx)->ctx, op);
}

static size_t fwd_workspace_bytes(void *ctx, const usp_op *op)
{
    return TARGET(ctx)->iface->workspace_bytes(TARGET(ctx)->ctx, op);
}

/* Every op, on the wrapped backend's default stream: its only one. */
static usp_status fwd_run(void *ctx, const usp_op *op)
{
    usp_op on_default = *op;
    on_default.stream = NULL;
    return TARGET(ctx)->iface->run(TARGET(ctx)->ctx, &on_default);
}

void sim_forwarding_slots(const usp_backend_i *inner, usp_backend_i *out)
{
    out->api_version = USP_BACKEND_API_VERSION;
    out->name = inner->name;
    out->has_numerics = inner->has_numerics;
    out->stores_bf16 = inner->stores_bf16;
    out->alloc = fwd_alloc;
    out->free = fwd_free;
    out->copy = fwd_copy;
    out->zero = fwd_zero;
    out->cache_bytes = inner->cache_bytes ? fwd_cache_bytes : NULL;
    out->supports = inner->supports ? fwd_supports : NULL;
    out->workspace_bytes = inner->workspace_bytes ? fwd_workspace_bytes : NULL;
    out->run = inner->run ? fwd_run : NULL;
}
