/* The mask's index maps (core/ops/mask.h) against its definition pair by pair: for random packings
 * (documents of 1 token included), windows from 1 to past the row, causal and not, what a query
 * sees and who sees a key are the intervals the maps give, they only move right, and the closed-form
 * count of visible pairs over any two ranges is the brute-force count. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/ops/mask.h"
#include "tests/check_main.h"

enum { N_MAX = 64 };

static uint64_t rng = 0x9e3779b97f4a7c15u;
static int64_t draw(int64_t n) /* uniform in [0, n) */
{
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    return (int64_t)((rng >> 33) % (uint64_t)n);
}

/* A random row of n positions cut into documents (short ones often); its table in doc. */
static void random_documents(int64_t n, int32_t *doc)
{
    int64_t lengths[N_MAX], count = 0, at = 0;
    while (at < n) {
        const int64_t len = draw(3) == 0 ? 1 : 1 + draw(n);
        lengths[count] = len < n - at ? len : n - at;
        at += lengths[count++];
    }
    usp_mask_table_fill(lengths, count, doc);
}

static double brute_pairs(const usp_mask_row *m, int64_t q0, int64_t nq, int64_t k0, int64_t nk)
{
    double sum = 0.0;
    for (int64_t p = q0; p < q0 + nq; p++)
        for (int64_t k = k0; k < k0 + nk; k++)
            sum += usp_mask_sees(m, p, k);
    return sum;
}

START_TEST(the_table_holds_each_positions_document)
{
    const int64_t lengths[] = {3, 1, 4};
    int32_t doc[16];
    usp_mask_table_fill(lengths, 3, doc);
    const int32_t want[16] = {0, 3, 0, 3, 0, 3, 3, 4, 4, 8, 4, 8, 4, 8, 4, 8};
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(doc[i], want[i]);
}
END_TEST

START_TEST(the_intervals_are_the_definition)
{
    int32_t doc[2 * N_MAX];
    for (int trial = 0; trial < 400; trial++) {
        const int64_t n = 1 + draw(N_MAX);
        random_documents(n, doc);
        const int64_t windows[] = {0, 1, 2, 3, 7, n, n + 5};
        usp_mask_row m = {.causal = (int)draw(2), .window = windows[draw(7)], .doc = draw(4) ? doc : NULL};
        int64_t last_lo = -USP_MASK_FAR, last_hi = -USP_MASK_FAR;
        for (int64_t p = 0; p < n; p++) {
            int64_t lo, hi;
            usp_mask_keys(&m, p, &lo, &hi);
            ck_assert_msg(lo >= last_lo && hi >= last_hi, "key interval moved left at p = %lld", (long long)p);
            last_lo = lo, last_hi = hi;
            for (int64_t k = 0; k < n; k++)
                ck_assert_msg(usp_mask_sees(&m, p, k) == (k >= lo && k < hi),
                              "n %lld causal %d window %lld docs %d: query %lld, key %lld, interval [%lld, %lld)",
                              (long long)n, m.causal, (long long)m.window, m.doc != NULL, (long long)p, (long long)k,
                              (long long)lo, (long long)hi);
        }
        last_lo = last_hi = -USP_MASK_FAR;
        for (int64_t k = 0; k < n; k++) {
            int64_t lo, hi;
            usp_mask_queries(&m, k, &lo, &hi);
            ck_assert_msg(lo >= last_lo && hi >= last_hi, "query interval moved left at k = %lld", (long long)k);
            last_lo = lo, last_hi = hi;
            for (int64_t p = 0; p < n; p++)
                ck_assert_msg(usp_mask_sees(&m, p, k) == (p >= lo && p < hi), "key %lld, query %lld", (long long)k,
                              (long long)p);
        }
    }
}
END_TEST

START_TEST(the_closed_form_count_is_the_brute_force_one)
{
    int32_t doc[2 * N_MAX];
    for (int trial = 0; trial < 3000; trial++) {
        const int64_t n = 1 + draw(N_MAX);
        random_documents(n, doc);
        const int64_t windows[] = {0, 1, 2, 5, n - 1, n, n + 9};
        usp_mask_row m = {.causal = (int)draw(2), .window = windows[draw(7)], .doc = draw(4) ? doc : NULL};
        const int64_t q0 = draw(n), k0 = draw(n);
        const int64_t nq = draw(n - q0 + 1), nk = draw(n - k0 + 1);
        ck_assert_msg(usp_mask_pairs(&m, q0, nq, k0, nk) == brute_pairs(&m, q0, nq, k0, nk),
                      "n %lld causal %d window %lld docs %d, queries [%lld, +%lld), keys [%lld, +%lld): %.0f, "
                      "counted %.0f",
                      (long long)n, m.causal, (long long)m.window, m.doc != NULL, (long long)q0, (long long)nq,
                      (long long)k0, (long long)nk, usp_mask_pairs(&m, q0, nq, k0, nk),
                      brute_pairs(&m, q0, nq, k0, nk));
    }
}
END_TEST

START_TEST(a_local_interval_is_clamped_to_the_call)
{
    int64_t first, end;
    usp_mask_local(-USP_MASK_FAR, USP_MASK_FAR, 100, 8, &first, &end);
    ck_assert(first == 0 && end == 8);
    usp_mask_local(90, 104, 100, 8, &first, &end);
    ck_assert(first == 0 && end == 4);
    usp_mask_local(120, 130, 100, 8, &first, &end); /* past the call: empty at its end */
    ck_assert(first == 8 && end == 8);
    usp_mask_local(103, 101, 100, 8, &first, &end); /* an empty interval stays empty */
    ck_assert(end == first);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mask");
    TCase *tc = tcase_create("mask");
    tcase_add_test(tc, the_table_holds_each_positions_document);
    tcase_add_test(tc, the_intervals_are_the_definition);
    tcase_add_test(tc, the_closed_form_count_is_the_brute_force_one);
    tcase_add_test(tc, a_local_interval_is_clamped_to_the_call);
    suite_add_tcase(s, tc);
    return check_main_run(s);
}
