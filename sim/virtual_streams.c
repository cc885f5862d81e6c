/* Virtual streams (virtual_streams.h): lanes of virtual time, handed out as
 * stream and event handles by a decorator of the rank's compute backend. */
#include "sim/virtual_streams.h"

#include <stdlib.h>

#include "sim/backend_forwarding.h"
#include "sim/schedule_log.h"
#include "sim/sim_internal.h"

/* A stream handle: only its lane. An event handle: the time it marks, and its record in the
 * schedule log (sim/schedule_log.h) when the rank logs one. */
typedef struct lane_stream {
    int lane;
} lane_stream;

typedef struct lane_event {
    double t;
    long record;
} lane_event;

/* A call on a lane > 0, kept until lane 0 has passed its end. */
typedef struct sim_side_call {
    double t_post, t_start, t_end;
} sim_side_call;

typedef struct virtual_streams {
    sim_forward_target target; /* first: the forwarding slots find the wrapped backend here */
    usp_backend_t *inner;
    sim_rank *rank;
    usp_backend_i iface;       /* the handle's table: inner's ops forwarded, streams of our own */
} virtual_streams;

int sim_stream_lane(const sim_rank *r, const usp_stream_t *stream)
{
    return r->virtual_streams && stream ? ((const lane_stream *)(const void *)stream)->lane : 0;
}

double *sim_lane_clock(sim_rank *r, int lane) { return lane == 0 ? &r->clock : &r->lane_clock[lane]; }

double sim_lanes_end(const sim_rank *r)
{
    double end = r->clock;
    for (int i = 1; i < r->n_lanes; i++)
        end = r->lane_clock[i] > end ? r->lane_clock[i] : end;
    return end;
}

static double overlap(double a0, double a1, double b0, double b1)
{
    double lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0.0;
}

/* Lane 0 was busy over [start, end] (compute, or a call of its own): what of the calls on other lanes
 * ran then is hidden, so that step = compute + communication + waiting - hidden holds. */
static void hide_beside_lane0(sim_rank *r, double start, double end)
{
    int kept = 0;
    for (int i = 0; i < r->n_side_calls; i++) {
        const sim_side_call *c = &r->side_calls[i];
        r->hidden_wait_s += overlap(start, end, c->t_post, c->t_start);
        r->hidden_comm_s += overlap(start, end, c->t_start, c->t_end);
        if (c->t_end > end) /* lane 0 only moves on: a call it has passed can hide nothing more */
            r->side_calls[kept++] = *c;
    }
    r->n_side_calls = kept;
}

void sim_lanes_compute(sim_rank *r, int lane, double start, double end)
{
    if (lane == 0 && r->n_side_calls > 0)
        hide_beside_lane0(r, start, end);
}

usp_status sim_lanes_call_done(sim_rank *r, int lane, double t_post, double t_start, double t_end)
{
    if (lane == 0 && r->n_side_calls > 0) /* e.g. an all-to-all beside a gradient bucket's all-reduce */
        hide_beside_lane0(r, t_post, t_end);
    if (lane == 0 || t_end <= r->clock) /* lane 0 is past it already: nothing can run beside it */
        return USP_OK;
    if (r->n_side_calls == r->cap_side_calls) {
        int cap = r->cap_side_calls ? 2 * r->cap_side_calls : 8;
        sim_side_call *grown = realloc(r->side_calls, (size_t)cap * sizeof *grown);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory noting a call of rank %d on stream %d", r->id, lane);
        r->side_calls = grown, r->cap_side_calls = cap;
    }
    r->side_calls[r->n_side_calls++] = (sim_side_call){t_post, t_start, t_end};
    return USP_OK;
}

void sim_lanes_free(sim_rank *r)
{
    free(r->lane_clock);
    free(r->side_calls);
    r->lane_clock = NULL, r->side_calls = NULL;
    r->n_lanes = r->cap_lanes = r->n_side_calls = r->cap_side_calls = 0;
}

/* --- the decorator's stream and event slots -------------------------------- */

static sim_rank *rank_of(void *ctx) { return ((virtual_streams *)ctx)->rank; }

static double *clock_of(void *ctx, usp_stream_t *stream)
{
    sim_rank *r = rank_of(ctx);
    return sim_lane_clock(r, sim_stream_lane(r, stream));
}

