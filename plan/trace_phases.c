/* One step of a usp Chrome trace by phase (see trace_phases.h). The document
 * is read whole (jansson) and walked once per rank and thread: slices are B/E
 * pairs, balanced and nested per (pid, tid), in the order the rank did them,
 * as viz/chrome_trace.c writes them. */
#include "plan/trace_phases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TID_COMPUTE = 0, TID_COMM = 1, TID_STEPS = 2 }; /* viz/chrome_trace.c's threads */
#define DEPTH_MAX 8                                    /* a call and its "waiting for peers" slice: 2 */

static const char *const phase_names[PLAN_PHASES] = {
    "attention", "gemm", "other_compute", "all_to_all", "ring_p2p", "all_reduce", "other_collectives",
};

const char *plan_phase_name(plan_phase p) { return p >= 0 && p < PLAN_PHASES ? phase_names[p] : "?"; }
int plan_phase_is_comm(plan_phase p) { return p >= PLAN_PHASE_ALL_TO_ALL && p < PLAN_PHASES; }

static plan_phase compute_phase(const char *op)
{
    if (strncmp(op, "attention_", 10) == 0)
        return PLAN_PHASE_ATTENTION;
    return strcmp(op, "gemm") == 0 ? PLAN_PHASE_GEMM : PLAN_PHASE_OTHER_COMPUTE;
}

static plan_phase comm_phase(const char *op)
{
    if (strncmp(op, "all_to_all", 10) == 0)
        return PLAN_PHASE_ALL_TO_ALL;
    if (!strcmp(op, "send") || !strcmp(op, "recv") || !strcmp(op, "sendrecv"))
        return PLAN_PHASE_RING;
    return strcmp(op, "all_reduce") == 0 ? PLAN_PHASE_ALL_REDUCE : PLAN_PHASE_OTHER_COMM;
}

static json_t *other_data(const plan_trace *t) { return json_object_get(t->doc, "otherData"); }

const json_t *plan_trace_run_options(const plan_trace *t)
{
    json_t *run = json_object_get(other_data(t), "usp_run");
    return json_is_object(run) ? run : NULL;
}

const char *plan_trace_clock(const plan_trace *t)
{
    const char *clock = json_string_value(json_object_get(other_data(t), "clock"));
    return clock ? clock : "";
}

void plan_trace_free(plan_trace *t)
{
    json_decref(t->doc);
    t->doc = NULL;
}

/* Checks that `doc` (stolen) is a trace usp wrote, into *out. */
static usp_status check_document(const char *name, json_t *doc, plan_trace *out)
{
    const char *why = NULL;
    const char *generator = json_string_value(json_object_get(json_object_get(doc, "otherData"), "generator"));
    if (!json_is_object(doc) || !json_is_array(json_object_get(doc, "traceEvents")))
        why = "not a Chrome trace (no traceEvents array)";
    else if (!generator || strncmp(generator, "usp ", 4) != 0)
        why = "a Chrome trace, but not one usp wrote (no otherData.generator \"usp ...\"): write it with usp train "
              "--trace FILE.json";
    if (why) {
        json_decref(doc);
        return usp_error(USP_ERR_CONFIG, "%s: %s", name, why);
    }
    *out = (plan_trace){.doc = doc, .name = name};
    return USP_OK;
}

/* What jansson said of a document it could not read, as an error naming `name`. */
static usp_status unreadable(const char *name, const json_error_t *e)
{
    if (e->line < 0) /* the file itself: missing, unreadable */
        return usp_error(USP_ERR_CONFIG, "%s: cannot read it: %s", name, e->text);
    return usp_error(USP_ERR_CONFIG, "%s: not JSON at line %d, column %d: %s%s", name, e->line, e->column, e->text,
                     strstr(e->text, "end of") ? " (the file is truncated: a run that was killed while writing it?)"
                                               : "");
}

usp_status plan_trace_read(const char *path, plan_trace *out)
{
    *out = (plan_trace){0};
    json_error_t e;
    json_t *doc = json_load_file(path, 0, &e);
    return doc ? check_document(path, doc, out) : unreadable(path, &e);
}

usp_status plan_trace_parse(const char *name, const char *text, plan_trace *out)
{
    *out = (plan_trace){0};
    json_error_t e;
    json_t *doc = json_loads(text, 0, &e);
    return doc ? check_document(name, doc, out) : unreadable(name, &e);
}

