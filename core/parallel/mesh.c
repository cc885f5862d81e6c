/* The device mesh: shape checks and the four splits of the world group. */
#include "core/parallel/mesh.h"

#include <stdio.h>
#include <string.h>

/* Writes the divisors of n into buf as "1, 2, 4 or 8". */
static void list_divisors(int n, char *buf, size_t size)
{
    int divisors[64], count = 0;
    for (int d = 1; d <= n && count < 64; d++)
        if (n % d == 0)
            divisors[count++] = d;
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < count && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%d", i == 0 ? "" : i == count - 1 ? " or " : ", ",
                               divisors[i]);
}

usp_status usp_mesh_shape_make(int world, int ulysses, int ring, usp_mesh_shape *out)
{
    if (world < 1)
        return usp_error(USP_ERR_CONFIG, "--world %d: the number of ranks must be at least 1", world);
    if (ulysses < 1)
        return usp_error(USP_ERR_CONFIG, "--ulysses %d: the Ulysses degree must be at least 1 (1 turns Ulysses off)",
                         ulysses);
    if (ring < 1)
        return usp_error(USP_ERR_CONFIG, "--ring %d: the Ring degree must be at least 1 (1 turns Ring off)", ring);
    if ((long long)ulysses * ring > world || world % (ulysses * ring) != 0) {
        char options[256];
        list_divisors(world / (world % ring == 0 ? ring : 1), options, sizeof options);
        return usp_error(USP_ERR_CONFIG,
                         "--ulysses %d x --ring %d = %lld does not divide --world %d: the world is "
                         "DP x Ulysses x Ring, so U*R must divide W; with --ring %d, --ulysses can be %s",
                         ulysses, ring, (long long)ulysses * ring, world, world % ring == 0 ? ring : 1,
                         options);
    }
    *out = (usp_mesh_shape){.world = world, .dp = world / (ulysses * ring), .ring = ring, .ulysses = ulysses};
    return USP_OK;
}

void usp_mesh_coords(const usp_mesh_shape *shape, int rank, int *d, int *r, int *u)
{
    *u = rank % shape->ulysses;
    *r = rank / shape->ulysses % shape->ring;
    *d = rank / (shape->ulysses * shape->ring);
}

usp_status usp_mesh_create(usp_comm_t *world, const usp_mesh_shape *shape, usp_mesh *out)
{
    memset(out, 0, sizeof *out);
    if (usp_comm_size(world) != shape->world)
        return usp_error(USP_ERR_CONFIG, "the mesh is for --world %d but the world group has %d ranks",
                         shape->world, usp_comm_size(world));
    int w = usp_comm_rank(world), d, r, u;
    usp_mesh_coords(shape, w, &d, &r, &u);
    const int U = shape->ulysses, R = shape->ring;
    *out = (usp_mesh){.shape = *shape, .rank = w, .d = d, .r = r, .u = u};
    char name[64];
    usp_status s;
    snprintf(name, sizeof name, "ulysses[%d]", d * R + r);
    USP_CHECK_GOTO(usp_comm_split(world, d * R + r, u, name, &out->ulysses), s, fail);
    snprintf(name, sizeof name, "ring[%d]", d * U + u);
    USP_CHECK_GOTO(usp_comm_split(world, d * U + u, r, name, &out->ring), s, fail);
    snprintf(name, sizeof name, "sp[%d]", d);
    USP_CHECK_GOTO(usp_comm_split(world, d, r * U + u, name, &out->sp), s, fail);
    snprintf(name, sizeof name, "dp[%d]", r * U + u);
    USP_CHECK_GOTO(usp_comm_split(world, r * U + u, d, name, &out->dp), s, fail);
    return USP_OK;
fail:
    usp_mesh_destroy(out);
    return s;
}

void usp_mesh_destroy(usp_mesh *mesh)
{
    usp_comm_destroy(mesh->ulysses);
    usp_comm_destroy(mesh->ring);
    usp_comm_destroy(mesh->sp);
    usp_comm_destroy(mesh->dp);
    mesh->ulysses = mesh->ring = mesh->sp = mesh->dp = NULL;
}
