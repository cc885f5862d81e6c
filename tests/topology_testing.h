/* Helpers shared by the cluster-model tests (test_topology.c,
 * test_topology_pcie.c): closed-form comparison, files for the JSON reader, a
 * collective priced as the simulator builds it, and the nccl-tests bus
 * bandwidth of a validation row. Static inline: each test takes what it uses. */
#ifndef USP_TESTS_TOPOLOGY_TESTING_H
#define USP_TESTS_TOPOLOGY_TESTING_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/comm/comm_impl.h"
#include "sim/cost_model.h"

/* The closed forms hold to rounding: 1e-9 relative (double arithmetic in a fixed order). */
static inline void expect_close(double got, double want, const char *what)
{
    ck_assert_msg(fabs(got - want) <= 1e-9 * fabs(want), "%s: got %.12g, want %.12g", what, got, want);
}

static inline void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* members[i] = first + i */
static inline const int *ranks_from(int first, int n)
{
    static int r[1024];
    for (int i = 0; i < n; i++)
        r[i] = first + i;
    return r;
}

/* Seconds of `kind` over members[n] with `count` bytes (u8 elements), through
 * usp_comm_op_traffic as the simulator builds it, with the algorithm `request`;
 * the one priced goes to *used when non-NULL. */
static inline double collective_as(const sim_cost_model *m, usp_comm_kind kind, int n, const int *members,
                                   size_t count, sim_algorithm request, sim_algorithm *used)
{
    uint64_t *bytes = malloc((size_t)n * n * sizeof *bytes);
    ck_assert_ptr_nonnull(bytes);
    usp_comm_op op = {.kind = kind, .dtype = USP_U8, .count = count, .root = 0};
    for (int i = 0; i < n; i++)
        usp_comm_op_traffic(&op, i, n, bytes + (size_t)i * n);
    double t;
    ck_assert_int_eq(sim_cost_collective_algo(m, kind, n, members, bytes, request, &t, used), USP_OK);
    free(bytes);
    return t;
}

/* The same with the algorithm NCCL would pick. */
static inline double collective(const sim_cost_model *m, usp_comm_kind kind, int n, const int *members, size_t count)
{
    return collective_as(m, kind, n, members, count, SIM_ALGO_AUTO, NULL);
}

/* The bus bandwidth (GB/s) the model gives `kind` over ranks 0 .. n-1 for S bytes a rank, by
 * nccl-tests' rules (doc/PERFORMANCE.md); USP_OP_SEND: one transfer 0 -> peer. */
static inline double predicted_busbw(const sim_cost_model *m, usp_comm_kind kind, int n, int peer, double S)
{
    if (kind == USP_OP_SEND)
        return S / sim_cost_transfer(m, 0, peer, (uint64_t)S) / 1e9;
    size_t count = kind == USP_OP_ALL_TO_ALL ? (size_t)S / n : (size_t)S;
    double t = collective(m, kind, n, ranks_from(0, n), count), f = (double)(n - 1) / n;
    return S / t * (kind == USP_OP_ALL_REDUCE ? 2 * f : f) / 1e9;
}

/* At 4 GiB, nccl-tests' peak size. */
static inline double predicted_busbw_at_4gib(const sim_cost_model *m, usp_comm_kind kind, int n, int peer)
{
    return predicted_busbw(m, kind, n, peer, 4.0 * (1 << 30));
}

/* nccl-tests' "Avg bus bandwidth" of `-b 8 -e 512M -f 2`: the mean busbw over the 27 sizes from 8 B to
 * 512 MiB (an all-to-all of fewer bytes than ranks moves one byte a peer, as nccl-tests rounds up). */
static inline double predicted_busbw_averaged(const sim_cost_model *m, usp_comm_kind kind, int n)
{
    double sum = 0;
    int sizes = 0;
    for (double S = 8; S <= 512.0 * (1 << 20); S *= 2, sizes++)
        sum += predicted_busbw(m, kind, n, 1, S >= n ? S : n);
    return sum / sizes;
}

/* A validation row within `tolerance` (a fraction) of its published figure; printed as a row of
 * docs/cluster_model.md's table when USP_PRINT_VALIDATION is set. */
static inline void expect_validation_row_within(const char *machine, usp_comm_kind kind, int n, double got,
                                                double published, const char *source, double tolerance)
{
    double err = got / published - 1;
    if (getenv("USP_PRINT_VALIDATION"))
        printf("| %s | %s | %d | %.2f | %.2f | %+.0f%% | %s |\n", machine,
               kind == USP_OP_SEND ? "point to point" : usp_comm_kind_name(kind), n, got, published, 100 * err,
               source);
    ck_assert_msg(fabs(err) <= tolerance, "%s, %s over %d GPUs: predicted %.2f GB/s, published %.2f (%s)", machine,
                  usp_comm_kind_name(kind), n, got, published, source);
}

/* Within 15%, the table's rule. */
static inline void expect_validation_row(const char *machine, usp_comm_kind kind, int n, double got,
                                         double published, const char *source)
{
    expect_validation_row_within(machine, kind, n, got, published, source, 0.15);
}

#endif
