/* Parsing --inject specs and deciding when a fault fires (core/safety/comm_fault.h). */
#include "core/safety/comm_fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kind_names[] = {"skip", "swap", "size", "group", "crash"};
#define N_KINDS (int)(sizeof kind_names / sizeof kind_names[0])

const char *usp_fault_kind_name(usp_fault_kind kind)
{
    return (int)kind >= 0 && (int)kind < N_KINDS ? kind_names[kind] : "?";
}

static usp_status bad(const char *spec, const char *why)
{
    return usp_error(USP_ERR_CONFIG,
                     "--inject %s: %s; expected KIND:rank=R[,op=OP][,call=K][,group=G] with KIND one of "
                     "skip, swap, size, group, crash (e.g. --inject skip:rank=1,op=all_to_all,call=2)",
                     spec, why);
}

/* Parses a non-negative decimal integer that fills the whole string. */
static int parse_count(const char *text, long long *out)
{
    if (!*text)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < 0)
        return 0;
    *out = v;
    return 1;
}

static int parse_op(const char *name)
{
    if (strcmp(name, "any") == 0)
        return -1;
    for (int k = 0; k < USP_OP_COUNT; k++)
        if (k != USP_OP_SPLIT && strcmp(name, usp_comm_kind_name((usp_comm_kind)k)) == 0)
            return k;
    return -2;
}

/* The mesh's group kinds (core/parallel/mesh.c names its groups KIND[INDEX]; world has
 * no index). A group fault looks for the rank's group whose name begins with
 * group=, so a name outside these can never be found and the fault would
 * fire doing nothing. */
enum { GROUP_WORLD, GROUP_DP, GROUP_SP, GROUP_ULYSSES, GROUP_RING, N_GROUP_KINDS };
static const char *const group_kinds[N_GROUP_KINDS] = {"world", "dp", "sp", "ulysses", "ring"};

/* The index of the kind `name` has ("ulysses" or "ulysses[3]"), or -1. */
static int group_kind_of(const char *name)
{
    for (int k = 0; k < N_GROUP_KINDS; k++) {
        size_t n = strlen(group_kinds[k]);
        if (strncmp(name, group_kinds[k], n) != 0)
            continue;
        const char *index = name + n;
        if (!*index)
            return k;
        if (k == GROUP_WORLD || *index != '[' || !index[1] || index[1] == ']') /* world has no index */
            continue;
        const char *p = index + 1;
        while (*p >= '0' && *p <= '9')
            p++;
        if (*p == ']' && !p[1])
            return k;
    }
    return -1;
}

/* The group kind an op always runs on in usp's programs, or -1: Ulysses's
 * all-to-alls are on ulysses, Ring's send-receive exchange on ring (core/parallel/ulysses.c,
 * core/parallel/ring.c, core/train/selftest.c). Other ops run on several groups (all_reduce
 * on sp, dp and world), so op= does not tell their group. */
static int pinned_group_kind(int op)
{
    if (op == USP_OP_ALL_TO_ALL || op == USP_OP_ALL_TO_ALL_V)
        return GROUP_ULYSSES;
    if (op == USP_OP_SENDRECV)
        return GROUP_RING;
    return -1;
}

/* Refuses a fault that parses but could never change a run: it would fire,
 * do nothing, and the run would end with exit 0 as if the program had passed
 * the test that injected it. */
static usp_status check_applies(const char *spec, const usp_fault *f)
{
    int p2p = f->op == USP_OP_SEND || f->op == USP_OP_RECV || f->op == USP_OP_SENDRECV;
    if (f->kind == USP_FAULT_SIZE && f->op == USP_OP_BARRIER)
        return bad(spec, "a barrier has no count to make wrong; pick an op with a count (all_to_all, all_reduce, "
                         "...) or op=any");
    if (f->kind == USP_FAULT_SWAP && p2p)
        return bad(spec, "swap reorders collectives, and send, recv and sendrecv are point-to-point; use skip or "
                         "size on them, or swap on a collective (all_to_all, all_reduce, ...)");
    if (f->kind != USP_FAULT_GROUP || !f->group[0])
        return USP_OK;
    int kind = group_kind_of(f->group);
    if (kind < 0)
        return bad(spec, "group= names no group of the mesh; expected world, dp, sp, ulysses or ring, optionally "
                         "with an index as the mesh names them (ulysses[1])");
    if (kind == pinned_group_kind(f->op)) {
        char why[160];
        snprintf(why, sizeof why, "the op already runs on that group kind (%s), and a rank is in one %s group, so "
                 "the call would stay where it is; name another group (e.g. world or dp)", group_kinds[kind],
                 group_kinds[kind]);
        return bad(spec, why);
    }
    return USP_OK;
}

usp_status usp_fault_parse(const char *spec, usp_fault *out)
{
    *out = (usp_fault){.rank = -1, .op = -1, .call = 1};
    char buf[256];
    if (strlen(spec) >= sizeof buf)
        return bad(spec, "the spec is too long");
    strcpy(buf, spec);
    char *colon = strchr(buf, ':');
    if (!colon)
        return bad(spec, "missing ':' after the kind");
    *colon = '\0';
    int kind = -1;
    for (int k = 0; k < N_KINDS; k++)
        if (strcmp(buf, kind_names[k]) == 0)
            kind = k;
    if (kind < 0)
        return bad(spec, "unknown kind");
    out->kind = (usp_fault_kind)kind;
    char *save = NULL;
    for (char *field = strtok_r(colon + 1, ",", &save); field; field = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(field, '=');
        if (!eq)
            return bad(spec, "each field is NAME=VALUE");
        *eq = '\0';
        const char *value = eq + 1;
        long long n;
        if (strcmp(field, "rank") == 0) {
            if (!parse_count(value, &n) || n > 1 << 20)
                return bad(spec, "rank must be a rank number");
            out->rank = (int)n;
        } else if (strcmp(field, "call") == 0) {
            if (!parse_count(value, &n) || n < 1)
                return bad(spec, "call must be a number >= 1");
            out->call = (uint64_t)n;
        } else if (strcmp(field, "op") == 0) {
            out->op = parse_op(value);
            if (out->op == -2)
                return bad(spec, "unknown op (all_to_all, all_to_all_v, all_gather, reduce_scatter, "
                                 "all_reduce, broadcast, send, recv, sendrecv, barrier or any)");
        } else if (strcmp(field, "group") == 0) {
            if (!*value || strlen(value) >= sizeof out->group)
                return bad(spec, "group must name a group of the mesh (world, sp, dp, ulysses, ring)");
            strcpy(out->group, value);
        } else {
            return bad(spec, "unknown field (rank, op, call, group)");
        }
    }
    if (out->rank < 0)
        return bad(spec, "rank=R is required");
    if (out->group[0] && out->kind != USP_FAULT_GROUP)
        return bad(spec, "group=G applies to the group kind only");
    return check_applies(spec, out);
}

int usp_fault_fires(const usp_fault *f, int kind, uint64_t calls_any, uint64_t calls_of_kind)
{
    if (f->op >= 0 && f->op != kind)
        return 0;
    return (f->op < 0 ? calls_any : calls_of_kind) == f->call;
}
