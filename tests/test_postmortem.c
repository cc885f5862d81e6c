/* `usp postmortem` gives the simulator's report. Each test runs a broken
 * training step on the simulator with a flight recorder under every rank (a
 * recording communicator between the rank and its handles, as a real
 * backend's communicator would record), dumps the records as a watchdog would
 * when the run hangs, and compares the postmortem's report with the one the
 * simulator printed: the same lines, clocks aside. Then the rank that a
 * SIGKILL would leave without a record is taken away, and the report must
 * name it as the rank that never came. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/comm/comm_impl.h"
#include "core/safety/flight_recorder.h"
#include "core/safety/postmortem.h"
#include "tests/check_main.h"
#include "tests/harness.h"

#define WORLD 4
#define REPORT_SIZE 16384

/* What the test keeps of one rank. */
typedef struct rank_rec {
    usp_flight_recorder *fr;
    const usp_rank_ctx *ctx;  /* its clock */
    int hung;                 /* a call of it never completed: the run was aborted around it */
    int crashed;
} rank_rec;

/* One recording handle: the rank's own (decorated) handle underneath. */
typedef struct rec_comm {
    rank_rec *rank;
    usp_comm_t *inner;
    int owns_inner;           /* not the world: the runtime owns that one */
    uint64_t issued;          /* calls issued on the group, as the backend below the decorator counts them */
} rec_comm;

static const usp_comm_i rec_iface;

static usp_status rec_wrap(rank_rec *r, usp_comm_t *inner, int owns, usp_comm_t **out)
{
    rec_comm *c = calloc(1, sizeof *c);
    ck_assert_ptr_nonnull(c);
    *c = (rec_comm){.rank = r, .inner = inner, .owns_inner = owns};
    USP_CHECK(usp_flight_recorder_add_group(r->fr, inner->name, inner->size, inner->world_ranks, inner->rank));
    return usp_comm_create(&rec_iface, c, inner->rank, inner->size, inner->world_ranks, inner->name, NULL, out);
}

/* The crash the decorator injected into this rank, from its message: which counted call, or 0. */
static uint64_t own_crash(const rank_rec *r)
{
    char prefix[64];
    unsigned long long call;
    snprintf(prefix, sizeof prefix, "rank %d crashed (injected) at its call ", r->ctx->rank);
    const char *m = usp_error_message();
    return strncmp(m, prefix, strlen(prefix)) == 0 && sscanf(m + strlen(prefix), "%llu", &call) == 1 ? call : 0;
}

static usp_status rec_issue(void *ctx, usp_comm_op *op)
{
    rec_comm *c = ctx;
    rank_rec *r = c->rank;
    if (r->crashed || r->hung) /* its record was taken: what it does while unwinding is not in it */
        return c->inner->iface->issue(c->inner->context, op);
    double t = r->ctx->clock(r->ctx->runtime);
    usp_comm_fingerprint fp = usp_comm_fingerprint_of(op, c->inner->name, ++c->issued);
    uint64_t id;
    USP_CHECK(usp_flight_recorder_post(r->fr, &fp, t, &id));
    usp_comm_t **user_out = op->split_out, *child = NULL;
    if (op->kind == USP_OP_SPLIT)
        op->split_out = &child;
    usp_status s = c->inner->iface->issue(c->inner->context, op);
    op->split_out = user_out;
    t = r->ctx->clock(r->ctx->runtime);
    uint64_t crash = s != USP_OK ? own_crash(r) : 0;
    if (s == USP_OK && op->not_issued) { /* the decorator skipped it: the backend never saw it */
        usp_flight_recorder_dropped(r->fr, id, t);
        c->issued--;
    } else if (crash) {
        usp_flight_recorder_dropped(r->fr, id, t);
        c->issued--;
        usp_flight_recorder_crashed(r->fr, &fp, crash, usp_error_message(), t);
        r->crashed = 1;
    } else if (s != USP_OK) {
        r->hung = 1; /* what a watchdog would find: the call never completes */
    } else {
        usp_flight_recorder_completed(r->fr, id, t);
    }
    if (s == USP_OK && child) {
        usp_status ws = rec_wrap(r, child, 1, user_out);
        if (ws != USP_OK)
            usp_comm_destroy(child);
        return ws;
    }
    return s;
}

