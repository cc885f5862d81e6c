/* The transformer layer ops of the CPU backend (cpu_layers.c), declared for the
 * backend's table in cpu_backend.c. Each function is one slot of usp_backend_i
 * with the semantics of its wrapper in core/ops.h; the wrappers have already
 * checked shapes and buffers, and n > 0 on every call. */
#ifndef USP_CPU_LAYERS_H
#define USP_CPU_LAYERS_H

#include "core/ops.h"

/* out [n, C] = wte[tokens] (+ wpe[positions]). */
usp_status cpu_embedding_forward(void *ctx, float *out, const int32_t *tokens, const int32_t *positions,
                                 const float *wte, const float *wpe, int64_t n, int64_t C, usp_stream_t *stream);
/* dwte[tokens[i]] += dout[i] (and dwpe[positions[i]]), rows in order per column block. */
usp_status cpu_embedding_backward(void *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                  const int32_t *positions, int64_t n, int64_t C, usp_stream_t *stream);
/* LayerNorm over the last dimension; saves mean and rstd [n] when non-NULL. */
usp_status cpu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int64_t n, int64_t C, float eps,
                                 usp_stream_t *stream);
/* LayerNorm backward; dinp, dweight and dbias (if non-NULL) accumulate. */
usp_status cpu_layernorm_backward(void *ctx, float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean, const float *rstd,
                                  int64_t n, int64_t C, usp_stream_t *stream);
/* RMSNorm; saves rstd [n] when non-NULL. */
usp_status cpu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp, const float *weight, int64_t n,
                               int64_t C, float eps, usp_stream_t *stream);
/* RMSNorm backward; dinp and dweight accumulate. */
usp_status cpu_rmsnorm_backward(void *ctx, float *dinp, float *dweight, const float *dout, const float *inp,
                                const float *weight, const float *rstd, int64_t n, int64_t C, usp_stream_t *stream);
/* GELU, tanh approximation, over n elements. */
usp_status cpu_gelu_tanh_forward(void *ctx, float *out, const float *inp, int64_t n, usp_stream_t *stream);
/* dinp = gelu'(inp) * dout (overwritten). */
usp_status cpu_gelu_tanh_backward(void *ctx, float *dinp, const float *inp, const float *dout, int64_t n,
                                  usp_stream_t *stream);
/* out = silu(gate) * up over n elements. */
usp_status cpu_swiglu_forward(void *ctx, float *out, const float *gate, const float *up, int64_t n,
                              usp_stream_t *stream);
/* dgate, dup of swiglu (overwritten). */
usp_status cpu_swiglu_backward(void *ctx, float *dgate, float *dup, const float *gate, const float *up,
                               const float *dout, int64_t n, usp_stream_t *stream);
/* Rotary embedding of x [n, H, D] in place (rotate_half pairs). */
usp_status cpu_rope_forward(void *ctx, float *x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                            float theta, usp_stream_t *stream);
/* The inverse (transposed) rotation of dx [n, H, D] in place. */
usp_status cpu_rope_backward(void *ctx, float *dx, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                             float theta, usp_stream_t *stream);
/* Fused softmax cross-entropy over logits [n, V]; losses and dlogits each optional. */
usp_status cpu_cross_entropy(void *ctx, float *losses, float *dlogits, const float *logits, const int32_t *targets,
                             int64_t n, int64_t V, float grad_scale, usp_stream_t *stream);
/* One AdamW step over n parameters. */
usp_status cpu_adamw_step(void *ctx, float *params, const float *grads, float *m, float *v, int64_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int64_t t, usp_stream_t *stream);
/* *out = sum of x[i]^2 in double, blocked by n alone (same bits for any thread count). */
usp_status cpu_sum_squares(void *ctx, double *out, const float *x, int64_t n, usp_stream_t *stream);
/* x *= s over n elements. */
usp_status cpu_scale(void *ctx, float *x, float s, int64_t n, usp_stream_t *stream);
/* x [n, C] += bias [C] on every row. */
usp_status cpu_add_bias(void *ctx, float *x, const float *bias, int64_t n, int64_t C, usp_stream_t *stream);
/* dbias [C] += column sums of dout [n, C]. */
usp_status cpu_bias_backward(void *ctx, float *dbias, const float *dout, int64_t n, int64_t C, usp_stream_t *stream);

#endif
