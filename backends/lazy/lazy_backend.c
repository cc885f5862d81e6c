/* The lazy backend's slots: each checks its buffers are live, saves its
 * arguments and queues a runner that calls the cpu kernel later (lazy_backend.h). */
#include "backends/lazy/lazy_backend.h"

#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/lazy/lazy_device.h"
#include "core/ops/backend_impl.h"
#include "core/ops/dtype.h"

#define CPU usp_backend_cpu_interface()
#define QUEUE(name, n, ...) \
    lazy_op *op;            \
    USP_CHECK(lazy_device_enqueue(ctx, stream, #name, run_##name, &op, n, __VA_ARGS__))

/* What the op just queued reads and writes, for the order checker (lazy_device_check): a list of
 * usp_access, written with R (a view read), W (a view written) and INTS (n int32 read). */
#define ACCESSES(...)                                                        \
    lazy_device_check(ctx, stream, op->name, (const usp_access[]){__VA_ARGS__}, \
                      (int)(sizeof((const usp_access[]){__VA_ARGS__}) / sizeof(usp_access)))
#define R(view) {(view).data, view_bytes(view), 0}
#define W(view) {(view).data, view_bytes(view), 1}
#define INTS(ptr, n) {(ptr), (size_t)(n) * sizeof(int32_t), 0}

static size_t view_bytes(usp_view v) { return (size_t)v.count * usp_dtype_size(v.dtype); }

/* The bytes a 2-D copy spans from its first row's start to its last row's end. */
static size_t extent_2d(size_t stride, size_t row_bytes, size_t rows) { return rows ? (rows - 1) * stride + row_bytes : 0; }

static usp_status lazy_alloc(void *ctx, size_t bytes, void **out) { return lazy_device_alloc(ctx, bytes, out); }
static void lazy_free(void *ctx, void *ptr) { lazy_device_free(ctx, ptr); }

static usp_status run_copy(const lazy_op *o)
{
    memmove(o->p[0], o->owned ? o->owned : o->p[1], o->z[0]);
    return USP_OK;
}

static usp_status lazy_copy(void *ctx, void *dst, const void *src, size_t bytes, usp_copy_kind kind,
                            usp_stream_t *stream)
{
    lazy_op *op;
    if (kind == USP_COPY_HOST_TO_DEVICE) { /* the host source is read now: staged until the copy runs */
        void *staged = malloc(bytes);
        if (!staged)
            return usp_error(USP_ERR_RUNTIME, "out of memory staging a %zu-byte upload on the lazy backend", bytes);
        memcpy(staged, src, bytes);
        usp_status s = lazy_device_enqueue(ctx, stream, "copy", run_copy, &op, 1, dst);
        if (s != USP_OK) {
            free(staged);
            return s;
        }
        op->owned = staged;
    } else if (kind == USP_COPY_DEVICE_TO_HOST) {
        USP_CHECK(lazy_device_enqueue(ctx, stream, "copy", run_copy, &op, 1, src));
        op->p[1] = (void *)src;
        memset(dst, 0xFF, bytes); /* poison: the data is there only after synchronisation */
        op->writes_host = 1;
    } else {
        USP_CHECK(lazy_device_enqueue(ctx, stream, "copy", run_copy, &op, 2, dst, src));
    }
    op->p[0] = dst;
    op->z[0] = bytes;
    if (kind == USP_COPY_HOST_TO_DEVICE)
        return ACCESSES({dst, bytes, 1});
    if (kind == USP_COPY_DEVICE_TO_HOST)
        return ACCESSES({src, bytes, 0});
    return ACCESSES({dst, bytes, 1}, {src, bytes, 0});
}

static usp_status run_zero(const lazy_op *o) { return CPU->zero(NULL, o->p[0], o->z[0], NULL); }
static usp_status lazy_zero(void *ctx, void *ptr, size_t bytes, usp_stream_t *stream)
{
    QUEUE(zero, 1, ptr);
    op->z[0] = bytes;
    return ACCESSES({ptr, bytes, 1});
}

static usp_status lazy_synchronize(void *ctx, usp_stream_t *stream) { return lazy_device_synchronize(ctx, stream); }

static usp_status run_gemm(const lazy_op *o) { return CPU->gemm(NULL, &o->gemm, o->v[0], o->v[1], o->v[2], NULL); }
static usp_status lazy_gemm(void *ctx, const usp_gemm_desc *g, usp_view a, usp_view b, usp_view c,
                            usp_stream_t *stream)
{
    QUEUE(gemm, 3, a.data, b.data, c.data);
    op->gemm = *g;
    op->v[0] = a, op->v[1] = b, op->v[2] = c;
    return ACCESSES(R(a), R(b), W(c));
}

static usp_status run_copy_2d(const lazy_op *o)
{
    return CPU->copy_2d(NULL, o->p[0], o->z[0], o->p[1], o->z[1], o->z[2], o->z[3], NULL);
}
static usp_status lazy_copy_2d(void *ctx, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                               size_t row_bytes, size_t rows, usp_stream_t *stream)
{
    QUEUE(copy_2d, 2, dst, src);
    op->z[0] = dst_stride, op->z[1] = src_stride, op->z[2] = row_bytes, op->z[3] = rows;
    return ACCESSES({dst, extent_2d(dst_stride, row_bytes, rows), 1}, {src, extent_2d(src_stride, row_bytes, rows), 0});
}

static usp_status run_convert(const lazy_op *o) { return CPU->convert(NULL, o->v[0], o->v[1], NULL); }
static usp_status lazy_convert(void *ctx, usp_view dst, usp_view src, usp_stream_t *stream)
{
    QUEUE(convert, 2, dst.data, src.data);
    op->v[0] = dst, op->v[1] = src;
    return ACCESSES(W(dst), R(src));
}

static usp_status run_accumulate_2d(const lazy_op *o)
{
    return CPU->accumulate_2d(NULL, o->v[0], o->z[0], o->v[1], o->z[1], o->z[2], o->z[3], NULL);
}
static usp_status lazy_accumulate_2d(void *ctx, usp_view dst, size_t dst_stride, usp_view src, size_t src_stride,
                                     size_t row_elems, size_t rows, usp_stream_t *stream)
{
    QUEUE(accumulate_2d, 2, dst.data, src.data);
    op->v[0] = dst, op->v[1] = src;
    op->z[0] = dst_stride, op->z[1] = src_stride, op->z[2] = row_elems, op->z[3] = rows;
    return ACCESSES(W(dst), R(src));
}

static size_t lazy_attention_workspace(void *ctx, const usp_attention_shape *s, int backward)
{
    (void)ctx;
    return CPU->attention_workspace_bytes(NULL, s, backward);
}

static usp_status run_attention_forward(const lazy_op *o)
{
    return CPU->attention_forward(NULL, &o->shape, o->v[0], o->v[1], o->v[2], o->v[3], o->v[4], o->p[5], NULL);
}
static usp_status lazy_attention_forward(void *ctx, const usp_attention_shape *s, usp_view q, usp_view k,
                                         usp_view v, usp_view o, usp_view lse, void *workspace, usp_stream_t *stream)
{
    QUEUE(attention_forward, 6, q.data, k.data, v.data, o.data, lse.data, workspace);
    op->v[0] = q, op->v[1] = k, op->v[2] = v, op->v[3] = o, op->v[4] = lse;
    op->shape = *s;
    return ACCESSES(R(q), R(k), R(v), W(o), W(lse), {workspace, CPU->attention_workspace_bytes(NULL, s, 0), 1});
}

static usp_status run_attention_backward(const lazy_op *o)
{
    return CPU->attention_backward(NULL, &o->shape, o->v[0], o->v[1], o->v[2], o->v[3], o->v[4], o->v[5], o->v[6],
                                   o->v[7], o->v[8], (int)o->i[0], o->p[9], NULL);
}
static usp_status lazy_attention_backward(void *ctx, const usp_attention_shape *s, usp_view q, usp_view k,
                                          usp_view v, usp_view o, usp_view lse, usp_view d_o,
                                          usp_view dq, usp_view dk, usp_view dv, int accumulate, void *workspace,
                                          usp_stream_t *stream)
{
    QUEUE(attention_backward, 10, q.data, k.data, v.data, o.data, lse.data, d_o.data, dq.data, dk.data, dv.data,
          workspace);
    op->v[0] = q, op->v[1] = k, op->v[2] = v, op->v[3] = o, op->v[4] = lse, op->v[5] = d_o;
    op->v[6] = dq, op->v[7] = dk, op->v[8] = dv;
    op->shape = *s;
    op->i[0] = accumulate;
    return ACCESSES(R(q), R(k), R(v), R(o), R(lse), R(d_o), W(dq), W(dk), W(dv), {workspace, CPU->attention_workspace_bytes(NULL, s, 1), 1});
}

static usp_status run_attention_merge(const lazy_op *o)
{
    return CPU->attention_merge(NULL, o->v[0], o->v[1], o->v[2], o->v[3], o->i[0], o->i[1], o->i[2], NULL);
}
static usp_status lazy_attention_merge(void *ctx, usp_view o, usp_view lse, usp_view o_part, usp_view lse_part,
                                       int64_t n, int64_t heads, int64_t head_dim, usp_stream_t *stream)
{
    QUEUE(attention_merge, 4, o.data, lse.data, o_part.data, lse_part.data);
    op->v[0] = o, op->v[1] = lse, op->v[2] = o_part, op->v[3] = lse_part;
    op->i[0] = n, op->i[1] = heads, op->i[2] = head_dim;
    return ACCESSES(W(o), W(lse), R(o_part), R(lse_part));
}

static usp_status run_embedding_forward(const lazy_op *o)
{
    return CPU->embedding_forward(NULL, o->v[0], o->p[1], o->p[2], o->v[3], o->v[4], o->i[0], o->i[1], NULL);
}
static usp_status lazy_embedding_forward(void *ctx, usp_view out, const int32_t *tokens, const int32_t *positions,
                                         usp_view wte, usp_view wpe, int64_t n, int64_t C,
                                         usp_stream_t *stream)
{
    QUEUE(embedding_forward, 5, out.data, tokens, positions, wte.data, wpe.data);
    op->v[0] = out, op->v[3] = wte, op->v[4] = wpe;
    op->i[0] = n, op->i[1] = C;
    return ACCESSES(W(out), INTS(tokens, n), INTS(positions, n), R(wte), R(wpe));
}

static usp_status run_embedding_backward(const lazy_op *o)
{
    return CPU->embedding_backward(NULL, o->v[0], o->v[1], o->v[2], o->p[3], o->p[4], o->i[0], o->i[1], NULL);
}
static usp_status lazy_embedding_backward(void *ctx, usp_view dwte, usp_view dwpe, usp_view dout,
                                          const int32_t *tokens, const int32_t *positions, int64_t n, int64_t C,
                                          usp_stream_t *stream)
{
    QUEUE(embedding_backward, 5, dwte.data, dwpe.data, dout.data, tokens, positions);
    op->v[0] = dwte, op->v[1] = dwpe, op->v[2] = dout;
    op->i[0] = n, op->i[1] = C;
    return ACCESSES(W(dwte), W(dwpe), R(dout), INTS(tokens, n), INTS(positions, n));
}

static usp_status run_layernorm_forward(const lazy_op *o)
{
    return CPU->layernorm_forward(NULL, o->v[0], o->v[1], o->v[2], o->v[3], o->v[4], o->v[5], o->i[0], o->i[1],
                                  o->f[0], NULL);
}
static usp_status lazy_layernorm_forward(void *ctx, usp_view out, usp_view mean, usp_view rstd, usp_view inp,
                                         usp_view weight, usp_view bias, int64_t n, int64_t C, float eps,
                                         usp_stream_t *stream)
{
    QUEUE(layernorm_forward, 6, out.data, mean.data, rstd.data, inp.data, weight.data, bias.data);
    op->v[0] = out, op->v[1] = mean, op->v[2] = rstd, op->v[3] = inp, op->v[4] = weight, op->v[5] = bias;
    op->i[0] = n, op->i[1] = C, op->f[0] = eps;
    return ACCESSES(W(out), W(mean), W(rstd), R(inp), R(weight), R(bias));
}

static usp_status run_layernorm_backward(const lazy_op *o)
{
    return CPU->layernorm_backward(NULL, o->v[0], o->v[1], o->v[2], o->v[3], o->v[4], o->v[5], o->v[6], o->v[7],
                                   o->i[0], o->i[1], NULL);
}
static usp_status lazy_layernorm_backward(void *ctx, usp_view dinp, usp_view dweight, usp_view dbias, usp_view dout,
                                          usp_view inp, usp_view weight, usp_view mean,
                                          usp_view rstd, int64_t n, int64_t C, usp_stream_t *stream)
{
    QUEUE(layernorm_backward, 8, dinp.data, dweight.data, dbias.data, dout.data, inp.data, weight.data, mean.data,
          rstd.data);
    op->v[0] = dinp, op->v[1] = dweight, op->v[2] = dbias, op->v[3] = dout, op->v[4] = inp, op->v[5] = weight;
    op->v[6] = mean, op->v[7] = rstd;
    op->i[0] = n, op->i[1] = C;
    return ACCESSES(W(dinp), W(dweight), W(dbias), R(dout), R(inp), R(weight), R(mean), R(rstd));
}

static usp_status run_rmsnorm_forward(const lazy_op *o)
{
    return CPU->rmsnorm_forward(NULL, o->v[0], o->v[1], o->v[2], o->v[3], o->i[0], o->i[1], o->f[0], NULL);
}
static usp_status lazy_rmsnorm_forward(void *ctx, usp_view out, usp_view rstd, usp_view inp, usp_view weight,
                                       int64_t n, int64_t C, float eps, usp_stream_t *stream)
{
    QUEUE(rmsnorm_forward, 4, out.data, rstd.data, inp.data, weight.data);
    op->v[0] = out, op->v[1] = rstd, op->v[2] = inp, op->v[3] = weight;
    op->i[0] = n, op->i[1] = C, op->f[0] = eps;
    return ACCESSES(W(out), W(rstd), R(inp), R(weight));
}

static usp_status run_rmsnorm_backward(const lazy_op *o)
{
    return CPU->rmsnorm_backward(NULL, o->v[0], o->v[1], o->v[2], o->v[3], o->v[4], o->v[5], o->i[0], o->i[1],
                                 NULL);
}
static usp_status lazy_rmsnorm_backward(void *ctx, usp_view dinp, usp_view dweight, usp_view dout, usp_view inp,
                                        usp_view weight, usp_view rstd, int64_t n, int64_t C,
                                        usp_stream_t *stream)
{
    QUEUE(rmsnorm_backward, 6, dinp.data, dweight.data, dout.data, inp.data, weight.data, rstd.data);
    op->v[0] = dinp, op->v[1] = dweight, op->v[2] = dout, op->v[3] = inp, op->v[4] = weight, op->v[5] = rstd;
    op->i[0] = n, op->i[1] = C;
    return ACCESSES(W(dinp), W(dweight), R(dout), R(inp), R(weight), R(rstd));
}

static usp_status run_gelu_tanh_forward(const lazy_op *o)
{
    return CPU->gelu_tanh_forward(NULL, o->v[0], o->v[1], o->i[0], NULL);
}
static usp_status lazy_gelu_tanh_forward(void *ctx, usp_view out, usp_view inp, int64_t n, usp_stream_t *stream)
{
    QUEUE(gelu_tanh_forward, 2, out.data, inp.data);
    op->v[0] = out, op->v[1] = inp;
    op->i[0] = n;
    return ACCESSES(W(out), R(inp));
}

static usp_status run_gelu_tanh_backward(const lazy_op *o)
{
    return CPU->gelu_tanh_backward(NULL, o->v[0], o->v[1], o->v[2], o->i[0], NULL);
}
static usp_status lazy_gelu_tanh_backward(void *ctx, usp_view dinp, usp_view inp, usp_view dout, int64_t n,
                                          usp_stream_t *stream)
{
    QUEUE(gelu_tanh_backward, 3, dinp.data, inp.data, dout.data);
    op->v[0] = dinp, op->v[1] = inp, op->v[2] = dout;
    op->i[0] = n;
    return ACCESSES(W(dinp), R(inp), R(dout));
}

static usp_status run_swiglu_forward(const lazy_op *o)
{
    return CPU->swiglu_forward(NULL, o->v[0], o->v[1], o->v[2], o->i[0], NULL);
}
static usp_status lazy_swiglu_forward(void *ctx, usp_view out, usp_view gate, usp_view up, int64_t n,
                                      usp_stream_t *stream)
{
    QUEUE(swiglu_forward, 3, out.data, gate.data, up.data);
    op->v[0] = out, op->v[1] = gate, op->v[2] = up;
    op->i[0] = n;
    return ACCESSES(W(out), R(gate), R(up));
}

static usp_status run_swiglu_backward(const lazy_op *o)
{
    return CPU->swiglu_backward(NULL, o->v[0], o->v[1], o->v[2], o->v[3], o->v[4], o->i[0], NULL);
}
static usp_status lazy_swiglu_backward(void *ctx, usp_view dgate, usp_view dup, usp_view gate, usp_view up,
                                       usp_view dout, int64_t n, usp_stream_t *stream)
{
    QUEUE(swiglu_backward, 5, dgate.data, dup.data, gate.data, up.data, dout.data);
    op->v[0] = dgate, op->v[1] = dup, op->v[2] = gate, op->v[3] = up, op->v[4] = dout;
    op->i[0] = n;
    return ACCESSES(W(dgate), W(dup), R(gate), R(up), R(dout));
}

/* inv_freq is host memory read before the slot returns: the op keeps a copy. */
static usp_status keep_inv_freq(lazy_op *op, const double *inv_freq, int64_t D)
{
    if (!inv_freq)
        return USP_OK;
    op->owned = malloc((size_t)(D / 2) * sizeof *inv_freq);
    if (!op->owned)
        return usp_error(USP_ERR_RUNTIME, "out of memory keeping rope's frequencies on the lazy backend");
    memcpy(op->owned, inv_freq, (size_t)(D / 2) * sizeof *inv_freq);
    return USP_OK;
}

static usp_status run_rope_forward(const lazy_op *o)
{
    return CPU->rope_forward(NULL, o->v[0], o->p[1], o->i[0], o->i[1], o->i[2], o->f[0], o->owned, NULL);
}
static usp_status lazy_rope_forward(void *ctx, usp_view x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                                    float theta, const double *inv_freq, usp_stream_t *stream)
{
    QUEUE(rope_forward, 2, x.data, positions);
    op->v[0] = x;
    op->i[0] = n, op->i[1] = H, op->i[2] = D, op->f[0] = theta;
    USP_CHECK(keep_inv_freq(op, inv_freq, D));
    return ACCESSES(W(x), INTS(positions, n));
}

static usp_status run_rope_backward(const lazy_op *o)
{
    return CPU->rope_backward(NULL, o->v[0], o->p[1], o->i[0], o->i[1], o->i[2], o->f[0], o->owned, NULL);
}
static usp_status lazy_rope_backward(void *ctx, usp_view dx, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                                     float theta, const double *inv_freq, usp_stream_t *stream)
{
    QUEUE(rope_backward, 2, dx.data, positions);
    op->v[0] = dx;
    op->i[0] = n, op->i[1] = H, op->i[2] = D, op->f[0] = theta;
    USP_CHECK(keep_inv_freq(op, inv_freq, D));
    return ACCESSES(W(dx), INTS(positions, n));
}

static usp_status run_cross_entropy(const lazy_op *o)
{
    return CPU->cross_entropy(NULL, o->v[0], o->v[1], o->v[2], o->p[3], o->i[0], o->i[1], o->f[0], NULL);
}
static usp_status lazy_cross_entropy(void *ctx, usp_view losses, usp_view dlogits, usp_view logits,
                                     const int32_t *targets, int64_t n, int64_t V, float grad_scale,
                                     usp_stream_t *stream)
{
    QUEUE(cross_entropy, 4, losses.data, dlogits.data, logits.data, targets);
    op->v[0] = losses, op->v[1] = dlogits, op->v[2] = logits;
    op->i[0] = n, op->i[1] = V, op->f[0] = grad_scale;
    return ACCESSES(W(losses), W(dlogits), R(logits), INTS(targets, n));
}

static usp_status run_adamw_step(const lazy_op *o)
{
    return CPU->adamw_step(NULL, o->v[0], o->v[1], o->v[2], o->v[3], o->i[0], o->f[0], o->f[1], o->f[2], o->f[3],
                           o->f[4], o->i[1], NULL);
}
static usp_status lazy_adamw_step(void *ctx, usp_view params, usp_view grads, usp_view m, usp_view v, int64_t n,
                                  float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                                  usp_stream_t *stream)
{
    QUEUE(adamw_step, 4, params.data, grads.data, m.data, v.data);
    op->v[0] = params, op->v[1] = grads, op->v[2] = m, op->v[3] = v;
    op->i[0] = n, op->i[1] = t;
    op->f[0] = lr, op->f[1] = beta1, op->f[2] = beta2, op->f[3] = eps, op->f[4] = weight_decay;
    return ACCESSES(W(params), R(grads), W(m), W(v));
}

/* Blocking: the result is host memory. */
static usp_status lazy_sum_squares(void *ctx, double *out, usp_view x, int64_t n, usp_stream_t *stream)
{
    USP_CHECK(lazy_device_synchronize(ctx, stream));
    return CPU->sum_squares(NULL, out, x, n, NULL);
}

static usp_status run_scale(const lazy_op *o) { return CPU->scale(NULL, o->v[0], o->f[0], o->i[0], NULL); }
static usp_status lazy_scale(void *ctx, usp_view x, float s, int64_t n, usp_stream_t *stream)
{
    QUEUE(scale, 1, x.data);
    op->v[0] = x;
    op->f[0] = s, op->i[0] = n;
    return ACCESSES(W(x));
}

static usp_status run_add_bias(const lazy_op *o) { return CPU->add_bias(NULL, o->v[0], o->v[1], o->i[0], o->i[1], NULL); }
static usp_status lazy_add_bias(void *ctx, usp_view x, usp_view bias, int64_t n, int64_t C, usp_stream_t *stream)
{
    QUEUE(add_bias, 2, x.data, bias.data);
    op->v[0] = x, op->v[1] = bias;
    op->i[0] = n, op->i[1] = C;
    return ACCESSES(W(x), R(bias));
}

static usp_status run_bias_backward(const lazy_op *o)
{
    return CPU->bias_backward(NULL, o->v[0], o->v[1], o->i[0], o->i[1], NULL);
}
static usp_status lazy_bias_backward(void *ctx, usp_view dbias, usp_view dout, int64_t n, int64_t C,
                                     usp_stream_t *stream)
{
    QUEUE(bias_backward, 2, dbias.data, dout.data);
    op->v[0] = dbias, op->v[1] = dout;
    op->i[0] = n, op->i[1] = C;
    return ACCESSES(W(dbias), R(dout));
}

static usp_status lazy_stream_create(void *ctx, usp_stream_t **out) { return lazy_device_stream_create(ctx, out); }
static void lazy_stream_destroy(void *ctx, usp_stream_t *s) { lazy_device_stream_destroy(ctx, s); }
static usp_status lazy_event_create(void *ctx, usp_event_t **out) { return lazy_device_event_create(ctx, out); }
static void lazy_event_destroy(void *ctx, usp_event_t *e) { lazy_device_event_destroy(ctx, e); }
static usp_status lazy_event_record(void *ctx, usp_event_t *e, usp_stream_t *s)
{
    return lazy_device_event_record(ctx, e, s);
}
static usp_status lazy_stream_wait_event(void *ctx, usp_stream_t *s, usp_event_t *e)
{
    return lazy_device_stream_wait_event(ctx, s, e);
}
static usp_status lazy_launch_host_func(void *ctx, usp_stream_t *s, void (*fn)(void *), void *arg)
{
    return lazy_device_launch_host_func(ctx, s, fn, arg);
}
static usp_status lazy_run_queued(void *ctx, usp_stream_t *s) { return lazy_device_run_queued(ctx, s); }
static usp_status lazy_note_access(void *ctx, usp_stream_t *s, const char *what, const usp_access *a, int n)
{
    return lazy_device_check(ctx, s, what, a, n);
}
static void lazy_destroy(void *ctx) { lazy_device_destroy(ctx); }
static size_t lazy_cache_bytes(void *ctx) { return CPU->cache_bytes(ctx); } /* the cpu kernels' cache */

static const usp_backend_i lazy_backend_iface = {
    .api_version = USP_BACKEND_API_VERSION,
    .name = "lazy",
    .has_numerics = 1,
    .stores_bf16 = 1, /* as the cpu kernels it runs (backends/cpu/cpu_widen.h) */
    .alloc = lazy_alloc,
    .free = lazy_free,
    .copy = lazy_copy,
    .zero = lazy_zero,
    .synchronize = lazy_synchronize,
    .stream_create = lazy_stream_create,
    .stream_destroy = lazy_stream_destroy,
    .event_create = lazy_event_create,
    .event_destroy = lazy_event_destroy,
    .event_record = lazy_event_record,
    .stream_wait_event = lazy_stream_wait_event,
    .launch_host_func = lazy_launch_host_func,
    .run_queued = lazy_run_queued,
    .note_access = lazy_note_access,
    .cache_bytes = lazy_cache_bytes,
    .gemm = lazy_gemm,
    .copy_2d = lazy_copy_2d,
    .convert = lazy_convert,
    .accumulate_2d = lazy_accumulate_2d,
    .attention_workspace_bytes = lazy_attention_workspace,
    .attention_forward = lazy_attention_forward,
    .attention_backward = lazy_attention_backward,
    .attention_merge = lazy_attention_merge,
    .embedding_forward = lazy_embedding_forward,
    .embedding_backward = lazy_embedding_backward,
    .layernorm_forward = lazy_layernorm_forward,
    .layernorm_backward = lazy_layernorm_backward,
    .rmsnorm_forward = lazy_rmsnorm_forward,
    .rmsnorm_backward = lazy_rmsnorm_backward,
    .gelu_tanh_forward = lazy_gelu_tanh_forward,
    .gelu_tanh_backward = lazy_gelu_tanh_backward,
    .swiglu_forward = lazy_swiglu_forward,
    .swiglu_backward = lazy_swiglu_backward,
    .rope_forward = lazy_rope_forward,
    .rope_backward = lazy_rope_backward,
    .cross_entropy = lazy_cross_entropy,
    .adamw_step = lazy_adamw_step,
    .sum_squares = lazy_sum_squares,
    .scale = lazy_scale,
    .add_bias = lazy_add_bias,
    .bias_backward = lazy_bias_backward,
    .destroy = lazy_destroy,
};

usp_status usp_backend_lazy_create(usp_backend_t **out)
{
    lazy_device *d;
    USP_CHECK(lazy_device_create(&d));
    usp_status s = usp_backend_create(&lazy_backend_iface, d, out);
    if (s != USP_OK)
        lazy_device_destroy(d);
    else
        lazy_device_set_owner(d, *out);
    return s;
}
