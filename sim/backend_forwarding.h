/* Forwarding slots for a backend decorator: a backend that does each op with
 * another one (the one it wraps) and adds something around it. The simulator's
 * virtual streams (sim/virtual_streams.h) are one: they give a backend that
 * completes every op at once (cpu, meta) streams and events in virtual time,
 * and pass its ops on with the default stream, since it has no other. */
#ifndef USP_SIM_BACKEND_FORWARDING_H
#define USP_SIM_BACKEND_FORWARDING_H

#include "core/ops/backend_impl.h"

/* The backend a decorator wraps: a decorator's context must begin with it. */
typedef struct sim_forward_target {
    const usp_backend_i *iface;
    void *ctx;
} sim_forward_target;

/* Fills the memory, copy and op slots of `out` with ones that call inner's with a NULL stream (NULL where
 * inner's is NULL, so that a shapes-only backend keeps its meaning), and copies inner's name and flags.
 * Leaves the stream, event, synchronize, launch_host_func and destroy slots alone. */
void sim_forwarding_slots(const usp_backend_i *inner, usp_backend_i *out);

#endif
