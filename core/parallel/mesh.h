/* The device mesh: world W = DP x R x U, Ulysses innermost.
 *
 * World rank w has coordinates (d, r, u) with w = (d * R + r) * U + u, so a
 * Ulysses group (the most bandwidth-hungry: two all-to-alls per attention
 * layer) is U consecutive ranks and stays inside a node when U divides the
 * GPUs per node. Groups of rank w:
 *   ulysses: the U ranks with the same (d, r)    ordered by u
 *   ring:    the R ranks with the same (d, u)    ordered by r
 *   sp:      the U*R ranks with the same d       ordered by r * U + u (sequence order)
 *   dp:      the DP ranks with the same (r, u)   ordered by d */
#ifndef USP_MESH_H
#define USP_MESH_H

#include "core/comm/comm.h"

typedef struct usp_mesh_shape {
    int world, dp, ring, ulysses;
} usp_mesh_shape;

typedef struct usp_mesh {
    usp_mesh_shape shape;
    int rank;             /* world rank */
    int d, r, u;          /* coordinates */
    usp_comm_t *ulysses, *ring, *sp, *dp;
} usp_mesh;

/* Checks W, U and R (each >= 1, U*R divides W) and fills the shape; the
 * message of a bad shape names --world, --ulysses and --ring and what would work. */
usp_status usp_mesh_shape_make(int world, int ulysses, int ring, usp_mesh_shape *out);

/* Coordinates of world rank `rank` in `shape`. */
void usp_mesh_coords(const usp_mesh_shape *shape, int rank, int *d, int *r, int *u);

/* Splits `world` into the four groups of the calling rank (collective over world). */
usp_status usp_mesh_create(usp_comm_t *world, const usp_mesh_shape *shape, usp_mesh *out);

/* Frees the rank's group handles. */
void usp_mesh_destroy(usp_mesh *mesh);

#endif