/* One finished slice. */
typedef struct slice {
    int pid, tid;
    const char *name, *op; /* op: a call's args.op (NULL for compute and step slices) */
    const char *group;     /* a call's args.group, and its args.seq: which call of the group it is */
    int64_t seq;
    double bytes;          /* a call's args.bytes_sent */
    int64_t step;          /* a step slice's args.step */
    double start, end;     /* microseconds */
    int depth;             /* 0: top level on its thread */
} slice;

typedef struct open_slice {
    const json_t *begin;
} open_slice;

/* Calls visit(s, ctx) for every finished slice, in the file's order of E events; a slice that does not
 * close, or an E without a B: USP_ERR_CONFIG naming the file. */
static usp_status each_slice(const plan_trace *t, int world, void (*visit)(const slice *s, void *ctx), void *ctx)
{
    open_slice *stack = calloc((size_t)world * 3 * DEPTH_MAX, sizeof *stack);
    int *depth = calloc((size_t)world * 3, sizeof *depth);
    if (!stack || !depth) {
        free(stack), free(depth);
        return usp_error(USP_ERR_RUNTIME, "out of memory reading %s", t->name);
    }
    usp_status s = USP_OK;
    const json_t *events = json_object_get(t->doc, "traceEvents"), *e;
    size_t i;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        int pid = (int)json_integer_value(json_object_get(e, "pid"));
        int tid = (int)json_integer_value(json_object_get(e, "tid"));
        if (!ph || (strcmp(ph, "B") != 0 && strcmp(ph, "E") != 0) || pid < 0 || pid >= world || tid < 0 || tid > 2)
            continue; /* metadata and flow events */
        int track = pid * 3 + tid;
        open_slice *top = stack + (size_t)track * DEPTH_MAX;
        if (ph[0] == 'B') {
            if (depth[track] == DEPTH_MAX) {
                s = usp_error(USP_ERR_CONFIG, "%s: event %zu: slices nested deeper than %d on rank %d", t->name, i,
                              DEPTH_MAX, pid);
                break;
            }
            top[depth[track]++].begin = e;
            continue;
        }
        if (depth[track] == 0) {
            s = usp_error(USP_ERR_CONFIG, "%s: event %zu ends a slice that never began (rank %d, thread %d)", t->name,
                          i, pid, tid);
            break;
        }
        const json_t *b = top[--depth[track]].begin, *args = json_object_get(b, "args");
        slice sl = {.pid = pid, .tid = tid, .name = json_string_value(json_object_get(b, "name")),
                    .op = json_string_value(json_object_get(args, "op")),
                    .group = json_string_value(json_object_get(args, "group")),
                    .seq = json_integer_value(json_object_get(args, "seq")),
                    .bytes = json_number_value(json_object_get(args, "bytes_sent")),
                    .step = json_integer_value(json_object_get(args, "step")),
                    .start = json_number_value(json_object_get(b, "ts")),
                    .end = json_number_value(json_object_get(e, "ts")), .depth = depth[track]};
        if (!sl.name)
            sl.name = "";
        visit(&sl, ctx);
    }
    for (int k = 0; s == USP_OK && k < world * 3; k++)
        if (depth[k])
            s = usp_error(USP_ERR_CONFIG, "%s: a slice of rank %d never ends (is the file truncated?)", t->name, k / 3);
    free(stack), free(depth);
    return s;
}

/* The ranks: one past the largest pid of a slice. */
static int trace_world(const plan_trace *t)
{
    int world = 0;
    const json_t *e;
    size_t i;
    json_array_foreach(json_object_get(t->doc, "traceEvents"), i, e) {
        json_int_t pid = json_integer_value(json_object_get(e, "pid"));
        if (pid >= world && pid < 1 << 20)
            world = (int)pid + 1;
    }
    return world;
}

/* Pass 1: every rank's steps (number, start, end), in a growable list. */
typedef struct step_span {
    int rank;
    int64_t step;
    double start, end;
} step_span;

typedef struct step_list {
    step_span *spans;
    size_t n, cap;
    int out_of_memory;
} step_list;

/* Room for one more item of `size` bytes in a list of n of *cap at *items (doubling); 0 when out of memory. */
static int room_for_one(void **items, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 1;
    size_t grown_cap = *cap ? 2 * *cap : 64;
    void *grown = realloc(*items, grown_cap * size);
    if (!grown)
        return 0;
    *items = grown, *cap = grown_cap;
    return 1;
}

static void collect_step(const slice *s, void *ctx)
{
    step_list *l = ctx;
    if (s->tid != TID_STEPS || l->out_of_memory)
        return;
    if (!room_for_one((void **)&l->spans, &l->cap, l->n, sizeof *l->spans)) {
        l->out_of_memory = 1;
        return;
    }
    l->spans[l->n++] = (step_span){s->pid, s->step, s->start, s->end};
}

