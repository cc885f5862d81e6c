/* The op-conformance table: every slot of usp_backend_i on fixed shapes,
 * edge cases included, each with its tolerance (see tests/conformance.h).
 * This file holds memory, streams, GEMM, strided copies and attention; the
 * layer ops, the loss and the optimizer are in conformance_layer_cases.c.
 *
 * Tolerances are max |got - ref| / max |ref| per output, chosen for an fp32
 * implementation that sums in another order or evaluates exp, tanh, sin and
 * cos to within a few ulps (a GPU): 0 (bitwise) where the op is a copy or one
 * correctly rounded IEEE operation per element (copies, zero, accumulate,
 * scale, add_bias); 1e-6 for elementwise transcendentals and short sums; 1e-5
 * for reductions over rows (norms, softmax, GEMM with k <= 40, attention
 * forward); 1e-4 for the attention backward, whose gradients are sums over a
 * whole sequence of products of recomputed probabilities. A backend that
 * reuses the cpu kernels (the deferred one) meets them with error 0.
 *
 * Inputs are O(1) (uniform in [-1, 1), times the scale given) so that the
 * tolerances mean the same thing for every op; activations get scale 4 to
 * reach the tails of gelu and silu, logits scale 5 for a peaked softmax. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/conformance.h"

#include "core/base/clock_seconds.h"
#include "core/ops/mask.h"
#include "core/trace/trace.h"

/* ---- memory: alloc, free, the three copy kinds, zero ---------------------- */

/* Device-to-device copies, one of whole floats and one of 7 bytes at offsets
 * that are not float-aligned; a buffer freed between allocations (a hole for
 * the accounting) and one freed at the end. */
static void run_buffer_copies(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 300;
    float *a = conformance_input(r, n, 1), *b = conformance_input(r, n, 1);
    float *hole = conformance_input(r, 64, 1);
    CONFORMANCE_OK(r, usp_buffer_copy(r->be, b + 17, a + 100, 120 * sizeof(float), USP_COPY_DEVICE_TO_DEVICE, NULL));
    CONFORMANCE_OK(r, usp_buffer_copy(r->be, (char *)b + 2, (const char *)a + 5, 7, USP_COPY_DEVICE_TO_DEVICE, NULL));
    usp_buffer_free(r->be, hole);
    float *c = conformance_input(r, n, 1);
    CONFORMANCE_OK(r, usp_buffer_copy(r->be, c, b, (size_t)n * sizeof(float), USP_COPY_DEVICE_TO_DEVICE, NULL));
    usp_buffer_free(r->be, a);
    conformance_download(r, "b", b, n);
    conformance_download(r, "c", c, n);
}

/* Host memory from usp_host_alloc (pinned on cuda) as a device-to-host copy's destination, read after a
 * synchronize, then uploaded again from it. */
static void run_host_memory(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 100;
    float *a = conformance_input(r, n, 1), *b = conformance_input(r, n, 1), *host;
    CONFORMANCE_OK(r, usp_host_alloc(r->be, (size_t)n * sizeof *host, "a conformance case", (void **)&host));
    CONFORMANCE_OK(r, usp_buffer_copy(r->be, host, a + 1, (size_t)(n - 1) * sizeof *host, USP_COPY_DEVICE_TO_HOST,
                                      NULL));
    CONFORMANCE_OK(r, usp_backend_synchronize(r->be, NULL));
    CONFORMANCE_OK(r, usp_buffer_copy(r->be, b, host, (size_t)(n - 1) * sizeof *host, USP_COPY_HOST_TO_DEVICE, NULL));
    usp_host_free(r->be, host);
    conformance_download(r, "b", b, n);
}

/* A byte range inside one buffer (not float-aligned: the floats at its ends keep some bytes) and a whole one. */
static void run_buffer_zero(conformance_run *r, const void *params)
{
    (void)params;
    float *a = conformance_input(r, 40, 1), *b = conformance_input(r, 33, 1);
    CONFORMANCE_OK(r, usp_buffer_zero(r->be, (char *)a + 6, 50, NULL));
    CONFORMANCE_OK(r, usp_buffer_zero(r->be, b, 33 * sizeof(float), NULL));
    conformance_download(r, "a", a, 40);
    conformance_download(r, "b", b, 33);
}

