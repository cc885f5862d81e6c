/* Fibers: the simulated ranks run as coroutines on the thread that runs the
 * simulator, one at a time.
 *
 * Why fibers rather than one OS thread per rank: every OS thread that opens
 * an OpenMP parallel region gets its own thread pool, and idle pools spin
 * before they sleep; with 8 ranks on 2 cores, competing pools are the biggest
 * performance trap (docs/runtimes.md). On one OS thread, the ranks share one
 * OpenMP pool, and each rank's compute uses all cores. */
#ifndef USP_SIM_FIBER_H
#define USP_SIM_FIBER_H

#include <stddef.h>

#include "core/base/status.h"

typedef struct sim_fiber sim_fiber;
typedef void (*sim_fiber_fn)(void *arg);

/* A fiber that will run fn(arg) on its own stack of `stack_bytes` when first switched to. */
usp_status sim_fiber_create(size_t stack_bytes, sim_fiber_fn fn, void *arg, sim_fiber **out);

/* From the scheduler: runs `f` until it yields or its function returns. */
void sim_fiber_resume(sim_fiber *f);

/* From inside `f`: returns control to the scheduler. */
void sim_fiber_yield(sim_fiber *f);

/* 1 once the fiber's function has returned. */
int sim_fiber_finished(const sim_fiber *f);

/* Frees the fiber (its function must have returned, or never started). */
void sim_fiber_destroy(sim_fiber *f);

#endif
