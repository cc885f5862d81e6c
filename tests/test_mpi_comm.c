/* Every collective of the mpi runtime's communicator, in real processes: run
 * under mpirun (-np 1 to 4; tests/CMakeLists.txt runs 3 and 4), the checks the
 * simulator's communicator passes (tests/comm_checks.c) on the world and on
 * split groups, each result against its closed form, large all_reduce sums
 * bit for bit in rank order. Exit 0 when every rank passed. */
#include <stdio.h>

#include "runtimes/mpi/mpi_runtime.h"
#include "core/runtime/launcher_env.h"
#include "tests/comm_checks.h"

static usp_status every_check(const usp_rank_ctx *ctx, void *arg)
{
    USP_CHECK(comm_checks_on_world(ctx, arg));
    return comm_checks_on_split_groups(ctx, arg);
}

int main(void)
{
    int world = usp_launcher_processes(NULL);
    usp_runtime_t *rt = NULL;
    usp_status s = mpi_runtime_create(&(usp_runtime_options){.world_size = world > 0 ? world : 1,
                                                             .check_collectives = 1, .timeout_s = 60}, &rt);
    if (s == USP_OK)
        s = usp_runtime_run(rt, every_check, NULL);
    if (s != USP_OK)
        fprintf(stderr, "test_mpi_comm: %s\n", usp_error_message());
    else if (usp_runtime_prints(rt))
        printf("test_mpi_comm: every collective exact on %d processes, on the world and on split groups\n",
               usp_runtime_world_size(rt));
    usp_runtime_destroy(rt);
    return s == USP_OK ? 0 : 1;
}