/* The host waits for the stream: lane 0 joins it (NULL: every lane). */
static usp_status vs_synchronize(void *ctx, usp_stream_t *stream)
{
    sim_rank *r = rank_of(ctx);
    /* The log keeps what the cuda backend does: NULL is its own compute stream (non-blocking), and
     * cudaStreamSynchronize waits for that stream alone; the clocks join every lane (what the host reads). */
    sim_sched_note_sync(r, sim_stream_lane(r, stream));
    double until = stream ? *clock_of(ctx, stream) : sim_lanes_end(r);
    r->clock = until > r->clock ? until : r->clock;
    return USP_OK;
}

/* A new stream starts where the host is: at lane 0's clock. */
static usp_status vs_stream_create(void *ctx, usp_stream_t **out)
{
    sim_rank *r = rank_of(ctx);
    if (r->n_lanes == 0)
        r->n_lanes = 1; /* lane 0 lives in r->clock */
    if (r->n_lanes >= r->cap_lanes) {
        int cap = r->cap_lanes ? 2 * r->cap_lanes : 4;
        double *grown = realloc(r->lane_clock, (size_t)cap * sizeof *grown);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory creating a stream of rank %d", r->id);
        r->lane_clock = grown, r->cap_lanes = cap;
    }
    lane_stream *s = malloc(sizeof *s);
    if (!s)
        return usp_error(USP_ERR_RUNTIME, "out of memory creating a stream of rank %d", r->id);
    s->lane = r->n_lanes++;
    r->lane_clock[s->lane] = r->clock;
    *out = (usp_stream_t *)(void *)s;
    return USP_OK;
}

/* After usp_stream_destroy's synchronize; the lane's number is not reused, so a lane is one stream. */
static void vs_stream_destroy(void *ctx, usp_stream_t *stream)
{
    (void)ctx;
    free(stream);
}

static usp_status vs_event_create(void *ctx, usp_event_t **out)
{
    lane_event *e = malloc(sizeof *e);
    if (!e)
        return usp_error(USP_ERR_RUNTIME, "out of memory creating an event of rank %d", rank_of(ctx)->id);
    e->t = 0.0; /* never recorded: waiting on it waits for nothing, as in CUDA */
    e->record = -1;
    *out = (usp_event_t *)(void *)e;
    return USP_OK;
}

static void vs_event_destroy(void *ctx, usp_event_t *event)
{
    (void)ctx;
    free(event);
}

static usp_status vs_event_record(void *ctx, usp_event_t *event, usp_stream_t *stream)
{
    lane_event *e = (lane_event *)(void *)event;
    e->t = *clock_of(ctx, stream);
    e->record = sim_sched_note_record(rank_of(ctx), sim_stream_lane(rank_of(ctx), stream));
    return USP_OK;
}

static usp_status vs_stream_wait_event(void *ctx, usp_stream_t *stream, usp_event_t *event)
{
    const lane_event *e = (const lane_event *)(void *)event;
    double *lane = clock_of(ctx, stream), t = e->t;
    *lane = t > *lane ? t : *lane;
    sim_sched_note_wait(rank_of(ctx), sim_stream_lane(rank_of(ctx), stream), e->record);
    return USP_OK;
}

static void vs_destroy(void *ctx)
{
    virtual_streams *v = ctx;
    usp_backend_destroy(v->inner); /* holds no allocation: every one went through the decorator's handle */
    free(v);
}

usp_status sim_streams_wrap(sim_rank *r, usp_backend_t *inner, usp_backend_t **out)
{
    *out = NULL;
    virtual_streams *v = calloc(1, sizeof *v);
    if (!v) {
        usp_backend_destroy(inner);
        return usp_error(USP_ERR_RUNTIME, "out of memory wrapping the backend of rank %d", r->id);
    }
    const usp_backend_i *in = usp_backend_iface_of(inner);
    v->target = (sim_forward_target){.iface = in, .ctx = usp_backend_context_of(inner, in)};
    v->inner = inner;
    v->rank = r;
    sim_forwarding_slots(in, &v->iface);
    v->iface.synchronize = vs_synchronize;
    v->iface.stream_create = vs_stream_create;
    v->iface.stream_destroy = vs_stream_destroy;
    v->iface.event_create = vs_event_create;
    v->iface.event_destroy = vs_event_destroy;
    v->iface.event_record = vs_event_record;
    v->iface.stream_wait_event = vs_stream_wait_event;
    v->iface.destroy = vs_destroy;
    usp_status s = usp_backend_create(&v->iface, v, out);
    if (s != USP_OK) {
        vs_destroy(v);
        return s;
    }
    r->virtual_streams = 1;
    return USP_OK;
}
