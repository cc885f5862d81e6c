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
    /* (optional) Frees the context; NULL: nothing to free. */
    void (*destroy)(void *ctx);
} usp_backend_i;

/* Wraps an interface and its context in a backend handle (it takes the context). */
usp_status usp_backend_create(const usp_backend_i *iface, void *ctx, usp_backend_t **out);

#endif