/* ---- streams, events, host functions ------------------------------------------ */

typedef struct host_copy {
    const float *from; /* a download's host copy */
    float *to;
    int64_t n;
} host_copy;

static void copy_on_host(void *arg)
{
    const host_copy *h = arg;
    for (int64_t i = 0; i < h->n; i++)
        h->to[i] = h->from[i];
}

/* Work on a stream of the case's own, joined to the default stream by events in
 * both directions: the default stream uploads x and y, the own stream waits
 * for that and scales x, the default stream waits for the scale and adds x to
 * y, downloads y, then runs a host function that copies the downloaded values
 * (in stream order: after the download). Without the waits a backend that
 * runs streams independently computes with stale x. */
static void run_streams_and_events(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 100;
    usp_stream_t *side;
    usp_event_t *uploaded, *scaled;
    CONFORMANCE_OK(r, usp_stream_create(r->be, &side));
    CONFORMANCE_OK(r, usp_event_create(r->be, &uploaded));
    CONFORMANCE_OK(r, usp_event_create(r->be, &scaled));
    float *x = conformance_input(r, n, 1), *y = conformance_input(r, n, 1);
    CONFORMANCE_OK(r, usp_event_record(r->be, uploaded, NULL));
    CONFORMANCE_OK(r, usp_stream_wait_event(r->be, side, uploaded));
    CONFORMANCE_OK(r, usp_scale(r->be, x, 3.0f, n, side));
    /* as the simulator does around a collective on `side` that reads x: the queue run, the access told */
    CONFORMANCE_OK(r, usp_backend_run_queued(r->be, side));
    const usp_access read_x = {x, (size_t)n * sizeof *x, 0};
    CONFORMANCE_OK(r, usp_backend_note_access(r->be, side, "all_reduce", &read_x, 1));
    CONFORMANCE_OK(r, usp_event_record(r->be, scaled, side));
    CONFORMANCE_OK(r, usp_stream_wait_event(r->be, NULL, scaled));
    CONFORMANCE_OK(r, usp_accumulate_2d(r->be, y, (size_t)n, x, (size_t)n, (size_t)n, 1, NULL));
    host_copy *h = conformance_staged(r, sizeof *h);
    *h = (host_copy){.from = conformance_download(r, "y", y, n),
                     .to = conformance_host_output(r, "y by host function", n), .n = n};
    CONFORMANCE_OK(r, usp_launch_host_func(r->be, NULL, copy_on_host, h));
    /* the default stream first: only the wait orders the side stream's scale before the add */
    CONFORMANCE_OK(r, usp_backend_synchronize(r->be, NULL));
    CONFORMANCE_OK(r, usp_stream_destroy(r->be, side));
    usp_event_destroy(r->be, uploaded);
    usp_event_destroy(r->be, scaled);
}

/* Seconds on the host's monotonic clock: the clock usp_backend_time_ops's spans are on. */
static double monotonic_seconds(const void *ctx)
{
    (void)ctx;
    return usp_wall_seconds();
}

/* usp_backend_time_ops (--trace on a real backend): every op a span of the trace, in the order the ops
 * ran, none ending before it starts: around the op on the host (cpu), or between timing events read at
 * the flush (a backend with timing_event_create and event_elapsed). The spans' figures are outputs, so
 * both backends must find the same: 2 spans, named, ordered, of non-negative length. */
