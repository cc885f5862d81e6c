/* The safety net's own faults (see launch_fault.h). */
#include "runtimes/process/launch_fault.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/trace/comm_kind.h"

typedef enum launch_fault_kind { STALL, ABORT_HANG, INIT_CRASH, N_LAUNCH_KINDS } launch_fault_kind;

static const char *const kind_names[N_LAUNCH_KINDS] = {"stall", "abort-hang", "init-crash"};

typedef struct launch_fault {
    launch_fault_kind kind;
    int rank, op;                 /* op: usp_comm_kind, -1 for any */
    uint64_t call;                /* from 1 */
    int fired;
} launch_fault;

struct launch_faults {
    int rank;                     /* this process's world rank */
    launch_fault *faults;         /* this rank's */
    int n;
    uint64_t calls_any, calls_of_kind[USP_OP_COUNT]; /* counted as the decorator counts: splits aside */
};

static int kind_of(const char *spec)
{
    for (int k = 0; k < N_LAUNCH_KINDS; k++) {
        size_t n = strlen(kind_names[k]);
        if (strncmp(spec, kind_names[k], n) == 0 && spec[n] == ':')
            return k;
    }
    return -1;
}

int launch_fault_is_ours(const char *spec) { return kind_of(spec) >= 0; }

/* What a stalled call or a hung abort does: nothing, ever (the watchdog, or its end timer, ends the process). */
static void wait_forever(void)
{
    for (;;) {
        struct timespec t = {1, 0};
        nanosleep(&t, NULL);
    }
}

static usp_status bad(const char *spec, const char *why)
{
    return usp_error(USP_ERR_CONFIG, "--inject %s: %s; expected stall:rank=R[,op=OP][,call=K], abort-hang:rank=R "
                     "or init-crash:rank=R (the safety net's faults, --backend mpi or nccl)", spec, why);
}

/* One NAME=VALUE field of `spec` into *f. */
static usp_status parse_field(const char *spec, char *field, launch_fault *f)
{
    char *eq = strchr(field, '='), *end = NULL;
    if (!eq)
        return bad(spec, "each field is NAME=VALUE");
    *eq = '\0';
    const char *value = eq + 1;
    long long n = *value >= '0' && *value <= '9' ? strtoll(value, &end, 10) : -1;
    int number = end && !*end;
    if (strcmp(field, "rank") == 0) {
        if (!number || n > 1 << 20)
            return bad(spec, "rank must be a rank number");
        f->rank = (int)n;
        return USP_OK;
    }
    if (f->kind != STALL)
        return bad(spec, "op= and call= apply to stall only");
    if (strcmp(field, "call") == 0) {
        if (!number || n < 1)
            return bad(spec, "call must be a number >= 1");
        f->call = (uint64_t)n;
        return USP_OK;
    }
    if (strcmp(field, "op") != 0)
        return bad(spec, "unknown field (rank, op, call)");
    f->op = -2;
    for (int k = 0; k < USP_OP_SPLIT; k++) /* splits make the mesh: not counted, not stalled */
        if (strcmp(value, usp_comm_kind_name((usp_comm_kind)k)) == 0)
            f->op = k;
    if (strcmp(value, "any") == 0)
        f->op = -1;
    return f->op == -2 ? bad(spec, "unknown op (all_to_all, all_reduce, sendrecv, ... or any)") : USP_OK;
}

static usp_status parse(const char *spec, int world_size, launch_fault *f)
{
    *f = (launch_fault){.kind = (launch_fault_kind)kind_of(spec), .rank = -1, .op = -1, .call = 1};
    char buf[256];
    if (strlen(spec) >= sizeof buf)
        return bad(spec, "the spec is too long");
    strcpy(buf, spec);
    char *save = NULL;
    for (char *field = strtok_r(strchr(buf, ':') + 1, ",", &save); field; field = strtok_r(NULL, ",", &save))
        USP_CHECK(parse_field(spec, field, f));
    if (f->rank < 0)
        return bad(spec, "rank=R is required");
    if (f->rank >= world_size) {
        char why[96];
        snprintf(why, sizeof why, "rank %d is not in a world of %d", f->rank, world_size);
        return bad(spec, why);
    }
    return USP_OK;
}

