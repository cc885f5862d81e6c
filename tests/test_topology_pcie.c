/* PCIe boxes (issue 16, "PCIe boxes"): routes through the CPUs with P2P
 * between every pair, below a common switch only (NCCL's default) or not at
 * all (through host memory, NCCL's SHM transport); the collapse of P2P
 * through a root complex when a GPU writes to several peers at once (the
 * fan-out link); closed forms on pcie-gen4, pcie-l20 and files of published
 * boxes; the PCIe rows of docs/cluster_model.md's validation table
 * (predicted against published nccl-tests figures); the JSON fields
 * `fabric.p2p`, `fabric.host_memory` and `fabric.p2p_fanout`; and the Ada
 * GPUs of such boxes (l20, l40s).
 *
 * References are written from the published figures (25 GB/s a Gen4 x16
 * link, 72 GB/s of host-memory staging a socket from nccl issue 1603's
 * 4 x 18 GB/s, 6 / f GB/s of P2P fan-out from the same issue's 2 GB/s at
 * f = 3), not read back from the presets, so a wrong preset fails.
 * Closed forms hold to 1e-9 relative. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm/comm_impl.h"
#include "calibrate/calibration.h"
#include "sim/cost_model.h"
#include "tests/check_main.h"
#include "tests/topology_testing.h"

#define GB 1e9
#define US 1e-6
#define PCIE4 25e9          /* Gen4 x16: 31.5 GB/s line, ~25 achieved */
#define HOST_MEMORY 72e9    /* a socket's SHM staging: nccl#1603, 4 GPUs x 18 GB/s all-to-all busbw */
#define FANOUT 6e9          /* P2P through a root complex to f peers: FANOUT / f a GPU (nccl#1603: 2 at f = 3) */
#define BASE (8.4 * US)     /* NCCL's ring/Simple base latency (tuning.cc) */

static char tmpdir[] = "/tmp/usp_topology_pcie_XXXXXX";

#define X16 "{\"bandwidth_gbs\": 31.5, \"efficiency\": 0.7936507936507936, \"latency_us\": 1}"
/* A GPU on a CPU root port has no switch: its "uplink" is the same x16 link, no hop of its own. */
#define X16_ROOT_PORT "{\"bandwidth_gbs\": 31.5, \"efficiency\": 0.7936507936507936, \"latency_us\": 0}"

/* Published boxes as topology files (an Ada preset stands in for a GeForce card: only the links matter).
 * 4 RTX 4090 on one CPU's root ports, no PCIe switch: nccl#1603's machine, P2P off and on. */
#define RTX4090_HEAD                                                                                         \
    "{\"name\": \"%s\", \"gpu\": \"l40s\", \"gpus_per_node\": 4,\n"                                         \
    " \"fabric\": {\"kind\": \"pcie\", \"gpus_per_switch\": 1, \"switches_per_socket\": 4,\n"               \
    "  \"gpu_link\": " X16 ", \"switch_uplink\": " X16_ROOT_PORT ",\n"                                       \
    "  \"host_bridge\": {\"bandwidth_gbs\": 48, \"latency_us\": 0.5},\n"
static const char rtx4090_shm[] = RTX4090_HEAD "  \"p2p\": \"off\", \"host_memory\": {\"bandwidth_gbs\": 72, "
                                               "\"latency_us\": 1}}}\n";
static const char rtx4090_p2p[] = RTX4090_HEAD "  \"p2p_fanout\": {\"bandwidth_gbs\": 6}}}\n";
/* 8 RTX 4090, one PCIe switch of 4 under each of 2 CPUs (nccl-tests#307's topology dump), NCCL's default P2P. */
static const char rtx4090_switch[] =
    "{\"name\": \"%s\", \"gpu\": \"l40s\", \"gpus_per_node\": 8,\n"
    " \"fabric\": {\"kind\": \"pcie\", \"gpus_per_switch\": 4, \"switches_per_socket\": 1, \"p2p\": \"switch\",\n"
    "  \"gpu_link\": " X16 ", \"switch_uplink\": " X16 ",\n"
    "  \"host_bridge\": {\"bandwidth_gbs\": 48, \"latency_us\": 0.5},\n"
    "  \"socket_link\": {\"bandwidth_gbs\": 32, \"latency_us\": 1},\n"
    "  \"host_memory\": {\"bandwidth_gbs\": 72, \"latency_us\": 1}}}\n";