static void run_op_timing(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 4096;
    float *x = conformance_input(r, n, 1), *y = conformance_input(r, n, 1); /* uploads: before the timing */
    CONFORMANCE_OK(r, usp_backend_synchronize(r->be, NULL));
    usp_trace_t *trace;
    CONFORMANCE_OK(r, usp_trace_create(&trace));
    CONFORMANCE_OK(r, usp_backend_time_ops(r->be, trace, 3, monotonic_seconds, NULL));
    CONFORMANCE_OK(r, usp_scale(r->be, x, 3.0f, n, NULL));
    CONFORMANCE_OK(r, usp_accumulate_2d(r->be, y, (size_t)n, x, (size_t)n, (size_t)n, 1, NULL));
    CONFORMANCE_OK(r, usp_backend_flush_op_times(r->be));
    float *got = conformance_host_output(r, "spans, named, ordered, non-negative", 4);
    size_t spans = usp_trace_compute_count(trace);
    got[0] = (float)spans;
    got[1] = spans == 2 && !strcmp(usp_trace_compute_at(trace, 0)->name, "scale") &&
             !strcmp(usp_trace_compute_at(trace, 1)->name, "accumulate") &&
             usp_trace_compute_at(trace, 0)->rank == 3;
    got[2] = spans == 2 && usp_trace_compute_at(trace, 1)->t_start >= usp_trace_compute_at(trace, 0)->t_start;
    got[3] = 1;
    for (size_t i = 0; i < spans; i++)
        got[3] = got[3] && usp_trace_compute_at(trace, i)->t_end >= usp_trace_compute_at(trace, i)->t_start;
    usp_trace_destroy(trace); /* no op runs on the backend after this case: nothing records into it again */
}

/* usp_backend_cache_bytes: 0 (the backend does not say) or a cache's size, from 64 KiB (an L2 smaller than any
 * CPU core's or GPU's of the last decade) to 1 TiB; the meta and lazy backends say what cpu's would. */
static void run_cache_size(conformance_run *r, const void *params)
{
    (void)params;
    size_t bytes = usp_backend_cache_bytes(r->be);
    float *got = conformance_host_output(r, "0 or a cache's size", 1);
    got[0] = bytes == 0 || (bytes >= ((size_t)64 << 10) && bytes <= ((size_t)1 << 40));
}

/* ---- gemm ----------------------------------------------------------------- */

typedef struct gemm_params {
    int trans_a, trans_b;
    int64_t m, n, k, batch;
    float alpha, beta;
    int64_t pad;  /* extra elements at the end of every row of A, B and C (ld > columns); C's stay as they were */
    int shared_b; /* stride_b = 0: one B for the whole batch (a weight) */
} gemm_params;

static void run_gemm(conformance_run *r, const void *params)
{
    const gemm_params *p = params;
    const int64_t rows_a = p->trans_a ? p->k : p->m, lda = (p->trans_a ? p->m : p->k) + p->pad;
    const int64_t rows_b = p->trans_b ? p->n : p->k, ldb = (p->trans_b ? p->k : p->n) + p->pad;
    const int64_t ldc = p->n + p->pad, stride_b = p->shared_b ? 0 : rows_b * ldb;
    const int64_t size_c = p->batch * p->m * ldc;
    usp_gemm_desc g = {.trans_a = p->trans_a, .trans_b = p->trans_b, .m = p->m, .n = p->n, .k = p->k,
                       .alpha = p->alpha, .beta = p->beta, .lda = lda, .stride_a = rows_a * lda, .ldb = ldb,
                       .stride_b = stride_b, .ldc = ldc, .stride_c = p->m * ldc, .batch = p->batch};
    g.a = conformance_input(r, p->batch * rows_a * lda, 1);
    g.b = conformance_input(r, p->shared_b ? rows_b * ldb : p->batch * rows_b * ldb, 1);
    g.c = conformance_input(r, size_c, 1);
    CONFORMANCE_OK(r, usp_gemm(r->be, &g, NULL));
    conformance_download(r, "c", g.c, size_c);
}

