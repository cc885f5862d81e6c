/* NaN and Inf stopped where they enter (issue 15, class 4): a checkpoint with
 * a non-finite weight, a non-finite Adam m, or a negative or non-finite Adam v
 * is refused on load, naming the file, the tensor, the element and the value;
 * a training whose loss diverges stops at that step (a runtime error) and
 * saves nothing, so a --save directory is neither created nor replaced; a
 * save handed non-finite weights refuses to write them. The checkpoints are
 * written by usp_checkpoint_save and then damaged in place, one float at a
 * time, keeping every file's size (the manifest's size check still passes). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/safetensors.h"
#include "core/train/train.h"
#include "tests/check_main.h"
#include "tests/harness.h"

/* Every test's files live here; main() makes it and removes it. */
static char scratch_dir[] = "/tmp/usp_nonfinite_XXXXXX";

/* A 2-layer model of d_model 32 and 4 heads: Llama (2 KV heads, d_ff 48) or GPT-2 (d_ff 128). */
static usp_model_config tiny_model(int gpt2)
{
    usp_model_config c;
    ck_assert_int_eq(usp_model_config_preset(gpt2 ? "gpt2-124m" : "tiny", &c), USP_OK);
    c.vocab = 128, c.n_layer = 2, c.d_model = 32, c.n_head = 4, c.max_seq = 64;
    c.n_kv_head = gpt2 ? 4 : 2, c.d_ff = gpt2 ? 128 : 48;
    snprintf(c.name, sizeof c.name, "test-%s", gpt2 ? "gpt2" : "llama");
    return c;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Saves a finite checkpoint of `model` at `step` into scratch_dir/name (path[256] gets its path). */
static void save_finite_checkpoint(const usp_model_config *model, const char *name, int64_t step, char *path)
{
    snprintf(path, 256, "%s/%s", scratch_dir, name);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(model, &table), USP_OK);
    size_t n = (size_t)table.total;
    float *arrays = calloc(3 * n, sizeof *arrays); /* weights, adam_m, adam_v */
    ck_assert_ptr_nonnull(arrays);
    usp_param_init(&table, model, 5, arrays);
    for (size_t i = 0; i < n; i++)
        arrays[n + i] = 1e-4f * (float)(i % 7) - 3e-4f, arrays[2 * n + i] = 1e-8f * (float)(i % 5);
    usp_status s = usp_checkpoint_save(path, model, &table, arrays, arrays + n, arrays + 2 * n, step, 7);
    ck_assert_msg(s == USP_OK, "saving %s: %s", path, usp_error_message());
    free(arrays);
    usp_param_table_free(&table);
}

/* Overwrites element `index` of the F32 tensor `tensor` in the safetensors file dir/file with `value`. */
static void poke(const char *dir, const char *file, const char *tensor, int64_t index, float value)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    usp_safetensors st;
    ck_assert_msg(usp_safetensors_open(path, &st) == USP_OK, "%s", usp_error_message());
    const usp_st_tensor *t = usp_safetensors_find(&st, tensor);
    ck_assert_msg(t && t->dtype == USP_ST_F32 && index < t->n_elems, "%s: no F32 tensor %s of more than %lld elements",
                  path, tensor, (long long)index);
    long at = (long)(st.data_offset + t->begin) + (long)index * (long)sizeof value;
    usp_safetensors_close(&st);
    FILE *fp = fopen(path, "r+b");
    ck_assert_ptr_nonnull(fp);
    ck_assert_int_eq(fseek(fp, at, SEEK_SET), 0);
    ck_assert_int_eq(fwrite(&value, sizeof value, 1, fp), 1);
    ck_assert_int_eq(fclose(fp), 0);
}

/* Loads dir with usp_checkpoint_load; returns its status (the message stays in usp_error_message()). */
static usp_status load(const usp_model_config *model, const char *dir)
{
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(model, &table), USP_OK);
    float *arrays = calloc(3 * (size_t)table.total, sizeof *arrays);
    ck_assert_ptr_nonnull(arrays);
    int64_t step;
    int has_optimizer;
    usp_error_clear();
    usp_status s = usp_checkpoint_load(dir, model, &table, arrays, arrays + table.total, arrays + 2 * table.total,
                                       &step, &has_optimizer);
    free(arrays);
    usp_param_table_free(&table);
    return s;
}

