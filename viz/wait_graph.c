/* The wait-for picture (see wait_graph.h). */
#include "viz/wait_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm/comm.h"
#include "viz/dot.h"
#include "viz/render.h"

#define RED "#cc0000"
#define ORANGE "#e69138"

static const char *state_fill(const usp_wait_rank *r)
{
    if (r->missing || r->state == USP_RANK_CRASHED || r->state == USP_RANK_MISSING)
        return "#f4cccc";
    if (r->mismatched)
        return "#fce5cd";
    switch (r->state) {
    case USP_RANK_BLOCKED: return "#fff2cc";
    case USP_RANK_EXITED: return "#eeeeee";
    default: return "#ffffff";
    }
}

/* "rank 2\nblocked in all_to_all #1 on ulysses[0]\nall_to_all(count=2048, f32)\nat core/train/selftest.c:76" */
static void rank_label(char *buf, size_t size, int id, const usp_wait_rank *r)
{
    const char *op = r->op >= 0 ? usp_comm_kind_name((usp_comm_kind)r->op) : "";
    switch (r->state) {
    case USP_RANK_BLOCKED:
        snprintf(buf, size, "rank %d%s\nblocked in %s #%llu on %s\n%s\nat %s:%d", id,
                 r->in_cycle ? " (in the cycle)" : r->mismatched ? " (mismatch)" : "", op, (unsigned long long)r->seq,
                 r->group, r->call, r->file ? r->file : "?", r->line);
        break;
    case USP_RANK_CRASHED:
        snprintf(buf, size, "rank %d: CRASHED%s\nat its %s #%llu on %s\nat %s:%d", id,
                 r->missing ? " (others wait for it)" : "", op, (unsigned long long)r->seq, r->group,
                 r->file ? r->file : "?", r->line);
        break;
    case USP_RANK_EXITED:
        snprintf(buf, size, "rank %d: EXITED%s\nafter %llu calls (%s)", id,
                 r->missing ? " (others wait for it)" : "", (unsigned long long)r->calls, usp_status_name(r->result));
        break;
    case USP_RANK_MISSING:
        snprintf(buf, size, "rank %d: NO FLIGHT RECORD%s\nkilled, or never started", id,
                 r->missing ? " (others wait for it)" : "");
        break;
    case USP_RANK_UNSEEN:
        snprintf(buf, size, "rank %d\nnot a party to these calls", id);
        break;
    default:
        snprintf(buf, size, "rank %d\nrunnable: not at a call yet\n(the run stopped first)", id);
        break;
    }
}

static const char *edge_style(int highlight)
{
    return highlight ? "color=\"" RED "\", penwidth=3" : "color=\"#666666\"";
}

/* "0-1, 3-63": the ranks i with set[i], as ranges, cut short with ", ..." past `size`. */
static void rank_ranges(const char *set, int n, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (!set[i] || (i > 0 && set[i - 1]))
            continue;
        int j = i;
        while (j + 1 < n && set[j + 1])
            j++;
        char piece[32];
        int k = j == i ? snprintf(piece, sizeof piece, "%s%d", at ? ", " : "", i)
                       : snprintf(piece, sizeof piece, "%s%d-%d", at ? ", " : "", i, j);
        if (at + (size_t)k + 6 >= size) {
            snprintf(buf + at, size - at, ", ...");
            return;
        }
        memcpy(buf + at, piece, (size_t)k + 1);
        at += (size_t)k;
    }
}

/* Length of a group name without its index: "dp[3]" -> 2, so dp[0] and dp[3] are alike. */
static size_t family(const char *group)
{
    return strcspn(group, "[");
}

/* Two ranks in the same situation: same state, and blocked in the same call
 * (op, sequence number, call site) on groups of one family, or exited alike. */
static int alike(const usp_wait_rank *a, const usp_wait_rank *b)
{
    if (a->state != b->state)
        return 0;
    if (a->state == USP_RANK_EXITED)
        return a->result == b->result;
    if (a->state != USP_RANK_BLOCKED)
        return 1;
    size_t fa = family(a->group);
    return a->op == b->op && a->seq == b->seq && a->line == b->line && fa == family(b->group) &&
           strncmp(a->group, b->group, fa) == 0 && (a->file == b->file || (a->file && b->file && !strcmp(a->file, b->file)));
}

typedef struct class_edge {
    int from, to; /* picture nodes: the first rank of each class */
    int count, highlight;
} class_edge;

static int class_edge_order(const void *pa, const void *pb)
{
    const class_edge *a = pa, *b = pb;
    return a->from != b->from ? (a->from > b->from) - (a->from < b->from) : (a->to > b->to) - (a->to < b->to);
}

