/* Predicted against measured (see compare.h). */
#include "plan/compare.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan/plan.h"
#include "sim/cost_model.h"
#include "sim/topology.h"

/* The run's options as usp train wrote them (otherData.usp_run). */
typedef struct run_options {
    const char *backend, *model, *data, *attention, *topology, *attention_kernel, *dtype, *machine;
    int world, ulysses, ring, nodes, pad, zero, recompute, selective_recompute, micro_batches, tiled_mlp, tiled_loss, tile_rows, modelled;
    json_int_t seq, batch;
} run_options;

static usp_status read_run_options(const plan_trace *t, run_options *r)
{
    const json_t *run = plan_trace_run_options(t);
    if (!run)
        return usp_error(USP_ERR_CONFIG, "%s: a usp trace without the run's options (otherData.usp_run): usp viz, "
                         "usp plan --trace and usp train before this version write none; record the run with usp "
                         "train ... --trace FILE.json", t->name);
    *r = (run_options){0};
    json_error_t e;
    if (json_unpack_ex((json_t *)run, &e, 0,
                       "{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:b, s:I, s?:i, s:s, s:i, s:b, s?:b, s:b, s:b, s:i, "
                       "s:s, s:b}",
                       "backend", &r->backend, "model", &r->model, "data", &r->data, "attention", &r->attention,
                       "world", &r->world, "ulysses", &r->ulysses, "ring", &r->ring, "seq", &r->seq, "pad", &r->pad,
                       "batch", &r->batch, "nodes", &r->nodes, "dtype", &r->dtype, "zero", &r->zero, "recompute",
                       &r->recompute, "selective_recompute", &r->selective_recompute,
                       "tiled_mlp", &r->tiled_mlp, "tiled_loss", &r->tiled_loss, "tile_rows", &r->tile_rows,
                       "machine", &r->machine, "modelled", &r->modelled) != 0)
        return usp_error(USP_ERR_CONFIG, "%s: otherData.usp_run: %s", t->name, e.text);
    /* null when the run took the default */
    r->topology = json_string_value(json_object_get(run, "topology"));
    r->micro_batches = (int)json_integer_value(json_object_get(run, "micro_batches")); /* 0 when absent: one */
    r->attention_kernel = json_string_value(json_object_get(run, "attention_kernel"));
    return USP_OK;
}

/* An option given beside --compare that is not the run's. */
static usp_status check_given(const plan_trace *t, const plan_compare_options *o, const run_options *r)
{
    const struct { const char *option; long long given, recorded; } ints[] = {
        {"--world", o->world, r->world}, {"--ulysses", o->ulysses, r->ulysses}, {"--ring", o->ring, r->ring},
        {"--seq", o->seq, r->seq}, {"--batch", o->batch, r->batch},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].given && ints[i].given != ints[i].recorded)
            return usp_error(USP_ERR_CONFIG, "%s %lld beside --compare %s: the run was %s %lld (drop %s: the trace "
                             "says what to plan)", ints[i].option, ints[i].given, t->name, ints[i].option,
                             ints[i].recorded, ints[i].option);
    if (o->model && strcmp(o->model, r->model) != 0)
        return usp_error(USP_ERR_CONFIG, "--model %s beside --compare %s: the run was --model %s (drop --model: the "
                         "trace says what to plan)", o->model, t->name, r->model);
    return USP_OK;
}

