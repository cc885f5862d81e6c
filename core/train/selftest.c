/* The selftest schedule (see selftest.h). Every payload element is a small
 * integer that encodes (source rank, destination rank, tag, index), exact in
 * f32 and f64, so a receiver checks every element and sums have closed forms. */
#include "core/train/selftest.h"

#include <stdlib.h>
#include <string.h>

usp_selftest_config usp_selftest_default(const usp_mesh_shape *shape)
{
    int u = shape->ulysses;
    return (usp_selftest_config){
        .shape = *shape, .layers = 2, .heads = u * ((8 + u - 1) / u), .kv_heads = 2,
        .head_dim = 16, .tokens_per_rank = 32,
    };
}

/* Per-rank state: the groups, two backend buffers and their host mirrors. */
typedef struct selftest {
    const usp_rank_ctx *ctx;
    usp_mesh mesh;
    usp_selftest_stats *stats;
    size_t capacity;        /* elements of each buffer */
    float *dev_send, *dev_recv;
    float *host;
    /* --overlap: the gradient buckets (one per layer), their stream, and its events */
    float *dev_grad;
    size_t bucket_n;
    usp_stream_t *grad_stream;
    usp_event_t *written, *reduced;
} selftest;

static float payload(int src, int dst, int tag, size_t idx)
{
    return (float)(((size_t)src * 31 + (size_t)dst * 17 + (size_t)tag * 7 + idx) % 8191);
}

/* Fills host[0..n) with the payload from this rank to `dst` and copies it to dev_send + at. */
static usp_status put(selftest *t, size_t at, size_t n, int dst, int tag)
{
    for (size_t i = 0; i < n; i++)
        t->host[i] = payload(t->ctx->rank, dst, tag, i);
    return usp_buffer_copy(t->ctx->backend, t->dev_send + at, t->host, n * sizeof(float),
                           USP_COPY_HOST_TO_DEVICE, t->ctx->stream);
}

/* Counts a check; the first wrong one is kept as the rank's error message.
 * The rank goes on as training would: a broken schedule then shows up as the
 * mismatch or deadlock it causes, and wrong data alone as exit code 1. */
static void tally(selftest *t, int ok, const char *what, size_t at, double got, double want)
{
    t->stats->buffers_checked++;
    if (ok)
        return;
    if (t->stats->buffers_wrong++ == 0)
        usp_error(USP_ERR_RUNTIME, "selftest check failed: rank %d, %s: element %zu is %g, expected %g",
                  t->ctx->rank, what, at, got, want);
}

/* Checks dev_recv[at..at+n) against the payload from `src` to `dst`. */
static usp_status expect(selftest *t, size_t at, size_t n, int src, int dst, int tag, const char *what)
{
    if (!usp_backend_has_numerics(t->ctx->backend))
        return USP_OK;
    USP_CHECK(usp_buffer_download(t->ctx->backend, t->host, t->dev_recv + at, n * sizeof(float), t->ctx->stream));
    size_t i = 0;
    while (i < n && t->host[i] == payload(src, dst, tag, i))
        i++;
    t->stats->elements_checked += i;
    tally(t, i == n, what, i, i < n ? t->host[i] : 0, i < n ? payload(src, dst, tag, i) : 0);
    return USP_OK;
}

/* All-to-all of `block` elements per peer on `g`, checked. */
static usp_status exchange(selftest *t, usp_comm_t *g, size_t block, int tag, const char *what)
{
    int n = usp_comm_size(g);
    for (int j = 0; j < n; j++)
        USP_CHECK(put(t, (size_t)j * block, block, usp_comm_world_rank(g, j), tag));
    USP_CHECK(usp_comm_all_to_all(g, t->dev_send, t->dev_recv, block, USP_F32, t->ctx->stream));
    for (int i = 0; i < n; i++)
        USP_CHECK(expect(t, (size_t)i * block, block, usp_comm_world_rank(g, i), t->ctx->rank, tag, what));
    return USP_OK;
}

