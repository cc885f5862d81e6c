/* The transformer's forward and backward passes (see model.h).
 *
 * One layer, with x the residual stream:
 *   h = norm1(x);  q, k, v = h Wqkv^T (+ b);  rope(q, k) at GLOBAL positions (Llama)
 *   a = attention(q, k, v);  x' = x + a Wo^T (+ b)
 *   h2 = norm2(x');  GPT-2: u = gelu(h2 Wfc^T + b);  Llama: u = silu(h2 Wg^T) * (h2 Wu^T)
 *   x'' = x' + u Wdown^T (+ b)
 * then normf, logits = h Wte^T (tied) or h Wlm^T, and the cross-entropy.
 * Linear layers are y = x W^T with W [out, in]; their backward is
 *   dx += dy W,  dW += dy^T x,  db += sum over rows of dy.
 * The MLP is in model_mlp.c, the final norm, lm_head and loss in model_head.c;
 * linear and norm in model_blocks.c, the buffers and weights in model_buffers.c
 * and model_weights.c. */
#include "core/model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model_internal.h"
#include "core/ops/mask.h"

#define DEFAULT_TILE_ROWS 1024

/* Whether the backward reads a layer's q, k, v: local attention and the ring do, and so does Ulysses
 * at U = 1, which hands them straight to the flash attention. At U > 1 Ulysses (and the hybrid) keeps its
 * own copies, gathered by head, and the model's q, k, v are dead once the all-to-all has read them. */
static int backward_reads_qkv(const usp_model *m) { return !usp_attention_keeps_inputs(m->attn[0]); }

/* Buffers kept from a layer's forward to its backward: for every layer, or one
 * set when layers are recomputed. q, k, v are per set only when the backward
 * reads them (backward_reads_qkv); otherwise every layer shares one scratch
 * set, still "activations" (they are, while the layer's forward runs), but
 * once per rank, not once per layer. The MLP's hidden is allocated by mlp_alloc. */
static usp_status alloc_activations(usp_model *m)
{
    const int64_t n = m->n, C = m->C, qd = m->H * m->D, kd = m->Hkv * m->D;
    const int sets = m->s.recompute_layers ? 1 : (int)m->c.n_layer, qkv_sets = backward_reads_qkv(m) ? sets : 1;
    const int norm_sets = m->s.selective_recompute ? 1 : sets;
    const char *a_ = "activations";
    USP_CHECK(model_tensor(m, &m->residual, (m->c.n_layer + 1) * n * C, a_));
    for (int l = 0; l < sets; l++) {
        layer_acts *a = &m->acts[l];
        if (l < norm_sets) {
            USP_CHECK(model_tensor(m, &a->ln1, n * C, a_));
            USP_CHECK(model_buffer(m, &a->ln1_mean, n, a_));
            USP_CHECK(model_buffer(m, &a->ln1_rstd, n, a_));
            USP_CHECK(model_tensor(m, &a->ln2, n * C, a_));
            USP_CHECK(model_buffer(m, &a->ln2_mean, n, a_));
            USP_CHECK(model_buffer(m, &a->ln2_rstd, n, a_));
        } else {
            const layer_acts *first = &m->acts[0];
            a->ln1 = first->ln1, a->ln1_mean = first->ln1_mean, a->ln1_rstd = first->ln1_rstd;
            a->ln2 = first->ln2, a->ln2_mean = first->ln2_mean, a->ln2_rstd = first->ln2_rstd;
        }
        if (l < qkv_sets) {
            USP_CHECK(model_tensor(m, &a->q, n * qd, a_));
            USP_CHECK(model_tensor(m, &a->k, n * kd, a_));
            USP_CHECK(model_tensor(m, &a->v, n * kd, a_));
        } else {
            a->q = m->acts[0].q, a->k = m->acts[0].k, a->v = m->acts[0].v;
        }
        USP_CHECK(model_tensor(m, &a->att, n * qd, a_));
        USP_CHECK(model_tensor(m, &a->mid, n * C, a_));
    }
    USP_CHECK(mlp_alloc(m));
    USP_CHECK(head_alloc(m));
    USP_CHECK(model_buffer(m, (float **)&m->tokens, n, a_));
    USP_CHECK(model_buffer(m, (float **)&m->targets, n, a_));
    USP_CHECK(model_buffer(m, (float **)&m->positions, n, a_));
    const char *g = "gradients";
    /* The residual stream's gradient sums every layer's contribution: fp32, as under PyTorch's autocast
     * (measured on the default run in bf16: with d_x in bf16 the passkey is learnt ~1300 steps later,
     * 0% at step 4000; in fp32, 100%). The GEMMs read it rounded to the storage dtype (d_x_low): in d_q's
     * memory where it is large enough, as d_q is free whenever d_x_low is read (the MLP's and the
     * attention output's backward, before attention's backward writes d_q). */
    USP_CHECK(model_buffer(m, &m->d_x, n * C, g));
    USP_CHECK(model_tensor(m, &m->d_h, n * C, g));
    USP_CHECK(model_tensor(m, &m->d_att, n * qd, g));
    USP_CHECK(model_tensor(m, &m->d_q, n * qd, g));
    if (m->s.storage != USP_F32)
        m->d_x_low = qd >= C ? m->d_q : NULL;
    if (m->s.storage != USP_F32 && !m->d_x_low)
        USP_CHECK(model_tensor(m, &m->d_x_low, n * C, g));
    USP_CHECK(model_tensor(m, &m->d_k, n * kd, g));
    USP_CHECK(model_tensor(m, &m->d_v, n * kd, g));
    if (!usp_backend_has_numerics(BE)) /* meta: no loss to sum, no per-token host memory */
        return USP_OK;
    return usp_malloc((void **)&m->host_targets, (size_t)n * sizeof(int32_t), "targets");
}

