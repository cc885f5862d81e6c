/* The cpu backend keeps freed buffers for the next allocation of the same size
 * (backends/cpu/cpu_block_cache.h): a step's activations then come back
 * without page faults. What is kept is bounded, counted against the memory
 * budget, and given back when an allocation would not fit otherwise. */
#include <check.h>
#include <stdlib.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_block_cache.h"
#include "core/ops/ops.h"
#include "tests/check_main.h"

#define BIG ((size_t)1 << 20)

START_TEST(a_block_comes_back_for_its_own_size_only_the_newest_first)
{
    cpu_block_cache_release();
    void *a = aligned_alloc(64, BIG), *b = aligned_alloc(64, BIG), *c = aligned_alloc(64, 2 * BIG);
    cpu_block_cache_keep(a, BIG, 16 * BIG);
    cpu_block_cache_keep(b, BIG, 16 * BIG);
    cpu_block_cache_keep(c, 2 * BIG, 16 * BIG);
    ck_assert_uint_eq(cpu_block_cache_bytes(), 4 * BIG);
    ck_assert_ptr_null(cpu_block_cache_take(3 * BIG));
    ck_assert_ptr_eq(cpu_block_cache_take(BIG), b); /* the most recently freed: the warmest */
    ck_assert_ptr_eq(cpu_block_cache_take(BIG), a);
    ck_assert_ptr_null(cpu_block_cache_take(BIG));
    ck_assert_ptr_eq(cpu_block_cache_take(2 * BIG), c);
    ck_assert_uint_eq(cpu_block_cache_bytes(), 0);
    free(a), free(b), free(c);
}
END_TEST

START_TEST(small_blocks_go_back_to_malloc_and_the_limit_drops_the_oldest)
{
    cpu_block_cache_release();
    cpu_block_cache_keep(aligned_alloc(64, 4096), 4096, 16 * BIG);
    ck_assert_uint_eq(cpu_block_cache_bytes(), 0);
    void *old = aligned_alloc(64, BIG), *mid = aligned_alloc(64, BIG), *new = aligned_alloc(64, BIG);
    cpu_block_cache_keep(old, BIG, 2 * BIG);
    cpu_block_cache_keep(mid, BIG, 2 * BIG);
    cpu_block_cache_keep(new, BIG, 2 * BIG); /* 3 MiB over a limit of 2: the oldest is freed */
    ck_assert_uint_eq(cpu_block_cache_bytes(), 2 * BIG);
    ck_assert_ptr_eq(cpu_block_cache_take(BIG), new);
    ck_assert_ptr_eq(cpu_block_cache_take(BIG), mid);
    ck_assert_ptr_null(cpu_block_cache_take(BIG));
    cpu_block_cache_keep(aligned_alloc(64, 4 * BIG), 4 * BIG, 2 * BIG); /* larger than the limit: freed */
    ck_assert_uint_eq(cpu_block_cache_bytes(), 0);
    free(mid), free(new);
}
END_TEST

START_TEST(the_backend_reuses_a_freed_buffer_and_keeps_within_its_budget)
{
    cpu_block_cache_release();
    setenv("USP_CPU_MEMORY_LIMIT", "32M", 1); /* read once, at the process's first allocation */
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
    void *x, *y;
    ck_assert_int_eq(usp_buffer_alloc(be, BIG, "test", &x), USP_OK);
    usp_buffer_free(be, x);
    ck_assert_uint_gt(cpu_block_cache_bytes(), 0);
    ck_assert_int_eq(usp_buffer_alloc(be, BIG, "test", &y), USP_OK);
    ck_assert_ptr_eq(x, y); /* the same pages: written once, no fault the second time */
    usp_buffer_free(be, y);
    /* 8 MiB kept (a quarter of the budget), then 28 MiB live: the kept bytes would pass the 32 MiB, so they
     * are given back first and the allocation succeeds */
    void *kept[8];
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(usp_buffer_alloc(be, BIG + 64 * (size_t)i, "test", &kept[i]), USP_OK);
    for (int i = 0; i < 8; i++)
        usp_buffer_free(be, kept[i]);
    ck_assert_uint_le(cpu_block_cache_bytes(), 8 * BIG + 8 * 4096);
    ck_assert_uint_gt(cpu_block_cache_bytes(), 6 * BIG);
    void *large;
    ck_assert_int_eq(usp_buffer_alloc(be, 28 * BIG, "test", &large), USP_OK);
    ck_assert_uint_eq(cpu_block_cache_bytes(), 0);
    void *over; /* the budget itself still holds */
    ck_assert_int_eq(usp_buffer_alloc(be, 8 * BIG, "test", &over), USP_ERR_RUNTIME);
    usp_buffer_free(be, large);
    usp_backend_destroy(be);
    cpu_block_cache_release();
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("cpu_block_cache");
    TCase *tc = tcase_create("cache");
    tcase_add_test(tc, a_block_comes_back_for_its_own_size_only_the_newest_first);
    tcase_add_test(tc, small_blocks_go_back_to_malloc_and_the_limit_drops_the_oldest);
    tcase_add_test(tc, the_backend_reuses_a_freed_buffer_and_keeps_within_its_budget);
    suite_add_tcase(suite, tc);
    return check_main_run(suite);
}
