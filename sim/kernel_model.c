/* The calibrated kernel model: pricing, the non-negative fit, the JSON form (see kernel_model.h). */
#include "sim/kernel_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/json_fields.h"

/* The fit's terms: a call, an output, a byte (flop-priced classes), then the table's points. */
enum { T_CALL, T_OUTPUT, T_BYTE, T_TABLE, T_TERMS = T_TABLE + SIM_KERNEL_TABLE };

int sim_kernel_op_per_flop(const char *op) { return strcmp(op, "gemm") == 0 || strncmp(op, "attention_", 10) == 0; }

const sim_kernel_fit *sim_kernel_find_in(const sim_kernel_model *m, const char *op, usp_dtype dtype, int hot)
{
    const sim_kernel_fit *fp32 = NULL, *other = NULL;
    for (int i = 0; i < m->n; i++) {
        const sim_kernel_fit *f = &m->fits[i];
        if (f->hot != hot)
            continue;
        if (strcmp(f->op, op) == 0 && f->dtype == dtype)
            return f;
        if (strcmp(f->op, op) == 0 && f->dtype == USP_F32)
            fp32 = f;
        if (strcmp(f->op, "*") == 0 && (other == NULL || f->dtype == dtype))
            other = f;
    }
    return fp32 ? fp32 : other;
}

const sim_kernel_fit *sim_kernel_find(const sim_kernel_model *m, const char *op, usp_dtype dtype)
{
    return sim_kernel_find_in(m, op, dtype, 0);
}

int sim_kernel_model_has_hot(const sim_kernel_model *m)
{
    for (int i = 0; i < m->n; i++)
        if (m->fits[i].hot)
            return 1;
    return 0;
}

/* x to the 6 significant digits a topology file keeps (JSON_REAL_PRECISION(6)). */
static double strtod_6(double x)
{
    char text[32];
    snprintf(text, sizeof text, "%.6g", x);
    return strtod(text, NULL);
}

/* Where `bytes` falls in the table: the weight 1 - frac of point *j and frac of point *j + 1 (linear in log
 * bytes; frac 0 at and beyond the ends). */
static void table_weights(const double *table, int n, double bytes, int *j, double *frac)
{
    *j = 0, *frac = 0;
    if (n < 2 || !(bytes > table[0]))
        return;
    if (bytes >= table[n - 1]) {
        *j = n - 1;
        return;
    }
    while (*j + 2 < n && bytes >= table[*j + 1])
        ++*j;
    *frac = log(bytes / table[*j]) / log(table[*j + 1] / table[*j]);
}

double sim_kernel_fit_seconds(const sim_kernel_fit *f, double flops, double bytes, double outputs)
{
    int j;
    double frac;
    table_weights(f->table_bytes, f->n_table, bytes, &j, &frac);
    double per_work = f->table_per_work_s[j] * (1 - frac) + (frac > 0 ? f->table_per_work_s[j + 1] * frac : 0);
    return f->call_s + outputs * f->per_output_s + bytes * f->per_byte_s + (f->per_flop ? flops : bytes) * per_work;
}

double sim_kernel_seconds_held(const sim_kernel_model *m, const usp_op_cost *cost, double held)
{
    const sim_kernel_fit *cold = sim_kernel_find(m, cost->op, cost->dtype);
    if (!cold)
        return -1.0;
    double t = sim_kernel_fit_seconds(cold, cost->flops, cost->bytes, cost->outputs);
    const sim_kernel_fit *hot = held > 0 ? sim_kernel_find_in(m, cost->op, cost->dtype, 1) : NULL;
    return hot ? held * sim_kernel_fit_seconds(hot, cost->flops, cost->bytes, cost->outputs) + (1 - held) * t : t;
}

double sim_kernel_seconds(const sim_kernel_model *m, const usp_op_cost *cost)
{
    return sim_kernel_seconds_held(m, cost, 0);
}

/* The fit's table: from the smallest measured bytes to the largest, evenly in log, about a factor of 100
 * apart (a point of the table with no measurement near it would be a guess); how many points, returned. */
