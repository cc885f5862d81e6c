/* Gradients reduced during backward on a stream of their own: all-reduced in buckets, or reduce-scattered
 * store bucket by store bucket (see grad_buckets.h). */
#include "core/model/grad_buckets.h"

#include <stdlib.h>

typedef struct bucket_span {
    int first_part, last_part; /* parts first_part .. last_part (table order) */
    int64_t start, len;        /* its range of the gradient, in elements */
} bucket_span;

struct usp_grad_buckets {
    usp_grad_buckets_config c;
    bucket_span *buckets;   /* [n_buckets], from the head down: the order they are launched in */
    int n_buckets;
    int *bucket_of;         /* [n_parts] */
    unsigned char *done;    /* [n_parts]: backward has finished the part since the last begin */
    int next;               /* the next bucket to launch */
    int in_flight;          /* launched buckets the compute stream has not waited for */
    usp_stream_t *comm;     /* NULL on backends that complete every op at once */
    usp_event_t *ready, *finished;
    int calls;              /* all-reduces launched since the last begin, and their bytes */
    int64_t bytes;
    float *work, *sum, *shard; /* a reduce-scatter in flight: its input, and where its shard goes (sum: to be */
    size_t shard_count;        /* added into shard), kept until the compute stream has waited for it */
    float *low, *low_shard;    /* --grad-reduce bf16: a bucket's (or a scatter's input's) bf16 copy, and the bf16
                                  shard a reduce-scatter delivers; sized for the largest, reused in stream order */
    void **unsafe_to_free;     /* tests skipping the wait: buffers a late delivery may still write, freed at */
    int n_unsafe, cap_unsafe;  /* destroy, after the comm stream has drained */
};

static unsigned skipped_waits; /* usp_grad_buckets_skip_waits_for_tests */

void usp_grad_buckets_skip_waits_for_tests(unsigned mask) { skipped_waits = mask; }

/* Buckets from the last part down, each within the cap unless one part exceeds it. */
static usp_status group_parts(usp_grad_buckets *g)
{
    const usp_grad_buckets_config *c = &g->c;
    const int64_t cap = c->cap_bytes > 0 ? c->cap_bytes : USP_GRAD_BUCKET_DEFAULT_BYTES;
    const int64_t elem = (int64_t)usp_dtype_size(c->storage); /* the cap counts the gradient's own bytes */
    USP_CHECK(usp_calloc((void **)&g->buckets, (size_t)c->n_parts, sizeof *g->buckets, "gradient buckets"));
    USP_CHECK(usp_calloc((void **)&g->bucket_of, (size_t)c->n_parts, sizeof *g->bucket_of, "gradient buckets"));
    USP_CHECK(usp_calloc((void **)&g->done, (size_t)c->n_parts, 1, "gradient buckets"));
    for (int p = c->n_parts - 1; p >= 0; p--) {
        bucket_span *b = g->n_buckets > 0 ? &g->buckets[g->n_buckets - 1] : NULL;
        if (!b || (b->len + c->part_len[p]) * elem > cap) {
            b = &g->buckets[g->n_buckets++];
            *b = (bucket_span){.last_part = p, .start = c->part_start[p] + c->part_len[p]};
        }
        USP_ASSERT(c->part_len[p] == 0 || c->part_start[p] + c->part_len[p] == b->start,
                   "gradient part %d does not end where the bucket above it starts", p);
        b->first_part = p, b->len += c->part_len[p];
        b->start = c->part_len[p] > 0 ? c->part_start[p] : b->start;
        g->bucket_of[p] = g->n_buckets - 1;
    }
    return USP_OK;
}

/* The bf16 scratch of a reduction in another dtype: the largest bucket (all-reduce) or the largest part's
 * padded shards over the group (reduce-scatter, whose input is W shards of ceil(len / W)). */
static usp_status alloc_low(usp_grad_buckets *g)
{
    const int64_t W = usp_comm_size(g->c.group);
    int64_t most = 1, shard = 1;
    for (int k = 0; k < g->n_buckets; k++)
        most = g->buckets[k].len > most ? g->buckets[k].len : most;
    for (int p = 0; p < g->c.n_parts; p++) {
        const int64_t s = (g->c.part_len[p] + W - 1) / W;
        shard = s > shard ? s : shard;
    }
    most = shard * W > most ? shard * W : most;
    USP_CHECK(usp_buffer_alloc_as(g->c.backend, (size_t)most, g->c.reduce, "comm", (void **)&g->low));
    return usp_buffer_alloc_as(g->c.backend, (size_t)shard, g->c.reduce, "comm", (void **)&g->low_shard);
}

