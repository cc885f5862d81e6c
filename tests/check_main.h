/* The main() of every Check test: run the suite, exit 1 when anything failed. */
#ifndef USP_TESTS_CHECK_MAIN_H
#define USP_TESTS_CHECK_MAIN_H

#include <check.h>

/* Runs `suite` and returns the process exit code (0 when every test passed). */
static inline int check_main_run(Suite *suite)
{
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}

/* The main() of a test file of one test: a suite and a case named `name`, the case's timeout `timeout_s`
 * (0: Check's default). */
static inline int check_main_one(const char *name, const TTest *test, double timeout_s)
{
    Suite *s = suite_create(name);
    TCase *t = tcase_create(name);
    if (timeout_s > 0)
        tcase_set_timeout(t, timeout_s);
    tcase_add_test(t, test);
    suite_add_tcase(s, t);
    return check_main_run(s);
}

#endif
