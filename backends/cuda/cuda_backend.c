/* The CUDA backend's slot table (see cuda_backend.h): memory, copies, streams
 * and events here; every op kind's launch (GEMM in cuda_gemm.c, every other a
 * launcher of cuda_kernels.h, handed each operand's dtype from its view). */
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

/* ---- the ops: each kind's operands in its row's order (core/ops/op_kinds.c) ------------- */

#define X(i) (op->operand[i])
#define OP_STREAM STREAM(op->stream)

static usp_status run_copy_2d(cuda_ctx *c, const usp_op *op)
{
    return cuda_check(cudaMemcpy2DAsync(X(1).data, op->p.strided.dst_stride, X(0).data, op->p.strided.src_stride,
                                        op->p.strided.row, op->p.strided.rows, cudaMemcpyDeviceToDevice, OP_STREAM),
                      "cudaMemcpy2DAsync");
}

static usp_status run_convert(cuda_ctx *c, const usp_op *op)
{
    return cuda_convert(ARR(X(1)), ARR(X(0)), op->p.convert.n, OP_STREAM);
}

static usp_status run_accumulate_2d(cuda_ctx *c, const usp_op *op)
{
    return cuda_accumulate_2d(ARR(X(0)), op->p.strided.dst_stride, ARR(X(1)), op->p.strided.src_stride,
                              op->p.strided.row, op->p.strided.rows, OP_STREAM);
}

/* q, o, lse, k, v, docs, workspace. */
static usp_status run_attention_forward(cuda_ctx *c, const usp_op *op)
{
    return cuda_attention_forward(&op->p.attention.shape, ARR(X(0)), ARR(X(3)), ARR(X(4)), ARR(X(1)), F32(X(2)),
                                  X(6).data, OP_STREAM);
}

/* q, o, d_o, dq, lse, k, v, dk, dv, docs, workspace. */
static usp_status run_attention_backward(cuda_ctx *c, const usp_op *op)
{
    void *workspace = X(10).data;
    USP_CHECK(cuda_attention_backward(&op->p.attention.shape, ARR(X(0)), ARR(X(5)), ARR(X(6)), ARR(X(1)), F32(X(4)),
                                      ARR(X(2)), ARR(X(3)), ARR(X(7)), ARR(X(8)), op->p.attention.accumulate,
                                      workspace, OP_STREAM));
    /* core frees the workspace (delta) as soon as this returns, in the default stream's
     * order: on another stream the kernels may not have read it yet, so the default stream waits
     * for them first (the join the free's contract asks for). */
    if (!workspace || OP_STREAM == c->stream)
        return USP_OK;
    USP_CHECK(cuda_check(cudaEventRecord(c->joined, OP_STREAM), "cudaEventRecord (attention workspace)"));
    return cuda_check(cudaStreamWaitEvent(c->stream, c->joined, 0), "cudaStreamWaitEvent (attention workspace)");
}

/* o, o_part, lse, lse_part. */
static usp_status run_attention_merge(cuda_ctx *c, const usp_op *op)
{
    return cuda_attention_merge(ARR(X(0)), F32(X(2)), ARR(X(1)), F32(X(3)), op->p.merge.n, op->p.merge.heads,
                                op->p.merge.head_dim, OP_STREAM);
}

/* out, tokens, wte, wpe, positions. */
static usp_status run_embedding_forward(cuda_ctx *c, const usp_op *op)
{
    return cuda_embedding_forward(ARR(X(0)), X(1).data, X(4).data, ARR(X(2)), ARR(X(3)), op->p.rows.n, op->p.rows.C,
                                  OP_STREAM);
}

/* dwte, dwpe, dout, tokens, positions. */
static usp_status run_embedding_backward(cuda_ctx *c, const usp_op *op)
{
    return cuda_embedding_backward(ARR(X(0)), ARR(X(1)), ARR(X(2)), X(3).data, X(4).data, op->p.rows.n, op->p.rows.C,
                                   OP_STREAM);
}

