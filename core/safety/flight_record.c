/* Flight records as JSON, written and read (core/safety/flight_record.h). Every
 * field of a fingerprint is written, not just those that match a collective:
 * a record read back gives the same report as the recorder that wrote it. */
#include "core/safety/flight_record.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safety/flight_recorder.h"

static const char *const call_states[] = {"posted", "started", "completed", "dropped"};
static const char *const rank_states[] = {"running", "blocked", "exited", "crashed"};
_Static_assert(sizeof call_states / sizeof *call_states == USP_FLIGHT_CALL_STATE_COUNT, "a name per call state");
_Static_assert(sizeof rank_states / sizeof *rank_states == USP_FLIGHT_RANK_STATE_COUNT, "a name per rank state");

const char *usp_flight_call_state_name(usp_flight_call_state s)
{
    return (unsigned)s < USP_FLIGHT_CALL_STATE_COUNT ? call_states[s] : "?";
}

const char *usp_flight_rank_state_name(usp_flight_rank_state s)
{
    return (unsigned)s < USP_FLIGHT_RANK_STATE_COUNT ? rank_states[s] : "?";
}

/* --- writing ------------------------------------------------------------- */

/* -1 (not yet) is null: a time that never came is not a time. */
static json_t *time_of(double t) { return t < 0 ? json_null() : json_real(t); }

static json_t *fingerprint_json(const usp_comm_fingerprint *fp)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:I, s:I, s:s, s:i, s:i, s:i, s:i, s:i, s:{s:s, s:i}}",
                     "op", usp_comm_kind_name((usp_comm_kind)fp->op), "group", fp->group, "seq", (json_int_t)fp->seq,
                     "dtype", usp_dtype_name(fp->dtype), "count", (json_int_t)fp->count, "recv_count",
                     (json_int_t)fp->recv_count, "reduce", usp_reduce_op_name(fp->reduce), "root", fp->root, "peer",
                     fp->peer, "recv_peer", fp->recv_peer, "color", fp->color, "key", fp->key, "site", "file",
                     fp->site.file ? fp->site.file : "", "line", fp->site.line);
}

static json_t *entry_json(const usp_flight_entry *e)
{
    json_t *o = fingerprint_json(&e->call);
    if (o && json_object_update_new(o, json_pack("{s:I, s:I, s:s, s:o, s:o, s:o}", "id", (json_int_t)e->id,
                                                 "collective_seq", (json_int_t)e->collective_seq, "state",
                                                 usp_flight_call_state_name(e->state), "posted", time_of(e->posted),
                                                 "started", time_of(e->started), "completed",
                                                 time_of(e->completed))) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The injected-fault lines as an array of strings, without their indent and newline. */
static json_t *injected_json(const char *lines)
{
    json_t *a = json_array();
    while (a && lines && *lines) {
        lines += strspn(lines, " ");
        size_t n = strcspn(lines, "\n");
        if (n && json_array_append_new(a, json_stringn(lines, n)) != 0) {
            json_decref(a);
            return NULL;
        }
        lines += n + (lines[n] == '\n');
    }
    return a;
}

static json_t *record_json(const usp_flight_record *rec, const char *reason)
{
    json_t *groups = json_array(), *entries = json_array();
    for (int g = 0; groups && g < rec->n_groups; g++) {
        const usp_flight_group *gr = &rec->groups[g];
        json_t *members = json_array();
        for (int k = 0; members && k < gr->size; k++)
            json_array_append_new(members, json_integer(gr->members[k]));
        json_array_append_new(groups, json_pack("{s:s, s:o, s:i, s:I, s:I}", "name", gr->name, "members", members,
                                                "my_index", gr->my_index, "calls_issued",
                                                (json_int_t)gr->calls_issued, "collectives_issued",
                                                (json_int_t)gr->collectives_issued));
    }
    for (size_t i = 0; entries && i < rec->n_entries; i++)
        json_array_append_new(entries, entry_json(&rec->entries[i]));
    json_t *crash = rec->state == USP_FLIGHT_CRASHED
                        ? json_pack("{s:I, s:o}", "call", (json_int_t)rec->crash_call, "at",
                                    fingerprint_json(&rec->crash_at))
                        : json_null();
    return json_pack("{s:s, s:i, s:i, s:i, s:s, s:s, s:i, s:s, s:s, s:f, s:I, s:b, s:o, s:o, s:o, s:I, s:o, s:o}",
                     "format", USP_FLIGHT_FORMAT_NAME, "version", USP_FLIGHT_FORMAT_VERSION, "world_rank",
                     rec->world_rank, "world_size", rec->world_size, "reason", reason ? reason : rec->reason ? rec->reason : "",
                     "state", usp_flight_rank_state_name(rec->state), "result", (int)rec->result, "result_name",
                     usp_status_name(rec->result), "error", rec->error ? rec->error : "", "clock", rec->clock,
                     "calls", (json_int_t)rec->calls, "starts", rec->starts, "current",
                     rec->has_current ? entry_json(&rec->current) : json_null(), "crash", crash, "groups", groups,
                     "entries_lost", (json_int_t)rec->entries_lost, "entries", entries, "injected",
                     injected_json(rec->injected));
}

usp_status usp_flight_record_to_json(const usp_flight_record *rec, const char *reason, char **json)
{
    json_t *root = record_json(rec, reason); /* json_pack fails whole when any part (an "o" NULL) failed */
    *json = root ? json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!*json)
        return usp_error(USP_ERR_RUNTIME, "out of memory writing the flight record of rank %d", rec->world_rank);
    return USP_OK;
}

/* --- reading ------------------------------------------------------------- */

/* Where a field is: messages read "<file>: field '<prefix><key>': ...". */
typedef struct at {
    const char *where, *prefix;
} at;

static const char *kind_of(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "a whole number";
    case JSON_REAL: return "a number with a fraction";
    case JSON_NULL: return "null";
    default: return "true or false";
    }
}

