/* Ring attention (see ring.h): K/V blocks around the ring, partial results
 * merged by log-sum-exp, dK/dV travelling home with their block.
 *
 * The unit of work is one (query run, key run) product inside one batch row:
 * a run is a stretch of consecutive global positions held consecutively by a
 * rank ([count, H, D] contiguous inside a batch row), so one flash-attention
 * call with q_offset / kv_offset = the runs' first global positions masks it
 * exactly. With the zigzag layout a rank has two runs, so each step is at most
 * 2 x 2 products per batch row, and the causal ones whose keys all come after
 * their queries are skipped: rank r computes (r + 1) + (2R - r) = 2R + 1 of
 * the 4R products per batch row, with the same number of visible pairs on
 * every rank, (2R - 1) C^2 + C (C + 1) for chunks of C tokens.
 *
 * Traffic per rank, with one block X = B*T*Hkv*D elements of the storage dtype
 * (4 bytes fp32, 2 bf16; T tokens per rank) and S ring steps (R unless the mask
 * ends the ring sooner, ring.h):
 *   forward:  S - 1 sendrecvs of K and V packed       = (S - 1) * 2X
 *   backward: S - 1 sendrecvs of K, V, dK and dV, then one of dK and dV home
 *                                                      = (S - 1) * 4X + 2X
 *             (overlapped: S - 1 of K and V, S of dK and dV: the same bytes in 2S - 1 calls)
 * and nothing at all when S = 1. Scratch is O(block): two travelling buffers
 * of 4 blocks (none when R = 1), one partial o and lse, and the lse of each
 * query run. */
#include "core/parallel/ring.h"

#include <stdlib.h>
#include <string.h>

struct ring_attention {
    ring_attention_config c;
    int R, r;                 /* ring size, this rank's index */
    int64_t T;                /* tokens per rank */
    size_t blk;               /* elements of one K (V, dK, dV) block: B*T*Hkv*D */
    usp_token_run mine[2];    /* this rank's tokens, in its local order; another rank's are computed when
                                 its block arrives (a table for every rank would be R^2 over the ring) */
    int n_mine;
    unsigned char *started;   /* [B][2]: forward has written this query run's first block yet */
    float *buf[2];            /* [4][B,T,Hkv,D] each: K, V, dK, dV; one is sent while the other receives */
    float *o_part;            /* [T,H,D] a block's partial output, before the merge */
    float *lse_part;          /* [H,T]   its log-sum-exp */
    float *lse_run;           /* [B][H,T] as one [H, count] slab per query run, at b*H*T + H*local_first */
    float *eager_out, *eager_tmp; /* eager merge, forward: an fp32 output and a temporary, [T,H,D] each */
    size_t q_elems, lse_elems; /* of o_part and lse_part; buffers above are held during one call only, so
                                  that a model's layers do not each keep theirs */
    usp_stream_t *comm_stream; /* the sendrecvs, beside the attention on c.stream (NULL on the CPU); the
                                  caller's with share_comm_stream */
    usp_event_t *arrived;      /* on comm_stream: the last block received */
    usp_event_t *consumed;     /* on c.stream: the last block's attention is done, its buffer may be refilled */
    int overlap_backward;      /* the backward sends K/V ahead on comm_stream (overlap_pays) */
    int steps;                 /* the last forward's ring steps (steps_needed), which its backward takes too */
};

static unsigned skipped_waits; /* ring_attention_skip_waits_for_tests: RING_WAIT_* left out */

void ring_attention_skip_waits_for_tests(unsigned mask) { skipped_waits = mask; }

/* stream waits for event, unless a test asked to leave out wait `which`. */
static usp_status overlap_wait(const ring_attention *a, usp_stream_t *stream, usp_event_t *event, unsigned which)
{
    return skipped_waits & which ? USP_OK : usp_stream_wait_event(a->c.backend, stream, event);
}

