/* The final norm, the lm_head and the cross-entropy, whole or tiled (see model.h).
 *
 * logits = lnf W^T with W [V, C] (wte when tied, else lm_head); per row
 * loss = logsumexp(logits) - logits[target], dlogits = scale (softmax - onehot).
 * The lm_head's backward runs inside the loss, right after the cross-entropy:
 * d lnf = dlogits W, dW += dlogits^T lnf. Tiled, the rows go `tile` at a time
 * through one [tile, V] buffer, so the [n, V] logits (the largest activation of
 * a long sequence: 1M tokens x 32000 x 4 bytes = 131 GB) never exist; every row
 * gives the same numbers, dW is a sum over tiles. The logits are fp32 whatever
 * the storage dtype: the cross-entropy of a 32000-way softmax needs it. */
#include <math.h>
#include <stdlib.h>

#include "core/model/model_internal.h"

/* The layer index whose bucket holds the lm_head's weights. */
static int head_layer(const usp_model *m) { return m->c.tied_embeddings ? -1 : (int)m->c.n_layer; }

static const float *lm_head(const usp_model *m)
{
    return m->c.tied_embeddings ? model_param(m, USP_P_WTE, -1) : model_param(m, USP_P_LM_HEAD, -1);
}

static float *lm_head_grad(const usp_model *m)
{
    return m->c.tied_embeddings ? model_grad(m, USP_P_WTE, -1) : model_grad(m, USP_P_LM_HEAD, -1);
}

usp_status head_alloc(usp_model *m)
{
    const int64_t n = m->n;
    USP_CHECK(model_tensor(m, &m->lnf, n * m->C, "activations"));
    USP_CHECK(model_buffer(m, &m->lnf_mean, n, "activations"));
    USP_CHECK(model_buffer(m, &m->lnf_rstd, n, "activations"));
    USP_CHECK(model_buffer(m, &m->logits, (m->s.tiled_loss ? m->tile : n) * m->V, "activations"));
    return model_buffer(m, &m->losses, n, "activations");
}

usp_status head_forward(usp_model *m)
{
    const int L = (int)m->c.n_layer;
    USP_CHECK(model_use_weights(m, L));
    USP_CHECK(model_norm_forward(m, m->lnf, m->lnf_mean, m->lnf_rstd, model_at(m, m->residual, L * m->n * m->C),
                                 model_param(m, USP_P_NORMF_W, -1), model_param(m, USP_P_NORMF_B, -1)));
    if (!m->s.tiled_loss) {
        USP_CHECK(model_use_weights(m, head_layer(m)));
        USP_CHECK(model_linear(m, m->n, m->logits, m->lnf, lm_head(m), NULL, m->C, m->V));
        USP_CHECK(model_drop_weights(m, head_layer(m)));
    }
    return model_drop_weights(m, L);
}

/* The logits of local row `row` into host[V]; with the tiled loss the caller has the lm_head's bucket in use,
 * and the row is computed again from the final norm's output (the [n, V] logits never exist). */
static usp_status download_row(usp_model *m, int64_t row, float *host)
{
    const float *logits = m->logits + row * m->V;
    if (m->s.tiled_loss) {
        USP_CHECK(model_linear(m, 1, m->logits, model_at(m, m->lnf, row * m->C), lm_head(m), NULL, m->C, m->V));
        logits = m->logits;
    }
    return usp_buffer_download(BE, host, logits, (size_t)m->V * sizeof *host, ST);
}

/* Brackets reading rows: the tiled loss recomputes them from the lm_head's weights (a gather with ZeRO 3). */
static usp_status begin_rows(usp_model *m) { return m->s.tiled_loss ? model_use_weights(m, head_layer(m)) : USP_OK; }

static usp_status end_rows(usp_model *m, usp_status s)
{
    usp_status d = m->s.tiled_loss ? model_drop_weights(m, head_layer(m)) : USP_OK;
    return s == USP_OK ? d : s;
}

usp_status usp_model_logits(usp_model *m, const int64_t *rows, int n, float *out)
{
    if (!usp_backend_has_numerics(BE))
        return usp_error(USP_ERR_CONFIG, "the logits of a forward on the %s backend: it runs on shapes only and "
                         "computes no numbers", usp_backend_name(BE));
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= m->n)
            return usp_error(USP_ERR_CONFIG, "logits of row %lld: this rank holds rows 0 to %lld", (long long)rows[i],
                             (long long)m->n - 1);
    usp_status s = begin_rows(m);
    for (int i = 0; i < n && s == USP_OK; i++)
        s = download_row(m, rows[i], out + (size_t)i * (size_t)m->V);
    return end_rows(m, s);
}

usp_status usp_model_argmax(usp_model *m, const int64_t *rows, int n, int32_t *out)
{
    if (!usp_backend_has_numerics(BE)) { /* no logits to read: no token */
        for (int i = 0; i < n; i++)
            out[i] = -1;
        return USP_OK;
    }
    float *row = malloc((size_t)m->V * sizeof *row);
    if (!row)
        return usp_error(USP_ERR_RUNTIME, "out of memory reading logits");
    usp_status s = begin_rows(m);
    for (int i = 0; i < n && s == USP_OK; i++) {
        s = download_row(m, rows[i], row);
        if (s != USP_OK)
            break;
        int32_t best = 0;
        for (int64_t v = 1; v < m->V; v++)
            if (row[v] > row[best])
                best = (int32_t)v;
        out[i] = best;
    }
    free(row);
    return end_rows(m, s);
}