/* The field `key` of `obj`, of JSON type `type` (or null when `nullable`); *v NULL when it is null. */
static usp_status field(const json_t *obj, at a, const char *key, json_type type, int nullable, const char *what,
                        json_t **v)
{
    *v = json_object_get(obj, key);
    if (!*v)
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is missing (%s); not a whole usp flight record", a.where,
                         a.prefix, key, what);
    if (nullable && json_is_null(*v)) {
        *v = NULL;
        return USP_OK;
    }
    int ok = json_typeof(*v) == type || (type == JSON_REAL && json_is_integer(*v));
    if (!ok)
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is %s; expected %s", a.where, a.prefix, key,
                         kind_of(*v), what);
    return USP_OK;
}

/* Every reader below writes its output on every path (0, "" or -1 when it fails), so that a caller's
 * variable is defined whatever the compiler can prove about usp_error's return value. */
static usp_status read_int(const json_t *obj, at a, const char *key, long long lo, long long hi, long long *out)
{
    json_t *v;
    char what[96];
    *out = 0;
    snprintf(what, sizeof what, "a whole number from %lld to %lld", lo, hi);
    USP_CHECK(field(obj, a, key, JSON_INTEGER, 0, what, &v));
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is %lld; expected %s", a.where, a.prefix, key, x, what);
    *out = x;
    return USP_OK;
}

#define COUNT_MAX ((long long)1 << 62)

static usp_status read_u64(const json_t *obj, at a, const char *key, uint64_t *out)
{
    long long x;
    USP_CHECK(read_int(obj, a, key, 0, COUNT_MAX, &x));
    *out = (uint64_t)x;
    return USP_OK;
}

static usp_status read_i32(const json_t *obj, at a, const char *key, int lo, int hi, int *out)
{
    long long x;
    USP_CHECK(read_int(obj, a, key, lo, hi, &x));
    *out = (int)x;
    return USP_OK;
}

/* A time or null (-1). */
static usp_status read_time(const json_t *obj, at a, const char *key, double *out)
{
    json_t *v;
    USP_CHECK(field(obj, a, key, JSON_REAL, 1, "seconds (a number) or null", &v));
    *out = v ? json_number_value(v) : -1.0;
    if (v && !(*out >= 0 && *out < 1e12))
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is %g; expected seconds from 0 to 1e12", a.where,
                         a.prefix, key, *out);
    return USP_OK;
}

