/* The checks an option's value passes however it came, from the command line
 * (tools/cli.c) or a config file (tools/cli_config.c), with the same messages. */
#ifndef USP_TOOLS_CLI_VALUE_H
#define USP_TOOLS_CLI_VALUE_H

#include <stddef.h>

#include "tools/cli.h"

/* Sets option o (not a flag) from its text as the command line gives it: a number parsed and
 * bounded, a string not empty, a list item (CLI_LIST_MAX at most). */
usp_status cli_set_text(const char *command, const cli_option *o, const char *text);

/* Sets the CLI_INT option o to v if within its bounds; `text` is v as the user wrote it. */
usp_status cli_set_int(const cli_option *o, long long v, const char *text);

/* The option of `options` a mistyped name (name[0..len), dashes included) most likely meant
 * (two edits at most), or NULL. */
const char *cli_closest_option(const char *name, size_t len, const cli_option *options);

/* The error of a refused option (target NULL): USP_ERR_CONFIG "NAME HELP". */
usp_status cli_refuse(const cli_option *o);

#endif
