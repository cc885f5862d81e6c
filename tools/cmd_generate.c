/* `usp generate --resume DIR`: tokens sampled from a checkpoint (core/train/generate.h), on one rank
 * of the simulator's runtime. The prompt is --prompt's bytes for a byte-level model (vocabulary 256,
 * as --data text:FILE trains), or by default a held-out passkey sample cut before its answer, whose
 * key the generated digits are checked against (the samples usp eval scores, in the same order). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checkpoint/checkpoint.h"
#include "core/data/data.h"
#include "core/runtime/runtime.h"
#include "core/train/generate.h"
#include "tools/checkpoint_dir.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/runtime_registry.h"

#define BYTE_VOCAB 256 /* a byte-level model: every byte is a token, and every token a byte */
#define DEFAULT_PROMPT_TOKENS 16

typedef struct generate_options {
    const char *resume, *prompt;
    int tokens, seq, sample, seed, json;
    double temperature;
} generate_options;

static const char *about =
    "Generates tokens from a checkpoint, one at a time: greedy (the most likely token) by default,\n"
    "or drawn from softmax(logits / T) with --temperature T and the generator --seed (the same seed\n"
    "gives the same tokens). The prompt is --prompt's bytes for a byte-level model (vocabulary 256,\n"
    "e.g. the tiny model trained with --data text:FILE); without --prompt it is held-out passkey\n"
    "sample --sample K (the K-th that usp eval scores, drawn with the checkpoint's seed) up to\n"
    "\"what is the pass key=\", and the generated digits are checked against its key.\n\n"
    "Runs on one rank on the CPU. No KV cache: each new token runs the forward pass again over the\n"
    "whole sequence, padded to --seq tokens (the causal mask hides the padding), so a token costs\n"
    "O(seq^2) attention: fine for trying a small model, not a serving path.";

/* Tokens as text: bytes printable in ASCII as they are, others as \n, \t, \xNN; tokens beyond a byte as <N>. */
static char *tokens_text(const int32_t *tokens, int64_t n)
{
    char *text = malloc((size_t)n * 12 + 1), *at = text;
    for (int64_t i = 0; text && i < n; i++) {
        int32_t t = tokens[i];
        if (t >= 0x20 && t < 0x7f && t != '\\')
            *at++ = (char)t, *at = 0;
        else if (t == '\\' || t == '\n' || t == '\t')
            at += sprintf(at, "\\%c", t == '\\' ? '\\' : t == '\n' ? 'n' : 't');
        else
            at += sprintf(at, t >= 0 && t < BYTE_VOCAB ? "\\x%02x" : "<%d>", (int)t);
    }
    if (text)
        *at = 0;
    return text;
}

/* The held-out passkey sample that is the prompt without --prompt. */
static int passkey_sample(const generate_options *o) { return o->sample >= 0 ? o->sample : 0; }

/* The prompt: --prompt's bytes, or the held-out passkey sample's question (and key[], its answer). */
static usp_status make_prompt(const generate_options *o, const usp_generate_config *g, uint64_t data_seed,
                              int32_t *prompt, int64_t *n_prompt, int32_t *key)
{
    if (!o->prompt)
        return usp_generate_passkey_prompt(data_seed, passkey_sample(o), g->seq_len, prompt, n_prompt, key);
    if (g->model.vocab != BYTE_VOCAB)
        return usp_error(USP_ERR_CONFIG, "--prompt with model %s from %s: its vocabulary is %lld tokens, not the 256 "
                         "bytes of a byte-level model, so the prompt's bytes are not its tokens; drop --prompt (the "
                         "prompt is then a held-out passkey sample), or generate from a model of vocabulary 256 "
                         "(e.g. usp train --data text:FILE --save DIR)", g->model.name, o->resume,
                         (long long)g->model.vocab);
    size_t n = strlen(o->prompt);
    if ((int64_t)n > g->seq_len)
        return usp_error(USP_ERR_CONFIG, "--prompt of %zu bytes is longer than --seq %lld, the length the model runs "
                         "at: give --seq %zu or more, or a shorter prompt", n, (long long)g->seq_len, n);
    for (size_t i = 0; i < n; i++)
        prompt[i] = (unsigned char)o->prompt[i];
    *n_prompt = (int64_t)n;
    return USP_OK;
}

