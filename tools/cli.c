/* Option parsing for the usp command. */
#include "tools/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/runtime/launcher_env.h"

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

/* Edits (insert, delete, replace one character) between a[0..n) and b: Levenshtein's distance, one row. */
static size_t edit_distance(const char *a, size_t n, const char *b)
{
    size_t m = strlen(b), row[64];
    if (n >= 63 || m >= 63)
        return (size_t)-1;
    for (size_t j = 0; j <= m; j++)
        row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t above = row[j], best = diagonal + (a[i - 1] != b[j - 1]);
            best = above + 1 < best ? above + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diagonal = above, row[j] = best;
        }
    }
    return row[m];
}

/* The option a mistyped name most likely meant (two edits at most), or NULL. */
static const char *closest_option(const char *name, size_t len, const cli_option *options)
{
    const char *best = NULL;
    size_t best_d = 3;
    for (const cli_option *o = options; o->name; o++) {
        if (!o->target) /* refused here: no use suggesting it */
            continue;
        size_t d = edit_distance(name, len, o->name);
        if (d < best_d)
            best = o->name, best_d = d;
    }
    return best;
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
        if (!o->name) {
            const char *meant = closest_option(arg, name_len, options);
            return usp_error(USP_ERR_CONFIG, "unknown option %s for `usp %s`; %s%s%ssee usp %s --help", arg, command,
                             meant ? "did you mean " : "", meant ? meant : "", meant ? "? " : "", command);
        }
        if (!o->target)
            return usp_error(USP_ERR_CONFIG, "%s %s", o->name, o->help);
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
        if (!o->target)
            continue;
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        fprintf(out, "  %-22s %s\n", left, o->help);
    }
    fprintf(out, "  %-22s %s\n", "-h, --help", "this help");
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

int cli_fail(const char *command, usp_status status)
{
    cli_error(stderr, command, "%s\n", usp_error_message());
    return (int)status;
}