/* The schedule's shape for this model on its mesh. */
static usp_schedule_shape schedule_shape(const usp_model_config *c, int64_t seq_len, const usp_mesh_shape *mesh,
                                         int64_t window)
{
    return (usp_schedule_shape){.ulysses = mesh->ulysses, .ring = mesh->ring, .seq_len = seq_len,
                                .n_heads = c->n_head, .n_kv_heads = c->n_kv_head, .causal = 1,
                                .window = usp_model_config_common_window(c, window)};
}

/* With recomputed layers the layers share attentions: one for the layers with the window, one for those
 * without (layer_types that mix them); else each layer has its own. */
static int mixed_windows(const usp_model *m)
{
    return usp_model_config_common_window(&m->c, m->s.window) == 0 &&
           m->c.sliding_window + m->s.window > 0; /* some layer has a window, and not every one */
}

static int attention_slot(const usp_model *m, int l)
{
    if (!m->s.recompute_layers)
        return l;
    return mixed_windows(m) && usp_model_config_layer_window(&m->c, l, m->s.window) == 0;
}

/* The window of the layers that use attention `set` (attention_slot). */
static int64_t set_window(const usp_model *m, int set)
{
    if (!m->s.recompute_layers)
        return usp_model_config_layer_window(&m->c, set, m->s.window);
    return set == 1 ? 0 : m->s.window > 0 ? m->s.window : m->c.sliding_window;
}

