/* Wrappers around the backend interface: argument checks, memory accounting,
 * cost reports. Costs are computed here from shapes alone, so the cpu, meta
 * and cuda backends report identical flops and bytes for the same call. */
#include "core/ops/ops_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void *usp_backend_context_of(usp_backend_t *be, const usp_backend_i *iface)
{
    return be && be->iface == iface ? be->context : NULL;
}

const usp_backend_i *usp_backend_iface_of(const usp_backend_t *be) { return be->iface; }

usp_status usp_backend_create(const usp_backend_i *iface, void *ctx, usp_backend_t **out)
{
    USP_ASSERT(iface && iface->api_version == USP_BACKEND_API_VERSION,
               "backend interface version %d, expected %d", iface ? iface->api_version : -1,
               USP_BACKEND_API_VERSION);
    int stream_slots = !!iface->stream_create + !!iface->stream_destroy + !!iface->event_create +
                       !!iface->event_destroy + !!iface->event_record + !!iface->stream_wait_event;
    USP_ASSERT(stream_slots == 0 || (stream_slots == 6 && iface->synchronize),
               "backend %s fills %d of the 6 stream and event slots (all or none, with synchronize)", iface->name,
               stream_slots);
    USP_ASSERT(!iface->timing_event_create == !iface->event_elapsed && (!iface->event_elapsed || stream_slots == 6),
               "backend %s: timing_event_create and event_elapsed go together, with the event slots", iface->name);
    USP_ASSERT(!iface->host_alloc == !iface->host_free, "backend %s: host_alloc and host_free go together",
               iface->name);
    USP_ASSERT(!iface->stores_bf16 || !iface->has_numerics || iface->convert,
               "backend %s stores bf16 but has no convert slot", iface->name);
    usp_backend_t *be;
    USP_CHECK(usp_calloc((void **)&be, 1, sizeof *be, "a backend"));
    be->iface = iface;
    be->context = ctx;
    usp_status s = usp_calloc((void **)&be->operands, 1, sizeof *be->operands, "a backend's operand list");
    if (s != USP_OK) {
        free(be);
        return s;
    }
    *out = be;
    return USP_OK;
}

const char *usp_backend_name(const usp_backend_t *be) { return be->iface->name; }
int usp_backend_has_numerics(const usp_backend_t *be) { return be->iface->has_numerics; }
int usp_backend_stores_bf16(const usp_backend_t *be) { return !be->iface->has_numerics || be->iface->stores_bf16; }
int usp_backend_defers(const usp_backend_t *be) { return be->iface->synchronize != NULL; }

