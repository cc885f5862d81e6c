/* The compute-backend interface, for backend implementers only (users see core/ops.h).
 *
 * In the spirit of ggml-backend: a `static const` table of function pointers
 * filled with designated initializers, plus a context. The wrappers in
 * core/ops.c check arguments, count memory and report costs, so a backend
 * only does the work. All slots run on the backend's stream and may return
 * before the work is done, unless they say "blocking". */
#ifndef USP_BACKEND_IMPL_H
#define USP_BACKEND_IMPL_H

#include "core/ops.h"

#define USP_BACKEND_API_VERSION 1

typedef struct usp_backend_i {
    int api_version; /* USP_BACKEND_API_VERSION */
    const char *name;
    int has_numerics; /* 0: the meta backend, buffers are never touched */

    /* Allocates device memory. Blocking. */
    usp_status (*alloc)(void *ctx, size_t bytes, void **out);
    /* Frees device memory from alloc. Blocking. */
    void (*free)(void *ctx, void *ptr);
    /* Copies bytes; kind says which side is host memory. */
    usp_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes, usp_copy_kind kind,
                       usp_stream_t *stream);
    /* Zeroes device memory. */
    usp_status (*zero)(void *ctx, void *ptr, size_t bytes, usp_stream_t *stream);
    /* (optional) Waits for the stream; NULL: every slot completes before it returns. */
    usp_status (*synchronize)(void *ctx, usp_stream_t *stream);
    /* Batched row-major GEMM. */
    usp_status (*gemm)(void *ctx, const usp_gemm_desc *g, usp_stream_t *stream);
    /* 2-D strided copy of device memory (the pack/unpack around all-to-all). */
    usp_status (*copy_2d)(void *ctx, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                          size_t row_bytes, size_t rows, usp_stream_t *stream);
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
    /* (optional) Frees the context; NULL: nothing to free. */
    void (*destroy)(void *ctx);
} usp_backend_i;

/* Wraps an interface and its context in a backend handle (it takes the context). */
usp_status usp_backend_create(const usp_backend_i *iface, void *ctx, usp_backend_t **out);

#endif
