/* What the model's files share (core/model/model.c: layers and passes; model_mlp.c:
 * the MLP, whole or tiled; model_head.c: the final norm, lm_head and loss,
 * whole or tiled). Not a public interface. The helpers all three call live
 * in files of their own (model_buffers.c, model_weights.c, model_blocks.c),
 * so the calls between the model's files only go one way: model.c calls the
 * MLP and the head, and every one of them calls the helpers. */
#ifndef USP_MODEL_INTERNAL_H
#define USP_MODEL_INTERNAL_H

#include "core/model/model.h"
#include "core/parallel/schedule.h"

/* What a layer's forward keeps for its backward (one set per layer, or a
 * single set shared by every layer when layers are recomputed). With the
 * selective recompute, ln1, ln2 (and their statistics) and act are one set
 * shared by every layer, recomputed by each layer's backward. */
typedef struct layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd;  /* [n, C], [n], [n] */
    float *q, *k, *v;                  /* after rope: [n, H D], [n, Hkv D] x 2; one scratch set shared by every
                                          layer when the backward does not read them (Ulysses, U > 1) */
    float *att;                        /* attention output [n, H D] */
    float *mid;                        /* residual after attention [n, C] */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *up;                         /* pre-activation [n, F] (Llama: gate [n, F] then up [n, F]); not tiled */
    float *act;                        /* [n, F]; not tiled */
} layer_acts;

struct usp_model {
    usp_model_setup s;
    usp_model_config c;
    usp_param_table table;
    usp_seq_layout layout;
    int64_t n, B, T, C, H, Hkv, D, F, V, UP; /* UP: rows of the MLP's first projection (F, or 2 F for SwiGLU) */
    int64_t tile;                      /* rows per tile of the tiled MLP / loss */
    usp_param_store *store;
    int owns_store;
    const usp_param_tensor **tensor_of; /* [(L + 1) x USP_P_KIND_COUNT]: by (layer + 1, kind); NULL if none */
    double *rope_inv_freq;             /* host [D / 2]: Llama 3's scaled frequencies; NULL: theta's */
    int head_grads_ready;              /* the loss has run the head's backward */
    double forward_flops;              /* this step's forward up to the logits (the tiled loss's included) */
    double recompute_flops;            /* this step's forward work done again in backward */
    float *residual;                   /* [L + 1, n, C]: each layer's input, and the last output */
    layer_acts *acts;                  /* [L], or [1] when layers are recomputed */
    usp_attention **attn;              /* as acts: the schedule's attention (core/parallel/schedule.h) */
    int exchanges;                     /* 1: the schedule sends (not local, not one SP rank) */
    float *lnf, *lnf_mean, *lnf_rstd, *logits, *losses; /* logits [n, V], or [tile, V] with the tiled loss */
    int32_t *tokens, *targets, *positions; /* device [n] */
    int32_t *host_targets;             /* [n] */
    int32_t *docs, *host_docs;         /* documents: the batch's tables [B][N][2], device and host; else NULL */
    float *d_x, *d_h, *d_att, *d_q, *d_k, *d_v; /* backward scratch; d_x, the residual stream's gradient, is fp32 */
    float *d_x_low;                    /* bf16 storage: d_x rounded for the GEMMs that read it (d_q's memory, or
                                          its own; NULL in fp32) */
    float *d_up, *d_act;               /* [n, UP], [n, F]; or [tile, ...] with the tiled MLP */
    float *tile_up, *tile_act;         /* tiled MLP: the recomputed hidden of one tile */
    float **owned;                     /* every buffer above, for destroy */
    int n_owned, cap_owned;
};

#define BE (m->s.backend)
#define ST (m->s.stream)

/* model_buffers.c: */

/* Allocates a model-owned buffer of `elems` elements stored as `storage` (freed by usp_model_destroy). */
usp_status model_buffer_as(usp_model *m, float **p, int64_t elems, usp_dtype storage, const char *category);

/* model_buffer_as in fp32 (statistics, logits, losses, ids), and in the model's storage dtype (tensors). */
usp_status model_buffer(usp_model *m, float **p, int64_t elems, const char *category);
usp_status model_tensor(usp_model *m, float **p, int64_t elems, const char *category);

/* Element `index` from p in the dtype of p's buffer (usp_buffer_at): how the
 * model offsets into tensors and weights, which may be stored narrower than fp32;
 * the fp32-only buffers (statistics, logits, losses, ids) are offset as plain pointers. */
float *model_at(const usp_model *m, const float *p, int64_t index);

/* model_weights.c: */

/* Indexes the parameter table by (layer, kind) for model_param and model_grad (freed by usp_model_destroy). */
usp_status model_index_tensors(usp_model *m);

/* The tensor's weights (its bucket must be in use) and gradient (its bucket open for backward). */
const float *model_param(const usp_model *m, usp_param_kind kind, int layer);
float *model_grad(const usp_model *m, usp_param_kind kind, int layer);

/* Brackets a use of a bucket's weights (layer -1: embeddings; L: final norm and lm_head). */
usp_status model_use_weights(usp_model *m, int layer);
usp_status model_drop_weights(usp_model *m, int layer);

/* Brackets backward's writes to a bucket's gradient. */
usp_status model_open_grads(usp_model *m, int layer);
usp_status model_close_grads(usp_model *m, int layer);

/* model_blocks.c: */

/* out [rows, o] = inp [rows, i] W^T + b, W [o, i]. */
usp_status model_linear(usp_model *m, int64_t rows, float *out, const float *inp, const float *w, const float *b,
                        int64_t i, int64_t o);

/* dinp (+)= dout W; dW += dout^T inp; db += column sums of dout, over `rows` rows. */
usp_status model_linear_backward(usp_model *m, int64_t rows, float *dinp, int accumulate, float *dw, float *db,
                                 const float *dout, const float *inp, const float *w, int64_t i, int64_t o);

/* The model's norm (layernorm or rmsnorm) over n rows; its backward accumulates into dinp. */
usp_status model_norm_forward(usp_model *m, float *out, float *mean, float *rstd, const float *inp, const float *w,
                              const float *b);
usp_status model_norm_backward(usp_model *m, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd);

/* model_mlp.c: */

/* Allocates the MLP's scratch (per layer in acts, or per tile). */
usp_status mlp_alloc(usp_model *m);

/* out [n, C] = MLP(h) of layer l (whole: keeps a->up, a->act for backward). */
usp_status mlp_forward(usp_model *m, int l, layer_acts *a, const float *h, float *out);

/* Recomputes the hidden a->up, a->act of a whole (untiled) MLP, for a recomputed layer. */
usp_status mlp_recompute(usp_model *m, int l, layer_acts *a, const float *h);

/* Recomputes the activation a->act of a whole MLP from its kept pre-activation a->up (selective recompute). */
usp_status mlp_recompute_activation(usp_model *m, layer_acts *a);

/* d_h = the MLP's input gradient from dout (= d_x), accumulating its weight gradients. */
usp_status mlp_backward(usp_model *m, int l, layer_acts *a, const float *h, const float *dout, float *d_h);

/* model_head.c: */

/* Allocates the head's buffers (final norm, logits or one tile of them, losses). */
usp_status head_alloc(usp_model *m);

/* Final norm, and the whole logits unless the loss is tiled. */
usp_status head_forward(usp_model *m);

/* The final norm's backward into d_x (after the loss has left d_h = dL/d lnf). */
usp_status head_backward(usp_model *m);

#endif
