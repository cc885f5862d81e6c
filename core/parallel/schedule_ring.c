/* The Ring schedule (ring attention, Liu et al. 2023) on a 1 x R mesh: each rank keeps its queries
 * and its K/V block travels around the ring (core/parallel/ring.h); the layer keeps the global lse
 * for the backward, which reads the caller's q, k, v and o again. --attention sp picks it when U = 1
 * and R > 1. */
#include <math.h>
#include <stdlib.h>

#include "core/parallel/ring.h"
#include "core/parallel/schedule.h"

typedef struct ring_layer {
    usp_backend_t *backend;
    ring_attention *ring;
    float *lse;                         /* [B, H, T] fp32, kept from forward to backward */
    const float *q, *k, *v, *o;         /* the forward's, which the backward reads */
} ring_layer;

static int picks(int ulysses, int ring) { return ulysses == 1 && ring > 1; }

static usp_status check(const usp_schedule_shape *s)
{
    if (s->ulysses != 1)
        return usp_error(USP_ERR_CONFIG, "--attention ring with --ulysses %d: Ring alone runs on --ulysses 1; the "
                         "hybrid runs Ulysses across --ulysses %d and Ring across --ring %d (--attention hybrid, or "
                         "sp)", s->ulysses, s->ulysses, s->ring);
    USP_CHECK(usp_schedule_heads_check(s));
    usp_seq_layout l;
    return s->seq_len > 0 ? usp_seq_layout_make(usp_layout_for(s->causal, s->ring, s->window, s->seq_len), s->seq_len, 1, s->ring, &l)
                          : USP_OK;
}

static usp_layout_kind layout(const usp_schedule_shape *s) { return usp_layout_for(s->causal, s->ring, s->window, s->seq_len); }

static double sent(const usp_schedule_shape *s, int rank, int64_t batch, int64_t head_dim)
{
    (void)rank; /* every ring rank sends as much */
    const int64_t T = s->seq_len / s->ring;
    const int steps = ring_steps(layout(s), s->ring, T, s->causal, s->window);
    return ring_sent(steps, batch, T, s->n_kv_heads, head_dim);
}

static void destroy(void *p)
{
    ring_layer *a = p;
    if (!a)
        return;
    usp_buffer_free(a->backend, a->lse);
    ring_attention_destroy(a->ring);
    free(a);
}

static usp_status create(const usp_schedule_config *c, void **out)
{
    *out = NULL;
    const int R = usp_comm_size(c->ring);
    ring_attention_config rc = {.backend = c->backend, .ring = c->ring, .stream = c->stream, .batch = c->batch,
                                .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim,
                                .causal = c->causal, .scale = c->scale ? c->scale : 1.0f / sqrtf((float)c->head_dim),
                                .storage = c->storage, .eager_merge = c->eager_ring_merge,
                                .backward_overlap = c->ring_backward_overlap, .mask = c->mask};
    USP_CHECK(usp_seq_layout_make(usp_layout_for(c->causal, R, c->layout_window, c->seq_len), c->seq_len, 1, R, &rc.layout));
    ring_layer *a;
    USP_CHECK(usp_calloc((void **)&a, 1, sizeof *a, "ring attention"));
    a->backend = c->backend;
    const size_t lse_bytes = (size_t)(c->batch * c->n_heads * rc.layout.per_rank) * sizeof(float);
    usp_status s = usp_buffer_alloc(c->backend, lse_bytes, "activations", (void **)&a->lse);
    if (s == USP_OK)
        s = ring_attention_create(&rc, &a->ring);
    if (s != USP_OK) {
        destroy(a);
        return s;
    }
    *out = a;
    return USP_OK;
}

static usp_status forward(void *p, const float *q, const float *k, const float *v, float *o)
{
    ring_layer *a = p;
    a->q = q, a->k = k, a->v = v, a->o = o;
    return ring_attention_forward(a->ring, q, k, v, o, a->lse);
}

static usp_status backward(void *p, const float *d_o, float *dq, float *dk, float *dv)
{
    ring_layer *a = p;
    if (!a->q)
        return usp_error(USP_ERR_CONFIG, "ring attention backward before any forward: nothing to differentiate");
    return ring_attention_backward(a->ring, a->q, a->k, a->v, a->o, a->lse, d_o, dq, dk, dv);
}

static int keeps_inputs(const void *a)
{
    (void)a;
    return 0;
}

const usp_schedule_i usp_schedule_ring = {
    .name = "ring",
    .about = "each rank keeps its queries, K/V blocks travel around the ring (--ulysses 1)",
    .exact = 1,
    .picks = picks, .check = check, .layout = layout, .sent = sent, .diagram = "ring",
    .create = create, .forward = forward, .backward = backward, .keeps_inputs = keeps_inputs, .destroy = destroy,
};
