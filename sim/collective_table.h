/* Measured collective times, as usp calibrate wrote them into a topology file
 * ("collectives"; docs/cluster_model.md, "Calibrated collectives").
 *
 * The alpha-beta fit gives the links (calibrate/calibration.h), which price any
 * group on the cluster; but a machine's time for one call is not always a
 * line in its size (MPI over shared memory on a CPU: 17 GB/s at 1 MiB, under
 * 1 GB/s from 4 MiB, when the messages leave the cache). A table keeps what
 * was measured: for a kind of collective over a group of `ranks` (within one
 * node or spanning nodes, as measured), the seconds at each measured size,
 * interpolated linearly in log(time) over log(size) between them; below the
 * smallest the smallest's time, above the largest the largest's bandwidth.
 * A collective the table has (the same kind, ranks and span) is priced by it;
 * any other by the links.
 *
 * The size is the key both sides compute the same way from the traffic
 * (usp_comm_op_traffic's form): the most bytes one member sends to the others.
 *
 * A table is cold (each call after every member flushed its cache) or hot
 * (the call again at once, its buffers in cache), as the kernel classes
 * (sim/kernel_model.h); a hot table holds the sizes whose buffers fit half the
 * cache, and prices nothing larger. A call whose members' caches hold a
 * fraction h of their buffers (sim/cache_model.h) takes h x hot + (1 - h) x
 * cold where the hot table reaches its key, else the cold time. */
#ifndef USP_SIM_COLLECTIVE_TABLE_H
#define USP_SIM_COLLECTIVE_TABLE_H

#include <jansson.h>
#include <stdint.h>

#include "core/comm/comm.h"
#include "core/base/status.h"

#define SIM_COLLECTIVE_TABLES_MAX 24 /* all_to_all and all_reduce at 3 levels, cold and hot, and room */
#define SIM_COLLECTIVE_SIZES_MAX 16

typedef struct sim_collective_table {
    usp_comm_kind kind;  /* USP_OP_ALL_TO_ALL, USP_OP_ALL_REDUCE */
    int ranks;           /* the group's size */
    int spans_nodes;     /* 0: the group is within one node; 1: it spans nodes */
    int hot;             /* 1: its buffers in cache (the call again at once); 0: after a flush */
    int n;               /* sizes, >= 1 */
    double bytes[SIM_COLLECTIVE_SIZES_MAX];   /* the key, ascending, > 0 */
    double seconds[SIM_COLLECTIVE_SIZES_MAX]; /* > 0 */
} sim_collective_table;

typedef struct sim_collective_tables {
    int n;
    sim_collective_table tables[SIM_COLLECTIVE_TABLES_MAX];
} sim_collective_tables;

/* The key of a collective: the most bytes one member sends to another member (bytes[k] from src[k] to
 * dst[k], k < entries; a member's bytes to itself do not count). */
double sim_collective_key(size_t entries, const int *src, const int *dst, const uint64_t *bytes, int n);

/* The cold table for (kind, ranks, spans_nodes), or NULL. */
const sim_collective_table *sim_collective_find(const sim_collective_tables *t, usp_comm_kind kind, int ranks,
                                                int spans_nodes);

/* The hot (hot 1) or cold (0) table for (kind, ranks, spans_nodes), or NULL. */
const sim_collective_table *sim_collective_find_in(const sim_collective_tables *t, usp_comm_kind kind, int ranks,
                                                   int spans_nodes, int hot);

/* Seconds of a call of key `bytes` whose members' caches hold the fraction `held` of their buffers: the cold
 * table's, blended with the hot one's where there is one that reaches `bytes` (see above); cold must not be
 * NULL, hot may be. */
double sim_collective_seconds_held(const sim_collective_table *cold, const sim_collective_table *hot, double bytes,
                                   double held);

/* Seconds the table gives a call of key `bytes` (see above). */
double sim_collective_seconds(const sim_collective_table *t, double bytes);

/* Appends a table (USP_ERR_CONFIG when full, or when one of the same kind, ranks, span and cache state is there). */
usp_status sim_collective_add(sim_collective_tables *t, const sim_collective_table *table);

/* The tables as the topology file's "collectives" array; NULL when out of memory. */
json_t *sim_collective_tables_to_json(const sim_collective_tables *t);

/* Reads the "collectives" array (absent: none); messages name the file ("where") and the field. */
usp_status sim_collective_tables_from_json(const json_t *array, const char *where, sim_collective_tables *out);

#endif
