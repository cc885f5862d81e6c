/* The model's own buffers (model_internal.h): every activation, gradient and
 * scratch buffer is allocated here and listed, so usp_model_destroy frees
 * them all and the layers, the MLP and the head never track ownership. */
#include <stdlib.h>

#include "core/model/model_internal.h"

usp_status model_buffer_as(usp_model *m, float **p, int64_t elems, usp_dtype storage, const char *category)
{
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        float **grown = realloc(m->owned, (size_t)cap * sizeof *grown);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory for the model's buffer list");
        m->owned = grown;
        m->cap_owned = cap;
    }
    USP_CHECK(usp_buffer_alloc_as(BE, (size_t)(elems > 0 ? elems : 1), storage, category, (void **)p));
    m->owned[m->n_owned++] = *p;
    return USP_OK;
}

usp_status model_buffer(usp_model *m, float **p, int64_t elems, const char *category)
{
    return model_buffer_as(m, p, elems, USP_F32, category);
}

float *model_at(const usp_model *m, const float *p, int64_t index)
{
    return usp_buffer_at(BE, p, (size_t)index);
}

usp_status model_tensor(usp_model *m, float **p, int64_t elems, const char *category)
{
    return model_buffer_as(m, p, elems, m->s.storage, category);
}
