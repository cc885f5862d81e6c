/* The cluster model (issue 5, acceptance items 1, 2 and 6): closed forms of
 * transfers, contention and NCCL's collectives on the presets; the validation
 * table of docs/cluster_model.md (predicted against published nccl-tests
 * figures, each within 15%; the PCIe rows and closed forms are in
 * test_topology_pcie.c); the simulator charging the model; and bad
 * topology / GPU files rejected with a message that names the field.
 *
 * The references are written here from the published figures (370 GB/s
 * effective NVLink 4, 47.5 GB/s per NDR NIC, 8.4 us per NCCL call, ...), not
 * read back from the model's structs, so a wrong preset fails. Tolerance of
 * the closed forms: 1e-9 relative (the model is double arithmetic in a fixed
 * order; only rounding separates it from the formula). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/comm/comm_impl.h"
#include "sim/cost_model.h"
#include "sim/flow_model.h"
#include "sim/world.h"
#include "tests/check_main.h"
#include "tests/topology_testing.h"

#define GB 1e9
#define US 1e-6
#define NVLINK4 370e9            /* 450 GB/s line x NCCL's ~82%: nccl-tests issue 212 */
#define NVLINK3 (300e9 * 370 / 450)
#define NDR_NIC (0.95 * 50e9)    /* 46-49 GB/s per NIC: nccl-tests issues 267, 290 */
#define HDR_NIC (0.95 * 25e9)
#define PCIE4 25e9               /* Gen4 x16: 31.5 GB/s line, ~25 achieved */
#define BASE (8.4 * US)          /* NCCL's ring/Simple base latency (tuning.cc) */
#define NVLINK_HOP (2.5 * US)    /* GPU -> NVSwitch -> GPU */
#define NIC_HOP (6.0 * US)       /* NIC out, NIC in */


static sim_cost_model model(const char *preset, int nodes)
{
    sim_cost_model m = {.dtype = USP_BF16};
    ck_assert(sim_topology_preset(preset, nodes, &m.topology));
    return m;
}


/* --- item 1: closed forms -------------------------------------------------- */

START_TEST(one_transfer_costs_latency_plus_bytes_over_bandwidth)
{
    const double S = 1e9;
    sim_cost_model h = model("dgx-h100", 2), p = model("pcie-gen4", 1);
    expect_close(sim_cost_transfer(&h, 0, 1, S), BASE + NVLINK_HOP + S / NVLINK4, "NVLink");
    expect_close(sim_cost_transfer(&h, 1, 9, S), BASE + NIC_HOP + S / NDR_NIC, "NDR between nodes");
    expect_close(sim_cost_transfer(&p, 0, 1, S), BASE + 2 * US + S / PCIE4, "PCIe, same switch");
    /* GPU, switch uplink, host bridge, socket link, host bridge, uplink, GPU: 1 + 1 + .5 + 1 + .5 + 1 + 1 us */
    expect_close(sim_cost_transfer(&p, 0, 4, S), BASE + 6 * US + S / PCIE4, "PCIe, across sockets");
    /* the same transfer priced as a collective's flow */
    uint64_t bytes[4] = {0, (uint64_t)S, 0, 0};
    double t;
    ck_assert_int_eq(sim_cost_collective(&h, USP_OP_ALL_TO_ALL_V, 2, ranks_from(0, 2), bytes, &t), USP_OK);
    expect_close(t, sim_cost_transfer(&h, 0, 1, S), "a transfer inside a collective");
}
END_TEST

START_TEST(two_flows_sharing_a_link_take_twice_as_long)
{
    const double cap[3] = {10, 10, 10}, bytes[2] = {100, 100};
    const int starts[3] = {0, 2, 4}, links[4] = {0, 1, 0, 2}; /* both cross link 0 */
    double finish[2], alone, together;
    sim_flow_set one = {1, bytes, starts, links, 3, cap}, two = {2, bytes, starts, links, 3, cap};
    ck_assert_int_eq(sim_flow_run(&one, finish, &alone), USP_OK);
    ck_assert_int_eq(sim_flow_run(&two, finish, &together), USP_OK);
    expect_close(alone, 10.0, "one flow");
    expect_close(together, 20.0, "two flows");
    expect_close(finish[0], 20.0, "first flow");
    /* On dgx-h100, rank 0 sending S to ranks 1 and 2 shares its NVLink up. */
    const double S = 1e9;
    sim_cost_model m = model("dgx-h100", 1);
    uint64_t to_one[9] = {0, (uint64_t)S, 0}, to_two[9] = {0, (uint64_t)S, (uint64_t)S};
    double t1, t2;
    ck_assert_int_eq(sim_cost_collective(&m, USP_OP_ALL_TO_ALL_V, 3, ranks_from(0, 3), to_one, &t1), USP_OK);
    ck_assert_int_eq(sim_cost_collective(&m, USP_OP_ALL_TO_ALL_V, 3, ranks_from(0, 3), to_two, &t2), USP_OK);
    expect_close(t1 - BASE - NVLINK_HOP, S / NVLINK4, "one transfer");
    expect_close(t2 - BASE - NVLINK_HOP, 2 * S / NVLINK4, "two transfers through one link");
}
END_TEST

