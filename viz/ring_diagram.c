/* The ring schedule diagram (see schedule.h).
 *
 * Ring rank i keeps its queries and, at step s = 0..R-1, holds the K/V block
 * of ring rank (i - s) mod R: its own at step 0, then each sendrecv passes
 * every block one rank on. A step's work is one product per (query run, key
 * run) pair (core/parallel/ring.c); under a causal mask a product whose keys all come
 * after its queries is skipped, one whose keys straddle its queries is
 * computed under the mask, the rest in full. With the zigzag layout (chunks
 * i and 2R-1-i on rank i) every rank computes 2R+1 of the 4R products. */
#include <stdio.h>
#include <stdlib.h>

#include "core/comm/comm.h"
#include "viz/dot.h"
#include "viz/layout_text.h"
#include "viz/schedule.h"
#include "viz/trace_query.h"

typedef enum product_kind { PRODUCT_FULL, PRODUCT_MASKED, PRODUCT_SKIPPED } product_kind;

/* What ring.c does with queries x against keys y (run_is_masked there). */
static product_kind product_of(int causal, const usp_token_run *x, const usp_token_run *y)
{
    if (!causal)
        return PRODUCT_FULL;
    if (y->global_first > x->global_first + x->count - 1)
        return PRODUCT_SKIPPED;
    return y->global_first + y->count - 1 > x->global_first ? PRODUCT_MASKED : PRODUCT_FULL;
}

static const char *product_fill[] = {"#93c47d", "#d9ead3", "#f3f3f3"};
static const char *product_word[] = {"computed", "masked", "skipped"};

/* Products ring rank `i` computes in the whole forward pass (per batch row), and how many there are. */
static int products_computed(const viz_attention_config *c, const usp_seq_layout *l, int i, int *total)
{
    const int R = l->ring;
    usp_token_run q[2], k[2];
    int nq = usp_seq_layout_runs(l, i, q), computed = 0;
    *total = 0;
    for (int o = 0; o < R; o++) {
        int nk = usp_seq_layout_runs(l, o, k);
        for (int a = 0; a < nq; a++)
            for (int b = 0; b < nk; b++) {
                ++*total;
                computed += product_of(c->causal, &q[a], &k[b]) != PRODUCT_SKIPPED;
            }
    }
    return computed;
}

/* Bytes ring rank i sent at step s (its sendrecv number s+1 on ring[0]); 0 when absent. */
static uint64_t step_bytes(const usp_trace_t *t, int U, int R, int i, int s)
{
    const usp_trace_event *e = viz_trace_find(t, i * U, "ring[0]", (uint64_t)s + 1);
    return e && e->kind == USP_OP_SENDRECV ? viz_trace_bytes_to(t, e, ((i + 1) % R) * U) : 0;
}

/* One step's column: a row per ring rank with the block it holds and a small
 * grid of its products (rows: its query runs; columns: the block's key runs). */
static void step_table(usp_strbuf *b, const viz_attention_config *c, const usp_seq_layout *l, int s)
{
    const int R = l->ring;
    char tok[96], qtext[48], ktext[48];
    usp_strbuf_printf(b, "  step%d [shape=plain, label=<<table border=\"0\" cellborder=\"1\" cellspacing=\"0\" "
                         "cellpadding=\"4\"><tr><td port=\"h\" colspan=\"2\" bgcolor=\"#eeeeee\"><b>step %d</b>%s</td>"
                         "</tr>",
                      s, s, s == 0 ? " (own K/V)" : "");
    for (int i = 0; i < R; i++) {
        int o = (i - s + R) % R;
        usp_token_run q[2], k[2];
        int nq = usp_seq_layout_runs(l, i, q), nk = usp_seq_layout_runs(l, o, k);
        viz_tokens_text(l, o, tok, sizeof tok);
        usp_strbuf_printf(b, "<tr><td port=\"i%d\" align=\"left\" bgcolor=\"%s\">rank %d holds<br/>K/V of rank %d"
                             "<br/>keys %s</td><td port=\"o%d\" cellpadding=\"1\"><table border=\"0\" "
                             "cellborder=\"1\" cellspacing=\"1\" cellpadding=\"2\">",
                          i, viz_dot_fill(o), i * c->shape.ulysses, o * c->shape.ulysses, tok, i);
        for (int a = 0; a < nq; a++) {
            usp_strbuf_printf(b, "<tr>");
            for (int kb = 0; kb < nk; kb++) {
                product_kind p = product_of(c->causal, &q[a], &k[kb]);
                viz_range_text(q[a].global_first, q[a].count, qtext, sizeof qtext);
                viz_range_text(k[kb].global_first, k[kb].count, ktext, sizeof ktext);
                usp_strbuf_printf(b, "<td bgcolor=\"%s\"><font point-size=\"9\" color=\"%s\">q %s x k %s<br/>%s"
                                     "</font></td>",
                                  product_fill[p], p == PRODUCT_SKIPPED ? "#999999" : "#000000", qtext, ktext,
                                  product_word[p]);
            }
            usp_strbuf_printf(b, "</tr>");
        }
        usp_strbuf_printf(b, "</table></td></tr>");
    }
    usp_strbuf_printf(b, "</table>>];\n");
}

