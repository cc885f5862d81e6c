/* Ulysses attention (see ulysses.h): head partition, the two layout transforms around the
 * all-to-all, the inner attention (local flash attention, or ring attention in the hybrid), and
 * the overlap of head groups (run_groups).
 *
 * At U = 1 (pure Ring, or one rank) sequence -> heads is the identity: the [B, T, H, D] tensors
 * already are [B, U T, h_me, D]. The caller's q, k, v, o and gradients then go straight to the inner
 * attention: no copy, no one-rank all-to-all, no gathered copies kept (ulysses_attention_keeps_inputs). */
#include "core/parallel/ulysses.h"

#include <math.h>
#include <stdlib.h>

/* Which heads each Ulysses rank attends for: [first, first + count). */
typedef struct head_split { int64_t *first, *count; /* [U] */ } head_split;

struct ulysses_attention {
    ulysses_attention_config c;
    usp_seq_layout layout;     /* the SP layout over U x R */
    int U, me;
    int64_t T, NU;             /* tokens per rank; tokens per Ulysses group (U T) */
    head_split q_heads, kv_heads;
    int kv_shared, G;          /* 1 when a KV head goes to several ranks; head groups: 2 with the overlap, else 1 */
    head_split grp_q, grp_kv;  /* one group's split, filled before each of its exchanges (group_split) */
    usp_stream_t *comm_stream, *xs; /* the overlap's exchanges; xs: the stream exchanges go to now */
    usp_event_t *to_comm, *to_compute; /* recorded on c.stream for comm_stream, and back */
    ring_attention *ring;      /* hybrid only; with the overlap, over one group's heads */
    /* kept from forward for backward: this rank's heads over the group's tokens */
    float *q_all, *k_all, *v_all, *o_all, *lse; /* [B, NU, h, D] ([B, h, NU] for lse); U = 1: lse only */
    const float *q_in, *k_in, *v_in, *o_in; /* what backward reads: the above, or at U = 1 the forward's own */
    float *send, *recv;        /* all-to-all buffers, held during one call only: one pair live, not one a layer */
    int64_t exchange_elems;    /* their size */
    size_t *counts;            /* [4][U]: send counts, send offsets, recv counts, recv offsets */
};

static usp_status overlap_setup(ulysses_attention *a); /* below, beside the overlapped schedule */

const usp_seq_layout *ulysses_attention_layout(const ulysses_attention *a) { return &a->layout; }

int ulysses_attention_keeps_inputs(const ulysses_attention *a) { return a->U > 1; }

/* Rank j's query heads (first, count) of H over U, and the KV heads they use (of H / group). */
static void head_range(int64_t H, int64_t group, int U, int j, int64_t q[2], int64_t kv[2])
{
    q[0] = (H / U) * j + (j < H % U ? j : H % U);
    q[1] = H / U + (j < H % U);
    kv[0] = q[0] / group;
    kv[1] = q[1] > 0 ? (q[0] + q[1] - 1) / group - kv[0] + 1 : 0;
}

usp_status ulysses_heads_check(int64_t H, int64_t Hkv, int U)
{
    if (H < 1 || Hkv < 1 || H % Hkv != 0)
        return usp_error(USP_ERR_CONFIG, "%lld heads and %lld KV heads: the KV heads must divide the heads",
                         (long long)H, (long long)Hkv);
    if (U > H)
        return usp_error(USP_ERR_CONFIG, "--ulysses %d is larger than the %lld heads: some ranks would have "
                         "no head; use --ulysses <= %lld or add --ring", U, (long long)H, (long long)H);
    const int64_t group = H / Hkv;
    for (int j = 0; j < U; j++) {
        int64_t q[2], kv[2];
        head_range(H, group, U, j, q, kv);
        /* the kernel maps local query head h to local KV head h / (nq / nkv): check it holds */
        int uniform = q[1] % kv[1] == 0;
        for (int64_t h = 0; uniform && h < q[1]; h++)
            uniform = (q[0] + h) / group - kv[0] == h / (q[1] / kv[1]);
        if (!uniform)
            return usp_error(USP_ERR_CONFIG,
                             "%lld heads with %lld KV heads do not split over --ulysses %d: a rank's query heads "
                             "must map evenly onto its KV heads; use an Ulysses degree that divides the heads, "
                             "or one that divides or is a multiple of the KV heads",
                             (long long)H, (long long)Hkv, U);
    }
    return USP_OK;
}

