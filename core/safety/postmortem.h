/* The report of a run that hung or lost a rank under a real backend, made
 * afterwards from the ranks' flight records (core/safety/flight_recorder.h): the
 * same deadlock, mismatch and rank-failure reports (core/safety/comm_report.h) the
 * simulator prints while it runs, and the same wait-for graph.
 *
 * Each record says the call its rank was in and how many calls it had issued
 * on each of its groups. Matching is NCCL's and MPI's (the k-th call of every
 * member of a group is one collective), so a rank blocked in call #s on group
 * G waits for each member of G that issued fewer than s calls on G; a blocked
 * send or receive waits for its peer. A rank without a record (SIGKILLed, or
 * never started) is USP_RANK_MISSING: every rank that needs it waits for it. */
#ifndef USP_POSTMORTEM_H
#define USP_POSTMORTEM_H

#include "core/safety/comm_report.h"
#include "core/safety/flight_record.h"

typedef struct usp_postmortem usp_postmortem;

/* Reads every DIR/rank-<R>.usp-flight.json (ranks may be missing). No record
 * at all, a file that is no whole flight record, or records of different
 * world sizes: USP_ERR_CONFIG naming DIR or the file and the field. */
usp_status usp_postmortem_load(const char *dir, usp_postmortem **out);

/* An empty postmortem of `world_size` ranks, filled with usp_postmortem_add
 * (records received over the network rather than read from files). */
usp_status usp_postmortem_create(int world_size, usp_postmortem **out);

/* Adds the record in `json`; `where` names it in messages. A second record of
 * one rank, or one of another world size: USP_ERR_CONFIG. */
usp_status usp_postmortem_add(usp_postmortem *pm, const char *json, const char *where);

/* The number of ranks the records describe. */
int usp_postmortem_world_size(const usp_postmortem *pm);

/* World rank `rank`'s record, or NULL when it left none. */
const usp_flight_record *usp_postmortem_record(const usp_postmortem *pm, int rank);

/* Appends the report to `text` and returns what the run came to: USP_OK when
 * every rank exited OK (one line says so), USP_ERR_COLLECTIVE for a deadlock
 * or a collective mismatch, USP_ERR_RANK_FAILED when a rank crashed, failed
 * or left no record, USP_ERR_RUNTIME when no rank was blocked or lost but
 * some still ran (the records show no cause). */
usp_status usp_postmortem_report(usp_postmortem *pm, usp_strbuf *text);

/* The wait-for graph of the report (after usp_postmortem_report; kind
 * USP_REPORT_NONE when it found nothing to draw), captioned with `source`. */
usp_status usp_postmortem_wait_graph(const usp_postmortem *pm, const char *source, usp_wait_graph *out);

/* Frees the postmortem and its records (NULL is a no-op). */
void usp_postmortem_destroy(usp_postmortem *pm);

#endif
