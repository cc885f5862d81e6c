/* Where a checkpoint's numbers come from and go (checkpoint_internal.h): a
 * parameter store, bucket by bucket, through one host buffer of the largest
 * bucket (or held part of one), or whole host arrays read and filled in place;
 * and the agreement that makes the ranks of a save or load fail together. */
#include "core/checkpoint/checkpoint_internal.h"

#include <stdlib.h>
#include <string.h>

ckpt_arrays ckpt_arrays_host(const usp_param_table *t, const float *const src[3], float *const dst[3])
{
    ckpt_arrays a = {.table = t};
    for (int i = 0; i < 3; i++)
        a.src[i] = src ? src[i] : NULL, a.dst[i] = dst ? dst[i] : NULL;
    return a;
}

ckpt_arrays ckpt_arrays_store(const usp_param_table *t, usp_param_store *store, const usp_rank_ctx *ctx)
{
    return (ckpt_arrays){.table = t, .store = store, .ctx = ctx};
}

void ckpt_arrays_done(ckpt_arrays *a, usp_checkpoint_stats *stats)
{
    ckpt_free(a, a->buffer, a->buffer_elems);
    a->buffer = NULL, a->buffer_elems = 0;
    if (a->flag)
        usp_buffer_free(a->ctx->backend, a->flag);
    if (a->message)
        usp_buffer_free(a->ctx->backend, a->message);
    a->flag = NULL, a->message = NULL;
    if (stats)
        stats->host_bytes_peak = a->host_bytes_peak;
}

int ckpt_rank(const ckpt_arrays *a)
{
    return a->ctx ? a->ctx->rank : 0;
}

int ckpt_n_ranges(const ckpt_arrays *a)
{
    return a->store ? usp_param_store_n_buckets(a->store) : 1;
}

void ckpt_range(const ckpt_arrays *a, int i, int64_t *start, int64_t *len)
{
    if (a->store)
        usp_param_store_bucket_range(a->store, i, start, len);
    else
        *start = 0, *len = a->table->total;
}

usp_status ckpt_alloc(ckpt_arrays *a, float **p, int64_t elems, const char *what)
{
    *p = NULL;
    if (elems <= 0)
        return USP_OK;
    USP_CHECK(usp_malloc((void **)p, (size_t)elems * sizeof **p, what));
    a->host_bytes += (size_t)elems * sizeof **p;
    a->host_bytes_peak = a->host_bytes > a->host_bytes_peak ? a->host_bytes : a->host_bytes_peak;
    return USP_OK;
}

void ckpt_free(ckpt_arrays *a, float *p, int64_t elems)
{
    if (!p)
        return;
    free(p);
    a->host_bytes -= (size_t)elems * sizeof *p;
}

/* The store's host buffer, grown (never kept twice) to hold `elems`. */
static usp_status buffer_for(ckpt_arrays *a, int64_t elems)
{
    if (elems <= a->buffer_elems)
        return USP_OK;
    ckpt_free(a, a->buffer, a->buffer_elems);
    a->buffer_elems = 0;
    USP_CHECK(ckpt_alloc(a, &a->buffer, elems, "a checkpoint bucket"));
    a->buffer_elems = elems;
    return USP_OK;
}

usp_status ckpt_fetch(ckpt_arrays *a, usp_param_array which, int i, const float **data)
{
    if (!a->store) {
        if (data)
            *data = a->src[which];
        return USP_OK;
    }
    int64_t start, len;
    ckpt_range(a, i, &start, &len);
    if (data) {
        USP_CHECK(buffer_for(a, len));
        *data = a->buffer;
    }
    return usp_param_store_read_bucket(a->store, which, i, data ? a->buffer : NULL);
}

void ckpt_held(const ckpt_arrays *a, usp_param_array which, int i, int64_t *lo, int64_t *count)
{
    if (a->store)
        usp_param_store_held(a->store, which, i, lo, count);
    else
        ckpt_range(a, i, lo, count);
}

usp_status ckpt_target(ckpt_arrays *a, usp_param_array which, int64_t lo, int64_t count, float **out)
{
    if (!a->store) {
        *out = a->dst[which] + lo;
        return USP_OK;
    }
    USP_CHECK(buffer_for(a, count));
    *out = a->buffer;
    return USP_OK;
}

usp_status ckpt_put(ckpt_arrays *a, usp_param_array which, int64_t lo, int64_t count, const float *data)
{
    return a->store ? usp_param_store_write_range(a->store, which, lo, count, data) : USP_OK;
}

/* The failing rank's message, broadcast from it (a collective of every rank, after the flag). */
static usp_status share_message(ckpt_arrays *a, int root, usp_status status)
{
    usp_backend_t *be = a->ctx->backend;
    usp_stream_t *st = a->ctx->stream;
    char *text = NULL;
    USP_CHECK(usp_malloc((void **)&text, USP_ERROR_MESSAGE_MAX, "an error message"));
    memset(text, 0, USP_ERROR_MESSAGE_MAX);
    if (a->ctx->rank == root)
        snprintf(text, USP_ERROR_MESSAGE_MAX, "%s", usp_error_message());
    usp_status s = a->message ? USP_OK : usp_buffer_alloc(be, USP_ERROR_MESSAGE_MAX, "comm", (void **)&a->message);
    if (s == USP_OK)
        s = usp_buffer_copy(be, a->message, text, USP_ERROR_MESSAGE_MAX, USP_COPY_HOST_TO_DEVICE, st);
    if (s == USP_OK)
        s = usp_comm_broadcast(a->ctx->world, a->message, a->message, USP_ERROR_MESSAGE_MAX, USP_U8, root, st);
    if (s == USP_OK)
        s = usp_buffer_download(be, text, a->message, USP_ERROR_MESSAGE_MAX, st);
    text[USP_ERROR_MESSAGE_MAX - 1] = '\0';
    if (s == USP_OK)
        s = a->ctx->rank == root ? status : usp_error(status, "%s", text);
    free(text);
    return s;
}

usp_status ckpt_agree(ckpt_arrays *a, usp_status mine)
{
    if (!a->ctx || a->ctx->world_size == 1)
        return mine;
    usp_backend_t *be = a->ctx->backend;
    usp_stream_t *st = a->ctx->stream;
    const int W = a->ctx->world_size;
    /* rank before status in one number: the maximum over the ranks is the lowest failing
     * rank's, with its status (codes are below 8), so one all-reduce agrees on both */
    double key = mine == USP_OK ? 0 : (double)(W - a->ctx->rank) * 8 + (double)mine;
    if (!a->flag)
        USP_CHECK(usp_buffer_alloc(be, sizeof key, "comm", (void **)&a->flag));
    USP_CHECK(usp_buffer_copy(be, a->flag, &key, sizeof key, USP_COPY_HOST_TO_DEVICE, st));
    USP_CHECK(usp_comm_all_reduce(a->ctx->world, a->flag, a->flag, 1, USP_F64, USP_REDUCE_MAX, st));
    USP_CHECK(usp_buffer_download(be, &key, a->flag, sizeof key, st));
    if (key == 0)
        return USP_OK;
    int64_t k = (int64_t)key;
    return share_message(a, W - (int)(k / 8), (usp_status)(k % 8));
}