static usp_status split_heads(ulysses_attention *a)
{
    const int64_t H = a->c.n_heads, Hkv = a->c.n_kv_heads;
    USP_CHECK(ulysses_heads_check(H, Hkv, a->U));
    int64_t *mem;
    USP_CHECK(usp_calloc((void **)&mem, 8 * (size_t)a->U, sizeof *mem, "the head split"));
    a->q_heads = (head_split){mem, mem + a->U}, a->kv_heads = (head_split){mem + 2 * a->U, mem + 3 * a->U};
    a->grp_q = (head_split){mem + 4 * a->U, mem + 5 * a->U}, a->grp_kv = (head_split){mem + 6 * a->U, mem + 7 * a->U};
    for (int j = 0; j < a->U; j++) {
        int64_t q[2], kv[2];
        head_range(H, H / Hkv, a->U, j, q, kv);
        a->q_heads.first[j] = q[0], a->q_heads.count[j] = q[1];
        a->kv_heads.first[j] = kv[0], a->kv_heads.count[j] = kv[1];
        if (j > 0 && kv[0] < a->kv_heads.first[j - 1] + a->kv_heads.count[j - 1])
            a->kv_shared = 1;
    }
    return USP_OK;
}

/* A buffer of `elems` elements in the configured storage dtype (lse: always fp32). */
static usp_status alloc(ulysses_attention *a, float **p, int64_t elems, const char *category)
{
    return usp_buffer_alloc_as(a->c.backend, (size_t)elems, a->c.storage, category, (void **)p);
}

/* The hybrid's ring over one of `groups` head groups; with two, its sendrecvs on the comm stream. */
static usp_status ring_config(const ulysses_attention *a, int groups, ring_attention_config *rc)
{
    const ulysses_attention_config *c = &a->c;
    usp_seq_layout ring_layout;
    USP_CHECK(usp_seq_layout_make(a->layout.kind, c->seq_len, 1, usp_comm_size(c->ring), &ring_layout));
    *rc = (ring_attention_config){.backend = c->backend, .ring = c->ring, .stream = c->stream,
                                  .layout = ring_layout, .batch = c->batch,
                                  .n_heads = a->q_heads.count[a->me] / groups,
                                  .n_kv_heads = a->kv_heads.count[a->me] / groups, .head_dim = c->head_dim,
                                  .causal = c->causal, .scale = c->scale, .storage = c->storage,
                                  .eager_merge = c->eager_ring_merge, .backward_overlap = c->ring_backward_overlap,
                                  .share_comm_stream = groups > 1, .comm_stream = a->comm_stream,
                                  .mask = c->mask};
    return USP_OK;
}

usp_status ulysses_attention_create(const ulysses_attention_config *c, ulysses_attention **out)
{
    *out = NULL;
    ulysses_attention *a;
    USP_CHECK(usp_calloc((void **)&a, 1, sizeof *a, "ulysses attention"));
    a->c = *c;
    if (a->c.scale == 0.0f)
        a->c.scale = 1.0f / sqrtf((float)c->head_dim);
    a->U = usp_comm_size(c->ulysses);
    a->me = usp_comm_rank(c->ulysses);
    int R = c->ring ? usp_comm_size(c->ring) : 1;
    usp_status s;
    USP_CHECK_GOTO(usp_seq_layout_make(usp_layout_for(c->causal, R, c->layout_window, c->seq_len), c->seq_len, a->U, R, &a->layout), s, fail);
    USP_CHECK_GOTO(split_heads(a), s, fail);
    a->T = a->layout.per_rank;
    a->NU = a->T * a->U;
    USP_CHECK_GOTO(overlap_setup(a), s, fail);
    const int64_t B = c->batch, D = c->head_dim, nq = a->q_heads.count[a->me], nkv = a->kv_heads.count[a->me];
    if (a->U > 1) { /* U = 1: the caller's tensors are used as they are */
        USP_CHECK_GOTO(alloc(a, &a->q_all, B * a->NU * nq * D, "activations"), s, fail);
        USP_CHECK_GOTO(alloc(a, &a->o_all, B * a->NU * nq * D, "activations"), s, fail);
        USP_CHECK_GOTO(alloc(a, &a->k_all, B * a->NU * nkv * D, "activations"), s, fail);
        USP_CHECK_GOTO(alloc(a, &a->v_all, B * a->NU * nkv * D, "activations"), s, fail);
    }
    USP_CHECK_GOTO(usp_buffer_alloc(c->backend, (size_t)(B * nq * a->NU) * sizeof(float), "activations",
                                    (void **)&a->lse), s, fail);
    /* the largest exchange sends or receives T tokens of the most heads any rank has, U times */
    int64_t most = 0;
    for (int j = 0; j < a->U; j++) {
        most = a->q_heads.count[j] > most ? a->q_heads.count[j] : most;
        most = a->kv_heads.count[j] > most ? a->kv_heads.count[j] : most;
    }
    a->exchange_elems = B * a->T * D * most * a->U;
    USP_CHECK_GOTO(usp_calloc((void **)&a->counts, 4 * (size_t)a->U, sizeof *a->counts, "all-to-all counts"), s, fail);
    if (R > 1) {
        ring_attention_config rc;
        USP_CHECK_GOTO(ring_config(a, a->G, &rc), s, fail);
        USP_CHECK_GOTO(ring_attention_create(&rc, &a->ring), s, fail);
    }
    *out = a;
    return USP_OK;
fail:
    ulysses_attention_destroy(a);
    return s;
}