/* Overlapping the backward pays when one step's attention backward outlasts a call's latency.
 * Sending K/V (2X) ahead and dK/dV (2X) after the attention, instead of all four after it, turns a
 * step of C + L + 4X/bw (C the attention, L a call's latency, bw the link) into
 * max(C, L + 2X/bw) + L + 2X/bw: it gains 2X/bw when the attention hides the K/V, and loses where
 * C < L, the extra call's latency not hidden. A step's backward does 10 FLOPs a visible (query, key)
 * pair and head dimension (recomputed scores, dV, dP, dQ, dK: five products of two FLOPs), T^2 pairs
 * a step, half of them under the causal mask. At 1e10 FLOPs a step is about 25 us on an H100 at
 * 400 TFLOP/s, a few call latencies: below it the K/V it hides are a few kilobytes and the
 * extra call costs as much. Shapes alone, the same on every rank of the ring (same T, heads and
 * batch), so every rank makes the same calls. */
#define OVERLAP_MIN_STEP_FLOPS 1e10

static int overlap_pays(const ring_attention_config *c, int64_t T)
{
    if (c->backward_overlap != USP_OVERLAP_AUTO)
        return c->backward_overlap == USP_OVERLAP_ON;
    double pairs = (double)T * (double)T * (c->causal ? 0.5 : 1.0);
    return 10.0 * (double)c->batch * (double)c->n_heads * (double)c->head_dim * pairs >= OVERLAP_MIN_STEP_FLOPS;
}

/* One (query run, key run) call of batch row b: the offsets place it in the global sequence. */
static usp_attention_shape run_shape(const ring_attention *a, int64_t b, const usp_token_run *x,
                                     const usp_token_run *y)
{
    const ring_attention_config *c = &a->c;
    usp_attention_shape s = {.batch = 1, .n_q = x->count, .n_kv = y->count, .n_heads = c->n_heads,
                             .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim, .q_offset = x->global_first,
                             .kv_offset = y->global_first, .causal = c->causal, .scale = c->scale};
    usp_attention_shape_mask(&s, &c->mask, c->layout.n, b);
    return s;
}

/* No query of x sees a key of y in batch row b: the block lies wholly in the queries' future (causal),
 * or beyond their window or their documents. Such a pair of runs makes no call at all. */
static int run_is_masked(const ring_attention *a, int64_t b, const usp_token_run *x, const usp_token_run *y)
{
    if (a->c.mask.window == 0 && !a->c.mask.docs_host)
        return a->c.causal && y->global_first > x->global_first + x->count - 1;
    const usp_attention_shape s = run_shape(a, b, x, y);
    return usp_attention_visible_pairs(&s) == 0.0;
}

/* The ring steps this batch's mask needs (ring.h): ring_steps' bound, less where the documents' table
 * keeps every query from the blocks further back. Every rank computes the same from the same table. */
static int steps_needed(const ring_attention *a)
{
    const ring_attention_config *c = &a->c;
    const int bound = ring_steps(c->layout.kind, a->R, a->T, c->causal, c->mask.window);
    for (int s = bound - 1; s >= 1 && c->mask.docs_host; s--)
        for (int r = 0; r < a->R; r++) {
            usp_token_run x[2], y[2];
            const int nx = usp_seq_layout_runs(&c->layout, r, x);
            const int ny = usp_seq_layout_runs(&c->layout, (r - s + a->R) % a->R, y);
            for (int64_t b = 0; b < c->batch; b++)
                for (int i = 0; i < nx; i++)
                    for (int j = 0; j < ny; j++)
                        if (!run_is_masked(a, b, &x[i], &y[j]))
                            return s + 1;
        }
    return c->mask.docs_host ? 1 : bound;
}

/* Element `index` from p in the storage dtype: q, k, v, o, their gradients and
 * the travelling buffers are stored in it (the lse, always fp32, is offset as float *). */
static void *elem(const ring_attention *a, const void *p, size_t index)
{
    return usp_elem_at(p, a->c.storage, index);
}

/* Element offsets of run x of batch row b in a [B,T,heads,D] tensor, and of its lse slab. */
static size_t tok_at(const ring_attention *a, int64_t b, const usp_token_run *x, int64_t heads)
{
    return ((size_t)b * (size_t)a->T + (size_t)x->local_first) * (size_t)heads * (size_t)a->c.head_dim;
}

