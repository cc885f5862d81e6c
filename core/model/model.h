/* Room core/model/: the transformer: configurations and Hugging Face config.json
 * (model_config.h), the parameter table (model_params.h), weights, gradients and AdamW
 * state (param_store.h), and the forward and backward passes (this file; model_*.c). It
 * may use: data/, parallel/, comm/, core/ (ops), base/.
 *
 * A decoder-only transformer (GPT-2 and Llama families) on one rank of the
 * mesh: forward, loss and backward of every layer through the compute ops
 * (core/ops/ops.h), with sequence-parallel attention (Ulysses, Ring or both:
 * core/parallel/ulysses.h) or, for teaching, each rank attending to its own shard only.
 *
 * Shapes (n = B T rows: this rank's B sequences of T tokens each):
 *   residual stream [n, C]; q [n, H D]; k, v [n, Hkv D]; MLP hidden [n, F];
 *   logits [n, V]. Weights, gradients and Adam state live in a parameter store
 *   (core/model/param_store.h): whole on every rank, or sharded (ZeRO 1-3).
 *
 * Memory options (each exact up to the order of floating-point sums):
 *   recompute_layers  keep only each layer's input; backward recomputes the
 *                     layer's forward (attention and its all-to-alls included)
 *                     before its backward, so one layer's activations are live;
 *   selective_recompute  keep every matmul's output and the attention's, and
 *                     recompute in backward what is element-wise: the two
 *                     norms (from the layer's input and the residual after
 *                     attention) and the MLP's activation (from its
 *                     pre-activation). One set of those is live instead of L,
 *                     for no matmul done twice (with recompute_layers, nothing
 *                     more is saved);
 *   tiled_mlp         the MLP runs `tile_rows` rows at a time, forward and
 *                     backward, and keeps nothing of its [n, F] hidden: backward
 *                     recomputes each tile's hidden (as Arctic's TiledMLP);
 *   tiled_loss        lm_head, cross-entropy and the lm_head's backward run
 *                     `tile_rows` rows at a time: the [n, V] logits never exist;
 *   eager_loss        (shapes only) the loss holds what PyTorch's eager
 *                     cross-entropy holds: two more fp32 [n, V] arrays, the
 *                     saved log-softmax and its gradient, beside the logits. */
#ifndef USP_MODEL_H
#define USP_MODEL_H

#include "core/data/data.h"
#include "core/parallel/mesh.h"
#include "core/parallel/ring.h"
#include "core/model/model_params.h"
#include "core/ops/ops.h"
#include "core/model/param_store.h"

typedef struct usp_model usp_model;

typedef struct usp_model_setup {
    const usp_model_config *config;
    usp_backend_t *backend;
    usp_stream_t *stream;
    const usp_mesh *mesh;   /* its ulysses and ring groups carry the attention */
    const char *attention;  /* the schedule: "sp" or NULL, the mesh's; or a name (core/parallel/schedule.h) */
    int64_t batch;          /* sequences on this rank */
    int64_t seq_len;        /* N, padded length */
    usp_param_store *store; /* where weights live; NULL: the model makes a whole one (no optimizer state) */
    int recompute_layers;   /* see the memory options above */
    int selective_recompute;
    int tiled_mlp, tiled_loss;
    int eager_loss;         /* see the memory options above (not with tiled_loss) */
    int eager_ring_merge;   /* ring attention merges as ring-flash-attention does in PyTorch (core/parallel/ring.h; shapes only) */
    usp_overlap ring_backward_overlap; /* the ring's backward sends K/V ahead of the attention (ring.h) */
    usp_overlap ulysses_overlap; /* Ulysses' head groups' all-to-alls beside the attention (ulysses.h) */
    int64_t tile_rows;      /* rows per tile (0: 1024) */
    usp_dtype storage;      /* activations: USP_F32 (0), or USP_BF16 on meta (usp_buffer_alloc_as) */
    int64_t window;         /* --window: the sliding window of the config's window layers, of every layer when
                               the config has none (usp_model_config_layer_window; 0: the config's) */
    const int64_t *doc_lengths; /* shapes only (usp plan --documents): every row's documents, in order, summing
                               to seq_len, instead of tables the shards carry; NULL: none */
    int64_t n_doc_lengths;
    int documents;          /* 1: the batch's shards carry documents' tables (core/data/data.h), which the
                               attention's mask keeps apart */
} usp_model_setup;

