/* Flight records: every field survives a dump and a read, a watchdog thread
 * can dump while the rank posts calls, the reports a postmortem makes from
 * hand-built records (mismatch, failed rank, runs that still ran), and files
 * that are not whole records are refused with their name and field. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/safety/flight_recorder.h"
#include "core/safety/postmortem.h"
#include "tests/check_main.h"

static char tmpdir[] = "/tmp/usp_flight_XXXXXX";

static usp_comm_fingerprint call_of(usp_comm_kind op, const char *group, uint64_t seq, const char *file, int line)
{
    usp_comm_fingerprint fp = {.op = (int)op, .dtype = USP_F32, .count = 4096, .seq = seq, .site = {file, line}};
    snprintf(fp.group, sizeof fp.group, "%s", group);
    return fp;
}

static void make_dir(char *dir, size_t size, const char *name)
{
    snprintf(dir, size, "%s/%s", tmpdir, name);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
}

static void write_file(const char *dir, int rank, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/" USP_FLIGHT_FILE_FORMAT, dir, rank);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* A recorder of `rank` of `world` in groups world and pair (ranks 0 and 1). */
static usp_flight_recorder *recorder(int rank, int world)
{
    usp_flight_recorder *r;
    ck_assert_int_eq(usp_flight_recorder_create(rank, world, 4, &r), USP_OK);
    int all[8] = {0, 1, 2, 3, 4, 5, 6, 7}, pair[2] = {0, 1};
    ck_assert_int_eq(usp_flight_recorder_add_group(r, "world", world, all, rank), USP_OK);
    if (rank < 2 && world >= 2)
        ck_assert_int_eq(usp_flight_recorder_add_group(r, "pair", 2, pair, rank), USP_OK);
    return r;
}

