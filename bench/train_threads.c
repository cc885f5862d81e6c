/* bench/train --threads: `usp train`'s meshes at the default thread count beside one
 * thread, run in turn in this one process so that both see the same machine.
 *
 * The default must be the fast one (issue 29): on a small model the ranks' ops
 * are small, and a team of threads started for each costs more than it splits.
 * Per mesh, REPEATS rounds of (all threads, then one thread), each round
 * 1 warm-up step and TIMED steps timed by the trainer's records; the median
 * tokens/s of each, and their ratio, are printed. Reported, never asserted. */
#include "bench/train_threads.h"

#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/cpu_vectors.h"
#include "core/base/clock_seconds.h"
#include "core/train/train.h"
#include "sim/world.h"

#define REPEATS 5
#define TIMED 40

typedef struct mesh_case {
    const char *id, *command; /* the usp train line it stands for */
    int world, ulysses, ring;
    int64_t batch;
} mesh_case;

static const mesh_case cases[] = {
    {"ring4", "usp train --ring 4", 4, 1, 4, 16},
    {"hybrid", "usp train --world 8 --ulysses 2 --ring 2 --batch 8", 8, 2, 2, 8},
    {"ulysses4", "usp train (the default mesh)", 4, 4, 1, 16},
};

/* The arrival of the records of step 1 and of the last step. */
typedef struct window {
    double first, last;
    int64_t steps;
} window;

static void on_record(void *ctx, const usp_train_record *r)
{
    window *w = ctx;
    if (r->kind != USP_TRAIN_RECORD_STEP)
        return;
    if (r->step == 1)
        w->first = usp_wall_seconds();
    if (r->step == w->steps)
        w->last = usp_wall_seconds();
}

/* Tokens/s of TIMED steps of `m` (tiny model, N = 64, usp train's defaults), after one warm-up step. */
static usp_status tokens_per_s(const mesh_case *m, double *out)
{
    usp_train_config c;
    usp_train_defaults(&c);
    USP_CHECK(usp_model_config_preset("tiny", &c.model));
    USP_CHECK(usp_mesh_shape_make(m->world, m->ulysses, m->ring, &c.shape));
    window w = {.steps = 1 + TIMED};
    c.data = "passkey", c.seq_len = 64, c.batch = m->batch, c.steps = 1 + TIMED, c.log_every = 1, c.lr = 1e-2;
    c.eval_samples = 0, c.on_record = on_record, c.record_ctx = &w;
    sim_config sc = sim_config_default(m->world);
    sc.trace = 0; /* as usp train runs without --trace */
    sim_world *world = NULL;
    usp_train_result result = {.passkey_accuracy = -1};
    usp_train_run run = {.config = &c, .result = &result};
    usp_status s = sim_world_create(&sc, &world);
    if (s == USP_OK)
        s = sim_world_run(world, usp_train_rank, &run);
    sim_world_destroy(world);
    USP_CHECK(s);
    *out = (double)TIMED * (double)m->batch * (double)c.seq_len / (w.last - w.first);
    return USP_OK;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int bench_train_threads(int json)
{
    const int threads = omp_get_max_threads();
    const char *policy = getenv("OMP_WAIT_POLICY");
    policy = policy && *policy ? policy : "default";
    if (!json)
        printf("usp train's meshes (tiny, N = 64, sim), %d threads beside 1, in turn, median of %d rounds of %d "
               "steps; OMP_WAIT_POLICY %s; cpu vectors %s\n%-9s %-52s %12s %12s %7s\n", threads, REPEATS, TIMED,
               policy, bench_cpu_vectors(), "mesh", "stands for", "tokens/s", "1 thread", "ratio");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double all[REPEATS], one[REPEATS];
        for (int k = 0; k < REPEATS; k++) {
            usp_status s = tokens_per_s(&cases[i], &all[k]);
            omp_set_num_threads(1);
            if (s == USP_OK)
                s = tokens_per_s(&cases[i], &one[k]);
            omp_set_num_threads(threads);
            if (s != USP_OK) {
                fprintf(stderr, "train --threads: %s: %s\n", cases[i].id, usp_error_message());
                return (int)s;
            }
        }
        qsort(all, REPEATS, sizeof *all, by_value);
        qsort(one, REPEATS, sizeof *one, by_value);
        double a = all[REPEATS / 2], b = one[REPEATS / 2];
        if (!json) {
            printf("%-9s %-52s %12.0f %12.0f %7.2f\n", cases[i].id, cases[i].command, a, b, a / b);
            continue;
        }
        json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:s, s:s, s:f, s:f, s:f}", "bench", "train_threads", "id",
                              cases[i].id, "command", cases[i].command, "threads", threads, "wait_policy", policy,
                              "cpu_vectors", bench_cpu_vectors(), "tokens_per_s", a, "tokens_per_s_one_thread", b,
                              "ratio", a / b);
        char *text = json_dumps(j, JSON_COMPACT);
        if (text)
            puts(text);
        free(text);
        json_decref(j);
    }
    return 0;
}
