/* Checkpoints committed as a whole: a save stopped at any boundary between
 * its files (by a failure, as a full disk would, or by SIGKILL in a forked
 * child) leaves a directory that loads as the old checkpoint or the new one,
 * bitwise, never new weights beside the old optimizer state; a fresh save
 * stopped early leaves nothing a resume accepts; a half directory is refused
 * with a message naming the missing file. */
#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/base/atomic_file.h"
#include "core/checkpoint/checkpoint.h"
#include "tests/check_main.h"

static char tmpdir[] = "/tmp/usp_commit_XXXXXX";

/* One checkpoint's contents: weights, Adam moments and step, distinct per `seed`. */
typedef struct snapshot {
    float *p; /* (3, total): weights, adam_m, adam_v */
    int64_t step;
} snapshot;

static usp_model_config model;
static usp_param_table table;

static snapshot snapshot_make(uint64_t seed, int64_t step)
{
    size_t n = (size_t)table.total;
    snapshot s = {calloc(3 * n, sizeof(float)), step};
    ck_assert_ptr_nonnull(s.p);
    usp_param_init(&table, &model, seed, s.p);
    for (size_t i = 0; i < 2 * n; i++)
        s.p[n + i] = (float)(i + seed) * 1e-6f;
    return s;
}

static usp_status save(const char *dir, const snapshot *s)
{
    int64_t n = table.total;
    return usp_checkpoint_save(dir, &model, &table, s->p, s->p + n, s->p + 2 * n, s->step, 7);
}

/* Loads dir; *out must be freed. */
static usp_status load(const char *dir, snapshot *out, int *has_optimizer)
{
    int64_t n = table.total;
    out->p = calloc(3 * (size_t)n, sizeof(float));
    ck_assert_ptr_nonnull(out->p);
    return usp_checkpoint_load(dir, &model, &table, out->p, out->p + n, out->p + 2 * n, &out->step, has_optimizer);
}

static int same(const snapshot *a, const snapshot *b)
{
    return a->step == b->step && memcmp(a->p, b->p, 3 * (size_t)table.total * sizeof(float)) == 0;
}

/* dir loads, with its optimizer, as exactly `old` or exactly `new_` (bitwise); returns 0 or 1 for which. */
static int loads_as_old_or_new(const char *dir, const snapshot *old, const snapshot *new_, int k)
{
    snapshot got;
    int has_optimizer = 0;
    usp_status s = load(dir, &got, &has_optimizer);
    ck_assert_msg(s == USP_OK, "boundary %d: %s does not load: %s", k, dir, usp_error_message());
    ck_assert_msg(has_optimizer, "boundary %d: %s lost its optimizer state", k, dir);
    int is_old = same(&got, old), is_new = same(&got, new_);
    ck_assert_msg(is_old || is_new, "boundary %d: %s is neither the old checkpoint nor the new one (step %lld)", k,
                  dir, (long long)got.step);
    free(got.p);
    return is_new;
}

/* Names in tmpdir that start with `prefix`. */
static int count_entries(const char *prefix)
{
    DIR *h = opendir(tmpdir);
    ck_assert_ptr_nonnull(h);
    int n = 0;
    for (struct dirent *e; (e = readdir(h)) != NULL;)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(h);
    return n;
}

static int fail_at;
static int fail_here(usp_checkpoint_boundary at, void *ctx)
{
    (void)ctx;
    return (int)at == fail_at;
}

static int kill_here(usp_checkpoint_boundary at, void *ctx)
{
    (void)ctx;
    if ((int)at == fail_at)
        raise(SIGKILL);
    return 0;
}

START_TEST(a_failed_save_at_each_boundary_leaves_old_or_new)
{
    usp_atomic_dir_set_exchange(_i == 0); /* 1: the fallback of filesystems without RENAME_EXCHANGE */
    snapshot a = snapshot_make(1, 10), b = snapshot_make(2, 20);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/failed", tmpdir);
    for (fail_at = 0; fail_at < USP_CKPT_BOUNDARIES; fail_at++) {
        ck_assert_int_eq(save(dir, &a), USP_OK);
        usp_checkpoint_set_save_hook(fail_here, NULL);
        usp_status s = save(dir, &b);
        usp_checkpoint_set_save_hook(NULL, NULL);
        ck_assert_int_ne(s, USP_OK);
        int is_new = loads_as_old_or_new(dir, &a, &b, fail_at);
        ck_assert_int_eq(is_new, fail_at >= USP_CKPT_SWAPPED); /* before the swap the failure leaves the old one */
    }
    ck_assert_int_eq(count_entries("failed."), 0); /* a failure in process cleans up after itself */
    usp_atomic_dir_set_exchange(1);
    free(a.p), free(b.p);
}
END_TEST

