/* The points where the host waits for the device, and their count
 * (usp_backend_host_waits in core/ops/ops.h). A wait is counted where it is asked
 * for, on a backend that defers its work (one with a synchronize slot): a
 * synchronize, a download, a stream's destruction, a blocking sum of squares,
 * a read of device timings, and the waits a backend makes inside an op, which
 * it reports with usp_backend_count_host_wait. On a backend that completes
 * every op before returning (cpu, meta) nothing waits and nothing is counted.
 * Every wait stalls the host until the device has drained the stream, so the
 * host cannot run ahead and queue the next kernels: a training step aims at
 * one (core/train/train.c says which). */
#include "core/ops/ops_internal.h"

#include <stdlib.h>

void usp_backend_count_host_wait(usp_backend_t *be)
{
    if (be)
        ops_count_host_wait(be);
}

uint64_t usp_backend_host_waits(const usp_backend_t *be) { return be->host_waits; }

usp_status usp_backend_synchronize_uncounted(usp_backend_t *be, usp_stream_t *stream)
{
    return be->iface->synchronize ? be->iface->synchronize(be->context, stream) : USP_OK;
}

usp_status usp_backend_run_queued(usp_backend_t *be, usp_stream_t *stream)
{
    return be->iface->run_queued ? be->iface->run_queued(be->context, stream)
                                 : usp_backend_synchronize_uncounted(be, stream);
}

usp_status usp_backend_note_access(usp_backend_t *be, usp_stream_t *stream, const char *what, const usp_access *a,
                                   int n)
{
    return be->iface->note_access ? be->iface->note_access(be->context, stream, what, a, n) : USP_OK;
}

size_t usp_backend_cache_bytes(const usp_backend_t *be)
{
    return be->iface->cache_bytes ? be->iface->cache_bytes(be->context) : 0;
}

usp_status usp_backend_synchronize(usp_backend_t *be, usp_stream_t *stream)
{
    usp_backend_count_host_wait(be);
    return usp_backend_synchronize_uncounted(be, stream);
}

usp_status usp_buffer_download(usp_backend_t *be, void *host, const void *src, size_t bytes, usp_stream_t *stream)
{
    const uint64_t before = be->host_waits;
    USP_CHECK(usp_buffer_copy(be, host, src, bytes, USP_COPY_DEVICE_TO_HOST, stream));
    /* one wait: the copy's own where it blocked (cuda, into pageable memory), else the synchronize's */
    return be->host_waits > before ? usp_backend_synchronize_uncounted(be, stream) : usp_backend_synchronize(be, stream);
}

usp_status usp_host_alloc(usp_backend_t *be, size_t bytes, const char *what, void **out)
{
    if (!be->iface->host_alloc)
        return usp_calloc(out, 1, bytes ? bytes : 1, what);
    usp_status s = be->iface->host_alloc(be->context, bytes ? bytes : 1, out);
    if (s != USP_OK)
        return usp_error(USP_ERR_RUNTIME, "no host memory for %s (%zu bytes) from the %s backend: %s", what, bytes,
                         be->iface->name, usp_error_message());
    return USP_OK;
}

void usp_host_free(usp_backend_t *be, void *ptr)
{
    if (!ptr)
        return;
    if (be->iface->host_free)
        be->iface->host_free(be->context, ptr);
    else
        free(ptr);
}

usp_status usp_stream_destroy(usp_backend_t *be, usp_stream_t *stream)
{
    if (!stream)
        return USP_OK;
    usp_status s = usp_backend_synchronize(be, stream);
    be->iface->stream_destroy(be->context, stream);
    return s;
}