static const gemm_params gemm_nn = {0, 0, 17, 13, 19, 3, 0.5f, 0.0f, 0, 0};
static const gemm_params gemm_nt = {0, 1, 17, 13, 19, 3, 1.0f, 2.0f, 3, 0};
static const gemm_params gemm_tn = {1, 0, 17, 13, 19, 3, -1.5f, -1.0f, 0, 0};
static const gemm_params gemm_tt = {1, 1, 17, 13, 40, 2, 1.0f, 0.5f, 2, 0};
static const gemm_params gemm_row_vector = {0, 0, 1, 24, 16, 2, 1.0f, 1.0f, 0, 1};
static const gemm_params gemm_column = {1, 0, 21, 1, 16, 1, 1.0f, 0.0f, 1, 0};
static const gemm_params gemm_k0 = {1, 0, 5, 7, 0, 2, 1.0f, 2.0f, 0, 0}; /* C = beta C */

/* ---- copy_2d and accumulate_2d ---------------------------------------------- */

typedef struct strided_params {
    int64_t rows, row, dst_stride, src_stride; /* copy_2d: bytes; accumulate_2d: floats */
} strided_params;

static void run_copy_2d(conformance_run *r, const void *params)
{
    const strided_params *p = params;
    const int64_t dst_floats = (p->rows * p->dst_stride + 3) / 4, src_floats = (p->rows * p->src_stride + 3) / 4;
    float *dst = conformance_input(r, dst_floats, 1), *src = conformance_input(r, src_floats, 1);
    CONFORMANCE_OK(r, usp_copy_2d(r->be, dst, (size_t)p->dst_stride, src, (size_t)p->src_stride, (size_t)p->row,
                                  (size_t)p->rows, NULL));
    conformance_download(r, "dst", dst, dst_floats);
}

static const strided_params copy_2d_gaps = {7, 20, 32, 24};
static const strided_params copy_2d_one_row = {1, 12, 12, 12};
static const strided_params copy_2d_bytes = {5, 6, 10, 7}; /* rows of 6 bytes at odd strides */

static void run_accumulate_2d(conformance_run *r, const void *params)
{
    const strided_params *p = params;
    float *dst = conformance_input(r, p->rows * p->dst_stride, 1);
    float *src = conformance_input(r, p->rows * p->src_stride, 1);
    CONFORMANCE_OK(r, usp_accumulate_2d(r->be, dst, (size_t)p->dst_stride, src, (size_t)p->src_stride,
                                        (size_t)p->row, (size_t)p->rows, NULL));
    conformance_download(r, "dst", dst, p->rows * p->dst_stride);
}

static const strided_params accumulate_2d_gaps = {5, 9, 12, 10};
static const strided_params accumulate_2d_one_row = {1, 33, 33, 33};

/* ---- attention ---------------------------------------------------------------- */

typedef struct attention_params {
    usp_attention_shape s; /* scale 0: 1/sqrt(head_dim) */
    int backward;          /* 0: forward only */
    int accumulate;        /* backward: add to random dq, dk, dv (1) or overwrite NaN ones (0) */
    int documents;         /* 1: rows packed with documents (attention_documents), over s.seq_len positions */
} attention_params;

/* Documents of 1, 3, 7, 2 and 13 tokens and the rest, cycled; row b starts at document b. */
static void attention_documents(int64_t batch, int64_t seq_len, int32_t *table)
{
    static const int64_t lengths[] = {1, 3, 7, 2, 13, 6, 20};
    const int n = (int)(sizeof lengths / sizeof *lengths);
    for (int64_t b = 0; b < batch; b++) {
        int64_t cut[64], count = 0;
        for (int64_t at = 0, d = b; at < seq_len; d++, count++) {
            cut[count] = lengths[d % n] < seq_len - at ? lengths[d % n] : seq_len - at;
            at += cut[count];
        }
        usp_mask_table_fill(cut, count, table + 2 * b * seq_len);
    }
}