static void rec_destroy(void *ctx)
{
    rec_comm *c = ctx;
    if (c->owns_inner)
        usp_comm_destroy(c->inner);
    free(c);
}

static const usp_comm_i rec_iface = {
    .api_version = USP_COMM_API_VERSION, .name = "recording", .issue = rec_issue, .destroy = rec_destroy};

typedef struct recorded_run {
    usp_train_run train;
    rank_rec ranks[WORLD];
} recorded_run;

/* The training rank, on recording handles; its end is recorded unless it hung or crashed. */
static usp_status recorded_rank(const usp_rank_ctx *ctx, void *arg)
{
    recorded_run *run = arg;
    rank_rec *r = &run->ranks[ctx->rank];
    r->ctx = ctx;
    usp_rank_ctx mine = *ctx;
    USP_CHECK(rec_wrap(r, ctx->world, 0, &mine.world));
    usp_status s = usp_train_rank(&mine, &run->train);
    usp_comm_destroy(mine.world);
    if (!r->hung && !r->crashed)
        usp_flight_recorder_exited(r->fr, s, s == USP_OK ? NULL : usp_error_message(), ctx->clock(ctx->runtime));
    return s;
}

/* The lines of `report`'s "injected faults:" section that are about `rank`. */
static void injected_of(const char *report, int rank, char *out, size_t size)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "  rank %d: ", rank);
    size_t at = 0;
    out[0] = '\0';
    const char *s = strstr(report, "injected faults:\n");
    for (const char *line = s ? strchr(s, '\n') + 1 : ""; *line == ' ';) {
        size_t n = strcspn(line, "\n") + 1;
        if (strncmp(line, prefix, strlen(prefix)) == 0 && at + n < size)
            at += (size_t)snprintf(out + at, size - at, "%.*s", (int)n, line);
        line += n;
    }
}

/* Runs one training step of W = 4 = U x R on the simulator with `fault`,
 * each rank recorded; dumps every record into `dir` and copies the
 * simulator's report into `report`. Returns the run's status. */
static usp_status run_recorded_mesh(int ulysses, const char *fault, const char *dir, char *report)
{
    usp_train_config c;
    usp_train_defaults(&c);
    ck_assert_int_eq(usp_model_config_load("tiny", &c.model), USP_OK);
    ck_assert_int_eq(usp_mesh_shape_make(WORLD, ulysses, WORLD / ulysses, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.batch = 16, c.steps = 1, c.eval_samples = 0, c.log_every = 1000;
    usp_train_result result = {.passkey_accuracy = -1};
    recorded_run run = {.train = {.config = &c, .result = &result}};
    for (int i = 0; i < WORLD; i++)
        ck_assert_int_eq(usp_flight_recorder_create(i, WORLD, 0, &run.ranks[i].fr), USP_OK);
    usp_fault f;
    if (fault)
        ck_assert_int_eq(usp_fault_parse(fault, &f), USP_OK);
    sim_config sc = sim_config_default(WORLD);
    sc.faults = fault ? &f : NULL, sc.n_faults = fault ? 1 : 0, sc.stack_bytes = (size_t)1 << 20, sc.trace = 0;
    sc.make_backend = harness_backend_factory();
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&sc, &w), USP_OK);
    usp_status s = sim_world_run(w, recorded_rank, &run);
    snprintf(report, REPORT_SIZE, "%s", sim_world_report(w));
    sim_world_destroy(w);
    for (int i = 0; i < WORLD; i++) { /* what each rank's watchdog writes when the run hangs */
        char lines[1024];
        injected_of(report, i, lines, sizeof lines);
        ck_assert_int_eq(usp_flight_recorder_set_injected(run.ranks[i].fr, lines), USP_OK);
        const char *why = run.ranks[i].crashed ? "crash" : run.ranks[i].hung ? "timeout" : "exit";
        ck_assert_msg(usp_flight_recorder_dump(run.ranks[i].fr, dir, why) == USP_OK, "%s", usp_error_message());
        usp_flight_recorder_destroy(run.ranks[i].fr);
    }
    return s;
}

static usp_status run_recorded(const char *fault, const char *dir, char *report)
{
    return run_recorded_mesh(WORLD, fault, dir, report);
}