static usp_status read_string(const json_t *obj, at a, const char *key, const char **out)
{
    json_t *v;
    *out = "";
    USP_CHECK(field(obj, a, key, JSON_STRING, 0, "a string", &v));
    *out = json_string_value(v);
    return USP_OK;
}

static usp_status read_copy(const json_t *obj, at a, const char *key, char **out)
{
    const char *s;
    *out = NULL;
    USP_CHECK(read_string(obj, a, key, &s));
    *out = strdup(s);
    return *out ? USP_OK : usp_error(USP_ERR_RUNTIME, "%s: out of memory reading field '%s%s'", a.where, a.prefix, key);
}

/* A string field that must be one of `names[0..n)` ("?" entries skipped); *out its index. */
static usp_status read_name(const json_t *obj, at a, const char *key, const char *(*name_of)(int), int n, int *out)
{
    const char *s;
    *out = -1;
    USP_CHECK(read_string(obj, a, key, &s));
    char known[256] = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(s, name_of(i)) == 0) {
            *out = i;
            return USP_OK;
        }
        size_t at_len = strlen(known);
        snprintf(known + at_len, sizeof known - at_len, "%s%s", i ? ", " : "", name_of(i));
    }
    return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is \"%s\"; expected one of %s", a.where, a.prefix, key, s,
                     known);
}

static const char *op_name(int i) { return usp_comm_kind_name((usp_comm_kind)i); }
static const char *dtype_name(int i) { return usp_dtype_name((usp_dtype)i); }
static const char *reduce_name(int i) { return usp_reduce_op_name((usp_reduce_op)i); }
static const char *call_state_name(int i) { return usp_flight_call_state_name((usp_flight_call_state)i); }
static const char *rank_state_name(int i) { return usp_flight_rank_state_name((usp_flight_rank_state)i); }

/* Keeps a copy of `s` for the record's lifetime (call-site files). */
static usp_status keep_string(usp_flight_record *rec, const char *s, const char **out)
{
    char **grown = realloc(rec->strings, (rec->n_strings + 1) * sizeof *grown);
    char *copy = strdup(s);
    if (grown)
        rec->strings = grown;
    if (!grown || !copy) {
        free(copy);
        return usp_error(USP_ERR_RUNTIME, "out of memory reading a flight record");
    }
    rec->strings[rec->n_strings++] = copy;
    *out = copy;
    return USP_OK;
}

static usp_status read_fingerprint(usp_flight_record *rec, const json_t *o, at a, usp_comm_fingerprint *fp)
{
    int op, dtype, reduce;
    long long count, recv_count;
    const char *group, *file;
    json_t *site;
    *fp = (usp_comm_fingerprint){.op = -1};
    USP_CHECK(read_name(o, a, "op", op_name, USP_OP_COUNT, &op));
    USP_CHECK(read_string(o, a, "group", &group));
    if (!*group || strlen(group) >= sizeof fp->group)
        return usp_error(USP_ERR_CONFIG, "%s: field '%sgroup' is \"%.80s\"; expected a group name of 1 to %d "
                         "characters", a.where, a.prefix, group, (int)sizeof fp->group - 1);
    USP_CHECK(read_u64(o, a, "seq", &fp->seq));
    USP_CHECK(read_name(o, a, "dtype", dtype_name, USP_DTYPE_COUNT, &dtype));
    USP_CHECK(read_int(o, a, "count", 0, COUNT_MAX, &count));
    USP_CHECK(read_int(o, a, "recv_count", 0, COUNT_MAX, &recv_count));
    USP_CHECK(read_name(o, a, "reduce", reduce_name, USP_REDUCE_MAX + 1, &reduce));
    USP_CHECK(read_i32(o, a, "root", -1, 1 << 30, &fp->root));
    USP_CHECK(read_i32(o, a, "peer", -1, 1 << 30, &fp->peer));
    USP_CHECK(read_i32(o, a, "recv_peer", -1, 1 << 30, &fp->recv_peer));
    USP_CHECK(read_i32(o, a, "color", -(1 << 30), 1 << 30, &fp->color));
    USP_CHECK(read_i32(o, a, "key", -(1 << 30), 1 << 30, &fp->key));
    USP_CHECK(field(o, a, "site", JSON_OBJECT, 0, "an object {\"file\", \"line\"}", &site));
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%ssite.", a.prefix);
    at sa = {a.where, prefix};
    USP_CHECK(read_string(site, sa, "file", &file));
    USP_CHECK(read_i32(site, sa, "line", 0, 1 << 30, &fp->site.line));
    USP_CHECK(keep_string(rec, file, &fp->site.file));
    fp->op = op, fp->dtype = (usp_dtype)dtype, fp->reduce = (usp_reduce_op)reduce;
    fp->count = (size_t)count, fp->recv_count = (size_t)recv_count;
    memcpy(fp->group, group, strlen(group) + 1);
    return USP_OK;
}

