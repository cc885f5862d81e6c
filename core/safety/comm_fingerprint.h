/* The fingerprint of one communication call: what it is (op, count, dtype,
 * root, reduce op, peers), where (group, its index on the group) and who made
 * it (call site). The members of a collective must agree on its matching
 * fields, so a backend that cannot see the other ranks' calls (NCCL, MPI)
 * exchanges fingerprints to name a mismatch instead of hanging, and reports
 * (core/safety/comm_report.h) describe every rank's call from one. It holds no
 * pointers into the call: it outlives the op it was taken from. */
#ifndef USP_COMM_FINGERPRINT_H
#define USP_COMM_FINGERPRINT_H

#include <stdint.h>

#include "core/comm/comm_impl.h"
#include "core/base/strbuf.h"

typedef struct usp_comm_fingerprint {
    int op;                        /* usp_comm_kind; -1: no call */
    usp_dtype dtype;
    usp_reduce_op reduce;          /* all_reduce, reduce_scatter */
    size_t count, recv_count;      /* as in usp_comm_op */
    int root;                      /* broadcast */
    int peer, recv_peer;           /* send / recv / sendrecv, group-local */
    int color, key;                /* split */
    char group[USP_COMM_NAME_MAX]; /* the group's name */
    uint64_t seq;                  /* the call's index on the group, from 1 */
    usp_call_site site;
} usp_comm_fingerprint;

/* The fingerprint of `op`, the `seq`-th call on group `group`. */
usp_comm_fingerprint usp_comm_fingerprint_of(const usp_comm_op *op, const char *group, uint64_t seq);

/* A hash of the fields every member of a collective must agree on (op,
 * dtype, count, reduce op, root, group, seq): equal hashes, same collective. */
uint64_t usp_comm_fingerprint_hash(const usp_comm_fingerprint *fp);

/* Appends the call's name and place, "all_to_all #5 on ulysses[0] (core/x.c:88)", to `b`. */
void usp_comm_fingerprint_name(usp_strbuf *b, const usp_comm_fingerprint *fp);

/* Appends the op with its arguments, "all_to_all(count=2048, f32)", to `b`. */
void usp_comm_fingerprint_describe(usp_strbuf *b, const usp_comm_fingerprint *fp);

#endif
