/* Benchmark of a whole training step (core/train/train.c) on the simulator.
 *
 * For each configuration (model, sequence length N, batch B, world W = Ulysses U)
 * it prints wall seconds per step, tokens/s and model FLOP/s beside OpenBLAS
 * sgemm FLOP/s measured between the very steps it divides: the machine is
 * shared and its speed drifts (two-fold within a minute here), so only a ratio
 * taken side by side means anything. Figures are reported, never asserted.
 *
 * Two FLOP counts, both printed:
 * - "ops": what the compute ops of one step reported to the cost sink, summed
 *   over the ranks. core/ops/op_kinds.c derives them from shapes (GEMM 2mnk; causal
 *   flash attention 4 D per visible query-key pair forward, 2.5x that backward;
 *   a few flops per element for norms, activations, loss, AdamW). They are read
 *   back from the simulator's trace, which keeps one compute span per op, and
 *   checked against a closed form of the GEMM and attention FLOPs of the model
 *   (a mismatch fails the run: the --quick smoke test guards the counting).
 * - "6P+attn": the convention of llm.c and nanoGPT (PaLM, appendix B):
 *   6 P per token for the weights (P every parameter, a tied embedding once)
 *   plus 12 L C N per token for the attention scores and values at sequence
 *   length N. It ignores the causal mask, so it credits twice the attention work
 *   the causal kernels do: at long N, where attention dominates, it reads high.
 *
 * Timing: the trainer hands a record to a callback here after every step
 * (usp_train_config.on_record), timestamped as it arrives. One warm-up step, then K timed
 * steps: the time from the record of step 1 to that of step 1 + K. Setup (weight
 * initialisation, the first touch of every buffer) and the warm-up fall outside
 * the window. The sgemm reference runs inside the same callback, once at every
 * record from step 1 on (so K + 1 calls bracket and interleave the K steps),
 * and its time is taken out of the window; the figure is their mean. With W = 4 the four ranks take turns on the same cores, so the
 * wall time of a step is the work of all four: FLOP/s are summed over ranks.
 * Threads: OMP_NUM_THREADS; OMP_WAIT_POLICY is printed with the figures. */
#include <cblas.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/cpu_attention.h"
#include "bench/cpu_vectors.h"
#include "bench/train_threads.h"
#include "core/base/clock_seconds.h"
#include "core/train/train.h"
#include "sim/world.h"

#define MIB (1024.0 * 1024.0)
#define MAX_STEPS 64
#define SGEMM_N 2048

typedef struct bench_config {
    const char *id;    /* for --only */
    const char *model; /* preset */
    int64_t seq, batch;
    int world, ulysses;
    int timed;         /* timed steps after the warm-up (default) */
} bench_config;

static const bench_config full_configs[] = {
    {"tiny-n4096-w1", "tiny", 4096, 1, 1, 1, 3},
    {"tiny-n4096-w4", "tiny", 4096, 1, 4, 4, 3},
    {"tiny-n16384-w1", "tiny", 16384, 1, 1, 1, 1},
    {"tiny-n16384-w4", "tiny", 16384, 1, 4, 4, 1},
    {"gpt2-124m-b4-n1024-w1", "gpt2-124m", 1024, 4, 1, 1, 1},
    {"gpt2-124m-b4-n1024-w4", "gpt2-124m", 1024, 4, 4, 4, 1},
    {"gpt2-124m-b4-n1024-w4-dp2", "gpt2-124m", 1024, 4, 4, 2, 1}, /* DP 2 x U 2 */
};

static const bench_config quick_configs[] = {
    {"tiny-n1024-w1", "tiny", 1024, 1, 1, 1, 2},
    {"tiny-n1024-w4", "tiny", 1024, 1, 4, 4, 2},
    {"tiny-n1024-w4-dp2", "tiny", 1024, 2, 4, 2, 2}, /* DP 2 x U 2: the gradients cross both groups' ranks */
};

typedef struct bench_opts {
    int json, quick, timed; /* timed: 0 = each configuration's default */
    int threads;            /* --threads: usp train's meshes at all threads beside one (train_threads.c) */
    const char *only;
} bench_opts;