static usp_status read_entry(usp_flight_record *rec, const json_t *o, at a, usp_flight_entry *e)
{
    int state;
    if (!json_is_object(o))
        return usp_error(USP_ERR_CONFIG, "%s: field '%s' is %s; expected an object (a call)", a.where, a.prefix,
                         kind_of(o));
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s.", a.prefix);
    at ea = {a.where, prefix};
    USP_CHECK(read_fingerprint(rec, o, ea, &e->call));
    USP_CHECK(read_u64(o, ea, "id", &e->id));
    USP_CHECK(read_u64(o, ea, "collective_seq", &e->collective_seq));
    USP_CHECK(read_name(o, ea, "state", call_state_name, USP_FLIGHT_CALL_STATE_COUNT, &state));
    e->state = (usp_flight_call_state)state;
    USP_CHECK(read_time(o, ea, "posted", &e->posted));
    USP_CHECK(read_time(o, ea, "started", &e->started));
    return read_time(o, ea, "completed", &e->completed);
}

static usp_status read_group(const json_t *o, at a, int world_size, usp_flight_group *g)
{
    json_t *members;
    const char *name;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.", a.prefix);
    at ga = {a.where, prefix};
    if (!json_is_object(o))
        return usp_error(USP_ERR_CONFIG, "%s: field '%s' is %s; expected an object (a group)", a.where, a.prefix,
                         kind_of(o));
    USP_CHECK(read_string(o, ga, "name", &name));
    if (!*name || strlen(name) >= sizeof g->name)
        return usp_error(USP_ERR_CONFIG, "%s: field '%sname' is \"%.80s\"; expected 1 to %d characters", a.where,
                         prefix, name, (int)sizeof g->name - 1);
    memcpy(g->name, name, strlen(name) + 1);
    USP_CHECK(field(o, ga, "members", JSON_ARRAY, 0, "an array of world ranks", &members));
    size_t n = json_array_size(members);
    if (n < 1 || n > (size_t)world_size)
        return usp_error(USP_ERR_CONFIG, "%s: field '%smembers' has %zu ranks; expected 1 to world_size (%d)",
                         a.where, prefix, n, world_size);
    USP_CHECK(usp_calloc((void **)&g->members, n, sizeof *g->members, "a flight record's group"));
    g->size = (int)n;
    for (size_t k = 0; k < n; k++) {
        json_t *m = json_array_get(members, k);
        if (!json_is_integer(m) || json_integer_value(m) < 0 || json_integer_value(m) >= world_size)
            return usp_error(USP_ERR_CONFIG, "%s: field '%smembers[%zu]' is not a world rank from 0 to %d", a.where,
                             prefix, k, world_size - 1);
        g->members[k] = (int)json_integer_value(m);
    }
    USP_CHECK(read_i32(o, ga, "my_index", 0, g->size - 1, &g->my_index));
    USP_CHECK(read_u64(o, ga, "calls_issued", &g->calls_issued));
    return read_u64(o, ga, "collectives_issued", &g->collectives_issued);
}

