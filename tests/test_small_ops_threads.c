/* Small ops stay on one thread: a training step whose ops are all small wakes no
 * OpenMP worker.
 *
 * usp runs OpenMP with passive waiting (docs/runtimes.md): an idle worker sleeps
 * in the kernel, and every parallel region wakes it, a voluntary context switch
 * each time it goes back to sleep. A ring step of the tiny model runs thousands
 * of small regions (a block of attention is a few thousand multiply-adds), and
 * waking the pool for each cost more than the work: ring 4 ran at a third of
 * one thread's speed on 2 cores. Since the kernels keep small work on the calling
 * thread (backends/cpu: attention under 2^22 multiply-adds, GEMMs of one tile or
 * under 2^23 m n k, element-wise ops under 2^17 elements), such a run makes
 * almost no context switch. Measured with `usp train --steps 30` on 2 threads:
 * 185191 voluntary switches for --ring 4 before, 1 after; 64487 and 1 for the
 * README's hybrid; this test's 10 steps: 55114 and 20366 on 70a8a8b, the commit
 * before the change. The count, not a time, is what this test asserts: it does not
 * depend on the machine's speed. */
#include <check.h>
#include <sys/resource.h>

#include "core/model/model_config.h"
#include "core/train/train.h"
#include "tests/check_main.h"
#include "tests/harness.h"

/* Voluntary context switches of this process (all its threads) so far. */
static long voluntary_switches(void)
{
    struct rusage u;
    ck_assert_int_eq(getrusage(RUSAGE_SELF, &u), 0);
    return u.ru_nvcsw;
}

static void train_steps(int world, int ulysses, int ring, int64_t batch, int64_t steps)
{
    usp_train_config c;
    usp_train_defaults(&c);
    ck_assert_int_eq(usp_model_config_preset("tiny", &c.model), USP_OK); /* usp train's defaults */
    c.data = "passkey", c.seq_len = 64;
    ck_assert_int_eq(usp_mesh_shape_make(world, ulysses, ring, &c.shape), USP_OK);
    c.batch = batch, c.steps = steps, c.eval_samples = 0, c.log_every = 1000;
    usp_train_result result;
    char report[4096];
    ck_assert_msg(harness_train(&c, &result, report, sizeof report) == USP_OK, "%s", report);
}

/* Steps measured (10: the sanitizer build runs them too), and fewer switches than this for them: a pool
 * woken per region makes thousands a step. */
#define STEPS 10
#define SWITCHES_MAX 200

/* STEPS steps of a mesh, after one that makes the pool and the allocator, make fewer than SWITCHES_MAX. */
static void assert_wakes_no_worker(const char *mesh, int world, int ulysses, int ring, int64_t batch)
{
    train_steps(world, ulysses, ring, batch, 1);
    long before = voluntary_switches();
    train_steps(world, ulysses, ring, batch, STEPS);
    long switches = voluntary_switches() - before;
    ck_assert_msg(switches < SWITCHES_MAX, "%d steps of %s made %ld voluntary context switches (at most %d)", STEPS,
                  mesh, switches, SWITCHES_MAX);
}

START_TEST(a_ring_of_small_blocks_wakes_no_worker)
{
    assert_wakes_no_worker("--ring 4", 4, 1, 4, 16);
}
END_TEST

START_TEST(the_readme_hybrid_wakes_no_worker)
{
    assert_wakes_no_worker("the hybrid 2 x 2, DP 2", 8, 2, 2, 8);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("small_ops_threads");
    TCase *tc = tcase_create("switches");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, a_ring_of_small_blocks_wakes_no_worker);
    tcase_add_test(tc, the_readme_hybrid_wakes_no_worker);
    suite_add_tcase(s, tc);
    return check_main_run(s);
}