static void detailed(usp_strbuf *b, const usp_trace_t *t, const viz_attention_config *c, const usp_seq_layout *l)
{
    const int R = l->ring, U = c->shape.ulysses;
    char tok[96], size[32];
    usp_strbuf_printf(b, "  queries [shape=plain, label=<<table border=\"0\" cellborder=\"1\" cellspacing=\"0\" "
                         "cellpadding=\"4\"><tr><td port=\"h\" bgcolor=\"#eeeeee\"><b>queries</b> (stay home)</td></tr>");
    for (int i = 0; i < R; i++) {
        viz_tokens_text(l, i, tok, sizeof tok);
        int total, computed = products_computed(c, l, i, &total);
        usp_strbuf_printf(b, "<tr><td port=\"o%d\" align=\"left\" bgcolor=\"%s\"><b>rank %d</b>: tokens %s<br/>"
                             "computes %d of %d products</td></tr>",
                          i, viz_dot_fill(i), i * U, tok, computed, total);
    }
    usp_strbuf_printf(b, "</table>>];\n");
    for (int s = 0; s < R; s++)
        step_table(b, c, l, s);
    /* heavy invisible links between the headers keep the columns level */
    usp_strbuf_printf(b, "  queries:h:e -> step0:h:w [style=invis, weight=100];\n");
    for (int s = 0; s + 1 < R; s++)
        usp_strbuf_printf(b, "  step%d:h:e -> step%d:h:w [style=invis, weight=100];\n", s, s + 1);
    for (int i = 0; i < R; i++)
        usp_strbuf_printf(b, "  queries:o%d:e -> step0:i%d:w [color=\"#999999\", style=dashed, arrowhead=none];\n", i, i);
    for (int s = 0; s + 1 < R; s++)
        for (int i = 0; i < R; i++)
            usp_strbuf_printf(b, "  step%d:o%d:e -> step%d:i%d:w [color=\"%s\", fontcolor=\"%s\", label=\"%s\"];\n", s,
                              i, s + 1, (i + 1) % R, viz_dot_line(i), viz_dot_line(i),
                              viz_bytes(step_bytes(t, U, R, i, s), size));
}

/* Above VIZ_DETAIL_MAX_RANKS: one node per ring rank, laid out as a snake of
 * rows of 8 (left to right, then right to left) so a ring of 64 stays
 * square; an arrow per hop with the bytes of one step x the R-1 steps. */
static void aggregated(usp_strbuf *b, const usp_trace_t *t, const viz_attention_config *c, const usp_seq_layout *l)
{
    const int R = l->ring, U = c->shape.ulysses, row = 8;
    char tok[96], size[32], label[256];
    usp_strbuf_printf(b, "  node [shape=box, style=\"rounded,filled\", fillcolor=\"%s\"];\n", viz_dot_fill(0));
    for (int i = 0; i < R; i++) {
        viz_tokens_text(l, i, tok, sizeof tok);
        int total, computed = products_computed(c, l, i, &total);
        snprintf(label, sizeof label, "rank %d\ntokens %s\ncomputes %d of %d", i * U, tok, computed, total);
        usp_strbuf_printf(b, "  r%d [label=", i);
        viz_dot_quote(b, label);
        usp_strbuf_printf(b, "];\n");
    }
    for (int first = 0; first < R; first += row) {
        usp_strbuf_printf(b, "  { rank=same;");
        for (int i = first; i < first + row && i < R; i++)
            usp_strbuf_printf(b, " r%d;", i);
        usp_strbuf_printf(b, " }\n");
    }
    for (int i = 0; i < R; i++) {
        uint64_t most = 0;
        for (int s = 0; s + 1 < R; s++)
            most = step_bytes(t, U, R, i, s) > most ? step_bytes(t, U, R, i, s) : most;
        int j = (i + 1) % R, odd_row = (i / row) % 2, same_row = i / row == j / row;
        /* a flat arrow puts its tail on the left: on odd rows the hop is drawn from j back to i */
        if (same_row && odd_row)
            usp_strbuf_printf(b, "  r%d -> r%d [dir=back, label=\"%d x %s\"];\n", j, i, R - 1, viz_bytes(most, size));
        else
            usp_strbuf_printf(b, "  r%d -> r%d [label=\"%d x %s\"%s];\n", i, j, R - 1, viz_bytes(most, size),
                              j == 0 ? ", constraint=false" : "");
    }
}