typedef struct bench_result {
    int64_t params, timed;
    double step_s, sim_step_s;          /* wall and modelled seconds per step */
    double ops_flops, gemm_flops, attention_flops; /* per step, summed over ranks */
    double conv_flops;                  /* 6 P tokens + 12 L C N tokens */
    double sgemm_gflops;                /* mean of the calls between the timed steps */
    double sgemm_min, sgemm_max;
    double peak_bytes;                  /* the largest rank's peak */
    int grad_collectives;               /* rank 0's gradient collectives in the last step */
    double grad_bytes;                  /* the gradient bytes they took in (one pass: 4 P) */
    double host_waits;                  /* rank 0's host waits per step (usp_train_result.host_waits_per_step) */
} bench_result;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: train [--json] [--quick] [--only ID] [--timed K] [--help]\n"
            "       train --threads [--json]\n"
            "\n"
            "One training step (core/train/train.c: forward, loss, backward, gradient all-reduce,\n"
            "AdamW) on the simulated cluster (sim, cpu backend, passkey data), for\n"
            "  tiny at N = 4096 and 16384 (batch 1), and gpt2-124m at batch 4, N = 1024,\n"
            "each on one rank (W = 1) and on W = 4 ranks with Ulysses U = 4 (and gpt2-124m on\n"
            "W = 4 = DP 2 x U 2).\n"
            "Per configuration: one warm-up step, then K timed steps (3 at N = 4096, else 1).\n"
            "Beside each, OpenBLAS sgemm %d^3 on all threads: the mean of K + 1 calls made\n"
            "between the steps, one after each record from the warm-up's on (their time is\n"
            "not counted in the steps'). Target, reported only: ops/sgemm >= 0.40.\n"
            "\n"
            "FLOPs per step, both summed over ranks:\n"
            "  ops      what the ops reported to the cost sink (core/ops/op_kinds.c: GEMM 2mnk, causal\n"
            "           attention 4 D per visible pair forward and 2.5x that backward,\n"
            "           elementwise ops a few per element); the honest count.\n"
            "  6P+attn  llm.c / nanoGPT / PaLM convention: (6 P + 12 L C N) per token,\n"
            "           P = all parameters; ignores the causal mask (2x the attention work).\n"
            "\n"
            "  --json     one JSON object per configuration instead of the table\n"
            "  --quick    tiny at N = 1024 on W = 1, W = 4 and DP 2 x U 2, 2 timed steps (a smoke run)\n"
            "  --threads  instead: usp train's meshes (ring 4, the README's hybrid, the default\n"
            "             Ulysses 4; tiny, N = 64) at all threads beside one thread, in turn,\n"
            "             median of 5 rounds of 40 steps, and the ratio (the default must be fast);\n"
            "             under OMP_WAIT_POLICY passive, as usp runs, unless the environment sets it\n"
            "  --only ID  run only the configurations whose id contains ID (e.g. gpt2, n16384-w4)\n"
            "  --timed K  timed steps per configuration (1 to %d)\n"
            "  --help     this text\n"
            "\n"
            "Configuration ids: tiny-n4096-w1, tiny-n4096-w4, tiny-n16384-w1, tiny-n16384-w4,\n"
            "  gpt2-124m-b4-n1024-w1, gpt2-124m-b4-n1024-w4, gpt2-124m-b4-n1024-w4-dp2\n"
            "  (--quick: tiny-n1024-w1, -w4, -w4-dp2).\n"
            "\n"
            "JSON fields, per configuration: bench (\"train\"), id, model, seq, batch, world,\n"
            "  ulysses, ring, threads, wait_policy (OMP_WAIT_POLICY or \"default\"), cpu_vectors,\n"
            "  attention_isa (the attention kernels' path: avx512, avx2, sse2; USP_CPU_ISA), params,\n"
            "  tokens_per_step, warmup_steps, timed_steps,\n"
            "  step_s (wall seconds per step), tokens_per_s, sim_step_s (modelled seconds per\n"
            "  step on the default cluster), ops_flops_per_step, ops_gemm_share and\n"
            "  ops_attention_share (fractions of ops_flops_per_step), conv_flops_per_step\n"
            "  (6P+attn), ops_gflops, conv_gflops (per second of wall time), sgemm_gflops\n"
            "  (the mean), sgemm_min_gflops, sgemm_max_gflops (the spread of the K + 1 calls),\n"
            "  ops_ratio (= ops_gflops / sgemm_gflops), conv_ratio, peak_bytes (largest rank),\n"
            "  grad_collectives_per_step and grad_bytes_per_step (rank 0's gradient all-reduces and\n"
            "  the bytes they take in), grad_passes (= grad_bytes_per_step / 4 P: 1 is one pass),\n"
            "  host_waits_per_step (rank 0's host waits for the device a step, counted on the simulator's streams).\n"
            "Threads: OMP_NUM_THREADS (the OpenMP build of OpenBLAS shares them).\n",
            SGEMM_N, MAX_STEPS - 1);
}

