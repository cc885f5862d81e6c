/* viz: the schedule diagrams, wait-for pictures, traffic maps and Chrome
 * traces drawn from real runs on the simulator.
 *
 * Golden DOT files (tests/golden/) pin four fixed configurations byte for
 * byte and are parsed back with Graphviz's own parser; rendering is checked
 * by the headers of the files it writes; the Chrome trace is parsed with
 * jansson and its slices checked for balance, nesting and agreement with the
 * simulator's clocks; numbers in the pictures are checked against the closed
 * forms of the traffic (core/ulysses.h, core/ring.h).
 *
 * Set USP_UPDATE_GOLDEN=1 to rewrite the golden files after an intended change
 * (then read the diff). The deadlock below comes first in this file because
 * its call sites (this file's line numbers) are part of its golden picture. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/selftest.h"
#include "tests/harness.h"
#include "viz/attention_run.h"
#include "viz/chrome_trace.h"
#include "viz/dot.h"
#include "viz/render.h"
#include "viz/schedule.h"
#include "viz/traffic.h"
#include "viz/wait_graph.h"

#ifdef USP_HAVE_GVC
#include <gvc.h>
#include "tests/check_main.h"
#endif

/* Ranks 0-2 send to their successor (a blocking send waits for the receive
 * that never comes: a cycle); rank 3 waits in a barrier for all of them;
 * with `early_exit`, rank 1 returns before any call instead (the missing participant). */
typedef struct deadlock_case {
    int early_exit;
} deadlock_case;

static usp_status deadlock_rank(const usp_rank_ctx *ctx, void *arg)
{
    const deadlock_case *c = arg;
    void *buf;
    USP_CHECK(harness_upload(ctx, NULL, 16 * sizeof(float), &buf));
    usp_status s = USP_OK;
    if (c->early_exit && ctx->rank == 1)
        s = USP_OK;
    else if (c->early_exit || ctx->rank == 3)
        s = usp_comm_barrier(ctx->world, ctx->stream);
    else
        s = usp_comm_send(ctx->world, buf, 16, USP_F32, (ctx->rank + 1) % 3, ctx->stream);
    usp_buffer_free(ctx->backend, buf);
    return s;
}

/* --- helpers ------------------------------------------------------------- */

static char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = calloc((size_t)n + 1, 1);
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n)
        text[0] = '\0';
    fclose(f);
    if (size)
        *size = (size_t)n;
    return text;
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

/* A fresh scratch directory under /tmp. */
static void scratch_dir(char *dir, size_t size)
{
    snprintf(dir, size, "/tmp/usp_test_viz_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* Runs one attention layer and keeps the world for its trace. */
static sim_world *run_layer(int world, int ulysses, int ring, int64_t seq, int64_t heads, int64_t kv_heads, int causal,
                            viz_attention_config *c)
{
    *c = (viz_attention_config){.seq_len = seq, .batch = 1, .n_heads = heads, .n_kv_heads = kv_heads, .head_dim = 4,
                                .causal = causal};
    ck_assert_int_eq(usp_mesh_shape_make(world, ulysses, ring, &c->shape), USP_OK);
    sim_world *w = NULL;
    usp_status s = viz_attention_run(c, &w);
    ck_assert_msg(s == USP_OK, "%s", usp_error_message());
    return w;
}

/* 1 when `dot` parses with Graphviz's own parser (always 1 in a build without Graphviz). */
static int graphviz_parses(const char *dot)
{
#ifdef USP_HAVE_GVC
    Agraph_t *g = agmemread(dot);
    if (!g)
        return 0;
    int nodes = agnnodes(g);
    agclose(g);
    return nodes > 0;
#else
    (void)dot;
    return 1;
#endif
}

/* Compares `dot` with tests/golden/NAME byte for byte (or rewrites it when USP_UPDATE_GOLDEN is set). */
static void check_golden(const char *name, const char *dot)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", USP_GOLDEN_DIR, name);
    if (getenv("USP_UPDATE_GOLDEN")) {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        fputs(dot, f);
        fclose(f);
    }
    char *want = read_file(path, NULL);
    ck_assert_msg(want != NULL, "missing golden file %s (run with USP_UPDATE_GOLDEN=1 to make it)", path);
    size_t at = 0;
    while (want[at] && want[at] == dot[at])
        at++;
    ck_assert_msg(want[at] == dot[at], "%s differs from the golden file at byte %zu:\n  got:  %.80s\n  want: %.80s\n"
                  "(USP_UPDATE_GOLDEN=1 rewrites it after an intended change)", name, at, dot + at, want + at);
    ck_assert_msg(graphviz_parses(want), "Graphviz cannot parse %s", path);
    free(want);
}

static void wait_graph_of(const deadlock_case *c, sim_wait_graph *g, usp_status expected)
{
    sim_config config = sim_config_default(4);
    config.stack_bytes = (size_t)1 << 20;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    ck_assert_int_eq(sim_world_run(w, deadlock_rank, (void *)c), expected);
    ck_assert_int_eq(sim_world_wait_graph(w, g), USP_OK);
    sim_world_destroy(w);
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* --- golden pictures --------------------------------------------------------- */

START_TEST(ulysses_w4_diagram_is_golden)
{
    viz_attention_config c;
    sim_world *w = run_layer(4, 4, 1, 16, 8, 8, 0, &c);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_ulysses(sim_world_trace(w), &c, &dot), USP_OK);
    check_golden("ulysses_w4.dot", usp_strbuf_text(&dot));
    /* each slice: T=4 tokens x 2 heads x D=4 x 4 bytes = 128 B of each of Q, K, V */
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), "label=\"Q 128 B + KV 256 B\""), 12);
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), "label=\"stays\""), 4);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "128 B per arrow")); /* O: 128 B back */
    usp_strbuf_free(&dot);
    sim_world_destroy(w);
}
END_TEST