START_TEST(max_min_shares_and_reshares)
{
    /* A short flow finishes at 2 x 50 / 10; the long one then has the link alone. */
    const double cap[1] = {10}, bytes[2] = {100, 50};
    const int starts[3] = {0, 1, 2}, links[2] = {0, 0};
    double finish[2], t;
    sim_flow_set s = {2, bytes, starts, links, 1, cap};
    ck_assert_int_eq(sim_flow_run(&s, finish, &t), USP_OK);
    expect_close(finish[1], 10.0, "short flow");
    expect_close(finish[0], 15.0, "long flow: 50 bytes at 5, then 50 at 10");
    /* Max-min: f0 and f1 share link 0 (1 B/s), f1 and f2 link 1 (10 B/s): f2 gets 9.5. */
    const double cap2[2] = {1, 10}, b2[3] = {1, 1, 1};
    const int st2[4] = {0, 1, 3, 4}, l2[4] = {0, 0, 1, 1};
    double f2[3];
    sim_flow_set s2 = {3, b2, st2, l2, 2, cap2};
    ck_assert_int_eq(sim_flow_run(&s2, f2, &t), USP_OK);
    expect_close(f2[2], 1.0 / 9.5, "f2 takes what f1 leaves of link 1");
    expect_close(f2[0], 2.0, "f0 at half of link 0");
}
END_TEST

START_TEST(all_to_all_on_dgx_h100_runs_at_370_busbw)
{
    sim_cost_model m = model("dgx-h100", 1);
    for (int n = 2; n <= 8; n *= 2) {
        size_t per_peer = (size_t)1 << 27; /* S = n x 128 MiB per rank */
        double S = (double)per_peer * n, t = collective(&m, USP_OP_ALL_TO_ALL, n, ranks_from(0, n), per_peer);
        expect_close(t, BASE + NVLINK_HOP + S * (n - 1) / n / NVLINK4, "all-to-all");
        expect_close(S / (t - BASE - NVLINK_HOP) * (n - 1) / n, NVLINK4, "busbw = algbw (n-1)/n");
    }
}
END_TEST

START_TEST(all_to_all_across_nodes_follows_the_nic_rule)
{
    for (int N = 2; N <= 4; N *= 2) {
        sim_cost_model m = model("dgx-h100", N);
        int W = 8 * N;
        size_t per_peer = (size_t)1 << 23;
        double S = (double)per_peer * W, t = collective(&m, USP_OP_ALL_TO_ALL, W, ranks_from(0, W), per_peer);
        /* (N-1)/N of each rank's bytes leave the node through its own NIC; NVLink carries the rest faster */
        expect_close(t, BASE + NIC_HOP + S * (N - 1) / N / NDR_NIC, "all-to-all over N nodes");
        double busbw = S / (t - BASE - NIC_HOP) * (W - 1) / W;
        expect_close(busbw, (double)N / (N - 1) * NDR_NIC * (W - 1) / W, "busbw = N/(N-1) x NIC");
    }
}
END_TEST

START_TEST(ring_collectives_follow_their_bus_factors)
{
    sim_cost_model m = model("dgx-h100", 1);
    const size_t S = (size_t)1 << 30;
    for (int n = 2; n <= 8; n *= 2) {
        double f = (double)(n - 1) / n;
        double ar = collective(&m, USP_OP_ALL_REDUCE, n, ranks_from(0, n), S);
        expect_close(ar, BASE + 2 * f * n * NVLINK_HOP + 2 * f * (double)S / NVLINK4, "all-reduce 2(n-1)/n");
        double ag = collective(&m, USP_OP_ALL_GATHER, n, ranks_from(0, n), S / n); /* count is per rank */
        expect_close(ag, BASE + f * n * NVLINK_HOP + f * (double)S / NVLINK4, "all-gather (n-1)/n");
        double rs = collective(&m, USP_OP_REDUCE_SCATTER, n, ranks_from(0, n), S / n);
        expect_close(rs, ag, "reduce-scatter = all-gather");
    }
    /* Two nodes: the ring crosses them on all 8 rails; NVLink (370) is the bottleneck on
     * dgx-h100 (8 x 47.5 = 380), the HDR NICs (8 x 23.75 = 190) on dgx-a100. */
    double f = 15.0 / 16, hops = 14 * NVLINK_HOP + 2 * NIC_HOP;
    sim_cost_model h2 = model("dgx-h100", 2), a2 = model("dgx-a100", 2);
    expect_close(collective(&h2, USP_OP_ALL_REDUCE, 16, ranks_from(0, 16), S),
                 BASE + 2 * f * hops + 2 * f * (double)S / NVLINK4, "2 x dgx-h100 all-reduce");
    expect_close(collective(&a2, USP_OP_ALL_REDUCE, 16, ranks_from(0, 16), S),
                 BASE + 2 * f * hops + 2 * f * (double)S / (8 * HDR_NIC), "2 x dgx-a100 all-reduce");
    ck_assert(8 * HDR_NIC < NVLINK3);
    /* One GPU a node (a DP group across nodes): one rail, one NIC. */
    int across[2] = {0, 8};
    expect_close(collective(&h2, USP_OP_ALL_REDUCE, 2, across, S), BASE + 2 * 0.5 * 2 * NIC_HOP + (double)S / NDR_NIC,
                 "all-reduce with one GPU per node");
}
END_TEST

