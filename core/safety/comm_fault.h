/* Fault injection: the broken programs that CI must catch. A fault is a
 * description; the communicator decorator (core/safety/comm_decorator.h) applies it
 * around any backend, so the simulator and a real backend break alike.
 *
 * Syntax (docs/CONTRACT.md): KIND:rank=R[,op=OP][,call=K][,group=G]
 *   skip   rank R does not issue its K-th call of OP
 *   swap   rank R issues its K-th collective of OP after the collective that follows it
 *   size   rank R's K-th call of OP has a wrong count
 *   group  rank R issues its K-th call of OP on group G (default: world, or another group
 *          when the call is already on world) instead of the intended one
 *   crash  rank R dies at its K-th call of OP
 * OP is an op name (all_to_all, all_reduce, ...) or `any` (the default); K counts
 * from 1 (the default). Splits (building the mesh) are setup, not counted. */
#ifndef USP_COMM_FAULT_H
#define USP_COMM_FAULT_H

#include <stdint.h>

#include "core/comm/comm.h"

typedef enum usp_fault_kind {
    USP_FAULT_SKIP,
    USP_FAULT_SWAP,
    USP_FAULT_SIZE,
    USP_FAULT_GROUP,
    USP_FAULT_CRASH,
} usp_fault_kind;

typedef struct usp_fault {
    usp_fault_kind kind;
    int rank;
    int op;         /* usp_comm_kind, or -1 for any op */
    uint64_t call;  /* 1-based */
    char group[32]; /* group fault: name or prefix of the group to use ("" = default) */
    int fired;      /* set by the decorator (core/safety/comm_decorator.h) when the fault fires */
    const char *no_effect; /* set by the decorator when it fired but could not change the call: why */
} usp_fault;

/* Parses one --inject SPEC; a bad spec is USP_ERR_CONFIG with a message naming it.
 * A fault that could never change a call is a bad spec too: size on a barrier
 * (no count), swap on send, recv or sendrecv (swap reorders collectives), a
 * group= that is no group kind of the mesh (world, dp, sp, ulysses, ring, with
 * an optional [INDEX]), or the group kind op= always runs on (all_to_all and
 * all_to_all_v on ulysses, sendrecv on ring). What only the run can tell (the
 * rank has no such group; op=any landing on a barrier) the decorator reports
 * through no_effect. */
usp_status usp_fault_parse(const char *spec, usp_fault *out);

/* "skip", "swap", ... */
const char *usp_fault_kind_name(usp_fault_kind kind);

/* 1 when `f` fires for a call of `kind` on a rank that has made `calls_any`
 * counted calls in all and `calls_of_kind` of this kind (both including this one). */
int usp_fault_fires(const usp_fault *f, int kind, uint64_t calls_any, uint64_t calls_of_kind);

#endif