/* `text` without its clocks (" [t=0.000105 s]"), which the records need not share. */
static void without_clocks(const char *text, char *out, size_t size)
{
    size_t at = 0;
    while (*text && at + 1 < size) {
        const char *t = strstr(text, " [t=");
        size_t n = t ? (size_t)(t - text) : strlen(text);
        if (at + n >= size)
            n = size - at - 1;
        memcpy(out + at, text, n);
        at += n;
        text += n;
        if (t && text == t)
            text = strchr(t, ']') ? strchr(t, ']') + 1 : t + strlen(t);
    }
    out[at] = '\0';
}

static char tmpdir[] = "/tmp/usp_postmortem_XXXXXX";

static void make_dir(char *dir, size_t size, const char *name)
{
    snprintf(dir, size, "%s/%s", tmpdir, name);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
}

static usp_status postmortem_of(const char *dir, char *out, int *world)
{
    usp_postmortem *pm;
    usp_status s = usp_postmortem_load(dir, &pm);
    ck_assert_msg(s == USP_OK, "%s", usp_error_message());
    usp_strbuf text = {0};
    s = usp_postmortem_report(pm, &text);
    snprintf(out, REPORT_SIZE, "%s", usp_strbuf_text(&text));
    *world = usp_postmortem_world_size(pm);
    usp_strbuf_free(&text);
    usp_postmortem_destroy(pm);
    return s;
}

static void assert_same_report(const char *sim, const char *post)
{
    static char a[REPORT_SIZE], b[REPORT_SIZE];
    without_clocks(sim, a, sizeof a);
    without_clocks(post, b, sizeof b);
    ck_assert_msg(strcmp(a, b) == 0, "the simulator said:\n%s\nthe postmortem says:\n%s", sim, post);
}

START_TEST(skipped_all_to_all_gives_the_simulators_deadlock_report)
{
    static char sim[REPORT_SIZE], post[REPORT_SIZE];
    char dir[256];
    int world;
    make_dir(dir, sizeof dir, "skip");
    ck_assert_int_eq(run_recorded("skip:rank=2,op=all_to_all", dir, sim), USP_ERR_COLLECTIVE);
    ck_assert_int_eq(postmortem_of(dir, post, &world), USP_ERR_COLLECTIVE);
    ck_assert_int_eq(world, WORLD);
    ck_assert_msg(strstr(post, "wait chain: rank 0 waits in all_to_all #16 on ulysses[0] (core/parallel/ulysses.c:") &&
                      strstr(post, "for rank 2; rank 2 waits in all_reduce #6 on world (core/model/grad_buckets.c:") &&
                      strstr(post, "for rank 0; a cycle"), "%s", post);
    ck_assert_msg(strstr(post, "  rank 2: skip at its call 2, all_to_all #1 on ulysses[0]"), "%s", post);
    ck_assert_msg(strstr(post, "rank 2: blocked in all_reduce #6 on world (core/model/grad_buckets.c:") &&
                      strstr(post, "all_reduce(count=107328, f32, sum), waiting for rank 0, 1, 3 [t="), "%s", post);
    assert_same_report(sim, post);
}
END_TEST

START_TEST(a_rank_without_a_record_is_the_one_that_never_came)
{
    static char sim[REPORT_SIZE], post[REPORT_SIZE];
    char dir[256], path[300];
    int world;
    make_dir(dir, sizeof dir, "killed");
    ck_assert_int_eq(run_recorded("skip:rank=2,op=all_to_all", dir, sim), USP_ERR_COLLECTIVE);
    snprintf(path, sizeof path, "%s/" USP_FLIGHT_FILE_FORMAT, dir, 1);
    ck_assert_int_eq(unlink(path), 0); /* a SIGKILLed rank 1 writes nothing */
    ck_assert_int_eq(postmortem_of(dir, post, &world), USP_ERR_RANK_FAILED);
    ck_assert_int_eq(world, WORLD);
    ck_assert_msg(strstr(post, "rank failure: ranks wait for a rank that left no flight record"), "%s", post);
    ck_assert_msg(strstr(post, "  rank 1: no flight record: killed, or never started [t="), "%s", post);
    ck_assert_msg(strstr(post, "waiting for rank 0, 1, 3"), "%s", post);
    ck_assert_msg(strstr(post, "  rank 0: blocked in all_to_all #16 on ulysses[0]"), "%s", post);
}
END_TEST

