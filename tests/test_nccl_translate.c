/* The arithmetic of the NCCL communicator that needs no GPU
 * (runtimes/nccl/nccl_translate.h), on the CPU: usp's dtypes and reductions are
 * NCCL's; an all-to-all's per-peer sends and receives, carried out on host
 * arrays for every rank of a world, move what the simulator's all_to_all_v
 * moves (block j of rank i's send lands as block i of rank j's receive), zero
 * counts enqueue nothing; a process takes the GPU of its rank on the node,
 * GPU 0 when a launcher binds one per process, and too many processes for a
 * node's GPUs is exit 2 with the launch line. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "runtimes/nccl/nccl_translate.h"
#include "tests/check_main.h"

START_TEST(dtypes_and_reductions_are_nccls)
{
    const struct { usp_dtype usp; ncclDataType_t nccl; } types[] = {
        {USP_F32, ncclFloat32}, {USP_F64, ncclFloat64}, {USP_I64, ncclInt64}, {USP_BF16, ncclBfloat16},
        {USP_U8, ncclUint8}};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        ncclDataType_t t = ncclNumTypes;
        ck_assert_int_eq(nccl_translate_dtype(types[i].usp, &t), USP_OK);
        ck_assert_int_eq(t, types[i].nccl);
    }
    ncclDataType_t t;
    ck_assert_int_eq(nccl_translate_dtype(USP_DTYPE_COUNT, &t), USP_ERR_RUNTIME);
    ncclRedOp_t r = ncclNumOps;
    ck_assert_int_eq(nccl_translate_reduce(USP_REDUCE_SUM, &r), USP_OK);
    ck_assert_int_eq(r, ncclSum);
    ck_assert_int_eq(nccl_translate_reduce(USP_REDUCE_MAX, &r), USP_OK);
    ck_assert_int_eq(r, ncclMax);
    ck_assert_int_eq(nccl_translate_reduce((usp_reduce_op)7, &r), USP_ERR_RUNTIME);
}
END_TEST

static void assert_p2p(const nccl_p2p *p, int peer, size_t offset, size_t count)
{
    ck_assert_int_eq(p->peer, peer);
    ck_assert_uint_eq(p->offset, offset);
    ck_assert_uint_eq(p->count, count);
}

START_TEST(all_to_all_sends_block_j_to_peer_j)
{
    nccl_p2p sends[4], recvs[4];
    int ns = -1, nr = -1;
    usp_comm_op op = {.kind = USP_OP_ALL_TO_ALL, .count = 3};
    nccl_translate_all_to_all(&op, 4, sends, &ns, recvs, &nr);
    ck_assert_int_eq(ns, 4);
    ck_assert_int_eq(nr, 4);
    for (int j = 0; j < 4; j++) {
        assert_p2p(&sends[j], j, 3 * (size_t)j, 3);
        assert_p2p(&recvs[j], j, 3 * (size_t)j, 3);
    }
    op.count = 0; /* nothing to move: nothing enqueued */
    nccl_translate_all_to_all(&op, 4, sends, &ns, recvs, &nr);
    ck_assert_int_eq(ns, 0);
    ck_assert_int_eq(nr, 0);
}
END_TEST

START_TEST(all_to_all_v_leaves_out_zero_counts)
{
    const size_t send_counts[] = {2, 0, 5}, send_offsets[] = {10, 99, 0};
    const size_t recv_counts[] = {0, 4, 1}, recv_offsets[] = {7, 0, 20};
    usp_comm_op op = {.kind = USP_OP_ALL_TO_ALL_V, .send_counts = send_counts, .send_offsets = send_offsets,
                      .recv_counts = recv_counts, .recv_offsets = recv_offsets};
    nccl_p2p sends[3], recvs[3];
    int ns, nr;
    nccl_translate_all_to_all(&op, 3, sends, &ns, recvs, &nr);
    ck_assert_int_eq(ns, 2);
    assert_p2p(&sends[0], 0, 10, 2);
    assert_p2p(&sends[1], 2, 0, 5);
    ck_assert_int_eq(nr, 2);
    assert_p2p(&recvs[0], 1, 0, 4);
    assert_p2p(&recvs[1], 2, 20, 1);
}
END_TEST

#define W 5
#define MAXC 4

/* Every rank's plan carried out on host arrays, the k-th send of i to j meeting the k-th
 * receive of j from i (NCCL's matching in a group): what all_to_all_v promises, element
 * for element, for counts drawn at random (zeros among them) and blocks laid out in reverse. */
