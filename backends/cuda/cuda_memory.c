/* The cuda backend's memory: stream-ordered allocation from the device's pool
 * with no host wait, and the ordering of other streams after it.
 *
 * An allocation is made on the default stream (cudaMallocFromPoolAsync) and
 * returns at once: work the default stream runs later may use it. Memory
 * crosses to another stream (a communicator's, the gradient buckets') in
 * order through one event, recorded on the default stream after each
 * allocation: the first time a stream is handed to a kernel after an
 * allocation it waits for that event (cudaStreamWaitEvent, no host wait), so
 * no stream uses memory before the pool has given it out in the default
 * stream's order. A stream that saw every allocation waits for nothing more.
 * Frees are cudaFreeAsync on the default stream (core/ops/ops.h's contract joins
 * other streams to it first).
 *
 * When the pool cannot grow, the device is synchronised (every pending free
 * done: a host wait, counted), the pool trimmed to what is in use, and the
 * allocation tried once more before it is an out-of-memory error. cuda_check,
 * the error of a CUDA call, lives here too: the lowest file of the backend. */
#include <stdio.h>

#include "backends/cuda/cuda_internal.h"

usp_status cuda_check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return USP_OK;
    return usp_error(USP_ERR_RUNTIME, "cuda backend: %s failed: %s (%s)", what, cudaGetErrorString(e),
                     cudaGetErrorName(e));
}

/* The allocation event, recorded on the default stream after the latest allocation. */
static usp_status publish(cuda_ctx *c)
{
    USP_CHECK(cuda_check(cudaEventRecord(c->allocated, c->stream), "cudaEventRecord (allocation)"));
    c->allocs++;
    return USP_OK;
}

usp_status cuda_memory_publish(cuda_ctx *c) { return publish(c); }

cudaStream_t cuda_stream_of(cuda_ctx *c, usp_stream_t *s)
{
    if (!s)
        return c->stream;
    cudaStream_t cs = (cudaStream_t)s;
    cuda_stream_seen *seen = NULL;
    for (int i = 0; i < CUDA_STREAMS_SEEN && !seen; i++)
        if (c->seen[i].stream == cs)
            seen = &c->seen[i];
    if (!seen) { /* a new stream (or one pushed out): it waits once, then is remembered */
        seen = &c->seen[c->seen_next];
        c->seen_next = (c->seen_next + 1) % CUDA_STREAMS_SEEN;
        *seen = (cuda_stream_seen){.stream = cs, .allocs = UINT64_MAX};
    }
    if (seen->allocs != c->allocs && c->allocs > 0) {
        /* a failure here is a broken context: the launch that follows reports it */
        if (cudaStreamWaitEvent(cs, c->allocated, 0) == cudaSuccess)
            seen->allocs = c->allocs;
    }
    return cs;
}

void cuda_memory_forget_stream(cuda_ctx *c, cudaStream_t s)
{
    for (int i = 0; i < CUDA_STREAMS_SEEN; i++)
        if (c->seen[i].stream == s)
            c->seen[i] = (cuda_stream_seen){0};
}

usp_status cuda_memory_alloc(void *ctx, size_t bytes, void **out)
{
    cuda_ctx *c = ctx;
    *out = NULL;
    cudaError_t e = cudaMallocFromPoolAsync(out, bytes, c->pool, c->stream);
    if (e == cudaErrorMemoryAllocation) { /* the pending frees done, the pool trimmed, then once more */
        cudaGetLastError(); /* not sticky: clear it */
        usp_backend_count_host_wait(c->owner);
        e = cudaDeviceSynchronize();
        if (e == cudaSuccess)
            e = cudaMemPoolTrimTo(c->pool, 0);
        if (e == cudaSuccess)
            e = cudaMallocFromPoolAsync(out, bytes, c->pool, c->stream);
    }
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        size_t free_bytes = 0, total = 0;
        cudaMemGetInfo(&free_bytes, &total);
        return usp_error(USP_ERR_RUNTIME, "out of GPU memory: %zu more bytes on GPU %d (%.2f of %.2f GiB free, "
                         "after trimming the pool); plan the run with usp plan and fit it (--dtype bf16, "
                         "--recompute, --zero, more GPUs)",
                         bytes, c->device, (double)free_bytes / (1 << 30), (double)total / (1 << 30));
    }
    USP_CHECK(cuda_check(e, "cudaMallocFromPoolAsync"));
    return publish(c);
}

usp_status cuda_memory_host_alloc(void *ctx, size_t bytes, void **out)
{
    (void)ctx;
    *out = NULL;
    return cuda_check(cudaMallocHost(out, bytes), "cudaMallocHost");
}

void cuda_memory_host_free(void *ctx, void *ptr)
{
    (void)ctx;
    cudaFreeHost(ptr);
}

void cuda_memory_free(void *ctx, void *ptr)
{
    cuda_ctx *c = ctx;
    if (ptr && cudaFreeAsync(ptr, c->stream) != cudaSuccess)
        fprintf(stderr, "usp: cuda backend: cudaFreeAsync failed: %s\n", cudaGetErrorString(cudaGetLastError()));
}
