/* The compute-backend interface, for backend implementers only (users see core/ops/ops.h).
 *
 * In the spirit of ggml-backend: a `static const` table of function pointers
 * filled with designated initializers, plus a context. The wrappers in
 * core/ops/ops.c check arguments, count memory and report costs, so a backend
 * only does the work. The ordering contract is core/ops/ops.h's: every slot that
 * takes a stream enqueues its work there and may return before it is done,
 * unless it says "blocking"; host memory a slot reads is read before it
 * returns. A backend that completes every op before returning (cpu, meta)
 * leaves the stream and event slots NULL. */
#ifndef USP_BACKEND_IMPL_H
#define USP_BACKEND_IMPL_H

#include "core/ops/ops.h"

#define USP_BACKEND_API_VERSION 5

/* A device operand as a slot receives it: where it starts, the dtype its elements are stored in and
 * how many elements the op reads or writes from there. The wrapper builds it with one look-up in the
 * live-buffer table, which also proves the `count` elements lie inside that one buffer and that the
 * dtype is one the op takes for that operand (core/ops/ops.h says which): a backend reads `dtype` here and
 * never asks a buffer. data NULL: an optional operand left out (dtype USP_F32, count 0). One type for
 * inputs and outputs: the const-ness of an input is the public wrapper's, the slot's comment says
 * which operands it writes. */
typedef struct usp_view {
    void *data;
    usp_dtype dtype; /* USP_F32 or USP_BF16 for activations, weights and gradients; USP_F32 elsewhere */
    int64_t count;
} usp_view;