/* nccl#1817's 8 x L20 (pcie-l20's layout) with NCCL's default P2P below a switch: its SHM run. */
static const char l20_shm[] =
    "{\"name\": \"%s\", \"gpu\": \"l20\", \"gpus_per_node\": 8,\n"
    " \"fabric\": {\"kind\": \"pcie\", \"gpus_per_switch\": 2, \"switches_per_socket\": 2, \"p2p\": \"switch\",\n"
    "  \"gpu_link\": " X16 ", \"switch_uplink\": " X16 ",\n"
    "  \"host_bridge\": {\"bandwidth_gbs\": 48, \"latency_us\": 0.5},\n"
    "  \"socket_link\": {\"bandwidth_gbs\": 32, \"latency_us\": 1},\n"
    "  \"host_memory\": {\"bandwidth_gbs\": 72, \"latency_us\": 1}}}\n";

static const struct {
    const char *name, *json;
} files[] = {{"4x4090-shm", rtx4090_shm}, {"4x4090-p2p", rtx4090_p2p}, {"8x4090-switch", rtx4090_switch},
             {"8xl20-shm", l20_shm}};

/* A preset, or one of the files above by name, into m. */
static sim_cost_model model(const char *machine, int nodes)
{
    sim_cost_model m = {.dtype = USP_BF16};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if (strcmp(machine, files[i].name) != 0)
            continue;
        char path[256], json[2048];
        snprintf(path, sizeof path, "%s/%s.json", tmpdir, machine);
        snprintf(json, sizeof json, files[i].json, machine);
        write_file(path, json);
        ck_assert_int_eq(sim_topology_from_name_or_file(path, nodes, &m.topology), USP_OK);
        unlink(path);
        return m;
    }
    ck_assert_msg(sim_topology_preset(machine, nodes, &m.topology), "no preset %s", machine);
    return m;
}

/* --- closed forms ----------------------------------------------------------- */

START_TEST(all_to_all_through_a_root_complex_is_bound_by_the_fan_out)
{
    /* pcie-gen4 and pcie-l20: 2 GPUs a switch, 2 switches a socket, P2P between every pair. In an
     * 8-GPU all-to-all each GPU writes S/8 to its switch peer and S/8 to each of 6 GPUs through a
     * root complex (f = 6): 6 S/8 at 6 / 6 GB/s. The host bridges (5 S at 48 GB/s), uplinks and socket
     * links would allow 7x more. Over ranks 0-3 (one socket) f = 2: 2 S/4 at 3 GB/s. */
    const char *boxes[2] = {"pcie-gen4", "pcie-l20"};
    for (int b = 0; b < 2; b++) {
        sim_cost_model m = model(boxes[b], 1);
        ck_assert_int_eq(m.topology.p2p, SIM_P2P_SYSTEM);
        size_t per_peer = (size_t)1 << 24;
        double S = 8.0 * per_peer;
        expect_close(collective(&m, USP_OP_ALL_TO_ALL, 8, ranks_from(0, 8), per_peer),
                     BASE + 6 * US + 6 * S / 8 / (FANOUT / 6), boxes[b]);
        S = 4.0 * per_peer; /* GPU, uplink, host bridge, uplink, GPU: 4.5 us */
        expect_close(collective(&m, USP_OP_ALL_TO_ALL, 4, ranks_from(0, 4), per_peer),
                     BASE + 4.5 * US + 2 * S / 4 / (FANOUT / 2), boxes[b]);
        /* one peer through the root complex (f = 1) does not collapse: one pair, or a ring */
        expect_close(sim_cost_transfer(&m, 0, 4, S), BASE + 6 * US + S / PCIE4, boxes[b]);
    }
}
END_TEST

