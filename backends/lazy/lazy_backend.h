/* The lazy compute backend: the cpu backend's kernels, run as late as the
 * contracts of core/ops/ops.h allow.
 *
 * Every slot only queues its work; the queues run at a synchronisation point
 * or a blocking op (lazy_device.h). What a real GPU backend would do to a
 * program that breaks the contracts, this one does deterministically on the
 * CPU, so a test fails instead of a cluster job:
 * - a copy to the host fills its destination with 0xFF bytes (NaN as floats,
 *   -1 as integers) at once, and the data arrives at the synchronisation:
 *   a host read without one sees NaN;
 * - a buffer leaves the live set when freed: an op queued on it afterwards is
 *   an error naming the op; the memory itself is released in stream order;
 * - work on a stream of its own waits for the default stream only through an
 *   event: a missing usp_stream_wait_event runs work in the wrong order;
 * - every op (and every collective the simulator runs on it) says what it
 *   reads and writes, and two accesses of the same bytes from two streams
 *   that nothing orders, one of them a write, are a USP_ERR_RUNTIME naming
 *   both (lazy_order.h): found whatever order the queues happen to run in. */
#ifndef USP_LAZY_BACKEND_H
#define USP_LAZY_BACKEND_H

#include "core/ops/ops.h"

/* Creates a lazy backend (one per rank). */
usp_status usp_backend_lazy_create(usp_backend_t **out);

#endif