/* The aggregated picture: the ranks that matter to the report (on the chain,
 * missing, crashed, mismatched) alone, every other rank in one node per
 * situation (alike), and one arrow per pair of nodes, counting its waits. */
static void classes(usp_strbuf *b, const usp_wait_graph *g)
{
    int n = g->n_ranks, *node = malloc((size_t)n * sizeof *node);
    char *alone = calloc((size_t)n, 1), *set = calloc((size_t)n, 1), label[512], ranges[192];
    class_edge *edges = malloc((g->n_edges ? g->n_edges : 1) * sizeof *edges);
    if (!node || !alone || !set || !edges) {
        b->failed = 1;
        free(node), free(alone), free(set), free(edges);
        return;
    }
    for (int i = 0; i < n; i++) {
        const usp_wait_rank *r = &g->ranks[i];
        alone[i] = (char)(r->in_cycle || r->missing || r->mismatched || r->state == USP_RANK_CRASHED);
    }
    for (size_t e = 0; e < g->n_edges; e++)
        if (g->edges[e].highlight)
            alone[g->edges[e].from] = alone[g->edges[e].to] = 1;
    for (int i = 0; i < n; i++) {
        node[i] = i;
        for (int j = 0; j < i && !alone[i] && node[i] == i; j++)
            if (!alone[j] && node[j] == j && alike(&g->ranks[j], &g->ranks[i]))
                node[i] = j;
    }
    for (int i = 0; i < n; i++) {
        if (node[i] != i)
            continue;
        const usp_wait_rank *r = &g->ranks[i];
        if (alone[i]) {
            rank_label(label, sizeof label, i, r);
        } else {
            int count = 0, same_group = 1;
            for (int j = i; j < n; j++) {
                set[j] = node[j] == i;
                count += set[j];
                same_group &= !set[j] || strcmp(g->ranks[j].group, r->group) == 0;
            }
            memset(set, 0, (size_t)i);
            rank_ranges(set, n, ranges, sizeof ranges);
            char what[192];
            if (r->state == USP_RANK_BLOCKED)
                snprintf(what, sizeof what, "blocked in %s #%llu on %.*s%s\nat %s:%d",
                         usp_comm_kind_name((usp_comm_kind)r->op), (unsigned long long)r->seq,
                         (int)(same_group ? strlen(r->group) : family(r->group)), r->group, same_group ? "" : "[...]",
                         r->file ? r->file : "?", r->line);
            else if (r->state == USP_RANK_EXITED)
                snprintf(what, sizeof what, "exited (%s)", usp_status_name(r->result));
            else if (r->state == USP_RANK_MISSING)
                snprintf(what, sizeof what, "no flight record: killed, or never started");
            else
                snprintf(what, sizeof what, "runnable: not at a call yet");
            snprintf(label, sizeof label, "%d rank%s: %s\n%s", count, count == 1 ? "" : "s", ranges, what);
        }
        int hot = alone[i] && (r->missing || r->in_cycle || r->state == USP_RANK_CRASHED);
        usp_strbuf_printf(b, "  r%d [fillcolor=\"%s\"%s, label=", i, state_fill(r),
                          hot ? ", color=\"" RED "\", penwidth=2.5"
                          : r->mismatched ? ", color=\"" ORANGE "\", penwidth=2.5" : "");
        viz_dot_quote(b, label);
        usp_strbuf_printf(b, "];\n");
    }
    size_t m = 0;
    for (size_t e = 0; e < g->n_edges; e++)
        edges[m++] = (class_edge){node[g->edges[e].from], node[g->edges[e].to], 1, g->edges[e].highlight};
    qsort(edges, m, sizeof *edges, class_edge_order);
    for (size_t e = 0; e < m;) {
        class_edge sum = edges[e++];
        for (; e < m && edges[e].from == sum.from && edges[e].to == sum.to; e++)
            sum.count++, sum.highlight |= edges[e].highlight;
        usp_strbuf_printf(b, "  r%d -> r%d [%s", sum.from, sum.to, edge_style(sum.highlight));
        if (sum.count > 1)
            usp_strbuf_printf(b, ", label=\"%d waits\"", sum.count);
        usp_strbuf_printf(b, "];\n");
    }
    free(node), free(alone), free(set), free(edges);
}

