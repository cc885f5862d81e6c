/* `usp selftest`: run the selftest schedule (core/train/selftest.h) on a runtime
 * (the simulator: --inject and --dot are its) and print what ran, what moved
 * and what was checked; or the deadlock / mismatch / crash report, with exit
 * code 3 or 4. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm/comm.h"
#include "core/model/model_config.h"
#include "core/runtime/runtime.h"
#include "core/parallel/schedule.h"
#include "core/train/selftest.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/explore_cli.h"
#include "tools/output_path.h"
#include "tools/runtime_registry.h"
#include "viz/chrome_trace.h"
#include "viz/render.h"
#include "viz/run_picture.h"

/* The cap on one layer's Q over all ranks (W x T x heads x D floats): --world 256 with the defaults. */
#define SELFTEST_Q_BYTES_MAX (256.0 * 1024 * 1024)

typedef struct selftest_options {
    int world, ulysses, ring, layers, heads, kv_heads, head_dim, tokens, json;
    const char *trace, *dot, *topology;
    int nodes;
    cli_list inject;
    const char *overlap;
    explore_options explore;
} selftest_options;

/* The calls and bytes come from the trace (the runtime records one), the rest
 * from the ranks' own figures. */
static void print_summary(const usp_trace_t *trace, const usp_selftest_run *run, const selftest_options *o)
{
    const usp_selftest_config *c = &run->config;
    uint64_t by_kind[USP_OP_COUNT] = {0}, bytes = 0, elements = 0, buffers = 0;
    for (size_t i = 0; i < usp_trace_count(trace); i++) {
        by_kind[usp_trace_at(trace, i)->kind]++;
        bytes += usp_trace_at(trace, i)->bytes_sent;
    }
    double sim_time = 0;
    size_t peak = 0;
    for (int r = 0; r < c->shape.world; r++) {
        elements += run->stats[r].elements_checked;
        buffers += run->stats[r].buffers_checked;
        sim_time = run->stats[r].end_s > sim_time ? run->stats[r].end_s : sim_time;
        peak = run->stats[r].peak_bytes > peak ? (size_t)run->stats[r].peak_bytes : peak;
    }
    if (o->json) {
        json_t *j = json_pack("{s:b, s:i, s:i, s:i, s:i, s:s, s:I, s:I, s:I, s:I, s:f}", "summary", 1, "world",
                              c->shape.world, "dp", c->shape.dp, "ring", c->shape.ring, "ulysses", c->shape.ulysses,
                              "schedule", usp_schedule_for_mesh(c->shape.ulysses, c->shape.ring)->name,
                              "calls", (json_int_t)usp_trace_count(trace), "bytes", (json_int_t)bytes,
                              "elements_checked", (json_int_t)elements, "buffers_checked", (json_int_t)buffers,
                              "sim_time_s", sim_time);
        json_t *peaks = json_array();
        for (int r = 0; r < c->shape.world; r++)
            json_array_append_new(peaks, json_integer((json_int_t)run->stats[r].peak_bytes));
        json_object_set_new(j, "peak_bytes", peaks);
        char *text = json_dumps(j, JSON_COMPACT);
        if (text)
            puts(text);
        free(text);
        json_decref(j);
        return;
    }
    printf("usp selftest: world %d = dp %d x ring %d x ulysses %d; %d layers, %d heads (%d kv), head_dim %d, "
           "%d tokens per rank\n", c->shape.world, c->shape.dp, c->shape.ring, c->shape.ulysses, c->layers,
           c->heads, c->kv_heads, c->head_dim, c->tokens_per_rank);
    printf("  calls run:      %zu (over all ranks):", usp_trace_count(trace));
    for (int k = 0; k < USP_OP_COUNT; k++)
        if (by_kind[k])
            printf(" %s %llu", usp_comm_kind_name((usp_comm_kind)k), (unsigned long long)by_kind[k]);
    printf("\n  bytes moved:    %llu (%.2f MiB)\n", (unsigned long long)bytes, (double)bytes / (1 << 20));
    printf("  checks passed:  %llu buffers, %llu elements, every one as sent\n", (unsigned long long)buffers,
           (unsigned long long)elements);
    printf("  virtual time:   %.6f s (slowest rank, on the modelled cluster)\n", sim_time);
    printf("  peak memory:    %zu bytes (largest rank)\n", peak);
    printf("ok\n");
}

/* --dot: the wait-for graph of a report, else the traffic map of the step. */
static usp_status write_picture(const usp_runtime_t *rt, usp_status run, const selftest_options *o,
                                const usp_mesh_shape *shape)
{
    char caption[160];
    snprintf(caption, sizeof caption, "usp selftest: one training step's communication, world %d = dp %d x ring %d "
             "x ulysses %d.", shape->world, shape->dp, shape->ring, shape->ulysses);
    return viz_run_picture(rt, run, "Traffic map of the selftest step", caption, o->dot, NULL);
}

