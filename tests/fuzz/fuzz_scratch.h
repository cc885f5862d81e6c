/* The scratch directory of a fuzz target: made once in LLVMFuzzerInitialize,
 * removed at exit, with one output file path for the round-trip checks. */
#ifndef USP_FUZZ_SCRATCH_H
#define USP_FUZZ_SCRATCH_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char fuzz_dir[64];
static char out_path[128]; /* the target writes its round trip here */

static void fuzz_scratch_remove(void)
{
    remove(out_path);
    rmdir(fuzz_dir);
}

/* Makes the directory (named after `tag`) and out_path = DIR/file_name. */
static void fuzz_scratch_make(const char *tag, const char *file_name)
{
    snprintf(fuzz_dir, sizeof fuzz_dir, "/tmp/usp_fuzz_%s_XXXXXX", tag);
    if (!mkdtemp(fuzz_dir))
        abort();
    snprintf(out_path, sizeof out_path, "%s/%s", fuzz_dir, file_name);
    atexit(fuzz_scratch_remove);
}

#endif