START_TEST(ring_r4_causal_diagram_is_golden)
{
    viz_attention_config c;
    sim_world *w = run_layer(4, 1, 4, 16, 8, 8, 1, &c);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_ring(sim_world_trace(w), &c, &dot), USP_OK);
    check_golden("ring_r4_causal.dot", usp_strbuf_text(&dot));
    /* zigzag: every rank computes 2R+1 = 9 of the 4R = 16 products (core/ring.c) */
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), "computes 9 of 16 products"), 4);
    /* a K/V block: T=4 tokens x 8 heads x 4 x 4 B = 512 B, K and V packed: 1 KiB per sendrecv */
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), "label=\"1 KiB\""), 12);
    usp_strbuf_free(&dot);
    sim_world_destroy(w);
}
END_TEST

START_TEST(hybrid_2x2_diagram_is_golden)
{
    viz_attention_config c;
    sim_world *w = run_layer(4, 2, 2, 16, 8, 8, 1, &c);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_schedule(sim_world_trace(w), &c, &dot), USP_OK); /* U, R > 1: the hybrid */
    check_golden("hybrid_2x2.dot", usp_strbuf_text(&dot));
    /* Q+K+V slice: 4 tokens x 4 heads x 4 x 4 B = 256 B each */
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), "768 B each way"), 2);
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), ": 1 x 1 KiB"), 4);
    usp_strbuf_free(&dot);
    sim_world_destroy(w);
}
END_TEST

START_TEST(deadlock_wait_graph_is_golden)
{
    deadlock_case c = {0};
    sim_wait_graph g;
    wait_graph_of(&c, &g, USP_ERR_COLLECTIVE);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_wait_graph(&g, &dot), USP_OK);
    check_golden("deadlock.dot", usp_strbuf_text(&dot));
    sim_wait_graph_free(&g);
    usp_strbuf_free(&dot);
}
END_TEST

/* --- the wait-for graph ---------------------------------------------------------- */

