/* Checks of every collective, shared by the simulator's tests (test_comm.c) and
 * the mpi runtime's (test_mpi_comm.c, under mpirun): every element of every
 * result against what the senders put in (a closed form of the ranks' ids). */
#include "tests/comm_checks.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

/* What rank `src` sends to rank `dst` at element k; exact in f32. */
static double value(int src, int dst, size_t k) { return src * 1000.0 + dst * 10.0 + (double)k; }

static usp_status check_all_to_all(const usp_rank_ctx *ctx, usp_comm_t *g)
{
    const size_t count = 5;
    int n = usp_comm_size(g), me = usp_comm_rank(g);
    float send[8 * 5], recv[8 * 5];
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < count; k++)
            send[(size_t)j * count + k] = (float)value(me, j, k);
    void *ds, *dr;
    USP_CHECK(harness_upload(ctx, send, sizeof send, &ds));
    USP_CHECK(harness_upload(ctx, NULL, sizeof recv, &dr));
    USP_CHECK(usp_comm_all_to_all(g, ds, dr, count, USP_F32, ctx->stream));
    USP_CHECK(harness_download(ctx, recv, dr, sizeof recv));
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < count; k++)
            USP_CHECK(harness_expect_eq(ctx, "all_to_all", (size_t)i * count + k, recv[(size_t)i * count + k],
                                        value(i, me, k)));
    usp_buffer_free(ctx->backend, ds);
    usp_buffer_free(ctx->backend, dr);
    return USP_OK;
}

/* Rank i sends (i + j) % 3 elements to rank j (zero counts included), at
 * offsets with gaps, received at offsets with gaps in reverse peer order. */
static usp_status check_all_to_all_v(const usp_rank_ctx *ctx, usp_comm_t *g)
{
    int n = usp_comm_size(g), me = usp_comm_rank(g);
    size_t sc[8], so[8], rc[8], ro[8], at = 0;
    for (int j = 0; j < n; j++)
        sc[j] = (size_t)((me + j) % 3), so[j] = at, at += sc[j] + 1;
    size_t send_n = at;
    at = 0;
    for (int j = n - 1; j >= 0; j--)
        rc[j] = (size_t)((j + me) % 3), ro[j] = at, at += rc[j] + 2;
    size_t recv_n = at;
    int64_t send[64] = {0}, recv[64];
    for (int j = 0; j < n; j++)
        for (size_t k = 0; k < sc[j]; k++)
            send[so[j] + k] = (int64_t)value(me, j, k);
    void *ds, *dr;
    USP_CHECK(harness_upload(ctx, send, send_n * sizeof *send, &ds));
    USP_CHECK(harness_upload(ctx, NULL, recv_n * sizeof *recv, &dr));
    USP_CHECK(usp_comm_all_to_all_v(g, ds, sc, so, dr, rc, ro, USP_I64, ctx->stream));
    USP_CHECK(harness_download(ctx, recv, dr, recv_n * sizeof *recv));
    for (int i = 0; i < n; i++) {
        for (size_t k = 0; k < rc[i]; k++)
            USP_CHECK(harness_expect_eq(ctx, "all_to_all_v", ro[i] + k, (double)recv[ro[i] + k], value(i, me, k)));
        USP_CHECK(harness_expect_eq(ctx, "all_to_all_v gap untouched", ro[i] + rc[i], (double)recv[ro[i] + rc[i]], 0));
    }
    usp_buffer_free(ctx->backend, ds);
    usp_buffer_free(ctx->backend, dr);
    return USP_OK;
}

static usp_status check_all_gather(const usp_rank_ctx *ctx, usp_comm_t *g)
{
    const size_t count = 3;
    int n = usp_comm_size(g), me = usp_comm_rank(g);
    double send[3], recv[8 * 3];
    for (size_t k = 0; k < count; k++)
        send[k] = value(me, 0, k);
    void *ds, *dr;
    USP_CHECK(harness_upload(ctx, send, sizeof send, &ds));
    USP_CHECK(harness_upload(ctx, NULL, (size_t)n * sizeof send, &dr));
    USP_CHECK(usp_comm_all_gather(g, ds, dr, count, USP_F64, ctx->stream));
    USP_CHECK(harness_download(ctx, recv, dr, (size_t)n * sizeof send));
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < count; k++)
            USP_CHECK(harness_expect_eq(ctx, "all_gather", (size_t)i * count + k, recv[(size_t)i * count + k],
                                        value(i, 0, k)));
    usp_buffer_free(ctx->backend, ds);
    usp_buffer_free(ctx->backend, dr);
    return USP_OK;
}

/* Reduction of value(i, 0, k) over the group's members i. */
static double reduced(int n, usp_reduce_op op, size_t k)
{
    double acc = value(0, 0, k);
    for (int i = 1; i < n; i++)
        acc = op == USP_REDUCE_SUM ? acc + value(i, 0, k) : (value(i, 0, k) > acc ? value(i, 0, k) : acc);
    return acc;
}

