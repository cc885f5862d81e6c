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

#endif