START_TEST(wait_graph_marks_the_cycle)
{
    deadlock_case c = {0};
    sim_wait_graph g;
    wait_graph_of(&c, &g, USP_ERR_COLLECTIVE);
    ck_assert_int_eq(g.kind, SIM_REPORT_DEADLOCK);
    ck_assert_int_eq(g.n_ranks, 4);
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(g.ranks[r].state, SIM_WAIT_BLOCKED);
        ck_assert_int_eq(g.ranks[r].in_cycle, r < 3);
        ck_assert_int_eq(g.ranks[r].missing, 0);
        ck_assert_str_eq(g.ranks[r].file, "tests/test_viz.c");
    }
    ck_assert_int_eq(g.ranks[0].op, USP_OP_SEND);
    ck_assert_int_eq(g.ranks[3].op, USP_OP_BARRIER);
    /* 0->1, 1->2, 2->0 (the cycle) and 3->0, 3->1, 3->2 (the barrier), sorted */
    const int want[6][3] = {{0, 1, 1}, {1, 2, 1}, {2, 0, 1}, {3, 0, 0}, {3, 1, 0}, {3, 2, 0}};
    ck_assert_uint_eq(g.n_edges, 6);
    for (int e = 0; e < 6; e++) {
        ck_assert_int_eq(g.edges[e].from, want[e][0]);
        ck_assert_int_eq(g.edges[e].to, want[e][1]);
        ck_assert_int_eq(g.edges[e].highlight, want[e][2]);
    }
    ck_assert_ptr_nonnull(strstr(g.title, "deadlock"));
    sim_wait_graph_free(&g);
}
END_TEST

START_TEST(wait_graph_marks_the_missing_participant)
{
    deadlock_case c = {.early_exit = 1};
    sim_wait_graph g;
    wait_graph_of(&c, &g, USP_ERR_COLLECTIVE);
    ck_assert_int_eq(g.kind, SIM_REPORT_DEADLOCK);
    ck_assert_int_eq(g.ranks[1].state, SIM_WAIT_EXITED);
    ck_assert_int_eq(g.ranks[1].missing, 1);
    ck_assert_int_eq((int)g.ranks[1].calls, 0);
    int highlighted = 0;
    for (size_t e = 0; e < g.n_edges; e++) {
        ck_assert_int_eq(g.edges[e].to, 1); /* the barrier waits for rank 1 alone */
        highlighted += g.edges[e].highlight;
    }
    ck_assert_uint_eq(g.n_edges, 3);
    ck_assert_int_eq(highlighted, 1); /* the report's chain: rank 0 -> rank 1 */
    ck_assert_int_eq(g.edges[0].highlight, 1);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_wait_graph(&g, &dot), USP_OK);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "rank 1: EXITED (others wait for it)"));
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "missing participant"));
    ck_assert(graphviz_parses(usp_strbuf_text(&dot)));
    usp_strbuf_free(&dot);
    sim_wait_graph_free(&g);
}
END_TEST

static usp_status mismatch_rank(const usp_rank_ctx *ctx, void *arg)
{
    (void)arg;
    void *a, *b;
    USP_CHECK(harness_upload(ctx, NULL, 64, &a));
    USP_CHECK(harness_upload(ctx, NULL, 64, &b));
    usp_status s = usp_comm_all_reduce(ctx->world, a, b, ctx->rank == 2 ? 5 : 4, USP_F32, USP_REDUCE_SUM, ctx->stream);
    usp_buffer_free(ctx->backend, a);
    usp_buffer_free(ctx->backend, b);
    return s;
}

START_TEST(wait_graph_marks_a_mismatch)
{
    sim_config config = sim_config_default(4);
    config.stack_bytes = (size_t)1 << 20;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    ck_assert_int_eq(sim_world_run(w, mismatch_rank, NULL), USP_ERR_COLLECTIVE);
    sim_wait_graph g;
    ck_assert_int_eq(sim_world_wait_graph(w, &g), USP_OK);
    sim_world_destroy(w);
    ck_assert_int_eq(g.kind, SIM_REPORT_MISMATCH);
    int mismatched = 0;
    for (int r = 0; r < 4; r++)
        mismatched += g.ranks[r].mismatched;
    ck_assert_int_eq(mismatched, 2);
    ck_assert_int_eq(g.ranks[2].mismatched, 1);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_wait_graph(&g, &dot), USP_OK);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "label=\"different counts\""));
    ck_assert(graphviz_parses(usp_strbuf_text(&dot)));
    usp_strbuf_free(&dot);
    sim_wait_graph_free(&g);
}
END_TEST

START_TEST(a_clean_run_has_no_wait_graph)
{
    viz_attention_config c;
    sim_world *w = run_layer(2, 2, 1, 8, 2, 2, 0, &c);
    sim_wait_graph g;
    ck_assert_int_eq(sim_world_wait_graph(w, &g), USP_OK);
    ck_assert_int_eq(g.kind, SIM_REPORT_NONE);
    ck_assert_int_eq(g.n_ranks, 0);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_wait_graph(&g, &dot), USP_ERR_RUNTIME);
    usp_strbuf_free(&dot);
    sim_wait_graph_free(&g);
    sim_world_destroy(w);
}
END_TEST