/* out, mean, rstd, inp, weight, bias. */
static usp_status run_layernorm_forward(cuda_ctx *c, const usp_op *op)
{
    return cuda_layernorm_forward(ARR(X(0)), F32(X(1)), F32(X(2)), ARR(X(3)), ARR(X(4)), ARR(X(5)), op->p.rows.n,
                                  op->p.rows.C, op->p.rows.eps, OP_STREAM);
}

/* dinp, dweight, dbias, dout, inp, weight, mean, rstd. */
static usp_status run_layernorm_backward(cuda_ctx *c, const usp_op *op)
{
    return cuda_layernorm_backward(ARR(X(0)), ARR(X(1)), ARR(X(2)), ARR(X(3)), ARR(X(4)), ARR(X(5)), F32(X(6)),
                                   F32(X(7)), op->p.rows.n, op->p.rows.C, OP_STREAM);
}

/* out, rstd, inp, weight. */
static usp_status run_rmsnorm_forward(cuda_ctx *c, const usp_op *op)
{
    return cuda_rmsnorm_forward(ARR(X(0)), F32(X(1)), ARR(X(2)), ARR(X(3)), op->p.rows.n, op->p.rows.C,
                                op->p.rows.eps, OP_STREAM);
}

/* dinp, dweight, dout, inp, weight, rstd. */
static usp_status run_rmsnorm_backward(cuda_ctx *c, const usp_op *op)
{
    return cuda_rmsnorm_backward(ARR(X(0)), ARR(X(1)), ARR(X(2)), ARR(X(3)), ARR(X(4)), F32(X(5)), op->p.rows.n,
                                 op->p.rows.C, OP_STREAM);
}

