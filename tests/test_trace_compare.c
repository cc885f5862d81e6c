/* plan/trace_phases.h: hand-built traces, phase sums and op rows checked exactly (whole
 * microseconds, so each phase is the one product 1e-6 x us / ranks), the step frame, and bad
 * documents refused with USP_ERR_CONFIG naming the file; and core's trace
 * packing round-trips what the ranks of a real run send to rank 0. (A trace of
 * the simulator comparing to the plan with ratios of 1: tests/cli_test.sh; a
 * measured one under mpirun: tests/mpi_test.sh.) */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "core/trace/trace_pack.h"
#include "plan/compare.h"
#include "plan/trace_phases.h"

#define HEAD "{\"traceEvents\":["
#define TAIL "],\"otherData\":{\"generator\":\"usp train\",\"clock\":\"test\"}}"

/* A B/E pair on (pid, tid); `args` is a JSON object's text or "". */
static void slice(char *doc, size_t size, int pid, int tid, const char *name, const char *args, double b, double e)
{
    size_t n = strlen(doc);
    snprintf(doc + n, size - n, "%s{\"ph\":\"B\",\"name\":\"%s\",\"ts\":%.17g,\"pid\":%d,\"tid\":%d%s%s},"
             "{\"ph\":\"E\",\"name\":\"%s\",\"ts\":%.17g,\"pid\":%d,\"tid\":%d}",
             strlen(doc) > strlen(HEAD) ? "," : "", name, b, pid, tid, *args ? ",\"args\":" : "", args, name, e,
             pid, tid);
}

/* Two ranks, two steps: step 2 of rank 0 is [100, 164) us, of rank 1 [100, 228). */
static void two_rank_trace(char *doc, size_t size)
{
    snprintf(doc, size, HEAD);
    for (int r = 0; r < 2; r++) {
        slice(doc, size, r, 2, "step 1", "{\"step\":1}", 0, 64);
        slice(doc, size, r, 2, "step 2", "{\"step\":2}", 100, r ? 228 : 164);
        /* step 1: counted only when step 1 is asked for */
        slice(doc, size, r, 0, "gemm", "", 0, 32);
        /* step 2 */
        slice(doc, size, r, 0, "gemm", "{\"flops\":1}", 100, 104);
        slice(doc, size, r, 0, "attention_forward", "", 104, 112);
        slice(doc, size, r, 0, "attention_backward", "", 112, 128);
        slice(doc, size, r, 0, "layernorm_forward", "", 128, 130);
        slice(doc, size, r, 0, "adamw_step", "", 130, 131);
    }
    /* rank 0's calls, a call with its nested wait (counted once, in the call) */
    size_t n = strlen(doc);
    snprintf(doc + n, size - n,
             ",{\"ph\":\"B\",\"name\":\"all_to_all #1 on ulysses[0]\",\"ts\":132,\"pid\":0,\"tid\":1,"
             "\"args\":{\"op\":\"all_to_all\"}},{\"ph\":\"B\",\"name\":\"waiting for peers\",\"ts\":132,\"pid\":0,"
             "\"tid\":1},{\"ph\":\"E\",\"name\":\"waiting for peers\",\"ts\":140,\"pid\":0,\"tid\":1},"
             "{\"ph\":\"E\",\"name\":\"all_to_all #1 on ulysses[0]\",\"ts\":148,\"pid\":0,\"tid\":1}");
    slice(doc, size, 0, 1, "sendrecv #1 on ring[0]", "{\"op\":\"sendrecv\"}", 148, 152);
    slice(doc, size, 0, 1, "all_reduce #1 on world", "{\"op\":\"all_reduce\"}", 152, 160);
    slice(doc, size, 1, 1, "all_gather #1 on world", "{\"op\":\"all_gather\"}", 132, 196);
    /* a flow event and metadata are not slices */
    n = strlen(doc);
    snprintf(doc + n, size - n, ",{\"ph\":\"M\",\"name\":\"process_name\",\"ts\":0,\"pid\":0,\"tid\":0,\"args\":{}},"
             "{\"ph\":\"s\",\"name\":\"x\",\"id\":1,\"ts\":150,\"pid\":0,\"tid\":1}" TAIL);
}

