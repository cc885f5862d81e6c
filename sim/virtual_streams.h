/* Virtual streams: the simulator's ranks run their streams side by side in
 * virtual time, so that the code's overlap (core/parallel/ring.c sends the next K/V
 * block on a stream of its own while the attention of the current one runs)
 * is modelled as on a GPU.
 *
 * Each stream of a rank is a lane with a clock of its own; lane 0 is the
 * default stream (NULL), whose clock is the rank's `clock`, and the host's
 * view. An op enqueued on a stream starts at its lane's clock and moves only
 * that lane (sim/world.c charges compute there); a call issued on a stream is
 * posted at its lane's time and its completion moves that lane (sim_comm.c).
 * usp_event_record stores the lane's clock in the event, usp_stream_wait_event
 * sets lane = max(lane, event), and a host-blocking call (synchronize, a
 * stream's destruction, so every download) joins the lane into lane 0;
 * synchronize(NULL) joins every lane. The scheduler still orders ranks by
 * lane 0 (sim/world.c), so a call posted on a lane whose clock is behind
 * the transfers' time starts at that time (sim_comm.c, an approximation the
 * ring never needs: it posts a block's transfer at its compute lane's time).
 *
 * The streams are a decorator of the rank's compute backend (a cpu or meta
 * backend, which completes every op before it returns): it hands out stream
 * and event handles that only carry a lane or a time, and passes every op on
 * with the default stream. The cpu backend runs the ops in program order, a
 * valid order of any streams' work, so the numerics are those of one stream.
 *
 * Hidden time: a call on a lane > 0 whose interval overlaps compute charged on
 * lane 0 was hidden behind that compute for the overlapping part (its waiting
 * and its transfer counted apart); what remains of it was exposed. */
#ifndef USP_SIM_VIRTUAL_STREAMS_H
#define USP_SIM_VIRTUAL_STREAMS_H

#include "core/ops/ops.h"

struct sim_rank;

/* Wraps `inner` (which completes every op before returning) so that rank r's streams are lanes; takes
 * `inner` (freed with the new backend, or here on failure). USP_ERR_RUNTIME when out of memory. */
usp_status sim_streams_wrap(struct sim_rank *r, usp_backend_t *inner, usp_backend_t **out);

/* The lane of `stream` on rank r: 0 for NULL or when r's streams are not virtual. */
int sim_stream_lane(const struct sim_rank *r, const usp_stream_t *stream);

/* The clock of lane `lane` of rank r (lane 0: r->clock). */
double *sim_lane_clock(struct sim_rank *r, int lane);

/* The time every lane of r has reached: when all the work r issued so far is done. */
double sim_lanes_end(const struct sim_rank *r);

/* Compute of rank r on `lane` over [start, end]: on lane 0, adds its overlap with r's calls on other lanes
 * to the hidden times. */
void sim_lanes_compute(struct sim_rank *r, int lane, double start, double end);

/* A call of rank r on `lane` completed: posted at t_post, all parties there at t_start, done at t_end. Keeps
 * it (lane > 0) for the compute that runs beside it. USP_ERR_RUNTIME when out of memory. */
usp_status sim_lanes_call_done(struct sim_rank *r, int lane, double t_post, double t_start, double t_end);

/* Frees what the lanes of r hold (the world's rank teardown). */
void sim_lanes_free(struct sim_rank *r);

#endif
