/* Gradients summed over the ranks that share them once, bucket by bucket,
 * while backward still runs (as PyTorch's DistributedDataParallel does: Li et
 * al., "PyTorch Distributed", VLDB 2020). The parameter store (param_store.h)
 * owns one and tells it when backward has finished a part of the gradient (a
 * store bucket: the embeddings, a layer, the head).
 *
 * Parts are grouped into buckets from the last (the head, whose gradient backward
 * finishes first) down: a bucket takes the next part while its bytes stay within
 * the cap, and always at least one, so a part larger than the cap is a bucket of
 * its own (DDP's bucket_cap_mb). A bucket is one contiguous range of the gradient.
 *
 * The moment its last part is done, a bucket is all-reduced in place over the
 * whole group (stages 0-1: every rank holds every gradient) on a communication
 * stream of its own, beside the backward of the layers below:
 *   compute stream:  ... layer l backward, record `ready` ... layer l-1 backward ...  wait `done`, optimizer
 *   comm stream:                           wait `ready`, all_reduce(bucket) ...      record `done`
 * `ready` orders the all-reduce after the writes of the bucket's gradient;
 * `done`, recorded after the last bucket, orders every later read of the
 * gradients (the norm, clipping, AdamW) and the next step's zeroing after the
 * sums. The compute stream also waits for the buckets in flight before it
 * issues a collective of another group (the next layer's attention exchanges:
 * usp_param_store_order_grad_comm): a GPU may start either of two NCCL calls
 * of two groups on two unordered streams first, and two GPUs that chose
 * differently wait for each other for ever (NVIDIA/nccl issues 195 and 783).
 * So a bucket runs beside the MLP and output-projection backward of the layer
 * below it (the whole backward where the attention exchanges nothing). Buckets
 * are launched in bucket order, which every rank follows, so every rank issues
 * the same collectives in the same order. Each element is summed
 * once over the group in rank order (the backends' reductions), where the sum
 * used to be over sp, then over dp: the same bits where one of them has one
 * rank, another grouping of the same sum where both have several.
 *
 * Stages 2-3 (the gradient sharded) use the same stream for each store bucket's
 * reduce-scatter over the world (usp_grad_buckets_scatter): launched when
 * backward closes the bucket, waited for by the compute stream at the next
 * layer's attention exchanges or when the next one is launched, so it runs
 * beside part of the next bucket's backward, and up to two buckets' whole
 * gradients are alive at a time instead of one.
 *
 * Reduced in bf16 (config.reduce), each bucket is rounded into one bf16 scratch of the largest bucket
 * on the comm stream, reduced there, and widened back into the fp32 gradient: the comm stream runs
 * the buckets one after another, so one scratch serves them all. */
#ifndef USP_GRAD_BUCKETS_H
#define USP_GRAD_BUCKETS_H

#include "core/comm/comm.h"
#include "core/ops/ops.h"

/* PyTorch DDP's default bucket_cap_mb: 25 MiB. */
#define USP_GRAD_BUCKET_DEFAULT_BYTES ((int64_t)25 << 20)

typedef struct usp_grad_buckets usp_grad_buckets;

typedef struct usp_grad_buckets_config {
    usp_backend_t *backend;
    usp_stream_t *stream;     /* the compute stream that writes the gradients and reads their sums */
    usp_comm_t *group;        /* the ranks sharing the gradient */
    float *grads;             /* the whole gradient, stored as `storage` */
    usp_dtype storage;
    usp_dtype reduce;         /* the dtype the sums travel and add in: `storage` (0 = USP_F32), or USP_BF16 for
                                 an fp32 gradient (--grad-reduce bf16: half the bytes, each partial sum rounded),
                                 through a bf16 copy of the bucket on the comm stream */
    int n_parts;              /* parts in table order, contiguous: part p is [part_start[p], + part_len[p]) */
    const int64_t *part_start, *part_len;
    int64_t cap_bytes;        /* a bucket's bytes at most, unless one part is larger (<= 0: the default) */
} usp_grad_buckets_config;

/* Groups the parts into buckets and makes the stream and events. */
usp_status usp_grad_buckets_create(const usp_grad_buckets_config *c, usp_grad_buckets **out);

/* Waits for what is in flight, frees the stream and events (NULL is a no-op). */
void usp_grad_buckets_destroy(usp_grad_buckets *g);

/* A backward starts: no part is done. A reduction still in flight is joined
 * first (the gradients are about to be written again). */
usp_status usp_grad_buckets_begin(usp_grad_buckets *g);

/* Backward has finished part p; launches every bucket, in order, whose parts are all done. */
usp_status usp_grad_buckets_part_done(usp_grad_buckets *g, int part);

/* Launches the buckets not launched yet (in order), then makes the compute
 * stream wait for all of them: after it, the gradients are the sums. */
usp_status usp_grad_buckets_finish(usp_grad_buckets *g);

/* Makes the compute stream wait for what is in flight (stages 2-3: the last reduce-scatter). */
usp_status usp_grad_buckets_wait(usp_grad_buckets *g);

/* Stages 2-3: reduce-scatters `work` (W x count elements, the bucket's whole gradient) into this rank's
 * `shard` (count), or into `sum` when not NULL (accumulating: added into `shard` afterwards), on the comm
 * stream after the gradient writes enqueued so far. The compute stream waits for it when the next one is
 * launched (so one runs beside the backward of the next bucket), or at _wait and _begin; then `sum` is
 * added and `work` and `sum` are freed (they are the callee's from this call on, even on failure). */
usp_status usp_grad_buckets_scatter(usp_grad_buckets *g, float *work, float *shard, float *sum, size_t count);

/* The number of buckets. */
int usp_grad_buckets_count(const usp_grad_buckets *g);

/* The all-reduces launched since the last begin, and the gradient bytes they sum. */
void usp_grad_buckets_launched(const usp_grad_buckets *g, int *calls, int64_t *bytes);

/* Tests only (one global, not thread-safe): bit 1 skips the comm stream's wait
 * for `ready`, bit 2 the compute stream's wait for `done`, so a test shows that
 * each wait is needed (the lazy backend then runs the work out of order). */
void usp_grad_buckets_skip_waits_for_tests(unsigned mask);

#endif