START_TEST(all_to_all_v_plans_move_what_the_contract_says)
{
    srand(13);
    for (int trial = 0; trial < 50; trial++) {
        size_t counts[W][W]; /* counts[i][j]: rank i sends rank j */
        for (int i = 0; i < W; i++)
            for (int j = 0; j < W; j++)
                counts[i][j] = (size_t)(rand() % (MAXC + 1));
        size_t sc[W][W], so[W][W], rc[W][W], ro[W][W];
        int32_t send[W][W * MAXC], recv[W][W * MAXC];
        for (int i = 0; i < W; i++) {
            size_t s_at = 0, r_at = 0;
            for (int j = W - 1; j >= 0; j--) { /* blocks in reverse peer order: offsets are not j * count */
                sc[i][j] = counts[i][j], so[i][j] = s_at, s_at += counts[i][j];
                rc[i][j] = counts[j][i], ro[i][j] = r_at, r_at += counts[j][i];
            }
            for (int e = 0; e < W * MAXC; e++)
                send[i][e] = -1, recv[i][e] = -1;
            for (int j = 0; j < W; j++)
                for (size_t e = 0; e < sc[i][j]; e++)
                    send[i][so[i][j] + e] = (int32_t)(i * 1000 + j * 100 + (int)e); /* from i, for j, element e */
        }
        nccl_p2p sends[W][W], recvs[W][W];
        int ns[W], nr[W];
        for (int i = 0; i < W; i++) {
            usp_comm_op op = {.kind = USP_OP_ALL_TO_ALL_V, .dtype = USP_F32, .send_counts = sc[i],
                              .send_offsets = so[i], .recv_counts = rc[i], .recv_offsets = ro[i]};
            nccl_translate_all_to_all(&op, W, sends[i], &ns[i], recvs[i], &nr[i]);
        }
        for (int i = 0; i < W; i++)
            for (int k = 0; k < ns[i]; k++) {
                const nccl_p2p *s = &sends[i][k];
                ck_assert_uint_gt(s->count, 0);
                int found = 0; /* the receive j posts for i */
                for (int m = 0; m < nr[s->peer]; m++) {
                    const nccl_p2p *r = &recvs[s->peer][m];
                    if (r->peer != i)
                        continue;
                    ck_assert_uint_eq(r->count, s->count);
                    memcpy(&recv[s->peer][r->offset], &send[i][s->offset], s->count * sizeof(int32_t));
                    found++;
                }
                ck_assert_int_eq(found, 1);
            }
        for (int j = 0; j < W; j++)
            for (int i = 0; i < W; i++)
                for (size_t e = 0; e < rc[j][i]; e++)
                    ck_assert_int_eq(recv[j][ro[j][i] + e], i * 1000 + j * 100 + (int)e);
    }
}
END_TEST

START_TEST(a_process_takes_the_gpu_of_its_local_rank)
{
    int gpu = -1;
    for (int r = 0; r < 8; r++) {
        ck_assert_int_eq(nccl_translate_gpu(r, 8, 8, &gpu), USP_OK);
        ck_assert_int_eq(gpu, r);
    }
    ck_assert_int_eq(nccl_translate_gpu(1, 2, 8, &gpu), USP_OK); /* fewer processes than GPUs */
    ck_assert_int_eq(gpu, 1);
    ck_assert_int_eq(nccl_translate_gpu(3, 4, 1, &gpu), USP_OK); /* srun --gpus-per-task=1: each sees its own */
    ck_assert_int_eq(gpu, 0);
    ck_assert_int_eq(nccl_translate_gpu(3, 4, 2, &gpu), USP_ERR_CONFIG); /* two ranks would share a GPU */
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "4 processes on this node and 2 GPUs"));
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "--gpus-per-task=1"));
    ck_assert_int_eq(nccl_translate_gpu(0, 1, 0, &gpu), USP_ERR_CONFIG);
    ck_assert_int_eq(nccl_translate_gpu(4, 4, 8, &gpu), USP_ERR_RUNTIME);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nccl_translate");
    TCase *t = tcase_create("nccl_translate");
    tcase_add_test(t, dtypes_and_reductions_are_nccls);
    tcase_add_test(t, all_to_all_sends_block_j_to_peer_j);
    tcase_add_test(t, all_to_all_v_leaves_out_zero_counts);
    tcase_add_test(t, all_to_all_v_plans_move_what_the_contract_says);
    tcase_add_test(t, a_process_takes_the_gpu_of_its_local_rank);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
