/* The simulator's staged movement (sim/staged_move.c), the path of ranks whose
 * buffers are device memory (sim_config.device_memory), forced here on the cpu
 * backend (and on lazy: USP_TEST_BACKEND=lazy) so that it runs without a GPU:
 * every collective kind gives the bytes of the direct path and of a reference
 * written out here, the bytes a call leaves alone stay as they were, and
 * training gives the direct path's losses and weights bit for bit on U4, R4,
 * U2 x R2 and DP2 x U2 at ZeRO 3. With USP_TEST_BACKEND=cuda (a GPU machine) the
 * staged runs are the cuda backend's, checked against the reference and the cpu
 * backend's losses within 1e-5 relative. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "core/comm/comm.h"
#include "tests/check_main.h"
#include "tests/harness.h"

#define W 4
#define C 3        /* elements a block */
#define GAP 1      /* all_to_all_v: untouched elements after each received block */
#define TAIL 2     /* untouched elements after every receive region */
#define SENTINEL -7.0f

/* Where each call's result lands in a rank's record (floats). */
enum { A2A = 0, A2AV = A2A + W * C + TAIL, AG = A2AV + W * (C + GAP) + TAIL, RS = AG + W * C + TAIL,
       AR = RS + C + TAIL, AR_IN = AR + C + TAIL, BC = AR_IN + C + TAIL, SR = BC + C + TAIL, RECORD = SR + C + TAIL };

typedef struct movement_run {
    float out[W][RECORD]; /* every rank's receive regions with their tails, downloaded after the calls */
} movement_run;

static size_t v_count(int from, int to) { return (size_t)((from + to) % C + 1); }

/* A receive buffer of `n` + TAIL elements, every one SENTINEL. */
static usp_status sentinel_buffer(const usp_rank_ctx *ctx, size_t n, void **dev)
{
    float host[W * (C + GAP) + TAIL];
    for (size_t i = 0; i < n + TAIL; i++)
        host[i] = SENTINEL;
    return harness_upload(ctx, host, (n + TAIL) * sizeof(float), dev);
}

static usp_status filled(const usp_rank_ctx *ctx, size_t n, float (*value)(int rank, size_t i), void **dev)
{
    float host[W * C];
    for (size_t i = 0; i < n; i++)
        host[i] = value(ctx->rank, i);
    return harness_upload(ctx, host, n * sizeof(float), dev);
}

static float a2a_send(int rank, size_t i) { return (float)(1000 * rank + 10 * (int)(i / C) + (int)(i % C)); }
static float ag_send(int rank, size_t i) { return (float)(100 * rank + (int)i); }
static float rs_send(int rank, size_t i) { return (float)(rank + 10 * (int)(i / C) + 100 * (int)(i % C)); }
static float ar_send(int rank, size_t i) { return (float)(rank + 1 + (int)i); }
static float ar_in(int rank, size_t i) { return (float)((rank + 1) * (int)i) + 0.25f; }
static float bc_in(int rank, size_t i) { return rank == 2 ? 50.0f + (float)i : SENTINEL; }
static float sr_send(int rank, size_t i) { return (float)(7 * rank + (int)i); }

/* all_to_all_v: rank `from` sends v_count(from, j) elements to j, packed; j keeps them at j's block i of
 * C + GAP elements, so that GAP elements (at least) after each block are left alone. */
static usp_status all_to_all_v(const usp_rank_ctx *ctx, void *recv)
{
    size_t sc[W], so[W], rc[W], ro[W], at = 0;
    float host[W * C];
    for (int j = 0; j < W; j++) {
        sc[j] = v_count(ctx->rank, j), so[j] = at;
        for (size_t k = 0; k < sc[j]; k++)
            host[at + k] = (float)(1000 * ctx->rank + 10 * j + (int)k);
        at += sc[j];
        rc[j] = v_count(j, ctx->rank), ro[j] = (size_t)j * (C + GAP);
    }
    void *send;
    USP_CHECK(harness_upload(ctx, host, at * sizeof(float), &send));
    usp_status s = usp_comm_all_to_all_v(ctx->world, send, sc, so, recv, rc, ro, USP_F32, ctx->stream);
    usp_buffer_free(ctx->backend, send);
    return s;
}

