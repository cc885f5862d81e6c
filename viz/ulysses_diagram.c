/* The Ulysses all-to-all diagram (see schedule.h).
 *
 * Before the all-to-all, rank r of a Ulysses group holds its T tokens with
 * all H heads, cut into U slices by head group; slice (r, j) goes to rank j.
 * After it, rank j holds every token of head group j: slice (r, j) is its
 * r-th. So the picture is a transpose: left column slices (r, j), right
 * column slices (j, r), one arrow each. The arrows' bytes are the sum of the
 * Q, K and V all-to-alls (calls 1-3 of the group in ulysses_attention_forward);
 * call 4 sends O back along the reverse arrows. */
#include <stdio.h>
#include <stdlib.h>

#include "core/comm/comm.h"
#include "viz/dot.h"
#include "viz/layout_text.h"
#include "viz/schedule.h"
#include "viz/trace_query.h"

typedef struct a2a_bytes {
    int U;
    uint64_t *qkv, *kv, *o; /* [U][U]: bytes rank r sent to rank j (world ranks of ulysses[0] are 0..U-1) */
} a2a_bytes;

/* Reads calls 1-4 of every member of ulysses[0] from the trace. */
static usp_status read_bytes(const usp_trace_t *t, int U, a2a_bytes *out)
{
    *out = (a2a_bytes){.U = U};
    USP_CHECK(usp_calloc((void **)&out->qkv, 3 * (size_t)U * (size_t)U, sizeof *out->qkv, "the all-to-all bytes"));
    out->kv = out->qkv + (size_t)U * (size_t)U;
    out->o = out->kv + (size_t)U * (size_t)U;
    for (int r = 0; r < U; r++)
        for (uint64_t call = 1; call <= 4; call++) {
            const usp_trace_event *e = viz_trace_find(t, r, "ulysses[0]", call);
            if (!e || (e->kind != USP_OP_ALL_TO_ALL && e->kind != USP_OP_ALL_TO_ALL_V)) {
                free(out->qkv);
                return usp_error(USP_ERR_RUNTIME, "the trace has no all-to-all #%llu of rank %d on ulysses[0]: it is "
                                 "not the trace of one Ulysses attention layer with --ulysses %d",
                                 (unsigned long long)call, r, U);
            }
            for (int j = 0; j < U; j++) {
                uint64_t bytes = viz_trace_bytes_to(t, e, j);
                size_t at = (size_t)r * (size_t)U + (size_t)j;
                (call <= 3 ? out->qkv : out->o)[at] += bytes;
                if (call == 2 || call == 3)
                    out->kv[at] += bytes;
            }
        }
    return USP_OK;
}

/* The shape line under the title, shared with the other schedule diagrams. */
static void shape_caption(usp_strbuf *b, const viz_attention_config *c)
{
    usp_strbuf_printf(b, "N = %lld tokens, %lld heads (%lld KV), head_dim %lld, batch %lld, f32%s; "
                      "W = %d = DP %d x ring %d x Ulysses %d.",
                      (long long)c->seq_len, (long long)c->n_heads, (long long)c->n_kv_heads, (long long)c->head_dim,
                      (long long)c->batch, c->causal ? ", causal" : "", c->shape.world, c->shape.dp, c->shape.ring,
                      c->shape.ulysses);
}

/* One rank's box: a header row, then one cell (port s<i>) per slice. */
static void rank_box(usp_strbuf *b, const char *id, const char *header, char cells[][224], int n, const int *colours)
{
    usp_strbuf_printf(b, "  %s [shape=plain, label=<<table border=\"0\" cellborder=\"1\" cellspacing=\"0\" "
                         "cellpadding=\"4\"><tr><td bgcolor=\"#eeeeee\">", id);
    viz_dot_html(b, header);
    usp_strbuf_printf(b, "</td></tr>");
    for (int i = 0; i < n; i++) {
        usp_strbuf_printf(b, "<tr><td port=\"s%d\" bgcolor=\"%s\">", i, viz_dot_fill(colours[i]));
        viz_dot_html(b, cells[i]);
        usp_strbuf_printf(b, "</td></tr>");
    }
    usp_strbuf_printf(b, "</table>>];\n");
}

/* "0-1" for head group j, "0-1 (KV 0)" when the KV heads are fewer (GQA): the KV heads its query heads use. */
static void heads_text(const viz_attention_config *c, int U, int j, char *buf, size_t size)
{
    int64_t first, count;
    char q[32], kv[32];
    viz_head_split(c->n_heads, U, j, &first, &count);
    viz_range_text(first, count, q, sizeof q);
    if (c->n_kv_heads == c->n_heads) {
        snprintf(buf, size, "%s", q);
        return;
    }
    int64_t per_kv = c->n_heads / c->n_kv_heads, kv_first = first / per_kv;
    viz_range_text(kv_first, (first + count - 1) / per_kv - kv_first + 1, kv, sizeof kv);
    snprintf(buf, size, "%s (KV %s)", q, kv);
}