/* --- rendering and files ----------------------------------------------------- */

START_TEST(svg_png_and_pdf_have_valid_headers)
{
    if (!viz_can_render())
        return; /* a build without Graphviz writes DOT only: see unknown_or_unrenderable_formats_are_config_errors */
    viz_attention_config c;
    sim_world *w = run_layer(4, 4, 1, 16, 8, 8, 0, &c);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_ulysses(sim_world_trace(w), &c, &dot), USP_OK);
    sim_world_destroy(w);
    char dir[64], path[128];
    scratch_dir(dir, sizeof dir);
    static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const char *names[] = {"a.svg", "a.png", "a.PDF", "a.dot"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        ck_assert_msg(viz_write_file("--dot", usp_strbuf_text(&dot), path) == USP_OK, "%s", usp_error_message());
        size_t size;
        char *data = read_file(path, &size);
        ck_assert_ptr_nonnull(data);
        ck_assert_msg(size > 1000, "%s: only %zu bytes", names[i], size);
        if (i == 0)
            ck_assert_ptr_nonnull(strstr(data, "<svg"));
        else if (i == 1)
            ck_assert_int_eq(memcmp(data, png_magic, 8), 0);
        else if (i == 2)
            ck_assert_int_eq(memcmp(data, "%PDF-", 5), 0);
        else
            ck_assert_str_eq(data, usp_strbuf_text(&dot));
        free(data);
        remove(path);
    }
    rmdir(dir);
    usp_strbuf_free(&dot);
}
END_TEST

START_TEST(unknown_or_unrenderable_formats_are_config_errors)
{
    char dir[64], path[128];
    scratch_dir(dir, sizeof dir);
    const char *bad[] = {"a.jpg", "a", "a.svg.txt", "dir.png/a"};
    const char *named[] = {"'.jpg'", "(no extension)", "'.txt'", "(no extension)"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, bad[i]);
        ck_assert_int_eq(viz_write_file("--dot", "digraph g { a -> b }\n", path), USP_ERR_CONFIG);
        ck_assert_msg(strstr(usp_error_message(), "--dot") && strstr(usp_error_message(), named[i]) &&
                      strstr(usp_error_message(), ".svg"), "message must name the option, the extension and what "
                      "works: %s", usp_error_message());
        ck_assert(!file_exists(path));
    }
    snprintf(path, sizeof path, "%s/a.png", dir);
    if (!viz_can_render()) {
        ck_assert_int_eq(viz_write_file("--dot", "digraph g { a -> b }\n", path), USP_ERR_CONFIG);
        ck_assert_ptr_nonnull(strstr(usp_error_message(), "without Graphviz"));
    } else { /* a broken diagram is a runtime error and leaves no file */
        ck_assert_int_eq(viz_write_file("--dot", "digraph g { a -> }\n", path), USP_ERR_RUNTIME);
    }
    ck_assert(!file_exists(path));
    snprintf(path, sizeof path, "%s/missing/a.dot", dir);
    ck_assert_int_eq(viz_write_file("--dot", "digraph g {}\n", path), USP_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "cannot write"));
    ck_assert_int_eq(rmdir(dir), 0); /* empty: nothing half-written was left */
}
END_TEST

/* --- the Chrome trace ------------------------------------------------------- */

