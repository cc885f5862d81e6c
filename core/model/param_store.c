/* Weights, gradients and AdamW state, whole or sharded (see param_store.h). */
#include "core/model/param_store.h"

#include "core/model/grad_buckets.h"

#include <math.h>
#include <stdlib.h>

typedef struct bucket {
    int64_t start, len;   /* its range of the table, in elements */
    int64_t shard;        /* ceil(len / W): the elements of one shard, padding included */
    int64_t shard_at;     /* where its shard starts in the sharded arrays */
    float *gathered;      /* stage 3: the whole weights while in use */
    int weight_users;     /* uses open now (every stage: tensors are read only inside one) */
    float *grad_work;     /* stages 2-3: the whole gradient while backward fills it */
    int grad_users;
} bucket;

struct usp_param_store {
    usp_param_store_config c;
    int W, rank, n_buckets;
    bucket *buckets;
    int64_t shard_total, max_shard;
    float *weights;         /* whole at stages 0-2, this rank's shards at 3 */
    float *grads;           /* whole at 0-1, shards at 2-3 */
    float *adam_m, *adam_v; /* whole at 0, shards at 1-3 */
    float *master;          /* fp32 weights when the weights are stored narrower; sharded as Adam's */
    int master_written;     /* the host wrote the master: the next use of the weights rounds it into them */
    double *scalar;         /* backend memory for the norm's all-reduce */
    int accumulate;         /* backward adds to the gradients kept (usp_param_store_accumulate) */
    usp_grad_buckets *reducer; /* the gradient's reduction on a stream of its own (grad_buckets.h) */
    int reduce_in_backward; /* stages 0-1: launch the buckets as backward completes them */
    int scatters;           /* stages 2-3: reduce-scatters since the step's first backward, and their bytes */
    int64_t scattered_bytes;
};

#define BE (s->c.backend)
#define ST (s->c.stream)

static int is_sharded(const usp_param_store *s, const float *array)
{
    if (array == s->weights)
        return s->c.zero_stage >= 3;
    if (array == s->grads)
        return s->c.zero_stage >= 2;
    return s->c.zero_stage >= 1;
}

/* The dtype an array is stored and moved in: the weights in the storage dtype, everything else
 * (gradients, master weights, moments) in fp32. */
static usp_dtype storage_of(const usp_param_store *s, const float *array)
{
    return array == s->weights ? s->c.storage : USP_F32;
}

static int64_t array_elems(const usp_param_store *s, const float *array)
{
    return is_sharded(s, array) ? s->shard_total : s->c.table->total;
}

/* Element `index` of `array` (or of a buffer stored like it: gathered weights, a
 * bucket's gradient), and the bytes of n of its elements: weights and gradients
 * may be stored narrower than the float * says. */
static float *at(const usp_param_store *s, const float *array, int64_t index)
{
    return usp_elem_at(array, storage_of(s, array), (size_t)index);
}

static size_t bytes_of(const usp_param_store *s, const float *array, int64_t n)
{
    return (size_t)n * usp_dtype_size(storage_of(s, array));
}

static usp_status alloc_array(usp_param_store *s, float **p, int64_t elems, usp_dtype storage, const char *category)
{
    return usp_buffer_alloc_as(BE, (size_t)(elems > 0 ? elems : 1), storage, category, (void **)p);
}

/* Buckets from the table's order: embeddings, then layer by layer, then the head. */
static usp_status make_buckets(usp_param_store *s)
{
    const usp_param_table *t = s->c.table;
    s->n_buckets = s->c.n_layer + 2;
    USP_CHECK(usp_calloc((void **)&s->buckets, (size_t)s->n_buckets, sizeof *s->buckets, "parameter buckets"));
    for (int b = 0; b < s->n_buckets; b++)
        s->buckets[b].start = -1;
    int seen_layer = 0;
    for (int i = 0; i < t->n; i++) {
        const usp_param_tensor *pt = &t->tensors[i];
        seen_layer |= pt->layer >= 0;
        bucket *b = &s->buckets[pt->layer >= 0 ? pt->layer + 1 : seen_layer ? s->c.n_layer + 1 : 0];
        if (b->start < 0)
            b->start = pt->offset;
        USP_ASSERT(b->start + b->len == pt->offset, "bucket of tensor %d is not one contiguous range", i);
        b->len += pt->count;
    }
    for (int i = 0; i < s->n_buckets; i++) {
        bucket *b = &s->buckets[i];
        b->start = b->start < 0 ? 0 : b->start;
        b->shard = (b->len + s->W - 1) / s->W;
        b->shard_at = s->shard_total;
        s->shard_total += b->shard;
        s->max_shard = b->shard > s->max_shard ? b->shard : s->max_shard;
    }
    return USP_OK;
}

