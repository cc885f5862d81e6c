/* Hugging Face config.json, read and written, and a model loaded by preset
 * name, config.json or checkpoint directory (see model_config.h).
 *
 * config.json is read with jansson, strictly: a field of the wrong JSON type
 * or a feature usp does not implement (erf GELU, linear RoPE scaling, biases
 * on only some Llama projections, Qwen3's q/k norms) is an error naming the
 * file and the field, never silently a different model. Fields that only
 * matter to other frameworks (dropouts, token ids, torch_dtype) are ignored.
 * Floats are written in their shortest round-trip decimal form, so write then
 * read gives the same bits. */
#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/base/atomic_file.h"
#include "core/model/model_config.h"
#include "core/model/model_config_internal.h"

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

/* Mistral's sliding_window (null or absent: none; Qwen2's use_sliding_window false: none), and layer_types
 * as Gemma 2 and 3 and newer configs write them: "sliding_attention" layers have the window,
 * "full_attention" ones attend to the whole causal past. */
static usp_status hf_read_window(const hf_reader *r, usp_model_config *c)
{
    int used;
    USP_CHECK(hf_int(r, "sliding_window", 0, 0, &c->sliding_window));
    USP_CHECK(hf_bool(r, "use_sliding_window", 1, &used));
    if (c->sliding_window < 0 || (c->sliding_window == 0 && json_is_integer(json_object_get(r->obj, "sliding_window"))))
        return usp_error(USP_ERR_CONFIG, "%s: field \"sliding_window\" is %lld; a window is at least 1 key (null: "
                         "none)", r->path, (long long)c->sliding_window);
    if (!used)
        c->sliding_window = 0;
    const json_t *types = json_object_get(r->obj, "layer_types");
    if (!types || json_is_null(types))
        return USP_OK;
    if (!json_is_array(types) || (int64_t)json_array_size(types) != c->n_layer)
        return usp_error(USP_ERR_CONFIG, "%s: field \"layer_types\" is %s of %zu; it must be an array of "
                         "num_hidden_layers (%lld) strings", r->path, json_kind(types),
                         json_is_array(types) ? json_array_size(types) : (size_t)0, (long long)c->n_layer);
    for (size_t l = 0; l < json_array_size(types); l++) {
        const char *t = json_string_value(json_array_get(types, l));
        const int full = t && strcmp(t, "full_attention") == 0;
        if (!full && !(t && strcmp(t, "sliding_attention") == 0))
            return usp_error(USP_ERR_CONFIG, "%s: layer_types[%zu] is %s%.40s%s; usp reads \"sliding_attention\" "
                             "and \"full_attention\"", r->path, l, t ? "\"" : "", t ? t : "not a string",
                             t ? "\"" : "");
        if (!full && c->sliding_window == 0)
            return usp_error(USP_ERR_CONFIG, "%s: layer_types[%zu] is \"sliding_attention\" but the config has no "
                             "sliding_window", r->path, l);
        if (full && l >= USP_MODEL_TYPED_LAYERS_MAX)
            return usp_error(USP_ERR_CONFIG, "%s: layer_types has a full_attention layer %zu; usp types the first %d "
                             "layers", r->path, l, USP_MODEL_TYPED_LAYERS_MAX);
        if (full)
            c->full_layers[l / 64] |= (uint64_t)1 << (l % 64);
    }
    return USP_OK;
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
    /* head_dim decouples the attention width (heads x head_dim) from hidden_size; a head_dim equal to
       hidden_size / num_attention_heads is the default, stored as 0 so the config equals the one without it */
    const json_t *given = json_object_get(r->obj, "head_dim");
    int64_t head_dim;
    USP_CHECK(hf_int(r, "head_dim", 0, 0, &head_dim));
    if (given && !json_is_null(given) && head_dim < 1)
        return usp_error(USP_ERR_CONFIG, "%s: field \"head_dim\" is %lld; it must be a positive integer (or absent: "
                         "hidden_size / num_attention_heads)", r->path, (long long)head_dim);
    int is_default = c->n_head > 0 && c->d_model % c->n_head == 0 && head_dim == c->d_model / c->n_head;
    c->head_dim = is_default ? 0 : head_dim;
    return hf_read_window(r, c);
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
    } else if (type && (strcmp(type, "llama") == 0 || strcmp(type, "mistral") == 0)) { /* Mistral: Llama's, windowed */
        USP_CHECK_GOTO(hf_read_llama(&r, &c), s, done);
    } else if (type && strcmp(type, "qwen3") == 0) {
        s = usp_error(USP_ERR_CONFIG, "%s: field \"model_type\" is \"qwen3\"; usp does not model Qwen3's per-head "
                      "q/k RMSNorm (qk_norm). To plan a Qwen3 model, give the same shapes as model_type \"llama\" "
                      "(with its head_dim): the norms' cost is negligible", path);
        goto done;
    } else {
        s = usp_error(USP_ERR_CONFIG, "%s: field \"model_type\" is %s%.40s%s; usp reads \"gpt2\", \"llama\" and \"mistral\"",
                      path, type ? "\"" : "", type ? type : "missing", type ? "\"" : "");
        goto done;
    }
    USP_CHECK_GOTO(model_config_check_hf(&c, path), s, done);
    set_name(&c, path);
    *out = c;
done:
    json_decref(root);
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
            !c->bias || c->n_kv_head != c->n_head || usp_model_config_attention_width(c) != c->d_model)
            return family_mismatch(c, "GPT-2", "layernorm, learned positions, gelu_tanh, biases, no GQA and head "
                                   "width n_embd / n_head");
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
        /* a window makes it Mistral's (LlamaConfig has no sliding_window), with Gemma's layer_types if mixed */
        const int windowed = c->sliding_window > 0;
        if (windowed && c->bias)
            return family_mismatch(c, "Mistral", "a sliding window without biases (no Hugging Face config has both)");
        bad |= json_object_set_new(j, "architectures",
                                   json_pack("[s]", windowed ? "MistralForCausalLM" : "LlamaForCausalLM"));
        bad |= windowed ? json_object_set_new(j, "sliding_window", json_integer(c->sliding_window)) : 0;
        if (windowed && usp_model_config_common_window(c, 0) == 0) {
            json_t *types = json_array();
            for (int64_t l = 0; l < c->n_layer; l++)
                bad |= json_array_append_new(types, json_string(usp_model_config_layer_window(c, l, 0)
                                                                ? "sliding_attention" : "full_attention"));
            bad |= json_object_set_new(j, "layer_types", types);
        }
        bad |= json_object_set_new(j, "attention_bias", json_boolean(c->bias));
        bad |= json_object_set_new(j, "attention_dropout", json_real(0.0));
        bad |= json_object_set_new(j, "head_dim", json_integer(usp_model_config_head_dim(c)));
        bad |= json_object_set_new(j, "hidden_act", json_string("silu"));
        bad |= json_object_set_new(j, "hidden_size", json_integer(c->d_model));
        bad |= json_object_set_new(j, "initializer_range", json_real(0.02));
        bad |= json_object_set_new(j, "intermediate_size", json_integer(c->d_ff));
        bad |= json_object_set_new(j, "max_position_embeddings", json_integer(c->max_seq));
        bad |= json_object_set_new(j, "mlp_bias", json_boolean(c->bias));
        bad |= json_object_set_new(j, "model_type", json_string(windowed ? "mistral" : "llama"));
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

usp_status usp_model_config_load(const char *spec, usp_model_config *out)
{
    if (model_config_is_preset(spec))
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
