/* bf16 operands for the fp32 cpu kernels: widen, run, round back (cpu_widen.h): one loop over an
 * op's operands, their roles from its kind's row (core/ops/op_kinds.c). */
#include "backends/cpu/cpu_widen.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/dtype.h"

#define MAX_OPERANDS USP_OP_OPERANDS_MAX
#define PARALLEL_CONVERT ((int64_t)1 << 16)

/* The fp32 temporaries of one kernel call, one per distinct bf16 operand. */
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

/* After the fp32 kernel returned `st`: rounds the operands it writes back into their bf16 buffers (a
 * temporary's narrow view is the caller's operand), then gives every temporary back. */
static usp_status narrow_back(widening *w, const usp_op *op, usp_status st)
{
    if (st == USP_OK)
        st = w->status;
    usp_operand_info info[USP_OP_OPERANDS_MAX];
    const int n = usp_op_operands(op, info);
    for (int k = 0; k < n; k++) {
        if (!(info[k].flags & USP_OPERAND_WRITTEN))
            continue;
        for (int i = 0; i < w->n && st == USP_OK; i++)
            if (w->narrow[i].data && w->narrow[i].data == op->operand[k].data)
                to_bf16(op->operand[k].data, w->wide[i], w->narrow[i].count);
    }
    for (int i = 0; i < w->n; i++)
        if (w->owned[i])
            free(w->wide[i]);
    if (w->n > 0)
        release();
    return st;
}

usp_status cpu_convert(const usp_op *op)
{
    const usp_view src = op->operand[0], dst = op->operand[1];
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

/* An embedding table's view covers one row (C elements: the typed call cannot know the vocabulary); the
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

usp_status cpu_run_widened(const usp_op *op, usp_status (*fp32)(const usp_op *op))
{
    widening w = {0};
    usp_op wide = *op;
    /* A bf16 operand times an fp32 one (the loss's fp32 dlogits by the bf16 lm_head) multiplies the fp32
     * one rounded to bf16, as the cuda backend does (cuBLAS takes one input dtype) and as autocast casts. */
    usp_view *a = &wide.operand[0], *b = &wide.operand[1];
    if (op->kind == USP_OP_GEMM && op->p.gemm.k > 0 && a->dtype != b->dtype && a->data && b->data) {
        if (a->dtype == USP_F32)
            *a = rounded(&w, *a);
        else
            *b = rounded(&w, *b);
    }
    usp_operand_info info[USP_OP_OPERANDS_MAX];
    const int n = usp_op_operands(op, info);
    for (int i = 0; i < n; i++) {
        usp_view v = wide.operand[i];
        if (info[i].rows_by >= 0)
            v = table_rows(v, op->operand[info[i].rows_by].data, op->p.rows.n, op->p.rows.C);
        wide.operand[i] = widen(&w, v);
    }
    return narrow_back(&w, op, w.status != USP_OK ? w.status : fp32(&wide));
}