/* The checkpoint's model, and the seed its run drew data with (a Hugging Face directory: train's default). */
static usp_status read_checkpoint(const generate_options *o, usp_generate_config *g, usp_checkpoint_state *state,
                                  uint64_t *data_seed)
{
    if (!o->resume)
        return usp_error(USP_ERR_CONFIG, "usp generate needs --resume DIR: the checkpoint to generate from (the "
                         "directory usp train --save DIR wrote, or a Hugging Face directory)");
    USP_CHECK(checkpoint_dir_check("--resume", o->resume, 0));
    USP_CHECK(usp_checkpoint_read_state(o->resume, state));
    USP_CHECK(checkpoint_model_load("--resume", o->resume, &g->model));
    *data_seed = state->has_seed ? state->seed : 1234; /* usp_train_defaults' seed */
    if (o->prompt && o->sample >= 0)
        return usp_error(USP_ERR_CONFIG, "--sample %d with --prompt: --sample picks the held-out passkey sample that "
                         "is the prompt when --prompt is not given; drop one of them", o->sample);
    return USP_OK;
}

/* Digits of the key generated right, in their places. */
static int digits_right(const int32_t *key, const int32_t *out, int64_t n)
{
    int right = 0;
    for (int64_t i = 0; i < n && i < USP_PASSKEY_DIGITS; i++)
        right += out[i] == key[i];
    return right;
}

/* What a run prints: the prompt, the generated tokens and (passkey) the key as text, the digits right. */
typedef struct generated_text {
    char *prompt, *text, *key; /* key: NULL with --prompt */
    int right;
} generated_text;

static void print_text(const generate_options *o, const usp_generate_config *g, const generated_text *t,
                       const usp_checkpoint_state *state)
{
    char from[48] = "Hugging Face weights";
    if (state->is_usp)
        snprintf(from, sizeof from, "step %lld", (long long)state->step);
    printf("usp generate: model %s from %s (%s), one rank, seq %lld, ", g->model.name, o->resume, from,
           (long long)g->seq_len);
    if (g->temperature > 0)
        printf("temperature %g, seed %llu\n", g->temperature, (unsigned long long)g->seed);
    else
        printf("greedy\n");
    if (o->prompt)
        printf("prompt (%lld tokens): %s\n", (long long)g->n_prompt, t->prompt);
    else
        printf("prompt (%lld tokens, held-out passkey sample %d): %s\n", (long long)g->n_prompt, passkey_sample(o),
               t->prompt);
    printf("generated (%lld tokens): %s\n", (long long)g->n_new, t->text);
    if (t->key)
        printf("key %s, generated %s (%d of %d digits)\n", t->key, t->text, t->right, USP_PASSKEY_DIGITS);
}

static usp_status print_json(const generate_options *o, const usp_generate_config *g, const generated_text *t,
                             const usp_checkpoint_state *state)
{
    json_t *tokens = json_array();
    for (int64_t i = 0; tokens && i < g->n_new; i++)
        json_array_append_new(tokens, json_integer(g->out[i]));
    json_t *j = json_pack("{s:s, s:I, s:I, s:f, s:I, s:I, s:s, s:o?, s:s}", "model", g->model.name, "checkpoint_step",
                          (json_int_t)state->step, "seq", (json_int_t)g->seq_len, "temperature", g->temperature,
                          "seed", (json_int_t)g->seed, "prompt_tokens", (json_int_t)g->n_prompt, "prompt", t->prompt,
                          "tokens", tokens, "text", t->text);
    if (j && t->key && (json_object_set_new(j, "sample", json_integer(passkey_sample(o))) != 0 ||
                        json_object_set_new(j, "key", json_string(t->key)) != 0 ||
                        json_object_set_new(j, "digits_right", json_integer(t->right)) != 0 ||
                        json_object_set_new(j, "digits", json_integer(USP_PASSKEY_DIGITS)) != 0))
        json_decref(j), j = NULL;
    char *line = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!line)
        return usp_error(USP_ERR_RUNTIME, "out of memory writing the JSON");
    printf("%s\n", line);
    free(line);
    return USP_OK;
}

