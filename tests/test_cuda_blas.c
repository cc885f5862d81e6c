/* cuBLAS is opened at run time (backends/cuda/cuda_gemm.c), so a wrong library
 * name or symbol would show only on the first GPU run: here, on any machine
 * with the toolkit, the library opens and every function the backend calls is
 * found. No GPU is needed: nothing is called. */
#include <check.h>

#include "backends/cuda/cuda_internal.h"
#include "tests/check_main.h"

START_TEST(cublas_opens_with_every_function_the_backend_calls)
{
    ck_assert_msg(cuda_blas_load() == USP_OK, "%s", usp_error_message());
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cuda_blas");
    TCase *t = tcase_create("load");
    tcase_add_test(t, cublas_opens_with_every_function_the_backend_calls);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
