/* Measured collective times (see collective_table.h). */
#include "sim/collective_table.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/trace/comm_kind.h"
#include "sim/json_fields.h"

double sim_collective_key(size_t entries, const int *src, const int *dst, const uint64_t *bytes, int n)
{
    double most = 0, sent = 0;
    for (size_t k = 0; k < entries; k++) { /* the list is in (src, dst) order: a member's entries are together */
        if (k > 0 && src[k] != src[k - 1])
            sent = 0;
        if (src[k] != dst[k] && src[k] >= 0 && src[k] < n)
            sent += (double)bytes[k];
        most = sent > most ? sent : most;
    }
    return most;
}

const sim_collective_table *sim_collective_find_in(const sim_collective_tables *t, usp_comm_kind kind, int ranks,
                                                   int spans_nodes, int hot)
{
    for (int i = 0; i < t->n; i++)
        if (t->tables[i].kind == kind && t->tables[i].ranks == ranks && t->tables[i].spans_nodes == spans_nodes &&
            t->tables[i].hot == hot)
            return &t->tables[i];
    return NULL;
}

const sim_collective_table *sim_collective_find(const sim_collective_tables *t, usp_comm_kind kind, int ranks,
                                                int spans_nodes)
{
    return sim_collective_find_in(t, kind, ranks, spans_nodes, 0);
}

double sim_collective_seconds(const sim_collective_table *t, double bytes)
{
    const double *x = t->bytes, *y = t->seconds;
    if (!(bytes > x[0]))
        return y[0];
    if (bytes >= x[t->n - 1])
        return y[t->n - 1] * bytes / x[t->n - 1];
    int j = 0;
    while (bytes >= x[j + 1])
        j++;
    double frac = log(bytes / x[j]) / log(x[j + 1] / x[j]);
    return y[j] * pow(y[j + 1] / y[j], frac);
}

double sim_collective_seconds_held(const sim_collective_table *cold, const sim_collective_table *hot, double bytes,
                                   double held)
{
    double t = sim_collective_seconds(cold, bytes);
    if (!hot || !(held > 0) || bytes > hot->bytes[hot->n - 1])
        return t;
    return held * sim_collective_seconds(hot, bytes) + (1 - held) * t;
}

usp_status sim_collective_add(sim_collective_tables *t, const sim_collective_table *table)
{
    if (sim_collective_find_in(t, table->kind, table->ranks, table->spans_nodes, table->hot))
        return usp_error(USP_ERR_CONFIG, "a %s table of %s over %d ranks (%s) given twice", table->hot ? "hot" : "cold",
                         usp_comm_kind_name(table->kind), table->ranks, table->spans_nodes ? "across nodes" : "in a node");
    if (t->n == SIM_COLLECTIVE_TABLES_MAX)
        return usp_error(USP_ERR_CONFIG, "more than %d collective tables", SIM_COLLECTIVE_TABLES_MAX);
    t->tables[t->n++] = *table;
    return USP_OK;
}

json_t *sim_collective_tables_to_json(const sim_collective_tables *t)
{
    json_t *a = json_array();
    for (int i = 0; a && i < t->n; i++) {
        const sim_collective_table *c = &t->tables[i];
        json_t *bytes = json_array(), *us = json_array();
        for (int j = 0; bytes && us && j < c->n; j++) {
            json_array_append_new(bytes, json_integer((json_int_t)llround(c->bytes[j]))); /* whole bytes, every digit */
            json_array_append_new(us, json_real(c->seconds[j] * 1e6));
        }
        json_t *o = json_pack("{s:s, s:i, s:b, s:o, s:o}", "op", usp_comm_kind_name(c->kind), "ranks", c->ranks,
                              "spans_nodes", c->spans_nodes, "bytes", bytes, "us", us);
        if (o && c->hot) /* absent: cold, as in files written before tables had a cache state */
            json_object_set_new(o, "cache", json_string("hot"));
        if (!o || json_array_append_new(a, o) != 0)
            json_decref(a), a = NULL;
    }
    return a;
}

static usp_status read_table(const json_t *o, const char *where, size_t i, sim_collective_table *c)
{
    static const char *const known[] = {"op", "ranks", "spans_nodes", "cache", "bytes", "us", NULL};
    char prefix[64];
    snprintf(prefix, sizeof prefix, "collectives[%zu].", i);
    sim_json_at at = {where, prefix};
    if (!json_is_object(o))
        return usp_error(USP_ERR_CONFIG, "%s: field 'collectives[%zu]' must be an object {op, ranks, spans_nodes, "
                         "bytes, us} (usp calibrate writes it)", where, i);
    USP_CHECK(sim_json_check_keys(o, at, known));
    const char *op = json_string_value(json_object_get(o, "op"));
    *c = (sim_collective_table){0};
    if (op && strcmp(op, "all_to_all") == 0)
        c->kind = USP_OP_ALL_TO_ALL;
    else if (op && strcmp(op, "all_reduce") == 0)
        c->kind = USP_OP_ALL_REDUCE;
    else
        return usp_error(USP_ERR_CONFIG, "%s: field '%sop' must be \"all_to_all\" or \"all_reduce\"", where, prefix);
    USP_CHECK(sim_json_int(o, at, "ranks", 1, 2, 1 << 20, "the group's ranks", &c->ranks));
    USP_CHECK(sim_json_cache_state(o, at, &c->hot));
    const json_t *spans = json_object_get(o, "spans_nodes"), *bytes = json_object_get(o, "bytes"),
                 *us = json_object_get(o, "us");
    size_t n = json_array_size(bytes);
    if (!json_is_boolean(spans) || !json_is_array(bytes) || !json_is_array(us) || n < 1 ||
        n > SIM_COLLECTIVE_SIZES_MAX || json_array_size(us) != n)
        return usp_error(USP_ERR_CONFIG, "%s: field 'collectives[%zu]' needs spans_nodes (true or false) and bytes "
                         "and us, arrays of 1 to %d numbers of the same length", where, i, SIM_COLLECTIVE_SIZES_MAX);
    c->spans_nodes = json_is_true(spans), c->n = (int)n;
    for (size_t j = 0; j < n; j++) {
        double b = json_number_value(json_array_get(bytes, j)), t = json_number_value(json_array_get(us, j));
        if (!(b >= 1 && b <= 1e15 && t >= 1e-6 && t <= 1e12) || (j > 0 && !(b > c->bytes[j - 1])))
            return usp_error(USP_ERR_CONFIG, "%s: field '%sbytes[%zu]' %g, 'us[%zu]' %g: sizes ascend from 1 to 1e15 "
                             "bytes, times are 1e-6 to 1e12 us", where, prefix, j, b, j, t);
        c->bytes[j] = b, c->seconds[j] = t * 1e-6;
    }
    return USP_OK;
}

usp_status sim_collective_tables_from_json(const json_t *array, const char *where, sim_collective_tables *out)
{
    *out = (sim_collective_tables){0};
    if (!array)
        return USP_OK;
    if (!json_is_array(array))
        return usp_error(USP_ERR_CONFIG, "%s: field 'collectives' must be an array (usp calibrate writes it)", where);
    size_t i;
    const json_t *o;
    json_array_foreach(array, i, o) {
        sim_collective_table c;
        USP_CHECK(read_table(o, where, i, &c));
        if (sim_collective_add(out, &c) != USP_OK)
            return usp_error(USP_ERR_CONFIG, "%s: field 'collectives[%zu]': %s", where, i, usp_error_message());
    }
    return USP_OK;
}
