/* The typed calls of core/ops/ops.h as op descriptors (core/ops/op.h): each names its operands with
 * the elements it reads or writes from each, and its parameters, and hands the op to usp_op_run,
 * which checks, prices and runs it. Nothing here checks or costs anything: the kind's row in
 * core/ops/op_kinds.c does. */
#include "core/ops/ops_internal.h"

_Static_assert(sizeof(float) == 4 && sizeof(int32_t) == 4, "fp32 and int32 buffers share the 4-byte USP_F32 dtype");

/* `count` elements from ptr (their dtype is the buffer's: usp_op_run looks it up). */
#define V(ptr_, count_) ((usp_view){.data = (void *)(ptr_), .dtype = USP_F32, .count = (int64_t)(count_)})

/* Elements a batch of `rows` x `cols` matrices spans at row stride ld and matrix stride `stride`. */
static int64_t matrices_extent(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch)
{
    return (batch - 1) * stride + (rows - 1) * ld + cols;
}

/* The span of `rows` rows of `row` at `stride` (0 rows: nothing). */
static size_t strided_extent(size_t stride, size_t row, size_t rows) { return rows ? (rows - 1) * stride + row : 0; }

usp_status usp_gemm(usp_backend_t *be, const usp_gemm_desc *g, usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_GEMM, .stream = stream,
                 .p.gemm = {g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, g->beta, g->lda, g->stride_a, g->ldb,
                            g->stride_b, g->ldc, g->stride_c, g->batch}};
    const int empty = g->m <= 0 || g->n <= 0 || g->batch <= 0;
    if (g->k > 0 && !empty) { /* at k = 0 a and b are not read */
        op.operand[0] = V(g->a, g->trans_a ? matrices_extent(g->k, g->m, g->lda, g->stride_a, g->batch)
                                           : matrices_extent(g->m, g->k, g->lda, g->stride_a, g->batch));
        op.operand[1] = V(g->b, g->trans_b ? matrices_extent(g->n, g->k, g->ldb, g->stride_b, g->batch)
                                           : matrices_extent(g->k, g->n, g->ldb, g->stride_b, g->batch));
    } else {
        op.operand[0] = V(g->a, 0), op.operand[1] = V(g->b, 0);
    }
    op.operand[2] = V(g->c, empty ? 0 : matrices_extent(g->m, g->n, g->ldc, g->stride_c, g->batch));
    return usp_op_run(be, &op);
}

usp_status usp_copy_2d(usp_backend_t *be, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                       size_t row_bytes, size_t rows, usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_COPY_2D, .stream = stream, .p.strided = {dst_stride, src_stride, row_bytes, rows}};
    op.operand[0] = V(src, strided_extent(src_stride, row_bytes, rows));
    op.operand[1] = V(dst, strided_extent(dst_stride, row_bytes, rows));
    return usp_op_run(be, &op);
}

usp_status usp_accumulate_2d(usp_backend_t *be, float *dst, size_t dst_stride, const float *src,
                             size_t src_stride, size_t row_elems, size_t rows, usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_ACCUMULATE_2D, .stream = stream,
                 .p.strided = {dst_stride, src_stride, row_elems, rows}};
    op.operand[0] = V(dst, strided_extent(dst_stride, row_elems, rows));
    op.operand[1] = V(src, strided_extent(src_stride, row_elems, rows));
    return usp_op_run(be, &op);
}

#define Q_ELEMS(s) ((s)->batch * (s)->n_q * (s)->n_heads * (s)->head_dim)
#define KV_ELEMS(s) ((s)->batch * (s)->n_kv * (s)->n_kv_heads * (s)->head_dim)
#define LSE_ELEMS(s) ((s)->batch * (s)->n_heads * (s)->n_q)
#define DOC_ELEMS(s) ((s)->docs ? (s)->batch * (s)->seq_len * 2 : 0)

usp_status usp_flash_attention_forward(usp_backend_t *be, const usp_attention_shape *s, const float *q,
                                       const float *k, const float *v, float *o, float *lse,
                                       usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_ATTENTION_FORWARD, .stream = stream, .p.attention = {*s, 0},
                 .operand = {V(q, Q_ELEMS(s)), V(o, Q_ELEMS(s)), V(lse, LSE_ELEMS(s)), V(k, KV_ELEMS(s)),
                             V(v, KV_ELEMS(s)), V(s->docs, DOC_ELEMS(s))}};
    return usp_op_run(be, &op);
}

usp_status usp_flash_attention_backward(usp_backend_t *be, const usp_attention_shape *s, const float *q,
                                        const float *k, const float *v, const float *o, const float *lse,
                                        const float *d_o, float *dq, float *dk, float *dv, int accumulate,
                                        usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_ATTENTION_BACKWARD, .stream = stream, .p.attention = {*s, accumulate},
                 .operand = {V(q, Q_ELEMS(s)), V(o, Q_ELEMS(s)), V(d_o, Q_ELEMS(s)), V(dq, Q_ELEMS(s)),
                             V(lse, LSE_ELEMS(s)), V(k, KV_ELEMS(s)), V(v, KV_ELEMS(s)), V(dk, KV_ELEMS(s)),
                             V(dv, KV_ELEMS(s)), V(s->docs, DOC_ELEMS(s))}};
    return usp_op_run(be, &op);
}

