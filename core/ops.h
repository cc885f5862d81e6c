/* Compute ops: the interface every backend (cpu, meta, cuda) fills.
 *
 * Model code calls only these functions. Buffers are backend memory (device
 * pointers on CUDA, fake addresses on the meta backend): code never reads them
 * directly, it moves data in and out with usp_buffer_copy. Every op reports its
 * cost (flops and bytes, computed here from the shapes, so every backend
 * reports the same numbers) to an optional cost sink: the simulator turns that
 * into virtual time. Every allocation is counted (current and peak bytes, and
 * by category) whatever the backend, so the planner's memory is the real
 * code's memory. */
#ifndef USP_OPS_H
#define USP_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

typedef struct usp_backend usp_backend_t;
typedef struct usp_stream usp_stream_t; /* a backend queue; NULL is the default one */

/* What an op costs, for the virtual clock. */
typedef struct usp_op_cost {
    const char *op; /* "gemm", "copy", ... */
    double flops;
    double bytes; /* memory traffic: bytes read + bytes written */
} usp_op_cost;

typedef void (*usp_cost_sink_fn)(void *ctx, const usp_op_cost *cost);

typedef enum usp_copy_kind {
    USP_COPY_HOST_TO_DEVICE,
    USP_COPY_DEVICE_TO_HOST,
    USP_COPY_DEVICE_TO_DEVICE,
} usp_copy_kind;

/* C = alpha * op(A) @ op(B) + beta * C, row-major, for `batch` matrices at the given strides.
 * op(A) is [m, k], op(B) is [k, n], C is [m, n]; lda/ldb/ldc are row strides in elements. */
typedef struct usp_gemm_desc {
    int trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    const float *a; int64_t lda, stride_a;
    const float *b; int64_t ldb, stride_b;
    float *c; int64_t ldc, stride_c;
    int64_t batch;
} usp_gemm_desc;

/* The backend's name ("cpu", "meta", "cuda"). */
const char *usp_backend_name(const usp_backend_t *be);

/* 1 when buffers hold real numbers; 0 on the meta backend (shapes only). */
int usp_backend_has_numerics(const usp_backend_t *be);

/* Frees every buffer still allocated, then the backend. */
void usp_backend_destroy(usp_backend_t *be);

/* Allocates `bytes` of backend memory (uninitialised); `category` (a string
 * literal: "weights", "activations", "comm", ...) groups it in the accounting. */
usp_status usp_buffer_alloc(usp_backend_t *be, size_t bytes, const char *category, void **out);

/* Frees a buffer from usp_buffer_alloc (NULL is a no-op). */
void usp_buffer_free(usp_backend_t *be, void *ptr);

/* Copies `bytes` between host and backend memory, or within backend memory. */
usp_status usp_buffer_copy(usp_backend_t *be, void *dst, const void *src, size_t bytes,
                           usp_copy_kind kind, usp_stream_t *stream);

/* Sets `bytes` of backend memory to zero. */
usp_status usp_buffer_zero(usp_backend_t *be, void *ptr, size_t bytes, usp_stream_t *stream);

/* Waits until every op queued on `stream` has finished. */
usp_status usp_backend_synchronize(usp_backend_t *be, usp_stream_t *stream);

/* 1 when [ptr, ptr+bytes) lies inside one live buffer of this backend. */
int usp_backend_owns(const usp_backend_t *be, const void *ptr, size_t bytes);

/* Bytes allocated now, and the most ever allocated at once. */
size_t usp_backend_bytes_in_use(const usp_backend_t *be);
size_t usp_backend_peak_bytes(const usp_backend_t *be);

/* Bytes allocated now under `category`. */
size_t usp_backend_bytes_in_category(const usp_backend_t *be, const char *category);

/* Sends the cost of every op to `fn(ctx, cost)` (NULL: nobody listens). */
void usp_backend_set_cost_sink(usp_backend_t *be, usp_cost_sink_fn fn, void *ctx);

/* Batched GEMM (see usp_gemm_desc). */
usp_status usp_gemm(usp_backend_t *be, const usp_gemm_desc *g, usp_stream_t *stream);

#endif