static void run_attention(conformance_run *r, const void *params)
{
    const attention_params *p = params;
    usp_attention_shape s = p->s;
    s.scale = s.scale ? s.scale : 1.0f / sqrtf((float)s.head_dim);
    int32_t table[2 * 2 * 64]; /* batch <= 2, seq_len <= 64 */
    if (p->documents) {
        attention_documents(s.batch, s.seq_len, table);
        s.docs_host = table;
        s.docs = conformance_ids(r, table, 2 * s.batch * s.seq_len);
    }
    const int64_t nq = s.batch * s.n_q * s.n_heads * s.head_dim, nkv = s.batch * s.n_kv * s.n_kv_heads * s.head_dim;
    const int64_t nlse = s.batch * s.n_heads * s.n_q;
    float *q = conformance_input(r, nq, 2), *k = conformance_input(r, nkv, 2), *v = conformance_input(r, nkv, 2);
    float *o = conformance_output_buffer(r, nq), *lse = conformance_output_buffer(r, nlse);
    CONFORMANCE_OK(r, usp_flash_attention_forward(r->be, &s, q, k, v, o, lse, NULL));
    conformance_download(r, "o", o, nq);
    conformance_download(r, "lse", lse, nlse);
    if (!p->backward)
        return;
    float *d_o = conformance_input(r, nq, 1);
    float *dq = p->accumulate ? conformance_input(r, nq, 1) : conformance_output_buffer(r, nq);
    float *dk = p->accumulate ? conformance_input(r, nkv, 1) : conformance_output_buffer(r, nkv);
    float *dv = p->accumulate ? conformance_input(r, nkv, 1) : conformance_output_buffer(r, nkv);
    CONFORMANCE_OK(r, usp_flash_attention_backward(r->be, &s, q, k, v, o, lse, d_o, dq, dk, dv, p->accumulate, NULL));
    conformance_download(r, "dq", dq, nq);
    conformance_download(r, "dk", dk, nkv);
    conformance_download(r, "dv", dv, nkv);
}

/* {batch, n_q, n_kv, n_heads, n_kv_heads, head_dim, q_offset, kv_offset, causal, scale, window, seq_len,
 * docs, docs_host} */
#define FULL {2, 19, 19, 4, 4, 32, 0, 0, 0, 0, 0, 0, NULL, NULL}
#define CAUSAL_GQA {1, 23, 23, 4, 2, 32, 0, 0, 1, 0, 0, 0, NULL, NULL}
/* one block of a ring: queries 24..39 against keys 16..31, one kv head for both query heads (MQA) */
#define RING_BLOCK {1, 16, 16, 2, 1, 64, 24, 16, 1, 0, 0, 0, NULL, NULL}
/* keys 40..47 come after every query 0..7: no query sees a key (lse -inf, o 0, zero gradients) */
#define MASKED_BLOCK {1, 8, 8, 2, 2, 32, 0, 40, 1, 0.3f, 0, 0, NULL, NULL}
#define FEW_QUERIES {2, 5, 37, 2, 2, 32, 0, 0, 0, 0, 0, 0, NULL, NULL}
#define FEW_KEYS_CAUSAL {1, 37, 5, 2, 1, 32, 0, 0, 1, 0, 0, 0, NULL, NULL}

static const attention_params attn_full = {FULL, 0, 0, 0}, attn_full_bwd = {FULL, 1, 0, 0};
static const attention_params attn_causal_gqa = {CAUSAL_GQA, 0, 0, 0}, attn_causal_gqa_bwd = {CAUSAL_GQA, 1, 0, 0};
static const attention_params attn_ring = {RING_BLOCK, 0, 0, 0}, attn_ring_bwd_acc = {RING_BLOCK, 1, 1, 0};
static const attention_params attn_masked = {MASKED_BLOCK, 0, 0, 0}, attn_masked_bwd = {MASKED_BLOCK, 1, 0, 0};
static const attention_params attn_few_q = {FEW_QUERIES, 1, 0, 0}, attn_few_kv = {FEW_KEYS_CAUSAL, 1, 1, 0};
/* Masks beyond causal (core/ops/mask.h): a window of 7 keys over 40 tokens; packed documents in two
 * rows that differ; a ring block (queries 24..39, keys 16..31) of packed documents under a window. */
