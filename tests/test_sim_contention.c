/* Point-to-point transfers in flight share the links they cross (sim/p2p_flows.h):
 * closed forms on the presets, through the simulator (sends, receives and
 * sendrecvs posted by ranks) and through the flows' own interface (a transfer
 * that starts while another moves).
 *
 * pcie-gen4 (docs/cluster_model.md): 2 GPUs a PCIe switch, 2 switches a
 * socket, 2 sockets; a GPU's x16 link and a switch uplink carry 25 GB/s each
 * way, a socket's host bridge 48 GB/s for everything it forwards (both ways
 * together), the socket link 32 GB/s each way. Latencies: PCIe 1 us a link,
 * host bridge 0.5 us, socket link 1 us; every NCCL call 8.4 us. Buffers are
 * the meta backend's (shapes only), so the sizes can be those of a real step.
 * Tolerance: 1e-9 relative, as in test_topology.c. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/meta/meta_backend.h"
#include "sim/p2p_flows.h"
#include "sim/world.h"
#include "tests/check_main.h"

#define US 1e-6
#define BASE (8.4 * US)
#define PCIE4 25e9          /* Gen4 x16, ~25 of 31.5 GB/s */
#define HOST_BRIDGE 48e9    /* one per socket, shared by both directions */
#define NVLINK4 370e9
#define NDR_NIC (0.95 * 50e9)
#define SWITCH_TO_SWITCH (4.5 * US) /* GPU, uplink, host bridge, uplink, GPU: 1 + 1 + .5 + 1 + 1 */
#define SOCKET_TO_SOCKET (6.0 * US) /* ... host bridge, socket link, host bridge ...: + 1 + .5 */
#define SAME_SWITCH (2.0 * US)
#define NVLINK_HOP (2.5 * US)
#define NIC_HOP (6.0 * US)

static void expect_close(double got, double want, const char *what, int rank)
{
    ck_assert_msg(fabs(got - want) <= 1e-9 * fabs(want), "%s, rank %d: got %.12g, want %.12g", what, rank, got, want);
}

/* Who sends to whom: edge e moves `count` f32 from src[e] to dst[e]. A rank
 * that sends and receives posts one sendrecv, as a ring step does. */
typedef struct transfers {
    int n;
    int src[1024], dst[1024];
    size_t count;
} transfers;

static usp_status transfers_rank(const usp_rank_ctx *ctx, void *arg)
{
    const transfers *p = arg;
    int to = -1, from = -1;
    for (int e = 0; e < p->n; e++) {
        if (p->src[e] == ctx->rank)
            to = p->dst[e];
        if (p->dst[e] == ctx->rank)
            from = p->src[e];
    }
    if (to < 0 && from < 0)
        return USP_OK;
    void *a, *b;
    size_t bytes = p->count * sizeof(float);
    USP_CHECK(usp_buffer_alloc(ctx->backend, bytes, "test", &a));
    USP_CHECK(usp_buffer_alloc(ctx->backend, bytes, "test", &b));
    usp_status s = to >= 0 && from >= 0
                       ? usp_comm_sendrecv(ctx->world, a, p->count, to, b, p->count, from, USP_F32, ctx->stream)
                   : to >= 0 ? usp_comm_send(ctx->world, a, p->count, USP_F32, to, ctx->stream)
                             : usp_comm_recv(ctx->world, b, p->count, USP_F32, from, ctx->stream);
    usp_buffer_free(ctx->backend, a);
    usp_buffer_free(ctx->backend, b);
    return s;
}

/* Runs the transfers on `world` ranks of `preset` x `nodes`; every rank's end time into times. */
static void run_transfers(const char *preset, int nodes, int world, transfers *p, double *times)
{
    sim_config config = sim_config_default(world);
    ck_assert(sim_topology_preset(preset, nodes, &config.cost.topology));
    config.trace = 0;
    config.stack_bytes = (size_t)256 << 10;
    config.make_backend = usp_backend_meta_create;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    usp_status s = sim_world_run(w, transfers_rank, p);
    ck_assert_msg(s == USP_OK, "%s", usp_error_message());
    for (int r = 0; r < world; r++)
        times[r] = sim_world_time(w, r);
    sim_world_destroy(w);
}

static transfers edges(size_t count, int n, const int *pairs)
{
    transfers t = {.n = n, .count = count};
    for (int e = 0; e < n; e++)
        t.src[e] = pairs[2 * e], t.dst[e] = pairs[2 * e + 1];
    return t;
}

static const size_t COUNT = (size_t)1 << 28; /* 1 GiB of f32 */