/* Forks a child that saves `s` into dir and is SIGKILLed at boundary k. */
static void save_killed_at(const char *dir, const snapshot *s, int k)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fail_at = k;
        usp_checkpoint_set_save_hook(kill_here, NULL);
        save(dir, s);
        _exit(3); /* the hook never fired */
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "boundary %d: the child was not killed", k);
}

START_TEST(a_save_killed_at_each_boundary_leaves_old_or_new)
{
    usp_atomic_dir_set_exchange(_i == 0); /* 1: the fallback of filesystems without RENAME_EXCHANGE */
    snapshot a = snapshot_make(3, 30), b = snapshot_make(4, 40), c = snapshot_make(5, 50);
    char dir[256], fresh[256];
    snprintf(dir, sizeof dir, "%s/killed", tmpdir);
    ck_assert_int_eq(save(dir, &a), USP_OK);
    for (int k = 0; k < USP_CKPT_BOUNDARIES; k++) {
        ck_assert_int_eq(save(dir, &a), USP_OK);
        save_killed_at(dir, &b, k);
        ck_assert_int_eq(loads_as_old_or_new(dir, &a, &b, k), k >= USP_CKPT_SWAPPED);
        /* a fresh save killed: no directory a resume accepts, unless the new one is complete */
        snprintf(fresh, sizeof fresh, "%s/killed_fresh_%d_%d", tmpdir, _i, k);
        save_killed_at(fresh, &b, k);
        snapshot got;
        int has_optimizer = 0;
        usp_status s = load(fresh, &got, &has_optimizer);
        if (k >= USP_CKPT_SWAPPED)
            ck_assert_msg(s == USP_OK && has_optimizer && same(&got, &b), "boundary %d: %s", k, usp_error_message());
        else
            ck_assert_msg(s != USP_OK, "boundary %d: a resume accepts the killed fresh save %s", k, fresh);
        free(got.p);
    }
    /* the next save over a killed one succeeds and removes what the killed ones left */
    ck_assert_msg(save(dir, &c) == USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(loads_as_old_or_new(dir, &c, &c, USP_CKPT_BOUNDARIES), 1);
    ck_assert_int_eq(count_entries("killed."), 0);
    usp_atomic_dir_set_exchange(1);
    free(a.p), free(b.p), free(c.p);
}
END_TEST

START_TEST(a_failed_fresh_save_leaves_nothing_a_resume_accepts)
{
    snapshot b = snapshot_make(6, 60);
    for (fail_at = 0; fail_at < USP_CKPT_SWAPPED; fail_at++) {
        char dir[256];
        snprintf(dir, sizeof dir, "%s/fresh_%d", tmpdir, fail_at);
        usp_checkpoint_set_save_hook(fail_here, NULL);
        usp_status s = save(dir, &b);
        usp_checkpoint_set_save_hook(NULL, NULL);
        ck_assert_int_ne(s, USP_OK);
        snapshot got;
        int has_optimizer = 0;
        s = load(dir, &got, &has_optimizer);
        free(got.p);
        ck_assert_msg(s != USP_OK, "boundary %d: a resume accepts %s (step %lld, optimizer %d)", fail_at, dir,
                      (long long)got.step, has_optimizer);
    }
    free(b.p);
}
END_TEST

/* Removes dir/name, loads dir, and checks the refusal names `missing`; saves again afterwards. */
static void refused_without(const char *dir, const char *name, const char *missing, const snapshot *s)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_int_eq(save(dir, s), USP_OK);
    unlink(path);
    snapshot got;
    int has_optimizer = 0;
    usp_status st = load(dir, &got, &has_optimizer);
    free(got.p);
    ck_assert_msg(st == USP_ERR_CONFIG, "without %s: %s loads (status %d)", name, dir, (int)st);
    ck_assert_msg(strstr(usp_error_message(), missing) != NULL, "without %s: \"%s\" does not name %s", name,
                  usp_error_message(), missing);
}

START_TEST(a_half_directory_is_refused_naming_what_is_missing)
{
    snapshot b = snapshot_make(8, 80);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/half", tmpdir);
    refused_without(dir, "usp_checkpoint.json", "usp_checkpoint.json", &b); /* optimizer state, no marker */
    refused_without(dir, "optimizer.safetensors", "optimizer.safetensors", &b);
    refused_without(dir, "config.json", "config.json", &b);
    free(b.p);
}
END_TEST