/* R-1 ring steps: each rank passes on the block it holds, which started at ring rank (r - step). */
static usp_status ring_pass(selftest *t, size_t block, int tag, const char *what)
{
    usp_comm_t *g = t->mesh.ring;
    int n = usp_comm_size(g), me = usp_comm_rank(g);
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    USP_CHECK(put(t, 0, block, 0, tag));
    for (int step = 1; step < n; step++) {
        USP_CHECK(usp_comm_sendrecv(g, t->dev_send, block, next, t->dev_recv, block, prev, USP_F32,
                                    t->ctx->stream));
        int origin = usp_comm_world_rank(g, (me + n - step) % n);
        USP_CHECK(expect(t, 0, block, origin, 0, tag, what));
        USP_CHECK(usp_buffer_copy(t->ctx->backend, t->dev_send, t->dev_recv, block * sizeof(float),
                                  USP_COPY_DEVICE_TO_DEVICE, t->ctx->stream));
    }
    return USP_OK;
}

/* --overlap: layer `layer`'s gradient bucket, all-reduced over the world (the group that shares the
 * gradient) on the gradient stream once the backward has written it, beside the next layer's backward. */
static usp_status bucket_reduce(selftest *t, const usp_selftest_config *c, int layer)
{
    usp_backend_t *be = t->ctx->backend;
    float *bucket = t->dev_grad + (size_t)layer * t->bucket_n;
    for (size_t i = 0; i < t->bucket_n; i++)
        t->host[i] = payload(t->ctx->rank, 0, 200 + layer, i);
    USP_CHECK(usp_buffer_copy(be, bucket, t->host, t->bucket_n * sizeof(float), USP_COPY_HOST_TO_DEVICE,
                              t->ctx->stream));
    USP_CHECK(usp_event_record(be, t->written, t->ctx->stream)); /* the reduction reads what the backward wrote */
    USP_CHECK(usp_stream_wait_event(be, t->grad_stream, t->written));
    USP_CHECK(usp_comm_all_reduce(t->ctx->world, bucket, bucket, t->bucket_n, USP_F32, USP_REDUCE_SUM,
                                  t->grad_stream));
    USP_CHECK(usp_event_record(be, t->reduced, t->grad_stream));
    /* Ordered: the compute stream's next collective waits for this one, so every GPU starts the two in the
     * order they were issued. Unordered, nothing links the streams: each GPU starts whichever is ready. */
    if (c->overlap == USP_SELFTEST_OVERLAP_ORDERED)
        USP_CHECK(usp_stream_wait_event(be, t->ctx->stream, t->reduced));
    return USP_OK;
}

static usp_status check_sum(selftest *t, const float *dev, usp_comm_t *g, size_t n, int tag, const char *what);

/* --overlap: after the backward, the compute stream waits for the last bucket, and every bucket holds the
 * sum over the world. */
static usp_status check_buckets(selftest *t, const usp_selftest_config *c)
{
    USP_CHECK(usp_stream_wait_event(t->ctx->backend, t->ctx->stream, t->reduced));
    for (int layer = 0; layer < c->layers; layer++)
        USP_CHECK(check_sum(t, t->dev_grad + (size_t)layer * t->bucket_n, t->ctx->world, t->bucket_n, 200 + layer,
                            "gradient bucket all-reduce"));
    return USP_OK;
}

static usp_status attention_layers(selftest *t, const usp_selftest_config *c)
{
    const int U = c->shape.ulysses;
    size_t tokens = (size_t)c->tokens_per_rank, d = (size_t)c->head_dim;
    size_t kv_heads_here = c->kv_heads >= U ? (size_t)(c->kv_heads / U) : 1; /* GQA: replicate when U > kv heads */
    size_t qkv_block = tokens * d * ((size_t)c->heads / U + 2 * kv_heads_here);
    size_t o_block = tokens * d * ((size_t)c->heads / U);
    size_t kv_ring_block = (size_t)U * tokens * d * 2 * kv_heads_here;
    for (int layer = 0; layer < c->layers; layer++) {
        int tag = 100 * layer;
        USP_CHECK(exchange(t, t->mesh.ulysses, qkv_block, tag + 1, "ulysses all-to-all of Q/K/V"));
        USP_CHECK(ring_pass(t, kv_ring_block, tag + 2, "ring step of K/V"));
        USP_CHECK(exchange(t, t->mesh.ulysses, o_block, tag + 3, "ulysses all-to-all of the output"));
    }
    for (int layer = c->layers - 1; layer >= 0; layer--) {
        int tag = 100 * layer + 50;
        USP_CHECK(exchange(t, t->mesh.ulysses, o_block, tag + 1, "ulysses all-to-all of dO"));
        USP_CHECK(ring_pass(t, kv_ring_block, tag + 2, "ring step of dK/dV"));
        USP_CHECK(exchange(t, t->mesh.ulysses, qkv_block, tag + 3, "ulysses all-to-all of dQ/dK/dV"));
        if (c->overlap != USP_SELFTEST_OVERLAP_NONE)
            USP_CHECK(bucket_reduce(t, c, layer));
    }
    return c->overlap != USP_SELFTEST_OVERLAP_NONE && c->layers > 0 ? check_buckets(t, c) : USP_OK;
}

