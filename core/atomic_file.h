/* Output files that appear whole or not at all: written under a temporary
 * name in the same directory and renamed on success, so a failed run leaves
 * no partial file behind. */
#ifndef USP_ATOMIC_FILE_H
#define USP_ATOMIC_FILE_H

#include <stdio.h>

#include "core/status.h"

typedef struct usp_atomic_file {
    FILE *fp;
    char *path;
    char *tmp_path;
} usp_atomic_file;

/* Opens a temporary file beside `path` for writing. */
usp_status usp_atomic_file_open(usp_atomic_file *f, const char *path);

/* Flushes, syncs and renames the temporary file to its final path. */
usp_status usp_atomic_file_commit(usp_atomic_file *f);

/* Removes the temporary file (safe to call after a failed open or a commit). */
void usp_atomic_file_abort(usp_atomic_file *f);

#endif
