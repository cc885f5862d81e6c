/* Checkpoints in the Hugging Face layout.
 *
 * `--save DIR` writes DIR/model.safetensors with the tensor names and layouts
 * of the family (GPT-2: wte, wpe, h.N.ln_1, h.N.attn.c_attn, ... with Conv1D
 * weights stored [in, out]; Llama: model.embed_tokens, model.layers.N.self_attn.q_proj,
 * ..., lm_head), DIR/config.json, and usp's own DIR/optimizer.safetensors
 * (Adam moments, step and seed in its metadata). Each file is written under a
 * temporary name and renamed. Loading accepts any such directory, including
 * one written by Hugging Face's save_pretrained (F32, F16 or BF16); without
 * optimizer.safetensors training starts a fresh optimizer. */
#ifndef USP_CHECKPOINT_H
#define USP_CHECKPOINT_H

#include "core/model_params.h"

/* Writes the checkpoint directory (created if missing); host arrays of t->total floats. */
usp_status usp_checkpoint_save(const char *dir, const usp_model_config *c, const usp_param_table *t,
                               const float *params, const float *adam_m, const float *adam_v, int64_t step,
                               uint64_t seed);

/* Reads weights (and, when present, *has_optimizer = 1 with the moments and step).
 * A missing tensor or a shape that does not match the config is USP_ERR_CONFIG naming the file and the tensor. */
usp_status usp_checkpoint_load(const char *dir, const usp_model_config *c, const usp_param_table *t, float *params,
                               float *adam_m, float *adam_v, int64_t *step, int *has_optimizer);

#endif