/* Sum over the members of g of payload(world rank, 0, tag, i). */
static float group_sum(usp_comm_t *g, int tag, size_t i)
{
    float sum = 0;
    for (int j = 0; j < usp_comm_size(g); j++)
        sum += payload(usp_comm_world_rank(g, j), 0, tag, i);
    return sum;
}

/* Checks dev[0..n) against the sum over g's members of their payloads tagged `tag`. */
static usp_status check_sum(selftest *t, const float *dev, usp_comm_t *g, size_t n, int tag, const char *what)
{
    USP_CHECK(usp_buffer_download(t->ctx->backend, t->host, dev, n * sizeof(float), t->ctx->stream));
    size_t i = 0;
    while (i < n && usp_backend_has_numerics(t->ctx->backend) && t->host[i] == group_sum(g, tag, i))
        i++;
    t->stats->elements_checked += i;
    tally(t, i == n || !usp_backend_has_numerics(t->ctx->backend), what, i, i < n ? t->host[i] : 0,
          i < n ? group_sum(g, tag, i) : 0);
    return USP_OK;
}

/* Loss and token count over sp (f64, i64), gradients over sp and then dp (f32). */
static usp_status reductions(selftest *t, size_t grad_n)
{
    usp_backend_t *be = t->ctx->backend;
    usp_stream_t *st = t->ctx->stream;
    double loss = (double)payload(t->ctx->rank, 0, 7, 0);
    int64_t tokens = (int64_t)t->ctx->rank + 1;
    USP_CHECK(usp_buffer_copy(be, t->dev_send, &loss, sizeof loss, USP_COPY_HOST_TO_DEVICE, st));
    USP_CHECK(usp_comm_all_reduce(t->mesh.sp, t->dev_send, t->dev_recv, 1, USP_F64, USP_REDUCE_SUM, st));
    USP_CHECK(usp_buffer_download(be, &loss, t->dev_recv, sizeof loss, st));
    USP_CHECK(usp_buffer_copy(be, t->dev_send, &tokens, sizeof tokens, USP_COPY_HOST_TO_DEVICE, st));
    USP_CHECK(usp_comm_all_reduce(t->mesh.sp, t->dev_send, t->dev_recv, 1, USP_I64, USP_REDUCE_SUM, st));
    USP_CHECK(usp_buffer_download(be, &tokens, t->dev_recv, sizeof tokens, st));
    int64_t want_tokens = 0;
    for (int j = 0; j < usp_comm_size(t->mesh.sp); j++)
        want_tokens += usp_comm_world_rank(t->mesh.sp, j) + 1;
    if (usp_backend_has_numerics(be)) {
        tally(t, loss == (double)group_sum(t->mesh.sp, 7, 0), "loss all-reduce over sp", 0, loss,
              group_sum(t->mesh.sp, 7, 0));
        tally(t, tokens == want_tokens, "token count all-reduce over sp", 0, (double)tokens, (double)want_tokens);
    }

    /* gradients: in place over sp, then over dp; the result is the sum over the world */
    USP_CHECK(put(t, 0, grad_n, 0, 8));
    USP_CHECK(usp_comm_all_reduce(t->mesh.sp, t->dev_send, t->dev_send, grad_n, USP_F32, USP_REDUCE_SUM, st));
    USP_CHECK(usp_comm_all_reduce(t->mesh.dp, t->dev_send, t->dev_recv, grad_n, USP_F32, USP_REDUCE_SUM, st));
    return check_sum(t, t->dev_recv, t->ctx->world, grad_n, 8, "gradient all-reduce over sp then dp");
}

