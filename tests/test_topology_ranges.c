/* Absurd numbers in topology and GPU files (issue 15): every number of the
 * format has a physical range (docs/cluster_model.md), and a value outside it,
 * a subnormal, NaN or an infinity, is a configuration error naming the file,
 * the field, the value and the range; a key given twice is refused, naming it;
 * topologies and GPUs built in code (the presets among them) obey the same
 * ranges.
 *
 * Why it matters: a 5e-324 GB/s link made `usp plan` spin until killed, 1e-315
 * made `usp plan --json` print nothing and exit 0, and of a key given twice
 * the parser silently kept one value. Each case below passes a value at the
 * edge of its range (the file is accepted and every time priced on it is a
 * finite number of seconds) and refuses one beyond it. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm/comm_impl.h"
#include "sim/cost_model.h"
#include "tests/check_main.h"

/* The files of the tests live in one scratch directory, which main() makes and removes. */
static char scratch_dir[] = "/tmp/usp_topology_ranges_XXXXXX";

/* Removes the directory with what is in it: a failed test leaves its file behind. */
static void remove_scratch_dir(void)
{
    DIR *d = opendir(scratch_dir);
    if (!d)
        return;
    char path[512];
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        snprintf(path, sizeof path, "%s/%s", scratch_dir, e->d_name);
        if (e->d_name[0] != '.')
            unlink(path);
    }
    closedir(d);
    rmdir(scratch_dir);
}

