/* The weights, gradients and AdamW state of one rank, whole or sharded over
 * every rank of the world (the dp x sp ranks), as ZeRO does (Rajbhandari et
 * al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
 * SC 2020):
 *   stage 0  every rank holds everything; gradients are all-reduced over the world once, in
 *            buckets of whole layers launched during backward (grad_buckets.h);
 *   stage 1  Adam's moments are sharded: each rank updates its 1/W of the
 *            weights from the all-reduced gradient, then the weights are all-gathered;
 *   stage 2  gradients too: each bucket's gradient is reduce-scattered as soon
 *            as backward has finished it, beside the backward of the next one
 *            (grad_buckets.h), so only two buckets are ever whole;
 *   stage 3  weights too: a bucket is all-gathered before it is used (forward,
 *            and again in backward) and dropped after.
 * Buckets are contiguous ranges of the parameter table: 0 = the embeddings,
 * 1..L = the layers, L + 1 = the final norm and the lm_head. A bucket of n
 * elements is split into W shards of ceil(n / W) (the last ones padded with
 * zeros), rank r owning shard r, so collectives move equal counts.
 *
 * Mixed precision (storage USP_BF16): the weights the model reads are bf16 (2 bytes a parameter);
 * the gradients it writes are fp32 (4: GEMMs accumulate them in fp32, and they are reduced in fp32,
 * as Megatron-LM's main_grad); AdamW updates fp32 master weights and moments (4 + 4 + 4, counted as
 * "optimizer" and sharded with it), then rounds the master into the bf16 weights
 * (usp_buffer_convert): 18 bytes a parameter. The host reads and writes the master as "the
 * weights"; after a write, the next usp_param_store_weights rounds it into the bf16 copy (at stages
 * 1-2 a gather: every rank writes, as initialisation and checkpoint loading do). Offsets into the
 * weights are in their storage dtype (usp_elem_at). */
#ifndef USP_PARAM_STORE_H
#define USP_PARAM_STORE_H

#include "core/comm/comm.h"
#include "core/model/model_params.h"
#include "core/ops/ops.h"

typedef struct usp_param_store usp_param_store;

typedef struct usp_param_store_config {
    usp_backend_t *backend;
    usp_stream_t *stream;
    const usp_param_table *table;
    int n_layer;
    int zero_stage;       /* 0..3 */
    usp_comm_t *world;    /* the ranks shards are spread over (stages 1-3) */
    usp_comm_t *grad_group; /* stages 0-1 all-reduce gradients over it, in buckets (NULL: no reduction) */
    int64_t bucket_bytes; /* stages 0-1: a gradient bucket's bytes at most (<= 0: 25 MiB, as DDP) */
    int optimizer;        /* 0: no Adam state (a model alone, in tests) */
    int offload_optimizer; /* master weights and Adam state on the host (ZeRO-Offload; shapes only, stages 1-3) */
    usp_dtype storage;    /* weights: USP_F32 (0), or USP_BF16 with fp32 master weights (gradients: fp32) */
    usp_dtype grad_reduce; /* the gradients' reductions: USP_F32 (0), or USP_BF16 (grad_buckets.h) */
} usp_param_store_config;

/* The optimizer's hyperparameters for one step. */
typedef struct usp_adamw_config {
    float lr, beta1, beta2, eps, weight_decay; /* no decay on 1-D tensors (norms, biases) */
    int64_t step;                              /* 1-based, for bias correction */
} usp_adamw_config;

/* Which of the per-parameter arrays usp_param_store_read / _write move. */
typedef enum usp_param_array { USP_ARRAY_WEIGHTS, USP_ARRAY_ADAM_M, USP_ARRAY_ADAM_V } usp_param_array;

/* Allocates the rank's share of weights ("weights"), gradients ("gradients") and Adam state ("optimizer"). */
usp_status usp_param_store_create(const usp_param_store_config *c, usp_param_store **out);

/* Frees everything the store holds (NULL is a no-op). */
void usp_param_store_destroy(usp_param_store *s);

/* The bucket holding the tensors of `layer` (-1: the embeddings; n_layer: the final norm and lm_head). */
int usp_param_store_bucket(const usp_param_store *s, int layer);

/* Starts a use of the bucket's weights, until the matching _weights_done
 * (stage 3 all-gathers them; nested uses share one copy). */
usp_status usp_param_store_weights(usp_param_store *s, int bucket);

/* Ends a use of the bucket's weights (stage 3 frees the gathered copy after the last). */
usp_status usp_param_store_weights_done(usp_param_store *s, int bucket);