static usp_status run_selftest(const selftest_options *o, int *exit_code)
{
    if (o->dot) { /* a picture this build cannot write is an option error, before anything runs */
        USP_CHECK(viz_check_output("--dot", o->dot));
        USP_CHECK(output_path_check("--dot", o->dot, 0));
    }
    if (o->trace) /* written after the run: a path that cannot take it is refused before */
        USP_CHECK(output_path_check("--trace", o->trace, 0));
    usp_mesh_shape shape;
    USP_CHECK(usp_mesh_shape_make(o->world, o->ulysses > 0 ? o->ulysses : o->world / o->ring, o->ring, &shape));
    usp_selftest_run run = {.config = usp_selftest_default(&shape)};
    usp_selftest_config *c = &run.config;
    USP_CHECK(explore_options_check(&o->explore, NULL));
    if (o->overlap && strcmp(o->overlap, "ordered") == 0)
        c->overlap = USP_SELFTEST_OVERLAP_ORDERED;
    else if (o->overlap && strcmp(o->overlap, "unordered") == 0)
        c->overlap = USP_SELFTEST_OVERLAP_UNORDERED;
    else if (o->overlap && strcmp(o->overlap, "none") != 0)
        return usp_error(USP_ERR_CONFIG, "--overlap %s: not a mode; use none, ordered or unordered", o->overlap);
    if (o->layers >= 0) c->layers = o->layers;
    if (o->heads > 0) c->heads = o->heads;
    if (o->kv_heads > 0) c->kv_heads = o->kv_heads;
    if (o->head_dim > 0) c->head_dim = o->head_dim;
    if (o->tokens > 0) c->tokens_per_rank = o->tokens;
    if (c->heads % shape.ulysses != 0)
        return usp_error(USP_ERR_CONFIG, "--heads %d does not divide by --ulysses %d", c->heads, shape.ulysses);
    USP_CHECK(usp_model_check_kv_heads(NULL, "--kv-heads", c->kv_heads, "--heads", c->heads)); /* as train refuses */
    /* the exchanges are shaped like the mesh's schedule's: what it refuses (GQA heads that do not map onto a
     * rank's KV heads), the selftest does too */
    const usp_schedule_shape sched = {.ulysses = shape.ulysses, .ring = shape.ring, .n_heads = c->heads,
                                      .n_kv_heads = c->kv_heads, .causal = 1};
    const usp_schedule_i *schedule;
    USP_CHECK(usp_schedule_resolve("sp", &sched, &schedule));
    /* Every element is real and checked: the host holds about 10 buffers of a layer's Q over all ranks
     * (4.8 GB and half a minute at --world 512 with the default 512 heads), so refuse before allocating. */
    double q_bytes = (double)shape.world * c->tokens_per_rank * c->heads * c->head_dim * sizeof(float);
    if (q_bytes > SELFTEST_Q_BYTES_MAX)
        return usp_error(USP_ERR_CONFIG,
                         "--world %d with %d heads, %d tokens per rank and head dimension %d holds %.0f MB of Q over "
                         "all ranks (about 10 times that in host memory); the selftest holds at most %.0f MB: use a "
                         "smaller --world (256 with the defaults), --ring to lower the Ulysses degree and the heads, "
                         "or fewer --tokens or a smaller --head-dim",
                         shape.world, c->heads, c->tokens_per_rank, c->head_dim, q_bytes / 1e6,
                         SELFTEST_Q_BYTES_MAX / 1e6);
    /* the summary counts the calls in the trace: it is always on */
    usp_runtime_options ro = {.world_size = shape.world, .cluster = o->topology, .nodes = o->nodes,
                              .inject = o->inject.items, .n_inject = o->inject.n, .trace = 1,
                              .record_schedule = o->explore.explore};
    usp_runtime_t *rt;
    USP_CHECK(runtime_registry_create("sim", &ro, &rt));
    usp_status s = usp_calloc((void **)&run.stats, (size_t)shape.world, sizeof *run.stats, "selftest stats");
    if (s == USP_OK)
        s = usp_runtime_run(rt, usp_selftest_rank, &run);
    char run_message[USP_ERROR_MESSAGE_MAX]; /* writing the outputs must not overwrite why the run failed */
    snprintf(run_message, sizeof run_message, "%s", usp_error_message());
    const usp_trace_t *trace = usp_runtime_trace(rt);
    usp_status output_status = USP_OK;
    if (o->trace && trace) /* the trace of a failed run is whole too: it helps to debug it */
        output_status = viz_trace_write(trace, o->trace);
    int explore_code = 0;
    if (s == USP_OK && o->explore.explore) /* its --dot is the wait-for graph of a deadlock it finds */
        output_status = explore_after_run(rt, &o->explore, "selftest", o->dot, stdout, stderr, &explore_code);
    if (o->dot && output_status == USP_OK && !explore_code)
        output_status = write_picture(rt, s, o, &shape);
    if (s == USP_OK && output_status == USP_OK && !explore_code)
        print_summary(trace, &run, o);
    if (s == USP_OK && explore_code)
        s = (usp_status)explore_code;
    *exit_code = s != USP_OK ? (int)s : (int)output_status;
    if (s != USP_OK && *usp_runtime_report(rt))
        cli_error(stderr, "selftest", "%s", usp_runtime_report(rt));
    else if (s != USP_OK && !explore_code) /* the exploration printed its findings */
        cli_error(stderr, "selftest", "%s\n", run_message);
    if (output_status != USP_OK)
        cli_error(stderr, "selftest", "%s\n", usp_error_message());
    free(run.stats);
    usp_runtime_destroy(rt);
    return USP_OK;
}

