/* The CPU compute backend: host memory, OpenMP, CBLAS (OpenBLAS).
 *
 * Every simulated rank's buffers live in this one process, and Linux
 * overcommits: a model too big for the machine would be killed by the kernel
 * mid-run rather than fail an allocation. So the cpu backends of a process
 * share one budget, the memory available when the first buffer is allocated
 * (MemAvailable of /proc/meminfo; USP_CPU_MEMORY_LIMIT overrides it), and
 * an allocation past it fails cleanly (USP_ERR_RUNTIME) with a message that
 * points to planning on shapes only.
 *
 * USP_CPU_MEMORY_LIMIT is a whole number of bytes above 0, optionally followed
 * by one of K, M, G, T (powers of 1024): 3000000, 512M, 8G. Anything else
 * (1e9, -1, 10GB, 1.5G, an empty value) makes the first allocation fail with
 * USP_ERR_CONFIG naming the variable and its value. */
#ifndef USP_CPU_BACKEND_H
#define USP_CPU_BACKEND_H

#include "core/ops/ops.h"

/* Creates a CPU backend (one per rank). */
usp_status usp_backend_cpu_create(usp_backend_t **out);

struct usp_backend_i;

/* The CPU backend's slot table, for backends that run its kernels their own way (backends/lazy/). */
const struct usp_backend_i *usp_backend_cpu_interface(void);

#endif
