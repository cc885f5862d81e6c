/* The compute backend registry (compute_backends.h). */
#include "backends/registry/compute_backends.h"

#include <stdio.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/lazy/lazy_backend.h"
#include "backends/meta/meta_backend.h"
#ifdef USP_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"

/* Every rank's backend on GPU 0 (several simulated ranks share it). */
static usp_status cuda_on_gpu0(usp_backend_t **out) { return usp_backend_cuda_create(0, out); }

static int cuda_runs_here(char *why, size_t size) { return usp_cuda_device_count(why, size) > 0; }
#endif

static const usp_compute_backend backends[] = {
    {.name = "cpu", .about = "the CPU: OpenMP and OpenBLAS, fp32 kernels (bf16 storage widened)", .numeric = 1,
     .create = usp_backend_cpu_create},
    {.name = "lazy", .about = "the cpu kernels run as late as the stream contracts allow, stream order checked",
     .numeric = 1, .create = usp_backend_lazy_create},
    {.name = "meta", .about = "shapes only: costs and memory, no numbers", .numeric = 0,
     .create = usp_backend_meta_create},
#ifdef USP_HAVE_CUDA
    {.name = "cuda", .about = "an NVIDIA GPU: CUDA kernels and cuBLAS", .numeric = 1, .device_memory = 1,
     .runs_here = cuda_runs_here, .create = cuda_on_gpu0},
#else
    {.name = "cuda", .about = "an NVIDIA GPU: CUDA kernels and cuBLAS", .numeric = 1, .device_memory = 1,
     .needs = "the CUDA Toolkit (nvcc and cuBLAS) at build time"},
#endif
};

#define N_BACKENDS ((int)(sizeof backends / sizeof *backends))

int usp_compute_backend_count(void) { return N_BACKENDS; }

const usp_compute_backend *usp_compute_backend_at(int i) { return i >= 0 && i < N_BACKENDS ? &backends[i] : NULL; }

const usp_compute_backend *usp_compute_backend_find(const char *name)
{
    for (int i = 0; name && i < N_BACKENDS; i++)
        if (strcmp(backends[i].name, name) == 0)
            return &backends[i];
    return NULL;
}

void usp_compute_backends_describe(char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_BACKENDS && at < size; i++) {
        const usp_compute_backend *b = &backends[i];
        const char *note = b->needs ? b->needs : !b->numeric ? "shapes only" : i == 0 ? "default" : NULL;
        at += (size_t)snprintf(buf + at, size - at, "%s%s%s%s%s", i ? ", " : "", b->name, note ? " (" : "",
                               note && b->needs ? "needs " : "", note ? note : "");
        if (note && at < size)
            at += (size_t)snprintf(buf + at, size - at, ")");
    }
}

usp_status usp_compute_backend_check(const char *option, const char *name)
{
    const usp_compute_backend *b = usp_compute_backend_find(name);
    char known[512], why[256];
    const size_t len = strlen(option);
    const char *sep = len > 0 && option[len - 1] == '=' ? "" : " "; /* "--sim-compute cuda", "USP_TEST_BACKEND=cuda" */
    if (!b) {
        usp_compute_backends_describe(known, sizeof known);
        return usp_error(USP_ERR_CONFIG, "%s%s%s: unknown compute backend; the compute backends are %s", option, sep,
                         name ? name : "(none)", known);
    }
    if (!b->create)
        return usp_error(USP_ERR_CONFIG, "%s%s%s: not in this build (the %s backend needs %s)", option, sep, name, name,
                         b->needs);
    if (b->runs_here && !b->runs_here(why, sizeof why))
        return usp_error(USP_ERR_CONFIG, "%s%s%s: the %s backend cannot run here: %s", option, sep, name, name, why);
    return USP_OK;
}
