/* The communicator of a world of one rank: every collective is a copy on the
 * rank's own backend (a sum over one operand is that operand), a split makes
 * another one-rank group. It lets a real backend train on one device before a
 * communication library is there (the cuda backend on one GPU), with the same
 * stream order as the other ops. */
#ifndef USP_COMM_SINGLE_H
#define USP_COMM_SINGLE_H

#include "core/comm/comm.h"
#include "core/ops/ops.h"

/* The world group of a one-rank run on `backend` (named "world"). */
usp_status usp_comm_single_world(usp_backend_t *backend, usp_comm_t **out);

#endif
