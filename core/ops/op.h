/* One compute op as every backend receives it: a descriptor (usp_op) of the op's kind, its
 * operands as views and its parameters, through one `run` slot per backend (core/ops/backend_impl.h),
 * as every collective goes through one `issue` slot (core/comm/comm_impl.h) and as NCCL funnels
 * every call as one ncclInfo through ncclEnqueueCheck.
 *
 * A kind is one line of USP_OP_KINDS below and one row of the table in core/ops/op_kinds.c: the
 * names and roles of its operands (which it writes, which must be f32, which may be NULL), the
 * check of its parameters and its cost. Everything that handles every op handles it from that
 * row alone: the checks, the cost and the timing of usp_op_run (core/ops/op_run.c), the bf16 widening of the cpu
 * backend (backends/cpu/cpu_widen.c), the deferral and the order checks of the lazy backend, the
 * simulator's forwarding. Element-wise ops are one kind, USP_OP_MAP, whose functions are one line
 * each of USP_MAP_FNS (core/ops/ops.h): a new one is that line, each backend's formula and a
 * conformance row (docs/extending.md).
 *
 * The typed calls of core/ops/ops.h build these descriptors; code may also fill one and call
 * usp_op_run. */
#ifndef USP_OP_H
#define USP_OP_H

#include <stddef.h>
#include <stdint.h>

#include "core/ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The kinds, in one line each: X(KIND, name), `name` the op in errors. */
#define USP_OP_KINDS(X)                                                                                        \
    X(GEMM, gemm) X(COPY_2D, copy_2d) X(CONVERT, convert) X(ACCUMULATE_2D, accumulate_2d)                     \
    X(ATTENTION_FORWARD, attention_forward) X(ATTENTION_BACKWARD, attention_backward)                          \
    X(ATTENTION_MERGE, attention_merge) X(EMBEDDING_FORWARD, embedding_forward)                                \
    X(EMBEDDING_BACKWARD, embedding_backward) X(LAYERNORM_FORWARD, layernorm_forward)                          \
    X(LAYERNORM_BACKWARD, layernorm_backward) X(RMSNORM_FORWARD, rmsnorm_forward)                              \
    X(RMSNORM_BACKWARD, rmsnorm_backward) X(ROPE_FORWARD, rope_forward) X(ROPE_BACKWARD, rope_backward)        \
    X(CROSS_ENTROPY, cross_entropy) X(ADAMW_STEP, adamw_step) X(SUM_SQUARES, sum_squares) X(ADD_BIAS, add_bias) \
    X(BIAS_BACKWARD, bias_backward) X(MAP, map)

typedef enum usp_op_kind {
#define USP_OP_KIND_ENUM(kind, name) USP_OP_##kind,
    USP_OP_KINDS(USP_OP_KIND_ENUM)
#undef USP_OP_KIND_ENUM
    USP_OP_KIND_COUNT
} usp_op_kind;

/* A device operand as a backend receives it: where it starts, the dtype its elements are stored in and
 * how many elements the op reads or writes from there. usp_op_run builds it with one look-up in the
 * live-buffer table, which also proves the `count` elements lie inside that one buffer and that the
 * dtype is one the op takes for that operand: a backend reads `dtype` here and never asks a buffer.
 * data NULL: an optional operand left out (dtype USP_F32, count 0). */
typedef struct usp_view {
    void *data;
    usp_dtype dtype; /* USP_F32 or USP_BF16 for activations, weights and gradients; USP_F32 elsewhere */
    int64_t count;
} usp_view;

/* What a kind does with an operand. */
enum {
    USP_OPERAND_WRITTEN = 1u << 0,  /* written (and, for an accumulation or an in-place op, read first) */
    USP_OPERAND_F32 = 1u << 1,      /* f32 storage only (lse, statistics, losses, master weights, moments);
                                       else f32 or bf16 (activations, weights, their gradients) */
    USP_OPERAND_OPTIONAL = 1u << 2, /* may be NULL: not computed, or not read */
    USP_OPERAND_IDS = 1u << 3,      /* int32 ids (4-byte elements, counted as f32 by the allocator) */
    USP_OPERAND_BYTES = 1u << 4,    /* any dtype, counted in bytes (copy_2d): the view's dtype is USP_U8 */
    USP_OPERAND_SCRATCH = 1u << 5,  /* the workspace the backend asked for (workspace_bytes), in bytes;
                                       core allocates it around the call */
};

