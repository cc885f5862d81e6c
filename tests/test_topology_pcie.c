/* PCIe boxes (issue 16, "PCIe boxes"): routes through the CPUs with P2P
 * between every pair, below a common switch only (NCCL's default) or not at
 * all (through host memory, NCCL's SHM transport); closed forms on pcie-gen4
 * and pcie-l20; the PCIe rows of docs/cluster_model.md's validation table
 * (predicted against published nccl-tests figures, each within 15%); the
 * JSON fields `fabric.p2p` and `fabric.host_memory`; and the Ada GPUs of such
 * boxes (l20, l40s).
 *
 * References are written from the published figures (25 GB/s a Gen4 x16
 * link, 72 GB/s of host-memory staging a socket from nccl issue 1603's
 * 4 x 18 GB/s), not read back from the presets, so a wrong preset fails.
 * Closed forms hold to 1e-9 relative. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm_impl.h"
#include "sim/calibration.h"
#include "sim/cost_model.h"
#include "tests/check_main.h"
#include "tests/topology_testing.h"

#define GB 1e9
#define US 1e-6
#define PCIE4 25e9          /* Gen4 x16: 31.5 GB/s line, ~25 achieved */
#define HOST_MEMORY 72e9    /* a socket's SHM staging: nccl#1603, 4 GPUs x 18 GB/s all-to-all busbw */
#define BASE (8.4 * US)     /* NCCL's ring/Simple base latency (tuning.cc) */

static char tmpdir[] = "/tmp/usp_topology_pcie_XXXXXX";

/* A preset, or one of the files below by name, into m. */
static sim_cost_model model(const char *machine, int nodes);

/* 4 RTX 4090 on one CPU's root ports (no PCIe switch), P2P off: the machine of nccl#1603 (an Ada
 * preset stands in for the card: only the links matter here). */
static const char rtx4090_shm[] =
    "{\"name\": \"4x4090-shm\", \"gpu\": \"l40s\", \"gpus_per_node\": 4,\n"
    " \"fabric\": {\"kind\": \"pcie\", \"p2p\": \"off\", \"gpus_per_switch\": 1, \"switches_per_socket\": 4,\n"
    "  \"gpu_link\": {\"bandwidth_gbs\": 31.5, \"efficiency\": 0.7936507936507936, \"latency_us\": 1},\n"
    "  \"switch_uplink\": {\"bandwidth_gbs\": 31.5, \"efficiency\": 0.7936507936507936, \"latency_us\": 0},\n"
    "  \"host_bridge\": {\"bandwidth_gbs\": 48, \"latency_us\": 0.5},\n"
    "  \"host_memory\": {\"bandwidth_gbs\": 72, \"latency_us\": 1}}}\n";