/* The run's training config, as usp plan builds it from the same options. */
static usp_status run_config(const plan_trace *t, const run_options *r, usp_train_config *c)
{
    usp_train_defaults(c);
    if (usp_model_config_load(r->model, &c->model) != USP_OK) {
        char why[USP_ERROR_MESSAGE_MAX];
        snprintf(why, sizeof why, "%s", usp_error_message());
        return usp_error(USP_ERR_CONFIG, "%s: the run's model %s: %s", t->name, r->model, why);
    }
    if (usp_mesh_shape_make(r->world, r->ulysses, r->ring, &c->shape) != USP_OK)
        return usp_error(USP_ERR_CONFIG, "%s: the run's mesh (world %d, ulysses %d, ring %d): %s", t->name, r->world,
                         r->ulysses, r->ring, usp_error_message());
    c->data = r->data, c->seq_len = r->seq, c->pad = r->pad, c->batch = r->batch;
    c->attention = r->attention;
    c->storage = strcmp(r->dtype, "bf16") == 0 ? USP_BF16 : USP_F32;
    c->zero_stage = r->zero, c->recompute_layers = r->recompute;
    c->selective_recompute = r->selective_recompute, c->micro_batches = r->micro_batches;
    c->tiled_mlp = r->tiled_mlp, c->tiled_loss = r->tiled_loss, c->tile_rows = r->tile_rows;
    return USP_OK;
}

/* The planner's step of `c` on `cost`, read back from its modelled trace by the code that reads the run's. */
static usp_status predict(const usp_train_config *c, const sim_cost_model *cost, plan_step_phases *out)
{
    const char *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/usp-compare-XXXXXX.json", dir);
    int fd = mkstemps(path, 5);
    if (fd < 0)
        return usp_error(USP_ERR_RUNTIME, "cannot make a temporary file in %s for the planned step's trace", dir);
    close(fd);
    plan_result result;
    usp_status s = plan_run(c, cost, path, &result);
    plan_trace planned = {0};
    if (s == USP_OK) {
        plan_result_free(&result);
        s = plan_trace_read(path, &planned);
    }
    if (s == USP_OK)
        s = plan_trace_step_phases(&planned, 1, out);
    plan_trace_free(&planned);
    unlink(path);
    return s;
}

usp_status plan_compare_run(const plan_compare_options *o, plan_comparison *out)
{
    *out = (plan_comparison){0};
    plan_trace t;
    USP_CHECK(plan_trace_read(o->trace, &t));
    run_options r;
    usp_train_config c;
    usp_status s = read_run_options(&t, &r);
    if (s == USP_OK)
        s = check_given(&t, o, &r);
    if (s == USP_OK)
        s = plan_trace_median_phases(&t, o->steps, &out->measured);
    if (s == USP_OK)
        s = run_config(&t, &r, &c);
    sim_cost_model cost = sim_cost_model_default(r.world > 0 ? r.world : 1);
    const char *topology = o->topology ? o->topology : r.topology;
    int nodes = o->nodes ? o->nodes : r.nodes;
    if (s == USP_OK && (topology || nodes))
        s = sim_topology_for_world(topology, nodes, r.world, &cost.topology);
    if (s == USP_OK)
        s = sim_gpu_use_attention_kernel_named(&cost.topology.gpu, o->attention_kernel ? o->attention_kernel
                                                                                       : r.attention_kernel);
    if (s == USP_OK)
        s = predict(&c, &cost, &out->predicted);
    if (s == USP_OK) {
        snprintf(out->backend, sizeof out->backend, "%s", r.backend);
        snprintf(out->model, sizeof out->model, "%s", r.model);
        snprintf(out->machine, sizeof out->machine, "%s", r.machine);
        size_t n = topology ? strlen(topology) : 0; /* a file (usp calibrate's, say) is named beside its name */
        int file = n > 5 && strcmp(topology + n - 5, ".json") == 0;
        snprintf(out->topology, sizeof out->topology, "%s%s%s%s", cost.topology.name, file ? " (topology file " : "",
                 file ? topology : "", file ? ")" : "");
        snprintf(out->clock, sizeof out->clock, "%s", plan_trace_clock(&t));
        out->shape = c.shape, out->seq = (long long)c.seq_len, out->batch = (long long)c.batch;
        out->modelled = r.modelled, out->ops = o->ops;
    }
    plan_trace_free(&t);
    return s;
}

/* One row: a name and the two sides' seconds (and of them, a collective's wait for the last peer). */
typedef struct row {
    const char *name;
    double predicted, measured;
    double predicted_wait, measured_wait; /* -1: not a collective */
    double lo, hi;                        /* the measured figure's lowest and highest over the steps compared */
} row;

