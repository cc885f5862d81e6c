/* Diagram files: DOT text always, SVG, PNG and PDF rendered in-process by
 * Graphviz's library (libgvc) when the build has it: no `dot` program is run.
 * The file's extension chooses the format, and every file is written whole
 * or not at all (core/base/atomic_file.h). */
#ifndef USP_VIZ_RENDER_H
#define USP_VIZ_RENDER_H

#include <stddef.h>

#include "core/base/status.h"

typedef enum viz_format { VIZ_FORMAT_DOT, VIZ_FORMAT_SVG, VIZ_FORMAT_PNG, VIZ_FORMAT_PDF } viz_format;

/* The format named by `path`'s extension (.dot or .gv, .svg, .png, .pdf; any case).
 * Anything else is USP_ERR_CONFIG naming `option`, the path and what works. */
usp_status viz_format_of_path(const char *option, const char *path, viz_format *out);

/* 1 when this build renders SVG, PNG and PDF (it was built with libgvc). */
int viz_can_render(void);

/* Checks, before anything runs, that `path` (given to `option`) names a format
 * this build can write: a known extension, and Graphviz for all but DOT. */
usp_status viz_check_output(const char *option, const char *path);

/* Lays `dot` out with Graphviz's dot engine and renders it as `format`
 * (not VIZ_FORMAT_DOT) into a malloc'd buffer *data of *size bytes. */
usp_status viz_render(const char *dot, viz_format format, char **data, size_t *size);

/* Writes `dot` to `path` in the format its extension names; `option` (e.g.
 * "--dot") names where the path came from in error messages. */
usp_status viz_write_file(const char *option, const char *dot, const char *path);

#endif