usp_status viz_dot_wait_graph(const usp_wait_graph *g, usp_strbuf *dot)
{
    static const char *what[] = {[USP_REPORT_NONE] = "no report", [USP_REPORT_DEADLOCK] = "Deadlock",
                                 [USP_REPORT_MISMATCH] = "Collective mismatch",
                                 [USP_REPORT_RANK_FAILURE] = "Rank failure"};
    if (g->kind == USP_REPORT_NONE)
        return usp_error(USP_ERR_RUNTIME, "there is no deadlock, mismatch or rank failure report to draw");
    int big = g->n_ranks > 2 * VIZ_DETAIL_MAX_RANKS || g->n_edges > VIZ_MAX_ARROWS, cycle = 0, missing = 0, mismatched = 0;
    int unrecorded = 0; /* ranks without a flight record (a postmortem's report) */
    for (int i = 0; i < g->n_ranks; i++) {
        cycle |= g->ranks[i].in_cycle, missing |= g->ranks[i].missing, mismatched |= g->ranks[i].mismatched;
        unrecorded |= g->ranks[i].state == USP_RANK_MISSING;
    }
    char title[320], label[512];
    snprintf(title, sizeof title, "%s: who waits for whom", what[g->kind]);
    usp_strbuf cap = {0};
    usp_strbuf_printf(&cap, "%s: %s", g->source ? g->source : "The simulator's report", g->title);
    if (*g->injected)
        usp_strbuf_printf(&cap, "\nInjected fault%s %s", strchr(g->injected, '\n') ? "s:\n" : ":", g->injected);
    usp_strbuf_printf(&cap, "\nArrow A -> B: rank A is blocked in a call that cannot finish before rank B joins it.");
    if (cycle)
        usp_strbuf_printf(&cap, "\nRed arrows: the cycle - every rank on it waits for the next, so none can go on.");
    if (missing)
        usp_strbuf_printf(&cap, "\nRed box: the missing participant - it exited%s crashed%s, and the red arrows lead "
                                "to it.", unrecorded ? "," : " or", unrecorded ? " or left no flight record" : "");
    if (mismatched)
        usp_strbuf_printf(&cap, "\nOrange line: two ranks whose calls at the same position disagree.");
    usp_strbuf_printf(&cap, "\nYellow: blocked; grey: exited; white: %s.",
                      unrecorded ? "running (not in a call when its record was taken)"
                                 : "runnable (not at a call when the run stopped)");
    if (big)
        usp_strbuf_printf(&cap, "\nAggregated: %d ranks and %zu waits, so ranks in the same situation share a box "
                                "(the ranks that explain the report stand alone); an arrow counts the waits it stands "
                                "for.", g->n_ranks, g->n_edges);
    viz_dot_begin(dot, "waits", title, usp_strbuf_text(&cap), 0);
    usp_strbuf_free(&cap);
    usp_strbuf_printf(dot, "  node [shape=box, style=\"rounded,filled\"];\n");
    for (int i = 0; i < g->n_ranks && !big; i++) {
        const usp_wait_rank *r = &g->ranks[i];
        int hot = r->missing || r->in_cycle || r->state == USP_RANK_CRASHED;
        rank_label(label, sizeof label, i, r);
        usp_strbuf_printf(dot, "  r%d [fillcolor=\"%s\"%s, label=", i, state_fill(r),
                          hot ? ", color=\"" RED "\", penwidth=2.5" : r->mismatched ? ", color=\"" ORANGE "\", penwidth=2.5"
                                                                                    : "");
        viz_dot_quote(dot, label);
        usp_strbuf_printf(dot, "];\n");
    }
    if (big) {
        classes(dot, g);
    } else {
        for (size_t e = 0; e < g->n_edges; e++)
            usp_strbuf_printf(dot, "  r%d -> r%d [%s];\n", g->edges[e].from, g->edges[e].to,
                              edge_style(g->edges[e].highlight));
    }
    int first = -1;
    for (int i = 0; i < g->n_ranks; i++)
        if (g->ranks[i].mismatched) {
            if (first < 0) {
                first = i;
                continue;
            }
            const char *why = strchr(g->title, ':');
            usp_strbuf_printf(dot, "  r%d -> r%d [dir=none, style=dashed, color=\"" ORANGE "\", penwidth=2.5, "
                                   "constraint=false, fontcolor=\"" ORANGE "\", label=", first, i);
            viz_dot_quote(dot, why ? why + 2 : "mismatch");
            usp_strbuf_printf(dot, "];\n");
        }
    viz_dot_end(dot);
    return dot->failed ? usp_error(USP_ERR_RUNTIME, "out of memory writing the wait-for graph") : USP_OK;
}

usp_status viz_write_wait_graph(const usp_wait_graph *g, const char *option, const char *path)
{
    usp_strbuf dot = {0};
    usp_status s = viz_dot_wait_graph(g, &dot);
    if (s == USP_OK)
        s = viz_write_file(option, usp_strbuf_text(&dot), path);
    usp_strbuf_free(&dot);
    return s;
}
