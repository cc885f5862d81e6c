/* A trace as bytes and back: how the ranks of a real backend, each recording
 * its own events in its own process, bring them to rank 0, which writes one
 * file for the whole world (runtimes/process/mpi_trace_gather.h).
 *
 * The bytes are text, one event a line, fields separated by tabs (names and
 * call sites hold none), doubles printed exactly (%.17g): what rank 0 rebuilds
 * is the event every rank recorded. */
#ifndef USP_TRACE_PACK_H
#define USP_TRACE_PACK_H

#include <stddef.h>

#include "core/trace/trace.h"

/* The events, compute spans and steps of `t` as text (malloc'd, *size bytes, NUL-terminated). */
usp_status usp_trace_pack(const usp_trace_t *t, char **out, size_t *size);

/* Appends to `t` what usp_trace_pack wrote (`size` bytes of `text`); `from` names the source in errors
 * ("rank 3"). A malformed line is a USP_ERR_RUNTIME naming its number. */
usp_status usp_trace_unpack(usp_trace_t *t, const char *text, size_t size, const char *from);

#endif
