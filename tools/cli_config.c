/* --config FILE and --print-config (cli_config.h): a command's option table read
 * from and written as a JSON object. Every value from a file passes the checks
 * the command line's does (tools/cli_value.h: bounds, empty strings, list lengths);
 * what is a file's own is the kinds: a CLI_INT option takes a JSON integer, a
 * CLI_DOUBLE any number, a CLI_FLAG true or false, a CLI_LIST a string or an
 * array of strings. */
#include "tools/cli_config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli_value.h"

/* The documents read: the options' strings point into them as the command line's point into argv,
 * and like argv they live as long as the process (held here, so LeakSanitizer sees them reachable). */
static json_t *documents_kept;

/* An option's key in a file: its name without the dashes ("--steps": "steps"). */
static const char *key_of(const cli_option *o)
{
    return o->name + strspn(o->name, "-");
}

/* "a string", "an array"...: what a value is, for a message. */
static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "a whole number";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a JSON value";
}

/* The error of a value of the wrong kind for option o: the value, what it is, and what would work. */
static usp_status wrong_kind(const cli_option *o, const json_t *v)
{
    char *shown = json_dumps(v, JSON_ENCODE_ANY);
    if (shown && strlen(shown) > 60)
        strcpy(shown + 57, "...");
    int example = 4; /* a whole number the option takes */
    if (o->min <= o->max && (example < o->min || example > o->max))
        example = (int)o->min;
    char expected[160];
    switch (o->kind) {
    case CLI_INT: snprintf(expected, sizeof expected, "a whole number, e.g. \"%s\": %d", key_of(o), example); break;
    case CLI_DOUBLE: snprintf(expected, sizeof expected, "a number, e.g. \"%s\": 0.001", key_of(o)); break;
    case CLI_STRING:
        snprintf(expected, sizeof expected, "a string, e.g. \"%s\": \"%s\"", key_of(o), o->metavar ? o->metavar : "");
        break;
    case CLI_FLAG: snprintf(expected, sizeof expected, "true or false, e.g. \"%s\": true", key_of(o)); break;
    case CLI_LIST:
        snprintf(expected, sizeof expected, "a string or an array of strings, e.g. \"%s\": [\"%s\"]", key_of(o),
                 o->metavar ? o->metavar : "");
        break;
    }
    usp_status s = usp_error(USP_ERR_CONFIG, "%s is %s; expected %s (or null: the default)", shown ? shown : "the value",
                             json_kind(v), expected);
    free(shown);
    return s;
}

/* --inject ["a", "b"] or "a": the file's items replace the list's. */
static usp_status set_list(const cli_command *c, const cli_option *o, const json_t *v)
{
    cli_list *list = o->target;
    if (json_is_string(v)) {
        list->n = 0;
        return cli_set_text(c->name, o, json_string_value(v));
    }
    size_t i;
    const json_t *item;
    json_array_foreach(v, i, item) {
        if (!json_is_string(item))
            return usp_error(USP_ERR_CONFIG, "item %zu is %s; expected an array of strings, e.g. \"%s\": [\"%s\"]",
                             i + 1, json_kind(item), key_of(o), o->metavar ? o->metavar : "");
    }
    list->n = 0;
    json_array_foreach(v, i, item)
        USP_CHECK(cli_set_text(c->name, o, json_string_value(item)));
    return USP_OK;
}

/* Sets option o from the file's value v (null: left at the command's default). */
static usp_status set_option(const cli_command *c, const cli_option *o, const json_t *v)
{
    if (json_is_null(v))
        return USP_OK;
    switch (o->kind) {
    case CLI_INT: {
        if (!json_is_integer(v))
            break;
        char text[32];
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return cli_set_int(o, json_integer_value(v), text);
    }
    case CLI_DOUBLE:
        if (!json_is_number(v))
            break;
        *(double *)o->target = json_number_value(v);
        return USP_OK;
    case CLI_STRING:
        if (!json_is_string(v))
            break;
        return cli_set_text(c->name, o, json_string_value(v));
    case CLI_FLAG:
        if (!json_is_boolean(v))
            break;
        *(int *)o->target = json_is_true(v);
        return USP_OK;
    case CLI_LIST:
        if (!json_is_string(v) && !json_is_array(v))
            break;
        return set_list(c, o, v);
    }
    return wrong_kind(o, v);
}

/* Sets the option a key of the file names; the error says why the key or its value does not do. */
static usp_status set_key(const cli_command *c, const char *key, const json_t *v)
{
    if (key[0] == '-')
        return usp_error(USP_ERR_CONFIG, "keys are the option names without their dashes: \"%s\"",
                         key + strspn(key, "-"));
    if (strcmp(key, "config") == 0)
        return usp_error(USP_ERR_CONFIG, "a config file does not name another (one file a run: put its options in "
                         "this one, or give them on the command line)");
    if (strcmp(key, "print-config") == 0)
        return usp_error(USP_ERR_CONFIG, "not an option of a file: give --print-config on the command line");
    const cli_option *o = c->options;
    while (o->name && strcmp(key_of(o), key) != 0)
        o++;
    if (!o->name) {
        char dashed[72];
        snprintf(dashed, sizeof dashed, "--%.64s", key);
        const char *meant = cli_closest_option(dashed, strlen(dashed), c->options);
        return usp_error(USP_ERR_CONFIG, "not an option of usp %s; %s%s%s(keys are the options of usp %s --help "
                         "without their dashes)", c->name, meant ? "did you mean \"" : "", meant ? meant + 2 : "",
                         meant ? "\"? " : "", c->name);
    }
    if (!o->target)
        return cli_refuse(o);
    return set_option(c, o, v);
}