static int fit_table(const sim_kernel_point *p, int n, double *table)
{
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < n; i++)
        if (p[i].bytes > 0)
            lo = fmin(lo, p[i].bytes), hi = fmax(hi, p[i].bytes);
    if (!(hi > lo)) {
        table[0] = hi > 0 ? hi : 1;
        return 1;
    }
    int k = 1 + (int)lround(log10(hi / lo) / 2);
    k = k < 2 ? 2 : k > SIM_KERNEL_TABLE ? SIM_KERNEL_TABLE : k;
    for (int j = 0; j < k; j++) /* written as the file keeps them: the fit and a reader see one table */
        table[j] = strtod_6(lo * pow(hi / lo, (double)j / (k - 1)));
    return k;
}

/* A point's terms, as sim_kernel_fit_seconds weighs them. */
static void features(const sim_kernel_point *p, int per_flop, const double *table, int n_table, double x[T_TERMS])
{
    memset(x, 0, T_TERMS * sizeof *x);
    x[T_CALL] = 1, x[T_OUTPUT] = p->outputs, x[T_BYTE] = per_flop ? p->bytes : 0;
    int j;
    double frac, work = per_flop ? p->flops : p->bytes;
    table_weights(table, n_table, p->bytes, &j, &frac);
    x[T_TABLE + j] = work * (1 - frac);
    if (frac > 0)
        x[T_TABLE + j + 1] = work * frac;
}

/* Weighted least squares on the terms in `mask` (weights 1/t^2: relative error), each column scaled to unit
 * weighted norm so that flops (1e9) and calls (1) meet on one scale. 0 when the system is singular (a term no
 * point exercises, or two that move together); else the coefficients (0 outside the mask) and the sum of
 * squared relative errors. x: the points' features, [n][T_TERMS]. */
static int solve_subset(const double (*x)[T_TERMS], const sim_kernel_point *p, int n, unsigned mask,
                        double coef[T_TERMS], double *sse)
{
    int cols[T_TERMS], k = 0;
    for (int j = 0; j < T_TERMS; j++)
        if (mask & (1u << j))
            cols[k++] = j;
    double a[T_TERMS][T_TERMS + 1] = {{0}}, scale[T_TERMS] = {0};
    for (int i = 0; i < n; i++)
        for (int r = 0; r < k; r++)
            scale[r] += x[i][cols[r]] * x[i][cols[r]] / (p[i].seconds * p[i].seconds);
    for (int r = 0; r < k; r++) {
        if (!(scale[r] > 0))
            return 0;
        scale[r] = 1.0 / sqrt(scale[r]);
    }
    for (int i = 0; i < n; i++) { /* the normal equations of the scaled columns, right-hand side last */
        double w = 1.0 / (p[i].seconds * p[i].seconds);
        for (int r = 0; r < k; r++) {
            for (int c = 0; c < k; c++)
                a[r][c] += w * x[i][cols[r]] * scale[r] * x[i][cols[c]] * scale[c];
            a[r][k] += w * x[i][cols[r]] * scale[r] * p[i].seconds;
        }
    }
    for (int c = 0; c < k; c++) { /* Gauss-Jordan with partial pivoting */
        int best = c;
        for (int r = c + 1; r < k; r++)
            best = fabs(a[r][c]) > fabs(a[best][c]) ? r : best;
        if (!(fabs(a[best][c]) > 1e-7)) /* columns of unit norm: nearly dependent ones are refused, not fitted */
            return 0;
        for (int j = 0; j <= k; j++) {
            double t = a[c][j];
            a[c][j] = a[best][j], a[best][j] = t;
        }
        for (int r = 0; r < k; r++)
            if (r != c) {
                double f = a[r][c] / a[c][c];
                for (int j = c; j <= k; j++)
                    a[r][j] -= f * a[c][j];
            }
    }
    memset(coef, 0, T_TERMS * sizeof *coef);
    for (int r = 0; r < k; r++)
        coef[cols[r]] = a[r][k] / a[r][r] * scale[r];
    *sse = 0;
    for (int i = 0; i < n; i++) {
        double t = 0;
        for (int j = 0; j < T_TERMS; j++)
            t += coef[j] * x[i][j];
        *sse += (t / p[i].seconds - 1) * (t / p[i].seconds - 1);
    }
    return 1;
}