/* Every collective kind and a ring sendrecv, one after the other; the receive regions downloaded at the end. */
static usp_status on_movement(const usp_rank_ctx *ctx, void *arg)
{
    movement_run *run = arg;
    const int n = W * C, next = (ctx->rank + 1) % W, prev = (ctx->rank + W - 1) % W;
    void *sends[6] = {0}, *recvs[8] = {0};
    const size_t sizes[8] = {n, W * (C + GAP) - GAP, n, C, C, C, C, C}; /* the receive regions, tails aside */
    usp_status s = USP_OK;
    for (int i = 0; i < 8 && s == USP_OK; i++)
        s = i == 5 ? filled(ctx, C + TAIL, ar_in, &recvs[i]) : i == 6 ? filled(ctx, C + TAIL, bc_in, &recvs[i])
                                                                      : sentinel_buffer(ctx, sizes[i] + (i == 1) * GAP,
                                                                                        &recvs[i]);
    if (s == USP_OK)
        s = filled(ctx, n, a2a_send, &sends[0]);
    if (s == USP_OK)
        s = filled(ctx, C, ag_send, &sends[1]);
    if (s == USP_OK)
        s = filled(ctx, n, rs_send, &sends[2]);
    if (s == USP_OK)
        s = filled(ctx, C, ar_send, &sends[3]);
    if (s == USP_OK)
        s = filled(ctx, C, sr_send, &sends[4]);
    if (s == USP_OK)
        s = usp_comm_all_to_all(ctx->world, sends[0], recvs[0], C, USP_F32, ctx->stream);
    if (s == USP_OK)
        s = all_to_all_v(ctx, recvs[1]);
    if (s == USP_OK)
        s = usp_comm_all_gather(ctx->world, sends[1], recvs[2], C, USP_F32, ctx->stream);
    if (s == USP_OK)
        s = usp_comm_reduce_scatter(ctx->world, sends[2], recvs[3], C, USP_F32, USP_REDUCE_SUM, ctx->stream);
    if (s == USP_OK)
        s = usp_comm_all_reduce(ctx->world, sends[3], recvs[4], C, USP_F32, USP_REDUCE_SUM, ctx->stream);
    if (s == USP_OK) /* in place: send == recv */
        s = usp_comm_all_reduce(ctx->world, recvs[5], recvs[5], C, USP_F32, USP_REDUCE_SUM, ctx->stream);
    if (s == USP_OK) /* in place from root 2 */
        s = usp_comm_broadcast(ctx->world, recvs[6], recvs[6], C, USP_F32, 2, ctx->stream);
    if (s == USP_OK)
        s = usp_comm_sendrecv(ctx->world, sends[4], C, next, recvs[7], C, prev, USP_F32, ctx->stream);
    const int at[8] = {A2A, A2AV, AG, RS, AR, AR_IN, BC, SR};
    for (int i = 0; i < 8 && s == USP_OK; i++)
        s = harness_download(ctx, &run->out[ctx->rank][at[i]], recvs[i],
                             ((i + 1 < 8 ? (size_t)at[i + 1] : RECORD) - (size_t)at[i]) * sizeof(float));
    for (int i = 0; i < 8; i++)
        usp_buffer_free(ctx->backend, recvs[i]);
    for (int i = 0; i < 6; i++)
        usp_buffer_free(ctx->backend, sends[i]);
    return s;
}

/* device_memory 0: the direct path (on the cpu backend when the harness's is cuda, whose memory needs staging). */
static sim_config config_for(int device_memory)
{
    sim_config config = sim_config_default(W);
    config.make_backend = harness_device_memory() && !device_memory ? usp_backend_cpu_create : harness_backend_factory();
    config.device_memory = device_memory;
    return config;
}

static void run_movement(int device_memory, movement_run *run)
{
    sim_config config = config_for(device_memory);
    config.stack_bytes = (size_t)1 << 20, config.trace = 0;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&config, &w), USP_OK);
    usp_status s = sim_world_run(w, on_movement, run);
    ck_assert_msg(s == USP_OK, "%s %s", sim_world_report(w), usp_error_message());
    /* staged: every region of every rank down, the receive regions up (the all_to_all_v's gaps too) */
    ck_assert_msg(device_memory ? sim_world_staged_bytes(w) > 0 : sim_world_staged_bytes(w) == 0,
                  "device_memory %d: %llu bytes staged", device_memory, (unsigned long long)sim_world_staged_bytes(w));
    sim_world_destroy(w);
}