#define WINDOW {1, 40, 40, 4, 2, 32, 0, 0, 1, 0, 7, 40, NULL, NULL}
#define DOCUMENTS {2, 37, 37, 2, 1, 32, 0, 0, 1, 0, 0, 37, NULL, NULL}
#define DOCUMENTS_FULL {1, 30, 30, 2, 2, 32, 0, 0, 0, 0, 0, 30, NULL, NULL}
#define DOCUMENTS_RING_WINDOW {1, 16, 16, 2, 1, 64, 24, 16, 1, 0, 12, 40, NULL, NULL}
static const attention_params attn_window = {WINDOW, 1, 0, 0}, attn_documents = {DOCUMENTS, 1, 0, 1};
static const attention_params attn_documents_full = {DOCUMENTS_FULL, 1, 0, 1};
static const attention_params attn_documents_ring = {DOCUMENTS_RING_WINDOW, 1, 1, 1};

/* Two partial results per (row, head), some of them rows that have seen no key
 * (lse -inf, o 0): only the accumulated one, only the part, and both. */
static void run_attention_merge(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 6, H = 3, D = 32;
    float *o = conformance_host(r, n * H * D, 1), *o_part = conformance_host(r, n * H * D, 1);
    float *lse = conformance_host(r, H * n, 3), *lse_part = conformance_host(r, H * n, 3);
    const conformance_unseen unseen[] = {{0, 1, 1, 0}, {1, 2, 0, 1}, {2, 3, 1, 1}};
    conformance_mark_unseen(o, o_part, lse, lse_part, n, H, D, unseen, (int)(sizeof unseen / sizeof *unseen));
    float *d_o = conformance_upload(r, o, n * H * D), *d_lse = conformance_upload(r, lse, H * n);
    float *d_part = conformance_upload(r, o_part, n * H * D), *d_lse_part = conformance_upload(r, lse_part, H * n);
    CONFORMANCE_OK(r, usp_attention_merge(r->be, d_o, d_lse, d_part, d_lse_part, n, H, D, NULL));
    conformance_download(r, "o", d_o, n * H * D);
    conformance_download(r, "lse", d_lse, H * n);
}

/* ---- the table ----------------------------------------------------------------------------------- */

#define MEMORY (SLOT(alloc) | SLOT(free) | SLOT(copy) | SLOT(synchronize) | SLOT(destroy))
#define STREAMS                                                                                             \
    (SLOT(stream_create) | SLOT(stream_destroy) | SLOT(event_create) | SLOT(event_destroy) | SLOT(event_record) | \
     SLOT(stream_wait_event) | SLOT(run_queued) | SLOT(note_access) | SLOT(launch_host_func))
#define ATTENTION (SLOT(workspace_bytes) | SLOT(supports) | SLOT(run) | SLOT(attention_forward))
#define ATTENTION_BWD (ATTENTION | SLOT(attention_backward))