/* ---- the sgemm reference ------------------------------------------------- */

typedef struct sgemm_ref {
    float *a, *b, *c; /* [SGEMM_N, SGEMM_N] each */
} sgemm_ref;

static int sgemm_ref_make(sgemm_ref *r)
{
    const size_t nn = (size_t)SGEMM_N * SGEMM_N;
    r->a = malloc(nn * sizeof(float)), r->b = malloc(nn * sizeof(float)), r->c = malloc(nn * sizeof(float));
    if (!r->a || !r->b || !r->c)
        return 0;
    for (size_t i = 0; i < nn; i++) /* any values away from denormals will do */
        r->a[i] = (float)(i % 13) * 0.1f - 0.6f, r->b[i] = (float)(i % 7) * 0.2f - 0.6f;
    return 1;
}

/* GFLOP/s of one SGEMM_N^3 sgemm on all threads; *seconds (may be NULL) its time. */
static double sgemm_ref_gflops(const sgemm_ref *r, double *seconds)
{
    double t = usp_wall_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, SGEMM_N, SGEMM_N, SGEMM_N, 1.0f, r->a, SGEMM_N, r->b,
                SGEMM_N, 0.0f, r->c, SGEMM_N);
    t = usp_wall_seconds() - t;
    if (seconds)
        *seconds = t;
    return 2.0 * SGEMM_N * (double)SGEMM_N * SGEMM_N / t / 1e9;
}

/* ---- the timestamped record stream ---------------------------------------- */

/* The trainer's output stream: each complete line is parsed as it arrives and,
 * when it is a per-step record, the wall time of its arrival is kept and the
 * sgemm reference is run (the other ranks wait meanwhile: one runs at a time).
 * wall[] is on a clock that stops during those sgemm calls. */
typedef struct step_log {
    const sgemm_ref *ref;
    double wall[MAX_STEPS + 1];  /* [k]: when the record of step k arrived (0: not yet) */
    double sim[MAX_STEPS + 1];   /* [k]: its clock_s (modelled: bench runs the simulator) */
    double sgemm[MAX_STEPS + 1]; /* [k]: GFLOP/s of the sgemm run right after it */
    double paused;               /* seconds spent in those sgemm calls so far */
} step_log;

/* The trainer's on_record: the moment each step ended, beside an sgemm run then. */
static void step_log_record(void *ctx, const usp_train_record *record)
{
    step_log *l = ctx;
    double now = usp_wall_seconds();
    if (record->kind != USP_TRAIN_RECORD_STEP || record->step < 1 || record->step > MAX_STEPS)
        return;
    l->wall[record->step] = now - l->paused;
    l->sim[record->step] = record->clock_s;
    l->sgemm[record->step] = sgemm_ref_gflops(l->ref, NULL);
    l->paused += usp_wall_seconds() - now; /* the sgemm: all of it is off the steps' clock */
}

/* ---- one configuration ----------------------------------------------------- */

/* FLOPs of every compute span in the trace, by kind, divided by `steps`. */
static void count_flops(const usp_trace_t *trace, int64_t steps, bench_result *r)
{
    double all = 0, gemm = 0, attention = 0;
    for (size_t i = 0; trace && i < usp_trace_compute_count(trace); i++) {
        const usp_trace_event *e = usp_trace_compute_at(trace, i);
        all += e->flops;
        if (!strcmp(e->name, "gemm"))
            gemm += e->flops;
        else if (!strncmp(e->name, "attention_", 10))
            attention += e->flops;
    }
    r->ops_flops = all / (double)steps, r->gemm_flops = gemm / (double)steps;
    r->attention_flops = attention / (double)steps;
}

/* The FLOPs one step must report, in closed form, as an independent check of
 * the counting (summed over ranks, whatever W: each rank holds B N / W rows).
 * GEMM: the linear layers forward, 2 T_tot in out each (q, k, v, o, up [F or
 * 2F for SwiGLU's gate and up], down, lm_head), and twice that backward (dx
 * and dW). Attention: 4 D H per visible pair forward, N (N + 1) / 2 causal
 * pairs per sequence and layer, 2.5x that backward. */