static size_t lse_slab_at(const ring_attention *a, int64_t b, const usp_token_run *x)
{
    return ((size_t)b * (size_t)a->T + (size_t)x->local_first) * (size_t)a->c.n_heads;
}

usp_status ring_attention_create(const ring_attention_config *c, ring_attention **out)
{
    if (!c || !out || !c->backend || !c->ring)
        return usp_error(USP_ERR_CONFIG, "ring attention: the config, its backend and its ring group are required");
    int R = usp_comm_size(c->ring);
    const usp_seq_layout *l = &c->layout;
    if (l->ulysses != 1 || l->ring != R || l->per_rank < 1 || l->n != l->per_rank * R)
        return usp_error(USP_ERR_CONFIG,
                         "ring attention: the layout is for --ulysses %d x --ring %d (N = %lld, %lld tokens per "
                         "rank) but the ring group %s has %d ranks: make the layout with ulysses = 1 and ring = %d",
                         l->ulysses, l->ring, (long long)l->n, (long long)l->per_rank, usp_comm_name(c->ring), R, R);
    if (c->batch < 1 || c->n_heads < 1 || c->n_kv_heads < 1 || c->head_dim < 1 || c->n_heads % c->n_kv_heads != 0)
        return usp_error(USP_ERR_CONFIG,
                         "ring attention: batch %lld, %lld heads, %lld kv heads, head_dim %lld: every size must be "
                         "positive and the kv heads must divide the heads",
                         (long long)c->batch, (long long)c->n_heads, (long long)c->n_kv_heads,
                         (long long)c->head_dim);
    if ((unsigned)c->backward_overlap > USP_OVERLAP_OFF)
        return usp_error(USP_ERR_CONFIG, "ring attention: backward_overlap %d is not auto (0), on (1) or off (2)",
                         (int)c->backward_overlap);
    if (c->eager_merge && usp_backend_has_numerics(c->backend))
        return usp_error(USP_ERR_CONFIG, "ring attention: the eager merge is a framework's cost, planned on shapes "
                         "only, and the %s backend computes (use the meta backend: usp plan)",
                         usp_backend_name(c->backend));
    ring_attention *a;
    USP_CHECK(usp_calloc((void **)&a, 1, sizeof *a, "the ring attention handle"));
    a->c = *c;
    a->R = R;
    a->r = usp_comm_rank(c->ring);
    a->T = l->per_rank;
    a->blk = (size_t)c->batch * (size_t)a->T * (size_t)c->n_kv_heads * (size_t)c->head_dim;
    size_t q_elems = (size_t)a->T * (size_t)c->n_heads * (size_t)c->head_dim;
    size_t lse_elems = (size_t)a->T * (size_t)c->n_heads;
    usp_status s;
    USP_CHECK_GOTO(usp_calloc((void **)&a->started, (size_t)c->batch * 2, 1, "ring attention flags"), s, fail);
    a->n_mine = usp_seq_layout_runs(l, a->r, a->mine);
    int64_t held = 0;
    for (int i = 0; i < a->n_mine; i++)
        held += a->mine[i].count;
    USP_ASSERT(held == a->T, "ring rank %d holds %lld tokens, expected %lld", a->r, (long long)held,
               (long long)a->T);
    a->q_elems = q_elems, a->lse_elems = lse_elems;
    /* A shared stream carries every sendrecv: the backward in order would put them on c.stream. */
    a->overlap_backward = R > 1 && (c->share_comm_stream || overlap_pays(c, a->T));
    if (R > 1) {
        if (c->share_comm_stream)
            a->comm_stream = c->comm_stream;
        else
            USP_CHECK_GOTO(usp_stream_create(c->backend, &a->comm_stream), s, fail);
        USP_CHECK_GOTO(usp_event_create(c->backend, &a->arrived), s, fail);
        USP_CHECK_GOTO(usp_event_create(c->backend, &a->consumed), s, fail);
    }
    *out = a;
    return USP_OK;
fail:
    ring_attention_destroy(a);
    return s;
}

int ring_attention_backward_overlaps(const ring_attention *a) { return a && a->overlap_backward; }

