/* sim/cache_model.h: closed forms of the LRU stack model, random ops in a small address space against the
 * model kept byte by byte (each byte's last touch; held when fewer than `capacity` bytes were touched after
 * it), which it must match exactly, and a planned step priced by hot and cold kernel classes through it. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "plan/plan.h"
#include "sim/cache_model.h"
#include "tests/harness.h"

static char space[4096]; /* the addresses the ranges point into */

static usp_range range(size_t at, size_t bytes) { return (usp_range){space + at, bytes}; }

START_TEST(closed_forms)
{
    sim_cache *c;
    ck_assert_int_eq(sim_cache_create(100, &c), USP_OK);
    usp_range a = range(0, 40), b = range(100, 60), d = range(200, 50);
    ck_assert(sim_cache_touch(c, &a, 1) == 0.0); /* first touch: cold */
    ck_assert(sim_cache_touch(c, &a, 1) == 1.0); /* again at once: hot */
    ck_assert(sim_cache_touch(c, &b, 1) == 0.0);
    ck_assert(sim_cache_touch(c, &a, 1) == 1.0); /* 60 bytes after it, its 40 fit: 100 */
    ck_assert(sim_cache_touch(c, &d, 1) == 0.0);
    /* b is now under d (50) and a (40): 10 of its 60 bytes remain, its last ones */
    ck_assert(sim_cache_touch(c, &b, 1) == 10.0 / 60.0);
    usp_range last = range(150, 10);
    ck_assert(sim_cache_touch(c, &last, 1) == 1.0); /* b's last 10 bytes, just touched */
    usp_range both[2] = {range(0, 40), range(500, 40)};
    ck_assert(sim_cache_touch(c, both, 2) == 0.0); /* a lies under 110 bytes touched after it: gone */
    ck_assert(sim_cache_touch(c, both, 2) == 1.0);
    ck_assert(sim_cache_touch(c, NULL, 0) == 1.0);
    sim_cache_destroy(c);
    ck_assert_int_eq(sim_cache_create(0, &c), USP_ERR_CONFIG);
}
END_TEST

#define SPACE 512

/* The byte-by-byte model: stamp[x] the time of x's last touch (0: never); each touched byte takes the next. */
typedef struct reference {
    uint64_t stamp[SPACE], now;
    int capacity;
} reference;

static double reference_touch(reference *r, const size_t *at, const size_t *bytes, int n)
{
    double hot = 0, total = 0;
    for (int i = 0; i < n; i++)
        for (size_t x = at[i]; x < at[i] + bytes[i]; x++) {
            int after = 0;
            for (int y = 0; y < SPACE && r->stamp[x]; y++)
                after += r->stamp[y] > r->stamp[x];
            hot += r->stamp[x] && after < r->capacity;
            total += 1;
        }
    for (int i = 0; i < n; i++)
        for (size_t x = at[i]; x < at[i] + bytes[i]; x++)
            r->stamp[x] = ++r->now;
    return total > 0 ? hot / total : 1.0;
}

START_TEST(matches_the_byte_by_byte_model)
{
    static const int capacities[] = {1, 37, 100, 256, 600};
    uint32_t x = 7u;
    for (int k = 0; k < 5; k++) {
        reference *r = calloc(1, sizeof *r);
        ck_assert_ptr_nonnull(r);
        r->capacity = capacities[k];
        sim_cache *c;
        ck_assert_int_eq(sim_cache_create(capacities[k], &c), USP_OK);
        for (int op = 0; op < 400; op++) {
            size_t at[3], bytes[3];
            usp_range ranges[3];
            int n = 1 + (int)((x = x * 1664525u + 1013904223u) >> 30) % 3;
            for (int i = 0; i < n; i++) { /* distinct ranges: an op's operands are its own */
                x = x * 1664525u + 1013904223u;
                at[i] = (size_t)(i * SPACE / 3) + (x >> 8) % (SPACE / 3 - 80);
                bytes[i] = 1 + (x >> 20) % 80;
                ranges[i] = range(at[i], bytes[i]);
            }
            double want = reference_touch(r, at, bytes, n), got = sim_cache_touch(c, ranges, n);
            ck_assert_msg(got == want, "capacity %d, op %d: %.17g held, the byte-by-byte model %.17g",
                          capacities[k], op, got, want);
        }
        sim_cache_destroy(c);
        free(r);
    }
}
END_TEST

/* The compute time of one tiny step on dgx-h100 whose GPU prices every op by "*": cold at 2 us + 100 ps a byte,
 * hot at a quarter of that, with a cache of `cache_mb` (0: none). */
static double compute_with_cache(double cache_mb)
{
    usp_train_config c;
    ck_assert_int_eq(harness_config("tiny", 2, 2, 1, 1024, 1, &c), USP_OK);
    sim_cost_model m = {.dtype = USP_BF16};
    ck_assert(sim_topology_preset("dgx-h100", 1, &m.topology));
    sim_kernel_fit cold = {.op = "*", .call_s = 2e-6, .n_table = 1, .table_bytes = {1e3},
                           .table_per_work_s = {100e-12}}, hot = cold;
    hot.hot = 1, hot.call_s /= 4, hot.table_per_work_s[0] /= 4;
    ck_assert_int_eq(sim_kernel_model_add(&m.topology.gpu.kernels, &cold), USP_OK);
    ck_assert_int_eq(sim_kernel_model_add(&m.topology.gpu.kernels, &hot), USP_OK);
    m.topology.gpu.cache_bytes = cache_mb * (1 << 20);
    plan_result r;
    ck_assert_int_eq(plan_run(&c, &m, NULL, &r), USP_OK);
    double t = r.compute_time_s;
    plan_result_free(&r);
    return t;
}

/* A rank's cache model (sim/cache_model.h) makes the ops whose operands it holds cheaper: a larger cache
 * holds more, none holds nothing, one far larger than the step holds all but what is touched first; the
 * same plan twice gives the same time. */
START_TEST(a_cache_model_prices_held_operands_hot)
{
    double none = compute_with_cache(0), small = compute_with_cache(0.25), large = compute_with_cache(1);
    double all = compute_with_cache(1e5);
    ck_assert_msg(all < large && large < small && small < none, "compute %g s (no cache), %g, %g, %g (1e5 MiB)",
                  none, small, large, all);
    ck_assert(all > none / 4); /* first touches (the weights' first read, fresh buffers) stay cold */
    ck_assert(compute_with_cache(0.25) == small);
}
END_TEST

static Suite *cache_model_suite(void)
{
    Suite *s = suite_create("cache_model");
    TCase *t = tcase_create("core");
    tcase_add_test(t, closed_forms);
    tcase_add_test(t, matches_the_byte_by_byte_model);
    tcase_add_test(t, a_cache_model_prices_held_operands_hot);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return check_main_run(cache_model_suite()); }
