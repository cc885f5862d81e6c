/* The checks an option's value passes (cli_value.h). */
#include "tools/cli_value.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

usp_status cli_set_int(const cli_option *o, long long v, const char *text)
{
    long long min = o->min <= o->max ? o->min : INT_MIN, max = o->min <= o->max ? o->max : INT_MAX;
    if (v < min || v > max || v < INT_MIN || v > INT_MAX) /* the target is an int whatever the bounds say */
        return usp_error(USP_ERR_CONFIG, "%s %s: out of range; expected %lld to %lld", o->name, text,
                         min > INT_MIN ? min : INT_MIN, max < INT_MAX ? max : INT_MAX);
    *(int *)o->target = (int)v;
    return USP_OK;
}

static usp_status parse_int(const char *command, const cli_option *o, const char *text)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno == ERANGE)
        return usp_error(USP_ERR_CONFIG, "%s %s: not a whole number; expected e.g. %s 4 (see usp %s --help)",
                         o->name, text, o->name, command);
    return cli_set_int(o, v, text);
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

usp_status cli_set_text(const char *command, const cli_option *o, const char *text)
{
    switch (o->kind) {
    case CLI_INT: return parse_int(command, o, text);
    case CLI_DOUBLE: return parse_double(command, o, text);
    case CLI_STRING:
        if (!*text)
            return usp_error(USP_ERR_CONFIG, "%s: the value is empty", o->name);
        *(const char **)o->target = text;
        return USP_OK;
    case CLI_LIST: {
        cli_list *list = o->target;
        if (list->n == CLI_LIST_MAX)
            return usp_error(USP_ERR_CONFIG, "%s: at most %d times", o->name, CLI_LIST_MAX);
        list->items[list->n++] = text;
        return USP_OK;
    }
    case CLI_FLAG: break;
    }
    return USP_OK;
}

usp_status cli_refuse(const cli_option *o)
{
    return usp_error(USP_ERR_CONFIG, "%s %s", o->name, o->help);
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

const char *cli_closest_option(const char *name, size_t len, const cli_option *options)
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
