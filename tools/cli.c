/* Option parsing for the usp command. */
#include "tools/cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static usp_status parse_int(const char *command, const cli_option *o, const char *text)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno == ERANGE)
        return usp_error(USP_ERR_CONFIG, "%s %s: not a whole number; expected e.g. %s 4 (see usp %s --help)",
                         o->name, text, o->name, command);
    if (o->min <= o->max && (v < o->min || v > o->max))
        return usp_error(USP_ERR_CONFIG, "%s %s: out of range; expected %lld to %lld", o->name, text, o->min,
                         o->max);
    *(int *)o->target = (int)v;
    return USP_OK;
}

static usp_status parse_double(const char *command, const cli_option *o, const char *text)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno == ERANGE)
        return usp_error(USP_ERR_CONFIG, "%s %s: not a number; expected e.g. %s 0.001 (see usp %s --help)",
                         o->name, text, o->name, command);
    *(double *)o->target = v;
    return USP_OK;
}

static usp_status set_value(const char *command, const cli_option *o, const char *value)
{
    switch (o->kind) {
    case CLI_INT: return parse_int(command, o, value);
    case CLI_DOUBLE: return parse_double(command, o, value);
    case CLI_STRING:
        if (!*value)
            return usp_error(USP_ERR_CONFIG, "%s: the value is empty", o->name);
        *(const char **)o->target = value;
        return USP_OK;
    case CLI_LIST: {
        cli_list *list = o->target;
        if (list->n == CLI_LIST_MAX)
            return usp_error(USP_ERR_CONFIG, "%s: at most %d times", o->name, CLI_LIST_MAX);
        list->items[list->n++] = value;
        return USP_OK;
    }
    case CLI_FLAG: break;
    }
    return USP_OK;
}

usp_status cli_parse(const char *command, int argc, char **argv, int first, const cli_option *options,
                     int *help)
{
    *help = 0;
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            *help = 1;
            return USP_OK;
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const cli_option *o = options;
        while (o->name && (strlen(o->name) != name_len || strncmp(o->name, arg, name_len) != 0))
            o++;
        if (!o->name)
            return usp_error(USP_ERR_CONFIG, "unknown option %s for `usp %s`; see usp %s --help", arg, command,
                             command);
        if (o->kind == CLI_FLAG) {
            if (eq)
                return usp_error(USP_ERR_CONFIG, "%s takes no value", o->name);
            *(int *)o->target = 1;
            continue;
        }
        const char *value = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!value)
            return usp_error(USP_ERR_CONFIG, "%s needs a value (%s %s)", o->name, o->name,
                             o->metavar ? o->metavar : "VALUE");
        USP_CHECK(set_value(command, o, value));
    }
    return USP_OK;
}

void cli_print_help(FILE *out, const char *usage, const char *about, const cli_option *options)
{
    fprintf(out, "usage: %s\n\n%s\n\noptions:\n", usage, about);
    for (const cli_option *o = options; o->name; o++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        fprintf(out, "  %-22s %s\n", left, o->help);
    }
    fprintf(out, "  %-22s %s\n", "-h, --help", "this help");
}

int cli_fail(const char *command, usp_status status)
{
    fprintf(stderr, "usp %s: %s\n", command, usp_error_message());
    return (int)status;
}