static void put_typed(void *buf, usp_dtype dt, size_t k, double v)
{
    if (dt == USP_F32) ((float *)buf)[k] = (float)v;
    if (dt == USP_F64) ((double *)buf)[k] = v;
    if (dt == USP_I64) ((int64_t *)buf)[k] = (int64_t)v;
}

static double get_typed(const void *buf, usp_dtype dt, size_t k)
{
    return dt == USP_F32 ? ((const float *)buf)[k] : dt == USP_F64 ? ((const double *)buf)[k]
                                                                   : (double)((const int64_t *)buf)[k];
}

/* all_reduce (out of place and in place) and reduce_scatter, for each dtype and op. */
static usp_status check_reductions(const usp_rank_ctx *ctx, usp_comm_t *g)
{
    const usp_dtype dtypes[] = {USP_F32, USP_F64, USP_I64};
    const size_t count = 7;
    int n = usp_comm_size(g), me = usp_comm_rank(g);
    for (int d = 0; d < 3; d++)
        for (int op = USP_REDUCE_SUM; op <= USP_REDUCE_MAX; op++) {
            usp_dtype dt = dtypes[d];
            size_t es = usp_dtype_size(dt), total = (size_t)n * count;
            char host[8 * 7 * 8];
            for (size_t k = 0; k < total; k++)
                put_typed(host, dt, k, value(me, 0, k));
            void *ds, *dr;
            USP_CHECK(harness_upload(ctx, host, total * es, &ds));
            USP_CHECK(harness_upload(ctx, NULL, total * es, &dr));
            USP_CHECK(usp_comm_all_reduce(g, ds, dr, count, dt, (usp_reduce_op)op, ctx->stream));
            USP_CHECK(usp_comm_all_reduce(g, ds, ds, total, dt, (usp_reduce_op)op, ctx->stream)); /* in place */
            USP_CHECK(harness_download(ctx, host, dr, count * es));
            for (size_t k = 0; k < count; k++)
                USP_CHECK(harness_expect_eq(ctx, "all_reduce", k, get_typed(host, dt, k), reduced(n, (usp_reduce_op)op, k)));
            USP_CHECK(harness_download(ctx, host, ds, total * es));
            for (size_t k = 0; k < total; k++)
                USP_CHECK(harness_expect_eq(ctx, "all_reduce in place", k, get_typed(host, dt, k),
                                            reduced(n, (usp_reduce_op)op, k)));
            for (size_t k = 0; k < total; k++)
                put_typed(host, dt, k, value(me, 0, k));
            USP_CHECK(usp_buffer_copy(ctx->backend, ds, host, total * es, USP_COPY_HOST_TO_DEVICE, ctx->stream));
            USP_CHECK(usp_comm_reduce_scatter(g, ds, dr, count, dt, (usp_reduce_op)op, ctx->stream));
            USP_CHECK(harness_download(ctx, host, dr, count * es));
            for (size_t k = 0; k < count; k++)
                USP_CHECK(harness_expect_eq(ctx, "reduce_scatter", k, get_typed(host, dt, k),
                                            reduced(n, (usp_reduce_op)op, (size_t)me * count + k)));
            usp_buffer_free(ctx->backend, ds);
            usp_buffer_free(ctx->backend, dr);
        }
    return USP_OK;
}

static usp_status check_broadcast(const usp_rank_ctx *ctx, usp_comm_t *g)
{
    int n = usp_comm_size(g), me = usp_comm_rank(g);
    for (int root = 0; root < n; root += n > 1 ? n - 1 : 1) {
        float host[4];
        for (size_t k = 0; k < 4; k++)
            host[k] = (float)value(me, 0, k);
        void *buf;
        USP_CHECK(harness_upload(ctx, host, sizeof host, &buf));
        USP_CHECK(usp_comm_broadcast(g, buf, buf, 4, USP_F32, root, ctx->stream)); /* in place */
        USP_CHECK(harness_download(ctx, host, buf, sizeof host));
        for (size_t k = 0; k < 4; k++)
            USP_CHECK(harness_expect_eq(ctx, "broadcast", k, host[k], value(root, 0, k)));
        usp_buffer_free(ctx->backend, buf);
    }
    return USP_OK;
}

