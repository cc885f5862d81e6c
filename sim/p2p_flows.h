/* Point-to-point transfers in flight: concurrent sends share the links they
 * cross over virtual time.
 *
 * The transfers of one Ring-attention step (every rank sends to the next) are
 * matched one by one as their ranks post, yet they move at the same time: on
 * pcie-gen4 three of the eight cross each host bridge, so each gets a third of
 * it, not the whole link. Here every matched transfer is a flow that starts
 * at its start time (the later of its two sides' posts) and moves at the
 * max-min fair rate of the links it crosses (sim/flow_model.h), re-shared each
 * time a transfer starts or finishes: the fluid model the collectives use,
 * applied over time instead of to one batch. A transfer ends when its last
 * byte has left the links, plus its latency (NCCL's base latency and the
 * route's link latencies), so one alone costs exactly sim_cost_transfer.
 *
 * Nothing is priced ahead of time: a transfer that starts later slows the
 * ones already moving, as on the real links. This needs the events in time
 * order, which the scheduler gives (sim/world.c): it runs the rank with the
 * smallest clock, and processes the earliest event here (a transfer starting
 * or finishing) only when no ready rank's clock is earlier, so no rank can
 * post a transfer that starts before the flows' current time on its default
 * stream; one posted on another stream whose clock is behind is started at the
 * flows' time by the caller (sim_comm.c, sim/virtual_streams.h).
 *
 * Cost: a start or finish re-shares only the flows connected to it through
 * shared links, once per distinct event time (every start at one instant is
 * one re-sharing); a flow whose links carry nothing else takes its slowest
 * link's capacity directly. Transfers between disjoint pairs (NVSwitch, one
 * NIC each) cost O(route + log flows) each. Deterministic: events are ordered
 * by (time, submission or flow slot), and the arithmetic is in a fixed order. */
#ifndef USP_SIM_P2P_FLOWS_H
#define USP_SIM_P2P_FLOWS_H

#include <stdint.h>

#include "core/base/status.h"
#include "sim/topology.h"

typedef struct sim_p2p_flows sim_p2p_flows;

/* Receives each transfer that completes: its sender and receiver GPUs and the
 * virtual time its last byte arrives. */
typedef void (*sim_p2p_done_fn)(void *ctx, int src, int dst, double t_end);

/* Empty flows over topology `t` (copied). USP_ERR_RUNTIME when out of memory. */
usp_status sim_p2p_flows_create(const sim_topology *t, sim_p2p_flows **out);

/* Frees the flows (NULL is fine). */
void sim_p2p_flows_destroy(sim_p2p_flows *f);

/* Queues a transfer of `bytes` from GPU src to GPU dst that starts at `start`,
 * which must not be before the flows' current time (sim_p2p_flows_now). */
usp_status sim_p2p_flows_submit(sim_p2p_flows *f, double start, int src, int dst, uint64_t bytes);

/* The time of the next event (a queued transfer starting or a moving one
 * finishing) into *t, *has = 1, when it is at or before `horizon`; *has = 0
 * otherwise. Re-shares the links when time would move on. USP_ERR_RUNTIME when
 * out of memory. */
usp_status sim_p2p_flows_next(sim_p2p_flows *f, double horizon, int *has, double *t);

/* Moves the flows to time `t` (an event time from sim_p2p_flows_next): the
 * transfers that finish then are reported to done(ctx, ...) and leave, those
 * that start then join (a transfer with no bytes or no link completes at once,
 * after its latency). USP_ERR_RUNTIME when out of memory. */
usp_status sim_p2p_flows_advance(sim_p2p_flows *f, double t, sim_p2p_done_fn done, void *ctx);

/* The virtual time the flows have reached. */
double sim_p2p_flows_now(const sim_p2p_flows *f);

/* Transfers queued or moving. */
int sim_p2p_flows_pending(const sim_p2p_flows *f);

/* Drops every transfer, queued or moving, without reporting it (a run that aborts). */
void sim_p2p_flows_clear(sim_p2p_flows *f);

#endif
