/* One attention layer on a runtime (see attention_run.h). */
#include "viz/attention_run.h"

#include <stdlib.h>

#include "core/parallel/layout.h"
#include "core/parallel/schedule.h"

usp_status viz_attention_check(const viz_attention_config *c)
{
    const usp_mesh_shape *m = &c->shape;
    if (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads != 0)
        return usp_error(USP_ERR_CONFIG, "--heads %lld with --kv-heads %lld: the KV heads must divide the heads "
                         "(e.g. --kv-heads %lld)", (long long)c->n_heads, (long long)c->n_kv_heads,
                         (long long)c->n_heads);
    if (m->ulysses > c->n_heads)
        return usp_error(USP_ERR_CONFIG, "--ulysses %d is larger than --heads %lld: some ranks would have no head; "
                         "use --ulysses <= %lld or add --ring", m->ulysses, (long long)c->n_heads,
                         (long long)c->n_heads);
    const usp_schedule_shape shape = {.ulysses = m->ulysses, .ring = m->ring, .seq_len = c->seq_len,
                                      .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .causal = c->causal};
    const usp_schedule_i *schedule;
    return usp_schedule_resolve("sp", &shape, &schedule);
}

/* A value of q, k or v: small, distinct per (rank, tensor, index), exact in f32. */
static float input_value(int rank, int tensor, size_t i)
{
    return (float)((int)(((size_t)rank * 7 + (size_t)tensor * 3 + i) % 17) - 8) / 8.0f;
}

static usp_status upload_input(const usp_rank_ctx *ctx, int tensor, size_t elems, float **dev)
{
    float *host;
    USP_CHECK(usp_malloc((void **)&host, elems * sizeof *host, "viz attention input"));
    for (size_t i = 0; i < elems; i++)
        host[i] = input_value(ctx->rank, tensor, i);
    usp_status s = usp_buffer_alloc(ctx->backend, elems * sizeof *host, "activations", (void **)dev);
    if (s == USP_OK)
        s = usp_buffer_copy(ctx->backend, *dev, host, elems * sizeof *host, USP_COPY_HOST_TO_DEVICE, ctx->stream);
    free(host);
    return s;
}

static usp_status attention_rank(const usp_rank_ctx *ctx, void *arg)
{
    const viz_attention_config *c = arg;
    usp_mesh mesh;
    USP_CHECK(usp_mesh_create(ctx->world, &c->shape, &mesh));
    const usp_schedule_config sc = {
        .backend = ctx->backend, .stream = ctx->stream, .ulysses = mesh.ulysses, .ring = mesh.ring,
        .batch = c->batch, .seq_len = c->seq_len, .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads,
        .head_dim = c->head_dim, .causal = c->causal,
    };
    usp_attention *a = NULL;
    float *q = NULL, *k = NULL, *v = NULL, *o = NULL;
    usp_status s;
    USP_CHECK_GOTO(usp_attention_create(usp_schedule_for_mesh(c->shape.ulysses, c->shape.ring), &sc, &a), s, done);
    /* q, o [B, T, H, D]; k, v [B, T, Hkv, D] for this rank's T tokens */
    size_t T = (size_t)usp_attention_layout(a)->per_rank, B = (size_t)c->batch, D = (size_t)c->head_dim;
    size_t q_elems = B * T * (size_t)c->n_heads * D, kv_elems = B * T * (size_t)c->n_kv_heads * D;
    USP_CHECK_GOTO(upload_input(ctx, 0, q_elems, &q), s, done);
    USP_CHECK_GOTO(upload_input(ctx, 1, kv_elems, &k), s, done);
    USP_CHECK_GOTO(upload_input(ctx, 2, kv_elems, &v), s, done);
    USP_CHECK_GOTO(usp_buffer_alloc(ctx->backend, q_elems * sizeof(float), "activations", (void **)&o), s, done);
    s = usp_attention_forward(a, q, k, v, o);
done:
    usp_buffer_free(ctx->backend, q);
    usp_buffer_free(ctx->backend, k);
    usp_buffer_free(ctx->backend, v);
    usp_buffer_free(ctx->backend, o);
    usp_attention_destroy(a);
    usp_mesh_destroy(&mesh);
    return s;
}

usp_status viz_attention_run(const viz_attention_config *c, usp_runtime_t *rt)
{
    USP_CHECK(viz_attention_check(c));
    if (usp_runtime_world_size(rt) != c->shape.world)
        return usp_error(USP_ERR_CONFIG, "the %s runtime has %d ranks, the layer's mesh %d", usp_runtime_name(rt),
                         usp_runtime_world_size(rt), c->shape.world);
    return usp_runtime_run(rt, attention_rank, (void *)c);
}