void ring_attention_destroy(ring_attention *a)
{
    if (!a)
        return;
    usp_event_destroy(a->c.backend, a->arrived);
    usp_event_destroy(a->c.backend, a->consumed);
    if (!a->c.share_comm_stream)
        (void)usp_stream_destroy(a->c.backend, a->comm_stream);
    free(a->started);
    free(a);
}

/* The merge as ring-flash-attention's update_out_and_lse runs it in PyTorch
 * (EasyContext and yunchang's USP call it; torchtitan's context-parallel
 * merger is the same formula): the output accumulates in fp32, and a merge is
 * four element-wise kernels, block_out.to(float32), out - block_out,
 * sigmoid(block_lse - lse) * that, and out minus the product: about 38 bytes
 * an element where usp's fused merge moves 12. The first three are charged
 * here as the passes a backend runs for them (a copy, an accumulate, a copy:
 * 28 bytes an element of fp32), the fourth is usp's merge itself. Shapes only
 * (ring_attention_create refuses it on a backend that computes). */
static usp_status eager_merge_passes(ring_attention *a, int64_t count)
{
    const ring_attention_config *c = &a->c;
    size_t elems = (size_t)count * (size_t)c->n_heads * (size_t)c->head_dim, bytes = elems * sizeof(float);
    USP_CHECK(usp_buffer_copy(c->backend, a->eager_tmp, a->eager_out, bytes, USP_COPY_DEVICE_TO_DEVICE, c->stream));
    USP_CHECK(usp_accumulate_2d(c->backend, a->eager_tmp, elems, a->eager_out, elems, elems, 1, c->stream));
    return usp_buffer_copy(c->backend, a->eager_out, a->eager_tmp, bytes, USP_COPY_DEVICE_TO_DEVICE, c->stream);
}

/* Our queries against the K/V block of ring rank `owner`, merged into o and the
 * per-run lse. A run's first product is written in place (o = 0, lse = -inf
 * merged with a part is that part, bit for bit), so o needs no zeroing and lse
 * no -inf fill; the later ones go through o_part and the lse merge. */
static usp_status forward_block(ring_attention *a, const float *q, const float *k, const float *v, float *o,
                                int owner)
{
    const ring_attention_config *c = &a->c;
    const usp_token_run *mine = a->mine;
    usp_token_run theirs[2];
    const int n_theirs = usp_seq_layout_runs(&c->layout, owner, theirs);
    for (int64_t b = 0; b < c->batch; b++)
        for (int i = 0; i < a->n_mine; i++) {
            const usp_token_run *x = &mine[i];
            const float *q_run = elem(a, q, tok_at(a, b, x, c->n_heads));
            float *o_run = elem(a, o, tok_at(a, b, x, c->n_heads)), *lse_run = a->lse_run + lse_slab_at(a, b, x);
            unsigned char *started = &a->started[b * 2 + i];
            for (int j = 0; j < n_theirs; j++) {
                const usp_token_run *y = &theirs[j];
                if (run_is_masked(a, b, x, y))
                    continue; /* the zigzag load balance: no call at all */
                usp_attention_shape s = run_shape(a, b, x, y);
                const float *k_run = elem(a, k, tok_at(a, b, y, c->n_kv_heads));
                const float *v_run = elem(a, v, tok_at(a, b, y, c->n_kv_heads));
                if (!*started) {
                    USP_CHECK(usp_flash_attention_forward(c->backend, &s, q_run, k_run, v_run, o_run, lse_run,
                                                          c->stream));
                    *started = 1;
                    continue;
                }
                USP_CHECK(usp_flash_attention_forward(c->backend, &s, q_run, k_run, v_run, a->o_part, a->lse_part,
                                                      c->stream));
                if (c->eager_merge)
                    USP_CHECK(eager_merge_passes(a, x->count));
                USP_CHECK(usp_attention_merge(c->backend, o_run, lse_run, a->o_part, a->lse_part, x->count,
                                              c->n_heads, c->head_dim, c->stream));
            }
        }
    return USP_OK;
}

/* Moves the lse between [B,H,T] (rows strided by T) and the per-run slabs
 * [H, count]: from `rows` into the slabs, or (rows == NULL) from the slabs into `out`. */
