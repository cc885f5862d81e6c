/* The arithmetic of `usp calibrate` (calibrate/calibration.h) on synthetic timings:
 * nccl-tests' bus-bandwidth factors, the alpha-beta fit recovering a known
 * latency and bandwidth through noise, and the calibrated topology pricing the
 * calls it was fitted on as measured, written and read back as a file. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check_main.h"
#include "calibrate/calibration.h"
#include "sim/cost_model.h"

#define US 1e-6
#define GB 1e9

START_TEST(busbw_factors_are_nccl_tests)
{
    /* nccl-tests doc/PERFORMANCE.md: all_to_all (n-1)/n, all_reduce 2(n-1)/n, sendrecv 1 */
    ck_assert_double_eq_tol(sim_busbw_factor(USP_OP_ALL_TO_ALL, 4), 0.75, 1e-15);
    ck_assert_double_eq_tol(sim_busbw_factor(USP_OP_ALL_TO_ALL, 8), 0.875, 1e-15);
    ck_assert_double_eq_tol(sim_busbw_factor(USP_OP_ALL_REDUCE, 4), 1.5, 1e-15);
    ck_assert_double_eq_tol(sim_busbw_factor(USP_OP_ALL_REDUCE, 8), 1.75, 1e-15);
    ck_assert_double_eq_tol(sim_busbw_factor(USP_OP_ALL_REDUCE, 2), 1.0, 1e-15);
    ck_assert_double_eq_tol(sim_busbw_factor(USP_OP_SENDRECV, 4), 1.0, 1e-15);
    ck_assert_double_eq_tol(sim_busbw_factor(USP_OP_ALL_TO_ALL, 1), 0.0, 1e-15);
}
END_TEST

/* Sizes 4 KiB .. 64 MiB in powers of 4, timed as alpha + x / beta with relative noise up to `noise`. */
static int synthetic(double alpha, double beta, double noise, double *x, double *t)
{
    uint32_t state = 42;
    int n = 0;
    for (double s = 4096; s <= 64.0 * 1024 * 1024; s *= 4, n++) {
        state = state * 1664525u + 1013904223u;
        double u = (double)(state >> 8) / (double)(1u << 24) * 2 - 1; /* [-1, 1) */
        x[n] = s;
        t[n] = (alpha + s / beta) * (1 + noise * u);
    }
    return n;
}

START_TEST(fit_recovers_exact_parameters)
{
    double x[16], t[16];
    int n = synthetic(20 * US, 5 * GB, 0, x, t);
    sim_alpha_beta f;
    ck_assert_int_eq(sim_fit_alpha_beta(x, t, n, &f), USP_OK);
    ck_assert_double_eq_tol(f.alpha / (20 * US), 1, 1e-9);
    ck_assert_double_eq_tol(f.bandwidth / (5 * GB), 1, 1e-9);
}
END_TEST

/* With +-3% noise on every time: the latency within 10%, the bandwidth within 5%. Latency sets the small
 * sizes (20 us against 0.8 us of transfer at 4 KiB), bandwidth the large (13 ms against 20 us at 64 MiB). */
START_TEST(fit_recovers_parameters_through_noise)
{
    double x[16], t[16];
    int n = synthetic(20 * US, 5 * GB, 0.03, x, t);
    sim_alpha_beta f;
    ck_assert_int_eq(sim_fit_alpha_beta(x, t, n, &f), USP_OK);
    ck_assert_msg(fabs(f.alpha / (20 * US) - 1) < 0.10, "latency %g us, not 20 within 10%%", f.alpha / US);
    ck_assert_msg(fabs(f.bandwidth / (5 * GB) - 1) < 0.05, "bandwidth %g GB/s, not 5 within 5%%", f.bandwidth / GB);
}
END_TEST

/* An unweighted least squares is dominated by the largest sizes and misses a small latency; the 1/t^2
 * weights must not: 2 us of latency at 400 GB/s is recovered within 10%. */
