/* Model configs: presets against the published parameter counts, Hugging
 * Face config.json read (in the exact form HF writes it) and round-tripped,
 * Llama 3's rope scaling against its reference formula, and every kind of bad
 * config refused with USP_ERR_CONFIG and a message naming the file and the
 * field. (Safetensors files: tests/test_checkpoint_io.c.) */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/model_config.h"
#include "tests/check_main.h"
#include "tests/scratch_dir.h"

/* ---- model configs ------------------------------------------------------------------- */

START_TEST(presets_pass_check_and_match_published_parameter_counts)
{
    /* exact counts from the published architectures (they are the counts HF reports
     * for the checkpoints: gpt2 124,439,808; Llama-2-7b 6,738,415,616; Llama-3.2-1B
     * 1,235,814,400; Llama-2-13b 13,015,864,320), and the rounded headline figures
     * within half a unit of their last digit */
    const struct {
        const char *name;
        int64_t exact;
        double headline, half_unit;
    } want[] = {
        {"gpt2-124m", 124439808, 124e6, 0.5e6},       {"llama-7b", 6738415616, 6.74e9, 0.005e9},
        {"llama-1b", 1235814400, 1.24e9, 0.005e9},    {"llama-13b", 13015864320, 13.0e9, 0.05e9},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        usp_model_config c;
        ck_assert_int_eq(usp_model_config_preset(want[i].name, &c), USP_OK);
        ck_assert_int_eq(usp_model_config_check(&c), USP_OK);
        int64_t n = usp_model_config_param_count(&c);
        ck_assert_msg(n == want[i].exact, "%s: %lld parameters, want %lld", want[i].name, (long long)n,
                      (long long)want[i].exact);
        ck_assert(fabs((double)n - want[i].headline) <= want[i].half_unit);
    }
    usp_model_config t;
    ck_assert_int_eq(usp_model_config_preset("tiny", &t), USP_OK);
    ck_assert_int_eq(usp_model_config_check(&t), USP_OK);
    ck_assert(t.family == USP_FAMILY_LLAMA && t.vocab == 256 && t.n_layer == 2 && t.n_head == 4 && t.n_kv_head == 2 &&
              t.d_model == 64 && t.d_ff == 172 && t.max_seq == 1048576 && t.tied_embeddings);
    /* untying adds exactly one vocab x width matrix */
    usp_model_config g;
    usp_model_config_preset("gpt2-124m", &g);
    g.tied_embeddings = 0;
    ck_assert_int_eq(usp_model_config_param_count(&g), 124439808 + 50257 * 768);
    ck_assert_int_eq(usp_model_config_preset("gpt3", &g), USP_ERR_CONFIG);
    assert_message_has("gpt3");
    assert_message_has("gpt2-124m");
}
END_TEST

START_TEST(check_names_the_field_of_a_bad_config)
{
    usp_model_config base, x;
    usp_model_config_preset("tiny", &base);
    x = base, x.n_head = 3;
    ck_assert_int_eq(usp_model_config_check(&x), USP_ERR_CONFIG);
    assert_message_has("n_head 3");
    assert_message_has("tiny");
    x = base, x.n_kv_head = 3;
    ck_assert_int_eq(usp_model_config_check(&x), USP_ERR_CONFIG);
    assert_message_has("n_kv_head 3");
    x = base, x.d_ff = 0;
    ck_assert_int_eq(usp_model_config_check(&x), USP_ERR_CONFIG);
    assert_message_has("d_ff");
    x = base, x.norm_eps = NAN;
    ck_assert_int_eq(usp_model_config_check(&x), USP_ERR_CONFIG);
    assert_message_has("norm_eps");
    x = base, x.d_model = 4 * 6, x.n_head = 4; /* head width 6 is fine, 4*5 = 20 / 4 = 5 is odd for rope */
    ck_assert_int_eq(usp_model_config_check(&x), USP_OK);
    x.d_model = 20;
    ck_assert_int_eq(usp_model_config_check(&x), USP_ERR_CONFIG);
    assert_message_has("odd");
    x = base, x.n_layer = INT32_MAX, x.d_model = 1 << 20, x.d_ff = 1 << 22;
    ck_assert_int_eq(usp_model_config_check(&x), USP_ERR_CONFIG);
    assert_message_has("2^53");
    x = base, x.vocab = (int64_t)1 << 40;
    ck_assert_int_eq(usp_model_config_check(&x), USP_ERR_CONFIG);
    assert_message_has("vocab");
}
END_TEST