/* One operand of a kind: its name (in errors), the USP_OPERAND_* flags, and for a table whose rows
 * ids name (an embedding's), the index of the ids operand (else -1): the view covers one row, the
 * kernel reads the rows the ids name. */
typedef struct usp_operand_info {
    const char *name;
    unsigned flags;
    int rows_by;
} usp_operand_info;

/* A GEMM without its pointers (the operands a, b, c hold them): usp_gemm_desc's shape. */
typedef struct usp_gemm_shape {
    int trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    int64_t lda, stride_a, ldb, stride_b, ldc, stride_c;
    int64_t batch;
} usp_gemm_shape;

typedef struct usp_op {
    usp_op_kind kind;
    usp_stream_t *stream;             /* NULL: the backend's default stream */
    usp_view operand[USP_OP_OPERANDS_MAX]; /* in the kind's order (usp_op_operands); data NULL: left out */
    union {
        usp_gemm_shape gemm;          /* GEMM: operands a, b, c */
        struct {
            size_t dst_stride, src_stride, row, rows; /* COPY_2D: bytes; ACCUMULATE_2D: elements */
        } strided;
        struct {
            usp_attention_shape shape;
            int accumulate;           /* backward: add to dq, dk, dv */
        } attention;
        struct {
            int64_t n, heads, head_dim;
        } merge;
        struct {
            int64_t n, C;             /* n rows of C (embedding, norms, add_bias, bias_backward) */
            float eps;                /* norms */
        } rows;
        struct {
            int64_t n, H, D;
            float theta;
            const double *inv_freq;   /* host memory, D/2 values, read before the call returns; NULL: theta's */
        } rope;
        struct {
            int64_t n, V;
            float grad_scale;
        } loss;
        struct {
            int64_t n, t;
            float lr, beta1, beta2, eps, weight_decay;
        } adamw;
        struct {
            int64_t n;
            double *out;              /* SUM_SQUARES: the host result (a blocking op) */
        } sum;
        struct {
            int64_t n;                /* CONVERT: elements */
        } convert;
        struct {
            usp_map_fn fn;
            int64_t n;
            float scalar;             /* scale's factor */
        } map;
    } p;
} usp_op;

/* The op's name: its kind's, or for a map its function's ("gelu_tanh_forward"). */
const char *usp_op_name(const usp_op *op);

/* The name a kind's cost and trace spans carry (usp_op_cost.op): its name, except "copy" for copy_2d
 * and "accumulate" for accumulate_2d, and a map's function's name. */
const char *usp_op_cost_name(const usp_op *op);

/* What op's kind does with each of its operands (for a map, its function's outputs, then inputs), in
 * info[0..count); returns count. One call per op: the funnel asks it once, not once per operand. */
int usp_op_operands(const usp_op *op, usp_operand_info info[USP_OP_OPERANDS_MAX]);

/* The name of a kind ("gemm", ..., "map"). */
const char *usp_op_kind_name(usp_op_kind kind);

/* 1 when op returns with its work done and its result in host memory (sum_squares): a host wait. */
int usp_op_blocking(const usp_op *op);

/* The host memory op reads besides its operands (rope's inverse frequencies), *bytes of it, or NULL:
 * read before the call returns, so a backend that runs the op later keeps a copy and points the op at
 * it with usp_op_set_host_input. */
const void *usp_op_host_input(const usp_op *op, size_t *bytes);
void usp_op_set_host_input(usp_op *op, const void *copy);

/* Bytes of `v`'s elements in its dtype. */
size_t usp_view_bytes(usp_view v);

/* Checks, prices and runs op on `be` (the one door every compute op goes through): the kind's
 * parameter checks (USP_ERR_CONFIG), every operand inside one live buffer in a dtype its role takes
 * (core/ops/ops.h), the cost to the cost sink, the workspace the backend asks for, the backend's run
 * slot (timed when ops are timed). Nothing to do (n = 0) returns USP_OK before any check of operands. */
usp_status usp_op_run(usp_backend_t *be, usp_op *op);

#ifdef __cplusplus
}
#endif

#endif
