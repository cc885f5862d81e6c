/* A runtime of one rank in this process, on a backend it is given: the
 * communicator is the one-rank copy (core/comm/comm_single.h), times are measured
 * (wall clock), the rank prints. The cuda backend trains on one GPU through
 * it; tests run it on the cpu backend to prove it equals the simulator. */
#ifndef USP_RUNTIME_SINGLE_H
#define USP_RUNTIME_SINGLE_H

#include "core/runtime/runtime.h"

/* Makes the rank's compute backend (called by the run, on its thread). */
typedef usp_status (*usp_backend_maker)(void *arg, usp_backend_t **out);

/* A one-rank runtime on the backend make(arg) gives, on the machine `machine`
 * (what the summary says the times are for). */
usp_status usp_runtime_single_create(const char *machine, usp_backend_maker make, void *arg, usp_runtime_t **out);

/* Makes the run record a trace (usp_runtime_trace): the rank's steps and every op, timed on the device where
 * the backend can (core/ops/ops.h, usp_backend_time_ops). One rank has no calls to record. */
usp_status usp_runtime_single_record_trace(usp_runtime_t *rt);

#endif