/* The lines of the "injected" array, each indented and ended as the reports print them. */
static usp_status read_injected(const json_t *root, at a, usp_flight_record *rec)
{
    json_t *lines;
    USP_CHECK(field(root, a, "injected", JSON_ARRAY, 0, "an array of strings", &lines));
    usp_strbuf b = {0};
    for (size_t i = 0; i < json_array_size(lines); i++) {
        json_t *line = json_array_get(lines, i);
        if (!json_is_string(line)) {
            usp_strbuf_free(&b);
            return usp_error(USP_ERR_CONFIG, "%s: field 'injected[%zu]' is %s; expected a string", a.where, i,
                             kind_of(line));
        }
        usp_strbuf_printf(&b, "  %s\n", json_string_value(line));
    }
    rec->injected = strdup(usp_strbuf_text(&b));
    int failed = b.failed;
    usp_strbuf_free(&b);
    return rec->injected && !failed ? USP_OK : usp_error(USP_ERR_RUNTIME, "%s: out of memory", a.where);
}

static usp_status read_arrays(const json_t *root, at a, usp_flight_record *rec)
{
    json_t *groups, *entries;
    USP_CHECK(field(root, a, "groups", JSON_ARRAY, 0, "an array of groups", &groups));
    size_t ng = json_array_size(groups);
    if (ng > 4096)
        return usp_error(USP_ERR_CONFIG, "%s: field 'groups' has %zu groups; expected at most 4096", a.where, ng);
    USP_CHECK(usp_calloc((void **)&rec->groups, ng ? ng : 1, sizeof *rec->groups, "a flight record's groups"));
    for (size_t g = 0; g < ng; g++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "groups[%zu]", g);
        rec->n_groups = (int)g + 1; /* freed whole even when this one fails */
        USP_CHECK(read_group(json_array_get(groups, g), (at){a.where, prefix}, rec->world_size, &rec->groups[g]));
        for (size_t h = 0; h < g; h++)
            if (strcmp(rec->groups[h].name, rec->groups[g].name) == 0)
                return usp_error(USP_ERR_CONFIG, "%s: field '%s.name': group %s is listed twice", a.where, prefix,
                                 rec->groups[g].name);
    }
    USP_CHECK(field(root, a, "entries", JSON_ARRAY, 0, "an array of calls", &entries));
    size_t ne = json_array_size(entries);
    USP_CHECK(usp_calloc((void **)&rec->entries, ne ? ne : 1, sizeof *rec->entries, "a flight record's calls"));
    for (size_t i = 0; i < ne; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "entries[%zu]", i);
        USP_CHECK(read_entry(rec, json_array_get(entries, i), (at){a.where, prefix}, &rec->entries[i]));
        rec->n_entries = i + 1;
    }
    return USP_OK;
}

