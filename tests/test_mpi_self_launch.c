/* usp starting its own processes under mpirun (runtimes/process/mpi_self_launch.h),
 * the parts that need no launch: the command line, its quoting, which mpirun
 * is found (USP_MPIRUN, PATH, the build's), the slot count, and the refusals
 * that come before any exec (the recursion guard, root without Open MPI's
 * consent). tests/mpi_test.sh runs the launch itself. No MPI call. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtimes/process/mpi_self_launch.h"
#include "core/runtime/launcher_env.h"
#include "tests/check_main.h"

static char *const typed[] = {"usp", "train", "--backend", "mpi", "--world", "2", "--data", "text:my file", NULL};
static const mpi_self_launch_request request = {.processes = 2, .backend = "mpi", .count_option = "--world",
                                                .argv = typed};

/* A directory holding an executable `mpirun` (a script that fails), for PATH and USP_MPIRUN. */
static char fake_dir[64], fake_mpirun[128];

static void make_fake_mpirun(void)
{
    snprintf(fake_dir, sizeof fake_dir, "/tmp/usp-self-launch-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(fake_dir));
    snprintf(fake_mpirun, sizeof fake_mpirun, "%s/mpirun", fake_dir);
    FILE *f = fopen(fake_mpirun, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\nexit 99\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(fake_mpirun, 0755), 0);
}

static void remove_fake_mpirun(void)
{
    unlink(fake_mpirun);
    rmdir(fake_dir);
}

START_TEST(command_puts_mpirun_in_front_of_the_same_arguments)
{
    char **cmd;
    ck_assert_int_eq(mpi_self_launch_command("/usr/bin/mpirun", "/opt/usp", 4, 1, typed, &cmd), USP_OK);
    const char *want[] = {"/usr/bin/mpirun", "-np", "4", "--oversubscribe", "/opt/usp", "train", "--backend", "mpi",
                          "--world", "2", "--data", "text:my file", NULL};
    for (size_t i = 0; want[i]; i++)
        ck_assert_str_eq(cmd[i], want[i]);
    ck_assert_ptr_null(cmd[12]);
    free(cmd);
    ck_assert_int_eq(mpi_self_launch_command("mpirun", "/opt/usp", 2, 0, typed, &cmd), USP_OK);
    ck_assert_str_eq(cmd[3], "/opt/usp"); /* no --oversubscribe */
    free(cmd);
}
END_TEST

START_TEST(quote_keeps_plain_words_and_quotes_the_rest)
{
    char *const args[] = {"mpirun", "-np", "2", "text:my file", "it's", "", "a=b,c:d/e.f@g%", NULL};
    char line[256];
    mpi_self_launch_quote(args, line, sizeof line);
    ck_assert_str_eq(line, "mpirun -np 2 'text:my file' 'it'\\''s' '' a=b,c:d/e.f@g%");
}
END_TEST

START_TEST(usp_mpirun_is_the_choice_and_a_missing_one_is_refused)
{
    make_fake_mpirun();
    char path[PATH_MAX];
    setenv(MPI_SELF_LAUNCH_MPIRUN, fake_mpirun, 1);
    setenv("PATH", "/nonexistent", 1);
    ck_assert_int_eq(mpi_self_launch_find_mpirun(&request, path, sizeof path), USP_OK);
    ck_assert_str_eq(path, fake_mpirun);
    setenv(MPI_SELF_LAUNCH_MPIRUN, "/nonexistent/mpirun", 1);
    setenv("PATH", fake_dir, 1); /* the user's choice is the only one tried */
    ck_assert_int_eq(mpi_self_launch_find_mpirun(&request, path, sizeof path), USP_ERR_CONFIG);
    const char *m = usp_error_message();
    ck_assert_ptr_nonnull(strstr(m, "--backend mpi --world 2: usp starts its 2 processes"));
    ck_assert_ptr_nonnull(strstr(m, "USP_MPIRUN=/nonexistent/mpirun is not an executable file"));
    ck_assert_ptr_nonnull(strstr(m, "apt-get install openmpi-bin"));
    ck_assert_ptr_nonnull(strstr(m, "mpirun -np 2 usp train --backend mpi --world 2 --data 'text:my file'"));
    ck_assert_ptr_nonnull(strstr(m, "srun -n 2 usp train"));
    unsetenv(MPI_SELF_LAUNCH_MPIRUN);
    remove_fake_mpirun();
}
END_TEST

START_TEST(path_comes_before_the_build_mpirun)
{
    make_fake_mpirun();
    char path[PATH_MAX], dirs[256];
    unsetenv(MPI_SELF_LAUNCH_MPIRUN);
    snprintf(dirs, sizeof dirs, "/nonexistent:%s:/usr/bin", fake_dir);
    setenv("PATH", dirs, 1);
    ck_assert_int_eq(mpi_self_launch_find_mpirun(&request, path, sizeof path), USP_OK);
    ck_assert_str_eq(path, fake_mpirun);
    setenv("PATH", "/nonexistent", 1); /* then the build's, when it is there */
    usp_status s = mpi_self_launch_find_mpirun(&request, path, sizeof path);
    if (s == USP_OK)
        ck_assert_int_eq(access(path, X_OK), 0);
    else
        ck_assert_ptr_nonnull(strstr(usp_error_message(), "found no mpirun (none on PATH"));
    remove_fake_mpirun();
}
END_TEST

START_TEST(needed_only_for_more_than_one_rank_without_a_launcher)
{
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
    ck_assert_int_eq(mpi_self_launch_needed(1), 0);
    ck_assert_int_eq(mpi_self_launch_needed(2), 1);
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) { /* each launcher's own variable says "launched" */
        setenv(vars[i], "8", 1);
        ck_assert_int_eq(mpi_self_launch_needed(8), 0);
        const char *var = NULL;
        ck_assert_int_eq(usp_launcher_processes(&var), 8);
        ck_assert_str_eq(var, vars[i]);
        unsetenv(vars[i]);
    }
    /* a Slurm batch script has SLURM_NTASKS without srun: no launcher started this process */
    setenv("SLURM_NTASKS", "8", 1);
    ck_assert_int_eq(mpi_self_launch_needed(8), 1);
    unsetenv("SLURM_NTASKS");
}
END_TEST

