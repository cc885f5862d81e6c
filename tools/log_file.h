/* --log FILE: what rank 0's process prints during a run, on stdout and on stderr, goes to FILE as
 * well, line by line as printed, appended (a resumed run continues the same log). The command prints
 * to the log's two streams instead of stdout and stderr: without a file they are stdout and stderr
 * themselves; with one, tees that write each line to both. */
#ifndef USP_TOOLS_LOG_FILE_H
#define USP_TOOLS_LOG_FILE_H

#include <stdio.h>

#include "core/base/status.h"

typedef struct log_tee {
    FILE *stream;              /* stdout or stderr */
    struct log_file *log;
} log_tee;

/* Open, it must stay where it is: its tees point into it. */
typedef struct log_file {
    FILE *out, *err;           /* where the command prints: stdout and stderr, or their tees */
    FILE *file;                /* the log (NULL: none) */
    const char *path;
    int write_errno;           /* the first write to the file that failed (0: none) */
    log_tee tee_out, tee_err;
} log_file;

/* Opens `path` to append to (NULL: no log: out and err are stdout and stderr). USP_ERR_CONFIG naming
 * --log, the path and the system's reason when it cannot be opened. */
usp_status log_file_open(log_file *log, const char *path);

/* Closes the tees and the file (out and err are stdout and stderr again); USP_ERR_RUNTIME naming the
 * file when a line could not be written to it. */
usp_status log_file_close(log_file *log);

#endif