/* The phases, then compute, communication and the step: n rows into rows[PLAN_ROWS]. */
static int rows_of(const plan_comparison *c, row *rows)
{
    int n = 0;
    for (int p = 0; p < PLAN_PHASES; p++) {
        int comm = plan_phase_is_comm((plan_phase)p);
        rows[n++] = (row){plan_phase_name((plan_phase)p), c->predicted.phase_s[p], c->measured.phase_s[p],
                          comm ? c->predicted.wait_s[p] : -1, comm ? c->measured.wait_s[p] : -1, 0, 0};
    }
    rows[n++] = (row){"compute", c->predicted.compute_s, c->measured.compute_s, -1, -1, 0, 0};
    rows[n++] = (row){"communication", c->predicted.comm_s, c->measured.comm_s, -1, -1, 0, 0};
    rows[n++] = (row){"step", c->predicted.step_s, c->measured.step_s, -1, -1, 0, 0};
    for (int i = 0; i < n; i++)
        rows[i].lo = c->measured.lo_s[i], rows[i].hi = c->measured.hi_s[i];
    return n;
}

/* "12.3 us", "4.56 ms", "1.234 s". */
static const char *fmt_seconds(char *buf, size_t size, double s)
{
    if (s == 0)
        snprintf(buf, size, "0");
    else if (s < 1e-3)
        snprintf(buf, size, "%.1f us", s * 1e6);
    else if (s < 1)
        snprintf(buf, size, "%.3f ms", s * 1e3);
    else
        snprintf(buf, size, "%.3f s", s);
    return buf;
}

static void ratio_text(char *buf, size_t size, double measured, double predicted)
{
    if (predicted > 0)
        snprintf(buf, size, "%.3g", measured / predicted);
    else
        snprintf(buf, size, "%s", measured > 0 ? "(none)" : "-");
}

/* Each collective phase split into its transfer and its wait for the last peer, both sides. */
static void print_waits(FILE *out, const plan_comparison *c)
{
    const plan_step_phases *p = &c->predicted, *m = &c->measured;
    int any = 0;
    char a[32], b[32], r[32], d[32], e[32], f[32];
    for (int k = 0; k < PLAN_PHASES; k++) {
        if (!plan_phase_is_comm((plan_phase)k) || (p->phase_s[k] == 0 && m->phase_s[k] == 0))
            continue;
        if (!any++)
            fprintf(out, "\n  %-18s %12s %12s %10s %12s %12s %10s\n", "collective", "transfer:", "measured",
                    "ratio", "wait: pred.", "measured", "ratio");
        double pt = p->phase_s[k] - p->wait_s[k], mt = m->phase_s[k] - m->wait_s[k];
        ratio_text(r, sizeof r, mt, pt);
        ratio_text(f, sizeof f, m->wait_s[k], p->wait_s[k]);
        fprintf(out, "  %-18s %12s %12s %10s %12s %12s %10s\n", plan_phase_name((plan_phase)k),
                fmt_seconds(a, sizeof a, pt), fmt_seconds(b, sizeof b, mt), r, fmt_seconds(d, sizeof d, p->wait_s[k]),
                fmt_seconds(e, sizeof e, m->wait_s[k]), f);
    }
    if (any)
        fprintf(out, "wait: from a call's post to the last member's post of the same call (group and sequence number\n"
                "on every rank's track; the processes' clocks aligned to rank 0's at start, no barrier added);\n"
                "transfer: the rest of the call.\n");
}

/* One op's row: its name, the measured and predicted seconds and calls a step. */
typedef struct op_row {
    const char *name;
    double measured, predicted, measured_calls, predicted_calls;
} op_row;

static int by_measured_time(const void *a, const void *b)
{
    const op_row *x = a, *y = b;
    double kx = x->measured > 0 ? x->measured : x->predicted, ky = y->measured > 0 ? y->measured : y->predicted;
    return kx > ky ? -1 : kx < ky;
}

