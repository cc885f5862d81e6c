/* The compute backend registry (backends/registry/compute_backends.h): every entry is what it says it
 * is (its backends are named as it and compute, or not, as it says), and a name that cannot run is
 * refused naming the option, the value and what there is. */
#include <check.h>
#include <string.h>

#include "backends/registry/compute_backends.h"
#include "tests/check_main.h"

START_TEST(every_built_backend_is_what_its_entry_says)
{
    char known[512];
    usp_compute_backends_describe(known, sizeof known);
    ck_assert_ptr_eq(usp_compute_backend_find("cpu"), usp_compute_backend_at(0)); /* the reference first */
    for (int i = 0; i < usp_compute_backend_count(); i++) {
        const usp_compute_backend *b = usp_compute_backend_at(i);
        ck_assert_ptr_eq(usp_compute_backend_find(b->name), b);
        ck_assert_msg(strstr(known, b->name), "the description \"%s\" leaves out %s", known, b->name);
        ck_assert_msg(!b->create == !!b->needs, "%s: built, or says what it needs, not both", b->name);
        char why[256];
        if (!b->create || (b->runs_here && !b->runs_here(why, sizeof why)))
            continue;
        usp_backend_t *be;
        ck_assert_int_eq(b->create(&be), USP_OK);
        ck_assert_str_eq(usp_backend_name(be), b->name);
        ck_assert_int_eq(usp_backend_has_numerics(be), b->numeric);
        usp_backend_destroy(be);
    }
}
END_TEST

START_TEST(a_name_that_cannot_run_is_refused_naming_it)
{
    ck_assert_int_eq(usp_compute_backend_check("--sim-compute", "cpu"), USP_OK);
    ck_assert_ptr_null(usp_compute_backend_find("tpu"));
    ck_assert_int_eq(usp_compute_backend_check("--sim-compute", "tpu"), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "--sim-compute tpu: unknown compute backend"));
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "lazy"));
    ck_assert_int_eq(usp_compute_backend_check("USP_TEST_BACKEND=", "tpu"), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "USP_TEST_BACKEND=tpu:"));
    const usp_compute_backend *cuda = usp_compute_backend_find("cuda");
    ck_assert_ptr_nonnull(cuda); /* listed in every build */
    char why[256];
    if (!cuda->create || !cuda->runs_here(why, sizeof why)) {
        ck_assert_int_eq(usp_compute_backend_check("--sim-compute", "cuda"), USP_ERR_CONFIG);
        ck_assert_ptr_nonnull(strstr(usp_error_message(), cuda->create ? "cannot run here" : "not in this build"));
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("compute_backends");
    TCase *tc = tcase_create("compute_backends");
    tcase_add_test(tc, every_built_backend_is_what_its_entry_says);
    tcase_add_test(tc, a_name_that_cannot_run_is_refused_naming_it);
    suite_add_tcase(s, tc);
    return check_main_run(s);
}
