/* The op-conformance table (tests/conformance_cases.c) and what its cases may
 * call (tests/test_backend_conformance.c runs them).
 *
 * A case is one op on fixed shapes. It makes its inputs on the host from a
 * seeded generator, uploads them with usp_buffer_copy(HOST_TO_DEVICE), calls
 * the op through its public wrapper and names the buffers to download. It
 * never reads backend memory on the host: the runner downloads with
 * usp_buffer_copy(DEVICE_TO_HOST) and reads the host copies only after
 * usp_backend_synchronize, since a device-to-host copy may complete late (a
 * GPU, or a backend that defers its work). The runner calls the case once on
 * the cpu backend (the reference) and once on the backend under test, with the
 * same seed, so both see the same inputs. */
#ifndef USP_TESTS_CONFORMANCE_H
#define USP_TESTS_CONFORMANCE_H

#include <stdint.h>

#include "core/ops/backend_impl.h"
#include "core/ops/op.h"

/* What a case may be about: every slot of usp_backend_i in declaration order, with the op name its
 * wrapper reports to the cost sink (NULL: the slot reports no cost of its own), then every op kind of
 * core/ops/op.h (USP_OP_KINDS) and every element-wise function (USP_MAP_FNS), named as their lists name
 * them. test_backend_conformance.c checks at compile time that the slots are exactly the struct's,
 * and the ops come from the lists themselves, so a new slot, kind or function cannot go untested
 * unnoticed. */
#define CONFORMANCE_SLOTS(X)                                                                                     \
    X(alloc, NULL) X(free, NULL) X(host_alloc, NULL) X(host_free, NULL) X(copy, "copy") X(zero, "zero")          \
    X(synchronize, NULL) X(stream_create, NULL)                                                                 \
    X(stream_destroy, NULL) X(event_create, NULL) X(event_destroy, NULL) X(event_record, NULL)                  \
    X(stream_wait_event, NULL) X(timing_event_create, NULL) X(event_elapsed, NULL) X(run_queued, NULL)          \
    X(note_access, NULL) X(cache_bytes, NULL) X(launch_host_func, NULL) X(supports, NULL)                       \
    X(workspace_bytes, NULL) X(run, NULL) X(destroy, NULL)

typedef enum conformance_slot {
#define CONFORMANCE_SLOT_ENUM(slot, op) SLOT_##slot,
    CONFORMANCE_SLOTS(CONFORMANCE_SLOT_ENUM)
#undef CONFORMANCE_SLOT_ENUM
    SLOT_INTERFACE_COUNT, /* the slots above; the op kinds follow */
    SLOT_OPS_BEFORE = SLOT_INTERFACE_COUNT - 1,
#define CONFORMANCE_KIND_ENUM(kind, name) SLOT_##name,
    USP_OP_KINDS(CONFORMANCE_KIND_ENUM)
#undef CONFORMANCE_KIND_ENUM
#define CONFORMANCE_MAP_ENUM(fn, name, outs, ins, flops, bytes, names) SLOT_##name,
    USP_MAP_FNS(CONFORMANCE_MAP_ENUM)
#undef CONFORMANCE_MAP_ENUM
    SLOT_COUNT
} conformance_slot;

_Static_assert(SLOT_COUNT <= 64, "a case's slots are a 64-bit mask");

/* The bit of one slot in conformance_case.slots. */
#define SLOT(slot) ((uint64_t)1 << SLOT_##slot)

#define CONFORMANCE_MAX_OUTPUTS 8
#define CONFORMANCE_MAX_STAGED 32

/* One result of a case on the host: n floats downloaded, or one host scalar. */
typedef struct conformance_output {
    const char *name;
    int64_t n;
    float *host;   /* downloaded; readable only after usp_backend_synchronize */
    double scalar; /* when host is NULL: a result the op wrote to host memory (usp_sum_squares) */
    int stored;    /* 1: downloaded from a buffer stored narrower than fp32 (conformance_download_stored) */
} conformance_output;

/* One case on one backend. */
typedef struct conformance_run {
    usp_backend_t *be;
    const char *case_name;
    uint64_t rng; /* the input generator, reset for every run */
    conformance_output out[CONFORMANCE_MAX_OUTPUTS];
    int n_out;
    void *staged[CONFORMANCE_MAX_STAGED]; /* host memory freed after the final synchronize */
    int n_staged;
    usp_dtype storage; /* a bf16 case on a backend that stores bf16: USP_BF16; else USP_F32 */
} conformance_run;

typedef struct conformance_case {
    const char *name;
    void (*run)(conformance_run *r, const void *params);
    const void *params;
    uint64_t slots; /* the slots this case is about (SLOT(x) | ...): what the coverage check ticks off */
    double tol;     /* per output: max |got - ref| / max |ref| (0: bitwise equal) */
    /* 1: a bf16 case (tests/conformance_bf16.c): it runs on backends that store bf16,
     * against the cpu backend in fp32 on the same bf16-rounded inputs; tol is the
     * bound bf16 storage allows. Costs are not compared (the conversions differ). */
    int bf16;
    /* bf16 cases: the bound for the outputs the backend under test keeps in fp32 (lse, statistics,
     * weight gradients, an fp32 residual) and for host scalars, which no bf16 rounding excuses;
     * 0: tol for every output. */
    double tol_f32;
} conformance_case;