static usp_status lse_slabs(ring_attention *a, const float *rows, float *out)
{
    const ring_attention_config *c = &a->c;
    size_t T = (size_t)a->T, H = (size_t)c->n_heads;
    for (int64_t b = 0; b < c->batch; b++)
        for (int i = 0; i < a->n_mine; i++) {
            const usp_token_run *x = &a->mine[i];
            size_t at = (size_t)b * H * T + (size_t)x->local_first, run_bytes = (size_t)x->count * sizeof(float);
            float *slab = a->lse_run + lse_slab_at(a, b, x);
            if (rows)
                USP_CHECK(usp_copy_2d(c->backend, slab, run_bytes, rows + at, T * sizeof(float), run_bytes, H,
                                      c->stream));
            else
                USP_CHECK(usp_copy_2d(c->backend, out + at, T * sizeof(float), slab, run_bytes, run_bytes, H,
                                      c->stream));
        }
    return USP_OK;
}

/* The scratch of one call: two travelling buffers of K, V, dK, dV ("comm";
 * none when R = 1) and the merge temporaries ("attention workspace"; in the
 * forward with the eager merge, its fp32 output and temporary too). */
static usp_status hold_scratch(ring_attention *a, int forward)
{
    const ring_attention_config *c = &a->c;
    usp_status s = USP_OK;
    for (int i = 0; i < 2 && a->R > 1 && s == USP_OK; i++) /* R = 1: nothing travels */
        s = usp_buffer_alloc_as(c->backend, 4 * a->blk, c->storage, "comm", (void **)&a->buf[i]);
    if (s == USP_OK)
        s = usp_buffer_alloc_as(c->backend, a->q_elems, c->storage, "attention workspace", (void **)&a->o_part);
    if (s == USP_OK)
        s = usp_buffer_alloc(c->backend, a->lse_elems * sizeof(float), "attention workspace", (void **)&a->lse_part);
    if (s == USP_OK)
        s = usp_buffer_alloc(c->backend, (size_t)c->batch * a->lse_elems * sizeof(float), "attention workspace",
                             (void **)&a->lse_run);
    for (int i = 0; i < 2 && forward && c->eager_merge && s == USP_OK; i++)
        s = usp_buffer_alloc(c->backend, a->q_elems * sizeof(float), "attention workspace",
                             (void **)(i ? &a->eager_tmp : &a->eager_out));
    return s;
}

static void release_scratch(ring_attention *a)
{
    usp_backend_t *be = a->c.backend;
    float **held[] = {&a->buf[0], &a->buf[1], &a->o_part, &a->lse_part, &a->lse_run, &a->eager_out, &a->eager_tmp};
    for (size_t i = 0; i < sizeof held / sizeof *held; i++) {
        usp_buffer_free(be, *held[i]);
        *held[i] = NULL;
    }
}

static usp_status check_pointers(const ring_attention *a, const char *what, int n, const void *const *p)
{
    if (!a)
        return usp_error(USP_ERR_CONFIG, "ring attention %s: the handle is NULL", what);
    for (int i = 0; i < n; i++)
        if (!p[i])
            return usp_error(USP_ERR_CONFIG, "ring attention %s: buffer argument %d is NULL", what, i + 1);
    return USP_OK;
}