usp_status usp_grad_buckets_create(const usp_grad_buckets_config *c, usp_grad_buckets **out)
{
    *out = NULL;
    usp_grad_buckets *g;
    USP_CHECK(usp_calloc((void **)&g, 1, sizeof *g, "gradient buckets"));
    g->c = *c;
    if (g->c.reduce == USP_F32)
        g->c.reduce = c->storage;
    usp_status s = group_parts(g);
    if (s == USP_OK && g->c.reduce != c->storage)
        s = alloc_low(g);
    if (s == USP_OK)
        s = usp_stream_create(c->backend, &g->comm);
    if (s == USP_OK)
        s = usp_event_create(c->backend, &g->ready);
    if (s == USP_OK)
        s = usp_event_create(c->backend, &g->finished);
    if (s != USP_OK) {
        usp_grad_buckets_destroy(g);
        return s;
    }
    *out = g;
    return USP_OK;
}

/* Frees a buffer the comm stream used, once the compute stream has waited for it; a test that skipped the
 * wait keeps it until destroy, so that the data arriving late land in live memory (the test looks at the
 * wrong values, not at memory reused). */
static usp_status release(usp_grad_buckets *g, void *buffer, int waited)
{
    if (waited || !buffer) {
        usp_buffer_free(g->c.backend, buffer);
        return USP_OK;
    }
    if (g->n_unsafe == g->cap_unsafe) {
        int cap = g->cap_unsafe ? 2 * g->cap_unsafe : 16;
        void **grown = realloc(g->unsafe_to_free, (size_t)cap * sizeof *grown);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory keeping a gradient buffer");
        g->unsafe_to_free = grown, g->cap_unsafe = cap;
    }
    g->unsafe_to_free[g->n_unsafe++] = buffer;
    return USP_OK;
}

/* After the compute stream has waited for a reduce-scatter: its shard added in (accumulating), its buffers freed. */
static usp_status complete_scatter(usp_grad_buckets *g, int waited)
{
    usp_status s = USP_OK;
    if (g->sum)
        s = usp_accumulate_2d(g->c.backend, g->shard, g->shard_count, g->sum, g->shard_count, g->shard_count, 1,
                              g->c.stream);
    usp_status r = release(g, g->sum, waited);
    usp_status w = release(g, g->work, waited);
    g->work = g->sum = g->shard = NULL;
    return s != USP_OK ? s : r != USP_OK ? r : w;
}

/* The compute stream waits for every call launched so far (the comm stream runs them in order). */
static usp_status join(usp_grad_buckets *g, int skippable)
{
    if (!g->in_flight)
        return USP_OK;
    g->in_flight = 0;
    USP_CHECK(usp_event_record(g->c.backend, g->finished, g->comm));
    const int wait = !(skippable && (skipped_waits & 2));
    if (wait)
        USP_CHECK(usp_stream_wait_event(g->c.backend, g->c.stream, g->finished));
    return complete_scatter(g, wait);
}

void usp_grad_buckets_destroy(usp_grad_buckets *g)
{
    if (!g)
        return;
    (void)join(g, 0); /* the buffers the calls use outlive them */
    usp_event_destroy(g->c.backend, g->ready);
    usp_event_destroy(g->c.backend, g->finished);
    (void)usp_stream_destroy(g->c.backend, g->comm); /* drains it: nothing arrives after */
    for (int i = 0; i < g->n_unsafe; i++)
        usp_buffer_free(g->c.backend, g->unsafe_to_free[i]);
    usp_buffer_free(g->c.backend, g->low);
    usp_buffer_free(g->c.backend, g->low_shard);
    free(g->unsafe_to_free);
    free(g->buckets), free(g->bucket_of), free(g->done);
    free(g);
}

usp_status usp_grad_buckets_begin(usp_grad_buckets *g)
{
    USP_CHECK(join(g, 1));
    for (int p = 0; p < g->c.n_parts; p++)
        g->done[p] = 0;
    g->next = 0, g->calls = 0, g->bytes = 0;
    return USP_OK;
}

