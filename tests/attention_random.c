/* Random attention shapes, masks and data (attention_random.h). */
#include "tests/attention_random.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "core/ops/mask.h"

uint64_t rng_state;
uint64_t rng_next(void) /* splitmix64: the same inputs on every machine */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
int64_t rng_int(int64_t lo, int64_t hi) { return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1)); }
float rng_uniform(void) { return (float)((double)(rng_next() >> 40) / (double)(1ull << 24) * 2.0 - 1.0); }

float *floats(size_t n, float fill_or_nan_for_random)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++) x[i] = isnan(fill_or_nan_for_random) ? rng_uniform() : fill_or_nan_for_random;
    return x;
}

float *emu_scratch(size_t n, float fill) { return floats(n, fill); }

usp_attention_shape make_shape(int64_t batch, int64_t n_q, int64_t n_kv, int64_t heads, int64_t kv_heads,
                                      int64_t head_dim, int causal, int64_t q_offset, int64_t kv_offset)
{
    usp_attention_shape s = {.batch = batch, .n_q = n_q, .n_kv = n_kv, .n_heads = heads, .n_kv_heads = kv_heads,
                             .head_dim = head_dim, .q_offset = q_offset, .kv_offset = kv_offset, .causal = causal,
                             .scale = (float)(1.0 / sqrt((double)head_dim))};
    return s;
}

/* A shape with ragged lengths, GQA and offsets on either side (ring blocks before,
 * after or across the diagonal, and blocks no query of which sees a key). */
usp_attention_shape random_shape(int64_t max_len)
{
    static const int64_t dims[] = {16, 24, 32, 48, 64, 80, 128};
    const int64_t kv_heads = rng_int(1, 3), group = rng_int(1, 3);
    return make_shape(rng_int(1, 2), rng_int(1, max_len), rng_int(1, max_len), kv_heads * group, kv_heads,
                      dims[rng_int(0, 6)], (int)rng_int(0, 3) > 0, rng_int(0, 2 * max_len), rng_int(0, 2 * max_len));
}

/* Documents of random lengths (a third of them 1 token, others up to 40 or across tiles, to 200) filling
 * the seq_len positions of each batch row, different in each: the table t [batch][seq_len][2]. */
void random_documents(int32_t *t, int64_t batch, int64_t seq_len)
{
    for (int64_t b = 0; b < batch; b++) {
        int64_t lengths[1024], n = 0;
        for (int64_t at = 0; at < seq_len; at += lengths[n++]) {
            const int64_t kind = rng_int(0, 2), len = kind == 0 ? 1 : kind == 1 ? rng_int(2, 40) : rng_int(41, 200);
            lengths[n] = len < seq_len - at ? len : seq_len - at;
        }
        usp_mask_table_fill(lengths, n, t + 2 * b * seq_len);
    }
}

/* The table random masks point to: two batch rows of up to 1024 positions. */
int32_t doc_table[2 * 1024 * 2];

/* A random mask on s: no window or one of 1, 3, 17, a tile (64), past the sequence or any up to 150;
 * half the time documents (random_documents); the table covers every position the call reaches. */
void random_mask(usp_attention_shape *s)
{
    static const int64_t windows[] = {0, 1, 3, 17, 64, 100000};
    s->window = rng_int(0, 6) == 6 ? rng_int(1, 150) : windows[rng_int(0, 5)];
    s->seq_len = s->q_offset + s->n_q > s->kv_offset + s->n_kv ? s->q_offset + s->n_q : s->kv_offset + s->n_kv;
    ck_assert(s->batch <= 2 && s->seq_len <= 1024);
    s->docs = NULL;
    if (rng_int(0, 1)) {
        random_documents(doc_table, s->batch, s->seq_len);
        s->docs = doc_table;
    }
}
