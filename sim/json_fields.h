/* Reading fields of the JSON files the simulator accepts (topologies, GPUs),
 * with messages that name the file and the field path and say what would work. */
#ifndef USP_SIM_JSON_FIELDS_H
#define USP_SIM_JSON_FIELDS_H

#include <jansson.h>

#include "core/status.h"

/* Messages read "<where>: field '<prefix><key>' ...", e.g. "topology file x.json: field 'gpu.hbm_tbs' ...". */
typedef struct sim_json_at {
    const char *where, *prefix;
} sim_json_at;

/* "a string", "an object", ... for messages. */
const char *sim_json_kind(const json_t *v);

/* Errors on a key of `obj` that is not in `known` (NULL-terminated), naming the known ones. */
usp_status sim_json_check_keys(const json_t *obj, sim_json_at at, const char *const *known);

/* A number field in (lo, hi] ([lo, hi] when lo_ok; hi < 0: unbounded); absent and
 * not required: *out keeps its default. `hint` says what the field means. */
usp_status sim_json_number(const json_t *obj, sim_json_at at, const char *key, int required, double lo, int lo_ok,
                           double hi, const char *hint, double *out);

#endif
