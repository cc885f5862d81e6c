/* The flight recorder of one rank (core/safety/flight_recorder.h): a ring of the
 * last calls and each group's counts, behind one mutex, dumped as a
 * usp_flight_record (core/safety/flight_record.h). */
#include "core/safety/flight_recorder.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/atomic_file.h"
#include "core/safety/flight_record.h"

/* A rank opens a handful of groups (world, ulysses, ring, dp and their
 * splits); a fixed table keeps post free of allocation. */
#define MAX_GROUPS 64

struct usp_flight_recorder {
    pthread_mutex_t lock;
    usp_flight_record rec;     /* the state; its entries/groups are filled only for a dump */
    usp_flight_group groups[MAX_GROUPS];
    int n_groups;
    usp_flight_entry *ring;    /* [capacity]: entry id k at (k - 1) % capacity */
    int capacity;
    uint64_t next_id;          /* ids posted so far */
    uint64_t current;          /* the id of the call the rank is in, 0 when none */
    int finished;              /* exited or crashed: the state no longer follows the calls */
};

usp_status usp_flight_recorder_create(int world_rank, int world_size, int capacity, usp_flight_recorder **out)
{
    if (world_size < 1 || world_rank < 0 || world_rank >= world_size || capacity < 0)
        return usp_error(USP_ERR_RUNTIME, "flight recorder of rank %d of %d with capacity %d: expected 0 <= rank < "
                         "world size and a capacity >= 0", world_rank, world_size, capacity);
    usp_flight_recorder *r;
    USP_CHECK(usp_calloc((void **)&r, 1, sizeof *r, "a flight recorder"));
    r->capacity = capacity ? capacity : USP_FLIGHT_DEFAULT_CAPACITY;
    usp_status s = usp_calloc((void **)&r->ring, (size_t)r->capacity, sizeof *r->ring, "a flight recorder's calls");
    if (s == USP_OK && pthread_mutex_init(&r->lock, NULL) != 0)
        s = usp_error(USP_ERR_RUNTIME, "flight recorder of rank %d: cannot make its mutex", world_rank);
    if (s != USP_OK) {
        free(r->ring);
        free(r);
        return s;
    }
    r->rec = (usp_flight_record){.world_rank = world_rank, .world_size = world_size, .state = USP_FLIGHT_RUNNING,
                                 .crash_at.op = -1, .current.call.op = -1};
    *out = r;
    return USP_OK;
}

void usp_flight_recorder_destroy(usp_flight_recorder *r)
{
    if (!r)
        return;
    for (int g = 0; g < r->n_groups; g++)
        free(r->groups[g].members);
    pthread_mutex_destroy(&r->lock);
    free(r->rec.error);
    free(r->rec.injected);
    free(r->ring);
    free(r);
}

usp_status usp_flight_recorder_add_group(usp_flight_recorder *r, const char *name, int size, const int *world_ranks,
                                         int my_index)
{
    if (!*name || strlen(name) >= USP_COMM_NAME_MAX || size < 1 || my_index < 0 || my_index >= size)
        return usp_error(USP_ERR_RUNTIME, "flight recorder of rank %d: group \"%.80s\" of %d members with this rank "
                         "at %d: expected a name of 1 to %d characters and 0 <= index < size", r->rec.world_rank,
                         name, size, my_index, USP_COMM_NAME_MAX - 1);
    int *members;
    USP_CHECK(usp_malloc((void **)&members, (size_t)size * sizeof *members, "a flight recorder's group"));
    memcpy(members, world_ranks, (size_t)size * sizeof *members);
    usp_status s = USP_OK;
    pthread_mutex_lock(&r->lock);
    for (int g = 0; g < r->n_groups && s == USP_OK; g++)
        if (strcmp(r->groups[g].name, name) == 0)
            s = usp_error(USP_ERR_RUNTIME, "flight recorder of rank %d: group %s registered twice; a group's "
                          "calls are matched by its name, so names must differ", r->rec.world_rank, name);
    if (s == USP_OK && r->n_groups == MAX_GROUPS)
        s = usp_error(USP_ERR_RUNTIME, "flight recorder of rank %d: group %s is one more than the %d it keeps",
                      r->rec.world_rank, name, MAX_GROUPS);
    if (s == USP_OK) {
        usp_flight_group *g = &r->groups[r->n_groups++];
        *g = (usp_flight_group){.size = size, .my_index = my_index, .members = members};
        memcpy(g->name, name, strlen(name) + 1);
    }
    pthread_mutex_unlock(&r->lock);
    if (s != USP_OK)
        free(members);
    return s;
}

