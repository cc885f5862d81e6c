/* Model configurations: presets, Hugging Face config.json (read and write),
 * range checks and the parameter count.
 *
 * config.json is read with jansson, strictly: a field of the wrong JSON type
 * or a feature usp does not implement (erf GELU, linear RoPE scaling, biases
 * on only some Llama projections) is an error naming the file and the field,
 * never silently a different model. Fields that only matter to other
 * frameworks (dropouts, token ids, torch_dtype) are ignored. Floats are
 * written in their shortest round-trip decimal form, so write then read gives
 * the same bits. */
#include "core/model_config.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/atomic_file.h"

/* Sources, figures checked against the published configs:
 * - gpt2-124m: huggingface.co/openai-community/gpt2 config.json (vocab_size 50257,
 *   n_positions 1024, n_embd 768, n_layer 12, n_head 12, n_inner null = 3072,
 *   activation_function gelu_new, layer_norm_epsilon 1e-05, tied); 124,439,808 parameters.
 * - llama-1b: meta-llama/Llama-3.2-1B config.json (hidden_size 2048, intermediate_size
 *   8192, 16 layers, 32 heads, 8 kv heads, rms_norm_eps 1e-05, rope_theta 500000,
 *   rope_scaling llama3 factor 32 / low 1 / high 4 / original 8192, max 131072, tied);
 *   Meta's model card gives 1.23B parameters.
 * - llama-7b: meta-llama/Llama-2-7b-hf config.json (4096, 11008, 32 layers, 32 heads,
 *   max 4096, untied). rms_norm_eps: 1e-05, as in Meta's params.json ("norm_eps": 1e-05)
 *   and the HF config since it was corrected from an initial 1e-06; 6,738,415,616 parameters.
 * - llama-13b: meta-llama/Llama-2-13b-hf config.json (5120, 13824, 40 layers, 40 heads,
 *   rms_norm_eps 1e-05, max 4096, untied); 13,015,864,320 parameters. */
static const usp_model_config presets[] = {
    {.name = "tiny", .family = USP_FAMILY_LLAMA, .vocab = 256, .n_layer = 2, .n_head = 4, .n_kv_head = 2,
     .d_model = 64, .d_ff = 172, .max_seq = 1048576, .norm = USP_NORM_RMSNORM, .norm_eps = 1e-5f,
     .positions = USP_POS_ROPE, .rope_theta = 10000.0f, .mlp = USP_MLP_SWIGLU, .tied_embeddings = 1, .bias = 0},
    {.name = "gpt2-124m", .family = USP_FAMILY_GPT2, .vocab = 50257, .n_layer = 12, .n_head = 12, .n_kv_head = 12,
     .d_model = 768, .d_ff = 3072, .max_seq = 1024, .norm = USP_NORM_LAYERNORM, .norm_eps = 1e-5f,
     .positions = USP_POS_LEARNED, .mlp = USP_MLP_GELU_TANH, .tied_embeddings = 1, .bias = 1},
    {.name = "llama-1b", .family = USP_FAMILY_LLAMA, .vocab = 128256, .n_layer = 16, .n_head = 32, .n_kv_head = 8,
     .d_model = 2048, .d_ff = 8192, .max_seq = 131072, .norm = USP_NORM_RMSNORM, .norm_eps = 1e-5f,
     .positions = USP_POS_ROPE, .rope_theta = 500000.0f, .mlp = USP_MLP_SWIGLU, .tied_embeddings = 1, .bias = 0,
     .rope_scaling = {USP_ROPE_SCALING_LLAMA3, 32.0f, 1.0f, 4.0f, 8192}},
    {.name = "llama-7b", .family = USP_FAMILY_LLAMA, .vocab = 32000, .n_layer = 32, .n_head = 32, .n_kv_head = 32,
     .d_model = 4096, .d_ff = 11008, .max_seq = 4096, .norm = USP_NORM_RMSNORM, .norm_eps = 1e-5f,
     .positions = USP_POS_ROPE, .rope_theta = 10000.0f, .mlp = USP_MLP_SWIGLU, .tied_embeddings = 0, .bias = 0},
    {.name = "llama-13b", .family = USP_FAMILY_LLAMA, .vocab = 32000, .n_layer = 40, .n_head = 40, .n_kv_head = 40,
     .d_model = 5120, .d_ff = 13824, .max_seq = 4096, .norm = USP_NORM_RMSNORM, .norm_eps = 1e-5f,
     .positions = USP_POS_ROPE, .rope_theta = 10000.0f, .mlp = USP_MLP_SWIGLU, .tied_embeddings = 0, .bias = 0},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

const char *usp_model_config_preset_names(void) { return "tiny, gpt2-124m, llama-1b, llama-7b, llama-13b"; }

usp_status usp_model_config_preset(const char *name, usp_model_config *out)
{
    for (size_t i = 0; i < N_PRESETS; i++)
        if (name && strcmp(name, presets[i].name) == 0) {
            *out = presets[i];
            return USP_OK;
        }
    return usp_error(USP_ERR_CONFIG, "model \"%s\" is not a preset; the presets are %s (or give a config.json)",
                     name ? name : "(null)", usp_model_config_preset_names());
}

/* ---- checks ---------------------------------------------------------------------------- */

/* The checked fields, and what each is called where the config came from, so a
 * message names the field the user actually wrote. */
enum { F_VOCAB, F_N_LAYER, F_N_HEAD, F_N_KV_HEAD, F_D_MODEL, F_D_FF, F_MAX_SEQ, F_NORM_EPS, F_ROPE_THETA,
       F_ROPE_SCALING, F_COUNT };
static const char *const usp_field_names[F_COUNT] = {"vocab", "n_layer", "n_head", "n_kv_head", "d_model",
                                                     "d_ff", "max_seq", "norm_eps", "rope_theta", "rope_scaling"};
static const char *const gpt2_field_names[F_COUNT] = {
    "vocab_size", "n_layer", "n_head", "n_head", "n_embd", "n_inner (4 x n_embd when null)", "n_positions",
    "layer_norm_epsilon", "rope_theta", "rope_scaling"};
static const char *const llama_field_names[F_COUNT] = {
    "vocab_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "hidden_size", "intermediate_size", "max_position_embeddings", "rms_norm_eps",
    "rope_theta", "rope_scaling"};

static int mul_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static int add_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }

int64_t usp_model_config_param_count(const usp_model_config *c)
{
    const int64_t C = c->d_model, F = c->d_ff, V = c->vocab, L = c->n_layer;
    int64_t hd = c->n_head > 0 ? C / c->n_head : 0, kv, t, layer = 0, total = 0;
    int ok = mul_ok(c->n_kv_head, hd, &kv);
    const int64_t norm = c->norm == USP_NORM_LAYERNORM ? 2 : 1; /* weight (+ bias) */
    /* attention: q (C x C), k and v (C x kv each), o (C x C); biases C + 2 kv + C */
    ok = ok && mul_ok(C, C, &t) && mul_ok(t, 2, &t) && add_ok(layer, t, &layer);
    ok = ok && mul_ok(C, kv, &t) && mul_ok(t, 2, &t) && add_ok(layer, t, &layer);
    if (c->bias)
        ok = ok && add_ok(layer, 2 * C, &layer) && mul_ok(kv, 2, &t) && add_ok(layer, t, &layer);
    /* mlp: gelu has fc (C x F) and proj (F x C); swiglu has gate, up and down */
    const int64_t mats = c->mlp == USP_MLP_SWIGLU ? 3 : 2;
    ok = ok && mul_ok(C, F, &t) && mul_ok(t, mats, &t) && add_ok(layer, t, &layer);
    if (c->bias)
        ok = ok && mul_ok(F, mats - 1, &t) && add_ok(layer, t, &layer) && add_ok(layer, C, &layer);
    ok = ok && mul_ok(norm * 2, C, &t) && add_ok(layer, t, &layer); /* two norms per layer */
    ok = ok && mul_ok(layer, L, &total);
    ok = ok && mul_ok(V, C, &t) && mul_ok(t, c->tied_embeddings ? 1 : 2, &t) && add_ok(total, t, &total);
    if (c->positions == USP_POS_LEARNED)
        ok = ok && mul_ok(c->max_seq, C, &t) && add_ok(total, t, &total);
    ok = ok && mul_ok(norm, C, &t) && add_ok(total, t, &total); /* final norm */
    return ok ? total : -1;
}