START_TEST(a_ring_through_the_root_complex_runs_at_the_links_rate)
{
    /* An all-reduce over ranks 0, 2, 4, 6 (one per switch): each GPU sends to one peer (f = 1), so no
     * fan-out link; the bound is elsewhere and the same as with the collapse left out. */
    sim_cost_model m = model("pcie-gen4", 1), plain = m;
    plain.topology.p2p_fanout.bandwidth = 0;
    const int members[4] = {0, 2, 4, 6};
    double with = collective(&m, USP_OP_ALL_REDUCE, 4, members, 1 << 26);
    double without = collective(&plain, USP_OP_ALL_REDUCE, 4, members, 1 << 26);
    ck_assert_msg(with == without, "ring: %.17g with the fan-out, %.17g without", with, without);
    int links[SIM_ROUTE_MAX];
    ck_assert_int_eq(sim_topology_fanout_link(&plain.topology, 0, 2), -1); /* not modelled */
    ck_assert_int_ge(sim_topology_fanout_link(&m.topology, 0, 2), 0);
    ck_assert_int_eq(sim_topology_fanout_link(&m.topology, 0, 1), -1); /* below one switch */
    ck_assert_int_eq(sim_topology_route(&m.topology, 0, 2, links), 5);
}
END_TEST

START_TEST(p2p_below_a_switch_and_host_memory_across_the_sockets)
{
    const double S = 1e9;
    sim_cost_model m = model("8x4090-switch", 1);
    ck_assert_int_eq(m.topology.p2p, SIM_P2P_SWITCH);
    /* below one switch: GPU up, GPU down (1 + 1 us) */
    expect_close(sim_cost_transfer(&m, 0, 3, S), BASE + 2 * US + S / PCIE4, "P2P below a switch");
    /* across the sockets: GPU, uplink, socket link, host memory, uplink, GPU (6 x 1 us), bound by the x16 links */
    expect_close(sim_cost_transfer(&m, 0, 4, S), BASE + 6 * US + S / PCIE4, "through host memory");
    int links[SIM_ROUTE_MAX], n = sim_topology_route(&m.topology, 1, 6, links);
    ck_assert_int_eq(n, 6);
    double capacity, latency;
    sim_topology_link(&m.topology, links[3], &capacity, &latency);
    expect_close(capacity, HOST_MEMORY, "the receiving socket's host memory");
    /* Each GPU sends S/8 to each of the 4 GPUs of the other socket, all through its switch's x16
     * uplink: 16 x S/8 = 2 S at 25 GB/s. The socket link carries 2 S at 32, each socket's host
     * memory 2 S at 72, each GPU link 7/8 S at 25: the uplinks bind, busbw 7/8 x 12.5. */
    size_t per_peer = (size_t)1 << 24;
    double A = 8.0 * per_peer;
    expect_close(collective(&m, USP_OP_ALL_TO_ALL, 8, ranks_from(0, 8), per_peer), BASE + 6 * US + 2 * A / PCIE4,
                 "all-to-all, P2P below the switches");
}
END_TEST

