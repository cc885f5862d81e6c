/* The calibrated kernel model and collective tables (sim/kernel_model.h,
 * sim/collective_table.h) on synthetic measurements: the fit gives back the
 * model that generated the data (the fixed point of calibrate --backend sim),
 * keeps its coefficients >= 0 through noise, the file form reads back what
 * was written and refuses what is not a model, and the cost model prices an
 * op and a collective by them when the topology has them. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "sim/cost_model.h"
#include "sim/kernel_model.h"

/* GEMMs of m x n x k over a grid, timed by `truth`. */
static int gemm_points(const sim_kernel_fit *truth, sim_kernel_point *p)
{
    static const double dims[] = {32, 256, 2048};
    int n = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int l = 0; l < 3; l++) {
                double m = dims[i] * 2, nn = dims[j], k = dims[l];
                p[n] = (sim_kernel_point){2 * m * nn * k, 4 * (m * k + k * nn + m * nn), m * nn, 0};
                p[n].seconds = sim_kernel_fit_seconds(truth, p[n].flops, p[n].bytes, p[n].outputs);
                n++;
            }
    return n;
}

/* A GEMM class: 2 us a call, 0.5 ns an output, 20 ps a byte, a flop 10 ps in cache and 25 ps out of it. */
static sim_kernel_fit gemm_truth(void)
{
    sim_kernel_fit f = {.op = "gemm", .per_flop = 1, .call_s = 2e-6, .per_output_s = 0.5e-9, .per_byte_s = 20e-12,
                        .n_table = 3, .table_bytes = {1e4, 1e6, 1e8}, .table_per_work_s = {10e-12, 12e-12, 25e-12}};
    return f;
}

START_TEST(fit_gives_back_the_model_that_made_the_data)
{
    sim_kernel_fit truth = gemm_truth(), got;
    sim_kernel_point p[27];
    int n = gemm_points(&truth, p);
    /* the fit's own table spans the points' bytes: time the truth on that table, so both describe one model */
    ck_assert_int_eq(sim_kernel_fit_points("gemm", p, n, &got), USP_OK);
    truth.n_table = got.n_table;
    memcpy(truth.table_bytes, got.table_bytes, sizeof truth.table_bytes);
    for (int i = 0; i < n; i++)
        p[i].seconds = sim_kernel_fit_seconds(&truth, p[i].flops, p[i].bytes, p[i].outputs);
    ck_assert_int_eq(sim_kernel_fit_points("gemm", p, n, &got), USP_OK);
    ck_assert_int_eq(got.per_flop, 1);
    /* exact data: every coefficient back to 1e-9 relative (the normal equations in double) */
    ck_assert_double_eq_tol(got.call_s, truth.call_s, 1e-9 * truth.call_s);
    ck_assert_double_eq_tol(got.per_output_s, truth.per_output_s, 1e-9 * truth.per_output_s);
    ck_assert_double_eq_tol(got.per_byte_s, truth.per_byte_s, 1e-9 * truth.per_byte_s);
    for (int j = 0; j < got.n_table; j++)
        ck_assert_double_eq_tol(got.table_per_work_s[j], truth.table_per_work_s[j], 1e-9 * 25e-12);
}
END_TEST

START_TEST(fit_keeps_coefficients_non_negative_through_noise)
{
    sim_kernel_fit truth = gemm_truth(), got;
    truth.per_output_s = 0; /* no output term: noise must not make it negative */
    sim_kernel_point p[27];
    int n = gemm_points(&truth, p);
    uint32_t x = 7;
    for (int i = 0; i < n; i++) { /* +-10% relative noise */
        x = x * 1664525u + 1013904223u;
        p[i].seconds *= 1 + 0.2 * ((double)(x >> 8) / (1u << 24) - 0.5);
    }
    ck_assert_int_eq(sim_kernel_fit_points("gemm", p, n, &got), USP_OK);
    ck_assert(got.call_s >= 0 && got.per_output_s >= 0 && got.per_byte_s >= 0);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        ck_assert(got.table_per_work_s[i % got.n_table] >= 0);
        double err = fabs(sim_kernel_fit_seconds(&got, p[i].flops, p[i].bytes, p[i].outputs) / p[i].seconds - 1);
        worst = err > worst ? err : worst;
    }
    ck_assert_msg(worst < 0.15, "a point 10%% off the truth is fitted %.1f%% off", 100 * worst);
}
END_TEST