static usp_status forward(ring_attention *a, const float *q, const float *k, const float *v, float *o, float *lse)
{
    const ring_attention_config *c = &a->c;
    int R = a->R, next = (a->r + 1) % R, prev = (a->r + R - 1) % R, S = a->steps = steps_needed(a);
    size_t blk_bytes = a->blk * usp_dtype_size(c->storage);
    memset(a->started, 0, (size_t)c->batch * 2);
    if (S > 1) { /* pack K and V so each ring step is one sendrecv */
        USP_CHECK(usp_buffer_copy(c->backend, a->buf[0], k, blk_bytes, USP_COPY_DEVICE_TO_DEVICE, c->stream));
        USP_CHECK(usp_buffer_copy(c->backend, elem(a, a->buf[0], a->blk), v, blk_bytes, USP_COPY_DEVICE_TO_DEVICE,
                                  c->stream));
    }
    /* Double buffering on two streams: step s receives block s+1 into buf[cur ^ 1] on the comm
     * stream while the attention of block s reads buf[cur] on the compute stream. Two events keep it
     * right: the receive into a buffer waits until the attention that read it last (step s-1) is done
     * (`consumed`), and the attention of a block waits for its arrival (`arrived`). No send after the
     * last step; the last attention waited for the last arrival, which joins the streams again. */
    int cur = 0;
    for (int s = 0; s < S; s++) {
        if (s + 1 < S) {
            USP_CHECK(usp_event_record(c->backend, a->consumed, c->stream));
            USP_CHECK(usp_stream_wait_event(c->backend, a->comm_stream, a->consumed));
            USP_CHECK(usp_comm_sendrecv(c->ring, a->buf[cur], 2 * a->blk, next, a->buf[cur ^ 1], 2 * a->blk, prev,
                                        c->storage, a->comm_stream));
        }
        if (s > 0)
            USP_CHECK(usp_stream_wait_event(c->backend, c->stream, a->arrived));
        if (s + 1 < S)
            USP_CHECK(usp_event_record(c->backend, a->arrived, a->comm_stream));
        const float *kb = s == 0 ? k : a->buf[cur], *vb = s == 0 ? v : elem(a, a->buf[cur], a->blk);
        USP_CHECK(forward_block(a, q, kb, vb, o, (a->r - s + R) % R));
        cur ^= 1;
    }
    /* Every query sees its own position (causal, a window and documents alike), so every query run
     * met its own block at least and was started. */
    for (int64_t b = 0; b < c->batch; b++)
        for (int i = 0; i < a->n_mine; i++)
            USP_ASSERT(a->started[b * 2 + i], "batch %lld query run %d saw no block", (long long)b, i);
    return lse_slabs(a, NULL, lse);
}

/* Gradients of our queries against the block of ring rank `owner`: into dq
 * (ours) and into dk, dv (the block's, travelling). Same skipping rule as forward. */
static usp_status backward_block(ring_attention *a, const float *q, const float *o, const float *d_o, float *dq,
                                 const float *k, const float *v, float *dk, float *dv, int owner)
{
    const ring_attention_config *c = &a->c;
    const usp_token_run *mine = a->mine;
    usp_token_run theirs[2];
    const int n_theirs = usp_seq_layout_runs(&c->layout, owner, theirs);
    for (int64_t b = 0; b < c->batch; b++)
        for (int i = 0; i < a->n_mine; i++) {
            const usp_token_run *x = &mine[i];
            size_t qa = tok_at(a, b, x, c->n_heads);
            const float *lse_run = a->lse_run + lse_slab_at(a, b, x);
            for (int j = 0; j < n_theirs; j++) {
                const usp_token_run *y = &theirs[j];
                if (run_is_masked(a, b, x, y))
                    continue;
                usp_attention_shape s = run_shape(a, b, x, y);
                size_t ka = tok_at(a, b, y, c->n_kv_heads);
                USP_CHECK(usp_flash_attention_backward(c->backend, &s, elem(a, q, qa), elem(a, k, ka), elem(a, v, ka),
                                                       elem(a, o, qa), lse_run, elem(a, d_o, qa), elem(a, dq, qa),
                                                       elem(a, dk, ka), elem(a, dv, ka), 1, c->stream));
            }
        }
    return USP_OK;
}

/* Where the dK/dV of step s go and come from: the next rank and the one before, and after the last step
 * (s = S - 1) home in one hop: to the block's owner r - (S - 1), from the rank holding ours, r + S - 1. */
static void grad_peers(const ring_attention *a, int s, int *to, int *from)
{
    const int R = a->R, hop = s + 1 < a->steps ? 1 : 1 - a->steps;
    *to = ((a->r + hop) % R + R) % R;
    *from = ((a->r - hop) % R + R) % R;
}