START_TEST(small_all_reduce_costs_the_measured_latency_floor)
{
    sim_cost_model m = model("dgx-h100", 1);
    double t = collective(&m, USP_OP_ALL_REDUCE, 8, ranks_from(0, 8), 8);
    ck_assert_msg(t >= 40 * US && t <= 47 * US, "8-byte all-reduce on 8 GPUs: %.1f us, measured 40-47 us", t / US);
}
END_TEST

START_TEST(small_all_reduce_across_nodes_takes_the_tree)
{
    /* 8 bytes over N dgx-h100 nodes (n = 8N GPUs). Tree: up the 7 NVLink hops of a node's
     * chain and log2 N NIC hops of the tree of nodes, then down:
     *     base + 2 (7 x 2.5 us + log2(N) x 6 us)            = 67.4 us (N 4), 91.4 us (N 16)
     * Ring: 2(n-1) hops over a ring with n - N NVLink edges and N NIC edges:
     *     base + 2(n-1)/n ((n - N) x 2.5 us + N x 6 us)     = 190.5 us, 754.5 us
     * The bytes add under 1e-5 of either. On one node the ring is the only choice. */
    for (int N = 4, log2N = 2; N <= 16; N *= 4, log2N += 2) {
        sim_cost_model m = model("dgx-h100", N);
        int n = 8 * N;
        sim_algorithm used;
        double tree = BASE + 2 * (7 * NVLINK_HOP + log2N * NIC_HOP);
        double ring = BASE + 2.0 * (n - 1) / n * ((n - N) * NVLINK_HOP + N * NIC_HOP);
        double t = collective_as(&m, USP_OP_ALL_REDUCE, n, ranks_from(0, n), 8, SIM_ALGO_AUTO, &used);
        ck_assert_msg(used == SIM_ALGO_TREE && fabs(t - tree) < 1e-5 * tree, "N %d: %.9g s, tree %.9g", N, t, tree);
        double r = collective_as(&m, USP_OP_ALL_REDUCE, n, ranks_from(0, n), 8, SIM_ALGO_RING, &used);
        ck_assert_msg(used == SIM_ALGO_RING && fabs(r - ring) < 1e-5 * ring, "N %d: ring %.9g, want %.9g", N, r, ring);
        ck_assert(t < r);
    }
    sim_cost_model one = model("dgx-h100", 1);
    sim_algorithm used;
    collective_as(&one, USP_OP_ALL_REDUCE, 8, ranks_from(0, 8), 8, SIM_ALGO_TREE, &used);
    ck_assert_int_eq(used, SIM_ALGO_RING);
}
END_TEST

START_TEST(large_all_reduce_on_two_nodes_takes_the_faster_estimate)
{
    /* 1 GiB over 2 dgx-h100 nodes (n = 16). Ring (NVLink-bound, see above):
     *     base + 2(15/16) (14 x 2.5 + 2 x 6) us + 2(15/16) S / 370 GB/s   = 5.54 ms
     * Tree: busbw 0.92 x the ring's 370 and algbw = busbw / 2:
     *     base + 2 (7 x 2.5 + 1 x 6) us + 2 S / (0.92 x 370 GB/s)         = 6.36 ms
     * so NCCL's model keeps the ring; below about 51 MB the tree's 41 us less latency
     * wins (4 MiB: tree). */
    const double S = (double)(1 << 30), f = 15.0 / 16;
    sim_cost_model m = model("dgx-h100", 2);
    double ring = BASE + 2 * f * (14 * NVLINK_HOP + 2 * NIC_HOP) + 2 * f * S / NVLINK4;
    double tree = BASE + 2 * (7 * NVLINK_HOP + NIC_HOP) + 2 * S / (0.92 * NVLINK4);
    sim_algorithm used, forced;
    double t = collective_as(&m, USP_OP_ALL_REDUCE, 16, ranks_from(0, 16), (size_t)S, SIM_ALGO_AUTO, &used);
    expect_close(collective_as(&m, USP_OP_ALL_REDUCE, 16, ranks_from(0, 16), (size_t)S, SIM_ALGO_TREE, &forced), tree,
                 "1 GiB by tree");
    ck_assert_int_eq(forced, SIM_ALGO_TREE);
    ck_assert_int_eq(used, SIM_ALGO_RING);
    expect_close(t, ring, "1 GiB: the ring, the faster");
    collective_as(&m, USP_OP_ALL_REDUCE, 16, ranks_from(0, 16), (size_t)4 << 20, SIM_ALGO_AUTO, &used);
    ck_assert_int_eq(used, SIM_ALGO_TREE);
}
END_TEST

/* --- item 2: the validation table ------------------------------------------- */

