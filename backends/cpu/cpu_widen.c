/* bf16 operands for the fp32 cpu kernels: widen, run, round back (cpu_widen.h). */
#include "backends/cpu/cpu_widen.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/dtype.h"

#define MAX_OPERANDS 12
#define PARALLEL_CONVERT ((int64_t)1 << 16)

/* The fp32 slots the wrappers call (atomic: every caller of cpu_widened_interface stores the same one). */
static _Atomic(const usp_backend_i *) fp32_slots;
#define F atomic_load(&fp32_slots)

/* The fp32 temporaries of one slot call, one per distinct bf16 operand. */
typedef struct widening {
    usp_view narrow[MAX_OPERANDS]; /* the operand as the caller passed it */
    float *wide[MAX_OPERANDS];
    int owned[MAX_OPERANDS]; /* 1: malloc'd (the thread's scratch was too small), freed after the call */
    int n;
    usp_status status; /* the first failure; later widenings then do nothing */
} widening;

/* Each thread's scratch for the temporaries, reused from call to call: a fresh malloc of a few
 * hundred kB per operand per op is an mmap and its page faults each time (measured: 5x the fp32
 * step of the tiny model). A call that needs more than it holds mallocs the rest, and the scratch
 * grows to that call's total for the next one. */
typedef struct scratch {
    float *base;
    size_t cap, used, wanted; /* in floats */
} scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_destroy(void *p)
{
    scratch *s = p;
    free(s->base);
    free(s);
}

static void scratch_key_create(void) { pthread_key_create(&scratch_key, scratch_destroy); }

static scratch *thread_scratch(void)
{
    pthread_once(&scratch_once, scratch_key_create);
    scratch *s = pthread_getspecific(scratch_key);
    if (!s && (s = calloc(1, sizeof *s)) && pthread_setspecific(scratch_key, s) != 0) {
        free(s);
        s = NULL;
    }
    return s;
}

/* n floats from the thread's scratch (64-byte aligned), else from malloc (*owned = 1). */
static float *take(int64_t n, int *owned)
{
    const size_t need = ((size_t)(n > 0 ? n : 1) + 15) / 16 * 16;
    scratch *s = thread_scratch();
    *owned = 0;
    if (s) {
        s->wanted += need;
        if (s->used + need <= s->cap) {
            float *p = s->base + s->used;
            s->used += need;
            return p;
        }
    }
    *owned = 1;
    return malloc(need * sizeof(float));
}

/* After a call: the scratch is free again, grown if the call needed more than it had. */
static void release(void)
{
    scratch *s = thread_scratch();
    if (!s)
        return;
    if (s->wanted > s->cap) {
        float *bigger = aligned_alloc(64, s->wanted * sizeof(float));
        if (bigger) {
            free(s->base);
            s->base = bigger, s->cap = s->wanted;
        }
    }
    s->used = s->wanted = 0;
}

static void to_f32(float *dst, const uint16_t *src, int64_t n)
{
    #pragma omp parallel for schedule(static) if (n > PARALLEL_CONVERT)
    for (int64_t i = 0; i < n; i++)
        dst[i] = usp_bf16_to_f32(src[i]);
}

static void to_bf16(uint16_t *dst, const float *src, int64_t n)
{
    #pragma omp parallel for schedule(static) if (n > PARALLEL_CONVERT)
    for (int64_t i = 0; i < n; i++)
        dst[i] = usp_f32_to_bf16(src[i]);
}

/* A temporary of n floats for the operand `of` (data NULL: one no written operand matches), listed so
 * that narrow_back gives it back; NULL with the failure recorded when there is no memory for it. */
static float *temporary(widening *w, usp_view of, int64_t n)
{
    int owned = 0;
    float *t = w->n < MAX_OPERANDS ? take(n, &owned) : NULL;
    if (!t) {
        w->status = usp_error(USP_ERR_RUNTIME, "out of host memory for a %lld-element fp32 temporary of a bf16 "
                              "operand on the cpu backend", (long long)n);
        return NULL;
    }
    w->narrow[w->n] = of, w->wide[w->n] = t, w->owned[w->n] = owned, w->n++;
    return t;
}