usp_status viz_dot_ring(const usp_trace_t *t, const viz_attention_config *c, usp_strbuf *dot)
{
    const int R = c->shape.ring, U = c->shape.ulysses;
    if (R < 2)
        return usp_error(USP_ERR_CONFIG, "--picture ring needs --ring 2 or more (it is %d): with one rank per ring "
                         "there is no ring schedule; try --picture ulysses", R);
    usp_seq_layout l;
    USP_CHECK(usp_seq_layout_make(usp_layout_for(c->causal, R, 0, c->seq_len), c->seq_len, 1, R, &l));
    if (!viz_trace_find(t, 0, "ring[0]", 1))
        return usp_error(USP_ERR_RUNTIME, "the trace has no sendrecv of rank 0 on ring[0]: it is not the trace of "
                         "one ring attention layer with --ring %d", R);
    char title[160], size[32];
    snprintf(title, sizeof title, "Ring attention, R = %d: K/V blocks travel around the ring, %s", R,
             c->causal ? "causal, zigzag layout" : "full attention");
    usp_strbuf cap = {0};
    usp_strbuf_printf(&cap, "N = %lld tokens, %lld heads (%lld KV), head_dim %lld, batch %lld, f32%s; W = %d = DP %d x "
                      "ring %d x Ulysses %d.", (long long)c->seq_len, (long long)c->n_heads, (long long)c->n_kv_heads,
                      (long long)c->head_dim, (long long)c->batch, c->causal ? ", causal" : "", c->shape.world,
                      c->shape.dp, R, U);
    if (c->causal)
        usp_strbuf_printf(&cap, "\nZigzag: the sequence is cut into %d chunks; ring rank i holds chunks i and %d-i, so "
                                "every rank does the same work.", 2 * R, 2 * R - 1);
    usp_strbuf_printf(&cap, "\nEach step: a rank attends its queries to the K/V block it holds, then passes the block "
                            "on (arrow: one sendrecv, bytes from the trace: %s).",
                      viz_bytes(step_bytes(t, U, R, 0, 0), size));
    if (U > 1)
        usp_strbuf_printf(&cap, "\nDrawn: ring[0] (world ranks 0, %d, ...), which carries head group 0 after the "
                                "Ulysses all-to-all; ring[1..%d] do the same for the other head groups.", U, U - 1);
    int detail = R <= VIZ_DETAIL_MAX_RANKS;
    if (detail) {
        usp_strbuf_printf(&cap, "\nGrid = the products of a rank's query runs (rows) with the block's key runs "
                                "(columns), one flash-attention call each per batch row:");
        usp_strbuf_printf(&cap, "\n    dark green: computed; light green: masked (computed under the causal mask); "
                                "grey: skipped (every key comes after every query).");
    } else {
        usp_strbuf_printf(&cap, "\nAggregated: %d ranks > %d, so one node per rank (a snake of rows of 8); arrows: the "
                                "%d sendrecvs of a forward pass, bytes each.", R, VIZ_DETAIL_MAX_RANKS, R - 1);
    }
    viz_dot_begin(dot, "ring", title, usp_strbuf_text(&cap), 1);
    usp_strbuf_free(&cap);
    if (detail) {
        usp_strbuf_printf(dot, "  graph [ranksep=0.9, nodesep=0.3];\n");
        detailed(dot, t, c, &l);
    } else {
        usp_strbuf_printf(dot, "  graph [rankdir=TB, ranksep=0.5, nodesep=0.4];\n");
        aggregated(dot, t, c, &l);
    }
    viz_dot_end(dot);
    return dot->failed ? usp_error(USP_ERR_RUNTIME, "out of memory writing the ring diagram") : USP_OK;
}
