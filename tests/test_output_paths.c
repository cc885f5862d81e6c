/* Output paths and error messages that are never cut (issue 15, classes 2 and 3).
 *
 * Why it matters: paths were built in 1024-byte buffers, so a long --save
 * wrote files under cut names ("config.", "model.s") and exited 0; error
 * messages were cut at 1024 bytes, losing the reason at their end; and every
 * output was written under a temporary name and renamed over its target, so
 * --trace through a symbolic link replaced the link, and --trace onto a FIFO
 * or a device replaced the node with a regular file.
 *
 * Each case writes through usp_atomic_file_* (the one way usp writes a file)
 * and checks what is on disk afterwards: the link still a link and its target
 * rewritten, the FIFO still a FIFO with the bytes in it, the long name whole;
 * and a path the OS cannot take refused as a configuration error naming
 * PATH_MAX or NAME_MAX. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/atomic_file.h"
#include "core/base/status.h"
#include "tests/check_main.h"

/* The files of the tests live in one scratch directory, which main() makes and removes. */
static char scratch_dir[] = "/tmp/usp_output_paths_XXXXXX";

/* scratch_dir/name, malloc'd. */
static char *scratch_path(const char *name)
{
    size_t n = strlen(scratch_dir) + strlen(name) + 2;
    char *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    snprintf(p, n, "%s/%s", scratch_dir, name);
    return p;
}

/* Writes `text` to `path` through usp_atomic_file_*; returns the status of the open or the commit. */
static usp_status write_through_atomic_file(const char *path, const char *text)
{
    usp_atomic_file f;
    usp_status s = usp_atomic_file_open(&f, path);
    if (s != USP_OK)
        return s;
    ck_assert_int_ge(fputs(text, f.fp), 0);
    return usp_atomic_file_commit(&f);
}

/* The whole content of a regular file, malloc'd ("" when missing). */
static char *file_text(const char *path)
{
    char *text = calloc(1, 4096);
    ck_assert_ptr_nonnull(text);
    FILE *fp = fopen(path, "rb");
    if (fp) {
        size_t n = fread(text, 1, 4095, fp);
        text[n] = '\0';
        fclose(fp);
    }
    return text;
}

/* A string of n copies of c, malloc'd. */
static char *repeated(char c, size_t n)
{
    char *s = malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

START_TEST(error_message_keeps_its_reason_when_long)
{
    /* Longer than any message buffer: the beginning and the reason at the end survive. */
    size_t long_path_len = 3 * USP_ERROR_MESSAGE_MAX;
    char *long_path = repeated('p', long_path_len);
    ck_assert_int_eq(usp_error(USP_ERR_RUNTIME, "cannot write /%s: No space left on device", long_path),
                     USP_ERR_RUNTIME);
    const char *m = usp_error_message();
    size_t n = strlen(m);
    ck_assert_uint_lt(n, USP_ERROR_MESSAGE_MAX);
    ck_assert_msg(strncmp(m, "cannot write /ppp", 17) == 0, "the beginning is lost: %.40s", m);
    const char *reason = ": No space left on device";
    ck_assert_msg(n > strlen(reason) && strcmp(m + n - strlen(reason), reason) == 0, "the reason is lost: ...%s",
                  m + (n > 60 ? n - 60 : 0));
    ck_assert_ptr_nonnull(strstr(m, USP_ERROR_ELISION));
    free(long_path);
}
END_TEST

START_TEST(error_message_of_two_long_paths_is_whole)
{
    /* Two paths of 1500 characters (a message the old 1024 bytes cut) fit whole. */
    char *a = repeated('a', 1500), *b = repeated('b', 1500);
    usp_error(USP_ERR_RUNTIME, "cannot rename %s to %s: Permission denied", a, b);
    const char *m = usp_error_message();
    ck_assert_uint_eq(strlen(m), strlen("cannot rename  to : Permission denied") + 3000);
    ck_assert_ptr_null(strstr(m, USP_ERROR_ELISION));
    free(a), free(b);
}
END_TEST

START_TEST(error_message_may_wrap_the_last_one)
{
    usp_error(USP_ERR_RUNTIME, "disk full");
    usp_error(USP_ERR_CONFIG, "--save ck: %s", usp_error_message());
    ck_assert_str_eq(usp_error_message(), "--save ck: disk full");
}
END_TEST

START_TEST(symlink_target_is_replaced_and_link_stays)
{
    char *real = scratch_path("real.json"), *link = scratch_path("link.json");
    FILE *fp = fopen(real, "w");
    ck_assert_ptr_nonnull(fp);
    fputs("old", fp);
    fclose(fp);
    ck_assert_int_eq(symlink("real.json", link), 0); /* relative: from the link's directory */
    ck_assert_int_eq(write_through_atomic_file(link, "new"), USP_OK);
    struct stat st;
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert_msg(S_ISLNK(st.st_mode), "the link was replaced by a regular file");
    char *text = file_text(real);
    ck_assert_str_eq(text, "new");
    free(text), free(real), free(link);
}
END_TEST

START_TEST(dangling_symlink_creates_its_target)
{
    char *target = scratch_path("made.json"), *link = scratch_path("dangling.json");
    ck_assert_int_eq(symlink(target, link), 0); /* absolute */
    ck_assert_int_eq(write_through_atomic_file(link, "made"), USP_OK);
    struct stat st;
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    char *text = file_text(target);
    ck_assert_str_eq(text, "made");
    free(text), free(target), free(link);
}
END_TEST

START_TEST(fifo_is_written_through_and_stays_a_fifo)
{
    char *fifo = scratch_path("pipe");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    /* Our own reader end, opened read-write so that neither open blocks (Linux). */
    int reader = open(fifo, O_RDWR | O_NONBLOCK);
    ck_assert_int_ge(reader, 0);
    ck_assert_int_eq(write_through_atomic_file(fifo, "through the pipe"), USP_OK);
    struct stat st;
    ck_assert_int_eq(lstat(fifo, &st), 0);
    ck_assert_msg(S_ISFIFO(st.st_mode), "the FIFO was replaced by a regular file");
    char got[64] = "";
    ssize_t n = read(reader, got, sizeof got - 1);
    ck_assert_int_eq(n, (ssize_t)strlen("through the pipe"));
    got[n] = '\0';
    ck_assert_str_eq(got, "through the pipe");
    close(reader);
    free(fifo);
}
END_TEST

START_TEST(dev_null_stays_a_device)
{
    ck_assert_int_eq(write_through_atomic_file("/dev/null", "nothing"), USP_OK);
    struct stat st;
    ck_assert_int_eq(lstat("/dev/null", &st), 0);
    ck_assert(S_ISCHR(st.st_mode));
}
END_TEST

START_TEST(directory_target_is_a_config_error)
{
    ck_assert_int_eq(write_through_atomic_file(scratch_dir, "x"), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "is a directory"));
}
END_TEST