START_TEST(hf_config_round_trip_both_families)
{
    const char *names[] = {"tiny", "gpt2-124m", "llama-1b", "llama-7b", "llama-13b"};
    usp_model_config variants[7];
    for (int i = 0; i < 5; i++)
        usp_model_config_preset(names[i], &variants[i]);
    variants[5] = variants[1]; /* GPT-2 with n_inner set and untied */
    variants[5].d_ff = 1000, variants[5].tied_embeddings = 0, variants[5].norm_eps = 1e-6f;
    variants[6] = variants[0]; /* Llama with biases and an odd epsilon/theta */
    variants[6].bias = 1, variants[6].norm_eps = 3.3e-7f, variants[6].rope_theta = 123456.7f;
    for (int i = 0; i < 7; i++) {
        const char *path = tmp_path("config.json");
        ck_assert_int_eq(usp_model_config_write_hf_json(&variants[i], path), USP_OK);
        usp_model_config back;
        ck_assert_msg(usp_model_config_from_hf_json(path, &back) == USP_OK, "%s", usp_error_message());
        ck_assert_msg(usp_model_config_equal(&variants[i], &back), "variant %d differs after the round trip", i);
        ck_assert(strstr(back.name, "config.json"));
    }
    /* the shortest decimal forms and HF's field names are in the file */
    usp_model_config g;
    usp_model_config_preset("gpt2-124m", &g);
    ck_assert_int_eq(usp_model_config_write_hf_json(&g, tmp_path("config.json")), USP_OK);
    json_t *j = json_load_file(tmp_path("config.json"), 0, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert(json_is_null(json_object_get(j, "n_inner")));
    ck_assert_str_eq(json_string_value(json_object_get(j, "model_type")), "gpt2");
    ck_assert(json_real_value(json_object_get(j, "layer_norm_epsilon")) == 1e-5);
    json_decref(j);
    /* a config HF cannot express is refused and writes nothing */
    g.norm = USP_NORM_RMSNORM;
    ck_assert_int_eq(usp_model_config_write_hf_json(&g, tmp_path("mixed.json")), USP_ERR_CONFIG);
    assert_message_has("GPT-2");
    ck_assert_int_ne(access(tmp_path("mixed.json"), F_OK), 0);
    clean_tmpdir();
}
END_TEST

/* openai-community/gpt2's config.json as published */
static const char gpt2_hub_json[] =
    "{\n  \"activation_function\": \"gelu_new\",\n  \"architectures\": [\n    \"GPT2LMHeadModel\"\n  ],\n"
    "  \"attn_pdrop\": 0.1,\n  \"bos_token_id\": 50256,\n  \"embd_pdrop\": 0.1,\n  \"eos_token_id\": 50256,\n"
    "  \"initializer_range\": 0.02,\n  \"layer_norm_epsilon\": 1e-05,\n  \"model_type\": \"gpt2\",\n"
    "  \"n_ctx\": 1024,\n  \"n_embd\": 768,\n  \"n_head\": 12,\n  \"n_layer\": 12,\n  \"n_positions\": 1024,\n"
    "  \"resid_pdrop\": 0.1,\n  \"summary_activation\": null,\n  \"summary_first_dropout\": 0.1,\n"
    "  \"summary_proj_to_labels\": true,\n  \"summary_type\": \"cls_index\",\n  \"summary_use_proj\": true,\n"
    "  \"task_specific_params\": {\n    \"text-generation\": {\n      \"do_sample\": true,\n"
    "      \"max_length\": 50\n    }\n  },\n  \"vocab_size\": 50257\n}\n";

/* GPT2Config(vocab_size=1000, n_positions=2048, n_embd=256, n_layer=4, n_head=8,
 * n_inner=640, tie_word_embeddings=False).save_pretrained(...) (transformers 4.46) */
static const char gpt2_saved_json[] =
    "{\n  \"activation_function\": \"gelu_new\",\n  \"architectures\": [\n    \"GPT2LMHeadModel\"\n  ],\n"
    "  \"attn_pdrop\": 0.1,\n  \"bos_token_id\": 50256,\n  \"embd_pdrop\": 0.1,\n  \"eos_token_id\": 50256,\n"
    "  \"initializer_range\": 0.02,\n  \"layer_norm_epsilon\": 1e-05,\n  \"model_type\": \"gpt2\",\n"
    "  \"n_embd\": 256,\n  \"n_head\": 8,\n  \"n_inner\": 640,\n  \"n_layer\": 4,\n  \"n_positions\": 2048,\n"
    "  \"reorder_and_upcast_attn\": false,\n  \"resid_pdrop\": 0.1,\n  \"scale_attn_by_inverse_layer_idx\": false,\n"
    "  \"scale_attn_weights\": true,\n  \"summary_activation\": null,\n  \"summary_first_dropout\": 0.1,\n"
    "  \"summary_proj_to_labels\": true,\n  \"summary_type\": \"cls_index\",\n  \"summary_use_proj\": true,\n"
    "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"float32\",\n  \"transformers_version\": \"4.46.3\",\n"
    "  \"use_cache\": true,\n  \"vocab_size\": 1000\n}\n";

/* meta-llama/Llama-2-7b-hf and meta-llama/Llama-3.2-1B as published */
static const char llama7b_json[] =
    "{\n  \"_name_or_path\": \"meta-llama/Llama-2-7b-hf\",\n  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n"
    "  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n  \"hidden_act\": \"silu\",\n  \"hidden_size\": 4096,\n"
    "  \"initializer_range\": 0.02,\n  \"intermediate_size\": 11008,\n  \"max_position_embeddings\": 4096,\n"
    "  \"model_type\": \"llama\",\n  \"num_attention_heads\": 32,\n  \"num_hidden_layers\": 32,\n"
    "  \"num_key_value_heads\": 32,\n  \"pretraining_tp\": 1,\n  \"rms_norm_eps\": 1e-05,\n"
    "  \"rope_scaling\": null,\n  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"float16\",\n"
    "  \"transformers_version\": \"4.31.0.dev0\",\n  \"use_cache\": true,\n  \"vocab_size\": 32000\n}\n";
static const char llama1b_json[] =
    "{\n  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n  \"bos_token_id\": 128000,\n  \"eos_token_id\": 128001,\n  \"head_dim\": 64,\n"
    "  \"hidden_act\": \"silu\",\n  \"hidden_size\": 2048,\n  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 8192,\n  \"max_position_embeddings\": 131072,\n  \"mlp_bias\": false,\n"
    "  \"model_type\": \"llama\",\n  \"num_attention_heads\": 32,\n  \"num_hidden_layers\": 16,\n"
    "  \"num_key_value_heads\": 8,\n  \"pretraining_tp\": 1,\n  \"rms_norm_eps\": 1e-05,\n  \"rope_scaling\": {\n"
    "    \"factor\": 32.0,\n    \"high_freq_factor\": 4.0,\n    \"low_freq_factor\": 1.0,\n"
    "    \"original_max_position_embeddings\": 8192,\n    \"rope_type\": \"llama3\"\n  },\n"
    "  \"rope_theta\": 500000.0,\n  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.45.0.dev0\",\n  \"use_cache\": true,\n  \"vocab_size\": 128256\n}\n";

START_TEST(hand_written_hf_configs_read_as_the_presets)
{
    const struct {
        const char *text, *preset;
    } cases[] = {{gpt2_hub_json, "gpt2-124m"}, {llama7b_json, "llama-7b"}, {llama1b_json, "llama-1b"}};
    for (size_t i = 0; i < 3; i++) {
        usp_model_config want, got;
        usp_model_config_preset(cases[i].preset, &want);
        write_text(tmp_path("config.json"), cases[i].text);
        ck_assert_msg(usp_model_config_from_hf_json(tmp_path("config.json"), &got) == USP_OK, "%s",
                      usp_error_message());
        ck_assert_msg(usp_model_config_equal(&want, &got), "%s", cases[i].preset);
    }
    write_text(tmp_path("config.json"), gpt2_saved_json);
    usp_model_config c;
    ck_assert_int_eq(usp_model_config_from_hf_json(tmp_path("config.json"), &c), USP_OK);
    ck_assert(c.family == USP_FAMILY_GPT2 && c.vocab == 1000 && c.max_seq == 2048 && c.d_model == 256 &&
              c.n_layer == 4 && c.n_head == 8 && c.n_kv_head == 8 && c.d_ff == 640 && !c.tied_embeddings &&
              c.bias && c.norm == USP_NORM_LAYERNORM && c.mlp == USP_MLP_GELU_TANH && c.norm_eps == 1e-5f);
    /* usp_model_config_load: preset, file, directory */
    ck_assert_int_eq(usp_model_config_load(tmp_path("config.json"), &c), USP_OK);
    ck_assert_int_eq(c.d_ff, 640);
    ck_assert_int_eq(usp_model_config_load(tmpdir, &c), USP_OK);
    ck_assert_int_eq(c.d_ff, 640);
    ck_assert_int_eq(usp_model_config_load("llama-13b", &c), USP_OK);
    ck_assert_int_eq(c.d_model, 5120);
    ck_assert_int_eq(usp_model_config_load(tmp_path("nothing-here"), &c), USP_ERR_CONFIG);
    assert_message_has("nothing-here");
    assert_message_has("tiny");
    clean_tmpdir();
}
END_TEST

/* Mistral's sliding_window and Gemma's layer_types: read, written back as model_type "mistral" with the
 * same fields, and read back equal; use_sliding_window false (Qwen2) is no window; a different window is
 * a different model. */
START_TEST(windowed_configs_read_and_round_trip)
{
    static const char mistral[] =
        "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\", \"vocab_size\": 100, "
        "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 3, \"num_attention_heads\": 8, "
        "\"num_key_value_heads\": 2, \"max_position_embeddings\": 32768, \"sliding_window\": 4096, "
        "\"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"hidden_act\": \"silu\"%s}";
    const struct {
        const char *extra;
        int64_t window[3];
    } cases[] = {{"", {4096, 4096, 4096}},
                 {", \"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\"]",
                  {4096, 0, 4096}},
                 {", \"use_sliding_window\": false", {0, 0, 0}}};
    for (size_t i = 0; i < 3; i++) {
        char text[1024];
        snprintf(text, sizeof text, mistral, cases[i].extra);
        write_text(tmp_path("config.json"), text);
        usp_model_config c, back;
        ck_assert_msg(usp_model_config_from_hf_json(tmp_path("config.json"), &c) == USP_OK, "%s", usp_error_message());
        for (int l = 0; l < 3; l++) {
            ck_assert_int_eq(usp_model_config_layer_window(&c, l, 0), cases[i].window[l]);
            ck_assert_int_eq(usp_model_config_layer_window(&c, l, 64), cases[i].window[l] ? 64 : i == 2 ? 64 : 0);
        }
        ck_assert_int_eq(usp_model_config_common_window(&c, 0), i == 1 ? 0 : cases[i].window[0]);
        ck_assert_int_eq(usp_model_config_write_hf_json(&c, tmp_path("written.json")), USP_OK);
        ck_assert_int_eq(usp_model_config_from_hf_json(tmp_path("written.json"), &back), USP_OK);
        ck_assert(usp_model_config_equal(&c, &back));
        json_t *j = json_load_file(tmp_path("written.json"), 0, NULL);
        ck_assert_str_eq(json_string_value(json_object_get(j, "model_type")), i == 2 ? "llama" : "mistral");
        ck_assert_int_eq(json_array_size(json_object_get(j, "layer_types")), i == 1 ? 3 : 0);
        json_decref(j);
        back.sliding_window = 17;
        ck_assert(!usp_model_config_equal(&c, &back));
    }
    clean_tmpdir();
}
END_TEST

START_TEST(llama3_rope_scaling_follows_the_reference_formula)
{
    usp_model_config c;
    usp_model_config_preset("llama-1b", &c);
    const double hd = 64, theta = 500000, L = 8192;
    for (int64_t i = 0; i < 32; i++) {
        double f = 1.0 / pow(theta, (double)(2 * i) / hd), wl = 2 * 3.141592653589793 / f, want;
        if (wl < L / 4) /* high frequencies are kept */
            want = f;
        else if (wl > L / 1) /* low frequencies are interpolated by the factor */
            want = f / 32;
        else {
            double s = (L / wl - 1) / (4 - 1);
            want = (1 - s) * f / 32 + s * f;
        }
        ck_assert_msg(fabs(usp_model_config_rope_inv_freq(&c, i) - want) <= 1e-12 * want, "pair %lld", (long long)i);
    }
    c.rope_scaling.kind = USP_ROPE_SCALING_NONE;
    ck_assert(fabs(usp_model_config_rope_inv_freq(&c, 31) - pow(theta, -62.0 / 64)) < 1e-18);
}
END_TEST

START_TEST(bad_hf_configs_name_the_file_and_the_field)
{
    static const char L_HEAD[] = "{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 64, "
                                 "\"intermediate_size\": 128, \"num_hidden_layers\": 2, \"max_position_embeddings\": 64";
    static const char G_HEAD[] = "{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_positions\": 64, \"n_layer\": 2";
    const struct {
        const char *head, *tail, *needle;
    } cases[] = {
        {G_HEAD, ", \"n_head\": 4}", "\"n_embd\""},                        /* missing field */
        {G_HEAD, ", \"n_embd\": \"64\", \"n_head\": 4}", "\"n_embd\" is a string"},
        {G_HEAD, ", \"n_embd\": 64, \"n_head\": 5}", "n_head 5"},         /* heads do not divide */
        {G_HEAD, ", \"n_embd\": 64, \"n_head\": 4, \"n_inner\": 0}", "n_inner"},
        {G_HEAD, ", \"n_embd\": 64, \"n_head\": 4, \"activation_function\": \"gelu\"}", "activation_function"},
        {G_HEAD, ", \"n_embd\": 64, \"n_head\": 4, \"layer_norm_epsilon\": -1}", "layer_norm_epsilon"},
        {G_HEAD, ", \"n_embd\": 64, \"n_head\": 4, \"tie_word_embeddings\": \"yes\"}", "tie_word_embeddings"},
        {G_HEAD, ", \"n_embd\": 64, \"n_head\": 4, \"scale_attn_by_inverse_layer_idx\": true}", "inverse_layer"},
        {L_HEAD, "}", "\"num_attention_heads\""},
        {L_HEAD, ", \"num_attention_heads\": 8, \"num_key_value_heads\": 3}", "num_key_value_heads 3"},
        {L_HEAD, ", \"num_attention_heads\": 6}", "num_attention_heads 6"},
        {L_HEAD, ", \"num_attention_heads\": 8, \"rms_norm_eps\": \"1e-5\"}", "\"rms_norm_eps\" is a string"},
        {L_HEAD, ", \"num_attention_heads\": 8, \"rms_norm_eps\": 0}", "rms_norm_eps"},
        {L_HEAD, ", \"num_attention_heads\": 8.0}", "\"num_attention_heads\" is a real"},
        {L_HEAD, ", \"num_attention_heads\": 8, \"hidden_act\": \"gelu\"}", "hidden_act"},
        {L_HEAD, ", \"num_attention_heads\": 8, \"head_dim\": 0}", "head_dim"},
        {L_HEAD, ", \"num_attention_heads\": 8, \"head_dim\": 15}", "head_dim = 15 is odd"}, /* rope */
        {L_HEAD, ", \"num_attention_heads\": 8, \"attention_bias\": true}", "mlp_bias"},
        {L_HEAD, ", \"num_attention_heads\": 8, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}",
         "rope_scaling"},
        {L_HEAD, ", \"num_attention_heads\": 8, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                 "\"original_max_position_embeddings\": 8192}}", "rope_scaling"},
        {L_HEAD, ", \"num_attention_heads\": 8, \"rope_theta\": -5}", "rope_theta"},
        {L_HEAD, ", \"num_attention_heads\": 8, \"sliding_window\": 0}", "\"sliding_window\" is 0"},
        {L_HEAD, ", \"num_attention_heads\": 8, \"sliding_window\": 8, \"layer_types\": [\"full_attention\"]}",
         "array of num_hidden_layers (2)"},
        {L_HEAD, ", \"num_attention_heads\": 8, \"sliding_window\": 8, \"layer_types\": [\"full_attention\", "
                 "\"chunked_attention\"]}", "layer_types[1] is \"chunked_attention\""},
        {L_HEAD, ", \"num_attention_heads\": 8, \"layer_types\": [\"full_attention\", \"sliding_attention\"]}",
         "no sliding_window"},
        {L_HEAD, ", \"num_attention_heads\": 8, \"vocab_size\": 5}", "not valid JSON"}, /* duplicate key */
        {"{\"model_type\": \"llama\", \"vocab_size\": 1099511627776, \"hidden_size\": 64, \"intermediate_size\": 64,"
         " \"num_hidden_layers\": 1, \"max_position_embeddings\": 8, \"num_attention_heads\": 8", "}", "vocab_size"},
        {"{\"model_type\": \"llama\", \"vocab_size\": 2000000000, \"hidden_size\": 1048576, \"intermediate_size\": 1,"
         " \"num_hidden_layers\": 2000000000, \"max_position_embeddings\": 8, \"num_attention_heads\": 8", "}", "2^53"},
        {"{\"model_type\": \"bert\"", "}", "\"model_type\" is \"bert\""},
        {"{\"n_embd\": 64", "}", "model_type"},
        {"[1, 2", "]", "JSON object"},
        {"{\"model_type\": ", "", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s", cases[i].head, cases[i].tail);
        const char *path = tmp_path("bad-config.json");
        write_text(path, text);
        usp_model_config c = {.vocab = 77};
        usp_status s = usp_model_config_from_hf_json(path, &c);
        ck_assert_msg(s == USP_ERR_CONFIG, "case %zu: status %d", i, (int)s);
        assert_message_has(path);
        assert_message_has(cases[i].needle);
        ck_assert_int_eq(c.vocab, 77); /* *out untouched on failure */
    }
    ck_assert_int_eq(usp_model_config_from_hf_json(tmpdir, &(usp_model_config){0}), USP_ERR_CONFIG);
    assert_message_has("not a regular file");
    ck_assert_int_eq(mkfifo(tmp_path("fifo.json"), 0600), 0);
    ck_assert_int_eq(usp_model_config_load(tmp_path("fifo.json"), &(usp_model_config){0}), USP_ERR_CONFIG);
    assert_message_has("not a regular file");
    clean_tmpdir();
}
END_TEST

int main(void)
{
    if (!scratch_dir_make("/tmp/usp_hf_config_XXXXXX"))
        return 1;
    Suite *s = suite_create("hf_config");
    TCase *t = tcase_create("hf_config");
    tcase_add_checked_fixture(t, clean_tmpdir, NULL);
    tcase_add_test(t, presets_pass_check_and_match_published_parameter_counts);
    tcase_add_test(t, check_names_the_field_of_a_bad_config);
    tcase_add_test(t, hf_config_round_trip_both_families);
    tcase_add_test(t, hand_written_hf_configs_read_as_the_presets);
    tcase_add_test(t, llama3_rope_scaling_follows_the_reference_formula);
    tcase_add_test(t, windowed_configs_read_and_round_trip);
    tcase_add_test(t, bad_hf_configs_name_the_file_and_the_field);
    suite_add_tcase(s, t);
    int code = check_main_run(s);
    scratch_dir_remove();
    return code;
}