/* Starts a backward pass: every gradient becomes zero, unless the store accumulates. */
usp_status usp_param_store_begin_backward(usp_param_store *s);

/* Gradient accumulation (micro-batches): while on, a backward adds to the gradients kept from the one
 * before instead of starting from zero (stages 2-3 add each reduce-scattered shard to the shard kept). */
void usp_param_store_accumulate(usp_param_store *s, int on);

/* Opens the bucket's gradient, whole, for backward to accumulate into until _grads_done (nested opens share it). */
usp_status usp_param_store_grads(usp_param_store *s, int bucket);

/* Tensor t's weights inside its bucket's whole copy (the bucket in use), and its gradient (the bucket open). */
const float *usp_param_store_tensor_weights(const usp_param_store *s, const usp_param_tensor *t);
float *usp_param_store_tensor_grads(const usp_param_store *s, const usp_param_tensor *t);

/* Ends the bucket's gradient (stages 2-3 reduce-scatter it into the shards after the last use; stages
 * 0-1 all-reduce its gradient bucket once all of the bucket's layers are done, unless told to wait). */
usp_status usp_param_store_grads_done(usp_param_store *s, int bucket);

/* Before the compute stream issues a collective of another group (a Ulysses all-to-all, a ring transfer):
 * makes it wait for the gradient collectives in flight on their own stream, so every GPU starts the two in
 * the order they were issued (two NCCL calls of two groups on two unordered streams may deadlock). */
usp_status usp_param_store_order_grad_comm(usp_param_store *s);

/* Backward ended: stages 2-3 wait for the last reduce-scatter before the next pass's collectives. */
usp_status usp_param_store_end_backward(usp_param_store *s);

/* Stages 0-1: whether this backward's gradients are the step's last, summed over the ranks during it (on,
 * the default), or a micro-batch's to accumulate on, summed with the last one's (off). */
void usp_param_store_reduce_in_backward(usp_param_store *s, int on);

/* The gradient collectives issued since the start of the step's first backward (the last with the
 * accumulation off), and the gradient bytes they sent in (a reduce-scatter's whole input, padding included). */
void usp_param_store_grad_traffic(const usp_param_store *s, int *calls, int64_t *bytes);

/* After backward: sums the gradients over the ranks (stages 0-1 all-reduce the buckets not yet
 * launched and make the compute stream wait for all of them; 2-3 have reduce-scattered them
 * already) and returns their global L2 norm. */
usp_status usp_param_store_reduce_grads(usp_param_store *s, double *norm);

/* Multiplies every gradient by `scale` (clipping). */
usp_status usp_param_store_scale_grads(usp_param_store *s, float scale);

/* One AdamW step on the weights this rank owns; stages 1-2 then all-gather them. */
usp_status usp_param_store_adamw(usp_param_store *s, const usp_adamw_config *a);

/* Copies the whole array (table->total floats) to host on every rank (collective for sharded arrays);
 * an array stored narrower than fp32 is a USP_ERR_CONFIG (host copies are fp32). */
usp_status usp_param_store_read(usp_param_store *s, usp_param_array which, float *host);

/* Sets the array from a whole host copy (table->total floats; each rank keeps its share); fp32 arrays only. */
usp_status usp_param_store_write(usp_param_store *s, usp_param_array which, const float *host);

/* The number of buckets (n_layer + 2). */
int usp_param_store_n_buckets(const usp_param_store *s);

/* Bucket b's range of the table: [*start, *start + *len), in elements. */
void usp_param_store_bucket_range(const usp_param_store *s, int bucket, int64_t *start, int64_t *len);

/* The part of the bucket's range this rank holds of the array: all of it, or its shard (count 0: none). */
void usp_param_store_held(const usp_param_store *s, usp_param_array which, int bucket, int64_t *lo,
                          int64_t *count);

/* Copies the bucket's part of the array (its len floats) to `host`; collective over the world when the
 * array is sharded, every rank joining; host NULL: this rank joins without wanting the values. */
usp_status usp_param_store_read_bucket(usp_param_store *s, usp_param_array which, int bucket, float *host);

/* Sets elements [lo, lo + count) of the table in the array from host; they lie in one range this rank
 * holds (usp_param_store_held). Local: no collective. */
usp_status usp_param_store_write_range(usp_param_store *s, usp_param_array which, int64_t lo, int64_t count,
                                       const float *host);

/* Sets the array to zero (this rank's share of it). */
usp_status usp_param_store_zero(usp_param_store *s, usp_param_array which);

/* The whole gradient block at stages 0-1 (after _reduce_grads: the summed gradient); NULL at 2-3. */
float *usp_param_store_whole_grads(usp_param_store *s);

#endif