static usp_status print_result(const generate_options *o, const usp_generate_config *g, const int32_t *key,
                               const usp_checkpoint_state *state)
{
    generated_text t = {.prompt = tokens_text(g->prompt, g->n_prompt), .text = tokens_text(g->out, g->n_new),
                        .key = o->prompt ? NULL : tokens_text(key, USP_PASSKEY_DIGITS)};
    t.right = t.key ? digits_right(key, g->out, g->n_new) : 0;
    usp_status s = USP_OK;
    if (!t.prompt || !t.text || (!o->prompt && !t.key))
        s = usp_error(USP_ERR_RUNTIME, "out of memory for the text");
    else if (o->json)
        s = print_json(o, g, &t, state);
    else
        print_text(o, g, &t, state);
    free(t.prompt), free(t.text), free(t.key);
    return s;
}

static usp_status run(const generate_options *o)
{
    usp_generate_config g = {.seq_len = o->seq, .temperature = o->temperature, .seed = (uint64_t)o->seed};
    usp_checkpoint_state state;
    uint64_t data_seed = 0;
    USP_CHECK(read_checkpoint(o, &g, &state, &data_seed));
    int32_t *prompt, *out = NULL, key[USP_PASSKEY_DIGITS];
    USP_CHECK(usp_malloc((void **)&prompt, (size_t)g.seq_len * sizeof *prompt, "the prompt"));
    usp_status s = make_prompt(o, &g, data_seed, prompt, &g.n_prompt, key);
    g.prompt = prompt;
    g.n_new = o->tokens >= 0 ? o->tokens : o->prompt ? DEFAULT_PROMPT_TOKENS : USP_PASSKEY_DIGITS;
    if (s == USP_OK)
        s = usp_generate_check(&g); /* before the runtime starts: the message then names no rank */
    if (s == USP_OK)
        s = usp_malloc((void **)&out, (size_t)g.n_new * sizeof *out, "the generated tokens");
    g.out = out, g.checkpoint = o->resume;
    usp_runtime_t *rt = NULL;
    usp_runtime_options ro = {.world_size = 1};
    if (s == USP_OK)
        s = runtime_registry_create("sim", &ro, &rt);
    if (s == USP_OK)
        s = usp_runtime_run(rt, usp_generate_rank, &g);
    if (s == USP_OK)
        s = print_result(o, &g, key, &state);
    if (rt)
        usp_runtime_destroy(rt);
    free(prompt), free(out);
    return s;
}

int cmd_generate(int argc, char **argv)
{
    generate_options o = {.tokens = -1, .seq = 64, .sample = -1, .seed = 1234};
    const cli_option options[] = {
        {"--resume", CLI_STRING, &o.resume, "DIR", "the checkpoint (usp train --save DIR, or a Hugging Face "
         "directory); required", 0, -1},
        {"--prompt", CLI_STRING, &o.prompt, "TEXT", "the prompt's bytes as tokens (a byte-level model: vocabulary "
         "256); default: a held-out passkey sample's question", 0, -1},
        {"--tokens", CLI_INT, &o.tokens, "N", "new tokens (default 5, the key's digits, for the passkey prompt; 16 "
         "with --prompt); the prompt and the new tokens but the last fit --seq", 0, -1},
        {"--temperature", CLI_DOUBLE, &o.temperature, "T", "0: greedy (default); > 0: draws from softmax(logits / T)",
         0, -1},
        {"--seed", CLI_INT, &o.seed, "S", "seed of the draws with --temperature (default 1234)", 0, 2147483647},
        {"--seq", CLI_INT, &o.seq, "N", "the length the model runs at: the passkey sample's length, as usp train "
         "--seq trained it (default 64)", 2, 1 << 24},
        {"--sample", CLI_INT, &o.sample, "K", "the held-out passkey sample to prompt with (default 0: usp eval's "
         "first)", 0, 1 << 30},
        {"--json", CLI_FLAG, &o.json, NULL, "one JSON object: prompt_tokens, prompt, tokens, text (passkey: key, "
         "digits_right)", 0, -1},
        {0},
    };
    const cli_command c = {.name = "generate", .usage = "usp generate --resume DIR [options]", .about = about,
                           .options = options};
    int done;
    usp_status s = cli_parse(&c, argc, argv, 2, &done);
    if (s != USP_OK || done)
        return s != USP_OK ? cli_fail("generate", s) : 0;
    s = run(&o);
    return s != USP_OK ? cli_fail("generate", s) : 0;
}