/* Stages 0-1: the gradient all-reduced in buckets of whole store buckets; 2-3: each store bucket
 * reduce-scattered; both on the reducer's stream (grad_buckets.h). */
static usp_status make_reducer(usp_param_store *s)
{
    int64_t *range;
    USP_CHECK(usp_calloc((void **)&range, 2 * (size_t)s->n_buckets, sizeof *range, "gradient buckets"));
    for (int i = 0; i < s->n_buckets; i++)
        range[i] = s->buckets[i].start, range[s->n_buckets + i] = s->buckets[i].len;
    usp_comm_t *group = s->c.zero_stage >= 2 ? s->c.world : s->c.grad_group;
    usp_grad_buckets_config g = {.backend = BE, .stream = ST, .group = group, .grads = s->grads,
                                 .storage = USP_F32, .reduce = s->c.grad_reduce, .n_parts = s->n_buckets, .part_start = range,
                                 .part_len = range + s->n_buckets, .cap_bytes = s->c.bucket_bytes};
    usp_status st = usp_grad_buckets_create(&g, &s->reducer);
    free(range);
    return st;
}

usp_status usp_param_store_create(const usp_param_store_config *c, usp_param_store **out)
{
    *out = NULL;
    if (c->zero_stage < 0 || c->zero_stage > 3)
        return usp_error(USP_ERR_CONFIG, "--zero %d: the ZeRO stage is 0, 1, 2 or 3", c->zero_stage);
    USP_ASSERT(c->zero_stage == 0 || c->world, "ZeRO stage %d without a world group", c->zero_stage);
    if (c->offload_optimizer && c->zero_stage < 1) /* replicated, every rank would update all of it on the host */
        return usp_error(USP_ERR_CONFIG, "--offload optimizer with --zero %d: the host state is sharded like ZeRO's "
                         "(as DeepSpeed's ZeRO-Offload), so it needs --zero 1, 2 or 3", c->zero_stage);
    usp_param_store *s;
    USP_CHECK(usp_calloc((void **)&s, 1, sizeof *s, "the parameter store"));
    s->c = *c;
    s->W = c->zero_stage > 0 ? usp_comm_size(c->world) : 1;
    s->rank = c->zero_stage > 0 ? usp_comm_rank(c->world) : 0;
    usp_status st;
    USP_CHECK_GOTO(make_buckets(s), st, fail);
    const int64_t whole = c->table->total;
    const usp_dtype sd = c->storage;
    USP_CHECK_GOTO(alloc_array(s, &s->weights, c->zero_stage >= 3 ? s->shard_total : whole, sd, "weights"), st, fail);
    USP_CHECK_GOTO(alloc_array(s, &s->grads, c->zero_stage >= 2 ? s->shard_total : whole, USP_F32, "gradients"), st,
                   fail);
    if (c->optimizer && !c->offload_optimizer) { /* offloaded: on the host, not allocated here */
        int64_t n = c->zero_stage >= 1 ? s->shard_total : whole;
        if (sd != USP_F32)
            USP_CHECK_GOTO(alloc_array(s, &s->master, n, USP_F32, "optimizer"), st, fail);
        USP_CHECK_GOTO(alloc_array(s, &s->adam_m, n, USP_F32, "optimizer"), st, fail);
        USP_CHECK_GOTO(alloc_array(s, &s->adam_v, n, USP_F32, "optimizer"), st, fail);
    }
    USP_CHECK_GOTO(usp_buffer_alloc(BE, sizeof(double), "comm", (void **)&s->scalar), st, fail);
    s->reduce_in_backward = 1;
    if (c->zero_stage >= 2 || c->grad_group) /* stages 2-3 reduce-scatter over the world */
        USP_CHECK_GOTO(make_reducer(s), st, fail);
    if (c->zero_stage >= 3) /* the padding of the shards stays zero */
        USP_CHECK_GOTO(usp_buffer_zero(BE, s->weights, bytes_of(s, s->weights, s->shard_total), ST), st, fail);
    *out = s;
    return USP_OK;
fail:
    usp_param_store_destroy(s);
    return st;
}