/* ZeRO-style: reduce-scatter the gradients over dp, all-gather them back. */
static usp_status sharded(selftest *t, size_t shard)
{
    usp_comm_t *dp = t->mesh.dp;
    size_t n = (size_t)usp_comm_size(dp);
    USP_CHECK(put(t, 0, n * shard, 0, 9));
    USP_CHECK(usp_comm_reduce_scatter(dp, t->dev_send, t->dev_recv, shard, USP_F32, USP_REDUCE_SUM, t->ctx->stream));
    USP_CHECK(usp_buffer_download(t->ctx->backend, t->host, t->dev_recv, shard * sizeof(float), t->ctx->stream));
    size_t first = (size_t)usp_comm_rank(dp) * shard, i = 0;
    while (i < shard && usp_backend_has_numerics(t->ctx->backend) && t->host[i] == group_sum(dp, 9, first + i))
        i++;
    tally(t, i == shard || !usp_backend_has_numerics(t->ctx->backend), "reduce_scatter over dp", i,
          i < shard ? t->host[i] : 0, i < shard ? group_sum(dp, 9, first + i) : 0);
    USP_CHECK(usp_buffer_copy(t->ctx->backend, t->dev_send, t->dev_recv, shard * sizeof(float),
                              USP_COPY_DEVICE_TO_DEVICE, t->ctx->stream));
    USP_CHECK(usp_comm_all_gather(dp, t->dev_send, t->dev_recv, shard, USP_F32, t->ctx->stream));
    t->stats->elements_checked += i;
    return check_sum(t, t->dev_recv, dp, n * shard, 9, "all_gather after reduce_scatter");
}

/* A broadcast from the last rank, then the max of the ranks' ids over the world. */
static usp_status world_ops(selftest *t, size_t n)
{
    usp_comm_t *w = t->ctx->world;
    int root = usp_comm_size(w) - 1;
    USP_CHECK(put(t, 0, n, 0, 10));
    USP_CHECK(usp_comm_broadcast(w, t->dev_send, t->dev_recv, n, USP_F32, root, t->ctx->stream));
    USP_CHECK(expect(t, 0, n, root, 0, 10, "broadcast from the last rank"));
    double id = (double)t->ctx->rank;
    USP_CHECK(usp_buffer_copy(t->ctx->backend, t->dev_send, &id, sizeof id, USP_COPY_HOST_TO_DEVICE, t->ctx->stream));
    USP_CHECK(usp_comm_all_reduce(w, t->dev_send, t->dev_recv, 1, USP_F64, USP_REDUCE_MAX, t->ctx->stream));
    USP_CHECK(usp_buffer_download(t->ctx->backend, &id, t->dev_recv, sizeof id, t->ctx->stream));
    if (usp_backend_has_numerics(t->ctx->backend))
        tally(t, id == (double)root, "max all-reduce over the world", 0, id, root);
    return USP_OK;
}

/* Uneven heads: rank i sends ((i + 2j) % 3) * unit elements to rank j, zero included. */
static usp_status uneven(selftest *t, size_t unit)
{
    usp_comm_t *g = t->mesh.ulysses;
    int n = usp_comm_size(g), me = usp_comm_rank(g);
    size_t *a = calloc(4 * (size_t)n, sizeof *a);
    if (!a)
        return usp_error(USP_ERR_RUNTIME, "out of memory in the selftest");
    size_t *sc = a, *so = a + n, *rc = a + 2 * n, *ro = a + 3 * n, s_at = 0, r_at = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = (size_t)((me + 2 * j) % 3) * unit, so[j] = s_at, s_at += sc[j];
        rc[j] = (size_t)((j + 2 * me) % 3) * unit, ro[j] = r_at, r_at += rc[j];
    }
    usp_status s = USP_OK;
    for (int j = 0; j < n && s == USP_OK; j++)
        s = put(t, so[j], sc[j], usp_comm_world_rank(g, j), 11);
    if (s == USP_OK)
        s = usp_comm_all_to_all_v(g, t->dev_send, sc, so, t->dev_recv, rc, ro, USP_F32, t->ctx->stream);
    for (int j = 0; j < n && s == USP_OK; j++)
        s = expect(t, ro[j], rc[j], usp_comm_world_rank(g, j), t->ctx->rank, 11, "all_to_all_v with uneven counts");
    free(a);
    return s;
}

/* Point to point in pairs (0,1), (2,3), ...: the even rank sends first, then the odd one. */
static usp_status pairs(selftest *t, size_t n)
{
    usp_comm_t *w = t->ctx->world;
    int me = t->ctx->rank, partner = me ^ 1;
    if (partner >= usp_comm_size(w))
        return USP_OK;
    for (int round = 0; round < 2; round++) {
        if ((me & 1) == round) {
            USP_CHECK(put(t, 0, n, partner, 12 + round));
            USP_CHECK(usp_comm_send(w, t->dev_send, n, USP_F32, partner, t->ctx->stream));
        } else {
            USP_CHECK(usp_comm_recv(w, t->dev_recv, n, USP_F32, partner, t->ctx->stream));
            USP_CHECK(expect(t, 0, n, partner, me, 12 + round, "point-to-point"));
        }
    }
    return USP_OK;
}

