/* The watchdog's way of ending a rank (runtimes/process/mpi_watchdog.h), on the
 * CPU, without MPI: a call that never completes (entered and never left, as a
 * communicator that never returns makes it) ends the process with exit 3
 * after its record is written and before the abort hook runs; the record says
 * whether the call was started (handed to the backend) or only queued; the
 * marker DIR/usp-abort tells the other ranks, and a rank that finds a peer's
 * marker ends with the peer's exit code and a record of its own (reason
 * "peer"); an abort hook that never returns cannot keep the process alive
 * past the end bound; a failed rank's own abort (mpi_watchdog_abort) returns
 * when its hook does. Each case runs in a child process (the watchdog ends
 * its process); the children's stderr goes to a file the test reads. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtimes/process/mpi_watchdog.h"
#include "tests/check_main.h"
#include "tests/harness.h"
#include "tests/scratch_dir.h"

#define TIMEOUT_S 0.3

static char path_buf[4096];

/* DIR/name in the scratch folder (one buffer: use it before the next call). */
static const char *in_dir(const char *name)
{
    snprintf(path_buf, sizeof path_buf, "%s/%s", tmpdir, name);
    return path_buf;
}

/* The whole file (malloc'd), or NULL when it does not exist. */
static char *slurp(const char *path) { return harness_read_file(path, NULL); }

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The abort hooks: one notes whether the rank's record (the file named by ctx) was already written when
 * it ran, one never returns. */
static void abort_noting_order(void *ctx)
{
    int dumped = exists(in_dir(ctx));
    FILE *f = fopen(in_dir("abort-ran"), "w");
    if (f) {
        fprintf(f, "%s\n", dumped ? "after the dump" : "before the dump");
        fclose(f);
    }
}

static void abort_never_returning(void *ctx)
{
    (void)ctx;
    for (;;)
        sleep(1);
}

static usp_flight_recorder *recorder_of(int rank)
{
    usp_flight_recorder *r = NULL;
    const int world[] = {0, 1};
    ck_assert_int_eq(usp_flight_recorder_create(rank, 2, 0, &r), USP_OK);
    ck_assert_int_eq(usp_flight_recorder_add_group(r, "world", 2, world, rank), USP_OK);
    usp_flight_recorder_records_starts(r);
    return r;
}

typedef enum child_kind {
    NEVER_COMPLETES,          /* enter a call, never leave it */
    NEVER_COMPLETES_STARTED,  /* the same, after the backend was handed the call */
    ABORT_NEVER_RETURNS,      /* NEVER_COMPLETES with an abort that hangs */
    PEER_ENDED,               /* rank 1, in no call, while rank 0's marker is in DIR */
    MAIN_THREAD_ABORT,        /* mpi_watchdog_abort from the main thread, a hook that returns */
} child_kind;

