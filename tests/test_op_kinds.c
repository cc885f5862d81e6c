/* The op descriptors (core/ops/op.h): the table of kinds is whole, a descriptor filled by hand runs
 * as the typed call that builds it, and what cannot run (an unknown kind or function, an op a
 * backend says it does not support) is refused with the op's name before any cost is reported. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "core/ops/backend_impl.h"
#include "tests/check_main.h"

START_TEST(every_kind_and_function_has_a_whole_row)
{
    for (int k = 0; k < USP_OP_KIND_COUNT; k++) {
        const char *name = usp_op_kind_name((usp_op_kind)k);
        ck_assert_msg(name && *name, "kind %d has no name", k);
        for (int j = 0; j < k; j++)
            ck_assert_msg(strcmp(name, usp_op_kind_name((usp_op_kind)j)) != 0, "two kinds are named %s", name);
        if (k == USP_OP_MAP)
            continue;
        usp_op op = {.kind = (usp_op_kind)k};
        usp_operand_info infos[USP_OP_OPERANDS_MAX];
        const int n = usp_op_operands(&op, infos);
        ck_assert_msg(n > 0 && n <= USP_OP_OPERANDS_MAX, "%s: %d operands", name, n);
        int written = 0;
        for (int i = 0; i < n; i++) {
            const usp_operand_info info = infos[i];
            ck_assert_msg(info.name && *info.name, "%s: operand %d has no name", name, i);
            written |= (info.flags & USP_OPERAND_WRITTEN) != 0;
            ck_assert_msg(info.rows_by < n && (info.rows_by < 0 || infos[info.rows_by].flags &
                                                                      USP_OPERAND_IDS),
                          "%s: %s takes its rows from an operand that holds no ids", name, info.name);
        }
        ck_assert_msg(written || usp_op_blocking(&op), "%s writes nothing", name);
    }
    for (int f = 0; f < USP_MAP_FN_COUNT; f++) {
        usp_op op = {.kind = USP_OP_MAP, .p.map.fn = (usp_map_fn)f};
        ck_assert_str_eq(usp_op_name(&op), usp_map_fn_name((usp_map_fn)f));
        ck_assert_str_eq(usp_op_cost_name(&op), usp_op_name(&op));
        usp_operand_info infos[USP_OP_OPERANDS_MAX];
        const int n = usp_op_operands(&op, infos);
        ck_assert_msg(n > 0 && n <= USP_OP_OPERANDS_MAX, "%s: %d operands", usp_op_name(&op), n);
        ck_assert(infos[0].flags & USP_OPERAND_WRITTEN); /* outputs first */
    }
}
END_TEST

typedef struct seen_costs {
    const char *op[8];
    double flops[8], bytes[8];
    int n;
} seen_costs;

static void keep_cost(void *ctx, const usp_op_cost *c)
{
    seen_costs *s = ctx;
    if (s->n < 8)
        s->op[s->n] = c->op, s->flops[s->n] = c->flops, s->bytes[s->n] = c->bytes, s->n++;
}

enum { ROWS = 5, COLS = 24 };

/* A layernorm of ROWS x COLS on `be` through the typed call (by_hand 0) or a descriptor filled here. */
static void layernorm(usp_backend_t *be, int by_hand, float *out_host)
{
    float *x, *w, *b, *y, *mean, *rstd, host[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++)
        host[i] = (float)((i * 37) % 11) - 5.0f;
    ck_assert_int_eq(usp_buffer_alloc(be, sizeof host, "t", (void **)&x), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(be, sizeof host, "t", (void **)&y), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(be, COLS * 4, "t", (void **)&w), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(be, COLS * 4, "t", (void **)&b), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(be, ROWS * 4, "t", (void **)&mean), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(be, ROWS * 4, "t", (void **)&rstd), USP_OK);
    ck_assert_int_eq(usp_buffer_copy(be, x, host, sizeof host, USP_COPY_HOST_TO_DEVICE, NULL), USP_OK);
    ck_assert_int_eq(usp_buffer_copy(be, w, host, COLS * 4, USP_COPY_HOST_TO_DEVICE, NULL), USP_OK);
    ck_assert_int_eq(usp_buffer_copy(be, b, host + COLS, COLS * 4, USP_COPY_HOST_TO_DEVICE, NULL), USP_OK);
    if (by_hand) {
        usp_op op = {.kind = USP_OP_LAYERNORM_FORWARD, .p.rows = {ROWS, COLS, 1e-5f},
                     .operand = {{y, USP_F32, ROWS * COLS}, {mean, USP_F32, ROWS}, {rstd, USP_F32, ROWS},
                                 {x, USP_F32, ROWS * COLS}, {w, USP_F32, COLS}, {b, USP_F32, COLS}}};
        ck_assert_int_eq(usp_op_run(be, &op), USP_OK);
    } else {
        ck_assert_int_eq(usp_layernorm_forward(be, y, mean, rstd, x, w, b, ROWS, COLS, 1e-5f, NULL), USP_OK);
    }
    ck_assert_int_eq(usp_buffer_download(be, out_host, y, ROWS * COLS * 4, NULL), USP_OK);
}

