/* The backend handle (core/ops/ops.h): its interface and context, the table of
 * its live buffers (every range an op is given is checked against it, and the
 * dtype of a pointer's elements read from it), the memory accounting by
 * category, and the cost reports every op and copy makes (op_run.c). */
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
usp_status ops_check_range(const usp_backend_t *be, const char *op, const char *side, const void *ptr,
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
double usp_backend_attention_flops(const usp_backend_t *be) { return be->attention_flops; }

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
