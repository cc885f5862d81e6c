/* The traffic map (see traffic.h): sum the bytes of every event per (sender,
 * receiver) pair, then draw the pairs, or the hosts when there are too many. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "viz/dot.h"
#include "viz/traffic.h"

typedef struct pair {
    int from, to;
    uint64_t bytes;
} pair;

static int pair_order(const void *pa, const void *pb)
{
    const pair *a = pa, *b = pb;
    return a->from != b->from ? (a->from > b->from) - (a->from < b->from) : (a->to > b->to) - (a->to < b->to);
}

/* Every (from, to, bytes) of the trace, summed per pair and sorted; *n pairs. */
static usp_status collect_pairs(const usp_trace_t *t, pair **out, size_t *n)
{
    size_t total = 0;
    for (size_t i = 0; i < usp_trace_count(t); i++)
        total += usp_trace_at(t, i)->n_peers;
    *out = NULL;
    *n = 0;
    if (total == 0)
        return USP_OK;
    pair *p;
    USP_CHECK(usp_malloc((void **)&p, total * sizeof *p, "the traffic pairs"));
    size_t k = 0;
    for (size_t i = 0; i < usp_trace_count(t); i++) {
        const usp_trace_event *e = usp_trace_at(t, i);
        const usp_trace_peer *peers = usp_trace_peers(t, e);
        for (size_t j = 0; j < e->n_peers; j++)
            p[k++] = (pair){e->rank, peers[j].peer, peers[j].bytes};
    }
    qsort(p, k, sizeof *p, pair_order);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        if (m > 0 && p[m - 1].from == p[i].from && p[m - 1].to == p[i].to)
            p[m - 1].bytes += p[i].bytes;
        else
            p[m++] = p[i];
    }
    *out = p;
    *n = m;
    return USP_OK;
}

/* Pen width 1..5, logarithmic in bytes between the smallest and largest arrow. */
static double pen_width(uint64_t bytes, uint64_t least, uint64_t most)
{
    if (most <= least)
        return 2.0;
    return 1.0 + 4.0 * log((double)bytes / (double)least) / log((double)most / (double)least);
}

/* The colour of an arrow and, the first time a class is seen, a legend entry. */
static const char *link_color(const viz_traffic_options *o, int from, int to, usp_strbuf *legend, const char **seen,
                              int *n_seen)
{
    viz_link_style style = {0};
    if (!o->link || !o->link(o->link_ctx, from, to, &style) || !style.color)
        return "#555555";
    for (int i = 0; i < *n_seen; i++)
        if (strcmp(seen[i], style.name ? style.name : "?") == 0)
            return style.color;
    if (*n_seen < 8) {
        seen[(*n_seen)++] = style.name ? style.name : "?";
        usp_strbuf_printf(legend, "%s%s %s", *n_seen == 1 ? "" : ", ",
                          style.color_name ? style.color_name : style.color, style.name ? style.name : "?");
    }
    return style.color;
}

int viz_link_of_topology(void *ctx, int from, int to, viz_link_style *out)
{
    const sim_topology *t = ctx;
    int gpus = sim_topology_gpus(t);
    if (from < 0 || to < 0 || from >= gpus || to >= gpus || from == to)
        return 0;
    /* The class is the slowest kind of link the route crosses: a NIC between
     * nodes, else the node's fabric; on PCIe, GPUs under different CPU sockets
     * also cross the socket-to-socket link, the narrowest hop inside the box. */
    int per_socket = t->gpus_per_switch * t->switches_per_socket;
    if (sim_topology_node_of(t, from) != sim_topology_node_of(t, to))
        *out = (viz_link_style){"InfiniBand", "#cc4125", "red"};
    else if (t->fabric == SIM_FABRIC_NVSWITCH)
        *out = (viz_link_style){"NVLink", "#76b900", "green"};
    else if (per_socket > 0 && (from % t->gpus_per_node) / per_socket != (to % t->gpus_per_node) / per_socket)
        *out = (viz_link_style){"PCIe across CPU sockets", "#8e44ad", "purple"};
    else
        *out = (viz_link_style){"PCIe", "#1f5f99", "blue"};
    return 1;
}

