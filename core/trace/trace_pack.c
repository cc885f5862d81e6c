/* A trace as text and back (see trace_pack.h). Lines:
 *   C <rank> <op> <t_start> <t_end> <flops> <mem_bytes>               a compute span
 *   S <rank> <step> <t_start> <t_end>                                 a step
 *   M <rank> <group> <kind> <seq> <file> <line> <post> <start> <end> <peer:bytes,...|->   a call */
#include "core/trace/trace_pack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/strbuf.h"

usp_status usp_trace_pack(const usp_trace_t *t, char **out, size_t *size)
{
    usp_strbuf b = {0};
    for (size_t i = 0; i < usp_trace_compute_count(t); i++) {
        const usp_trace_event *e = usp_trace_compute_at(t, i);
        usp_strbuf_printf(&b, "C\t%d\t%s\t%.17g\t%.17g\t%.17g\t%.17g\n", e->rank, e->name, e->t_start, e->t_end,
                          e->flops, e->mem_bytes);
    }
    for (size_t i = 0; i < usp_trace_step_count(t); i++) {
        const usp_trace_step *s = usp_trace_step_at(t, i);
        usp_strbuf_printf(&b, "S\t%d\t%lld\t%.17g\t%.17g\n", s->rank, (long long)s->step, s->t_start, s->t_end);
    }
    for (size_t i = 0; i < usp_trace_count(t); i++) {
        const usp_trace_event *e = usp_trace_at(t, i);
        usp_strbuf_printf(&b, "M\t%d\t%s\t%d\t%llu\t%s\t%d\t%.17g\t%.17g\t%.17g\t", e->rank,
                          usp_trace_group_name(t, e->group), e->kind, (unsigned long long)e->seq,
                          e->file ? e->file : "?", e->line, e->t_post, e->t_start, e->t_end);
        const usp_trace_peer *p = usp_trace_peers(t, e);
        for (size_t j = 0; j < e->n_peers; j++)
            usp_strbuf_printf(&b, "%s%d:%llu", j ? "," : "", p[j].peer, (unsigned long long)p[j].bytes);
        usp_strbuf_printf(&b, "%s\n", e->n_peers ? "" : "-");
    }
    const char *text = usp_strbuf_text(&b);
    *size = strlen(text);
    *out = strdup(text);
    usp_strbuf_free(&b);
    return *out ? USP_OK : usp_error(USP_ERR_RUNTIME, "out of memory packing a trace of %zu events",
                                     usp_trace_count(t));
}

#define FIELDS_MAX 12

/* Splits `line` (modified) at tabs into at most FIELDS_MAX fields; returns how many. */
static int split_fields(char *line, char **field)
{
    int n = 0;
    for (char *p = line; n < FIELDS_MAX;) {
        field[n++] = p;
        p = strchr(p, '\t');
        if (!p)
            break;
        *p++ = '\0';
    }
    return n;
}

/* The call's peers from "1:4096,3:4096" (or "-": none), into peers[] (room for `cap`). */
static int parse_peers(const char *text, usp_trace_peer *peers, size_t cap, size_t *n)
{
    *n = 0;
    if (strcmp(text, "-") == 0)
        return 1;
    for (const char *p = text; *p;) {
        char *end;
        long peer = strtol(p, &end, 10);
        if (*end != ':' || *n == cap)
            return 0;
        unsigned long long bytes = strtoull(end + 1, &end, 10);
        peers[(*n)++] = (usp_trace_peer){(int)peer, (uint64_t)bytes};
        if (*end != ',' && *end != '\0')
            return 0;
        p = *end == ',' ? end + 1 : end;
    }
    return 1;
}

/* Appends one line's record to `t`; 0 when the line is malformed (or out of memory: *s says which). */
static int unpack_line(usp_trace_t *t, char *line, usp_trace_peer *peers, size_t cap, usp_status *s)
{
    char *f[FIELDS_MAX];
    int n = split_fields(line, f);
    if (n == 7 && strcmp(f[0], "C") == 0) {
        const char *name = usp_trace_intern_text(t, f[2]);
        *s = name ? usp_trace_record_compute(t, atoi(f[1]), name, strtod(f[3], NULL), strtod(f[4], NULL),
                                             strtod(f[5], NULL), strtod(f[6], NULL))
                  : usp_error(USP_ERR_RUNTIME, "out of memory naming op %s", f[2]);
        return 1;
    }
    if (n == 5 && strcmp(f[0], "S") == 0) {
        *s = usp_trace_record_step(t, atoi(f[1]), strtoll(f[2], NULL, 10), strtod(f[3], NULL), strtod(f[4], NULL));
        return 1;
    }
    size_t n_peers;
    if (n != 11 || strcmp(f[0], "M") != 0 || !parse_peers(f[10], peers, cap, &n_peers))
        return 0;
    int group = usp_trace_intern_group(t, f[2]);
    const char *file = usp_trace_intern_text(t, f[5]);
    if (group < 0 || !file) {
        *s = usp_error(USP_ERR_RUNTIME, "out of memory naming group %s", f[2]);
        return 1;
    }
    usp_trace_event e = {.rank = atoi(f[1]), .group = group, .kind = atoi(f[3]),
                         .seq = strtoull(f[4], NULL, 10), .file = file, .line = atoi(f[6]),
                         .t_post = strtod(f[7], NULL), .t_start = strtod(f[8], NULL), .t_end = strtod(f[9], NULL)};
    *s = usp_trace_record(t, &e, peers, n_peers);
    return 1;
}

usp_status usp_trace_unpack(usp_trace_t *t, const char *text, size_t size, const char *from)
{
    char *copy = malloc(size + 1);
    usp_trace_peer *peers = malloc(4096 * sizeof *peers); /* a call's peers: at most its group's size */
    if (!copy || !peers) {
        free(copy), free(peers);
        return usp_error(USP_ERR_RUNTIME, "out of memory reading the trace of %s", from);
    }
    memcpy(copy, text, size);
    copy[size] = '\0';
    usp_status s = USP_OK;
    size_t number = 0;
    for (char *line = copy, *next; s == USP_OK && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        ++number;
        if (!unpack_line(t, line, peers, 4096, &s))
            s = usp_error(USP_ERR_RUNTIME, "the trace of %s: line %zu is not a packed trace record", from, number);
    }
    free(copy), free(peers);
    return s;
}
