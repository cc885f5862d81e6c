/* A POSIX clock read as seconds in one double, for measuring durations (benches,
 * progress lines, the wall time of a run). */
#ifndef USP_CORE_BASE_CLOCK_SECONDS_H
#define USP_CORE_BASE_CLOCK_SECONDS_H

#include <time.h>

/* Clock `id`'s time in seconds (CLOCK_MONOTONIC, CLOCK_PROCESS_CPUTIME_ID, ...). */
static inline double usp_clock_seconds(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Monotonic seconds from an arbitrary start: the difference of two is a wall-clock duration. */
static inline double usp_wall_seconds(void) { return usp_clock_seconds(CLOCK_MONOTONIC); }

#endif