static void closed_form_flops(const usp_model_config *m, int64_t seq, int64_t batch, double *gemm, double *attention)
{
    const double T = (double)batch * (double)seq, C = (double)m->d_model, F = (double)m->d_ff;
    const double D = C / (double)m->n_head, qd = (double)m->n_head * D, kd = (double)m->n_kv_head * D;
    const double up = m->mlp == USP_MLP_SWIGLU ? 2 * F : F;
    const double layer = C * (qd + 2 * kd) + qd * C + C * up + F * C;
    *gemm = 3.0 * 2.0 * T * ((double)m->n_layer * layer + C * (double)m->vocab);
    const double pairs = (double)seq * (double)(seq + 1) / 2.0;
    *attention = 3.5 * 4.0 * D * (double)m->n_head * (double)m->n_layer * (double)batch * pairs;
}

/* USP_OK when the reported GEMM and attention FLOPs match the closed form to 1e-9 relative. */
static usp_status check_flops(const bench_config *bc, const usp_model_config *m, const bench_result *r)
{
    double gemm, attention;
    closed_form_flops(m, bc->seq, bc->batch, &gemm, &attention);
    if (fabs(r->gemm_flops - gemm) > 1e-9 * gemm || fabs(r->attention_flops - attention) > 1e-9 * attention)
        return usp_error(USP_ERR_RUNTIME, "%s: the ops reported %.6e GEMM and %.6e attention FLOPs per step, the "
                         "closed form gives %.6e and %.6e: the FLOP counting (core/ops/op_kinds.c, the trace) or the "
                         "step changed", bc->id, r->gemm_flops, r->attention_flops, gemm, attention);
    return USP_OK;
}

/* Trains 1 + timed steps of `bc` on the simulator, timing them beside `ref`; fills r. */
static usp_status run_config(const bench_config *bc, int timed, const sgemm_ref *ref, bench_result *r)
{
    usp_train_config c;
    usp_train_defaults(&c);
    USP_CHECK(usp_model_config_preset(bc->model, &c.model));
    USP_CHECK(usp_mesh_shape_make(bc->world, bc->ulysses, 1, &c.shape));
    c.data = "passkey", c.seq_len = bc->seq, c.batch = bc->batch, c.steps = 1 + timed, c.log_every = 1;
    c.eval_samples = 0;
    step_log *log = calloc(1, sizeof *log);
    if (!log)
        return usp_error(USP_ERR_RUNTIME, "out of memory for the step log");
    log->ref = ref;
    c.on_record = step_log_record, c.record_ctx = log;
    sim_config sc = sim_config_default(bc->world); /* trace on: its compute spans carry the FLOPs */
    sim_world *w = NULL;
    usp_train_result result = {.passkey_accuracy = -1};
    usp_train_run run = {.config = &c, .result = &result};
    usp_status s = sim_world_create(&sc, &w);
    if (s == USP_OK)
        s = sim_world_run(w, usp_train_rank, &run);
    if (s == USP_OK && (log->wall[1] == 0 || log->wall[1 + timed] == 0))
        s = usp_error(USP_ERR_RUNTIME, "the trainer gave no record for step 1 or %d (its records are how "
                      "steps are timed)", 1 + timed);
    if (s == USP_OK) {
        r->timed = timed;
        r->step_s = (log->wall[1 + timed] - log->wall[1]) / timed;
        r->sim_step_s = (log->sim[1 + timed] - log->sim[1]) / timed;
        r->sgemm_gflops = 0, r->sgemm_min = 1e300, r->sgemm_max = 0;
        for (int k = 1; k <= 1 + timed; k++) {
            r->sgemm_gflops += log->sgemm[k] / (1 + timed);
            r->sgemm_min = log->sgemm[k] < r->sgemm_min ? log->sgemm[k] : r->sgemm_min;
            r->sgemm_max = log->sgemm[k] > r->sgemm_max ? log->sgemm[k] : r->sgemm_max;
        }
        count_flops(sim_world_trace(w), 1 + timed, r);
        r->params = usp_model_config_param_count(&c.model);
        const double tokens = (double)bc->batch * (double)bc->seq;
        r->conv_flops = tokens * (6.0 * (double)r->params +
                                  12.0 * (double)(c.model.n_layer * c.model.d_model) * (double)bc->seq);
        r->grad_collectives = result.grad_collectives, r->grad_bytes = (double)result.grad_bytes;
        r->host_waits = result.host_waits_per_step;
        r->peak_bytes = 0;
        for (int i = 0; i < bc->world; i++)
            if ((double)sim_world_peak_bytes(w, i) > r->peak_bytes)
                r->peak_bytes = (double)sim_world_peak_bytes(w, i);
    } else {
        char why[USP_ERROR_MESSAGE_MAX]; /* usp_error writes the slot the message is in */
        snprintf(why, sizeof why, "%s", w && *sim_world_report(w) ? sim_world_report(w) : usp_error_message());
        s = usp_error(s, "%s: %s", bc->id, why);
    }
    sim_world_destroy(w);
    free(log);
    return s == USP_OK ? check_flops(bc, &c.model, r) : s;
}

