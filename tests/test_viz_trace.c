/* viz of whole runs: the Chrome trace (the Perfetto timeline) and the traffic
 * map, of one attention layer and of a short training run, as `usp train
 * --trace t.json --dot traffic.svg` writes them.
 *
 * The Chrome trace is parsed back with jansson and checked the way Perfetto
 * reads it: every event has ph, ts, pid, tid and name; B/E slices pair up per
 * (pid, tid), by name, nested and forward in time; every flow (s -> f) goes
 * from one rank to another, later, and lands inside a call at both ends; and
 * the times are the simulator's clocks. The traffic map's numbers are checked
 * against the trace's own bytes, and its colours against the topology's
 * definition of nodes and CPU sockets (sim/topology.c's presets). */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model_config.h"
#include "core/train/train.h"
#include "tests/check_main.h"
#include "tests/viz_testing.h"
#include "viz/chrome_trace.h"
#include "viz/traffic.h"

/* --- a Chrome trace, read back ------------------------------------------------ */

enum { MAX_PIDS = 16, TIDS = 3, DEPTH = 8 }; /* tids: compute, communication, a trained run's steps */

typedef struct span {
    double begin, end;
} span;

/* What a parsed Chrome trace holds, once check_chrome_trace found it well formed. */
typedef struct chrome_summary {
    int slices[MAX_PIDS][TIDS]; /* completed B/E slices per rank: compute (tid 0), communication (1), steps (2) */
    double last_end[MAX_PIDS];  /* the latest E of each rank, microseconds */
    int waits;                  /* nested "waiting for peers" slices */
    int flows;                  /* s/f pairs */
} chrome_summary;

typedef struct flow_end {
    double ts[2];
    int pid[2], seen[2];
} flow_end;

static void append_span(span **spans, int *n, int *cap, span s)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *spans = realloc(*spans, (size_t)*cap * sizeof **spans);
        ck_assert_ptr_nonnull(*spans);
    }
    (*spans)[(*n)++] = s;
}

static int inside_a_call(const span *calls, int n, double ts)
{
    for (int k = 0; k < n; k++)
        if (calls[k].begin <= ts && ts <= calls[k].end)
            return 1;
    return 0;
}

/* Parses `text` and fails the test unless it is a Chrome trace of `world` ranks
 * as described at the top of this file; fills *sum. */
