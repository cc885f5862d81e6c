/* The hybrid diagram (see schedule.h): the U x R ranks of DP replica 0 as R
 * boxes of U ranks. Inside a box (one Ulysses group, one position on the
 * ring) the all-to-all turns the group's tokens x all heads into all the
 * group's tokens x one head group per rank; then rank u of every box joins
 * ring[u], which passes the K/V blocks of head group u from box to box. */
#include <stdio.h>
#include <stdlib.h>

#include "core/comm/comm.h"
#include "viz/dot.h"
#include "viz/layout_text.h"
#include "viz/schedule.h"

#include <string.h>

#include "core/parallel/schedule.h"
#include "viz/trace_query.h"

/* Q+K+V bytes world rank `from` sent to `to` in the all-to-alls of group `group`. */
static uint64_t a2a_bytes(const usp_trace_t *t, const char *group, int from, int to)
{
    uint64_t sum = 0;
    for (uint64_t call = 1; call <= 3; call++) {
        const usp_trace_event *e = viz_trace_find(t, from, group, call);
        if (e)
            sum += viz_trace_bytes_to(t, e, to);
    }
    return sum;
}

/* The most bytes world rank `from` sent to `to` in one of the forward's R-1 sendrecvs on ring group `group`. */
static uint64_t ring_step_bytes(const usp_trace_t *t, const char *group, int R, int from, int to)
{
    uint64_t most = 0;
    for (int s = 1; s < R; s++) {
        const usp_trace_event *e = viz_trace_find(t, from, group, (uint64_t)s);
        uint64_t b = e && e->kind == USP_OP_SENDRECV ? viz_trace_bytes_to(t, e, to) : 0;
        most = b > most ? b : most;
    }
    return most;
}

/* The caption: the run's shape, what a box, a blue and an orange arrow are, and what was aggregated. */
static void hybrid_caption(const viz_attention_config *c, int draw_a2a, int draw_rings, usp_strbuf *cap)
{
    const int U = c->shape.ulysses, R = c->shape.ring;
    usp_strbuf_printf(cap, "N = %lld tokens, %lld heads (%lld KV), head_dim %lld, batch %lld, f32%s; W = %d = DP %d x "
                      "ring %d x Ulysses %d.", (long long)c->seq_len, (long long)c->n_heads, (long long)c->n_kv_heads,
                      (long long)c->head_dim, (long long)c->batch, c->causal ? ", causal" : "", c->shape.world,
                      c->shape.dp, R, U);
    usp_strbuf_printf(cap, "\nBox = one Ulysses group = one position on the ring; it holds the tokens named on it. "
                            "Rank: its own tokens (all heads) before the all-to-all, its heads (the box's tokens) "
                            "after.");
    usp_strbuf_printf(cap, "\nBlue, inside a box: the all-to-all of Q, K, V (sequence -> heads), bytes each way "
                            "from the trace; O goes back the same way.");
    usp_strbuf_printf(cap, "\nOrange, across boxes: ring[u] joins rank u of every box (same colour = same head "
                            "group) and passes its K/V blocks R-1 = %d times.", R - 1);
    if (!draw_a2a)
        usp_strbuf_printf(cap, "\nAggregated: all-to-all arrows are summed in each box's label (%d ranks per box).", U);
    if (draw_rings < U)
        usp_strbuf_printf(cap, "\nAggregated: only ring[0] is drawn (%d ring arrows > %d); the others are alike.", R * U,
                          VIZ_MAX_ARROWS);
    if (c->shape.dp > 1)
        usp_strbuf_printf(cap, "\nDrawn: DP replica 0 (ranks 0-%d); the other %d replicas do the same.", U * R - 1,
                          c->shape.dp - 1);
}

