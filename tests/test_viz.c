/* viz: the schedule diagrams and wait-for pictures drawn from real runs on
 * the simulator, and the files they are written to (the Chrome trace and the
 * traffic map of whole runs are in test_viz_trace.c).
 *
 * Golden DOT files (tests/golden/) pin four fixed configurations byte for
 * byte and are parsed back with Graphviz's own parser; rendering is checked
 * by the headers of the files it writes; numbers in the pictures are checked
 * against the closed forms of the traffic (core/parallel/ulysses.h, core/parallel/ring.h).
 *
 * Set USP_UPDATE_GOLDEN=1 to rewrite the golden files after an intended change
 * (then read the diff). The deadlock below comes first in this file because
 * its call sites (this file's line numbers) are part of its golden picture. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm/comm.h"
#include "core/train/selftest.h"
#include "tests/check_main.h"
#include "tests/harness.h"
#include "tests/viz_testing.h"
#include "viz/dot.h"
#include "viz/render.h"
#include "viz/schedule.h"
#include "viz/traffic.h"
#include "viz/wait_graph.h"

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
    char *want = harness_read_file(path, NULL);
    ck_assert_msg(want != NULL, "missing golden file %s (run with USP_UPDATE_GOLDEN=1 to make it)", path);
    size_t at = 0;
    while (want[at] && want[at] == dot[at])
        at++;
    ck_assert_msg(want[at] == dot[at], "%s differs from the golden file at byte %zu:\n  got:  %.80s\n  want: %.80s\n"
                  "(USP_UPDATE_GOLDEN=1 rewrites it after an intended change)", name, at, dot + at, want + at);
    ck_assert_msg(viz_test_graphviz_parses(want), "Graphviz cannot parse %s", path);
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

/* --- golden pictures --------------------------------------------------------- */

START_TEST(ulysses_w4_diagram_is_golden)
{
    viz_attention_config c;
    usp_runtime_t *w = viz_test_run_layer(4, 4, 1, 16, 8, 8, 0, &c);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_ulysses(usp_runtime_trace(w), &c, &dot), USP_OK);
    check_golden("ulysses_w4.dot", usp_strbuf_text(&dot));
    /* each slice: T=4 tokens x 2 heads x D=4 x 4 bytes = 128 B of each of Q, K, V */
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), "label=\"Q 128 B + KV 256 B\""), 12);
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), "label=\"stays\""), 4);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "128 B per arrow")); /* O: 128 B back */
    usp_strbuf_free(&dot);
    usp_runtime_destroy(w);
}
END_TEST

START_TEST(ring_r4_causal_diagram_is_golden)
{
    viz_attention_config c;
    usp_runtime_t *w = viz_test_run_layer(4, 1, 4, 16, 8, 8, 1, &c);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_ring(usp_runtime_trace(w), &c, &dot), USP_OK);
    check_golden("ring_r4_causal.dot", usp_strbuf_text(&dot));
    /* zigzag: every rank computes 2R+1 = 9 of the 4R = 16 products (core/parallel/ring.c) */
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), "computes 9 of 16 products"), 4);
    /* a K/V block: T=4 tokens x 8 heads x 4 x 4 B = 512 B, K and V packed: 1 KiB per sendrecv */
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), "label=\"1 KiB\""), 12);
    usp_strbuf_free(&dot);
    usp_runtime_destroy(w);
}
END_TEST

START_TEST(hybrid_2x2_diagram_is_golden)
{
    viz_attention_config c;
    usp_runtime_t *w = viz_test_run_layer(4, 2, 2, 16, 8, 8, 1, &c);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_schedule(usp_runtime_trace(w), &c, &dot), USP_OK); /* U, R > 1: the hybrid */
    check_golden("hybrid_2x2.dot", usp_strbuf_text(&dot));
    /* Q+K+V slice: 4 tokens x 4 heads x 4 x 4 B = 256 B each */
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), "768 B each way"), 2);
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), ": 1 x 1 KiB"), 4);
    usp_strbuf_free(&dot);
    usp_runtime_destroy(w);
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
    ck_assert(viz_test_graphviz_parses(usp_strbuf_text(&dot)));
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
    ck_assert(viz_test_graphviz_parses(usp_strbuf_text(&dot)));
    usp_strbuf_free(&dot);
    sim_wait_graph_free(&g);
}
END_TEST

START_TEST(a_clean_run_has_no_wait_graph)
{
    viz_attention_config c;
    usp_runtime_t *w = viz_test_run_layer(2, 2, 1, 8, 2, 2, 0, &c);
    sim_wait_graph g;
    ck_assert_int_eq(sim_world_wait_graph(sim_runtime_world(w), &g), USP_OK);
    ck_assert_int_eq(g.kind, SIM_REPORT_NONE);
    ck_assert_int_eq(g.n_ranks, 0);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_wait_graph(&g, &dot), USP_ERR_RUNTIME);
    usp_strbuf_free(&dot);
    sim_wait_graph_free(&g);
    usp_runtime_destroy(w);
}
END_TEST

/* --- rendering and files ----------------------------------------------------- */

