/* DOT text helpers (see dot.h). */
#include "viz/dot.h"

#include <stdio.h>
#include <string.h>

/* Removes trailing zeros (and a trailing point) of a decimal number in `s`. */
static void trim_zeros(char *s)
{
    if (!strchr(s, '.'))
        return;
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '0')
        s[--n] = '\0';
    if (n > 0 && s[n - 1] == '.')
        s[--n] = '\0';
}

const char *viz_bytes(uint64_t bytes, char buf[32])
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    char num[24];
    if (u == 0)
        snprintf(num, sizeof num, "%llu", (unsigned long long)bytes);
    else
        snprintf(num, sizeof num, v >= 100.0 ? "%.0f" : v >= 10.0 ? "%.1f" : "%.2f", v);
    trim_zeros(num);
    snprintf(buf, 32, "%s %s", num, units[u]);
    return buf;
}

void viz_dot_quote(usp_strbuf *b, const char *text)
{
    usp_strbuf_printf(b, "\"");
    for (const char *p = text; *p; p++) {
        if (*p == '\n')
            usp_strbuf_printf(b, "\\n");
        else if (*p == '"' || *p == '\\')
            usp_strbuf_printf(b, "\\%c", *p);
        else
            usp_strbuf_printf(b, "%c", *p);
    }
    usp_strbuf_printf(b, "\"");
}

void viz_dot_html(usp_strbuf *b, const char *text)
{
    for (const char *p = text; *p; p++)
        switch (*p) {
        case '&': usp_strbuf_printf(b, "&amp;"); break;
        case '<': usp_strbuf_printf(b, "&lt;"); break;
        case '>': usp_strbuf_printf(b, "&gt;"); break;
        case '"': usp_strbuf_printf(b, "&quot;"); break;
        case '\n': usp_strbuf_printf(b, "<br/>"); break;
        default: usp_strbuf_printf(b, "%c", *p);
        }
}

void viz_dot_begin(usp_strbuf *b, const char *name, const char *title, const char *caption, int left_to_right)
{
    usp_strbuf_printf(b, "digraph %s {\n", name);
    usp_strbuf_printf(b, "  graph [fontname=\"Helvetica\", fontsize=12, labelloc=t, labeljust=l, "
                         "pad=0.3, nodesep=0.25, ranksep=0.6%s,\n         label=<<b>",
                      left_to_right ? ", rankdir=LR" : "");
    usp_strbuf_printf(b, "<font point-size=\"16\">");
    viz_dot_html(b, title);
    usp_strbuf_printf(b, "</font></b>");
    /* Each caption line left-aligned under the title: a legend a newcomer reads first. */
    for (const char *line = caption; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        usp_strbuf_printf(b, "<br align=\"left\"/>");
        char piece[512];
        snprintf(piece, sizeof piece, "%.*s", (int)(n < sizeof piece ? n : sizeof piece - 1), line);
        viz_dot_html(b, piece);
        line = end ? end + 1 : line + n;
    }
    usp_strbuf_printf(b, "<br align=\"left\"/>>];\n");
    usp_strbuf_printf(b, "  node [fontname=\"Helvetica\", fontsize=11];\n");
    usp_strbuf_printf(b, "  edge [fontname=\"Helvetica\", fontsize=10];\n");
}

void viz_dot_end(usp_strbuf *b) { usp_strbuf_printf(b, "}\n"); }

/* ColorBrewer Pastel1/Set1-like pairs, chosen to stay distinct in greyscale print too. */
static const char *fills[8] = {"#cfe2f3", "#fce5cd", "#d9ead3", "#ead1dc",
                               "#fff2cc", "#d0e0e3", "#f4cccc", "#d9d2e9"};
static const char *lines[8] = {"#1f5f99", "#b45f06", "#38761d", "#a64d79",
                               "#bf9000", "#134f5c", "#990000", "#351c75"};

const char *viz_dot_fill(int i) { return fills[((i % 8) + 8) % 8]; }
const char *viz_dot_line(int i) { return lines[((i % 8) + 8) % 8]; }