START_TEST(p2p_off_stages_every_pair_in_host_memory)
{
    /* 4 GPUs on one socket, P2P off: an all-to-all stages 4 x 3 x S/4 = 3 S in that socket's
     * memory (72 GB/s); each GPU link carries 3/4 S at 25: the memory binds, busbw 72 / 4 = 18. */
    sim_cost_model m = model("4x4090-shm", 1);
    size_t per_peer = (size_t)1 << 24;
    double S = 4.0 * per_peer;
    /* GPU (1 us), uplink (0), host memory (1), uplink (0), GPU (1) */
    expect_close(collective(&m, USP_OP_ALL_TO_ALL, 4, ranks_from(0, 4), per_peer),
                 BASE + 3 * US + 3 * S / HOST_MEMORY, "all-to-all through host memory");
    expect_close(sim_cost_transfer(&m, 0, 1, S), BASE + 3 * US + S / PCIE4, "one pair, through host memory");
    /* P2P on, the same 4 GPUs: each writes 3 x S/4 through the root complex to f = 3 peers, at 6 / 3
     * GB/s (the host bridge carries 3 S at 48); GPU (1), uplink (0), host bridge (0.5), uplink (0), GPU (1) */
    m = model("4x4090-p2p", 1);
    expect_close(collective(&m, USP_OP_ALL_TO_ALL, 4, ranks_from(0, 4), per_peer),
                 BASE + 2.5 * US + 3 * S / 4 / (FANOUT / 3), "all-to-all, P2P through the CPU");
}
END_TEST

/* --- the validation table: PCIe rows ------------------------------------------ */

typedef struct validation_row {
    const char *machine; /* preset, or one of the files above */
    int n;               /* group: ranks 0 .. n-1 */
    usp_comm_kind kind;  /* USP_OP_SEND: point to point from rank 0 to rank `peer` */
    int peer;
    int averaged;        /* 1: nccl-tests' "Avg bus bandwidth" over 8 B .. 512 MiB; 0: busbw at 4 GiB */
    double published;    /* GB/s busbw (algbw for point to point) */
    double tolerance;    /* the table's 15%, or wider where the row says why */
    const char *source;
} validation_row;

static const validation_row rows[] = {
    {"pcie-gen4", 2, USP_OP_SEND, 1, 0, 25, 0.15, "issue 5 facts: ~25 of 31.5 GB/s"},
    {"pcie-gen4", 4, USP_OP_ALL_REDUCE, 0, 0, 22, 0.15, "nccl#1603: 4x RTX 4090 Gen4, P2P on"},
    {"pcie-l20", 2, USP_OP_SEND, 1, 0, 25, 0.15, "issue 5 facts: ~25 of 31.5 GB/s (P2P below one switch)"},
    {"4x4090-shm", 4, USP_OP_ALL_TO_ALL, 0, 0, 18, 0.15, "nccl#1603: 4x RTX 4090, one CPU, P2P off (SHM): "
                                                          "calibrates host memory (4 x 18 = 72)"},
    {"4x4090-shm", 4, USP_OP_ALL_REDUCE, 0, 0, 18, 0.15, "nccl#1603: the same machine's all-reduce over SHM"},
    {"4x4090-p2p", 4, USP_OP_ALL_TO_ALL, 0, 0, 2, 0.15, "nccl#1603: the same machine, P2P on (\"18 -> 2\"): "
                                                         "calibrates the fan-out (f = 3: 6 / 3)"},
    {"8xl20-shm", 8, USP_OP_ALL_TO_ALL, 0, 1, 6.13, 0.15, "nccl#1817: 8 x L20, NCCL's default (SHM across "
                                                           "switches), Avg bus bandwidth"},
    /* The averaged P2P run collapses less than the fit to nccl#1603 predicts (its plateau is not
     * published); held to 30%, and the USP ranking (docs/validation.md) is the stronger check. */
    {"pcie-l20", 8, USP_OP_ALL_TO_ALL, 0, 1, 0.899, 0.30, "nccl#1817: the same box, NCCL_P2P_LEVEL=SYS, Avg bus "
                                                           "bandwidth"},
};
#define N_ROWS (int)(sizeof rows / sizeof rows[0])

START_TEST(pcie_validation_rows_within_their_tolerance)
{
    const validation_row *r = &rows[_i];
    sim_cost_model m = model(r->machine, 1);
    double got = r->averaged ? predicted_busbw_averaged(&m, r->kind, r->n)
                             : predicted_busbw_at_4gib(&m, r->kind, r->n, r->peer);
    expect_validation_row_within(r->machine, r->kind, r->n, got, r->published, r->source, r->tolerance);
}
END_TEST