typedef struct validation_row {
    const char *machine;   /* preset, or "hgx-a100-4nic" (a JSON file written below) */
    int nodes, n;          /* group: ranks 0 .. n-1 */
    usp_comm_kind kind;    /* USP_OP_SEND: point to point from rank 0 to rank `peer` */
    int peer;
    double published;      /* GB/s busbw (algbw for point to point) */
    const char *source;
} validation_row;

static const validation_row rows[] = {
    {"dgx-h100", 1, 8, USP_OP_ALL_TO_ALL, 0, 370, "nccl-tests#212: ~370 effective NVLink4, non-allreduce ops"},
    {"dgx-h100", 1, 8, USP_OP_ALL_REDUCE, 0, 370, "nccl-tests#212: 370 with NCCL_ALGO=RING (NVLS: ~480)"},
    {"dgx-h100", 1, 2, USP_OP_SEND, 1, 378, "issue 5 facts: 376-380 one way"},
    {"dgx-a100", 1, 8, USP_OP_ALL_REDUCE, 0, 233, "nccl-tests#175: 232.5; issue 5 facts: 232-235"},
    {"dgx-a100", 1, 8, USP_OP_ALL_TO_ALL, 0, 233, "rule of nccl-tests#212: non-allreduce busbw = ring's"},
    {"dgx-a100", 1, 2, USP_OP_SEND, 1, 238, "nccl-tests#149: 430-520 bidirectional p2p on 8xA100 SXM"},
    {"dgx-h100", 2, 16, USP_OP_SEND, 8, 47.5, "nccl-tests#290, #267: 46-49 per NDR NIC"},
    {"dgx-h100", 2, 16, USP_OP_ALL_TO_ALL, 0, 95, "nccl-tests#130: 2 nodes -> 2x NIC (46-49)"},
    {"dgx-h100", 2, 16, USP_OP_ALL_REDUCE, 0, 330, "nccl#1221: 2x8 H100, 8x400G, NVLS off"},
    {"dgx-a100", 2, 16, USP_OP_ALL_REDUCE, 0, 192, "nccl#1576: DGX-A100, 8x HDR, 2 nodes"},
    {"hgx-a100-4nic", 2, 16, USP_OP_ALL_REDUCE, 0, 86, "nccl-tests#175: 2x8 A100, 4x HDR"},
    {"hgx-a100-4nic", 2, 16, USP_OP_ALL_TO_ALL, 0, 20.3, "nccl#1138: 2x8 A100, 4x HDR: 19.8-20.7"},
};
#define N_ROWS (int)(sizeof rows / sizeof rows[0])

/* 8 A100 SXM with 4 HDR NICs (one per GPU pair): not a preset, a topology file. */
static const char hgx_a100_4nic[] =
    "{\"name\": \"hgx-a100-4nic\", \"gpu\": \"a100-80g\", \"gpus_per_node\": 8,\n"
    " \"fabric\": {\"kind\": \"nvswitch\",\n"
    "            \"gpu_link\": {\"bandwidth_gbs\": 300, \"efficiency\": 0.822, \"latency_us\": 1.25}},\n"
    " \"network\": {\"nics_per_node\": 4, \"nic\": {\"bandwidth_gbs\": 25, \"efficiency\": 0.95, \"latency_us\": 3}}}\n";

static char tmpdir[] = "/tmp/usp_topology_XXXXXX";


/* busbw (GB/s) the model predicts for a row, at 4 GiB: nccl-tests' peak sizes. */
static double row_busbw(const validation_row *r)
{
    sim_cost_model m = {.dtype = USP_BF16};
    char path[256];
    snprintf(path, sizeof path, "%s/%s.json", tmpdir, r->machine);
    int from_file = strcmp(r->machine, "hgx-a100-4nic") == 0;
    if (from_file)
        write_file(path, hgx_a100_4nic);
    ck_assert_int_eq(sim_topology_from_name_or_file(from_file ? path : r->machine, r->nodes, &m.topology), USP_OK);
    return predicted_busbw_at_4gib(&m, r->kind, r->n, r->peer);
}

START_TEST(validation_table_within_15_percent)
{
    const validation_row *r = &rows[_i];
    char machine[64];
    snprintf(machine, sizeof machine, "%s%s", r->machine, r->nodes > 1 ? " x2" : "");
    expect_validation_row(machine, r->kind, r->n, row_busbw(r), r->published, r->source);
}
END_TEST

/* --- the simulator charges the model ---------------------------------------- */

typedef struct schedule {
    size_t count;      /* f32 elements (per peer for all_to_all) */
    int mixed;         /* 1: a ring of sendrecvs, an all_reduce, an uneven all_to_all_v */
} schedule;

