/* Where the model's code finds a tensor's weights and gradient
 * (model_internal.h): by (kind, layer) in the parameter store, and the
 * brackets around a bucket's use that let the store gather and release
 * sharded weights (ZeRO 3) and reduce gradients as backward closes them. */
#include "core/model/model_internal.h"

/* model_param and model_grad look tensors up on every call: index them by (layer, kind) once. */
usp_status model_index_tensors(usp_model *m)
{
    USP_CHECK(usp_calloc((void **)&m->tensor_of, (size_t)(m->c.n_layer + 1) * USP_P_KIND_COUNT, sizeof *m->tensor_of,
                         "the tensor index"));
    for (int i = 0; i < m->table.n; i++) {
        const usp_param_tensor *t = &m->table.tensors[i];
        m->tensor_of[(t->layer + 1) * USP_P_KIND_COUNT + t->kind] = t;
    }
    return USP_OK;
}

static const usp_param_tensor *tensor(const usp_model *m, usp_param_kind kind, int layer)
{
    return m->tensor_of[(layer + 1) * USP_P_KIND_COUNT + kind];
}

const float *model_param(const usp_model *m, usp_param_kind kind, int layer)
{
    const usp_param_tensor *t = tensor(m, kind, layer);
    return t ? usp_param_store_tensor_weights(m->store, t) : NULL;
}

float *model_grad(const usp_model *m, usp_param_kind kind, int layer)
{
    const usp_param_tensor *t = tensor(m, kind, layer);
    return t ? usp_param_store_tensor_grads(m->store, t) : NULL;
}

usp_status model_use_weights(usp_model *m, int layer)
{
    return usp_param_store_weights(m->store, usp_param_store_bucket(m->store, layer));
}

usp_status model_drop_weights(usp_model *m, int layer)
{
    return usp_param_store_weights_done(m->store, usp_param_store_bucket(m->store, layer));
}

usp_status model_open_grads(usp_model *m, int layer)
{
    return usp_param_store_grads(m->store, usp_param_store_bucket(m->store, layer));
}

usp_status model_close_grads(usp_model *m, int layer)
{
    return usp_param_store_grads_done(m->store, usp_param_store_bucket(m->store, layer));
}