static void check_chrome_trace(const char *text, int world, chrome_summary *sum)
{
    ck_assert_int_le(world, MAX_PIDS);
    *sum = (chrome_summary){0};
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    ck_assert_msg(root != NULL, "not JSON: %s at %d", err.text, err.position);
    json_t *events = json_object_get(root, "traceEvents");
    ck_assert(json_is_array(events));
    const char *open_name[MAX_PIDS][TIDS][DEPTH];
    double open_ts[MAX_PIDS][TIDS][DEPTH];
    int depth[MAX_PIDS][TIDS] = {{0}}, n_calls[MAX_PIDS] = {0}, cap_calls[MAX_PIDS] = {0}, n_flows = 0;
    span *calls[MAX_PIDS] = {0}; /* each rank's communication slices */
    flow_end *flows = calloc(json_array_size(events) + 1, sizeof *flows); /* by id: ids are 1, 2, ... */
    ck_assert_ptr_nonnull(flows);
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        json_t *ts = json_object_get(e, "ts"), *pid = json_object_get(e, "pid"), *tid = json_object_get(e, "tid");
        ck_assert_msg(ph && json_is_number(ts) && json_is_integer(pid) && json_is_integer(tid) &&
                      json_is_string(json_object_get(e, "name")), "event %zu lacks ph, ts, pid, tid or name", i);
        int p = (int)json_integer_value(pid), q = (int)json_integer_value(tid);
        ck_assert(p >= 0 && p < world && q >= 0 && q < TIDS);
        double when = json_number_value(ts);
        const char *name = json_string_value(json_object_get(e, "name"));
        if (strcmp(ph, "B") == 0) {
            ck_assert_int_lt(depth[p][q], DEPTH);
            ck_assert(depth[p][q] == 0 || when >= open_ts[p][q][depth[p][q] - 1]);
            open_name[p][q][depth[p][q]] = name;
            open_ts[p][q][depth[p][q]++] = when;
        } else if (strcmp(ph, "E") == 0) {
            ck_assert_msg(depth[p][q] > 0, "E without B on pid %d tid %d", p, q);
            --depth[p][q];
            ck_assert_str_eq(open_name[p][q][depth[p][q]], name);
            ck_assert(when >= open_ts[p][q][depth[p][q]]);
            sum->last_end[p] = when > sum->last_end[p] ? when : sum->last_end[p];
            sum->slices[p][q]++;
            sum->waits += strcmp(name, "waiting for peers") == 0;
            if (q == 1 && depth[p][q] == 0)
                append_span(&calls[p], &n_calls[p], &cap_calls[p], (span){open_ts[p][q][0], when});
        } else if (strcmp(ph, "s") == 0 || strcmp(ph, "f") == 0) {
            json_int_t id = json_integer_value(json_object_get(e, "id"));
            ck_assert(id > 0 && (size_t)id <= json_array_size(events) && q == 1);
            int end = ph[0] == 'f';
            ck_assert_msg(!flows[id].seen[end], "flow %lld has two %s events", (long long)id, ph);
            flows[id].ts[end] = when, flows[id].pid[end] = p, flows[id].seen[end] = 1;
            n_flows = (int)id > n_flows ? (int)id : n_flows;
            if (end)
                ck_assert_str_eq(json_string_value(json_object_get(e, "bp")), "e");
        } else {
            ck_assert_str_eq(ph, "M");
        }
    }
    for (int p = 0; p < world; p++)
        for (int q = 0; q < TIDS; q++)
            ck_assert_msg(depth[p][q] == 0, "pid %d tid %d: %d slices left open", p, q, depth[p][q]);
    /* a transfer starts inside the sender's call and ends inside the receiver's, later (it takes time) */
    for (int id = 1; id <= n_flows; id++) {
        ck_assert_msg(flows[id].seen[0] && flows[id].seen[1], "flow %d lacks its start or its end", id);
        ck_assert_msg(flows[id].ts[1] > flows[id].ts[0], "flow %d arrives at %.9g us, sent at %.9g us", id,
                      flows[id].ts[1], flows[id].ts[0]);
        ck_assert_int_ne(flows[id].pid[0], flows[id].pid[1]);
        for (int end = 0; end < 2; end++) {
            int p = flows[id].pid[end];
            ck_assert_msg(inside_a_call(calls[p], n_calls[p], flows[id].ts[end]), "flow %d: its %s is in no call of "
                          "rank %d", id, end ? "end" : "start", p);
        }
    }
    sum->flows = n_flows;
    for (int p = 0; p < world; p++)
        free(calls[p]);
    free(flows);
    json_decref(root);
}

/* --- one attention layer ----------------------------------------------------- */

START_TEST(chrome_trace_is_balanced_json_on_the_virtual_clock)
{
    viz_attention_config c;
    /* 3 heads over U = 2: uneven work, so ranks arrive apart and some wait for their peers */
    usp_runtime_t *w = viz_test_run_layer(4, 2, 2, 16, 3, 1, 1, &c);
    char *text;
    ck_assert_int_eq(viz_chrome_trace_text(usp_runtime_trace(w), &text), USP_OK);
    chrome_summary sum;
    check_chrome_trace(text, 4, &sum);
    /* ring[*]: R-1 = 1 sendrecv per rank in the forward, one arrow each */
    ck_assert_int_eq(sum.flows, 4);
    ck_assert_int_gt(sum.waits, 0); /* the nested "waiting for peers" slices were exercised */
    /* ts is microseconds of virtual time: each rank's last slice ends at its clock */
    for (int r = 0; r < 4; r++) {
        ck_assert_int_gt(sum.slices[r][0], 0);
        ck_assert_int_gt(sum.slices[r][1], 0);
        double clock = sim_world_time(sim_runtime_world(w), r) * 1e6;
        ck_assert_msg(fabs(sum.last_end[r] - clock) <= 1e-6 * clock, "rank %d: last end %.9g us, clock %.9g us", r,
                      sum.last_end[r], clock);
    }
    free(text);
    usp_runtime_destroy(w);
}
END_TEST

