/* Whether a launcher started this process (launcher_env.h). */
#include "core/runtime/launcher_env.h"

#include <stdlib.h>

int usp_launcher_processes(const char **var)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        int n = v ? atoi(v) : 0;
        if (n > 0) {
            if (var)
                *var = vars[i];
            return n;
        }
    }
    return 0;
}
