/* A head width of its own (head_dim, as Qwen3 and Gemma have): attention H x D
 * wide on a d_model C that is not H D. Qwen3-4B's shapes read from
 * tests/validation/qwen3-4b.json as a llama config, counted against the
 * published size, written back with their head_dim, and the configs usp
 * refuses: Qwen3's own model_type (its q/k norms are not modelled), a
 * head_dim that is not a positive even integer, GPT-2 with one. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/model_config.h"
#include "core/base/status.h"
#include "tests/check_main.h"

static char tmpdir[64];

/* tmpdir/name, valid until the next call */
static const char *tmp_path(const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return path;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/usp_head_dim_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static void assert_message_has(const char *needle)
{
    ck_assert_msg(strstr(usp_error_message(), needle), "message \"%s\" lacks \"%s\"", usp_error_message(), needle);
}

/* Qwen/Qwen3-4B's config.json shapes: the model card gives 4.0B parameters (4.02B on its
 * safetensors), of which the q/k norms (36 layers x 2 x 128) are not modelled. */
START_TEST(qwen3_4b_shapes_read_with_their_head_dim_and_count_as_published)
{
    usp_model_config c;
    ck_assert_msg(usp_model_config_load(USP_VALIDATION_DIR "/qwen3-4b.json", &c) == USP_OK, "%s",
                  usp_error_message());
    ck_assert(c.family == USP_FAMILY_LLAMA && c.d_model == 2560 && c.n_head == 32 && c.n_kv_head == 8);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(usp_model_config_head_dim(&c), 128);
    ck_assert_int_eq(usp_model_config_attention_width(&c), 4096);
    /* per layer: q and o 2 x 2560 x 4096, k and v 2 x 2560 x 1024, SwiGLU 3 x 2560 x 9728, two norms;
       the tied embeddings 151936 x 2560 and the final norm once */
    const int64_t layer = 2 * 2560 * 4096 + 2 * 2560 * 1024 + 3 * 2560 * 9728 + 2 * 2560;
    const int64_t closed = 36 * layer + 151936LL * 2560 + 2560, qk_norms = 36 * 2 * 128;
    const int64_t count = usp_model_config_param_count(&c);
    printf("Qwen3-4B shapes as llama: %lld parameters (+ %lld of q/k norms = %lld; published 4.02B)\n",
           (long long)count, (long long)qk_norms, (long long)(count + qk_norms));
    ck_assert_int_eq(count, closed);
    ck_assert_int_eq(count, 4022458880LL);
    ck_assert(count + qk_norms > 4.015e9 && count + qk_norms < 4.025e9);
    /* heads of C / H = 80 would make it a 3.67B model: the count depends on the head width */
    usp_model_config narrow = c;
    narrow.head_dim = 0;
    ck_assert_int_eq(usp_model_config_param_count(&narrow), 4022458880LL - 36LL * 2 * 2560 * (4096 + 1024 - 2560 - 640));
    ck_assert(!usp_model_config_equal(&c, &narrow));
}
END_TEST

/* Written back, config.json carries head_dim and reads as the same model; a head_dim equal to
 * hidden_size / num_attention_heads is the default and reads as a config without one. */
START_TEST(head_dim_round_trips_through_config_json)
{
    make_tmpdir();
    usp_model_config c, back;
    ck_assert_int_eq(usp_model_config_load(USP_VALIDATION_DIR "/qwen3-4b.json", &c), USP_OK);
    ck_assert_int_eq(usp_model_config_write_hf_json(&c, tmp_path("config.json")), USP_OK);
    ck_assert_int_eq(usp_model_config_from_hf_json(tmp_path("config.json"), &back), USP_OK);
    ck_assert(usp_model_config_equal(&c, &back));
    ck_assert_int_eq(back.head_dim, 128);

    usp_model_config tiny, tiny_back;
    ck_assert_int_eq(usp_model_config_preset("tiny", &tiny), USP_OK);
    ck_assert_int_eq(usp_model_config_write_hf_json(&tiny, tmp_path("tiny.json")), USP_OK); /* head_dim 16 */
    ck_assert_int_eq(usp_model_config_from_hf_json(tmp_path("tiny.json"), &tiny_back), USP_OK);
    ck_assert_int_eq(tiny_back.head_dim, 0);
    ck_assert(usp_model_config_equal(&tiny, &tiny_back));
    remove_tmpdir();
}
END_TEST

START_TEST(configs_usp_cannot_run_are_refused_naming_the_field)
{
    make_tmpdir();
    static const char qwen3[] =
        "{\"model_type\": \"qwen3\", \"vocab_size\": 151936, \"hidden_size\": 2560, \"intermediate_size\": 9728, "
        "\"num_hidden_layers\": 36, \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"head_dim\": 128, "
        "\"max_position_embeddings\": 40960}";
    usp_model_config c = {.vocab = 77};
    write_text(tmp_path("qwen3.json"), qwen3);
    ck_assert_int_eq(usp_model_config_from_hf_json(tmp_path("qwen3.json"), &c), USP_ERR_CONFIG);
    assert_message_has("qwen3");
    assert_message_has("q/k RMSNorm");
    assert_message_has("\"llama\"");
    ck_assert_int_eq(c.vocab, 77);

    usp_model_config x;
    ck_assert_int_eq(usp_model_config_preset("tiny", &x), USP_OK);
    x.head_dim = -8;
    ck_assert_int_eq(usp_model_config_check(&x), USP_ERR_CONFIG);
    assert_message_has("head_dim is -8");
    x.head_dim = 7; /* rope rotates pairs */
    ck_assert_int_eq(usp_model_config_check(&x), USP_ERR_CONFIG);
    assert_message_has("head_dim = 7 is odd");
    x.head_dim = 10, x.d_model = 30; /* no longer needs n_head to divide d_model */
    ck_assert_int_eq(usp_model_config_check(&x), USP_OK);

    usp_model_config g;
    ck_assert_int_eq(usp_model_config_preset("gpt2-124m", &g), USP_OK);
    g.head_dim = 32;
    ck_assert_int_eq(usp_model_config_check(&g), USP_ERR_CONFIG);
    assert_message_has("GPT-2");
    g.head_dim = 64; /* = n_embd / n_head: the same model */
    ck_assert_int_eq(usp_model_config_check(&g), USP_OK);
    ck_assert_int_eq(usp_model_config_write_hf_json(&g, tmp_path("gpt2.json")), USP_OK);
    remove_tmpdir();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_config_head_dim");
    TCase *t = tcase_create("head_dim");
    tcase_add_test(t, qwen3_4b_shapes_read_with_their_head_dim_and_count_as_published);
    tcase_add_test(t, head_dim_round_trips_through_config_json);
    tcase_add_test(t, configs_usp_cannot_run_are_refused_naming_the_field);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
