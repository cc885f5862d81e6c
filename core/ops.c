/* Wrappers around the backend interface: argument checks, memory accounting,
 * cost reports. Costs are computed here from shapes alone, so the cpu, meta
 * and cuda backends report identical flops and bytes for the same call. */
#include "core/backend_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One live allocation. The table is sorted by address so that ownership of a
 * range is a binary search (the simulator checks every buffer a rank hands to
 * the communicator: ranks never share memory). */
typedef struct allocation {
    uintptr_t addr;
    size_t bytes;
    const char *category;
} allocation;

/* Bytes of one category now and at the backend's peak. Categories are few
 * (weights, gradients, optimizer, activations, attention workspace, comm, ...),
 * so a short array searched by name costs less than a scan of the live table;
 * on every new peak the current column is copied to the peak column, so the
 * breakdown at the peak is exact and costs O(categories) per allocation. */
typedef struct category_use {
    const char *name;
    size_t now, at_peak;
} category_use;

#define CATEGORIES_MAX 32

struct usp_backend {
    const usp_backend_i *iface;
    void *context;
    allocation *live; /* sorted by addr */
    size_t n_live, cap_live;
    size_t in_use, peak;
    category_use categories[CATEGORIES_MAX];
    int n_categories;
    double flops; /* every op's reported flops, summed */
    usp_cost_sink_fn cost_fn;
    void *cost_ctx;
};

usp_status usp_backend_create(const usp_backend_i *iface, void *ctx, usp_backend_t **out)
{
    USP_ASSERT(iface && iface->api_version == USP_BACKEND_API_VERSION,
               "backend interface version %d, expected %d", iface ? iface->api_version : -1,
               USP_BACKEND_API_VERSION);
    usp_backend_t *be;
    USP_CHECK(usp_calloc((void **)&be, 1, sizeof *be, "a backend"));
    be->iface = iface;
    be->context = ctx;
    *out = be;
    return USP_OK;
}

const char *usp_backend_name(const usp_backend_t *be) { return be->iface->name; }
int usp_backend_has_numerics(const usp_backend_t *be) { return be->iface->has_numerics; }

void usp_backend_destroy(usp_backend_t *be)
{
    if (!be)
        return;
    for (size_t i = 0; i < be->n_live; i++)
        be->iface->free(be->context, (void *)be->live[i].addr);
    if (be->iface->destroy)
        be->iface->destroy(be->context);
    free(be->live);
    free(be);
}

