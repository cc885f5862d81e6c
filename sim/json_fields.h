/* The fields of the JSON files the simulator accepts (topologies, GPUs): reading
 * them, and the physical range each number must lie in, with messages that name
 * the file, the field path, the value and the range that would work.
 *
 * The same ranges check topologies and GPUs built in code (sim_topology_check),
 * so a preset and a file obey one set of rules. */
#ifndef USP_SIM_JSON_FIELDS_H
#define USP_SIM_JSON_FIELDS_H

#include <jansson.h>

#include "core/base/status.h"

/* Messages read "<where>: field '<prefix><key>' ...", e.g. "topology file x.json: field 'gpu.hbm_tbs' ...". */
typedef struct sim_json_at {
    const char *where, *prefix;
} sim_json_at;

/* A number field and its physical range. Every range is closed and finite: a
 * bound at infinity, or a positive field allowed down to 0+, lets a subnormal
 * or absurd value through, and the model then divides by it (5e-324 GB/s made
 * one transfer take longer than a double can count, and the planner spin). */
typedef struct sim_json_range {
    const char *key;  /* as in the file, its unit in the name: "bandwidth_gbs" */
    double lo, hi;    /* the range, [lo, hi], in the file's unit */
    double unit;      /* the SI value of one file unit: 1e9 for GB/s, 1e-6 for us */
    const char *hint; /* what the field means, for messages */
} sim_json_range;

/* "a string", "an object", ... for messages. */
const char *sim_json_kind(const json_t *v);

/* Reads the JSON file `path` into *out, refusing an object with a key given
 * twice (which value was meant is a guess; the parser names the key). Errors
 * read "<where>: <what the parser says> (line L, column C)". */
usp_status sim_json_load_file(const char *path, const char *where, json_t **out);

/* Errors on a key of `obj` that is not in `known` (NULL-terminated), naming the known ones. */
usp_status sim_json_check_keys(const json_t *obj, sim_json_at at, const char *const *known);

/* The number field f->key of `obj`, within f's range, into *si in SI units
 * (value x f->unit); absent and not required: *si keeps its default. */
usp_status sim_json_number(const json_t *obj, sim_json_at at, const sim_json_range *f, int required, double *si);

/* Checks a value held in SI units (a topology or GPU built in code) against f's
 * range; NaN, infinities and subnormals are out of every range. */
usp_status sim_json_check_number(sim_json_at at, const sim_json_range *f, double si);

/* A whole-number field in [lo, hi] into *out; absent and not required: *out keeps its default. */
usp_status sim_json_int(const json_t *obj, sim_json_at at, const char *key, int required, int lo, int hi,
                        const char *hint, int *out);

/* The "cache" field of a calibrated kernel class or collective table into *hot: "hot" (measured again at once)
 * 1, "cold" (after a flush) or absent 0; anything else USP_ERR_CONFIG naming the field and the value. */
usp_status sim_json_cache_state(const json_t *obj, sim_json_at at, int *hot);

/* Checks a count held in code against [lo, hi], with the message sim_json_int gives. */
usp_status sim_json_check_int(sim_json_at at, const char *key, long long value, int lo, int hi, const char *hint);

#endif