START_TEST(phases_of_the_last_step_are_the_mean_over_ranks)
{
    static char doc[16384];
    two_rank_trace(doc, sizeof doc);
    plan_trace t;
    ck_assert_msg(plan_trace_parse("two.json", doc, &t) == USP_OK, "%s", usp_error_message());
    plan_step_phases p;
    ck_assert_msg(plan_trace_step_phases(&t, 0, &p) == USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(p.step, 2);
    ck_assert_int_eq(p.steps, 2);
    ck_assert_int_eq(p.ranks, 2);
    ck_assert(p.phase_s[PLAN_PHASE_GEMM] == 4e-6);
    ck_assert(p.phase_s[PLAN_PHASE_ATTENTION] == 24e-6);
    ck_assert(p.phase_s[PLAN_PHASE_OTHER_COMPUTE] == 3e-6);
    ck_assert(p.phase_s[PLAN_PHASE_ALL_TO_ALL] == 16e-6 / 2); /* rank 0's 16 us, rank 1 none */
    ck_assert(p.phase_s[PLAN_PHASE_RING] == 4e-6 / 2);
    ck_assert(p.phase_s[PLAN_PHASE_ALL_REDUCE] == 8e-6 / 2);
    ck_assert(p.phase_s[PLAN_PHASE_OTHER_COMM] == 64e-6 / 2);
    ck_assert(p.compute_s == p.phase_s[PLAN_PHASE_ATTENTION] + p.phase_s[PLAN_PHASE_GEMM] +
                             p.phase_s[PLAN_PHASE_OTHER_COMPUTE]);
    ck_assert(p.comm_s == p.phase_s[PLAN_PHASE_ALL_TO_ALL] + p.phase_s[PLAN_PHASE_RING] +
                          p.phase_s[PLAN_PHASE_ALL_REDUCE] + p.phase_s[PLAN_PHASE_OTHER_COMM]);
    ck_assert(fabs(p.compute_s - 31e-6) < 1e-18 && fabs(p.comm_s - 46e-6) < 1e-18);
    ck_assert(p.step_s == 128e-6); /* rank 1's, the longer */
    /* op by op, the mean over the ranks: calls without a group by op and size, their whole time */
    const plan_op_row *layernorm = plan_op_rows_find(&p.ops, "layernorm_forward");
    const plan_op_row *gather = plan_op_rows_find(&p.ops, "all_gather 0 B");
    ck_assert(layernorm && layernorm->s == 2e-6 && layernorm->calls == 1);
    ck_assert(gather && gather->s == 64e-6 / 2 && gather->calls == 0.5);
    ck_assert_int_eq(p.ops.n, 9); /* 5 compute ops, 4 calls */
    ck_assert_msg(plan_trace_step_phases(&t, 1, &p) == USP_OK, "%s", usp_error_message());
    ck_assert(p.phase_s[PLAN_PHASE_GEMM] == 32e-6);
    ck_assert(p.phase_s[PLAN_PHASE_ATTENTION] == 0);
    ck_assert(p.step_s == 64e-6);
    ck_assert_int_eq(plan_trace_step_phases(&t, 3, &p), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "two.json: step 3: every rank completed 2 steps"), "%s",
                  usp_error_message());
    plan_trace_free(&t);
}
END_TEST

/* Two ranks, three steps of 90 us; step s has a GEMM of gemm[s] us and an all_to_all that rank 1 posts
 * wait[s] us after rank 0, both ending transfer[s] us after rank 1's post. */
