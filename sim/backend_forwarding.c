/* The slots of a backend decorator that pass each op to the backend it wraps
 * (sim/backend_forwarding.h), on that backend's default stream. Each slot is
 * one call: written out rather than made by a macro, so that a debugger and a
 * compiler error name the slot. */
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

static usp_status fwd_gemm(void *ctx, const usp_gemm_desc *g, usp_view a, usp_view b, usp_view c,
                         usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->gemm(TARGET(ctx)->ctx, g, a, b, c, NULL);
}

static usp_status fwd_copy_2d(void *ctx, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                              size_t row_bytes, size_t rows, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->copy_2d(TARGET(ctx)->ctx, dst, dst_stride, src, src_stride, row_bytes, rows,
                                       NULL);
}

static usp_status fwd_convert(void *ctx, usp_view dst, usp_view src, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->convert(TARGET(ctx)->ctx, dst, src, NULL);
}

static usp_status fwd_accumulate_2d(void *ctx, usp_view dst, size_t dst_stride, usp_view src,
                                    size_t src_stride, size_t row_elems, size_t rows, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->accumulate_2d(TARGET(ctx)->ctx, dst, dst_stride, src, src_stride, row_elems,
                                             rows, NULL);
}

static size_t fwd_cache_bytes(void *ctx)
{
    return TARGET(ctx)->iface->cache_bytes(TARGET(ctx)->ctx);
}

static size_t fwd_attention_workspace_bytes(void *ctx, const usp_attention_shape *s, int backward)
{
    return TARGET(ctx)->iface->attention_workspace_bytes(TARGET(ctx)->ctx, s, backward);
}

static usp_status fwd_attention_forward(void *ctx, const usp_attention_shape *s, usp_view q,
                                        usp_view k, usp_view v, usp_view o, usp_view lse, void *workspace,
                                        usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->attention_forward(TARGET(ctx)->ctx, s, q, k, v, o, lse, workspace, NULL);
}

static usp_status fwd_attention_backward(void *ctx, const usp_attention_shape *s, usp_view q,
                                         usp_view k, usp_view v, usp_view o, usp_view lse,
                                         usp_view d_o, usp_view dq, usp_view dk, usp_view dv, int accumulate,
                                         void *workspace, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->attention_backward(TARGET(ctx)->ctx, s, q, k, v, o, lse, d_o, dq, dk, dv,
                                                  accumulate, workspace, NULL);
}

static usp_status fwd_attention_merge(void *ctx, usp_view o, usp_view lse, usp_view o_part,
                                      usp_view lse_part, int64_t n, int64_t heads, int64_t head_dim,
                                      usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->attention_merge(TARGET(ctx)->ctx, o, lse, o_part, lse_part, n, heads, head_dim,
                                               NULL);
}

static usp_status fwd_embedding_forward(void *ctx, usp_view out, const int32_t *tokens,
                                        const int32_t *positions, usp_view wte, usp_view wpe,
                                        int64_t n, int64_t C, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->embedding_forward(TARGET(ctx)->ctx, out, tokens, positions, wte, wpe, n, C,
                                                 NULL);
}

static usp_status fwd_embedding_backward(void *ctx, usp_view dwte, usp_view dwpe, usp_view dout,
                                         const int32_t *tokens, const int32_t *positions, int64_t n,
                                         int64_t C, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->embedding_backward(TARGET(ctx)->ctx, dwte, dwpe, dout, tokens, positions, n, C,
                                                  NULL);
}

static usp_status fwd_layernorm_forward(void *ctx, usp_view out, usp_view mean, usp_view rstd, usp_view inp,
                                        usp_view weight, usp_view bias, int64_t n, int64_t C,
                                        float eps, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->layernorm_forward(TARGET(ctx)->ctx, out, mean, rstd, inp, weight, bias, n, C,
                                                 eps, NULL);
}

static usp_status fwd_layernorm_backward(void *ctx, usp_view dinp, usp_view dweight, usp_view dbias,
                                         usp_view dout, usp_view inp, usp_view weight,
                                         usp_view mean, usp_view rstd, int64_t n, int64_t C,
                                         usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->layernorm_backward(TARGET(ctx)->ctx, dinp, dweight, dbias, dout, inp, weight,
                                                  mean, rstd, n, C, NULL);
}

static usp_status fwd_rmsnorm_forward(void *ctx, usp_view out, usp_view rstd, usp_view inp,
                                      usp_view weight, int64_t n, int64_t C, float eps,
                                      usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->rmsnorm_forward(TARGET(ctx)->ctx, out, rstd, inp, weight, n, C, eps, NULL);
}

static usp_status fwd_rmsnorm_backward(void *ctx, usp_view dinp, usp_view dweight, usp_view dout,
                                       usp_view inp, usp_view weight, usp_view rstd, int64_t n,
                                       int64_t C, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->rmsnorm_backward(TARGET(ctx)->ctx, dinp, dweight, dout, inp, weight, rstd, n,
                                                C, NULL);
}

static usp_status fwd_gelu_tanh_forward(void *ctx, usp_view out, usp_view inp, int64_t n,
                                        usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->gelu_tanh_forward(TARGET(ctx)->ctx, out, inp, n, NULL);
}

