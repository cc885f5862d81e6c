/* Helpers shared by the viz tests (test_viz.c, test_viz_trace.c): run one
 * attention layer on the simulator and keep its trace, read files back, count
 * strings in a picture, and parse DOT with Graphviz's own parser. Static
 * inline: each test program takes what it uses. */
#ifndef USP_TESTS_VIZ_TESTING_H
#define USP_TESTS_VIZ_TESTING_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/sim_runtime.h"
#include "tests/harness.h"
#include "viz/attention_run.h"

#ifdef USP_HAVE_GVC
#include <gvc.h>
#endif

static inline int viz_test_file_exists(const char *path) { return access(path, F_OK) == 0; }

/* A fresh scratch directory under /tmp. */
static inline void viz_test_scratch_dir(char *dir, size_t size)
{
    snprintf(dir, size, "/tmp/usp_test_viz_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* Runs one attention layer on the simulator and keeps the runtime for its trace. */
static inline usp_runtime_t *viz_test_run_layer(int world, int ulysses, int ring, int64_t seq, int64_t heads,
                                                int64_t kv_heads, int causal, viz_attention_config *c)
{
    *c = (viz_attention_config){.seq_len = seq, .batch = 1, .n_heads = heads, .n_kv_heads = kv_heads, .head_dim = 4,
                                .causal = causal};
    ck_assert_int_eq(usp_mesh_shape_make(world, ulysses, ring, &c->shape), USP_OK);
    usp_runtime_t *rt = NULL;
    ck_assert_int_eq(sim_runtime_create(&(usp_runtime_options){.world_size = world, .trace = 1}, &rt), USP_OK);
    usp_status s = viz_attention_run(c, rt);
    ck_assert_msg(s == USP_OK, "%s", usp_error_message());
    return rt;
}

/* 1 when `dot` parses with Graphviz's own parser (always 1 in a build without Graphviz). */
static inline int viz_test_graphviz_parses(const char *dot)
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

/* How many times `needle` occurs in `text`. */
static inline int viz_test_count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

#endif
