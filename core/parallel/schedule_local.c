/* Local attention: each rank attends to its own T tokens only, no communication (tutorial 04's
 * control: what the model learns without attention across shards). Named only (--attention local):
 * the mesh picks the schedules that see the whole sequence. */
#include <math.h>
#include <stdlib.h>

#include "core/parallel/schedule.h"

typedef struct local_layer {
    usp_backend_t *backend;
    usp_stream_t *stream;
    usp_attention_shape shape;  /* [B, T] queries against the same T keys, causal */
    float *lse;                 /* [B, H, T] fp32, kept from forward to backward */
    const float *q, *k, *v, *o; /* the forward's, which the backward reads */
} local_layer;

static usp_status check(const usp_schedule_shape *s)
{
    USP_CHECK(usp_schedule_heads_check(s));
    usp_seq_layout l;
    return s->seq_len > 0 ? usp_seq_layout_make(USP_LAYOUT_CONTIGUOUS, s->seq_len, s->ulysses, s->ring, &l) : USP_OK;
}

static usp_layout_kind layout(const usp_schedule_shape *s)
{
    (void)s;
    return USP_LAYOUT_CONTIGUOUS;
}

static double sent(const usp_schedule_shape *s, int rank, int64_t batch, int64_t head_dim)
{
    (void)s, (void)rank, (void)batch, (void)head_dim;
    return 0.0;
}

static void destroy(void *p)
{
    local_layer *a = p;
    if (!a)
        return;
    usp_buffer_free(a->backend, a->lse);
    free(a);
}

static usp_status create(const usp_schedule_config *c, void **out)
{
    *out = NULL;
    const int ranks = (c->ulysses ? usp_comm_size(c->ulysses) : 1) * (c->ring ? usp_comm_size(c->ring) : 1);
    const int64_t T = c->seq_len / ranks;
    local_layer *a;
    USP_CHECK(usp_calloc((void **)&a, 1, sizeof *a, "local attention"));
    a->backend = c->backend, a->stream = c->stream;
    /* this rank's shard of the contiguous layout: positions [first, first + T), which the mask reads */
    const int64_t first = T * ((c->ring ? usp_comm_rank(c->ring) : 0) * (c->ulysses ? usp_comm_size(c->ulysses) : 1) +
                               (c->ulysses ? usp_comm_rank(c->ulysses) : 0));
    a->shape = (usp_attention_shape){.batch = c->batch, .n_q = T, .n_kv = T, .n_heads = c->n_heads,
                                     .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim, .q_offset = first,
                                     .kv_offset = first, .causal = c->causal,
                                     .scale = c->scale ? c->scale : 1.0f / sqrtf((float)c->head_dim)};
    usp_attention_shape_mask(&a->shape, &c->mask, c->seq_len, 0);
    usp_status s = usp_buffer_alloc(c->backend, (size_t)(c->batch * c->n_heads * T) * sizeof(float), "activations",
                                    (void **)&a->lse);
    if (s != USP_OK) {
        destroy(a);
        return s;
    }
    *out = a;
    return USP_OK;
}

static usp_status forward(void *p, const float *q, const float *k, const float *v, float *o)
{
    local_layer *a = p;
    a->q = q, a->k = k, a->v = v, a->o = o;
    return usp_flash_attention_forward(a->backend, &a->shape, q, k, v, o, a->lse, a->stream);
}

static usp_status backward(void *p, const float *d_o, float *dq, float *dk, float *dv)
{
    local_layer *a = p;
    if (!a->q)
        return usp_error(USP_ERR_CONFIG, "local attention backward before any forward: nothing to differentiate");
    return usp_flash_attention_backward(a->backend, &a->shape, a->q, a->k, a->v, a->o, a->lse, d_o, dq, dk, dv, 0,
                                        a->stream);
}

static int keeps_inputs(const void *a)
{
    (void)a;
    return 0;
}

const usp_schedule_i usp_schedule_local = {
    .name = "local",
    .about = "each rank attends to its own tokens only: no communication (a control, not sequence parallelism)",
    .exact = 0,
    .picks = NULL, .check = check, .layout = layout, .sent = sent, .diagram = NULL,
    .create = create, .forward = forward, .backward = backward, .keeps_inputs = keeps_inputs, .destroy = destroy,
};
