/* Room core/ops/: the op seam: the compute ops every backend fills (this file, their
 * descriptors op.h, built in op_builders.c, described in op_kinds.c), the slots behind them
 * (backend_impl.h), dtypes (dtype.h), op timing
 * (ops_timer.c). Rooms above call only these functions; backends/ fill them. It may use:
 * base/, trace/.
 *
 * Compute ops: the interface every backend (cpu, meta, lazy, cuda) fills.
 *
 * Model code calls only these functions. Buffers are backend memory (device
 * pointers on CUDA, fake addresses on the meta backend): code never reads them
 * directly, it moves data in and out with usp_buffer_copy. Every op reports its
 * cost (flops and bytes, computed here from the shapes, so every backend
 * reports the same numbers) to an optional cost sink: the simulator turns that
 * into virtual time. Every allocation is counted (current and peak bytes, and
 * by category) whatever the backend, so the planner's memory is the real
 * code's memory.
 *
 * Ordering and completion: CUDA's stream semantics, kept by every backend and
 * enforced in tests by the lazy backend (backends/lazy/), which runs nothing
 * until it must.
 * - An op is enqueued on a stream (NULL: the backend's default stream) and may
 *   return before it has run. Ops on one stream run in the order issued. An op
 *   returns the errors its arguments show; an error found while running is
 *   returned by a later synchronisation point.
 * - Host memory an op reads (the source of a host-to-device copy, a GEMM
 *   descriptor, an attention shape, rope's inv_freq) is read before the call
 *   returns: the caller may reuse it at once.
 * - A device-to-host usp_buffer_copy only enqueues the copy: the host
 *   destination holds the data after usp_backend_synchronize on that stream.
 *   usp_buffer_download is the blocking form. Blocking calls, which return
 *   with their work done: usp_buffer_download, usp_sum_squares,
 *   usp_backend_synchronize. An allocation returns memory usable by all work
 *   enqueued after it, without waiting for the device. A blocking call on a
 *   stream waits for all the work enqueued on it before (so device-to-host
 *   copies enqueued earlier on that stream have landed when it returns).
 *   Each is a host wait, counted (usp_backend_host_waits).
 * - usp_buffer_free is stream-ordered (cudaFreeAsync on the default stream):
 *   work already enqueued on the default stream that reads or writes the
 *   buffer runs first, then the memory is released; the accounting drops at
 *   once. Work on another stream that uses the buffer must be joined to the
 *   default stream with an event before the free. (Stream-ordered frees were
 *   chosen over arenas carved from the meta run: scratch sizes depend on the
 *   call, and a CUDA pool allocator gives the same without a second plan.)
 * - Streams and events order work across queues: usp_event_record marks the
 *   point a stream has reached, usp_stream_wait_event makes later work on
 *   another stream wait for it (cudaEventRecord / cudaStreamWaitEvent). This
 *   is how communication on its own stream overlaps compute (core/parallel/ring.c).
 *   On backends that complete every op before returning (cpu, meta) the
 *   stream and event calls give NULL handles and do nothing. */
#ifndef USP_OPS_H
#define USP_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/ops/dtype.h"
#include "core/base/status.h"

#ifdef __cplusplus /* the CUDA kernels are C++ */
extern "C" {
#endif

typedef struct usp_backend usp_backend_t;
typedef struct usp_stream usp_stream_t; /* a backend queue; NULL is the default one */
struct usp_trace;                       /* core/trace/trace.h */

/* A byte range an op touches, read or written. */
typedef struct usp_range {
    const void *ptr;
    size_t bytes;
} usp_range;


#define USP_OP_OPERANDS_MAX 11 /* operands of one op (attention_backward's 9 tensors, its documents and its
                                  workspace): also the most ranges a cost carries */

