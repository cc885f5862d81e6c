/* A scratch folder for the tests that write files (tests/test_hf_config.c,
 * tests/test_checkpoint_io.c): paths in it, files written byte for byte, a
 * check that nothing else was left there, and the message of the last error. */
#ifndef USP_TESTS_SCRATCH_DIR_H
#define USP_TESTS_SCRATCH_DIR_H

#include <check.h>
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/base/status.h"

static char tmpdir[64];

/* `name` inside the scratch folder (four paths live at once). */
static inline const char *tmp_path(const char *name)
{
    static char buf[4][256];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
    return p;
}

static inline void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static inline void write_text(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

static inline void assert_message_has(const char *needle)
{
    ck_assert_msg(strstr(usp_error_message(), needle), "'%s' missing from: %s", needle, usp_error_message());
}

/* Only the expected files are in the folder: no temporary file was left behind. */
static inline void assert_dir_holds_only(const char *keep)
{
    DIR *d = opendir(tmpdir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            ck_assert_msg(keep && strstr(keep, e->d_name), "unexpected file %s", e->d_name);
    closedir(d);
}

static inline int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Empties the folder (a checked fixture: a failed test leaves nothing for the next). */
static inline void clean_tmpdir(void) { nftw(tmpdir, remove_entry, 8, FTW_DEPTH | FTW_PHYS), mkdir(tmpdir, 0700); }

/* Makes the folder from a mkdtemp pattern; 0 on failure (printed). */
static inline int scratch_dir_make(const char *pattern)
{
    snprintf(tmpdir, sizeof tmpdir, "%s", pattern);
    if (mkdtemp(tmpdir))
        return 1;
    perror("mkdtemp");
    return 0;
}

/* Removes the folder and everything in it. */
static inline void scratch_dir_remove(void) { nftw(tmpdir, remove_entry, 8, FTW_DEPTH | FTW_PHYS); }

#endif