START_TEST(an_elementwise_class_prices_bytes_and_a_call)
{
    /* 1.5 us a call, 50 GB/s: five sizes, the time a call + bytes / rate */
    sim_kernel_point p[5];
    for (int i = 0; i < 5; i++) {
        double bytes = 1024.0 * pow(16, i);
        p[i] = (sim_kernel_point){bytes / 4, bytes, 0, 1.5e-6 + bytes / 50e9};
    }
    sim_kernel_fit f;
    ck_assert_int_eq(sim_kernel_fit_points("layernorm_forward", p, 5, &f), USP_OK);
    ck_assert_int_eq(f.per_flop, 0);
    ck_assert_double_eq_tol(f.call_s, 1.5e-6, 1e-12);
    for (int j = 0; j < f.n_table; j++)
        ck_assert_double_eq_tol(f.table_per_work_s[j], 1 / 50e9, 1e-6 / 50e9);
    /* beyond the largest size: the same rate */
    ck_assert_double_eq_tol(sim_kernel_fit_seconds(&f, 0, 1e10, 0), 1.5e-6 + 1e10 / 50e9, 1e-6);
}
END_TEST

START_TEST(the_model_reads_back_from_its_json_and_refuses_bad_fields)
{
    sim_kernel_model m = {0}, back;
    sim_kernel_fit g = gemm_truth(), other = {.op = "*", .call_s = 1e-6, .n_table = 1, .table_bytes = {1e3},
                                                .table_per_work_s = {50e-12}};
    ck_assert_int_eq(sim_kernel_model_add(&m, &g), USP_OK);
    ck_assert_int_eq(sim_kernel_model_add(&m, &other), USP_OK);
    ck_assert_int_eq(sim_kernel_model_add(&m, &g), USP_ERR_CONFIG); /* a class twice */
    json_t *j = sim_kernel_model_to_json(&m);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(sim_kernel_model_from_json(j, "test", "gpu.", &back), USP_OK);
    ck_assert_int_eq(back.n, 2);
    usp_op_cost gemm = {.op = "gemm", .flops = 1e9, .bytes = 3e6, .outputs = 1e6};
    usp_op_cost copy = {.op = "copy", .bytes = 1e6};
    ck_assert_double_eq_tol(sim_kernel_seconds(&back, &gemm), sim_kernel_seconds(&m, &gemm), 1e-12);
    /* an op without a class of its own: "*" */
    ck_assert_double_eq_tol(sim_kernel_seconds(&back, &copy), 1e-6 + 1e6 * 50e-12, 1e-15);
    json_object_set_new(json_array_get(j, 0), "call_us", json_real(-1));
    ck_assert_int_eq(sim_kernel_model_from_json(j, "test", "gpu.", &back), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "gpu.kernels[0].call_us"), "%s", usp_error_message());
    json_decref(j);
}
END_TEST

/* A bf16 class prices bf16 ops and only them; the fp32 class prices the dtypes without one; "dtype" round-trips
 * and a bad one is refused, naming the field. */