void usp_param_store_destroy(usp_param_store *s)
{
    if (!s)
        return;
    usp_grad_buckets_destroy(s->reducer);
    for (int i = 0; s->buckets && i < s->n_buckets; i++) {
        usp_buffer_free(BE, s->buckets[i].gathered);
        usp_buffer_free(BE, s->buckets[i].grad_work);
    }
    usp_buffer_free(BE, s->weights);
    usp_buffer_free(BE, s->grads);
    usp_buffer_free(BE, s->adam_m);
    usp_buffer_free(BE, s->adam_v);
    usp_buffer_free(BE, s->master);
    usp_buffer_free(BE, s->scalar);
    free(s->buckets);
    free(s);
}

int usp_param_store_bucket(const usp_param_store *s, int layer)
{
    USP_ASSERT(layer >= -1 && layer <= s->c.n_layer, "layer %d of %d", layer, s->c.n_layer);
    return layer + 1;
}

/* The part of bucket b this rank updates: [*lo, *lo + *count) of the table. */
static void owned_range(const usp_param_store *s, const bucket *b, int64_t *lo, int64_t *count)
{
    if (s->c.zero_stage == 0) {
        *lo = b->start, *count = b->len;
        return;
    }
    int64_t first = (int64_t)s->rank * b->shard;
    *lo = b->start + first;
    *count = b->len - first < 0 ? 0 : b->len - first > b->shard ? b->shard : b->len - first;
}

/* Element `index` of the table (inside this rank's owned range of b) in `array`. */
static float *element(const usp_param_store *s, float *array, const bucket *b, int64_t index)
{
    if (!is_sharded(s, array))
        return at(s, array, index);
    int64_t lo, count;
    owned_range(s, b, &lo, &count);
    return at(s, array, b->shard_at + (index - lo));
}

/* The bucket holding tensor t: its layer's, else the embeddings' (before the
 * layers in the table) or the head's (after them), as make_buckets groups them. */
static const bucket *bucket_of(const usp_param_store *s, const usp_param_tensor *t)
{
    if (t->layer >= 0)
        return &s->buckets[t->layer + 1];
    return &s->buckets[t->offset < s->buckets[1].start ? 0 : s->c.n_layer + 1];
}

static usp_status weights_from(usp_param_store *s, float *updated);

const float *usp_param_store_tensor_weights(const usp_param_store *s, const usp_param_tensor *t)
{
    const bucket *b = bucket_of(s, t);
    USP_ASSERT(b->weight_users > 0, "the weights of bucket %d are read outside usp_param_store_weights",
               (int)(b - s->buckets));
    if (s->c.zero_stage >= 3) /* the bucket's gathered copy, stored as the weights are */
        return usp_elem_at(b->gathered, s->c.storage, (size_t)(t->offset - b->start));
    return at(s, s->weights, t->offset);
}

float *usp_param_store_tensor_grads(const usp_param_store *s, const usp_param_tensor *t)
{
    const bucket *b = bucket_of(s, t);
    USP_ASSERT(b->grad_users > 0, "the gradient of bucket %d is written outside usp_param_store_grads",
               (int)(b - s->buckets));
    if (s->c.zero_stage >= 2) /* the bucket's whole gradient, fp32 as the gradients are */
        return b->grad_work + (t->offset - b->start);
    return at(s, s->grads, t->offset);
}

