/* JSON field readers shared by the topology and GPU files (see json_fields.h). */
#include "sim/json_fields.h"

#include <stdio.h>
#include <string.h>

const char *sim_json_kind(const json_t *v)
{
    return json_is_string(v) ? "a string" : json_is_object(v) ? "an object" : json_is_array(v) ? "an array"
           : json_is_number(v) ? "a number" : "true, false or null";
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

/* A number in (lo, hi] ([lo, hi] when lo_ok; hi < 0: unbounded); absent: *out keeps its default. */
usp_status sim_json_number(const json_t *obj, sim_json_at at, const char *key, int required, double lo, int lo_ok,
                              double hi, const char *hint, double *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v && !required)
        return USP_OK;
    if (!v)
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is missing (%s)", at.where, at.prefix, key, hint);
    if (!json_is_number(v))
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' must be a number (%s), not %s", at.where, at.prefix,
                         key, hint, sim_json_kind(v));
    double x = json_number_value(v);
    if (x < lo || (x == lo && !lo_ok) || (hi >= 0 && x > hi)) {
        char upper[64] = "";
        if (hi >= 0)
            snprintf(upper, sizeof upper, " and at most %g", hi);
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' is %g: it must be %s %g%s (%s)", at.where, at.prefix,
                         key, x, lo_ok ? "at least" : "above", lo, upper, hint);
    }
    *out = x;
    return USP_OK;
}