/* The function's outputs and inputs, as its line in USP_MAP_FNS orders them. */
static usp_status run_map(cuda_ctx *c, const usp_op *op)
{
    cuda_array out[USP_OP_OPERANDS_MAX], in[USP_OP_OPERANDS_MAX];
    usp_operand_info info[USP_OP_OPERANDS_MAX];
    const int n = usp_op_operands(op, info);
    int outs = 0, ins = 0;
    for (int i = 0; i < n; i++) {
        if (info[i].flags & USP_OPERAND_WRITTEN)
            out[outs++] = ARR(X(i));
        else
            in[ins++] = ARR(X(i));
    }
    return cuda_map(op->p.map.fn, out, outs, in, ins, op->p.map.n, op->p.map.scalar, OP_STREAM);
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

/* x, positions; direction +1 forward, -1 backward. */
static usp_status run_rope(cuda_ctx *c, const usp_op *op)
{
    const double *table;
    USP_CHECK(rope_table(c, op->p.rope.D, op->p.rope.theta, op->p.rope.inv_freq, &table));
    return cuda_rope(ARR(X(0)), X(1).data, op->p.rope.n, op->p.rope.H, op->p.rope.D, table,
                     op->kind == USP_OP_ROPE_FORWARD ? 1 : -1, OP_STREAM);
}

/* ---- loss, optimiser, reductions ------------------------------------------------------ */

/* losses, dlogits, logits, targets. */
static usp_status run_cross_entropy(cuda_ctx *c, const usp_op *op)
{
    return cuda_cross_entropy(F32(X(0)), ARR(X(1)), ARR(X(2)), X(3).data, op->p.loss.n, op->p.loss.V,
                              op->p.loss.grad_scale, OP_STREAM);
}

/* params, grads, m, v. */
static usp_status run_adamw_step(cuda_ctx *c, const usp_op *op)
{
    return cuda_adamw_step(F32(X(0)), ARR(X(1)), F32(X(2)), F32(X(3)), op->p.adamw.n, op->p.adamw.lr,
                           op->p.adamw.beta1, op->p.adamw.beta2, op->p.adamw.eps, op->p.adamw.weight_decay,
                           op->p.adamw.t, OP_STREAM);
}

/* Blocking: the sum comes back through pinned memory, then the stream is waited for. */
static usp_status run_sum_squares(cuda_ctx *c, const usp_op *op)
{
    cudaStream_t s = OP_STREAM;
    USP_CHECK(cuda_sum_squares(c->sum_device, ARR(X(0)), op->p.sum.n, s));
    USP_CHECK(cuda_check(cudaMemcpyAsync(c->sum_host, c->sum_device, sizeof *c->sum_host, cudaMemcpyDeviceToHost, s),
                         "cudaMemcpyAsync (sum of squares)"));
    USP_CHECK(cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize (sum of squares)"));
    *op->p.sum.out = *c->sum_host;
    return USP_OK;
}

/* x, bias. */
static usp_status run_add_bias(cuda_ctx *c, const usp_op *op)
{
    return cuda_add_bias(ARR(X(0)), ARR(X(1)), op->p.rows.n, op->p.rows.C, OP_STREAM);
}

/* dbias, dout. */
static usp_status run_bias_backward(cuda_ctx *c, const usp_op *op)
{
    return cuda_bias_backward(ARR(X(0)), ARR(X(1)), op->p.rows.n, op->p.rows.C, OP_STREAM);
}

typedef usp_status (*cuda_op_fn)(cuda_ctx *c, const usp_op *op);
static const cuda_op_fn launchers[USP_OP_KIND_COUNT] = {
    [USP_OP_GEMM] = cuda_gemm,
    [USP_OP_COPY_2D] = run_copy_2d,
    [USP_OP_CONVERT] = run_convert,
    [USP_OP_ACCUMULATE_2D] = run_accumulate_2d,
    [USP_OP_ATTENTION_FORWARD] = run_attention_forward,
    [USP_OP_ATTENTION_BACKWARD] = run_attention_backward,
    [USP_OP_ATTENTION_MERGE] = run_attention_merge,
    [USP_OP_EMBEDDING_FORWARD] = run_embedding_forward,
    [USP_OP_EMBEDDING_BACKWARD] = run_embedding_backward,
    [USP_OP_LAYERNORM_FORWARD] = run_layernorm_forward,
    [USP_OP_LAYERNORM_BACKWARD] = run_layernorm_backward,
    [USP_OP_RMSNORM_FORWARD] = run_rmsnorm_forward,
    [USP_OP_RMSNORM_BACKWARD] = run_rmsnorm_backward,
    [USP_OP_ROPE_FORWARD] = run_rope,
    [USP_OP_ROPE_BACKWARD] = run_rope,
    [USP_OP_CROSS_ENTROPY] = run_cross_entropy,
    [USP_OP_ADAMW_STEP] = run_adamw_step,
    [USP_OP_SUM_SQUARES] = run_sum_squares,
    [USP_OP_ADD_BIAS] = run_add_bias,
    [USP_OP_BIAS_BACKWARD] = run_bias_backward,
    [USP_OP_MAP] = run_map,
};

static int cuda_supports(void *ctx, const usp_op *op)
{
    (void)ctx;
    return (unsigned)op->kind < USP_OP_KIND_COUNT && launchers[op->kind] &&
           (op->kind != USP_OP_MAP || cuda_map_supports(op->p.map.fn));
}

/* The attention's backward workspace (the forward keeps its state in shared memory). */
static size_t cuda_workspace_bytes(void *ctx, const usp_op *op)
{
    (void)ctx;
    return op->kind == USP_OP_ATTENTION_BACKWARD ? cuda_attention_workspace_bytes(&op->p.attention.shape) : 0;
}

static usp_status cuda_run(void *ctx, const usp_op *op) { return launchers[op->kind](ctx, op); }

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
    .cache_bytes = cuda_cache_bytes,
    .supports = cuda_supports,
    .workspace_bytes = cuda_workspace_bytes,
    .run = cuda_run,
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