static usp_status create_attention(usp_model *m)
{
    const usp_schedule_shape shape = schedule_shape(&m->c, m->s.seq_len, &m->s.mesh->shape, m->s.window);
    const usp_schedule_i *schedule;
    USP_CHECK(usp_schedule_resolve(m->s.attention, &shape, &schedule));
    if (m->s.documents || m->s.doc_lengths) { /* each row one document until a batch brings its tables */
        const int64_t N = m->s.seq_len;
        int64_t sum = 0;
        for (int64_t d = 0; d < m->s.n_doc_lengths; d++)
            sum += m->s.doc_lengths[d];
        if (sum > N)
            return usp_error(USP_ERR_CONFIG, "--documents: the lengths sum to %lld tokens, more than the sequence's "
                             "%lld", (long long)sum, (long long)N);
        USP_CHECK(model_buffer(m, (float **)&m->docs, m->B * N * 2, "activations"));
        USP_CHECK(usp_malloc((void **)&m->host_docs, (size_t)(m->B * N * 2) * sizeof *m->host_docs,
                             "the documents' table"));
        for (int64_t b = 0; b < m->B; b++) { /* the given lengths, and the rest (padding; all without) as one more */
            usp_mask_table_fill(m->s.doc_lengths, m->s.n_doc_lengths, m->host_docs + 2 * b * N);
            usp_mask_table_mark(m->host_docs + 2 * b * N, sum, N);
        }
    }
    usp_schedule_config sc = {.backend = BE, .stream = ST, .ulysses = m->s.mesh->ulysses,
                                    .ring = m->s.mesh->ring, .batch = m->B, .seq_len = m->s.seq_len,
                                    .n_heads = m->H, .n_kv_heads = m->Hkv, .head_dim = m->D, .causal = 1,
                                    .storage = m->s.storage, .eager_ring_merge = m->s.eager_ring_merge,
                                    .ring_backward_overlap = m->s.ring_backward_overlap,
                                    .ulysses_overlap = m->s.ulysses_overlap,
                                    .mask = {.docs = m->docs, .docs_host = m->host_docs}, .layout_window = shape.window};
    const int sets = m->s.recompute_layers ? 1 + mixed_windows(m) : (int)m->c.n_layer;
    for (int l = 0; l < sets; l++) {
        sc.mask.window = set_window(m, l);
        USP_CHECK(usp_attention_create(schedule, &sc, &m->attn[l]));
    }
    m->layout = *usp_attention_layout(m->attn[0]);
    m->exchanges = schedule->sent(&shape, usp_comm_rank(m->s.mesh->sp), m->B, m->D) > 0;
    return USP_OK;
}

usp_status usp_model_check_shape(const usp_model_config *c, int64_t seq_len, const usp_mesh_shape *mesh,
                                 const char *attention, int64_t tile_rows, int64_t window)
{
    if (c->positions == USP_POS_LEARNED && seq_len > c->max_seq)
        return usp_error(USP_ERR_CONFIG, "--seq %lld is longer than the %lld learned positions of model %s",
                         (long long)seq_len, (long long)c->max_seq, c->name);
    if (tile_rows < 0)
        return usp_error(USP_ERR_CONFIG, "--tile-rows %lld: a tile is at least 1 row", (long long)tile_rows);
    const usp_schedule_shape shape = schedule_shape(c, seq_len, mesh, window);
    const usp_schedule_i *schedule;
    return usp_schedule_resolve(attention, &shape, &schedule);
}

static usp_status make_store(usp_model *m)
{
    if (m->s.store) {
        m->store = m->s.store;
        return USP_OK;
    }
    usp_param_store_config pc = {.backend = BE, .stream = ST, .table = &m->table, .n_layer = (int)m->c.n_layer};
    USP_CHECK(usp_param_store_create(&pc, &m->store));
    m->owns_store = 1;
    return USP_OK;
}