/* Writes `text` to the file `name` of the scratch directory; its path goes to path[256]. */
static void scratch_file(const char *name, const char *text, char *path)
{
    snprintf(path, 256, "%s/%s", scratch_dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_ge(fputs(text, f), 0);
    ck_assert_int_eq(fclose(f), 0);
}

/* --- a file with every number of the format -------------------------------- */

/* Two PCIe nodes (every link kind) with a GPU object: @token@ marks each number. */
#define LINK(name) \
    "{\"bandwidth_gbs\": @" name ".bandwidth_gbs@, \"efficiency\": @" name ".efficiency@, \"latency_us\": @" name \
    ".latency_us@}"
static const char template_json[] =
    "{\"name\": \"ranges\", \"nodes\": @nodes@, \"gpus_per_node\": @gpus_per_node@,\n"
    " \"base_latency_us\": @base_latency_us@,\n"
    " \"gpu\": {\"peak_tflops\": {\"bf16\": @bf16@, \"fp32\": @fp32@, \"tf32\": @tf32@, \"fp8\": @fp8@,"
    " \"fp64\": @fp64@},\n"
    "         \"hbm_tbs\": @hbm_tbs@, \"memory_gb\": @memory_gb@, \"gemm_efficiency\": @gemm_efficiency@,\n"
    "         \"attention_efficiency\": @attention_efficiency@,\n"
    "         \"attention_backward_efficiency\": @attention_backward_efficiency@,\n"
    "         \"memory_efficiency\": @memory_efficiency@},\n"
    " \"fabric\": {\"kind\": \"pcie\", \"gpus_per_switch\": @gpus_per_switch@,"
    " \"switches_per_socket\": @switches_per_socket@,\n"
    "            \"gpu_link\": " LINK("gpu_link") ",\n"
    "            \"switch_uplink\": " LINK("switch_uplink") ",\n"
    "            \"host_bridge\": " LINK("host_bridge") ",\n"
    "            \"socket_link\": " LINK("socket_link") "},\n"
    " \"network\": {\"nics_per_node\": @nics_per_node@, \"nic\": " LINK("nic") "}}\n";

typedef struct field_value {
    const char *token, *value;
} field_value;

/* pcie-gen4 over two nodes, as the template's numbers. */
static const field_value defaults[] = {
    {"nodes", "2"}, {"gpus_per_node", "8"}, {"base_latency_us", "8.4"},
    {"bf16", "312"}, {"fp32", "19.5"}, {"tf32", "156"}, {"fp8", "312"}, {"fp64", "19.5"},
    {"hbm_tbs", "1.935"}, {"memory_gb", "80"}, {"gemm_efficiency", "0.8"}, {"attention_efficiency", "0.6"},
    {"attention_backward_efficiency", "0.5"}, {"memory_efficiency", "0.85"},
    {"gpus_per_switch", "2"}, {"switches_per_socket", "2"},
    {"gpu_link.bandwidth_gbs", "31.5"}, {"gpu_link.efficiency", "0.794"}, {"gpu_link.latency_us", "1"},
    {"switch_uplink.bandwidth_gbs", "31.5"}, {"switch_uplink.efficiency", "0.794"}, {"switch_uplink.latency_us", "1"},
    {"host_bridge.bandwidth_gbs", "48"}, {"host_bridge.efficiency", "1"}, {"host_bridge.latency_us", "0.5"},
    {"socket_link.bandwidth_gbs", "32"}, {"socket_link.efficiency", "1"}, {"socket_link.latency_us", "1"},
    {"nics_per_node", "4"}, {"nic.bandwidth_gbs", "25"}, {"nic.efficiency", "0.95"}, {"nic.latency_us", "3"},
};
#define N_DEFAULTS (int)(sizeof defaults / sizeof defaults[0])
#define MAX_SET 3

static const char *value_of(const char *token, size_t len, const field_value *set)
{
    for (int i = 0; i < MAX_SET && set[i].token; i++)
        if (strlen(set[i].token) == len && strncmp(set[i].token, token, len) == 0)
            return set[i].value;
    for (int i = 0; i < N_DEFAULTS; i++)
        if (strlen(defaults[i].token) == len && strncmp(defaults[i].token, token, len) == 0)
            return defaults[i].value;
    ck_abort_msg("no value for @%.*s@", (int)len, token);
    return NULL;
}

/* Writes the template with the values of `set` (up to MAX_SET, NULL-ended) over the defaults
 * to the scratch file `name`; its path goes to path[256]. */
static void write_topology(const char *name, const field_value *set, char *path)
{
    char json[4096];
    size_t n = 0;
    for (const char *p = template_json; *p;) {
        const char *end = *p == '@' ? strchr(p + 1, '@') : NULL;
        const char *text = end ? value_of(p + 1, (size_t)(end - p - 1), set) : p;
        size_t len = end ? strlen(text) : 1;
        ck_assert_uint_lt(n + len, sizeof json);
        memcpy(json + n, text, len), n += len;
        p = end ? end + 1 : p + 1;
    }
    json[n] = '\0';
    scratch_file(name, json, path);
}

/* Every time the model gives on `t` is a finite, positive number of seconds:
 * transfers inside a switch, across sockets and across nodes, an all-to-all
 * across nodes, and the roofline of each op kind. */
static void expect_finite_times(const sim_topology *t)
{
    sim_cost_model m = sim_cost_model_make(t, USP_BF16);
    ck_assert_int_eq(sim_cost_model_check(&m, 4), USP_OK);
    int G = t->gpus_per_node, last = sim_topology_gpus(t) - 1;
    const int peers[3] = {1, G - 1, last};
    for (int i = 0; i < 3; i++) {
        double s = sim_cost_transfer(&m, 0, peers[i], 1ull << 30);
        ck_assert_msg(isfinite(s) && s > 0, "1 GiB from GPU 0 to %d: %g s", peers[i], s);
    }
    const int members[4] = {0, 1, last - 1, last};
    uint64_t bytes[16];
    for (int i = 0; i < 16; i++)
        bytes[i] = i % 5 == 0 ? 0 : 1u << 28;
    double s;
    ck_assert_int_eq(sim_cost_collective(&m, USP_OP_ALL_TO_ALL, 4, members, bytes, &s), USP_OK);
    ck_assert_msg(isfinite(s) && s > 0, "all-to-all across nodes: %g s", s);
    const char *ops[4] = {"gemm", "attention_forward", "attention_backward", "layernorm"};
    for (int i = 0; i < 4; i++) {
        usp_op_cost cost = {.op = ops[i], .flops = 1e21, .bytes = 1e18};
        s = sim_cost_compute(&m, &cost);
        ck_assert_msg(isfinite(s) && s > 0, "%s of 1e21 FLOPs: %g s", ops[i], s);
    }
}

typedef struct range_case {
    const char *token;        /* the field, as its @token@ in the template */
    const char *edge, *beyond; /* a value at the edge of its range (accepted), one past it (refused) */
    const char *field;        /* the field path and value the message must give */
    const char *range;        /* the range it must give */
    field_value also[MAX_SET]; /* other fields both files need */
} range_case;

#define BW "at least 0.001 and at most 100000"
#define EFF "at least 0.001 and at most 1"
#define LAT "at least 0 and at most 1e+06"
#define PEAK "at least 0.001 and at most 100000"
static const range_case range_cases[] = {
    {"gpu_link.bandwidth_gbs", "0.001", "5e-324", "'fabric.gpu_link.bandwidth_gbs' is 4.94066e-324", BW, {{0}}},
    {"gpu_link.bandwidth_gbs", "100000", "1e-315", "'fabric.gpu_link.bandwidth_gbs' is 1e-315", BW, {{0}}},
    {"gpu_link.bandwidth_gbs", "100000", "100001", "'fabric.gpu_link.bandwidth_gbs' is 100001", BW, {{0}}},
    {"gpu_link.efficiency", "0.001", "1e-300", "'fabric.gpu_link.efficiency' is 1e-300", EFF, {{0}}},
    {"gpu_link.latency_us", "1000000", "1e300", "'fabric.gpu_link.latency_us' is 1e+300", LAT, {{0}}},
    {"gpu_link.latency_us", "0", "5e-324", "'fabric.gpu_link.latency_us' is 4.94066e-324", "subnormal", {{0}}},
    {"switch_uplink.bandwidth_gbs", "0.001", "0.0009", "'fabric.switch_uplink.bandwidth_gbs' is 0.0009", BW, {{0}}},
    {"switch_uplink.efficiency", "1", "1e-200", "'fabric.switch_uplink.efficiency' is 1e-200", EFF, {{0}}},
    {"host_bridge.latency_us", "1e6", "1.5e6", "'fabric.host_bridge.latency_us' is 1.5e+06", LAT, {{0}}},
    {"host_bridge.bandwidth_gbs", "1e5", "1e200", "'fabric.host_bridge.bandwidth_gbs' is 1e+200", BW, {{0}}},
    {"socket_link.efficiency", "0.001", "0.0001", "'fabric.socket_link.efficiency' is 0.0001", EFF, {{0}}},
    {"socket_link.bandwidth_gbs", "0.001", "1e-310", "'fabric.socket_link.bandwidth_gbs' is 1e-310", BW, {{0}}},
    {"nic.bandwidth_gbs", "100000", "2e5", "'network.nic.bandwidth_gbs' is 200000", BW, {{0}}},
    {"nic.latency_us", "1e6", "1e9", "'network.nic.latency_us' is 1e+09", LAT, {{0}}},
    {"nic.efficiency", "0.001", "1e-30", "'network.nic.efficiency' is 1e-30", EFF, {{0}}},
    {"base_latency_us", "0", "1e7", "'base_latency_us' is 1e+07", LAT, {{0}}},
    {"base_latency_us", "1e6", "1e-320", "'base_latency_us' is 9.99989e-321", "subnormal", {{0}}},
    {"nodes", "100000", "100001", "'nodes' is 100001", "between 1 and 100000", {{0}}},
    {"gpus_per_node", "4096", "8192", "'gpus_per_node' is 8192", "between 1 and 4096",
     {{"gpus_per_switch", "512"}}},
    {"nics_per_node", "64", "65", "'network.nics_per_node' is 65", "between 1 and 64", {{0}}},
    /* 16 GPUs, one a switch: 2 switches a socket make the 8 sockets of the largest servers, 1 makes 16 */
    {"switches_per_socket", "2", "1", "'fabric.switches_per_socket' is 1", "at most 8",
     {{"gpus_per_node", "16"}, {"gpus_per_switch", "1"}}},
    {"gpus_per_switch", "8", "16", "'fabric.gpus_per_switch' is 16", "between 1 and 8",
     {{"switches_per_socket", "1"}}},
    {"bf16", "100000", "1e9", "'gpu.peak_tflops.bf16' is 1e+09", PEAK, {{0}}},
    {"fp32", "0.001", "1e-6", "'gpu.peak_tflops.fp32' is 1e-06", PEAK, {{0}}},
    {"tf32", "100000", "1e7", "'gpu.peak_tflops.tf32' is 1e+07", PEAK, {{0}}},
    {"fp8", "0.001", "1e-310", "'gpu.peak_tflops.fp8' is 1e-310", PEAK, {{0}}},
    {"fp64", "0.001", "1e-320", "'gpu.peak_tflops.fp64' is 9.99989e-321", PEAK, {{0}}},
    {"hbm_tbs", "0.001", "1e-200", "'gpu.hbm_tbs' is 1e-200", "at least 0.001 and at most 1000", {{0}}},
    {"hbm_tbs", "1000", "1001", "'gpu.hbm_tbs' is 1001", "at least 0.001 and at most 1000", {{0}}},
    {"memory_gb", "1e-6", "1e300", "'gpu.memory_gb' is 1e+300", "at least 1e-06 and at most 100000", {{0}}},
    {"gemm_efficiency", "0.001", "1e-5", "'gpu.gemm_efficiency' is 1e-05", EFF, {{0}}},
    {"attention_efficiency", "0.001", "1e-308", "'gpu.attention_efficiency' is 1e-308", EFF, {{0}}},
    {"attention_backward_efficiency", "1", "1e-100", "'gpu.attention_backward_efficiency' is 1e-100", EFF, {{0}}},
    {"memory_efficiency", "0.001", "1e-10", "'gpu.memory_efficiency' is 1e-10", EFF, {{0}}},
};
#define N_RANGE_CASES (int)(sizeof range_cases / sizeof range_cases[0])

START_TEST(every_number_of_a_file_is_refused_outside_its_range)
{
    const range_case *c = &range_cases[_i];
    char path[256];
    field_value set[MAX_SET + 1] = {{c->token, c->edge}};
    memcpy(set + 1, c->also, sizeof c->also);
    write_topology("range.json", set, path);
    sim_topology t;
    ck_assert_msg(sim_topology_from_name_or_file(path, 0, &t) == USP_OK, "%s = %s, at the edge of its range: %s",
                  c->token, c->edge, usp_error_message());
    expect_finite_times(&t);
    set[0].value = c->beyond;
    write_topology("range.json", set, path);
    ck_assert_msg(sim_topology_from_name_or_file(path, 0, &t) == USP_ERR_CONFIG, "%s = %s was accepted", c->token,
                  c->beyond);
    const char *msg = usp_error_message();
    ck_assert_msg(strstr(msg, path) && strstr(msg, c->field) && strstr(msg, c->range),
                  "%s = %s: the message lacks the path, \"%s\" or \"%s\": %s", c->token, c->beyond, c->field,
                  c->range, msg);
}
END_TEST

/* --- keys given twice ------------------------------------------------------ */

typedef struct duplicate_case {
    const char *json, *key;
    int gpu_file; /* read with sim_gpu_from_name_or_file rather than as a topology */
} duplicate_case;

#define NVSWITCH "\"fabric\": {\"kind\": \"nvswitch\", \"gpu_link\": {\"bandwidth_gbs\": 450}}"
#define GPU_FIELDS "\"peak_tflops\": {\"bf16\": 989.4, \"fp32\": 67}, \"hbm_tbs\": 3.35, \"memory_gb\": 80"
static const duplicate_case duplicate_cases[] = {
    {"{\"gpu\": \"h100-sxm\", \"gpus_per_node\": 8, \"gpus_per_node\": 4, " NVSWITCH "}", "gpus_per_node", 0},
    {"{\"gpu\": \"h100-sxm\", \"gpus_per_node\": 8, \"fabric\": {\"kind\": \"nvswitch\",\n"
     " \"gpu_link\": {\"bandwidth_gbs\": 450, \"bandwidth_gbs\": 1e-315}}}", "bandwidth_gbs", 0},
    {"{\"gpu\": {" GPU_FIELDS ", \"hbm_tbs\": 4.8}, \"gpus_per_node\": 8, " NVSWITCH "}", "hbm_tbs", 0},
    {"{" GPU_FIELDS ", \"memory_gb\": 141}", "memory_gb", 1},
};
#define N_DUPLICATE_CASES (int)(sizeof duplicate_cases / sizeof duplicate_cases[0])

START_TEST(a_key_given_twice_is_refused_naming_it)
{
    const duplicate_case *c = &duplicate_cases[_i];
    char path[256], needle[128];
    scratch_file("duplicate.json", c->json, path);
    sim_topology t;
    sim_gpu g;
    usp_status s = c->gpu_file ? sim_gpu_from_name_or_file(path, &g) : sim_topology_from_name_or_file(path, 0, &t);
    ck_assert_msg(s == USP_ERR_CONFIG, "case %d: '%s' twice was accepted", _i, c->key);
    snprintf(needle, sizeof needle, "duplicate object key near '\"%s\"'", c->key);
    const char *msg = usp_error_message();
    ck_assert_msg(strstr(msg, path) && strstr(msg, needle) && strstr(msg, "line"),
                  "case %d: the message lacks the path, \"%s\" or the line: %s", _i, needle, msg);
}
END_TEST

/* --- topologies and GPUs built in code ------------------------------------- */

static void tiny_nvlink(sim_topology *t) { t->gpu_link.bandwidth = 5e-324; }
static void infinite_nic(sim_topology *t) { t->nic.bandwidth = INFINITY; }
static void endless_host_bridge(sim_topology *t) { t->host_bridge.latency = INFINITY; }
static void nan_socket_link(sim_topology *t) { t->socket_link.efficiency = NAN; }
static void negative_base_latency(sim_topology *t) { t->base_latency = -1e-6; }
static void idle_gemms(sim_topology *t) { t->gpu.gemm_efficiency = 0; }
static void double_memory_speed(sim_topology *t) { t->gpu.memory_efficiency = 2; }
static void nan_fp8(sim_topology *t) { t->gpu.peak_fp8 = NAN; }
static void subnormal_hbm(sim_topology *t) { t->gpu.hbm_bandwidth = 1e-320; }
static void huge_memory(sim_topology *t) { t->gpu.memory_bytes = 1e20; }
static void too_many_nodes(sim_topology *t) { t->nodes = 100001; }
static void too_many_nics(sim_topology *t) { t->nics_per_node = 65; }
static void too_many_gpus(sim_topology *t) { t->gpus_per_node = 8192; }

typedef struct code_case {
    const char *preset;               /* valid as it is */
    void (*corrupt)(sim_topology *t); /* one absurd number */
    const char *field, *range;        /* what the message must name */
} code_case;

static const code_case code_cases[] = {
    {"dgx-h100", tiny_nvlink, "'fabric.gpu_link.bandwidth_gbs' is subnormal (4.94066e-324 in SI units)", BW},
    {"dgx-h100", infinite_nic, "'network.nic.bandwidth_gbs' is inf", BW},
    {"pcie-gen4", endless_host_bridge, "'fabric.host_bridge.latency_us' is inf", LAT},
    {"pcie-gen4", nan_socket_link, "'fabric.socket_link.efficiency' is nan", EFF},
    {"dgx-a100", negative_base_latency, "'base_latency_us' is -1", LAT},
    {"dgx-h100", idle_gemms, "'gpu.gemm_efficiency' is 0", EFF},
    {"dgx-h200", double_memory_speed, "'gpu.memory_efficiency' is 2", EFF},
    {"pcie-gen5", nan_fp8, "'gpu.peak_tflops.fp8' is nan", PEAK},
    {"dgx-h100", subnormal_hbm, "'gpu.hbm_tbs' is subnormal", "at least 0.001 and at most 1000"},
    {"pcie-gen4", huge_memory, "'gpu.memory_gb' is 1e+11", "at least 1e-06 and at most 100000"},
    {"dgx-h100", too_many_nodes, "'nodes' is 100001", "between 1 and 100000"},
    {"dgx-a100", too_many_nics, "'network.nics_per_node' is 65", "between 0 and 64"},
    {"dgx-h200", too_many_gpus, "'gpus_per_node' is 8192", "between 1 and 4096"},
};
#define N_CODE_CASES (int)(sizeof code_cases / sizeof code_cases[0])

/* The cases use every topology preset, so every GPU preset, on 1 and 100000 nodes. */
START_TEST(topologies_built_in_code_obey_the_file_ranges)
{
    const code_case *c = &code_cases[_i];
    sim_topology t;
    const int node_counts[] = {1, 100000};
    for (int i = 0; i < 2; i++) {
        int nodes = node_counts[i];
        ck_assert(sim_topology_preset(c->preset, nodes, &t));
        ck_assert_msg(sim_topology_check(&t) == USP_OK, "preset %s on %d nodes: %s", c->preset, nodes,
                      usp_error_message());
    }
    ck_assert(sim_topology_preset(c->preset, 2, &t));
    c->corrupt(&t);
    ck_assert_msg(sim_topology_check(&t) == USP_ERR_CONFIG, "case %d: %s with %s was accepted", _i, c->preset,
                  c->field);
    const char *msg = usp_error_message();
    ck_assert_msg(strstr(msg, c->preset) && strstr(msg, c->field) && strstr(msg, c->range),
                  "case %d: the message lacks \"%s\", \"%s\" or \"%s\": %s", _i, c->preset, c->field, c->range, msg);
}
END_TEST

/* --nodes reaches the topology after the file: the node range holds for it too. */
START_TEST(too_many_nodes_from_the_caller_are_refused)
{
    sim_topology t;
    ck_assert_int_eq(sim_topology_from_name_or_file("dgx-h100", 100001, &t), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "'nodes' is 100001") &&
                  strstr(usp_error_message(), "between 1 and 100000"), "%s", usp_error_message());
    char path[256];
    write_topology("nodes.json", (field_value[MAX_SET]){{0}}, path);
    ck_assert_int_eq(sim_topology_from_name_or_file(path, 100000, &t), USP_OK);
    ck_assert_int_eq(sim_topology_from_name_or_file(path, 100001, &t), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), path) && strstr(usp_error_message(), "'nodes' is 100001"), "%s",
                  usp_error_message());
}
END_TEST

