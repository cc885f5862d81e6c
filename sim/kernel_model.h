/* A calibrated, size-aware model of a backend's kernels (usp calibrate writes
 * it into a topology file's GPU; docs/cluster_model.md, "Calibrated kernels").
 *
 * Each op class (an op name core/ops/op_kinds.c names: "gemm", "attention_forward",
 * "layernorm_backward", ...) prices an op of `flops`, `bytes` of memory
 * traffic and `outputs` (usp_op_cost) as
 *     seconds = call + outputs x per_output + bytes x per_byte + work x per_work(bytes)
 * where work is the flops for GEMM and attention and the bytes for every other
 * op, and per_work is a table over the op's bytes, interpolated linearly in
 * log(bytes) between its points and constant beyond the ends (the fit puts
 * its points from the smallest measured size to the largest, about a factor
 * of 100 apart, at most 4, so that every point has measurements on either
 * side and nothing is extrapolated but a constant rate): the cost of a
 * unit of work changes with the working set (a GEMM whose operands sit in
 * cache runs at twice the rate of one that streams them from memory on a
 * CPU; a small copy runs from cache). `call` is the fixed cost of a call
 * (launch, thread fork, loop set-up); `per_output` a cost per element of a
 * GEMM's C (its accumulator, loaded and stored once whatever k is) or per
 * attention score (its exponential and running max, whatever the head
 * dimension is): what makes the time depend on the shape and not only on the
 * size (k = flops / 2 outputs, head_dim = flops / 4 outputs). The class "*"
 * prices every op without one of its own.
 *
 * A class has a dtype: GEMM and attention run on other units in bf16 than in
 * fp32 (a GPU's tensor cores: 16x the fp32 rate on an H100), so a backend that
 * stores bf16 is measured in both and an op is priced by the class of its own
 * dtype (usp_op_cost.dtype); an fp32 class prices the dtypes without one.
 *
 * A class is cold (its op timed after a flush: its operands out of cache) or
 * hot (the op run again at once: they are in it). An op is priced by the
 * cold class, or, when the model has the hot one too, by both weighted by
 * the fraction of its operands' bytes the rank's cache holds
 * (sim/cache_model.h): held x hot + (1 - held) x cold.
 *
 * The fit is least squares on relative error over non-negative coefficients
 * (the optimum over every subset of the terms, fewest terms first on a tie),
 * so data the model generated gives the model back: the fixed point `usp
 * calibrate --backend sim` on a calibrated file checks. */
#ifndef USP_SIM_KERNEL_MODEL_H
#define USP_SIM_KERNEL_MODEL_H

#include <jansson.h>

#include "core/ops/ops.h"
#include "core/base/status.h"

#define SIM_KERNEL_FITS_MAX 80 /* every op class in fp32, gemm and attention again in bf16; cold and hot */
#define SIM_KERNEL_OP_MAX 32
#define SIM_KERNEL_TABLE 4 /* points of a table, at most */

/* One op class. */
typedef struct sim_kernel_fit {
    char op[SIM_KERNEL_OP_MAX];       /* the op's name, or "*" for every other op */
    usp_dtype dtype;                  /* USP_F32 (also every dtype without a class) or USP_BF16 */
    int hot;                          /* 1: its operands in cache (the op run again at once); 0: after a flush */
    int per_flop;                     /* 1: the table prices flops (gemm, attention_*); 0: bytes */
    double call_s, per_output_s, per_byte_s; /* per_byte_s: a flop-priced class's traffic */
    int n_table;                      /* points of the table, >= 1 */
    double table_bytes[SIM_KERNEL_TABLE];     /* ascending, > 0 */
    double table_per_work_s[SIM_KERNEL_TABLE]; /* seconds a flop (or byte) at that many bytes, >= 0 */
} sim_kernel_fit;

/* The classes of one backend (n 0: none; the GPU's roofline prices every op). */
typedef struct sim_kernel_model {
    int n;
    sim_kernel_fit fits[SIM_KERNEL_FITS_MAX];
} sim_kernel_model;

/* One measured call: its work (as the op reported it) and its seconds. */
typedef struct sim_kernel_point {
    double flops, bytes, outputs, seconds;
} sim_kernel_point;

/* 1 when op `op` is priced by its flops (gemm, attention_*), 0 by its bytes. */
int sim_kernel_op_per_flop(const char *op);

/* The cold class that prices `op` in `dtype`: its own in that dtype, else its own in fp32, else "*", else NULL. */
const sim_kernel_fit *sim_kernel_find(const sim_kernel_model *m, const char *op, usp_dtype dtype);

/* sim_kernel_find among the hot classes (hot 1) or the cold ones (hot 0). */
const sim_kernel_fit *sim_kernel_find_in(const sim_kernel_model *m, const char *op, usp_dtype dtype, int hot);

/* Seconds of an op under its class. */
double sim_kernel_fit_seconds(const sim_kernel_fit *f, double flops, double bytes, double outputs);

/* Seconds `cost` takes under the model with its operands out of cache; a negative number when no class prices
 * it. */
double sim_kernel_seconds(const sim_kernel_model *m, const usp_op_cost *cost);

/* The same with the fraction `held` of its operands' bytes in cache (the cold class alone without a hot one). */
double sim_kernel_seconds_held(const sim_kernel_model *m, const usp_op_cost *cost, double held);

/* 1 when the model has a hot class (the cache then matters to it). */
int sim_kernel_model_has_hot(const sim_kernel_model *m);

/* Fits class `op` (fp32; set out->dtype for another) to n >= 1 points (see above) into *out. USP_ERR_CONFIG for no point, or a point whose work is
 * negative or not finite, or whose time is not a positive finite number. */
usp_status sim_kernel_fit_points(const char *op, const sim_kernel_point *points, int n, sim_kernel_fit *out);

/* Appends a class (USP_ERR_CONFIG when full or when `f->op` is there already in `f->dtype`, hot or cold alike). */
usp_status sim_kernel_model_add(sim_kernel_model *m, const sim_kernel_fit *f);

/* The model as the topology file's "kernels" array (docs/cluster_model.md); NULL when out of memory. */
json_t *sim_kernel_model_to_json(const sim_kernel_model *m);

/* Reads the "kernels" array; messages read "<where>: field '<prefix>kernels[i].call_us' ...". USP_ERR_CONFIG naming
 * the field, the value and its range. */
usp_status sim_kernel_model_from_json(const json_t *array, const char *where, const char *prefix,
                                      sim_kernel_model *out);

#endif
