/* Measured op times (usp_backend_time_ops in core/ops/ops.h): every op the wrappers
 * run inside OPS_TIMED becomes a compute span of the trace, the same record
 * the simulator makes from its cost model, so a measured run and a modelled
 * one draw the same timeline (viz/chrome_trace.h) and compare op by op
 * (plan/compare.h).
 *
 * Two ways to time, chosen by the backend's slots:
 * - host: the clock before and after the slot. The cpu backend completes an op
 *   before it returns, so that is the op's duration.
 * - device: a backend that enqueues (cuda) returns at once, so a timing event
 *   is recorded on the op's stream before and after it and the span is read
 *   later, at usp_backend_flush_op_times, as elapsed time from an origin event
 *   recorded when timing began at a known clock time. Nothing waits for the
 *   device while the step runs. */
#include <stdlib.h>

#include "core/ops/ops_internal.h"
#include "core/trace/trace.h"

#define OPEN_MAX 4 /* ops inside ops: none today; a few levels are kept rather than mismatched */

/* An op whose events are recorded but not yet read. */
typedef struct device_span {
    const char *op;
    double flops, bytes;
    usp_event_t *start, *end;
} device_span;

typedef struct open_span {
    const char *op;
    double flops, bytes;
    double host_start;     /* host timing */
    usp_event_t *start;    /* device timing */
} open_span;

struct ops_timer {
    usp_trace_t *trace;
    int rank;
    double (*clock)(const void *clock_ctx);
    const void *clock_ctx;
    const char *op;        /* the op ops_report_cost announced last, and its cost */
    double flops, bytes;
    open_span open[OPEN_MAX];
    int n_open;
    int device;            /* 1: timed between device events */
    usp_event_t *origin;   /* device: reached at clock time origin_s */
    double origin_s;
    device_span *spans;
    size_t n_spans, cap_spans;
    usp_status failed;     /* the first event that could not be made or recorded: spans stop there */
};

void ops_timer_note(struct ops_timer *timer, const char *op, double flops, double bytes)
{
    timer->op = op, timer->flops = flops, timer->bytes = bytes;
}

static usp_event_t *record_event(usp_backend_t *be, usp_stream_t *stream)
{
    struct ops_timer *t = be->timer;
    usp_event_t *e = NULL;
    if (t->failed == USP_OK)
        t->failed = be->iface->timing_event_create(be->context, &e);
    if (t->failed == USP_OK)
        t->failed = be->iface->event_record(be->context, e, stream);
    if (t->failed != USP_OK && e)
        be->iface->event_destroy(be->context, e), e = NULL;
    return e;
}

void ops_timer_begin(usp_backend_t *be, usp_stream_t *stream)
{
    struct ops_timer *t = be->timer;
    open_span span = {.op = t->op ? t->op : "op", .flops = t->flops, .bytes = t->bytes};
    if (t->device)
        span.start = record_event(be, stream);
    else
        span.host_start = t->clock(t->clock_ctx);
    if (t->n_open < OPEN_MAX)
        t->open[t->n_open] = span;
    t->n_open++;
}

usp_status ops_timer_end(usp_backend_t *be, usp_stream_t *stream, usp_status status)
{
    struct ops_timer *t = be->timer;
    if (t->n_open-- > OPEN_MAX)
        return status;
    const open_span *o = &t->open[t->n_open];
    if (!t->device) { /* a span that cannot be recorded (out of memory) is left out, as the simulator does */
        (void)usp_trace_record_compute(t->trace, t->rank, o->op, o->host_start, t->clock(t->clock_ctx), o->flops,
                                       o->bytes);
        return status;
    }
    usp_event_t *end = o->start ? record_event(be, stream) : NULL;
    if (end && t->n_spans == t->cap_spans) {
        size_t cap = t->cap_spans ? 2 * t->cap_spans : 1024;
        device_span *grown = realloc(t->spans, cap * sizeof *grown);
        if (grown)
            t->spans = grown, t->cap_spans = cap;
    }
    if (end && t->n_spans < t->cap_spans)
        t->spans[t->n_spans++] = (device_span){o->op, o->flops, o->bytes, o->start, end};
    else {
        if (o->start)
            be->iface->event_destroy(be->context, o->start);
        if (end)
            be->iface->event_destroy(be->context, end);
    }
    return status;
}

usp_status usp_backend_time_ops(usp_backend_t *be, usp_trace_t *trace, int rank,
                                double (*clock)(const void *clock_ctx), const void *clock_ctx)
{
    USP_ASSERT(!be->timer, "usp_backend_time_ops called twice on one backend");
    struct ops_timer *t;
    USP_CHECK(usp_calloc((void **)&t, 1, sizeof *t, "the op timer"));
    *t = (struct ops_timer){.trace = trace, .rank = rank, .clock = clock, .clock_ctx = clock_ctx,
                            .device = be->iface->timing_event_create && be->iface->event_elapsed};
    be->timer = t;
    if (!t->device)
        return USP_OK;
    /* the origin: recorded on an idle device, so it is reached at the clock time read right after. The
     * slots are called as the rest of this file calls them (ops.c's wrappers call into this file); the two
     * synchronisations are host waits, counted. */
    USP_ASSERT(be->iface->synchronize, "backend %s times ops on its device but has no synchronize slot",
               be->iface->name);
    ops_count_host_wait(be), ops_count_host_wait(be);
    usp_status s = be->iface->synchronize(be->context, NULL);
    if (s == USP_OK)
        s = be->iface->timing_event_create(be->context, &t->origin);
    if (s == USP_OK)
        s = be->iface->event_record(be->context, t->origin, NULL);
    if (s == USP_OK)
        s = be->iface->synchronize(be->context, NULL);
    t->origin_s = clock(clock_ctx);
    if (s != USP_OK)
        ops_timer_free(be);
    return s;
}

usp_status usp_backend_flush_op_times(usp_backend_t *be)
{
    struct ops_timer *t = be->timer;
    if (!t || !t->device)
        return USP_OK;
    usp_status s = t->failed;
    if (t->n_spans > 0)
        ops_count_host_wait(be); /* event_elapsed waits for the last span's end */
    for (size_t i = 0; i < t->n_spans; i++) {
        const device_span *d = &t->spans[i];
        /* the duration between the op's own events: CUDA's elapsed times are floats of milliseconds, which
         * from the origin of a long run would round a few-microsecond kernel away */
        double from = 0, duration = 0;
        if (s == USP_OK)
            s = be->iface->event_elapsed(be->context, t->origin, d->start, &from);
        if (s == USP_OK)
            s = be->iface->event_elapsed(be->context, d->start, d->end, &duration);
        if (s == USP_OK)
            s = usp_trace_record_compute(t->trace, t->rank, d->op, t->origin_s + from,
                                         t->origin_s + from + duration, d->flops, d->bytes);
        be->iface->event_destroy(be->context, d->start);
        be->iface->event_destroy(be->context, d->end);
    }
    t->n_spans = 0;
    return s;
}

void ops_timer_free(usp_backend_t *be)
{
    struct ops_timer *t = be->timer;
    if (!t)
        return;
    for (size_t i = 0; i < t->n_spans; i++) {
        be->iface->event_destroy(be->context, t->spans[i].start);
        be->iface->event_destroy(be->context, t->spans[i].end);
    }
    if (t->origin)
        be->iface->event_destroy(be->context, t->origin);
    free(t->spans);
    free(t);
    be->timer = NULL;
}