void viz_traffic_use_topology(viz_traffic_options *o, const sim_topology *topology)
{
    o->gpus_per_node = topology->gpus_per_node;
    o->link = viz_link_of_topology;
    o->link_ctx = (void *)topology; /* the hook only reads it */
}

static void rank_nodes(usp_strbuf *b, int world, int per_node, const uint64_t *sent, const uint64_t *inside)
{
    char size[32], size2[32], label[128];
    for (int h = 0; h * per_node < world; h++) {
        int last = (h + 1) * per_node < world ? (h + 1) * per_node - 1 : world - 1;
        usp_strbuf_printf(b, "  subgraph cluster_node%d {\n    style=\"rounded,filled\"; fillcolor=\"#f6f6f6\"; "
                             "color=\"#888888\"; label=\"node %d (GPUs %d-%d)\";\n", h, h, h * per_node, last);
        for (int r = h * per_node; r <= last; r++) {
            if (inside)
                snprintf(label, sizeof label, "rank %d\nsent %s\n(%s inside the node)", r, viz_bytes(sent[r], size),
                         viz_bytes(inside[r], size2));
            else
                snprintf(label, sizeof label, "rank %d\nsent %s", r, viz_bytes(sent[r], size));
            usp_strbuf_printf(b, "    r%d [label=", r);
            viz_dot_quote(b, label);
            usp_strbuf_printf(b, "];\n");
        }
        usp_strbuf_printf(b, "  }\n");
    }
}

/* The aggregated map's arrows: one from node to node, the sum of its rank pairs' bytes (between[a * hosts + b]). */
static void node_arrows(usp_strbuf *dot, const viz_traffic_options *o, const uint64_t *between, int hosts,
                        int per_node, usp_strbuf *legend, const char **seen, int *n_seen)
{
    uint64_t least = UINT64_MAX, most = 0;
    char size[32];
    for (size_t i = 0; i < (size_t)hosts * (size_t)hosts; i++)
        if (between[i]) {
            least = between[i] < least ? between[i] : least;
            most = between[i] > most ? between[i] : most;
        }
    for (int a = 0; a < hosts; a++)
        for (int b = 0; b < hosts; b++) {
            uint64_t bytes = between[(size_t)a * (size_t)hosts + (size_t)b];
            if (!bytes)
                continue;
            const char *color = link_color(o, a * per_node, b * per_node, legend, seen, n_seen);
            usp_strbuf_printf(dot, "  r%d -> r%d [ltail=cluster_node%d, lhead=cluster_node%d, color=\"%s\", "
                                   "penwidth=%.2f, label=\"%s\"];\n",
                              a * per_node, b * per_node, a, b, color, pen_width(bytes, least, most),
                              viz_bytes(bytes, size));
        }
}