/* The fp32 view the fp32 slot gets for v: v itself unless it is bf16, else a temporary holding v
 * widened. Two operands at one address (cross_entropy's dlogits = logits) share a temporary, so a
 * slot that writes in place still reads what it wrote. */
static usp_view widen(widening *w, usp_view v)
{
    if (v.dtype != USP_BF16 || !v.data || w->status != USP_OK)
        return v;
    for (int i = 0; i < w->n; i++)
        if (w->narrow[i].data == v.data) {
            if (v.count > w->narrow[i].count)
                w->status = usp_error(USP_ERR_RUNTIME, "bf16 operands at one address with different lengths "
                                      "(%lld and %lld elements): the cpu backend widens each once",
                                      (long long)w->narrow[i].count, (long long)v.count);
            return (usp_view){.data = w->wide[i], .dtype = USP_F32, .count = v.count};
        }
    float *wide = temporary(w, v, v.count);
    if (!wide)
        return v;
    to_f32(wide, v.data, v.count);
    return (usp_view){.data = wide, .dtype = USP_F32, .count = v.count};
}

/* After the fp32 slot returned `st`: rounds the `n_written` operands it writes (the caller's views,
 * as passed to widen) back into their bf16 buffers, then gives every temporary back. */
static usp_status narrow_back(widening *w, usp_status st, int n_written, ...)
{
    if (st == USP_OK)
        st = w->status;
    va_list ap;
    va_start(ap, n_written);
    for (int k = 0; k < n_written; k++) {
        usp_view v = va_arg(ap, usp_view);
        for (int i = 0; i < w->n && st == USP_OK; i++)
            if (w->narrow[i].data == v.data)
                to_bf16(v.data, w->wide[i], w->narrow[i].count);
    }
    va_end(ap);
    for (int i = 0; i < w->n; i++)
        if (w->owned[i])
            free(w->wide[i]);
    if (w->n > 0)
        release();
    return st;
}

/* The slot's body: widen every operand named, call the fp32 slot on the wide views, round back. */
#define CALL(slot, ...) (w.status != USP_OK ? w.status : F->slot(__VA_ARGS__))
#define W(v) widen(&w, v)

static usp_status convert(void *ctx, usp_view dst, usp_view src, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
    if (dst.dtype == USP_BF16 && src.dtype == USP_F32)
        to_bf16(dst.data, src.data, src.count);
    else if (dst.dtype == USP_F32 && src.dtype == USP_BF16)
        to_f32(dst.data, src.data, src.count);
    else
        return usp_error(USP_ERR_CONFIG, "convert from %s to %s: the cpu backend converts between f32 and bf16",
                         usp_dtype_name(src.dtype), usp_dtype_name(dst.dtype));
    return USP_OK;
}

/* An fp32 operand rounded to bf16 values, in a temporary (freed as the widened ones are). */
static usp_view rounded(widening *w, usp_view v)
{
    float *r = w->status == USP_OK ? temporary(w, (usp_view){.dtype = USP_F32, .count = v.count}, v.count) : NULL;
    if (!r)
        return v;
    const float *x = v.data;
    #pragma omp parallel for schedule(static) if (v.count > PARALLEL_CONVERT)
    for (int64_t i = 0; i < v.count; i++)
        r[i] = usp_bf16_to_f32(usp_f32_to_bf16(x[i]));
    return (usp_view){.data = r, .dtype = USP_F32, .count = v.count};
}

/* The fp32 gemm reads g's pointers: the wide copy of g points at the temporaries. A bf16 operand
 * times an fp32 one (the loss's fp32 dlogits by the bf16 lm_head) multiplies the fp32 one rounded
 * to bf16, as the cuda backend does (cuBLAS takes one input dtype) and as autocast casts. */
