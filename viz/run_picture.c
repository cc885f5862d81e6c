/* The picture of a finished run (see run_picture.h). */
#include "viz/run_picture.h"

#include "sim/sim_runtime.h"
#include "sim/world.h"
#include "viz/render.h"
#include "viz/traffic.h"
#include "viz/wait_graph.h"

usp_status viz_run_picture(const usp_runtime_t *rt, usp_status run, const char *title, const char *caption,
                           const char *path, const char **drawn)
{
    if (drawn)
        *drawn = NULL;
    const sim_world *w = sim_runtime_world(rt);
    if (!w)
        return usp_error(USP_ERR_CONFIG, "--dot %s: pictures of a run are drawn from the simulator's wait-for graph "
                         "and cluster model; the %s runtime has neither (use --backend sim)", path,
                         usp_runtime_name(rt));
    const char *what = NULL;
    usp_wait_graph g;
    USP_CHECK(sim_world_wait_graph(w, &g));
    usp_strbuf dot = {0};
    usp_status s = USP_OK;
    if (g.kind != USP_REPORT_NONE) {
        s = viz_dot_wait_graph(&g, &dot);
        what = "wait-for picture";
    } else if (run == USP_OK) {
        viz_traffic_options traffic = {.title = title, .caption = caption};
        viz_traffic_use_topology(&traffic, sim_runtime_topology(rt));
        s = viz_dot_traffic(sim_world_trace(w), sim_world_size(w), &traffic, &dot);
        what = "traffic map";
    }
    if (s == USP_OK && dot.len)
        s = viz_write_file("--dot", usp_strbuf_text(&dot), path);
    usp_strbuf_free(&dot);
    usp_wait_graph_free(&g);
    if (drawn)
        *drawn = s == USP_OK ? what : NULL;
    return s;
}
