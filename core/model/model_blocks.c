/* The building blocks the layers, the MLP and the head are made of
 * (model_internal.h): the linear layer y = x W^T (+ b) with W [out, in], whose
 * backward is dx (+)= dy W, dW += dy^T x, db += the column sums of dy; and the
 * model's norm (layernorm or rmsnorm), forward and backward. */
#include "core/model/model_internal.h"

usp_status model_linear(usp_model *m, int64_t rows, float *out, const float *inp, const float *w, const float *b,
                        int64_t i, int64_t o)
{
    usp_gemm_desc g = {.trans_b = 1, .m = rows, .n = o, .k = i, .alpha = 1, .beta = 0, .a = inp, .lda = i,
                       .b = w, .ldb = i, .c = out, .ldc = o, .batch = 1};
    USP_CHECK(usp_gemm(BE, &g, ST));
    return b ? usp_add_bias(BE, out, b, rows, o, ST) : USP_OK;
}

usp_status model_linear_backward(usp_model *m, int64_t rows, float *dinp, int accumulate, float *dw, float *db,
                                 const float *dout, const float *inp, const float *w, int64_t i, int64_t o)
{
    usp_gemm_desc dx = {.m = rows, .n = i, .k = o, .alpha = 1, .beta = accumulate ? 1.0f : 0.0f, .a = dout,
                        .lda = o, .b = w, .ldb = i, .c = dinp, .ldc = i, .batch = 1};
    usp_gemm_desc dW = {.trans_a = 1, .m = o, .n = i, .k = rows, .alpha = 1, .beta = 1, .a = dout, .lda = o,
                        .b = inp, .ldb = i, .c = dw, .ldc = i, .batch = 1};
    USP_CHECK(usp_gemm(BE, &dx, ST));
    USP_CHECK(usp_gemm(BE, &dW, ST));
    return db ? usp_bias_backward(BE, db, dout, rows, o, ST) : USP_OK;
}

usp_status model_norm_forward(usp_model *m, float *out, float *mean, float *rstd, const float *inp, const float *w,
                              const float *b)
{
    if (m->c.norm == USP_NORM_LAYERNORM)
        return usp_layernorm_forward(BE, out, mean, rstd, inp, w, b, m->n, m->C, m->c.norm_eps, ST);
    return usp_rmsnorm_forward(BE, out, rstd, inp, w, m->n, m->C, m->c.norm_eps, ST);
}

usp_status model_norm_backward(usp_model *m, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd)
{
    if (m->c.norm == USP_NORM_LAYERNORM)
        return usp_layernorm_backward(BE, dinp, dw, db, dout, inp, w, mean, rstd, m->n, m->C, ST);
    return usp_rmsnorm_backward(BE, dinp, dw, dout, inp, w, rstd, m->n, m->C, ST);
}
