/* usp_train_check refuses optimizer numbers that AdamW or the schedule cannot
 * use, before any rank runs, naming the field and the value (issue 15): a NaN
 * or negative value used to surface only inside adamw_step, after a whole
 * forward and backward pass, naming no option. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "core/train/train.h"
#include "tests/check_main.h"

/* A config usp_train_check accepts: defaults, the tiny model on one rank. */
static usp_train_config valid_config(void)
{
    usp_train_config c;
    usp_train_defaults(&c);
    ck_assert_int_eq(usp_model_config_preset("tiny", &c.model), USP_OK);
    ck_assert_int_eq(usp_mesh_shape_make(1, 1, 1, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.batch = 2, c.steps = 10;
    return c;
}

START_TEST(the_defaults_pass_the_check)
{
    usp_train_config c = valid_config();
    int64_t padded;
    ck_assert_msg(usp_train_check(&c, &padded) == USP_OK, "%s", usp_error_message());
    c.grad_clip = 0, c.weight_decay = 0, c.beta1 = 0, c.min_lr_ratio = 1; /* the edges that are allowed */
    ck_assert_msg(usp_train_check(&c, &padded) == USP_OK, "%s", usp_error_message());
}
END_TEST

START_TEST(bad_optimizer_numbers_are_refused_naming_the_field)
{
    static const struct {
        const char *field, *needle;
        double value;
    } cases[] = {
        {"lr", "--lr nan", NAN},          {"lr", "--lr 0", 0},
        {"lr", "--lr -0.001", -1e-3},     {"lr", "--lr inf", INFINITY},
        {"beta1", "beta1 = 1", 1},        {"beta1", "beta1 = -0.1", -0.1},
        {"beta2", "beta2 = nan", NAN},    {"eps", "eps = 0", 0},
        {"eps", "eps = -1e-08", -1e-8},   {"weight_decay", "weight_decay = -0.1", -0.1},
        {"grad_clip", "grad_clip = -1", -1}, {"grad_clip", "grad_clip = inf", INFINITY},
        {"min_lr_ratio", "min_lr_ratio = 1.5", 1.5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        usp_train_config c = valid_config();
        double *field = !strcmp(cases[i].field, "lr")             ? &c.lr
                        : !strcmp(cases[i].field, "beta1")        ? &c.beta1
                        : !strcmp(cases[i].field, "beta2")        ? &c.beta2
                        : !strcmp(cases[i].field, "eps")          ? &c.eps
                        : !strcmp(cases[i].field, "weight_decay") ? &c.weight_decay
                        : !strcmp(cases[i].field, "grad_clip")    ? &c.grad_clip
                                                                  : &c.min_lr_ratio;
        *field = cases[i].value;
        int64_t padded;
        ck_assert_msg(usp_train_check(&c, &padded) == USP_ERR_CONFIG, "%s = %g was accepted", cases[i].field,
                      cases[i].value);
        ck_assert_msg(strstr(usp_error_message(), cases[i].needle), "'%s' missing from: %s", cases[i].needle,
                      usp_error_message());
    }
}
END_TEST

/* --eval-every: a negative period, or a period of evaluations of no sample, is refused naming the options. */
START_TEST(an_eval_period_without_samples_is_refused)
{
    usp_train_config c = valid_config();
    int64_t padded;
    c.eval_every = 2, c.eval_samples = 8;
    ck_assert_msg(usp_train_check(&c, &padded) == USP_OK, "%s", usp_error_message());
    c.eval_samples = 0;
    ck_assert_int_eq(usp_train_check(&c, &padded), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--eval-every 2 with --eval-samples 0"), "%s", usp_error_message());
    c.eval_every = -1, c.eval_samples = 8;
    ck_assert_int_eq(usp_train_check(&c, &padded), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "--eval-every -1"), "%s", usp_error_message());
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train_config");
    TCase *t = tcase_create("core");
    tcase_add_test(t, the_defaults_pass_the_check);
    tcase_add_test(t, bad_optimizer_numbers_are_refused_naming_the_field);
    tcase_add_test(t, an_eval_period_without_samples_is_refused);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