/* Cross-entropy of rows [r, r + rows) whose logits are in `logits`, then (with_grad) the lm_head's backward. */
static usp_status loss_rows(usp_model *m, int64_t r, int64_t rows, float *logits, float grad_scale, int with_grad)
{
    USP_CHECK(usp_cross_entropy(BE, m->losses + r, logits, logits, m->targets + r, rows, m->V, grad_scale, ST));
    if (!with_grad)
        return USP_OK;
    return model_linear_backward(m, rows, model_at(m, m->d_h, r * m->C), 0, lm_head_grad(m), NULL, logits,
                                 model_at(m, m->lnf, r * m->C), lm_head(m), m->C, m->V);
}

/* The loss as PyTorch's eager cross-entropy runs it (HF Transformers, torchtitan): the fp32
 * logits, then log_softmax's output [n, V] saved for backward, and in backward the gradient
 * it receives [n, V] beside the one it makes (usp's, in the logits): two fp32 arrays more at
 * the loss's peak, and a pass writing each. Shapes only (usp_train refuses it with numerics). */
static usp_status eager_loss_rows(usp_model *m, float grad_scale, int with_grad)
{
    const size_t nv = (size_t)m->n * (size_t)m->V;
    float *saved = NULL, *incoming = NULL;
    usp_status s = usp_buffer_alloc(BE, nv * sizeof(float), "activations", (void **)&saved);
    if (s == USP_OK)
        s = usp_buffer_copy(BE, saved, m->logits, nv * sizeof(float), USP_COPY_DEVICE_TO_DEVICE, ST);
    if (s == USP_OK && with_grad)
        s = usp_buffer_alloc(BE, nv * sizeof(float), "activations", (void **)&incoming);
    if (s == USP_OK && with_grad)
        s = usp_buffer_copy(BE, incoming, saved, nv * sizeof(float), USP_COPY_DEVICE_TO_DEVICE, ST);
    if (s == USP_OK)
        s = loss_rows(m, 0, m->n, m->logits, grad_scale, with_grad);
    usp_buffer_free(BE, incoming);
    usp_buffer_free(BE, saved);
    return s;
}

/* The lm_head's gradient bucket opened here stays open into usp_model_backward,
 * which closes it after its own last use of that bucket (ZeRO 2-3 reduce-scatter
 * a bucket once, when its gradient is complete). */
usp_status usp_model_loss_enqueue(usp_model *m, float grad_scale, int with_grad, float *losses)
{
    USP_CHECK(model_use_weights(m, head_layer(m)));
    if (with_grad) {
        USP_CHECK(usp_param_store_begin_backward(m->store));
        USP_CHECK(model_open_grads(m, head_layer(m)));
    }
    if (!m->s.tiled_loss && m->s.eager_loss)
        USP_CHECK(eager_loss_rows(m, grad_scale, with_grad));
    else if (!m->s.tiled_loss)
        USP_CHECK(loss_rows(m, 0, m->n, m->logits, grad_scale, with_grad));
    for (int64_t r = 0; m->s.tiled_loss && r < m->n; r += m->tile) {
        int64_t rows = m->n - r < m->tile ? m->n - r : m->tile;
        const double start = usp_backend_flops(BE);
        USP_CHECK(model_linear(m, rows, m->logits, model_at(m, m->lnf, r * m->C), lm_head(m), NULL, m->C, m->V));
        m->forward_flops += usp_backend_flops(BE) - start;
        USP_CHECK(loss_rows(m, r, rows, m->logits, grad_scale, with_grad));
    }
    USP_CHECK(model_drop_weights(m, head_layer(m)));
    m->head_grads_ready = with_grad;
    /* enqueued only: the host reads the losses after its next wait on the stream (core/ops/ops.h) */
    return usp_buffer_copy(BE, losses, m->losses, (size_t)m->n * sizeof *losses, USP_COPY_DEVICE_TO_HOST, ST);
}

double usp_model_add_losses(double sum, const float *losses, const int32_t *targets, int64_t n)
{
    for (int64_t i = 0; i < n; i++) /* in row order, in double: the same bits on every run */
        sum += targets[i] >= 0 ? (double)losses[i] : 0.0;
    return sum;
}

usp_status usp_model_loss(usp_model *m, float grad_scale, int with_grad, double *loss_sum)
{
    float *losses = usp_backend_has_numerics(BE) ? malloc((size_t)m->n * sizeof *losses) : NULL; /* meta: none */
    if (!losses && usp_backend_has_numerics(BE))
        return usp_error(USP_ERR_RUNTIME, "out of memory reading losses");
    usp_status s = usp_model_loss_enqueue(m, grad_scale, with_grad, losses);
    if (s == USP_OK)
        s = usp_backend_synchronize(BE, ST);
    *loss_sum = s == USP_OK && losses ? usp_model_add_losses(0.0, losses, m->host_targets, m->n)
                                      : NAN; /* meta: none arrived */
    free(losses);
    return s;
}

usp_status head_backward(usp_model *m)
{
    const int L = (int)m->c.n_layer;
    USP_CHECK(usp_buffer_zero(BE, m->d_x, usp_buffer_bytes(BE, m->d_x, (size_t)(m->n * m->C)), ST));
    USP_CHECK(model_use_weights(m, L));
    USP_CHECK(model_open_grads(m, L));
    USP_CHECK(model_norm_backward(m, m->d_x, model_grad(m, USP_P_NORMF_W, -1), model_grad(m, USP_P_NORMF_B, -1),
                                  m->d_h, model_at(m, m->residual, L * m->n * m->C), model_param(m, USP_P_NORMF_W, -1),
                                  m->lnf_mean, m->lnf_rstd));
    USP_CHECK(model_close_grads(m, L));
    if (head_layer(m) == L) /* the loss's opening of the lm_head's bucket */
        USP_CHECK(model_close_grads(m, L));
    return model_drop_weights(m, L);
}