/* Index of the first allocation whose address is > addr. */
static size_t upper_bound(const usp_backend_t *be, uintptr_t addr)
{
    size_t lo = 0, hi = be->n_live;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (be->live[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void report_cost(usp_backend_t *be, const char *op, double flops, double bytes)
{
    be->flops += flops;
    if (be->cost_fn) {
        usp_op_cost cost = {.op = op, .flops = flops, .bytes = bytes};
        be->cost_fn(be->cost_ctx, &cost);
    }
}

/* The slot of `name` (strcmp: the same literal may have several addresses), or a
 * new one; NULL when the table is full (the category then goes uncounted in the breakdown). */
static category_use *category_slot(usp_backend_t *be, const char *name)
{
    for (int i = 0; i < be->n_categories; i++)
        if (be->categories[i].name == name || strcmp(be->categories[i].name, name) == 0)
            return &be->categories[i];
    if (be->n_categories == CATEGORIES_MAX)
        return NULL;
    be->categories[be->n_categories] = (category_use){.name = name};
    return &be->categories[be->n_categories++];
}

usp_status usp_buffer_alloc(usp_backend_t *be, size_t bytes, const char *category, void **out)
{
    *out = NULL;
    category = category ? category : "other";
    if (be->n_live == be->cap_live) {
        size_t cap = be->cap_live ? 2 * be->cap_live : 16;
        allocation *grown = realloc(be->live, cap * sizeof *grown);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory growing the allocation table");
        be->live = grown;
        be->cap_live = cap;
    }
    void *ptr = NULL;
    usp_status s = be->iface->alloc(be->context, bytes ? bytes : 1, &ptr);
    if (s != USP_OK)
        return s;
    size_t at = upper_bound(be, (uintptr_t)ptr);
    memmove(be->live + at + 1, be->live + at, (be->n_live - at) * sizeof *be->live);
    be->live[at] = (allocation){(uintptr_t)ptr, bytes, category};
    be->n_live++;
    be->in_use += bytes;
    category_use *c = category_slot(be, category);
    if (c)
        c->now += bytes;
    if (be->in_use > be->peak) {
        be->peak = be->in_use;
        for (int i = 0; i < be->n_categories; i++)
            be->categories[i].at_peak = be->categories[i].now;
    }
    *out = ptr;
    return USP_OK;
}

void usp_buffer_free(usp_backend_t *be, void *ptr)
{
    if (!ptr)
        return;
    size_t at = upper_bound(be, (uintptr_t)ptr);
    USP_ASSERT(at > 0 && be->live[at - 1].addr == (uintptr_t)ptr,
               "usp_buffer_free of %p, which this %s backend did not allocate", ptr, be->iface->name);
    at--;
    be->in_use -= be->live[at].bytes;
    category_use *c = category_slot(be, be->live[at].category);
    if (c)
        c->now -= be->live[at].bytes;
    memmove(be->live + at, be->live + at + 1, (be->n_live - at - 1) * sizeof *be->live);
    be->n_live--;
    be->iface->free(be->context, ptr);
}

int usp_backend_owns(const usp_backend_t *be, const void *ptr, size_t bytes)
{
    size_t at = upper_bound(be, (uintptr_t)ptr);
    if (at == 0)
        return 0;
    const allocation *a = &be->live[at - 1];
    uintptr_t p = (uintptr_t)ptr;
    return p >= a->addr && bytes <= a->bytes && p - a->addr <= a->bytes - bytes;
}

size_t usp_backend_bytes_in_use(const usp_backend_t *be) { return be->in_use; }
size_t usp_backend_peak_bytes(const usp_backend_t *be) { return be->peak; }

size_t usp_backend_bytes_in_category(const usp_backend_t *be, const char *category)
{
    size_t sum = 0;
    for (size_t i = 0; i < be->n_live; i++)
        if (strcmp(be->live[i].category, category) == 0)
            sum += be->live[i].bytes;
    return sum;
}

int usp_backend_peak_breakdown(const usp_backend_t *be, const char **names, size_t *bytes, int max)
{
    for (int i = 0; i < be->n_categories && i < max; i++)
        names[i] = be->categories[i].name, bytes[i] = be->categories[i].at_peak;
    return be->n_categories;
}

double usp_backend_flops(const usp_backend_t *be) { return be->flops; }

void usp_backend_set_cost_sink(usp_backend_t *be, usp_cost_sink_fn fn, void *ctx)
{
    be->cost_fn = fn;
    be->cost_ctx = ctx;
}

usp_status usp_buffer_copy(usp_backend_t *be, void *dst, const void *src, size_t bytes,
                           usp_copy_kind kind, usp_stream_t *stream)
{
    if (bytes == 0)
        return USP_OK;
    report_cost(be, kind == USP_COPY_DEVICE_TO_DEVICE ? "copy" : "copy_host", 0, 2.0 * (double)bytes);
    return be->iface->copy(be->context, dst, src, bytes, kind, stream);
}

usp_status usp_buffer_zero(usp_backend_t *be, void *ptr, size_t bytes, usp_stream_t *stream)
{
    if (bytes == 0)
        return USP_OK;
    report_cost(be, "zero", 0, (double)bytes);
    return be->iface->zero(be->context, ptr, bytes, stream);
}

usp_status usp_backend_synchronize(usp_backend_t *be, usp_stream_t *stream)
{
    if (!be->iface->synchronize)
        return USP_OK;
    return be->iface->synchronize(be->context, stream);
}

usp_status usp_gemm(usp_backend_t *be, const usp_gemm_desc *g, usp_stream_t *stream)
{
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0)
        return usp_error(USP_ERR_RUNTIME, "gemm with negative shape m=%lld n=%lld k=%lld batch=%lld",
                         (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch);
    if (g->m == 0 || g->n == 0 || g->batch == 0)
        return USP_OK;
    /* 2mnk multiply-adds per matrix; traffic reads A and B, writes C (and reads it when beta != 0). */
    double mats = (double)g->batch;
    double flops = 2.0 * (double)g->m * (double)g->n * (double)g->k * mats;
    double c_passes = g->beta != 0.0f ? 2.0 : 1.0;
    double bytes = 4.0 * mats * ((double)g->m * g->k + (double)g->k * g->n + c_passes * g->m * g->n);
    report_cost(be, "gemm", flops, bytes);
    return be->iface->gemm(be->context, g, stream);
}

usp_status usp_copy_2d(usp_backend_t *be, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                       size_t row_bytes, size_t rows, usp_stream_t *stream)
{
    if (row_bytes == 0 || rows == 0)
        return USP_OK;
    report_cost(be, "copy", 0, 2.0 * (double)row_bytes * (double)rows);
    return be->iface->copy_2d(be->context, dst, dst_stride, src, src_stride, row_bytes, rows, stream);
}

usp_status usp_accumulate_2d(usp_backend_t *be, float *dst, size_t dst_stride, const float *src,
                             size_t src_stride, size_t row_elems, size_t rows, usp_stream_t *stream)
{
    if (row_elems == 0 || rows == 0)
        return USP_OK;
    double n = (double)row_elems * (double)rows;
    report_cost(be, "accumulate", n, 12.0 * n);
    return be->iface->accumulate_2d(be->context, dst, dst_stride, src, src_stride, row_elems, rows, stream);
}

/* Sum over i in [0, n) of clamp(lo + i, 0, cap): the keys query i sees. */
static double sum_clamped(int64_t lo, int64_t n, int64_t cap)
{
    int64_t hi = lo + n - 1;
    int64_t a = lo > 1 ? lo : 1, b = hi < cap ? hi : cap; /* values in [1, cap] */
    double inside = a <= b ? ((double)a + (double)b) * (double)(b - a + 1) / 2.0 : 0.0;
    int64_t first_full = lo > cap + 1 ? lo : cap + 1; /* values above cap count cap */
    double full = hi >= first_full ? (double)(hi - first_full + 1) * (double)cap : 0.0;
    return inside + full;
}

double usp_attention_visible_pairs(const usp_attention_shape *s)
{
    if (!s->causal)
        return (double)s->n_q * (double)s->n_kv;
    /* query at q_offset + i sees keys kv_offset + j <= q_offset + i: min(max(c + i, 0), n_kv) of them */
    return sum_clamped(s->q_offset - s->kv_offset + 1, s->n_q, s->n_kv);
}

/* FlashAttention's convention: 4 flops per visible pair and head dimension
 * (two matmuls) forward; backward 2.5x forward. Bytes: inputs and outputs once. */
static void attention_cost(usp_backend_t *be, const usp_attention_shape *s, int backward)
{
    double flops = 4.0 * (double)s->batch * (double)s->n_heads * (double)s->head_dim * usp_attention_visible_pairs(s);
    double q_bytes = 4.0 * (double)(s->batch * s->n_q * s->n_heads * s->head_dim);
    double kv_bytes = 4.0 * (double)(s->batch * s->n_kv * s->n_kv_heads * s->head_dim);
    double bytes = backward ? 4 * q_bytes + 4 * kv_bytes : 2 * q_bytes + 2 * kv_bytes;
    report_cost(be, backward ? "attention_backward" : "attention_forward", backward ? 2.5 * flops : flops, bytes);
}

static usp_status check_attention_shape(const usp_attention_shape *s)
{
    if (s->batch < 0 || s->n_q < 0 || s->n_kv < 0 || s->head_dim < 1 || s->n_heads < 1 || s->n_kv_heads < 1 ||
        s->n_heads % s->n_kv_heads != 0)
        return usp_error(USP_ERR_CONFIG,
                         "attention shape: batch %lld, %lld queries, %lld keys, %lld heads, %lld kv heads, head_dim "
                         "%lld: kv heads must divide heads, and every size be positive",
                         (long long)s->batch, (long long)s->n_q, (long long)s->n_kv, (long long)s->n_heads,
                         (long long)s->n_kv_heads, (long long)s->head_dim);
    return USP_OK;
}

usp_status usp_flash_attention_forward(usp_backend_t *be, const usp_attention_shape *s, const float *q,
                                       const float *k, const float *v, float *o, float *lse,
                                       usp_stream_t *stream)
{
    USP_CHECK(check_attention_shape(s));
    if (s->batch == 0 || s->n_q == 0)
        return USP_OK;
    attention_cost(be, s, 0);
    void *ws = NULL;
    size_t ws_bytes = be->iface->attention_workspace_bytes(be->context, s);
    if (ws_bytes)
        USP_CHECK(usp_buffer_alloc(be, ws_bytes, "attention workspace", &ws));
    usp_status st = be->iface->attention_forward(be->context, s, q, k, v, o, lse, ws, stream);
    usp_buffer_free(be, ws);
    return st;
}

usp_status usp_flash_attention_backward(usp_backend_t *be, const usp_attention_shape *s, const float *q,
                                        const float *k, const float *v, const float *o, const float *lse,
                                        const float *d_o, float *dq, float *dk, float *dv, int accumulate,
                                        usp_stream_t *stream)
{
    USP_CHECK(check_attention_shape(s));
    if (s->batch == 0 || (s->n_q == 0 && s->n_kv == 0))
        return USP_OK;
    attention_cost(be, s, 1);
    void *ws = NULL;
    size_t ws_bytes = be->iface->attention_workspace_bytes(be->context, s);
    if (ws_bytes)
        USP_CHECK(usp_buffer_alloc(be, ws_bytes, "attention workspace", &ws));
    usp_status st = be->iface->attention_backward(be->context, s, q, k, v, o, lse, d_o, dq, dk, dv, accumulate,
                                                  ws, stream);
    usp_buffer_free(be, ws);
    return st;
}

usp_status usp_attention_merge(usp_backend_t *be, float *o, float *lse, const float *o_part,
                               const float *lse_part, int64_t n, int64_t heads, int64_t head_dim,
                               usp_stream_t *stream)
{
    if (n == 0)
        return USP_OK;
    double elems = (double)n * (double)heads * (double)head_dim;
    report_cost(be, "attention_merge", 3.0 * elems, 4.0 * (3.0 * elems + 3.0 * (double)(n * heads)));
    return be->iface->attention_merge(be->context, o, lse, o_part, lse_part, n, heads, head_dim, stream);
}

/* ---- Transformer layer ops. Checks first (shapes, then every buffer lies inside
 * one live allocation, which turns an off-by-a-row in model code into a message
 * instead of heap corruption), then the cost, then the slot. Costs count a
 * transcendental (exp, tanh, sqrt, cos) as one flop and bytes as one pass over
 * each operand, what a fused GPU kernel moves; n = 0 costs nothing. */

_Static_assert(sizeof(float) == 4 && sizeof(int32_t) == 4, "layer-op buffers are counted in 4-byte elements");

/* A layer slot may be NULL only on a backend without numerics: there the op is its cost. */
static usp_status missing_slot(const usp_backend_t *be, const char *op)
{
    if (!be->iface->has_numerics)
        return USP_OK;
    return usp_error(USP_ERR_RUNTIME, "the %s backend has no %s op: its usp_backend_i leaves that slot NULL",
                     be->iface->name, op);
}

#define LAYER_CALL(slot, ...) \
    (be->iface->slot ? be->iface->slot(be->context, __VA_ARGS__) : missing_slot(be, #slot))

/* n rows of `dim` = C elements: n >= 0, C >= 1. */
static usp_status check_rows(const char *op, const char *dim, int64_t n, int64_t C)
{
    if (n < 0 || C < 1)
        return usp_error(USP_ERR_CONFIG, "%s: n = %lld rows of %s = %lld: n must be >= 0 and %s >= 1", op,
                         (long long)n, dim, (long long)C, dim);
    return USP_OK;
}

/* `count` 4-byte elements at ptr lie inside one live buffer of this backend (ptr may be NULL when optional). */
static usp_status check_buffer(const usp_backend_t *be, const char *op, const char *name, const void *ptr,
                               int64_t count, int optional)
{
    if (!ptr)
        return optional ? USP_OK
                        : usp_error(USP_ERR_RUNTIME, "%s: %s is NULL; it needs a buffer of %lld elements", op, name,
                                    (long long)count);
    if (!usp_backend_owns(be, ptr, (size_t)count * 4))
        return usp_error(USP_ERR_RUNTIME,
                         "%s: %s (%p, %lld elements) does not lie inside one buffer of this %s backend; pass "
                         "memory from usp_buffer_alloc with room for %lld elements from that address",
                         op, name, ptr, (long long)count, be->iface->name, (long long)count);
    return USP_OK;
}

#define NEED(ptr, count) USP_CHECK(check_buffer(be, op, #ptr, ptr, count, 0))
#define MAYBE(ptr, count) USP_CHECK(check_buffer(be, op, #ptr, ptr, count, 1))

/* n elements: n >= 0. */
static usp_status check_count(const char *op, int64_t n)
{
    if (n < 0)
        return usp_error(USP_ERR_CONFIG, "%s: n = %lld elements; it must be >= 0", op, (long long)n);
    return USP_OK;
}

static usp_status check_eps(const char *op, float eps)
{
    if (!(eps >= 0.0f) || isinf(eps))
        return usp_error(USP_ERR_CONFIG, "%s: eps = %g; it must be a finite value >= 0 (1e-5 is usual)", op,
                         (double)eps);
    return USP_OK;
}

usp_status usp_embedding_forward(usp_backend_t *be, float *out, const int32_t *tokens, const int32_t *positions,
                                 const float *wte, const float *wpe, int64_t n, int64_t C, usp_stream_t *stream)
{
    const char *op = "embedding_forward";
    USP_CHECK(check_rows(op, "C", n, C));
    if (n == 0)
        return USP_OK;
    NEED(out, n * C); NEED(tokens, n); NEED(wte, C); MAYBE(wpe, C);
    if (wpe)
        NEED(positions, n);
    /* per table: read n ids and n rows; one add per element when there are two tables; write out */
    double tables = wpe ? 2.0 : 1.0, nc = (double)n * (double)C;
    report_cost(be, op, (tables - 1.0) * nc, 4.0 * (tables * (nc + (double)n) + nc));
    return LAYER_CALL(embedding_forward, out, tokens, positions, wte, wpe, n, C, stream);
}

usp_status usp_embedding_backward(usp_backend_t *be, float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, const int32_t *positions, int64_t n, int64_t C,
                                  usp_stream_t *stream)
{
    const char *op = "embedding_backward";
    USP_CHECK(check_rows(op, "C", n, C));
    if (n == 0)
        return USP_OK;
    NEED(dwte, C); MAYBE(dwpe, C); NEED(dout, n * C); NEED(tokens, n);
    if (dwpe)
        NEED(positions, n);
    /* read dout once; per table: n ids, read-add-write n rows */
    double tables = dwpe ? 2.0 : 1.0, nc = (double)n * (double)C;
    report_cost(be, op, tables * nc, 4.0 * (nc + tables * ((double)n + 2.0 * nc)));
    return LAYER_CALL(embedding_backward, dwte, dwpe, dout, tokens, positions, n, C, stream);
}

usp_status usp_layernorm_forward(usp_backend_t *be, float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int64_t n, int64_t C, float eps,
                                 usp_stream_t *stream)
{
    const char *op = "layernorm_forward";
    USP_CHECK(check_rows(op, "C", n, C));
    USP_CHECK(check_eps(op, eps));
    if (n == 0)
        return USP_OK;
    NEED(out, n * C); MAYBE(mean, n); MAYBE(rstd, n); NEED(inp, n * C); NEED(weight, C); MAYBE(bias, C);
    /* per element: mean 1, variance 3 (sub, mul, add), output 4 (sub, mul, mul, add) */
    double nc = (double)n * (double)C;
    report_cost(be, op, 8.0 * nc, 4.0 * (2.0 * nc + 2.0 * (double)C + 2.0 * (double)n));
    return LAYER_CALL(layernorm_forward, out, mean, rstd, inp, weight, bias, n, C, eps, stream);
}

usp_status usp_layernorm_backward(usp_backend_t *be, float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean, const float *rstd,
                                  int64_t n, int64_t C, usp_stream_t *stream)
{
    const char *op = "layernorm_backward";
    USP_CHECK(check_rows(op, "C", n, C));
    if (n == 0)
        return USP_OK;
    NEED(dinp, n * C); NEED(dweight, C); MAYBE(dbias, C); NEED(dout, n * C); NEED(inp, n * C); NEED(weight, C);
    NEED(mean, n); NEED(rstd, n);
    /* per element: xh 2, g 1, two row sums 3, dx 5 (sub, mul, sub, mul, add), dw 2, db 1;
     * read dout, inp, dinp, write dinp; weight, dweight and dbias (read and write); mean, rstd */
    double nc = (double)n * (double)C;
    report_cost(be, op, 14.0 * nc, 4.0 * (4.0 * nc + 5.0 * (double)C + 2.0 * (double)n));
    return LAYER_CALL(layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, C, stream);
}

usp_status usp_rmsnorm_forward(usp_backend_t *be, float *out, float *rstd, const float *inp, const float *weight,
                               int64_t n, int64_t C, float eps, usp_stream_t *stream)
{
    const char *op = "rmsnorm_forward";
    USP_CHECK(check_rows(op, "C", n, C));
    USP_CHECK(check_eps(op, eps));
    if (n == 0)
        return USP_OK;
    NEED(out, n * C); MAYBE(rstd, n); NEED(inp, n * C); NEED(weight, C);
    /* per element: square and add 2, output 2 multiplies */
    double nc = (double)n * (double)C;
    report_cost(be, op, 4.0 * nc, 4.0 * (2.0 * nc + (double)C + (double)n));
    return LAYER_CALL(rmsnorm_forward, out, rstd, inp, weight, n, C, eps, stream);
}

usp_status usp_rmsnorm_backward(usp_backend_t *be, float *dinp, float *dweight, const float *dout, const float *inp,
                                const float *weight, const float *rstd, int64_t n, int64_t C, usp_stream_t *stream)
{
    const char *op = "rmsnorm_backward";
    USP_CHECK(check_rows(op, "C", n, C));
    if (n == 0)
        return USP_OK;
    NEED(dinp, n * C); NEED(dweight, C); NEED(dout, n * C); NEED(inp, n * C); NEED(weight, C); NEED(rstd, n);
    /* per element: row sum 3, dx 5 (mul, mul, mul, sub, add), dw 3; read dout, inp, dinp, write dinp */
    double nc = (double)n * (double)C;
    report_cost(be, op, 11.0 * nc, 4.0 * (4.0 * nc + 3.0 * (double)C + (double)n));
    return LAYER_CALL(rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd, n, C, stream);
}

usp_status usp_gelu_tanh_forward(usp_backend_t *be, float *out, const float *inp, int64_t n, usp_stream_t *stream)
{
    const char *op = "gelu_tanh_forward";
    USP_CHECK(check_count(op, n));
    if (n == 0)
        return USP_OK;
    NEED(out, n); NEED(inp, n);
    /* x^3 2, polynomial 2, scale 1, tanh 1, 1 + t 1, two multiplies 2 */
    report_cost(be, op, 9.0 * (double)n, 8.0 * (double)n);
    return LAYER_CALL(gelu_tanh_forward, out, inp, n, stream);
}

usp_status usp_gelu_tanh_backward(usp_backend_t *be, float *dinp, const float *inp, const float *dout, int64_t n,
                                  usp_stream_t *stream)
{
    const char *op = "gelu_tanh_backward";
    USP_CHECK(check_count(op, n));
    if (n == 0)
        return USP_OK;
    NEED(dinp, n); NEED(inp, n); NEED(dout, n);
    /* tanh(u) as forward 6, (1 + t)/2 2, 1 - t^2 2, the polynomial 4, products 5 */
    report_cost(be, op, 19.0 * (double)n, 12.0 * (double)n);
    return LAYER_CALL(gelu_tanh_backward, dinp, inp, dout, n, stream);
}

usp_status usp_swiglu_forward(usp_backend_t *be, float *out, const float *gate, const float *up, int64_t n,
                              usp_stream_t *stream)
{
    const char *op = "swiglu_forward";
    USP_CHECK(check_count(op, n));
    if (n == 0)
        return USP_OK;
    NEED(out, n); NEED(gate, n); NEED(up, n);
    /* sigmoid 4 (neg, exp, add, div), two multiplies */
    report_cost(be, op, 6.0 * (double)n, 12.0 * (double)n);
    return LAYER_CALL(swiglu_forward, out, gate, up, n, stream);
}

usp_status usp_swiglu_backward(usp_backend_t *be, float *dgate, float *dup, const float *gate, const float *up,
                               const float *dout, int64_t n, usp_stream_t *stream)
{
    const char *op = "swiglu_backward";
    USP_CHECK(check_count(op, n));
    if (n == 0)
        return USP_OK;
    NEED(dgate, n); NEED(dup, n); NEED(gate, n); NEED(up, n); NEED(dout, n);
    /* sigmoid 4, dgate 6 (sub, mul, add, three products), dup 2; read 3 arrays, write 2 */
    report_cost(be, op, 12.0 * (double)n, 20.0 * (double)n);
    return LAYER_CALL(swiglu_backward, dgate, dup, gate, up, dout, n, stream);
}

static usp_status rope_checks(const usp_backend_t *be, const char *op, const float *x, const int32_t *positions,
                              int64_t n, int64_t H, int64_t D, float theta)
{
    if (n < 0 || H < 1 || D < 2 || D % 2 != 0)
        return usp_error(USP_ERR_CONFIG,
                         "%s: x [n = %lld, H = %lld, D = %lld]: n must be >= 0, H >= 1 and the head dimension D "
                         "even and >= 2 (dims i and i + D/2 form a rotation pair)",
                         op, (long long)n, (long long)H, (long long)D);
    if (!(theta > 0.0f) || isinf(theta))
        return usp_error(USP_ERR_CONFIG, "%s: rope theta = %g; it must be finite and > 0 (10000 is usual)", op,
                         (double)theta);
    if (n == 0)
        return USP_OK;
    NEED(x, n * H * D); NEED(positions, n);
    return USP_OK;
}

/* One rotation per pair: 4 multiplies, 2 adds; per row and pair one angle (multiply, cos, sin) for all heads. */
static void rope_cost(usp_backend_t *be, const char *op, int64_t n, int64_t H, int64_t D)
{
    double elems = (double)n * (double)H * (double)D;
    report_cost(be, op, 3.0 * elems + 1.5 * (double)n * (double)D, 4.0 * (2.0 * elems + (double)n));
}

usp_status usp_rope_forward(usp_backend_t *be, float *x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                            float theta, usp_stream_t *stream)
{
    USP_CHECK(rope_checks(be, "rope_forward", x, positions, n, H, D, theta));
    if (n == 0)
        return USP_OK;
    rope_cost(be, "rope_forward", n, H, D);
    return LAYER_CALL(rope_forward, x, positions, n, H, D, theta, stream);
}

usp_status usp_rope_backward(usp_backend_t *be, float *dx, const int32_t *positions, int64_t n, int64_t H,
                             int64_t D, float theta, usp_stream_t *stream)
{
    USP_CHECK(rope_checks(be, "rope_backward", dx, positions, n, H, D, theta));
    if (n == 0)
        return USP_OK;
    rope_cost(be, "rope_backward", n, H, D);
    return LAYER_CALL(rope_backward, dx, positions, n, H, D, theta, stream);
}

usp_status usp_cross_entropy(usp_backend_t *be, float *losses, float *dlogits, const float *logits,
                             const int32_t *targets, int64_t n, int64_t V, float grad_scale, usp_stream_t *stream)
{
    const char *op = "cross_entropy";
    USP_CHECK(check_rows(op, "V", n, V));
    if (n == 0)
        return USP_OK;
    MAYBE(losses, n); MAYBE(dlogits, n * V); NEED(logits, n * V); NEED(targets, n);
    /* per logit: max 1, exp(z - m) 2, sum 1, and with the gradient a scale 1; read logits once,
     * write dlogits; targets and losses */
    double nv = (double)n * (double)V, grad = dlogits ? 1.0 : 0.0;
    report_cost(be, op, (4.0 + grad) * nv, 4.0 * ((1.0 + grad) * nv + 2.0 * (double)n));
    return LAYER_CALL(cross_entropy, losses, dlogits, logits, targets, n, V, grad_scale, stream);
}

usp_status usp_adamw_step(usp_backend_t *be, float *params, const float *grads, float *m, float *v, int64_t n,
                          float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                          usp_stream_t *stream)
{
    const char *op = "adamw_step";
    USP_CHECK(check_count(op, n));
    if (t < 1 || !(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f) || !(eps >= 0.0f) ||
        !(lr >= 0.0f) || isinf(lr) || !(weight_decay >= 0.0f) || isinf(weight_decay) || isinf(eps))
        return usp_error(USP_ERR_CONFIG,
                         "%s: step t = %lld, lr = %g, beta1 = %g, beta2 = %g, eps = %g, weight_decay = %g: t counts "
                         "from 1, betas lie in [0, 1) and lr, eps, weight_decay are finite and >= 0 (e.g. t = 1, "
                         "lr = 3e-4, betas 0.9 and 0.95, eps = 1e-8, weight_decay = 0.1)",
                         op, (long long)t, (double)lr, (double)beta1, (double)beta2, (double)eps,
                         (double)weight_decay);
    if (n == 0)
        return USP_OK;
    NEED(params, n); NEED(grads, n); NEED(m, n); NEED(v, n);
    /* m 3, v 4, bias corrections 2, sqrt 1, + eps 1, divide 1, decay 2, lr and update 2;
     * read params, grads, m, v, write params, m, v */
    report_cost(be, op, 16.0 * (double)n, 28.0 * (double)n);
    return LAYER_CALL(adamw_step, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t, stream);
}

usp_status usp_sum_squares(usp_backend_t *be, double *out, const float *x, int64_t n, usp_stream_t *stream)
{
    const char *op = "sum_squares";
    USP_CHECK(check_count(op, n));
    *out = 0.0;
    if (n == 0)
        return USP_OK;
    NEED(x, n);
    report_cost(be, op, 2.0 * (double)n, 4.0 * (double)n);
    return LAYER_CALL(sum_squares, out, x, n, stream);
}

usp_status usp_scale(usp_backend_t *be, float *x, float s, int64_t n, usp_stream_t *stream)
{
    const char *op = "scale";
    USP_CHECK(check_count(op, n));
    if (n == 0)
        return USP_OK;
    NEED(x, n);
    report_cost(be, op, (double)n, 8.0 * (double)n);
    return LAYER_CALL(scale, x, s, n, stream);
}

usp_status usp_add_bias(usp_backend_t *be, float *x, const float *bias, int64_t n, int64_t C, usp_stream_t *stream)
{
    const char *op = "add_bias";
    USP_CHECK(check_rows(op, "C", n, C));
    if (n == 0)
        return USP_OK;
    NEED(x, n * C); NEED(bias, C);
    double nc = (double)n * (double)C;
    report_cost(be, op, nc, 4.0 * (2.0 * nc + (double)C));
    return LAYER_CALL(add_bias, x, bias, n, C, stream);
}

usp_status usp_bias_backward(usp_backend_t *be, float *dbias, const float *dout, int64_t n, int64_t C,
                             usp_stream_t *stream)
{
    const char *op = "bias_backward";
    USP_CHECK(check_rows(op, "C", n, C));
    if (n == 0)
        return USP_OK;
    NEED(dbias, C); NEED(dout, n * C);
    double nc = (double)n * (double)C;
    report_cost(be, op, nc, 4.0 * (nc + 2.0 * (double)C));
    return LAYER_CALL(bias_backward, dbias, dout, n, C, stream);
}
