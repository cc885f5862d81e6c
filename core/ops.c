/* Wrappers around the backend interface: argument checks, memory accounting,
 * cost reports. Costs are computed here from shapes alone, so the cpu, meta
 * and cuda backends report identical flops and bytes for the same call. */
#include "core/backend_impl.h"

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

struct usp_backend {
    const usp_backend_i *iface;
    void *context;
    allocation *live; /* sorted by addr */
    size_t n_live, cap_live;
    size_t in_use, peak;
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
    if (be->cost_fn) {
        usp_op_cost cost = {.op = op, .flops = flops, .bytes = bytes};
        be->cost_fn(be->cost_ctx, &cost);
    }
}

usp_status usp_buffer_alloc(usp_backend_t *be, size_t bytes, const char *category, void **out)
{
    *out = NULL;
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
    be->live[at] = (allocation){(uintptr_t)ptr, bytes, category ? category : "other"};
    be->n_live++;
    be->in_use += bytes;
    if (be->in_use > be->peak)
        be->peak = be->in_use;
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