usp_status usp_param_store_weights(usp_param_store *s, int bucket_id)
{
    if (s->master_written) { /* every rank wrote (init, a checkpoint): at stages 1-2 every rank gathers */
        s->master_written = 0;
        USP_CHECK(weights_from(s, s->master));
    }
    bucket *b = &s->buckets[bucket_id];
    if (b->weight_users++ == 0 && s->c.zero_stage >= 3) {
        USP_CHECK(alloc_array(s, &b->gathered, b->shard * s->W, s->c.storage, "weights"));
        USP_CHECK(usp_comm_all_gather(s->c.world, at(s, s->weights, b->shard_at), b->gathered, (size_t)b->shard,
                                      s->c.storage, ST));
    }
    return USP_OK;
}

usp_status usp_param_store_weights_done(usp_param_store *s, int bucket_id)
{
    bucket *b = &s->buckets[bucket_id];
    USP_ASSERT(b->weight_users > 0, "bucket %d: weights dropped more often than used", bucket_id);
    if (--b->weight_users == 0 && s->c.zero_stage >= 3) {
        usp_buffer_free(BE, b->gathered);
        b->gathered = NULL;
    }
    return USP_OK;
}

usp_status usp_param_store_begin_backward(usp_param_store *s)
{
    if (s->reducer) /* joins a reduction still in flight before the gradients are written again */
        USP_CHECK(usp_grad_buckets_begin(s->reducer));
    if (s->accumulate)
        return USP_OK;
    s->scatters = 0, s->scattered_bytes = 0;
    return usp_buffer_zero(BE, s->grads, bytes_of(s, s->grads, array_elems(s, s->grads)), ST);
}

void usp_param_store_accumulate(usp_param_store *s, int on) { s->accumulate = on; }

void usp_param_store_reduce_in_backward(usp_param_store *s, int on) { s->reduce_in_backward = on; }

usp_status usp_param_store_order_grad_comm(usp_param_store *s)
{
    return s->reducer ? usp_grad_buckets_wait(s->reducer) : USP_OK;
}

usp_status usp_param_store_end_backward(usp_param_store *s)
{
    return s->reducer && s->c.zero_stage >= 2 ? usp_grad_buckets_wait(s->reducer) : USP_OK;
}

void usp_param_store_grad_traffic(const usp_param_store *s, int *calls, int64_t *bytes)
{
    *calls = s->scatters, *bytes = s->scattered_bytes;
    if (s->reducer && s->c.zero_stage < 2)
        usp_grad_buckets_launched(s->reducer, calls, bytes);
}

usp_status usp_param_store_grads(usp_param_store *s, int bucket_id)
{
    bucket *b = &s->buckets[bucket_id];
    if (b->grad_users++ == 0 && s->c.zero_stage >= 2) {
        USP_CHECK(alloc_array(s, &b->grad_work, b->shard * s->W, USP_F32, "gradients"));
        USP_CHECK(usp_buffer_zero(BE, b->grad_work, bytes_of(s, s->grads, b->shard * s->W), ST));
    }
    return USP_OK;
}

usp_status usp_param_store_grads_done(usp_param_store *s, int bucket_id)
{
    bucket *b = &s->buckets[bucket_id];
    USP_ASSERT(b->grad_users > 0, "bucket %d: gradient closed more often than opened", bucket_id);
    if (--b->grad_users > 0)
        return USP_OK;
    if (s->c.zero_stage < 2)
        return s->reducer && s->reduce_in_backward ? usp_grad_buckets_part_done(s->reducer, bucket_id) : USP_OK;
    s->scatters++, s->scattered_bytes += b->shard * s->W * (int64_t)usp_dtype_size(s->c.grad_reduce ? s->c.grad_reduce
                                                                                                     : USP_F32);
    float *shard = at(s, s->grads, b->shard_at), *sum = NULL, *work = b->grad_work;
    b->grad_work = NULL; /* the reducer's now: freed once its reduce-scatter is done */
    usp_status st = s->accumulate ? alloc_array(s, &sum, b->shard, USP_F32, "gradients") : USP_OK;
    if (st != USP_OK) {
        usp_buffer_free(BE, work);
        return st;
    } /* accumulating: into a fresh shard, then added to the one kept */
    return usp_grad_buckets_scatter(s->reducer, work, shard, sum, (size_t)b->shard);
}

