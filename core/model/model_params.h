/* The parameters of a model: one allocation, carved by a table of tensors
 * computed from the config up front (as llm.c does), so that a checkpoint is
 * a walk over the table, memory is a sum that can be printed before
 * allocating, and gradients and Adam state reuse the same offsets.
 *
 * Internal tensors are Linear weights [out, in]. Per layer the query, key and
 * value projections are one tensor [(H + 2 Hkv) D, C] (rows: q, then k, then v)
 * and, for Llama, gate and up are one [2 F, C] (rows: gate, then up). The
 * Hugging Face names and layouts of each family are derived from the table
 * by the checkpoint code (core/checkpoint/checkpoint.c). */
#ifndef USP_MODEL_PARAMS_H
#define USP_MODEL_PARAMS_H

#include <stdint.h>

#include "core/model/model_config.h"

typedef enum usp_param_kind {
    USP_P_WTE,      /* [V, C] token embedding */
    USP_P_WPE,      /* [P, C] learned positions (GPT-2) */
    USP_P_NORM1_W, USP_P_NORM1_B,   /* [C] */
    USP_P_QKV_W,    /* [(H + 2 Hkv) D, C] */
    USP_P_QKV_B,    /* [(H + 2 Hkv) D] */
    USP_P_ATTN_O_W, /* [C, H D] */
    USP_P_ATTN_O_B, /* [C] */
    USP_P_NORM2_W, USP_P_NORM2_B,   /* [C] */
    USP_P_MLP_UP_W, /* [F, C] (GPT-2 c_fc) or [2 F, C] (Llama gate; up) */
    USP_P_MLP_UP_B, /* [F] */
    USP_P_MLP_DOWN_W, /* [C, F] */
    USP_P_MLP_DOWN_B, /* [C] */
    USP_P_NORMF_W, USP_P_NORMF_B,   /* [C] */
    USP_P_LM_HEAD,  /* [V, C], untied models only */
    USP_P_KIND_COUNT
} usp_param_kind;

typedef struct usp_param_tensor {
    usp_param_kind kind;
    int layer;          /* -1 for tensors outside the layers */
    int ndim;
    int64_t shape[2];
    int64_t offset;     /* elements from the start of the parameter block */
    int64_t count;
} usp_param_tensor;

typedef struct usp_param_table {
    usp_param_tensor *tensors;
    int n;
    int64_t total;      /* elements */
} usp_param_table;

/* Builds the table for a config. */
usp_status usp_param_table_make(const usp_model_config *c, usp_param_table *out);

/* Frees the table. */
void usp_param_table_free(usp_param_table *t);

/* The tensor of `kind` in `layer` (-1 outside the layers), or NULL if the model has none. */
const usp_param_tensor *usp_param_find(const usp_param_table *t, usp_param_kind kind, int layer);

/* Fills params (host, t->total floats) with the GPT-2 initialisation: N(0, 0.02)
 * weights, output projections N(0, 0.02 / sqrt(2 L)), zero biases, unit norms;
 * element i drawn from (seed, i) alone, so every rank gets the same weights. */
void usp_param_init(const usp_param_table *t, const usp_model_config *c, uint64_t seed, float *params);

/* The same initialisation for elements [lo, lo + count) of the table only (out[0] is element lo). */
void usp_param_init_range(const usp_param_table *t, const usp_model_config *c, uint64_t seed, int64_t lo,
                          int64_t count, float *out);

#endif