static usp_status schedule_rank(const usp_rank_ctx *ctx, void *arg)
{
    const schedule *p = arg;
    int n = ctx->world_size, me = ctx->rank;
    size_t bytes = p->count * (size_t)n * sizeof(float);
    void *a, *b; /* contents do not matter: only the virtual clocks are checked */
    USP_CHECK(usp_buffer_alloc(ctx->backend, bytes, "test", &a));
    USP_CHECK(usp_buffer_alloc(ctx->backend, bytes, "test", &b));
    usp_status s;
    if (!p->mixed) {
        s = n == 2 ? (me == 0 ? usp_comm_send(ctx->world, a, p->count, USP_F32, 1, ctx->stream)
                              : usp_comm_recv(ctx->world, b, p->count, USP_F32, 0, ctx->stream))
                   : usp_comm_all_to_all(ctx->world, a, b, p->count, USP_F32, ctx->stream);
    } else {
        size_t counts[64], offsets[64], rcounts[64], roffsets[64];
        for (int j = 0; j < n; j++) { /* rank i sends (i + j) % 3 + 1 blocks of count / 4 to rank j */
            counts[j] = (size_t)((me + j) % 3 + 1) * (p->count / 4), offsets[j] = (size_t)j * p->count;
            rcounts[j] = (size_t)((j + me) % 3 + 1) * (p->count / 4), roffsets[j] = (size_t)j * p->count;
        }
        s = usp_comm_sendrecv(ctx->world, a, p->count, (me + 1) % n, b, p->count, (me + n - 1) % n, USP_F32,
                              ctx->stream);
        if (s == USP_OK)
            s = usp_comm_all_reduce(ctx->world, a, b, p->count, USP_F32, USP_REDUCE_SUM, ctx->stream);
        if (s == USP_OK)
            s = usp_comm_all_to_all_v(ctx->world, a, counts, offsets, b, rcounts, roffsets, USP_F32, ctx->stream);
    }
    usp_buffer_free(ctx->backend, a);
    usp_buffer_free(ctx->backend, b);
    return s;
}

/* Runs the schedule on `world` ranks of `cost`; writes every rank's virtual time. */
static usp_status run_schedule(int world, const sim_cost_model *cost, schedule *p, double *times)
{
    sim_config config = sim_config_default(world);
    if (cost)
        config.cost = *cost;
    config.trace = 0;
    config.stack_bytes = (size_t)1 << 20;
    sim_world *w;
    USP_CHECK(sim_world_create(&config, &w));
    usp_status s = sim_world_run(w, schedule_rank, p);
    for (int r = 0; r < world && times; r++)
        times[r] = sim_world_time(w, r);
    sim_world_destroy(w);
    return s;
}

START_TEST(simulator_clocks_follow_the_model)
{
    schedule a2a = {.count = (size_t)1 << 16}, p2p = {.count = (size_t)1 << 20};
    double times[8];
    ck_assert_int_eq(run_schedule(8, NULL, &a2a, times), USP_OK);
    double S = 8.0 * a2a.count * sizeof(float);
    for (int r = 0; r < 8; r++)
        expect_close(times[r], BASE + NVLINK_HOP + S * 7 / 8 / NVLINK4, "all_to_all through the simulator");
    ck_assert_int_eq(run_schedule(2, NULL, &p2p, times), USP_OK);
    for (int r = 0; r < 2; r++)
        expect_close(times[r], BASE + NVLINK_HOP + p2p.count * 4.0 / NVLINK4, "send/recv through the simulator");
}
END_TEST

START_TEST(same_inputs_same_virtual_times)
{
    schedule mixed = {.count = 4096, .mixed = 1};
    double a[16], b[16];
    ck_assert_int_eq(run_schedule(16, NULL, &mixed, a), USP_OK); /* two dgx-h100 nodes */
    ck_assert_int_eq(run_schedule(16, NULL, &mixed, b), USP_OK);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    ck_assert(a[0] > 0);
}
END_TEST

START_TEST(world_larger_than_the_cluster_is_a_config_error)
{
    sim_cost_model one_node = model("dgx-h100", 1);
    schedule p = {.count = 4};
    ck_assert_int_eq(run_schedule(9, &one_node, &p, NULL), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--world 9") && strstr(usp_error_message(), "--nodes 2"), "%s",
                  usp_error_message());
}
END_TEST

/* --- the GPU roofline --------------------------------------------------------- */

