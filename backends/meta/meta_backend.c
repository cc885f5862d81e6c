/* The meta backend: the real code on shapes only, so that a 7B model at a
 * million tokens on 512 simulated GPUs is planned in seconds on a laptop.
 *
 * It allocates nothing and computes nothing. An allocation returns a fake
 * address from a bump pointer: 64-byte aligned like the cpu backend's, never
 * reused (so no two live buffers overlap and a stale pointer never aliases a
 * new buffer), with a 64-byte gap after each buffer (so an access one past
 * the end never lands inside the next one when core/ops/backend.c checks ownership).
 * The addresses are never dereferenced: core/ops/backend.c counts the allocation
 * and usp_op_run reports each op's cost from its shapes, so memory and cost
 * equal the cpu backend's for the same calls. The copies are therefore empty
 * and the run slot NULL, which usp_op_run allows when has_numerics = 0. The one
 * number that must match the cpu backend is the flash-attention workspace,
 * which usp_op_run allocates from the size the backend asks for: it is the cpu
 * kernel's own formula, so the memory of a meta run is the peak a numeric run
 * measures. */
#include "backends/meta/meta_backend.h"

#include <stdint.h>
#include <stdlib.h>

#include "backends/cpu/cpu_attention.h"
#include "core/ops/backend_impl.h"

/* Far from anything a real allocator hands out, and non-NULL. */
#define META_BASE ((uintptr_t)1 << 44)

typedef struct meta_context {
    uintptr_t next; /* the next fake address */
} meta_context;

static usp_status meta_alloc(void *ctx, size_t bytes, void **out)
{
    meta_context *m = ctx;
    uintptr_t rounded = ((uintptr_t)bytes + 63) / 64 * 64;
    if (rounded < bytes || m->next > UINTPTR_MAX - rounded - 64)
        return usp_error(USP_ERR_RUNTIME, "the meta backend ran out of fake address space allocating %zu bytes",
                         bytes);
    *out = (void *)m->next;
    m->next += rounded + 64;
    return USP_OK;
}

static void meta_free(void *ctx, void *ptr) { (void)ctx, (void)ptr; }

/* Host memory is never written either: code that reads results back checks
 * usp_backend_has_numerics first (core/train/train.c, core/model/model.c). */
static usp_status meta_copy(void *ctx, void *dst, const void *src, size_t bytes, usp_copy_kind kind,
                            usp_stream_t *stream)
{
    (void)ctx, (void)dst, (void)src, (void)bytes, (void)kind, (void)stream;
    return USP_OK;
}

static usp_status meta_zero(void *ctx, void *ptr, size_t bytes, usp_stream_t *stream)
{
    (void)ctx, (void)ptr, (void)bytes, (void)stream;
    return USP_OK;
}

/* The cpu kernel's workspace for the same call (omp_get_max_threads() tiles, forward and backward),
 * so that a meta run counts the bytes a numeric run allocates. */
static size_t meta_workspace_bytes(void *ctx, const usp_op *op)
{
    (void)ctx;
    if (op->kind != USP_OP_ATTENTION_FORWARD && op->kind != USP_OP_ATTENTION_BACKWARD)
        return 0;
    const usp_attention_shape *s = &op->p.attention.shape;
    cpu_attention_shape k = {.batch = s->batch, .n_q = s->n_q, .n_kv = s->n_kv, .n_heads = s->n_heads,
                             .n_kv_heads = s->n_kv_heads, .head_dim = s->head_dim, .q_offset = s->q_offset,
                             .kv_offset = s->kv_offset, .causal = s->causal, .scale = s->scale};
    return cpu_attention_workspace_bytes(&k);
}

static void meta_destroy(void *ctx) { free(ctx); }

static const usp_backend_i meta_backend_iface = {
    .api_version = USP_BACKEND_API_VERSION,
    .name = "meta",
    .has_numerics = 0,
    .alloc = meta_alloc,
    .free = meta_free,
    .copy = meta_copy,
    .zero = meta_zero,
    .synchronize = NULL,
    .workspace_bytes = meta_workspace_bytes,
    .run = NULL, /* every op is its cost: usp_op_run reports it and returns */
    .destroy = meta_destroy,
};

usp_status usp_backend_meta_create(usp_backend_t **out)
{
    meta_context *m;
    USP_CHECK(usp_calloc((void **)&m, 1, sizeof *m, "the meta backend"));
    m->next = META_BASE;
    usp_status s = usp_backend_create(&meta_backend_iface, m, out);
    if (s != USP_OK)
        free(m);
    return s;
}
