/* The MLP of a layer, whole or tiled (see model.h).
 *
 * GPT-2: out = gelu(h Wfc^T + bfc) Wdown^T + bdown; Llama: out = (silu(h Wg^T) * (h Wu^T)) Wdown^T.
 * Whole, the forward keeps the hidden (pre-activation and activation, [n, F]
 * each, [n, 2F] pre-activation for SwiGLU) for backward. Tiled, it runs
 * `tile` rows at a time and keeps nothing: every row of the MLP depends on
 * its own row of h only, so backward recomputes a tile's hidden from h and
 * runs that tile's backward at once. The rows' results are the same; the
 * weight gradients are sums over tiles instead of one sum over rows. */
#include "core/model/model_internal.h"

usp_status mlp_alloc(usp_model *m)
{
    const int sets = m->s.recompute_layers ? 1 : (int)m->c.n_layer, act_sets = m->s.selective_recompute ? 1 : sets;
    if (m->s.tiled_mlp) {
        USP_CHECK(model_tensor(m, &m->tile_up, m->tile * m->UP, "activations"));
        USP_CHECK(model_tensor(m, &m->tile_act, m->tile * m->F, "activations"));
    } else {
        for (int l = 0; l < sets; l++) {
            USP_CHECK(model_tensor(m, &m->acts[l].up, m->n * m->UP, "activations"));
            if (l < act_sets)
                USP_CHECK(model_tensor(m, &m->acts[l].act, m->n * m->F, "activations"));
            else
                m->acts[l].act = m->acts[0].act;
        }
    }
    const int64_t rows = m->s.tiled_mlp ? m->tile : m->n;
    USP_CHECK(model_tensor(m, &m->d_up, rows * m->UP, "gradients"));
    return model_tensor(m, &m->d_act, rows * m->F, "gradients");
}

/* act [rows, F] from the pre-activation up [rows, UP]. */
static usp_status activation(usp_model *m, int64_t rows, const float *up, float *act)
{
    if (m->c.mlp == USP_MLP_SWIGLU)
        return usp_swiglu_forward(BE, act, up, model_at(m, up, rows * m->F), rows * m->F, ST);
    return usp_gelu_tanh_forward(BE, act, up, rows * m->F, ST);
}

/* up [rows, UP] (SwiGLU: gate rows then up rows) and act [rows, F] from h [rows, C]. */
static usp_status hidden(usp_model *m, int l, int64_t rows, const float *h, float *up, float *act)
{
    const float *w_up = model_param(m, USP_P_MLP_UP_W, l);
    const int64_t C = m->C, F = m->F;
    if (m->c.mlp == USP_MLP_SWIGLU) {
        USP_CHECK(model_linear(m, rows, up, h, w_up, NULL, C, F));                     /* gate */
        USP_CHECK(model_linear(m, rows, model_at(m, up, rows * F), h, model_at(m, w_up, F * C), NULL, C, F)); /* up */
    } else {
        USP_CHECK(model_linear(m, rows, up, h, w_up, model_param(m, USP_P_MLP_UP_B, l), C, F));
    }
    return activation(m, rows, up, act);
}

/* The backward of `rows` rows whose hidden is up/act: d_h [rows, C] (overwritten) from dout [rows, C]. */
static usp_status rows_backward(usp_model *m, int l, int64_t rows, const float *h, const float *up, const float *act,
                                const float *dout, float *d_h)
{
    const int64_t C = m->C, F = m->F;
    USP_CHECK(model_linear_backward(m, rows, m->d_act, 0, model_grad(m, USP_P_MLP_DOWN_W, l),
                                    model_grad(m, USP_P_MLP_DOWN_B, l), dout, act,
                                    model_param(m, USP_P_MLP_DOWN_W, l), F, C));
    const float *w_up = model_param(m, USP_P_MLP_UP_W, l);
    float *dw_up = model_grad(m, USP_P_MLP_UP_W, l);
    if (m->c.mlp == USP_MLP_SWIGLU) {
        float *d_gate = m->d_up, *d_up = model_at(m, m->d_up, rows * F);
        USP_CHECK(usp_swiglu_backward(BE, d_gate, d_up, up, model_at(m, up, rows * F), m->d_act, rows * F, ST));
        USP_CHECK(model_linear_backward(m, rows, d_h, 0, dw_up, NULL, d_gate, h, w_up, C, F));
        return model_linear_backward(m, rows, d_h, 1, model_at(m, dw_up, F * C), NULL, d_up, h,
                                     model_at(m, w_up, F * C), C, F);
    }
    USP_CHECK(usp_gelu_tanh_backward(BE, m->d_up, up, m->d_act, rows * F, ST));
    return model_linear_backward(m, rows, d_h, 0, dw_up, model_grad(m, USP_P_MLP_UP_B, l), m->d_up, h, w_up, C, F);
}

usp_status mlp_forward(usp_model *m, int l, layer_acts *a, const float *h, float *out)
{
    const int64_t C = m->C, F = m->F;
    const float *w_down = model_param(m, USP_P_MLP_DOWN_W, l), *b_down = model_param(m, USP_P_MLP_DOWN_B, l);
    if (!m->s.tiled_mlp) {
        USP_CHECK(hidden(m, l, m->n, h, a->up, a->act));
        return model_linear(m, m->n, out, a->act, w_down, b_down, F, C);
    }
    for (int64_t r = 0; r < m->n; r += m->tile) {
        int64_t rows = m->n - r < m->tile ? m->n - r : m->tile;
        USP_CHECK(hidden(m, l, rows, model_at(m, h, r * C), m->tile_up, m->tile_act));
        USP_CHECK(model_linear(m, rows, model_at(m, out, r * C), m->tile_act, w_down, b_down, F, C));
    }
    return USP_OK;
}

usp_status mlp_recompute(usp_model *m, int l, layer_acts *a, const float *h)
{
    USP_ASSERT(!m->s.tiled_mlp, "a tiled MLP recomputes its hidden in mlp_backward");
    return hidden(m, l, m->n, h, a->up, a->act);
}

usp_status mlp_recompute_activation(usp_model *m, layer_acts *a)
{
    USP_ASSERT(!m->s.tiled_mlp, "a tiled MLP recomputes its hidden in mlp_backward");
    return activation(m, m->n, a->up, a->act);
}

usp_status mlp_backward(usp_model *m, int l, layer_acts *a, const float *h, const float *dout, float *d_h)
{
    const int64_t C = m->C;
    if (!m->s.tiled_mlp)
        return rows_backward(m, l, m->n, h, a->up, a->act, dout, d_h);
    for (int64_t r = 0; r < m->n; r += m->tile) {
        int64_t rows = m->n - r < m->tile ? m->n - r : m->tile;
        const double start = usp_backend_flops(BE);
        USP_CHECK(hidden(m, l, rows, model_at(m, h, r * C), m->tile_up, m->tile_act));
        m->recompute_flops += usp_backend_flops(BE) - start;
        USP_CHECK(rows_backward(m, l, rows, model_at(m, h, r * C), m->tile_up, m->tile_act, model_at(m, dout, r * C),
                                model_at(m, d_h, r * C)));
    }
    return USP_OK;
}