/* ---- output ------------------------------------------------------------------ */

/* OMP_WAIT_POLICY as the run saw it: idle OpenMP threads spin (the default) or
 * sleep (passive); on a shared, oversubscribed machine this alone moves a step
 * several-fold, so every figure is printed with it. */
static const char *wait_policy(void)
{
    const char *p = getenv("OMP_WAIT_POLICY");
    return p && *p ? p : "default";
}

static void print_header(void)
{
    int bits = 0;
    const char *isa = cpu_attention_isa_name(&bits);
    printf("training step on the sim runtime (cpu backend, passkey data), %d threads, OMP_WAIT_POLICY %s; warm-up 1 step, "
           "then the timed steps; cpu vectors %s, attention kernels %s (%d-bit; USP_CPU_ISA picks)\n",
           omp_get_max_threads(), wait_policy(), bench_cpu_vectors(), isa, bits);
    printf("ops = FLOPs the ops reported (causal; attention backward = 2.5 x forward); 6P+attn = (6 P + 12 L C N) "
           "per token (llm.c/PaLM, non-causal)\n");
    printf("sgemm: OpenBLAS %d^3, mean of the calls between the steps of each row; target ops/sgemm >= 0.40\n\n",
           SGEMM_N);
    printf("grad: the gradient collectives of a step (rank 0) and the bytes they take in, in passes over the "
           "gradient (4 P bytes; 1 = each byte once)\n");
    printf("waits: host waits for the device per step, every step logged (the simulator's streams count them as a "
           "GPU's: the gradient norm, the loss and the peaks)\n\n");
    printf("%-22s %5s %8s %9s %9s %5s %5s %8s %8s %8s %6s %6s %9s %9s %5s %6s %5s\n", "config", "steps", "step s",
           "tokens/s", "ops GF", "gemm", "attn", "ops GF/s", "6P+a GF/s", "sgemm", "ops/sg", "6Pa/sg", "sim ms",
           "peak MiB", "grad", "passes", "waits");
}

static void print_row(const bench_config *bc, const bench_result *r, int json)
{
    const double tokens = (double)bc->batch * (double)bc->seq;
    const double ops_gf = r->ops_flops / r->step_s / 1e9, conv_gf = r->conv_flops / r->step_s / 1e9;
    if (json) {
        json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:i, s:i, s:i, s:i, s:I, s:I, s:i, s:I}", "bench", "train",
                              "id", bc->id, "model", bc->model, "seq", (json_int_t)bc->seq, "batch",
                              (json_int_t)bc->batch, "world", bc->world, "ulysses", bc->ulysses, "ring", 1,
                              "threads", omp_get_max_threads(), "params", (json_int_t)r->params, "tokens_per_step",
                              (json_int_t)(bc->batch * bc->seq), "warmup_steps", 1, "timed_steps",
                              (json_int_t)r->timed);
        json_object_set_new(j, "wait_policy", json_string(wait_policy()));
        json_object_set_new(j, "cpu_vectors", json_string(bench_cpu_vectors()));
        json_object_set_new(j, "attention_isa", json_string(cpu_attention_isa_name(NULL)));
        json_object_set_new(j, "step_s", json_real(r->step_s));
        json_object_set_new(j, "tokens_per_s", json_real(tokens / r->step_s));
        json_object_set_new(j, "sim_step_s", json_real(r->sim_step_s));
        json_object_set_new(j, "ops_flops_per_step", json_real(r->ops_flops));
        json_object_set_new(j, "ops_gemm_share", json_real(r->gemm_flops / r->ops_flops));
        json_object_set_new(j, "ops_attention_share", json_real(r->attention_flops / r->ops_flops));
        json_object_set_new(j, "conv_flops_per_step", json_real(r->conv_flops));
        json_object_set_new(j, "ops_gflops", json_real(ops_gf));
        json_object_set_new(j, "conv_gflops", json_real(conv_gf));
        json_object_set_new(j, "sgemm_gflops", json_real(r->sgemm_gflops));
        json_object_set_new(j, "sgemm_min_gflops", json_real(r->sgemm_min));
        json_object_set_new(j, "sgemm_max_gflops", json_real(r->sgemm_max));
        json_object_set_new(j, "ops_ratio", json_real(ops_gf / r->sgemm_gflops));
        json_object_set_new(j, "conv_ratio", json_real(conv_gf / r->sgemm_gflops));
        json_object_set_new(j, "peak_bytes", json_integer((json_int_t)r->peak_bytes));
        json_object_set_new(j, "grad_collectives_per_step", json_integer(r->grad_collectives));
        json_object_set_new(j, "grad_bytes_per_step", json_integer((json_int_t)r->grad_bytes));
        json_object_set_new(j, "grad_passes", json_real(r->grad_bytes / (4.0 * (double)r->params)));
        json_object_set_new(j, "host_waits_per_step", json_real(r->host_waits));
        char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        if (text)
            puts(text);
        free(text);
        json_decref(j);
    } else {
        printf("%-22s %5lld %8.3f %9.0f %9.1f %4.0f%% %4.0f%% %8.1f %9.1f %8.1f %6.2f %6.2f %9.3f %9.1f %5d %6.3f "
               "%5.2f\n",
               bc->id, (long long)r->timed, r->step_s, tokens / r->step_s, r->ops_flops / 1e9,
               100 * r->gemm_flops / r->ops_flops, 100 * r->attention_flops / r->ops_flops, ops_gf, conv_gf,
               r->sgemm_gflops, ops_gf / r->sgemm_gflops, conv_gf / r->sgemm_gflops, 1e3 * r->sim_step_s,
               r->peak_bytes / MIB, r->grad_collectives, r->grad_bytes / (4.0 * (double)r->params), r->host_waits);
    }
    fflush(stdout);
}