START_TEST(gpu_roofline_is_the_slower_of_flops_and_bytes)
{
    sim_gpu h100, h200, a100;
    ck_assert(sim_gpu_preset("h100-sxm", &h100) && sim_gpu_preset("h200", &h200) && sim_gpu_preset("a100-80g", &a100));
    expect_close(h100.peak_bf16, 989.4e12, "H100 dense BF16"), expect_close(h100.hbm_bandwidth, 3.35e12, "HBM3");
    expect_close(h200.hbm_bandwidth, 4.8e12, "H200 HBM3e"), expect_close(h200.memory_bytes, 141e9, "H200 memory");
    expect_close(a100.peak_bf16, 312e12, "A100 BF16"), expect_close(a100.memory_bytes, 80e9, "A100 memory");
    usp_op_cost gemm = {.op = "gemm", .flops = 1e15, .bytes = 1e9}, copy = {.op = "copy", .bytes = 1e12},
                fwd = {.op = "attention_forward", .flops = 1e15, .bytes = 1e9},
                bwd = {.op = "attention_backward", .flops = 2.5e15, .bytes = 1e9};
    expect_close(sim_gpu_op_seconds(&h100, USP_BF16, &gemm), 1e15 / (989.4e12 * 0.70), "compute-bound GEMM");
    expect_close(sim_gpu_op_seconds(&h100, USP_F32, &gemm), 1e15 / (494.7e12 * 0.70), "fp32 GEMM on TF32");
    expect_close(sim_gpu_op_seconds(&h100, USP_BF16, &copy), 1e12 / (3.35e12 * 0.85), "memory-bound copy");
    /* the presets price attention at FlashAttention-2's rates unless told otherwise (issue 16) */
    ck_assert_int_eq(h100.attention_kernel, SIM_ATTENTION_FA2);
    expect_close(sim_gpu_op_seconds(&h100, USP_BF16, &fwd), 1e15 / (989.4e12 * 0.35), "FA2 forward at 35%");
    expect_close(sim_gpu_op_seconds(&h100, USP_BF16, &bwd), 2.5e15 / (989.4e12 * 0.30), "FA2 backward at 30%");
    ck_assert_int_eq(sim_gpu_use_attention_kernel(&h100, SIM_ATTENTION_FA3), USP_OK);
    expect_close(sim_gpu_op_seconds(&h100, USP_BF16, &fwd), 1e15 / (989.4e12 * 0.75), "FA3 forward at 75%");
    expect_close(sim_gpu_op_seconds(&h100, USP_BF16, &bwd), 2.5e15 / (989.4e12 * 0.50), "FA3 backward");
    sim_cost_model m = model("dgx-h200", 1);
    expect_close(sim_cost_compute(&m, &copy), 1e12 / (4.8e12 * 0.85), "the cluster's GPU");
}
END_TEST

/* --- item 6: bad topology and GPU files -------------------------------------- */

#define NV "\"fabric\": {\"kind\": \"nvswitch\", \"gpu_link\": {\"bandwidth_gbs\": 450}}"
#define PCIE_FABRIC(extra) "\"fabric\": {\"kind\": \"pcie\", \"gpu_link\": {\"bandwidth_gbs\": 31.5}" extra "}"

typedef struct bad_file {
    const char *json;
    const char *field, *detail; /* both must appear in the message, with the file's path */
} bad_file;

static const bad_file bad_files[] = {
    {"{\"gpu\": \"h100-sxm\", " NV "}", "'gpus_per_node' is missing", "GPUs in one node"},
    {"{\"gpu\": \"h100-sxm\", \"gpus_per_node\": \"eight\", " NV "}", "'gpus_per_node'", "whole number"},
    {"{\"gpu\": \"h100-sxm\", \"gpus_per_node\": 8, \"fabric\": {\"kind\": \"nvswitch\", "
     "\"gpu_link\": {\"bandwidth_gbs\": -3}}}", "'fabric.gpu_link.bandwidth_gbs' is -3", "at least 0.001"},
    {"{\"gpu\": \"h100-sxm\", \"gpus_per_node\": 8, \"fabric\": {\"kind\": \"nvswitch\", "
     "\"gpu_link\": {\"bandwidth_gbs\": 450, \"efficiency\": 1.5}}}", "'fabric.gpu_link.efficiency' is 1.5",
     "at most 1"},
    {"{\"gpu\": \"h100-sxm\", \"gpus_per_node\": 8, \"fabric\": {\"kind\": \"nvswitch\", "
     "\"gpu_link\": {\"bandwith_gbs\": 450}}}", "unknown field 'fabric.gpu_link.bandwith_gbs'", "bandwidth_gbs"},
    {"{\"gpu\": \"h100-sxm\", \"gpus_per_node\": 8, \"fabric\": {\"kind\": \"nvlink\"}}", "'fabric.kind'",
     "\"nvlink\""},
    {"{\"gpu\": \"h900\", \"gpus_per_node\": 8, " NV "}", "'gpu' is \"h900\"", "h100-sxm"},
    {"{\"gpu\": {\"peak_tflops\": {\"bf16\": 989, \"fp32\": 67}, \"memory_gb\": 80}, \"gpus_per_node\": 8, " NV "}",
     "'gpu.hbm_tbs' is missing", "TB/s"},
    {"{\"gpu\": {\"peak_tflops\": {\"bf16\": -1, \"fp32\": 67}, \"hbm_tbs\": 3, \"memory_gb\": 80}, "
     "\"gpus_per_node\": 8, " NV "}", "'gpu.peak_tflops.bf16' is -1", "TFLOP/s"},
    {"{\"gpu\": \"a100-pcie\", \"gpus_per_node\": 8, " PCIE_FABRIC(", \"gpus_per_switch\": 3") "}",
     "'fabric.gpus_per_switch' is 3", "divide"},
    {"{\"gpu\": \"a100-pcie\", \"gpus_per_node\": 8, " PCIE_FABRIC(", \"gpus_per_switch\": 2") "}",
     "'fabric.switch_uplink' is missing", "bandwidth_gbs"},
    {"{\"gpu\": \"h100-sxm\", \"gpus_per_node\": 8, \"nodes\": 2, " NV "}", "no 'network'", "2 nodes"},
    {"{\"gpu\": \"h100-sxm\", \"gpus_per_node\": 8, " NV ", \"network\": {\"nics_per_node\": 8, \"nic\": {}}}",
     "'network.nic.bandwidth_gbs' is missing", "GB/s"},
    {"{\"gpu\": \"h100-sxm\", \"gpus_per_node\": 8, \"nodes\": 0, " NV "}", "'nodes' is 0", "between 1"},
    {"[1, 2]", "one JSON object", "cluster_model.md"},
    {"{\"gpu\": ", "line 1", "topology file"},
};
#define N_BAD (int)(sizeof bad_files / sizeof bad_files[0])