START_TEST(every_field_survives_a_dump_and_a_read)
{
    usp_flight_recorder *r = recorder(1, 3);
    uint64_t id[6];
    usp_comm_fingerprint a = call_of(USP_OP_ALL_REDUCE, "world", 0, "core/a.c", 11);
    a.reduce = USP_REDUCE_MAX, a.dtype = USP_F64, a.recv_count = 7, a.root = 2, a.color = -1, a.key = 5;
    usp_comm_fingerprint p = call_of(USP_OP_SENDRECV, "pair", 0, "core/b.c", 22);
    p.peer = 0, p.recv_peer = 0, p.recv_count = 99;
    ck_assert_int_eq(usp_flight_recorder_post(r, &a, 0.5, &id[0]), USP_OK);
    usp_flight_recorder_started(r, id[0], 0.75);
    usp_flight_recorder_completed(r, id[0], 1.0);
    for (int i = 1; i < 5; i++) { /* more calls than the 4 it keeps: the oldest is lost */
        ck_assert_int_eq(usp_flight_recorder_post(r, i % 2 ? &p : &a, 1.0 + i, &id[i]), USP_OK);
        if (i < 4)
            usp_flight_recorder_completed(r, id[i], 1.5 + i);
    }
    usp_flight_recorder_dropped(r, id[3], 5.0); /* a skip: the group's count goes back */
    ck_assert_int_eq(usp_flight_recorder_set_injected(r, "  rank 1: skip at its call 4, sendrecv #2 on pair\n"),
                     USP_OK);
    char *json;
    ck_assert_int_eq(usp_flight_recorder_to_json(r, "timeout", &json), USP_OK);
    usp_flight_record rec;
    ck_assert_msg(usp_flight_record_parse(json, "test", &rec) == USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(rec.world_rank, 1);
    ck_assert_int_eq(rec.world_size, 3);
    ck_assert_str_eq(rec.reason, "timeout");
    ck_assert_int_eq(rec.state, USP_FLIGHT_BLOCKED);
    ck_assert_int_eq(rec.calls, 5);
    ck_assert_int_eq(rec.n_groups, 2);
    ck_assert_str_eq(rec.groups[0].name, "world");
    ck_assert_int_eq(rec.groups[0].calls_issued, 3);
    ck_assert_int_eq(rec.groups[0].collectives_issued, 3);
    ck_assert_int_eq(rec.groups[1].calls_issued, 1); /* sendrecv #1 completed, #2 dropped */
    ck_assert_int_eq(rec.groups[1].size, 2);
    ck_assert_int_eq(rec.groups[1].members[1], 1);
    ck_assert_int_eq(rec.groups[1].my_index, 1);
    ck_assert_int_eq(rec.entries_lost, 1);
    ck_assert_int_eq(rec.n_entries, 4);
    ck_assert_int_eq(rec.entries[0].id, 2);
    ck_assert_int_eq(rec.entries[2].state, USP_FLIGHT_DROPPED);
    ck_assert_int_eq(rec.entries[3].state, USP_FLIGHT_POSTED);
    ck_assert(rec.entries[3].completed < 0 && rec.entries[3].posted == 5.0);
    ck_assert(rec.has_current);
    ck_assert_int_eq(rec.current.id, 5);
    ck_assert_int_eq(rec.current.collective_seq, 3);
    const usp_comm_fingerprint *c = &rec.current.call;
    ck_assert(c->op == USP_OP_ALL_REDUCE && c->reduce == USP_REDUCE_MAX && c->dtype == USP_F64);
    ck_assert(c->count == 4096 && c->recv_count == 7 && c->root == 2 && c->color == -1 && c->key == 5);
    ck_assert(c->seq == 3 && c->site.line == 11 && strcmp(c->site.file, "core/a.c") == 0);
    ck_assert_uint_eq(usp_comm_fingerprint_hash(c), usp_comm_fingerprint_hash(&(usp_comm_fingerprint){
        .op = USP_OP_ALL_REDUCE, .dtype = USP_F64, .reduce = USP_REDUCE_MAX, .count = 4096, .root = 2,
        .group = "world", .seq = 3}));
    ck_assert(rec.entries[0].call.op == USP_OP_SENDRECV && rec.entries[0].call.peer == 0);
    ck_assert_int_eq(rec.entries[0].call.recv_count, 99);
    ck_assert_int_eq(rec.entries[0].collective_seq, 0);
    ck_assert(rec.entries[0].started < 0 && rec.entries[0].completed == 2.5);
    ck_assert_str_eq(rec.injected, "  rank 1: skip at its call 4, sendrecv #2 on pair\n");
    char *again; /* the record written back is the same text: nothing was lost on the way */
    ck_assert_int_eq(usp_flight_record_to_json(&rec, NULL, &again), USP_OK);
    ck_assert_str_eq(again, json);
    free(again), free(json);
    usp_flight_record_free(&rec);
    usp_flight_recorder_destroy(r);
}
END_TEST

START_TEST(a_crash_and_an_exit_survive_a_dump_and_a_read)
{
    usp_flight_recorder *r = recorder(1, 3);
    char *json;
    usp_flight_record rec;
    usp_comm_fingerprint at = call_of(USP_OP_ALL_TO_ALL, "pair", 2, "core/c.c", 33);
    usp_flight_recorder_crashed(r, &at, 9, "rank 1 crashed (injected)", 6.0);
    ck_assert_int_eq(usp_flight_recorder_to_json(r, "crash", &json), USP_OK);
    ck_assert_int_eq(usp_flight_record_parse(json, "test", &rec), USP_OK);
    ck_assert_int_eq(rec.state, USP_FLIGHT_CRASHED);
    ck_assert(!rec.has_current);
    ck_assert_int_eq(rec.crash_call, 9);
    ck_assert_int_eq(rec.crash_at.op, USP_OP_ALL_TO_ALL);
    ck_assert_str_eq(rec.crash_at.site.file, "core/c.c");
    ck_assert_str_eq(rec.error, "rank 1 crashed (injected)");
    ck_assert(rec.clock == 6.0);
    usp_flight_record_free(&rec);
    free(json);
    usp_flight_recorder_exited(r, USP_ERR_RUNTIME, "out of disk", 7.0);
    ck_assert_int_eq(usp_flight_recorder_to_json(r, "exit", &json), USP_OK);
    ck_assert_int_eq(usp_flight_record_parse(json, "test", &rec), USP_OK);
    ck_assert(rec.state == USP_FLIGHT_EXITED && rec.result == USP_ERR_RUNTIME);
    ck_assert_str_eq(rec.error, "out of disk");
    usp_flight_record_free(&rec);
    free(json);
    usp_flight_recorder_destroy(r);
}
END_TEST

START_TEST(posts_on_an_unknown_group_or_twice_added_groups_are_refused)
{
    usp_flight_recorder *r = recorder(0, 2);
    uint64_t id;
    usp_comm_fingerprint fp = call_of(USP_OP_BARRIER, "ulysses[0]", 1, "x.c", 1);
    ck_assert_int_eq(usp_flight_recorder_post(r, &fp, 0, &id), USP_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "ulysses[0]"));
    int m[2] = {0, 1};
    ck_assert_int_eq(usp_flight_recorder_add_group(r, "world", 2, m, 0), USP_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "registered twice"));
    usp_flight_recorder_destroy(r);
}
END_TEST