static usp_status gemm(void *ctx, const usp_gemm_desc *g, usp_view a, usp_view b, usp_view c,
                       usp_stream_t *stream)
{
    widening w = {0};
    if (g->k > 0 && a.dtype != b.dtype && a.data && b.data) {
        if (a.dtype == USP_F32)
            a = rounded(&w, a);
        else
            b = rounded(&w, b);
    }
    usp_view wa = W(a), wb = W(b), wc = W(c);
    usp_gemm_desc wg = *g;
    wg.a = wa.data, wg.b = wb.data, wg.c = wc.data;
    return narrow_back(&w, CALL(gemm, ctx, &wg, wa, wb, wc, stream), 1, c);
}

static usp_status accumulate_2d(void *ctx, usp_view dst, size_t dst_stride, usp_view src, size_t src_stride,
                                size_t row_elems, size_t rows, usp_stream_t *stream)
{
    widening w = {0};
    usp_view d = W(dst), s = W(src);
    return narrow_back(&w, CALL(accumulate_2d, ctx, d, dst_stride, s, src_stride, row_elems, rows, stream), 1,
                       dst);
}

static usp_status attention_forward(void *ctx, const usp_attention_shape *s, usp_view q, usp_view k, usp_view v,
                                    usp_view o, usp_view lse, void *workspace, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wq = W(q), wk = W(k), wv = W(v), wo = W(o);
    return narrow_back(&w, CALL(attention_forward, ctx, s, wq, wk, wv, wo, lse, workspace, stream), 1, o);
}

static usp_status attention_backward(void *ctx, const usp_attention_shape *s, usp_view q, usp_view k, usp_view v,
                                     usp_view o, usp_view lse, usp_view d_o, usp_view dq, usp_view dk, usp_view dv,
                                     int accumulate, void *workspace, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wq = W(q), wk = W(k), wv = W(v), wo = W(o), wdo = W(d_o), wdq = W(dq), wdk = W(dk), wdv = W(dv);
    usp_status st = CALL(attention_backward, ctx, s, wq, wk, wv, wo, lse, wdo, wdq, wdk, wdv, accumulate,
                         workspace, stream);
    return narrow_back(&w, st, 3, dq, dk, dv);
}

static usp_status attention_merge(void *ctx, usp_view o, usp_view lse, usp_view o_part, usp_view lse_part,
                                  int64_t n, int64_t heads, int64_t head_dim, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wo = W(o), wp = W(o_part);
    return narrow_back(&w, CALL(attention_merge, ctx, wo, lse, wp, lse_part, n, heads, head_dim, stream), 1, o);
}

/* An embedding table's view covers one row (C elements: the wrapper cannot know the vocabulary); the
 * kernel reads the rows the ids name, so the table is widened through the largest id. The ids are
 * host memory here (cpu; lazy runs this when the upload before it has run). */
static usp_view table_rows(usp_view table, const int32_t *ids, int64_t n, int64_t C)
{
    int32_t most = 0;
    for (int64_t i = 0; i < n && table.data; i++)
        most = ids[i] > most ? ids[i] : most;
    if (table.data)
        table.count = ((int64_t)most + 1) * C;
    return table;
}

static usp_status embedding_forward(void *ctx, usp_view out, const int32_t *tokens, const int32_t *positions,
                                    usp_view wte, usp_view wpe, int64_t n, int64_t C, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wo = W(out), wt = W(table_rows(wte, tokens, n, C)), wp = W(table_rows(wpe, positions, n, C));
    return narrow_back(&w, CALL(embedding_forward, ctx, wo, tokens, positions, wt, wp, n, C, stream), 1, out);
}