START_TEST(a_crash_gives_the_simulators_rank_failure_report)
{
    static char sim[REPORT_SIZE], post[REPORT_SIZE];
    char dir[256], path[300];
    int world;
    make_dir(dir, sizeof dir, "crash");
    ck_assert_int_eq(run_recorded("crash:rank=1,op=all_to_all", dir, sim), USP_ERR_RANK_FAILED);
    ck_assert_int_eq(postmortem_of(dir, post, &world), USP_ERR_RANK_FAILED);
    ck_assert_msg(strstr(post, "rank 1 crashed (injected) at its call 2: all_to_all #1 on ulysses[0]"), "%s", post);
    assert_same_report(sim, post);
    /* Killed instead (no record): the others' chain ends at rank 1 all the same. */
    snprintf(path, sizeof path, "%s/" USP_FLIGHT_FILE_FORMAT, dir, 1);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(postmortem_of(dir, post, &world), USP_ERR_RANK_FAILED);
    ck_assert_msg(strstr(post, "wait chain: rank 0 waits in all_to_all #1 on ulysses[0] (core/parallel/ulysses.c:") &&
                      strstr(post, "for rank 1; rank 1 never came (no flight record: killed, or never started)"),
                  "%s", post);
}
END_TEST

START_TEST(a_skipped_ring_transfer_gives_the_simulators_report)
{
    static char sim[REPORT_SIZE], post[REPORT_SIZE];
    char dir[256];
    int world;
    make_dir(dir, sizeof dir, "ring");
    ck_assert_int_eq(run_recorded_mesh(2, "skip:rank=1,op=sendrecv,call=2", dir, sim), USP_ERR_COLLECTIVE);
    ck_assert_int_eq(postmortem_of(dir, post, &world), USP_ERR_COLLECTIVE);
    ck_assert_msg(strstr(post, "sendrecv #"), "%s", post);
    assert_same_report(sim, post);
}
END_TEST

START_TEST(a_run_that_finished_is_no_failure)
{
    static char sim[REPORT_SIZE], post[REPORT_SIZE];
    char dir[256];
    int world;
    make_dir(dir, sizeof dir, "clean");
    ck_assert_int_eq(run_recorded(NULL, dir, sim), USP_OK);
    ck_assert_int_eq(postmortem_of(dir, post, &world), USP_OK);
    ck_assert_msg(strstr(post, "all 4 ranks exited OK"), "%s", post);
}
END_TEST

/* The skip example's records are kept in tests/golden/postmortem-skip for
 * the command-line test; they must be what the recorders write today
 * (USP_UPDATE_GOLDEN=1 rewrites them). */
START_TEST(the_command_line_fixture_is_what_the_recorders_write)
{
    static char sim[REPORT_SIZE];
    char dir[256], got[300], want[300];
    make_dir(dir, sizeof dir, "fixture");
    ck_assert_int_eq(run_recorded("skip:rank=2,op=all_to_all", dir, sim), USP_ERR_COLLECTIVE);
    for (int i = 0; i < WORLD; i++) {
        snprintf(got, sizeof got, "%s/" USP_FLIGHT_FILE_FORMAT, dir, i);
        snprintf(want, sizeof want, "%s/postmortem-skip/" USP_FLIGHT_FILE_FORMAT, USP_GOLDEN_DIR, i);
        char *a = harness_read_file(got, NULL), *b = harness_read_file(want, NULL);
        ck_assert_ptr_nonnull(a);
        if (getenv("USP_UPDATE_GOLDEN")) {
            FILE *f = fopen(want, "w");
            ck_assert_ptr_nonnull(f);
            fputs(a, f);
            ck_assert_int_eq(fclose(f), 0);
        } else {
            ck_assert_msg(b && strcmp(a, b) == 0, "%s differs from %s (USP_UPDATE_GOLDEN=1 rewrites it)", want, got);
        }
        free(a), free(b);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("postmortem");
    TCase *tc = tcase_create("reports");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, skipped_all_to_all_gives_the_simulators_deadlock_report);
    tcase_add_test(tc, a_rank_without_a_record_is_the_one_that_never_came);
    tcase_add_test(tc, a_crash_gives_the_simulators_rank_failure_report);
    tcase_add_test(tc, a_skipped_ring_transfer_gives_the_simulators_report);
    tcase_add_test(tc, a_run_that_finished_is_no_failure);
    tcase_add_test(tc, the_command_line_fixture_is_what_the_recorders_write);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror(tmpdir);
        return 1;
    }
    int code = check_main_run(suite());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return code;
}
