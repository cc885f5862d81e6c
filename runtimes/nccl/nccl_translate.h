/* The arithmetic of the NCCL communicator that needs no GPU, apart so that
 * the CPU tests check it (tests/test_nccl_translate.c): usp's dtypes and
 * reductions as NCCL's, an all-to-all as the per-peer sends and receives of
 * one NCCL group, and the GPU a process takes from its rank on the node. */
#ifndef USP_NCCL_TRANSLATE_H
#define USP_NCCL_TRANSLATE_H

#include <nccl.h>

#include "core/comm/comm_impl.h"

/* NCCL's type for usp's `dtype`: f32, f64, i64 and bf16 (reduced), u8 (moved
 * only). Another is USP_ERR_RUNTIME naming it. */
usp_status nccl_translate_dtype(usp_dtype dtype, ncclDataType_t *out);

/* NCCL's reduction for `op` (sum, max). */
usp_status nccl_translate_reduce(usp_reduce_op op, ncclRedOp_t *out);

/* One ncclSend or ncclRecv of an all-to-all: `count` elements with `peer`,
 * at element `offset` of the send (or receive) buffer. */
typedef struct nccl_p2p {
    int peer;
    size_t offset, count;
} nccl_p2p;

/* The sends and receives of op (all_to_all: `count` to each member, block j
 * at j * count; all_to_all_v: the op's counts and offsets) on a group of
 * `size`, in peer order, zero counts left out (NCCL would enqueue nothing
 * for them but a connection). sends and recvs hold `size` entries each. */
void nccl_translate_all_to_all(const usp_comm_op *op, int size, nccl_p2p *sends, int *n_sends, nccl_p2p *recvs,
                          int *n_recvs);

/* The GPU of the process with index `local_rank` among `local_size` on its
 * node (MPI_Comm_split_type shared), which sees `gpus` GPUs: its local rank
 * when the node's GPUs are enough; GPU 0 when it sees one (a launcher that
 * binds a GPU per process, srun --gpus-per-task=1). Otherwise two ranks would
 * share a GPU, which NCCL refuses: USP_ERR_CONFIG giving the launch line. */
usp_status nccl_translate_gpu(int local_rank, int local_size, int gpus, int *gpu);

#endif
