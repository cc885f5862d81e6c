/* The --log tees (see log_file.h): a stdio stream of glibc's fopencookie, line-buffered, whose
 * writes go to the real stream and to the file, each flushed, so that the file holds every line
 * printed so far even when the process is then killed. */
#include "tools/log_file.h"

#include <errno.h>
#include <string.h>
#include <sys/types.h>

/* The tee's write: the stream's bytes, and the same bytes to the log. A failing log does not stop the
 * printing: the first failure is kept for log_file_close. */
static ssize_t tee_write(void *cookie, const char *bytes, size_t size)
{
    log_tee *tee = cookie;
    log_file *log = tee->log;
    size_t printed = fwrite(bytes, 1, size, tee->stream);
    fflush(tee->stream);
    errno = 0;
    if (!log->write_errno && (fwrite(bytes, 1, size, log->file) != size || fflush(log->file) != 0))
        log->write_errno = errno ? errno : EIO;
    return printed == size ? (ssize_t)size : -1; /* the stream's own error stays on it (usp.c reports stdout's) */
}

/* A line-buffered stream that tees `stream` into log->file. */
static FILE *tee_open(log_file *log, log_tee *tee, FILE *stream)
{
    *tee = (log_tee){.stream = stream, .log = log};
    FILE *f = fopencookie(tee, "w", (cookie_io_functions_t){.write = tee_write});
    if (f)
        setvbuf(f, NULL, _IOLBF, BUFSIZ);
    return f;
}

usp_status log_file_open(log_file *log, const char *path)
{
    *log = (log_file){.out = stdout, .err = stderr, .path = path};
    if (!path)
        return USP_OK;
    log->file = fopen(path, "ae"); /* close-on-exec: a process that execs mpirun leaves it to rank 0's */
    if (!log->file)
        return usp_error(USP_ERR_CONFIG, "--log %s: cannot open it to append to (%s); name a file this user can "
                         "write, in a directory that exists", path, strerror(errno));
    log->out = tee_open(log, &log->tee_out, stdout);
    log->err = tee_open(log, &log->tee_err, stderr);
    if (!log->out || !log->err) {
        log_file_close(log);
        return usp_error(USP_ERR_RUNTIME, "--log %s: out of memory for its streams", path);
    }
    return USP_OK;
}

usp_status log_file_close(log_file *log)
{
    if (!log->file)
        return USP_OK;
    if (log->out && log->out != stdout)
        fclose(log->out);
    if (log->err && log->err != stderr)
        fclose(log->err);
    errno = 0;
    if (fclose(log->file) != 0 && !log->write_errno)
        log->write_errno = errno ? errno : EIO;
    int failed = log->write_errno;
    const char *path = log->path;
    *log = (log_file){.out = stdout, .err = stderr};
    if (failed)
        return usp_error(USP_ERR_RUNTIME, "--log %s: writing it failed (%s): the log misses lines that were "
                         "printed", path, strerror(failed));
    return USP_OK;
}
