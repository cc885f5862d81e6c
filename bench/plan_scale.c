/* How long `usp plan` takes as the world grows (issue 28, item 5): the planner
 * runs in loops (sweeps, fit searches), so a plan of W = 512 should take under
 * 10 s on the 2-core development machine and one of W = 4096 under 60 s.
 *
 * 1. The whole command, its fit search included (llama-7b at 1M tokens does
 *    not fit as it is, so every memory option tried is one more step):
 *      W = 8:    --world 8 --nodes 1 --ulysses 8 --ring 1
 *      W = 512:  --world 512 --nodes 64 --ulysses 8 --ring 64
 *      W = 4096: --world 4096 --nodes 512 --ulysses 32 --ring 128 (the split the
 *                70 s of issue 28 were measured on; --ulysses 8 --ring 512 is
 *                4096 x 512 x 32 ring steps, past the planner's cap however
 *                few ranks run)
 *    all on dgx-h100, wall and CPU seconds.
 * 2. The step alone at W = 8 and 512, every rank simulated (plan_run_sharing,
 *    share 1) beside one rank a Ulysses group (sim/mirrors.c), with their
 *    ratio and whether the step times are the same bits (test_plan_mirrors
 *    compares every figure).
 * Timings are of this machine and whatever else runs on it; nothing is
 * asserted. --quick: W = 8 only (a smoke run). */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/cpu_vectors.h"
#include "core/base/clock_seconds.h"
#include "plan/plan.h"
#include "sim/topology.h"
#include "tools/commands.h"

typedef struct scale_case {
    int world, nodes, ulysses, ring;
} scale_case;

static const scale_case cases[] = {{8, 1, 8, 1}, {512, 64, 8, 64}, {4096, 512, 32, 128}};

/* `usp plan` on case k, its report sent to /dev/null: wall and CPU seconds, or -1 when it failed. */
static int time_command(const scale_case *k, double *wall, double *cpu)
{
    char world[16], nodes[16], ulysses[16], ring[16];
    snprintf(world, sizeof world, "%d", k->world), snprintf(nodes, sizeof nodes, "%d", k->nodes);
    snprintf(ulysses, sizeof ulysses, "%d", k->ulysses), snprintf(ring, sizeof ring, "%d", k->ring);
    char *argv[] = {"usp", "plan", "--model", "llama-7b", "--seq", "1048576", "--world", world, "--nodes", nodes,
                    "--ulysses", ulysses, "--ring", ring, "--topology", "dgx-h100", NULL};
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    if (saved < 0 || !freopen("/dev/null", "w", stdout))
        return -1;
    double w0 = usp_clock_seconds(CLOCK_MONOTONIC), c0 = usp_clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
    int rc = cmd_plan((int)(sizeof argv / sizeof *argv) - 1, argv);
    *wall = usp_clock_seconds(CLOCK_MONOTONIC) - w0, *cpu = usp_clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    return rc;
}

/* One step of case k, `share` ranks a simulated rank (1: every rank): wall seconds and the step time. */
static usp_status time_step(const scale_case *k, int share, double *wall, double *step_s)
{
    usp_train_config c;
    usp_train_defaults(&c);
    USP_CHECK(usp_model_config_preset("llama-7b", &c.model));
    USP_CHECK(usp_mesh_shape_make(k->world, k->ulysses, k->ring, &c.shape));
    c.data = "passkey", c.seq_len = 1048576, c.batch = 1, c.steps = 1;
    sim_cost_model cost = {.dtype = USP_BF16};
    USP_CHECK(sim_topology_for_world("dgx-h100", k->nodes, k->world, &cost.topology));
    plan_result r;
    double w0 = usp_clock_seconds(CLOCK_MONOTONIC);
    USP_CHECK(plan_run_sharing(&c, &cost, NULL, share, &r));
    *wall = usp_clock_seconds(CLOCK_MONOTONIC) - w0, *step_s = r.step_time_s;
    plan_result_free(&r);
    return USP_OK;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int n = quick ? 1 : (int)(sizeof cases / sizeof *cases);
    printf("usp plan --model llama-7b --seq 1048576 --topology dgx-h100 (CPU: %s, %ld cores online)\n",
           bench_cpu_vectors(), sysconf(_SC_NPROCESSORS_ONLN));
    printf("%6s %6s %8s %6s %10s %10s\n", "world", "nodes", "ulysses", "ring", "wall s", "cpu s");
    for (int i = 0; i < n; i++) {
        double wall, cpu;
        int rc = time_command(&cases[i], &wall, &cpu);
        printf("%6d %6d %8d %6d ", cases[i].world, cases[i].nodes, cases[i].ulysses, cases[i].ring);
        if (rc == 0)
            printf("%10.2f %10.2f\n", wall, cpu);
        else
            printf("%10s (usp plan exited %d)\n", "failed", rc);
    }
    printf("\nthe step alone: every rank simulated vs one rank a Ulysses group (sim/mirrors.c)\n");
    printf("%6s %14s %14s %8s %16s\n", "world", "every rank s", "mirrored s", "ratio", "same step time");
    for (int i = 0; i < (quick ? 1 : 2); i++) {
        double full_wall, full_step, mirrored_wall, mirrored_step;
        if (time_step(&cases[i], 1, &full_wall, &full_step) != USP_OK ||
            time_step(&cases[i], PLAN_SHARE_EXACT, &mirrored_wall, &mirrored_step) != USP_OK) {
            printf("%6d failed: %s\n", cases[i].world, usp_error_message());
            return 1;
        }
        printf("%6d %14.2f %14.2f %8.1f %16s\n", cases[i].world, full_wall, mirrored_wall,
               mirrored_wall > 0 ? full_wall / mirrored_wall : 0, full_step == mirrored_step ? "yes" : "NO");
    }
    return 0;
}
