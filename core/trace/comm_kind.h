/* The kinds of communication call and their names: the vocabulary shared by
 * the communicator (core/comm/comm.h), the trace (core/trace/trace.h), the simulator and
 * viz. A leaf of its own so that the trace can name an op without depending
 * on the communicator, which records into the trace. */
#ifndef USP_COMM_KIND_H
#define USP_COMM_KIND_H

typedef enum usp_comm_kind {
    USP_OP_ALL_TO_ALL,
    USP_OP_ALL_TO_ALL_V,
    USP_OP_ALL_GATHER,
    USP_OP_REDUCE_SCATTER,
    USP_OP_ALL_REDUCE,
    USP_OP_BROADCAST,
    USP_OP_SEND,
    USP_OP_RECV,
    USP_OP_SENDRECV,
    USP_OP_BARRIER,
    USP_OP_SPLIT,
    USP_OP_COUNT
} usp_comm_kind;

/* Name of an op ("all_to_all", ...); "?" for a value that is no kind. */
const char *usp_comm_kind_name(usp_comm_kind kind);

#endif
