/* The all-gather schedule on a 1 x R mesh: each rank all-gathers every rank's K and V, puts them in
 * sequence order and attends its own queries over the whole sequence; the backward gathers K and V
 * again, and the K/V gradients each rank made for the whole sequence are reduce-scattered home
 * (summed over the ranks in rank order). It is the context parallelism Llama 3 trained with (Llama 3
 * paper, section 3.3.2): with grouped-query attention K and V are small beside Q, and every rank holds
 * the whole sequence's K/V during its layer, so any mask is a mask of one call. Named only
 * (--attention gather --ulysses 1 --ring R).
 *
 * Causal: the zigzag layout gives ring rank r chunks r and 2R-1-r, so every rank attends the same
 * number of visible pairs. A query run is one attention call per batch row (its rows contiguous
 * there), against the row's N keys from position 0: the kernel masks the keys past each query.
 *
 * Traffic per rank, X = B T Hkv D elements of the storage dtype (T = N / R tokens a rank):
 *   forward:  one all-gather of K and V packed                 = (R - 1) 2X
 *   backward: the all-gather again, a reduce-scatter of dK, dV = (R - 1) 2X + (R - 1) 2X
 * Buffers held during one call only: the packed send (2X), the gathered blocks (2RX, "comm"), K and V in
 * sequence order (2RX, "activations"); the backward's dK and dV over the sequence (2RX, "gradients"). */
#include <math.h>
#include <stdlib.h>

#include "core/parallel/schedule.h"

typedef struct gather_layer {
    usp_schedule_config c;
    int R;
    usp_seq_layout layout;      /* the ring group's layout over N (1 x R) */
    size_t X;                   /* elements of one rank's K (or V): B T Hkv D */
    float *lse;                 /* [B][H, T] as one [H, count] slab per query run, at b H T + H local_first */
    const float *q, *k, *v, *o; /* the forward's, which the backward reads */
} gather_layer;

static usp_status check(const usp_schedule_shape *s)
{
    if (s->ulysses != 1)
        return usp_error(USP_ERR_CONFIG, "--attention gather with --ulysses %d: the all-gather runs over the ring "
                         "group, on --ulysses 1 --ring R (e.g. --ulysses 1 --ring %d)", s->ulysses,
                         s->ulysses * s->ring);
    USP_CHECK(usp_schedule_heads_check(s));
    usp_seq_layout l;
    return s->seq_len > 0 ? usp_seq_layout_make(usp_layout_for(s->causal, s->ring, s->window, s->seq_len), s->seq_len, 1, s->ring, &l)
                          : USP_OK;
}

static usp_layout_kind layout(const usp_schedule_shape *s) { return usp_layout_for(s->causal, s->ring, s->window, s->seq_len); }

static double sent(const usp_schedule_shape *s, int rank, int64_t batch, int64_t head_dim)
{
    (void)rank; /* every rank sends as much */
    const double X = (double)batch * (double)(s->seq_len / s->ring) * (double)s->n_kv_heads * (double)head_dim;
    return 6.0 * (double)(s->ring - 1) * X;
}

static void destroy(void *p)
{
    gather_layer *a = p;
    if (!a)
        return;
    usp_buffer_free(a->c.backend, a->lse);
    free(a);
}

static usp_status create(const usp_schedule_config *c, void **out)
{
    *out = NULL;
    gather_layer *a;
    USP_CHECK(usp_calloc((void **)&a, 1, sizeof *a, "all-gather attention"));
    a->c = *c;
    if (a->c.scale == 0.0f)
        a->c.scale = 1.0f / sqrtf((float)c->head_dim);
    a->R = c->ring ? usp_comm_size(c->ring) : 1;
    usp_status s = usp_seq_layout_make(usp_layout_for(c->causal, a->R, c->layout_window, c->seq_len), c->seq_len, 1, a->R, &a->layout);
    a->X = (size_t)(c->batch * a->layout.per_rank * c->n_kv_heads * c->head_dim);
    if (s == USP_OK)
        s = usp_buffer_alloc(c->backend, (size_t)(c->batch * c->n_heads * a->layout.per_rank) * sizeof(float),
                             "activations", (void **)&a->lse);
    if (s != USP_OK) {
        destroy(a);
        return s;
    }
    *out = a;
    return USP_OK;
}

/* Element `i` of a tensor stored in the schedule's storage dtype. */
static void *at(const gather_layer *a, const void *p, size_t i) { return usp_elem_at(p, a->c.storage, i); }

/* Between the gathered blocks (rank order: [R][2][B, T, Hkv, D]) and K and V in sequence order
 * ([B, N, Hkv, D] each): each rank's runs, both tensors, every batch row in one 2-D copy. */