int cmd_selftest(int argc, char **argv)
{
    selftest_options o = {.world = 4, .ring = 1, .layers = -1, .explore = {.slots = 1}};
    const cli_option options[] = {
        {"--world", CLI_INT, &o.world, "W", "simulated GPUs (default 4)", 1, 4096},
        {"--ulysses", CLI_INT, &o.ulysses, "U", "Ulysses degree (default W/R)", 1, 4096},
        {"--ring", CLI_INT, &o.ring, "R", "Ring degree (default 1); DP = W/(U*R)", 1, 4096},
        {"--layers", CLI_INT, &o.layers, "L", "attention layers in the step (default 2)", 0, 1000},
        {"--heads", CLI_INT, &o.heads, "H", "query heads (default 8, rounded up to a multiple of U)", 1, 4096},
        {"--kv-heads", CLI_INT, &o.kv_heads, "H", "key/value heads (default 2)", 1, 4096},
        {"--head-dim", CLI_INT, &o.head_dim, "D", "head dimension (default 16)", 1, 1024},
        {"--tokens", CLI_INT, &o.tokens, "T", "tokens per rank (default 32)", 1, 1 << 20},
        {"--topology", CLI_STRING, &o.topology, "NAME|FILE",
         "modelled cluster: dgx-h100 (default), dgx-h200, dgx-a100, pcie-gen4, pcie-gen5, pcie-l20, or a JSON file", 0, -1},
        {"--nodes", CLI_INT, &o.nodes, "K", "nodes of the topology (default: as many as --world needs)", 1, 100000},
        {"--inject", CLI_LIST, &o.inject, "SPEC",
         "fault KIND:rank=R[,op=OP][,call=K][,group=G], KIND skip|swap|size|group|crash (repeatable)", 0, -1},
        {"--trace", CLI_STRING, &o.trace, "FILE",
         "write the trace: Chrome trace JSON (Perfetto) when FILE ends in .json, plain text otherwise", 0, -1},
        {"--dot", CLI_STRING, &o.dot, "FILE",
         "picture (.dot, .svg, .png, .pdf): the wait-for graph of a deadlock/mismatch, else the traffic map", 0, -1},
        {"--json", CLI_FLAG, &o.json, NULL, "print the summary as one JSON object", 0, -1},
        {"--overlap", CLI_STRING, &o.overlap, "MODE",
         "gradient buckets all-reduced on a stream of their own during the backward: none (default), ordered "
         "(the next all-to-all waits for each), unordered (no event between them: a planted order bug)", 0, -1},
        EXPLORE_CLI_OPTIONS(o.explore),
        {0},
    };
    const cli_command c = {
        .name = "selftest",
        .usage = "usp selftest [options]",
        .about = "Runs a communication schedule shaped like one training step on the simulator: per layer\n"
                 "the Ulysses all-to-alls, ring steps, and their backward; then the loss, gradient and\n"
                 "ZeRO reductions, a broadcast, an uneven all_to_all_v and point-to-point pairs. Every\n"
                 "received element is checked. A deadlock or a mismatched collective is reported at once\n"
                 "with every rank's state (exit 3); a crashed rank exits 4; bad options exit 2.",
        .options = options,
    };
    int done;
    usp_status s = cli_parse(&c, argc, argv, 2, &done);
    if (s != USP_OK || done)
        return s != USP_OK ? cli_fail("selftest", s) : 0;
    int code = 0;
    s = run_selftest(&o, &code);
    return s != USP_OK ? cli_fail("selftest", s) : code;
}
