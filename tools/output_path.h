/* Output paths of the `usp` commands (--save, --trace, --dot, --dump-dir),
 * checked before anything runs: a path that cannot be written would
 * otherwise fail only after the whole run, with its figures lost. */
#ifndef USP_TOOLS_OUTPUT_PATH_H
#define USP_TOOLS_OUTPUT_PATH_H

#include "core/base/status.h"

/* Refuses (USP_ERR_CONFIG naming `option` and `path`) an output the command could not write at its end;
 * `is_dir`: the path names a directory the run creates or fills. Creates nothing. */
usp_status output_path_check(const char *option, const char *path, int is_dir);

#endif