static usp_status fwd_gelu_tanh_backward(void *ctx, usp_view dinp, usp_view inp, usp_view dout,
                                         int64_t n, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->gelu_tanh_backward(TARGET(ctx)->ctx, dinp, inp, dout, n, NULL);
}

static usp_status fwd_swiglu_forward(void *ctx, usp_view out, usp_view gate, usp_view up, int64_t n,
                                     usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->swiglu_forward(TARGET(ctx)->ctx, out, gate, up, n, NULL);
}

static usp_status fwd_swiglu_backward(void *ctx, usp_view dgate, usp_view dup, usp_view gate, usp_view up,
                                      usp_view dout, int64_t n, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->swiglu_backward(TARGET(ctx)->ctx, dgate, dup, gate, up, dout, n, NULL);
}

static usp_status fwd_rope_forward(void *ctx, usp_view x, const int32_t *positions, int64_t n, int64_t H,
                                   int64_t D, float theta, const double *inv_freq, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->rope_forward(TARGET(ctx)->ctx, x, positions, n, H, D, theta, inv_freq, NULL);
}

static usp_status fwd_rope_backward(void *ctx, usp_view dx, const int32_t *positions, int64_t n, int64_t H,
                                    int64_t D, float theta, const double *inv_freq, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->rope_backward(TARGET(ctx)->ctx, dx, positions, n, H, D, theta, inv_freq, NULL);
}

static usp_status fwd_cross_entropy(void *ctx, usp_view losses, usp_view dlogits, usp_view logits,
                                    const int32_t *targets, int64_t n, int64_t V, float grad_scale,
                                    usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->cross_entropy(TARGET(ctx)->ctx, losses, dlogits, logits, targets, n, V,
                                             grad_scale, NULL);
}

static usp_status fwd_adamw_step(void *ctx, usp_view params, usp_view grads, usp_view m, usp_view v, int64_t n,
                                 float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                                 usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->adamw_step(TARGET(ctx)->ctx, params, grads, m, v, n, lr, beta1, beta2, eps,
                                          weight_decay, t, NULL);
}

static usp_status fwd_sum_squares(void *ctx, double *out, usp_view x, int64_t n, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->sum_squares(TARGET(ctx)->ctx, out, x, n, NULL);
}

static usp_status fwd_scale(void *ctx, usp_view x, float s, int64_t n, usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->scale(TARGET(ctx)->ctx, x, s, n, NULL);
}

static usp_status fwd_add_bias(void *ctx, usp_view x, usp_view bias, int64_t n, int64_t C,
                               usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->add_bias(TARGET(ctx)->ctx, x, bias, n, C, NULL);
}

static usp_status fwd_bias_backward(void *ctx, usp_view dbias, usp_view dout, int64_t n, int64_t C,
                                    usp_stream_t *stream)
{
    (void)stream;
    return TARGET(ctx)->iface->bias_backward(TARGET(ctx)->ctx, dbias, dout, n, C, NULL);
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
    out->gemm = fwd_gemm;
    out->copy_2d = fwd_copy_2d;
    out->convert = inner->convert ? fwd_convert : NULL;
    out->accumulate_2d = fwd_accumulate_2d;
    out->attention_workspace_bytes = fwd_attention_workspace_bytes;
    out->cache_bytes = inner->cache_bytes ? fwd_cache_bytes : NULL;
    out->attention_forward = fwd_attention_forward;
    out->attention_backward = fwd_attention_backward;
    out->attention_merge = fwd_attention_merge;
    out->embedding_forward = inner->embedding_forward ? fwd_embedding_forward : NULL;
    out->embedding_backward = inner->embedding_backward ? fwd_embedding_backward : NULL;
    out->layernorm_forward = inner->layernorm_forward ? fwd_layernorm_forward : NULL;
    out->layernorm_backward = inner->layernorm_backward ? fwd_layernorm_backward : NULL;
    out->rmsnorm_forward = inner->rmsnorm_forward ? fwd_rmsnorm_forward : NULL;
    out->rmsnorm_backward = inner->rmsnorm_backward ? fwd_rmsnorm_backward : NULL;
    out->gelu_tanh_forward = inner->gelu_tanh_forward ? fwd_gelu_tanh_forward : NULL;
    out->gelu_tanh_backward = inner->gelu_tanh_backward ? fwd_gelu_tanh_backward : NULL;
    out->swiglu_forward = inner->swiglu_forward ? fwd_swiglu_forward : NULL;
    out->swiglu_backward = inner->swiglu_backward ? fwd_swiglu_backward : NULL;
    out->rope_forward = inner->rope_forward ? fwd_rope_forward : NULL;
    out->rope_backward = inner->rope_backward ? fwd_rope_backward : NULL;
    out->cross_entropy = inner->cross_entropy ? fwd_cross_entropy : NULL;
    out->adamw_step = inner->adamw_step ? fwd_adamw_step : NULL;
    out->sum_squares = inner->sum_squares ? fwd_sum_squares : NULL;
    out->scale = inner->scale ? fwd_scale : NULL;
    out->add_bias = inner->add_bias ? fwd_add_bias : NULL;
    out->bias_backward = inner->bias_backward ? fwd_bias_backward : NULL;
}