/* Pass 2: the phases of the chosen step. */
typedef struct phase_sums {
    const step_span *window; /* [world]: each rank's span of the step */
    double *phase_us;        /* [world * PLAN_PHASES] */
    plan_op_rows *ops;       /* the compute ops, the mean over the world's ranks */
    int world;
} phase_sums;

static void add_to_phase(const slice *s, void *ctx)
{
    phase_sums *p = ctx;
    const step_span *w = &p->window[s->pid];
    if (s->tid == TID_STEPS || s->depth > 0 || s->start < w->start || s->start >= w->end)
        return; /* a nested slice ("waiting for peers") is inside its call, already counted */
    plan_phase phase = s->tid == TID_COMPUTE ? compute_phase(s->name) : comm_phase(s->op ? s->op : s->name);
    p->phase_us[(size_t)s->pid * PLAN_PHASES + phase] += s->end - s->start;
    if (s->tid != TID_COMPUTE && s->group)
        return; /* a call of a group: its row is its transfer (add_waits) */
    char name[PLAN_OP_NAME_MAX];
    if (s->tid == TID_COMPUTE || !s->op)
        snprintf(name, sizeof name, "%s", s->name);
    else
        plan_op_call_name(name, sizeof name, s->op, s->bytes);
    plan_op_rows_add(p->ops, name, 1e-6 * (s->end - s->start) / p->world, 1.0 / p->world);
}

/* Pass 3: each call's wait for the last peer. A call of a group is known across the ranks by its group and
 * sequence number (args.group, args.seq); the last member to post it is the one the others waited for, so a
 * member's wait is max(post over the members) - its own post, at most its call's time; the rest is transfer.
 * The clocks of the processes must agree (MPI_Wtime on one host, or the simulator's): an estimate with no
 * barrier added to the run. */
typedef struct call_post {
    const char *group, *op;
    int64_t seq;
    int rank;
    plan_phase phase;
    double bytes;
    double start, end;
} call_post;

typedef struct call_list {
    call_post *calls;
    size_t n, cap;
    int out_of_memory;
} call_list;

static void collect_call(const slice *s, void *ctx)
{
    call_list *l = ctx;
    if (s->tid != TID_COMM || s->depth > 0 || !s->group || l->out_of_memory)
        return;
    if (!room_for_one((void **)&l->calls, &l->cap, l->n, sizeof *l->calls)) {
        l->out_of_memory = 1;
        return;
    }
    const char *op = s->op ? s->op : s->name;
    l->calls[l->n++] = (call_post){s->group, op, s->seq, s->pid, comm_phase(op), s->bytes, s->start, s->end};
}