/* Checks what usp_model_create would refuse in the shape, before any rank allocates: the length against
 * learned positions, the tile rows, and the schedule `attention` ("sp" or NULL: the mesh's) on the
 * `mesh` with the model's heads and the sliding window `window` (0: none), which picks the layout (its
 * check: core/parallel/schedule.h). */
usp_status usp_model_check_shape(const usp_model_config *c, int64_t seq_len, const usp_mesh_shape *mesh,
                                 const char *attention, int64_t tile_rows,
                                 int64_t window);

/* Allocates parameters, gradients and activations (categories "weights",
 * "gradients", "activations") and the attention of every layer. */
usp_status usp_model_create(const usp_model_setup *setup, usp_model **out);

/* Frees everything the model holds. */
void usp_model_destroy(usp_model *m);

/* The layout the model expects its tokens in (for the data loader). */
const usp_seq_layout *usp_model_layout(const usp_model *m);

/* The parameter table; the model's store. */
const usp_param_table *usp_model_params_table(const usp_model *m);
usp_param_store *usp_model_store(usp_model *m);

/* The FLOPs of the last step: its forward pass up to the logits (with the
 * tiled loss, the lm_head's tiles too), and the forward work backward did again
 * (recomputed layers, tiled MLP hidden): model FLOPs exclude the latter. */
void usp_model_step_flops(const usp_model *m, double *forward, double *recompute);

/* Runs embedding and every layer up to the logits for `shards` (one per sequence on this rank). */
usp_status usp_model_forward(usp_model *m, const usp_shard *shards);

/* The logits of local rows rows[0..n) on the host, out [n, V] (after forward, before loss: the loss overwrites
 * them with its gradient). A shapes-only backend has none: USP_ERR_CONFIG. Collective with ZeRO 3 and the
 * tiled loss (it gathers the lm_head): every rank calls it, n may be 0. */
usp_status usp_model_logits(usp_model *m, const int64_t *rows, int n, float *out);

/* Argmax of the logits of local rows rows[0..n) (after forward, before loss); -1 on meta.
 * Collective with ZeRO 3 and the tiled loss (it gathers the lm_head): every rank calls it, n may be 0. */
usp_status usp_model_argmax(usp_model *m, const int64_t *rows, int n, int32_t *out);

/* Cross-entropy of the logits against the shards' targets; *loss_sum (host) is
 * the sum over valid targets (NaN on meta). With `with_grad`, also zeroes the
 * gradients and runs the lm_head's backward for dloss/dlogits = grad_scale x
 * (softmax - onehot), as usp_model_backward expects. */
usp_status usp_model_loss(usp_model *m, float grad_scale, int with_grad, double *loss_sum);

/* usp_model_loss without the wait: enqueues the copy of the per-row losses (usp_model_rows of them; a row
 * of an invalid target is not one to sum) into host `losses` (NULL on meta; usp_host_alloc memory, so that
 * the copy does not block), which hold them after the host's next wait on the model's stream. */
usp_status usp_model_loss_enqueue(usp_model *m, float grad_scale, int with_grad, float *losses);

/* sum + the losses[i] whose targets[i] >= 0, added in row order in double (usp_model_loss's sum). */
double usp_model_add_losses(double sum, const float *losses, const int32_t *targets, int64_t n);

/* Rows the model runs at once: batch x this rank's tokens of a sequence. */
int64_t usp_model_rows(const usp_model *m);

/* Backpropagates the last loss (run with_grad) into the store's gradients
 * (this rank's part: the store sums them over the ranks, see param_store.h). */
usp_status usp_model_backward(usp_model *m);

#endif