void ulysses_attention_destroy(ulysses_attention *a)
{
    if (!a)
        return;
    usp_backend_t *be = a->c.backend;
    float *buffers[] = {a->q_all, a->k_all, a->v_all, a->o_all, a->lse};
    for (size_t i = sizeof buffers / sizeof *buffers; i-- > 0;) /* last made, first freed */
        usp_buffer_free(be, buffers[i]);
    ring_attention_destroy(a->ring);
    usp_event_destroy(be, a->to_comm), usp_event_destroy(be, a->to_compute);
    (void)usp_stream_destroy(be, a->comm_stream);
    free(a->q_heads.first), free(a->counts);
    free(a);
}

/* The all-to-all of one tensor; equal counts go through all_to_all, uneven ones through all_to_all_v. */
static usp_status exchange(ulysses_attention *a)
{
    size_t *sc = a->counts, *so = sc + a->U, *rc = so + a->U, *ro = rc + a->U;
    int even = 1;
    for (int j = 0; j < a->U; j++)
        even &= sc[j] == sc[0] && rc[j] == sc[0];
    if (even)
        return usp_comm_all_to_all(a->c.ulysses, a->send, a->recv, sc[0], a->c.storage, a->xs);
    return usp_comm_all_to_all_v(a->c.ulysses, a->send, sc, so, a->recv, rc, ro, a->c.storage, a->xs);
}

/* Element `index` from p in the storage dtype: every tensor exchanged here is
 * stored in it, whatever the float * says (the copy wrappers and the
 * communicator check each range against the buffer it lies in). */
static void *at(const ulysses_attention *a, const void *p, size_t index)
{
    return usp_elem_at(p, a->c.storage, index);
}

/* Sequence -> heads: x [B, T, Htot, D] (this rank's tokens, all heads) becomes
 * x_all [B, U T, h_me, D] (all the group's tokens, this rank's heads). Peer j's
 * slice [B, T, h_j, D] is packed contiguously so that the all-to-all moves it whole.
 * Offsets and row sizes are in elements of the storage dtype (esz bytes each). */
static usp_status scatter_heads(ulysses_attention *a, const float *x, int64_t heads_total, const head_split *hs,
                                float *x_all)
{
    const size_t B = (size_t)a->c.batch, T = (size_t)a->T, D = (size_t)a->c.head_dim, U = (size_t)a->U;
    const size_t esz = usp_dtype_size(a->c.storage);
    size_t *sc = a->counts, *so = sc + U, *rc = so + U, *ro = rc + U, done = 0;
    size_t mine = (size_t)hs->count[a->me];
    for (size_t j = 0; j < U; j++) {
        size_t h = (size_t)hs->count[j], row = h * D * esz;
        USP_CHECK(usp_copy_2d(a->c.backend, at(a, a->send, done), row, at(a, x, (size_t)hs->first[j] * D),
                              (size_t)heads_total * D * esz, row, B * T, a->xs));
        sc[j] = B * T * h * D, so[j] = done, done += sc[j];
        rc[j] = B * T * mine * D, ro[j] = j * rc[j];
    }
    USP_CHECK(exchange(a));
    size_t block = T * mine * D; /* one batch row of one peer's tokens */
    for (size_t i = 0; i < U; i++)
        USP_CHECK(usp_copy_2d(a->c.backend, at(a, x_all, i * block), U * block * esz, at(a, a->recv, ro[i]),
                              block * esz, block * esz, B, a->xs));
    return USP_OK;
}