usp_status viz_dot_hybrid(const usp_trace_t *t, const viz_attention_config *c, usp_strbuf *dot)
{
    const int U = c->shape.ulysses, R = c->shape.ring;
    if (U < 2 || R < 2)
        return usp_error(USP_ERR_CONFIG, "--picture hybrid needs --ulysses and --ring both 2 or more (they are %d and "
                         "%d); try --picture %s", U, R, U < 2 ? "ring" : "ulysses");
    if (!viz_trace_find(t, 0, "ulysses[0]", 1) || !viz_trace_find(t, 0, "ring[0]", 1))
        return usp_error(USP_ERR_RUNTIME, "the trace has no all-to-all on ulysses[0] or no sendrecv on ring[0]: it is "
                         "not the trace of one hybrid attention layer with --ulysses %d --ring %d", U, R);
    usp_seq_layout ring_layout, sp_layout;
    USP_CHECK(usp_seq_layout_make(usp_layout_for(c->causal, R, 0, c->seq_len), c->seq_len, 1, R, &ring_layout));
    USP_CHECK(usp_seq_layout_make(usp_layout_for(c->causal, R, 0, c->seq_len), c->seq_len, U, R, &sp_layout));
    int draw_a2a = U <= VIZ_DETAIL_MAX_RANKS && R * U * (U - 1) / 2 <= VIZ_MAX_ARROWS;
    int draw_rings = R * U <= VIZ_MAX_ARROWS ? U : 1;
    char title[160], size[32], step_size[32], group[64], tok[96], heads[48], label[256];
    snprintf(title, sizeof title, "Hybrid attention, Ulysses %d x Ring %d: all-to-all inside each box, ring across "
             "the boxes", U, R);
    usp_strbuf cap = {0};
    hybrid_caption(c, draw_a2a, draw_rings, &cap);
    viz_dot_begin(dot, "hybrid", title, usp_strbuf_text(&cap), 1);
    usp_strbuf_free(&cap);
    usp_strbuf_printf(dot, "  graph [ranksep=1.6, nodesep=0.35, newrank=true];\n");
    usp_strbuf_printf(dot, "  node [shape=box, style=\"rounded,filled\"];\n");
    for (int r = 0; r < R; r++) {
        snprintf(group, sizeof group, "ulysses[%d]", r);
        viz_tokens_text(&ring_layout, r, tok, sizeof tok);
        uint64_t sent = 0;
        for (int a = 0; a < U; a++)
            for (int b = 0; b < U; b++)
                sent += a == b ? 0 : a2a_bytes(t, group, r * U + a, r * U + b);
        usp_strbuf_printf(dot, "  subgraph cluster_%d {\n    style=\"rounded\"; color=\"#888888\"; label=", r);
        snprintf(label, sizeof label, "%s, ring position %d\ntokens %s\nall-to-all: %s in all", group, r, tok,
                 viz_bytes(sent, size));
        viz_dot_quote(dot, label);
        usp_strbuf_printf(dot, ";\n");
        for (int u = 0; u < U; u++) {
            int64_t first, count;
            viz_head_split(c->n_heads, U, u, &first, &count);
            viz_range_text(first, count, heads, sizeof heads);
            char own[96];
            viz_tokens_text(&sp_layout, r * U + u, own, sizeof own);
            snprintf(label, sizeof label, "rank %d\nbefore: tokens %s\nafter: heads %s", r * U + u, own, heads);
            usp_strbuf_printf(dot, "    n%d [fillcolor=\"%s\", label=", r * U + u, viz_dot_fill(u));
            viz_dot_quote(dot, label);
            usp_strbuf_printf(dot, "];\n");
        }
        for (int u = 0; draw_a2a && u < U; u++)
            for (int v = u + 1; v < U; v++) {
                uint64_t there = a2a_bytes(t, group, r * U + u, r * U + v), back = a2a_bytes(t, group, r * U + v, r * U + u);
                if (there == back)
                    usp_strbuf_printf(dot, "    n%d -> n%d [dir=both, color=\"#1f5f99\", fontcolor=\"#1f5f99\", "
                                           "constraint=false, label=\"%s each way\"];\n",
                                      r * U + u, r * U + v, viz_bytes(there, size));
                else
                    usp_strbuf_printf(dot, "    n%d -> n%d [color=\"#1f5f99\", constraint=false, label=\"%s\"];\n    "
                                           "n%d -> n%d [color=\"#1f5f99\", constraint=false, label=\"%s\"];\n",
                                      r * U + u, r * U + v, viz_bytes(there, size), r * U + v, r * U + u,
                                      viz_bytes(back, step_size));
            }
        usp_strbuf_printf(dot, "  }\n");
    }
    for (int u = 0; u < draw_rings; u++) {
        snprintf(group, sizeof group, "ring[%d]", u);
        for (int r = 0; r < R; r++) {
            int from = r * U + u, to = ((r + 1) % R) * U + u;
            uint64_t step = ring_step_bytes(t, group, R, from, to);
            /* the arrow that closes the ring runs backwards across the picture: keep it out of the ranking */
            usp_strbuf_printf(dot, "  n%d -> n%d [color=\"#b45f06\", fontcolor=\"#b45f06\", penwidth=1.5, "
                                   "label=\"%s: %d x %s\"%s];\n",
                              from, to, group, R - 1, viz_bytes(step, size), r + 1 == R ? ", constraint=false" : "");
        }
    }
    viz_dot_end(dot);
    return dot->failed ? usp_error(USP_ERR_RUNTIME, "out of memory writing the hybrid diagram") : USP_OK;
}

/* The diagrams a schedule names (usp_schedule_i.diagram). */
static const struct {
    const char *name;
    usp_status (*draw)(const usp_trace_t *t, const viz_attention_config *c, usp_strbuf *dot);
} diagrams[] = {{"ulysses", viz_dot_ulysses}, {"ring", viz_dot_ring}, {"hybrid", viz_dot_hybrid}};

usp_status viz_dot_schedule(const usp_trace_t *t, const viz_attention_config *c, usp_strbuf *dot)
{
    const usp_schedule_i *s = usp_schedule_for_mesh(c->shape.ulysses, c->shape.ring);
    for (size_t i = 0; s && s->diagram && i < sizeof diagrams / sizeof *diagrams; i++)
        if (strcmp(diagrams[i].name, s->diagram) == 0)
            return diagrams[i].draw(t, c, dot);
    return usp_error(USP_ERR_CONFIG, "the %s schedule has no diagram", s ? s->name : "mesh's");
}