START_TEST(a_bf16_class_prices_bf16_ops_and_fp32_the_rest)
{
    sim_kernel_model m = {0}, back;
    sim_kernel_fit g = gemm_truth(), fast = gemm_truth();
    fast.dtype = USP_BF16;
    for (int j = 0; j < fast.n_table; j++)
        fast.table_per_work_s[j] /= 16; /* tensor cores */
    ck_assert_int_eq(sim_kernel_model_add(&m, &g), USP_OK);
    ck_assert_int_eq(sim_kernel_model_add(&m, &fast), USP_OK); /* the same op, another dtype: not a repeat */
    ck_assert_int_eq(sim_kernel_model_add(&m, &fast), USP_ERR_CONFIG);
    usp_op_cost f32 = {.op = "gemm", .flops = 1e9, .bytes = 3e6, .outputs = 1e6}, b16 = f32;
    b16.dtype = USP_BF16;
    ck_assert_double_eq_tol(sim_kernel_seconds(&m, &f32), sim_kernel_fit_seconds(&g, 1e9, 3e6, 1e6), 1e-15);
    ck_assert_double_eq_tol(sim_kernel_seconds(&m, &b16), sim_kernel_fit_seconds(&fast, 1e9, 3e6, 1e6), 1e-15);
    ck_assert(sim_kernel_seconds(&m, &b16) < sim_kernel_seconds(&m, &f32));
    sim_kernel_model only_fp32 = {0};
    ck_assert_int_eq(sim_kernel_model_add(&only_fp32, &g), USP_OK); /* a file written before bf16 classes */
    ck_assert_double_eq_tol(sim_kernel_seconds(&only_fp32, &b16), sim_kernel_seconds(&only_fp32, &f32), 1e-15);
    json_t *j = sim_kernel_model_to_json(&m);
    ck_assert_ptr_null(json_object_get(json_array_get(j, 0), "dtype")); /* fp32: absent, as older files */
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 1), "dtype")), "bf16");
    ck_assert_int_eq(sim_kernel_model_from_json(j, "test", "gpu.", &back), USP_OK);
    ck_assert_int_eq(back.n, 2);
    ck_assert_int_eq(back.fits[1].dtype, USP_BF16);
    ck_assert_double_eq_tol(sim_kernel_seconds(&back, &b16), sim_kernel_seconds(&m, &b16), 1e-12);
    json_object_set_new(json_array_get(j, 1), "dtype", json_string("fp16"));
    ck_assert_int_eq(sim_kernel_model_from_json(j, "test", "gpu.", &back), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "gpu.kernels[1].dtype") && strstr(usp_error_message(), "fp16"), "%s",
                  usp_error_message());
    json_decref(j);
}
END_TEST

START_TEST(a_calibrated_gpu_prices_its_ops_by_its_classes)
{
    sim_topology t;
    ck_assert_int_eq(sim_topology_from_name_or_file("dgx-h100", 1, &t), USP_OK);
    usp_op_cost gemm = {.op = "gemm", .flops = 1e9, .bytes = 3e6, .outputs = 1e6};
    sim_cost_model preset = sim_cost_model_make(&t, USP_F32);
    sim_kernel_fit g = gemm_truth();
    ck_assert_int_eq(sim_kernel_model_add(&t.gpu.kernels, &g), USP_OK);
    sim_cost_model calibrated = sim_cost_model_make(&t, USP_F32);
    ck_assert_double_eq_tol(sim_cost_compute(&calibrated, &gemm), sim_kernel_fit_seconds(&g, 1e9, 3e6, 1e6), 1e-15);
    ck_assert(sim_cost_compute(&preset, &gemm) < sim_cost_compute(&calibrated, &gemm) / 100);
    /* an op no class prices (no "*"): the roofline */
    usp_op_cost zero = {.op = "zero", .bytes = 1e9};
    ck_assert_double_eq_tol(sim_cost_compute(&calibrated, &zero), sim_cost_compute(&preset, &zero), 1e-15);
}
END_TEST

/* A hot class prices the fraction of an op's bytes the cache holds, the cold one the rest; without a hot class,
 * or with nothing held, the cold one alone; "cache" round-trips and a bad one is refused, naming the field. */
