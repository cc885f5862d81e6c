/* The device the lazy backend pretends to be: streams that hold their work
 * until someone must wait for it, events between them, and the set of live
 * buffers.
 *
 * Work runs only at a synchronisation point (usp_backend_synchronize, a
 * blocking op), or when a stream being run reaches a wait on an event of
 * another stream: then that stream runs up to the event. Every enqueued op
 * takes a ticket from one counter, an event remembers the ticket of the last
 * op of its stream, and a wait only ever waits for smaller tickets, so running
 * the queues always terminates and in one order only: the same program gives
 * the same result on every run. */
#ifndef USP_LAZY_DEVICE_H
#define USP_LAZY_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "core/ops/backend_impl.h"

typedef struct lazy_device lazy_device;
typedef struct lazy_op lazy_op;

/* How a queued op runs, from the arguments saved at enqueue. */
typedef usp_status (*lazy_run_fn)(const lazy_op *op);

#define LAZY_MAX_POINTERS USP_OP_OPERANDS_MAX

struct lazy_op {
    lazy_run_fn run;
    const char *name;
    uint64_t ticket;
    lazy_op *next;
    void *p[LAZY_MAX_POINTERS]; /* the op's buffers: a copy's destination and source, an op's operands */
    size_t z[2];                /* a copy's or a zero's bytes; a free's */
    usp_op desc;                /* a compute op, its stream NULL (the cpu backend runs it) */
    void *frees;                /* a deferred free of this buffer (op->z[0] bytes) */
    int writes_host;            /* a copy to host memory (dropped when the device is destroyed) */
    void *owned;                /* host memory the op owns: a staged upload, inv_freq; freed after it runs */
    void (*host_fn)(void *arg); /* launch_host_func */
    void *host_arg;
    usp_stream_t *wait_stream;  /* stream_wait_event: run this stream ... */
    uint64_t wait_ticket;       /* ... up to this ticket */
};

/* Creates a device with its default stream. */
usp_status lazy_device_create(lazy_device **out);

/* Runs what every stream still holds (copies to the host are dropped: their
 * destination may be gone), releases deferred frees, and frees the device. */
void lazy_device_destroy(lazy_device *d);

/* The backend handle wrapping `d`, on which the waits it makes inside an op are counted. */
void lazy_device_set_owner(lazy_device *d, usp_backend_t *owner);

/* Allocates host memory standing for device memory, and records it as live. */
usp_status lazy_device_alloc(lazy_device *d, size_t bytes, void **out);

/* Takes `ptr` out of the live set now; the memory is released in the default stream's order. */
void lazy_device_free(lazy_device *d, void *ptr);

/* Queues an op on `stream` (NULL: the default one). Each of the `n` pointers
 * after `n` must be NULL or point into a live buffer: a buffer already freed,
 * or memory this device never gave out, is a USP_ERR_RUNTIME naming the op
 * (what a use-after-free or a host pointer would be on a GPU). *out is the
 * queued op, for the caller to fill its other arguments. */
usp_status lazy_device_enqueue(lazy_device *d, usp_stream_t *stream, const char *name, lazy_run_fn run,
                               lazy_op **out, int n, ...);

/* lazy_device_enqueue with the n pointers in an array. */
usp_status lazy_device_enqueue_array(lazy_device *d, usp_stream_t *stream, const char *name, lazy_run_fn run,
                                     lazy_op **out, int n, void *const *ptrs);

/* Runs `stream`'s queue to its end, and the work it waits for; returns the
 * first error any op has had since the last synchronisation. The host knows
 * from now on that this work is complete (lazy_order.h). */
usp_status lazy_device_synchronize(lazy_device *d, usp_stream_t *stream);

/* lazy_device_synchronize, except that the host learns nothing: the
 * simulator's run of a stream before it moves a call's data (usp_backend_run_queued). */
usp_status lazy_device_run_queued(lazy_device *d, usp_stream_t *stream);

/* The op just queued on `stream` (or a call made outside the slots, such as a
 * collective) reads and writes `a`: checked against what other streams did to
 * those bytes and recorded (lazy_order.h). USP_ERR_RUNTIME naming both ops where
 * nothing orders a write and another access: a missing event wait. */
usp_status lazy_device_check(lazy_device *d, usp_stream_t *stream, const char *what, const usp_access *a, int n);

/* Streams and events, as the slots of core/ops/backend_impl.h. */
usp_status lazy_device_stream_create(lazy_device *d, usp_stream_t **out);
void lazy_device_stream_destroy(lazy_device *d, usp_stream_t *stream);
usp_status lazy_device_event_create(lazy_device *d, usp_event_t **out);
void lazy_device_event_destroy(lazy_device *d, usp_event_t *event);
usp_status lazy_device_event_record(lazy_device *d, usp_event_t *event, usp_stream_t *stream);
usp_status lazy_device_stream_wait_event(lazy_device *d, usp_stream_t *stream, usp_event_t *event);
usp_status lazy_device_launch_host_func(lazy_device *d, usp_stream_t *stream, void (*fn)(void *), void *arg);

#endif
