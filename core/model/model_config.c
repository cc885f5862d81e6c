/* Model configurations: presets, range checks, the parameter count and the
 * head width. Loading one by name or file, and config.json, are in
 * core/model/model_config_hf.c. */
#include "core/model/model_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/model/model_config_internal.h"

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

int model_config_is_preset(const char *name)
{
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(name, presets[i].name) == 0)
            return 1;
    return 0;
}

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
       F_ROPE_SCALING, F_HEAD_DIM, F_COUNT };
static const char *const usp_field_names[F_COUNT] = {"vocab", "n_layer", "n_head", "n_kv_head", "d_model",
                                                     "d_ff", "max_seq", "norm_eps", "rope_theta", "rope_scaling",
                                                     "head_dim"};
static const char *const gpt2_field_names[F_COUNT] = {
    "vocab_size", "n_layer", "n_head", "n_head", "n_embd", "n_inner (4 x n_embd when null)", "n_positions",
    "layer_norm_epsilon", "rope_theta", "rope_scaling", "head_dim"};
static const char *const llama_field_names[F_COUNT] = {
    "vocab_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "hidden_size", "intermediate_size", "max_position_embeddings", "rms_norm_eps",
    "rope_theta", "rope_scaling", "head_dim"};

static int mul_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static int add_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }

int64_t usp_model_config_head_dim(const usp_model_config *c)
{
    if (c->head_dim > 0)
        return c->head_dim;
    return c->n_head > 0 ? c->d_model / c->n_head : 0;
}

static int layer_is_full(const usp_model_config *c, int64_t l)
{
    return l < USP_MODEL_TYPED_LAYERS_MAX && (c->full_layers[l / 64] >> (l % 64) & 1u);
}

int64_t usp_model_config_layer_window(const usp_model_config *c, int64_t layer, int64_t window)
{
    return layer_is_full(c, layer) ? 0 : window > 0 ? window : c->sliding_window;
}

int64_t usp_model_config_common_window(const usp_model_config *c, int64_t window)
{
    for (int64_t l = 0; l < c->n_layer && l < USP_MODEL_TYPED_LAYERS_MAX; l++)
        if (layer_is_full(c, l))
            return 0;
    return window > 0 ? window : c->sliding_window;
}

int64_t usp_model_config_attention_width(const usp_model_config *c)
{
    int64_t width;
    return mul_ok(c->n_head, usp_model_config_head_dim(c), &width) ? width : -1;
}

