/* The lazy backend's device: deferred streams, events and the live set (see lazy_device.h). */
#include "backends/lazy/lazy_device.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/lazy/lazy_order.h"
#include "core/ops/backend_impl.h"

struct usp_stream {
    lazy_op *head, *tail;
    uint64_t last_ticket; /* of the last op enqueued here */
    usp_stream_t *next_created;
    int lane;             /* the order checker's (lazy_order.h): 0 for the default stream */
    lazy_clock clock;     /* what its next op is ordered after */
};

struct usp_event {
    usp_event_t *next_created;
    usp_stream_t *stream; /* NULL: never recorded (waiting on it waits for nothing, as in CUDA) */
    uint64_t ticket;
    lazy_clock clock;     /* its stream's clock when recorded */
};

/* Memory freed in the default stream's order while another stream still held older work: released
 * once no stream has work older than the free, so a missing event gives wrong numbers, not a crash. */
typedef struct grave {
    struct grave *next;
    void *ptr;
    uint64_t ticket; /* of the free */
} grave;

typedef struct live_buffer {
    uintptr_t addr;
    size_t bytes;
    lazy_history history; /* its accesses that the host does not know complete */
} live_buffer;

struct lazy_device {
    usp_stream_t default_stream;
    usp_stream_t *created; /* streams from stream_create */
    usp_event_t *events;   /* events from event_create */
    uint64_t tickets;
    usp_status error;      /* the first failure of a queued op since the last synchronisation */
    int discarding;        /* destroying: copies to the host are dropped */
    grave *graves;
    live_buffer *live;     /* sorted by address */
    size_t n_live, cap_live;
    usp_backend_t *owner;  /* the handle the waits inside an op are counted on (usp_backend_count_host_wait) */
    lazy_clock host;       /* what the host knows complete: the clocks of the streams it synchronised */
    uint64_t issued[LAZY_LANES]; /* checked ops per lane so far: the last epoch */
    unsigned char lane_used[LAZY_LANES]; /* 1: lane l has a stream (lane 0, the default one, always) */
};

static const usp_backend_i *cpu(void) { return usp_backend_cpu_interface(); }

usp_status lazy_device_create(lazy_device **out)
{
    USP_CHECK(usp_calloc((void **)out, 1, sizeof **out, "the lazy backend's device"));
    (*out)->lane_used[0] = 1;
    return USP_OK;
}

