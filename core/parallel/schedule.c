/* The table of attention schedules and the layer attention made from one (schedule.h). A new
 * schedule: its file (schedule_NAME.c, a usp_schedule_i usp_schedule_NAME) and its name in
 * USP_SCHEDULES below. */
#include "core/parallel/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The table: a schedule NAME is the usp_schedule_i usp_schedule_NAME of its file schedule_NAME.c, which
 * the build finds by its name (core/CMakeLists.txt); the mesh's come first. */
#define USP_SCHEDULES(X) X(ulysses) X(ring) X(hybrid) X(local) X(gather)

#define SCHEDULE_DECLARE(name) extern const usp_schedule_i usp_schedule_##name;
USP_SCHEDULES(SCHEDULE_DECLARE)
#undef SCHEDULE_DECLARE

#define SCHEDULE_ENTRY(name) &usp_schedule_##name,
static const usp_schedule_i *const schedules[] = {USP_SCHEDULES(SCHEDULE_ENTRY)};
#undef SCHEDULE_ENTRY

#define N_SCHEDULES ((int)(sizeof schedules / sizeof *schedules))

int usp_schedule_count(void) { return N_SCHEDULES; }

const usp_schedule_i *usp_schedule_at(int i) { return i >= 0 && i < N_SCHEDULES ? schedules[i] : NULL; }

const usp_schedule_i *usp_schedule_find(const char *name)
{
    for (int i = 0; name && i < N_SCHEDULES; i++)
        if (strcmp(schedules[i]->name, name) == 0)
            return schedules[i];
    return NULL;
}

const usp_schedule_i *usp_schedule_for_mesh(int ulysses, int ring)
{
    for (int i = 0; i < N_SCHEDULES; i++)
        if (schedules[i]->picks && schedules[i]->picks(ulysses, ring))
            return schedules[i];
    return NULL;
}

void usp_schedules_describe(char *buf, size_t size)
{
    size_t at = (size_t)snprintf(buf, size, "sp (the mesh's:");
    for (int i = 0, first = 1; i < N_SCHEDULES && at < size; i++)
        if (schedules[i]->picks) {
            at += (size_t)snprintf(buf + at, size - at, "%s %s", first ? "" : ",", schedules[i]->name);
            first = 0;
        }
    for (int i = 0; i < N_SCHEDULES && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s", i ? ", " : "), ", schedules[i]->name);
}

const usp_schedule_i *usp_schedule_pick(const char *name, int ulysses, int ring)
{
    return !name || strcmp(name, "sp") == 0 ? usp_schedule_for_mesh(ulysses, ring) : usp_schedule_find(name);
}

usp_status usp_schedule_resolve(const char *name, const usp_schedule_shape *s, const usp_schedule_i **out)
{
    *out = NULL;
    const usp_schedule_i *sch = usp_schedule_pick(name, s->ulysses, s->ring);
    if (!sch) {
        char known[256];
        usp_schedules_describe(known, sizeof known);
        return usp_error(USP_ERR_CONFIG, "--attention %s: no such schedule; the schedules are %s", name, known);
    }
    USP_CHECK(sch->check(s));
    *out = sch;
    return USP_OK;
}

struct usp_attention {
    const usp_schedule_i *schedule;
    void *impl;
    usp_seq_layout layout;
};

usp_status usp_attention_create(const usp_schedule_i *s, const usp_schedule_config *c, usp_attention **out)
{
    *out = NULL;
    const usp_schedule_shape shape = {.ulysses = c->ulysses ? usp_comm_size(c->ulysses) : 1,
                                      .ring = c->ring ? usp_comm_size(c->ring) : 1, .seq_len = c->seq_len,
                                      .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .causal = c->causal,
                                      .window = c->layout_window};
    USP_CHECK(s->check(&shape));
    usp_attention *a;
    USP_CHECK(usp_calloc((void **)&a, 1, sizeof *a, "an attention"));
    a->schedule = s;
    usp_status st = usp_seq_layout_make(s->layout(&shape), c->seq_len, shape.ulysses, shape.ring, &a->layout);
    if (st == USP_OK)
        st = s->create(c, &a->impl);
    if (st != USP_OK) {
        free(a);
        return st;
    }
    *out = a;
    return USP_OK;
}

const usp_schedule_i *usp_attention_schedule(const usp_attention *a) { return a->schedule; }
const usp_seq_layout *usp_attention_layout(const usp_attention *a) { return &a->layout; }

usp_status usp_attention_forward(usp_attention *a, const float *q, const float *k, const float *v, float *o)
{
    return a->schedule->forward(a->impl, q, k, v, o);
}

usp_status usp_attention_backward(usp_attention *a, const float *d_o, float *dq, float *dk, float *dv)
{
    return a->schedule->backward(a->impl, d_o, dq, dk, dv);
}

int usp_attention_keeps_inputs(const usp_attention *a) { return a->schedule->keeps_inputs(a->impl); }

void usp_attention_destroy(usp_attention *a)
{
    if (!a)
        return;
    a->schedule->destroy(a->impl);
    free(a);
}