START_TEST(a_descriptor_filled_by_hand_runs_as_the_typed_call)
{
    float typed[ROWS * COLS], by_hand[ROWS * COLS];
    seen_costs costs[2];
    memset(costs, 0, sizeof costs);
    for (int h = 0; h < 2; h++) {
        usp_backend_t *be;
        ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
        usp_backend_set_cost_sink(be, keep_cost, &costs[h]);
        layernorm(be, h, h ? by_hand : typed);
        usp_backend_destroy(be);
    }
    ck_assert(memcmp(typed, by_hand, sizeof typed) == 0);
    ck_assert_int_eq(costs[0].n, costs[1].n);
    for (int i = 0; i < costs[0].n; i++) {
        ck_assert_str_eq(costs[0].op[i], costs[1].op[i]);
        ck_assert(costs[0].flops[i] == costs[1].flops[i] && costs[0].bytes[i] == costs[1].bytes[i]);
    }
    ck_assert_str_eq(costs[0].op[costs[0].n - 2], "layernorm_forward"); /* before the download's copy */
}
END_TEST

START_TEST(an_unknown_kind_or_function_is_refused)
{
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_cpu_create(&be), USP_OK);
    seen_costs costs = {0};
    usp_backend_set_cost_sink(be, keep_cost, &costs);
    usp_op bad_kind = {.kind = USP_OP_KIND_COUNT};
    ck_assert_int_eq(usp_op_run(be, &bad_kind), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "op kind"));
    usp_op bad_fn = {.kind = USP_OP_MAP, .p.map = {.fn = USP_MAP_FN_COUNT, .n = 4}};
    ck_assert_int_eq(usp_op_run(be, &bad_fn), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "map: function"));
    ck_assert_int_eq(costs.n, 0);
    usp_backend_destroy(be);
}
END_TEST

/* The cpu backend's slots, but without element-wise functions. */
static usp_backend_i no_maps;
static int supports_no_maps(void *ctx, const usp_op *op)
{
    return op->kind != USP_OP_MAP && usp_backend_cpu_interface()->supports(ctx, op);
}

START_TEST(an_op_the_backend_does_not_support_is_refused_before_its_cost)
{
    no_maps = *usp_backend_cpu_interface();
    no_maps.name = "cpu-without-maps";
    no_maps.supports = supports_no_maps;
    usp_backend_t *be;
    ck_assert_int_eq(usp_backend_create(&no_maps, NULL, &be), USP_OK);
    seen_costs costs = {0};
    usp_backend_set_cost_sink(be, keep_cost, &costs);
    float *x;
    ck_assert_int_eq(usp_buffer_alloc(be, 16 * 4, "t", (void **)&x), USP_OK);
    ck_assert_int_eq(usp_buffer_zero(be, x, 16 * 4, NULL), USP_OK);
    ck_assert_int_eq(usp_gelu_tanh_forward(be, x, x, 16, NULL), USP_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "cpu-without-maps backend has no gelu_tanh_forward op"));
    ck_assert_int_eq(costs.n, 1); /* the zero's */
    usp_backend_destroy(be);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_kinds");
    TCase *tc = tcase_create("op_kinds");
    tcase_add_test(tc, every_kind_and_function_has_a_whole_row);
    tcase_add_test(tc, a_descriptor_filled_by_hand_runs_as_the_typed_call);
    tcase_add_test(tc, an_unknown_kind_or_function_is_refused);
    tcase_add_test(tc, an_op_the_backend_does_not_support_is_refused_before_its_cost);
    suite_add_tcase(s, tc);
    return check_main_run(s);
}