/* Every rank's time is its compute spans plus its calls, back to back, less what ran side by side. */
START_TEST(compute_spans_and_calls_tile_each_rank_clock)
{
    viz_attention_config c;
    usp_runtime_t *w = viz_test_run_layer(4, 1, 4, 16, 8, 8, 1, &c);
    const usp_trace_t *t = usp_runtime_trace(w);
    ck_assert_uint_gt(usp_trace_compute_count(t), 0);
    for (int r = 0; r < 4; r++) {
        double busy = 0;
        int attention_calls = 0;
        for (size_t i = 0; i < usp_trace_compute_count(t); i++) {
            const usp_trace_event *e = usp_trace_compute_at(t, i);
            ck_assert_int_eq(e->type, USP_TRACE_COMPUTE);
            ck_assert(e->t_end >= e->t_start);
            if (e->rank != r)
                continue;
            busy += e->t_end - e->t_start;
            attention_calls += strcmp(e->name, "attention_forward") == 0;
        }
        for (size_t i = 0; i < usp_trace_count(t); i++)
            if (usp_trace_at(t, i)->rank == r) {
                ck_assert_int_eq(usp_trace_at(t, i)->type, USP_TRACE_COMM);
                busy += usp_trace_at(t, i)->t_end - usp_trace_at(t, i)->t_post;
            }
        double clock = sim_world_time(sim_runtime_world(w), r);
        /* less what ran beside compute: the ring forward's transfers, on a stream of their own */
        sim_rank_times times = sim_world_rank_times(sim_runtime_world(w), r);
        busy -= times.hidden_comm_s + times.hidden_wait_s;
        ck_assert_msg(fabs(busy - clock) <= 1e-9 * clock, "rank %d: spans %.12g s, clock %.12g s", r, busy, clock);
        /* the ring diagram's "computes 9 of 16" is what ring.c really calls: 2R+1 per batch row */
        ck_assert_int_eq(attention_calls, 2 * 4 + 1);
    }
    usp_runtime_destroy(w);
}
END_TEST

START_TEST(chrome_trace_file_is_the_text_and_whole_or_nothing)
{
    viz_attention_config c;
    usp_runtime_t *w = viz_test_run_layer(4, 2, 2, 16, 8, 8, 1, &c);
    char *text, dir[64], path[128];
    ck_assert_int_eq(viz_chrome_trace_text(usp_runtime_trace(w), &text), USP_OK);
    viz_test_scratch_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/t.json", dir);
    ck_assert_int_eq(viz_chrome_trace_write(usp_runtime_trace(w), path), USP_OK);
    char *file = harness_read_file(path, NULL);
    ck_assert_ptr_nonnull(file);
    ck_assert_str_eq(file, text);
    ck_assert_int_eq(strncmp(text, "{\"traceEvents\":[\n", 17), 0); /* one event a line, for grep and diff */
    remove(path);
    snprintf(path, sizeof path, "%s/missing/t.json", dir);
    ck_assert_int_eq(viz_chrome_trace_write(usp_runtime_trace(w), path), USP_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), path));
    ck_assert_int_eq(rmdir(dir), 0); /* empty: nothing half-written was left */
    free(file);
    free(text);
    usp_runtime_destroy(w);
}
END_TEST

/* --- the traffic map and its links -------------------------------------------- */

static int two_gpu_nodes(void *ctx, int from, int to, viz_link_style *out)
{
    (void)ctx;
    *out = from / 2 == to / 2 ? (viz_link_style){"NVLink", "#76b900", "green"}
                              : (viz_link_style){"InfiniBand", "#1f5f99", NULL};
    return 1;
}

START_TEST(traffic_map_sums_the_bytes_of_the_run)
{
    viz_attention_config c;
    usp_runtime_t *w = viz_test_run_layer(4, 4, 1, 16, 8, 8, 0, &c);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_traffic(usp_runtime_trace(w), 4, NULL, &dot), USP_OK);
    /* Q, K, V and O: 4 x (4 tokens x 2 heads x 4 x 4 B) = 512 B per pair and direction */
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), "label=\"512 B each way\""), 6);
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), "sent 1.5 KiB"), 4);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "no cluster model"));
    ck_assert(viz_test_graphviz_parses(usp_strbuf_text(&dot)));
    usp_strbuf_free(&dot);
    /* the link hook colours each arrow by its link and lists the classes, in words when it has them */
    viz_traffic_options o = {.gpus_per_node = 2, .link = two_gpu_nodes};
    ck_assert_int_eq(viz_dot_traffic(usp_runtime_trace(w), 4, &o, &dot), USP_OK);
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), "color=\"#76b900\""), 2);
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), "color=\"#1f5f99\""), 4);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "crosses: green NVLink, #1f5f99 InfiniBand."));
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), "subgraph cluster_node"), 2);
    usp_strbuf_free(&dot);
    usp_runtime_destroy(w);
}
END_TEST

/* The presets' layout (sim/topology.c): 8 GPUs a node; dgx: one NVSwitch; pcie:
 * two sockets of two PCIe switches of two GPUs, so GPUs 0-3 and 4-7 of a node
 * share a socket. */