usp_status usp_attention_merge(usp_backend_t *be, float *o, float *lse, const float *o_part,
                               const float *lse_part, int64_t n, int64_t heads, int64_t head_dim,
                               usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_ATTENTION_MERGE, .stream = stream, .p.merge = {n, heads, head_dim},
                 .operand = {V(o, n * heads * head_dim), V(o_part, n * heads * head_dim), V(lse, n * heads),
                             V(lse_part, n * heads)}};
    return usp_op_run(be, &op);
}

/* ---- transformer layer ops ---- */

usp_status usp_embedding_forward(usp_backend_t *be, float *out, const int32_t *tokens, const int32_t *positions,
                                 const float *wte, const float *wpe, int64_t n, int64_t C, usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_EMBEDDING_FORWARD, .stream = stream, .p.rows = {n, C, 0},
                 .operand = {V(out, n * C), V(tokens, n), V(wte, C), V(wpe, wpe ? C : 0),
                             V(wpe ? positions : NULL, wpe ? n : 0)}}; /* positions are read with wpe only */
    return usp_op_run(be, &op);
}

usp_status usp_embedding_backward(usp_backend_t *be, float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, const int32_t *positions, int64_t n, int64_t C,
                                  usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_EMBEDDING_BACKWARD, .stream = stream, .p.rows = {n, C, 0},
                 .operand = {V(dwte, C), V(dwpe, dwpe ? C : 0), V(dout, n * C), V(tokens, n),
                             V(dwpe ? positions : NULL, dwpe ? n : 0)}};
    return usp_op_run(be, &op);
}

usp_status usp_layernorm_forward(usp_backend_t *be, float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int64_t n, int64_t C, float eps,
                                 usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_LAYERNORM_FORWARD, .stream = stream, .p.rows = {n, C, eps},
                 .operand = {V(out, n * C), V(mean, n), V(rstd, n), V(inp, n * C), V(weight, C), V(bias, C)}};
    return usp_op_run(be, &op);
}

usp_status usp_layernorm_backward(usp_backend_t *be, float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean, const float *rstd,
                                  int64_t n, int64_t C, usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_LAYERNORM_BACKWARD, .stream = stream, .p.rows = {n, C, 0},
                 .operand = {V(dinp, n * C), V(dweight, C), V(dbias, C), V(dout, n * C), V(inp, n * C), V(weight, C),
                             V(mean, n), V(rstd, n)}};
    return usp_op_run(be, &op);
}

usp_status usp_rmsnorm_forward(usp_backend_t *be, float *out, float *rstd, const float *inp, const float *weight,
                               int64_t n, int64_t C, float eps, usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_RMSNORM_FORWARD, .stream = stream, .p.rows = {n, C, eps},
                 .operand = {V(out, n * C), V(rstd, n), V(inp, n * C), V(weight, C)}};
    return usp_op_run(be, &op);
}

usp_status usp_rmsnorm_backward(usp_backend_t *be, float *dinp, float *dweight, const float *dout, const float *inp,
                                const float *weight, const float *rstd, int64_t n, int64_t C, usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_RMSNORM_BACKWARD, .stream = stream, .p.rows = {n, C, 0},
                 .operand = {V(dinp, n * C), V(dweight, C), V(dout, n * C), V(inp, n * C), V(weight, C),
                             V(rstd, n)}};
    return usp_op_run(be, &op);
}

usp_status usp_map(usp_backend_t *be, usp_map_fn fn, float *const *outputs, const float *const *inputs,
                   int64_t n, float scalar, usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_MAP, .stream = stream, .p.map = {fn, n, scalar}};
    usp_operand_info info[USP_OP_OPERANDS_MAX];
    const int operands = usp_op_operands(&op, info);
    for (int i = 0, outs = 0; i < operands; i++) {
        if (info[i].flags & USP_OPERAND_WRITTEN)
            op.operand[i] = V(outputs[outs++], n);
        else
            op.operand[i] = V(inputs[i - outs], n);
    }
    return usp_op_run(be, &op);
}

usp_status usp_gelu_tanh_forward(usp_backend_t *be, float *out, const float *inp, int64_t n, usp_stream_t *stream)
{
    return usp_map(be, USP_MAP_GELU_TANH_FORWARD, (float *[]){out}, (const float *[]){inp}, n, 0, stream);
}

usp_status usp_gelu_tanh_backward(usp_backend_t *be, float *dinp, const float *inp, const float *dout, int64_t n,
                                  usp_stream_t *stream)
{
    return usp_map(be, USP_MAP_GELU_TANH_BACKWARD, (float *[]){dinp}, (const float *[]){inp, dout}, n, 0, stream);
}

