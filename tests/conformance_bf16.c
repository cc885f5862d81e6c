/* The bf16 cases of the op-conformance table (see tests/conformance.h).
 *
 * On a backend that stores bf16 (cuda) the operands live in bf16 buffers; on
 * the reference (cpu) the same values, already rounded to bf16 on the host,
 * live in fp32 buffers. Both compute in fp32, so what differs is the rounding
 * of the outputs to bf16 (half an ulp, 2^-9 relative) and of intermediates a
 * kernel stores narrow: the tolerances below are a few ulps of bf16 (2^-8 =
 * 0.0039) relative to the largest output. */
#include <math.h>
#include <string.h>

#include "tests/conformance.h"

static float rounded(float x) { return usp_bf16_to_f32(usp_f32_to_bf16(x)); }

float *conformance_input_stored(conformance_run *r, int64_t n, float scale)
{
    float *x = conformance_host(r, n, scale);
    for (int64_t i = 0; i < n; i++)
        x[i] = rounded(x[i]);
    float *f32 = conformance_upload(r, x, n);
    if (r->storage == USP_F32)
        return f32;
    float *stored;
    CONFORMANCE_OK(r, usp_buffer_alloc_as(r->be, (size_t)n, r->storage, "conformance", (void **)&stored));
    CONFORMANCE_OK(r, usp_buffer_convert(r->be, stored, f32, (size_t)n, NULL));
    return stored;
}

float *conformance_output_stored(conformance_run *r, int64_t n)
{
    if (r->storage == USP_F32)
        return conformance_output_buffer(r, n);
    float *stored, *nan = conformance_output_buffer(r, n);
    CONFORMANCE_OK(r, usp_buffer_alloc_as(r->be, (size_t)n, r->storage, "conformance", (void **)&stored));
    CONFORMANCE_OK(r, usp_buffer_convert(r->be, stored, nan, (size_t)n, NULL));
    return stored;
}

const float *conformance_download_stored(conformance_run *r, const char *name, const float *dev, int64_t n)
{
    if (usp_buffer_dtype(r->be, dev) == USP_F32)
        return conformance_download(r, name, dev, n);
    float *f32 = conformance_output_buffer(r, n);
    CONFORMANCE_OK(r, usp_buffer_convert(r->be, f32, dev, (size_t)n, NULL));
    return conformance_download(r, name, f32, n);
}

/* fp32 -> bf16 -> fp32 through the backend: round to nearest, ties to even,
 * NaN kept, overflow to infinity. The reference rounds on the host
 * (usp_f32_to_bf16) and copies; the two must agree bit for bit. */
static void run_convert(conformance_run *r, const void *params)
{
    (void)params;
    enum { N = 24 };
    float *x = conformance_host(r, N, 3);
    const float special[] = {1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-7f, -1.0f - 0x1p-8f, INFINITY, -INFINITY, NAN,
                             0x1p-130f, 3.3895e38f, -0.0f};
    memcpy(x, special, sizeof special);
    if (r->storage == USP_F32)
        for (int i = 0; i < N; i++)
            x[i] = rounded(x[i]);
    float *f32 = conformance_upload(r, x, N), *back = conformance_output_buffer(r, N), *narrow;
    CONFORMANCE_OK(r, usp_buffer_alloc_as(r->be, N, r->storage, "conformance", (void **)&narrow));
    CONFORMANCE_OK(r, usp_buffer_convert(r->be, narrow, f32, N, NULL));
    CONFORMANCE_OK(r, usp_buffer_convert(r->be, back, narrow, N, NULL));
    conformance_download(r, "round trip", back, N);
}

/* bf16 A and B, bf16 C with beta 1: mixed precision's forward GEMM. */
static void run_gemm_bf16(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t m = 33, n = 40, k = 72, batch = 2;
    usp_gemm_desc g = {.trans_b = 1, .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = 1.0f, .lda = k,
                       .stride_a = m * k, .ldb = k, .stride_b = n * k, .ldc = n, .stride_c = m * n, .batch = batch};
    g.a = conformance_input_stored(r, batch * m * k, 1);
    g.b = conformance_input_stored(r, batch * n * k, 1);
    g.c = conformance_input_stored(r, batch * m * n, 1);
    CONFORMANCE_OK(r, usp_gemm(r->be, &g, NULL));
    conformance_download_stored(r, "c", g.c, batch * m * n);
}

