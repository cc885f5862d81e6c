/* Whole-or-nothing output files (temporary name, fsync, rename). */
#include "core/atomic_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

usp_status usp_atomic_file_open(usp_atomic_file *f, const char *path)
{
    *f = (usp_atomic_file){0};
    size_t n = strlen(path);
    f->path = strdup(path);
    f->tmp_path = malloc(n + 32);
    if (!f->path || !f->tmp_path) {
        usp_atomic_file_abort(f);
        return usp_error(USP_ERR_RUNTIME, "out of memory opening %s", path);
    }
    snprintf(f->tmp_path, n + 32, "%s.tmp.%ld", path, (long)getpid());
    f->fp = fopen(f->tmp_path, "wb");
    if (!f->fp) {
        int e = errno;
        usp_atomic_file_abort(f);
        return usp_error(USP_ERR_RUNTIME, "cannot write %s: %s", path, strerror(e));
    }
    return USP_OK;
}

usp_status usp_atomic_file_commit(usp_atomic_file *f)
{
    int failed = ferror(f->fp) || fflush(f->fp) != 0 || fsync(fileno(f->fp)) != 0;
    int e = errno;
    failed |= fclose(f->fp) != 0;
    f->fp = NULL;
    if (failed || rename(f->tmp_path, f->path) != 0) {
        e = failed ? e : errno;
        usp_status s = usp_error(USP_ERR_RUNTIME, "cannot write %s: %s", f->path, strerror(e));
        usp_atomic_file_abort(f);
        return s;
    }
    free(f->tmp_path);
    free(f->path);
    *f = (usp_atomic_file){0};
    return USP_OK;
}

void usp_atomic_file_abort(usp_atomic_file *f)
{
    if (f->fp)
        fclose(f->fp);
    if (f->tmp_path)
        remove(f->tmp_path);
    free(f->tmp_path);
    free(f->path);
    *f = (usp_atomic_file){0};
}