START_TEST(link_classes_follow_the_topology)
{
    sim_topology t;
    viz_link_style style;
    ck_assert(sim_topology_preset("pcie-gen4", 2, &t));
    const struct {
        int from, to;
        const char *name;
    } pcie[] = {{0, 1, "PCIe"}, {0, 3, "PCIe"}, {0, 4, "PCIe across CPU sockets"}, {3, 4, "PCIe across CPU sockets"},
                {7, 6, "PCIe"}, {0, 8, "InfiniBand"}, {15, 3, "InfiniBand"}, {8, 12, "PCIe across CPU sockets"},
                {9, 10, "PCIe"}};
    for (size_t i = 0; i < sizeof pcie / sizeof *pcie; i++) {
        ck_assert_int_eq(viz_link_of_topology(&t, pcie[i].from, pcie[i].to, &style), 1);
        ck_assert_msg(strcmp(style.name, pcie[i].name) == 0, "pcie-gen4 %d -> %d: %s, want %s", pcie[i].from,
                      pcie[i].to, style.name, pcie[i].name);
    }
    /* no link: a rank to itself, a rank the cluster does not have */
    ck_assert_int_eq(viz_link_of_topology(&t, 2, 2, &style), 0);
    ck_assert_int_eq(viz_link_of_topology(&t, 0, 16, &style), 0);
    ck_assert_int_eq(viz_link_of_topology(&t, -1, 0, &style), 0);
    ck_assert(sim_topology_preset("dgx-h100", 2, &t));
    ck_assert_int_eq(viz_link_of_topology(&t, 0, 7, &style), 1);
    ck_assert_str_eq(style.name, "NVLink");
    ck_assert_int_eq(viz_link_of_topology(&t, 7, 8, &style), 1);
    ck_assert_str_eq(style.name, "InfiniBand");
    viz_traffic_options o = {0};
    viz_traffic_use_topology(&o, &t);
    ck_assert_int_eq(o.gpus_per_node, 8);
    ck_assert_ptr_eq(o.link_ctx, &t);
}
END_TEST

/* --- a short training run (what usp train --trace / --dot draw) ------------------ */

/* One step of the tiny model on W = 16 = dp 2 x ring 2 x ulysses 4: two dgx-h100
 * nodes (the default cluster for 16 ranks), so the map has both link classes
 * and the trace has ring sendrecvs (flows). Returns the world, trace kept. */