START_TEST(fit_keeps_a_small_latency_beside_a_fast_link)
{
    double x[16], t[16];
    int n = synthetic(2 * US, 400 * GB, 0.01, x, t);
    sim_alpha_beta f;
    ck_assert_int_eq(sim_fit_alpha_beta(x, t, n, &f), USP_OK);
    ck_assert_msg(fabs(f.alpha / (2 * US) - 1) < 0.10, "latency %g us, not 2", f.alpha / US);
    ck_assert_msg(fabs(f.bandwidth / (400 * GB) - 1) < 0.05, "bandwidth %g GB/s, not 400", f.bandwidth / GB);
}
END_TEST

START_TEST(fit_clamps_a_negative_latency_and_refuses_bad_points)
{
    /* times proportional to size, slightly convex: the line's intercept is below 0 */
    double x[3] = {1e3, 1e6, 1e9}, t[3] = {0.9e-6, 1e-3, 1.05}, bad[3] = {1, NAN, 2};
    sim_alpha_beta f;
    ck_assert_int_eq(sim_fit_alpha_beta(x, t, 3, &f), USP_OK);
    ck_assert_double_eq(f.alpha, 0);
    ck_assert(f.bandwidth > 0.9e9 && f.bandwidth < 1.2e9);
    ck_assert_int_eq(sim_fit_alpha_beta(x, t, 1, &f), USP_ERR_CONFIG);
    double same[3] = {1e6, 1e6, 1e6};
    ck_assert_int_eq(sim_fit_alpha_beta(same, t, 3, &f), USP_ERR_CONFIG);
    ck_assert_int_eq(sim_fit_alpha_beta(x, bad, 3, &f), USP_ERR_CONFIG);
    /* times that shrink with size: the bandwidth stays positive, from the largest size */
    double falling[3] = {3e-3, 2e-3, 1e-3};
    ck_assert_int_eq(sim_fit_alpha_beta(x, falling, 3, &f), USP_OK);
    ck_assert(f.bandwidth > 0 && isfinite(f.bandwidth) && f.alpha >= 0);
}
END_TEST

static sim_calibration two_nodes(void)
{
    /* 2 nodes x 4 ranks: in a node base 10 + 2 x 1.5 us pairwise, base 10 + 4 x 3 x 1.5 us ring all_reduce;
     * across nodes base 10 + 2 x 4 us. */
    return (sim_calibration){
        .name = "synthetic", .nodes = 2, .gpus_per_node = 4,
        .intra = {.ranks = 4, .a2a = {13 * US, 150 * GB}, .all_reduce = {28 * US, 140 * GB}, .sendrecv = {13 * US, 160 * GB}},
        .inter = {.ranks = 2, .a2a = {18 * US, 20 * GB}, .all_reduce = {30 * US, 20 * GB}, .sendrecv = {18 * US, 20 * GB}},
        .gemm_flops_per_s = 400e12, .attention_flops_per_s = 200e12, .attention_backward_flops_per_s = 100e12,
        .copy_bytes_per_s = 2e12, .memory_bytes = 80e9};
}

START_TEST(calibrated_topology_solves_the_latencies_and_links)
{
    sim_calibration c = two_nodes();
    sim_topology t;
    ck_assert_int_eq(sim_calibration_topology(&c, &t), USP_OK);
    ck_assert_int_eq(t.nodes, 2);
    ck_assert_int_eq(t.gpus_per_node, 4);
    ck_assert_double_eq_tol(t.base_latency / US, 10, 1e-9);
    ck_assert_double_eq_tol(t.gpu_link.latency / US, 1.5, 1e-9);
    ck_assert_double_eq_tol(t.gpu_link.bandwidth * t.gpu_link.efficiency / GB, 150, 1e-9);
    ck_assert_int_eq(t.nics_per_node, 4);
    ck_assert_double_eq_tol(t.nic.latency / US, 4, 1e-9);
    ck_assert_double_eq_tol(t.nic.bandwidth * t.nic.efficiency / GB, 20, 1e-9);
    ck_assert_double_eq_tol(t.gpu.peak_bf16, 400e12, 1);
    ck_assert_double_eq_tol(t.gpu.attention_efficiency, 0.5, 1e-12);
    ck_assert_double_eq_tol(t.gpu.attention_backward_efficiency, 0.25, 1e-12);
}
END_TEST

