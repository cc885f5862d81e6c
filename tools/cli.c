/* Option parsing for the usp command. */
#include "tools/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "core/runtime/launcher_env.h"
#include "tools/cli_config.h"
#include "tools/cli_value.h"

/* What an argument of the command line is: an option of the table, or one every command takes. */
typedef enum arg_kind { ARG_OPTION, ARG_HELP, ARG_CONFIG, ARG_PRINT_CONFIG } arg_kind;

typedef struct cli_arg {
    arg_kind kind;
    const cli_option *option; /* ARG_OPTION: its table entry */
    const char *value;        /* ARG_OPTION (but a flag), ARG_CONFIG: the value */
} cli_arg;

static int name_is(const char *arg, size_t len, const char *name)
{
    return strlen(name) == len && strncmp(arg, name, len) == 0;
}

/* Reads the argument argv[*i] (--name, --name=VALUE or --name VALUE: then *i moves onto the value). */
static usp_status read_arg(const cli_command *c, int argc, char **argv, int *i, cli_arg *out)
{
    const char *arg = argv[*i];
    *out = (cli_arg){.kind = ARG_OPTION};
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
        out->kind = ARG_HELP;
        return USP_OK;
    }
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    const char *name = "--config", *metavar = "FILE";
    if (name_is(arg, len, "--print-config")) {
        out->kind = ARG_PRINT_CONFIG;
        return eq ? usp_error(USP_ERR_CONFIG, "--print-config takes no value") : USP_OK;
    } else if (name_is(arg, len, name)) {
        out->kind = ARG_CONFIG;
    } else {
        const cli_option *o = c->options;
        while (o->name && !name_is(arg, len, o->name))
            o++;
        if (!o->name) {
            const char *meant = cli_closest_option(arg, len, c->options);
            return usp_error(USP_ERR_CONFIG, "unknown option %s for `usp %s`; %s%s%ssee usp %s --help", arg, c->name,
                             meant ? "did you mean " : "", meant ? meant : "", meant ? "? " : "", c->name);
        }
        if (!o->target)
            return cli_refuse(o);
        out->option = o;
        if (o->kind == CLI_FLAG)
            return eq ? usp_error(USP_ERR_CONFIG, "%s takes no value", o->name) : USP_OK;
        name = o->name, metavar = o->metavar ? o->metavar : "VALUE";
    }
    out->value = eq ? eq + 1 : *i + 1 < argc ? argv[++*i] : NULL;
    if (!out->value)
        return usp_error(USP_ERR_CONFIG, "%s needs a value (%s %s)", name, name, metavar);
    return USP_OK;
}

/* The width help wraps to: the terminal's when `out` is one, else $COLUMNS, else 0: a pipe or a file gets
 * an option a line, as written, for grep. */
static int help_width(FILE *out)
{
    struct winsize w;
    if (isatty(fileno(out)) && ioctl(fileno(out), TIOCGWINSZ, &w) == 0 && w.ws_col > 0)
        return w.ws_col;
    const char *columns = getenv("COLUMNS");
    return columns && atoi(columns) > 0 ? atoi(columns) : 0;
}

/* Writes `text` from column `col` on, its words wrapped before `width` (0: no wrapping; a newline of the text
 * is a space), each new line indented to column `indent`; returns the column it ends at. */
static int print_wrapped(FILE *out, const char *text, int col, int indent, int width)
{
    int first = 1;
    for (const char *p = text; *p;) {
        while (*p == ' ' || *p == '\n')
            p++;
        int len = (int)strcspn(p, " \n");
        if (!len)
            break;
        if (!first && width && col + 1 + len > width && col > indent)
            col = fprintf(out, "\n%*s", indent, "") - 1;
        else if (!first)
            col += fprintf(out, " ");
        col += fprintf(out, "%.*s", len, p);
        first = 0;
        p += len;
    }
    return col;
}

enum { NAME_COLUMN = 22, HELP_COLUMN = 2 + NAME_COLUMN + 1 };

/* One option's line: its name and value in the first column, its help wrapped in the second. */
static void print_option(FILE *out, const char *left, const char *help, int width)
{
    int col = HELP_COLUMN;
    if (width && (int)strlen(left) > NAME_COLUMN) /* a long name: its help starts on the next line, in the column */
        fprintf(out, "  %s\n%*s", left, HELP_COLUMN, "");
    else
        col = fprintf(out, "  %-*s ", NAME_COLUMN, left);
    print_wrapped(out, help, col, HELP_COLUMN, width);
    fputc('\n', out);
}