/* Heads -> sequence, the reverse of scatter_heads: x_all [B, U T, h_me, D] goes
 * back to x [B, T, Htot, D]. With shared KV heads several peers return
 * gradients for the same head: they are summed, in peer order. */
static usp_status gather_heads(ulysses_attention *a, const float *x_all, int64_t heads_total, const head_split *hs,
                               int sum_shared, float *x)
{
    const size_t B = (size_t)a->c.batch, T = (size_t)a->T, D = (size_t)a->c.head_dim, U = (size_t)a->U;
    const size_t esz = usp_dtype_size(a->c.storage);
    size_t *sc = a->counts, *so = sc + U, *rc = so + U, *ro = rc + U, done = 0;
    size_t mine = (size_t)hs->count[a->me], block = T * mine * D;
    for (size_t j = 0; j < U; j++) {
        USP_CHECK(usp_copy_2d(a->c.backend, at(a, a->send, j * B * block), block * esz, at(a, x_all, j * block),
                              U * block * esz, block * esz, B, a->xs));
        sc[j] = B * block, so[j] = j * B * block;
        rc[j] = B * T * (size_t)hs->count[j] * D, ro[j] = done, done += rc[j];
    }
    USP_CHECK(exchange(a));
    const size_t row = (size_t)heads_total * D;
    if (sum_shared)
        USP_CHECK(usp_buffer_zero(a->c.backend, x, B * T * row * esz, a->xs));
    for (size_t i = 0; i < U; i++) {
        size_t h = (size_t)hs->count[i];
        float *dst = at(a, x, (size_t)hs->first[i] * D);
        if (sum_shared)
            USP_CHECK(usp_accumulate_2d(a->c.backend, dst, row, at(a, a->recv, ro[i]), h * D, h * D, B * T,
                                        a->xs));
        else
            USP_CHECK(usp_copy_2d(a->c.backend, dst, row * esz, at(a, a->recv, ro[i]), h * D * esz, h * D * esz,
                                  B * T, a->xs));
    }
    return USP_OK;
}

/* Without a ring the group holds the whole sequence, in order (the contiguous layout): positions are
 * the local indices, and the table's rows are the batch's. */
static usp_attention_shape local_shape(const ulysses_attention *a)
{
    usp_attention_shape s = {.batch = a->c.batch, .n_q = a->NU, .n_kv = a->NU,
                             .n_heads = a->q_heads.count[a->me] / a->G,
                             .n_kv_heads = a->kv_heads.count[a->me] / a->G, .head_dim = a->c.head_dim,
                             .causal = a->c.causal, .scale = a->c.scale};
    usp_attention_shape_mask(&s, &a->c.mask, a->c.seq_len, 0);
    return s;
}

static usp_status hold_exchange_buffers(ulysses_attention *a)
{
    USP_CHECK(alloc(a, &a->send, a->exchange_elems, "comm"));
    usp_status s = alloc(a, &a->recv, a->exchange_elems, "comm");
    if (s != USP_OK) {
        usp_buffer_free(a->c.backend, a->send);
        a->send = NULL;
    }
    return s;
}

static void release_exchange_buffers(ulysses_attention *a)
{
    usp_buffer_free(a->c.backend, a->send);
    usp_buffer_free(a->c.backend, a->recv);
    a->send = a->recv = NULL;
}

static unsigned skipped_waits; /* ulysses_attention_skip_waits_for_tests: ULYSSES_WAIT_* left out */

void ulysses_attention_skip_waits_for_tests(unsigned mask) { skipped_waits = mask; }

int ulysses_attention_overlaps(const ulysses_attention *a) { return a && a->G > 1; }