START_TEST(a_median_over_steps_takes_each_figure_apart)
{
    static const double gemm[] = {0, 10, 40, 20}, wait[] = {0, 4, 20, 8}, transfer[] = {0, 2, 6, 10};
    static char doc[16384];
    char name[64], args[112];
    snprintf(doc, sizeof doc, HEAD);
    for (int s = 1; s <= 3; s++) {
        double t0 = 100.0 * s;
        snprintf(name, sizeof name, "all_to_all #%d on ulysses[0]", s);
        for (int r = 0; r < 2; r++) {
            snprintf(args, sizeof args, "{\"step\":%d}", s);
            slice(doc, sizeof doc, r, 2, "step", args, t0, t0 + 90);
            slice(doc, sizeof doc, r, 0, "gemm", "", t0, t0 + gemm[s]);
            if (s == 3) /* an op of one step only */
                slice(doc, sizeof doc, r, 0, "adamw_step", "", t0 + 30, t0 + 36);
            snprintf(args, sizeof args, "{\"op\":\"all_to_all\",\"group\":\"ulysses[0]\",\"seq\":%d,"
                     "\"bytes_sent\":65536}", s);
            slice(doc, sizeof doc, r, 1, name, args, t0 + 50 + (r ? wait[s] : 0),
                  t0 + 50 + wait[s] + transfer[s]);
        }
    }
    size_t n = strlen(doc);
    snprintf(doc + n, sizeof doc - n, TAIL);
    plan_trace t;
    ck_assert_msg(plan_trace_parse("three.json", doc, &t) == USP_OK, "%s", usp_error_message());
    plan_step_phases p;
    ck_assert_msg(plan_trace_median_phases(&t, 3, &p) == USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(p.step, 3);
    ck_assert_int_eq(p.steps_compared, 3);
    ck_assert(fabs(p.phase_s[PLAN_PHASE_GEMM] - 20e-6) < 1e-15);
    /* per step the phase (mean of the ranks) is wait / 2 + transfer: 4, 16, 14 us; the transfer 2, 6, 10 */
    ck_assert(fabs(p.phase_s[PLAN_PHASE_ALL_TO_ALL] - 14e-6) < 1e-15);
    ck_assert(fabs(p.phase_s[PLAN_PHASE_ALL_TO_ALL] - p.wait_s[PLAN_PHASE_ALL_TO_ALL] - 6e-6) < 1e-15);
    ck_assert(fabs(p.step_s - 90e-6) < 1e-15);
    /* each row's lowest and highest step: GEMM 10 and 40 us, the all_to_all phase 4 and 16, the sums the same */
    ck_assert(fabs(p.lo_s[PLAN_PHASE_GEMM] - 10e-6) < 1e-15 && fabs(p.hi_s[PLAN_PHASE_GEMM] - 40e-6) < 1e-15);
    ck_assert(fabs(p.lo_s[PLAN_PHASE_ALL_TO_ALL] - 4e-6) < 1e-15);
    ck_assert(fabs(p.hi_s[PLAN_PHASE_ALL_TO_ALL] - 16e-6) < 1e-15);
    ck_assert(fabs(p.lo_s[PLAN_ROW_COMPUTE] - 10e-6) < 1e-15 && fabs(p.hi_s[PLAN_ROW_COMPUTE] - 40e-6) < 1e-15);
    ck_assert(fabs(p.lo_s[PLAN_ROW_COMM] - 4e-6) < 1e-15 && fabs(p.hi_s[PLAN_ROW_COMM] - 16e-6) < 1e-15);
    ck_assert(p.lo_s[PLAN_ROW_STEP] == p.hi_s[PLAN_ROW_STEP] && fabs(p.hi_s[PLAN_ROW_STEP] - 90e-6) < 1e-15);
    /* op by op: the GEMM's median, the call's transfer (its wait left out) by op and size, and an op of one step
     * of three at its median, 0 */
    ck_assert_int_eq(p.ops.n, 3);
    const plan_op_row *g = plan_op_rows_find(&p.ops, "gemm"), *a = plan_op_rows_find(&p.ops, "all_to_all 64 KiB");
    const plan_op_row *adam = plan_op_rows_find(&p.ops, "adamw_step");
    ck_assert(g && a && adam);
    ck_assert(fabs(g->s - 20e-6) < 1e-15 && g->calls == 1);
    ck_assert(fabs(a->s - 6e-6) < 1e-15 && a->calls == 1);
    ck_assert(adam->s == 0 && adam->calls == 0);
    ck_assert_msg(plan_trace_median_phases(&t, 2, &p) == USP_OK, "%s", usp_error_message());
    adam = plan_op_rows_find(&p.ops, "adamw_step"); /* steps 2 and 3: the mean of 0 and 6 us, of 0 and 1 call */
    ck_assert(adam && fabs(adam->s - 3e-6) < 1e-15 && adam->calls == 0.5);
    ck_assert(fabs(p.phase_s[PLAN_PHASE_GEMM] - 30e-6) < 1e-15); /* steps 2 and 3: the mean of 40 and 20 */
    ck_assert(fabs(p.lo_s[PLAN_PHASE_GEMM] - 20e-6) < 1e-15 && fabs(p.hi_s[PLAN_PHASE_GEMM] - 40e-6) < 1e-15);
    ck_assert(fabs(p.phase_s[PLAN_PHASE_ALL_TO_ALL] - 15e-6) < 1e-15);
    ck_assert(fabs(p.phase_s[PLAN_PHASE_ALL_TO_ALL] - p.wait_s[PLAN_PHASE_ALL_TO_ALL] - 8e-6) < 1e-15);
    ck_assert_msg(plan_trace_median_phases(&t, 1, &p) == USP_OK, "%s", usp_error_message());
    ck_assert(p.steps_compared == 1 && fabs(p.phase_s[PLAN_PHASE_GEMM] - 20e-6) < 1e-15); /* the last step */
    ck_assert(p.lo_s[PLAN_PHASE_GEMM] == p.phase_s[PLAN_PHASE_GEMM]);
    ck_assert(p.hi_s[PLAN_PHASE_GEMM] == p.phase_s[PLAN_PHASE_GEMM]);
    ck_assert_int_eq(plan_trace_median_phases(&t, 4, &p), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "three.json: a median over the last 4 steps, but every rank "
                         "completed 3"), "%s", usp_error_message());
    plan_trace_free(&t);
}
END_TEST

