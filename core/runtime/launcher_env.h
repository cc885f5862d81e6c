/* Whether a launcher started this process, read from the environment every
 * launcher sets in each process it starts.
 *
 * One reader for every caller: the guard against --backend sim under mpirun
 * (tools/runtime_registry.c), the default world of --backend mpi and nccl, and the
 * launcher room's choice between joining a launched world and starting one
 * (runtimes/process/). The variables are per process: Open MPI's
 * OMPI_COMM_WORLD_SIZE, PMIx's PMIX_SIZE, PMI's PMI_SIZE, srun's
 * SLURM_STEP_NUM_TASKS. Not SLURM_NTASKS: a batch script has it without srun,
 * and a process it starts by hand was launched by no one. */
#ifndef USP_LAUNCHER_ENV_H
#define USP_LAUNCHER_ENV_H

/* The number of processes a launcher started this one among, or 0 when none did; *var (when var is not NULL)
 * names the variable that said so. */
int usp_launcher_processes(const char **var);

/* This process's rank among the processes a launcher started (its rank variable), or -1 when none or only
 * one was started. */
int usp_launcher_rank(void);

/* The variables usp_launcher_processes reads, comma-separated, for messages. */
#define USP_LAUNCHER_VARIABLES "OMPI_COMM_WORLD_SIZE, PMIX_SIZE, PMI_SIZE, SLURM_STEP_NUM_TASKS"

#endif
