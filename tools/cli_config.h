/* A command's options in a file: --config FILE reads them, --print-config writes
 * them. The file is a JSON object whose keys are the options' names without
 * their dashes, each value of the option's kind: {"steps": 400, "lr": 0.001,
 * "save": "ckpt", "recompute": true, "inject": ["skip:rank=1"]}; null leaves an
 * option at the command's default. What accelerate's and nanotron's YAML files
 * are to their users, over the same tables the command line reads (tools/cli.h). */
#ifndef USP_TOOLS_CLI_CONFIG_H
#define USP_TOOLS_CLI_CONFIG_H

#include <stdio.h>

#include "tools/cli.h"

#define CLI_CONFIG_HELP                                                                                             \
    "read options from a JSON object, keys the option names without dashes: {\"steps\": 400, \"recompute\": "     \
    "true, \"inject\": [\"skip:rank=1\"]}; null keeps the default; the command line overrides the file"
#define CLI_PRINT_CONFIG_HELP                                                                                       \
    "print the options as JSON that --config reads (the file's and the command line's, every other at its "       \
    "default) and exit without running; null: not given, the command derives it (e.g. --ulysses from --world)"

/* Sets the options of `command` from the JSON object in the file at `path`: USP_ERR_CONFIG naming
 * the file, the key and the value when it cannot be read, is not a JSON object, or holds a key
 * that is not an option of the command, a refused one, or a value of the wrong kind or range. */
usp_status cli_config_read(const cli_command *command, const char *path);

/* Prints the options' values as a JSON object, in the table's order, that cli_config_read reads
 * back to the same values (the refused options left out; an unset string or an int outside its
 * bounds, the command's "derive it" value, as null). */
usp_status cli_config_print(FILE *out, const cli_command *command);

#endif
