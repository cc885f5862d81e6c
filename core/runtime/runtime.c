/* The runtime wrappers (see runtime.h and runtime_impl.h) and usp_rank_gather (rank.h). */
#include "core/runtime/runtime_impl.h"

#include <stdlib.h>
#include <string.h>

usp_status usp_runtime_make(const usp_runtime_i *iface, void *context, usp_runtime_t **out)
{
    USP_ASSERT(iface->api_version == USP_RUNTIME_API_VERSION, "runtime %s has API version %d, usp expects %d",
               iface->name, iface->api_version, USP_RUNTIME_API_VERSION);
    usp_status s = usp_calloc((void **)out, 1, sizeof **out, "a runtime");
    if (s != USP_OK) {
        iface->destroy(context);
        return s;
    }
    (*out)->iface = iface, (*out)->context = context;
    return USP_OK;
}

const char *usp_runtime_name(const usp_runtime_t *rt) { return rt->iface->name; }
int usp_runtime_world_size(const usp_runtime_t *rt) { return rt->iface->world_size(rt->context); }

int usp_runtime_prints(const usp_runtime_t *rt) { return rt->iface->prints ? rt->iface->prints(rt->context) : 1; }

usp_status usp_runtime_run(usp_runtime_t *rt, usp_rank_main_fn fn, void *arg)
{
    return rt->iface->run(rt->context, fn, arg);
}

const char *usp_runtime_report(const usp_runtime_t *rt)
{
    return rt->iface->report ? rt->iface->report(rt->context) : "";
}

const usp_trace_t *usp_runtime_trace(const usp_runtime_t *rt)
{
    return rt->iface->trace ? rt->iface->trace(rt->context) : NULL;
}

usp_runtime_cluster usp_runtime_cluster_of(const usp_runtime_t *rt) { return rt->iface->cluster(rt->context); }

void usp_runtime_destroy(usp_runtime_t *rt)
{
    if (!rt)
        return;
    rt->iface->destroy(rt->context);
    free(rt);
}

usp_status usp_rank_gather(const usp_rank_ctx *ctx, const void *mine, size_t bytes, void *all)
{
    if (ctx->rank == 0 && !all)
        return usp_error(USP_ERR_RUNTIME, "usp_rank_gather: rank 0 gives no array for the %d ranks' figures",
                         ctx->world_size);
    if (ctx->gather)
        return ctx->gather(ctx, mine, bytes, all);
    if (ctx->world_size != 1)
        return usp_error(USP_ERR_RUNTIME, "rank %d of %d: usp_rank_gather without a runtime to gather through "
                         "(usp_rank_ctx.gather is NULL)", ctx->rank, ctx->world_size);
    memmove(all, mine, bytes);
    return USP_OK;
}
