/* The device mesh: shape checks with messages that name the options, and the
 * four groups of every rank (Ulysses innermost) against their definitions. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel/mesh.h"
#include "tests/harness.h"
#include "tests/check_main.h"

START_TEST(bad_shapes_are_configuration_errors_naming_the_option)
{
    const struct {
        int w, u, r;
        const char *needle;
    } bad[] = {
        {0, 1, 1, "--world 0"},      {8, 3, 1, "--ulysses 3"},   {8, 0, 1, "--ulysses 0"},
        {8, 1, 0, "--ring 0"},       {8, 4, 4, "--ring 4"},      {6, 4, 1, "can be 1, 2, 3 or 6"},
        {-2, 1, 1, "--world -2"},
    };
    usp_mesh_shape shape;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(usp_mesh_shape_make(bad[i].w, bad[i].u, bad[i].r, &shape), USP_ERR_CONFIG);
        ck_assert_msg(strstr(usp_error_message(), bad[i].needle), "'%s' missing from: %s", bad[i].needle,
                      usp_error_message());
    }
    ck_assert_int_eq(usp_mesh_shape_make(16, 4, 2, &shape), USP_OK);
    ck_assert_int_eq(shape.dp, 2);
}
END_TEST

typedef struct mesh_case {
    usp_mesh_shape shape;
    int (*seen)[4][2]; /* per rank: (group rank, group size) of ulysses, ring, sp, dp */
    int (*world_of)[4][64];
} mesh_case;

static usp_status record_groups(const usp_rank_ctx *ctx, void *arg)
{
    mesh_case *c = arg;
    usp_mesh m;
    USP_CHECK(usp_mesh_create(ctx->world, &c->shape, &m));
    usp_comm_t *groups[4] = {m.ulysses, m.ring, m.sp, m.dp};
    for (int g = 0; g < 4; g++) {
        c->seen[ctx->rank][g][0] = usp_comm_rank(groups[g]);
        c->seen[ctx->rank][g][1] = usp_comm_size(groups[g]);
        for (int j = 0; j < usp_comm_size(groups[g]); j++)
            c->world_of[ctx->rank][g][j] = usp_comm_world_rank(groups[g], j);
    }
    usp_mesh_destroy(&m);
    return USP_OK;
}

START_TEST(groups_follow_the_layout_with_ulysses_innermost)
{
    const int shapes[][3] = {{8, 4, 1}, {8, 2, 2}, {16, 2, 4}, {12, 3, 2}, {6, 1, 3}, {1, 1, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        mesh_case c;
        ck_assert_int_eq(usp_mesh_shape_make(shapes[s][0], shapes[s][1], shapes[s][2], &c.shape), USP_OK);
        int W = c.shape.world, U = c.shape.ulysses, R = c.shape.ring;
        c.seen = calloc((size_t)W, sizeof *c.seen);
        c.world_of = calloc((size_t)W, sizeof *c.world_of);
        char report[4096];
        ck_assert_msg(harness_run(W, record_groups, &c, NULL, 0, report, sizeof report) == USP_OK, "%s", report);
        for (int w = 0; w < W; w++) {
            int d, r, u;
            usp_mesh_coords(&c.shape, w, &d, &r, &u);
            ck_assert_int_eq(w, (d * R + r) * U + u);
            const int want[4][2] = {{u, U}, {r, R}, {r * U + u, U * R}, {d, c.shape.dp}};
            for (int g = 0; g < 4; g++) {
                ck_assert_int_eq(c.seen[w][g][0], want[g][0]);
                ck_assert_int_eq(c.seen[w][g][1], want[g][1]);
            }
            for (int j = 0; j < U; j++) /* ulysses: U consecutive ranks */
                ck_assert_int_eq(c.world_of[w][0][j], (d * R + r) * U + j);
            for (int j = 0; j < R; j++)
                ck_assert_int_eq(c.world_of[w][1][j], (d * R + j) * U + u);
            for (int j = 0; j < U * R; j++) /* sp: sequence order, ring-major */
                ck_assert_int_eq(c.world_of[w][2][j], d * R * U + j);
            for (int j = 0; j < c.shape.dp; j++)
                ck_assert_int_eq(c.world_of[w][3][j], (j * R + r) * U + u);
        }
        free(c.seen);
        free(c.world_of);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mesh");
    TCase *t = tcase_create("mesh");
    tcase_add_test(t, bad_shapes_are_configuration_errors_naming_the_option);
    tcase_add_test(t, groups_follow_the_layout_with_ulysses_innermost);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
