/* The watchdog's poll hook (runtimes/process/mpi_watchdog.h), on the CPU: what
 * the nccl runtime adds to the watchdog the mpi runtime shares. A call that
 * only enqueues leaves its flight record entry posted (its transport
 * completes it later); a poll that reports a hang ends the process with
 * exit 3 and writes the record with reason "timeout", one that reports an
 * error exits 4 ("failed"); a poll cleared before it fires never does. Each
 * case runs in a child process (the watchdog ends its process). No MPI call. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtimes/process/mpi_watchdog.h"
#include "tests/check_main.h"
#include "tests/harness.h"

static int ticks;

/* Fires at its third tick with the status its context names. */
static usp_status poll_fires(void *ctx, double timeout_s, char *why, size_t why_size)
{
    (void)timeout_s;
    if (++ticks < 3)
        return USP_OK;
    snprintf(why, why_size, "test poll: call not complete on the device");
    return *(const usp_status *)ctx;
}

static usp_flight_recorder *recorder_with_world(void)
{
    usp_flight_recorder *r = NULL;
    const int world[] = {0, 1};
    ck_assert_int_eq(usp_flight_recorder_create(0, 2, 0, &r), USP_OK);
    ck_assert_int_eq(usp_flight_recorder_add_group(r, "world", 2, world, 0), USP_OK);
    return r;
}

static char *json_of(usp_flight_recorder *r)
{
    char *json = NULL;
    ck_assert_int_eq(usp_flight_recorder_to_json(r, "exit", &json), USP_OK);
    return json;
}

START_TEST(an_enqueued_call_stays_posted_until_its_transport_completes_it)
{
    usp_flight_recorder *r = recorder_with_world();
    mpi_watchdog *w = NULL;
    ck_assert_int_eq(mpi_watchdog_start(0, 2, 600, NULL, r, &w), USP_OK);
    usp_comm_fingerprint fp = {.op = USP_OP_ALL_REDUCE, .dtype = USP_F32, .count = 4, .peer = -1, .recv_peer = -1,
                               .group = "world", .site = {"test.c", 1}};
    uint64_t entry = mpi_watchdog_enter(w, &fp, 1.0);
    ck_assert_uint_gt(entry, 0);
    mpi_watchdog_leave(w, 1.5, USP_OK, 0); /* enqueued only */
    char *json = json_of(r);
    ck_assert_msg(strstr(json, "\"posted\"") && !strstr(json, "\"completed\": 1.5"), "%s", json);
    free(json);
    usp_flight_recorder_completed(r, entry, 2.0); /* the device ran it */
    json = json_of(r);
    ck_assert_msg(strstr(json, "\"state\": \"completed\""), "%s", json);
    free(json);
    mpi_watchdog_stop(w);
    usp_flight_recorder_destroy(r);
}
END_TEST

/* The exit status of a child whose watchdog polls `poll_status`, and the dump it left in dir. */
static int run_child(usp_status poll_status, int clear_first, const char *dir)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        usp_flight_recorder *r = recorder_with_world();
        mpi_watchdog *w = NULL;
        if (mpi_watchdog_start(0, 2, 600, dir, r, &w) != USP_OK)
            _exit(90);
        static usp_status status;
        status = poll_status;
        mpi_watchdog_set_poll(w, poll_fires, &status);
        if (clear_first)
            mpi_watchdog_set_poll(w, NULL, NULL);
        sleep(2); /* 20 ticks: the poll fires at its third */
        mpi_watchdog_stop(w);
        _exit(0);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static char *read_dump(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/rank-0.usp-flight.json", dir);
    char *text = harness_read_file(path, NULL);
    remove(path);
    return text;
}

START_TEST(a_poll_that_reports_a_hang_or_an_error_ends_the_process_with_its_record)
{
    char dir[] = "/tmp/usp-watchdog-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(run_child(USP_ERR_COLLECTIVE, 0, dir), 3);
    char *dump = read_dump(dir);
    ck_assert_ptr_nonnull(dump);
    ck_assert_msg(strstr(dump, "\"reason\": \"timeout\""), "%s", dump);
    free(dump);
    ck_assert_int_eq(run_child(USP_ERR_RANK_FAILED, 0, dir), 4);
    dump = read_dump(dir);
    ck_assert_ptr_nonnull(dump);
    ck_assert_msg(strstr(dump, "\"reason\": \"failed\""), "%s", dump);
    free(dump);
    ck_assert_int_eq(run_child(USP_ERR_COLLECTIVE, 1, dir), 0); /* cleared: never polled */
    ck_assert_ptr_null(read_dump(dir));
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mpi_watchdog");
    TCase *t = tcase_create("mpi_watchdog");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, an_enqueued_call_stays_posted_until_its_transport_completes_it);
    tcase_add_test(t, a_poll_that_reports_a_hang_or_an_error_ends_the_process_with_its_record);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