/* --- the JSON fields ---------------------------------------------------------- */

static usp_status load(const char *json, sim_topology *t)
{
    char path[256];
    snprintf(path, sizeof path, "%s/t.json", tmpdir);
    write_file(path, json);
    usp_status s = sim_topology_from_name_or_file(path, 0, t);
    unlink(path);
    return s;
}

/* pcie-l20's layout: 2 GPUs a switch, 2 switches a socket, 2 sockets. */
#define FABRIC_HEAD                                                                                              \
    "{\"gpu\": \"l20\", \"gpus_per_node\": 8, \"fabric\": {\"kind\": \"pcie\", \"gpus_per_switch\": 2,"           \
    " \"switches_per_socket\": 2, \"gpu_link\": " X16 ", \"switch_uplink\": " X16 ","                              \
    " \"host_bridge\": {\"bandwidth_gbs\": 48, \"latency_us\": 0.5},"                                              \
    " \"socket_link\": {\"bandwidth_gbs\": 32, \"latency_us\": 1}"

/* The file's all-to-all and all-reduce over 8 equal the preset's, bit for bit. */
static void expect_same_times(const sim_topology *t, const char *preset_name)
{
    sim_cost_model file = {.dtype = USP_BF16, .topology = *t}, preset = model(preset_name, 1);
    const usp_comm_kind kinds[2] = {USP_OP_ALL_TO_ALL, USP_OP_ALL_REDUCE};
    for (int k = 0; k < 2; k++) {
        double a = collective(&file, kinds[k], 8, ranks_from(0, 8), 1 << 20);
        double b = collective(&preset, kinds[k], 8, ranks_from(0, 8), 1 << 20);
        ck_assert_msg(a == b, "%s: file %.17g, %s %.17g", usp_comm_kind_name(kinds[k]), a, preset_name, b);
    }
}

static void expect_refused(const char *json, const char *message)
{
    sim_topology t;
    ck_assert_int_eq(load(json, &t), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), message) != NULL, "%s", usp_error_message());
}

START_TEST(p2p_fields_are_checked_and_a_file_equals_its_preset)
{
    expect_refused(FABRIC_HEAD ", \"p2p\": \"sometimes\"}}", "'fabric.p2p' is \"sometimes\"");
    expect_refused(FABRIC_HEAD ", \"p2p\": 1}}", "'fabric.p2p' is a number");
    expect_refused(FABRIC_HEAD ", \"p2p\": \"switch\"}}", "'fabric.host_memory' is missing");
    expect_refused(FABRIC_HEAD ", \"p2p\": \"switch\", \"host_memory\": {\"bandwidth_gbs\": 0}}}",
                   "'fabric.host_memory.bandwidth_gbs' is 0");
    expect_refused(FABRIC_HEAD ", \"p2p_fanout\": {\"bandwidth_gbs\": -6}}}", "'fabric.p2p_fanout.bandwidth_gbs' is -6");
    expect_refused(FABRIC_HEAD ", \"p2p_fanout\": {\"latency_us\": 1}}}", "'fabric.p2p_fanout.bandwidth_gbs' is missing");
    expect_refused(FABRIC_HEAD ", \"p2p_fanout\": 6}}", "'fabric.p2p_fanout' must be an object");
    sim_topology t;
    ck_assert_int_eq(load(FABRIC_HEAD "}}", &t), USP_OK); /* absent: P2P between every pair, no collapse */
    ck_assert_int_eq(t.p2p, SIM_P2P_SYSTEM);
    ck_assert(t.p2p_fanout.bandwidth == 0);
    /* the preset, restated */
    ck_assert_int_eq(load(FABRIC_HEAD ", \"p2p_fanout\": {\"bandwidth_gbs\": 6}}}", &t), USP_OK);
    expect_same_times(&t, "pcie-l20");
}
END_TEST

