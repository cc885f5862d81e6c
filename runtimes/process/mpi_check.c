/* The pairwise fingerprint exchange of --check-collectives (see mpi_check.h). */
#include "runtimes/process/mpi_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safety/comm_report.h"

#define CHECK_TAG 11
#define FILE_MAX 128

/* One call as its parties see it: a fingerprint with world ranks for peers and,
 * for all_to_all_v, what this rank sends to and expects from the receiver. */
typedef struct check_msg {
    int32_t op, dtype, reduce, root, line;
    int32_t send_to, recv_from;   /* point to point: world ranks, -1 when none */
    uint64_t count, recv_count, seq, collective; /* collective: its index among the group's collectives */
    uint64_t v_to_you, v_from_you;
    double clock;                 /* the sender's seconds since its start */
    char group[USP_COMM_NAME_MAX];
    char file[FILE_MAX];
    char injected[192];           /* the last fault injected on the sender, so the report can name it */
} check_msg;

struct mpi_check {
    MPI_Comm comm;
    int me, n;
    double t0;                    /* MPI_Wtime at the start: the reports' clocks */
    const usp_comm_decorator *decorator;
    int *partners;                /* [n] */
    check_msg *sent, *got;        /* [n]: to and from each partner */
    MPI_Request *requests;        /* [n] */
    char (*files)[FILE_MAX];      /* [n]: the call sites the report's fingerprints point to */
    usp_strbuf report;
};

usp_status mpi_check_create(MPI_Comm world, const usp_comm_decorator *decorator, double t0, mpi_check **out)
{
    mpi_check *k;
    USP_CHECK(usp_calloc((void **)&k, 1, sizeof *k, "the collective checker"));
    k->comm = MPI_COMM_NULL;
    MPI_Comm_rank(world, &k->me);
    MPI_Comm_size(world, &k->n);
    k->decorator = decorator;
    k->t0 = t0;
    size_t n = (size_t)k->n;
    usp_status s = usp_calloc((void **)&k->partners, n, sizeof *k->partners, "the checker's partners");
    if (s == USP_OK)
        s = usp_calloc((void **)&k->sent, n, sizeof *k->sent, "the checker's messages");
    if (s == USP_OK)
        s = usp_calloc((void **)&k->got, n, sizeof *k->got, "the checker's messages");
    if (s == USP_OK)
        s = usp_calloc((void **)&k->requests, n, sizeof *k->requests, "the checker's requests");
    if (s == USP_OK)
        s = usp_calloc((void **)&k->files, n, sizeof *k->files, "the checker's call sites");
    if (s == USP_OK && MPI_Comm_dup(world, &k->comm) != MPI_SUCCESS)
        s = usp_error(USP_ERR_RUNTIME, "MPI_Comm_dup for --check-collectives failed");
    if (s != USP_OK) {
        mpi_check_destroy(k);
        return s;
    }
    *out = k;
    return USP_OK;
}

static int is_p2p(int op) { return op == USP_OP_SEND || op == USP_OP_RECV || op == USP_OP_SENDRECV; }

/* The world ranks `op` involves besides this one, in k->partners; returns how many. */
static int find_partners(mpi_check *k, const usp_comm_t *c, const usp_comm_op *op)
{
    int n = 0;
    if (!is_p2p(op->kind)) {
        for (int j = 0; j < c->size; j++)
            if (j != c->rank)
                k->partners[n++] = c->world_ranks[j];
        return n;
    }
    k->partners[n++] = c->world_ranks[op->peer];
    if (op->kind == USP_OP_SENDRECV && op->recv_peer != op->peer)
        k->partners[n++] = c->world_ranks[op->recv_peer];
    return n;
}

