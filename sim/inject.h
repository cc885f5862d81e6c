/* The simulator's former names of the fault spec (core/safety/comm_fault.h), kept so
 * that code written against them (tests, tutorials, tools) builds unchanged:
 * faults are applied by the communicator decorator now, not by the simulator. */
#ifndef USP_SIM_INJECT_H
#define USP_SIM_INJECT_H

#include "core/safety/comm_fault.h"

typedef usp_fault sim_fault;
typedef usp_fault_kind sim_fault_kind;
#define SIM_FAULT_SKIP USP_FAULT_SKIP
#define SIM_FAULT_SWAP USP_FAULT_SWAP
#define SIM_FAULT_SIZE USP_FAULT_SIZE
#define SIM_FAULT_GROUP USP_FAULT_GROUP
#define SIM_FAULT_CRASH USP_FAULT_CRASH

/* usp_fault_parse under its former name. */
static inline usp_status sim_fault_parse(const char *spec, sim_fault *out) { return usp_fault_parse(spec, out); }

/* usp_fault_kind_name under its former name. */
static inline const char *sim_fault_kind_name(sim_fault_kind kind) { return usp_fault_kind_name(kind); }

#endif
