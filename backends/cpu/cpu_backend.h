/* The CPU compute backend: host memory, OpenMP, CBLAS (OpenBLAS). */
#ifndef USP_CPU_BACKEND_H
#define USP_CPU_BACKEND_H

#include "core/ops.h"

/* Creates a CPU backend (one per rank). */
usp_status usp_backend_cpu_create(usp_backend_t **out);

#endif