START_TEST(chrome_trace_is_balanced_json_on_the_virtual_clock)
{
    viz_attention_config c;
    /* 3 heads over U = 2: uneven work, so ranks arrive apart and some wait for their peers */
    sim_world *w = run_layer(4, 2, 2, 16, 3, 1, 1, &c);
    const usp_trace_t *t = sim_world_trace(w);
    char *text;
    ck_assert_int_eq(viz_chrome_trace_text(t, &text), USP_OK);
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    ck_assert_msg(root != NULL, "not JSON: %s at %d", err.text, err.position);
    json_t *events = json_object_get(root, "traceEvents");
    ck_assert(json_is_array(events));
    /* per (pid, tid): a stack of open B names; B/E must pair up in order, by name, forward in time */
    enum { PIDS = 4, TIDS = 2, DEPTH = 8, CALLS = 64 };
    const char *open_name[PIDS][TIDS][DEPTH];
    double open_ts[PIDS][TIDS][DEPTH], last_end = 0, flow_ts[2][256] = {{0}};
    double call_span[PIDS][CALLS][2]; /* each rank's communication slices: [begin, end] */
    int depth[PIDS][TIDS] = {{0}}, slices = 0, flows_s = 0, flows_f = 0, waits = 0, calls[PIDS] = {0}, flow_pid[2][256];
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        json_t *ts = json_object_get(e, "ts"), *pid = json_object_get(e, "pid"), *tid = json_object_get(e, "tid");
        ck_assert_msg(ph && json_is_number(ts) && json_is_integer(pid) && json_is_integer(tid) &&
                      json_is_string(json_object_get(e, "name")), "event %zu lacks ph, ts, pid, tid or name", i);
        int p = (int)json_integer_value(pid), q = (int)json_integer_value(tid);
        ck_assert(p >= 0 && p < PIDS && q >= 0 && q < TIDS);
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
            last_end = when > last_end ? when : last_end;
            slices++;
            waits += strcmp(name, "waiting for peers") == 0;
            if (q == 1 && depth[p][q] == 0) {
                ck_assert_int_lt(calls[p], CALLS);
                call_span[p][calls[p]][0] = open_ts[p][q][0];
                call_span[p][calls[p]++][1] = when;
            }
        } else if (strcmp(ph, "s") == 0 || strcmp(ph, "f") == 0) {
            json_int_t id = json_integer_value(json_object_get(e, "id"));
            ck_assert(id > 0 && id < 256 && q == 1);
            int end = ph[0] == 'f';
            flow_ts[end][id] = when, flow_pid[end][id] = p;
            flows_s += !end, flows_f += end;
            if (end)
                ck_assert_str_eq(json_string_value(json_object_get(e, "bp")), "e");
        } else {
            ck_assert_str_eq(ph, "M");
        }
    }
    for (int p = 0; p < PIDS; p++)
        for (int q = 0; q < TIDS; q++)
            ck_assert_msg(depth[p][q] == 0, "pid %d tid %d: %d slices left open", p, q, depth[p][q]);
    /* ring[*]: R-1 = 1 sendrecv per rank in the forward, one arrow each; it starts inside the
     * sender's call and ends inside the receiver's, later (a transfer takes time) */
    ck_assert_int_eq(flows_s, 4);
    ck_assert_int_eq(flows_f, 4);
    for (int id = 1; id <= 4; id++) {
        ck_assert_msg(flow_ts[1][id] > flow_ts[0][id], "flow %d arrives at %.9g us, sent at %.9g us", id,
                      flow_ts[1][id], flow_ts[0][id]);
        ck_assert_int_ne(flow_pid[0][id], flow_pid[1][id]); /* from one rank to another */
        for (int end = 0; end < 2; end++) {
            int p = flow_pid[end][id], inside = 0;
            for (int k = 0; k < calls[p]; k++)
                inside |= call_span[p][k][0] <= flow_ts[end][id] && flow_ts[end][id] <= call_span[p][k][1];
            ck_assert_msg(inside, "flow %d: its %s is in no call of rank %d", id, end ? "end" : "start", p);
        }
    }
    ck_assert_int_gt(waits, 0); /* the nested "waiting for peers" slices were exercised */
    ck_assert_int_ge(slices, 4 * 4);
    /* ts is microseconds of virtual time: the last slice ends at the slowest rank's clock */
    double slowest = 0;
    for (int r = 0; r < 4; r++)
        slowest = sim_world_time(w, r) > slowest ? sim_world_time(w, r) : slowest;
    ck_assert_msg(fabs(last_end - slowest * 1e6) <= 1e-6 * slowest * 1e6, "last end %.9g us, clock %.9g s", last_end,
                  slowest);
    json_decref(root);
    free(text);
    sim_world_destroy(w);
}
END_TEST