/* What an op costs, for the virtual clock. */
typedef struct usp_op_cost {
    const char *op; /* "gemm", "copy", ... */
    double flops;
    double bytes; /* memory traffic: bytes read + bytes written */
    double outputs; /* gemm: elements of C (m n batch); attention: scores (batch heads visible pairs); a 2-D
                       copy or accumulate: its rows; rope: its angles (rows x head_dim / 2); else 0 (sim/kernel_model.h prices a cost an output) */
    usp_stream_t *stream; /* the stream it is enqueued on (NULL: the default): the simulator's lane */
    usp_dtype dtype; /* gemm and attention: the dtype they multiply in (bf16 when an input is bf16); else USP_F32 */
    const usp_range *operands; /* the device ranges core checked for the op (its operands, ids included), in order;
                                  what a model of the caches needs (sim/cache_model.h) */
    int n_operands;
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
 * so a call can be one block of a larger (ring) attention. The mask (core/ops/mask.h):
 * causal, a sliding window, and documents given as a table of int32 [B][seq_len][2], the
 * start and end of the document holding each global position. */
typedef struct usp_attention_shape {
    int64_t batch, n_q, n_kv;
    int64_t n_heads, n_kv_heads; /* query head h uses kv head h / (n_heads / n_kv_heads) */
    int64_t head_dim;
    int64_t q_offset, kv_offset;
    int causal;
    float scale;
    int64_t window;              /* 0: none; W: transformers' sliding_window (core/ops/mask.h) */
    int64_t seq_len;             /* positions of a batch row of the documents' table */
    const int32_t *docs;         /* that table in the backend's memory, which the kernels read; NULL: one document */
    const int32_t *docs_host;    /* the same table in host memory, which the cost counts from (may be docs) */
} usp_attention_shape;

/* Query-key pairs that are not masked: the work of an attention call, summed over its batch rows. */
double usp_attention_visible_pairs(const usp_attention_shape *s);

/* A layer's mask beyond causal, as the schedules carry it: its window, and the documents' table of the
 * whole sequence, [batch][seq_len][2] (docs in the backend's memory, docs_host the same on the host;
 * both NULL: one document a row). Zero: no mask. */
typedef struct usp_attention_mask {
    int64_t window;
    const int32_t *docs, *docs_host;
} usp_attention_mask;

/* The shape's mask fields from m over sequences of seq_len positions: a call of batch rows [row, row +
 * s->batch) of the table (a call of one row in a loop over rows passes that row). */
void usp_attention_shape_mask(usp_attention_shape *s, const usp_attention_mask *m, int64_t seq_len, int64_t row);

/* The backend's name ("cpu", "meta", "cuda"). */
const char *usp_backend_name(const usp_backend_t *be);

/* 1 when buffers hold real numbers; 0 on the meta backend (shapes only). */
int usp_backend_has_numerics(const usp_backend_t *be);

/* 1 when buffers may be stored as bf16 (usp_buffer_alloc_as): cpu and lazy (widened for their fp32 kernels), cuda, meta. */
int usp_backend_stores_bf16(const usp_backend_t *be);

/* 1 when ops may return before their work is done (the stream and event calls then do something). */
int usp_backend_defers(const usp_backend_t *be);

/* Frees every buffer still allocated, then the backend. */
void usp_backend_destroy(usp_backend_t *be);

/* Allocates `bytes` of backend memory (uninitialised), whose elements count as fp32
 * (usp_buffer_dtype: lse, scalars, workspaces); `category` (a string literal:
 * "weights", "activations", "comm", ...) groups it in the accounting. */
usp_status usp_buffer_alloc(usp_backend_t *be, size_t bytes, const char *category, void **out);

/* Allocates `elems` elements stored as `storage` (USP_F32, or USP_BF16 for mixed
 * precision): elems x the storage's size bytes, addressable and counted alike
 * on every backend, and the dtype is kept with the buffer (usp_buffer_dtype).
 * Ops compute in fp32 whatever the storage: a backend with numerics that cannot
 * hold `storage` (usp_backend_stores_bf16 is 0) refuses it with USP_ERR_CONFIG. */
usp_status usp_buffer_alloc_as(usp_backend_t *be, size_t elems, usp_dtype storage, const char *category, void **out);

/* Dtype as a property of the buffer. Code that offsets into, or sizes a copy of,
 * a buffer whose storage may be narrower than fp32 asks the buffer, so that no
 * site counts in float units by accident: a site that still does lands outside
 * its (narrower) buffer, which the copy wrappers and the simulator's
 * communicator refuse. Buffers that are always fp32 (lse, scalars, host staging)
 * keep plain arithmetic. Each call is a binary search of the live buffers; the ops
 * do it once per operand in their wrappers, and backends never do. */

/* The dtype of the live buffer holding ptr (its one-past-the-end pointer included); asserts it has one. */
usp_dtype usp_buffer_dtype(const usp_backend_t *be, const void *ptr);

/* Element `index` counted from ptr, in the dtype of ptr's buffer (usp_elem_at). */
void *usp_buffer_at(const usp_backend_t *be, const void *ptr, size_t index);

/* The bytes of `elems` elements of ptr's buffer. */
size_t usp_buffer_bytes(const usp_backend_t *be, const void *ptr, size_t elems);

/* Copies `elems` elements within backend memory, converting from src's buffer's
 * dtype to dst's (a plain copy when they agree; fp32 master weights rounded into
 * bf16 storage; dtypes that differ must be f32 and bf16, else USP_ERR_CONFIG). A backend
 * with numerics that cannot convert gives USP_ERR_CONFIG. */
usp_status usp_buffer_convert(usp_backend_t *be, void *dst, const void *src, size_t elems, usp_stream_t *stream);

/* Frees a buffer from usp_buffer_alloc, stream-ordered (see above; NULL is a no-op). */
void usp_buffer_free(usp_backend_t *be, void *ptr);

/* Copies `bytes` between host and backend memory, or within backend memory (device to host:
 * the host data is there after usp_backend_synchronize; see above). The backend side(s) must
 * lie in one live buffer each (USP_ERR_RUNTIME otherwise), as for usp_buffer_zero and usp_copy_2d. */
usp_status usp_buffer_copy(usp_backend_t *be, void *dst, const void *src, size_t bytes,
                           usp_copy_kind kind, usp_stream_t *stream);

/* Sets `bytes` of backend memory to zero. */
usp_status usp_buffer_zero(usp_backend_t *be, void *ptr, size_t bytes, usp_stream_t *stream);

/* Copies `bytes` of backend memory at `src` to host memory `host` and waits: blocking. */
usp_status usp_buffer_download(usp_backend_t *be, void *host, const void *src, size_t bytes, usp_stream_t *stream);

/* Waits until every op queued on `stream` (and what it waits for) has finished. Blocking. */
usp_status usp_backend_synchronize(usp_backend_t *be, usp_stream_t *stream);

/* Host memory (zeroed where the backend has no host_alloc slot) that a device-to-host usp_buffer_copy lands
 * in without the host waiting for it (pinned on cuda: a copy into pageable memory blocks until done). */
usp_status usp_host_alloc(usp_backend_t *be, size_t bytes, const char *what, void **out);

/* Frees memory from usp_host_alloc (NULL: nothing). */
void usp_host_free(usp_backend_t *be, void *ptr);

/* usp_backend_synchronize, not counted as a host wait: for a wait counted elsewhere (a download whose copy
 * already blocked). */
usp_status usp_backend_synchronize_uncounted(usp_backend_t *be, usp_stream_t *stream);

/* Runs what `stream` holds so far without the program waiting for it: the simulator calls it before it
 * moves a call's data on the host, in the stream's order, for a call that stands for a device-side one
 * (NCCL's), where the host never waits. Neither a counted host wait nor, on a backend that checks the
 * order of its streams (lazy), an order the program may rely on. */
usp_status usp_backend_run_queued(usp_backend_t *be, usp_stream_t *stream);

/* A byte range a call reads (writes 0) or writes, and may read (writes 1). */
typedef struct usp_access {
    const void *ptr;
    size_t bytes;
    int writes;
} usp_access;

/* Tells a backend that checks the order of its streams (lazy) what a call made outside its ops (the
 * simulator's collectives) reads and writes at this point of `stream`: checked and recorded as one of
 * its ops (USP_ERR_RUNTIME on an access that nothing orders after another stream's write). A no-op
 * elsewhere. */
usp_status usp_backend_note_access(usp_backend_t *be, usp_stream_t *stream, const char *what, const usp_access *a,
                                   int n);

/* Bytes of the cache the backend's ops share (a CPU core's L2, a GPU's L2); 0 when it does not say. */
size_t usp_backend_cache_bytes(const usp_backend_t *be);

/* Counts one host wait a backend makes inside an op (an allocation that synchronises, a fallback):
 * usp_backend_host_waits then includes it. A no-op on a backend that completes every op at once. */
void usp_backend_count_host_wait(usp_backend_t *be);

/* Host waits so far: every usp_backend_synchronize, usp_buffer_download, usp_stream_destroy,
 * usp_sum_squares and device-timing read on a backend that defers its work, and every
 * usp_backend_count_host_wait (core/ops/ops_host.c). 0 on the cpu and meta backends. */
uint64_t usp_backend_host_waits(const usp_backend_t *be);

typedef struct usp_event usp_event_t; /* a point in a stream's work */

/* Creates a stream of its own (NULL on backends that complete every op at once). */
usp_status usp_stream_create(usp_backend_t *be, usp_stream_t **out);

/* Synchronises and destroys a stream from usp_stream_create (NULL is a no-op). */
usp_status usp_stream_destroy(usp_backend_t *be, usp_stream_t *stream);

/* Creates an event (NULL on backends that complete every op at once). */
usp_status usp_event_create(usp_backend_t *be, usp_event_t **out);

/* Destroys an event (NULL is a no-op); work already waiting on it is unaffected. */
void usp_event_destroy(usp_backend_t *be, usp_event_t *event);

/* Marks in `event` the work enqueued on `stream` so far. */
usp_status usp_event_record(usp_backend_t *be, usp_event_t *event, usp_stream_t *stream);

/* Work enqueued on `stream` from now on runs after the work `event` marks. */
usp_status usp_stream_wait_event(usp_backend_t *be, usp_stream_t *stream, usp_event_t *event);

/* Runs fn(arg) on the host in `stream`'s order (cudaLaunchHostFunc): after the work enqueued
 * before it, before the work enqueued after it; at once on backends that complete every op at once. */
usp_status usp_launch_host_func(usp_backend_t *be, usp_stream_t *stream, void (*fn)(void *arg), void *arg);

/* 1 when [ptr, ptr+bytes) lies inside one live buffer of this backend. */
int usp_backend_owns(const usp_backend_t *be, const void *ptr, size_t bytes);

/* Bytes allocated now, and the most ever allocated at once. */
size_t usp_backend_bytes_in_use(const usp_backend_t *be);
size_t usp_backend_peak_bytes(const usp_backend_t *be);

/* Bytes allocated now under `category`. */
size_t usp_backend_bytes_in_category(const usp_backend_t *be, const char *category);

/* The memory at the peak by category: names[i] and bytes[i] for the first `max`
 * categories in order of first allocation; returns how many there are. */
int usp_backend_peak_breakdown(const usp_backend_t *be, const char **names, size_t *bytes, int max);

/* The FLOPs every op has reported so far (the sum the cost sink saw). */
double usp_backend_flops(const usp_backend_t *be);

/* The part of them the attention ops (forward and backward) reported: their visible pairs' work, which
 * a mask and the layout spread over the ranks (a rank's attention balance). */
double usp_backend_attention_flops(const usp_backend_t *be);

/* The memory traffic and the outputs (usp_op_cost) every op has reported so far, summed. */
void usp_backend_work(const usp_backend_t *be, double *bytes, double *outputs);

/* Sends the cost of every op to `fn(ctx, cost)` (NULL: nobody listens). */
void usp_backend_set_cost_sink(usp_backend_t *be, usp_cost_sink_fn fn, void *ctx);

/* Measures every op from now on into `trace`, as compute spans of `rank` on the
 * clock `clock(clock_ctx)` (seconds; the runtime's, which its calls are timed
 * on too): between device events where the backend times them (the
 * event_elapsed slot), else on the host around the op, which is the op's
 * duration on a backend that completes it before returning. Until this is
 * called an op pays one untaken branch. (core/ops/ops_timer.c) */
usp_status usp_backend_time_ops(usp_backend_t *be, struct usp_trace *trace, int rank,
                                double (*clock)(const void *clock_ctx), const void *clock_ctx);

/* Puts the device-timed spans recorded so far into the trace (blocking: waits
 * for their events); with host timing they are there already. */
usp_status usp_backend_flush_op_times(usp_backend_t *be);

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

/* ---- Storage of operands. On a backend that stores bf16, activations, weights and
 * their gradients (every float operand not named below) may be stored f32 or bf16;
 * lse, lse_part, mean, rstd, losses and AdamW's params, m and v are f32 only, and
 * int32 ids live in 4-byte buffers (usp_buffer_alloc). Each wrapper reads every
 * operand's dtype from its buffer once and hands the backend a typed view
 * (core/ops/backend_impl.h); an operand in another dtype is USP_ERR_CONFIG naming the
 * op, the operand and the dtype, before the op's cost is reported. */

/* ---- Transformer layer ops. Activations are row-major [n, C], n = batch * tokens;
 * token and position ids are int32 in backend memory; "accumulate" means +=.
 * Every op accepts n = 0 (nothing to do). The caller guarantees ids index their
 * tables: tokens < V (rows of wte), positions < P (rows of wpe). */

/* out[i] = wte[tokens[i]] + (wpe ? wpe[positions[i]] : 0); out [n, C], wte [V, C], wpe [P, C]
 * (positions may be NULL when wpe is). */
usp_status usp_embedding_forward(usp_backend_t *be, float *out, const int32_t *tokens, const int32_t *positions,
                                 const float *wte, const float *wpe, int64_t n, int64_t C, usp_stream_t *stream);

/* dwte[tokens[i]] += dout[i]; dwpe[positions[i]] += dout[i] if dwpe; rows added in order (deterministic). */
usp_status usp_embedding_backward(usp_backend_t *be, float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, const int32_t *positions, int64_t n, int64_t C,
                                  usp_stream_t *stream);

/* out [n, C] = (inp - mean) * rstd * weight [C] + bias [C] (bias may be NULL); mean, rstd [n] saved
 * for the backward (either may be NULL: not saved); rstd = 1/sqrt(biased variance + eps). */
usp_status usp_layernorm_forward(usp_backend_t *be, float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int64_t n, int64_t C, float eps,
                                 usp_stream_t *stream);

/* LayerNorm backward from the saved mean and rstd; dinp [n, C], dweight [C], dbias [C] (may be NULL) accumulate. */
usp_status usp_layernorm_backward(usp_backend_t *be, float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean, const float *rstd,
                                  int64_t n, int64_t C, usp_stream_t *stream);

/* out [n, C] = inp * rstd * weight [C], rstd [n] = 1/sqrt(mean(inp^2) + eps) saved (NULL: not saved). */
usp_status usp_rmsnorm_forward(usp_backend_t *be, float *out, float *rstd, const float *inp, const float *weight,
                               int64_t n, int64_t C, float eps, usp_stream_t *stream);

/* RMSNorm backward from the saved rstd; dinp [n, C] and dweight [C] accumulate. */
usp_status usp_rmsnorm_backward(usp_backend_t *be, float *dinp, float *dweight, const float *dout, const float *inp,
                                const float *weight, const float *rstd, int64_t n, int64_t C, usp_stream_t *stream);

/* out = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) over n elements (GPT-2's GELU). */
usp_status usp_gelu_tanh_forward(usp_backend_t *be, float *out, const float *inp, int64_t n, usp_stream_t *stream);

/* dinp = gelu'(inp) * dout over n elements (dinp overwritten). */
usp_status usp_gelu_tanh_backward(usp_backend_t *be, float *dinp, const float *inp, const float *dout, int64_t n,
                                  usp_stream_t *stream);

/* out = silu(gate) * up over n elements, silu(g) = g * sigmoid(g). */
usp_status usp_swiglu_forward(usp_backend_t *be, float *out, const float *gate, const float *up, int64_t n,
                              usp_stream_t *stream);

/* dgate, dup of usp_swiglu_forward over n elements (overwritten). */
usp_status usp_swiglu_backward(usp_backend_t *be, float *dgate, float *dup, const float *gate, const float *up,
                               const float *dout, int64_t n, usp_stream_t *stream);

/* Element-wise functions over n elements, out_j[i] = f_j(in_0[i], ..., in_k[i], scalar), arithmetic
 * in fp32 whatever the storage. One line each:
 *   X(FN, name, outputs, inputs, flops per element, bytes per element, (operand names: outputs first))
 * The name is the op's in costs, traces and calibration; the bytes are one pass over each operand
 * (4 bytes an element, what the cost model prices: core/ops/op_kinds.c). An in-place function (scale)
 * lists its operand once, as an output: it is read too. */
#define USP_MAP_FNS(X)                                                                                         \
    /* out = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): x^3 2, polynomial 2, scale 1, tanh 1, 1 + t 1,     \
     * two multiplies 2 */                                                                                     \
    X(GELU_TANH_FORWARD, gelu_tanh_forward, 1, 1, 9, 8, ("out", "inp"))                                        \
    /* dinp = gelu'(inp) dout: tanh as forward 6, (1 + t)/2 2, 1 - t^2 2, the polynomial 4, products 5 */      \
    X(GELU_TANH_BACKWARD, gelu_tanh_backward, 1, 2, 19, 12, ("dinp", "inp", "dout"))                           \
    /* out = silu(gate) up: sigmoid 4 (neg, exp, add, div), two multiplies */                                  \
    X(SWIGLU_FORWARD, swiglu_forward, 1, 2, 6, 12, ("out", "gate", "up"))                                      \
    /* dgate, dup: sigmoid 4, dgate 6 (sub, mul, add, three products), dup 2 */                                \
    X(SWIGLU_BACKWARD, swiglu_backward, 2, 3, 12, 20, ("dgate", "dup", "gate", "up", "dout"))                  \
    /* x *= scalar, in place */                                                                                \
    X(SCALE, scale, 1, 0, 1, 8, ("x"))

typedef enum usp_map_fn {
#define USP_MAP_FN_ENUM(fn, name, outs, ins, flops, bytes, names) USP_MAP_##fn,
    USP_MAP_FNS(USP_MAP_FN_ENUM)
#undef USP_MAP_FN_ENUM
    USP_MAP_FN_COUNT
} usp_map_fn;

/* The name of an element-wise function ("gelu_tanh_forward"): its op's in costs and traces. */
const char *usp_map_fn_name(usp_map_fn fn);

/* Runs the element-wise function fn (USP_MAP_FNS) over n elements of its outputs and inputs, in the
 * order of its line; `scalar` is its parameter (scale's factor; else unused). */
usp_status usp_map(usp_backend_t *be, usp_map_fn fn, float *const *outputs, const float *const *inputs, int64_t n,
                   float scalar, usp_stream_t *stream);

/* Rotary embeddings in place on x [n, H, D], Hugging Face Llama convention (rotate_half: dims i and
 * i + D/2 form a pair, inv_freq_i = theta^(-2i/D)), angle = positions[row] * inv_freq_i; positions
 * [n] are GLOBAL token positions. D even. `inv_freq` (host memory, D/2 values; NULL: theta's) gives
 * other frequencies, e.g. Llama 3's scaled ones (usp_model_config_rope_inv_freq). */
usp_status usp_rope_forward(usp_backend_t *be, float *x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                            float theta, const double *inv_freq, usp_stream_t *stream);

/* RoPE backward in place on dx [n, H, D]: the transpose (= inverse) rotation. */
usp_status usp_rope_backward(usp_backend_t *be, float *dx, const int32_t *positions, int64_t n, int64_t H,
                             int64_t D, float theta, const double *inv_freq, usp_stream_t *stream);

/* Fused softmax cross-entropy over logits [n, V], targets [n]: losses [n] = -log softmax(logits[i])[targets[i]]
 * (0 where targets[i] < 0: ignored); dlogits [n, V] = grad_scale * (softmax(logits[i]) - onehot(targets[i]))
 * (0 rows where ignored). dlogits may equal logits (in place); either output may be NULL (not computed).
 * A target >= V is USP_ERR_CONFIG on backends that can see it (cpu). */
usp_status usp_cross_entropy(usp_backend_t *be, float *losses, float *dlogits, const float *logits,
                             const int32_t *targets, int64_t n, int64_t V, float grad_scale, usp_stream_t *stream);

/* One AdamW step (decoupled weight decay, PyTorch's AdamW; bias-corrected with step t >= 1) over n parameters:
 * params, m, v updated in place from grads. */
usp_status usp_adamw_step(usp_backend_t *be, float *params, const float *grads, float *m, float *v, int64_t n,
                          float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                          usp_stream_t *stream);

/* Prices the AdamW step of n parameters whose fp32 master weights, m and v live on the host
 * (ZeRO-Offload): the gradients copied to the host, the CPUs' update, the weights (`weights`
 * dtype) copied back. Shapes only: refused on a backend with numerics (none has a host optimizer). */
usp_status usp_offloaded_adamw_cost(usp_backend_t *be, int64_t n, usp_dtype grads, usp_dtype weights,
                                     usp_stream_t *stream);

/* *out (host) = sum of x[i]^2 in double, in a fixed blocking order (deterministic for any thread count);
 * 0 on a backend without numerics. */
usp_status usp_sum_squares(usp_backend_t *be, double *out, const float *x, int64_t n, usp_stream_t *stream);

/* x *= s over n elements. */
usp_status usp_scale(usp_backend_t *be, float *x, float s, int64_t n, usp_stream_t *stream);

/* x [n, C] += bias [C] on every row. */
usp_status usp_add_bias(usp_backend_t *be, float *x, const float *bias, int64_t n, int64_t C, usp_stream_t *stream);

/* dbias [C] += column sums of dout [n, C]. */
usp_status usp_bias_backward(usp_backend_t *be, float *dbias, const float *dout, int64_t n, int64_t C,
                             usp_stream_t *stream);

#ifdef __cplusplus
}
#endif

#endif
