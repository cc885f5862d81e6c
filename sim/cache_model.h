/* Which of an op's bytes a rank's cache still holds: least recently used over
 * the byte ranges the ops touch (usp_op_cost.operands), one model a simulated
 * rank (docs/cluster_model.md, "Calibrated kernels").
 *
 * A byte is in the cache when fewer than `capacity` distinct bytes were
 * touched after it (its reuse, or LRU stack, distance): Mattson's stack model
 * of a fully associative LRU cache, the bytes of a range touched in ascending
 * order and an op's ranges in order. It keeps the ranges touched, most recent
 * first and disjoint (a range touched again leaves its old place), and
 * forgets what lies deeper than the capacity; it gives what the byte-by-byte
 * model gives (tests/test_cache_model.c checks). Deterministic.
 *
 * A calibrated kernel model has a hot rate (the op run again at once) and a
 * cold one (after a flush); the fraction held blends them
 * (sim/kernel_model.h). Why: a step's small ops find their operands in cache,
 * its large ones stream them; a model of one or the other was off by 2x on a
 * CPU's tiny-model step (issue 28's loop). */
#ifndef USP_SIM_CACHE_MODEL_H
#define USP_SIM_CACHE_MODEL_H

#include "core/ops/ops.h"
#include "core/base/status.h"

typedef struct sim_cache sim_cache;

/* An empty cache of `capacity` bytes (> 0). */
usp_status sim_cache_create(double capacity, sim_cache **out);

void sim_cache_destroy(sim_cache *c);

/* The fraction of the ranges' bytes the cache held before the op (1 for no bytes), then the ranges become the
 * most recently used, in order. Out of memory, it forgets what it cannot keep (the fraction stays defined). */
double sim_cache_touch(sim_cache *c, const usp_range *ranges, int n);

#endif