/* The watchdog's side: dumps while the main thread posts, each a whole record. */
typedef struct watchdog {
    usp_flight_recorder *r;
    const char *dir;
    int dumps, bad;
    volatile int stop;
} watchdog;

static void *watch(void *arg)
{
    watchdog *w = arg;
    char path[512];
    snprintf(path, sizeof path, "%s/" USP_FLIGHT_FILE_FORMAT, w->dir, 0);
    while (!w->stop || w->dumps == 0) {
        usp_flight_record rec = {0};
        if (usp_flight_recorder_dump(w->r, w->dir, "timeout") != USP_OK || usp_flight_record_load(path, &rec) != USP_OK)
            w->bad++;
        else if (rec.groups[0].calls_issued < rec.current.call.seq)
            w->bad++; /* a count behind the call it is in: a torn read */
        usp_flight_record_free(&rec);
        w->dumps++;
    }
    return NULL;
}

START_TEST(a_watchdog_thread_dumps_while_calls_are_posted)
{
    char dir[256];
    make_dir(dir, sizeof dir, "watchdog");
    usp_flight_recorder *r = recorder(0, 2);
    watchdog w = {.r = r, .dir = dir};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, watch, &w), 0);
    usp_comm_fingerprint fp = call_of(USP_OP_ALL_REDUCE, "world", 0, "x.c", 1);
    for (int i = 0; i < 20000; i++) {
        uint64_t id;
        ck_assert_int_eq(usp_flight_recorder_post(r, &fp, i, &id), USP_OK);
        usp_flight_recorder_completed(r, id, i + 0.5);
    }
    w.stop = 1;
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(w.bad, 0);
    ck_assert_int_gt(w.dumps, 0);
    usp_flight_recorder_destroy(r);
}
END_TEST

/* The report of the records in `dir`, with its status; *text must be freed. */
static usp_status report_of(const char *dir, usp_strbuf *text)
{
    usp_postmortem *pm;
    ck_assert_msg(usp_postmortem_load(dir, &pm) == USP_OK, "%s", usp_error_message());
    usp_status s = usp_postmortem_report(pm, text);
    usp_wait_graph g;
    ck_assert_int_eq(usp_postmortem_wait_graph(pm, "test", &g), USP_OK);
    ck_assert_int_eq(g.n_ranks, s == USP_OK || s == USP_ERR_RUNTIME ? 0 : usp_postmortem_world_size(pm));
    usp_wait_graph_free(&g);
    usp_postmortem_destroy(pm);
    return s;
}

START_TEST(ranks_at_one_position_with_different_calls_are_a_mismatch)
{
    char dir[256];
    make_dir(dir, sizeof dir, "mismatch");
    for (int i = 0; i < 2; i++) {
        usp_flight_recorder *r = recorder(i, 2);
        usp_comm_fingerprint fp = call_of(USP_OP_ALL_REDUCE, "world", 1, "core/m.c", 40 + i);
        fp.count = i ? 5 : 4;
        uint64_t id;
        ck_assert_int_eq(usp_flight_recorder_post(r, &fp, 1.0 + i, &id), USP_OK);
        ck_assert_int_eq(usp_flight_recorder_dump(r, dir, "timeout"), USP_OK);
        usp_flight_recorder_destroy(r);
    }
    usp_strbuf text = {0};
    ck_assert_int_eq(report_of(dir, &text), USP_ERR_COLLECTIVE);
    const char *t = usp_strbuf_text(&text);
    ck_assert_msg(strstr(t, "collective mismatch on world: different counts\n") &&
                      strstr(t, "  rank 0 calls all_reduce(count=4, f32, sum) as its call #1 (collective #1) on "
                                "world at core/m.c:40\n") &&
                      strstr(t, "  rank 1 calls all_reduce(count=5, f32, sum)"), "%s", t);
    usp_strbuf_free(&text);
}
END_TEST

