/* Fault injection: the broken programs that CI must catch.
 *
 * Syntax (ARCHITECTURE.md): KIND:rank=R[,op=OP][,call=K][,group=G]
 *   skip   rank R does not issue its K-th call of OP
 *   swap   rank R issues its K-th collective of OP after the collective that follows it
 *   size   rank R's K-th call of OP has a wrong count
 *   group  rank R issues its K-th call of OP on group G (default: world, or another group
 *          when the call is already on world) instead of the intended one
 *   crash  rank R dies at its K-th call of OP
 * OP is an op name (all_to_all, all_reduce, ...) or `any` (the default); K counts
 * from 1 (the default). Splits (building the mesh) are setup, not counted. */
#ifndef USP_SIM_INJECT_H
#define USP_SIM_INJECT_H

#include <stdint.h>

#include "core/comm.h"

typedef enum sim_fault_kind {
    SIM_FAULT_SKIP,
    SIM_FAULT_SWAP,
    SIM_FAULT_SIZE,
    SIM_FAULT_GROUP,
    SIM_FAULT_CRASH,
} sim_fault_kind;

typedef struct sim_fault {
    sim_fault_kind kind;
    int rank;
    int op;         /* usp_comm_kind, or -1 for any op */
    uint64_t call;  /* 1-based */
    char group[32]; /* group fault: name or prefix of the group to use ("" = default) */
    int fired;      /* set by the simulator when the fault was injected */
} sim_fault;

/* Parses one --inject SPEC; a bad spec is USP_ERR_CONFIG with a message naming it. */
usp_status sim_fault_parse(const char *spec, sim_fault *out);

/* "skip", "swap", ... */
const char *sim_fault_kind_name(sim_fault_kind kind);

/* 1 when `f` fires for a call of `kind` on a rank that has made `calls_any`
 * counted calls in all and `calls_of_kind` of this kind (both including this one). */
int sim_fault_fires(const sim_fault *f, int kind, uint64_t calls_any, uint64_t calls_of_kind);

#endif
