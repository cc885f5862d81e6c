/* Writing DOT text: quoting, byte sizes, and the look every usp diagram shares
 * (title block on top, Helvetica, a legend as the last line of the title).
 *
 * Diagrams are built as text, not through Graphviz's graph API, so that the
 * DOT is byte-stable (golden tests compare it) and exists in builds without
 * Graphviz; rendering (viz/render.h) parses it back. */
#ifndef USP_VIZ_DOT_H
#define USP_VIZ_DOT_H

#include <stdint.h>

#include "core/base/strbuf.h"

/* Above this many ranks in one picture's main group, a diagram draws one node
 * per rank instead of one per slice or block, and says so in its title. */
#define VIZ_DETAIL_MAX_RANKS 8

/* Above this many rank-to-rank arrows, a diagram routes them through one hub
 * node per group (or per node of the cluster) and says so in its title. */
#define VIZ_MAX_ARROWS 96

/* "384 B", "1.5 KiB", "12 MiB": three significant figures at most, in binary units. */
const char *viz_bytes(uint64_t bytes, char buf[32]);

/* Appends `text` as a DOT quoted string; a newline in text becomes a centred line break. */
void viz_dot_quote(usp_strbuf *b, const char *text);

/* Appends `text` escaped for an HTML-like label (& < > "); a newline becomes <br/>. */
void viz_dot_html(usp_strbuf *b, const char *text);

/* Opens a digraph named `name` with the shared look: `title` in bold on top,
 * then `caption` lines (the legend; may be NULL); rankdir LR when left_to_right. */
void viz_dot_begin(usp_strbuf *b, const char *name, const char *title, const char *caption, int left_to_right);

/* Closes the digraph. */
void viz_dot_end(usp_strbuf *b);

/* A fill colour for group or slot `i`: eight light colours that stay apart in print. */
const char *viz_dot_fill(int i);

/* The matching darker line colour for arrows of slot `i`. */
const char *viz_dot_line(int i);

#endif
