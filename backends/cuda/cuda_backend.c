/* The CUDA backend's slot table (see cuda_backend.h): memory, copies, streams
 * and events here; GEMM in cuda_gemm.c; every other op a launcher of
 * cuda_kernels.h, handed each operand's dtype from its view. */
#include "backends/cuda/cuda_backend.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

/* A launcher's array from a slot's view (the wrapper read the dtype from the buffer table), and the
 * data of a view the wrapper checked is f32 (lse, mean, rstd, losses, master weights, moments). */
#define ARR(view) ((cuda_array){.data = (view).data, .dtype = (view).dtype})
#define F32(view) ((float *)(view).data)
#define STREAM(s) cuda_stream_of(c, (s))

int usp_cuda_device_count(char *why, size_t why_size)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(why, why_size, "%s", e != cudaSuccess ? cudaGetErrorString(e) : "CUDA reports 0 devices");
        return 0;
    }
    return n;
}

void usp_cuda_device_describe(int device, char *buf, size_t size)
{
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        snprintf(buf, size, "GPU %d (no properties)", device);
        return;
    }
    snprintf(buf, size, "%s, %.1f GiB, sm_%d%d, %d SMs", p.name, (double)p.totalGlobalMem / (1 << 30), p.major,
             p.minor, p.multiProcessorCount);
}

/* ---- memory ------------------------------------------------------------------ */

static usp_status cuda_copy(void *ctx, void *dst, const void *src, size_t bytes, usp_copy_kind kind,
                            usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    static const enum cudaMemcpyKind kinds[] = {[USP_COPY_HOST_TO_DEVICE] = cudaMemcpyHostToDevice,
                                                [USP_COPY_DEVICE_TO_HOST] = cudaMemcpyDeviceToHost,
                                                [USP_COPY_DEVICE_TO_DEVICE] = cudaMemcpyDeviceToDevice};
    USP_CHECK(cuda_check(cudaMemcpyAsync(dst, src, bytes, kinds[kind], STREAM(stream)), "cudaMemcpyAsync"));
    if (kind == USP_COPY_DEVICE_TO_HOST) { /* into pageable memory the copy returns once done: a host wait */
        struct cudaPointerAttributes d;
        if (cudaPointerGetAttributes(&d, dst) != cudaSuccess)
            cudaGetLastError();
        else if (d.type != cudaMemoryTypeHost)
            usp_backend_count_host_wait(c->owner);
    }
    if (kind != USP_COPY_HOST_TO_DEVICE)
        return USP_OK;
    /* A pageable source is staged before cudaMemcpyAsync returns; a pinned (or managed)
     * one is read by the DMA later, so wait for it: the contract says a host source is
     * read before the slot returns. */
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, src) != cudaSuccess) {
        cudaGetLastError();
        return USP_OK;
    }
    const int read_later = a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeManaged;
    if (read_later)
        usp_backend_count_host_wait(c->owner);
    return read_later ? cuda_check(cudaStreamSynchronize(STREAM(stream)), "cudaStreamSynchronize") : USP_OK;
}

static usp_status cuda_zero(void *ctx, void *ptr, size_t bytes, usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_check(cudaMemsetAsync(ptr, 0, bytes, STREAM(stream)), "cudaMemsetAsync");
}

/* ---- streams and events --------------------------------------------------------- */

static usp_status cuda_synchronize(void *ctx, usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_check(cudaStreamSynchronize(STREAM(stream)), "cudaStreamSynchronize");
}