/* The reference, written out: what rank r's record holds after the calls. */
static void expected_record(int r, float *e)
{
    for (int i = 0; i < RECORD; i++)
        e[i] = SENTINEL;
    for (int i = 0; i < W; i++)
        for (int k = 0; k < C; k++) {
            e[A2A + i * C + k] = (float)(1000 * i + 10 * r + k);
            e[AG + i * C + k] = (float)(100 * i + k);
        }
    for (int i = 0; i < W; i++)
        for (size_t k = 0; k < v_count(i, r); k++)
            e[A2AV + i * (C + GAP) + (int)k] = (float)(1000 * i + 10 * r + (int)k);
    for (int k = 0; k < C; k++) {
        e[RS + k] = (float)(W * (W - 1) / 2 + W * (10 * r + 100 * k));
        e[AR + k] = (float)(W * (W + 1) / 2 + W * k);
        e[AR_IN + k] = (float)(k * W * (W + 1) / 2) + 0.25f * W;
        e[BC + k] = 50.0f + (float)k;
        e[SR + k] = (float)(7 * ((r + W - 1) % W) + k);
    }
    e[AR_IN + C] = ar_in(r, C), e[AR_IN + C + 1] = ar_in(r, C + 1);
    e[BC + C] = bc_in(r, C), e[BC + C + 1] = bc_in(r, C + 1); /* the in-place buffers' tails were filled */
}

START_TEST(every_collective_moves_the_same_bytes_staged)
{
    static movement_run direct, staged;
    memset(&direct, 0, sizeof direct), memset(&staged, 0, sizeof staged);
    run_movement(0, &direct);
    run_movement(1, &staged);
    for (int r = 0; r < W; r++) {
        float e[RECORD];
        expected_record(r, e);
        for (int i = 0; i < RECORD; i++) {
            ck_assert_msg(memcmp(&staged.out[r][i], &direct.out[r][i], sizeof(float)) == 0, /* cuda: exact too */
                          "rank %d element %d: staged %g, direct %g", r, i, staged.out[r][i], direct.out[r][i]);
            ck_assert_msg(staged.out[r][i] == e[i], "rank %d element %d: %g, expected %g (a sentinel %g is a byte "
                          "the call leaves alone)", r, i, staged.out[r][i], e[i], SENTINEL);
        }
    }
}
END_TEST

/* --- training ------------------------------------------------------------ */

#define STEPS 20

typedef struct loss_log {
    double loss[STEPS];
    int n;
} loss_log;

typedef struct train_log {
    loss_log losses;
    uint64_t staged_bytes;
    harness_tensors tensors;
} train_log;

static void on_record(void *ctx, const usp_train_record *record)
{
    train_log *log = ctx;
    if (record->kind == USP_TRAIN_RECORD_STEP && log->losses.n < STEPS)
        log->losses.loss[log->losses.n++] = record->loss;
    harness_record_tensors(&log->tensors, record);
}

/* A small Llama. */
static void small_model(usp_model_config *m)
{
    ck_assert_int_eq(usp_model_config_preset("tiny", m), USP_OK);
    m->vocab = 128, m->n_layer = 2, m->d_model = 32, m->n_head = 4, m->n_kv_head = 2, m->d_ff = 48, m->max_seq = 64;
}