static void assert_mentions(const char *message, const char *needle)
{
    ck_assert_msg(strstr(message, needle) != NULL, "the message does not name '%s': %s", needle, message);
}

/* A training of the tiny model on 2 ranks (U = 2), passkey data, logging off. */
static usp_train_config tiny_training(const usp_model_config *model, int64_t steps, double lr)
{
    usp_train_config c;
    usp_train_defaults(&c);
    c.model = *model;
    ck_assert_int_eq(usp_mesh_shape_make(2, 2, 1, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.batch = 2, c.steps = steps, c.lr = lr, c.warmup = 2, c.log_every = 1000;
    return c;
}

START_TEST(resume_from_a_nan_weight_is_refused_naming_the_tensor_and_saves_nothing)
{
    usp_model_config model = tiny_model(0);
    char dir[256], out[256];
    save_finite_checkpoint(&model, "nan_weight", 2, dir);
    poke(dir, "model.safetensors", "model.layers.1.self_attn.k_proj.weight", 5, NAN);
    snprintf(out, sizeof out, "%s/nan_weight_resumed", scratch_dir);
    usp_train_config c = tiny_training(&model, 4, 1e-3);
    c.resume_dir = dir, c.save_dir = out;
    char report[4096];
    usp_status s = harness_train(&c, NULL, report, sizeof report);
    ck_assert_msg(s == USP_ERR_CONFIG, "resume from a NaN weight gave status %d: %s", (int)s, report);
    assert_mentions(report, "model.safetensors");
    assert_mentions(report, "model.layers.1.self_attn.k_proj.weight");
    assert_mentions(report, "element 5");
    assert_mentions(report, "nan");
    ck_assert_msg(!exists(out), "%s was written from a checkpoint refused on load", out);
}
END_TEST

/* _i: which value lands in which tensor; each is refused by usp_checkpoint_load naming it. */
START_TEST(a_non_finite_weight_or_moment_or_a_negative_v_is_refused_on_load)
{
    const struct {
        const char *file, *tensor, *value_text;
        int64_t index;
        float value;
    } cases[] = {
        {"model.safetensors", "model.embed_tokens.weight", "inf", 0, INFINITY},
        {"model.safetensors", "model.norm.weight", "-inf", 31, -INFINITY},
        {"optimizer.safetensors", "adam_m", "nan", 12, NAN},
        {"optimizer.safetensors", "adam_v", "-0.001", 7, -1e-3f},
        {"optimizer.safetensors", "adam_v", "inf", 9, INFINITY},
    };
    usp_model_config model = tiny_model(0);
    char dir[256], name[64], element[64];
    snprintf(name, sizeof name, "bad_load_%d", _i);
    save_finite_checkpoint(&model, name, 3, dir);
    ck_assert_msg(load(&model, dir) == USP_OK, "the finite checkpoint does not load: %s", usp_error_message());
    poke(dir, cases[_i].file, cases[_i].tensor, cases[_i].index, cases[_i].value);
    usp_status s = load(&model, dir);
    const char *message = usp_error_message();
    ck_assert_msg(s == USP_ERR_CONFIG, "%s %s[%lld] = %s loaded with status %d: %s", cases[_i].file, cases[_i].tensor,
                  (long long)cases[_i].index, cases[_i].value_text, (int)s, message);
    snprintf(element, sizeof element, "element %lld", (long long)cases[_i].index);
    assert_mentions(message, cases[_i].file);
    assert_mentions(message, cases[_i].tensor);
    assert_mentions(message, element);
    assert_mentions(message, cases[_i].value_text);
}
END_TEST

/* _i: a NaN at (row, col) of one of our tensors; the save names the Hugging Face tensor it would land
 * in and its element there (a split of Llama's fused q/k/v rows, GPT-2's transposed Conv1D). */
START_TEST(a_save_refuses_non_finite_weights_and_writes_nothing)
{
    const struct {
        int gpt2;
        usp_param_kind kind;
        int64_t row, col;
        const char *tensor_and_element;
    } cases[] = {
        {0, USP_P_MLP_DOWN_W, 0, 3, "model.layers.0.mlp.down_proj.weight holds nan at element 3"},
        /* q has 4 heads x 8 = 32 rows: row 35 is k_proj's row 3, element 3 x 32 + 2 */
        {0, USP_P_QKV_W, 35, 2, "model.layers.0.self_attn.k_proj.weight holds nan at element 98"},
        /* c_attn is stored [C, 3 C] = [32, 96]: our (40, 5) is its element 5 x 96 + 40 */
        {1, USP_P_QKV_W, 40, 5, "h.0.attn.c_attn.weight holds nan at element 520"},
    };
    usp_model_config model = tiny_model(cases[_i].gpt2);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    size_t n = (size_t)table.total;
    float *arrays = calloc(3 * n, sizeof *arrays);
    ck_assert_ptr_nonnull(arrays);
    usp_param_init(&table, &model, 5, arrays);
    const usp_param_tensor *p = usp_param_find(&table, cases[_i].kind, 0);
    ck_assert_ptr_nonnull(p);
    arrays[p->offset + cases[_i].row * p->shape[1] + cases[_i].col] = NAN;
    char dir[256];
    snprintf(dir, sizeof dir, "%s/nan_save_%d", scratch_dir, _i);
    usp_error_clear();
    usp_status s = usp_checkpoint_save(dir, &model, &table, arrays, arrays + n, arrays + 2 * n, 1, 7);
    ck_assert_msg(s == USP_ERR_RUNTIME, "saving a NaN weight gave status %d: %s", (int)s, usp_error_message());
    assert_mentions(usp_error_message(), cases[_i].tensor_and_element);
    ck_assert_msg(!exists(dir), "%s was written with a NaN weight", dir);
    free(arrays);
    usp_param_table_free(&table);
}
END_TEST

/* A --lr of 1e6 makes the loss non-finite within a few steps: the run stops there
 * with a runtime error naming the step and --lr; the --save directory is not
 * created (_i = 0) or still holds the checkpoint it held (_i = 1). */
START_TEST(a_diverging_lr_stops_at_the_step_and_saves_nothing)
{
    usp_model_config model = tiny_model(0);
    char dir[256], weights[300];
    snprintf(dir, sizeof dir, "%s/diverged_%d", scratch_dir, _i);
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    size_t old_size = 0;
    char *old = NULL;
    if (_i == 1) {
        save_finite_checkpoint(&model, "diverged_1", 1, dir);
        old = harness_read_file(weights, &old_size);
        ck_assert_ptr_nonnull(old);
    }
    usp_train_config c = tiny_training(&model, 30, 1e6);
    c.save_dir = dir;
    char report[4096];
    usp_train_result result;
    usp_status s = harness_train(&c, &result, report, sizeof report);
    ck_assert_msg(s == USP_ERR_RUNTIME, "--lr 1e6 gave status %d (loss %g): %s", (int)s, result.loss, report);
    assert_mentions(report, "step ");
    assert_mentions(report, "--lr");
    if (_i == 0) {
        ck_assert_msg(!exists(dir), "%s was created by a diverged run", dir);
    } else {
        size_t size = 0;
        char *now = harness_read_file(weights, &size);
        ck_assert_msg(now && size == old_size && memcmp(now, old, size) == 0, "%s was replaced by a diverged run",
                      weights);
        free(now), free(old);
    }
}
END_TEST

int main(void)
{
    if (!mkdtemp(scratch_dir)) {
        perror(scratch_dir);
        return 1;
    }
    Suite *s = suite_create("nonfinite");
    TCase *t = tcase_create("nonfinite");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, resume_from_a_nan_weight_is_refused_naming_the_tensor_and_saves_nothing);
    tcase_add_loop_test(t, a_non_finite_weight_or_moment_or_a_negative_v_is_refused_on_load, 0, 5);
    tcase_add_loop_test(t, a_save_refuses_non_finite_weights_and_writes_nothing, 0, 3);
    tcase_add_loop_test(t, a_diverging_lr_stops_at_the_step_and_saves_nothing, 0, 2);
    suite_add_tcase(s, t);
    int code = check_main_run(s);
    char command[300];
    snprintf(command, sizeof command, "rm -rf '%s'", scratch_dir);
    if (system(command) != 0)
        fprintf(stderr, "could not remove %s\n", scratch_dir);
    return code;
}
