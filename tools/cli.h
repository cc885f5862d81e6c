/* Command-line options: a table per command, parsed with messages that name
 * the option, the value and what would work (exit code 2 on any of them).
 * Every command's table also reads a config file (--config) and prints its
 * options as one (--print-config): tools/cli_config.h; the checks of a value,
 * either way: tools/cli_value.h. */
#ifndef USP_TOOLS_CLI_H
#define USP_TOOLS_CLI_H

#include <stdio.h>

#include "core/base/status.h"

typedef enum cli_kind { CLI_INT, CLI_DOUBLE, CLI_STRING, CLI_FLAG, CLI_LIST } cli_kind;

#define CLI_LIST_MAX 16

/* Values of a repeatable option. */
typedef struct cli_list {
    const char *items[CLI_LIST_MAX];
    int n;
} cli_list;

typedef struct cli_option {
    const char *name;    /* "--world" */
    cli_kind kind;
    void *target;        /* int *, double *, const char **, int * (flag), cli_list *; NULL: refused here */
    const char *metavar; /* "N" */
    const char *help;    /* a refused option's: why, read after its name ("--steps is ...") */
    long long min, max;  /* CLI_INT bounds (ignored when min > max) */
} cli_option;

/* A command's options and the help that describes them. */
typedef struct cli_command {
    const char *name;          /* "train": messages say "usp train" */
    const char *usage;         /* the help's first line: "usp train [options]" */
    const char *about;         /* the paragraph under it */
    const cli_option *options; /* terminated by a zero entry */
} cli_command;

/* Parses argv[first..argc) against command->options, after the values of a --config FILE (the
 * command line overrides them, wherever it gives them). --help (-h) prints the help and
 * --print-config the options as JSON, both on stdout, and set *done: nothing more to run
 * (exit 0). An option whose target is NULL is known but refused: USP_ERR_CONFIG "NAME HELP"
 * (e.g. a train option given to eval). */
usp_status cli_parse(const cli_command *command, int argc, char **argv, int first, int *done);

/* Prints "usp COMMAND: " and the message to err, flushed. In one of several processes a launcher
 * started (mpirun, srun), "usp COMMAND [rank R]: ": every process prints its own errors, and says
 * whose they are (a message that begins with the runtime's "rank R: " of this rank says it once). */
void cli_error(FILE *err, const char *command, const char *format, ...) __attribute__((format(printf, 3, 4)));

/* Prints "usp COMMAND: message" to stderr (cli_error) and returns the status as an exit code. */
int cli_fail(const char *command, usp_status status);

#endif