/* A ring of sendrecv (self when n = 1), then send/recv between even and odd neighbours. */
static usp_status check_point_to_point(const usp_rank_ctx *ctx, usp_comm_t *g)
{
    int n = usp_comm_size(g), me = usp_comm_rank(g), next = (me + 1) % n, prev = (me + n - 1) % n;
    double host[6];
    for (size_t k = 0; k < 6; k++)
        host[k] = value(me, next, k);
    void *ds, *dr;
    USP_CHECK(harness_upload(ctx, host, sizeof host, &ds));
    USP_CHECK(harness_upload(ctx, NULL, sizeof host, &dr));
    USP_CHECK(usp_comm_sendrecv(g, ds, 6, next, dr, 6, prev, USP_F64, ctx->stream));
    USP_CHECK(harness_download(ctx, host, dr, sizeof host));
    for (size_t k = 0; k < 6; k++)
        USP_CHECK(harness_expect_eq(ctx, "sendrecv", k, host[k], value(prev, me, k)));
    int partner = me ^ 1;
    if (partner < n) {
        if (me % 2 == 0) {
            USP_CHECK(usp_comm_send(g, ds, 6, USP_F64, partner, ctx->stream));
            USP_CHECK(usp_comm_recv(g, dr, 3, USP_F64, partner, ctx->stream));
        } else {
            USP_CHECK(usp_comm_recv(g, dr, 6, USP_F64, partner, ctx->stream));
            USP_CHECK(usp_comm_send(g, ds, 3, USP_F64, partner, ctx->stream));
        }
        USP_CHECK(harness_download(ctx, host, dr, sizeof host));
        int from = partner, sent_to = (partner + 1) % n; /* the partner sent its sendrecv payload */
        for (size_t k = 0; k < (me % 2 == 0 ? 3u : 6u); k++)
            USP_CHECK(harness_expect_eq(ctx, "send/recv", k, host[k], value(from, sent_to, k)));
    }
    usp_buffer_free(ctx->backend, ds);
    usp_buffer_free(ctx->backend, dr);
    return usp_comm_barrier(g, ctx->stream);
}

/* An all_reduce of 100003 f32 (past any small-message path of a backend): every
 * element must be the members' values summed in rank order, bit for bit, the
 * order the communicator promises (core/comm/comm.h). */
static usp_status check_large_all_reduce(const usp_rank_ctx *ctx, usp_comm_t *g)
{
    const size_t count = 100003;
    int n = usp_comm_size(g), me = usp_comm_rank(g);
    float *host = malloc(count * sizeof *host);
    if (!host)
        return usp_error(USP_ERR_RUNTIME, "out of memory");
    for (size_t k = 0; k < count; k++)
        host[k] = 1.0f / (float)(1 + me + (int)(k % 97)) + (float)k * 1e-3f;
    void *d;
    usp_status s = harness_upload(ctx, host, count * sizeof *host, &d);
    if (s == USP_OK)
        s = usp_comm_all_reduce(g, d, d, count, USP_F32, USP_REDUCE_SUM, ctx->stream);
    if (s == USP_OK)
        s = harness_download(ctx, host, d, count * sizeof *host);
    for (size_t k = 0; k < count && s == USP_OK; k++) {
        float want = 1.0f / (float)(1 + (int)(k % 97)) + (float)k * 1e-3f;
        for (int r = 1; r < n; r++)
            want += 1.0f / (float)(1 + r + (int)(k % 97)) + (float)k * 1e-3f;
        if (host[k] != want)
            s = usp_error(USP_ERR_RUNTIME, "rank %d: large all_reduce element %zu is %.9g, the rank-order sum %.9g",
                          ctx->rank, k, host[k], want);
    }
    usp_buffer_free(ctx->backend, d);
    free(host);
    return s;
}

usp_status comm_checks_everything(const usp_rank_ctx *ctx, usp_comm_t *g)
{
    USP_CHECK(check_all_to_all(ctx, g));
    USP_CHECK(check_all_to_all_v(ctx, g));
    USP_CHECK(check_all_gather(ctx, g));
    USP_CHECK(check_reductions(ctx, g));
    USP_CHECK(check_large_all_reduce(ctx, g));
    USP_CHECK(check_broadcast(ctx, g));
    return check_point_to_point(ctx, g);
}

usp_status comm_checks_on_world(const usp_rank_ctx *ctx, void *arg)
{
    (void)arg;
    return comm_checks_everything(ctx, ctx->world);
}

/* Split by parity with keys that reverse the order; rank 0 opts out when W > 2. */
usp_status comm_checks_on_split_groups(const usp_rank_ctx *ctx, void *arg)
{
    (void)arg;
    int W = ctx->world_size, me = ctx->rank;
    int color = W > 2 && me == 0 ? USP_SPLIT_NOCOLOR : me % 2;
    usp_comm_t *g;
    USP_CHECK(usp_comm_split(ctx->world, color, -me, color == 1 ? "odd" : "even", &g));
    if (color == USP_SPLIT_NOCOLOR)
        return g == NULL ? USP_OK : usp_error(USP_ERR_RUNTIME, "NOCOLOR rank got a group");
    int expected_size = 0, expected_rank = 0;
    for (int r = W - 1; r >= 0; r--) /* members ordered by key = -rank: highest world rank first */
        if (r % 2 == color && !(W > 2 && r == 0)) {
            if (r == me)
                expected_rank = expected_size;
            expected_size++;
        }
    usp_status s = USP_OK;
    if (usp_comm_size(g) != expected_size || usp_comm_rank(g) != expected_rank ||
        usp_comm_world_rank(g, usp_comm_rank(g)) != me)
        s = usp_error(USP_ERR_RUNTIME, "rank %d: split group %s has size %d rank %d, expected %d and %d", me,
                      usp_comm_name(g), usp_comm_size(g), usp_comm_rank(g), expected_size, expected_rank);
    if (s == USP_OK)
        s = comm_checks_everything(ctx, g);
    usp_comm_destroy(g);
    return s;
}

