/* Ulysses attention (see ulysses.h): head partition, the two layout
 * transforms around the all-to-all, and the inner attention (local flash
 * attention, or ring attention in the hybrid).
 *
 * At U = 1 (pure Ring, or one rank) sequence -> heads is the identity: the
 * [B, T, H, D] tensors already are [B, U T, h_me, D]. The caller's q, k, v, o
 * and gradients then go straight to the inner attention: no copy, no
 * one-rank all-to-all, no gathered copies kept (the caller keeps q, k, v, o
 * for backward: ulysses_attention_keeps_inputs). */
#include "core/parallel/ulysses.h"

#include <math.h>
#include <stdlib.h>

#include "core/parallel/ring.h"

/* Which heads each Ulysses rank attends for: [first, first + count). */
typedef struct head_split {
    int64_t *first, *count; /* [U] */
} head_split;

struct ulysses_attention {
    ulysses_attention_config c;
    usp_seq_layout layout;     /* the SP layout over U x R */
    int U, me;
    int64_t T, NU;             /* tokens per rank; tokens per Ulysses group (U T) */
    head_split q_heads, kv_heads;
    int kv_shared;             /* 1 when a KV head goes to several ranks */
    ring_attention *ring;      /* hybrid only */
    /* kept from forward for backward: this rank's heads over the group's tokens */
    float *q_all, *k_all, *v_all, *o_all, *lse; /* [B, NU, h, D] ([B, h, NU] for lse); U = 1: lse only */
    const float *q_in, *k_in, *v_in, *o_in; /* what backward reads: the above, or at U = 1 the forward's own */
    float *send, *recv;        /* all-to-all buffers, held during one forward or backward call only,
                                  so that one pair, not one per layer, is live at a time */
    int64_t exchange_elems;    /* their size */
    size_t *counts;            /* [4][U]: send counts, send offsets, recv counts, recv offsets */
};

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
    USP_CHECK(usp_calloc((void **)&mem, 4 * (size_t)a->U, sizeof *mem, "the head split"));
    a->q_heads = (head_split){mem, mem + a->U};
    a->kv_heads = (head_split){mem + 2 * a->U, mem + 3 * a->U};
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
    USP_CHECK_GOTO(usp_seq_layout_make(usp_layout_for(c->causal, R), c->seq_len, a->U, R, &a->layout), s, fail);
    USP_CHECK_GOTO(split_heads(a), s, fail);
    a->T = a->layout.per_rank;
    a->NU = a->T * a->U;
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
        usp_seq_layout ring_layout;
        USP_CHECK_GOTO(usp_seq_layout_make(a->layout.kind, c->seq_len, 1, R, &ring_layout), s, fail);
        ring_attention_config rc = {.backend = c->backend, .ring = c->ring, .stream = c->stream,
                                    .layout = ring_layout, .batch = B, .n_heads = nq, .n_kv_heads = nkv,
                                    .head_dim = D, .causal = c->causal, .scale = a->c.scale, .storage = c->storage,
                                    .eager_merge = c->eager_ring_merge, .backward_overlap = c->ring_backward_overlap};
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
    for (size_t i = 0; i < sizeof buffers / sizeof *buffers; i++)
        usp_buffer_free(be, buffers[i]);
    ring_attention_destroy(a->ring);
    free(a->q_heads.first);
    free(a->counts);
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
        return usp_comm_all_to_all(a->c.ulysses, a->send, a->recv, sc[0], a->c.storage, a->c.stream);
    return usp_comm_all_to_all_v(a->c.ulysses, a->send, sc, so, a->recv, rc, ro, a->c.storage, a->c.stream);
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
                              (size_t)heads_total * D * esz, row, B * T, a->c.stream));
        sc[j] = B * T * h * D, so[j] = done, done += sc[j];
        rc[j] = B * T * mine * D, ro[j] = j * rc[j];
    }
    USP_CHECK(exchange(a));
    size_t block = T * mine * D; /* one batch row of one peer's tokens */
    for (size_t i = 0; i < U; i++)
        USP_CHECK(usp_copy_2d(a->c.backend, at(a, x_all, i * block), U * block * esz, at(a, a->recv, ro[i]),
                              block * esz, block * esz, B, a->c.stream));
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
                              U * block * esz, block * esz, B, a->c.stream));
        sc[j] = B * block, so[j] = j * B * block;
        rc[j] = B * T * (size_t)hs->count[j] * D, ro[j] = done, done += rc[j];
    }
    USP_CHECK(exchange(a));
    const size_t row = (size_t)heads_total * D;
    if (sum_shared)
        USP_CHECK(usp_buffer_zero(a->c.backend, x, B * T * row * esz, a->c.stream));
    for (size_t i = 0; i < U; i++) {
        size_t h = (size_t)hs->count[i];
        float *dst = at(a, x, (size_t)hs->first[i] * D);
        if (sum_shared)
            USP_CHECK(usp_accumulate_2d(a->c.backend, dst, row, at(a, a->recv, ro[i]), h * D, h * D, B * T,
                                        a->c.stream));
        else
            USP_CHECK(usp_copy_2d(a->c.backend, dst, row * esz, at(a, a->recv, ro[i]), h * D * esz, h * D * esz,
                                  B * T, a->c.stream));
    }
    return USP_OK;
}