/* Overlapping pays when a head group's attention outlasts the extra calls' latency and hides
 * transfers worth more than it. Without overlap a step's exchanges take 8 L + X / bw (L a call's
 * latency, X every byte of the forward's q, k, v, o and the backward's dO, dQ, dK, dV, bw the
 * link); with two groups they are 16 calls, and half of X (group 1's inputs, group 0's outputs)
 * goes beside an attention of half the heads: the step gains min(X / 2 bw, C / 2) - 8 L, C the
 * attention. Both terms are asked for on shapes alone, the same on every rank of the group (every
 * rank has the same tokens, batch and, where the KV heads split evenly, heads):
 *   - one group's forward attention, 4 B NU^2 h D FLOPs (halved under the causal mask), at least
 *     1e10 FLOPs, about 25 us on an H100 at 400 TFLOP/s: a few latencies;
 *   - one group's exchange of q sends at least 4 MiB a rank, so that what is hidden (tens of
 *     microseconds at 100 GB/s) is worth several times the latency of the calls it adds.
 * The overlap needs each rank's KV heads to split in two: GQA keeps a query head with its KV
 * head, and a KV head sent to several ranks (U a multiple of the KV heads) has its gradients
 * summed on the way back, one call for all of it. In the hybrid a group's attention is a ring
 * attention over R blocks (4 B NU^2 R h D FLOPs), and the ring's sendrecvs go on the comm stream
 * too (ring_attention_config.share_comm_stream): on two streams they would be in flight beside an
 * all-to-all of the other group, two NCCL calls of two groups unordered between the streams, which
 * may deadlock (docs/cluster_model.md, "Gradients"); on one stream every rank runs the two groups'
 * calls in the order its host issued them, the same on every rank. The ring's backward then sends
 * K/V ahead (on the shared stream), so --ring-overlap off leaves the hybrid without this overlap.
 * And each group runs a ring of its own: 3R - 2 more calls a layer (R - 1 forward, 2R - 1
 * backward), each with a latency to pay. Where that pays was found with the planner (128 hybrid
 * configurations of llama-1b/7b/13b from 32K to 1M tokens on 8 to 64 GPUs of dgx-h100 and
 * pcie-gen4; 13 of them were up to 1.7% slower with the overlap and no threshold): with it where
 * one ring step of a group (its backward) is at least R x 5e10 FLOPs, 80 are faster (by up to 13.6%),
 * 47 unchanged, and one is 1e-5 slower (7.2462 -> 7.2463 s, llama-7b U2 x R4 at 32K on pcie-gen4). */
#define OVERLAP_MIN_GROUP_FLOPS 1e10
#define OVERLAP_MIN_RING_STEP_FLOPS 5e10
#define OVERLAP_MIN_GROUP_BYTES (4.0 * 1024 * 1024)

static int overlap_pays(const ulysses_attention *a, int groups)
{
    const ulysses_attention_config *c = &a->c;
    if (a->U == 1 || a->kv_shared || c->overlap == USP_OVERLAP_OFF)
        return 0;
    for (int j = 0; j < a->U; j++)
        if (a->kv_heads.count[j] % groups != 0)
            return 0;
    const int R = c->ring ? usp_comm_size(c->ring) : 1;
    if (R > 1 && c->ring_backward_overlap == USP_OVERLAP_OFF) /* a shared stream overlaps the ring's backward */
        return 0;
    if (c->overlap == USP_OVERLAP_ON)
        return 1;
    const double h = (double)a->q_heads.count[0] / groups, D = (double)c->head_dim, B = (double)c->batch;
    double flops = 4.0 * B * (double)a->NU * (double)a->NU * R * h * D * (c->causal ? 0.5 : 1.0);
    double bytes = B * (double)a->T * h * D * (double)(a->U - 1) * (double)usp_dtype_size(c->storage);
    /* the hybrid: one ring step of a group, 10 B h D NU^2 FLOPs a backward (ring.c, overlap_pays) */
    double ring_step = 10.0 * B * h * D * (double)a->NU * (double)a->NU * (c->causal ? 0.5 : 1.0);
    return flops >= OVERLAP_MIN_GROUP_FLOPS && bytes >= OVERLAP_MIN_GROUP_BYTES &&
           (R == 1 || ring_step >= OVERLAP_MIN_RING_STEP_FLOPS * R);
}

/* Decides the groups (after split_heads) and, with two, makes the comm stream and its two events. */
static usp_status overlap_setup(ulysses_attention *a)
{
    if ((unsigned)a->c.overlap > USP_OVERLAP_OFF)
        return usp_error(USP_ERR_CONFIG, "ulysses attention: overlap %d is not auto (0), on (1) or off (2)",
                         (int)a->c.overlap);
    a->G = overlap_pays(a, 2) ? 2 : 1;
    a->xs = a->c.stream;
    if (a->G == 1)
        return USP_OK;
    USP_CHECK(usp_stream_create(a->c.backend, &a->comm_stream));
    USP_CHECK(usp_event_create(a->c.backend, &a->to_comm));
    return usp_event_create(a->c.backend, &a->to_compute);
}