int64_t usp_model_config_head_dim(const usp_model_config *c) { return c->n_head > 0 ? c->d_model / c->n_head : 0; }

static usp_status check_named(const usp_model_config *c, const char *const names[F_COUNT], const char *source)
{
    const struct {
        int field;
        int64_t value;
    } dims[] = {{F_VOCAB, c->vocab},       {F_N_LAYER, c->n_layer}, {F_D_MODEL, c->d_model}, {F_N_HEAD, c->n_head},
                {F_N_KV_HEAD, c->n_kv_head}, {F_D_FF, c->d_ff},     {F_MAX_SEQ, c->max_seq}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].value < 1 || dims[i].value > INT32_MAX)
            return usp_error(USP_ERR_CONFIG, "%s: %s is %lld; it must be between 1 and %d", source,
                             names[dims[i].field], (long long)dims[i].value, INT32_MAX);
    if (c->d_model % c->n_head != 0)
        return usp_error(USP_ERR_CONFIG,
                         "%s: %s %lld does not divide %s %lld; the head width d_model / n_head must be whole",
                         source, names[F_N_HEAD], (long long)c->n_head, names[F_D_MODEL], (long long)c->d_model);
    if (c->n_head % c->n_kv_head != 0)
        return usp_error(USP_ERR_CONFIG,
                         "%s: %s %lld does not divide %s %lld; each key/value head serves a whole group of query "
                         "heads (use a divisor of %lld)",
                         source, names[F_N_KV_HEAD], (long long)c->n_kv_head, names[F_N_HEAD], (long long)c->n_head,
                         (long long)c->n_head);
    if ((unsigned)c->family > USP_FAMILY_LLAMA || (unsigned)c->norm > USP_NORM_RMSNORM ||
        (unsigned)c->positions > USP_POS_ROPE || (unsigned)c->mlp > USP_MLP_SWIGLU ||
        (unsigned)c->rope_scaling.kind > USP_ROPE_SCALING_LLAMA3 || (c->tied_embeddings & ~1) || (c->bias & ~1))
        return usp_error(USP_ERR_CONFIG, "%s: an enum or flag field is out of range (family %d, norm %d, positions "
                         "%d, mlp %d, rope_scaling %d, tied_embeddings %d, bias %d)", source, (int)c->family,
                         (int)c->norm, (int)c->positions, (int)c->mlp, (int)c->rope_scaling.kind,
                         c->tied_embeddings, c->bias);
    if (!(c->norm_eps > 0.0f && c->norm_eps <= 1.0f)) /* also false for NaN */
        return usp_error(USP_ERR_CONFIG, "%s: %s is %g; it must be in (0, 1], typically 1e-5 or 1e-6", source,
                         names[F_NORM_EPS], (double)c->norm_eps);
    if (c->positions == USP_POS_ROPE) {
        if ((c->d_model / c->n_head) % 2 != 0)
            return usp_error(USP_ERR_CONFIG, "%s: rotary embeddings rotate pairs, but the head width %s / %s = "
                             "%lld is odd", source, names[F_D_MODEL], names[F_N_HEAD],
                             (long long)(c->d_model / c->n_head));
        if (!(c->rope_theta > 0.0f && isfinite(c->rope_theta)))
            return usp_error(USP_ERR_CONFIG, "%s: %s is %g; it must be a positive number such as 10000", source,
                             names[F_ROPE_THETA], (double)c->rope_theta);
    }
    const usp_rope_scaling *s = &c->rope_scaling;
    if (s->kind == USP_ROPE_SCALING_LLAMA3) {
        if (c->positions != USP_POS_ROPE)
            return usp_error(USP_ERR_CONFIG, "%s: %s is set but the positions are learned, not rotary", source,
                             names[F_ROPE_SCALING]);
        if (!(s->factor >= 1.0f && isfinite(s->factor)) || !(s->low_freq_factor > 0.0f) ||
            !(s->high_freq_factor > s->low_freq_factor && isfinite(s->high_freq_factor)) ||
            s->original_max_pos < 1 || s->original_max_pos > INT32_MAX)
            return usp_error(USP_ERR_CONFIG, "%s: %s (llama3) has factor %g, low_freq_factor %g, high_freq_factor "
                             "%g, original_max_position_embeddings %lld; it needs factor >= 1, 0 < low < high and "
                             "a positive original length (Llama 3.2: 32, 1, 4, 8192)", source,
                             names[F_ROPE_SCALING], (double)s->factor, (double)s->low_freq_factor,
                             (double)s->high_freq_factor, (long long)s->original_max_pos);
    }
    int64_t n = usp_model_config_param_count(c);
    if (n < 0 || n > ((int64_t)1 << 53))
        return usp_error(USP_ERR_CONFIG, "%s: the model has more than 2^53 parameters (%s %lld, %s %lld, %s %lld, "
                         "%s %lld); that is no model any machine can hold", source, names[F_N_LAYER],
                         (long long)c->n_layer, names[F_D_MODEL], (long long)c->d_model, names[F_D_FF],
                         (long long)c->d_ff, names[F_VOCAB], (long long)c->vocab);
    return USP_OK;
}