/* Index of the first live buffer whose address is > addr. */
static size_t upper_bound(const lazy_device *d, uintptr_t addr)
{
    size_t lo = 0, hi = d->n_live;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->live[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The live buffer `ptr` points into, or NULL. */
static live_buffer *live_of(const lazy_device *d, const void *ptr)
{
    size_t at = upper_bound(d, (uintptr_t)ptr);
    return at > 0 && (uintptr_t)ptr - d->live[at - 1].addr < d->live[at - 1].bytes ? &d->live[at - 1] : NULL;
}

usp_status lazy_device_alloc(lazy_device *d, size_t bytes, void **out)
{
    if (d->n_live == d->cap_live) {
        size_t cap = d->cap_live ? 2 * d->cap_live : 16;
        live_buffer *grown = realloc(d->live, cap * sizeof *grown);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory growing the lazy backend's live set");
        d->live = grown;
        d->cap_live = cap;
    }
    USP_CHECK(cpu()->alloc(NULL, bytes, out));
    size_t at = upper_bound(d, (uintptr_t)*out);
    memmove(d->live + at + 1, d->live + at, (d->n_live - at) * sizeof *d->live);
    d->live[at] = (live_buffer){.addr = (uintptr_t)*out, .bytes = bytes};
    d->n_live++;
    return USP_OK;
}

void lazy_device_set_owner(lazy_device *d, usp_backend_t *owner) { d->owner = owner; }

static usp_stream_t *stream_or_default(lazy_device *d, usp_stream_t *s) { return s ? s : &d->default_stream; }

static lazy_op *append(lazy_device *d, usp_stream_t *stream)
{
    lazy_op *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    usp_stream_t *s = stream_or_default(d, stream);
    op->ticket = ++d->tickets;
    s->last_ticket = op->ticket;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    return op;
}

/* 1 when a stream other than the default one still holds work enqueued before `ticket`. */
static int older_work_elsewhere(const lazy_device *d, uint64_t ticket)
{
    for (const usp_stream_t *s = d->created; s; s = s->next_created)
        if (s->head && s->head->ticket < ticket)
            return 1;
    return 0;
}

static void release_graves(lazy_device *d)
{
    for (grave **at = &d->graves; *at;) {
        grave *g = *at;
        if (!d->discarding && older_work_elsewhere(d, g->ticket)) {
            at = &g->next;
            continue;
        }
        *at = g->next;
        cpu()->free(NULL, g->ptr);
        free(g);
    }
}

/* The free of op->p[0] (op->z[0] bytes) reached its turn on the default stream. Work enqueued
 * earlier on another stream and not run yet must not use it: on a GPU it would run on freed memory. */
static usp_status run_free(lazy_device *d, const lazy_op *op)
{
    uintptr_t lo = (uintptr_t)op->frees, hi = lo + op->z[0];
    usp_status st = USP_OK;
    for (const usp_stream_t *s = d->created; s && st == USP_OK; s = s->next_created)
        for (const lazy_op *o = s->head; o && o->ticket < op->ticket && st == USP_OK; o = o->next)
            for (int i = 0; i < LAZY_MAX_POINTERS; i++)
                if ((uintptr_t)o->p[i] >= lo && (uintptr_t)o->p[i] < hi) {
                    st = usp_error(USP_ERR_RUNTIME, "lazy backend: a buffer was freed while %s, enqueued before "
                                   "the free on another stream, still uses it: wait for an event recorded after "
                                   "that work on the default stream before usp_buffer_free", o->name);
                    break;
                }
    grave *g = malloc(sizeof *g);
    if (!g || !older_work_elsewhere(d, op->ticket)) {
        free(g);
        cpu()->free(NULL, op->frees);
        return st;
    }
    *g = (grave){d->graves, op->frees, op->ticket};
    d->graves = g;
    return st;
}

void lazy_device_free(lazy_device *d, void *ptr)
{
    size_t at = upper_bound(d, (uintptr_t)ptr);
    USP_ASSERT(at > 0 && d->live[at - 1].addr == (uintptr_t)ptr, "lazy backend: free of %p, not a live buffer", ptr);
    size_t bytes = d->live[at - 1].bytes;
    lazy_history_clear(&d->live[at - 1].history); /* the next buffer at this address starts afresh */
    memmove(d->live + at - 1, d->live + at, (d->n_live - at) * sizeof *d->live);
    d->n_live--;
    lazy_op *op = append(d, NULL);
    if (!op) { /* no memory to defer it: wait for the default stream instead, then free */
        usp_backend_count_host_wait(d->owner);
        (void)lazy_device_synchronize(d, NULL);
        cpu()->free(NULL, ptr);
        return;
    }
    op->name = "free";
    op->frees = ptr;
    op->z[0] = bytes;
}

usp_status lazy_device_enqueue_array(lazy_device *d, usp_stream_t *stream, const char *name, lazy_run_fn run,
                                     lazy_op **out, int n, void *const *ptrs)
{
    USP_ASSERT(n <= LAZY_MAX_POINTERS, "%s: %d pointers, at most %d", name, n, LAZY_MAX_POINTERS);
    for (int i = 0; i < n; i++)
        if (ptrs[i] && !live_of(d, ptrs[i]))
            return usp_error(USP_ERR_RUNTIME, "lazy backend: %s was given %p (argument %d), which is not in a live "
                             "buffer: freed already, or not backend memory", name, ptrs[i], i + 1);
    lazy_op *op = append(d, stream);
    if (!op)
        return usp_error(USP_ERR_RUNTIME, "out of memory queueing %s on the lazy backend", name);
    op->run = run;
    op->name = name;
    memcpy(op->p, ptrs, (size_t)n * sizeof *ptrs);
    *out = op;
    return USP_OK;
}

usp_status lazy_device_enqueue(lazy_device *d, usp_stream_t *stream, const char *name, lazy_run_fn run,
                               lazy_op **out, int n, ...)
{
    USP_ASSERT(n <= LAZY_MAX_POINTERS, "%s: %d pointers, at most %d", name, n, LAZY_MAX_POINTERS);
    void *ptrs[LAZY_MAX_POINTERS];
    va_list args;
    va_start(args, n);
    for (int i = 0; i < n; i++)
        ptrs[i] = va_arg(args, void *);
    va_end(args);
    return lazy_device_enqueue_array(d, stream, name, run, out, n, ptrs);
}

static void run_until(lazy_device *d, usp_stream_t *s, uint64_t ticket);

static void execute(lazy_device *d, lazy_op *op)
{
    usp_status st = USP_OK;
    if (op->wait_stream)
        run_until(d, op->wait_stream, op->wait_ticket);
    else if (op->host_fn)
        op->host_fn(op->host_arg);
    else if (op->frees)
        st = run_free(d, op);
    else if (op->run && !(d->discarding && op->writes_host))
        st = op->run(op);
    if (st != USP_OK && d->error == USP_OK)
        d->error = st;
    free(op->owned);
    free(op);
}

/* Runs s's ops with tickets <= ticket. A wait inside waits only for smaller tickets, so this ends. */
static void run_until(lazy_device *d, usp_stream_t *s, uint64_t ticket)
{
    while (s->head && s->head->ticket <= ticket) {
        lazy_op *op = s->head;
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        execute(d, op);
    }
}

usp_status lazy_device_run_queued(lazy_device *d, usp_stream_t *stream)
{
    run_until(d, stream_or_default(d, stream), UINT64_MAX);
    release_graves(d);
    usp_status st = d->error;
    d->error = USP_OK;
    return st;
}

usp_status lazy_device_synchronize(lazy_device *d, usp_stream_t *stream)
{
    lazy_clock_join(&d->host, &stream_or_default(d, stream)->clock);
    return lazy_device_run_queued(d, stream);
}

usp_status lazy_device_check(lazy_device *d, usp_stream_t *stream, const char *what, const usp_access *a, int n)
{
    usp_stream_t *s = stream_or_default(d, stream);
    lazy_clock_join(&s->clock, &d->host);
    const lazy_who who = {s->lane, ++d->issued[s->lane], what};
    s->clock.at[s->lane] = who.epoch;
    for (int i = 0; i < n; i++) {
        if (!a[i].ptr || a[i].bytes == 0)
            continue;
        live_buffer *b = live_of(d, a[i].ptr);
        if (!b)
            continue; /* not this device's memory: the caller's own checks refuse it (enqueue, the communicator) */
        uintptr_t lo = (uintptr_t)a[i].ptr, end = b->addr + b->bytes;
        uintptr_t hi = a[i].bytes > end - lo ? end : lo + a[i].bytes;
        USP_CHECK(lazy_history_access(&b->history, b->addr, lo, hi, a[i].writes, who, &s->clock, &d->host));
    }
    return USP_OK;
}

void lazy_device_destroy(lazy_device *d)
{
    if (!d)
        return;
    d->discarding = 1;
    for (usp_stream_t *s = d->created; s; s = s->next_created)
        run_until(d, s, UINT64_MAX);
    run_until(d, &d->default_stream, UINT64_MAX);
    release_graves(d);
    while (d->created) {
        usp_stream_t *next = d->created->next_created;
        free(d->created);
        d->created = next;
    }
    while (d->events) {
        usp_event_t *next = d->events->next_created;
        free(d->events);
        d->events = next;
    }
    for (size_t i = 0; i < d->n_live; i++) { /* the caller's leak: usp_backend_destroy frees every buffer first */
        lazy_history_clear(&d->live[i].history);
        cpu()->free(NULL, (void *)d->live[i].addr);
    }
    free(d->live);
    free(d);
}

usp_status lazy_device_stream_create(lazy_device *d, usp_stream_t **out)
{
    int lane = 1;
    while (lane < LAZY_LANES && d->lane_used[lane])
        lane++;
    if (lane == LAZY_LANES)
        return usp_error(USP_ERR_RUNTIME, "lazy backend: %d streams alive at once, the most its order checker "
                         "follows (LAZY_LANES, backends/lazy/lazy_order.h)", LAZY_LANES);
    USP_CHECK(usp_calloc((void **)out, 1, sizeof **out, "a lazy stream"));
    d->lane_used[lane] = 1;
    (*out)->lane = lane;
    (*out)->clock = d->host;
    (*out)->next_created = d->created;
    d->created = *out;
    return USP_OK;
}

static void forget_waits_on(usp_stream_t *queue, const usp_stream_t *gone)
{
    for (lazy_op *op = queue->head; op; op = op->next)
        if (op->wait_stream == gone)
            op->wait_stream = NULL;
}

void lazy_device_stream_destroy(lazy_device *d, usp_stream_t *stream)
{
    run_until(d, stream, UINT64_MAX); /* synchronised by the caller: nothing left, normally */
    lazy_clock_join(&d->host, &stream->clock);
    d->lane_used[stream->lane] = 0; /* a later stream on this lane goes on from its last epoch */
    for (usp_stream_t **at = &d->created; *at; at = &(*at)->next_created)
        if (*at == stream) {
            *at = stream->next_created;
            break;
        }
    /* its work is done: waits for it and events on it have nothing left to wait for */
    for (usp_event_t *e = d->events; e; e = e->next_created)
        if (e->stream == stream)
            e->stream = NULL;
    forget_waits_on(&d->default_stream, stream);
    for (usp_stream_t *s = d->created; s; s = s->next_created)
        forget_waits_on(s, stream);
    free(stream);
}

usp_status lazy_device_event_create(lazy_device *d, usp_event_t **out)
{
    USP_CHECK(usp_calloc((void **)out, 1, sizeof **out, "a lazy event"));
    (*out)->next_created = d->events;
    d->events = *out;
    return USP_OK;
}

void lazy_device_event_destroy(lazy_device *d, usp_event_t *event)
{
    for (usp_event_t **at = &d->events; *at; at = &(*at)->next_created)
        if (*at == event) {
            *at = event->next_created;
            break;
        }
    free(event);
}

usp_status lazy_device_event_record(lazy_device *d, usp_event_t *event, usp_stream_t *stream)
{
    usp_stream_t *s = stream_or_default(d, stream);
    event->stream = s;
    event->ticket = s->last_ticket;
    lazy_clock_join(&s->clock, &d->host);
    event->clock = s->clock;
    return USP_OK;
}

usp_status lazy_device_stream_wait_event(lazy_device *d, usp_stream_t *stream, usp_event_t *event)
{
    lazy_clock_join(&stream_or_default(d, stream)->clock, &event->clock); /* ordered, whether or not it ran */
    const usp_stream_t *s = event->stream;
    if (!s || !s->head || s->head->ticket > event->ticket) /* never recorded, or its work has run */
        return USP_OK;
    lazy_op *op = append(d, stream);
    if (!op)
        return usp_error(USP_ERR_RUNTIME, "out of memory queueing an event wait on the lazy backend");
    op->name = "stream_wait_event";
    op->wait_stream = event->stream;
    op->wait_ticket = event->ticket;
    return USP_OK;
}

usp_status lazy_device_launch_host_func(lazy_device *d, usp_stream_t *stream, void (*fn)(void *), void *arg)
{
    lazy_op *op = append(d, stream);
    if (!op)
        return usp_error(USP_ERR_RUNTIME, "out of memory queueing a host function on the lazy backend");
    op->name = "host_func";
    op->host_fn = fn;
    op->host_arg = arg;
    return USP_OK;
}