/* A GPU file of its own follows the rules of the GPU object in a topology. */
START_TEST(gpu_file_numbers_are_range_checked)
{
    char path[256];
    scratch_file("gpu.json", "{\"peak_tflops\": {\"bf16\": 989.4, \"fp32\": 67}, \"hbm_tbs\": 1e-315, \"memory_gb\": 80}",
                 path);
    sim_gpu g;
    ck_assert_int_eq(sim_gpu_from_name_or_file(path, &g), USP_ERR_CONFIG);
    const char *msg = usp_error_message();
    ck_assert_msg(strstr(msg, "GPU file") && strstr(msg, path) && strstr(msg, "'hbm_tbs' is 1e-315") &&
                  strstr(msg, "at least 0.001 and at most 1000"), "%s", msg);
}
END_TEST

/* The attention kernel is a named choice with the published rates of its generation (gpu_model.c):
 * FA3 only on Hopper, SDPA below FA2 on Hopper and FA2's own kernel on Ampere, and a GPU file keeps its
 * own efficiencies. */
START_TEST(attention_kernels_have_their_published_rates)
{
    struct { const char *gpu, *kernel; double fwd, bwd; } rates[] = {
        {"h100-sxm", "fa2", 0.35, 0.30}, {"h100-sxm", "fa3", 0.75, 0.50}, {"h100-sxm", "sdpa", 0.30, 0.25},
        {"h200", "fa3", 0.75, 0.50},     {"a100-80g", "fa2", 0.60, 0.50}, {"a100-80g", "sdpa", 0.60, 0.50},
    };
    for (size_t i = 0; i < sizeof rates / sizeof *rates; i++) {
        sim_gpu g;
        ck_assert(sim_gpu_preset(rates[i].gpu, &g));
        ck_assert_int_eq(sim_gpu_use_attention_kernel_named(&g, rates[i].kernel), USP_OK);
        ck_assert_str_eq(sim_attention_kernel_name(g.attention_kernel), rates[i].kernel);
        ck_assert_double_eq_tol(g.attention_efficiency, rates[i].fwd, 1e-12);
        ck_assert_double_eq_tol(g.attention_backward_efficiency, rates[i].bwd, 1e-12);
    }
    sim_gpu a100;
    ck_assert(sim_gpu_preset("a100-80g", &a100));
    ck_assert_int_eq(sim_gpu_use_attention_kernel_named(&a100, "fa3"), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "runs on Hopper (sm_90) only"), "%s", usp_error_message());
    ck_assert_double_eq_tol(a100.attention_efficiency, 0.60, 1e-12); /* a refused kernel changes nothing */
    ck_assert_int_eq(sim_gpu_use_attention_kernel_named(&a100, "fa4"), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--attention-kernel fa4"), "%s", usp_error_message());
    json_t *obj = json_pack("{s:s, s:{s:f, s:f}, s:f, s:f, s:f}", "name", "mine", "peak_tflops", "bf16", 500.0,
                            "fp32", 50.0, "hbm_tbs", 2.0, "memory_gb", 40.0, "attention_efficiency", 0.42);
    sim_gpu mine;
    ck_assert_int_eq(sim_gpu_from_json(obj, "test", "", &mine), USP_OK);
    json_decref(obj);
    ck_assert_int_eq(mine.attention_kernel, SIM_ATTENTION_FILE);
    ck_assert_int_eq(sim_gpu_use_attention_kernel_named(&mine, "fa2"), USP_ERR_CONFIG);
    ck_assert_double_eq_tol(mine.attention_efficiency, 0.42, 1e-12); /* the file's own rate */
}
END_TEST

static Suite *ranges_suite(void)
{
    Suite *s = suite_create("topology_ranges");
    TCase *t = tcase_create("ranges"); /* files, then topologies built in code */
    tcase_add_loop_test(t, every_number_of_a_file_is_refused_outside_its_range, 0, N_RANGE_CASES);
    tcase_add_loop_test(t, a_key_given_twice_is_refused_naming_it, 0, N_DUPLICATE_CASES);
    tcase_add_test(t, too_many_nodes_from_the_caller_are_refused);
    tcase_add_test(t, gpu_file_numbers_are_range_checked);
    tcase_add_loop_test(t, topologies_built_in_code_obey_the_file_ranges, 0, N_CODE_CASES);
    tcase_add_test(t, attention_kernels_have_their_published_rates);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    if (!mkdtemp(scratch_dir))
        return perror(scratch_dir), 1;
    int failed = check_main_run(ranges_suite());
    remove_scratch_dir();
    return failed;
}