static int is_collective(int op) { return op != USP_OP_SEND && op != USP_OP_RECV && op != USP_OP_SENDRECV; }

static usp_flight_group *group_named(usp_flight_recorder *r, const char *name)
{
    for (int g = 0; g < r->n_groups; g++)
        if (strncmp(r->groups[g].name, name, USP_COMM_NAME_MAX) == 0)
            return &r->groups[g];
    return NULL;
}

/* Entry `id` while it is still in the ring, else NULL. Called locked. */
static usp_flight_entry *entry_of(usp_flight_recorder *r, uint64_t id)
{
    if (id == 0 || id > r->next_id || r->next_id - id >= (uint64_t)r->capacity)
        return NULL;
    return &r->ring[(id - 1) % (uint64_t)r->capacity];
}

usp_status usp_flight_recorder_post(usp_flight_recorder *r, const usp_comm_fingerprint *fp, double t, uint64_t *id)
{
    pthread_mutex_lock(&r->lock);
    usp_flight_group *g = group_named(r, fp->group);
    if (!g) {
        pthread_mutex_unlock(&r->lock);
        *id = 0;
        return usp_error(USP_ERR_RUNTIME, "flight recorder of rank %d: %s on group %.64s, which was never added "
                         "(usp_flight_recorder_add_group)", r->rec.world_rank, usp_comm_kind_name((usp_comm_kind)fp->op),
                         fp->group);
    }
    usp_flight_entry e = {.id = ++r->next_id, .call = *fp, .state = USP_FLIGHT_POSTED, .posted = t, .started = -1,
                          .completed = -1};
    /* The seq is the matching position, so the caller's wins; a caller that
     * numbers nothing gets the recorder's own count. */
    g->calls_issued = fp->seq ? fp->seq : g->calls_issued + 1;
    e.call.seq = g->calls_issued;
    if (is_collective(fp->op))
        e.collective_seq = ++g->collectives_issued;
    if (fp->op != USP_OP_SPLIT)
        r->rec.calls++;
    r->ring[(e.id - 1) % (uint64_t)r->capacity] = e;
    r->current = e.id;
    r->rec.clock = t;
    *id = e.id;
    pthread_mutex_unlock(&r->lock);
    return USP_OK;
}

/* Moves entry `id` to `state` at time t; the rank leaves it unless it only started. */
static void mark(usp_flight_recorder *r, uint64_t id, usp_flight_call_state state, double t)
{
    pthread_mutex_lock(&r->lock);
    usp_flight_entry *e = entry_of(r, id);
    if (e && state == USP_FLIGHT_STARTED && e->state != USP_FLIGHT_POSTED)
        e = NULL; /* a start learnt after the end (or the drop) changes nothing */
    if (e) {
        e->state = state;
        if (state == USP_FLIGHT_STARTED)
            e->started = t;
        else
            e->completed = t;
        if (state == USP_FLIGHT_DROPPED) { /* never reached the backend: the group's count goes back */
            usp_flight_group *g = group_named(r, e->call.group);
            if (g && g->calls_issued == e->call.seq)
                g->calls_issued--, g->collectives_issued -= e->collective_seq ? 1 : 0;
        }
    }
    if (state != USP_FLIGHT_STARTED && r->current == id)
        r->current = 0;
    r->rec.clock = t;
    pthread_mutex_unlock(&r->lock);
}

void usp_flight_recorder_started(usp_flight_recorder *r, uint64_t id, double t) { mark(r, id, USP_FLIGHT_STARTED, t); }

void usp_flight_recorder_records_starts(usp_flight_recorder *r)
{
    pthread_mutex_lock(&r->lock);
    r->rec.starts = 1;
    pthread_mutex_unlock(&r->lock);
}

void usp_flight_recorder_completed(usp_flight_recorder *r, uint64_t id, double t)
{
    mark(r, id, USP_FLIGHT_COMPLETED, t);
}