/* The small Llama on W ranks at ZeRO 3, every step's loss and the final weights recorded. */
static void train(int ulysses, int ring, int device_memory, train_log *log)
{
    usp_train_config c;
    usp_train_defaults(&c);
    small_model(&c.model);
    ck_assert_int_eq(usp_mesh_shape_make(W, ulysses, ring, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.batch = 2, c.steps = STEPS, c.warmup = 1, c.eval_samples = 0;
    c.zero_stage = 3, c.log_every = 1;
    c.on_record = on_record, c.record_ctx = log, c.record_tensors = 1;
    sim_config sc = config_for(device_memory);
    sc.stack_bytes = (size_t)1 << 20, sc.trace = 0;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&sc, &w), USP_OK);
    usp_train_result result = {.passkey_accuracy = -1};
    usp_train_run run = {.config = &c, .result = &result};
    usp_status s = sim_world_run(w, usp_train_rank, &run);
    ck_assert_msg(s == USP_OK, "%s %s", sim_world_report(w), usp_error_message());
    ck_assert_msg(device_memory ? sim_world_staged_bytes(w) > 0 : sim_world_staged_bytes(w) == 0,
                  "device_memory %d: %llu bytes staged", device_memory, (unsigned long long)sim_world_staged_bytes(w));
    log->staged_bytes = sim_world_staged_bytes(w);
    sim_world_destroy(w);
}

static int64_t weights_total(void)
{
    usp_model_config m;
    small_model(&m);
    usp_param_table t;
    ck_assert_int_eq(usp_param_table_make(&m, &t), USP_OK);
    int64_t n = t.total;
    usp_param_table_free(&t);
    return n;
}

static const int meshes[][2] = {{4, 1}, {1, 4}, {2, 2}, {2, 1}}; /* U x R; U2 on 4 ranks is DP2 x U2 */

START_TEST(training_staged_gives_the_same_bits)
{
    const int u = meshes[_i][0], r = meshes[_i][1];
    int64_t n = weights_total();
    train_log direct = {0}, staged = {0};
    direct.tensors.last_weights = malloc((size_t)n * sizeof(float));
    staged.tensors.last_weights = malloc((size_t)n * sizeof(float));
    ck_assert_ptr_nonnull(direct.tensors.last_weights);
    ck_assert_ptr_nonnull(staged.tensors.last_weights);
    train(u, r, 0, &direct);
    train(u, r, 1, &staged);
    ck_assert_int_eq(direct.losses.n, STEPS);
    ck_assert_int_eq(staged.losses.n, STEPS);
    for (int i = 0; i < STEPS; i++) {
        ck_assert_msg(isfinite(direct.losses.loss[i]), "U%d x R%d step %d: loss %g", u, r, i + 1,
                      direct.losses.loss[i]);
        if (harness_device_memory()) /* USP_TEST_BACKEND=cuda: GPU kernels against the cpu's (issue 26) */
            ck_assert_msg(fabs(staged.losses.loss[i] - direct.losses.loss[i]) <= 1e-5 * fabs(direct.losses.loss[i]),
                          "U%d x R%d step %d: cuda loss %.9g, cpu %.9g", u, r, i + 1, staged.losses.loss[i],
                          direct.losses.loss[i]);
        else
            ck_assert_msg(memcmp(&staged.losses.loss[i], &direct.losses.loss[i], sizeof(double)) == 0,
                      "U%d x R%d step %d: staged loss %.17g, direct %.17g", u, r, i + 1, staged.losses.loss[i],
                      direct.losses.loss[i]);
    }
    ck_assert_msg(direct.losses.loss[STEPS - 1] != direct.losses.loss[0], "U%d x R%d: the loss never moved", u, r);
    ck_assert_msg(harness_device_memory() ||
                  memcmp(staged.tensors.last_weights, direct.tensors.last_weights, (size_t)n * sizeof(float)) == 0,
                  "U%d x R%d: the final weights differ", u, r);
    printf("U%d x R%d%s, ZeRO 3, %d steps: staged = direct bit for bit (last loss %.6f, %.1f MB staged)\n", u, r,
           u * r < W ? " (DP2)" : "", STEPS, staged.losses.loss[STEPS - 1], (double)staged.staged_bytes / 1e6);
    free(direct.tensors.last_weights);
    free(staged.tensors.last_weights);
}
END_TEST

static Suite *staged_suite(void)
{
    Suite *s = suite_create("sim_staged");
    TCase *t = tcase_create("staged");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, every_collective_moves_the_same_bytes_staged);
    tcase_add_loop_test(t, training_staged_gives_the_same_bits, 0, (int)(sizeof meshes / sizeof *meshes));
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return check_main_run(staged_suite()); }