usp_status usp_param_store_reduce_grads(usp_param_store *s, double *norm)
{
    size_t n = (size_t)array_elems(s, s->grads);
    double sq;
    if (s->c.zero_stage < 2) {
        if (s->reducer)
            USP_CHECK(usp_grad_buckets_finish(s->reducer));
        USP_CHECK(usp_sum_squares(BE, &sq, s->grads, (int64_t)n, ST));
    } else { /* each rank holds a disjoint shard of the summed gradient: add their squares */
        USP_CHECK(usp_grad_buckets_wait(s->reducer));
        USP_CHECK(usp_sum_squares(BE, &sq, s->grads, (int64_t)n, ST));
        USP_CHECK(usp_buffer_copy(BE, s->scalar, &sq, sizeof sq, USP_COPY_HOST_TO_DEVICE, ST));
        USP_CHECK(usp_comm_all_reduce(s->c.world, s->scalar, s->scalar, 1, USP_F64, USP_REDUCE_SUM, ST));
        USP_CHECK(usp_buffer_download(BE, &sq, s->scalar, sizeof sq, ST));
    }
    *norm = sqrt(sq);
    return USP_OK;
}

usp_status usp_param_store_scale_grads(usp_param_store *s, float scale)
{
    return usp_scale(BE, s->grads, scale, array_elems(s, s->grads), ST);
}

/* Stages 1-2: every rank has updated its shard of the weights (in `from`: the
 * whole weights, or the fp32 master shards, rounded into the storage dtype on
 * the way); gather them all into the whole weights, bucket by bucket, through
 * one send and one receive buffer (stored as the weights). */
static usp_status gather_updated_weights(usp_param_store *s, float *from)
{
    float *send = NULL, *recv = NULL;
    usp_status st = alloc_array(s, &send, s->max_shard, s->c.storage, "comm");
    if (st == USP_OK)
        st = alloc_array(s, &recv, s->max_shard * s->W, s->c.storage, "comm");
    for (int i = 0; i < s->n_buckets && st == USP_OK; i++) {
        const bucket *b = &s->buckets[i];
        int64_t lo, count;
        owned_range(s, b, &lo, &count);
        if (b->shard == 0)
            continue;
        st = usp_buffer_zero(BE, send, bytes_of(s, s->weights, b->shard), ST);
        if (st == USP_OK && count > 0)
            st = usp_buffer_convert(BE, send, element(s, from, b, lo), (size_t)count, ST);
        if (st == USP_OK)
            st = usp_comm_all_gather(s->c.world, send, recv, (size_t)b->shard, s->c.storage, ST);
        if (st == USP_OK)
            st = usp_buffer_copy(BE, at(s, s->weights, b->start), recv, bytes_of(s, s->weights, b->len),
                                 USP_COPY_DEVICE_TO_DEVICE, ST);
    }
    usp_buffer_free(BE, send);
    usp_buffer_free(BE, recv);
    return st;
}

/* The host holds the master weights and Adam state: only what crosses PCIe and the host's
 * update of the owned shard are issued; stages 1-2 then gather the updated weights. */
static usp_status offloaded_adamw(usp_param_store *s)
{
    int64_t owned = 0;
    for (int i = 0; i < s->n_buckets; i++) {
        int64_t lo, count;
        owned_range(s, &s->buckets[i], &lo, &count);
        owned += count;
    }
    USP_CHECK(usp_offloaded_adamw_cost(BE, owned, USP_F32, s->c.storage, ST));
    return s->c.zero_stage <= 2 ? gather_updated_weights(s, s->weights) : USP_OK;
}

