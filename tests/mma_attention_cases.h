/* Test problems for the tensor-core attention (its CPU emulation, tests/test_mma_attention_emulation.c,
 * and its kernels on a GPU, tests/test_cuda_attention_mma.c) against the cpu attention, with
 * per-element bf16 tolerances; causal or full, and masks beyond causal (windows, documents), whose
 * visible pairs the double pass takes from the definition (core/ops/mask.h's usp_mask_sees).
 *
 * Inputs are bf16 values (random, rounded to nearest even), given to both sides; the cpu's o is
 * rounded to bf16 for the emulated backward (the kernel reads a bf16 O). So every difference comes
 * from the places the kernel rounds to bf16, u = 2^-8 each (bf16 keeps 8 significant bits: a
 * rounding to nearest is off by at most half an ulp, 2^-8 relative), plus fp32 arithmetic in both
 * implementations, c = 2^-12 (n 2^-24 for sums of n <= 4096 terms, and a few ulps of exp). Per
 * element, with P, dS and the magnitudes below from a double-precision pass:
 *   o:  P rounded before P V, while l sums the fp32 P: |sum_j P_ij e_ij v_j| <= u sum_j P_ij |v_j|;
 *       the stored o rounded: u |o|.              tol = (u + 3c) sum_j P_ij |v_jd| + u |o| + 1e-6
 *   dv: P^T rounded before P^T dO.                 tol = (u + 3c) sum_i P_ij |dO_id| + u |dv| + 1e-6
 *   dS: rounded before its mma (u |dS|); delta from the bf16 O (u beta_i, beta_i = sum_d |dO_id o_id|);
 *       dP and delta in fp32 (c (beta_i + gamma_ij), gamma_ij = sum_d |dO_id v_jd|):
 *       |err dS_ij| <= (u + c) E_ij, E_ij = |dS_ij| + P_ij (beta_i + gamma_ij);
 *   dk: tol = scale (u + 3c) sum_i E_ij |q_id| + u |dk| + 1e-6;  dq: the same with sum_j E_ij |k_jd|.
 *   lse: fp32 only: tol = c (1 + |lse| + scale max_j sum_d |q_id k_jd|).
 * Random errors mostly cancel: the test prints the largest error / tolerance of each output, and
 * requires the o error to be above fp32 noise (the rounding happened). */
#ifndef USP_TESTS_MMA_ATTENTION_CASES_H
#define USP_TESTS_MMA_ATTENTION_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "core/ops/ops.h"

/* One problem: inputs, the cpu's outputs, the implementation's, and the double pass's magnitudes. */
typedef struct mma_case {
    usp_attention_shape s;
    size_t nq, nkv, nl;
    float *q, *k, *v, *d_o, *o_bf16;
    float *o, *lse, *dq, *dk, *dv;      /* cpu */
    float *eo, *e_lse, *edq, *edk, *edv; /* the implementation under test (NaN until written) */
    double *mo, *mlse, *mdq, *mdk, *mdv; /* magnitudes of the tolerances */
    int32_t *docs;                       /* the case's copy of s.docs (host memory), or NULL */
} mma_case;

/* Fills c->eo, e_lse, edq, edk, edv from c's inputs: forward on q, k, v; backward on q, k, v, o_bf16,
 * lse (the cpu's), d_o. */
typedef void (*mma_case_runner)(mma_case *c);

/* A shape with scale 1 / sqrt(D). */
usp_attention_shape mma_case_shape(int64_t batch, int64_t n_q, int64_t n_kv, int64_t heads, int64_t kv_heads,
                                   int64_t D, int causal, int64_t q_offset, int64_t kv_offset);

/* n floats: random bf16 values in [-1, 1) from the case's seed, or NaN (random_bf16 = 0). */
float *mma_case_array(size_t n, int random_bf16);

/* A documents' table [batch][seq_len][2] (malloc'd): a cycle of lengths from 1 token to several tiles,
 * from a different document in each batch row. */
int32_t *mma_case_documents(int64_t batch, int64_t seq_len);

/* Random bf16 inputs from seed, the cpu attention's outputs, `run`'s, and the tolerances' magnitudes.
 * A mask in s (window, documents in host memory) is kept: the case copies the table, so that s.docs
 * may be freed once this returns; a runner on a device uploads c->s.docs itself. */
void mma_case_run(mma_case *c, usp_attention_shape s, uint64_t seed, mma_case_runner run);

/* Asserts every output within its tolerance (printing the worst error / tolerance of each);
 * returns that ratio for o. */
double mma_case_check(const mma_case *c, const char *name);

/* Frees what mma_case_run allocated. */
void mma_case_free(mma_case *c);

/* Every shape of the shared list (seeds seed, seed + 1, ...) run, checked and freed; the worst o ratio. */
double mma_case_run_all(mma_case_runner run, uint64_t seed);

#endif