/* Prints "usage", the command's paragraph and a line per option (the refused ones left out), wrapped to the
 * terminal (help_width). */
static void print_help(FILE *out, const cli_command *c)
{
    int width = help_width(out);
    if (width && width < HELP_COLUMN + 30)
        width = HELP_COLUMN + 30; /* a help column of a word or two would read worse than long lines */
    fprintf(out, "usage: %s\n\n", c->usage);
    if (width) { /* each paragraph re-flowed: their own line breaks are for a pipe */
        char *about = strdup(c->about);
        for (char *p = about, *end; p; p = end ? end + 2 : NULL) {
            if ((end = strstr(p, "\n\n")))
                *end = '\0';
            print_wrapped(out, p, 0, 0, width);
            fputs(end ? "\n\n" : "", out);
        }
        free(about);
    } else {
        fputs(c->about, out);
    }
    fprintf(out, "\n\noptions:\n");
    for (const cli_option *o = c->options; o->name; o++) {
        if (!o->target)
            continue;
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        print_option(out, left, o->help, width);
    }
    print_option(out, "--config FILE", CLI_CONFIG_HELP, width);
    print_option(out, "--print-config", CLI_PRINT_CONFIG_HELP, width);
    print_option(out, "-h, --help", "this help", width);
}

void cli_error(FILE *err, const char *command, const char *format, ...)
{
    va_list args, again;
    va_start(args, format);
    va_copy(again, args);
    int n = vsnprintf(NULL, 0, format, args); /* a deadlock report of many ranks is long */
    va_end(args);
    char *message = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (message)
        vsnprintf(message, (size_t)n + 1, format, again);
    va_end(again);
    const char *text = message ? message : format;
    int rank = usp_launcher_rank();
    if (rank < 0) {
        fprintf(err, "usp %s: %s", command, text);
    } else { /* one of several processes: whose error it is; a runtime's "rank R: " of this rank said once */
        char own[32];
        int own_len = snprintf(own, sizeof own, "rank %d: ", rank);
        fprintf(err, "usp %s [rank %d]: %s", command, rank,
                strncmp(text, own, (size_t)own_len) == 0 ? text + own_len : text);
    }
    fflush(err);
    free(message);
}

/* A list the command line gives replaces the config file's items (the command line overrides the file). */
static void forget_listed_in_file(const cli_command *c, int argc, char **argv, int first)
{
    for (int i = first; i < argc; i++) {
        cli_arg a;
        if (read_arg(c, argc, argv, &i, &a) == USP_OK && a.option && a.option->kind == CLI_LIST)
            ((cli_list *)a.option->target)->n = 0;
    }
}

usp_status cli_parse(const cli_command *c, int argc, char **argv, int first, int *done)
{
    *done = 0;
    const char *config = NULL;
    int print_config = 0;
    /* First the shape of the command line, --help, --config and --print-config; the file's values go
     * in before the command line's, so the command line wins wherever it names an option. */
    for (int i = first; i < argc; i++) {
        cli_arg a;
        USP_CHECK(read_arg(c, argc, argv, &i, &a));
        if (a.kind == ARG_HELP) {
            print_help(stdout, c);
            *done = 1;
            return USP_OK;
        }
        if (a.kind == ARG_CONFIG && config)
            return usp_error(USP_ERR_CONFIG, "--config %s after --config %s: one config file a run (the command "
                             "line overrides its options)", a.value, config);
        if (a.kind == ARG_CONFIG && !*a.value)
            return usp_error(USP_ERR_CONFIG, "--config: the value is empty; expected a JSON file of options");
        config = a.kind == ARG_CONFIG ? a.value : config;
        print_config |= a.kind == ARG_PRINT_CONFIG;
    }
    if (config) {
        USP_CHECK(cli_config_read(c, config));
        forget_listed_in_file(c, argc, argv, first);
    }
    for (int i = first; i < argc; i++) {
        cli_arg a;
        USP_CHECK(read_arg(c, argc, argv, &i, &a));
        if (a.option && a.option->kind == CLI_FLAG)
            *(int *)a.option->target = 1;
        else if (a.option)
            USP_CHECK(cli_set_text(c->name, a.option, a.value));
    }
    if (print_config) {
        USP_CHECK(cli_config_print(stdout, c));
        *done = 1;
    }
    return USP_OK;
}

int cli_fail(const char *command, usp_status status)
{
    cli_error(stderr, command, "%s\n", usp_error_message());
    return (int)status;
}