int64_t usp_model_config_param_count(const usp_model_config *c)
{
    const int64_t C = c->d_model, F = c->d_ff, V = c->vocab, L = c->n_layer, D = usp_model_config_head_dim(c);
    int64_t qw, kv, t, layer = 0, total = 0;
    int ok = mul_ok(c->n_head, D, &qw) && mul_ok(c->n_kv_head, D, &kv);
    const int64_t norm = c->norm == USP_NORM_LAYERNORM ? 2 : 1; /* weight (+ bias) */
    /* attention: q (qw x C) and o (C x qw), k and v (kv x C each), qw = H D (= C unless head_dim is set);
       biases qw + 2 kv + C */
    ok = ok && mul_ok(C, qw, &t) && mul_ok(t, 2, &t) && add_ok(layer, t, &layer);
    ok = ok && mul_ok(C, kv, &t) && mul_ok(t, 2, &t) && add_ok(layer, t, &layer);
    if (c->bias)
        ok = ok && add_ok(layer, qw, &layer) && add_ok(layer, C, &layer) && mul_ok(kv, 2, &t) &&
             add_ok(layer, t, &layer);
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

usp_status usp_model_check_kv_heads(const char *source, const char *kv_name, int64_t kv_heads,
                                    const char *heads_name, int64_t heads)
{
    if (kv_heads >= 1 && heads % kv_heads == 0)
        return USP_OK;
    return usp_error(USP_ERR_CONFIG, "%s%s%s %lld does not divide %s %lld; each key/value head serves a whole group "
                     "of query heads (use a divisor of %lld)", source ? source : "", source ? ": " : "", kv_name,
                     (long long)kv_heads, heads_name, (long long)heads, (long long)heads);
}

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
    if (c->head_dim < 0 || c->head_dim > INT32_MAX)
        return usp_error(USP_ERR_CONFIG, "%s: %s is %lld; it must be between 1 and %d (or absent: %s / %s)", source,
                         names[F_HEAD_DIM], (long long)c->head_dim, INT32_MAX, names[F_D_MODEL], names[F_N_HEAD]);
    if (c->head_dim == 0 && c->d_model % c->n_head != 0)
        return usp_error(USP_ERR_CONFIG,
                         "%s: %s %lld does not divide %s %lld; the head width d_model / n_head must be whole "
                         "(or give %s)", source, names[F_N_HEAD], (long long)c->n_head, names[F_D_MODEL],
                         (long long)c->d_model, names[F_HEAD_DIM]);
    if (c->head_dim > 0 && c->family == USP_FAMILY_GPT2 && c->head_dim * c->n_head != c->d_model)
        return usp_error(USP_ERR_CONFIG, "%s: %s is %lld but %s / %s is %lld / %lld; Hugging Face's GPT-2 has no "
                         "head width of its own", source, names[F_HEAD_DIM], (long long)c->head_dim,
                         names[F_D_MODEL], names[F_N_HEAD], (long long)c->d_model, (long long)c->n_head);
    USP_CHECK(usp_model_check_kv_heads(source, names[F_N_KV_HEAD], c->n_kv_head, names[F_N_HEAD], c->n_head));
    if ((unsigned)c->family > USP_FAMILY_LLAMA || (unsigned)c->norm > USP_NORM_RMSNORM ||
        (unsigned)c->positions > USP_POS_ROPE || (unsigned)c->mlp > USP_MLP_SWIGLU ||
        (unsigned)c->rope_scaling.kind > USP_ROPE_SCALING_LLAMA3 || (c->tied_embeddings & ~1) || (c->bias & ~1))
        return usp_error(USP_ERR_CONFIG, "%s: an enum or flag field is out of range (family %d, norm %d, positions "
                         "%d, mlp %d, rope_scaling %d, tied_embeddings %d, bias %d)", source, (int)c->family,
                         (int)c->norm, (int)c->positions, (int)c->mlp, (int)c->rope_scaling.kind,
                         c->tied_embeddings, c->bias);
    if (c->sliding_window < 0 || c->sliding_window > INT32_MAX)
        return usp_error(USP_ERR_CONFIG, "%s: sliding_window is %lld; it must be between 1 and %d (or absent: "
                         "none)", source, (long long)c->sliding_window, INT32_MAX);
    for (int64_t l = c->n_layer; l < USP_MODEL_TYPED_LAYERS_MAX; l++)
        if (c->full_layers[l / 64] >> (l % 64) & 1u)
            return usp_error(USP_ERR_CONFIG, "%s: layer_types marks layer %lld of %lld", source, (long long)l,
                             (long long)c->n_layer);
    if (!(c->norm_eps > 0.0f && c->norm_eps <= 1.0f)) /* also false for NaN */
        return usp_error(USP_ERR_CONFIG, "%s: %s is %g; it must be in (0, 1], typically 1e-5 or 1e-6", source,
                         names[F_NORM_EPS], (double)c->norm_eps);
    if (c->positions == USP_POS_ROPE) {
        if (c->head_dim % 2 != 0)
            return usp_error(USP_ERR_CONFIG, "%s: rotary embeddings rotate pairs, but the head width %s = %lld is "
                             "odd", source, names[F_HEAD_DIM], (long long)c->head_dim);
        if (c->head_dim == 0 && (c->d_model / c->n_head) % 2 != 0)
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

usp_status model_config_check_hf(const usp_model_config *c, const char *source)
{
    return check_named(c, c->family == USP_FAMILY_GPT2 ? gpt2_field_names : llama_field_names, source);
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
           usp_model_config_head_dim(a) == usp_model_config_head_dim(b) &&
           a->max_seq == b->max_seq && a->norm == b->norm && a->norm_eps == b->norm_eps &&
           a->positions == b->positions && (a->positions != USP_POS_ROPE || a->rope_theta == b->rope_theta) &&
           a->mlp == b->mlp && a->tied_embeddings == b->tied_embeddings && a->bias == b->bias &&
           x->kind == y->kind &&
           (x->kind == USP_ROPE_SCALING_NONE ||
            (x->factor == y->factor && x->low_freq_factor == y->low_freq_factor &&
             x->high_freq_factor == y->high_freq_factor && x->original_max_pos == y->original_max_pos)) &&
           a->sliding_window == b->sliding_window && memcmp(a->full_layers, b->full_layers, sizeof a->full_layers) == 0;
}

int usp_model_config_shape_difference(const usp_model_config *a, const usp_model_config *b, char *out, size_t size)
{
    /* the enum fields by name, as config.json says them (a number would mean nothing to a user) */
    static const char *const family[] = {"gpt2", "llama", NULL}, *const norm[] = {"layernorm", "rmsnorm", NULL},
                             *const positions[] = {"learned", "rope", NULL},
                             *const mlp[] = {"gelu_tanh", "swiglu", NULL}, *const yes_no[] = {"no", "yes", NULL};
    const struct { const char *name; int64_t a, b; const char *const *names; } fields[] = {
        {"family", a->family, b->family, family}, {"vocab", a->vocab, b->vocab, NULL},
        {"n_layer", a->n_layer, b->n_layer, NULL}, {"n_head", a->n_head, b->n_head, NULL},
        {"n_kv_head", a->n_kv_head, b->n_kv_head, NULL}, {"d_model", a->d_model, b->d_model, NULL},
        {"head_dim", usp_model_config_head_dim(a), usp_model_config_head_dim(b), NULL},
        {"d_ff", a->d_ff, b->d_ff, NULL}, {"max_seq", a->max_seq, b->max_seq, NULL},
        {"norm", a->norm, b->norm, norm}, {"positions", a->positions, b->positions, positions},
        {"mlp", a->mlp, b->mlp, mlp}, {"tied_embeddings", a->tied_embeddings, b->tied_embeddings, yes_no},
        {"bias", a->bias, b->bias, yes_no}, {"sliding_window", a->sliding_window, b->sliding_window, NULL},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        int64_t x = fields[i].a, y = fields[i].b;
        if (x == y)
            continue;
        const char *const *names = fields[i].names;
        if (names && x >= 0 && x <= 1 && y >= 0 && y <= 1) /* every named field has two values */
            snprintf(out, size, "%s %s vs %s", fields[i].name, names[x], names[y]);
        else
            snprintf(out, size, "%s %lld vs %lld", fields[i].name, (long long)x, (long long)y);
        return 1;
    }
    if (memcmp(a->full_layers, b->full_layers, sizeof a->full_layers) != 0) {
        snprintf(out, size, "layer_types (which layers attend to everything) differ");
        return 1;
    }
    return 0;
}