/* stream waits for event (with the overlap only), unless a test asked to leave out wait `which`. */
static usp_status overlap_wait(const ulysses_attention *a, usp_stream_t *stream, usp_event_t *event, unsigned which)
{
    if (a->G == 1 || (skipped_waits & which))
        return USP_OK;
    return usp_stream_wait_event(a->c.backend, stream, event);
}

/* Records event on stream (with the overlap only). */
static usp_status overlap_record(const ulysses_attention *a, usp_event_t *event, usp_stream_t *stream)
{
    return a->G == 1 ? USP_OK : usp_event_record(a->c.backend, event, stream);
}

/* Group g of split hs: rank j's heads [first_j + g n_j / G, first_j + (g + 1) n_j / G), into out
 * (hs itself with one group). */
static const head_split *group_split(const ulysses_attention *a, const head_split *hs, head_split *out, int g)
{
    if (a->G == 1)
        return hs;
    for (int j = 0; j < a->U; j++) {
        out->count[j] = hs->count[j] / a->G;
        out->first[j] = hs->first[j] + g * out->count[j];
    }
    return out;
}

/* Group g's block of a tensor kept over the group's tokens: [G][B, NU, h / G, D] of this rank's h
 * heads (q: kv = 0; k, v: kv = 1), so that each group's attention reads and writes whole tensors. */
static float *group_at(const ulysses_attention *a, const float *all, int g, int kv)
{
    const head_split *hs = kv ? &a->kv_heads : &a->q_heads;
    size_t block = (size_t)a->c.batch * (size_t)a->NU * (size_t)(hs->count[a->me] / a->G) * (size_t)a->c.head_dim;
    return at(a, all, (size_t)g * block);
}

/* Group g's lse, [B, h / G, NU] (fp32). */
static float *group_lse(const ulysses_attention *a, int g)
{
    return a->lse + (size_t)g * (size_t)a->c.batch * (size_t)(a->q_heads.count[a->me] / a->G) * (size_t)a->NU;
}

/* The inner attention of group g of this rank's heads over the group's tokens: o_all, lse from q_all,
 * k_all, v_all (at U = 1 the caller's tensors, one group). */
static usp_status inner_forward(ulysses_attention *a, int g, const float *q_all, const float *k_all,
                                const float *v_all, float *o_all)
{
    a->q_in = q_all, a->k_in = k_all, a->v_in = v_all, a->o_in = o_all;
    const float *q = group_at(a, q_all, g, 0), *k = group_at(a, k_all, g, 1), *v = group_at(a, v_all, g, 1);
    float *o = group_at(a, o_all, g, 0);
    if (a->ring)
        return ring_attention_forward(a->ring, q, k, v, o, group_lse(a, g));
    usp_attention_shape s = local_shape(a);
    return usp_flash_attention_forward(a->c.backend, &s, q, k, v, o, group_lse(a, g), a->c.stream);
}

/* The inner attention's backward of group g: dq_all, dk_all, dv_all from do_all and what the forward kept. */
static usp_status inner_backward(ulysses_attention *a, int g, const float *do_all, float *dq_all, float *dk_all,
                                 float *dv_all)
{
    if (!a->q_in)
        return usp_error(USP_ERR_CONFIG, "ulysses attention backward before any forward: nothing to differentiate");
    const float *q = group_at(a, a->q_in, g, 0), *k = group_at(a, a->k_in, g, 1), *v = group_at(a, a->v_in, g, 1);
    const float *o = group_at(a, a->o_in, g, 0), *d_o = group_at(a, do_all, g, 0), *lse = group_lse(a, g);
    float *dq = group_at(a, dq_all, g, 0), *dk = group_at(a, dk_all, g, 1), *dv = group_at(a, dv_all, g, 1);
    if (a->ring)
        return ring_attention_backward(a->ring, q, k, v, o, lse, d_o, dq, dk, dv);
    usp_attention_shape sh = local_shape(a);
    return usp_flash_attention_backward(a->c.backend, &sh, q, k, v, o, lse, d_o, dq, dk, dv, 0, a->c.stream);
}