/* The ops of either side into rows[2 * PLAN_OP_ROWS_MAX], the largest first; how many. */
static int op_rows_of(const plan_comparison *c, op_row *rows)
{
    int n = 0;
    const plan_op_rows *m = &c->measured.ops, *p = &c->predicted.ops;
    for (int i = 0; i < m->n; i++) {
        const plan_op_row *q = plan_op_rows_find(p, m->rows[i].name);
        rows[n++] = (op_row){m->rows[i].name, m->rows[i].s, q ? q->s : 0, m->rows[i].calls, q ? q->calls : 0};
    }
    for (int i = 0; i < p->n; i++)
        if (!plan_op_rows_find(m, p->rows[i].name))
            rows[n++] = (op_row){p->rows[i].name, 0, p->rows[i].s, 0, p->rows[i].calls};
    qsort(rows, (size_t)n, sizeof *rows, by_measured_time);
    return n;
}

/* The step op by op: where each phase's ratio comes from. */
static void print_ops(FILE *out, const plan_comparison *c)
{
    op_row rows[2 * PLAN_OP_ROWS_MAX];
    int n = op_rows_of(c, rows);
    char a[32], b[32], r[32];
    fprintf(out, "\n  %-28s %12s %12s %10s %14s\n", "op (a call: its transfer)", "predicted", "measured", "ratio",
            "calls a step");
    for (int i = 0; i < n; i++) {
        ratio_text(r, sizeof r, rows[i].measured, rows[i].predicted);
        fprintf(out, "  %-28s %12s %12s %10s %8.4g", rows[i].name, fmt_seconds(a, sizeof a, rows[i].predicted),
                fmt_seconds(b, sizeof b, rows[i].measured), r, rows[i].measured_calls);
        if (rows[i].predicted_calls != rows[i].measured_calls)
            fprintf(out, " (predicted %.4g)", rows[i].predicted_calls);
        fputc('\n', out);
    }
    if (c->measured.ops.dropped || c->predicted.ops.dropped)
        fprintf(out, "(more than %d distinct ops and call sizes: the rest are left out)\n", PLAN_OP_ROWS_MAX);
    fprintf(out, "an op: the mean over the ranks of its time a step (of a median over steps, the median); a call of\n"
            "a group: by its op and the bytes a rank sent, its transfer (the wait for the last peer left out).\n");
}

/* The op rows as a JSON array, or NULL when out of memory. */
static json_t *ops_json(const plan_comparison *c)
{
    op_row rows[2 * PLAN_OP_ROWS_MAX];
    int n = op_rows_of(c, rows);
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        json_t *ratio = rows[i].predicted > 0 ? json_real(rows[i].measured / rows[i].predicted) : json_null();
        json_t *r = json_pack("{s:s, s:f, s:f, s:o, s:f, s:f}", "op", rows[i].name, "predicted_s", rows[i].predicted,
                              "measured_s", rows[i].measured, "ratio", ratio, "predicted_calls",
                              rows[i].predicted_calls, "measured_calls", rows[i].measured_calls);
        if (!r || json_array_append_new(a, r) != 0)
            json_decref(a), a = NULL;
    }
    return a;
}

