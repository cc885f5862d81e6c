/* The `usp` command: parses the sub-command and hands over to it. Thin on
 * purpose: everything it runs lives in core/, the runtimes (sim/, runtimes/) and the compute backends. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/registry/compute_backends.h"
#include "tools/commands.h"
#include "tools/runtime_registry.h"
#include "usp_version.h" /* USP_COMMIT, written at build time (tools/version.cmake) */

#define USP_STRING(x) #x
#define USP_NUMBER(x) USP_STRING(x)
#ifdef __clang__ /* __clang_version__ may carry a trailing space and the vendor's words */
#define USP_COMPILER "clang " USP_NUMBER(__clang_major__) "." USP_NUMBER(__clang_minor__) "." \
    USP_NUMBER(__clang_patchlevel__)
#else
#define USP_COMPILER "gcc " __VERSION__
#endif

static void print_help(FILE *out)
{
    fprintf(out,
            "usp %s: train transformers on very long sequences with Ulysses sequence parallelism\n"
            "(and Ring attention), on a simulated GPU cluster or on real GPUs.\n\n"
            "usage: usp COMMAND [options]\n\n"
            "commands:\n"
            "  train      train a transformer with sequence parallelism (the main job)\n"
            "  eval       evaluate a checkpoint (loss, passkey accuracy)\n"
            "  generate   generate tokens from a checkpoint (greedy or sampled; a passkey prompt by default)\n"
            "  plan       one step on shapes only: memory per rank, time per step, MFU, best U x R split\n"
            "  selftest   run a communication schedule shaped like one training step, checked\n"
            "  viz        draw the schedule of one attention layer (DOT, SVG, PNG, PDF; Chrome trace)\n"
            "  postmortem explain a run that hung or lost a rank, from its ranks' flight records\n"
            "  calibrate  measure this machine's collectives and kernels; write a topology for plan\n\n"
            "usp COMMAND --help (or usp help COMMAND) explains a command. usp --version prints the version.\n"
            "exit codes: 0 ok, 1 runtime failure, 2 bad usage, 3 deadlock or collective mismatch,\n"
            "4 a rank failed, 5 plan --require-fit and the step does not fit, 130 or 143 train stopped by\n"
            "SIGINT or SIGTERM (saved with --save).\n",
            USP_VERSION);
    char runtimes[512], backends[512];
    runtime_registry_describe(runtimes, sizeof runtimes);
    usp_compute_backends_describe(backends, sizeof backends);
    fprintf(out, "runtimes, where the ranks run (--backend): %s.\ncompute backends, what computes a rank's ops: %s "
            "(meta: --meta; the others: --sim-compute under the sim runtime).\n", runtimes, backends);
}

/* libgomp reads OMP_WAIT_POLICY when it loads, before main: by default its idle
 * threads spin, and on a shared 2-core machine a spinning pool takes the cores
 * other work needs (measured: a training run 13x slower beside one other
 * process, and no slower alone). So unless the user chose a policy, run again
 * with passive waiting. */
static void prefer_passive_openmp(char **argv)
{
    if (getenv("OMP_WAIT_POLICY"))
        return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv); /* returns only when it fails: then go on as we are */
}

/* Runs the command argv[1] names; its exit code. */
static int run_command(int argc, char **argv)
{
    if (argc < 2) {
        print_help(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "help") == 0 && argc == 3 && strcmp(argv[2], "help") != 0) { /* usp help CMD: usp CMD --help */
        char *help_argv[] = {argv[0], argv[2], "--help", NULL};
        return run_command(3, help_argv);
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        print_help(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) { /* what a bug report needs: which code, built how, able to run what */
        char runtimes[512], backends[512];
        runtime_registry_describe(runtimes, sizeof runtimes);
        usp_compute_backends_describe(backends, sizeof backends);
        printf("usp %s (commit %s, %s build, %s)\nruntimes: %s\ncompute backends: %s\n", USP_VERSION, USP_COMMIT,
               *USP_BUILD_TYPE ? USP_BUILD_TYPE : "default", USP_COMPILER, runtimes, backends);
        return 0;
    }
    if (strcmp(cmd, "selftest") == 0)
        return cmd_selftest(argc, argv);
    if (strcmp(cmd, "viz") == 0)
        return cmd_viz(argc, argv);
    if (strcmp(cmd, "train") == 0 || strcmp(cmd, "eval") == 0)
        return cmd_train(argc, argv);
    if (strcmp(cmd, "generate") == 0)
        return cmd_generate(argc, argv);
    if (strcmp(cmd, "plan") == 0)
        return cmd_plan(argc, argv);
    if (strcmp(cmd, "postmortem") == 0)
        return cmd_postmortem(argc, argv);
    if (strcmp(cmd, "calibrate") == 0)
        return cmd_calibrate(argc, argv);
    fprintf(stderr, "usp: unknown command '%s'; see usp --help\n", cmd);
    return 2;
}

int main(int argc, char **argv)
{
    prefer_passive_openmp(argv);
    int code = run_command(argc, argv);
    /* Output that never reached its file (a full disk, /dev/full, a quota)
     * is a failed command: stdout is buffered, so the error shows only here. */
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "usp%s%s: could not write the output to stdout: %s\n", argc > 1 ? " " : "",
                argc > 1 ? argv[1] : "", errno ? strerror(errno) : "write error");
        return code != 0 ? code : 1;
    }
    return code;
}