usp_status launch_faults_create(const char *const *specs, int n, int rank, int world_size, launch_faults **out)
{
    *out = NULL;
    launch_faults *f;
    USP_CHECK(usp_calloc((void **)&f, 1, sizeof *f, "the safety net's faults"));
    f->rank = rank;
    usp_status s = usp_calloc((void **)&f->faults, n > 0 ? (size_t)n : 1, sizeof *f->faults, "the safety net's faults");
    int ours = 0;
    for (int i = 0; i < n && s == USP_OK; i++) {
        if (!launch_fault_is_ours(specs[i]))
            continue;
        launch_fault one;
        s = parse(specs[i], world_size, &one);
        ours++;
        if (s == USP_OK && one.rank == rank)
            f->faults[f->n++] = one;
    }
    if (s != USP_OK || !ours) {
        launch_faults_destroy(f);
        return s;
    }
    *out = f;
    return USP_OK;
}

void launch_faults_destroy(launch_faults *f)
{
    if (!f)
        return;
    free(f->faults);
    free(f);
}

void launch_fault_before_call(launch_faults *f, int op)
{
    if (!f || op < 0 || op >= USP_OP_COUNT || op == USP_OP_SPLIT)
        return;
    f->calls_any++;
    f->calls_of_kind[op]++;
    for (int i = 0; i < f->n; i++) {
        launch_fault *x = &f->faults[i];
        if (x->kind != STALL || (x->op >= 0 && x->op != op) ||
            (x->op < 0 ? f->calls_any : f->calls_of_kind[op]) != x->call)
            continue;
        x->fired = 1;
        fprintf(stderr, "usp: rank %d: --inject stall: its call %llu (%s) waits forever before the backend\n",
                f->rank, (unsigned long long)f->calls_any, usp_comm_kind_name((usp_comm_kind)op));
        fflush(stderr);
        wait_forever();
    }
}

static int has(const launch_faults *f, launch_fault_kind kind)
{
    for (int i = 0; f && i < f->n; i++)
        if (f->faults[i].kind == kind)
            return 1;
    return 0;
}

void launch_fault_in_abort(launch_faults *f)
{
    for (int i = 0; f && i < f->n; i++) {
        if (f->faults[i].kind != ABORT_HANG)
            continue;
        f->faults[i].fired = 1;
        fprintf(stderr, "usp: rank %d: --inject abort-hang: its abort never returns\n", f->rank);
        fflush(stderr);
        wait_forever();
    }
}

int launch_fault_init_crash(const launch_faults *f) { return has(f, INIT_CRASH); }

usp_status launch_faults_check_fired(const launch_faults *f)
{
    for (int i = 0; f && i < f->n; i++) {
        const launch_fault *x = &f->faults[i];
        if (x->kind == INIT_CRASH || x->fired)
            continue;
        if (x->kind == ABORT_HANG)
            return usp_error(USP_ERR_CONFIG, "--inject abort-hang:rank=%d never fired: the run ended well, so "
                             "nothing aborted; add a fault that ends it (e.g. stall:rank=%d)", x->rank, x->rank);
        const char *op = x->op < 0 ? "any" : usp_comm_kind_name((usp_comm_kind)x->op);
        uint64_t made = x->op < 0 ? f->calls_any : f->calls_of_kind[x->op];
        return usp_error(USP_ERR_CONFIG, "--inject stall:rank=%d,op=%s,call=%llu never fired: rank %d made %llu %s "
                         "call%s, so nothing was injected; pick a call the schedule makes", x->rank, op,
                         (unsigned long long)x->call, x->rank, (unsigned long long)made, op, made == 1 ? "" : "s");
    }
    return USP_OK;
}