START_TEST(hot_and_cold_classes_blend_by_the_fraction_held)
{
    sim_kernel_model m = {0}, back;
    sim_kernel_fit cold = gemm_truth(), hot = gemm_truth();
    hot.hot = 1, hot.call_s /= 4;
    for (int j = 0; j < hot.n_table; j++)
        hot.table_per_work_s[j] /= 2;
    ck_assert_int_eq(sim_kernel_model_add(&m, &cold), USP_OK);
    ck_assert(!sim_kernel_model_has_hot(&m));
    ck_assert_int_eq(sim_kernel_model_add(&m, &hot), USP_OK); /* the same op, hot: not a repeat */
    ck_assert_int_eq(sim_kernel_model_add(&m, &hot), USP_ERR_CONFIG);
    ck_assert(sim_kernel_model_has_hot(&m));
    usp_op_cost gemm = {.op = "gemm", .flops = 1e9, .bytes = 3e6, .outputs = 1e6};
    double tc = sim_kernel_fit_seconds(&cold, 1e9, 3e6, 1e6), th = sim_kernel_fit_seconds(&hot, 1e9, 3e6, 1e6);
    ck_assert(th < tc);
    ck_assert_double_eq_tol(sim_kernel_seconds(&m, &gemm), tc, 1e-15);
    ck_assert_double_eq_tol(sim_kernel_seconds_held(&m, &gemm, 0), tc, 1e-15);
    ck_assert_double_eq_tol(sim_kernel_seconds_held(&m, &gemm, 1), th, 1e-15);
    ck_assert_double_eq_tol(sim_kernel_seconds_held(&m, &gemm, 0.25), 0.25 * th + 0.75 * tc, 1e-15);
    usp_op_cost copy = {.op = "copy", .bytes = 1e6}; /* no class at all */
    ck_assert(sim_kernel_seconds_held(&m, &copy, 1) < 0);
    json_t *j = sim_kernel_model_to_json(&m);
    ck_assert_ptr_null(json_object_get(json_array_get(j, 0), "cache")); /* cold: absent, as older files */
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 1), "cache")), "hot");
    ck_assert_int_eq(sim_kernel_model_from_json(j, "test", "gpu.", &back), USP_OK);
    ck_assert_int_eq(back.n, 2);
    ck_assert_double_eq_tol(sim_kernel_seconds_held(&back, &gemm, 0.25), 0.25 * th + 0.75 * tc, 1e-12);
    json_object_set_new(json_array_get(j, 1), "cache", json_string("warm"));
    ck_assert_int_eq(sim_kernel_model_from_json(j, "test", "gpu.", &back), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "gpu.kernels[1].cache") && strstr(usp_error_message(), "warm"), "%s",
                  usp_error_message());
    json_decref(j);
}
END_TEST

START_TEST(a_collective_table_interpolates_in_log_and_prices_its_calls)
{
    sim_collective_table a2a = {.kind = USP_OP_ALL_TO_ALL, .ranks = 2, .n = 3, .bytes = {1e3, 1e5, 1e7},
                                .seconds = {2e-6, 20e-6, 8e-3}};
    /* at a size, its time; halfway in log between 1e3 and 1e5, the geometric mean; beyond, the ends */
    ck_assert_double_eq_tol(sim_collective_seconds(&a2a, 1e5), 20e-6, 1e-18);
    ck_assert_double_eq_tol(sim_collective_seconds(&a2a, 1e4), sqrt(2e-6 * 20e-6), 1e-15);
    ck_assert_double_eq_tol(sim_collective_seconds(&a2a, 10), 2e-6, 1e-18);
    ck_assert_double_eq_tol(sim_collective_seconds(&a2a, 1e8), 8e-2, 1e-15);
    sim_topology t;
    ck_assert_int_eq(sim_topology_from_name_or_file("dgx-h100", 1, &t), USP_OK);
    ck_assert_int_eq(sim_collective_add(&t.measured, &a2a), USP_OK);
    ck_assert_int_eq(sim_collective_add(&t.measured, &a2a), USP_ERR_CONFIG);
    sim_cost_model m = sim_cost_model_make(&t, USP_F32);
    int members[2] = {0, 1};
    uint64_t bytes[4] = {0, 100000, 100000, 0}; /* each member sends 1e5 bytes to the other: the key */
    double s;
    ck_assert_int_eq(sim_cost_collective(&m, USP_OP_ALL_TO_ALL, 2, members, bytes, &s), USP_OK);
    ck_assert_double_eq_tol(s, 20e-6, 1e-18);
    /* another kind, or another group size: the links */
    ck_assert_int_eq(sim_cost_collective(&m, USP_OP_ALL_REDUCE, 2, members, bytes, &s), USP_OK);
    ck_assert(fabs(s - 20e-6) > 1e-6);
    json_t *j = sim_collective_tables_to_json(&t.measured);
    sim_collective_tables back;
    ck_assert_int_eq(sim_collective_tables_from_json(j, "test", &back), USP_OK);
    ck_assert_int_eq(back.n, 1);
    ck_assert_double_eq_tol(sim_collective_seconds(&back.tables[0], 1e4), sqrt(2e-6 * 20e-6), 1e-15);
    json_decref(j);
}
END_TEST

/* A hot collective table prices the fraction of the members' buffers their caches hold, up to its largest size;
 * beyond it, or with nothing held, the cold table alone; "cache" round-trips, a hot table twice is refused. */