void plan_comparison_print(FILE *out, const plan_comparison *c)
{
    fprintf(out, "usp plan --compare: a run of usp train --backend %s, model %s, world %d = dp %d x ring %d x ulysses "
            "%d, seq %lld, batch %lld\n", c->backend, c->model, c->shape.world, c->shape.dp, c->shape.ring,
            c->shape.ulysses, c->seq, c->batch);
    const plan_step_phases *m = &c->measured;
    if (m->steps_compared > 1)
        fprintf(out, "the run: steps %lld-%lld of %lld, each figure the median of the %lld, ",
                (long long)(m->step - m->steps_compared + 1), (long long)m->step, (long long)m->steps,
                (long long)m->steps_compared);
    else
        fprintf(out, "the run: step %lld of %lld, ", (long long)m->step, (long long)m->steps);
    fprintf(out, "%s on %s, %s%d rank%s\n", c->modelled ? "modelled by the simulator" : "measured", c->machine,
            c->measured.ranks > 1 ? "mean of " : "", c->measured.ranks, c->measured.ranks > 1 ? "s" : "");
    fprintf(out, "predicted: one step planned on %s, by the same code on the meta backend in the simulator\n",
            c->topology);
    const int ranges = m->steps_compared > 1;
    fprintf(out, "\n  %-18s %12s %12s %10s%s\n", "phase", "predicted", "measured", "ratio",
            ranges ? "   measured: lowest - highest step" : "");
    row rows[PLAN_ROWS];
    int n = rows_of(c, rows);
    char a[32], b[32], ratio[32], lo[32], hi[32];
    for (int i = 0; i < n; i++) {
        if (i == PLAN_PHASES)
            fputc('\n', out);
        if (rows[i].predicted > 0)
            snprintf(ratio, sizeof ratio, "%.3g", rows[i].measured / rows[i].predicted);
        else
            snprintf(ratio, sizeof ratio, "%s", rows[i].measured > 0 ? "(none)" : "-");
        fprintf(out, "  %-18s %12s %12s %10s", rows[i].name, fmt_seconds(a, sizeof a, rows[i].predicted),
                fmt_seconds(b, sizeof b, rows[i].measured), ratio);
        if (ranges && rows[i].hi > 0)
            fprintf(out, "   %12s - %s", fmt_seconds(lo, sizeof lo, rows[i].lo),
                    fmt_seconds(hi, sizeof hi, rows[i].hi));
        fputc('\n', out);
    }
    fprintf(out, "\nratio: measured / predicted. A phase: the mean over the ranks of the step's time in it (a call\n"
            "from post to completion, waiting included); step: the longest rank's.\n");
    print_waits(out, c);
    if (c->ops)
        print_ops(out, c);
}

usp_status plan_comparison_print_json(FILE *out, const plan_comparison *c, const char *trace)
{
    json_t *phases = json_array();
    row rows[PLAN_ROWS];
    int n = rows_of(c, rows);
    for (int i = 0; phases && i < n; i++) {
        json_t *ratio = rows[i].predicted > 0 ? json_real(rows[i].measured / rows[i].predicted) : json_null();
        json_t *r = json_pack("{s:s, s:f, s:f, s:o, s:f, s:f}", "phase", rows[i].name, "predicted_s",
                              rows[i].predicted, "measured_s", rows[i].measured, "ratio", ratio, "measured_lo_s",
                              rows[i].lo, "measured_hi_s", rows[i].hi);
        if (r && rows[i].predicted_wait >= 0) /* a collective: its wait for the last peer, and the transfer */
            json_object_update_new(r, json_pack("{s:f, s:f}", "predicted_wait_s", rows[i].predicted_wait,
                                                "measured_wait_s", rows[i].measured_wait));
        if (!r || json_array_append_new(phases, r) != 0)
            json_decref(phases), phases = NULL;
    }
    json_t *j = phases ? json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:i, s:s, s:b, s:s, "
                                   "s:s, s:o, s:I}",
                                   "trace", trace, "backend", c->backend, "model", c->model, "world", c->shape.world,
                                   "dp", c->shape.dp, "ulysses", c->shape.ulysses, "ring", c->shape.ring, "seq",
                                   (json_int_t)c->seq, "batch", (json_int_t)c->batch, "step",
                                   (json_int_t)c->measured.step, "steps", (json_int_t)c->measured.steps, "ranks",
                                   c->measured.ranks, "machine", c->machine, "modelled", c->modelled, "topology",
                                   c->topology, "clock", c->clock, "phases", phases, "steps_compared",
                                   (json_int_t)c->measured.steps_compared)
                       : NULL;
    if (j && c->ops) {
        json_t *ops = ops_json(c);
        if (!ops || json_object_set_new(j, "ops", ops) != 0)
            json_decref(j), j = NULL;
    }
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (!text)
        return usp_error(USP_ERR_RUNTIME, "--json: the comparison could not be written as JSON (a figure that is not "
                         "a finite number, or out of memory)");
    fprintf(out, "%s\n", text);
    free(text);
    return USP_OK;
}