static sim_cost_model model(const char *machine, int nodes)
{
    sim_cost_model m = {.dtype = USP_BF16};
    if (strcmp(machine, "4x4090-shm") != 0) {
        ck_assert(sim_topology_preset(machine, nodes, &m.topology));
        return m;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/%s.json", tmpdir, machine);
    write_file(path, rtx4090_shm);
    ck_assert_int_eq(sim_topology_from_name_or_file(path, nodes, &m.topology), USP_OK);
    unlink(path);
    return m;
}

/* --- closed forms ----------------------------------------------------------- */

START_TEST(pcie_gen4_all_to_all_is_bound_by_the_host_bridges)
{
    /* pcie-gen4: 2 GPUs a switch, 2 switches a socket, P2P between every pair. Host bridge 0
     * forwards every flow that leaves a switch of socket 0: S/8 x (2x2x2 within the socket +
     * 2x16 across) = 5 S, at 48 GB/s; uplinks carry 1.5 S at 25, the socket link 2 S at 32. */
    sim_cost_model m = model("pcie-gen4", 1);
    size_t per_peer = (size_t)1 << 24;
    double S = 8.0 * per_peer;
    expect_close(collective(&m, USP_OP_ALL_TO_ALL, 8, ranks_from(0, 8), per_peer), BASE + 6 * US + 5 * S / 48e9,
                 "all-to-all on pcie-gen4");
}
END_TEST

START_TEST(pcie_l20_joins_a_switch_by_p2p_and_the_sockets_through_host_memory)
{
    const double S = 1e9;
    sim_cost_model m = model("pcie-l20", 1);
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
}
END_TEST

START_TEST(pcie_l20_all_to_all_is_bound_by_the_switch_uplinks)
{
    /* Each GPU sends S/8 to each of the 4 GPUs of the other socket, all through its switch's
     * x16 uplink: 16 x S/8 = 2 S at 25 GB/s. The socket link carries 2 S at 32, each socket's
     * host memory 2 S at 72, each GPU link 7/8 S at 25: the uplinks bind, busbw 7/8 x 12.5. */
    sim_cost_model m = model("pcie-l20", 1);
    size_t per_peer = (size_t)1 << 24;
    double S = 8.0 * per_peer, t = collective(&m, USP_OP_ALL_TO_ALL, 8, ranks_from(0, 8), per_peer);
    expect_close(t, BASE + 6 * US + 2 * S / PCIE4, "all-to-all on pcie-l20");
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
}
END_TEST

/* --- the validation table: PCIe rows ------------------------------------------ */

typedef struct validation_row {
    const char *machine; /* preset, or "4x4090-shm" (the file above) */
    int n;               /* group: ranks 0 .. n-1 */
    usp_comm_kind kind;  /* USP_OP_SEND: point to point from rank 0 to rank `peer` */
    int peer;
    double published;    /* GB/s busbw (algbw for point to point) */
    const char *source;
} validation_row;

static const validation_row rows[] = {
    {"pcie-gen4", 2, USP_OP_SEND, 1, 25, "issue 5 facts: ~25 of 31.5 GB/s"},
    {"pcie-gen4", 4, USP_OP_ALL_REDUCE, 0, 22, "nccl#1603: 4x RTX 4090 Gen4, P2P on"},
    {"pcie-gen4", 4, USP_OP_ALL_TO_ALL, 0, 18, "nccl#1603: 4x RTX 4090 Gen4, via host (SHM)"},
    {"pcie-l20", 2, USP_OP_SEND, 1, 25, "issue 5 facts: ~25 of 31.5 GB/s (P2P below one switch)"},
    {"4x4090-shm", 4, USP_OP_ALL_TO_ALL, 0, 18, "nccl#1603: 4x RTX 4090, one CPU, P2P off (SHM)"},
    {"4x4090-shm", 4, USP_OP_ALL_REDUCE, 0, 18, "nccl#1603: the same machine's all-reduce over SHM"},
};
#define N_ROWS (int)(sizeof rows / sizeof rows[0])

/* busbw (GB/s) the model predicts for a row, at 4 GiB: nccl-tests' peak sizes. */
static double predicted_busbw(const validation_row *r)
{
    sim_cost_model m = model(r->machine, 1);
    return predicted_busbw_at_4gib(&m, r->kind, r->n, r->peer);
}

START_TEST(pcie_validation_rows_within_15_percent)
{
    const validation_row *r = &rows[_i];
    expect_validation_row(r->machine, r->kind, r->n, predicted_busbw(r), r->published, r->source);
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

#define FABRIC_HEAD                                                                                              \
    "{\"gpu\": \"l20\", \"gpus_per_node\": 8, \"fabric\": {\"kind\": \"pcie\", \"gpus_per_switch\": 4,"           \
    " \"switches_per_socket\": 1, \"gpu_link\": {\"bandwidth_gbs\": 31.5, \"efficiency\": 0.7936507936507936,"    \
    " \"latency_us\": 1}, \"switch_uplink\": {\"bandwidth_gbs\": 31.5, \"efficiency\": 0.7936507936507936,"       \
    " \"latency_us\": 1}, \"host_bridge\": {\"bandwidth_gbs\": 48, \"latency_us\": 0.5},"                         \
    " \"socket_link\": {\"bandwidth_gbs\": 32, \"latency_us\": 1}"

START_TEST(p2p_field_is_checked_and_a_file_equals_its_preset)
{
    sim_topology t;
    ck_assert_int_eq(load(FABRIC_HEAD ", \"p2p\": \"sometimes\"}}", &t), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "'fabric.p2p' is \"sometimes\"") != NULL, "%s", usp_error_message());
    ck_assert_int_eq(load(FABRIC_HEAD ", \"p2p\": 1}}", &t), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "'fabric.p2p' is a number") != NULL, "%s", usp_error_message());
    ck_assert_int_eq(load(FABRIC_HEAD ", \"p2p\": \"switch\"}}", &t), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "'fabric.host_memory' is missing") != NULL, "%s", usp_error_message());
    ck_assert_int_eq(load(FABRIC_HEAD ", \"p2p\": \"switch\", \"host_memory\": {\"bandwidth_gbs\": 0}}}", &t),
                     USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "'fabric.host_memory.bandwidth_gbs' is 0") != NULL, "%s",
                  usp_error_message());
    ck_assert_int_eq(load(FABRIC_HEAD "}}", &t), USP_OK); /* absent: P2P between every pair, as before */
    ck_assert_int_eq(t.p2p, SIM_P2P_SYSTEM);
    /* the preset, restated */
    ck_assert_int_eq(load(FABRIC_HEAD ", \"p2p\": \"switch\", \"host_memory\": {\"bandwidth_gbs\": 72,"
                          " \"latency_us\": 1}}}", &t), USP_OK);
    sim_cost_model file = {.dtype = USP_BF16, .topology = t}, preset = model("pcie-l20", 1);
    const usp_comm_kind kinds[2] = {USP_OP_ALL_TO_ALL, USP_OP_ALL_REDUCE};
    for (int k = 0; k < 2; k++) {
        double a = collective(&file, kinds[k], 8, ranks_from(0, 8), 1 << 20);
        double b = collective(&preset, kinds[k], 8, ranks_from(0, 8), 1 << 20);
        ck_assert_msg(a == b, "%s: file %.17g, preset %.17g", usp_comm_kind_name(kinds[k]), a, b);
    }
}
END_TEST

