/* Schedule diagrams of one attention layer, drawn from its trace (the events
 * viz_attention_run recorded, or any trace of ulysses_attention_forward):
 *
 *   ulysses: the all-to-all of Ulysses group 0. Each rank is a box of slices
 *            (token shard x head group) before and after; an arrow per slice
 *            moved, labelled with the Q+K+V bytes the trace shows; a rank's
 *            own slice (no transfer) dashed.
 *   ring:    ring group 0, one column per ring step: the K/V block each rank
 *            holds, the (query run, key run) products it computes, and the
 *            ones the causal zigzag layout skips; arrows for the sendrecvs.
 *   hybrid:  both levels: Ulysses groups as boxes (all-to-all inside), the
 *            ring across them.
 *
 * Token ranges come from core/parallel/layout.h and head groups from the split
 * core/parallel/ulysses.c makes; every byte count comes from the trace. Above
 * VIZ_DETAIL_MAX_RANKS ranks a diagram draws one node per rank and says so. */
#ifndef USP_VIZ_SCHEDULE_H
#define USP_VIZ_SCHEDULE_H

#include "core/base/strbuf.h"
#include "core/trace/trace.h"
#include "viz/attention_run.h"

/* DOT of the Ulysses all-to-all of group ulysses[0] (sequence -> heads, and O back). */
usp_status viz_dot_ulysses(const usp_trace_t *t, const viz_attention_config *c, usp_strbuf *dot);

/* DOT of the ring schedule of group ring[0], step by step. */
usp_status viz_dot_ring(const usp_trace_t *t, const viz_attention_config *c, usp_strbuf *dot);

/* DOT of the hybrid: the Ulysses groups of DP replica 0 and the rings across them. */
usp_status viz_dot_hybrid(const usp_trace_t *t, const viz_attention_config *c, usp_strbuf *dot);

/* Which of the three fits the config: hybrid when U > 1 and R > 1, ring when R > 1, else ulysses. */
usp_status viz_dot_schedule(const usp_trace_t *t, const viz_attention_config *c, usp_strbuf *dot);

#endif