/* What usp calibrate writes for a PCIe box reads back as the same box, P2P mode and fan-out included. */
START_TEST(a_written_topology_keeps_its_p2p_mode_and_fan_out)
{
    const char *boxes[2] = {"pcie-l20", "8x4090-switch"};
    for (int b = 0; b < 2; b++) {
        sim_cost_model box = model(boxes[b], 1);
        sim_topology back;
        json_t *j = sim_topology_to_json(&box.topology);
        ck_assert_ptr_nonnull(j);
        char path[256];
        snprintf(path, sizeof path, "%s/written.json", tmpdir);
        ck_assert_int_eq(json_dump_file(j, path, JSON_REAL_PRECISION(17)), 0);
        json_decref(j);
        ck_assert_int_eq(sim_topology_from_name_or_file(path, 0, &back), USP_OK);
        unlink(path);
        ck_assert_int_eq(back.p2p, box.topology.p2p);
        ck_assert(back.p2p_fanout.bandwidth == box.topology.p2p_fanout.bandwidth);
        sim_cost_model file = {.dtype = USP_BF16, .topology = back};
        double x = collective(&file, USP_OP_ALL_TO_ALL, 8, ranks_from(0, 8), 1 << 20);
        double y = collective(&box, USP_OP_ALL_TO_ALL, 8, ranks_from(0, 8), 1 << 20);
        ck_assert_msg(x == y, "%s all-to-all: written %.17g, %.17g", boxes[b], x, y);
    }
}
END_TEST

/* --- the Ada GPUs --------------------------------------------------------------- */

START_TEST(ada_presets_have_their_datasheet_figures_and_no_fa3)
{
    sim_gpu g;
    ck_assert(sim_gpu_preset("l20", &g));
    expect_close(g.peak_bf16, 119.5e12, "L20 dense BF16");
    expect_close(g.peak_fp32, 59.8e12, "L20 FP32");
    expect_close(g.hbm_bandwidth, 864e9, "L20 GDDR6");
    expect_close(g.memory_bytes, 48e9, "L20 memory");
    expect_close(g.attention_efficiency, 0.60, "FA2 forward at Ampere's rate");
    ck_assert_int_eq(sim_gpu_use_attention_kernel(&g, SIM_ATTENTION_FA3), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "not Hopper") != NULL, "%s", usp_error_message());
    ck_assert(sim_gpu_preset("l40s", &g));
    expect_close(g.peak_bf16, 362.05e12, "L40S dense BF16");
    expect_close(g.peak_fp32, 91.6e12, "L40S FP32");
    expect_close(g.memory_bytes, 48e9, "L40S memory");
}
END_TEST

static Suite *pcie_suite(void)
{
    Suite *s = suite_create("topology_pcie");
    TCase *t = tcase_create("closed_forms");
    tcase_add_test(t, all_to_all_through_a_root_complex_is_bound_by_the_fan_out);
    tcase_add_test(t, a_ring_through_the_root_complex_runs_at_the_links_rate);
    tcase_add_test(t, p2p_below_a_switch_and_host_memory_across_the_sockets);
    tcase_add_test(t, p2p_off_stages_every_pair_in_host_memory);
    suite_add_tcase(s, t);
    t = tcase_create("validation");
    tcase_add_loop_test(t, pcie_validation_rows_within_their_tolerance, 0, N_ROWS);
    suite_add_tcase(s, t);
    t = tcase_create("files");
    tcase_add_test(t, p2p_fields_are_checked_and_a_file_equals_its_preset);
    tcase_add_test(t, a_written_topology_keeps_its_p2p_mode_and_fan_out);
    tcase_add_test(t, ada_presets_have_their_datasheet_figures_and_no_fa3);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    int code = check_main_run(pcie_suite());
    rmdir(tmpdir);
    return code;
}