static check_msg message_of(const mpi_check *k, const usp_comm_t *c, const usp_comm_op *op, const usp_comm_fingerprint *fp,
                            uint64_t collective, double clock, int to)
{
    check_msg m = {.op = fp->op, .dtype = (int32_t)fp->dtype, .reduce = (int32_t)fp->reduce, .root = fp->root,
                   .line = fp->site.line, .send_to = -1, .recv_from = -1, .count = fp->count,
                   .recv_count = fp->recv_count, .seq = fp->seq, .collective = collective, .clock = clock};
    if (op->kind == USP_OP_SEND || op->kind == USP_OP_SENDRECV)
        m.send_to = c->world_ranks[op->peer];
    if (op->kind == USP_OP_RECV)
        m.recv_from = c->world_ranks[op->peer];
    if (op->kind == USP_OP_SENDRECV)
        m.recv_from = c->world_ranks[op->recv_peer];
    if (op->kind == USP_OP_ALL_TO_ALL_V)
        for (int j = 0; j < c->size; j++)
            if (c->world_ranks[j] == to)
                m.v_to_you = op->send_counts[j], m.v_from_you = op->recv_counts[j];
    snprintf(m.group, sizeof m.group, "%s", fp->group);
    if (k->decorator) { /* its last line */
        const char *lines = usp_comm_decorator_injected(k->decorator), *last = lines;
        for (const char *p = lines; *p; p++)
            if (p[0] == '\n' && p[1])
                last = p + 1;
        snprintf(m.injected, sizeof m.injected, "%s", last);
    }
    snprintf(m.file, sizeof m.file, "%s", fp->site.file ? fp->site.file : "?");
    return m;
}

/* Why the calls of world ranks ra and rb are not one call, or NULL; "first" is ra. */
static const char *difference(const check_msg *a, int ra, const check_msg *b, int rb)
{
    if (strcmp(a->group, b->group) != 0)
        return "their next calls together are on different groups (a call skipped, reordered or on the wrong group)";
    if (is_p2p(a->op) != is_p2p(b->op))
        return "a collective against a point-to-point call";
    if (is_p2p(a->op)) {
        if (a->send_to == rb && b->recv_from != ra)
            return "the first sends to the second, which does not receive from it";
        if (b->send_to == ra && a->recv_from != rb)
            return "the second sends to the first, which does not receive from it";
        if (a->dtype != b->dtype)
            return "send and receive dtypes differ";
        if ((a->send_to == rb && a->count != b->recv_count) || (b->send_to == ra && b->count != a->recv_count))
            return "send and receive counts differ";
        return NULL;
    }
    if (a->collective != b->collective)
        return "different positions on the group (one rank issued more collectives on it: a call skipped or reordered)";
    if (a->op != b->op)
        return "different ops";
    if (a->op == USP_OP_SPLIT || a->op == USP_OP_BARRIER)
        return NULL;
    if (a->dtype != b->dtype)
        return "different dtypes";
    if (a->op == USP_OP_ALL_TO_ALL_V) {
        if (a->v_to_you != b->v_from_you)
            return "all_to_all_v counts disagree: what the first sends the second does not expect";
        if (b->v_to_you != a->v_from_you)
            return "all_to_all_v counts disagree: what the second sends the first does not expect";
        return NULL;
    }
    if (a->count != b->count)
        return "different counts";
    if ((a->op == USP_OP_ALL_REDUCE || a->op == USP_OP_REDUCE_SCATTER) && a->reduce != b->reduce)
        return "different reduce ops";
    if (a->op == USP_OP_BROADCAST && a->root != b->root)
        return "different roots";
    return NULL;
}

static usp_comm_fingerprint fingerprint_of(const check_msg *m, const char *file)
{
    usp_comm_fingerprint fp = {.op = m->op, .dtype = (usp_dtype)m->dtype, .reduce = (usp_reduce_op)m->reduce,
                               .count = m->count, .recv_count = m->recv_count, .root = m->root, .peer = -1,
                               .recv_peer = -1, .seq = m->seq, .site = {file, m->line}};
    snprintf(fp.group, sizeof fp.group, "%s", m->group);
    return fp;
}