/* The model prices an all_to_all of 4 ranks in a node, and one across the nodes, as the fitted lines. */
START_TEST(calibrated_topology_prices_the_fitted_calls)
{
    sim_calibration c = two_nodes();
    sim_topology t;
    ck_assert_int_eq(sim_calibration_topology(&c, &t), USP_OK);
    sim_cost_model m = sim_cost_model_make(&t, USP_F32);
    const double S = 64.0 * 1024 * 1024; /* bytes a rank sends */
    int node[4] = {0, 1, 2, 3}, across[2] = {0, 4};
    uint64_t b4[16] = {0}, b2[4] = {0};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            b4[i * 4 + j] = i == j ? 0 : (uint64_t)(S / 4);
    b2[1] = b2[2] = (uint64_t)(S / 2);
    double s4, s2;
    ck_assert_int_eq(sim_cost_collective(&m, USP_OP_ALL_TO_ALL, 4, node, b4, &s4), USP_OK);
    ck_assert_int_eq(sim_cost_collective(&m, USP_OP_ALL_TO_ALL, 2, across, b2, &s2), USP_OK);
    double want4 = 13 * US + S * 0.75 / (150 * GB), want2 = 18 * US + S * 0.5 / (20 * GB);
    ck_assert_msg(fabs(s4 / want4 - 1) < 1e-6, "in a node %g s, fitted %g s", s4, want4);
    ck_assert_msg(fabs(s2 / want2 - 1) < 1e-6, "across nodes %g s, fitted %g s", s2, want2);
}
END_TEST

START_TEST(calibrated_topology_reads_back_from_its_file)
{
    sim_calibration c = two_nodes();
    sim_topology t, back;
    ck_assert_int_eq(sim_calibration_topology(&c, &t), USP_OK);
    char path[] = "/tmp/usp_calibration_XXXXXX.json";
    int fd = mkstemps(path, 5);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    json_t *j = sim_topology_to_json(&t);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(json_dumpf(j, f, JSON_INDENT(2) | JSON_REAL_PRECISION(6)), 0);
    json_decref(j);
    fclose(f);
    usp_status s = sim_topology_from_name_or_file(path, 0, &back);
    unlink(path);
    ck_assert_msg(s == USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(back.nodes, 2);
    ck_assert_int_eq(back.nics_per_node, 4);
    ck_assert_double_eq_tol(back.gpu_link.bandwidth / t.gpu_link.bandwidth, 1, 1e-5);
    ck_assert_double_eq_tol(back.nic.latency / t.nic.latency, 1, 1e-5);
    ck_assert_double_eq_tol(back.base_latency / t.base_latency, 1, 1e-5);
    ck_assert_double_eq_tol(back.gpu.peak_bf16 / t.gpu.peak_bf16, 1, 1e-5);
    ck_assert_double_eq_tol(back.gpu.memory_bytes / t.gpu.memory_bytes, 1, 1e-5);
}
END_TEST

/* A measured figure outside the file's ranges (a 1e-6 GB/s link) is clamped into them: the file still loads. */
START_TEST(out_of_range_figures_are_clamped_into_the_format)
{
    sim_calibration c = two_nodes();
    c.intra.a2a.bandwidth = 1e-3, c.gemm_flops_per_s = 1e20, c.memory_bytes = 0;
    sim_topology t;
    usp_status s = sim_calibration_topology(&c, &t);
    ck_assert_msg(s == USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(sim_topology_check(&t), USP_OK);
}
END_TEST

static Suite *calibration_suite(void)
{
    Suite *s = suite_create("calibration");
    TCase *t = tcase_create("calibration");
    tcase_add_test(t, busbw_factors_are_nccl_tests);
    tcase_add_test(t, fit_recovers_exact_parameters);
    tcase_add_test(t, fit_recovers_parameters_through_noise);
    tcase_add_test(t, fit_keeps_a_small_latency_beside_a_fast_link);
    tcase_add_test(t, fit_clamps_a_negative_latency_and_refuses_bad_points);
    tcase_add_test(t, calibrated_topology_solves_the_latencies_and_links);
    tcase_add_test(t, calibrated_topology_prices_the_fitted_calls);
    tcase_add_test(t, calibrated_topology_reads_back_from_its_file);
    tcase_add_test(t, out_of_range_figures_are_clamped_into_the_format);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return check_main_run(calibration_suite()); }