static usp_status read_record(const json_t *root, const char *where, usp_flight_record *rec)
{
    at a = {where, ""};
    const char *format;
    long long version;
    int state;
    json_t *current, *crash;
    if (!json_is_object(root))
        return usp_error(USP_ERR_CONFIG, "%s: the JSON is %s; a usp flight record is an object", where, kind_of(root));
    if (read_string(root, a, "format", &format) != USP_OK || strcmp(format, USP_FLIGHT_FORMAT_NAME) != 0)
        return usp_error(USP_ERR_CONFIG, "%s: field 'format' is not \"%s\": not a usp flight record", where,
                         USP_FLIGHT_FORMAT_NAME);
    USP_CHECK(read_int(root, a, "version", USP_FLIGHT_FORMAT_VERSION, USP_FLIGHT_FORMAT_VERSION, &version));
    USP_CHECK(read_i32(root, a, "world_size", 1, 1 << 20, &rec->world_size));
    USP_CHECK(read_i32(root, a, "world_rank", 0, rec->world_size - 1, &rec->world_rank));
    USP_CHECK(read_copy(root, a, "reason", &rec->reason));
    USP_CHECK(read_name(root, a, "state", rank_state_name, USP_FLIGHT_RANK_STATE_COUNT, &state));
    rec->state = (usp_flight_rank_state)state;
    USP_CHECK(read_i32(root, a, "result", USP_OK, USP_ERR_RANK_FAILED, &state));
    rec->result = (usp_status)state;
    USP_CHECK(read_copy(root, a, "error", &rec->error));
    USP_CHECK(read_time(root, a, "clock", &rec->clock));
    if (rec->clock < 0)
        return usp_error(USP_ERR_CONFIG, "%s: field 'clock' is null; expected seconds", where);
    USP_CHECK(read_u64(root, a, "calls", &rec->calls));
    rec->starts = json_is_true(json_object_get(root, "starts")); /* absent in older records: starts unknown */
    USP_CHECK(field(root, a, "current", JSON_OBJECT, 1, "the call the rank is in (an object) or null", &current));
    if (current) {
        USP_CHECK(read_entry(rec, current, (at){where, "current"}, &rec->current));
        rec->has_current = 1;
    }
    if (rec->state == USP_FLIGHT_BLOCKED && !rec->has_current)
        return usp_error(USP_ERR_CONFIG, "%s: field 'current' is null, but field 'state' says the rank is blocked "
                         "in a call", where);
    rec->crash_at.op = -1;
    USP_CHECK(field(root, a, "crash", JSON_OBJECT, 1, "the crash (an object) or null", &crash));
    if (rec->state == USP_FLIGHT_CRASHED && !crash)
        return usp_error(USP_ERR_CONFIG, "%s: field 'crash' is null, but field 'state' says the rank crashed", where);
    if (crash) {
        json_t *crash_at;
        USP_CHECK(read_u64(crash, (at){where, "crash."}, "call", &rec->crash_call));
        USP_CHECK(field(crash, (at){where, "crash."}, "at", JSON_OBJECT, 0, "a call (an object)", &crash_at));
        USP_CHECK(read_fingerprint(rec, crash_at, (at){where, "crash.at."}, &rec->crash_at));
    }
    USP_CHECK(read_u64(root, a, "entries_lost", &rec->entries_lost));
    USP_CHECK(read_arrays(root, a, rec));
    return read_injected(root, a, rec);
}

usp_status usp_flight_record_parse(const char *json, const char *where, usp_flight_record *out)
{
    *out = (usp_flight_record){.crash_at.op = -1, .current.call.op = -1};
    json_error_t err;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return usp_error(USP_ERR_CONFIG, "%s: not a whole JSON flight record: %s (line %d, column %d); a dump cut "
                         "short, or another file", where, err.text, err.line, err.column);
    usp_status s = read_record(root, where, out);
    json_decref(root);
    return s;
}

usp_status usp_flight_record_load(const char *path, usp_flight_record *out)
{
    *out = (usp_flight_record){.crash_at.op = -1, .current.call.op = -1};
    FILE *f = fopen(path, "rb");
    if (!f)
        return usp_error(USP_ERR_CONFIG, "%s: cannot read it (%s)", path, strerror(errno));
    size_t len = 0, cap = 1 << 16, n;
    char *text = malloc(cap);
    while (text && (n = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (len + 1 == cap && cap < ((size_t)1 << 30)) { /* a record is kilobytes: 1 GiB is another file */
            char *grown = realloc(text, 2 * cap);
            if (!grown)
                free(text);
            text = grown, cap *= 2;
        } else if (len + 1 == cap) {
            break;
        }
    }
    int bad = !text || ferror(f);
    fclose(f);
    usp_status s;
    if (bad)
        s = usp_error(USP_ERR_RUNTIME, "%s: could not read it whole", path);
    else if ((text[len] = '\0', strlen(text) != len))
        s = usp_error(USP_ERR_CONFIG, "%s: holds a NUL byte: not a JSON flight record", path);
    else
        s = usp_flight_record_parse(text, path, out);
    free(text);
    return s;
}

void usp_flight_record_free(usp_flight_record *rec)
{
    for (int g = 0; rec->groups && g < rec->n_groups; g++)
        free(rec->groups[g].members);
    for (size_t i = 0; i < rec->n_strings; i++)
        free(rec->strings[i]);
    free(rec->groups), free(rec->entries), free(rec->strings);
    free(rec->reason), free(rec->error), free(rec->injected);
    *rec = (usp_flight_record){.crash_at.op = -1, .current.call.op = -1};
}