/* The simulator's mismatch report of world ranks a < b, from the calls this rank saw. */
static void report(mpi_check *k, int n_partners, const check_msg *mine, int a, int b, const char *why)
{
    double clock = MPI_Wtime() - k->t0;
    usp_rank_record *records = calloc((size_t)k->n, sizeof *records);
    if (!records) {
        usp_strbuf_printf(&k->report, "collective mismatch between rank %d and rank %d: %s\n", a, b, why);
        return;
    }
    for (int i = 0; i < k->n; i++)
        records[i] = (usp_rank_record){.state = USP_RANK_UNSEEN, .call.op = -1};
    snprintf(k->files[k->me], FILE_MAX, "%s", mine->file);
    records[k->me] = (usp_rank_record){.state = USP_RANK_BLOCKED, .call = fingerprint_of(mine, k->files[k->me]),
                                       .collective_seq = mine->collective, .clock = clock};
    for (int i = 0; i < n_partners; i++) {
        int p = k->partners[i];
        snprintf(k->files[p], FILE_MAX, "%s", k->got[i].file);
        records[p] = (usp_rank_record){.state = USP_RANK_BLOCKED, .call = fingerprint_of(&k->got[i], k->files[p]),
                                       .collective_seq = k->got[i].collective, .clock = k->got[i].clock};
    }
    usp_strbuf injected = {0}; /* this rank's faults, and the last of each party's */
    usp_strbuf_printf(&injected, "%s", k->decorator ? usp_comm_decorator_injected(k->decorator) : "");
    for (int i = 0; i < n_partners; i++)
        if (k->got[i].injected[0] && !strstr(usp_strbuf_text(&injected), k->got[i].injected))
            usp_strbuf_printf(&injected, "%s", k->got[i].injected);
    usp_report_snapshot snap = {0};
    usp_report_mismatch(&snap, records, k->n, usp_strbuf_text(&injected), mine->group, a, b, why, &k->report);
    usp_report_snapshot_free(&snap);
    usp_strbuf_free(&injected);
    free(records);
}

usp_status mpi_check_call(mpi_check *k, const usp_comm_t *c, const usp_comm_op *op, const usp_comm_fingerprint *fp,
                          uint64_t collective)
{
    int n = find_partners(k, c, op);
    for (int i = 0; i < n; i++) {
        k->sent[i] = message_of(k, c, op, fp, collective, MPI_Wtime() - k->t0, k->partners[i]);
        if (MPI_Isend(&k->sent[i], (int)sizeof k->sent[i], MPI_BYTE, k->partners[i], CHECK_TAG, k->comm,
                      &k->requests[i]) != MPI_SUCCESS)
            return usp_error(USP_ERR_RUNTIME, "--check-collectives: sending a fingerprint to rank %d failed",
                             k->partners[i]);
    }
    for (int i = 0; i < n; i++)
        if (MPI_Recv(&k->got[i], (int)sizeof k->got[i], MPI_BYTE, k->partners[i], CHECK_TAG, k->comm,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return usp_error(USP_ERR_RUNTIME, "--check-collectives: receiving rank %d's fingerprint failed",
                             k->partners[i]);
    MPI_Waitall(n, k->requests, MPI_STATUSES_IGNORE);
    const check_msg *mine = &k->sent[0];
    int bad = -1, lowest = k->me;
    const char *why = NULL;
    for (int i = 0; i < n; i++) {
        int p = k->partners[i], lo = p < k->me ? p : k->me, hi = p < k->me ? k->me : p;
        const check_msg *a = lo == k->me ? &k->sent[i] : &k->got[i], *b = lo == k->me ? &k->got[i] : &k->sent[i];
        const char *w = difference(a, lo, b, hi);
        if (!w)
            lowest = p < lowest ? p : lowest;
        else if (bad < 0)
            bad = i, why = w;
    }
    if (bad < 0)
        return USP_OK;
    int p = k->partners[bad], a = p < k->me ? p : k->me, b = p < k->me ? k->me : p;
    lowest = p < lowest ? p : lowest;
    if (lowest != k->me)
        return usp_error(USP_ERR_COLLECTIVE, "collective mismatch between rank %d and rank %d on %s: %s (rank %d "
                         "prints the report)", a, b, fp->group, why, lowest);
    report(k, n, mine, a, b, why); /* the lowest rank of the agreeing side and the other: one report per mismatch */
    return usp_error(USP_ERR_COLLECTIVE, "collective mismatch between rank %d and rank %d on %s: %s", a, b,
                     fp->group, why);
}

const char *mpi_check_report(const mpi_check *k) { return k ? usp_strbuf_text(&k->report) : ""; }

void mpi_check_destroy(mpi_check *k)
{
    if (!k)
        return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && k->comm != MPI_COMM_NULL)
        MPI_Comm_free(&k->comm);
    free(k->partners);
    free(k->sent);
    free(k->got);
    free(k->requests);
    free(k->files);
    usp_strbuf_free(&k->report);
    free(k);
}
