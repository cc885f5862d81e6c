/* The bf16 cases of the op-conformance table (see tests/conformance.h): the
 * conversion, GEMM in every layout and dtype mix a bf16 step uses, the
 * strided copies and sums around Ulysses' all-to-all, attention and the ring's
 * merge, AdamW. The layer ops are in tests/conformance_bf16_layers.c.
 *
 * On a backend that stores bf16 (cpu and lazy through backends/cpu/cpu_widen.c,
 * cuda) the operands a step stores narrow live in bf16 buffers; on the
 * reference (cpu) the same values, already rounded to bf16 on the host, live
 * in fp32 buffers, and the operands a step keeps in fp32 (the residual stream,
 * weight gradients, lse, norm statistics, logits) are fp32 on both. Both
 * compute in fp32, so what differs is the rounding of the outputs stored in
 * bf16 (half an ulp of each element: at most BF16_ULP / 2 of the largest) and
 * of intermediates a kernel stores narrow. Tolerances are in BF16_ULP (2^-7,
 * tests/conformance.h); an output kept in fp32 is held to the fp32 table's
 * bound (the case's tol_f32), since no bf16 rounding reaches it. */
#include <math.h>
#include <string.h>

#include "tests/conformance.h"

static float rounded(float x) { return usp_bf16_to_f32(usp_f32_to_bf16(x)); }