static usp_status reorder(const gather_layer *a, float *blocks, float *k_seq, float *v_seq, int to_sequence)
{
    const size_t row = (size_t)(a->c.n_kv_heads * a->c.head_dim), T = (size_t)a->layout.per_rank;
    const size_t N = (size_t)a->layout.n, esz = usp_dtype_size(a->c.storage);
    for (int p = 0; p < a->R; p++) {
        usp_token_run runs[2];
        const int n = usp_seq_layout_runs(&a->layout, p, runs);
        for (int i = 0; i < n; i++)
            for (int t = 0; t < 2; t++) {
                void *block = at(a, blocks, ((size_t)p * 2 + (size_t)t) * a->X + (size_t)runs[i].local_first * row);
                void *seq = at(a, t ? v_seq : k_seq, (size_t)runs[i].global_first * row);
                const size_t bytes = (size_t)runs[i].count * row * esz;
                USP_CHECK(to_sequence ? usp_copy_2d(a->c.backend, seq, N * row * esz, block, T * row * esz, bytes,
                                                    (size_t)a->c.batch, a->c.stream)
                                      : usp_copy_2d(a->c.backend, block, T * row * esz, seq, N * row * esz, bytes,
                                                    (size_t)a->c.batch, a->c.stream));
            }
    }
    return USP_OK;
}

/* Buffers of one call: the packed send, the gathered blocks, K and V in sequence order (and, for the
 * backward, their gradients). */
typedef struct call_buffers {
    float *send, *blocks, *k_seq, *v_seq, *dk_seq, *dv_seq;
} call_buffers;

static usp_status hold(const gather_layer *a, call_buffers *b, int backward)
{
    usp_backend_t *be = a->c.backend;
    const usp_dtype st = a->c.storage;
    const size_t seq = a->X * (size_t)a->R;
    *b = (call_buffers){0};
    USP_CHECK(usp_buffer_alloc_as(be, 2 * a->X, st, "comm", (void **)&b->send));
    USP_CHECK(usp_buffer_alloc_as(be, 2 * seq, st, "comm", (void **)&b->blocks));
    USP_CHECK(usp_buffer_alloc_as(be, seq, st, "activations", (void **)&b->k_seq));
    USP_CHECK(usp_buffer_alloc_as(be, seq, st, "activations", (void **)&b->v_seq));
    if (!backward)
        return USP_OK;
    USP_CHECK(usp_buffer_alloc_as(be, seq, st, "gradients", (void **)&b->dk_seq));
    return usp_buffer_alloc_as(be, seq, st, "gradients", (void **)&b->dv_seq);
}

static void release(const gather_layer *a, call_buffers *b)
{
    float *all[] = {b->send, b->blocks, b->k_seq, b->v_seq, b->dk_seq, b->dv_seq};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        usp_buffer_free(a->c.backend, all[i]);
}

/* Every rank's K and V, in sequence order, into b->k_seq and b->v_seq. */
static usp_status gather_kv(const gather_layer *a, const float *k, const float *v, call_buffers *b)
{
    const size_t bytes = a->X * usp_dtype_size(a->c.storage);
    USP_CHECK(usp_buffer_copy(a->c.backend, b->send, k, bytes, USP_COPY_DEVICE_TO_DEVICE, a->c.stream));
    USP_CHECK(usp_buffer_copy(a->c.backend, at(a, b->send, a->X), v, bytes, USP_COPY_DEVICE_TO_DEVICE, a->c.stream));
    if (a->R > 1)
        USP_CHECK(usp_comm_all_gather(a->c.ring, b->send, b->blocks, 2 * a->X, a->c.storage, a->c.stream));
    else
        USP_CHECK(usp_buffer_copy(a->c.backend, b->blocks, b->send, 2 * bytes, USP_COPY_DEVICE_TO_DEVICE,
                                  a->c.stream));
    return reorder(a, b->blocks, b->k_seq, b->v_seq, 1);
}

/* One query run of batch row `row` against the row's whole sequence of keys. */
static usp_attention_shape run_shape(const gather_layer *a, size_t row, const usp_token_run *x)
{
    usp_attention_shape s = {.batch = 1, .n_q = x->count, .n_kv = a->layout.n, .n_heads = a->c.n_heads,
                             .n_kv_heads = a->c.n_kv_heads, .head_dim = a->c.head_dim,
                             .q_offset = x->global_first, .kv_offset = 0, .causal = a->c.causal,
                             .scale = a->c.scale};
    usp_attention_shape_mask(&s, &a->c.mask, a->layout.n, (int64_t)row);
    return s;
}

