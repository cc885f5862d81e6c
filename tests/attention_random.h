/* Random attention shapes, masks and data for the tests of the CUDA attention that
 * need no GPU (test_cuda_tiles.c): splitmix64 from a seed the test sets, so the same
 * inputs on every machine. */
#ifndef USP_TESTS_ATTENTION_RANDOM_H
#define USP_TESTS_ATTENTION_RANDOM_H

#include <stddef.h>
#include <stdint.h>

#include "core/ops/ops.h"

/* The generator's state: a test sets it to its seed. */
extern uint64_t rng_state;

/* The next 64 random bits (splitmix64). */
uint64_t rng_next(void);

/* A uniform integer in [lo, hi]. */
int64_t rng_int(int64_t lo, int64_t hi);

/* A uniform float in [-1, 1). */
float rng_uniform(void);

/* n floats, each fill, or random where fill is NaN; asserts the allocation. */
float *floats(size_t n, float fill_or_nan_for_random);

/* An attention shape with the scale 1/sqrt(head_dim). */
usp_attention_shape make_shape(int64_t batch, int64_t n_q, int64_t n_kv, int64_t heads, int64_t kv_heads,
                               int64_t head_dim, int causal, int64_t q_offset, int64_t kv_offset);

/* A random shape: ragged lengths up to max_len, GQA, offsets on either side. */
usp_attention_shape random_shape(int64_t max_len);

/* Random documents filling seq_len positions of each batch row: the table t [batch][seq_len][2]. */
void random_documents(int32_t *t, int64_t batch, int64_t seq_len);

/* The table random masks point to: two batch rows of up to 1024 positions. */
extern int32_t doc_table[2 * 1024 * 2];

/* A random window and, half the time, random documents on s (its table: doc_table). */
void random_mask(usp_attention_shape *s);

#endif
