/* `usp viz`: run the communication of one attention layer of a configuration
 * on the simulator runtime (tiny real data: shapes are what matter) and draw it: the
 * Ulysses all-to-all, the ring schedule, the hybrid, or the traffic map, as
 * DOT / SVG / PNG / PDF (the extension of --dot chooses), and/or write the
 * Chrome trace of the run (--trace FILE.json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/runtime_registry.h"
#include "viz/attention_run.h"
#include "viz/chrome_trace.h"
#include "viz/render.h"
#include "viz/schedule.h"
#include "viz/traffic.h"

typedef struct viz_options {
    int world, ulysses, ring, seq, heads, kv_heads, head_dim, batch, causal, gpus_per_node;
    const char *picture, *dot, *trace;
} viz_options;

static const char *pictures[] = {"auto", "ulysses", "ring", "hybrid", "traffic"};

/* The picture --picture names (auto: by the degrees), checked against them before anything runs. */
static usp_status choose_picture(const viz_options *o, const char **out)
{
    const char *p = o->picture ? o->picture : "auto";
    int known = 0;
    for (size_t i = 0; i < sizeof pictures / sizeof *pictures; i++)
        known |= strcmp(p, pictures[i]) == 0;
    if (!known)
        return usp_error(USP_ERR_CONFIG, "--picture %s: unknown picture; use auto, ulysses, ring, hybrid or traffic", p);
    if (strcmp(p, "auto") == 0)
        p = o->ulysses > 1 && o->ring > 1 ? "hybrid" : o->ring > 1 ? "ring" : "ulysses";
    if (strcmp(p, "ulysses") == 0 && o->ulysses < 2)
        return usp_error(USP_ERR_CONFIG, "--picture ulysses needs --ulysses 2 or more (it is %d)", o->ulysses);
    if (strcmp(p, "ring") == 0 && o->ring < 2)
        return usp_error(USP_ERR_CONFIG, "--picture ring needs --ring 2 or more (it is %d)", o->ring);
    if (strcmp(p, "hybrid") == 0 && (o->ulysses < 2 || o->ring < 2))
        return usp_error(USP_ERR_CONFIG, "--picture hybrid needs --ulysses and --ring both 2 or more (they are %d "
                         "and %d)", o->ulysses, o->ring);
    *out = p;
    return USP_OK;
}

static usp_status draw(const viz_options *o, const char *picture, const viz_attention_config *c, const usp_trace_t *t)
{
    usp_strbuf dot = {0};
    usp_status s;
    if (strcmp(picture, "traffic") == 0) {
        char caption[256];
        snprintf(caption, sizeof caption, "One attention layer (forward): --world %d --ulysses %d --ring %d --seq %d "
                 "--heads %d --kv-heads %d%s.", o->world, o->ulysses, o->ring, o->seq, o->heads, o->kv_heads,
                 o->causal ? " --causal" : "");
        viz_traffic_options to = {.gpus_per_node = o->gpus_per_node, .title = "Traffic map of one attention layer",
                                  .caption = caption};
        s = viz_dot_traffic(t, o->world, &to, &dot);
    } else if (strcmp(picture, "ulysses") == 0) {
        s = viz_dot_ulysses(t, c, &dot);
    } else if (strcmp(picture, "ring") == 0) {
        s = viz_dot_ring(t, c, &dot);
    } else {
        s = viz_dot_hybrid(t, c, &dot);
    }
    if (s == USP_OK)
        s = viz_write_file("--dot", usp_strbuf_text(&dot), o->dot);
    usp_strbuf_free(&dot);
    return s;
}