static usp_status embedding_backward(void *ctx, usp_view dwte, usp_view dwpe, usp_view dout, const int32_t *tokens,
                                     const int32_t *positions, int64_t n, int64_t C, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wt = W(table_rows(dwte, tokens, n, C)), wp = W(table_rows(dwpe, positions, n, C)), wd = W(dout);
    return narrow_back(&w, CALL(embedding_backward, ctx, wt, wp, wd, tokens, positions, n, C, stream), 2, dwte,
                       dwpe);
}

static usp_status layernorm_forward(void *ctx, usp_view out, usp_view mean, usp_view rstd, usp_view inp,
                                    usp_view weight, usp_view bias, int64_t n, int64_t C, float eps,
                                    usp_stream_t *stream)
{
    widening w = {0};
    usp_view wo = W(out), wi = W(inp), ww = W(weight), wb = W(bias);
    return narrow_back(&w, CALL(layernorm_forward, ctx, wo, mean, rstd, wi, ww, wb, n, C, eps, stream), 1, out);
}

static usp_status layernorm_backward(void *ctx, usp_view dinp, usp_view dweight, usp_view dbias, usp_view dout,
                                     usp_view inp, usp_view weight, usp_view mean, usp_view rstd, int64_t n,
                                     int64_t C, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wdi = W(dinp), wdw = W(dweight), wdb = W(dbias), wdo = W(dout), wi = W(inp), ww = W(weight);
    usp_status st = CALL(layernorm_backward, ctx, wdi, wdw, wdb, wdo, wi, ww, mean, rstd, n, C, stream);
    return narrow_back(&w, st, 3, dinp, dweight, dbias);
}

static usp_status rmsnorm_forward(void *ctx, usp_view out, usp_view rstd, usp_view inp, usp_view weight,
                                  int64_t n, int64_t C, float eps, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wo = W(out), wi = W(inp), ww = W(weight);
    return narrow_back(&w, CALL(rmsnorm_forward, ctx, wo, rstd, wi, ww, n, C, eps, stream), 1, out);
}

static usp_status rmsnorm_backward(void *ctx, usp_view dinp, usp_view dweight, usp_view dout, usp_view inp,
                                   usp_view weight, usp_view rstd, int64_t n, int64_t C, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wdi = W(dinp), wdw = W(dweight), wdo = W(dout), wi = W(inp), ww = W(weight);
    usp_status st = CALL(rmsnorm_backward, ctx, wdi, wdw, wdo, wi, ww, rstd, n, C, stream);
    return narrow_back(&w, st, 2, dinp, dweight);
}

static usp_status gelu_tanh_forward(void *ctx, usp_view out, usp_view inp, int64_t n, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wo = W(out), wi = W(inp);
    return narrow_back(&w, CALL(gelu_tanh_forward, ctx, wo, wi, n, stream), 1, out);
}

static usp_status gelu_tanh_backward(void *ctx, usp_view dinp, usp_view inp, usp_view dout, int64_t n,
                                     usp_stream_t *stream)
{
    widening w = {0};
    usp_view wdi = W(dinp), wi = W(inp), wdo = W(dout);
    return narrow_back(&w, CALL(gelu_tanh_backward, ctx, wdi, wi, wdo, n, stream), 1, dinp);
}

static usp_status swiglu_forward(void *ctx, usp_view out, usp_view gate, usp_view up, int64_t n,
                                 usp_stream_t *stream)
{
    widening w = {0};
    usp_view wo = W(out), wg = W(gate), wu = W(up);
    return narrow_back(&w, CALL(swiglu_forward, ctx, wo, wg, wu, n, stream), 1, out);
}

static usp_status swiglu_backward(void *ctx, usp_view dgate, usp_view dup, usp_view gate, usp_view up,
                                  usp_view dout, int64_t n, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wdg = W(dgate), wdu = W(dup), wg = W(gate), wu = W(up), wdo = W(dout);
    return narrow_back(&w, CALL(swiglu_backward, ctx, wdg, wdu, wg, wu, wdo, n, stream), 2, dgate, dup);
}

