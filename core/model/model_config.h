/* Model configurations: the shape of a decoder-only transformer, from a
 * preset name or from a Hugging Face config.json of a GPT-2 or Llama model.
 *
 * One struct describes both families; the family only decides the Hugging
 * Face names (of config fields and of tensors), the other fields decide the
 * math. A config that came from anywhere passes usp_model_config_check before
 * any code sizes a buffer from it: every dimension is positive, at most
 * INT32_MAX (so a product of two fits int64_t), the heads divide the width
 * (unless the head width is given) and the parameter count fits in 2^53, so
 * index and size arithmetic downstream can never overflow.
 *
 * The attention is H heads of width D: q is [C -> H D], k and v [C -> Hkv D],
 * o [H D -> C]. D defaults to C / H; a config may give it (head_dim, as
 * Qwen3 and Gemma do: Qwen3-4B has C 2560 but 32 heads of 128), and then the
 * attention width H D is independent of C. */
#ifndef USP_MODEL_CONFIG_H
#define USP_MODEL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/status.h"

typedef enum usp_model_family { USP_FAMILY_GPT2, USP_FAMILY_LLAMA } usp_model_family;
typedef enum usp_norm_kind { USP_NORM_LAYERNORM, USP_NORM_RMSNORM } usp_norm_kind;
typedef enum usp_pos_kind { USP_POS_LEARNED, USP_POS_ROPE } usp_pos_kind;
typedef enum usp_mlp_kind { USP_MLP_GELU_TANH, USP_MLP_SWIGLU } usp_mlp_kind;
typedef enum usp_rope_scaling_kind { USP_ROPE_SCALING_NONE, USP_ROPE_SCALING_LLAMA3 } usp_rope_scaling_kind;

/* Llama 3.1/3.2's "rope_scaling": {"rope_type": "llama3", ...}; all zero = none. */
typedef struct usp_rope_scaling {
    usp_rope_scaling_kind kind;
    float factor;             /* long wavelengths are divided by it */
    float low_freq_factor;    /* wavelengths above original_max_pos / low_freq_factor are scaled */
    float high_freq_factor;   /* wavelengths below original_max_pos / high_freq_factor are kept */
    int64_t original_max_pos; /* the context length the model was pretrained at */
} usp_rope_scaling;

/* The most layers a config's layer_types may name (full_layers' bits). */
#define USP_MODEL_TYPED_LAYERS_MAX 256

typedef struct usp_model_config {
    char name[64];            /* preset name or the file it came from (its last 63 bytes) */
    usp_model_family family;  /* decides the Hugging Face tensor names */
    int64_t vocab, n_layer, n_head, n_kv_head, d_model, d_ff, max_seq;
    int64_t head_dim;         /* width of one attention head; 0: d_model / n_head (every preset) */
    usp_norm_kind norm;
    float norm_eps;
    usp_pos_kind positions;
    float rope_theta;
    usp_mlp_kind mlp;
    int tied_embeddings;      /* lm_head shares wte */
    int bias;                 /* linear layers have biases (GPT-2: 1, Llama: 0) */
    usp_rope_scaling rope_scaling; /* rope only; kind NONE unless the config asks for it */
    int64_t sliding_window;   /* the keys a query of a window layer sees, itself included (Mistral's
                                 sliding_window; core/ops/mask.h); 0: none */
    uint64_t full_layers[USP_MODEL_TYPED_LAYERS_MAX / 64]; /* layer_types (Gemma 2 and 3): bit l set when layer l
                                 attends to the whole causal past although the model has a window */
} usp_model_config;

/* The names usp_model_config_preset accepts, comma-separated ("tiny, gpt2-124m, ..."). */
const char *usp_model_config_preset_names(void);

/* Fills *out with the preset `name`; an unknown name is USP_ERR_CONFIG listing the presets. */
usp_status usp_model_config_preset(const char *name, usp_model_config *out);

/* Reads a Hugging Face config.json (model_type gpt2 or llama); errors name the file and the field. */
usp_status usp_model_config_from_hf_json(const char *path, usp_model_config *out);

/* A preset name, a config.json path, or a directory holding config.json (presets win over paths). */
usp_status usp_model_config_load(const char *spec, usp_model_config *out);

/* Writes a config.json that Hugging Face's from_pretrained accepts for the family (atomically). */
usp_status usp_model_config_write_hf_json(const usp_model_config *c, const char *path);

/* USP_OK when every field is in range and consistent; else USP_ERR_CONFIG naming the field. */
usp_status usp_model_config_check(const usp_model_config *c);

/* USP_OK when kv_heads divides heads (grouped-query attention: each key/value head serves a whole
 * group of query heads); else USP_ERR_CONFIG, "[source: ]KV_NAME K does not divide HEADS_NAME H; ...",
 * the names being config fields or command-line options (source may be NULL). */
usp_status usp_model_check_kv_heads(const char *source, const char *kv_name, int64_t kv_heads,
                                    const char *heads_name, int64_t heads);

/* Number of parameters (tied embeddings counted once); -1 if the count overflows int64_t. */
int64_t usp_model_config_param_count(const usp_model_config *c);

/* Width D of one attention head: head_dim when set, else d_model / n_head. */
int64_t usp_model_config_head_dim(const usp_model_config *c);

/* Rotary inverse frequency of pair i (0 <= i < head_dim/2), llama3 scaling applied when set. */
double usp_model_config_rope_inv_freq(const usp_model_config *c, int64_t i);

/* The sliding window of layer `layer`: `window` when positive (--window: the window layers', every layer's
 * when the config has none), else the config's; 0 for a layer that attends to the whole causal past. */
int64_t usp_model_config_layer_window(const usp_model_config *c, int64_t layer, int64_t window);

/* The window every layer has (as usp_model_config_layer_window), which may pick the sequence's layout
 * (core/parallel/layout.h); 0 when some layer has none. */
int64_t usp_model_config_common_window(const usp_model_config *c, int64_t window);

/* Width of the attention (q and its output): n_head x the head width; d_model unless head_dim is set. */
int64_t usp_model_config_attention_width(const usp_model_config *c);

/* 1 when a and b describe the same model (every field but the name; the head width as used), else 0. */
int usp_model_config_equal(const usp_model_config *a, const usp_model_config *b);

/* 1 and the first shape field in which a and b differ, as "d_model 64 vs 128", into out (family, vocab,
 * layers, heads, widths, max_seq, norm, positions, MLP, tying, bias, sliding window, layer types); 0 when
 * their shapes are the same. */
int usp_model_config_shape_difference(const usp_model_config *a, const usp_model_config *b, char *out, size_t size);

#endif