START_TEST(records_sent_as_text_give_the_same_report)
{
    usp_postmortem *pm;
    ck_assert_int_eq(usp_postmortem_create(2, &pm), USP_OK);
    char *json[2];
    for (int i = 0; i < 2; i++) {
        usp_flight_recorder *r = recorder(i, 2);
        usp_comm_fingerprint fp = call_of(USP_OP_ALL_REDUCE, "world", 1, "core/m.c", 40 + i);
        fp.count = i ? 5 : 4;
        uint64_t id;
        ck_assert_int_eq(usp_flight_recorder_post(r, &fp, 1.0 + i, &id), USP_OK);
        ck_assert_int_eq(usp_flight_recorder_to_json(r, "timeout", &json[i]), USP_OK);
        usp_flight_recorder_destroy(r);
    }
    ck_assert_int_eq(usp_postmortem_add(pm, json[1], "from rank 1"), USP_OK);
    ck_assert_int_eq(usp_postmortem_add(pm, json[1], "again"), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "again: a second record of rank 1 (the first: from rank 1)"));
    ck_assert_ptr_null(usp_postmortem_record(pm, 0));
    ck_assert_int_eq(usp_postmortem_add(pm, json[0], "from rank 0"), USP_OK);
    usp_strbuf text = {0};
    ck_assert_int_eq(usp_postmortem_report(pm, &text), USP_ERR_COLLECTIVE);
    ck_assert_ptr_nonnull(strstr(usp_strbuf_text(&text), "collective mismatch on world: different counts\n"));
    usp_strbuf_free(&text);
    usp_postmortem_destroy(pm);
    ck_assert_int_eq(usp_postmortem_create(3, &pm), USP_OK);
    ck_assert_int_eq(usp_postmortem_add(pm, json[0], "rank 0 of 2"), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "rank 0 of 2: field 'world_size' is 2, but the postmortem says 3"));
    usp_postmortem_destroy(pm);
    free(json[0]), free(json[1]);
}
END_TEST

START_TEST(a_rank_that_failed_while_others_wait_is_a_rank_failure)
{
    char dir[256];
    make_dir(dir, sizeof dir, "failed");
    for (int i = 0; i < 3; i++) {
        usp_flight_recorder *r = recorder(i, 3);
        usp_comm_fingerprint fp = call_of(USP_OP_BARRIER, "world", 1, "core/f.c", 7);
        uint64_t id;
        if (i == 1) /* failed before its barrier */
            usp_flight_recorder_exited(r, USP_ERR_RUNTIME, "cannot open data.bin", 0.25);
        else
            ck_assert_int_eq(usp_flight_recorder_post(r, &fp, 0.5, &id), USP_OK);
        ck_assert_int_eq(usp_flight_recorder_dump(r, dir, i == 1 ? "exit" : "sigterm"), USP_OK);
        usp_flight_recorder_destroy(r);
    }
    usp_strbuf text = {0};
    ck_assert_int_eq(report_of(dir, &text), USP_ERR_RANK_FAILED);
    const char *t = usp_strbuf_text(&text);
    ck_assert_msg(strstr(t, "rank 1 failed: cannot open data.bin\nthe other ranks wait for it:\n") &&
                      strstr(t, "wait chain: rank 0 waits in barrier #1 on world (core/f.c:7) for rank 1; rank 1 "
                                "exited after 0 calls on world\n") &&
                      strstr(t, "  rank 1: exited (runtime failure) after 0 calls: cannot open data.bin [t=0.250000 s]"),
                  "%s", t);
    usp_strbuf_free(&text);
}
END_TEST

START_TEST(a_missing_rank_that_nobody_waited_for_is_a_rank_failure)
{
    char dir[256];
    make_dir(dir, sizeof dir, "gone");
    for (int i = 0; i < 3; i += 2) { /* ranks 0 and 2 finish; rank 1 leaves nothing */
        usp_flight_recorder *r = recorder(i, 3);
        usp_flight_recorder_exited(r, USP_OK, NULL, 1.0);
        ck_assert_int_eq(usp_flight_recorder_dump(r, dir, "exit"), USP_OK);
        usp_flight_recorder_destroy(r);
    }
    usp_strbuf text = {0};
    ck_assert_int_eq(report_of(dir, &text), USP_ERR_RANK_FAILED);
    const char *t = usp_strbuf_text(&text);
    ck_assert_msg(strstr(t, "rank failure: rank 1 left no flight record: killed, or never started\n") &&
                      strstr(t, "  rank 2: exited (ok) after 0 calls [t=1.000000 s]"), "%s", t);
    usp_strbuf_free(&text);
}
END_TEST

START_TEST(ranks_that_still_ran_show_no_cause)
{
    char dir[256];
    make_dir(dir, sizeof dir, "running");
    usp_flight_recorder *r = recorder(0, 1);
    ck_assert_int_eq(usp_flight_recorder_dump(r, dir, "sigterm"), USP_OK);
    usp_flight_recorder_destroy(r);
    usp_strbuf text = {0};
    ck_assert_int_eq(report_of(dir, &text), USP_ERR_RUNTIME);
    ck_assert_msg(strstr(usp_strbuf_text(&text), "  rank 0: running after 0 calls (record taken on sigterm)"), "%s",
                  usp_strbuf_text(&text));
    usp_strbuf_free(&text);
}
END_TEST