static int parse_options(int argc, char **argv, bench_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--quick")) {
            o->quick = 1;
        } else if (!strcmp(a, "--threads")) {
            o->threads = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--only") || !strcmp(a, "--timed")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "train: %s needs a value (e.g. %s)\n", a,
                        !strcmp(a, "--only") ? "--only gpt2" : "--timed 3");
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--only")) {
                o->only = v;
                continue;
            }
            char *end;
            long k = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || k < 1 || k > MAX_STEPS - 1) {
                fprintf(stderr, "train: --timed %s: expected a whole number of steps from 1 to %d\n", v,
                        MAX_STEPS - 1);
                return 2;
            }
            o->timed = (int)k;
        } else {
            fprintf(stderr, "train: unknown option '%s'; the options are --json, --quick, --threads, --only ID, --timed K "
                    "(see train --help)\n", a);
            return 2;
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    bench_opts o = {0};
    int code = parse_options(argc, argv, &o);
    if (code >= 0)
        return code;
    if (o.threads && !getenv("OMP_WAIT_POLICY")) { /* as usp runs (tools/usp.c): the threads' idle policy moves it */
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv); /* returns only when it fails: then measure as we are */
    }
    if (o.threads)
        return bench_train_threads(o.json);
    const bench_config *configs = o.quick ? quick_configs : full_configs;
    const size_t n = o.quick ? sizeof quick_configs / sizeof *quick_configs
                             : sizeof full_configs / sizeof *full_configs;
    size_t selected = 0;
    for (size_t i = 0; i < n; i++)
        selected += !o.only || strstr(configs[i].id, o.only) != NULL;
    if (selected == 0) {
        fprintf(stderr, "train: --only %s matches no configuration; the ids are listed by train --help\n", o.only);
        return 2;
    }
    sgemm_ref ref;
    if (!sgemm_ref_make(&ref)) {
        fprintf(stderr, "train: out of memory for the sgemm reference\n");
        return 1;
    }
    sgemm_ref_gflops(&ref, NULL); /* warm-up: OpenBLAS starts its threads and buffers */
    if (!o.json)
        print_header();
    for (size_t i = 0; i < n && code < 0; i++) {
        const bench_config *bc = &configs[i];
        if (o.only && !strstr(bc->id, o.only))
            continue;
        bench_result r = {0};
        usp_status s = run_config(bc, o.timed ? o.timed : bc->timed, &ref, &r);
        if (s != USP_OK) {
            fprintf(stderr, "train: %s\n", usp_error_message());
            code = (int)s;
            break;
        }
        print_row(bc, &r, o.json);
    }
    free(ref.a), free(ref.b), free(ref.c);
    return code < 0 ? 0 : code;
}