/* optimizer.safetensors copied by hand from another save (same size): the steps disagree. */
START_TEST(files_from_two_saves_are_refused)
{
    snapshot a = snapshot_make(13, 130), b = snapshot_make(14, 140);
    char one[256], two[256], cmd[700];
    snprintf(one, sizeof one, "%s/one", tmpdir);
    snprintf(two, sizeof two, "%s/two", tmpdir);
    ck_assert_int_eq(save(one, &a), USP_OK);
    ck_assert_int_eq(save(two, &b), USP_OK);
    snprintf(cmd, sizeof cmd, "cp '%s/optimizer.safetensors' '%s/'", two, one);
    ck_assert_int_eq(system(cmd), 0);
    snapshot got;
    int has_optimizer = 0;
    usp_status s = load(one, &got, &has_optimizer);
    free(got.p);
    ck_assert_int_eq(s, USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "different saves") != NULL, "%s", usp_error_message());
    free(a.p), free(b.p);
}
END_TEST

START_TEST(a_save_never_replaces_a_directory_of_other_files)
{
    snapshot b = snapshot_make(9, 90);
    char dir[256], notes[300];
    snprintf(dir, sizeof dir, "%s/home", tmpdir);
    snprintf(notes, sizeof notes, "%s/notes.txt", dir);
    ck_assert_int_eq(mkdir(dir, 0777), 0);
    FILE *f = fopen(notes, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(usp_checkpoint_check_save_dir(dir), USP_ERR_CONFIG); /* what training checks up front */
    ck_assert_int_eq(save(dir, &b), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "notes.txt") != NULL, "%s", usp_error_message());
    struct stat st;
    ck_assert_int_eq(stat(notes, &st), 0);
    free(b.p);
}
END_TEST

/* The fallback swap (two renames) killed between them: DIR missing, DIR.usp-old the old checkpoint. */
START_TEST(a_checkpoint_renamed_aside_is_reported_then_put_back)
{
    snapshot a = snapshot_make(11, 110), b = snapshot_make(12, 120);
    char dir[256], old[300];
    snprintf(dir, sizeof dir, "%s/aside", tmpdir);
    snprintf(old, sizeof old, "%s" USP_ATOMIC_DIR_OLD_SUFFIX, dir);
    ck_assert_int_eq(save(dir, &a), USP_OK);
    ck_assert_int_eq(rename(dir, old), 0);
    snapshot got;
    int has_optimizer = 0;
    usp_status s = load(dir, &got, &has_optimizer);
    free(got.p);
    ck_assert_int_eq(s, USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), old) != NULL, "%s", usp_error_message());
    fail_at = USP_CKPT_DIR_CREATED; /* the next save puts the old one back, then fails */
    usp_checkpoint_set_save_hook(fail_here, NULL);
    ck_assert_int_ne(save(dir, &b), USP_OK);
    usp_checkpoint_set_save_hook(NULL, NULL);
    ck_assert_int_eq(loads_as_old_or_new(dir, &a, &a, 0), 1);
    ck_assert_int_eq(count_entries("aside."), 0);
    /* a user's own backup named DIR.old is not usp's to touch */
    char cmd[700], kept[320];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s.old'", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(save(dir, &b), USP_OK);
    snprintf(kept, sizeof kept, "%s.old", dir);
    ck_assert_int_eq(loads_as_old_or_new(kept, &a, &a, 0), 1);
    free(a.p), free(b.p);
}
END_TEST

int main(void)
{
    if (!mkdtemp(tmpdir) || usp_model_config_preset("tiny", &model) != USP_OK)
        return 1;
    model.vocab = 40, model.n_layer = 2, model.d_model = 16, model.n_head = 4, model.n_kv_head = 2;
    model.d_ff = 24, model.max_seq = 32;
    if (usp_param_table_make(&model, &table) != USP_OK)
        return 1;
    Suite *s = suite_create("checkpoint_commit");
    TCase *t = tcase_create("commit");
    tcase_add_loop_test(t, a_failed_save_at_each_boundary_leaves_old_or_new, 0, 2);
    tcase_add_loop_test(t, a_save_killed_at_each_boundary_leaves_old_or_new, 0, 2);
    tcase_add_test(t, a_failed_fresh_save_leaves_nothing_a_resume_accepts);
    tcase_add_test(t, a_half_directory_is_refused_naming_what_is_missing);
    tcase_add_test(t, files_from_two_saves_are_refused);
    tcase_add_test(t, a_save_never_replaces_a_directory_of_other_files);
    tcase_add_test(t, a_checkpoint_renamed_aside_is_reported_then_put_back);
    suite_add_tcase(s, t);
    int code = check_main_run(s);
    usp_param_table_free(&table);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? code : 1;
}