static int by_call(const void *a, const void *b)
{
    const call_post *x = a, *y = b;
    int c = strcmp(x->group, y->group);
    return c ? c : x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Each rank's wait in the window's calls, by phase, into wait_us[world * PLAN_PHASES]; each call's transfer, the
 * mean over the world's ranks, into its row of ops. */
static void add_waits(call_list *l, const step_span *window, int world, double *wait_us, plan_op_rows *ops)
{
    if (l->n == 0) /* no calls (and no array: qsort's pointer must not be NULL) */
        return;
    qsort(l->calls, l->n, sizeof *l->calls, by_call);
    for (size_t first = 0, end; first < l->n; first = end) {
        double last = l->calls[first].start;
        for (end = first + 1; end < l->n && by_call(&l->calls[first], &l->calls[end]) == 0; end++)
            last = l->calls[end].start > last ? l->calls[end].start : last;
        for (size_t k = first; k < end; k++) {
            const call_post *c = &l->calls[k];
            const step_span *w = &window[c->rank];
            if (c->start < w->start || c->start >= w->end)
                continue;
            double took = c->end - c->start, wait = last - c->start < took ? last - c->start : took;
            wait_us[(size_t)c->rank * PLAN_PHASES + c->phase] += wait;
            char name[PLAN_OP_NAME_MAX];
            plan_op_call_name(name, sizeof name, c->op, c->bytes);
            plan_op_rows_add(ops, name, 1e-6 * (took - wait) / world, 1.0 / world);
        }
    }
}

/* The step every rank completed: `want`, or the last common one (0); each rank's span of it into window[]. */
static usp_status choose_step(const plan_trace *t, const step_list *l, int world, int64_t want, step_span *window,
                              int64_t *step, int64_t *common)
{
    for (size_t k = 0; k < l->n; k++) /* window[r].step: rank r's last step, for now */
        if (l->spans[k].step > window[l->spans[k].rank].step)
            window[l->spans[k].rank].step = l->spans[k].step;
    *common = world > 0 ? window[0].step : 0;
    for (int r = 0; r < world; r++)
        *common = window[r].step < *common ? window[r].step : *common;
    if (*common <= 0)
        return usp_error(USP_ERR_CONFIG, "%s: no training step on %s (a trace of usp train has a \"steps\" track on "
                         "every rank; a run that failed before its first step, or an older trace, has none)", t->name,
                         world > 0 ? "some rank" : "any rank");
    *step = want > 0 ? want : *common;
    if (*step > *common)
        return usp_error(USP_ERR_CONFIG, "%s: step %lld: every rank completed %lld step%s", t->name, (long long)want,
                         (long long)*common, *common > 1 ? "s" : "");
    for (int r = 0; r < world; r++)
        window[r] = (step_span){.rank = r, .step = 0};
    for (size_t k = 0; k < l->n; k++)
        if (l->spans[k].step == *step)
            window[l->spans[k].rank] = l->spans[k];
    for (int r = 0; r < world; r++)
        if (window[r].step != *step)
            return usp_error(USP_ERR_CONFIG, "%s: rank %d has no step %lld", t->name, r, (long long)*step);
    return USP_OK;
}

usp_status plan_trace_step_phases(const plan_trace *t, int64_t want, plan_step_phases *out)
{
    *out = (plan_step_phases){0};
    int world = trace_world(t);
    step_list l = {0};
    step_span *window = calloc((size_t)(world ? world : 1), sizeof *window);
    double *phase_us = calloc((size_t)(world ? world : 1) * PLAN_PHASES, sizeof *phase_us);
    usp_status s = window && phase_us ? USP_OK : usp_error(USP_ERR_RUNTIME, "out of memory reading %s", t->name);
    if (s == USP_OK)
        s = each_slice(t, world, collect_step, &l);
    if (s == USP_OK && l.out_of_memory)
        s = usp_error(USP_ERR_RUNTIME, "out of memory reading the steps of %s", t->name);
    int64_t step = 0, common = 0;
    if (s == USP_OK)
        s = choose_step(t, &l, world, want, window, &step, &common);
    plan_op_rows ops = {0};
    phase_sums sums = {.window = window, .phase_us = phase_us, .ops = &ops, .world = world};
    if (s == USP_OK)
        s = each_slice(t, world, add_to_phase, &sums);
    call_list calls = {0};
    double *wait_us = calloc((size_t)(world ? world : 1) * PLAN_PHASES, sizeof *wait_us);
    if (s == USP_OK && !wait_us)
        s = usp_error(USP_ERR_RUNTIME, "out of memory reading %s", t->name);
    if (s == USP_OK)
        s = each_slice(t, world, collect_call, &calls);
    if (s == USP_OK && calls.out_of_memory)
        s = usp_error(USP_ERR_RUNTIME, "out of memory reading the calls of %s", t->name);
    if (s == USP_OK)
        add_waits(&calls, window, world, wait_us, &ops);
    if (s == USP_OK) {
        *out = (plan_step_phases){.step = step, .steps = common, .steps_compared = 1, .ranks = world, .ops = ops};
        for (int r = 0; r < world; r++) {
            for (int p = 0; p < PLAN_PHASES; p++) {
                out->phase_s[p] += 1e-6 * phase_us[(size_t)r * PLAN_PHASES + p] / world;
                out->wait_s[p] += 1e-6 * wait_us[(size_t)r * PLAN_PHASES + p] / world;
            }
            double step_s = 1e-6 * (window[r].end - window[r].start);
            out->step_s = step_s > out->step_s ? step_s : out->step_s;
        }
        for (int p = 0; p < PLAN_PHASES; p++)
            *(plan_phase_is_comm((plan_phase)p) ? &out->comm_s : &out->compute_s) += out->phase_s[p];
    }
    free(l.spans), free(window), free(phase_us), free(wait_us), free(calls.calls);
    return s;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0 .. n-1] (reordered): the middle value, or the mean of the two middle ones. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Figures of one step that the median takes, in a fixed order: each phase, each phase's transfer, compute,
 * communication, the step. */
#define MEDIAN_FIGURES (2 * PLAN_PHASES + 3)

static void figures_of(const plan_step_phases *p, double *f)
{
    for (int q = 0; q < PLAN_PHASES; q++)
        f[q] = p->phase_s[q], f[PLAN_PHASES + q] = p->phase_s[q] - p->wait_s[q];
    f[2 * PLAN_PHASES] = p->compute_s, f[2 * PLAN_PHASES + 1] = p->comm_s, f[2 * PLAN_PHASES + 2] = p->step_s;
}

/* The row of figure f (figures_of's order) in lo_s and hi_s, or -1 for a transfer. */
static int row_of_figure(int f)
{
    return f < PLAN_PHASES ? f : f < 2 * PLAN_PHASES ? -1 : PLAN_ROW_COMPUTE + (f - 2 * PLAN_PHASES);
}

/* Every op row of steps[0 .. k-1] (each step's rows) into *out, its seconds and calls the median over the k steps
 * (0 in a step without it), in the order the rows first appear; scratch: room for 2k values. */
static void op_rows_median(const plan_op_rows *steps, int k, double *scratch, plan_op_rows *out)
{
    *out = (plan_op_rows){0};
    for (int i = 0; i < k; i++) {
        out->dropped = steps[i].dropped > out->dropped ? steps[i].dropped : out->dropped;
        for (int j = 0; j < steps[i].n; j++)
            plan_op_rows_add(out, steps[i].rows[j].name, 0, 0); /* the union of the names */
    }
    double *seconds = scratch, *calls = scratch + k;
    for (int j = 0; j < out->n; j++) {
        for (int i = 0; i < k; i++) {
            const plan_op_row *r = plan_op_rows_find(&steps[i], out->rows[j].name);
            seconds[i] = r ? r->s : 0, calls[i] = r ? r->calls : 0;
        }
        out->rows[j].s = median(seconds, k), out->rows[j].calls = median(calls, k);
    }
}

usp_status plan_trace_median_phases(const plan_trace *t, int k, plan_step_phases *out)
{
    USP_CHECK(plan_trace_step_phases(t, 0, out));
    double own[MEDIAN_FIGURES];
    figures_of(out, own);
    for (int f = 0; f < MEDIAN_FIGURES; f++)
        if (row_of_figure(f) >= 0)
            out->lo_s[row_of_figure(f)] = out->hi_s[row_of_figure(f)] = own[f];
    if (k <= 1)
        return USP_OK;
    if (k > out->steps)
        return usp_error(USP_ERR_CONFIG, "%s: a median over the last %d steps, but every rank completed %lld; give "
                         "at most %lld, or train more steps", t->name, k, (long long)out->steps,
                         (long long)out->steps);
    /* values[i][f]: figure f of the i-th last step; then k more for one figure's column */
    double *values = calloc((size_t)k * (MEDIAN_FIGURES + 1), sizeof *values);
    plan_op_rows *ops = calloc((size_t)k, sizeof *ops); /* each step's */
    if (!values || !ops) {
        free(values), free(ops);
        return usp_error(USP_ERR_RUNTIME, "out of memory reading %s", t->name);
    }
    double *column = values + (size_t)k * MEDIAN_FIGURES;
    const int64_t last = out->step;
    usp_status s = USP_OK;
    figures_of(out, values); /* the last step, read above */
    ops[0] = out->ops;
    for (int i = 1; i < k && s == USP_OK; i++) {
        plan_step_phases one;
        s = plan_trace_step_phases(t, last - i, &one);
        if (s == USP_OK)
            figures_of(&one, values + (size_t)i * MEDIAN_FIGURES), ops[i] = one.ops;
    }
    double m[MEDIAN_FIGURES];
    for (int f = 0; f < MEDIAN_FIGURES && s == USP_OK; f++) {
        for (int i = 0; i < k; i++)
            column[i] = values[(size_t)i * MEDIAN_FIGURES + f];
        m[f] = median(column, k); /* sorts the column */
        if (row_of_figure(f) >= 0)
            out->lo_s[row_of_figure(f)] = column[0], out->hi_s[row_of_figure(f)] = column[k - 1];
    }
    if (s == USP_OK) {
        for (int q = 0; q < PLAN_PHASES; q++)
            out->phase_s[q] = m[q], out->wait_s[q] = m[q] - m[PLAN_PHASES + q];
        out->compute_s = m[2 * PLAN_PHASES], out->comm_s = m[2 * PLAN_PHASES + 1];
        out->step_s = m[2 * PLAN_PHASES + 2], out->steps_compared = k;
        op_rows_median(ops, k, values, &out->ops); /* the figures' medians are taken: values is scratch now */
    }
    free(values), free(ops);
    return s;
}