static usp_attention_shape local_shape(const ulysses_attention *a)
{
    return (usp_attention_shape){.batch = a->c.batch, .n_q = a->NU, .n_kv = a->NU,
                                 .n_heads = a->q_heads.count[a->me], .n_kv_heads = a->kv_heads.count[a->me],
                                 .head_dim = a->c.head_dim, .causal = a->c.causal, .scale = a->c.scale};
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

/* The inner attention of this rank's heads over the group's tokens: o_all, lse from q_all, k_all, v_all. */
static usp_status inner_forward(ulysses_attention *a, const float *q_all, const float *k_all, const float *v_all,
                                float *o_all)
{
    a->q_in = q_all, a->k_in = k_all, a->v_in = v_all, a->o_in = o_all;
    if (a->ring)
        return ring_attention_forward(a->ring, q_all, k_all, v_all, o_all, a->lse);
    usp_attention_shape s = local_shape(a);
    return usp_flash_attention_forward(a->c.backend, &s, q_all, k_all, v_all, o_all, a->lse, a->c.stream);
}

static usp_status forward(ulysses_attention *a, const float *q, const float *k, const float *v, float *o)
{
    const int64_t H = a->c.n_heads, Hkv = a->c.n_kv_heads;
    USP_CHECK(scatter_heads(a, q, H, &a->q_heads, a->q_all));
    USP_CHECK(scatter_heads(a, k, Hkv, &a->kv_heads, a->k_all));
    USP_CHECK(scatter_heads(a, v, Hkv, &a->kv_heads, a->v_all));
    USP_CHECK(inner_forward(a, a->q_all, a->k_all, a->v_all, a->o_all));
    return gather_heads(a, a->o_all, H, &a->q_heads, 0, o);
}

usp_status ulysses_attention_forward(ulysses_attention *a, const float *q, const float *k, const float *v,
                                     float *o)
{
    if (a->U == 1)
        return inner_forward(a, q, k, v, o);
    USP_CHECK(hold_exchange_buffers(a));
    usp_status s = forward(a, q, k, v, o);
    release_exchange_buffers(a);
    return s;
}

/* The inner attention's backward: dq_all, dk_all, dv_all from do_all and what the forward kept. */
static usp_status inner_backward(ulysses_attention *a, const float *do_all, float *dq_all, float *dk_all,
                                 float *dv_all)
{
    if (!a->q_in)
        return usp_error(USP_ERR_CONFIG, "ulysses attention backward before any forward: nothing to differentiate");
    if (a->ring)
        return ring_attention_backward(a->ring, a->q_in, a->k_in, a->v_in, a->o_in, a->lse, do_all, dq_all, dk_all,
                                       dv_all);
    usp_attention_shape sh = local_shape(a);
    return usp_flash_attention_backward(a->c.backend, &sh, a->q_in, a->k_in, a->v_in, a->o_in, a->lse, do_all,
                                        dq_all, dk_all, dv_all, 0, a->c.stream);
}

static usp_status backward(ulysses_attention *a, const float *d_o, float *dq, float *dk, float *dv)
{
    const int64_t H = a->c.n_heads, Hkv = a->c.n_kv_heads;
    const size_t B = (size_t)a->c.batch, D = (size_t)a->c.head_dim, NU = (size_t)a->NU;
    size_t nq = (size_t)a->q_heads.count[a->me], nkv = (size_t)a->kv_heads.count[a->me];
    float *do_all = NULL, *dq_all = NULL, *dk_all = NULL, *dv_all = NULL;
    usp_status s;
    USP_CHECK_GOTO(alloc(a, &do_all, (int64_t)(B * NU * nq * D), "gradients"), s, done);
    USP_CHECK_GOTO(alloc(a, &dq_all, (int64_t)(B * NU * nq * D), "gradients"), s, done);
    USP_CHECK_GOTO(alloc(a, &dk_all, (int64_t)(B * NU * nkv * D), "gradients"), s, done);
    USP_CHECK_GOTO(alloc(a, &dv_all, (int64_t)(B * NU * nkv * D), "gradients"), s, done);
    USP_CHECK_GOTO(scatter_heads(a, d_o, H, &a->q_heads, do_all), s, done);
    USP_CHECK_GOTO(inner_backward(a, do_all, dq_all, dk_all, dv_all), s, done);
    USP_CHECK_GOTO(gather_heads(a, dq_all, H, &a->q_heads, 0, dq), s, done);
    USP_CHECK_GOTO(gather_heads(a, dk_all, Hkv, &a->kv_heads, a->kv_shared, dk), s, done);
    s = gather_heads(a, dv_all, Hkv, &a->kv_heads, a->kv_shared, dv);
done:
    usp_buffer_free(a->c.backend, do_all);
    usp_buffer_free(a->c.backend, dq_all);
    usp_buffer_free(a->c.backend, dk_all);
    usp_buffer_free(a->c.backend, dv_all);
    return s;
}

usp_status ulysses_attention_backward(ulysses_attention *a, const float *d_o, float *dq, float *dk, float *dv)
{
    if (a->U == 1)
        return inner_backward(a, d_o, dq, dk, dv);
    USP_CHECK(hold_exchange_buffers(a));
    usp_status s = backward(a, d_o, dq, dk, dv);
    release_exchange_buffers(a);
    return s;
}