void usp_backend_destroy(usp_backend_t *be)
{
    if (!be)
        return;
    for (size_t i = 0; i < be->n_live; i++)
        be->iface->free(be->context, (void *)be->live[i].addr);
    ops_timer_free(be);
    if (be->iface->destroy)
        be->iface->destroy(be->context);
    free(be->live);
    free(be->operands);
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

void ops_report_cost(usp_backend_t *be, const char *op, double flops, double bytes, usp_stream_t *stream)
{
    ops_report_cost_outputs(be, op, USP_F32, flops, bytes, 0, stream);
}

void ops_report_cost_outputs(usp_backend_t *be, const char *op, usp_dtype dtype, double flops, double bytes,
                             double outputs, usp_stream_t *stream)
{
    be->flops += flops, be->bytes += bytes, be->outputs += outputs;
    if (be->cost_fn) {
        usp_op_cost cost = {.op = op, .flops = flops, .bytes = bytes, .outputs = outputs, .stream = stream,
                            .dtype = dtype, .operands = be->operands->ranges, .n_operands = be->operands->n};
        be->cost_fn(be->cost_ctx, &cost);
    }
    be->operands->n = 0;
    if (be->timer)
        ops_timer_note(be->timer, op, flops, bytes);
}

/* The slot of `name` (strcmp: the same literal may have several addresses), or a
 * new one; NULL when the table is full (the category then goes uncounted in the breakdown). */
static category_use *category_slot(usp_backend_t *be, const char *name)
{
    for (int i = 0; i < be->n_categories; i++) /* the same literal, usually: no string compared */
        if (be->categories[i].name == name)
            return &be->categories[i];
    for (int i = 0; i < be->n_categories; i++)
        if (strcmp(be->categories[i].name, name) == 0)
            return &be->categories[i];
    if (be->n_categories == CATEGORIES_MAX)
        return NULL;
    be->categories[be->n_categories] = (category_use){.name = name};
    return &be->categories[be->n_categories++];
}

static usp_status allocate(usp_backend_t *be, size_t bytes, usp_dtype dtype, const char *category, void **out)
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
    be->live[at] = (allocation){(uintptr_t)ptr, bytes, dtype, category};
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

usp_status usp_buffer_alloc(usp_backend_t *be, size_t bytes, const char *category, void **out)
{
    return allocate(be, bytes, USP_F32, category, out);
}

usp_status usp_buffer_alloc_as(usp_backend_t *be, size_t elems, usp_dtype storage, const char *category, void **out)
{
    *out = NULL;
    if (storage != USP_F32 && be->iface->has_numerics && !be->iface->stores_bf16)
        return usp_error(USP_ERR_CONFIG, "%s storage on the %s backend, which stores fp32 only: plan %s with "
                         "--meta or usp plan", usp_dtype_name(storage), be->iface->name, usp_dtype_name(storage));
    return allocate(be, elems * usp_dtype_size(storage), storage, category, out);
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

/* The live allocation holding ptr, its end included (an array's one-past-the-end
 * pointer is still its own); NULL when there is none. */
static const allocation *allocation_of(const usp_backend_t *be, const void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    for (int h = 0; h < 2; h++) { /* live[i] is the search's answer iff live[i].addr <= p < live[i + 1].addr */
        size_t i = be->hint[h];
        if (i < be->n_live && be->live[i].addr <= p && (i + 1 == be->n_live || be->live[i + 1].addr > p))
            return p - be->live[i].addr <= be->live[i].bytes ? &be->live[i] : NULL;
    }
    size_t at = upper_bound(be, p);
    if (at > 0) { /* a hint is a cache, not state: written through a const handle on purpose */
        usp_backend_t *cache = (usp_backend_t *)be;
        cache->hint[cache->next_hint++ & 1] = at - 1;
    }
    if (at == 0)
        return NULL;
    const allocation *a = &be->live[at - 1];
    return (uintptr_t)ptr - a->addr <= a->bytes ? a : NULL;
}

int usp_backend_owns(const usp_backend_t *be, const void *ptr, size_t bytes)
{
    const allocation *a = allocation_of(be, ptr);
    return a && bytes <= a->bytes && (uintptr_t)ptr - a->addr <= a->bytes - bytes;
}

usp_dtype usp_buffer_dtype(const usp_backend_t *be, const void *ptr)
{
    const allocation *a = allocation_of(be, ptr);
    USP_ASSERT(a, "usp_buffer_dtype of %p, which is in no live buffer of this %s backend", ptr, be->iface->name);
    return a->dtype;
}

void *usp_buffer_at(const usp_backend_t *be, const void *ptr, size_t index)
{
    return usp_elem_at(ptr, usp_buffer_dtype(be, ptr), index);
}

size_t usp_buffer_bytes(const usp_backend_t *be, const void *ptr, size_t elems)
{
    return elems * usp_dtype_size(usp_buffer_dtype(be, ptr));
}

/* Notes [ptr, ptr + bytes) as an operand of the op being checked, while a cost sink listens: once (a
 * convert checks its two ranges twice), and none past USP_OP_OPERANDS_MAX (no op has that many). */
static void note_operand(const usp_backend_t *be, const void *ptr, size_t bytes)
{
    ops_operands *o = be->operands;
    if (!be->cost_fn || bytes == 0 || o->n == USP_OP_OPERANDS_MAX)
        return;
    for (int i = 0; i < o->n; i++)
        if (o->ranges[i].ptr == ptr && o->ranges[i].bytes == bytes)
            return;
    o->ranges[o->n++] = (usp_range){ptr, bytes};
}

/* USP_OK when [ptr, ptr + bytes) lies in one live buffer; else an error that names
 * the op, the side and the buffer the range starts in, with its dtype. */
static usp_status check_range(const usp_backend_t *be, const char *op, const char *side, const void *ptr,
                              size_t bytes)
{
    if (usp_backend_owns(be, ptr, bytes)) {
        note_operand(be, ptr, bytes);
        return USP_OK;
    }
    const allocation *a = allocation_of(be, ptr);
    if (!a)
        return usp_error(USP_ERR_RUNTIME, "%s: the %s %p is in no live buffer of the %s backend", op, side, ptr,
                         be->iface->name);
    return usp_error(USP_ERR_RUNTIME, "%s: %zu bytes of the %s at byte %zu of a %zu-byte %s buffer of %s elements "
                     "run past its end (an offset or a size counted in the wrong dtype?)", op, bytes, side,
                     (size_t)((uintptr_t)ptr - a->addr), a->bytes, a->category, usp_dtype_name(a->dtype));
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

void usp_backend_work(const usp_backend_t *be, double *bytes, double *outputs)
{
    *bytes = be->bytes, *outputs = be->outputs;
}

void usp_backend_set_cost_sink(usp_backend_t *be, usp_cost_sink_fn fn, void *ctx)
{
    be->cost_fn = fn;
    be->cost_ctx = ctx;
}

/* A float-unit offset into a narrower (bf16) buffer runs past its end and is refused here. */
usp_status ops_view(const usp_backend_t *be, const char *op, const char *name, const void *ptr, int64_t count,
                    unsigned dtypes, int optional, usp_view *out)
{
    *out = (usp_view){.data = (void *)ptr, .dtype = USP_F32, .count = 0};
    if (!ptr)
        return optional ? USP_OK
                        : usp_error(USP_ERR_RUNTIME, "%s: %s is NULL; it needs a buffer of %lld elements", op, name,
                                    (long long)count);
    const allocation *a = allocation_of(be, ptr);
    const usp_dtype dtype = a ? a->dtype : USP_F32;
    if (a && !(dtypes >> dtype & 1u))
        return usp_error(USP_ERR_CONFIG, "%s: %s (%p) is stored as %s; %s takes %s there (was its buffer "
                         "allocated with the wrong storage?)", op, name, ptr, usp_dtype_name(dtype), op,
                         dtypes == OPS_F32 ? "f32 only" : "f32 or bf16");
    const size_t bytes = (size_t)count * usp_dtype_size(dtype), at = a ? (uintptr_t)ptr - a->addr : 0;
    if (!a || bytes > a->bytes || at > a->bytes - bytes)
        return usp_error(USP_ERR_RUNTIME,
                         "%s: %s (%p, %lld %s elements) does not lie inside one buffer of this %s backend; pass "
                         "memory from usp_buffer_alloc with room for %lld elements from that address",
                         op, name, ptr, (long long)count, usp_dtype_name(dtype), be->iface->name, (long long)count);
    out->dtype = dtype;
    out->count = count;
    note_operand(be, ptr, bytes);
    return USP_OK;
}

usp_status usp_buffer_copy(usp_backend_t *be, void *dst, const void *src, size_t bytes,
                           usp_copy_kind kind, usp_stream_t *stream)
{
    if (bytes == 0)
        return USP_OK;
    if (kind != USP_COPY_HOST_TO_DEVICE)
        USP_CHECK(check_range(be, "usp_buffer_copy", "source", src, bytes));
    if (kind != USP_COPY_DEVICE_TO_HOST)
        USP_CHECK(check_range(be, "usp_buffer_copy", "destination", dst, bytes));
    ops_report_cost(be, kind == USP_COPY_DEVICE_TO_DEVICE ? "copy" : "copy_host", 0, 2.0 * (double)bytes,
                    stream);
    return OPS_TIMED(be, stream, be->iface->copy(be->context, dst, src, bytes, kind, stream));
}

usp_status usp_buffer_convert(usp_backend_t *be, void *dst, const void *src, size_t elems, usp_stream_t *stream)
{
    USP_CHECK(check_range(be, "usp_buffer_convert", "source", src, 0)); /* in a buffer: it has a dtype */
    USP_CHECK(check_range(be, "usp_buffer_convert", "destination", dst, 0));
    usp_dtype to = usp_buffer_dtype(be, dst), from = usp_buffer_dtype(be, src);
    size_t dst_bytes = elems * usp_dtype_size(to), src_bytes = elems * usp_dtype_size(from);
    if (to == from)
        return usp_buffer_copy(be, dst, src, dst_bytes, USP_COPY_DEVICE_TO_DEVICE, stream);
    if (elems == 0)
        return USP_OK;
    USP_CHECK(check_range(be, "usp_buffer_convert", "source", src, src_bytes));
    USP_CHECK(check_range(be, "usp_buffer_convert", "destination", dst, dst_bytes));
    if (be->iface->has_numerics && !be->iface->convert) /* a backend that stores fp32 only */
        return usp_error(USP_ERR_CONFIG, "the %s backend cannot convert %s to %s: it stores fp32 only",
                         be->iface->name, usp_dtype_name(from), usp_dtype_name(to));
    usp_view d, s;
    USP_CHECK(ops_view(be, "usp_buffer_convert", "destination", dst, (int64_t)elems, OPS_STORED, 0, &d));
    USP_CHECK(ops_view(be, "usp_buffer_convert", "source", src, (int64_t)elems, OPS_STORED, 0, &s));
    ops_report_cost(be, "convert", 0, (double)(src_bytes + dst_bytes), stream);
    return be->iface->convert ? OPS_TIMED(be, stream, be->iface->convert(be->context, d, s, stream)) : USP_OK;
}

usp_status usp_buffer_zero(usp_backend_t *be, void *ptr, size_t bytes, usp_stream_t *stream)
{
    if (bytes == 0)
        return USP_OK;
    USP_CHECK(check_range(be, "usp_buffer_zero", "buffer", ptr, bytes));
    ops_report_cost(be, "zero", 0, (double)bytes, stream);
    return OPS_TIMED(be, stream, be->iface->zero(be->context, ptr, bytes, stream));
}

usp_status usp_stream_create(usp_backend_t *be, usp_stream_t **out)
{
    *out = NULL;
    return be->iface->stream_create ? be->iface->stream_create(be->context, out) : USP_OK;
}

usp_status usp_event_create(usp_backend_t *be, usp_event_t **out)
{
    *out = NULL;
    return be->iface->event_create ? be->iface->event_create(be->context, out) : USP_OK;
}

void usp_event_destroy(usp_backend_t *be, usp_event_t *event)
{
    if (event)
        be->iface->event_destroy(be->context, event);
}

usp_status usp_event_record(usp_backend_t *be, usp_event_t *event, usp_stream_t *stream)
{
    return event ? be->iface->event_record(be->context, event, stream) : USP_OK;
}

usp_status usp_stream_wait_event(usp_backend_t *be, usp_stream_t *stream, usp_event_t *event)
{
    return event ? be->iface->stream_wait_event(be->context, stream, event) : USP_OK;
}

usp_status usp_launch_host_func(usp_backend_t *be, usp_stream_t *stream, void (*fn)(void *arg), void *arg)
{
    if (!be->iface->launch_host_func) {
        fn(arg);
        return USP_OK;
    }
    return be->iface->launch_host_func(be->context, stream, fn, arg);
}

/* Elements a batch of `rows` x `cols` matrices spans at row stride ld and matrix stride `stride`. */
static int64_t matrices_extent(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch)
{
    return (batch - 1) * stride + (rows - 1) * ld + cols;
}

/* The views of the operands, each inside its buffer (called with m, n, batch > 0); a and b are unread when k = 0. */
static usp_status gemm_views(const usp_backend_t *be, const usp_gemm_desc *g, usp_view *a, usp_view *b, usp_view *c)
{
    *a = (usp_view){.data = (void *)g->a, .dtype = USP_F32};
    *b = (usp_view){.data = (void *)g->b, .dtype = USP_F32};
    if (g->k > 0) {
        USP_CHECK(ops_view(be, "gemm", "a", g->a,
                           g->trans_a ? matrices_extent(g->k, g->m, g->lda, g->stride_a, g->batch)
                                      : matrices_extent(g->m, g->k, g->lda, g->stride_a, g->batch), OPS_STORED, 0, a));
        USP_CHECK(ops_view(be, "gemm", "b", g->b,
                           g->trans_b ? matrices_extent(g->n, g->k, g->ldb, g->stride_b, g->batch)
                                      : matrices_extent(g->k, g->n, g->ldb, g->stride_b, g->batch), OPS_STORED, 0, b));
    }
    return ops_view(be, "gemm", "c", g->c, matrices_extent(g->m, g->n, g->ldc, g->stride_c, g->batch), OPS_STORED, 0,
                    c);
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
    usp_view a, b, c;
    USP_CHECK(gemm_views(be, g, &a, &b, &c));
    const usp_dtype in = a.dtype == USP_BF16 || b.dtype == USP_BF16 ? USP_BF16 : USP_F32; /* an fp32 one is rounded */
    ops_report_cost_outputs(be, "gemm", in, flops, bytes, (double)g->m * (double)g->n * mats, stream);
    return OPS_TIMED(be, stream, be->iface->gemm(be->context, g, a, b, c, stream));
}

usp_status usp_copy_2d(usp_backend_t *be, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                       size_t row_bytes, size_t rows, usp_stream_t *stream)
{
    if (row_bytes == 0 || rows == 0)
        return USP_OK;
    USP_CHECK(check_range(be, "usp_copy_2d", "source", src, (rows - 1) * src_stride + row_bytes));
    USP_CHECK(check_range(be, "usp_copy_2d", "destination", dst, (rows - 1) * dst_stride + row_bytes));
    ops_report_cost_outputs(be, "copy", USP_F32, 0, 2.0 * (double)row_bytes * (double)rows, (double)rows, stream);
    return OPS_TIMED(be, stream,
                     be->iface->copy_2d(be->context, dst, dst_stride, src, src_stride, row_bytes, rows, stream));
}

usp_status usp_accumulate_2d(usp_backend_t *be, float *dst, size_t dst_stride, const float *src,
                             size_t src_stride, size_t row_elems, size_t rows, usp_stream_t *stream)
{
    if (row_elems == 0 || rows == 0)
        return USP_OK;
    const char *op = "accumulate_2d";
    usp_view d, s;
    USP_CHECK(ops_view(be, op, "dst", dst, (int64_t)((rows - 1) * dst_stride + row_elems), OPS_STORED, 0, &d));
    USP_CHECK(ops_view(be, op, "src", src, (int64_t)((rows - 1) * src_stride + row_elems), OPS_STORED, 0, &s));
    double n = (double)row_elems * (double)rows;
    ops_report_cost_outputs(be, "accumulate", USP_F32, n, 12.0 * n, (double)rows, stream);
    return OPS_TIMED(be, stream, be->iface->accumulate_2d(be->context, d, dst_stride, s, src_stride,
                                                         row_elems, rows, stream));
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
static void attention_cost(usp_backend_t *be, const usp_attention_shape *s, usp_dtype dtype, int backward,
                           usp_stream_t *stream)
{
    double scores = (double)s->batch * (double)s->n_heads * usp_attention_visible_pairs(s);
    double flops = 4.0 * scores * (double)s->head_dim;
    double q_bytes = 4.0 * (double)(s->batch * s->n_q * s->n_heads * s->head_dim);
    double kv_bytes = 4.0 * (double)(s->batch * s->n_kv * s->n_kv_heads * s->head_dim);
    double bytes = backward ? 4 * q_bytes + 4 * kv_bytes : 2 * q_bytes + 2 * kv_bytes;
    ops_report_cost_outputs(be, backward ? "attention_backward" : "attention_forward", dtype,
                            backward ? 2.5 * flops : flops, bytes, scores, stream);
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

/* The view of every tensor of an attention call, inside its buffer: q-shaped ones [B, n_q, H, D],
 * kv-shaped ones [B, n_kv, Hkv, D], both f32 or bf16, and lse [B, H, n_q], f32; NULL only where
 * nothing is needed. */
#define VIEW(ptr, count, dtypes) \
    usp_view ptr##_v;            \
    USP_CHECK(ops_view(be, op, #ptr, ptr, count, dtypes, (count) == 0, &ptr##_v))
#define Q_ELEMS(s) ((s)->batch * (s)->n_q * (s)->n_heads * (s)->head_dim)
#define KV_ELEMS(s) ((s)->batch * (s)->n_kv * (s)->n_kv_heads * (s)->head_dim)
#define LSE_ELEMS(s) ((s)->batch * (s)->n_heads * (s)->n_q)

usp_status usp_flash_attention_forward(usp_backend_t *be, const usp_attention_shape *s, const float *q,
                                       const float *k, const float *v, float *o, float *lse,
                                       usp_stream_t *stream)
{
    const char *op = "attention_forward";
    USP_CHECK(check_attention_shape(s));
    if (s->batch == 0 || s->n_q == 0)
        return USP_OK;
    VIEW(q, Q_ELEMS(s), OPS_STORED);
    VIEW(o, Q_ELEMS(s), OPS_STORED);
    VIEW(lse, LSE_ELEMS(s), OPS_F32);
    VIEW(k, KV_ELEMS(s), OPS_STORED);
    VIEW(v, KV_ELEMS(s), OPS_STORED);
    attention_cost(be, s, q_v.dtype, 0, stream);
    void *ws = NULL;
    size_t ws_bytes = be->iface->attention_workspace_bytes(be->context, s, 0);
    if (ws_bytes)
        USP_CHECK(usp_buffer_alloc(be, ws_bytes, "attention workspace", &ws));
    usp_status st = OPS_TIMED(be, stream, be->iface->attention_forward(be->context, s, q_v, k_v, v_v, o_v, lse_v, ws,
                                                                       stream));
    usp_buffer_free(be, ws);
    return st;
}

usp_status usp_flash_attention_backward(usp_backend_t *be, const usp_attention_shape *s, const float *q,
                                        const float *k, const float *v, const float *o, const float *lse,
                                        const float *d_o, float *dq, float *dk, float *dv, int accumulate,
                                        usp_stream_t *stream)
{
    const char *op = "attention_backward";
    USP_CHECK(check_attention_shape(s));
    if (s->batch == 0 || (s->n_q == 0 && s->n_kv == 0))
        return USP_OK;
    VIEW(q, Q_ELEMS(s), OPS_STORED);
    VIEW(o, Q_ELEMS(s), OPS_STORED);
    VIEW(d_o, Q_ELEMS(s), OPS_STORED);
    VIEW(dq, Q_ELEMS(s), OPS_STORED);
    VIEW(lse, LSE_ELEMS(s), OPS_F32);
    VIEW(k, KV_ELEMS(s), OPS_STORED);
    VIEW(v, KV_ELEMS(s), OPS_STORED);
    VIEW(dk, KV_ELEMS(s), OPS_STORED);
    VIEW(dv, KV_ELEMS(s), OPS_STORED);
    attention_cost(be, s, q_v.dtype, 1, stream);
    void *ws = NULL;
    size_t ws_bytes = be->iface->attention_workspace_bytes(be->context, s, 1);
    if (ws_bytes)
        USP_CHECK(usp_buffer_alloc(be, ws_bytes, "attention workspace", &ws));
    usp_status st = OPS_TIMED(be, stream, be->iface->attention_backward(be->context, s, q_v, k_v, v_v, o_v, lse_v,
                                                                        d_o_v, dq_v, dk_v, dv_v, accumulate, ws,
                                                                        stream));
    usp_buffer_free(be, ws);
    return st;
}

usp_status usp_attention_merge(usp_backend_t *be, float *o, float *lse, const float *o_part,
                               const float *lse_part, int64_t n, int64_t heads, int64_t head_dim,
                               usp_stream_t *stream)
{
    const char *op = "attention_merge";
    if (n == 0)
        return USP_OK;
    VIEW(o, n * heads * head_dim, OPS_STORED);
    VIEW(o_part, n * heads * head_dim, OPS_STORED);
    VIEW(lse, n * heads, OPS_F32);
    VIEW(lse_part, n * heads, OPS_F32);
    double elems = (double)n * (double)heads * (double)head_dim;
    ops_report_cost(be, "attention_merge", 3.0 * elems, 4.0 * (3.0 * elems + 3.0 * (double)(n * heads)),
                    stream);
    return OPS_TIMED(be, stream, be->iface->attention_merge(be->context, o_v, lse_v, o_part_v, lse_part_v, n, heads,
                                                           head_dim, stream));
}

