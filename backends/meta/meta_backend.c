/* The meta backend: the real code on shapes only, so that a 7B model at a
 * million tokens on 512 simulated GPUs is planned in seconds on a laptop.
 *
 * It allocates nothing and computes nothing. An allocation returns a fake
 * address from a bump pointer: 64-byte aligned like the cpu backend's, never
 * reused (so no two live buffers overlap and a stale pointer never aliases a
 * new buffer), with a 64-byte gap after each buffer (so an access one past
 * the end never lands inside the next one when core/ops/ops.c checks ownership).
 * The addresses are never dereferenced: the wrappers in core/ops/ops.c count the
 * allocation and report each op's cost from its shapes before calling a slot,
 * so memory and cost equal the cpu backend's for the same calls. Every slot
 * below is therefore empty; the layer slots are left NULL, which the wrappers
 * allow when has_numerics = 0. The one number that must match the cpu backend
 * is the flash-attention workspace, which core/ops/ops.c allocates from the size
 * the backend asks for: it is the cpu kernel's own formula, so the memory of
 * a meta run is the peak a numeric run measures. */
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

static usp_status meta_gemm(void *ctx, const usp_gemm_desc *g, usp_view a, usp_view b, usp_view c,
                           usp_stream_t *stream)
{
    (void)ctx, (void)g, (void)a, (void)b, (void)c, (void)stream;
    return USP_OK;
}

static usp_status meta_copy_2d(void *ctx, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                               size_t row_bytes, size_t rows, usp_stream_t *stream)
{
    (void)ctx, (void)dst, (void)dst_stride, (void)src, (void)src_stride, (void)row_bytes, (void)rows, (void)stream;
    return USP_OK;
}

static usp_status meta_accumulate_2d(void *ctx, usp_view dst, size_t dst_stride, usp_view src, size_t src_stride,
                                     size_t row_elems, size_t rows, usp_stream_t *stream)
{
    (void)ctx, (void)dst, (void)dst_stride, (void)src, (void)src_stride, (void)row_elems, (void)rows, (void)stream;
    return USP_OK;
}

/* The cpu kernel's workspace for the same call (omp_get_max_threads() tiles, forward and backward),
 * so that a meta run counts the bytes a numeric run allocates. */
static size_t meta_attention_workspace(void *ctx, const usp_attention_shape *s, int backward)
{
    (void)ctx, (void)backward;
    cpu_attention_shape k = {.batch = s->batch, .n_q = s->n_q, .n_kv = s->n_kv, .n_heads = s->n_heads,
                             .n_kv_heads = s->n_kv_heads, .head_dim = s->head_dim, .q_offset = s->q_offset,
                             .kv_offset = s->kv_offset, .causal = s->causal, .scale = s->scale};
    return cpu_attention_workspace_bytes(&k);
}

static usp_status meta_attention_forward(void *ctx, const usp_attention_shape *s, usp_view q, usp_view k,
                                         usp_view v, usp_view o, usp_view lse, void *workspace,
                                         usp_stream_t *stream)
{
    (void)ctx, (void)s, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)workspace, (void)stream;
    return USP_OK;
}

static usp_status meta_attention_backward(void *ctx, const usp_attention_shape *s, usp_view q, usp_view k,
                                          usp_view v, usp_view o, usp_view lse, usp_view d_o,
                                          usp_view dq, usp_view dk, usp_view dv, int accumulate, void *workspace,
                                          usp_stream_t *stream)
{
    (void)ctx, (void)s, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)d_o, (void)dq, (void)dk, (void)dv;
    (void)accumulate, (void)workspace, (void)stream;
    return USP_OK;
}

static usp_status meta_attention_merge(void *ctx, usp_view o, usp_view lse, usp_view o_part, usp_view lse_part,
                                       int64_t n, int64_t heads, int64_t head_dim, usp_stream_t *stream)
{
    (void)ctx, (void)o, (void)lse, (void)o_part, (void)lse_part, (void)n, (void)heads, (void)head_dim, (void)stream;
    return USP_OK;
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
    .gemm = meta_gemm,
    .copy_2d = meta_copy_2d,
    .accumulate_2d = meta_accumulate_2d,
    .attention_workspace_bytes = meta_attention_workspace,
    .attention_forward = meta_attention_forward,
    .attention_backward = meta_attention_backward,
    .attention_merge = meta_attention_merge,
    /* the layer ops (embedding ... bias_backward) stay NULL: their wrappers report the cost and return */
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