/* Every rank's time is its compute spans plus its calls, back to back. */
START_TEST(compute_spans_and_calls_tile_each_rank_clock)
{
    viz_attention_config c;
    sim_world *w = run_layer(4, 1, 4, 16, 8, 8, 1, &c);
    const usp_trace_t *t = sim_world_trace(w);
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
        double clock = sim_world_time(w, r);
        ck_assert_msg(fabs(busy - clock) <= 1e-9 * clock, "rank %d: spans %.12g s, clock %.12g s", r, busy, clock);
        /* the ring diagram's "computes 9 of 16" is what ring.c really calls: 2R+1 per batch row */
        ck_assert_int_eq(attention_calls, 2 * 4 + 1);
    }
    sim_world_destroy(w);
}
END_TEST

/* --- traffic and big pictures -------------------------------------------------- */

static int two_gpu_nodes(void *ctx, int from, int to, viz_link_style *out)
{
    (void)ctx;
    *out = from / 2 == to / 2 ? (viz_link_style){"NVLink", "#76b900"} : (viz_link_style){"InfiniBand", "#1f5f99"};
    return 1;
}

START_TEST(traffic_map_sums_the_bytes_of_the_run)
{
    viz_attention_config c;
    sim_world *w = run_layer(4, 4, 1, 16, 8, 8, 0, &c);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_traffic(sim_world_trace(w), 4, NULL, &dot), USP_OK);
    /* Q, K, V and O: 4 x (4 tokens x 2 heads x 4 x 4 B) = 512 B per pair and direction */
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), "label=\"512 B each way\""), 6);
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), "sent 1.5 KiB"), 4);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "no cluster model"));
    ck_assert(graphviz_parses(usp_strbuf_text(&dot)));
    usp_strbuf_free(&dot);
    /* the topology hook colours each arrow by its link and lists the classes */
    viz_traffic_options o = {.gpus_per_node = 2, .link = two_gpu_nodes};
    ck_assert_int_eq(viz_dot_traffic(sim_world_trace(w), 4, &o, &dot), USP_OK);
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), "color=\"#76b900\""), 2);
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), "color=\"#1f5f99\""), 4);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "NVLink: #76b900, InfiniBand: #1f5f99"));
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), "subgraph cluster_node"), 2);
    usp_strbuf_free(&dot);
    sim_world_destroy(w);
}
END_TEST

START_TEST(pictures_of_64_ranks_aggregate_and_say_so)
{
    viz_attention_config c;
    usp_strbuf dot = {0};
    sim_world *w = run_layer(64, 64, 1, 128, 64, 64, 0, &c);
    ck_assert_int_eq(viz_dot_ulysses(sim_world_trace(w), &c, &dot), USP_OK);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "Aggregated: 64 ranks &gt; 8"));
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), " -> "), 2 * 64); /* a star, not 64 x 63 arrows */
    ck_assert(graphviz_parses(usp_strbuf_text(&dot)));
    usp_strbuf_free(&dot);
    ck_assert_int_eq(viz_dot_traffic(sim_world_trace(w), 64, NULL, &dot), USP_OK);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "Aggregated: 4032 rank pairs"));
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), " -> "), 8 * 7); /* node to node, not 64 x 63 */
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), "lhead=cluster_node"), 8 * 7);
    usp_strbuf_free(&dot);
    sim_world_destroy(w);

    w = run_layer(64, 1, 64, 128, 2, 2, 1, &c);
    ck_assert_int_eq(viz_dot_ring(sim_world_trace(w), &c, &dot), USP_OK);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "Aggregated: 64 ranks &gt; 8"));
    ck_assert_int_eq(count_of(usp_strbuf_text(&dot), "computes 129 of 256"), 64); /* 2R+1 of 4R */
    usp_strbuf_free(&dot);
    sim_world_destroy(w);

    /* a selftest deadlock on 64 ranks: a handful of boxes, the cycle alone */
    usp_mesh_shape shape;
    ck_assert_int_eq(usp_mesh_shape_make(64, 8, 1, &shape), USP_OK);
    usp_selftest_run run = {.config = usp_selftest_default(&shape)};
    run.stats = calloc(64, sizeof *run.stats);
    sim_fault fault;
    ck_assert_int_eq(sim_fault_parse("group:rank=2", &fault), USP_OK);
    sim_config config = sim_config_default(64);
    config.faults = &fault;
    config.n_faults = 1;
    config.stack_bytes = (size_t)1 << 20;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    ck_assert_int_eq(sim_world_run(w, usp_selftest_rank, &run), USP_ERR_COLLECTIVE);
    free(run.stats);
    sim_wait_graph g;
    ck_assert_int_eq(sim_world_wait_graph(w, &g), USP_OK);
    sim_world_destroy(w);
    ck_assert_int_eq(viz_dot_wait_graph(&g, &dot), USP_OK);
    const char *text = usp_strbuf_text(&dot);
    ck_assert_ptr_nonnull(strstr(text, "Aggregated: 64 ranks"));
    ck_assert_int_le(count_of(text, "fillcolor="), 8);
    ck_assert_ptr_nonnull(strstr(text, "rank 2 (in the cycle)"));
    ck_assert_ptr_nonnull(strstr(text, "rank 0 (in the cycle)"));
    ck_assert_ptr_nonnull(strstr(text, "56 ranks: 8-63"));
    ck_assert(graphviz_parses(text));
    usp_strbuf_free(&dot);
    sim_wait_graph_free(&g);
}
END_TEST