/* Causal GQA attention with bf16 q, k, v, o and gradients; lse fp32. */
static void run_attention_bf16(conformance_run *r, const void *params)
{
    (void)params;
    usp_attention_shape s = {.batch = 1, .n_q = 70, .n_kv = 70, .n_heads = 4, .n_kv_heads = 2, .head_dim = 64,
                             .causal = 1, .scale = 0.125f};
    const int64_t nq = s.n_q * s.n_heads * s.head_dim, nkv = s.n_kv * s.n_kv_heads * s.head_dim, nlse = s.n_heads * s.n_q;
    float *q = conformance_input_stored(r, nq, 2), *k = conformance_input_stored(r, nkv, 2);
    float *v = conformance_input_stored(r, nkv, 2), *o = conformance_output_stored(r, nq);
    float *lse = conformance_output_buffer(r, nlse);
    CONFORMANCE_OK(r, usp_flash_attention_forward(r->be, &s, q, k, v, o, lse, NULL));
    conformance_download_stored(r, "o", o, nq);
    conformance_download(r, "lse", lse, nlse);
    float *d_o = conformance_input_stored(r, nq, 1), *dq = conformance_output_stored(r, nq);
    float *dk = conformance_output_stored(r, nkv), *dv = conformance_output_stored(r, nkv);
    CONFORMANCE_OK(r, usp_flash_attention_backward(r->be, &s, q, k, v, o, lse, d_o, dq, dk, dv, 0, NULL));
    conformance_download_stored(r, "dq", dq, nq);
    conformance_download_stored(r, "dk", dk, nkv);
    conformance_download_stored(r, "dv", dv, nkv);
}

/* RMSNorm forward and backward on bf16 activations and weight, rstd fp32. */
static void run_rmsnorm_bf16(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 9, C = 96;
    float *inp = conformance_input_stored(r, n * C, 2), *weight = conformance_input_stored(r, C, 1);
    float *out = conformance_output_stored(r, n * C), *rstd = conformance_output_buffer(r, n);
    CONFORMANCE_OK(r, usp_rmsnorm_forward(r->be, out, rstd, inp, weight, n, C, 1e-5f, NULL));
    conformance_download_stored(r, "out", out, n * C);
    float *dout = conformance_input_stored(r, n * C, 1), *dinp = conformance_input_stored(r, n * C, 1);
    float *dweight = conformance_input_stored(r, C, 1);
    CONFORMANCE_OK(r, usp_rmsnorm_backward(r->be, dinp, dweight, dout, inp, weight, rstd, n, C, NULL));
    conformance_download_stored(r, "dinp", dinp, n * C);
    conformance_download_stored(r, "dweight", dweight, C);
}

/* SwiGLU and the loss's inputs as mixed precision stores them. */
static void run_swiglu_bf16(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 300;
    float *gate = conformance_input_stored(r, n, 3), *up = conformance_input_stored(r, n, 3);
    float *out = conformance_output_stored(r, n);
    CONFORMANCE_OK(r, usp_swiglu_forward(r->be, out, gate, up, n, NULL));
    conformance_download_stored(r, "out", out, n);
}

/* AdamW on fp32 master weights and moments from bf16 gradients. */
static void run_adamw_bf16(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 257;
    float *p = conformance_input(r, n, 1), *g = conformance_input_stored(r, n, 1);
    float *m = conformance_input(r, n, 0.1f), *v_host = conformance_host(r, n, 0.1f);
    for (int64_t i = 0; i < n; i++) /* a second moment is never negative */
        v_host[i] = fabsf(v_host[i]);
    float *v = conformance_upload(r, v_host, n);
    CONFORMANCE_OK(r, usp_adamw_step(r->be, p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, NULL));
    conformance_download(r, "params", p, n);
    conformance_download(r, "m", m, n);
    conformance_download(r, "v", v, n);
}

const conformance_case conformance_bf16_cases[] = {
    {"bf16: convert, ties to even, NaN, overflow", run_convert, NULL, SLOT(convert), 0, 1},
    {"bf16: gemm nt, batch 2, C += A B^T", run_gemm_bf16, NULL, SLOT(gemm), 8e-3, 1},
    {"bf16: attention causal GQA, forward and backward", run_attention_bf16, NULL,
     SLOT(attention_forward) | SLOT(attention_backward), 2e-2, 1},
    {"bf16: rmsnorm forward and backward", run_rmsnorm_bf16, NULL, SLOT(rmsnorm_forward) | SLOT(rmsnorm_backward),
     1e-2, 1},
    {"bf16: swiglu forward", run_swiglu_bf16, NULL, SLOT(swiglu_forward), 8e-3, 1},
    {"bf16: adamw from bf16 gradients", run_adamw_bf16, NULL, SLOT(adamw_step), 1e-6, 1},
};

const int conformance_bf16_case_count = (int)(sizeof conformance_bf16_cases / sizeof *conformance_bf16_cases);