static usp_status cuda_stream_create(void *ctx, usp_stream_t **out)
{
    (void)ctx;
    cudaStream_t s;
    USP_CHECK(cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
    *out = (usp_stream_t *)s;
    return USP_OK;
}

static void cuda_stream_destroy(void *ctx, usp_stream_t *stream)
{
    cuda_memory_forget_stream(ctx, (cudaStream_t)stream);
    cudaStreamDestroy((cudaStream_t)stream);
}

static usp_status cuda_event_create(void *ctx, usp_event_t **out)
{
    (void)ctx;
    cudaEvent_t e;
    USP_CHECK(cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
    *out = (usp_event_t *)e;
    return USP_OK;
}

/* An event that keeps its time (the others are made without, which is cheaper to record and wait on). */
static usp_status cuda_timing_event_create(void *ctx, usp_event_t **out)
{
    (void)ctx;
    cudaEvent_t e;
    USP_CHECK(cuda_check(cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreateWithFlags"));
    *out = (usp_event_t *)e;
    return USP_OK;
}

static usp_status cuda_event_elapsed(void *ctx, usp_event_t *from, usp_event_t *to, double *seconds)
{
    (void)ctx;
    float ms = 0;
    USP_CHECK(cuda_check(cudaEventSynchronize((cudaEvent_t)to), "cudaEventSynchronize"));
    USP_CHECK(cuda_check(cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to), "cudaEventElapsedTime"));
    *seconds = 1e-3 * (double)ms;
    return USP_OK;
}

static void cuda_event_destroy(void *ctx, usp_event_t *event)
{
    (void)ctx;
    cudaEventDestroy((cudaEvent_t)event);
}

static usp_status cuda_event_record(void *ctx, usp_event_t *event, usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_check(cudaEventRecord((cudaEvent_t)event, STREAM(stream)), "cudaEventRecord");
}

static usp_status cuda_stream_wait_event(void *ctx, usp_stream_t *stream, usp_event_t *event)
{
    cuda_ctx *c = ctx;
    return cuda_check(cudaStreamWaitEvent(STREAM(stream), (cudaEvent_t)event, 0), "cudaStreamWaitEvent");
}

static usp_status cuda_launch_host_func(void *ctx, usp_stream_t *stream, void (*fn)(void *arg), void *arg)
{
    cuda_ctx *c = ctx;
    return cuda_check(cudaLaunchHostFunc(STREAM(stream), fn, arg), "cudaLaunchHostFunc");
}

/* ---- data movement ---------------------------------------------------------------- */

static usp_status cuda_copy_2d(void *ctx, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                               size_t row_bytes, size_t rows, usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_check(cudaMemcpy2DAsync(dst, dst_stride, src, src_stride, row_bytes, rows, cudaMemcpyDeviceToDevice,
                                        STREAM(stream)),
                      "cudaMemcpy2DAsync");
}

static usp_status cuda_accumulate(void *ctx, usp_view dst, size_t dst_stride, usp_view src, size_t src_stride,
                                  size_t row_elems, size_t rows, usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_accumulate_2d(ARR(dst), dst_stride, ARR(src), src_stride, row_elems, rows, STREAM(stream));
}

static usp_status cuda_convert_slot(void *ctx, usp_view dst, usp_view src, usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_convert(ARR(dst), ARR(src), src.count, STREAM(stream));
}

/* ---- attention --------------------------------------------------------------------- */

static size_t cuda_attention_workspace(void *ctx, const usp_attention_shape *s, int backward)
{
    (void)ctx;
    return backward ? cuda_attention_workspace_bytes(s) : 0; /* the forward keeps its state in shared memory */
}

static usp_status cuda_attention_forward_slot(void *ctx, const usp_attention_shape *s, usp_view q,
                                              usp_view k, usp_view v, usp_view o, usp_view lse, void *workspace,
                                              usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_attention_forward(s, ARR(q), ARR(k), ARR(v), ARR(o), F32(lse), workspace, STREAM(stream));
}

static usp_status cuda_attention_backward_slot(void *ctx, const usp_attention_shape *s, usp_view q,
                                               usp_view k, usp_view v, usp_view o, usp_view lse,
                                               usp_view d_o, usp_view dq, usp_view dk, usp_view dv, int accumulate,
                                               void *workspace, usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    USP_CHECK(cuda_attention_backward(s, ARR(q), ARR(k), ARR(v), ARR(o), F32(lse), ARR(d_o), ARR(dq), ARR(dk), ARR(dv),
                                      accumulate, workspace, STREAM(stream)));
    /* The wrapper frees the workspace (delta) as soon as this returns, in the default stream's
     * order: on another stream the kernels may not have read it yet, so the default stream waits
     * for them first (the join the free's contract asks for). */
    if (!workspace || STREAM(stream) == c->stream)
        return USP_OK;
    USP_CHECK(cuda_check(cudaEventRecord(c->joined, STREAM(stream)), "cudaEventRecord (attention workspace)"));
    return cuda_check(cudaStreamWaitEvent(c->stream, c->joined, 0), "cudaStreamWaitEvent (attention workspace)");
}

static usp_status cuda_attention_merge_slot(void *ctx, usp_view o, usp_view lse, usp_view o_part,
                                            usp_view lse_part, int64_t n, int64_t heads, int64_t head_dim,
                                            usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_attention_merge(ARR(o), F32(lse), ARR(o_part), F32(lse_part), n, heads, head_dim, STREAM(stream));
}

/* ---- layers ------------------------------------------------------------------------ */

static usp_status cuda_embedding_forward_slot(void *ctx, usp_view out, const int32_t *tokens, const int32_t *positions,
                                              usp_view wte, usp_view wpe, int64_t n, int64_t C,
                                              usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_embedding_forward(ARR(out), tokens, positions, ARR(wte), ARR(wpe), n, C, STREAM(stream));
}

static usp_status cuda_embedding_backward_slot(void *ctx, usp_view dwte, usp_view dwpe, usp_view dout,
                                               const int32_t *tokens, const int32_t *positions, int64_t n, int64_t C,
                                               usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_embedding_backward(ARR(dwte), ARR(dwpe), ARR(dout), tokens, positions, n, C, STREAM(stream));
}

static usp_status cuda_layernorm_forward_slot(void *ctx, usp_view out, usp_view mean, usp_view rstd, usp_view inp,
                                              usp_view weight, usp_view bias, int64_t n, int64_t C, float eps,
                                              usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_layernorm_forward(ARR(out), F32(mean), F32(rstd), ARR(inp), ARR(weight), ARR(bias), n, C, eps,
                                  STREAM(stream));
}

static usp_status cuda_layernorm_backward_slot(void *ctx, usp_view dinp, usp_view dweight, usp_view dbias,
                                               usp_view dout, usp_view inp, usp_view weight,
                                               usp_view mean, usp_view rstd, int64_t n, int64_t C,
                                               usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_layernorm_backward(ARR(dinp), ARR(dweight), ARR(dbias), ARR(dout), ARR(inp), ARR(weight), F32(mean),
                                   F32(rstd), n, C, STREAM(stream));
}

static usp_status cuda_rmsnorm_forward_slot(void *ctx, usp_view out, usp_view rstd, usp_view inp,
                                            usp_view weight, int64_t n, int64_t C, float eps,
                                            usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_rmsnorm_forward(ARR(out), F32(rstd), ARR(inp), ARR(weight), n, C, eps, STREAM(stream));
}

static usp_status cuda_rmsnorm_backward_slot(void *ctx, usp_view dinp, usp_view dweight, usp_view dout,
                                             usp_view inp, usp_view weight, usp_view rstd, int64_t n,
                                             int64_t C, usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_rmsnorm_backward(ARR(dinp), ARR(dweight), ARR(dout), ARR(inp), ARR(weight), F32(rstd), n, C,
                                 STREAM(stream));
}

static usp_status cuda_gelu_forward_slot(void *ctx, usp_view out, usp_view inp, int64_t n, usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_gelu_tanh_forward(ARR(out), ARR(inp), n, STREAM(stream));
}

static usp_status cuda_gelu_backward_slot(void *ctx, usp_view dinp, usp_view inp, usp_view dout, int64_t n,
                                          usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_gelu_tanh_backward(ARR(dinp), ARR(inp), ARR(dout), n, STREAM(stream));
}

static usp_status cuda_swiglu_forward_slot(void *ctx, usp_view out, usp_view gate, usp_view up, int64_t n,
                                           usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_swiglu_forward(ARR(out), ARR(gate), ARR(up), n, STREAM(stream));
}

static usp_status cuda_swiglu_backward_slot(void *ctx, usp_view dgate, usp_view dup, usp_view gate, usp_view up,
                                            usp_view dout, int64_t n, usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_swiglu_backward(ARR(dgate), ARR(dup), ARR(gate), ARR(up), ARR(dout), n, STREAM(stream));
}

/* The device copy of rope's D/2 inverse frequencies: a caller's table, or
 * theta^(-2j/D) as the running product the cpu backend uses (its bits, not
 * pow()'s). Uploaded on first use and kept (CUDA_ROPE_TABLES of them, least
 * recently used replaced), so a layer's call costs no transfer. */
static usp_status rope_table(cuda_ctx *c, int64_t D, float theta, const double *inv_freq, const double **out)
{
    const int64_t half = D / 2;
    cuda_rope_table *victim = &c->rope[0];
    *out = NULL;
    for (int i = 0; i < CUDA_ROPE_TABLES; i++) {
        cuda_rope_table *t = &c->rope[i];
        int same = t->device && t->half == half &&
                   (inv_freq ? !t->from_theta && memcmp(t->host, inv_freq, (size_t)half * sizeof *inv_freq) == 0
                             : t->from_theta && t->theta == theta);
        if (same) {
            t->used = ++c->rope_clock;
            *out = t->device;
            return USP_OK;
        }
        if (t->used < victim->used)
            victim = t;
    }
    double *host = malloc((size_t)half * sizeof *host);
    if (!host)
        return usp_error(USP_ERR_RUNTIME, "out of memory for a rope table of %lld frequencies", (long long)half);
    const double ratio = pow((double)theta, -2.0 / (double)D);
    double f = 1.0;
    for (int64_t j = 0; j < half; j++, f *= ratio)
        host[j] = inv_freq ? inv_freq[j] : f;
    if (victim->device) {
        /* A rope still queued on another stream may read it, and the default stream's order does not
         * cover that one: wait for the whole device (rare: a fifth table in use). */
        usp_backend_count_host_wait(c->owner);
        USP_CHECK(cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (rope table eviction)"));
        cudaFreeAsync(victim->device, c->stream);
    }
    free(victim->host);
    *victim = (cuda_rope_table){.host = host, .half = half, .theta = theta, .from_theta = !inv_freq,
                                .used = ++c->rope_clock};
    usp_status s = cuda_check(cudaMallocFromPoolAsync((void **)&victim->device, (size_t)half * sizeof *host, c->pool,
                                                      c->stream),
                              "cudaMallocFromPoolAsync (rope table)");
    if (s == USP_OK) /* pageable source: staged before the call returns, host may change after */
        s = cuda_check(cudaMemcpyAsync(victim->device, host, (size_t)half * sizeof *host, cudaMemcpyHostToDevice,
                                       c->stream),
                       "cudaMemcpyAsync (rope table)");
    if (s == USP_OK) /* the table is made on the default stream; a rope on another waits for it */
        s = cuda_memory_publish(c);
    if (s != USP_OK) {
        victim->device = NULL;
        return s;
    }
    *out = victim->device;
    return USP_OK;
}

static usp_status cuda_rope_slot(cuda_ctx *c, usp_view x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                                 float theta, const double *inv_freq, int direction, usp_stream_t *stream)
{
    const double *table;
    USP_CHECK(rope_table(c, D, theta, inv_freq, &table));
    return cuda_rope(ARR(x), positions, n, H, D, table, direction, STREAM(stream));
}

static usp_status cuda_rope_forward_slot(void *ctx, usp_view x, const int32_t *positions, int64_t n, int64_t H,
                                         int64_t D, float theta, const double *inv_freq, usp_stream_t *stream)
{
    return cuda_rope_slot(ctx, x, positions, n, H, D, theta, inv_freq, 1, stream);
}

static usp_status cuda_rope_backward_slot(void *ctx, usp_view dx, const int32_t *positions, int64_t n, int64_t H,
                                          int64_t D, float theta, const double *inv_freq, usp_stream_t *stream)
{
    return cuda_rope_slot(ctx, dx, positions, n, H, D, theta, inv_freq, -1, stream);
}

/* ---- loss, optimiser, reductions ------------------------------------------------------ */

static usp_status cuda_cross_entropy_slot(void *ctx, usp_view losses, usp_view dlogits, usp_view logits,
                                          const int32_t *targets, int64_t n, int64_t V, float grad_scale,
                                          usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_cross_entropy(F32(losses), ARR(dlogits), ARR(logits), targets, n, V, grad_scale, STREAM(stream));
}

static usp_status cuda_adamw_slot(void *ctx, usp_view params, usp_view grads, usp_view m, usp_view v, int64_t n,
                                  float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                                  usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_adamw_step(F32(params), ARR(grads), F32(m), F32(v), n, lr, beta1, beta2, eps, weight_decay, t,
                           STREAM(stream));
}

/* Blocking: the sum comes back through pinned memory, then the stream is waited for. */
static usp_status cuda_sum_squares_slot(void *ctx, double *out, usp_view x, int64_t n, usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    cudaStream_t s = STREAM(stream);
    USP_CHECK(cuda_sum_squares(c->sum_device, ARR(x), n, s));
    USP_CHECK(cuda_check(cudaMemcpyAsync(c->sum_host, c->sum_device, sizeof *c->sum_host, cudaMemcpyDeviceToHost, s),
                         "cudaMemcpyAsync (sum of squares)"));
    USP_CHECK(cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize (sum of squares)"));
    *out = *c->sum_host;
    return USP_OK;
}

static usp_status cuda_scale_slot(void *ctx, usp_view x, float s, int64_t n, usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_scale(ARR(x), s, n, STREAM(stream));
}

static usp_status cuda_add_bias_slot(void *ctx, usp_view x, usp_view bias, int64_t n, int64_t C,
                                     usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_add_bias(ARR(x), ARR(bias), n, C, STREAM(stream));
}

static usp_status cuda_bias_backward_slot(void *ctx, usp_view dbias, usp_view dout, int64_t n, int64_t C,
                                          usp_stream_t *stream)
{
    cuda_ctx *c = ctx;
    return cuda_bias_backward(ARR(dbias), ARR(dout), n, C, STREAM(stream));
}

/* The GPU's L2, which every SM's loads and stores go through. */
static size_t cuda_cache_bytes(void *ctx)
{
    cuda_ctx *c = ctx;
    int bytes = 0;
    if (cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, c->device) != cudaSuccess || bytes <= 0)
        return 0;
    return (size_t)bytes;
}

/* ---- the context ------------------------------------------------------------------------ */

static void cuda_destroy(void *ctx)
{
    cuda_ctx *c = ctx;
    if (!c)
        return;
    cudaSetDevice(c->device);
    for (int i = 0; i < CUDA_ROPE_TABLES; i++) { /* from the pool: back to it in stream order, as it came */
        if (c->rope[i].device)
            cudaFreeAsync(c->rope[i].device, c->stream);
        free(c->rope[i].host);
    }
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    if (c->sum_device)
        cudaFree(c->sum_device);
    if (c->sum_host)
        cudaFreeHost(c->sum_host);
    if (c->joined)
        cudaEventDestroy(c->joined);
    if (c->allocated)
        cudaEventDestroy(c->allocated);
    cuda_blas_destroy(c->blas);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

static const usp_backend_i cuda_backend_iface = {
    .api_version = USP_BACKEND_API_VERSION,
    .name = "cuda",
    .has_numerics = 1,
    .stores_bf16 = 1,
    .alloc = cuda_memory_alloc,
    .free = cuda_memory_free,
    .host_alloc = cuda_memory_host_alloc,
    .host_free = cuda_memory_host_free,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .synchronize = cuda_synchronize,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .timing_event_create = cuda_timing_event_create,
    .event_elapsed = cuda_event_elapsed,
    .launch_host_func = cuda_launch_host_func,
    .gemm = cuda_gemm,
    .copy_2d = cuda_copy_2d,
    .accumulate_2d = cuda_accumulate,
    .convert = cuda_convert_slot,
    .attention_workspace_bytes = cuda_attention_workspace,
    .cache_bytes = cuda_cache_bytes,
    .attention_forward = cuda_attention_forward_slot,
    .attention_backward = cuda_attention_backward_slot,
    .attention_merge = cuda_attention_merge_slot,
    .embedding_forward = cuda_embedding_forward_slot,
    .embedding_backward = cuda_embedding_backward_slot,
    .layernorm_forward = cuda_layernorm_forward_slot,
    .layernorm_backward = cuda_layernorm_backward_slot,
    .rmsnorm_forward = cuda_rmsnorm_forward_slot,
    .rmsnorm_backward = cuda_rmsnorm_backward_slot,
    .gelu_tanh_forward = cuda_gelu_forward_slot,
    .gelu_tanh_backward = cuda_gelu_backward_slot,
    .swiglu_forward = cuda_swiglu_forward_slot,
    .swiglu_backward = cuda_swiglu_backward_slot,
    .rope_forward = cuda_rope_forward_slot,
    .rope_backward = cuda_rope_backward_slot,
    .cross_entropy = cuda_cross_entropy_slot,
    .adamw_step = cuda_adamw_slot,
    .sum_squares = cuda_sum_squares_slot,
    .scale = cuda_scale_slot,
    .add_bias = cuda_add_bias_slot,
    .bias_backward = cuda_bias_backward_slot,
    .destroy = cuda_destroy,
};

/* The device's default pool, told to keep what is freed (threshold: all of it):
 * after the first step every buffer comes from memory the pool already holds. */
static usp_status setup(cuda_ctx *c)
{
    USP_CHECK(cuda_check(cudaSetDevice(c->device), "cudaSetDevice"));
    USP_CHECK(cuda_check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
    USP_CHECK(cuda_check(cudaEventCreateWithFlags(&c->joined, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
    USP_CHECK(cuda_check(cudaEventCreateWithFlags(&c->allocated, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
    USP_CHECK(cuda_check(cudaDeviceGetDefaultMemPool(&c->pool, c->device), "cudaDeviceGetDefaultMemPool"));
    uint64_t keep = UINT64_MAX;
    USP_CHECK(cuda_check(cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep),
                         "cudaMemPoolSetAttribute"));
    USP_CHECK(cuda_blas_create(&c->blas));
    /* Default math mode: no TF32 for fp32 unless asked for (cuda_gemm picks the compute type). */
    const char *tf32 = getenv("USP_CUDA_ALLOW_TF32");
    c->allow_tf32 = tf32 && strcmp(tf32, "1") == 0;
    USP_CHECK(cuda_check(cudaMalloc((void **)&c->sum_device, sizeof *c->sum_device), "cudaMalloc"));
    return cuda_check(cudaMallocHost((void **)&c->sum_host, sizeof *c->sum_host), "cudaMallocHost");
}

usp_status usp_cuda_stream(usp_backend_t *backend, usp_stream_t *stream, cudaStream_t *out)
{
    cuda_ctx *c = usp_backend_context_of(backend, &cuda_backend_iface);
    *out = NULL;
    if (!c)
        return usp_error(USP_ERR_RUNTIME, "usp_cuda_stream of a %s backend: only a cuda backend has CUDA streams "
                         "(a communicator on NULL would be unordered against compute)",
                         backend ? usp_backend_name(backend) : "missing");
    *out = cuda_stream_of(c, stream); /* ordered after the allocations, as a kernel's would be */
    return USP_OK;
}

usp_status usp_backend_cuda_create(int device, usp_backend_t **out)
{
    *out = NULL;
    char why[256];
    int n = usp_cuda_device_count(why, sizeof why);
    if (n == 0)
        return usp_error(USP_ERR_CONFIG, "the cuda backend needs an NVIDIA GPU, and this machine has none that CUDA "
                         "can use (%s); run on a GPU machine, or use --backend sim (any machine)", why);
    if (device < 0 || device >= n)
        return usp_error(USP_ERR_CONFIG, "GPU %d: this process sees %d GPU%s (0..%d; CUDA_VISIBLE_DEVICES selects "
                         "which)", device, n, n == 1 ? "" : "s", n - 1);
    cuda_ctx *c;
    USP_CHECK(usp_calloc((void **)&c, 1, sizeof *c, "the cuda backend"));
    c->device = device;
    usp_status s = setup(c);
    if (s == USP_OK)
        s = usp_backend_create(&cuda_backend_iface, c, out);
    if (s != USP_OK) {
        cuda_destroy(c);
        return s;
    }
    c->owner = *out;
    return USP_OK;
}