static void detailed(usp_strbuf *b, const viz_attention_config *c, const usp_seq_layout *l, const a2a_bytes *x)
{
    const int U = x->U;
    char (*cells)[224] = calloc((size_t)U, sizeof *cells);
    int *colours = calloc((size_t)U, sizeof *colours);
    if (!cells || !colours) {
        b->failed = 1;
        free(cells), free(colours);
        return;
    }
    char tok[96], heads[80], header[256], size[32], id[32];
    const char *group_tokens = c->shape.ring > 1 ? "the group's" : "all";
    /* Left column: rank r's slices, one per head group j (the colour of j). */
    usp_strbuf_printf(b, "  { rank=same;\n  before [shape=plaintext, label=\"BEFORE\\n(sequence split:\\n"
                         "each rank has its own\\ntokens, all heads)\", fontsize=12];\n");
    for (int r = 0; r < U; r++) {
        viz_tokens_text(l, r, tok, sizeof tok);
        for (int j = 0; j < U; j++) {
            heads_text(c, U, j, heads, sizeof heads);
            snprintf(cells[j], sizeof cells[j], "tokens %s | heads %s", tok, heads);
            colours[j] = j;
        }
        uint64_t sent = 0;
        for (int j = 0; j < U; j++)
            sent += x->qkv[(size_t)r * (size_t)U + (size_t)j];
        char size[32];
        snprintf(header, sizeof header, "rank %d\ntokens %s, all %lld heads\nsends %s", r, tok, (long long)c->n_heads,
                 viz_bytes(sent, size));
        snprintf(id, sizeof id, "b%d", r);
        rank_box(b, id, header, cells, U, colours);
    }
    usp_strbuf_printf(b, "  before");
    for (int r = 0; r < U; r++)
        usp_strbuf_printf(b, " -> b%d", r);
    usp_strbuf_printf(b, " [style=invis];\n  }\n");
    /* Right column: rank j's slices, one per token shard r, all of head group j. */
    usp_strbuf_printf(b, "  { rank=same;\n  after [shape=plaintext, label=\"AFTER\\n(heads split:\\n"
                         "each rank has all\\ntokens, its heads)\", fontsize=12];\n");
    for (int j = 0; j < U; j++) {
        heads_text(c, U, j, heads, sizeof heads);
        for (int r = 0; r < U; r++) {
            viz_tokens_text(l, r, tok, sizeof tok);
            snprintf(cells[r], sizeof cells[r], "tokens %s | heads %s", tok, heads);
            colours[r] = j;
        }
        snprintf(header, sizeof header, "rank %d\n%s %lld tokens, heads %s", j, group_tokens,
                 (long long)(l->per_rank * U), heads);
        snprintf(id, sizeof id, "a%d", j);
        rank_box(b, id, header, cells, U, colours);
    }
    usp_strbuf_printf(b, "  after");
    for (int j = 0; j < U; j++)
        usp_strbuf_printf(b, " -> a%d", j);
    usp_strbuf_printf(b, " [style=invis];\n  }\n");
    /* One arrow per slice: (r, j) lands as slice r of rank j. */
    for (int r = 0; r < U; r++)
        for (int j = 0; j < U; j++) {
            if (r == j) {
                usp_strbuf_printf(b, "  b%d:s%d:e -> a%d:s%d:w [style=dashed, color=\"#999999\", "
                                     "label=\"stays\", fontcolor=\"#777777\"];\n", r, j, j, r);
                continue;
            }
            size_t at = (size_t)r * (size_t)U + (size_t)j;
            char kv_size[32];
            usp_strbuf_printf(b, "  b%d:s%d:e -> a%d:s%d:w [color=\"%s\", fontcolor=\"%s\", label=\"Q %s + KV %s\"];\n",
                              r, j, j, r, viz_dot_line(j), viz_dot_line(j), viz_bytes(x->qkv[at] - x->kv[at], size),
                              viz_bytes(x->kv[at], kv_size));
        }
    free(cells);
    free(colours);
}

