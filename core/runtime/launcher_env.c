/* Whether a launcher started this process (launcher_env.h). */
#include "core/runtime/launcher_env.h"

#include <stdlib.h>

/* What a launcher sets in each process it starts: their count and this one's rank. */
static const struct launcher_vars {
    const char *size, *rank;
} launchers[] = {
    {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
    {"PMIX_SIZE", "PMIX_RANK"},
    {"PMI_SIZE", "PMI_RANK"},
    {"SLURM_STEP_NUM_TASKS", "SLURM_PROCID"},
};

/* The launcher whose variables this process has (NULL: none) and its process count. */
static const struct launcher_vars *launcher_of(int *processes)
{
    for (size_t i = 0; i < sizeof launchers / sizeof *launchers; i++) {
        const char *v = getenv(launchers[i].size);
        int n = v ? atoi(v) : 0;
        if (n > 0) {
            *processes = n;
            return &launchers[i];
        }
    }
    *processes = 0;
    return NULL;
}

int usp_launcher_processes(const char **var)
{
    int n;
    const struct launcher_vars *l = launcher_of(&n);
    if (l && var)
        *var = l->size;
    return n;
}

int usp_launcher_rank(void)
{
    int n;
    const struct launcher_vars *l = launcher_of(&n);
    const char *rank = l && n > 1 ? getenv(l->rank) : NULL;
    return rank && *rank >= '0' && *rank <= '9' ? atoi(rank) : -1;
}