static usp_status check_points(const char *op, const sim_kernel_point *points, int n)
{
    if (n < 1)
        return usp_error(USP_ERR_CONFIG, "kernel fit of %s: no measured point", op);
    for (int i = 0; i < n; i++) {
        const sim_kernel_point *p = &points[i];
        if (!(p->flops >= 0 && p->bytes >= 0 && p->outputs >= 0 && isfinite(p->flops + p->bytes + p->outputs) &&
              p->seconds > 0 && isfinite(p->seconds)))
            return usp_error(USP_ERR_CONFIG, "kernel fit of %s: point %d (%g flops, %g bytes, %g outputs, %g s) is "
                             "not a finite work and a positive time", op, i, p->flops, p->bytes, p->outputs,
                             p->seconds);
    }
    return USP_OK;
}

usp_status sim_kernel_fit_points(const char *op, const sim_kernel_point *points, int n, sim_kernel_fit *out)
{
    USP_CHECK(check_points(op, points, n));
    double (*x)[T_TERMS] = NULL;
    USP_CHECK(usp_calloc((void **)&x, (size_t)n, sizeof *x, "the kernel fit"));
    *out = (sim_kernel_fit){.per_flop = sim_kernel_op_per_flop(op)};
    snprintf(out->op, sizeof out->op, "%s", op);
    out->n_table = fit_table(points, n, out->table_bytes);
    for (int i = 0; i < n; i++)
        features(&points[i], out->per_flop, out->table_bytes, out->n_table, x[i]);
    /* Every subset of the terms, fewest first; the best whose coefficients are all >= 0 (the non-negative least
     * squares optimum is one of them). A subset wins only by more than rounding, so exact data gives its own
     * terms back and no superset with coefficients of 1e-30. */
    double best_sse = INFINITY, coef[T_TERMS], best[T_TERMS] = {0};
    for (int terms = 1; terms <= T_TERMS; terms++)
        for (unsigned mask = 1; mask < 1u << T_TERMS; mask++) {
            double sse;
            if (__builtin_popcount(mask) != terms || !solve_subset((const double (*)[T_TERMS])x, points, n, mask,
                                                                   coef, &sse))
                continue;
            int negative = 0;
            for (int j = 0; j < T_TERMS; j++)
                negative |= coef[j] < 0;
            if (!negative && sse < best_sse - 1e-9 * n)
                best_sse = sse, memcpy(best, coef, sizeof coef);
        }
    free(x);
    if (!isfinite(best_sse)) /* nothing solvable (every point the same work): the mean time a call */
        for (int i = 0; i < n; i++)
            best[T_CALL] += points[i].seconds / n;
    out->call_s = best[T_CALL], out->per_output_s = best[T_OUTPUT], out->per_byte_s = best[T_BYTE];
    memcpy(out->table_per_work_s, best + T_TABLE, sizeof out->table_per_work_s);
    return USP_OK;
}

usp_status sim_kernel_model_add(sim_kernel_model *m, const sim_kernel_fit *f)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->fits[i].op, f->op) == 0 && m->fits[i].dtype == f->dtype && m->fits[i].hot == f->hot)
            return usp_error(USP_ERR_CONFIG, "kernel class %s (%s%s) given twice", f->op,
                             f->dtype == USP_BF16 ? "bf16" : "fp32", f->hot ? ", hot" : "");
    if (m->n == SIM_KERNEL_FITS_MAX)
        return usp_error(USP_ERR_CONFIG, "more than %d kernel classes", SIM_KERNEL_FITS_MAX);
    m->fits[m->n++] = *f;
    return USP_OK;
}

/* The file's fields and their ranges: a call from 0 to 10 s; an output, a byte or a flop from 0 to 1 ms (a CPU
 * core's flop is about 10 ps, an H100's 0.002); a table's bytes from 1 to 1e15. */