void usp_flight_recorder_dropped(usp_flight_recorder *r, uint64_t id, double t) { mark(r, id, USP_FLIGHT_DROPPED, t); }

/* Sets the end of the rank; called with the lock held. Out of memory, the message is lost, not the state. */
static void finish(usp_flight_recorder *r, usp_flight_rank_state state, usp_status result, const char *error, double t)
{
    free(r->rec.error);
    r->rec.error = strdup(error ? error : "");
    r->rec.state = state;
    r->rec.result = result;
    r->rec.clock = t;
    r->finished = 1;
    r->current = 0;
}

void usp_flight_recorder_exited(usp_flight_recorder *r, usp_status result, const char *error, double t)
{
    pthread_mutex_lock(&r->lock);
    finish(r, USP_FLIGHT_EXITED, result, error, t);
    pthread_mutex_unlock(&r->lock);
}

void usp_flight_recorder_crashed(usp_flight_recorder *r, const usp_comm_fingerprint *at, uint64_t call,
                                 const char *error, double t)
{
    pthread_mutex_lock(&r->lock);
    finish(r, USP_FLIGHT_CRASHED, USP_ERR_RANK_FAILED, error, t);
    r->rec.crash_at = *at;
    r->rec.crash_call = call;
    pthread_mutex_unlock(&r->lock);
}

usp_status usp_flight_recorder_set_injected(usp_flight_recorder *r, const char *lines)
{
    char *copy = strdup(lines ? lines : "");
    if (!copy)
        return usp_error(USP_ERR_RUNTIME, "out of memory keeping the injected faults of rank %d", r->rec.world_rank);
    pthread_mutex_lock(&r->lock);
    free(r->rec.injected);
    r->rec.injected = copy;
    pthread_mutex_unlock(&r->lock);
    return USP_OK;
}

usp_status usp_flight_recorder_to_json(usp_flight_recorder *r, const char *reason, char **json)
{
    pthread_mutex_lock(&r->lock);
    size_t kept = r->next_id < (uint64_t)r->capacity ? (size_t)r->next_id : (size_t)r->capacity;
    usp_flight_entry *entries = malloc((kept ? kept : 1) * sizeof *entries);
    usp_status s = USP_OK;
    if (!entries) {
        s = usp_error(USP_ERR_RUNTIME, "out of memory dumping the flight record of rank %d", r->rec.world_rank);
    } else {
        for (size_t i = 0; i < kept; i++) /* oldest first */
            entries[i] = *entry_of(r, r->next_id - kept + 1 + i);
        usp_flight_record view = r->rec;
        const usp_flight_entry *current = r->finished ? NULL : entry_of(r, r->current);
        view.state = r->finished ? r->rec.state : current ? USP_FLIGHT_BLOCKED : USP_FLIGHT_RUNNING;
        view.has_current = current != NULL;
        if (current)
            view.current = *current;
        view.groups = r->groups, view.n_groups = r->n_groups;
        view.entries = entries, view.n_entries = kept, view.entries_lost = r->next_id - kept;
        s = usp_flight_record_to_json(&view, reason, json);
    }
    pthread_mutex_unlock(&r->lock);
    free(entries);
    return s;
}

usp_status usp_flight_recorder_dump(usp_flight_recorder *r, const char *dir, const char *reason)
{
    char *json;
    USP_CHECK(usp_flight_recorder_to_json(r, reason, &json));
    usp_strbuf path = {0};
    usp_strbuf_printf(&path, "%s/" USP_FLIGHT_FILE_FORMAT, dir, r->rec.world_rank);
    usp_atomic_file f = {0};
    usp_status s = path.failed ? usp_error(USP_ERR_RUNTIME, "out of memory naming a flight record")
                               : usp_atomic_file_open(&f, usp_strbuf_text(&path));
    if (s == USP_OK && fputs(json, f.fp) == EOF)
        s = usp_error(USP_ERR_RUNTIME, "could not write the flight record %s", usp_strbuf_text(&path));
    if (s == USP_OK)
        s = usp_atomic_file_commit(&f);
    if (s != USP_OK)
        usp_atomic_file_abort(&f);
    free(json);
    usp_strbuf_free(&path);
    return s;
}
