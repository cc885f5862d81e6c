/* Faults of the safety net itself, for --inject on the real backends (mpi,
 * nccl): what the comm decorator (core/safety/comm_decorator.h) cannot plant,
 * since they sit below it, in the transport, the abort and the making of the
 * world communicator. The syntax is --inject's (KIND:rank=R[,op=OP][,call=K]):
 *
 *   stall       rank R's K-th call of OP never reaches the backend: it waits
 *               forever once the flight recorder has posted it (a call queued
 *               behind compute that never ends), so its record says "never
 *               started" while its peers are inside the call
 *   abort-hang  rank R's abort of its communicators never returns (as an
 *               ncclCommAbort may not); op= and call= do not apply
 *   init-crash  rank R dies while the world communicator is made, before its
 *               part of it (its record says so; the others wait inside it);
 *               op= and call= do not apply
 *
 * The simulator has none of these (it has no transport, abort or init). */
#ifndef USP_LAUNCH_FAULT_H
#define USP_LAUNCH_FAULT_H

#include "core/base/status.h"

typedef struct launch_faults launch_faults;

/* 1 when `spec` names one of these kinds (the others are the decorator's). */
int launch_fault_is_ours(const char *spec);

/* The faults among specs[0..n) that are ours, for world rank `rank` of `world_size` (a bad spec, or a rank
 * beyond the world, is USP_ERR_CONFIG naming it); *out is NULL when there are none for any rank. */
usp_status launch_faults_create(const char *const *specs, int n, int rank, int world_size, launch_faults **out);

/* Frees them (NULL is a no-op). */
void launch_faults_destroy(launch_faults *f);

/* Counts a call of kind `op` (usp_comm_kind) of this rank; a stall that fires for it never returns. */
void launch_fault_before_call(launch_faults *f, int op);

/* Called by the rank's abort: an abort-hang of this rank never returns from it. */
void launch_fault_in_abort(launch_faults *f);

/* 1 when this rank dies while the world communicator is made (init-crash). */
int launch_fault_init_crash(const launch_faults *f);

/* USP_OK, or USP_ERR_CONFIG naming a fault of this rank that never fired (the run ended well). */
usp_status launch_faults_check_fired(const launch_faults *f);

#endif
