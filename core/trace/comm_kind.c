/* Names of the communication kinds (comm_kind.h). */
#include "core/trace/comm_kind.h"

const char *usp_comm_kind_name(usp_comm_kind kind)
{
    static const char *names[USP_OP_COUNT] = {
        [USP_OP_ALL_TO_ALL] = "all_to_all",   [USP_OP_ALL_TO_ALL_V] = "all_to_all_v",
        [USP_OP_ALL_GATHER] = "all_gather",   [USP_OP_REDUCE_SCATTER] = "reduce_scatter",
        [USP_OP_ALL_REDUCE] = "all_reduce",   [USP_OP_BROADCAST] = "broadcast",
        [USP_OP_SEND] = "send",               [USP_OP_RECV] = "recv",
        [USP_OP_SENDRECV] = "sendrecv",       [USP_OP_BARRIER] = "barrier",
        [USP_OP_SPLIT] = "split",
    };
    return kind >= 0 && kind < USP_OP_COUNT ? names[kind] : "?";
}