/* `text` is refused with USP_ERR_CONFIG, the message naming the file and saying `why`. */
static void refused(const char *text, const char *why)
{
    plan_trace t;
    plan_step_phases p;
    usp_status s = plan_trace_parse("bad.json", text, &t);
    if (s == USP_OK) {
        s = plan_trace_step_phases(&t, 0, &p);
        plan_trace_free(&t);
    }
    ck_assert_int_eq(s, USP_ERR_CONFIG);
    ck_assert_msg(strncmp(usp_error_message(), "bad.json: ", 10) == 0 && strstr(usp_error_message(), why),
                  "%s (wanted %s)", usp_error_message(), why);
}

START_TEST(bad_documents_are_refused_naming_the_file)
{
    refused("{\"traceEvents\":[{\"ph\":\"B\"", "truncated");
    refused("[1, 2]", "not a Chrome trace");
    refused("{\"traceEvents\":[]}", "not one usp wrote");
    refused(HEAD TAIL, "no training step");
    refused(HEAD "{\"ph\":\"B\",\"name\":\"step 1\",\"ts\":0,\"pid\":0,\"tid\":2,\"args\":{\"step\":1}}" TAIL,
            "never ends");
    refused(HEAD "{\"ph\":\"E\",\"name\":\"gemm\",\"ts\":0,\"pid\":0,\"tid\":0}" TAIL, "never began");
    /* rank 1 has steps, rank 0 none */
    refused(HEAD "{\"ph\":\"B\",\"name\":\"s\",\"ts\":0,\"pid\":1,\"tid\":2,\"args\":{\"step\":1}},"
                 "{\"ph\":\"E\",\"name\":\"s\",\"ts\":1,\"pid\":1,\"tid\":2}" TAIL,
            "no training step");
    plan_comparison c;
    plan_compare_options o = {.trace = "/nonexistent/run.json"};
    ck_assert_int_eq(plan_compare_run(&o, &c), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "/nonexistent/run.json: cannot read it"), "%s", usp_error_message());
}
END_TEST

