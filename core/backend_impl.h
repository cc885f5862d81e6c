/* The compute-backend interface, for backend implementers only (users see core/ops.h).
 *
 * In the spirit of ggml-backend: a `static const` table of function pointers
 * filled with designated initializers, plus a context. The wrappers in
 * core/ops.c check arguments, count memory and report costs, so a backend
 * only does the work. The ordering contract is core/ops.h's: every slot that
 * takes a stream enqueues its work there and may return before it is done,
 * unless it says "blocking"; host memory a slot reads is read before it
 * returns. A backend that completes every op before returning (cpu, meta)
 * leaves the stream and event slots NULL. */
#ifndef USP_BACKEND_IMPL_H
#define USP_BACKEND_IMPL_H

#include "core/ops.h"

#define USP_BACKEND_API_VERSION 3

typedef struct usp_backend_i {
    int api_version; /* USP_BACKEND_API_VERSION */
    const char *name;
    int has_numerics; /* 0: the meta backend, buffers are never touched */
    int stores_bf16;  /* 1: buffers may be bf16 (usp_buffer_alloc_as); every op then reads each
                         operand's dtype from its buffer (usp_buffer_dtype) and `convert` is set */

    /* Allocates device memory. Blocking. */
    usp_status (*alloc)(void *ctx, size_t bytes, void **out);
    /* Frees device memory from alloc, after the work enqueued so far on the default stream. */
    void (*free)(void *ctx, void *ptr);
    /* Copies bytes; kind says which side is host memory (a host source is read before returning). */
    usp_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes, usp_copy_kind kind,
                       usp_stream_t *stream);
    /* Zeroes device memory. */
    usp_status (*zero)(void *ctx, void *ptr, size_t bytes, usp_stream_t *stream);
    /* (optional) Waits for the stream. Blocking. NULL: every slot completes before it returns. */
    usp_status (*synchronize)(void *ctx, usp_stream_t *stream);
    /* (optional, all six or none, with synchronize) Streams and events, CUDA's semantics (core/ops.h). */
    usp_status (*stream_create)(void *ctx, usp_stream_t **out);
    void (*stream_destroy)(void *ctx, usp_stream_t *stream); /* after synchronize */
    usp_status (*event_create)(void *ctx, usp_event_t **out);
    void (*event_destroy)(void *ctx, usp_event_t *event);
    usp_status (*event_record)(void *ctx, usp_event_t *event, usp_stream_t *stream);
    usp_status (*stream_wait_event)(void *ctx, usp_stream_t *stream, usp_event_t *event);
    /* (optional, both or none, with the event slots) Device timing: an event that records when the
     * device reached it (destroyed with event_destroy), and the seconds from `from` to `to` once both
     * are reached (blocking: waits for `to`). NULL: ops are timed on the host (usp_backend_time_ops). */
    usp_status (*timing_event_create)(void *ctx, usp_event_t **out);
    usp_status (*event_elapsed)(void *ctx, usp_event_t *from, usp_event_t *to, double *seconds);
    /* (optional) Runs fn(arg) on the host in the stream's order; NULL: the wrapper calls it at once. */
    usp_status (*launch_host_func)(void *ctx, usp_stream_t *stream, void (*fn)(void *arg), void *arg);
    /* Batched row-major GEMM. */
    usp_status (*gemm)(void *ctx, const usp_gemm_desc *g, usp_stream_t *stream);
    /* 2-D strided copy of device memory (the pack/unpack around all-to-all). */
    usp_status (*copy_2d)(void *ctx, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                          size_t row_bytes, size_t rows, usp_stream_t *stream);
    /* (with stores_bf16) Copies elems elements of device memory from src's buffer's dtype to dst's
     * (they differ: fp32 to bf16 rounds to nearest even). */
    usp_status (*convert)(void *ctx, void *dst, const void *src, size_t elems, usp_stream_t *stream);
    /* dst += src, 2-D strided, f32. */
    usp_status (*accumulate_2d)(void *ctx, float *dst, size_t dst_stride, const float *src,
                                size_t src_stride, size_t row_elems, size_t rows, usp_stream_t *stream);
    /* Bytes of scratch the two attention slots need for `s`. */
    size_t (*attention_workspace_bytes)(void *ctx, const usp_attention_shape *s);
    /* Flash attention forward and backward (see core/ops.h); `workspace` as sized above. */
    usp_status (*attention_forward)(void *ctx, const usp_attention_shape *s, const float *q, const float *k,
                                    const float *v, float *o, float *lse, void *workspace,
                                    usp_stream_t *stream);
    usp_status (*attention_backward)(void *ctx, const usp_attention_shape *s, const float *q,
                                     const float *k, const float *v, const float *o, const float *lse,
                                     const float *d_o, float *dq, float *dk, float *dv, int accumulate,
                                     void *workspace, usp_stream_t *stream);
    /* Online-softmax merge of a partial attention result (see core/ops.h). */
    usp_status (*attention_merge)(void *ctx, float *o, float *lse, const float *o_part,
                                  const float *lse_part, int64_t n, int64_t heads, int64_t head_dim,
                                  usp_stream_t *stream);
    /* Transformer layer ops, semantics of their wrappers in core/ops.h; called with n > 0 and
     * checked shapes and buffers. Each may be NULL only when has_numerics = 0 (the wrapper
     * then reports the cost and returns; usp_sum_squares gives 0); on a numeric backend a
     * NULL slot is a USP_ERR_RUNTIME naming the op. */
    /* out [n, C] = wte[tokens] + wpe[positions] (wpe may be NULL). */
    usp_status (*embedding_forward)(void *ctx, float *out, const int32_t *tokens, const int32_t *positions,
                                    const float *wte, const float *wpe, int64_t n, int64_t C, usp_stream_t *stream);
    /* dwte[tokens[i]] += dout[i], dwpe likewise if non-NULL; deterministic. */
    usp_status (*embedding_backward)(void *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                     const int32_t *positions, int64_t n, int64_t C, usp_stream_t *stream);
    /* LayerNorm forward; bias, mean, rstd may be NULL. */
    usp_status (*layernorm_forward)(void *ctx, float *out, float *mean, float *rstd, const float *inp,
                                    const float *weight, const float *bias, int64_t n, int64_t C, float eps,
                                    usp_stream_t *stream);
    /* LayerNorm backward; accumulates into dinp, dweight, dbias (may be NULL). */
    usp_status (*layernorm_backward)(void *ctx, float *dinp, float *dweight, float *dbias, const float *dout,
                                     const float *inp, const float *weight, const float *mean, const float *rstd,
                                     int64_t n, int64_t C, usp_stream_t *stream);
    /* RMSNorm forward; rstd may be NULL. */
    usp_status (*rmsnorm_forward)(void *ctx, float *out, float *rstd, const float *inp, const float *weight,
                                  int64_t n, int64_t C, float eps, usp_stream_t *stream);
    /* RMSNorm backward; accumulates into dinp and dweight. */
    usp_status (*rmsnorm_backward)(void *ctx, float *dinp, float *dweight, const float *dout, const float *inp,
                                   const float *weight, const float *rstd, int64_t n, int64_t C,
                                   usp_stream_t *stream);
    /* GELU (tanh approximation) forward over n elements. */
    usp_status (*gelu_tanh_forward)(void *ctx, float *out, const float *inp, int64_t n, usp_stream_t *stream);
    /* GELU backward; dinp overwritten. */
    usp_status (*gelu_tanh_backward)(void *ctx, float *dinp, const float *inp, const float *dout, int64_t n,
                                     usp_stream_t *stream);
    /* out = silu(gate) * up over n elements. */
    usp_status (*swiglu_forward)(void *ctx, float *out, const float *gate, const float *up, int64_t n,
                                 usp_stream_t *stream);
    /* SwiGLU backward; dgate and dup overwritten. */
    usp_status (*swiglu_backward)(void *ctx, float *dgate, float *dup, const float *gate, const float *up,
                                  const float *dout, int64_t n, usp_stream_t *stream);
    /* Rotary embedding of x [n, H, D] in place (inv_freq: NULL, or D/2 host values overriding theta's). */
    usp_status (*rope_forward)(void *ctx, float *x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                               float theta, const double *inv_freq, usp_stream_t *stream);
    /* Inverse rotary rotation of dx [n, H, D] in place. */
    usp_status (*rope_backward)(void *ctx, float *dx, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                                float theta, const double *inv_freq, usp_stream_t *stream);
    /* Fused softmax cross-entropy; losses or dlogits may be NULL, dlogits may equal logits. */
    usp_status (*cross_entropy)(void *ctx, float *losses, float *dlogits, const float *logits,
                                const int32_t *targets, int64_t n, int64_t V, float grad_scale,
                                usp_stream_t *stream);
    /* One AdamW step over n parameters. */
    usp_status (*adamw_step)(void *ctx, float *params, const float *grads, float *m, float *v, int64_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay, int64_t t,
                             usp_stream_t *stream);
    /* *out (host) = sum of squares in double, deterministic for any thread count. Blocking. */
    usp_status (*sum_squares)(void *ctx, double *out, const float *x, int64_t n, usp_stream_t *stream);
    /* x *= s over n elements. */
    usp_status (*scale)(void *ctx, float *x, float s, int64_t n, usp_stream_t *stream);
    /* x [n, C] += bias [C]. */
    usp_status (*add_bias)(void *ctx, float *x, const float *bias, int64_t n, int64_t C, usp_stream_t *stream);
    /* dbias [C] += column sums of dout [n, C]. */
    usp_status (*bias_backward)(void *ctx, float *dbias, const float *dout, int64_t n, int64_t C,
                                usp_stream_t *stream);
    /* (optional) Frees the context; NULL: nothing to free. */
    void (*destroy)(void *ctx);
} usp_backend_i;

/* Wraps an interface and its context in a backend handle (it takes the context). */
usp_status usp_backend_create(const usp_backend_i *iface, void *ctx, usp_backend_t **out);

/* The interface of `be`: how a decorator (sim/virtual_streams.c) forwards to the backend it wraps. */
const usp_backend_i *usp_backend_iface_of(const usp_backend_t *be);

/* The context of `be` when it was made with `iface`, else NULL: how a
 * backend's own functions beyond the slots (usp_cuda_stream) find their state. */
void *usp_backend_context_of(usp_backend_t *be, const usp_backend_i *iface);

#endif
