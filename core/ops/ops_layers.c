/* Wrappers of the transformer layer ops (core/ops/ops.h): embedding, norms,
 * activations, rotary embeddings, cross-entropy, AdamW and the small
 * reductions of a training step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops_internal.h"

/* ---- Transformer layer ops. Checks first (shapes, then every buffer lies inside
 * one live allocation, which turns an off-by-a-row in model code into a message
 * instead of heap corruption), then the cost, then the slot. Costs count a
 * transcendental (exp, tanh, sqrt, cos) as one flop and bytes as one pass over
 * each operand, what a fused GPU kernel moves; n = 0 costs nothing. */

_Static_assert(sizeof(float) == 4 && sizeof(int32_t) == 4, "fp32 and int32 buffers share the 4-byte USP_F32 dtype");

/* A layer slot may be NULL only on a backend without numerics: there the op is its cost. */
static usp_status missing_slot(const usp_backend_t *be, const char *op)
{
    if (!be->iface->has_numerics)
        return USP_OK;
    return usp_error(USP_ERR_RUNTIME, "the %s backend has no %s op: its usp_backend_i leaves that slot NULL",
                     be->iface->name, op);
}

/* Every caller has its `stream`: the op's span is timed on it (OPS_TIMED). */
#define LAYER_CALL(slot, ...) \
    OPS_TIMED(be, stream, (be->iface->slot ? be->iface->slot(be->context, __VA_ARGS__) : missing_slot(be, #slot)))

/* n rows of `dim` = C elements: n >= 0, C >= 1. */
static usp_status check_rows(const char *op, const char *dim, int64_t n, int64_t C)
{
    if (n < 0 || C < 1)
        return usp_error(USP_ERR_CONFIG, "%s: n = %lld rows of %s = %lld: n must be >= 0 and %s >= 1", op,
                         (long long)n, dim, (long long)C, dim);
    return USP_OK;
}

/* ptr_v, the view the slot gets of `count` elements at ptr: NEED an operand stored in f32 or bf16
 * (activations, weights, gradients), MAYBE one that may be NULL; NEED_F32 and MAYBE_F32 one the
 * kernels read as f32 only (mean, rstd, losses, master weights, moments). */
#define OPERAND(ptr, count, dtypes, optional) \
    usp_view ptr##_v;                         \
    USP_CHECK(ops_view(be, op, #ptr, ptr, count, dtypes, optional, &ptr##_v))
#define NEED(ptr, count) OPERAND(ptr, count, OPS_STORED, 0)
#define MAYBE(ptr, count) OPERAND(ptr, count, OPS_STORED, 1)
#define NEED_F32(ptr, count) OPERAND(ptr, count, OPS_F32, 0)
#define MAYBE_F32(ptr, count) OPERAND(ptr, count, OPS_F32, 1)

/* int32 ids (tokens, positions, targets) in 4-byte buffers, inside them; the slot takes the pointer. */
static usp_status check_ids(const usp_backend_t *be, const char *op, const char *name, const int32_t *ids,
                            int64_t n)
{
    usp_view unused;
    return ops_view(be, op, name, ids, n, OPS_F32, 0, &unused);
}
#define IDS(ptr, count) USP_CHECK(check_ids(be, op, #ptr, ptr, count))

/* n elements: n >= 0. */
static usp_status check_count(const char *op, int64_t n)
{
    if (n < 0)
        return usp_error(USP_ERR_CONFIG, "%s: n = %lld elements; it must be >= 0", op, (long long)n);
    return USP_OK;
}

static usp_status check_eps(const char *op, float eps)
{
    if (!(eps >= 0.0f) || isinf(eps))
        return usp_error(USP_ERR_CONFIG, "%s: eps = %g; it must be a finite value >= 0 (1e-5 is usual)", op,
                         (double)eps);
    return USP_OK;
}

usp_status usp_embedding_forward(usp_backend_t *be, float *out, const int32_t *tokens, const int32_t *positions,
                                 const float *wte, const float *wpe, int64_t n, int64_t C, usp_stream_t *stream)
{
    const char *op = "embedding_forward";
    USP_CHECK(check_rows(op, "C", n, C));
    if (n == 0)
        return USP_OK;
    NEED(out, n * C); IDS(tokens, n); NEED(wte, C); MAYBE(wpe, C);
    if (wpe)
        IDS(positions, n);
    /* per table: read n ids and n rows; one add per element when there are two tables; write out */
    double tables = wpe ? 2.0 : 1.0, nc = (double)n * (double)C;
    ops_report_cost(be, op, (tables - 1.0) * nc, 4.0 * (tables * (nc + (double)n) + nc), stream);
    return LAYER_CALL(embedding_forward, out_v, tokens, positions, wte_v, wpe_v, n, C, stream);
}

usp_status usp_embedding_backward(usp_backend_t *be, float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, const int32_t *positions, int64_t n, int64_t C,
                                  usp_stream_t *stream)
{
    const char *op = "embedding_backward";
    USP_CHECK(check_rows(op, "C", n, C));
    if (n == 0)
        return USP_OK;
    NEED(dwte, C); MAYBE(dwpe, C); NEED(dout, n * C); IDS(tokens, n);
    if (dwpe)
        IDS(positions, n);
    /* read dout once; per table: n ids, read-add-write n rows */
    double tables = dwpe ? 2.0 : 1.0, nc = (double)n * (double)C;
    ops_report_cost(be, op, tables * nc, 4.0 * (nc + tables * ((double)n + 2.0 * nc)), stream);
    return LAYER_CALL(embedding_backward, dwte_v, dwpe_v, dout_v, tokens, positions, n, C, stream);
}

usp_status usp_layernorm_forward(usp_backend_t *be, float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int64_t n, int64_t C, float eps,
                                 usp_stream_t *stream)
{
    const char *op = "layernorm_forward";
    USP_CHECK(check_rows(op, "C", n, C));
    USP_CHECK(check_eps(op, eps));
    if (n == 0)
        return USP_OK;
    NEED(out, n * C); MAYBE_F32(mean, n); MAYBE_F32(rstd, n); NEED(inp, n * C); NEED(weight, C); MAYBE(bias, C);
    /* per element: mean 1, variance 3 (sub, mul, add), output 4 (sub, mul, mul, add) */
    double nc = (double)n * (double)C;
    ops_report_cost(be, op, 8.0 * nc, 4.0 * (2.0 * nc + 2.0 * (double)C + 2.0 * (double)n), stream);
    return LAYER_CALL(layernorm_forward, out_v, mean_v, rstd_v, inp_v, weight_v, bias_v, n, C, eps, stream);
}

usp_status usp_layernorm_backward(usp_backend_t *be, float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean, const float *rstd,
                                  int64_t n, int64_t C, usp_stream_t *stream)
{
    const char *op = "layernorm_backward";
    USP_CHECK(check_rows(op, "C", n, C));
    if (n == 0)
        return USP_OK;
    NEED(dinp, n * C); NEED(dweight, C); MAYBE(dbias, C); NEED(dout, n * C); NEED(inp, n * C); NEED(weight, C);
    NEED_F32(mean, n); NEED_F32(rstd, n);
    /* per element: xh 2, g 1, two row sums 3, dx 5 (sub, mul, sub, mul, add), dw 2, db 1;
     * read dout, inp, dinp, write dinp; weight, dweight and dbias (read and write); mean, rstd */
    double nc = (double)n * (double)C;
    ops_report_cost(be, op, 14.0 * nc, 4.0 * (4.0 * nc + 5.0 * (double)C + 2.0 * (double)n), stream);
    return LAYER_CALL(layernorm_backward, dinp_v, dweight_v, dbias_v, dout_v, inp_v, weight_v, mean_v, rstd_v, n, C,
                      stream);
}

usp_status usp_rmsnorm_forward(usp_backend_t *be, float *out, float *rstd, const float *inp, const float *weight,
                               int64_t n, int64_t C, float eps, usp_stream_t *stream)
{
    const char *op = "rmsnorm_forward";
    USP_CHECK(check_rows(op, "C", n, C));
    USP_CHECK(check_eps(op, eps));
    if (n == 0)
        return USP_OK;
    NEED(out, n * C); MAYBE_F32(rstd, n); NEED(inp, n * C); NEED(weight, C);
    /* per element: square and add 2, output 2 multiplies */
    double nc = (double)n * (double)C;
    ops_report_cost(be, op, 4.0 * nc, 4.0 * (2.0 * nc + (double)C + (double)n), stream);
    return LAYER_CALL(rmsnorm_forward, out_v, rstd_v, inp_v, weight_v, n, C, eps, stream);
}

usp_status usp_rmsnorm_backward(usp_backend_t *be, float *dinp, float *dweight, const float *dout, const float *inp,
                                const float *weight, const float *rstd, int64_t n, int64_t C, usp_stream_t *stream)
{
    const char *op = "rmsnorm_backward";
    USP_CHECK(check_rows(op, "C", n, C));
    if (n == 0)
        return USP_OK;
    NEED(dinp, n * C); NEED(dweight, C); NEED(dout, n * C); NEED(inp, n * C); NEED(weight, C); NEED_F32(rstd, n);
    /* per element: row sum 3, dx 5 (mul, mul, mul, sub, add), dw 3; read dout, inp, dinp, write dinp */
    double nc = (double)n * (double)C;
    ops_report_cost(be, op, 11.0 * nc, 4.0 * (4.0 * nc + 3.0 * (double)C + (double)n), stream);
    return LAYER_CALL(rmsnorm_backward, dinp_v, dweight_v, dout_v, inp_v, weight_v, rstd_v, n, C, stream);
}

usp_status usp_gelu_tanh_forward(usp_backend_t *be, float *out, const float *inp, int64_t n, usp_stream_t *stream)
{
    const char *op = "gelu_tanh_forward";
    USP_CHECK(check_count(op, n));
    if (n == 0)
        return USP_OK;
    NEED(out, n); NEED(inp, n);
    /* x^3 2, polynomial 2, scale 1, tanh 1, 1 + t 1, two multiplies 2 */
    ops_report_cost(be, op, 9.0 * (double)n, 8.0 * (double)n, stream);
    return LAYER_CALL(gelu_tanh_forward, out_v, inp_v, n, stream);
}

usp_status usp_gelu_tanh_backward(usp_backend_t *be, float *dinp, const float *inp, const float *dout, int64_t n,
                                  usp_stream_t *stream)
{
    const char *op = "gelu_tanh_backward";
    USP_CHECK(check_count(op, n));
    if (n == 0)
        return USP_OK;
    NEED(dinp, n); NEED(inp, n); NEED(dout, n);
    /* tanh(u) as forward 6, (1 + t)/2 2, 1 - t^2 2, the polynomial 4, products 5 */
    ops_report_cost(be, op, 19.0 * (double)n, 12.0 * (double)n, stream);
    return LAYER_CALL(gelu_tanh_backward, dinp_v, inp_v, dout_v, n, stream);
}

usp_status usp_swiglu_forward(usp_backend_t *be, float *out, const float *gate, const float *up, int64_t n,
                              usp_stream_t *stream)
{
    const char *op = "swiglu_forward";
    USP_CHECK(check_count(op, n));
    if (n == 0)
        return USP_OK;
    NEED(out, n); NEED(gate, n); NEED(up, n);
    /* sigmoid 4 (neg, exp, add, div), two multiplies */
    ops_report_cost(be, op, 6.0 * (double)n, 12.0 * (double)n, stream);
    return LAYER_CALL(swiglu_forward, out_v, gate_v, up_v, n, stream);
}

usp_status usp_swiglu_backward(usp_backend_t *be, float *dgate, float *dup, const float *gate, const float *up,
                               const float *dout, int64_t n, usp_stream_t *stream)
{
    const char *op = "swiglu_backward";
    USP_CHECK(check_count(op, n));
    if (n == 0)
        return USP_OK;
    NEED(dgate, n); NEED(dup, n); NEED(gate, n); NEED(up, n); NEED(dout, n);
    /* sigmoid 4, dgate 6 (sub, mul, add, three products), dup 2; read 3 arrays, write 2 */
    ops_report_cost(be, op, 12.0 * (double)n, 20.0 * (double)n, stream);
    return LAYER_CALL(swiglu_backward, dgate_v, dup_v, gate_v, up_v, dout_v, n, stream);
}

/* The checks of both directions; *xv the view of x when n > 0. */
static usp_status rope_checks(const usp_backend_t *be, const char *op, const float *x, const int32_t *positions,
                              int64_t n, int64_t H, int64_t D, float theta, const double *inv_freq, usp_view *xv)
{
    if (n < 0 || H < 1 || D < 2 || D % 2 != 0)
        return usp_error(USP_ERR_CONFIG,
                         "%s: x [n = %lld, H = %lld, D = %lld]: n must be >= 0, H >= 1 and the head dimension D "
                         "even and >= 2 (dims i and i + D/2 form a rotation pair)",
                         op, (long long)n, (long long)H, (long long)D);
    if (!(theta > 0.0f) || isinf(theta))
        return usp_error(USP_ERR_CONFIG, "%s: rope theta = %g; it must be finite and > 0 (10000 is usual)", op,
                         (double)theta);
    for (int64_t i = 0; inv_freq && i < D / 2; i++)
        if (!(inv_freq[i] > 0.0) || isinf(inv_freq[i]))
            return usp_error(USP_ERR_CONFIG, "%s: inverse frequency %lld = %g; each must be finite and > 0", op,
                             (long long)i, inv_freq[i]);
    if (n == 0)
        return USP_OK;
    USP_CHECK(ops_view(be, op, "x", x, n * H * D, OPS_STORED, 0, xv));
    IDS(positions, n);
    return USP_OK;
}

/* One rotation per pair: 4 multiplies, 2 adds; per row and pair one angle (multiply, cos, sin) for all heads. */
static void rope_cost(usp_backend_t *be, const char *op, int64_t n, int64_t H, int64_t D, usp_stream_t *stream)
{
    double elems = (double)n * (double)H * (double)D;
    /* outputs: the n D/2 angles, each a sincos shared by the H heads; on a CPU these cost more than the
     * rotation (a double sincos is about 20 ns), so the time follows the angles, not the bytes */
    const double angles = 0.5 * (double)n * (double)D;
    ops_report_cost_outputs(be, op, USP_F32, 3.0 * elems + 3.0 * angles, 4.0 * (2.0 * elems + (double)n), angles,
                            stream);
}

usp_status usp_rope_forward(usp_backend_t *be, float *x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                            float theta, const double *inv_freq, usp_stream_t *stream)
{
    usp_view x_v;
    USP_CHECK(rope_checks(be, "rope_forward", x, positions, n, H, D, theta, inv_freq, &x_v));
    if (n == 0)
        return USP_OK;
    rope_cost(be, "rope_forward", n, H, D, stream);
    return LAYER_CALL(rope_forward, x_v, positions, n, H, D, theta, inv_freq, stream);
}

usp_status usp_rope_backward(usp_backend_t *be, float *dx, const int32_t *positions, int64_t n, int64_t H,
                             int64_t D, float theta, const double *inv_freq, usp_stream_t *stream)
{
    usp_view dx_v;
    USP_CHECK(rope_checks(be, "rope_backward", dx, positions, n, H, D, theta, inv_freq, &dx_v));
    if (n == 0)
        return USP_OK;
    rope_cost(be, "rope_backward", n, H, D, stream);
    return LAYER_CALL(rope_backward, dx_v, positions, n, H, D, theta, inv_freq, stream);
}

usp_status usp_cross_entropy(usp_backend_t *be, float *losses, float *dlogits, const float *logits,
                             const int32_t *targets, int64_t n, int64_t V, float grad_scale, usp_stream_t *stream)
{
    const char *op = "cross_entropy";
    USP_CHECK(check_rows(op, "V", n, V));
    if (n == 0)
        return USP_OK;
    MAYBE_F32(losses, n); MAYBE(dlogits, n * V); NEED(logits, n * V); IDS(targets, n);
    /* per logit: max 1, exp(z - m) 2, sum 1, and with the gradient a scale 1; read logits once,
     * write dlogits; targets and losses */
    double nv = (double)n * (double)V, grad = dlogits ? 1.0 : 0.0;
    ops_report_cost(be, op, (4.0 + grad) * nv, 4.0 * ((1.0 + grad) * nv + 2.0 * (double)n), stream);
    return LAYER_CALL(cross_entropy, losses_v, dlogits_v, logits_v, targets, n, V, grad_scale, stream);
}

usp_status usp_offloaded_adamw_cost(usp_backend_t *be, int64_t n, usp_dtype grads, usp_dtype weights,
                                     usp_stream_t *stream)
{
    if (usp_backend_has_numerics(be))
        return usp_error(USP_ERR_CONFIG, "an optimizer offloaded to the host is planned on shapes only: the %s backend "
                         "has no host optimizer (plan it with --meta or usp plan, or drop --offload)",
                         usp_backend_name(be));
    USP_CHECK(check_count("offloaded_adamw", n));
    const double g = (double)n * (double)usp_dtype_size(grads), w = (double)n * (double)usp_dtype_size(weights);
    ops_report_cost(be, "copy_host", 0, 2.0 * g, stream);
    /* The update streams fp32 master, m, v and the gradients in (16 bytes a parameter), master, m, v
     * and the weights' copy out; its flops are the CPUs', not the GPU's. */
    ops_report_cost(be, "host_adamw", 0, 28.0 * (double)n + w, stream);
    ops_report_cost(be, "copy_host", 0, 2.0 * w, stream);
    return USP_OK;
}

usp_status usp_adamw_step(usp_backend_t *be, float *params, const float *grads, float *m, float *v, int64_t n,
                          float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                          usp_stream_t *stream)
{
    const char *op = "adamw_step";
    USP_CHECK(check_count(op, n));
    if (t < 1 || !(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f) || !(eps >= 0.0f) ||
        !(lr >= 0.0f) || isinf(lr) || !(weight_decay >= 0.0f) || isinf(weight_decay) || isinf(eps))
        return usp_error(USP_ERR_CONFIG,
                         "%s: step t = %lld, lr = %g, beta1 = %g, beta2 = %g, eps = %g, weight_decay = %g: t counts "
                         "from 1, betas lie in [0, 1) and lr, eps, weight_decay are finite and >= 0 (e.g. t = 1, "
                         "lr = 3e-4, betas 0.9 and 0.95, eps = 1e-8, weight_decay = 0.1)",
                         op, (long long)t, (double)lr, (double)beta1, (double)beta2, (double)eps,
                         (double)weight_decay);
    if (n == 0)
        return USP_OK;
    NEED_F32(params, n); NEED(grads, n); NEED_F32(m, n); NEED_F32(v, n);
    /* m 3, v 4, bias corrections 2, sqrt 1, + eps 1, divide 1, decay 2, lr and update 2;
     * read params, grads, m, v, write params, m, v */
    ops_report_cost(be, op, 16.0 * (double)n, 28.0 * (double)n, stream);
    return LAYER_CALL(adamw_step, params_v, grads_v, m_v, v_v, n, lr, beta1, beta2, eps, weight_decay, t, stream);
}

usp_status usp_sum_squares(usp_backend_t *be, double *out, const float *x, int64_t n, usp_stream_t *stream)
{
    const char *op = "sum_squares";
    USP_CHECK(check_count(op, n));
    *out = 0.0;
    if (n == 0)
        return USP_OK;
    NEED(x, n);
    ops_report_cost(be, op, 2.0 * (double)n, 4.0 * (double)n, stream);
    ops_count_host_wait(be); /* blocking: the host reads the sum */
    return LAYER_CALL(sum_squares, out, x_v, n, stream);
}

usp_status usp_scale(usp_backend_t *be, float *x, float s, int64_t n, usp_stream_t *stream)
{
    const char *op = "scale";
    USP_CHECK(check_count(op, n));
    if (n == 0)
        return USP_OK;
    NEED(x, n);
    ops_report_cost(be, op, (double)n, 8.0 * (double)n, stream);
    return LAYER_CALL(scale, x_v, s, n, stream);
}

usp_status usp_add_bias(usp_backend_t *be, float *x, const float *bias, int64_t n, int64_t C, usp_stream_t *stream)
{
    const char *op = "add_bias";
    USP_CHECK(check_rows(op, "C", n, C));
    if (n == 0)
        return USP_OK;
    NEED(x, n * C); NEED(bias, C);
    double nc = (double)n * (double)C;
    ops_report_cost(be, op, nc, 4.0 * (2.0 * nc + (double)C), stream);
    return LAYER_CALL(add_bias, x_v, bias_v, n, C, stream);
}

usp_status usp_bias_backward(usp_backend_t *be, float *dbias, const float *dout, int64_t n, int64_t C,
                             usp_stream_t *stream)
{
    const char *op = "bias_backward";
    USP_CHECK(check_rows(op, "C", n, C));
    if (n == 0)
        return USP_OK;
    NEED(dbias, C); NEED(dout, n * C);
    double nc = (double)n * (double)C;
    ops_report_cost(be, op, nc, 4.0 * (nc + 2.0 * (double)C), stream);
    return LAYER_CALL(bias_backward, dbias_v, dout_v, n, C, stream);
}
