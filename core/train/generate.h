/* Autoregressive generation from a checkpoint (usp generate): the model reads the
 * sequence so far and the next token is drawn from the logits of its last real
 * position, greedily or from softmax(logits / T).
 *
 * The simplest correct form: no KV cache. Each new token runs the whole forward
 * pass again over the sequence so far, padded to the model's length N (token 0
 * past the real length; the causal mask keeps the real positions from seeing
 * the padding, so row len - 1 is what a forward of len tokens gives), on one
 * rank. A token costs a forward of N tokens: generating G tokens is O(G N^2)
 * attention work where a cache would make it O(G N).
 *
 * Nothing here prints: the command formats the tokens it gets back. */
#ifndef USP_GENERATE_H
#define USP_GENERATE_H

#include <stdint.h>

#include "core/model/model_config.h"
#include "core/runtime/rank.h"

/* What one generation run reads and where its tokens go. */
typedef struct usp_generate_config {
    usp_model_config model;   /* the checkpoint's (its config.json) */
    const char *checkpoint;   /* the directory whose weights are loaded (usp's or Hugging Face's) */
    int64_t seq_len;          /* N, the length every forward runs at: n_prompt + n_new - 1 <= N */
    const int32_t *prompt;    /* [n_prompt] tokens, each below the model's vocabulary */
    int64_t n_prompt;         /* >= 1 */
    int64_t n_new;            /* tokens to generate, >= 1 */
    double temperature;       /* 0: greedy (the argmax); > 0: a draw from softmax(logits / temperature) */
    uint64_t seed;            /* the draws' generator (the same seed, the same tokens) */
    int32_t *out;             /* [n_new]: the generated tokens */
} usp_generate_config;

/* Checks the lengths, the temperature and the prompt's tokens against the model, before any rank runs
 * (USP_ERR_CONFIG naming the option: --tokens, --seq, --temperature, --prompt). */
usp_status usp_generate_check(const usp_generate_config *g);

/* One rank's generation (arg: usp_generate_config *); a world of one rank only. */
usp_status usp_generate_rank(const usp_rank_ctx *ctx, void *arg);

/* The next token from logits[V]: the first largest with temperature 0, else a draw from
 * softmax(logits / temperature) with the generator state *rng (advanced; splitmix64). */
int32_t usp_generate_pick(const float *logits, int64_t V, double temperature, uint64_t *rng);

/* Held-out passkey sample `sample` (usp eval's k-th, drawn with `data_seed`) of real length `len`, cut
 * before its answer: prompt[*n_prompt] (room for len tokens) ends with "what is the pass key=", and
 * key[USP_PASSKEY_DIGITS] is the answer (tokens are characters). */
usp_status usp_generate_passkey_prompt(uint64_t data_seed, int64_t sample, int64_t len, int32_t *prompt,
                                       int64_t *n_prompt, int32_t *key);

#endif