START_TEST(a_hot_collective_table_prices_what_the_caches_hold)
{
    sim_collective_table cold = {.kind = USP_OP_ALL_TO_ALL, .ranks = 2, .n = 2, .bytes = {1e3, 1e5},
                                 .seconds = {4e-6, 40e-6}};
    sim_collective_table hot = {.kind = USP_OP_ALL_TO_ALL, .ranks = 2, .hot = 1, .n = 1, .bytes = {1e3},
                                .seconds = {1e-6}};
    ck_assert_double_eq_tol(sim_collective_seconds_held(&cold, &hot, 1e3, 0.5), 2.5e-6, 1e-18);
    ck_assert_double_eq_tol(sim_collective_seconds_held(&cold, &hot, 1e3, 0), 4e-6, 1e-18);
    ck_assert_double_eq_tol(sim_collective_seconds_held(&cold, NULL, 1e3, 1), 4e-6, 1e-18);
    /* past the hot table's largest size: the cold time */
    ck_assert_double_eq_tol(sim_collective_seconds_held(&cold, &hot, 1e4, 1), sim_collective_seconds(&cold, 1e4),
                            1e-18);
    sim_topology t;
    ck_assert_int_eq(sim_topology_from_name_or_file("dgx-h100", 1, &t), USP_OK);
    ck_assert_int_eq(sim_collective_add(&t.measured, &cold), USP_OK);
    ck_assert_int_eq(sim_collective_add(&t.measured, &hot), USP_OK); /* the same call, hot: not a repeat */
    ck_assert_int_eq(sim_collective_add(&t.measured, &hot), USP_ERR_CONFIG);
    ck_assert_ptr_eq(sim_collective_find(&t.measured, USP_OP_ALL_TO_ALL, 2, 0), &t.measured.tables[0]);
    ck_assert_ptr_eq(sim_collective_find_in(&t.measured, USP_OP_ALL_TO_ALL, 2, 0, 1), &t.measured.tables[1]);
    /* the cost model: each member sends 1e3 bytes to the other, their caches hold a quarter */
    sim_cost_model m = sim_cost_model_make(&t, USP_F32);
    int members[2] = {0, 1}, src[2] = {0, 1}, dst[2] = {1, 0};
    uint64_t bytes[2] = {1000, 1000};
    sim_traffic traffic = {.n = 2, .src = src, .dst = dst, .bytes = bytes, .held = 0.25};
    double s;
    ck_assert_int_eq(sim_cost_collective_traffic(&m, USP_OP_ALL_TO_ALL, 2, members, &traffic, SIM_ALGO_AUTO, &s, NULL),
                     USP_OK);
    ck_assert_double_eq_tol(s, 0.25 * 1e-6 + 0.75 * 4e-6, 1e-18);
    json_t *j = sim_collective_tables_to_json(&t.measured);
    sim_collective_tables back;
    ck_assert_int_eq(sim_collective_tables_from_json(j, "test", &back), USP_OK);
    ck_assert(back.n == 2 && !back.tables[0].hot && back.tables[1].hot);
    ck_assert_ptr_null(json_object_get(json_array_get(j, 0), "cache")); /* cold: absent, as older files */
    json_object_set_new(json_array_get(j, 1), "cache", json_string("warm"));
    ck_assert_int_eq(sim_collective_tables_from_json(j, "test", &back), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "collectives[1].cache") && strstr(usp_error_message(), "warm"), "%s",
                  usp_error_message());
    json_decref(j);
}
END_TEST

static Suite *kernel_model_suite(void)
{
    Suite *s = suite_create("kernel_model");
    TCase *t = tcase_create("kernel_model");
    tcase_add_test(t, fit_gives_back_the_model_that_made_the_data);
    tcase_add_test(t, fit_keeps_coefficients_non_negative_through_noise);
    tcase_add_test(t, an_elementwise_class_prices_bytes_and_a_call);
    tcase_add_test(t, the_model_reads_back_from_its_json_and_refuses_bad_fields);
    tcase_add_test(t, a_bf16_class_prices_bf16_ops_and_fp32_the_rest);
    tcase_add_test(t, a_calibrated_gpu_prices_its_ops_by_its_classes);
    tcase_add_test(t, hot_and_cold_classes_blend_by_the_fraction_held);
    tcase_add_test(t, a_collective_table_interpolates_in_log_and_prices_its_calls);
    tcase_add_test(t, a_hot_collective_table_prices_what_the_caches_hold);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return check_main_run(kernel_model_suite()); }