START_TEST(bad_topology_file_names_the_field)
{
    char path[256];
    snprintf(path, sizeof path, "%s/bad%d.json", tmpdir, _i);
    write_file(path, bad_files[_i].json);
    sim_topology t;
    ck_assert_int_eq(sim_topology_from_name_or_file(path, 0, &t), USP_ERR_CONFIG);
    const char *msg = usp_error_message();
    ck_assert_msg(strstr(msg, path) && strstr(msg, bad_files[_i].field) && strstr(msg, bad_files[_i].detail),
                  "case %d: message lacks the path, '%s' or '%s': %s", _i, bad_files[_i].field,
                  bad_files[_i].detail, msg);
    unlink(path);
}
END_TEST

START_TEST(bad_specs_and_gpu_files_are_config_errors)
{
    sim_topology t;
    ck_assert_int_eq(sim_topology_from_name_or_file("dgx-h900", 0, &t), USP_ERR_CONFIG);
    ck_assert(strstr(usp_error_message(), "dgx-h900") && strstr(usp_error_message(), "dgx-h100"));
    ck_assert_int_eq(sim_topology_from_name_or_file("/nonexistent/cluster.json", 0, &t), USP_ERR_CONFIG);
    ck_assert(strstr(usp_error_message(), "/nonexistent/cluster.json"));
    ck_assert_int_eq(sim_topology_from_name_or_file("dgx-h100", -1, &t), USP_ERR_CONFIG);
    ck_assert(strstr(usp_error_message(), "--nodes -1"));
    sim_gpu g;
    char path[256];
    snprintf(path, sizeof path, "%s/gpu.json", tmpdir);
    write_file(path, "{\"peak_tflops\": {\"bf16\": 989, \"fp32\": 67}, \"hbm_tbs\": \"fast\", \"memory_gb\": 80}");
    ck_assert_int_eq(sim_gpu_from_name_or_file(path, &g), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), path) && strstr(usp_error_message(), "'hbm_tbs' must be a number"),
                  "%s", usp_error_message());
    write_file(path, "{\"name\": \"x\", \"peak_tflops\": {\"bf16\": 100, \"fp32\": 10}, \"hbm_tbs\": 1, "
                     "\"memory_gb\": 24, \"gemm_efficiency\": 0.5}");
    ck_assert_int_eq(sim_gpu_from_name_or_file(path, &g), USP_OK);
    expect_close(g.peak_tf32, 10e12, "tf32 defaults to fp32"), expect_close(g.gemm_efficiency, 0.5, "efficiency");
    unlink(path);
    ck_assert_int_eq(sim_gpu_from_name_or_file("z100", &g), USP_ERR_CONFIG);
    ck_assert(strstr(usp_error_message(), "z100") && strstr(usp_error_message(), "h100-sxm"));
}
END_TEST

/* A file under a deep directory (a path of about 700 characters) is named whole in the messages: the
 * "where" of a GPU or topology file was once a 512-byte buffer that cut the path and the reason. */
START_TEST(a_deep_file_path_is_named_whole)
{
    char path[1024];
    int n = snprintf(path, sizeof path, "%s", tmpdir);
    for (int d = 0; d < 7; d++) {
        n += snprintf(path + n, sizeof path - (size_t)n, "/%0*d", 99, d);
        ck_assert_msg(mkdir(path, 0700) == 0 || errno == EEXIST, "mkdir %s", path);
    }
    snprintf(path + n, sizeof path - (size_t)n, "/gpu.json");
    ck_assert_uint_gt(strlen(path), 700);
    write_file(path, "{\"peak_tflops\": {\"bf16\": 989, \"fp32\": 67}, \"hbm_tbs\": \"fast\", \"memory_gb\": 80}");
    sim_gpu g;
    ck_assert_int_eq(sim_gpu_from_name_or_file(path, &g), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), path) && strstr(usp_error_message(), "'hbm_tbs' must be a number"),
                  "%s", usp_error_message());
    unlink(path);
    snprintf(path + n, sizeof path - (size_t)n, "/cluster.json");
    write_file(path, "{\"gpu\": \"h100-sxm\", \"gpus_per_node\": 8}");
    sim_topology t;
    ck_assert_int_eq(sim_topology_from_name_or_file(path, 0, &t), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), path) && strstr(usp_error_message(), "'fabric' is missing"), "%s",
                  usp_error_message());
    unlink(path);
    for (char *slash; (slash = strrchr(path, '/')) && strlen(path) > strlen(tmpdir);) { /* the 7 directories */
        *slash = '\0';
        if (strlen(path) > strlen(tmpdir))
            rmdir(path);
    }
}
END_TEST