/* The attention calls of this rank's query runs; backward: from d_o into dq, dk_seq, dv_seq (added). */
static usp_status attend(gather_layer *a, const call_buffers *b, const float *d_o, float *dq)
{
    usp_token_run runs[2];
    const int n = usp_seq_layout_runs(&a->layout, a->c.ring ? usp_comm_rank(a->c.ring) : 0, runs);
    const size_t T = (size_t)a->layout.per_rank, qrow = (size_t)(a->c.n_heads * a->c.head_dim);
    const size_t krow = (size_t)(a->c.n_kv_heads * a->c.head_dim), N = (size_t)a->layout.n, H = (size_t)a->c.n_heads;
    for (size_t r = 0; r < (size_t)a->c.batch; r++)
        for (int i = 0; i < n; i++) {
            const usp_attention_shape s = run_shape(a, r, &runs[i]);
            const size_t q0 = (r * T + (size_t)runs[i].local_first) * qrow, k0 = r * N * krow;
            float *lse = a->lse + r * H * T + H * (size_t)runs[i].local_first;
            const float *q = at(a, a->q, q0), *k = at(a, b->k_seq, k0), *v = at(a, b->v_seq, k0);
            if (!d_o) {
                USP_CHECK(usp_flash_attention_forward(a->c.backend, &s, q, k, v, at(a, a->o, q0), lse, a->c.stream));
                continue;
            }
            USP_CHECK(usp_flash_attention_backward(a->c.backend, &s, q, k, v, at(a, a->o, q0), lse, at(a, d_o, q0),
                                                   at(a, dq, q0), at(a, b->dk_seq, k0), at(a, b->dv_seq, k0), 1,
                                                   a->c.stream));
        }
    return USP_OK;
}

static usp_status forward(void *p, const float *q, const float *k, const float *v, float *o)
{
    gather_layer *a = p;
    a->q = q, a->k = k, a->v = v, a->o = o;
    call_buffers b;
    usp_status s = hold(a, &b, 0);
    if (s == USP_OK)
        s = gather_kv(a, k, v, &b);
    if (s == USP_OK)
        s = attend(a, &b, NULL, NULL);
    release(a, &b);
    return s;
}

/* The gradients every rank made for the whole sequence's K and V, summed home: rank order, then the
 * reduce-scatter leaves this rank's dK and dV packed in b->send. */
static usp_status scatter_dkv(const gather_layer *a, call_buffers *b, float *dk, float *dv)
{
    const size_t bytes = a->X * usp_dtype_size(a->c.storage);
    USP_CHECK(reorder(a, b->blocks, b->dk_seq, b->dv_seq, 0));
    if (a->R > 1)
        USP_CHECK(usp_comm_reduce_scatter(a->c.ring, b->blocks, b->send, 2 * a->X, a->c.storage, USP_REDUCE_SUM,
                                          a->c.stream));
    else
        USP_CHECK(usp_buffer_copy(a->c.backend, b->send, b->blocks, 2 * bytes, USP_COPY_DEVICE_TO_DEVICE,
                                  a->c.stream));
    USP_CHECK(usp_buffer_copy(a->c.backend, dk, b->send, bytes, USP_COPY_DEVICE_TO_DEVICE, a->c.stream));
    return usp_buffer_copy(a->c.backend, dv, at(a, b->send, a->X), bytes, USP_COPY_DEVICE_TO_DEVICE, a->c.stream);
}

static usp_status backward(void *p, const float *d_o, float *dq, float *dk, float *dv)
{
    gather_layer *a = p;
    if (!a->q)
        return usp_error(USP_ERR_CONFIG, "all-gather attention backward before any forward: nothing to differentiate");
    const size_t esz = usp_dtype_size(a->c.storage), seq_bytes = a->X * (size_t)a->R * esz;
    const size_t dq_bytes = (size_t)(a->c.batch * a->layout.per_rank * a->c.n_heads * a->c.head_dim) * esz;
    call_buffers b;
    usp_status s = hold(a, &b, 1);
    if (s == USP_OK)
        s = gather_kv(a, a->k, a->v, &b);
    if (s == USP_OK) /* the attention calls add into these */
        s = usp_buffer_zero(a->c.backend, dq, dq_bytes, a->c.stream);
    if (s == USP_OK)
        s = usp_buffer_zero(a->c.backend, b.dk_seq, seq_bytes, a->c.stream);
    if (s == USP_OK)
        s = usp_buffer_zero(a->c.backend, b.dv_seq, seq_bytes, a->c.stream);
    if (s == USP_OK)
        s = attend(a, &b, d_o, dq);
    if (s == USP_OK)
        s = scatter_dkv(a, &b, dk, dv);
    release(a, &b);
    return s;
}

static int keeps_inputs(const void *a)
{
    (void)a;
    return 0;
}

const usp_schedule_i usp_schedule_gather = {
    .name = "gather",
    .about = "all-gather K and V, each rank attends its queries over the whole sequence, dK/dV reduce-scattered "
             "home (Llama 3's context parallelism; --ulysses 1)",
    .exact = 1,
    .picks = NULL, .check = check, .layout = layout, .sent = sent, .diagram = NULL,
    .create = create, .forward = forward, .backward = backward, .keeps_inputs = keeps_inputs, .destroy = destroy,
};