/* The ring steps of the backward with K/V one step ahead; *cur: the buffer (0 or 1) that holds our
 * block's dK/dV after the last hop. The comm stream runs, per step s (block of ring rank r - s in
 * buf[cur]):
 *   K, V of buf[cur] to next, those of block s+1 into buf[cur ^ 1]   (s < S-1; beside the attention of s)
 *   wait `consumed` (attention of s done), then dK, dV of buf[cur] to next, those of block s+1 received
 *   record `arrived`, which the attention of s+1 (and, after the last hop, the copy home) waits for.
 * The receive of K/V into buf[cur ^ 1] needs no wait of its own: the attention of s-1 that read that
 * buffer last is older than the dK/dV send of s-1, queued before it on the comm stream. Each block's
 * dK/dV are added to in ring order as before, so the bits are those of the step without overlap. */
static usp_status backward_overlapped(ring_attention *a, const float *q, const float *o, const float *d_o, float *dq,
                                      int *cur)
{
    const ring_attention_config *c = &a->c;
    int R = a->R, S = a->steps, next = (a->r + 1) % R, prev = (a->r + R - 1) % R, to, from;
    const size_t blk = a->blk;
    /* the first send reads the block packed on c.stream */
    USP_CHECK(usp_event_record(c->backend, a->consumed, c->stream));
    USP_CHECK(overlap_wait(a, a->comm_stream, a->consumed, RING_WAIT_PACKED));
    *cur = 0;
    for (int s = 0;; s++) {
        /* One wait for every arrival, the last hop's included (the lazy backend's order checker
         * stops a run at the first attention that reads a block without it). */
        if (s > 0)
            USP_CHECK(overlap_wait(a, c->stream, a->arrived, RING_WAIT_ARRIVED));
        if (s == S)
            return USP_OK;
        float *b = a->buf[*cur], *nb = a->buf[*cur ^ 1];
        if (s + 1 < S)
            USP_CHECK(usp_comm_sendrecv(c->ring, b, 2 * blk, next, nb, 2 * blk, prev, c->storage, a->comm_stream));
        USP_CHECK(backward_block(a, q, o, d_o, dq, b, elem(a, b, blk), elem(a, b, 2 * blk), elem(a, b, 3 * blk),
                                 (a->r - s + R) % R));
        USP_CHECK(usp_event_record(c->backend, a->consumed, c->stream));
        USP_CHECK(overlap_wait(a, a->comm_stream, a->consumed, RING_WAIT_DONE));
        grad_peers(a, s, &to, &from);
        USP_CHECK(usp_comm_sendrecv(c->ring, elem(a, b, 2 * blk), 2 * blk, to, elem(a, nb, 2 * blk), 2 * blk,
                                    from, c->storage, a->comm_stream));
        USP_CHECK(usp_event_record(c->backend, a->arrived, a->comm_stream));
        *cur ^= 1;
    }
}

/* The ring steps of the backward without overlap: each step's sendrecv of K, V, dK and dV follows its
 * attention on the same stream; returns in *cur the buffer that holds our block's dK/dV at the end. */
static usp_status backward_in_order(ring_attention *a, const float *q, const float *o, const float *d_o, float *dq,
                                    int *cur)
{
    const ring_attention_config *c = &a->c;
    int R = a->R, S = a->steps, next = (a->r + 1) % R, prev = (a->r + R - 1) % R, to, from;
    const size_t blk = a->blk;
    *cur = 0;
    for (int s = 0; s < S; s++) {
        float *b = a->buf[*cur], *nb = a->buf[*cur ^ 1];
        USP_CHECK(backward_block(a, q, o, d_o, dq, b, elem(a, b, blk), elem(a, b, 2 * blk), elem(a, b, 3 * blk),
                                 (a->r - s + R) % R));
        /* dK/dV are complete for this step only after the compute, so the send follows it on the
         * same stream. After step S-1 we hold block r-(S-1): one more hop of dK/dV alone takes it home. */
        if (s + 1 < S)
            USP_CHECK(usp_comm_sendrecv(c->ring, b, 4 * blk, next, nb, 4 * blk, prev, c->storage, c->stream));
        else {
            grad_peers(a, s, &to, &from);
            USP_CHECK(usp_comm_sendrecv(c->ring, elem(a, b, 2 * blk), 2 * blk, to, elem(a, nb, 2 * blk), 2 * blk,
                                        from, c->storage, c->stream));
        }
        *cur ^= 1;
    }
    return USP_OK;
}