static usp_status run_schedule(selftest *t, const usp_selftest_config *c)
{
    size_t small = (size_t)c->tokens_per_rank * (size_t)c->head_dim;
    USP_CHECK(attention_layers(t, c));
    USP_CHECK(reductions(t, 4 * small));
    USP_CHECK(sharded(t, small));
    USP_CHECK(world_ops(t, small));
    USP_CHECK(uneven(t, small));
    USP_CHECK(pairs(t, small));
    USP_CHECK(usp_comm_barrier(t->ctx->world, t->ctx->stream));
    t->stats->end_s = t->ctx->clock ? t->ctx->clock(t->ctx->runtime) : 0;
    t->stats->peak_bytes = usp_backend_peak_bytes(t->ctx->backend);
    return USP_OK;
}

usp_status usp_selftest_rank(const usp_rank_ctx *ctx, void *arg)
{
    usp_selftest_run *run = arg;
    const usp_selftest_config *c = &run->config;
    if (c->heads % c->shape.ulysses != 0)
        return usp_error(USP_ERR_CONFIG, "selftest: %d heads do not divide by --ulysses %d", c->heads,
                         c->shape.ulysses);
    usp_selftest_stats mine = {0};
    selftest t = {.ctx = ctx, .stats = &mine};
    size_t U = (size_t)c->shape.ulysses, tokens = (size_t)c->tokens_per_rank, d = (size_t)c->head_dim;
    size_t kv = (size_t)(c->kv_heads >= (int)U ? c->kv_heads / (int)U : 1);
    size_t biggest = U * tokens * d * ((size_t)c->heads / U + 2 * kv);  /* the Q/K/V all-to-all */
    size_t other = (size_t)c->shape.world * tokens * d * 4;              /* gradients, all-gather, uneven */
    t.capacity = biggest > other ? biggest : other;
    usp_status s;
    USP_CHECK(usp_mesh_create(ctx->world, &c->shape, &t.mesh));
    USP_CHECK_GOTO(usp_buffer_alloc(ctx->backend, t.capacity * sizeof(float), "comm", (void **)&t.dev_send), s, done);
    USP_CHECK_GOTO(usp_buffer_alloc(ctx->backend, t.capacity * sizeof(float), "comm", (void **)&t.dev_recv), s, done);
    USP_CHECK_GOTO(usp_malloc((void **)&t.host, t.capacity * sizeof(float), "selftest host buffer"), s, done);
    if (c->overlap != USP_SELFTEST_OVERLAP_NONE) {
        t.bucket_n = tokens * d * 4; /* at most `other` above: the host buffer holds one */
        USP_CHECK_GOTO(usp_buffer_alloc(ctx->backend, ((size_t)c->layers + 1) * t.bucket_n * sizeof(float), "grad",
                                        (void **)&t.dev_grad), s, done);
        USP_CHECK_GOTO(usp_stream_create(ctx->backend, &t.grad_stream), s, done);
        USP_CHECK_GOTO(usp_event_create(ctx->backend, &t.written), s, done);
        USP_CHECK_GOTO(usp_event_create(ctx->backend, &t.reduced), s, done);
    }
    s = run_schedule(&t, c);
    if (s == USP_OK) /* every rank got here: a wrong check does not stop a rank */
        s = usp_rank_gather(ctx, &mine, sizeof mine, run->stats);
    if (s == USP_OK && mine.buffers_wrong)
        s = USP_ERR_RUNTIME; /* the message of the first wrong check is still in this rank's error slot */
done:
    if (t.grad_stream) /* it synchronises: nothing is left in flight on the buffers freed below */
        (void)usp_stream_destroy(ctx->backend, t.grad_stream);
    if (t.written)
        usp_event_destroy(ctx->backend, t.written);
    if (t.reduced)
        usp_event_destroy(ctx->backend, t.reduced);
    usp_buffer_free(ctx->backend, t.dev_grad);
    free(t.host);
    usp_buffer_free(ctx->backend, t.dev_send);
    usp_buffer_free(ctx->backend, t.dev_recv);
    usp_mesh_destroy(&t.mesh);
    return s;
}
