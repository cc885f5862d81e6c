/* What a checkpoint says about the run that saved it: its step and seed read
 * back exactly, and a step or seed field that is not a whole number in range
 * refused on load, naming the file and the field. strtoll alone took "" as
 * step 0, 99999999999999999999 as the largest step (a resume that trained
 * nothing and exited 0), " 5" and "+5" as 5; the seed was never read. The
 * command-line side (a --seed or --model beside --resume that disagrees, a
 * checkpoint at or past --steps) is in tests/cli_test.sh. */
#include <check.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/safetensors.h"
#include "tests/check_main.h"

static char tmpdir[] = "/tmp/usp_resume_checks_XXXXXX";
static usp_model_config model;
static usp_param_table table;
static float *values; /* (3, total): weights, adam_m, adam_v */

static void save_checkpoint(const char *dir, int64_t step, uint64_t seed)
{
    int64_t n = table.total;
    usp_status s = usp_checkpoint_save(dir, &model, &table, values, values + n, values + 2 * n, step, seed);
    ck_assert_msg(s == USP_OK, "save %s: %s", dir, usp_error_message());
}

/* Rewrites dir's optimizer.safetensors with `metadata` and its manifest to match (the file's new size,
 * step `manifest_step`), as a checkpoint that is whole but whose optimizer fields say `metadata`. */
static void rewrite_optimizer_metadata(const char *dir, const char *metadata, int64_t manifest_step)
{
    char path[512], manifest[512];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    snprintf(manifest, sizeof manifest, "%s/usp_checkpoint.json", dir);
    usp_st_entry moments[2] = {{.name = "adam_m", .ndim = 1, .shape = {table.total}, .data = values + table.total},
                               {.name = "adam_v", .ndim = 1, .shape = {table.total}, .data = values + 2 * table.total}};
    ck_assert_msg(usp_safetensors_write(path, moments, 2, metadata) == USP_OK, "%s", usp_error_message());
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    json_error_t error;
    json_t *root = json_load_file(manifest, 0, &error);
    ck_assert_ptr_nonnull(root);
    json_object_set_new(json_object_get(root, "files"), "optimizer.safetensors", json_integer(st.st_size));
    json_object_set_new(root, "step", json_integer(manifest_step));
    ck_assert_int_eq(json_dump_file(root, manifest, 0), 0);
    json_decref(root);
}

static usp_status load(const char *dir)
{
    int64_t n = table.total, step = -1;
    int has_optimizer = 0;
    return usp_checkpoint_load(dir, &model, &table, values, values + n, values + 2 * n, &step, &has_optimizer);
}

START_TEST(saved_step_and_seed_read_back)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/saved", tmpdir);
    save_checkpoint(dir, 10, 4321);
    usp_checkpoint_state state;
    ck_assert_msg(usp_checkpoint_read_state(dir, &state) == USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(state.is_usp, 1);
    ck_assert_int_eq(state.step, 10);
    ck_assert_int_eq(state.has_seed, 1);
    ck_assert_uint_eq(state.seed, 4321);
}
END_TEST

/* A checkpoint whose optimizer metadata has no seed (as a tool other than usp might write) still loads:
 * the run's --seed then applies. */
START_TEST(checkpoint_without_seed_loads)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/no_seed", tmpdir);
    save_checkpoint(dir, 3, 1);
    rewrite_optimizer_metadata(dir, "{\"usp\": \"optimizer-1\", \"step\": \"3\"}", 3);
    usp_checkpoint_state state;
    ck_assert_msg(usp_checkpoint_read_state(dir, &state) == USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(state.step, 3);
    ck_assert_int_eq(state.has_seed, 0);
    ck_assert_msg(load(dir) == USP_OK, "%s", usp_error_message());
}
END_TEST

/* Each step text, and the manifest step that matches what strtoll made of it. */
static const struct { const char *text; int64_t manifest_step; } bad_steps[] = {
    {"", 0}, {"99999999999999999999", INT64_MAX}, {" 5", 5}, {"+5", 5},
};

START_TEST(step_that_is_not_a_whole_number_is_refused)
{
    char dir[512], metadata[128];
    snprintf(dir, sizeof dir, "%s/bad_step_%d", tmpdir, _i);
    save_checkpoint(dir, 5, 1234);
    snprintf(metadata, sizeof metadata, "{\"usp\": \"optimizer-1\", \"step\": \"%s\", \"seed\": \"1234\"}",
             bad_steps[_i].text);
    rewrite_optimizer_metadata(dir, metadata, bad_steps[_i].manifest_step);
    ck_assert_msg(load(dir) == USP_ERR_CONFIG, "step \"%s\" was accepted", bad_steps[_i].text);
    const char *message = usp_error_message();
    ck_assert_msg(strstr(message, "optimizer.safetensors") && strstr(message, "\"step\""),
                  "the message does not name the file and the field: %s", message);
    usp_checkpoint_state state;
    ck_assert_int_eq(usp_checkpoint_read_state(dir, &state), USP_ERR_CONFIG);
}
END_TEST

static const char *const bad_seeds[] = {"", "-1", "18446744073709551616", "12abc"};

START_TEST(seed_that_is_not_a_whole_number_is_refused)
{
    char dir[512], metadata[128];
    snprintf(dir, sizeof dir, "%s/bad_seed_%d", tmpdir, _i);
    save_checkpoint(dir, 5, 1234);
    snprintf(metadata, sizeof metadata, "{\"usp\": \"optimizer-1\", \"step\": \"5\", \"seed\": \"%s\"}",
             bad_seeds[_i]);
    rewrite_optimizer_metadata(dir, metadata, 5);
    ck_assert_msg(load(dir) == USP_ERR_CONFIG, "seed \"%s\" was accepted", bad_seeds[_i]);
    const char *message = usp_error_message();
    ck_assert_msg(strstr(message, "optimizer.safetensors") && strstr(message, "\"seed\""),
                  "the message does not name the file and the field: %s", message);
}
END_TEST

int main(void)
{
    if (!mkdtemp(tmpdir) || usp_model_config_preset("tiny", &model) != USP_OK ||
        usp_param_table_make(&model, &table) != USP_OK)
        return 1;
    values = calloc(3 * (size_t)table.total, sizeof *values);
    if (!values)
        return 1;
    usp_param_init(&table, &model, 1234, values);
    Suite *suite = suite_create("resume_checks");
    TCase *t = tcase_create("fields");
    tcase_add_test(t, saved_step_and_seed_read_back);
    tcase_add_test(t, checkpoint_without_seed_loads);
    tcase_add_loop_test(t, step_that_is_not_a_whole_number_is_refused, 0, (int)(sizeof bad_steps / sizeof bad_steps[0]));
    tcase_add_loop_test(t, seed_that_is_not_a_whole_number_is_refused, 0, (int)(sizeof bad_seeds / sizeof bad_seeds[0]));
    suite_add_tcase(suite, t);
    int code = check_main_run(suite);
    char command[600];
    snprintf(command, sizeof command, "rm -rf '%s'", tmpdir);
    if (system(command) != 0)
        code = 1;
    usp_param_table_free(&table);
    free(values);
    return code;
}