usp_status usp_param_store_adamw(usp_param_store *s, const usp_adamw_config *a)
{
    USP_ASSERT(s->c.optimizer, "%s", "an AdamW step on a store made without optimizer state");
    if (s->c.offload_optimizer)
        return offloaded_adamw(s);
    const usp_param_table *t = s->c.table;
    float *updated = s->master ? s->master : s->weights; /* what AdamW updates */
    for (int i = 0; i < s->n_buckets; i++) {
        const bucket *b = &s->buckets[i];
        int64_t lo, count;
        owned_range(s, b, &lo, &count);
        for (int k = 0; k < t->n && count > 0; k++) { /* the tensors that overlap the owned range */
            const usp_param_tensor *pt = &t->tensors[k];
            int64_t from = pt->offset > lo ? pt->offset : lo;
            int64_t to = pt->offset + pt->count < lo + count ? pt->offset + pt->count : lo + count;
            if (from >= to)
                continue;
            float wd = pt->ndim == 2 ? a->weight_decay : 0.0f;
            USP_CHECK(usp_adamw_step(BE, element(s, updated, b, from), element(s, s->grads, b, from),
                                     element(s, s->adam_m, b, from), element(s, s->adam_v, b, from), to - from,
                                     a->lr, a->beta1, a->beta2, a->eps, wd, a->step, ST));
        }
    }
    return weights_from(s, updated);
}

/* The weights the model reads, from `updated` (the weights themselves, or the fp32 master): stages
 * 1-2 gather every rank's shard; stages 0 and 3 hold what they updated, rounded from the master when
 * there is one (it has the weights' shape). */
static usp_status weights_from(usp_param_store *s, float *updated)
{
    if (s->c.zero_stage == 1 || s->c.zero_stage == 2)
        return gather_updated_weights(s, updated);
    if (updated == s->weights)
        return USP_OK;
    return usp_buffer_convert(BE, s->weights, updated, (size_t)array_elems(s, s->weights), ST);
}

/* What the host reads and writes as `which`: for the weights, the fp32 master where there is one
 * (mixed precision keeps the true weights there; the bf16 copy is derived from it). */
static float *array_of(usp_param_store *s, usp_param_array which)
{
    if (which == USP_ARRAY_WEIGHTS)
        return s->master ? s->master : s->weights;
    return which == USP_ARRAY_ADAM_M ? s->adam_m : s->adam_v;
}

/* Host copies are fp32: bf16 weights without a master (a store made without optimizer) have no host
 * form, so read and write refuse them; below, a checked fp32 array is offset as float *. */
static usp_status check_host_fp32(const usp_param_store *s, const float *array, const char *verb)
{
    if (storage_of(s, array) == USP_F32)
        return USP_OK;
    return usp_error(USP_ERR_CONFIG, "%s %s weights from the host: the host copies are fp32, kept in the fp32 "
                     "master weights, which a store without optimizer has not", verb,
                     usp_dtype_name(storage_of(s, array)));
}

usp_status usp_param_store_read(usp_param_store *s, usp_param_array which, float *host)
{
    float *array = array_of(s, which);
    USP_ASSERT(array, "array %d is not held by this store", (int)which);
    USP_CHECK(check_host_fp32(s, array, "reading"));
    if (!is_sharded(s, array))
        return usp_buffer_download(BE, host, array, (size_t)s->c.table->total * sizeof(float), ST);
    float *recv;
    USP_CHECK(alloc_array(s, &recv, s->max_shard * s->W, storage_of(s, array), "comm"));
    usp_status st = USP_OK;
    for (int i = 0; i < s->n_buckets && st == USP_OK; i++) {
        const bucket *b = &s->buckets[i];
        if (b->shard == 0)
            continue;
        st = usp_comm_all_gather(s->c.world, array + b->shard_at, recv, (size_t)b->shard, storage_of(s, array), ST);
        if (st == USP_OK)
            st = usp_buffer_download(BE, host + b->start, recv, (size_t)b->len * sizeof(float), ST);
    }
    usp_buffer_free(BE, recv);
    return st;
}