START_TEST(slots_are_at_least_one_and_at_most_the_cpus)
{
    int slots = mpi_self_launch_slots();
    ck_assert_int_ge(slots, 1);
    ck_assert_int_le(slots, (int)sysconf(_SC_NPROCESSORS_ONLN));
}
END_TEST

START_TEST(a_launched_process_never_launches_again)
{
    make_fake_mpirun();
    setenv(MPI_SELF_LAUNCH_MPIRUN, fake_mpirun, 1); /* were the guard to fail, this exec would end the test */
    setenv(MPI_SELF_LAUNCH_MARKER, "1", 1);
    ck_assert_int_eq(mpi_self_launch(&request), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "started by usp's own mpirun (USP_SELF_LAUNCHED is set)"));
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "not launching again"));
    unsetenv(MPI_SELF_LAUNCH_MARKER);
    unsetenv(MPI_SELF_LAUNCH_MPIRUN);
    remove_fake_mpirun();
}
END_TEST

START_TEST(root_needs_open_mpi_consent_in_the_environment)
{
    if (geteuid() != 0) /* as another user the launch would go ahead: nothing to refuse here */
        return;
    make_fake_mpirun();
    setenv(MPI_SELF_LAUNCH_MPIRUN, fake_mpirun, 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    unsetenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM");
    ck_assert_int_eq(mpi_self_launch(&request), USP_ERR_CONFIG);
    const char *m = usp_error_message();
    ck_assert_ptr_nonnull(strstr(m, "Open MPI refuses to run as root"));
    ck_assert_ptr_nonnull(strstr(m, "set OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"));
    ck_assert_ptr_null(getenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")); /* never set for the user */
    unsetenv("OMPI_ALLOW_RUN_AS_ROOT");
    unsetenv(MPI_SELF_LAUNCH_MPIRUN);
    remove_fake_mpirun();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mpi_self_launch");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, command_puts_mpirun_in_front_of_the_same_arguments);
    tcase_add_test(tc, quote_keeps_plain_words_and_quotes_the_rest);
    tcase_add_test(tc, usp_mpirun_is_the_choice_and_a_missing_one_is_refused);
    tcase_add_test(tc, path_comes_before_the_build_mpirun);
    tcase_add_test(tc, needed_only_for_more_than_one_rank_without_a_launcher);
    tcase_add_test(tc, slots_are_at_least_one_and_at_most_the_cpus);
    tcase_add_test(tc, a_launched_process_never_launches_again);
    tcase_add_test(tc, root_needs_open_mpi_consent_in_the_environment);
    suite_add_tcase(s, tc);
    return check_main_run(s);
}