/* The tensors of one call: the forward's (in q, k, v; out o) or the backward's (in d_o; out dq, dk, dv). */
typedef struct call_tensors {
    int backward;
    const float *q, *k, *v, *d_o;      /* the caller's inputs */
    float *o, *dq, *dk, *dv;           /* the caller's outputs */
    float *do_all, *dq_all, *dk_all, *dv_all; /* backward: this rank's heads over the group's tokens */
} call_tensors;

/* Sequence -> heads of group g's inputs, on a->xs. */
static usp_status scatter_group(ulysses_attention *a, const call_tensors *t, int g)
{
    const head_split *q = group_split(a, &a->q_heads, &a->grp_q, g);
    if (t->backward)
        return scatter_heads(a, t->d_o, a->c.n_heads, q, group_at(a, t->do_all, g, 0));
    const head_split *kv = group_split(a, &a->kv_heads, &a->grp_kv, g);
    USP_CHECK(scatter_heads(a, t->q, a->c.n_heads, q, group_at(a, a->q_all, g, 0)));
    USP_CHECK(scatter_heads(a, t->k, a->c.n_kv_heads, kv, group_at(a, a->k_all, g, 1)));
    return scatter_heads(a, t->v, a->c.n_kv_heads, kv, group_at(a, a->v_all, g, 1));
}

/* Heads -> sequence of group g's outputs, on a->xs. */
static usp_status gather_group(ulysses_attention *a, const call_tensors *t, int g)
{
    const head_split *q = group_split(a, &a->q_heads, &a->grp_q, g);
    if (!t->backward)
        return gather_heads(a, group_at(a, a->o_all, g, 0), a->c.n_heads, q, 0, t->o);
    USP_CHECK(gather_heads(a, group_at(a, t->dq_all, g, 0), a->c.n_heads, q, 0, t->dq));
    const head_split *kv = group_split(a, &a->kv_heads, &a->grp_kv, g);
    const int64_t Hkv = a->c.n_kv_heads;
    USP_CHECK(gather_heads(a, group_at(a, t->dk_all, g, 1), Hkv, kv, a->kv_shared, t->dk));
    return gather_heads(a, group_at(a, t->dv_all, g, 1), Hkv, kv, a->kv_shared, t->dv);
}

/* One call's schedule. Without overlap (G = 1) everything runs on c.stream in order: exchange in,
 * attention, exchange out. With two head groups the exchanges (layout copies and all-to-alls) run
 * on comm_stream and the attention on c.stream:
 *   comm:    wait inputs | in(0) | in(1) | wait computed(0), out(0) | wait computed(1), out(1)
 *   compute:             wait arrived(0), attn(0) | wait arrived(1), attn(1) | ... wait done
 * so in(1) runs beside attn(0) and out(0) beside attn(1). Two events, each recorded again only
 * after the host has queued the wait for its last record. The groups' heads are disjoint and each
 * head's attention is independent of the others', so the bits are those without overlap. */
static usp_status run_groups(ulysses_attention *a, const call_tensors *t)
{
    usp_stream_t *compute = a->c.stream, *comm = a->G > 1 ? a->comm_stream : compute;
    a->xs = comm;
    USP_CHECK(overlap_record(a, a->to_comm, compute));
    USP_CHECK(overlap_wait(a, comm, a->to_comm, ULYSSES_WAIT_INPUTS));
    USP_CHECK(scatter_group(a, t, 0));
    USP_CHECK(overlap_record(a, a->to_compute, comm));
    for (int g = 0; g < a->G; g++) {
        USP_CHECK(overlap_wait(a, compute, a->to_compute, ULYSSES_WAIT_ARRIVED));
        if (g + 1 < a->G) {
            USP_CHECK(scatter_group(a, t, g + 1));
            USP_CHECK(overlap_record(a, a->to_compute, comm));
        }
        if (t->backward)
            USP_CHECK(inner_backward(a, g, t->do_all, t->dq_all, t->dk_all, t->dv_all));
        else
            USP_CHECK(inner_forward(a, g, a->q_all, a->k_all, a->v_all, a->o_all));
        USP_CHECK(overlap_record(a, a->to_comm, compute));
        USP_CHECK(overlap_wait(a, comm, a->to_comm, ULYSSES_WAIT_COMPUTED));
        USP_CHECK(gather_group(a, t, g));
    }
    USP_CHECK(overlap_record(a, a->to_compute, comm));
    return overlap_wait(a, compute, a->to_compute, ULYSSES_WAIT_DONE);
}

