/* Every collective checked element by element on a group (tests/comm_checks.c). */
#ifndef USP_TESTS_COMM_CHECKS_H
#define USP_TESTS_COMM_CHECKS_H

#include "core/comm/comm.h"
#include "core/runtime/rank.h"

/* All kinds of call on `g`, each result against its closed form. */
usp_status comm_checks_everything(const usp_rank_ctx *ctx, usp_comm_t *g);

/* A rank's main: comm_checks_everything on the world. */
usp_status comm_checks_on_world(const usp_rank_ctx *ctx, void *arg);

/* A rank's main: split the world by parity (keys reversing the order, rank 0
 * opting out when W > 2), check the groups' shape and everything on them. */
usp_status comm_checks_on_split_groups(const usp_rank_ctx *ctx, void *arg);

#endif