static usp_status rope_forward(void *ctx, usp_view x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                               float theta, const double *inv_freq, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wx = W(x);
    return narrow_back(&w, CALL(rope_forward, ctx, wx, positions, n, H, D, theta, inv_freq, stream), 1, x);
}

static usp_status rope_backward(void *ctx, usp_view dx, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                                float theta, const double *inv_freq, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wx = W(dx);
    return narrow_back(&w, CALL(rope_backward, ctx, wx, positions, n, H, D, theta, inv_freq, stream), 1, dx);
}

static usp_status cross_entropy(void *ctx, usp_view losses, usp_view dlogits, usp_view logits,
                                const int32_t *targets, int64_t n, int64_t V, float grad_scale,
                                usp_stream_t *stream)
{
    widening w = {0};
    usp_view wl = W(logits), wd = W(dlogits);
    return narrow_back(&w, CALL(cross_entropy, ctx, losses, wd, wl, targets, n, V, grad_scale, stream), 1,
                       dlogits);
}

static usp_status adamw_step(void *ctx, usp_view params, usp_view grads, usp_view m, usp_view v, int64_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                             usp_stream_t *stream)
{
    widening w = {0};
    usp_view wp = W(params), wg = W(grads);
    usp_status st = CALL(adamw_step, ctx, wp, wg, m, v, n, lr, beta1, beta2, eps, weight_decay, t, stream);
    return narrow_back(&w, st, 1, params);
}

static usp_status sum_squares(void *ctx, double *out, usp_view x, int64_t n, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wx = W(x);
    return narrow_back(&w, CALL(sum_squares, ctx, out, wx, n, stream), 0);
}

static usp_status scale(void *ctx, usp_view x, float s, int64_t n, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wx = W(x);
    return narrow_back(&w, CALL(scale, ctx, wx, s, n, stream), 1, x);
}

static usp_status add_bias(void *ctx, usp_view x, usp_view bias, int64_t n, int64_t C, usp_stream_t *stream)
{
    widening w = {0};
    usp_view wx = W(x), wb = W(bias);
    return narrow_back(&w, CALL(add_bias, ctx, wx, wb, n, C, stream), 1, x);
}

static usp_status bias_backward(void *ctx, usp_view dbias, usp_view dout, int64_t n, int64_t C,
                                usp_stream_t *stream)
{
    widening w = {0};
    usp_view wb = W(dbias), wd = W(dout);
    return narrow_back(&w, CALL(bias_backward, ctx, wb, wd, n, C, stream), 1, dbias);
}

static usp_backend_i widened;
static pthread_once_t widened_once = PTHREAD_ONCE_INIT;

static void build_widened(void)
{
    widened = *F; /* then every slot that takes views, wrapped */
    widened.stores_bf16 = 1;
    widened.convert = convert;
#define WRAP(slot) widened.slot = F->slot ? slot : NULL
    WRAP(gemm); WRAP(accumulate_2d); WRAP(attention_forward); WRAP(attention_backward); WRAP(attention_merge);
    WRAP(embedding_forward); WRAP(embedding_backward); WRAP(layernorm_forward); WRAP(layernorm_backward);
    WRAP(rmsnorm_forward); WRAP(rmsnorm_backward); WRAP(gelu_tanh_forward); WRAP(gelu_tanh_backward);
    WRAP(swiglu_forward); WRAP(swiglu_backward); WRAP(rope_forward); WRAP(rope_backward); WRAP(cross_entropy);
    WRAP(adamw_step); WRAP(sum_squares); WRAP(scale); WRAP(add_bias); WRAP(bias_backward);
#undef WRAP
}

const usp_backend_i *cpu_widened_interface(const usp_backend_i *fp32)
{
    const usp_backend_i *expected = NULL;
    if (!atomic_compare_exchange_strong(&fp32_slots, &expected, fp32))
        USP_ASSERT(expected == fp32, "%s", "cpu_widened_interface wraps one fp32 table per process");
    pthread_once(&widened_once, build_widened);
    return &widened;
}
