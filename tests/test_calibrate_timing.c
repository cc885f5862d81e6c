/* usp calibrate's collective timing (calibrate/calibrate_measure.c) on the
 * simulator, where every member of a collective ends at the same instant: the
 * transfer taken from the members' gathered notes (a backend with numerics,
 * cpu) equals the last rank's own time (the meta backend, which moves no
 * data), for all_to_all and all_reduce at every level, size and cache
 * state (a sendrecv's members end when their own pair is done: there the
 * two differ, as they should). A fault in the gathered
 * path (a wrong offset into a member's notes, a post read as an end, the
 * gather on another group than the call's) makes the two differ. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "check_main.h"
#include "core/runtime/runtime.h"
#include "calibrate/calibrate_measure.h"
#include "tools/runtime_registry.h"

#define WORLD 4

/* Each call's slowest rank, as `usp calibrate` reads the records, into seconds[state][level][op][size]. */
static void measure(int shapes_only, double seconds[2][CAL_LEVELS][CAL_OPS][CALIBRATE_SIZES_MAX])
{
    usp_runtime_options ro = {.world_size = WORLD, .shapes_only = shapes_only, .cluster = "dgx-h100", .nodes = 2};
    calibrate_plan plan = {.sizes = {8192, 65536}, .n_sizes = 2, .quick = 1, .gpus_per_node = 2};
    calibrate_run run = {.plan = &plan};
    usp_runtime_t *rt = NULL;
    ck_assert_int_eq(runtime_registry_create("sim", &ro, &rt), USP_OK);
    run.records = calloc(WORLD, sizeof *run.records);
    ck_assert_ptr_nonnull(run.records);
    ck_assert_msg(usp_runtime_run(rt, calibrate_rank, &run) == USP_OK, "%s", usp_error_message());
    for (int level = 0; level < CAL_LEVELS; level++)
        for (int op = 0; op < CAL_OPS; op++)
            for (int i = 0; i < plan.n_sizes; i++) {
                seconds[0][level][op][i] = seconds[1][level][op][i] = 0;
                for (int r = 0; r < WORLD; r++) {
                    const calibrate_record *rec = &run.records[r];
                    seconds[0][level][op][i] = fmax(seconds[0][level][op][i], rec->seconds[level][op][i]);
                    seconds[1][level][op][i] = fmax(seconds[1][level][op][i], rec->hot_seconds[level][op][i]);
                }
            }
    free(run.records);
    usp_runtime_destroy(rt);
}

START_TEST(gathered_notes_give_the_last_ranks_time_where_members_end_at_once)
{
    static double numerics[2][CAL_LEVELS][CAL_OPS][CALIBRATE_SIZES_MAX];
    static double shapes[2][CAL_LEVELS][CAL_OPS][CALIBRATE_SIZES_MAX];
    measure(0, numerics);
    measure(1, shapes);
    int compared = 0;
    for (int state = 0; state < 2; state++)
        for (int level = 0; level < CAL_LEVELS; level++)
            for (int op = CAL_OP_ALL_TO_ALL; op <= CAL_OP_ALL_REDUCE; op++)
                for (int i = 0; i < 2; i++) {
                    double a = numerics[state][level][op][i], b = shapes[state][level][op][i];
                    ck_assert_msg(a == b, "%s %s of size %d (%s): %.9g s from the gathered notes, %.9g s the last "
                                  "rank's own", calibrate_op_name(op), calibrate_level_name(level), i,
                                  state ? "hot" : "cold", a, b);
                    compared += a > 0;
                }
    ck_assert_int_eq(compared, 2 * CAL_LEVELS * 2 * 2); /* cold and hot, every level, both ops and sizes */
}
END_TEST

int main(void)
{
    return check_main_one("calibrate_timing", gathered_notes_give_the_last_ranks_time_where_members_end_at_once, 120);
}
