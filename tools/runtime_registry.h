/* The runtimes this build has, by the name --backend gives (core/runtime/runtime.h):
 * commands make their runtime here, never by building one by hand. */
#ifndef USP_TOOLS_RUNTIME_REGISTRY_H
#define USP_TOOLS_RUNTIME_REGISTRY_H

#include "core/runtime/runtime.h"

/* USP_OK when this build has the runtime `name`; else a USP_ERR_CONFIG naming
 * --backend, the value, and what this build has (or what it would need). */
usp_status runtime_registry_check(const char *name);

/* Makes the runtime `name` for `o` (runtime_registry_check's errors first). */
usp_status runtime_registry_create(const char *name, const usp_runtime_options *o, usp_runtime_t **out);

/* When the runtime `name` runs a process per rank and no launcher started
 * this one, starts them: this command line (`argv`) again under mpirun
 * (runtimes/process/mpi_self_launch.h), and does not return. USP_OK when there
 * is nothing to start (sim, one rank, under a launcher); USP_ERR_CONFIG when
 * they cannot be started (no GPU or too few, no mpirun, root without Open
 * MPI's consent, the recursion guard). */
usp_status runtime_registry_launch(const char *name, const usp_runtime_options *o, char *const *argv);

/* --sim-compute NAME (NULL: not given): the compute backend of the simulator's ranks, cpu or cuda (every rank on
 * GPU 0, its memory moved through host copies), set in o when o is not NULL. USP_ERR_CONFIG naming the option
 * and the value when NAME is unknown, not in this build, or given with another runtime or with --meta. */
usp_status runtime_registry_sim_compute(const char *runtime, const char *compute, int shapes_only,
                                        usp_runtime_options *o);

/* "sim (in this build), nccl (needs ...), mpi (in this build)": what --backend can name, into buf. */
void runtime_registry_describe(char *buf, size_t size);

/* USP_ERR_CONFIG when a launcher (mpirun, srun) started this process as one of several and `name` runs
 * every rank in one process (sim): each process would run a whole simulation of its own, its output
 * printed once per process. The message names --backend mpi. */
usp_status runtime_registry_check_launcher(const char *name, const char *command);

/* The help of --attention: the schedules of the table (core/parallel/schedule.h); `planned`: usp plan's. */
const char *runtime_registry_attention_help(int planned);

/* The world size when --world is not given: the launcher's process count for
 * a runtime that a launcher starts (mpi), else 4. */
int runtime_registry_default_world(const char *name);

#endif