/* The file's JSON document, or the error naming the file: unreadable, or not JSON (where jansson stopped). */
static usp_status load(const char *path, json_t **doc)
{
    *doc = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return usp_error(USP_ERR_CONFIG, "--config %s: cannot read it: %s", path, strerror(errno));
    json_error_t e;
    *doc = json_loadf(f, JSON_REJECT_DUPLICATES, &e);
    int read_failed = ferror(f), why = errno;
    fclose(f);
    if (read_failed) {
        json_decref(*doc);
        return usp_error(USP_ERR_CONFIG, "--config %s: cannot read it: %s", path, strerror(why));
    }
    if (!*doc)
        return usp_error(USP_ERR_CONFIG, "--config %s: not JSON at line %d, column %d: %s; expected an object of "
                         "options, e.g. {\"steps\": 400, \"save\": \"ckpt\"}", path, e.line, e.column, e.text);
    return USP_OK;
}

usp_status cli_config_read(const cli_command *c, const char *path)
{
    json_t *doc;
    USP_CHECK(load(path, &doc));
    if (!json_is_object(doc)) {
        usp_status s = usp_error(USP_ERR_CONFIG, "--config %s: %s, not an object; expected the options as one, e.g. "
                                 "{\"steps\": 400, \"save\": \"ckpt\"}", path, json_kind(doc));
        json_decref(doc);
        return s;
    }
    if (!documents_kept)
        documents_kept = json_array();
    if (!documents_kept || json_array_append_new(documents_kept, doc) != 0) /* appending takes doc either way */
        return usp_error(USP_ERR_RUNTIME, "out of memory reading --config %s", path);
    const char *key;
    const json_t *v;
    json_object_foreach(doc, key, v) {
        if (set_key(c, key, v) != USP_OK)
            return usp_error(USP_ERR_CONFIG, "--config %s: \"%s\": %s", path, key, usp_error_message());
    }
    return USP_OK;
}

/* The value of option o as JSON (null: an unset string, or an int outside its bounds: the command derives it). */
static usp_status option_json(const cli_option *o, json_t **out)
{
    *out = NULL;
    switch (o->kind) {
    case CLI_INT: {
        int v = *(const int *)o->target;
        *out = o->min > o->max || (v >= o->min && v <= o->max) ? json_integer(v) : json_null();
        break;
    }
    case CLI_DOUBLE: {
        double v = *(const double *)o->target;
        if (!isfinite(v))
            return usp_error(USP_ERR_CONFIG, "%s %g: --print-config writes JSON, which has no infinite or NaN "
                             "numbers; give a finite one", o->name, v);
        *out = json_real(v);
        break;
    }
    case CLI_STRING: {
        const char *v = *(const char *const *)o->target;
        *out = v ? json_string(v) : json_null();
        if (!*out)
            return usp_error(USP_ERR_CONFIG, "%s %s: not UTF-8 text, which JSON strings are: --print-config cannot "
                             "write it", o->name, v);
        break;
    }
    case CLI_FLAG: *out = json_boolean(*(const int *)o->target); break;
    case CLI_LIST: {
        const cli_list *list = o->target;
        *out = json_array();
        for (int i = 0; *out && i < list->n; i++)
            if (json_array_append_new(*out, json_string(list->items[i])) != 0) {
                json_decref(*out);
                return usp_error(USP_ERR_CONFIG, "%s %s: not UTF-8 text, which JSON strings are: --print-config "
                                 "cannot write it", o->name, list->items[i]);
            }
        break;
    }
    }
    return *out ? USP_OK : usp_error(USP_ERR_RUNTIME, "out of memory printing %s", o->name);
}

/* The fewest significant digits, 15 to 17, that give every number option back exactly: 0.01 prints as
 * 0.01, not as jansson's default 0.01000000000000000021 (17 digits always do). */
static int real_digits(const cli_option *options)
{
    int digits = 15;
    for (const cli_option *o = options; o->name; o++) {
        if (o->kind != CLI_DOUBLE || !o->target)
            continue;
        double v = *(const double *)o->target;
        char text[40];
        for (; digits < 17; digits++) {
            snprintf(text, sizeof text, "%.*g", digits, v);
            if (strtod(text, NULL) == v)
                break;
        }
    }
    return digits;
}

usp_status cli_config_print(FILE *out, const cli_command *c)
{
    json_t *doc = json_object();
    usp_status s = doc ? USP_OK : usp_error(USP_ERR_RUNTIME, "out of memory printing the options");
    for (const cli_option *o = c->options; s == USP_OK && o->name; o++) {
        json_t *v;
        if (!o->target) /* refused here: a file that names it is refused too */
            continue;
        s = option_json(o, &v);
        if (s == USP_OK && json_object_set_new(doc, key_of(o), v) != 0)
            s = usp_error(USP_ERR_RUNTIME, "out of memory printing %s", o->name);
    }
    char *text = NULL;
    if (s == USP_OK) {
        text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(real_digits(c->options)));
        s = text ? USP_OK : usp_error(USP_ERR_RUNTIME, "out of memory printing the options");
    }
    if (text)
        fprintf(out, "%s\n", text);
    free(text);
    json_decref(doc);
    return s;
}
