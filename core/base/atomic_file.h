/* Outputs that appear whole or not at all.
 *
 * A file is written under a temporary name in the same directory and renamed
 * on success, so a failed run leaves no partial file behind. What the target
 * already is decides what is replaced:
 * - missing or a regular file: the temporary file is renamed over it;
 * - a symbolic link: followed (link after link, a relative target from the
 *   link's directory) and the file it names is replaced as above, so the link
 *   stays a link and its target gets the new content;
 * - a device, FIFO or socket (--trace /dev/null, a pipe to a reader): opened
 *   and written through, never renamed over, so it stays what it was; such a
 *   target has no "whole or not at all" (a reader may see part of a failed run);
 * - a directory: refused (USP_ERR_CONFIG).
 * A path the OS cannot take (over PATH_MAX, or a name over NAME_MAX once usp's
 * temporary suffix is added) is refused with USP_ERR_CONFIG naming the limit,
 * never cut to a shorter, different name.
 *
 * A directory of several files (a checkpoint) is written the same way one
 * level up: into DIR.tmp-XXXXXX beside DIR (same filesystem, so a rename and
 * never a copy), synced, then swapped in for DIR in one step with
 * renameat2(RENAME_EXCHANGE). Where the filesystem has no exchange, the old
 * DIR is renamed to DIR.usp-old and the new one renamed in; between the two
 * renames DIR is missing and DIR.usp-old is the whole old directory, which the
 * next usp_atomic_dir_open renames back. A killed writer thus leaves DIR
 * (or, in the fallback's window, DIR.usp-old) as the old directory or the new
 * one, never a mix of the two. */
#ifndef USP_ATOMIC_FILE_H
#define USP_ATOMIC_FILE_H

#include <stdio.h>

#include "core/base/status.h"

typedef struct usp_atomic_file {
    FILE *fp;
    char *path;
    char *tmp_path; /* NULL when direct */
    int direct;     /* the target is not a regular file: written through, not renamed over */
} usp_atomic_file;

/* USP_ERR_CONFIG, naming `option`, `path` and PATH_MAX or NAME_MAX, when `path`
 * plus `added_to_path` characters is over PATH_MAX or one of its names is over
 * NAME_MAX (its last one plus `added_to_last`): the suffixes usp adds to
 * write it (a temporary name, the files of a checkpoint directory). */
usp_status usp_atomic_path_check(const char *option, const char *path, size_t added_to_last, size_t added_to_path);

/* Opens a temporary file beside `path` (after its links) for writing, or
 * `path` itself when it is a device, FIFO or socket. */
usp_status usp_atomic_file_open(usp_atomic_file *f, const char *path);

/* Flushes, syncs and renames the temporary file to its final path (a direct one: flushes and closes). */
usp_status usp_atomic_file_commit(usp_atomic_file *f);

/* Removes the temporary file, never a direct target (safe to call after a failed open or a commit). */
void usp_atomic_file_abort(usp_atomic_file *f);

/* DIR + this: the old directory during the fallback swap (a name of usp's, not a user's backup "DIR.old"). */
#define USP_ATOMIC_DIR_OLD_SUFFIX ".usp-old"

typedef struct usp_atomic_dir {
    char *path;     /* DIR, as the caller named it */
    char *tmp_path; /* DIR.tmp-XXXXXX: the new files before the commit, the old directory after it */
} usp_atomic_dir;

/* Creates an empty DIR.tmp-XXXXXX beside `path` to be filled, after putting
 * back DIR.usp-old from an interrupted fallback swap and removing the
 * DIR.tmp-* directories that killed writers left. */
usp_status usp_atomic_dir_open(usp_atomic_dir *d, const char *path);

/* Syncs the temporary directory and swaps it in for DIR; the old DIR (if
 * any) is then at d->tmp_path until usp_atomic_dir_close removes it. */
usp_status usp_atomic_dir_commit(usp_atomic_dir *d);

/* After a commit: the replaced DIR (if there was one) goes to `as` (which must not exist) instead of
 * being removed by usp_atomic_dir_close; USP_OK with nothing done when there was none. */
usp_status usp_atomic_dir_keep_old(usp_atomic_dir *d, const char *as);

/* Removes `dir` and the files in it (a directory of files only, as a checkpoint is). */
void usp_atomic_dir_remove(const char *dir);

/* Removes d->tmp_path and the files in it (the unfinished new directory
 * after a failure, the replaced old one after a commit), then frees d. */
void usp_atomic_dir_close(usp_atomic_dir *d);

/* Tests only (one global): 0 makes commits take the two-rename fallback even where the exchange works. */
void usp_atomic_dir_set_exchange(int use_exchange);

#endif