usp_status usp_swiglu_forward(usp_backend_t *be, float *out, const float *gate, const float *up, int64_t n,
                              usp_stream_t *stream)
{
    return usp_map(be, USP_MAP_SWIGLU_FORWARD, (float *[]){out}, (const float *[]){gate, up}, n, 0, stream);
}

usp_status usp_swiglu_backward(usp_backend_t *be, float *dgate, float *dup, const float *gate, const float *up,
                               const float *dout, int64_t n, usp_stream_t *stream)
{
    return usp_map(be, USP_MAP_SWIGLU_BACKWARD, (float *[]){dgate, dup}, (const float *[]){gate, up, dout}, n, 0,
                   stream);
}

usp_status usp_scale(usp_backend_t *be, float *x, float s, int64_t n, usp_stream_t *stream)
{
    return usp_map(be, USP_MAP_SCALE, (float *[]){x}, NULL, n, s, stream);
}

static usp_status rope(usp_backend_t *be, usp_op_kind kind, float *x, const int32_t *positions, int64_t n, int64_t H,
                       int64_t D, float theta, const double *inv_freq, usp_stream_t *stream)
{
    usp_op op = {.kind = kind, .stream = stream, .p.rope = {n, H, D, theta, inv_freq},
                 .operand = {V(x, n * H * D), V(positions, n)}};
    return usp_op_run(be, &op);
}

usp_status usp_rope_forward(usp_backend_t *be, float *x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                            float theta, const double *inv_freq, usp_stream_t *stream)
{
    return rope(be, USP_OP_ROPE_FORWARD, x, positions, n, H, D, theta, inv_freq, stream);
}

usp_status usp_rope_backward(usp_backend_t *be, float *dx, const int32_t *positions, int64_t n, int64_t H,
                             int64_t D, float theta, const double *inv_freq, usp_stream_t *stream)
{
    return rope(be, USP_OP_ROPE_BACKWARD, dx, positions, n, H, D, theta, inv_freq, stream);
}

usp_status usp_cross_entropy(usp_backend_t *be, float *losses, float *dlogits, const float *logits,
                             const int32_t *targets, int64_t n, int64_t V, float grad_scale, usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_CROSS_ENTROPY, .stream = stream, .p.loss = {n, V, grad_scale},
                 .operand = {V(losses, n), V(dlogits, n * V), V(logits, n * V), V(targets, n)}};
    return usp_op_run(be, &op);
}

usp_status usp_adamw_step(usp_backend_t *be, float *params, const float *grads, float *m, float *v, int64_t n,
                          float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                          usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_ADAMW_STEP, .stream = stream, .p.adamw = {n, t, lr, beta1, beta2, eps, weight_decay},
                 .operand = {V(params, n), V(grads, n), V(m, n), V(v, n)}};
    return usp_op_run(be, &op);
}

usp_status usp_offloaded_adamw_cost(usp_backend_t *be, int64_t n, usp_dtype grads, usp_dtype weights,
                                     usp_stream_t *stream)
{
    if (usp_backend_has_numerics(be))
        return usp_error(USP_ERR_CONFIG, "an optimizer offloaded to the host is planned on shapes only: the %s backend "
                         "has no host optimizer (plan it with --meta or usp plan, or drop --offload)",
                         usp_backend_name(be));
    if (n < 0)
        return usp_error(USP_ERR_CONFIG, "offloaded_adamw: n = %lld elements; it must be >= 0", (long long)n);
    const double g = (double)n * (double)usp_dtype_size(grads), w = (double)n * (double)usp_dtype_size(weights);
    ops_report_cost(be, "copy_host", 0, 2.0 * g, stream);
    /* The update streams fp32 master, m, v and the gradients in (16 bytes a parameter), master, m, v
     * and the weights' copy out; its flops are the CPUs', not the GPU's. */
    ops_report_cost(be, "host_adamw", 0, 28.0 * (double)n + w, stream);
    ops_report_cost(be, "copy_host", 0, 2.0 * w, stream);
    return USP_OK;
}

usp_status usp_sum_squares(usp_backend_t *be, double *out, const float *x, int64_t n, usp_stream_t *stream)
{
    *out = 0.0;
    usp_op op = {.kind = USP_OP_SUM_SQUARES, .stream = stream, .p.sum = {n, out}, .operand = {V(x, n)}};
    return usp_op_run(be, &op);
}

usp_status usp_add_bias(usp_backend_t *be, float *x, const float *bias, int64_t n, int64_t C, usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_ADD_BIAS, .stream = stream, .p.rows = {n, C, 0},
                 .operand = {V(x, n * C), V(bias, C)}};
    return usp_op_run(be, &op);
}

usp_status usp_bias_backward(usp_backend_t *be, float *dbias, const float *dout, int64_t n, int64_t C,
                             usp_stream_t *stream)
{
    usp_op op = {.kind = USP_OP_BIAS_BACKWARD, .stream = stream, .p.rows = {n, C, 0},
                 .operand = {V(dbias, C), V(dout, n * C)}};
    return usp_op_run(be, &op);
}