usp_status usp_model_create(const usp_model_setup *setup, usp_model **out)
{
    *out = NULL;
    usp_model *m;
    USP_CHECK(usp_calloc((void **)&m, 1, sizeof *m, "the model"));
    m->s = *setup;
    m->c = *setup->config;
    m->s.config = &m->c;
    usp_status s;
    USP_CHECK_GOTO(usp_model_config_check(&m->c), s, fail);
    USP_CHECK_GOTO(usp_param_table_make(&m->c, &m->table), s, fail);
    USP_CHECK_GOTO(model_index_tensors(m), s, fail);
    if (m->c.positions == USP_POS_ROPE && m->c.rope_scaling.kind != USP_ROPE_SCALING_NONE) {
        int64_t half = usp_model_config_head_dim(&m->c) / 2;
        USP_CHECK_GOTO(usp_malloc((void **)&m->rope_inv_freq, (size_t)half * sizeof(double), "rope frequencies"), s,
                       fail);
        for (int64_t i = 0; i < half; i++)
            m->rope_inv_freq[i] = usp_model_config_rope_inv_freq(&m->c, i);
    }
    const usp_mesh_shape *sh = &setup->mesh->shape;
    m->B = setup->batch, m->C = m->c.d_model, m->H = m->c.n_head, m->Hkv = m->c.n_kv_head;
    m->D = usp_model_config_head_dim(&m->c), m->F = m->c.d_ff, m->V = m->c.vocab;
    m->UP = m->c.mlp == USP_MLP_SWIGLU ? 2 * m->F : m->F;
    USP_CHECK_GOTO(usp_model_check_shape(&m->c, setup->seq_len, sh, setup->attention, setup->tile_rows,
                                         setup->window), s, fail);
    const size_t L = (size_t)m->c.n_layer;
    USP_CHECK_GOTO(usp_calloc((void **)&m->acts, L, sizeof *m->acts, "activations"), s, fail);
    USP_CHECK_GOTO(usp_calloc((void **)&m->attn, L, sizeof *m->attn, "attention"), s, fail);
    USP_CHECK_GOTO(create_attention(m), s, fail);
    m->T = m->layout.per_rank;
    m->n = m->B * m->T;
    int64_t tile = setup->tile_rows > 0 ? setup->tile_rows : DEFAULT_TILE_ROWS;
    m->tile = tile < m->n ? tile : m->n;
    USP_CHECK_GOTO(make_store(m), s, fail);
    USP_CHECK_GOTO(alloc_activations(m), s, fail);
    *out = m;
    return USP_OK;
fail:
    usp_model_destroy(m);
    return s;
}

void usp_model_destroy(usp_model *m)
{
    if (!m)
        return;
    /* last made, first freed: the backend's table of live buffers is sorted, and a free moves the rows
     * above it (a world of simulated ranks spent a fifth of a plan moving them) */
    for (int i = m->n_owned - 1; i >= 0; i--)
        usp_buffer_free(BE, m->owned[i]);
    if (m->owns_store)
        usp_param_store_destroy(m->store);
    for (int l = m->attn ? (int)m->c.n_layer - 1 : -1; l >= 0; l--)
        usp_attention_destroy(m->attn[l]);
    free(m->owned), free(m->attn), free(m->acts), free(m->host_targets), free(m->tensor_of), free(m->rope_inv_freq);
    free(m->host_docs);
    usp_param_table_free(&m->table);
    free(m);
}

const usp_seq_layout *usp_model_layout(const usp_model *m) { return &m->layout; }
int64_t usp_model_rows(const usp_model *m) { return m->n; }
const usp_param_table *usp_model_params_table(const usp_model *m) { return &m->table; }
usp_param_store *usp_model_store(usp_model *m) { return m->store; }

/* --- building blocks ------------------------------------------------------ */

static usp_status linear(usp_model *m, float *out, const float *inp, const float *w, const float *b, int64_t i,
                         int64_t o)
{
    return model_linear(m, m->n, out, inp, w, b, i, o);
}

static usp_status linear_backward(usp_model *m, float *dinp, int accumulate, float *dw, float *db,
                                  const float *dout, const float *inp, const float *w, int64_t i, int64_t o)
{
    return model_linear_backward(m, m->n, dinp, accumulate, dw, db, dout, inp, w, i, o);
}

/* The activation set and attention of layer l. */
static int slot(const usp_model *m, int l) { return m->s.recompute_layers ? 0 : l; }

/* --- forward -------------------------------------------------------------- */

/* The batch's documents' tables into the mask's (host for the cost, device for the kernels). */
static usp_status upload_documents(usp_model *m, const usp_shard *shards)
{
    const int64_t N = m->s.seq_len;
    for (int64_t b = 0; b < m->B; b++) {
        if (shards[b].docs && shards[b].seq_len != N)
            return usp_error(USP_ERR_CONFIG, "a shard's documents' table covers %lld positions, the model's "
                             "sequence %lld", (long long)shards[b].seq_len, (long long)N);
        if (shards[b].docs) /* shapes only: no table, every row stays one document */
            memcpy(m->host_docs + 2 * b * N, shards[b].docs, (size_t)(2 * N) * sizeof *m->host_docs);
    }
    return usp_buffer_copy(BE, m->docs, m->host_docs, (size_t)(m->B * N * 2) * sizeof *m->docs,
                           USP_COPY_HOST_TO_DEVICE, ST);
}

