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

/* One flash-attention call (see backends/cpu/cpu_attention.h for the math).
 * Layouts, row-major: q, o, d_o, dq [B, Nq, H, D]; k, v, dk, dv [B, Nkv, Hkv, D];
 * lse [B, H, Nq]. Offsets are the global positions of the first query and key,
 * so a call can be one block of a larger (ring) attention. */
typedef struct usp_attention_shape {
    int64_t batch, n_q, n_kv;
    int64_t n_heads, n_kv_heads; /* query head h uses kv head h / (n_heads / n_kv_heads) */
    int64_t head_dim;
    int64_t q_offset, kv_offset;
    int causal;
    float scale;
} usp_attention_shape;

/* Query-key pairs that are not masked: the work of an attention call per (batch, head). */
double usp_attention_visible_pairs(const usp_attention_shape *s);

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

/* cudaMemcpy2D: `rows` rows of `row_bytes`, at byte strides dst_stride and src_stride. */
usp_status usp_copy_2d(usp_backend_t *be, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                       size_t row_bytes, size_t rows, usp_stream_t *stream);

/* dst += src over `rows` rows of `row_elems` f32, at element strides. */
usp_status usp_accumulate_2d(usp_backend_t *be, float *dst, size_t dst_stride, const float *src,
                             size_t src_stride, size_t row_elems, size_t rows, usp_stream_t *stream);

/* Flash attention forward: o and lse (a row that sees no key: o = 0, lse = -inf).
 * Its workspace is allocated through the backend (category "attention workspace"). */
usp_status usp_flash_attention_forward(usp_backend_t *be, const usp_attention_shape *s, const float *q,
                                       const float *k, const float *v, float *o, float *lse,
                                       usp_stream_t *stream);

/* Flash attention backward from the (possibly global) o and lse; accumulate = 1
 * adds to dq, dk, dv instead of overwriting them. */
usp_status usp_flash_attention_backward(usp_backend_t *be, const usp_attention_shape *s, const float *q,
                                        const float *k, const float *v, const float *o, const float *lse,
                                        const float *d_o, float *dq, float *dk, float *dv, int accumulate,
                                        usp_stream_t *stream);

/* Merges a partial attention result into an accumulated one (ring attention):
 * lse' = log(e^lse + e^lse_part), o' = e^(lse - lse') o + e^(lse_part - lse') o_part.
 * o, o_part [n, H, D] with lse, lse_part [H, n] (one batch row). */
usp_status usp_attention_merge(usp_backend_t *be, float *o, float *lse, const float *o_part,
                               const float *lse_part, int64_t n, int64_t heads, int64_t head_dim,
                               usp_stream_t *stream);

#endif