/* Above VIZ_DETAIL_MAX_RANKS: one node per rank on each side and one hub, bytes on the arrows. */
static void aggregated(usp_strbuf *b, const viz_attention_config *c, const usp_seq_layout *l, const a2a_bytes *x)
{
    const int U = x->U;
    char tok[96], heads[48], size[32], label[256];
    uint64_t total = 0;
    for (size_t i = 0; i < (size_t)U * (size_t)U; i++)
        total += x->qkv[i];
    usp_strbuf_printf(b, "  node [shape=box, style=\"rounded,filled\"];\n");
    usp_strbuf_printf(b, "  hub [shape=ellipse, fillcolor=\"#ffffff\", label=\"all-to-all on ulysses[0]\\n"
                         "%d ranks: each sends one slice\\nto every other rank\\n%d transfers, %s in all\"];\n",
                      U, U * (U - 1), viz_bytes(total, size));
    for (int r = 0; r < U; r++) {
        uint64_t sent = 0, received = 0;
        for (int j = 0; j < U; j++) {
            sent += x->qkv[(size_t)r * (size_t)U + (size_t)j];
            received += x->qkv[(size_t)j * (size_t)U + (size_t)r];
        }
        viz_tokens_text(l, r, tok, sizeof tok);
        snprintf(label, sizeof label, "rank %d: tokens %s", r, tok);
        usp_strbuf_printf(b, "  b%d [fillcolor=\"%s\", label=", r, viz_dot_fill(0));
        viz_dot_quote(b, label);
        usp_strbuf_printf(b, "];\n  b%d -> hub [label=\"%s\", color=\"%s\"];\n", r, viz_bytes(sent, size),
                          viz_dot_line(0));
        int64_t first, count;
        viz_head_split(c->n_heads, U, r, &first, &count);
        viz_range_text(first, count, heads, sizeof heads);
        snprintf(label, sizeof label, "rank %d: heads %s", r, heads);
        usp_strbuf_printf(b, "  a%d [fillcolor=\"%s\", label=", r, viz_dot_fill(1));
        viz_dot_quote(b, label);
        usp_strbuf_printf(b, "];\n  hub -> a%d [label=\"%s\", color=\"%s\"];\n", r, viz_bytes(received, size),
                          viz_dot_line(1));
    }
}

usp_status viz_dot_ulysses(const usp_trace_t *t, const viz_attention_config *c, usp_strbuf *dot)
{
    const int U = c->shape.ulysses;
    if (U < 2)
        return usp_error(USP_ERR_CONFIG, "--picture ulysses needs --ulysses 2 or more (it is %d): with one rank per "
                         "Ulysses group there is no all-to-all to draw; try --picture ring", U);
    usp_seq_layout l;
    USP_CHECK(usp_seq_layout_make(usp_layout_for(c->causal, c->shape.ring, 0, c->seq_len), c->seq_len, U, c->shape.ring, &l));
    a2a_bytes x;
    USP_CHECK(read_bytes(t, U, &x));
    uint64_t back = 0;
    for (int j = 1; j < U; j++)
        back = x.o[(size_t)j * (size_t)U] > back ? x.o[(size_t)j * (size_t)U] : back;
    int detail = U <= VIZ_DETAIL_MAX_RANKS;
    usp_strbuf cap = {0};
    char size[32];
    shape_caption(&cap, c);
    if (detail) {
        usp_strbuf_printf(&cap, "\nSlice = the rank's tokens x one head group; colour = head group.");
        usp_strbuf_printf(&cap, "\nArrow: one slice moving: its Q bytes + its K and V bytes (from the trace); dashed: the "
                                "rank's own slice, no transfer.");
        usp_strbuf_printf(&cap, "\nThe output O goes back along the reverse arrows (heads -> sequence): %s per arrow.",
                          viz_bytes(back, size));
        if (c->n_kv_heads < c->n_heads)
            usp_strbuf_printf(&cap, "\nGQA: %lld KV heads serve %lld query heads; a rank gets the KV heads its query heads "
                                    "use, so a KV head may travel to several ranks.",
                              (long long)c->n_kv_heads, (long long)c->n_heads);
    } else {
        usp_strbuf_printf(&cap, "\nAggregated: %d ranks > %d, so one node per rank and one hub instead of U x U slices. "
                                "Left: each rank's tokens (all heads); right: its heads (all tokens).", U,
                          VIZ_DETAIL_MAX_RANKS);
        usp_strbuf_printf(&cap, "\nArrows: the Q, K and V bytes each rank sends (left) and receives (right), from the "
                                "trace; O goes back the reverse way (%s per rank pair).", viz_bytes(back, size));
    }
    if (c->shape.ring > 1 || c->shape.dp > 1)
        usp_strbuf_printf(&cap, "\nDrawn: Ulysses group ulysses[0] (ranks 0-%d); the other %d groups do the same.", U - 1,
                          c->shape.ring * c->shape.dp - 1);
    char title[128];
    snprintf(title, sizeof title, "Ulysses all-to-all, U = %d: sequence -> heads (Q, K, V) of one attention layer", U);
    viz_dot_begin(dot, "ulysses", title, usp_strbuf_text(&cap), 1);
    usp_strbuf_free(&cap);
    if (detail) {
        usp_strbuf_printf(dot, "  graph [ranksep=2.2, nodesep=0.3];\n");
        detailed(dot, c, &l, &x);
    } else {
        usp_strbuf_printf(dot, "  graph [ranksep=1.5, nodesep=0.1];\n");
        aggregated(dot, c, &l, &x);
    }
    viz_dot_end(dot);
    free(x.qkv);
    return dot->failed ? usp_error(USP_ERR_RUNTIME, "out of memory writing the Ulysses diagram") : USP_OK;
}