static usp_status run_viz(viz_options *o)
{
    if (!o->dot && !o->trace)
        return usp_error(USP_ERR_CONFIG, "nothing to write: give --dot FILE.{dot,svg,png,pdf} and/or --trace FILE.json "
                         "(see usp viz --help)");
    if (o->ulysses * o->ring < 2)
        return usp_error(USP_ERR_CONFIG, "--ulysses %d x --ring %d: one rank has no schedule to draw; give --ulysses "
                         "and/or --ring 2 or more", o->ulysses, o->ring);
    const char *picture = NULL;
    if (o->dot) { /* a bad file name is an option error, found before anything runs */
        USP_CHECK(viz_check_output("--dot", o->dot));
        USP_CHECK(choose_picture(o, &picture));
    }
    if (o->world == 0)
        o->world = o->ulysses * o->ring;
    if (o->kv_heads == 0)
        o->kv_heads = o->heads;
    viz_attention_config c = {.seq_len = o->seq, .batch = o->batch, .n_heads = o->heads, .n_kv_heads = o->kv_heads,
                              .head_dim = o->head_dim, .causal = o->causal};
    USP_CHECK(usp_mesh_shape_make(o->world, o->ulysses, o->ring, &c.shape));
    USP_CHECK(viz_attention_check(&c)); /* before a runtime is made: the message then names the option */
    usp_runtime_t *rt;
    USP_CHECK(runtime_registry_create("sim", &(usp_runtime_options){.world_size = c.shape.world, .trace = 1}, &rt));
    usp_status s = viz_attention_run(&c, rt);
    const usp_trace_t *trace = usp_runtime_trace(rt);
    if (s == USP_OK && picture)
        s = draw(o, picture, &c, trace);
    if (s == USP_OK && o->trace)
        s = viz_trace_write(trace, o->trace);
    if (s == USP_OK) {
        printf("usp viz: one attention layer on %d simulated ranks (DP %d x ring %d x Ulysses %d), %zu calls",
               c.shape.world, c.shape.dp, c.shape.ring, c.shape.ulysses, usp_trace_count(trace));
        if (picture)
            printf("; %s picture in %s", picture, o->dot);
        if (o->trace)
            printf("; trace in %s", o->trace);
        printf("\n");
    }
    usp_runtime_destroy(rt);
    return s;
}

int cmd_viz(int argc, char **argv)
{
    viz_options o = {.ulysses = 1, .ring = 1, .seq = 16, .heads = 8, .head_dim = 4, .batch = 1, .gpus_per_node = 8};
    const cli_option options[] = {
        {"--ulysses", CLI_INT, &o.ulysses, "U", "Ulysses degree (default 1)", 1, 4096},
        {"--ring", CLI_INT, &o.ring, "R", "Ring degree (default 1)", 1, 4096},
        {"--world", CLI_INT, &o.world, "W", "simulated GPUs, DP x R x U (default U*R)", 1, 4096},
        {"--seq", CLI_INT, &o.seq, "N", "tokens in the sequence (default 16)", 1, 1 << 20},
        {"--heads", CLI_INT, &o.heads, "H", "query heads (default 8)", 1, 4096},
        {"--kv-heads", CLI_INT, &o.kv_heads, "K", "key/value heads, dividing H (default H; fewer: GQA)", 1, 4096},
        {"--head-dim", CLI_INT, &o.head_dim, "D", "head dimension (default 4)", 1, 1024},
        {"--batch", CLI_INT, &o.batch, "B", "sequences (default 1)", 1, 1024},
        {"--causal", CLI_FLAG, &o.causal, NULL, "causal mask (the ring then uses the zigzag layout)", 0, -1},
        {"--picture", CLI_STRING, &o.picture, "WHAT",
         "auto (default: hybrid, ring or ulysses by the degrees), ulysses, ring, hybrid or traffic", 0, -1},
        {"--gpus-per-node", CLI_INT, &o.gpus_per_node, "G", "GPUs per node in the traffic map (default 8)", 1, 4096},
        {"--dot", CLI_STRING, &o.dot, "FILE", "write the picture: .dot (Graphviz text), .svg, .png or .pdf", 0, -1},
        {"--trace", CLI_STRING, &o.trace, "FILE",
         "write the run's trace: Chrome trace JSON (Perfetto) for .json, plain text otherwise", 0, -1},
        {0},
    };
    const cli_command c = {
        .name = "viz",
        .usage = "usp viz [options] --dot FILE [--trace FILE.json]",
        .about = "Draws the communication schedule of one attention layer of a configuration: it runs the\n"
                 "layer's communication on the simulator (real code, tiny data) and draws what the trace\n"
                 "recorded. Pictures: ulysses (the all-to-all: who sends which slice to whom, with sizes),\n"
                 "ring (one column per ring step, skipped causal blocks shown), hybrid (both levels), traffic\n"
                 "(bytes between ranks, grouped by node). Above 8 ranks a picture draws one node per rank.\n"
                 "Example: usp viz --ulysses 4 --seq 16 --heads 8 --dot a2a.svg --trace a2a.json\n"
                 "Bad options exit 2; see docs/viz.md for what each picture shows.",
        .options = options,
    };
    int done;
    usp_status s = cli_parse(&c, argc, argv, 2, &done);
    if (s != USP_OK || done)
        return s != USP_OK ? cli_fail("viz", s) : 0;
    s = run_viz(&o);
    return s != USP_OK ? cli_fail("viz", s) : 0;
}