static usp_status upload_batch(usp_model *m, const usp_shard *shards)
{
    if (m->docs)
        USP_CHECK(upload_documents(m, shards));
    for (int64_t b = 0; b < m->B; b++) {
        const usp_shard *sh = &shards[b];
        size_t at = (size_t)(b * m->T), bytes = (size_t)m->T * sizeof(int32_t);
        USP_CHECK(usp_buffer_copy(BE, m->tokens + at, sh->tokens, bytes, USP_COPY_HOST_TO_DEVICE, ST));
        USP_CHECK(usp_buffer_copy(BE, m->targets + at, sh->targets, bytes, USP_COPY_HOST_TO_DEVICE, ST));
        USP_CHECK(usp_buffer_copy(BE, m->positions + at, sh->positions, bytes, USP_COPY_HOST_TO_DEVICE, ST));
        if (!sh->tokens) /* shapes only (meta): the copies' cost counts, there is nothing to check */
            continue;
        memcpy(m->host_targets + at, sh->targets, bytes);
        for (int64_t i = 0; i < m->T; i++)
            if (sh->tokens[i] < 0 || sh->tokens[i] >= m->V || sh->targets[i] >= m->V)
                return usp_error(USP_ERR_CONFIG, "token %d at position %d is outside the vocabulary of %lld of "
                                 "model %s: use a model with a larger vocabulary for this data",
                                 sh->tokens[i] >= m->V || sh->tokens[i] < 0 ? sh->tokens[i] : sh->targets[i],
                                 sh->positions[i], (long long)m->V, m->c.name);
    }
    return USP_OK;
}

static usp_status attention_forward(usp_model *m, int l, layer_acts *a)
{
    return usp_attention_forward(m->attn[attention_slot(m, l)], a->q, a->k, a->v, a->att);
}

/* The layer's two norms: a->ln1 from its input x, a->ln2 from the residual after attention a->mid. */
static usp_status norm1_forward(usp_model *m, int l, layer_acts *a, const float *x)
{
    return model_norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, model_param(m, USP_P_NORM1_W, l),
                              model_param(m, USP_P_NORM1_B, l));
}

static usp_status norm2_forward(usp_model *m, int l, layer_acts *a)
{
    return model_norm_forward(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, model_param(m, USP_P_NORM2_W, l),
                              model_param(m, USP_P_NORM2_B, l));
}

/* The layer up to the MLP's input: a->ln1 .. a->ln2 from x (its weights in use). */
static usp_status attention_block_forward(usp_model *m, int l, layer_acts *a, const float *x)
{
    const int64_t n = m->n, C = m->C, qd = m->H * m->D, kd = m->Hkv * m->D;
    const float *w_qkv = model_param(m, USP_P_QKV_W, l), *b_qkv = model_param(m, USP_P_QKV_B, l);
    USP_CHECK(norm1_forward(m, l, a, x));
    USP_CHECK(linear(m, a->q, a->ln1, w_qkv, b_qkv, C, qd));
    USP_CHECK(linear(m, a->k, a->ln1, model_at(m, w_qkv, qd * C), b_qkv ? model_at(m, b_qkv, qd) : NULL, C, kd));
    USP_CHECK(linear(m, a->v, a->ln1, model_at(m, w_qkv, (qd + kd) * C), b_qkv ? model_at(m, b_qkv, qd + kd) : NULL,
                     C, kd));
    if (m->c.positions == USP_POS_ROPE) {
        const float theta = m->c.rope_theta;
        USP_CHECK(usp_rope_forward(BE, a->q, m->positions, n, m->H, m->D, theta, m->rope_inv_freq, ST));
        USP_CHECK(usp_rope_forward(BE, a->k, m->positions, n, m->Hkv, m->D, theta, m->rope_inv_freq, ST));
    }
    USP_CHECK(attention_forward(m, l, a));
    USP_CHECK(linear(m, a->mid, a->att, model_param(m, USP_P_ATTN_O_W, l), model_param(m, USP_P_ATTN_O_B, l), qd,
                     C));
    USP_CHECK(usp_accumulate_2d(BE, a->mid, (size_t)C, x, (size_t)C, (size_t)C, (size_t)n, ST));
    return norm2_forward(m, l, a);
}