/* A postmortem of `dir` fails with USP_ERR_CONFIG and a message holding `a` and `b`. */
static void assert_refused(const char *dir, const char *a, const char *b)
{
    usp_postmortem *pm = (usp_postmortem *)1;
    ck_assert_int_eq(usp_postmortem_load(dir, &pm), USP_ERR_CONFIG);
    ck_assert_ptr_null(pm);
    const char *m = usp_error_message();
    ck_assert_msg(strstr(m, a) && strstr(m, b), "expected '%s' and '%s' in: %s", a, b, m);
}

START_TEST(files_that_are_not_whole_records_are_refused_by_name_and_field)
{
    char dir[256], good[256], *json;
    make_dir(good, sizeof good, "good");
    usp_flight_recorder *r = recorder(0, 2);
    ck_assert_int_eq(usp_flight_recorder_to_json(r, "timeout", &json), USP_OK);
    usp_flight_recorder_destroy(r);

    make_dir(dir, sizeof dir, "empty");
    assert_refused(dir, "empty: no flight records in it", USP_FLIGHT_FILE_PATTERN);
    assert_refused("/nonexistent/dir", "/nonexistent/dir: cannot read this directory", "No such file");

    make_dir(dir, sizeof dir, "truncated");
    size_t half = strlen(json) / 2;
    char was = json[half];
    json[half] = '\0';
    write_file(dir, 0, json);
    json[half] = was;
    assert_refused(dir, "truncated/rank-0.usp-flight.json: not a whole JSON flight record", "cut short");

    make_dir(dir, sizeof dir, "foreign");
    write_file(dir, 1, "{\"hello\": 1}");
    assert_refused(dir, "foreign/rank-1.usp-flight.json: field 'format'", "not a usp flight record");

    make_dir(dir, sizeof dir, "missing_field");
    char *cut = strdup(json), *calls = strstr(cut, "\"calls\"");
    ck_assert_ptr_nonnull(calls);
    memcpy(calls, "\"callz\"", 7);
    write_file(dir, 0, cut);
    assert_refused(dir, "missing_field/rank-0.usp-flight.json: field 'calls' is missing", "not a whole");
    free(cut);

    make_dir(dir, sizeof dir, "wrong_rank");
    write_file(dir, 1, json);
    assert_refused(dir, "wrong_rank/rank-1.usp-flight.json: field 'world_rank' is 0", "named for rank 1");

    make_dir(dir, sizeof dir, "two_runs");
    write_file(dir, 0, json);
    r = recorder(1, 3);
    ck_assert_int_eq(usp_flight_recorder_dump(r, dir, "timeout"), USP_OK);
    usp_flight_recorder_destroy(r);
    assert_refused(dir, "field 'world_size' is", "records of different runs");

    make_dir(dir, sizeof dir, "bad_entry");
    r = recorder(0, 2);
    uint64_t id;
    usp_comm_fingerprint fp = call_of(USP_OP_BARRIER, "world", 1, "x.c", 1);
    ck_assert_int_eq(usp_flight_recorder_post(r, &fp, 0, &id), USP_OK);
    free(json);
    ck_assert_int_eq(usp_flight_recorder_to_json(r, "timeout", &json), USP_OK);
    usp_flight_recorder_destroy(r);
    char *op = strstr(json, "\"op\": \"barrier\"");
    ck_assert_ptr_nonnull(op);
    memcpy(op, "\"op\": \"barrie_\"", 15);
    write_file(dir, 0, json);
    assert_refused(dir, "field 'current.op' is \"barrie_\"", "expected one of all_to_all");
    free(json);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("flight_recorder");
    TCase *tc = tcase_create("records");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_field_survives_a_dump_and_a_read);
    tcase_add_test(tc, a_crash_and_an_exit_survive_a_dump_and_a_read);
    tcase_add_test(tc, posts_on_an_unknown_group_or_twice_added_groups_are_refused);
    tcase_add_test(tc, a_watchdog_thread_dumps_while_calls_are_posted);
    tcase_add_test(tc, ranks_at_one_position_with_different_calls_are_a_mismatch);
    tcase_add_test(tc, records_sent_as_text_give_the_same_report);
    tcase_add_test(tc, a_rank_that_failed_while_others_wait_is_a_rank_failure);
    tcase_add_test(tc, a_missing_rank_that_nobody_waited_for_is_a_rank_failure);
    tcase_add_test(tc, ranks_that_still_ran_show_no_cause);
    tcase_add_test(tc, files_that_are_not_whole_records_are_refused_by_name_and_field);
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