static const sim_json_range call_range = {"call_us", 0, 1e7, 1e-6, "microseconds a call, e.g. 5"};
static const sim_json_range output_range = {"ns_per_output", 0, 1e9, 1e-9, "nanoseconds an output, e.g. 0.5"};
static const sim_json_range byte_range = {"ps_per_byte", 0, 1e9, 1e-12, "picoseconds a byte, e.g. 50"};
static const sim_json_range flop_range = {"ps_per_flop", 0, 1e9, 1e-12, "picoseconds a flop, e.g. 10"};
static const sim_json_range bytes_range = {"bytes", 1, 1e15, 1, "an op's bytes, ascending, e.g. 1000"};

static json_t *table_json(const sim_kernel_fit *f)
{
    json_t *bytes = json_array(), *cost = json_array();
    for (int j = 0; bytes && cost && j < f->n_table; j++) {
        json_array_append_new(bytes, json_real(f->table_bytes[j]));
        json_array_append_new(cost, json_real(f->table_per_work_s[j] / 1e-12));
    }
    return json_pack("{s:o, s:o}", "bytes", bytes, f->per_flop ? "ps_per_flop" : "ps_per_byte", cost);
}

json_t *sim_kernel_model_to_json(const sim_kernel_model *m)
{
    json_t *a = json_array();
    for (int i = 0; a && i < m->n; i++) {
        const sim_kernel_fit *f = &m->fits[i];
        json_t *j = json_pack("{s:s, s:f, s:f, s:o}", "op", f->op, "call_us", f->call_s / call_range.unit,
                              "ns_per_output", f->per_output_s / output_range.unit, "table", table_json(f));
        if (j && f->per_flop)
            json_object_set_new(j, "ps_per_byte", json_real(f->per_byte_s / byte_range.unit));
        if (j && f->dtype == USP_BF16) /* absent: fp32, as in files written before classes had a dtype */
            json_object_set_new(j, "dtype", json_string("bf16"));
        if (j && f->hot) /* absent: cold, as in files written before classes had a cache state */
            json_object_set_new(j, "cache", json_string("hot"));
        if (!j || json_array_append_new(a, j) != 0)
            json_decref(a), a = NULL;
    }
    return a;
}

/* One number of a table's array, checked against its range into *si. */
static usp_status table_number(const json_t *array, size_t i, sim_json_at at, const sim_json_range *range,
                               double *si)
{
    char key[48];
    snprintf(key, sizeof key, "%s[%zu]", range->key, i);
    sim_json_range r = *range;
    r.key = key;
    const json_t *v = json_array_get(array, i);
    if (!json_is_number(v))
        return usp_error(USP_ERR_CONFIG, "%s: field '%s%s' must be a number (%s)", at.where, at.prefix, key,
                         range->hint);
    *si = json_number_value(v) * range->unit;
    return sim_json_check_number(at, &r, *si);
}

static usp_status read_table(const json_t *t, sim_json_at at, sim_kernel_fit *f)
{
    static const char *const known[] = {"bytes", "ps_per_flop", "ps_per_byte", NULL};
    if (!json_is_object(t))
        return usp_error(USP_ERR_CONFIG, "%s: field '%stable' must be an object {\"bytes\": [...], \"ps_per_flop\": "
                         "[...]} (or \"ps_per_byte\")", at.where, at.prefix);
    char prefix[192];
    snprintf(prefix, sizeof prefix, "%stable.", at.prefix);
    sim_json_at in = {at.where, prefix};
    USP_CHECK(sim_json_check_keys(t, in, known));
    const json_t *bytes = json_object_get(t, "bytes"), *flop = json_object_get(t, "ps_per_flop"),
                 *byte = json_object_get(t, "ps_per_byte"), *cost = flop ? flop : byte;
    size_t n = json_array_size(bytes);
    if (!json_is_array(bytes) || n < 1 || n > SIM_KERNEL_TABLE || !cost || (flop && byte) || !json_is_array(cost) ||
        json_array_size(cost) != n)
        return usp_error(USP_ERR_CONFIG, "%s: field '%stable' must hold \"bytes\" (1 to %d ascending sizes) and one "
                         "of \"ps_per_flop\", \"ps_per_byte\" of the same length", at.where, at.prefix,
                         SIM_KERNEL_TABLE);
    f->per_flop = flop != NULL, f->n_table = (int)n;
    for (size_t j = 0; j < n; j++) {
        USP_CHECK(table_number(bytes, j, in, &bytes_range, &f->table_bytes[j]));
        USP_CHECK(table_number(cost, j, in, flop ? &flop_range : &byte_range, &f->table_per_work_s[j]));
        if (j > 0 && !(f->table_bytes[j] > f->table_bytes[j - 1]))
            return usp_error(USP_ERR_CONFIG, "%s: field '%sbytes[%zu]' %g: the sizes must ascend", at.where, prefix,
                             j, f->table_bytes[j]);
    }
    return USP_OK;
}