static usp_status layer_forward(usp_model *m, int l)
{
    layer_acts *a = &m->acts[slot(m, l)];
    const int64_t n = m->n, C = m->C;
    const float *x = model_at(m, m->residual, l * n * C);
    float *x_out = model_at(m, m->residual, (l + 1) * n * C);
    USP_CHECK(model_use_weights(m, l));
    USP_CHECK(attention_block_forward(m, l, a, x));
    USP_CHECK(mlp_forward(m, l, a, a->ln2, x_out));
    USP_CHECK(usp_accumulate_2d(BE, x_out, (size_t)C, a->mid, (size_t)C, (size_t)C, (size_t)n, ST));
    return model_drop_weights(m, l);
}

void usp_model_step_flops(const usp_model *m, double *forward, double *recompute)
{
    *forward = m->forward_flops, *recompute = m->recompute_flops;
}

usp_status usp_model_forward(usp_model *m, const usp_shard *shards)
{
    const double start = usp_backend_flops(BE);
    m->recompute_flops = 0;
    USP_CHECK(upload_batch(m, shards));
    USP_CHECK(model_use_weights(m, -1));
    const float *wpe = model_param(m, USP_P_WPE, -1);
    USP_CHECK(usp_embedding_forward(BE, m->residual, m->tokens, wpe ? m->positions : NULL,
                                    model_param(m, USP_P_WTE, -1), wpe, m->n, m->C, ST));
    USP_CHECK(model_drop_weights(m, -1));
    for (int l = 0; l < m->c.n_layer; l++)
        USP_CHECK(layer_forward(m, l));
    m->head_grads_ready = 0;
    USP_CHECK(head_forward(m));
    m->forward_flops = usp_backend_flops(BE) - start;
    return USP_OK;
}

/* --- backward ------------------------------------------------------------- */

static usp_status attention_backward(usp_model *m, int l)
{
    return usp_attention_backward(m->attn[attention_slot(m, l)], m->d_att, m->d_q, m->d_k, m->d_v);
}

/* The compute stream is about to issue the attention's exchanges (Ulysses, ring): the gradient collectives
 * still in flight on their own stream go first on every GPU (usp_param_store_order_grad_comm). They have
 * run beside the backward since their bucket was closed: the MLP's and the output projection's. */
static usp_status before_attention_exchanges(usp_model *m)
{
    if (!m->exchanges) /* local, or one SP rank: nothing to order */
        return USP_OK;
    return usp_param_store_order_grad_comm(m->store);
}

/* d_x as the GEMMs of the backward read it: itself in fp32; in bf16 storage, rounded into d_x_low
 * (an autocast matmul's gradient comes in its output's dtype), so every backend rounds it alike. */
static usp_status d_x_for_gemms(usp_model *m, const float **out)
{
    *out = m->d_x_low ? m->d_x_low : m->d_x;
    return m->d_x_low ? usp_buffer_convert(BE, m->d_x_low, m->d_x, (size_t)(m->n * m->C), ST) : USP_OK;
}