const conformance_case conformance_cases[] = {
    {"buffer copies: three kinds, unaligned bytes, free", run_buffer_copies, NULL, MEMORY, 0, 0, 0},
    {"buffer zero: unaligned range, whole buffer", run_buffer_zero, NULL, SLOT(zero), 0, 0, 0},
    {"host memory: a copy lands in it, uploaded back", run_host_memory, NULL, SLOT(host_alloc) | SLOT(host_free), 0, 0,
     0},
    {"streams and events both ways, a host function", run_streams_and_events, NULL, STREAMS, 0, 0, 0},
    {"op timing: a span per op (host clock, or timing events)", run_op_timing, NULL,
     SLOT(timing_event_create) | SLOT(event_elapsed), 0, 0, 0},
    {"cache size: none, or a cache's", run_cache_size, NULL, SLOT(cache_bytes), 0, 0, 0},
    {"gemm nn, batch 3, beta 0", run_gemm, &gemm_nn, SLOT(gemm), 1e-5, 0, 0},
    {"gemm nt, beta 2, padded rows", run_gemm, &gemm_nt, SLOT(gemm), 1e-5, 0, 0},
    {"gemm tn, beta -1", run_gemm, &gemm_tn, SLOT(gemm), 1e-5, 0, 0},
    {"gemm tt, k 40, padded rows", run_gemm, &gemm_tt, SLOT(gemm), 1e-5, 0, 0},
    {"gemm m 1, one B for the batch", run_gemm, &gemm_row_vector, SLOT(gemm), 1e-5, 0, 0},
    {"gemm n 1", run_gemm, &gemm_column, SLOT(gemm), 1e-5, 0, 0},
    {"gemm k 0: C = beta C", run_gemm, &gemm_k0, SLOT(gemm), 0, 0, 0},
    {"copy_2d with gaps", run_copy_2d, &copy_2d_gaps, SLOT(copy_2d), 0, 0, 0},
    {"copy_2d one row", run_copy_2d, &copy_2d_one_row, SLOT(copy_2d), 0, 0, 0},
    {"copy_2d rows of 6 bytes", run_copy_2d, &copy_2d_bytes, SLOT(copy_2d), 0, 0, 0},
    {"accumulate_2d with gaps", run_accumulate_2d, &accumulate_2d_gaps, SLOT(accumulate_2d), 0, 0, 0},
    {"accumulate_2d one row", run_accumulate_2d, &accumulate_2d_one_row, SLOT(accumulate_2d), 0, 0, 0},
    {"attention forward, full", run_attention, &attn_full, ATTENTION, 1e-5, 0, 0},
    {"attention backward, full", run_attention, &attn_full_bwd, ATTENTION_BWD, 1e-4, 0, 0},
    {"attention forward, causal GQA", run_attention, &attn_causal_gqa, ATTENTION, 1e-5, 0, 0},
    {"attention backward, causal GQA", run_attention, &attn_causal_gqa_bwd, ATTENTION_BWD, 1e-4, 0, 0},
    {"attention forward, ring block (offsets, MQA)", run_attention, &attn_ring, ATTENTION, 1e-5, 0, 0},
    {"attention backward, ring block, accumulate", run_attention, &attn_ring_bwd_acc, ATTENTION_BWD, 1e-4, 0, 0},
    {"attention forward, fully masked block", run_attention, &attn_masked, ATTENTION, 1e-5, 0, 0},
    {"attention backward, fully masked block", run_attention, &attn_masked_bwd, ATTENTION_BWD, 1e-4, 0, 0},
    {"attention n_q 5 < n_kv 37", run_attention, &attn_few_q, ATTENTION_BWD, 1e-4, 0, 0},
    {"attention causal n_q 37 > n_kv 5, accumulate", run_attention, &attn_few_kv, ATTENTION_BWD, 1e-4, 0, 0},
    {"attention causal, window 7", run_attention, &attn_window, ATTENTION_BWD, 1e-4, 0, 0},
    {"attention causal, packed documents, rows differ", run_attention, &attn_documents, ATTENTION_BWD, 1e-4, 0, 0},
    {"attention full, packed documents", run_attention, &attn_documents_full, ATTENTION_BWD, 1e-4, 0, 0},
    {"attention ring block, documents and window 12, accumulate", run_attention, &attn_documents_ring, ATTENTION_BWD,
     1e-4, 0, 0},
    {"attention merge with -inf rows", run_attention_merge, NULL, SLOT(attention_merge), 1e-6, 0, 0},
};

const int conformance_case_count = (int)(sizeof conformance_cases / sizeof *conformance_cases);

void conformance_mark_unseen(float *o, float *o_part, float *lse, float *lse_part, int64_t n, int64_t H, int64_t D,
                             const conformance_unseen *unseen, int count)
{
    for (int u = 0; u < count; u++) {
        const int64_t h = unseen[u].h, i = unseen[u].i;
        for (int64_t d = 0; d < D; d++) {
            if (unseen[u].acc)
                o[(i * H + h) * D + d] = 0.0f;
            if (unseen[u].part)
                o_part[(i * H + h) * D + d] = 0.0f;
        }
        if (unseen[u].acc)
            lse[h * n + i] = -INFINITY;
        if (unseen[u].part)
            lse_part[h * n + i] = -INFINITY;
    }
}