static usp_status read_fit(const json_t *obj, sim_json_at at, sim_kernel_fit *f)
{
    static const char *const known[] = {"op", "dtype", "cache", "call_us", "ns_per_output", "ps_per_byte", "table",
                                        NULL};
    if (!json_is_object(obj))
        return usp_error(USP_ERR_CONFIG, "%s: field '%s' must be an object {\"op\", \"call_us\", \"ns_per_output\", "
                         "\"table\"} (usp calibrate writes it)", at.where, at.prefix);
    USP_CHECK(sim_json_check_keys(obj, at, known));
    const char *op = json_string_value(json_object_get(obj, "op"));
    if (!op || !*op || strlen(op) >= SIM_KERNEL_OP_MAX)
        return usp_error(USP_ERR_CONFIG, "%s: field '%sop' must be an op's name (\"gemm\", \"layernorm_forward\") or "
                         "\"*\", under %d characters", at.where, at.prefix, SIM_KERNEL_OP_MAX);
    *f = (sim_kernel_fit){0};
    snprintf(f->op, sizeof f->op, "%s", op);
    const json_t *dtype = json_object_get(obj, "dtype");
    const char *dtype_name = json_string_value(dtype);
    if (dtype && (!dtype_name || (strcmp(dtype_name, "fp32") != 0 && strcmp(dtype_name, "bf16") != 0)))
        return usp_error(USP_ERR_CONFIG, "%s: field '%sdtype' must be \"fp32\" or \"bf16\" (absent: fp32), not %s",
                         at.where, at.prefix, dtype_name ? dtype_name : sim_json_kind(dtype));
    f->dtype = dtype_name && strcmp(dtype_name, "bf16") == 0 ? USP_BF16 : USP_F32;
    USP_CHECK(sim_json_cache_state(obj, at, &f->hot));
    USP_CHECK(sim_json_number(obj, at, &call_range, 1, &f->call_s));
    USP_CHECK(sim_json_number(obj, at, &output_range, 0, &f->per_output_s));
    USP_CHECK(sim_json_number(obj, at, &byte_range, 0, &f->per_byte_s));
    const json_t *table = json_object_get(obj, "table");
    if (!table)
        return usp_error(USP_ERR_CONFIG, "%s: field '%stable' is missing", at.where, at.prefix);
    USP_CHECK(read_table(table, at, f));
    if (!f->per_flop && f->per_byte_s > 0)
        return usp_error(USP_ERR_CONFIG, "%s: field '%sps_per_byte' beside a table of ps_per_byte: give the bytes' "
                         "cost in the table", at.where, at.prefix);
    return USP_OK;
}

usp_status sim_kernel_model_from_json(const json_t *array, const char *where, const char *prefix,
                                      sim_kernel_model *out)
{
    *out = (sim_kernel_model){0};
    if (!json_is_array(array))
        return usp_error(USP_ERR_CONFIG, "%s: field '%skernels' must be an array of kernel classes (usp calibrate "
                         "writes it; docs/cluster_model.md)", where, prefix);
    size_t i;
    const json_t *v;
    json_array_foreach(array, i, v) {
        char path[160];
        snprintf(path, sizeof path, "%skernels[%zu].", prefix, i);
        sim_kernel_fit f;
        USP_CHECK(read_fit(v, (sim_json_at){where, path}, &f));
        if (sim_kernel_model_add(out, &f) != USP_OK)
            return usp_error(USP_ERR_CONFIG, "%s: field '%sop' \"%s\": %s", where, path, f.op, usp_error_message());
    }
    return USP_OK;
}