typedef struct usp_backend_i {
    int api_version; /* USP_BACKEND_API_VERSION */
    const char *name;
    int has_numerics; /* 0: the meta backend, buffers are never touched */
    int stores_bf16;  /* 1: buffers may be bf16 (usp_buffer_alloc_as); every op then reads each
                         operand's dtype from its view and `convert` is set */

    /* Allocates device memory, usable by any work enqueued after it on any stream; need not wait for the
     * device (cuda: stream-ordered from a pool, backends/cuda/cuda_memory.c). */
    usp_status (*alloc)(void *ctx, size_t bytes, void **out);
    /* Frees device memory from alloc, after the work enqueued so far on the default stream. */
    void (*free)(void *ctx, void *ptr);
    /* (optional, both or none) Host memory a device-to-host copy lands in without the host waiting for
     * it (cuda: pinned; a copy into pageable memory blocks until it is done). NULL: malloc and free. */
    usp_status (*host_alloc)(void *ctx, size_t bytes, void **out);
    void (*host_free)(void *ctx, void *ptr);
    /* Copies bytes; kind says which side is host memory (a host source is read before returning). */
    usp_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes, usp_copy_kind kind,
                       usp_stream_t *stream);
    /* Zeroes device memory. */
    usp_status (*zero)(void *ctx, void *ptr, size_t bytes, usp_stream_t *stream);
    /* (optional) Waits for the stream. Blocking. NULL: every slot completes before it returns. */
    usp_status (*synchronize)(void *ctx, usp_stream_t *stream);
    /* (optional, all six or none, with synchronize) Streams and events, CUDA's semantics (core/ops/ops.h). */
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
    /* (optional, with synchronize) Runs what the stream holds without the program waiting for it
     * (usp_backend_run_queued). NULL: synchronize. */
    usp_status (*run_queued)(void *ctx, usp_stream_t *stream);
    /* (optional) Checks and records what a call outside the slots reads and writes in the stream's
     * order (usp_backend_note_access). NULL: nothing is checked. */
    usp_status (*note_access)(void *ctx, usp_stream_t *stream, const char *what, const usp_access *a, int n);
    /* (optional) Bytes of the cache the backend's ops share (a CPU core's L2, a GPU's L2): what a model of
     * which operands an op finds in cache needs (sim/cache_model.h). NULL or 0: not known. */
    size_t (*cache_bytes)(void *ctx);
    /* (optional) Runs fn(arg) on the host in the stream's order; NULL: the wrapper calls it at once. */
    usp_status (*launch_host_func)(void *ctx, usp_stream_t *stream, void (*fn)(void *arg), void *arg);
    /* Batched row-major GEMM; a, b, c are g's operands (g->a, g->b, g->c), unread a and b when g->k = 0. */
    usp_status (*gemm)(void *ctx, const usp_gemm_desc *g, usp_view a, usp_view b, usp_view c,
                       usp_stream_t *stream);
    /* 2-D strided copy of device memory (the pack/unpack around all-to-all). */
    usp_status (*copy_2d)(void *ctx, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                          size_t row_bytes, size_t rows, usp_stream_t *stream);
    /* (with stores_bf16) Copies src.count elements from src's dtype to dst's (they differ: fp32 to
     * bf16 rounds to nearest even). */
    usp_status (*convert)(void *ctx, usp_view dst, usp_view src, usp_stream_t *stream);
    /* dst += src, 2-D strided (strides in elements). */
    usp_status (*accumulate_2d)(void *ctx, usp_view dst, size_t dst_stride, usp_view src, size_t src_stride,
                                size_t row_elems, size_t rows, usp_stream_t *stream);
    /* Bytes of scratch attention_backward (backward = 1) or attention_forward (0) needs for `s`: 0 where
     * the slot reads none (cuda's forward keeps its state on chip), and then none is allocated. */
    size_t (*attention_workspace_bytes)(void *ctx, const usp_attention_shape *s, int backward);
    /* Flash attention forward and backward (see core/ops/ops.h); `workspace` as sized above. Writes o,
     * lse; dq, dk, dv. lse is f32. */
    usp_status (*attention_forward)(void *ctx, const usp_attention_shape *s, usp_view q, usp_view k, usp_view v,
                                    usp_view o, usp_view lse, void *workspace, usp_stream_t *stream);
    usp_status (*attention_backward)(void *ctx, const usp_attention_shape *s, usp_view q, usp_view k, usp_view v,
                                     usp_view o, usp_view lse, usp_view d_o, usp_view dq, usp_view dk,
                                     usp_view dv, int accumulate, void *workspace, usp_stream_t *stream);
    /* Online-softmax merge of a partial attention result into o, lse (see core/ops/ops.h); lse, lse_part f32. */
    usp_status (*attention_merge)(void *ctx, usp_view o, usp_view lse, usp_view o_part, usp_view lse_part,
                                  int64_t n, int64_t heads, int64_t head_dim, usp_stream_t *stream);
    /* Transformer layer ops, semantics of their wrappers in core/ops/ops.h; called with n > 0 and
     * checked shapes and views (the first operands listed are the ones written; the f32-only ones
     * are named). Each may be NULL only when has_numerics = 0 (the wrapper
     * then reports the cost and returns; usp_sum_squares gives 0); on a numeric backend a
     * NULL slot is a USP_ERR_RUNTIME naming the op. */
    /* out [n, C] = wte[tokens] + wpe[positions] (wpe.data may be NULL). */
    usp_status (*embedding_forward)(void *ctx, usp_view out, const int32_t *tokens, const int32_t *positions,
                                    usp_view wte, usp_view wpe, int64_t n, int64_t C, usp_stream_t *stream);
    /* dwte[tokens[i]] += dout[i], dwpe likewise if non-NULL; deterministic. */
    usp_status (*embedding_backward)(void *ctx, usp_view dwte, usp_view dwpe, usp_view dout, const int32_t *tokens,
                                     const int32_t *positions, int64_t n, int64_t C, usp_stream_t *stream);
    /* LayerNorm forward; bias, mean, rstd may be NULL; mean, rstd f32. */
    usp_status (*layernorm_forward)(void *ctx, usp_view out, usp_view mean, usp_view rstd, usp_view inp,
                                    usp_view weight, usp_view bias, int64_t n, int64_t C, float eps,
                                    usp_stream_t *stream);
    /* LayerNorm backward; accumulates into dinp, dweight, dbias (may be NULL); mean, rstd f32. */
    usp_status (*layernorm_backward)(void *ctx, usp_view dinp, usp_view dweight, usp_view dbias, usp_view dout,
                                     usp_view inp, usp_view weight, usp_view mean, usp_view rstd, int64_t n,
                                     int64_t C, usp_stream_t *stream);
    /* RMSNorm forward; rstd (f32) may be NULL. */
    usp_status (*rmsnorm_forward)(void *ctx, usp_view out, usp_view rstd, usp_view inp, usp_view weight, int64_t n,
                                  int64_t C, float eps, usp_stream_t *stream);
    /* RMSNorm backward; accumulates into dinp and dweight; rstd f32. */
    usp_status (*rmsnorm_backward)(void *ctx, usp_view dinp, usp_view dweight, usp_view dout, usp_view inp,
                                   usp_view weight, usp_view rstd, int64_t n, int64_t C, usp_stream_t *stream);
    /* GELU (tanh approximation) forward over n elements. */
    usp_status (*gelu_tanh_forward)(void *ctx, usp_view out, usp_view inp, int64_t n, usp_stream_t *stream);
    /* GELU backward; dinp overwritten. */
    usp_status (*gelu_tanh_backward)(void *ctx, usp_view dinp, usp_view inp, usp_view dout, int64_t n,
                                     usp_stream_t *stream);
    /* out = silu(gate) * up over n elements. */
    usp_status (*swiglu_forward)(void *ctx, usp_view out, usp_view gate, usp_view up, int64_t n,
                                 usp_stream_t *stream);
    /* SwiGLU backward; dgate and dup overwritten. */
    usp_status (*swiglu_backward)(void *ctx, usp_view dgate, usp_view dup, usp_view gate, usp_view up,
                                  usp_view dout, int64_t n, usp_stream_t *stream);
    /* Rotary embedding of x [n, H, D] in place (inv_freq: NULL, or D/2 host values overriding theta's). */
    usp_status (*rope_forward)(void *ctx, usp_view x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                               float theta, const double *inv_freq, usp_stream_t *stream);
    /* Inverse rotary rotation of dx [n, H, D] in place. */
    usp_status (*rope_backward)(void *ctx, usp_view dx, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                                float theta, const double *inv_freq, usp_stream_t *stream);
    /* Fused softmax cross-entropy; losses (f32) or dlogits may be NULL, dlogits may equal logits. */
    usp_status (*cross_entropy)(void *ctx, usp_view losses, usp_view dlogits, usp_view logits,
                                const int32_t *targets, int64_t n, int64_t V, float grad_scale,
                                usp_stream_t *stream);
    /* One AdamW step over n parameters: params, m, v (f32) updated from grads. */
    usp_status (*adamw_step)(void *ctx, usp_view params, usp_view grads, usp_view m, usp_view v, int64_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                             usp_stream_t *stream);
    /* *out (host) = sum of squares in double, deterministic for any thread count. Blocking. */
    usp_status (*sum_squares)(void *ctx, double *out, usp_view x, int64_t n, usp_stream_t *stream);
    /* x *= s over n elements. */
    usp_status (*scale)(void *ctx, usp_view x, float s, int64_t n, usp_stream_t *stream);
    /* x [n, C] += bias [C]. */
    usp_status (*add_bias)(void *ctx, usp_view x, usp_view bias, int64_t n, int64_t C, usp_stream_t *stream);
    /* dbias [C] += column sums of dout [n, C]. */
    usp_status (*bias_backward)(void *ctx, usp_view dbias, usp_view dout, int64_t n, int64_t C,
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
