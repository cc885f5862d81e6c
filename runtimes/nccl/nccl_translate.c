/* The GPU-free arithmetic of the NCCL communicator (see nccl_translate.h). */
#include "runtimes/nccl/nccl_translate.h"

usp_status nccl_translate_dtype(usp_dtype dtype, ncclDataType_t *out)
{
    switch (dtype) {
    case USP_F32: *out = ncclFloat32; return USP_OK;
    case USP_F64: *out = ncclFloat64; return USP_OK;
    case USP_I64: *out = ncclInt64; return USP_OK;
    case USP_BF16: *out = ncclBfloat16; return USP_OK;
    case USP_U8: *out = ncclUint8; return USP_OK;
    default: return usp_error(USP_ERR_RUNTIME, "dtype %d: NCCL has no type for it", (int)dtype);
    }
}

usp_status nccl_translate_reduce(usp_reduce_op op, ncclRedOp_t *out)
{
    switch (op) {
    case USP_REDUCE_SUM: *out = ncclSum; return USP_OK;
    case USP_REDUCE_MAX: *out = ncclMax; return USP_OK;
    default: return usp_error(USP_ERR_RUNTIME, "reduce op %d: NCCL has no reduction for it", (int)op);
    }
}

void nccl_translate_all_to_all(const usp_comm_op *op, int size, nccl_p2p *sends, int *n_sends, nccl_p2p *recvs,
                          int *n_recvs)
{
    int v = op->kind == USP_OP_ALL_TO_ALL_V;
    *n_sends = *n_recvs = 0;
    for (int j = 0; j < size; j++) {
        size_t send_count = v ? op->send_counts[j] : op->count, recv_count = v ? op->recv_counts[j] : op->count;
        size_t send_at = v ? op->send_offsets[j] : (size_t)j * op->count;
        size_t recv_at = v ? op->recv_offsets[j] : (size_t)j * op->count;
        if (send_count > 0)
            sends[(*n_sends)++] = (nccl_p2p){.peer = j, .offset = send_at, .count = send_count};
        if (recv_count > 0)
            recvs[(*n_recvs)++] = (nccl_p2p){.peer = j, .offset = recv_at, .count = recv_count};
    }
}

usp_status nccl_translate_gpu(int local_rank, int local_size, int gpus, int *gpu)
{
    if (gpus <= 0)
        return usp_error(USP_ERR_CONFIG, "--backend nccl: this process sees no GPU");
    if (local_rank < 0 || local_rank >= local_size)
        return usp_error(USP_ERR_RUNTIME, "local rank %d of %d processes on the node", local_rank, local_size);
    if (gpus >= local_size) { /* the node's GPUs, one per process */
        *gpu = local_rank;
        return USP_OK;
    }
    if (gpus == 1) { /* the launcher gave each process its own (srun --gpus-per-task=1); if not, NCCL refuses the duplicate */
        *gpu = 0;
        return USP_OK;
    }
    return usp_error(USP_ERR_CONFIG, "--backend nccl: %d processes on this node and %d GPUs: NCCL takes one GPU per "
                     "rank; start at most %d processes a node (mpirun --map-by ppr:%d:node, srun "
                     "--ntasks-per-node=%d --gpus-per-task=1)", local_size, gpus, gpus, gpus, gpus);
}