usp_status ulysses_attention_forward(ulysses_attention *a, const float *q, const float *k, const float *v,
                                     float *o)
{
    if (a->U == 1)
        return inner_forward(a, 0, q, k, v, o);
    USP_CHECK(hold_exchange_buffers(a));
    call_tensors t = {.q = q, .k = k, .v = v, .o = o};
    usp_status s = run_groups(a, &t);
    a->xs = a->c.stream;
    release_exchange_buffers(a);
    return s;
}

static usp_status backward(ulysses_attention *a, const float *d_o, float *dq, float *dk, float *dv)
{
    const size_t B = (size_t)a->c.batch, D = (size_t)a->c.head_dim, NU = (size_t)a->NU;
    size_t nq = (size_t)a->q_heads.count[a->me], nkv = (size_t)a->kv_heads.count[a->me];
    call_tensors t = {.backward = 1, .d_o = d_o, .dq = dq, .dk = dk, .dv = dv};
    usp_status s;
    USP_CHECK_GOTO(alloc(a, &t.do_all, (int64_t)(B * NU * nq * D), "gradients"), s, done);
    USP_CHECK_GOTO(alloc(a, &t.dq_all, (int64_t)(B * NU * nq * D), "gradients"), s, done);
    USP_CHECK_GOTO(alloc(a, &t.dk_all, (int64_t)(B * NU * nkv * D), "gradients"), s, done);
    USP_CHECK_GOTO(alloc(a, &t.dv_all, (int64_t)(B * NU * nkv * D), "gradients"), s, done);
    s = run_groups(a, &t);
    a->xs = a->c.stream;
done:
    usp_buffer_free(a->c.backend, t.do_all);
    usp_buffer_free(a->c.backend, t.dq_all);
    usp_buffer_free(a->c.backend, t.dk_all);
    usp_buffer_free(a->c.backend, t.dv_all);
    return s;
}

usp_status ulysses_attention_backward(ulysses_attention *a, const float *d_o, float *dq, float *dk, float *dv)
{
    if (a->U == 1)
        return inner_backward(a, 0, d_o, dq, dk, dv);
    USP_CHECK(hold_exchange_buffers(a));
    usp_status s = backward(a, d_o, dq, dk, dv);
    release_exchange_buffers(a);
    return s;
}

void ulysses_head_counts(int64_t H, int64_t Hkv, int U, int j, int64_t *q_heads, int64_t *kv_heads)
{
    int64_t q[2], kv[2];
    head_range(H, H / Hkv, U, j, q, kv);
    *q_heads = q[1], *kv_heads = kv[1];
}

/* What rank j exchanges of one tensor with `heads` of its own among `total`: the scatter sends every peer
 * its heads of this rank's T tokens, sum_{j' != j} heads(j') = total - heads(j) of them; the gather sends
 * this rank's heads of the group's other U - 1 shards. */
double ulysses_sent(int64_t H, int64_t Hkv, int U, int j, int64_t batch, int64_t T, int64_t head_dim)
{
    int64_t q[2], kv[2], kv_total = 0;
    for (int i = 0; i < U; i++) {
        int64_t qi[2], kvi[2];
        head_range(H, H / Hkv, U, i, qi, kvi);
        kv_total += kvi[1];
    }
    head_range(H, H / Hkv, U, j, q, kv);
    const double btd = (double)batch * (double)T * (double)head_dim;
    /* forward: q, k, v scattered, o gathered; backward: d_o scattered, dq, dk, dv gathered */
    const double scattered = 2.0 * (double)(H - q[1]) + 2.0 * (double)(kv_total - kv[1]);
    const double gathered = (double)(U - 1) * (2.0 * (double)q[1] + 2.0 * (double)kv[1]);
    return btd * (scattered + gathered);
}

usp_status ulysses_schedule_forward(void *a, const float *q, const float *k, const float *v, float *o)
{
    return ulysses_attention_forward(a, q, k, v, o);
}

usp_status ulysses_schedule_backward(void *a, const float *d_o, float *dq, float *dk, float *dv)
{
    return ulysses_attention_backward(a, d_o, dq, dk, dv);
}

int ulysses_schedule_keeps_inputs(const void *a) { return ulysses_attention_keeps_inputs(a); }
void ulysses_schedule_destroy(void *a) { ulysses_attention_destroy(a); }