START_TEST(bad_configurations_name_the_option)
{
    viz_attention_config c = {.seq_len = 15, .batch = 1, .n_heads = 8, .n_kv_heads = 8, .head_dim = 4};
    ck_assert_int_eq(usp_mesh_shape_make(4, 4, 1, &c.shape), USP_OK);
    ck_assert_int_eq(viz_attention_check(&c), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "--seq 15"));
    c.seq_len = 16, c.n_kv_heads = 3;
    ck_assert_int_eq(viz_attention_check(&c), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "--kv-heads 3"));
    c.n_kv_heads = 2, c.n_heads = 2;
    ck_assert_int_eq(viz_attention_check(&c), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "--ulysses 4"));
    /* a picture that does not fit the run */
    viz_attention_config ok;
    sim_world *w = run_layer(2, 2, 1, 8, 2, 2, 0, &ok);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_ring(sim_world_trace(w), &ok, &dot), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "--ring"));
    usp_strbuf_free(&dot);
    sim_world_destroy(w);
}
END_TEST

START_TEST(byte_sizes_read_like_a_person_writes_them)
{
    char buf[32];
    ck_assert_str_eq(viz_bytes(0, buf), "0 B");
    ck_assert_str_eq(viz_bytes(384, buf), "384 B");
    ck_assert_str_eq(viz_bytes(1024, buf), "1 KiB");
    ck_assert_str_eq(viz_bytes(1536, buf), "1.5 KiB");
    ck_assert_str_eq(viz_bytes(12 * 1024 + 512, buf), "12.5 KiB");
    ck_assert_str_eq(viz_bytes(378 * 1024, buf), "378 KiB");
    ck_assert_str_eq(viz_bytes((uint64_t)3 << 30, buf), "3 GiB");
    ck_assert_str_eq(viz_bytes(1023, buf), "1023 B");
}
END_TEST

Suite *viz_suite(void)
{
    Suite *s = suite_create("viz");
    TCase *t = tcase_create("pictures");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, ulysses_w4_diagram_is_golden);
    tcase_add_test(t, ring_r4_causal_diagram_is_golden);
    tcase_add_test(t, hybrid_2x2_diagram_is_golden);
    tcase_add_test(t, deadlock_wait_graph_is_golden);
    tcase_add_test(t, wait_graph_marks_the_cycle);
    tcase_add_test(t, wait_graph_marks_the_missing_participant);
    tcase_add_test(t, wait_graph_marks_a_mismatch);
    tcase_add_test(t, a_clean_run_has_no_wait_graph);
    tcase_add_test(t, svg_png_and_pdf_have_valid_headers);
    tcase_add_test(t, unknown_or_unrenderable_formats_are_config_errors);
    tcase_add_test(t, chrome_trace_is_balanced_json_on_the_virtual_clock);
    tcase_add_test(t, compute_spans_and_calls_tile_each_rank_clock);
    tcase_add_test(t, traffic_map_sums_the_bytes_of_the_run);
    tcase_add_test(t, pictures_of_64_ranks_aggregate_and_say_so);
    tcase_add_test(t, bad_configurations_name_the_option);
    tcase_add_test(t, byte_sizes_read_like_a_person_writes_them);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_main_run(viz_suite());
}
