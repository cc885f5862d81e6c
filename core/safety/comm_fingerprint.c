/* Fingerprints of communication calls (core/safety/comm_fingerprint.h). */
#include "core/safety/comm_fingerprint.h"

#include <string.h>

usp_comm_fingerprint usp_comm_fingerprint_of(const usp_comm_op *op, const char *group, uint64_t seq)
{
    usp_comm_fingerprint fp = {
        .op = (int)op->kind, .dtype = op->dtype, .reduce = op->reduce, .count = op->count,
        .recv_count = op->recv_count, .root = op->root, .peer = op->peer, .recv_peer = op->recv_peer,
        .color = op->color, .key = op->key, .seq = seq, .site = op->site,
    };
    size_t n = strnlen(group, sizeof fp.group - 1);
    memcpy(fp.group, group, n); /* the rest is zero: two fingerprints compare and hash alike */
    return fp;
}

/* FNV-1a, one field at a time. */
static uint64_t mix(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

uint64_t usp_comm_fingerprint_hash(const usp_comm_fingerprint *fp)
{
    uint64_t h = 14695981039346656037ull;
    int reduces = fp->op == USP_OP_ALL_REDUCE || fp->op == USP_OP_REDUCE_SCATTER;
    int fields[4] = {fp->op, (int)fp->dtype, reduces ? (int)fp->reduce : 0, fp->op == USP_OP_BROADCAST ? fp->root : 0};
    uint64_t count = fp->op == USP_OP_ALL_TO_ALL_V ? 0 : (uint64_t)fp->count; /* per-peer counts: not one number */
    h = mix(h, fields, sizeof fields);
    h = mix(h, &count, sizeof count);
    h = mix(h, fp->group, strnlen(fp->group, sizeof fp->group));
    return mix(h, &fp->seq, sizeof fp->seq);
}

void usp_comm_fingerprint_name(usp_strbuf *b, const usp_comm_fingerprint *fp)
{
    usp_strbuf_printf(b, "%s #%llu on %s (%s:%d)", usp_comm_kind_name((usp_comm_kind)fp->op),
                      (unsigned long long)fp->seq, fp->group, fp->site.file, fp->site.line);
}

void usp_comm_fingerprint_describe(usp_strbuf *b, const usp_comm_fingerprint *fp)
{
    usp_strbuf_printf(b, "%s(", usp_comm_kind_name((usp_comm_kind)fp->op));
    switch (fp->op) {
    case USP_OP_ALL_TO_ALL_V:
        usp_strbuf_printf(b, "%s, send_counts=[...])", usp_dtype_name(fp->dtype));
        return;
    case USP_OP_BARRIER:
        usp_strbuf_printf(b, ")");
        return;
    case USP_OP_SPLIT:
        usp_strbuf_printf(b, "color=%d, key=%d)", fp->color, fp->key);
        return;
    case USP_OP_RECV:
        usp_strbuf_printf(b, "count=%zu, %s, from=%d)", fp->recv_count, usp_dtype_name(fp->dtype), fp->peer);
        return;
    case USP_OP_SEND:
        usp_strbuf_printf(b, "count=%zu, %s, to=%d)", fp->count, usp_dtype_name(fp->dtype), fp->peer);
        return;
    case USP_OP_SENDRECV:
        usp_strbuf_printf(b, "send=%zu to %d, recv=%zu from %d, %s)", fp->count, fp->peer, fp->recv_count,
                          fp->recv_peer, usp_dtype_name(fp->dtype));
        return;
    default:
        break;
    }
    usp_strbuf_printf(b, "count=%zu, %s", fp->count, usp_dtype_name(fp->dtype));
    if (fp->op == USP_OP_ALL_REDUCE || fp->op == USP_OP_REDUCE_SCATTER)
        usp_strbuf_printf(b, ", %s", usp_reduce_op_name(fp->reduce));
    if (fp->op == USP_OP_BROADCAST)
        usp_strbuf_printf(b, ", root=%d", fp->root);
    usp_strbuf_printf(b, ")");
}
