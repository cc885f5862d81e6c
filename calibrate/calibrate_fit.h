/* The fit of a calibration: what every rank of `usp calibrate` measured (calibrate_measure.h), gathered
 * to rank 0, made into the cluster model (calibration.h): the topology `usp plan --topology` reads, its
 * GPU's kernel classes and its collective tables included. tools/cmd_calibrate.c prints and writes it. */
#ifndef USP_CALIBRATE_FIT_H
#define USP_CALIBRATE_FIT_H

#include "calibrate/calibrate_measure.h"
#include "calibrate/calibration.h"

/* What the fit takes besides the measurements (the options of usp calibrate that set it). */
typedef struct calibrate_fit_options {
    const char *name;      /* the topology's (NULL: "calibrated") */
    const char *backend;   /* the runtime measured: with "sim", the cache and memory of the modelled GPU */
    const char *topology;  /* --backend sim: the modelled cluster (NULL: dgx-h100) and its nodes (0: as needed) */
    int nodes;
    double memory_gb;      /* > 0: the GPU's memory; else the modelled GPU's, the host's a rank, or 80 GB */
    double cache_mb;       /* > 0: the cache a rank's ops share; else the modelled GPU's, the backend's, or none */
} calibrate_fit_options;

typedef struct calibrate_result {
    sim_calibration cal;
    sim_topology topology;
    char name[64];
    const char *memory_from, *cache_from; /* where the memory and the cache came from, for the report */
} calibrate_result;

/* The collective calibrate's op `op` (CAL_OP_*) is: all_to_all, all_reduce, sendrecv. */
usp_comm_kind calibrate_op_kind(int op);

/* The slowest rank's time of call i of `op` on `level` (cold, or hot), to the 6 digits of microseconds the
 * topology file keeps: the fits take what a reader of the file sees. */
double calibrate_slowest_of(const calibrate_run *run, int world, int level, int op, int i, int hot);
double calibrate_slowest(const calibrate_run *run, int world, int level, int op, int i);

/* Fits the run's measurements into res (the calibration and the topology made from it). USP_ERR_RUNTIME
 * when a level's timings cannot be fitted (a failed run). */
usp_status calibrate_fit(const calibrate_fit_options *o, const calibrate_run *run, int world, calibrate_result *res);

#endif