usp_status usp_param_store_write(usp_param_store *s, usp_param_array which, const float *host)
{
    float *array = array_of(s, which);
    USP_ASSERT(array, "array %d is not held by this store", (int)which);
    USP_CHECK(check_host_fp32(s, array, "writing"));
    s->master_written |= array == s->master;
    if (!is_sharded(s, array))
        return usp_buffer_copy(BE, array, host, (size_t)s->c.table->total * sizeof(float), USP_COPY_HOST_TO_DEVICE,
                               ST);
    USP_CHECK(usp_buffer_zero(BE, array, (size_t)s->shard_total * sizeof(float), ST));
    for (int i = 0; i < s->n_buckets; i++) {
        const bucket *b = &s->buckets[i];
        int64_t lo, count;
        owned_range(s, b, &lo, &count);
        if (count > 0)
            USP_CHECK(usp_buffer_copy(BE, array + b->shard_at, host + lo, (size_t)count * sizeof(float),
                                      USP_COPY_HOST_TO_DEVICE, ST));
    }
    return USP_OK;
}

int usp_param_store_n_buckets(const usp_param_store *s)
{
    return s->n_buckets;
}

void usp_param_store_bucket_range(const usp_param_store *s, int bucket_id, int64_t *start, int64_t *len)
{
    *start = s->buckets[bucket_id].start, *len = s->buckets[bucket_id].len;
}

void usp_param_store_held(const usp_param_store *s, usp_param_array which, int bucket_id, int64_t *lo,
                          int64_t *count)
{
    const bucket *b = &s->buckets[bucket_id];
    if (is_sharded(s, array_of((usp_param_store *)s, which)))
        owned_range(s, b, lo, count);
    else
        *lo = b->start, *count = b->len;
}

usp_status usp_param_store_read_bucket(usp_param_store *s, usp_param_array which, int bucket_id, float *host)
{
    float *array = array_of(s, which);
    const bucket *b = &s->buckets[bucket_id];
    USP_ASSERT(array, "array %d is not held by this store", (int)which);
    USP_CHECK(check_host_fp32(s, array, "reading"));
    if (!is_sharded(s, array))
        return host ? usp_buffer_download(BE, host, array + b->start, (size_t)b->len * sizeof(float), ST) : USP_OK;
    if (b->shard == 0)
        return USP_OK;
    float *recv;
    USP_CHECK(alloc_array(s, &recv, b->shard * s->W, USP_F32, "comm"));
    usp_status st = usp_comm_all_gather(s->c.world, array + b->shard_at, recv, (size_t)b->shard, USP_F32, ST);
    if (st == USP_OK && host)
        st = usp_buffer_download(BE, host, recv, (size_t)b->len * sizeof(float), ST);
    usp_buffer_free(BE, recv);
    return st;
}

usp_status usp_param_store_write_range(usp_param_store *s, usp_param_array which, int64_t lo, int64_t count,
                                       const float *host)
{
    float *array = array_of(s, which);
    USP_ASSERT(array, "array %d is not held by this store", (int)which);
    USP_CHECK(check_host_fp32(s, array, "writing"));
    s->master_written |= array == s->master;
    if (count == 0)
        return USP_OK;
    if (!is_sharded(s, array))
        return usp_buffer_copy(BE, array + lo, host, (size_t)count * sizeof(float), USP_COPY_HOST_TO_DEVICE, ST);
    int i = 0; /* the bucket whose owned range holds [lo, lo + count) */
    int64_t own_lo = 0, own_count = 0;
    for (; i < s->n_buckets; i++) {
        owned_range(s, &s->buckets[i], &own_lo, &own_count);
        if (lo >= own_lo && lo + count <= own_lo + own_count)
            break;
    }
    USP_ASSERT(i < s->n_buckets, "elements [%lld, %lld) are not inside one shard of this rank", (long long)lo,
               (long long)(lo + count));
    return usp_buffer_copy(BE, element(s, array, &s->buckets[i], lo), host, (size_t)count * sizeof(float),
                           USP_COPY_HOST_TO_DEVICE, ST);
}

usp_status usp_param_store_zero(usp_param_store *s, usp_param_array which)
{
    float *array = array_of(s, which);
    USP_ASSERT(array, "array %d is not held by this store", (int)which);
    s->master_written |= array == s->master;
    return usp_buffer_zero(BE, array, bytes_of(s, array, array_elems(s, array)), ST);
}

float *usp_param_store_whole_grads(usp_param_store *s)
{
    return s->c.zero_stage < 2 ? s->grads : NULL;
}