/* What usp calibrate writes for a PCIe box reads back as the same box, P2P mode included. */
START_TEST(a_written_topology_keeps_its_p2p_mode)
{
    sim_cost_model preset = model("pcie-l20", 1), file = {.dtype = USP_BF16};
    json_t *j = sim_topology_to_json(&preset.topology);
    ck_assert_ptr_nonnull(j);
    char path[256];
    snprintf(path, sizeof path, "%s/written.json", tmpdir);
    ck_assert_int_eq(json_dump_file(j, path, JSON_REAL_PRECISION(17)), 0);
    json_decref(j);
    ck_assert_int_eq(sim_topology_from_name_or_file(path, 0, &file.topology), USP_OK);
    unlink(path);
    ck_assert_int_eq(file.topology.p2p, SIM_P2P_SWITCH);
    double a = collective(&file, USP_OP_ALL_TO_ALL, 8, ranks_from(0, 8), 1 << 20);
    double b = collective(&preset, USP_OP_ALL_TO_ALL, 8, ranks_from(0, 8), 1 << 20);
    ck_assert_msg(a == b, "all-to-all: file %.17g, preset %.17g", a, b);
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
    tcase_add_test(t, pcie_gen4_all_to_all_is_bound_by_the_host_bridges);
    tcase_add_test(t, pcie_l20_joins_a_switch_by_p2p_and_the_sockets_through_host_memory);
    tcase_add_test(t, pcie_l20_all_to_all_is_bound_by_the_switch_uplinks);
    tcase_add_test(t, p2p_off_stages_every_pair_in_host_memory);
    suite_add_tcase(s, t);
    t = tcase_create("validation");
    tcase_add_loop_test(t, pcie_validation_rows_within_15_percent, 0, N_ROWS);
    suite_add_tcase(s, t);
    t = tcase_create("files");
    tcase_add_test(t, p2p_field_is_checked_and_a_file_equals_its_preset);
    tcase_add_test(t, a_written_topology_keeps_its_p2p_mode);
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