/* An ulp of bf16 at 1 (8 significant bits): 2^-7. One rounding to bf16 moves an element x by at
 * most half an ulp of x, at most 2^-8 |x|, so by at most half a BF16_ULP of the largest element:
 * the error measure (relative to max |ref|) of an output rounded once is <= BF16_ULP / 2. */
#define BF16_ULP 0x1p-7

extern const conformance_case conformance_cases[];
extern const int conformance_case_count;
extern const conformance_case conformance_layer_cases[]; /* tests/conformance_layer_cases.c */
extern const int conformance_layer_case_count;
extern const conformance_case conformance_bf16_cases[]; /* tests/conformance_bf16.c */
extern const int conformance_bf16_case_count;
extern const conformance_case conformance_bf16_layer_cases[]; /* tests/conformance_bf16_layers.c */
extern const int conformance_bf16_layer_case_count;

/* An operand stored in a dtype its op does not take (tests/conformance_dtypes.c): `call` runs
 * the op with every operand f32 but `operand`, stored as `storage`. On a backend that stores bf16
 * the wrapper must refuse storage = `wrong` with USP_ERR_CONFIG naming op, operand and dtype, before
 * the op's cost is reported; with storage = USP_F32 the same call must succeed on every backend. */
typedef struct conformance_refusal {
    const char *op, *operand;
    usp_dtype wrong;
    usp_status (*call)(usp_backend_t *be, usp_dtype storage);
} conformance_refusal;

extern const conformance_refusal conformance_refusals[];
extern const int conformance_refusal_count;

/* ---- what a case calls (test_backend_conformance.c) ---- */

/* Fails the test, naming the case, the backend, the call and usp_error_message(), unless s is USP_OK. */
void conformance_ok(conformance_run *r, usp_status s, const char *call);
#define CONFORMANCE_OK(r, expr) conformance_ok((r), (expr), #expr)

/* Uniform in [-1, 1) from the run's generator. */
float conformance_rnd(conformance_run *r);

/* n floats scale * conformance_rnd() in host memory (the run frees them), to edit before conformance_upload. */
float *conformance_host(conformance_run *r, int64_t n, float scale);
/* A backend buffer of n floats, uploaded from `values` (host). */
float *conformance_upload(conformance_run *r, const float *values, int64_t n);
/* A backend buffer of n floats, scale * conformance_rnd(), uploaded. */
float *conformance_input(conformance_run *r, int64_t n, float scale);
/* A backend buffer of n floats, uploaded as NaN: an op that leaves part of its output unwritten shows. */
float *conformance_output_buffer(conformance_run *r, int64_t n);
/* A backend buffer of n int32 ids, uploaded. */
int32_t *conformance_ids(conformance_run *r, const int32_t *values, int64_t n);

/* n values scale * conformance_rnd() rounded to bf16, in a buffer of r->storage (bf16 cases). */
float *conformance_input_stored(conformance_run *r, int64_t n, float scale);
/* The n host values x rounded to bf16 (in place, on the host), in a buffer of r->storage. */
float *conformance_upload_stored(conformance_run *r, float *x, int64_t n);
/* n NaN in a buffer of r->storage. */
float *conformance_output_stored(conformance_run *r, int64_t n);
/* conformance_download of a buffer of r->storage (converted to fp32 on the backend first). */
const float *conformance_download_stored(conformance_run *r, const char *name, const float *dev, int64_t n);

/* An operand as a bf16 step stores it: conformance_input_stored (stored = 1: activations, weights,
 * their gradients) or conformance_input (0: fp32 on every backend: the residual, weight gradients). */
float *conformance_operand(conformance_run *r, int stored, int64_t n, float scale);
/* An output as a step stores it: conformance_output_stored (stored = 1) or conformance_output_buffer (0). */
float *conformance_result(conformance_run *r, int stored, int64_t n);

/* Host memory the run frees after its final synchronize (a host function's argument). */
void *conformance_staged(conformance_run *r, size_t bytes);

/* Queues the download of n floats of `dev` as the output `name`; returns the host copy (valid after synchronize). */
const float *conformance_download(conformance_run *r, const char *name, const float *dev, int64_t n);
/* n host floats, NaN until host code (a host function) writes them, as the output `name`. */
float *conformance_host_output(conformance_run *r, const char *name, int64_t n);
/* Records a result the op left in host memory. */
void conformance_scalar(conformance_run *r, const char *name, double value);

/* Rows that have seen no key yet, as a ring's online-softmax merge meets them: (head h, row i) with
 * o zeroed and lse -inf in the accumulated part (acc), the new part (part), or both. */
typedef struct conformance_unseen {
    int64_t h, i;
    int acc, part;
} conformance_unseen;

/* Marks the unseen rows in host o, o_part [n, H, D] and lse, lse_part [H, n]. */
void conformance_mark_unseen(float *o, float *o_part, float *lse, float *lse_part, int64_t n, int64_t H, int64_t D,
                             const conformance_unseen *unseen, int count);

#endif