static usp_status backward(ring_attention *a, const float *q, const float *k, const float *v, const float *o,
                           const float *lse, const float *d_o, float *dq, float *dk, float *dv)
{
    const ring_attention_config *c = &a->c;
    const size_t esz = usp_dtype_size(c->storage), blk = a->blk, blk_bytes = blk * esz;
    USP_CHECK(usp_buffer_zero(c->backend, dq, (size_t)c->batch * (size_t)a->T * (size_t)c->n_heads *
                                              (size_t)c->head_dim * esz, c->stream));
    /* The kernel wants each query run's GLOBAL lse as one [H, count] slab. */
    USP_CHECK(lse_slabs(a, lse, NULL));
    if (a->steps == 1) { /* no ring (R = 1, or the forward's mask kept to our block): our gradients land in place */
        USP_CHECK(usp_buffer_zero(c->backend, dk, blk_bytes, c->stream));
        USP_CHECK(usp_buffer_zero(c->backend, dv, blk_bytes, c->stream));
        return backward_block(a, q, o, d_o, dq, k, v, dk, dv, a->r);
    }
    /* buf = [K | V | dK | dV]: the gradients ride with the block they belong to. */
    USP_CHECK(usp_buffer_copy(c->backend, a->buf[0], k, blk_bytes, USP_COPY_DEVICE_TO_DEVICE, c->stream));
    USP_CHECK(usp_buffer_copy(c->backend, elem(a, a->buf[0], blk), v, blk_bytes, USP_COPY_DEVICE_TO_DEVICE,
                              c->stream));
    USP_CHECK(usp_buffer_zero(c->backend, elem(a, a->buf[0], 2 * blk), 2 * blk_bytes, c->stream));
    int cur;
    if (a->overlap_backward)
        USP_CHECK(backward_overlapped(a, q, o, d_o, dq, &cur));
    else
        USP_CHECK(backward_in_order(a, q, o, d_o, dq, &cur));
    USP_CHECK(usp_buffer_copy(c->backend, dk, elem(a, a->buf[cur], 2 * blk), blk_bytes, USP_COPY_DEVICE_TO_DEVICE,
                              c->stream));
    return usp_buffer_copy(c->backend, dv, elem(a, a->buf[cur], 3 * blk), blk_bytes, USP_COPY_DEVICE_TO_DEVICE,
                           c->stream);
}

usp_status ring_attention_forward(ring_attention *a, const float *q, const float *k, const float *v, float *o,
                                  float *lse)
{
    USP_CHECK(check_pointers(a, "forward", 5, (const void *const[]){q, k, v, o, lse}));
    usp_status s = hold_scratch(a, 1);
    if (s == USP_OK)
        s = forward(a, q, k, v, o, lse);
    release_scratch(a);
    return s;
}

usp_status ring_attention_backward(ring_attention *a, const float *q, const float *k, const float *v,
                                   const float *o, const float *lse, const float *d_o, float *dq, float *dk,
                                   float *dv)
{
    USP_CHECK(check_pointers(a, "backward", 9, (const void *const[]){q, k, v, o, lse, d_o, dq, dk, dv}));
    usp_status s = hold_scratch(a, 0);
    if (s == USP_OK)
        s = backward(a, q, k, v, o, lse, d_o, dq, dk, dv);
    release_scratch(a);
    return s;
}

int ring_steps(usp_layout_kind kind, int R, int64_t T, int causal, int64_t window)
{
    if (window == 1) /* each query sees itself alone */
        return 1;
    if (!causal || window <= 0 || kind != USP_LAYOUT_CONTIGUOUS)
        return R;
    const int64_t steps = 2 + (window - 2) / T;
    return steps < R ? (int)steps : R;
}

double ring_sent(int steps, int64_t batch, int64_t T, int64_t kv_heads, int64_t head_dim)
{
    const double X = (double)batch * (double)T * (double)kv_heads * (double)head_dim;
    return steps > 1 ? (double)(steps - 1) * 6.0 * X + 2.0 * X : 0.0;
}
