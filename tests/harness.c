/* Test helpers (see harness.h). */
#include "tests/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

usp_status harness_run(int world, usp_rank_main_fn fn, void *arg, const sim_fault *faults, int n_faults,
                       char *report, size_t report_size)
{
    sim_config config = sim_config_default(world);
    config.faults = faults;
    config.n_faults = n_faults;
    config.stack_bytes = (size_t)1 << 20;
    sim_world *w;
    USP_CHECK(sim_world_create(&config, &w));
    usp_status s = sim_world_run(w, fn, arg);
    if (report)
        snprintf(report, report_size, "%s", s != USP_OK && !*sim_world_report(w) ? usp_error_message()
                                                                                 : sim_world_report(w));
    sim_world_destroy(w);
    return s;
}

usp_status harness_upload(const usp_rank_ctx *ctx, const void *host, size_t bytes, void **dev)
{
    USP_CHECK(usp_buffer_alloc(ctx->backend, bytes, "test", dev));
    if (!host)
        return usp_buffer_zero(ctx->backend, *dev, bytes, ctx->stream);
    return usp_buffer_copy(ctx->backend, *dev, host, bytes, USP_COPY_HOST_TO_DEVICE, ctx->stream);
}

usp_status harness_download(const usp_rank_ctx *ctx, void *host, const void *dev, size_t bytes)
{
    return usp_buffer_copy(ctx->backend, host, dev, bytes, USP_COPY_DEVICE_TO_HOST, ctx->stream);
}

usp_status harness_expect_eq(const usp_rank_ctx *ctx, const char *what, size_t index, double got, double want)
{
    if (got == want)
        return USP_OK;
    return usp_error(USP_ERR_RUNTIME, "rank %d of %d: %s: element %zu is %.17g, expected %.17g", ctx->rank,
                     ctx->world_size, what, index, got, want);
}

char *harness_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = calloc((size_t)n + 1, 1);
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n)
        text[0] = '\0';
    fclose(f);
    if (size)
        *size = (size_t)n;
    return text;
}