/* d_x holds the gradient of the layer's output; on return, that of its input. */
static usp_status layer_backward(usp_model *m, int l)
{
    layer_acts *a = &m->acts[slot(m, l)];
    const int64_t n = m->n, C = m->C, qd = m->H * m->D, kd = m->Hkv * m->D;
    const float *x = model_at(m, m->residual, l * n * C);
    USP_CHECK(model_use_weights(m, l));
    USP_CHECK(model_open_grads(m, l));
    if (m->s.recompute_layers) { /* the same ops on the same input: the same activations, bit for bit */
        const double start = usp_backend_flops(BE);
        USP_CHECK(before_attention_exchanges(m));
        USP_CHECK(attention_block_forward(m, l, a, x));
        if (!m->s.tiled_mlp)
            USP_CHECK(mlp_recompute(m, l, a, a->ln2));
        m->recompute_flops += usp_backend_flops(BE) - start;
    } else if (m->s.selective_recompute) { /* the element-wise ops again, on the kept x, mid and up */
        const double start = usp_backend_flops(BE);
        USP_CHECK(norm1_forward(m, l, a, x));
        USP_CHECK(norm2_forward(m, l, a));
        if (!m->s.tiled_mlp)
            USP_CHECK(mlp_recompute_activation(m, a));
        m->recompute_flops += usp_backend_flops(BE) - start;
    }
    /* MLP: x_out = mid + mlp(ln2); the residual passes d_x on to mid unchanged */
    const float *d_out;
    USP_CHECK(d_x_for_gemms(m, &d_out));
    USP_CHECK(mlp_backward(m, l, a, a->ln2, d_out, m->d_h));
    USP_CHECK(model_norm_backward(m, m->d_x, model_grad(m, USP_P_NORM2_W, l), model_grad(m, USP_P_NORM2_B, l), m->d_h,
                            a->mid, model_param(m, USP_P_NORM2_W, l), a->ln2_mean, a->ln2_rstd));
    /* attention: mid = x + att Wo^T */
    USP_CHECK(d_x_for_gemms(m, &d_out)); /* again: the norm's backward has added to d_x */
    USP_CHECK(linear_backward(m, m->d_att, 0, model_grad(m, USP_P_ATTN_O_W, l), model_grad(m, USP_P_ATTN_O_B, l),
                              d_out, a->att, model_param(m, USP_P_ATTN_O_W, l), qd, C));
    USP_CHECK(before_attention_exchanges(m));
    USP_CHECK(attention_backward(m, l));
    if (m->c.positions == USP_POS_ROPE) {
        const float theta = m->c.rope_theta;
        USP_CHECK(usp_rope_backward(BE, m->d_q, m->positions, n, m->H, m->D, theta, m->rope_inv_freq, ST));
        USP_CHECK(usp_rope_backward(BE, m->d_k, m->positions, n, m->Hkv, m->D, theta, m->rope_inv_freq, ST));
    }
    const float *w = model_param(m, USP_P_QKV_W, l);
    float *dw = model_grad(m, USP_P_QKV_W, l), *db = model_grad(m, USP_P_QKV_B, l);
    USP_CHECK(linear_backward(m, m->d_h, 0, dw, db, m->d_q, a->ln1, w, C, qd));
    USP_CHECK(linear_backward(m, m->d_h, 1, model_at(m, dw, qd * C), db ? model_at(m, db, qd) : NULL, m->d_k, a->ln1,
                              model_at(m, w, qd * C), C, kd));
    USP_CHECK(linear_backward(m, m->d_h, 1, model_at(m, dw, (qd + kd) * C), db ? model_at(m, db, qd + kd) : NULL,
                              m->d_v, a->ln1, model_at(m, w, (qd + kd) * C), C, kd));
    USP_CHECK(model_norm_backward(m, m->d_x, model_grad(m, USP_P_NORM1_W, l), model_grad(m, USP_P_NORM1_B, l),
                                  m->d_h, x, model_param(m, USP_P_NORM1_W, l), a->ln1_mean, a->ln1_rstd));
    USP_CHECK(model_close_grads(m, l));
    return model_drop_weights(m, l);
}

usp_status usp_model_backward(usp_model *m)
{
    USP_ASSERT(m->head_grads_ready, "usp_model_backward without a usp_model_loss with_grad since the forward");
    m->head_grads_ready = 0;
    USP_CHECK(head_backward(m));
    for (int l = (int)m->c.n_layer - 1; l >= 0; l--)
        USP_CHECK(layer_backward(m, l));
    USP_CHECK(model_open_grads(m, -1));
    float *d_wpe = model_grad(m, USP_P_WPE, -1);
    usp_status s = usp_embedding_backward(BE, model_grad(m, USP_P_WTE, -1), d_wpe, m->d_x, m->tokens,
                                          d_wpe ? m->positions : NULL, m->n, m->C, ST);
    USP_CHECK(s);
    USP_CHECK(model_close_grads(m, -1));
    if (m->c.tied_embeddings) /* the loss's opening of the tied lm_head */
        USP_CHECK(model_close_grads(m, -1));
    return usp_param_store_end_backward(m->store);
}