/* A file that restates a preset predicts the same times, bit for bit. */
START_TEST(topology_file_equals_its_preset)
{
    char path[256], json[1024];
    snprintf(path, sizeof path, "%s/mirror.json", tmpdir);
    snprintf(json, sizeof json,
             "{\"name\": \"mirror\", \"gpu\": \"h100-sxm\", \"gpus_per_node\": 8, \"base_latency_us\": 8.4,\n"
             " \"fabric\": {\"kind\": \"nvswitch\", \"gpu_link\": {\"bandwidth_gbs\": 450, \"efficiency\": %.17g,"
             " \"latency_us\": 1.25}},\n \"network\": {\"nics_per_node\": 8, \"nic\": {\"bandwidth_gbs\": 50,"
             " \"efficiency\": 0.95, \"latency_us\": 3}}}\n", 370.0 / 450.0);
    write_file(path, json);
    sim_cost_model file = {.dtype = USP_BF16}, preset = model("dgx-h100", 2);
    ck_assert_int_eq(sim_topology_from_name_or_file(path, 2, &file.topology), USP_OK);
    ck_assert_int_eq(file.topology.nodes, 2);
    const usp_comm_kind kinds[2] = {USP_OP_ALL_TO_ALL, USP_OP_ALL_REDUCE};
    for (int k = 0; k < 2; k++) {
        double a = collective(&file, kinds[k], 16, ranks_from(0, 16), 1 << 20);
        double b = collective(&preset, kinds[k], 16, ranks_from(0, 16), 1 << 20);
        ck_assert_msg(a == b, "%s: file %.17g, preset %.17g", usp_comm_kind_name(kinds[k]), a, b);
    }
    snprintf(json, sizeof json,
             "{\"gpu\": \"a100-pcie\", \"gpus_per_node\": 8, \"fabric\": {\"kind\": \"pcie\",\n"
             " \"gpu_link\": {\"bandwidth_gbs\": 31.5, \"efficiency\": %.17g, \"latency_us\": 1},\n"
             " \"gpus_per_switch\": 2, \"switches_per_socket\": 2,\n"
             " \"switch_uplink\": {\"bandwidth_gbs\": 31.5, \"efficiency\": %.17g, \"latency_us\": 1},\n"
             " \"host_bridge\": {\"bandwidth_gbs\": 48, \"latency_us\": 0.5},\n"
             " \"socket_link\": {\"bandwidth_gbs\": 32, \"latency_us\": 1},\n"
             " \"p2p_fanout\": {\"bandwidth_gbs\": 6}}}\n", 25 / 31.5, 25 / 31.5);
    write_file(path, json);
    sim_cost_model pfile = {.dtype = USP_BF16}, ppreset = model("pcie-gen4", 1);
    ck_assert_int_eq(sim_topology_from_name_or_file(path, 0, &pfile.topology), USP_OK);
    ck_assert(collective(&pfile, USP_OP_ALL_TO_ALL, 8, ranks_from(0, 8), 1 << 20) ==
              collective(&ppreset, USP_OP_ALL_TO_ALL, 8, ranks_from(0, 8), 1 << 20));
    unlink(path);
}
END_TEST

static Suite *topology_suite(void)
{
    Suite *s = suite_create("topology");
    TCase *t = tcase_create("closed_forms");
    tcase_add_test(t, one_transfer_costs_latency_plus_bytes_over_bandwidth);
    tcase_add_test(t, two_flows_sharing_a_link_take_twice_as_long);
    tcase_add_test(t, max_min_shares_and_reshares);
    tcase_add_test(t, all_to_all_on_dgx_h100_runs_at_370_busbw);
    tcase_add_test(t, all_to_all_across_nodes_follows_the_nic_rule);
    tcase_add_test(t, ring_collectives_follow_their_bus_factors);
    tcase_add_test(t, small_all_reduce_costs_the_measured_latency_floor);
    tcase_add_test(t, small_all_reduce_across_nodes_takes_the_tree);
    tcase_add_test(t, large_all_reduce_on_two_nodes_takes_the_faster_estimate);
    suite_add_tcase(s, t);
    t = tcase_create("validation");
    tcase_add_loop_test(t, validation_table_within_15_percent, 0, N_ROWS);
    suite_add_tcase(s, t);
    t = tcase_create("simulator");
    tcase_add_test(t, simulator_clocks_follow_the_model);
    tcase_add_test(t, same_inputs_same_virtual_times);
    tcase_add_test(t, world_larger_than_the_cluster_is_a_config_error);
    tcase_add_test(t, gpu_roofline_is_the_slower_of_flops_and_bytes);
    suite_add_tcase(s, t);
    t = tcase_create("files");
    tcase_add_loop_test(t, bad_topology_file_names_the_field, 0, N_BAD);
    tcase_add_test(t, bad_specs_and_gpu_files_are_config_errors);
    tcase_add_test(t, a_deep_file_path_is_named_whole);
    tcase_add_test(t, topology_file_equals_its_preset);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    int code = check_main_run(topology_suite());
    char path[300];
    snprintf(path, sizeof path, "%s/hgx-a100-4nic.json", tmpdir);
    unlink(path);
    rmdir(tmpdir);
    return code;
}