START_TEST(name_of_name_max_is_written_whole)
{
    /* A name the OS takes, with no room left for a ".tmp.PID" suffix. */
    char *name = repeated('n', NAME_MAX), *path = scratch_path(name);
    ck_assert_msg(write_through_atomic_file(path, "whole") == USP_OK, "%s", usp_error_message());
    char *text = file_text(path);
    ck_assert_str_eq(text, "whole");
    ck_assert_int_eq(unlink(path), 0);
    free(text), free(name), free(path);
}
END_TEST

START_TEST(name_over_name_max_is_a_config_error)
{
    char *name = repeated('n', NAME_MAX + 1), *path = scratch_path(name);
    ck_assert_int_eq(write_through_atomic_file(path, "x"), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "NAME_MAX"));
    ck_assert_ptr_nonnull(strstr(usp_error_message(), name));
    free(name), free(path);
}
END_TEST

START_TEST(path_over_path_max_is_a_config_error)
{
    /* Short names, too many of them: PATH_MAX, not NAME_MAX, is what it breaks. */
    size_t n = PATH_MAX + 2;
    char *path = repeated('d', n);
    for (size_t i = 1; i < n; i += 2)
        path[i] = '/';
    path[0] = '/';
    ck_assert_int_eq(write_through_atomic_file(path, "x"), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "PATH_MAX"));
    free(path);
}
END_TEST

START_TEST(path_check_counts_what_usp_adds)
{
    char *name = repeated('c', NAME_MAX - 5);
    ck_assert_int_eq(usp_atomic_path_check("--save", name, 0, 0), USP_OK);
    ck_assert_int_eq(usp_atomic_path_check("--save", name, 11, 0), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "--save"));
    free(name);
}
END_TEST

static Suite *output_paths_suite(void)
{
    Suite *s = suite_create("output_paths");
    TCase *t = tcase_create("output_paths");
    tcase_add_test(t, error_message_keeps_its_reason_when_long);
    tcase_add_test(t, error_message_of_two_long_paths_is_whole);
    tcase_add_test(t, error_message_may_wrap_the_last_one);
    tcase_add_test(t, symlink_target_is_replaced_and_link_stays);
    tcase_add_test(t, dangling_symlink_creates_its_target);
    tcase_add_test(t, fifo_is_written_through_and_stays_a_fifo);
    tcase_add_test(t, dev_null_stays_a_device);
    tcase_add_test(t, directory_target_is_a_config_error);
    tcase_add_test(t, name_of_name_max_is_written_whole);
    tcase_add_test(t, name_over_name_max_is_a_config_error);
    tcase_add_test(t, path_over_path_max_is_a_config_error);
    tcase_add_test(t, path_check_counts_what_usp_adds);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    if (!mkdtemp(scratch_dir))
        return 1;
    int failed = check_main_run(output_paths_suite());
    char command[128]; /* scratch_dir is fixed-length: no cut */
    snprintf(command, sizeof command, "rm -rf '%s'", scratch_dir);
    if (system(command) != 0)
        failed = 1;
    return failed;
}