/* A packed trace unpacks to the same events (what rank 0 of a real run rebuilds). */
START_TEST(a_packed_trace_unpacks_to_the_same_events)
{
    usp_trace_t *a, *b;
    ck_assert_int_eq(usp_trace_create(&a), USP_OK);
    ck_assert_int_eq(usp_trace_create(&b), USP_OK);
    usp_trace_event e = {.rank = 1, .group = usp_trace_intern_group(a, "ulysses[0]"), .kind = 3, .seq = 7,
                         .file = "core/parallel/ulysses.c", .line = 174, .t_post = 0.1, .t_start = 0.2, .t_end = 1.0 / 3};
    usp_trace_peer peers[] = {{0, 4096}, {2, 8192}};
    ck_assert_int_eq(usp_trace_record(a, &e, peers, 2), USP_OK);
    ck_assert_int_eq(usp_trace_record_compute(a, 1, "gemm", 0.5, 0.75, 1e9, 3e6), USP_OK);
    ck_assert_int_eq(usp_trace_record_step(a, 1, 2, 0.01, 0.99), USP_OK);
    char *text;
    size_t size;
    ck_assert_int_eq(usp_trace_pack(a, &text, &size), USP_OK);
    ck_assert_msg(usp_trace_unpack(b, text, size, "rank 1") == USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(usp_trace_count(b), 1);
    const usp_trace_event *x = usp_trace_at(b, 0);
    ck_assert_int_eq(x->rank, 1);
    ck_assert_str_eq(usp_trace_group_name(b, x->group), "ulysses[0]");
    ck_assert_str_eq(x->file, "core/parallel/ulysses.c");
    ck_assert(x->kind == 3 && x->seq == 7 && x->line == 174 && x->t_end == 1.0 / 3 && x->bytes_sent == 12288);
    ck_assert_int_eq(x->n_peers, 2);
    ck_assert(usp_trace_peers(b, x)[1].peer == 2 && usp_trace_peers(b, x)[1].bytes == 8192);
    ck_assert_int_eq(usp_trace_compute_count(b), 1);
    ck_assert_str_eq(usp_trace_compute_at(b, 0)->name, "gemm");
    ck_assert(usp_trace_compute_at(b, 0)->flops == 1e9 && usp_trace_compute_at(b, 0)->t_end == 0.75);
    ck_assert_int_eq(usp_trace_step_count(b), 1);
    ck_assert(usp_trace_step_at(b, 0)->step == 2 && usp_trace_step_at(b, 0)->t_end == 0.99);
    ck_assert_int_eq(usp_trace_unpack(b, "X\t1\n", 4, "rank 3"), USP_ERR_RUNTIME);
    ck_assert_msg(strstr(usp_error_message(), "rank 3: line 1"), "%s", usp_error_message());
    free(text);
    usp_trace_destroy(a);
    usp_trace_destroy(b);
}
END_TEST

/* plan/op_rows.h: a call's row name from its bytes, rows summed by name, and at most PLAN_OP_ROWS_MAX of them. */
START_TEST(op_rows_name_calls_and_stop_at_their_limit)
{
    char name[PLAN_OP_NAME_MAX];
    plan_op_call_name(name, sizeof name, "all_to_all", 65536);
    ck_assert_str_eq(name, "all_to_all 64 KiB");
    plan_op_call_name(name, sizeof name, "all_reduce", 8);
    ck_assert_str_eq(name, "all_reduce 8 B");
    plan_op_call_name(name, sizeof name, "all_reduce", 429312);
    ck_assert_str_eq(name, "all_reduce 419 KiB");
    plan_op_call_name(name, sizeof name, "sendrecv", 1.5 * (1 << 30));
    ck_assert_str_eq(name, "sendrecv 1.5 GiB");
    static plan_op_rows t;
    plan_op_rows_add(&t, "gemm", 1e-6, 1);
    plan_op_rows_add(&t, "gemm", 2e-6, 1);
    ck_assert(t.n == 1 && t.rows[0].s == 3e-6 && t.rows[0].calls == 2);
    for (int i = 1; i <= PLAN_OP_ROWS_MAX; i++) {
        snprintf(name, sizeof name, "op %d", i);
        plan_op_rows_add(&t, name, 1e-6, 1);
    }
    ck_assert_int_eq(t.n, PLAN_OP_ROWS_MAX); /* "op 64" had no room */
    ck_assert_int_eq(t.dropped, 1);
    ck_assert(plan_op_rows_find(&t, "op 63") && !plan_op_rows_find(&t, "op 64"));
    plan_op_rows_add(&t, "gemm", 1e-6, 1); /* a row it has still adds */
    ck_assert(plan_op_rows_find(&t, "gemm")->calls == 3 && t.dropped == 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trace_compare");
    TCase *t = tcase_create("trace_compare");
    tcase_add_test(t, phases_of_the_last_step_are_the_mean_over_ranks);
    tcase_add_test(t, a_median_over_steps_takes_each_figure_apart);
    tcase_add_test(t, bad_documents_are_refused_naming_the_file);
    tcase_add_test(t, a_packed_trace_unpacks_to_the_same_events);
    tcase_add_test(t, op_rows_name_calls_and_stop_at_their_limit);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
