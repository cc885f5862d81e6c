/* The refusal cases of the op-conformance table (see tests/conformance.h):
 * an operand stored in a dtype its op does not take is refused by the
 * wrapper, before the cost is reported and the slot runs.
 *
 * The slots receive views whose dtype the wrapper read from the buffer table
 * (core/ops/backend_impl.h): lse, mean, rstd, losses, master weights and Adam
 * moments are f32 in every backend's kernels, int32 ids live in 4-byte
 * buffers, and activations, weights and gradients are f32 or bf16. Each case
 * makes every operand f32 but one, stored as `storage`: with USP_F32 the call
 * must succeed (the case is otherwise valid), with the case's `wrong` dtype it
 * must be refused. Every buffer is zeroed: valid ids, finite inputs. */
#include <check.h>

#include "tests/conformance.h"

/* n zeroed elements stored as `storage`. */
static void *buffer(usp_backend_t *be, int64_t n, usp_dtype storage)
{
    void *p;
    usp_status s = usp_buffer_alloc_as(be, (size_t)n, storage, "conformance", &p);
    ck_assert_msg(s == USP_OK, "allocating %lld %s elements on %s: %s", (long long)n, usp_dtype_name(storage),
                  usp_backend_name(be), usp_error_message());
    s = usp_buffer_zero(be, p, (size_t)n * usp_dtype_size(storage), NULL);
    ck_assert_msg(s == USP_OK, "zeroing on %s: %s", usp_backend_name(be), usp_error_message());
    return p;
}

#define F32(n) buffer(be, (n), USP_F32)
#define AS(n) buffer(be, (n), storage)

/* Causal attention, 1 batch row of 8 queries and keys, 2 heads of 16. */
static const usp_attention_shape shape = {.batch = 1, .n_q = 8, .n_kv = 8, .n_heads = 2, .n_kv_heads = 2,
                                          .head_dim = 16, .causal = 1, .scale = 0.25f};
enum { QKV = 8 * 2 * 16, LSE = 2 * 8 };

static usp_status attention_forward_lse(usp_backend_t *be, usp_dtype storage)
{
    return usp_flash_attention_forward(be, &shape, F32(QKV), F32(QKV), F32(QKV), F32(QKV), AS(LSE), NULL);
}

static usp_status attention_backward_lse(usp_backend_t *be, usp_dtype storage)
{
    return usp_flash_attention_backward(be, &shape, F32(QKV), F32(QKV), F32(QKV), F32(QKV), AS(LSE), F32(QKV),
                                        F32(QKV), F32(QKV), F32(QKV), 0, NULL);
}

static usp_status attention_merge_lse_part(usp_backend_t *be, usp_dtype storage)
{
    return usp_attention_merge(be, F32(QKV), F32(LSE), F32(QKV), AS(LSE), 8, 2, 16, NULL);
}

enum { N = 4, C = 8, V = 8 };

static usp_status layernorm_forward_mean(usp_backend_t *be, usp_dtype storage)
{
    return usp_layernorm_forward(be, F32(N * C), AS(N), F32(N), F32(N * C), F32(C), F32(C), N, C, 1e-5f, NULL);
}

static usp_status layernorm_backward_rstd(usp_backend_t *be, usp_dtype storage)
{
    return usp_layernorm_backward(be, F32(N * C), F32(C), F32(C), F32(N * C), F32(N * C), F32(C), F32(N), AS(N), N,
                                  C, NULL);
}

static usp_status rmsnorm_forward_rstd(usp_backend_t *be, usp_dtype storage)
{
    return usp_rmsnorm_forward(be, F32(N * C), AS(N), F32(N * C), F32(C), N, C, 1e-5f, NULL);
}

static usp_status rmsnorm_backward_rstd(usp_backend_t *be, usp_dtype storage)
{
    return usp_rmsnorm_backward(be, F32(N * C), F32(C), F32(N * C), F32(N * C), F32(C), AS(N), N, C, NULL);
}

static usp_status cross_entropy_losses(usp_backend_t *be, usp_dtype storage)
{
    return usp_cross_entropy(be, AS(N), F32(N * V), F32(N * V), F32(N), N, V, 1.0f, NULL);
}

static usp_status cross_entropy_targets(usp_backend_t *be, usp_dtype storage)
{
    return usp_cross_entropy(be, F32(N), F32(N * V), F32(N * V), AS(N), N, V, 1.0f, NULL);
}

static usp_status adamw_params(usp_backend_t *be, usp_dtype storage)
{
    return usp_adamw_step(be, AS(N), F32(N), F32(N), F32(N), N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, NULL);
}

static usp_status adamw_m(usp_backend_t *be, usp_dtype storage)
{
    return usp_adamw_step(be, F32(N), F32(N), AS(N), F32(N), N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, NULL);
}

static usp_status adamw_v(usp_backend_t *be, usp_dtype storage)
{
    return usp_adamw_step(be, F32(N), F32(N), F32(N), AS(N), N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, NULL);
}

static usp_status embedding_forward_tokens(usp_backend_t *be, usp_dtype storage)
{
    return usp_embedding_forward(be, F32(N * C), AS(N), F32(N), F32(V * C), F32(V * C), N, C, NULL);
}

static usp_status rope_forward_positions(usp_backend_t *be, usp_dtype storage)
{
    return usp_rope_forward(be, F32(N * 2 * 4), AS(N), N, 2, 4, 10000.0f, NULL, NULL);
}

/* An activation takes f32 or bf16: f64 is refused. */
static usp_status swiglu_forward_out(usp_backend_t *be, usp_dtype storage)
{
    return usp_swiglu_forward(be, AS(N), F32(N), F32(N), N, NULL);
}

static usp_status gemm_c(usp_backend_t *be, usp_dtype storage)
{
    usp_gemm_desc g = {.m = N, .n = N, .k = C, .alpha = 1.0f, .lda = C, .ldb = N, .ldc = N, .batch = 1};
    g.a = F32(N * C), g.b = F32(C * N), g.c = AS(N * N);
    return usp_gemm(be, &g, NULL);
}

const conformance_refusal conformance_refusals[] = {
    {"attention_forward", "lse", USP_BF16, attention_forward_lse},
    {"attention_backward", "lse", USP_BF16, attention_backward_lse},
    {"attention_merge", "lse_part", USP_BF16, attention_merge_lse_part},
    {"layernorm_forward", "mean", USP_BF16, layernorm_forward_mean},
    {"layernorm_backward", "rstd", USP_BF16, layernorm_backward_rstd},
    {"rmsnorm_forward", "rstd", USP_BF16, rmsnorm_forward_rstd},
    {"rmsnorm_backward", "rstd", USP_BF16, rmsnorm_backward_rstd},
    {"cross_entropy", "losses", USP_BF16, cross_entropy_losses},
    {"cross_entropy", "targets", USP_BF16, cross_entropy_targets},
    {"adamw_step", "params", USP_BF16, adamw_params},
    {"adamw_step", "m", USP_BF16, adamw_m},
    {"adamw_step", "v", USP_BF16, adamw_v},
    {"embedding_forward", "tokens", USP_BF16, embedding_forward_tokens},
    {"rope_forward", "positions", USP_BF16, rope_forward_positions},
    {"swiglu_forward", "out", USP_F64, swiglu_forward_out},
    {"gemm", "c", USP_F64, gemm_c},
};

const int conformance_refusal_count = (int)(sizeof conformance_refusals / sizeof *conformance_refusals);