static sim_world *train_one_step(void)
{
    usp_train_config c;
    usp_train_defaults(&c);
    ck_assert_int_eq(usp_model_config_load("tiny", &c.model), USP_OK);
    ck_assert_int_eq(usp_mesh_shape_make(16, 4, 2, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.batch = 2, c.steps = 1, c.log_every = 1000;
    harness_tensors none = {0}; /* progress asked for: the step gathers the peaks as usp train does */
    c.on_record = harness_record_tensors, c.record_ctx = &none;
    usp_train_result result = {.passkey_accuracy = -1};
    usp_train_run run = {.config = &c, .result = &result};
    sim_config config = sim_config_default(16);
    config.stack_bytes = (size_t)4 << 20;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    usp_status s = sim_world_run(w, usp_train_rank, &run);
    ck_assert_msg(s == USP_OK, "%s", *sim_world_report(w) ? sim_world_report(w) : usp_error_message());
    return w;
}

START_TEST(training_trace_has_compute_and_communication_tracks)
{
    sim_world *w = train_one_step();
    const usp_trace_t *t = sim_world_trace(w);
    char *text;
    ck_assert_int_eq(viz_chrome_trace_text(t, &text), USP_OK);
    chrome_summary sum;
    check_chrome_trace(text, 16, &sum);
    /* one flow per point-to-point peer, counted from the trace itself */
    int transfers = 0;
    for (size_t i = 0; i < usp_trace_count(t); i++) {
        const usp_trace_event *e = usp_trace_at(t, i);
        transfers += e->kind == USP_OP_SEND || e->kind == USP_OP_SENDRECV ? (int)e->n_peers : 0;
    }
    ck_assert_int_gt(transfers, 0);
    ck_assert_int_eq(sum.flows, transfers);
    for (int r = 0; r < 16; r++) {
        ck_assert_msg(sum.slices[r][0] > 0 && sum.slices[r][1] > 0, "rank %d: %d compute and %d communication "
                      "slices", r, sum.slices[r][0], sum.slices[r][1]);
        /* the timeline shows all of a rank's time: its compute spans and calls tile its clock */
        double busy = 0, clock = sim_world_time(w, r);
        for (size_t i = 0; i < usp_trace_compute_count(t); i++)
            if (usp_trace_compute_at(t, i)->rank == r)
                busy += usp_trace_compute_at(t, i)->t_end - usp_trace_compute_at(t, i)->t_start;
        for (size_t i = 0; i < usp_trace_count(t); i++)
            if (usp_trace_at(t, i)->rank == r)
                busy += usp_trace_at(t, i)->t_end - usp_trace_at(t, i)->t_post;
        busy -= sim_world_rank_times(w, r).hidden_comm_s + sim_world_rank_times(w, r).hidden_wait_s; /* overlapped */
        ck_assert_msg(fabs(busy - clock) <= 1e-9 * clock, "rank %d: spans %.12g s, clock %.12g s", r, busy, clock);
        ck_assert_msg(fabs(sum.last_end[r] - clock * 1e6) <= 1e-6 * clock * 1e6, "rank %d: last end %.9g us, clock "
                      "%.9g s", r, sum.last_end[r], clock);
    }
    free(text);
    sim_world_destroy(w);
}
END_TEST

START_TEST(training_traffic_map_is_coloured_by_the_links_it_crosses)
{
    sim_world *w = train_one_step();
    const usp_trace_t *t = sim_world_trace(w);
    sim_topology cluster;
    ck_assert(sim_topology_preset("dgx-h100", 2, &cluster));
    viz_traffic_options o = {.title = "Traffic map of usp train"};
    viz_traffic_use_topology(&o, &cluster);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_traffic(t, 16, &o, &dot), USP_OK);
    const char *text = usp_strbuf_text(&dot);
    ck_assert(viz_test_graphviz_parses(text));
    ck_assert_ptr_nonnull(strstr(text, "crosses: green NVLink, red InfiniBand."));
    /* the pairs that exchanged data, from the trace: a pair whose bytes are the
     * same both ways is one two-headed arrow, else one arrow per direction */
    uint64_t bytes[16][16] = {{0}};
    for (size_t i = 0; i < usp_trace_count(t); i++) {
        const usp_trace_event *e = usp_trace_at(t, i);
        for (size_t j = 0; j < e->n_peers; j++)
            bytes[e->rank][usp_trace_peers(t, e)[j].peer] += usp_trace_peers(t, e)[j].bytes;
    }
    int want_red = 0, want_green = 0;
    for (int a = 0; a < 16; a++)
        for (int b = a + 1; b < 16; b++) {
            int n = bytes[a][b] && bytes[a][b] == bytes[b][a] ? 1 : (bytes[a][b] > 0) + (bytes[b][a] > 0);
            *(a / 8 != b / 8 ? &want_red : &want_green) += n;
        }
    ck_assert_ptr_null(strstr(text, "Aggregated")); /* 16 ranks of one training step: few enough pairs to draw */
    /* every arrow: a pair of the trace, red exactly when its ranks sit on different nodes (GPUs 0-7, 8-15) */
    int red = 0, green = 0;
    for (const char *p = strstr(text, "\n  r"); p; p = strstr(p + 1, "\n  r")) {
        int from, to, n = 0;
        if (sscanf(p, "\n  r%d -> r%d [%n", &from, &to, &n) != 2 || n == 0)
            continue;
        ck_assert(from >= 0 && from < 16 && to >= 0 && to < 16 && bytes[from][to] > 0);
        const char *color = strstr(p, "color=\"");
        ck_assert_ptr_nonnull(color);
        int crosses = from / 8 != to / 8;
        ck_assert_msg(strncmp(color + 7, crosses ? "#cc4125" : "#76b900", 7) == 0, "r%d -> r%d: %.16s", from, to,
                      color);
        red += crosses, green += !crosses;
    }
    ck_assert_int_gt(want_red, 0);
    ck_assert_int_gt(want_green, 0);
    ck_assert_int_eq(red, want_red);
    ck_assert_int_eq(green, want_green);
    ck_assert_int_eq(viz_test_count(text, " -> "), red + green);
    ck_assert_int_eq(viz_test_count(text, "subgraph cluster_node"), 2);
    usp_strbuf_free(&dot);
    sim_world_destroy(w);
}
END_TEST

Suite *viz_trace_suite(void)
{
    Suite *s = suite_create("viz_trace");
    TCase *t = tcase_create("runs");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, chrome_trace_is_balanced_json_on_the_virtual_clock);
    tcase_add_test(t, compute_spans_and_calls_tile_each_rank_clock);
    tcase_add_test(t, chrome_trace_file_is_the_text_and_whole_or_nothing);
    tcase_add_test(t, traffic_map_sums_the_bytes_of_the_run);
    tcase_add_test(t, link_classes_follow_the_topology);
    tcase_add_test(t, training_trace_has_compute_and_communication_tracks);
    tcase_add_test(t, training_traffic_map_is_coloured_by_the_links_it_crosses);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main_run(viz_trace_suite());
}