/* Runs a child of `kind` and returns its exit status (-1: killed by a signal). */
static int run_child(child_kind kind)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int err = open(in_dir("stderr"), O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(err, STDERR_FILENO);
        int rank = kind == PEER_ENDED ? 1 : 0;
        usp_flight_recorder *r = recorder_of(rank);
        mpi_watchdog *w = NULL;
        if (mpi_watchdog_start(rank, 2, TIMEOUT_S, tmpdir, r, &w) != USP_OK)
            _exit(90);
        static char record[64];
        snprintf(record, sizeof record, "rank-%d.usp-flight.json", rank);
        mpi_watchdog_set_abort(w, kind == ABORT_NEVER_RETURNS ? abort_never_returning : abort_noting_order, record);
        if (kind == MAIN_THREAD_ABORT) {
            mpi_watchdog_abort(w, USP_ERR_RANK_FAILED, "test: this rank failed");
            mpi_watchdog_stop(w);
            _exit(0);
        }
        usp_comm_fingerprint fp = {.op = USP_OP_ALL_REDUCE, .dtype = USP_F32, .count = 4, .peer = -1,
                                   .recv_peer = -1, .group = "world", .site = {"test.c", 7}};
        if (kind != PEER_ENDED)
            mpi_watchdog_enter(w, &fp, 1.0); /* and never leave: the communicator never completes */
        if (kind == NEVER_COMPLETES_STARTED)
            mpi_watchdog_started(w, 1.25);
        sleep(30); /* the watchdog ends the process long before */
        _exit(91);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(a_call_that_never_completes_is_dumped_then_aborted_and_tells_the_others)
{
    clean_tmpdir();
    ck_assert_int_eq(run_child(NEVER_COMPLETES), 3);
    char *dump = slurp(in_dir("rank-0.usp-flight.json")), *order = slurp(in_dir("abort-ran"));
    char *marker = slurp(in_dir(MPI_WATCHDOG_MARKER)), *err = slurp(in_dir("stderr"));
    ck_assert_ptr_nonnull(dump);
    ck_assert_msg(strstr(dump, "\"reason\": \"timeout\"") && strstr(dump, "\"starts\": true") &&
                  strstr(dump, "\"state\": \"posted\"") && strstr(dump, "\"started\": null"), "%s", dump);
    ck_assert_msg(order && strcmp(order, "after the dump\n") == 0, "the abort ran %s", order ? order : "never");
    ck_assert_msg(marker && strncmp(marker, "3 0 watchdog: all_reduce #", 26) == 0, "marker: %s", marker);
    ck_assert_msg(err && strstr(err, "it never started (queued"), "%s", err);
    free(dump), free(order), free(marker), free(err);
}
END_TEST

START_TEST(a_started_call_reads_as_inside_it)
{
    clean_tmpdir();
    ck_assert_int_eq(run_child(NEVER_COMPLETES_STARTED), 3);
    char *dump = slurp(in_dir("rank-0.usp-flight.json")), *err = slurp(in_dir("stderr"));
    ck_assert_ptr_nonnull(dump);
    ck_assert_msg(strstr(dump, "\"state\": \"started\"") && strstr(dump, "\"started\": 1.25"), "%s", dump);
    ck_assert_msg(err && strstr(err, "it is inside the call"), "%s", err);
    free(dump), free(err);
}
END_TEST

START_TEST(an_abort_that_never_returns_cannot_keep_the_process)
{
    clean_tmpdir();
    ck_assert_int_eq(run_child(ABORT_NEVER_RETURNS), 3); /* the end timer's _exit, with the watchdog's code */
    char *dump = slurp(in_dir("rank-0.usp-flight.json")), *err = slurp(in_dir("stderr"));
    ck_assert_msg(dump && strstr(dump, "\"reason\": \"timeout\""), "the record is written before the abort");
    ck_assert_msg(err && strstr(err, "the dump and abort did not finish within"), "%s", err);
    free(dump), free(err);
}
END_TEST

START_TEST(a_peers_marker_ends_this_rank_with_a_record_and_the_peers_code)
{
    clean_tmpdir();
    FILE *f = fopen(in_dir(MPI_WATCHDOG_MARKER), "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "3 0 watchdog: all_reduce #5 on world not complete\n");
    fclose(f);
    ck_assert_int_eq(run_child(PEER_ENDED), 3);
    char *dump = slurp(in_dir("rank-1.usp-flight.json")), *order = slurp(in_dir("abort-ran"));
    char *err = slurp(in_dir("stderr"));
    ck_assert_msg(dump && strstr(dump, "\"reason\": \"peer\"") && strstr(dump, "\"state\": \"running\""), "%s",
                  dump ? dump : "no record");
    ck_assert_msg(order && strcmp(order, "after the dump\n") == 0, "the abort ran %s", order ? order : "never");
    ck_assert_msg(err && strstr(err, "rank 0 ended the run (usp-abort): watchdog: all_reduce #5"), "%s", err);
    free(dump), free(order), free(err);
}
END_TEST

START_TEST(a_failed_ranks_abort_tells_the_others_and_returns)
{
    clean_tmpdir();
    ck_assert_int_eq(run_child(MAIN_THREAD_ABORT), 0);
    char *order = slurp(in_dir("abort-ran")), *marker = slurp(in_dir(MPI_WATCHDOG_MARKER));
    ck_assert_msg(order != NULL, "the abort hook never ran"); /* (no record: the main thread writes it first) */
    ck_assert_msg(marker && strcmp(marker, "4 0 test: this rank failed\n") == 0, "marker: %s", marker);
    free(order), free(marker);
}
END_TEST

int main(void)
{
    if (!scratch_dir_make("/tmp/usp-safety-net-XXXXXX"))
        return 1;
    Suite *s = suite_create("safety_net");
    TCase *t = tcase_create("safety_net");
    tcase_set_timeout(t, 40);
    tcase_add_test(t, a_call_that_never_completes_is_dumped_then_aborted_and_tells_the_others);
    tcase_add_test(t, a_started_call_reads_as_inside_it);
    tcase_add_test(t, an_abort_that_never_returns_cannot_keep_the_process);
    tcase_add_test(t, a_peers_marker_ends_this_rank_with_a_record_and_the_peers_code);
    tcase_add_test(t, a_failed_ranks_abort_tells_the_others_and_returns);
    suite_add_tcase(s, t);
    int rc = check_main_run(s);
    scratch_dir_remove();
    return rc;
}