/* The next bucket's all-reduce on the comm stream, after the gradient writes enqueued so far. */
static usp_status launch_next(usp_grad_buckets *g)
{
    const bucket_span *b = &g->buckets[g->next++];
    if (b->len == 0)
        return USP_OK;
    usp_stream_t *on = g->comm ? g->comm : g->c.stream;
    USP_CHECK(usp_event_record(g->c.backend, g->ready, g->c.stream));
    if (!(skipped_waits & 1))
        USP_CHECK(usp_stream_wait_event(g->c.backend, on, g->ready));
    float *at = usp_elem_at(g->c.grads, g->c.storage, (size_t)b->start), *sum = g->low ? g->low : at;
    if (g->low)
        USP_CHECK(usp_buffer_convert(g->c.backend, g->low, at, (size_t)b->len, on));
    USP_CHECK(usp_comm_all_reduce(g->c.group, sum, sum, (size_t)b->len, g->c.reduce, USP_REDUCE_SUM, on));
    if (g->low)
        USP_CHECK(usp_buffer_convert(g->c.backend, at, g->low, (size_t)b->len, on));
    g->in_flight = 1, g->calls++;
    g->bytes += b->len * (int64_t)usp_dtype_size(g->c.reduce);
    return USP_OK;
}

static int bucket_complete(const usp_grad_buckets *g, int k)
{
    for (int p = g->buckets[k].first_part; p <= g->buckets[k].last_part; p++)
        if (!g->done[p])
            return 0;
    return 1;
}

usp_status usp_grad_buckets_part_done(usp_grad_buckets *g, int part)
{
    USP_ASSERT(part >= 0 && part < g->c.n_parts, "gradient part %d of %d", part, g->c.n_parts);
    if (g->bucket_of[part] < g->next) /* its sum is under way: a write now would race with it */
        return usp_error(USP_ERR_RUNTIME, "gradient part %d was written again after its bucket was all-reduced "
                         "in this backward", part);
    g->done[part] = 1;
    while (g->next < g->n_buckets && bucket_complete(g, g->next))
        USP_CHECK(launch_next(g));
    return USP_OK;
}

usp_status usp_grad_buckets_finish(usp_grad_buckets *g)
{
    while (g->next < g->n_buckets)
        USP_CHECK(launch_next(g));
    return join(g, 1);
}

usp_status usp_grad_buckets_wait(usp_grad_buckets *g) { return join(g, 1); }

usp_status usp_grad_buckets_scatter(usp_grad_buckets *g, float *work, float *shard, float *sum, size_t count)
{
    usp_stream_t *on = g->comm ? g->comm : g->c.stream;
    usp_status s = usp_event_record(g->c.backend, g->ready, g->c.stream); /* after the bucket's gradient */
    if (s == USP_OK) /* the previous bucket's scatter, done beside this bucket's backward */
        s = join(g, 1);
    if (s == USP_OK && !(skipped_waits & 1))
        s = usp_stream_wait_event(g->c.backend, on, g->ready);
    const size_t W = (size_t)usp_comm_size(g->c.group);
    if (s == USP_OK && g->low) /* in bf16: the input rounded, the shard delivered narrow, then widened */
        s = usp_buffer_convert(g->c.backend, g->low, work, count * W, on);
    if (s == USP_OK)
        s = usp_comm_reduce_scatter(g->c.group, g->low ? g->low : work, g->low ? g->low_shard : sum ? sum : shard,
                                    count, g->c.reduce, USP_REDUCE_SUM, on);
    if (s == USP_OK && g->low)
        s = usp_buffer_convert(g->c.backend, sum ? sum : shard, g->low_shard, count, on);
    if (s != USP_OK) { /* not launched: nothing will read them */
        usp_buffer_free(g->c.backend, sum);
        usp_buffer_free(g->c.backend, work);
        return s;
    }
    g->work = work, g->shard = shard, g->sum = sum, g->shard_count = count, g->in_flight = 1;
    /* without a stream of its own the call ran in order on the compute stream: nothing to keep */
    return g->comm ? USP_OK : join(g, 1);
}

int usp_grad_buckets_count(const usp_grad_buckets *g) { return g->n_buckets; }

void usp_grad_buckets_launched(const usp_grad_buckets *g, int *calls, int64_t *bytes)
{
    *calls = g->calls, *bytes = g->bytes;
}