START_TEST(svg_png_and_pdf_have_valid_headers)
{
    if (!viz_can_render())
        return; /* a build without Graphviz writes DOT only: see unknown_or_unrenderable_formats_are_config_errors */
    viz_attention_config c;
    usp_runtime_t *w = viz_test_run_layer(4, 4, 1, 16, 8, 8, 0, &c);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_ulysses(usp_runtime_trace(w), &c, &dot), USP_OK);
    usp_runtime_destroy(w);
    char dir[64], path[128];
    viz_test_scratch_dir(dir, sizeof dir);
    static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const char *names[] = {"a.svg", "a.png", "a.PDF", "a.dot"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        ck_assert_msg(viz_write_file("--dot", usp_strbuf_text(&dot), path) == USP_OK, "%s", usp_error_message());
        size_t size;
        char *data = harness_read_file(path, &size);
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
    viz_test_scratch_dir(dir, sizeof dir);
    const char *bad[] = {"a.jpg", "a", "a.svg.txt", "dir.png/a"};
    const char *named[] = {"'.jpg'", "(no extension)", "'.txt'", "(no extension)"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, bad[i]);
        ck_assert_int_eq(viz_write_file("--dot", "digraph g { a -> b }\n", path), USP_ERR_CONFIG);
        ck_assert_msg(strstr(usp_error_message(), "--dot") && strstr(usp_error_message(), named[i]) &&
                      strstr(usp_error_message(), ".svg"), "message must name the option, the extension and what "
                      "works: %s", usp_error_message());
        ck_assert(!viz_test_file_exists(path));
    }
    snprintf(path, sizeof path, "%s/a.png", dir);
    if (!viz_can_render()) {
        ck_assert_int_eq(viz_write_file("--dot", "digraph g { a -> b }\n", path), USP_ERR_CONFIG);
        ck_assert_ptr_nonnull(strstr(usp_error_message(), "without Graphviz"));
    } else { /* a broken diagram is a runtime error and leaves no file */
        ck_assert_int_eq(viz_write_file("--dot", "digraph g { a -> }\n", path), USP_ERR_RUNTIME);
    }
    ck_assert(!viz_test_file_exists(path));
    snprintf(path, sizeof path, "%s/missing/a.dot", dir);
    ck_assert_int_eq(viz_write_file("--dot", "digraph g {}\n", path), USP_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "cannot write"));
    ck_assert_int_eq(rmdir(dir), 0); /* empty: nothing half-written was left */
}
END_TEST

/* --- big pictures ------------------------------------------------------------ */

START_TEST(pictures_of_64_ranks_aggregate_and_say_so)
{
    viz_attention_config c;
    usp_strbuf dot = {0};
    usp_runtime_t *w = viz_test_run_layer(64, 64, 1, 128, 64, 64, 0, &c);
    ck_assert_int_eq(viz_dot_ulysses(usp_runtime_trace(w), &c, &dot), USP_OK);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "Aggregated: 64 ranks &gt; 8"));
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), " -> "), 2 * 64); /* a star, not 64 x 63 arrows */
    ck_assert(viz_test_graphviz_parses(usp_strbuf_text(&dot)));
    usp_strbuf_free(&dot);
    ck_assert_int_eq(viz_dot_traffic(usp_runtime_trace(w), 64, NULL, &dot), USP_OK);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "Aggregated: 4032 rank pairs"));
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), " -> "), 8 * 7); /* node to node, not 64 x 63 */
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), "lhead=cluster_node"), 8 * 7);
    usp_strbuf_free(&dot);
    usp_runtime_destroy(w);

    w = viz_test_run_layer(64, 1, 64, 128, 2, 2, 1, &c);
    ck_assert_int_eq(viz_dot_ring(usp_runtime_trace(w), &c, &dot), USP_OK);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&dot), "Aggregated: 64 ranks &gt; 8"));
    ck_assert_int_eq(viz_test_count(usp_strbuf_text(&dot), "computes 129 of 256"), 64); /* 2R+1 of 4R */
    usp_strbuf_free(&dot);
    usp_runtime_destroy(w);

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
    sim_world *world;
    ck_assert_int_eq(sim_world_create(&config, &world), USP_OK);
    ck_assert_int_eq(sim_world_run(world, usp_selftest_rank, &run), USP_ERR_COLLECTIVE);
    free(run.stats);
    sim_wait_graph g;
    ck_assert_int_eq(sim_world_wait_graph(world, &g), USP_OK);
    sim_world_destroy(world);
    ck_assert_int_eq(viz_dot_wait_graph(&g, &dot), USP_OK);
    const char *text = usp_strbuf_text(&dot);
    ck_assert_ptr_nonnull(strstr(text, "Aggregated: 64 ranks"));
    ck_assert_int_le(viz_test_count(text, "fillcolor="), 8);
    ck_assert_ptr_nonnull(strstr(text, "rank 2 (in the cycle)"));
    ck_assert_ptr_nonnull(strstr(text, "rank 0 (in the cycle)"));
    ck_assert_ptr_nonnull(strstr(text, "56 ranks: 8-63"));
    ck_assert(viz_test_graphviz_parses(text));
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
    usp_runtime_t *w = viz_test_run_layer(2, 2, 1, 8, 2, 2, 0, &ok);
    usp_strbuf dot = {0};
    ck_assert_int_eq(viz_dot_ring(usp_runtime_trace(w), &ok, &dot), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "--ring"));
    usp_strbuf_free(&dot);
    usp_runtime_destroy(w);
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
