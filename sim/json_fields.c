/* JSON field readers and physical ranges shared by the topology and GPU files (see json_fields.h). */
#include "sim/json_fields.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const char *sim_json_kind(const json_t *v)
{
    return json_is_string(v) ? "a string" : json_is_object(v) ? "an object" : json_is_array(v) ? "an array"
           : json_is_number(v) ? "a number" : "true, false or null";
}

usp_status sim_json_load_file(const char *path, const char *where, json_t **out)
{
    json_error_t err;
    *out = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (*out)
        return USP_OK;
    const char *why = json_error_code(&err) == json_error_duplicate_key
                          ? ": a key may appear once in an object (which of its values was meant?)" : "";
    if (err.line < 1) /* the file could not be read: no position to give */
        return usp_error(USP_ERR_CONFIG, "%s: %s", where, err.text);
    return usp_error(USP_ERR_CONFIG, "%s: %s (line %d, column %d)%s", where, err.text, err.line, err.column, why);
}

/* Unknown keys are typos more often than extensions: name them and the known ones. */
usp_status sim_json_check_keys(const json_t *obj, sim_json_at at, const char *const *known)
{
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = strcmp(known[i], key) == 0;
        if (ok)
            continue;
        char list[256] = "";
        for (int i = 0; known[i]; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", known[i]);
        return usp_error(USP_ERR_CONFIG, "%s: unknown field '%s%s' (known here: %s)", at.where, at.prefix, key,
                         list);
    }
    return USP_OK;
}

/* x, in the file's unit, lies in [f->lo, f->hi] and is 0 or a normal double. */
static usp_status check_in_range(sim_json_at at, const sim_json_range *f, double x)
{
    int normal = isfinite(x) && (x == 0 || fabs(x) >= DBL_MIN);
    if (normal && x >= f->lo && x <= f->hi)
        return USP_OK;
    return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is %g: it must be at least %g and at most %g (%s)%s",
                     at.where, at.prefix, f->key, x, f->lo, f->hi, f->hint,
                     isfinite(x) && !normal ? "; it is subnormal, too small to compute with" : "");
}

usp_status sim_json_number(const json_t *obj, sim_json_at at, const sim_json_range *f, int required, double *si)
{
    const json_t *v = json_object_get(obj, f->key);
    if (!v && !required)
        return USP_OK;
    if (!v)
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is missing (%s)", at.where, at.prefix, f->key, f->hint);
    if (!json_is_number(v))
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' must be a number (%s), not %s", at.where, at.prefix,
                         f->key, f->hint, sim_json_kind(v));
    double x = json_number_value(v);
    USP_CHECK(check_in_range(at, f, x));
    *si = x * f->unit;
    return USP_OK;
}

usp_status sim_json_check_number(sim_json_at at, const sim_json_range *f, double si)
{
    /* Divided by a large unit, a subnormal SI value would read as 0 in the message: name it as it is. */
    if (isfinite(si) && si != 0 && fabs(si) < DBL_MIN)
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is subnormal (%g in SI units), too small to compute with: "
                         "it must be at least %g and at most %g (%s)", at.where, at.prefix, f->key, si, f->lo, f->hi,
                         f->hint);
    return check_in_range(at, f, si / f->unit);
}

usp_status sim_json_check_int(sim_json_at at, const char *key, long long value, int lo, int hi, const char *hint)
{
    if (value >= lo && value <= hi)
        return USP_OK;
    return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is %lld: it must be between %d and %d (%s)", at.where,
                     at.prefix, key, value, lo, hi, hint);
}

usp_status sim_json_cache_state(const json_t *obj, sim_json_at at, int *hot)
{
    const json_t *cache = json_object_get(obj, "cache");
    const char *name = json_string_value(cache);
    if (cache && (!name || (strcmp(name, "cold") != 0 && strcmp(name, "hot") != 0)))
        return usp_error(USP_ERR_CONFIG, "%s: field '%scache' must be \"cold\" (after a flush) or \"hot\" (measured "
                         "again at once; absent: cold), not %s", at.where, at.prefix, name ? name : sim_json_kind(cache));
    *hot = name && strcmp(name, "hot") == 0;
    return USP_OK;
}

usp_status sim_json_int(const json_t *obj, sim_json_at at, const char *key, int required, int lo, int hi,
                        const char *hint, int *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v && !required)
        return USP_OK;
    if (!v)
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is missing (%s)", at.where, at.prefix, key, hint);
    if (!json_is_integer(v))
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' must be a whole number (%s), not %s", at.where,
                         at.prefix, key, hint, sim_json_kind(v));
    USP_CHECK(sim_json_check_int(at, key, json_integer_value(v), lo, hi, hint));
    *out = (int)json_integer_value(v);
    return USP_OK;
}