usp_status usp_model_config_check(const usp_model_config *c)
{
    char source[96];
    snprintf(source, sizeof source, "model config \"%.63s\"", c->name);
    return check_named(c, usp_field_names, source);
}

/* Llama 3's frequency-dependent interpolation (transformers' _compute_llama3_parameters):
 * wavelength w = 2 pi / f of the unscaled f = theta^(-2i/hd); w below L/high is kept, w
 * above L/low is divided by `factor`, and in between f is blended with
 * s = (L/w - low) / (high - low): f' = (1 - s) f / factor + s f. */
double usp_model_config_rope_inv_freq(const usp_model_config *c, int64_t i)
{
    const double hd = (double)usp_model_config_head_dim(c);
    const double f = pow((double)c->rope_theta, -2.0 * (double)i / hd);
    const usp_rope_scaling *s = &c->rope_scaling;
    if (s->kind != USP_ROPE_SCALING_LLAMA3)
        return f;
    const double L = (double)s->original_max_pos, w = 2.0 * M_PI / f;
    if (w < L / s->high_freq_factor)
        return f;
    if (w > L / s->low_freq_factor)
        return f / s->factor;
    const double sm = (L / w - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
    return (1.0 - sm) * f / s->factor + sm * f;
}

int usp_model_config_equal(const usp_model_config *a, const usp_model_config *b)
{
    const usp_rope_scaling *x = &a->rope_scaling, *y = &b->rope_scaling;
    return a->family == b->family && a->vocab == b->vocab && a->n_layer == b->n_layer && a->n_head == b->n_head &&
           a->n_kv_head == b->n_kv_head && a->d_model == b->d_model && a->d_ff == b->d_ff &&
           a->max_seq == b->max_seq && a->norm == b->norm && a->norm_eps == b->norm_eps &&
           a->positions == b->positions && (a->positions != USP_POS_ROPE || a->rope_theta == b->rope_theta) &&
           a->mlp == b->mlp && a->tied_embeddings == b->tied_embeddings && a->bias == b->bias &&
           x->kind == y->kind &&
           (x->kind == USP_ROPE_SCALING_NONE ||
            (x->factor == y->factor && x->low_freq_factor == y->low_freq_factor &&
             x->high_freq_factor == y->high_freq_factor && x->original_max_pos == y->original_max_pos));
}

/* ---- reading config.json --------------------------------------------------------------- */

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* One field of a JSON object: absent (or null, when null_is_absent) takes the
 * default when there is one; a wrong type is an error naming the field. */
typedef struct hf_reader {
    const char *path;
    const json_t *obj;
} hf_reader;

static usp_status hf_int(const hf_reader *r, const char *key, int required, int64_t dflt, int64_t *out)
{
    const json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return usp_error(USP_ERR_CONFIG, "%s: missing field \"%s\" (a positive integer)", r->path, key);
        *out = dflt;
        return USP_OK;
    }
    if (!json_is_integer(v))
        return usp_error(USP_ERR_CONFIG, "%s: field \"%s\" is %s; it must be an integer", r->path, key, json_kind(v));
    *out = (int64_t)json_integer_value(v);
    return USP_OK;
}

