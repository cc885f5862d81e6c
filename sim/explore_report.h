/* The report of an explored deadlock (sim/explore.h): the wait chain, the two
 * orders that conflict, and every GPU's stream heads; the snapshot for the
 * wait-for graph. */
#ifndef USP_SIM_EXPLORE_REPORT_H
#define USP_SIM_EXPLORE_REPORT_H

#include "sim/explore.h"
#include "sim/explore_model.h"

/* Writes the report of the deadlocked state `s` into out->report and out->snapshot. */
usp_status xreport_deadlock(const xmodel *m, const xstate *s, sim_explore_result *out);

#endif