START_TEST(two_sends_through_one_pcie_uplink_each_take_twice_as_long)
{
    /* 0 -> 2 and 1 -> 3: GPUs 0, 1 under switch 0, GPUs 2, 3 under switch 1. Both climb
     * switch 0's uplink (25 GB/s each way): 12.5 each. The host bridge (48) is not the
     * bottleneck for two flows. Alone, 0 -> 2 runs at its x16 links' 25. */
    const double S = COUNT * 4.0;
    double t[4];
    transfers one = edges(COUNT, 1, (const int[]){0, 2}), two = edges(COUNT, 2, (const int[]){0, 2, 1, 3});
    run_transfers("pcie-gen4", 1, 4, &one, t);
    expect_close(t[0], BASE + SWITCH_TO_SWITCH + S / PCIE4, "one send alone", 0);
    run_transfers("pcie-gen4", 1, 4, &two, t);
    for (int r = 0; r < 4; r++)
        expect_close(t[r], BASE + SWITCH_TO_SWITCH + 2 * S / PCIE4, "two sends sharing an uplink", r);
}
END_TEST

START_TEST(two_exchanges_through_one_host_bridge_each_take_twice_as_long)
{
    /* 0 <-> 2 and 1 <-> 3 as sendrecvs: four flows through host bridge 0, which carries
     * both directions: 48 / 4 = 12 GB/s each (the uplinks give 12.5). One exchange alone:
     * two flows, 24 each (below the uplinks' 25). */
    const double S = COUNT * 4.0;
    double t[4];
    transfers one = edges(COUNT, 2, (const int[]){0, 2, 2, 0});
    transfers two = edges(COUNT, 4, (const int[]){0, 2, 2, 0, 1, 3, 3, 1});
    run_transfers("pcie-gen4", 1, 4, &one, t);
    expect_close(t[0], BASE + SWITCH_TO_SWITCH + S / (HOST_BRIDGE / 2), "one exchange alone", 0);
    expect_close(t[2], t[0], "one exchange alone", 2);
    run_transfers("pcie-gen4", 1, 4, &two, t);
    for (int r = 0; r < 4; r++)
        expect_close(t[r], BASE + SWITCH_TO_SWITCH + S / (HOST_BRIDGE / 4), "two exchanges through a host bridge", r);
}
END_TEST

START_TEST(disjoint_transfers_on_nvswitch_take_the_time_of_one)
{
    /* dgx-h100: every GPU has its own NVLink up and down to the switch, so 0 -> 2 and 1 -> 3
     * (and the two exchanges) share no link: each takes what one alone takes. */
    const double S = COUNT * 4.0, alone = BASE + NVLINK_HOP + S / NVLINK4;
    double t[4];
    transfers two = edges(COUNT, 2, (const int[]){0, 2, 1, 3});
    transfers exchanges = edges(COUNT, 4, (const int[]){0, 2, 2, 0, 1, 3, 3, 1});
    run_transfers("dgx-h100", 1, 4, &two, t);
    for (int r = 0; r < 4; r++)
        expect_close(t[r], alone, "two sends on NVSwitch", r);
    run_transfers("dgx-h100", 1, 4, &exchanges, t);
    for (int r = 0; r < 4; r++)
        expect_close(t[r], alone, "two exchanges on NVSwitch", r);
}
END_TEST

START_TEST(ring_step_on_pcie_gen4_is_bound_by_the_host_bridges)
{
    /* Every rank r sends S to r + 1 (one Ring-attention step). Four edges stay under one
     * switch (0->1, 2->3, 4->5, 6->7: their own x16 links, 25 GB/s). The other four
     * cross a host bridge: 1->2 and 5->6 one, 3->4 and 7->0 both (with the socket link),
     * so each bridge forwards three flows: 48 / 3 = 16 GB/s each, below the uplinks'
     * 25 and the socket links' 32. Every rank sends or receives one of these:
     *     t(r) = base + L(r) + S / 16 GB/s,
     * L = 6 us for ranks 0, 3, 4, 7 (their cross edge changes sockets) and 4.5 us for
     * 1, 2, 5, 6. Each transfer priced alone would give S / 25 GB/s. */
    const double S = COUNT * 4.0;
    transfers ring = {.n = 8, .count = COUNT};
    for (int r = 0; r < 8; r++)
        ring.src[r] = r, ring.dst[r] = (r + 1) % 8;
    double t[8], again[8];
    run_transfers("pcie-gen4", 1, 8, &ring, t);
    for (int r = 0; r < 8; r++) {
        int crosses_sockets = r == 0 || r == 3 || r == 4 || r == 7;
        double L = crosses_sockets ? SOCKET_TO_SOCKET : SWITCH_TO_SWITCH;
        expect_close(t[r], BASE + L + S / (HOST_BRIDGE / 3), "ring step on pcie-gen4", r);
    }
    run_transfers("pcie-gen4", 1, 8, &ring, again);
    ck_assert(memcmp(t, again, sizeof t) == 0); /* the same run, the same virtual times, bit for bit */
}
END_TEST