float *conformance_upload_stored(conformance_run *r, float *x, int64_t n)
{
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

float *conformance_input_stored(conformance_run *r, int64_t n, float scale)
{
    return conformance_upload_stored(r, conformance_host(r, n, scale), n);
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
    const float *host = conformance_download(r, name, f32, n);
    r->out[r->n_out - 1].stored = 1;
    return host;
}

float *conformance_operand(conformance_run *r, int stored, int64_t n, float scale)
{
    return stored ? conformance_input_stored(r, n, scale) : conformance_input(r, n, scale);
}

float *conformance_result(conformance_run *r, int stored, int64_t n)
{
    return stored ? conformance_output_stored(r, n) : conformance_output_buffer(r, n);
}

/* ---- convert -------------------------------------------------------------------------------- */

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

/* ---- gemm ------------------------------------------------------------------------------------ */

/* Linear layers y = x W^T, W [o, i] (core/model/model_blocks.c): forward nt (m rows, n = o, k = i);
 * dX nn (n = i, k = o) over, or added to, the input's gradient; dW tn (m = o, n = i, k = rows) added
 * to the fp32 weight gradient. */
typedef struct gemm_bf16_params {
    int trans_a, trans_b;
    int64_t m, n, k, batch;
    float beta;          /* 0: C starts NaN, which a GEMM with beta 0 must not read */
    int a, b, c;         /* 1: stored (bf16 where the backend stores it), 0: fp32 */
    int64_t b_at;        /* B starts b_at elements into its buffer (k's and v's rows of Wqkv: model_at) */
} gemm_bf16_params;

static void run_gemm_bf16(conformance_run *r, const void *params)
{
    const gemm_bf16_params *p = params;
    const int64_t rows_a = p->trans_a ? p->k : p->m, lda = p->trans_a ? p->m : p->k;
    const int64_t rows_b = p->trans_b ? p->n : p->k, ldb = p->trans_b ? p->k : p->n;
    const int64_t size_c = p->batch * p->m * p->n;
    usp_gemm_desc g = {.trans_a = p->trans_a, .trans_b = p->trans_b, .m = p->m, .n = p->n, .k = p->k, .alpha = 1.0f,
                       .beta = p->beta, .lda = lda, .stride_a = rows_a * lda, .ldb = ldb, .stride_b = rows_b * ldb,
                       .ldc = p->n, .stride_c = p->m * p->n, .batch = p->batch};
    /* fp32 by bf16: the backend multiplies the fp32 operand rounded to bf16 (cuBLAS takes one input
     * dtype; cpu_widen.c rounds alike), so the fp32 reference gets that operand rounded on the host
     * while the backend under test gets it unrounded: it passes only if it rounds */
    const int round_a = !p->a && p->b && r->storage == USP_F32, round_b = !p->b && p->a && r->storage == USP_F32;
    g.a = conformance_operand(r, p->a || round_a, p->batch * rows_a * lda, 1);
    const float *b = conformance_operand(r, p->b || round_b, p->b_at + p->batch * rows_b * ldb, 1);
    g.b = usp_buffer_at(r->be, b, (size_t)p->b_at);
    g.c = p->beta != 0.0f ? conformance_operand(r, p->c, size_c, 1) : conformance_result(r, p->c, size_c);
    CONFORMANCE_OK(r, usp_gemm(r->be, &g, NULL));
    conformance_download_stored(r, "c", g.c, size_c);
}

/* {trans_a, trans_b, m, n, k, batch, beta, a, b, c stored, b_at} */
static const gemm_bf16_params gemm_nt_acc = {0, 1, 33, 40, 72, 2, 1.0f, 1, 1, 1, 0};
static const gemm_bf16_params gemm_fwd_f32 = {0, 1, 33, 40, 72, 1, 0.0f, 1, 1, 0, 0};
static const gemm_bf16_params gemm_fwd_bf16 = {0, 1, 33, 40, 72, 1, 0.0f, 1, 1, 1, 40 * 72};
static const gemm_bf16_params gemm_dx = {0, 0, 33, 72, 40, 1, 0.0f, 1, 1, 1, 0};
static const gemm_bf16_params gemm_dx_acc = {0, 0, 33, 72, 40, 1, 1.0f, 1, 1, 1, 40 * 72};
static const gemm_bf16_params gemm_dw = {1, 0, 40, 72, 33, 1, 1.0f, 1, 1, 0, 0};
/* B and C past 65536 elements: a backend that converts in parallel above some size does here; the
 * cpu backend also splits this GEMM into tiles run by a team of threads */
static const gemm_bf16_params gemm_large = {0, 1, 192, 384, 192, 1, 1.0f, 1, 1, 1, 0};
/* The lm_head's backward inside the loss (core/model/model_head.c): dlogits are fp32 (the logits
 * are), the lm_head and lnf bf16: the backend rounds dlogits to bf16 for the product (what
 * autocast's matmul backward receives; cuda through a bf16 temporary, cuda_gemm.c). */
static const gemm_bf16_params gemm_head_dx = {0, 0, 9, 48, 100, 1, 0.0f, 0, 1, 1, 0};
static const gemm_bf16_params gemm_head_dw = {1, 0, 100, 48, 9, 1, 1.0f, 0, 1, 0, 0};

/* ---- copy_2d and accumulate_2d around Ulysses' all-to-all (core/parallel/ulysses.c) ------------- */

/* x [rows, 6 heads, D] stored: heads 2..4 packed into a contiguous send buffer, as scatter_heads
 * packs a peer's slice, then unpacked into heads 1..3 of y, as gather_heads returns them. Byte
 * strides count elements of the storage dtype: the copies move bf16 bits, so bitwise equal. */
static void run_copy_2d_bf16(conformance_run *r, const void *params)
{
    (void)params;
    const size_t rows = 12, H = 6, h = 3, D = 8, esz = usp_dtype_size(r->storage);
    float *x = conformance_input_stored(r, (int64_t)(rows * H * D), 1);
    float *y = conformance_input_stored(r, (int64_t)(rows * H * D), 1);
    float *send = conformance_output_stored(r, (int64_t)(rows * h * D));
    CONFORMANCE_OK(r, usp_copy_2d(r->be, send, h * D * esz, usp_buffer_at(r->be, x, 2 * D), H * D * esz, h * D * esz,
                                  rows, NULL));
    CONFORMANCE_OK(r, usp_copy_2d(r->be, usp_buffer_at(r->be, y, D), H * D * esz, send, h * D * esz, h * D * esz,
                                  rows, NULL));
    conformance_download_stored(r, "send", send, (int64_t)(rows * h * D));
    conformance_download_stored(r, "y", y, (int64_t)(rows * H * D));
}

typedef struct accumulate_bf16_params {
    int dst, src;   /* 1: stored, 0: fp32 */
    int64_t dst_at; /* dst starts this many elements into its buffer (a head's columns: gather_heads) */
} accumulate_bf16_params;

/* dst += src over 5 rows of 9, strides 12 and 10. */
static void run_accumulate_bf16(conformance_run *r, const void *params)
{
    const accumulate_bf16_params *p = params;
    const int64_t rows = 5, row = 9, dst_stride = 12, src_stride = 10, n_dst = p->dst_at + rows * dst_stride;
    float *dst = conformance_operand(r, p->dst, n_dst, 1), *src = conformance_operand(r, p->src, rows * src_stride, 1);
    CONFORMANCE_OK(r, usp_accumulate_2d(r->be, usp_buffer_at(r->be, dst, (size_t)p->dst_at), (size_t)dst_stride, src,
                                        (size_t)src_stride, (size_t)row, (size_t)rows, NULL));
    conformance_download_stored(r, "dst", dst, n_dst);
}

/* A layer's attention output from bf16 into the fp32 residual; shared KV heads' gradients summed. */
static const accumulate_bf16_params accumulate_into_f32 = {0, 1, 0}, accumulate_bf16_into_bf16 = {1, 1, 3};

/* ---- attention ------------------------------------------------------------------------------- */

typedef struct attention_bf16_params {
    usp_attention_shape s;
    int64_t q_at, kv_at; /* the block starts this many tokens into its buffers (batch 1: a ring run) */
    int accumulate;      /* backward: add into stored dq, dk, dv (the ring's blocks) */
} attention_bf16_params;

/* q, k, v, o and their gradients stored, lse fp32: forward, then backward from the forward's o. */
static void run_attention_bf16(conformance_run *r, const void *params)
{
    const attention_bf16_params *p = params;
    const usp_attention_shape *s = &p->s;
    const int64_t qrow = s->n_heads * s->head_dim, kvrow = s->n_kv_heads * s->head_dim;
    const int64_t nq = s->batch * s->n_q * qrow, nkv = s->batch * s->n_kv * kvrow;
    const int64_t nlse = s->batch * s->n_heads * s->n_q;
    const size_t qa = (size_t)(p->q_at * qrow), ka = (size_t)(p->kv_at * kvrow);
#define AT(buf, at) usp_buffer_at(r->be, (buf), (at))
    float *q = AT(conformance_input_stored(r, (int64_t)qa + nq, 2), qa);
    float *k = AT(conformance_input_stored(r, (int64_t)ka + nkv, 2), ka);
    float *v = AT(conformance_input_stored(r, (int64_t)ka + nkv, 2), ka);
    float *o = AT(conformance_output_stored(r, (int64_t)qa + nq), qa), *lse = conformance_output_buffer(r, nlse);
    CONFORMANCE_OK(r, usp_flash_attention_forward(r->be, s, q, k, v, o, lse, NULL));
    conformance_download_stored(r, "o", o, nq);
    conformance_download(r, "lse", lse, nlse);
    float *d_o = AT(conformance_input_stored(r, (int64_t)qa + nq, 1), qa);
    float *dq = AT(p->accumulate ? conformance_input_stored(r, (int64_t)qa + nq, 1)
                                 : conformance_output_stored(r, (int64_t)qa + nq), qa);
    float *dk = AT(p->accumulate ? conformance_input_stored(r, (int64_t)ka + nkv, 1)
                                 : conformance_output_stored(r, (int64_t)ka + nkv), ka);
    float *dv = AT(p->accumulate ? conformance_input_stored(r, (int64_t)ka + nkv, 1)
                                 : conformance_output_stored(r, (int64_t)ka + nkv), ka);
#undef AT
    CONFORMANCE_OK(r, usp_flash_attention_backward(r->be, s, q, k, v, o, lse, d_o, dq, dk, dv, p->accumulate, NULL));
    conformance_download_stored(r, "dq", dq, nq);
    conformance_download_stored(r, "dk", dk, nkv);
    conformance_download_stored(r, "dv", dv, nkv);
}

/* {batch, n_q, n_kv, n_heads, n_kv_heads, head_dim, q_offset, kv_offset, causal, scale, window, seq_len, docs,
 * docs_host} */
static const attention_bf16_params attn_causal_gqa = {{1, 70, 70, 4, 2, 64, 0, 0, 1, 0.125f, 0, 0, NULL, NULL}, 0, 0, 0};
/* no mask, two batch rows, fewer queries than keys */
static const attention_bf16_params attn_full = {{2, 24, 40, 4, 2, 64, 0, 0, 0, 0.125f, 0, 0, NULL, NULL}, 0, 0, 0};
/* a ring block: queries 40..71 against keys 32..63 (a diagonal block, partly masked), MQA, each the
 * second run of 32 tokens in its buffers, gradients added to those of earlier blocks */
static const attention_bf16_params attn_ring = {{1, 32, 32, 4, 1, 64, 40, 32, 1, 0.125f, 0, 0, NULL, NULL}, 32, 32, 1};
/* head_dim 128 (the tensor-core kernel's other width on cuda), 100 tokens: two query and key tiles, the
 * second short, the diagonal crossing both */
static const attention_bf16_params attn_d128 = {{1, 100, 100, 4, 2, 128, 0, 0, 1, 0.08838835f, 0, 0, NULL, NULL}, 0, 0, 0};

/* The ring's merge (core/parallel/ring.c): o and o_part stored, lse and lse_part fp32, with rows
 * that have seen no key (lse -inf, o 0) in the accumulated part, the new part, and both. */
static void run_attention_merge_bf16(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 16, H = 4, D = 64;
    float *o = conformance_host(r, n * H * D, 1), *o_part = conformance_host(r, n * H * D, 1);
    float *lse = conformance_host(r, H * n, 3), *lse_part = conformance_host(r, H * n, 3);
    const conformance_unseen unseen[] = {{0, 1, 1, 0}, {1, 2, 0, 1}, {3, 7, 1, 1}};
    conformance_mark_unseen(o, o_part, lse, lse_part, n, H, D, unseen, (int)(sizeof unseen / sizeof *unseen));
    float *d_o = conformance_upload_stored(r, o, n * H * D);
    float *d_part = conformance_upload_stored(r, o_part, n * H * D);
    float *d_lse = conformance_upload(r, lse, H * n), *d_lse_part = conformance_upload(r, lse_part, H * n);
    CONFORMANCE_OK(r, usp_attention_merge(r->be, d_o, d_lse, d_part, d_lse_part, n, H, D, NULL));
    conformance_download_stored(r, "o", d_o, n * H * D);
    conformance_download(r, "lse", d_lse, H * n);
}

/* ---- optimizer --------------------------------------------------------------------------------- */

/* AdamW on fp32 master weights and moments from bf16 gradients. (A bf16 step's gradients are
 * fp32, so its AdamW is the fp32 table's "adamw step 3, weight decay"; this is the stored-grads path.) */
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

/* ---- the table ---------------------------------------------------------------------------------------- */

#define ATTENTION_BWD (SLOT(attention_forward) | SLOT(attention_backward))

/* Tolerances (BF16_ULP = 2^-7; the error is relative to max |ref|):
 * - a stored output rounded once from the same fp32 value: <= 1/2 ulp on cpu and lazy; 1 ulp
 *   leaves another backend's fp32 order (a GPU's) room to land on the other side of a rounding;
 * - attention's gradients: 2.5 ulps, since the backward reads the forward's o rounded to bf16
 *   (D = rowsum(dO o) moves by up to 2^-8 of it) and each gradient is a sum over the sequence of
 *   products of it;
 * - outputs kept in fp32 (tol_f32): the fp32 table's bound for the same op, as nothing they hold
 *   is rounded to bf16: 1e-5 for GEMM sums and attention's lse, 1e-6 for the merge's lse and for
 *   AdamW, 1e-7 for one fp32 add (bitwise on every backend so far);
 * - copies: bitwise (they move bf16 bits). */
const conformance_case conformance_bf16_cases[] = {
    {"bf16: convert, ties to even, NaN, overflow", run_convert, NULL, SLOT(convert), 0, 1, 0},
    {"bf16: gemm nt, batch 2, C += A B^T", run_gemm_bf16, &gemm_nt_acc, SLOT(gemm), BF16_ULP, 1, 0},
    {"bf16: gemm nt 192 x 384 x 192, C += A B^T", run_gemm_bf16, &gemm_large, SLOT(gemm), BF16_ULP, 1, 0},
    {"bf16: gemm nt forward into an fp32 C (residual, logits)", run_gemm_bf16, &gemm_fwd_f32, SLOT(gemm), BF16_ULP, 1,
     1e-5},
    {"bf16: gemm nt forward into a bf16 C, B at an offset", run_gemm_bf16, &gemm_fwd_bf16, SLOT(gemm), BF16_ULP, 1,
     1e-5},
    {"bf16: gemm nn dX, beta 0", run_gemm_bf16, &gemm_dx, SLOT(gemm), BF16_ULP, 1, 1e-5},
    {"bf16: gemm nn dX added to a bf16 C, B at an offset", run_gemm_bf16, &gemm_dx_acc, SLOT(gemm), BF16_ULP, 1,
     1e-5},
    {"bf16: gemm tn dW added to an fp32 C", run_gemm_bf16, &gemm_dw, SLOT(gemm), BF16_ULP, 1, 1e-5},
    {"bf16: gemm nn lm_head dX, fp32 A by bf16 B", run_gemm_bf16, &gemm_head_dx, SLOT(gemm), BF16_ULP, 1, 1e-5},
    {"bf16: gemm tn lm_head dW, fp32 A by bf16 B into fp32", run_gemm_bf16, &gemm_head_dw, SLOT(gemm), BF16_ULP, 1,
     1e-5},
    {"bf16: copy_2d, Ulysses pack and unpack of heads", run_copy_2d_bf16, NULL, SLOT(copy_2d), 0, 1, 0},
    {"bf16: accumulate_2d, bf16 into fp32", run_accumulate_bf16, &accumulate_into_f32, SLOT(accumulate_2d), BF16_ULP,
     1, 1e-7},
    {"bf16: accumulate_2d, bf16 into bf16 at an offset", run_accumulate_bf16, &accumulate_bf16_into_bf16,
     SLOT(accumulate_2d), BF16_ULP, 1, 1e-7},
    {"bf16: attention causal GQA, forward and backward", run_attention_bf16, &attn_causal_gqa, ATTENTION_BWD,
     2.5 * BF16_ULP, 1, 1e-5},
    {"bf16: attention full, batch 2, n_q < n_kv", run_attention_bf16, &attn_full, ATTENTION_BWD, 2.5 * BF16_ULP, 1,
     1e-5},
    {"bf16: attention ring block, offsets, MQA, accumulate", run_attention_bf16, &attn_ring, ATTENTION_BWD,
     2.5 * BF16_ULP, 1, 1e-5},
    {"bf16: attention causal GQA, head_dim 128, short last tiles", run_attention_bf16, &attn_d128, ATTENTION_BWD,
     2.5 * BF16_ULP, 1, 1e-5},
    {"bf16: attention merge with -inf rows", run_attention_merge_bf16, NULL, SLOT(attention_merge), BF16_ULP, 1,
     1e-6},
    {"bf16: adamw from bf16 gradients", run_adamw_bf16, NULL, SLOT(adamw_step), 1e-6, 1, 0},
};

const int conformance_bf16_case_count = (int)(sizeof conformance_bf16_cases / sizeof *conformance_bf16_cases);