static usp_status hf_float(const hf_reader *r, const char *key, double dflt, float *out)
{
    const json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) {
        *out = (float)dflt;
        return USP_OK;
    }
    if (!json_is_number(v))
        return usp_error(USP_ERR_CONFIG, "%s: field \"%s\" is %s; it must be a number", r->path, key, json_kind(v));
    double d = json_number_value(v);
    /* out of float range becomes inf (and tiny values 0): the range check names the field */
    *out = fabs(d) > FLT_MAX ? (d > 0 ? INFINITY : -INFINITY) : (float)d;
    return USP_OK;
}

static usp_status hf_bool(const hf_reader *r, const char *key, int dflt, int *out)
{
    const json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return USP_OK;
    }
    if (!json_is_boolean(v))
        return usp_error(USP_ERR_CONFIG, "%s: field \"%s\" is %s; it must be true or false", r->path, key,
                         json_kind(v));
    *out = json_is_true(v);
    return USP_OK;
}

/* A string field; NULL when absent or null. */
static usp_status hf_string(const hf_reader *r, const char *key, const char **out)
{
    const json_t *v = json_object_get(r->obj, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return USP_OK;
    if (!json_is_string(v))
        return usp_error(USP_ERR_CONFIG, "%s: field \"%s\" is %s; it must be a string", r->path, key, json_kind(v));
    *out = json_string_value(v);
    return USP_OK;
}

static usp_status hf_read_gpt2(const hf_reader *r, usp_model_config *c)
{
    c->family = USP_FAMILY_GPT2;
    c->norm = USP_NORM_LAYERNORM;
    c->positions = USP_POS_LEARNED;
    c->mlp = USP_MLP_GELU_TANH;
    c->bias = 1;
    USP_CHECK(hf_int(r, "vocab_size", 1, 0, &c->vocab));
    USP_CHECK(hf_int(r, "n_positions", 1, 0, &c->max_seq));
    USP_CHECK(hf_int(r, "n_embd", 1, 0, &c->d_model));
    USP_CHECK(hf_int(r, "n_layer", 1, 0, &c->n_layer));
    USP_CHECK(hf_int(r, "n_head", 1, 0, &c->n_head));
    c->n_kv_head = c->n_head;
    /* n_inner null means 4 n_embd (GPT2MLP); the bound keeps 4 n_embd from overflowing */
    USP_CHECK(hf_int(r, "n_inner", 0, c->d_model > 0 && c->d_model <= INT32_MAX ? 4 * c->d_model : 0, &c->d_ff));
    USP_CHECK(hf_float(r, "layer_norm_epsilon", 1e-5, &c->norm_eps));
    USP_CHECK(hf_bool(r, "tie_word_embeddings", 1, &c->tied_embeddings));
    const char *act;
    USP_CHECK(hf_string(r, "activation_function", &act));
    if (act && strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0 && strcmp(act, "gelu_fast") != 0)
        return usp_error(USP_ERR_CONFIG, "%s: field \"activation_function\" is \"%.40s\"; usp implements the tanh "
                         "approximation of GELU: gelu_new, gelu_pytorch_tanh or gelu_fast", r->path, act);
    int scale = 1, by_layer = 0;
    USP_CHECK(hf_bool(r, "scale_attn_weights", 1, &scale));
    USP_CHECK(hf_bool(r, "scale_attn_by_inverse_layer_idx", 0, &by_layer));
    if (!scale || by_layer)
        return usp_error(USP_ERR_CONFIG, "%s: fields \"scale_attn_weights\" %s / \"scale_attn_by_inverse_layer_idx\" "
                         "%s: usp scales attention scores by 1/sqrt(head width) only (true / false)", r->path,
                         scale ? "true" : "false", by_layer ? "true" : "false");
    return USP_OK;
}

static usp_status hf_read_rope_scaling(const hf_reader *r, usp_rope_scaling *s)
{
    const json_t *v = json_object_get(r->obj, "rope_scaling");
    *s = (usp_rope_scaling){0};
    if (!v || json_is_null(v))
        return USP_OK;
    if (!json_is_object(v))
        return usp_error(USP_ERR_CONFIG, "%s: field \"rope_scaling\" is %s; it must be null or an object", r->path,
                         json_kind(v));
    hf_reader sub = {r->path, v};
    const char *type;
    USP_CHECK(hf_string(&sub, "rope_type", &type));
    if (!type)
        USP_CHECK(hf_string(&sub, "type", &type)); /* the older spelling */
    if (!type || strcmp(type, "llama3") != 0)
        return usp_error(USP_ERR_CONFIG, "%s: field \"rope_scaling\" has rope_type \"%.40s\"; usp implements only "
                         "\"llama3\" scaling (or none: null)", r->path, type ? type : "(missing)");
    s->kind = USP_ROPE_SCALING_LLAMA3;
    USP_CHECK(hf_float(&sub, "factor", 0.0, &s->factor));
    USP_CHECK(hf_float(&sub, "low_freq_factor", 0.0, &s->low_freq_factor));
    USP_CHECK(hf_float(&sub, "high_freq_factor", 0.0, &s->high_freq_factor));
    return hf_int(&sub, "original_max_position_embeddings", 1, 0, &s->original_max_pos);
}

static usp_status hf_read_llama(const hf_reader *r, usp_model_config *c)
{
    c->family = USP_FAMILY_LLAMA;
    c->norm = USP_NORM_RMSNORM;
    c->positions = USP_POS_ROPE;
    c->mlp = USP_MLP_SWIGLU;
    USP_CHECK(hf_int(r, "vocab_size", 1, 0, &c->vocab));
    USP_CHECK(hf_int(r, "hidden_size", 1, 0, &c->d_model));
    USP_CHECK(hf_int(r, "intermediate_size", 1, 0, &c->d_ff));
    USP_CHECK(hf_int(r, "num_hidden_layers", 1, 0, &c->n_layer));
    USP_CHECK(hf_int(r, "num_attention_heads", 1, 0, &c->n_head));
    USP_CHECK(hf_int(r, "num_key_value_heads", 0, c->n_head, &c->n_kv_head));
    USP_CHECK(hf_int(r, "max_position_embeddings", 1, 0, &c->max_seq));
    USP_CHECK(hf_float(r, "rms_norm_eps", 1e-6, &c->norm_eps)); /* LlamaConfig's default */
    USP_CHECK(hf_float(r, "rope_theta", 10000.0, &c->rope_theta));
    USP_CHECK(hf_bool(r, "tie_word_embeddings", 0, &c->tied_embeddings));
    USP_CHECK(hf_read_rope_scaling(r, &c->rope_scaling));
    const char *act;
    USP_CHECK(hf_string(r, "hidden_act", &act));
    if (act && strcmp(act, "silu") != 0)
        return usp_error(USP_ERR_CONFIG, "%s: field \"hidden_act\" is \"%.40s\"; usp's Llama MLP is SwiGLU: \"silu\"",
                         r->path, act);
    int attn_bias, mlp_bias;
    USP_CHECK(hf_bool(r, "attention_bias", 0, &attn_bias));
    USP_CHECK(hf_bool(r, "mlp_bias", 0, &mlp_bias));
    if (attn_bias != mlp_bias)
        return usp_error(USP_ERR_CONFIG, "%s: fields \"attention_bias\" (%s) and \"mlp_bias\" (%s) differ; usp gives "
                         "biases to all linear layers or to none", r->path, attn_bias ? "true" : "false",
                         mlp_bias ? "true" : "false");
    c->bias = attn_bias;
    int64_t head_dim;
    USP_CHECK(hf_int(r, "head_dim", 0, -1, &head_dim));
    if (head_dim != -1 && (c->n_head < 1 || head_dim * c->n_head != c->d_model))
        return usp_error(USP_ERR_CONFIG, "%s: field \"head_dim\" is %lld but hidden_size / num_attention_heads is "
                         "%lld / %lld; usp needs head_dim = hidden_size / num_attention_heads", r->path,
                         (long long)head_dim, (long long)c->d_model, (long long)c->n_head);
    return USP_OK;
}

/* Keeps the last 63 bytes of `path` as the config's name. */
static void set_name(usp_model_config *c, const char *path)
{
    size_t n = strlen(path), cap = sizeof c->name - 1;
    snprintf(c->name, sizeof c->name, "%s", n > cap ? path + (n - cap) : path);
}

usp_status usp_model_config_from_hf_json(const char *path, usp_model_config *out)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return usp_error(USP_ERR_CONFIG, "cannot read model config %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return usp_error(USP_ERR_CONFIG, "model config %s is not a regular file (give a config.json)", path);
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return usp_error(USP_ERR_CONFIG, "%s: not valid JSON (line %d, column %d: %s)", path, jerr.line,
                         jerr.column, jerr.text);
    usp_status s = USP_OK;
    usp_model_config c = {0};
    hf_reader r = {path, root};
    const char *type = NULL;
    if (!json_is_object(root)) {
        s = usp_error(USP_ERR_CONFIG, "%s: the config is %s; it must be a JSON object", path, json_kind(root));
        goto done;
    }
    USP_CHECK_GOTO(hf_string(&r, "model_type", &type), s, done);
    if (type && strcmp(type, "gpt2") == 0) {
        USP_CHECK_GOTO(hf_read_gpt2(&r, &c), s, done);
    } else if (type && strcmp(type, "llama") == 0) {
        USP_CHECK_GOTO(hf_read_llama(&r, &c), s, done);
    } else {
        s = usp_error(USP_ERR_CONFIG, "%s: field \"model_type\" is %s%.40s%s; usp reads \"gpt2\" and \"llama\"",
                      path, type ? "\"" : "", type ? type : "missing", type ? "\"" : "");
        goto done;
    }
    USP_CHECK_GOTO(check_named(&c, c.family == USP_FAMILY_GPT2 ? gpt2_field_names : llama_field_names, path), s,
                   done);
    set_name(&c, path);
    *out = c;
done:
    json_decref(root);
    return s;
}

usp_status usp_model_config_load(const char *spec, usp_model_config *out)
{
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(spec, presets[i].name) == 0)
            return usp_model_config_preset(spec, out);
    struct stat sb;
    if (stat(spec, &sb) != 0)
        return usp_error(USP_ERR_CONFIG, "model \"%s\" is neither a preset (%s) nor a config.json or a directory "
                         "holding one (%s)", spec, usp_model_config_preset_names(), strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return usp_model_config_from_hf_json(spec, out);
    size_t n = strlen(spec) + sizeof "/config.json";
    char *file = malloc(n);
    if (!file)
        return usp_error(USP_ERR_RUNTIME, "out of memory reading model %s", spec);
    snprintf(file, n, "%s/config.json", spec);
    usp_status s = usp_model_config_from_hf_json(file, out);
    free(file);
    return s;
}

/* ---- writing config.json --------------------------------------------------------------- */

/* The double whose shortest decimal form reads back as f: 1e-5f is written
 * "1e-5", not "9.9999997e-06", and still reads back to the same float. */
static json_t *json_float(float f)
{
    char buf[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        if (strtof(buf, NULL) == f)
            break;
    }
    return json_real(strtod(buf, NULL));
}

static usp_status family_mismatch(const usp_model_config *c, const char *family, const char *what)
{
    return usp_error(USP_ERR_CONFIG, "model config \"%s\": the %s family of Hugging Face has %s; this config cannot "
                     "be written as its config.json", c->name, family, what);
}

static usp_status hf_build(const usp_model_config *c, json_t *j)
{
    int bad = 0;
    if (c->family == USP_FAMILY_GPT2) {
        if (c->norm != USP_NORM_LAYERNORM || c->positions != USP_POS_LEARNED || c->mlp != USP_MLP_GELU_TANH ||
            !c->bias || c->n_kv_head != c->n_head)
            return family_mismatch(c, "GPT-2", "layernorm, learned positions, gelu_tanh, biases and no GQA");
        bad |= json_object_set_new(j, "activation_function", json_string("gelu_new"));
        bad |= json_object_set_new(j, "architectures", json_pack("[s]", "GPT2LMHeadModel"));
        /* usp trains without dropout: say so, so that fine-tuning elsewhere starts from the same model */
        bad |= json_object_set_new(j, "attn_pdrop", json_real(0.0));
        bad |= json_object_set_new(j, "embd_pdrop", json_real(0.0));
        bad |= json_object_set_new(j, "resid_pdrop", json_real(0.0));
        bad |= json_object_set_new(j, "initializer_range", json_real(0.02));
        bad |= json_object_set_new(j, "layer_norm_epsilon", json_float(c->norm_eps));
        bad |= json_object_set_new(j, "model_type", json_string("gpt2"));
        bad |= json_object_set_new(j, "n_embd", json_integer(c->d_model));
        bad |= json_object_set_new(j, "n_head", json_integer(c->n_head));
        bad |= json_object_set_new(j, "n_inner", c->d_ff == 4 * c->d_model ? json_null() : json_integer(c->d_ff));
        bad |= json_object_set_new(j, "n_layer", json_integer(c->n_layer));
        bad |= json_object_set_new(j, "n_positions", json_integer(c->max_seq));
        bad |= json_object_set_new(j, "scale_attn_weights", json_true());
    } else {
        if (c->norm != USP_NORM_RMSNORM || c->positions != USP_POS_ROPE || c->mlp != USP_MLP_SWIGLU)
            return family_mismatch(c, "Llama", "rmsnorm, rotary positions and swiglu");
        bad |= json_object_set_new(j, "architectures", json_pack("[s]", "LlamaForCausalLM"));
        bad |= json_object_set_new(j, "attention_bias", json_boolean(c->bias));
        bad |= json_object_set_new(j, "attention_dropout", json_real(0.0));
        bad |= json_object_set_new(j, "head_dim", json_integer(c->d_model / c->n_head));
        bad |= json_object_set_new(j, "hidden_act", json_string("silu"));
        bad |= json_object_set_new(j, "hidden_size", json_integer(c->d_model));
        bad |= json_object_set_new(j, "initializer_range", json_real(0.02));
        bad |= json_object_set_new(j, "intermediate_size", json_integer(c->d_ff));
        bad |= json_object_set_new(j, "max_position_embeddings", json_integer(c->max_seq));
        bad |= json_object_set_new(j, "mlp_bias", json_boolean(c->bias));
        bad |= json_object_set_new(j, "model_type", json_string("llama"));
        bad |= json_object_set_new(j, "num_attention_heads", json_integer(c->n_head));
        bad |= json_object_set_new(j, "num_hidden_layers", json_integer(c->n_layer));
        bad |= json_object_set_new(j, "num_key_value_heads", json_integer(c->n_kv_head));
        bad |= json_object_set_new(j, "pretraining_tp", json_integer(1));
        bad |= json_object_set_new(j, "rms_norm_eps", json_float(c->norm_eps));
        const usp_rope_scaling *s = &c->rope_scaling;
        json_t *rs = json_null();
        if (s->kind == USP_ROPE_SCALING_LLAMA3)
            rs = json_pack("{s:o, s:o, s:o, s:I, s:s}", "factor", json_float(s->factor), "high_freq_factor",
                           json_float(s->high_freq_factor), "low_freq_factor", json_float(s->low_freq_factor),
                           "original_max_position_embeddings", (json_int_t)s->original_max_pos, "rope_type",
                           "llama3");
        bad |= json_object_set_new(j, "rope_scaling", rs);
        bad |= json_object_set_new(j, "rope_theta", json_float(c->rope_theta));
        bad |= json_object_set_new(j, "use_cache", json_true());
    }
    bad |= json_object_set_new(j, "tie_word_embeddings", json_boolean(c->tied_embeddings));
    bad |= json_object_set_new(j, "torch_dtype", json_string("float32"));
    bad |= json_object_set_new(j, "vocab_size", json_integer(c->vocab));
    return bad ? usp_error(USP_ERR_RUNTIME, "out of memory building the config.json of \"%s\"", c->name) : USP_OK;
}

usp_status usp_model_config_write_hf_json(const usp_model_config *c, const char *path)
{
    USP_CHECK(usp_model_config_check(c));
    json_t *j = json_object();
    if (!j)
        return usp_error(USP_ERR_RUNTIME, "out of memory writing %s", path);
    usp_status s = hf_build(c, j);
    /* save_pretrained's form: 2-space indent, sorted keys, a final newline; 15
     * digits print the shortest forms of json_float exactly */
    char *text = s == USP_OK ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(j);
    if (s != USP_OK)
        return s;
    if (!text)
        return usp_error(USP_ERR_RUNTIME, "out of memory writing %s", path);
    usp_atomic_file f;
    s = usp_atomic_file_open(&f, path);
    if (s == USP_OK) {
        fputs(text, f.fp);
        fputc('\n', f.fp);
        s = usp_atomic_file_commit(&f);
    }
    free(text);
    return s;
}