usp_status viz_dot_traffic(const usp_trace_t *t, int world, const viz_traffic_options *opt, usp_strbuf *dot)
{
    viz_traffic_options o = opt ? *opt : (viz_traffic_options){0};
    int per_node = o.gpus_per_node > 0 ? o.gpus_per_node : 8, hosts = (world + per_node - 1) / per_node;
    pair *p;
    size_t n;
    USP_CHECK(collect_pairs(t, &p, &n));
    uint64_t *sent = calloc((size_t)world, sizeof *sent), *inside = calloc((size_t)world, sizeof *inside);
    uint64_t *between = calloc((size_t)hosts * (size_t)hosts, sizeof *between), least = UINT64_MAX, most = 0, all = 0;
    if (!sent || !inside || !between) {
        free(p), free(sent), free(inside), free(between);
        return usp_error(USP_ERR_RUNTIME, "out of memory drawing the traffic of %d ranks", world);
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i].from >= world || p[i].to >= world)
            continue;
        sent[p[i].from] += p[i].bytes;
        all += p[i].bytes;
        int hf = p[i].from / per_node, ht = p[i].to / per_node;
        if (hf == ht)
            inside[p[i].from] += p[i].bytes;
        else
            between[(size_t)hf * (size_t)hosts + (size_t)ht] += p[i].bytes;
    }
    int aggregate = n > VIZ_MAX_ARROWS;
    char size[32];
    usp_strbuf cap = {0}, legend = {0};
    if (o.caption)
        usp_strbuf_printf(&cap, "%s\n", o.caption);
    usp_strbuf_printf(&cap, "%d ranks in boxes of %d GPUs per node; %zu rank pairs exchanged %s in all (sums over the "
                      "whole run, from the trace).", world, per_node, n, viz_bytes(all, size));
    usp_strbuf_printf(&cap, "\nArrow: data one rank sent another, labelled with the bytes; thicker = more bytes "
                            "(logarithmic).");
    if (aggregate)
        usp_strbuf_printf(&cap, "\nAggregated: %zu rank pairs > %d, so traffic inside a node is summed in each rank's "
                                "label and arrows join nodes (the sum over their rank pairs).", n, VIZ_MAX_ARROWS);
    const char *seen[8];
    int n_seen = 0;
    /* first pass only to learn the link classes for the legend, in arrow order */
    for (size_t i = 0; i < n; i++)
        link_color(&o, p[i].from, p[i].to, &legend, seen, &n_seen);
    if (n_seen)
        usp_strbuf_printf(&cap, "\nColour = the link an arrow crosses: %s.", usp_strbuf_text(&legend));
    else
        usp_strbuf_printf(&cap, "\nColour: plain, no cluster model given (a topology would colour NVLink, PCIe and "
                                "InfiniBand arrows apart).");
    viz_dot_begin(dot, "traffic", o.title ? o.title : "Traffic map", usp_strbuf_text(&cap), 0);
    usp_strbuf_free(&cap);
    usp_strbuf_printf(dot, "  graph [compound=true, ranksep=0.9, nodesep=0.3];\n");
    usp_strbuf_printf(dot, "  node [shape=box, style=\"rounded,filled\", fillcolor=\"%s\"];\n", viz_dot_fill(0));
    rank_nodes(dot, world, per_node, sent, aggregate ? inside : NULL);
    if (!aggregate) {
        for (size_t i = 0; i < n; i++) {
            least = p[i].bytes < least ? p[i].bytes : least;
            most = p[i].bytes > most ? p[i].bytes : most;
        }
        for (size_t i = 0; i < n; i++) {
            if (p[i].from >= world || p[i].to >= world)
                continue;
            const char *color = link_color(&o, p[i].from, p[i].to, &legend, seen, &n_seen);
            /* a pair that sent the same both ways is one two-headed arrow: half the clutter */
            pair back = {p[i].to, p[i].from, 0};
            const pair *q = bsearch(&back, p, n, sizeof *p, pair_order);
            int both = q && q->bytes == p[i].bytes;
            if (both && p[i].from > p[i].to)
                continue;
            usp_strbuf_printf(dot, "  r%d -> r%d [%scolor=\"%s\", penwidth=%.2f, label=\"%s%s\"];\n", p[i].from,
                              p[i].to, both ? "dir=both, " : "", color, pen_width(p[i].bytes, least, most),
                              viz_bytes(p[i].bytes, size), both ? " each way" : "");
        }
    } else {
        node_arrows(dot, &o, between, hosts, per_node, &legend, seen, &n_seen);
    }
    viz_dot_end(dot);
    usp_strbuf_free(&legend);
    free(p), free(sent), free(inside), free(between);
    return dot->failed ? usp_error(USP_ERR_RUNTIME, "out of memory writing the traffic map") : USP_OK;
}