START_TEST(ring_of_512_across_64_nodes_shares_nothing)
{
    /* dgx-h100 x 64, rank r -> r + 1: inside a node one NVLink each; from GPU 7 of node k
     * to GPU 0 of node k + 1 through NIC 7 of one node and NIC 0 of the other (rails
     * are non-blocking). No two transfers share a link, so each costs its route alone:
     * ranks 8k + 7 (send) and 8k (receive) 6 us + S / 47.5 GB/s, the others
     * 2.5 us + S / 370. 512 transfers in flight at once (the largest ring step of a
     * W = 512 plan), each a re-sharing of one flow. */
    const size_t count = (size_t)1 << 24;
    const double S = count * 4.0;
    static transfers ring;
    ring.n = 512, ring.count = count;
    for (int r = 0; r < 512; r++)
        ring.src[r] = r, ring.dst[r] = (r + 1) % 512;
    static double t[512];
    run_transfers("dgx-h100", 64, 512, &ring, t);
    for (int r = 0; r < 512; r++) {
        int nic = r % 8 == 7 || r % 8 == 0;
        expect_close(t[r], BASE + (nic ? NIC_HOP + S / NDR_NIC : NVLINK_HOP + S / NVLINK4), "ring of 512", r);
    }
}
END_TEST

/* --- the flows' own interface ------------------------------------------------- */

typedef struct done_log {
    int n;
    int src[8], dst[8];
    double end[8];
} done_log;

static void log_done(void *ctx, int src, int dst, double t_end)
{
    done_log *d = ctx;
    ck_assert_int_lt(d->n, 8);
    d->src[d->n] = src, d->dst[d->n] = dst, d->end[d->n] = t_end;
    d->n++;
}

/* Processes every event up to `horizon`. */
static void run_until(sim_p2p_flows *f, double horizon, done_log *log)
{
    int has;
    double t;
    for (;;) {
        ck_assert_int_eq(sim_p2p_flows_next(f, horizon, &has, &t), USP_OK);
        if (!has)
            return;
        ck_assert_int_eq(sim_p2p_flows_advance(f, t, log_done, log), USP_OK);
    }
}

START_TEST(a_transfer_that_starts_later_slows_the_one_in_flight)
{
    /* pcie-gen4: 0 -> 2 starts at 0; 1 -> 3, through the same switch uplink, starts
     * when the first is half done (S / 2 at 25 GB/s). From then each moves at 12.5:
     * the first finishes its other half after S / 25, at 1.5 S / 25; the second has
     * then moved S / 2 and moves its last half alone, finishing at 2 S / 25. */
    sim_topology t;
    ck_assert(sim_topology_preset("pcie-gen4", 1, &t));
    sim_p2p_flows *f;
    ck_assert_int_eq(sim_p2p_flows_create(&t, &f), USP_OK);
    const double S = 1e9, half = S / 2 / PCIE4;
    done_log log = {0};
    ck_assert_int_eq(sim_p2p_flows_submit(f, 0.0, 0, 2, (uint64_t)S), USP_OK);
    run_until(f, half, &log);
    ck_assert_int_eq(log.n, 0);
    ck_assert_int_eq(sim_p2p_flows_submit(f, half, 1, 3, (uint64_t)S), USP_OK);
    ck_assert_int_eq(sim_p2p_flows_pending(f), 2);
    run_until(f, INFINITY, &log);
    ck_assert_int_eq(log.n, 2);
    ck_assert(log.src[0] == 0 && log.dst[0] == 2 && log.src[1] == 1 && log.dst[1] == 3);
    expect_close(log.end[0], BASE + SWITCH_TO_SWITCH + 1.5 * S / PCIE4, "the first transfer", 0);
    expect_close(log.end[1], BASE + SWITCH_TO_SWITCH + 2.0 * S / PCIE4, "the later transfer", 1);
    ck_assert_int_eq(sim_p2p_flows_pending(f), 0);

    /* A transfer of no bytes, or to itself, costs its latency only; a cleared set reports nothing. */
    log.n = 0;
    double now = sim_p2p_flows_now(f);
    ck_assert_int_eq(sim_p2p_flows_submit(f, now, 0, 5, 0), USP_OK);
    ck_assert_int_eq(sim_p2p_flows_submit(f, now, 3, 3, 1000), USP_OK);
    run_until(f, INFINITY, &log);
    ck_assert_int_eq(log.n, 2);
    expect_close(log.end[0], now + BASE + SOCKET_TO_SOCKET, "an empty transfer", 0);
    expect_close(log.end[1], now + BASE, "a transfer to itself", 3);
    ck_assert_int_eq(sim_p2p_flows_submit(f, now, 0, 2, 1000), USP_OK);
    sim_p2p_flows_clear(f);
    log.n = 0;
    run_until(f, INFINITY, &log);
    ck_assert_int_eq(log.n, 0);
    sim_p2p_flows_destroy(f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sim_contention");
    TCase *t = tcase_create("p2p");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, two_sends_through_one_pcie_uplink_each_take_twice_as_long);
    tcase_add_test(t, two_exchanges_through_one_host_bridge_each_take_twice_as_long);
    tcase_add_test(t, disjoint_transfers_on_nvswitch_take_the_time_of_one);
    tcase_add_test(t, ring_step_on_pcie_gen4_is_bound_by_the_host_bridges);
    tcase_add_test(t, ring_of_512_across_64_nodes_shares_nothing);
    tcase_add_test(t, a_transfer_that_starts_later_slows_the_one_in_flight);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
