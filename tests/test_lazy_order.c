/* The lazy backend's order checker (backends/lazy/lazy_order.h): two accesses of the same bytes from
 * two streams, at least one a write, with nothing that orders them, stop the program at the second.
 *
 * Each case is a small program on one lazy backend with a second stream ("side"), and says whether
 * the checker must find a race: write then read, read then write and write then write across the
 * streams without an event (found), with an event or a host synchronisation between them (not);
 * reads on both streams (not); disjoint bytes of one buffer (not), and a write that overlaps a read
 * by a few bytes (found); the simulator's run of a stream before a collective, which orders nothing
 * for the program (found); a collective's noted write read on the other stream (found, naming it);
 * and a buffer freed and allocated again, whose old accesses are forgotten (not). */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "backends/lazy/lazy_backend.h"
#include "core/ops/ops.h"
#include "tests/check_main.h"
#include "tests/harness.h"

#define N 64

typedef struct program {
    usp_backend_t *be;
    usp_stream_t *side;
    usp_event_t *event;
    float *x, *y;
} program;

static void start(program *p)
{
    ck_assert_int_eq(usp_backend_lazy_create(&p->be), USP_OK);
    ck_assert_int_eq(usp_stream_create(p->be, &p->side), USP_OK);
    ck_assert_int_eq(usp_event_create(p->be, &p->event), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(p->be, N * sizeof(float), "test", (void **)&p->x), USP_OK);
    ck_assert_int_eq(usp_buffer_alloc(p->be, N * sizeof(float), "test", (void **)&p->y), USP_OK);
    ck_assert_int_eq(usp_buffer_zero(p->be, p->x, N * sizeof(float), NULL), USP_OK);
    ck_assert_int_eq(usp_buffer_zero(p->be, p->y, N * sizeof(float), NULL), USP_OK);
    ck_assert_int_eq(usp_backend_synchronize(p->be, NULL), USP_OK); /* both zeroed, as far as the host knows */
}

static void stop(program *p)
{
    ck_assert_int_eq(usp_backend_synchronize(p->be, NULL), USP_OK);
    ck_assert_int_eq(usp_stream_destroy(p->be, p->side), USP_OK);
    usp_event_destroy(p->be, p->event);
    usp_buffer_free(p->be, p->x);
    usp_buffer_free(p->be, p->y);
    usp_backend_destroy(p->be);
}

/* `from` is ordered before what `to` enqueues next. */
static usp_status order(program *p, usp_stream_t *from, usp_stream_t *to)
{
    USP_CHECK(usp_event_record(p->be, p->event, from));
    return usp_stream_wait_event(p->be, to, p->event);
}

/* The last step's status must be a race whose message names `what` (NULL: no race). */
static void expect(usp_status s, const char *what, const char *label)
{
    if (!what) {
        ck_assert_msg(s == USP_OK, "%s: %s", label, usp_error_message());
        return;
    }
    ck_assert_msg(s != USP_OK, "%s: the checker found no race", label);
    const char *m = usp_error_message();
    printf("%s: %s\n", label, m);
    ck_assert_msg(strstr(m, HARNESS_RACE_FOUND) && strstr(m, what), "%s: %s", label, m);
}

/* x written on side (scaled), then y += x on the default stream: ordered by an event (case 1), by a
 * host synchronisation of side (2), by nothing (0), or by the simulator's run of side (3). */
START_TEST(a_read_after_another_streams_write)
{
    program p;
    start(&p);
    ck_assert_int_eq(usp_scale(p.be, p.x, 2.0f, N, p.side), USP_OK);
    if (_i == 1)
        ck_assert_int_eq(order(&p, p.side, NULL), USP_OK);
    if (_i == 2)
        ck_assert_int_eq(usp_backend_synchronize(p.be, p.side), USP_OK);
    if (_i == 3)
        ck_assert_int_eq(usp_backend_run_queued(p.be, p.side), USP_OK);
    static const char *const label[] = {"unordered", "an event", "a host synchronisation", "the simulator's run"};
    expect(usp_accumulate_2d(p.be, p.y, N, p.x, N, N, 1, NULL), _i == 1 || _i == 2 ? NULL : "scale", label[_i]);
    stop(&p);
}
END_TEST

/* x read on both streams after side waited for its zeroing: fine; then x written on the default stream
 * while side's read may still run (found), or after an event from side (not). */
START_TEST(a_write_after_another_streams_read)
{
    program p;
    start(&p);
    ck_assert_int_eq(usp_accumulate_2d(p.be, p.y, N, p.x, N, N, 1, p.side), USP_OK);
    float *z;
    ck_assert_int_eq(usp_buffer_alloc(p.be, N * sizeof(float), "test", (void **)&z), USP_OK);
    expect(usp_buffer_zero(p.be, z, N * sizeof(float), NULL), NULL, "a fresh buffer");
    expect(usp_accumulate_2d(p.be, z, N, p.x, N, N, 1, NULL), NULL, "reads on two streams");
    if (_i == 1)
        ck_assert_int_eq(order(&p, p.side, NULL), USP_OK);
    expect(usp_scale(p.be, p.x, 3.0f, N, NULL), _i == 1 ? NULL : "accumulate_2d", "write after read");
    usp_buffer_free(p.be, z);
    stop(&p);
}
END_TEST

/* The two halves of x written on the two streams: fine; a write of 8 bytes across the middle races
 * with the side stream's half. Then both halves read on the default stream: the side's write races. */
START_TEST(bytes_are_followed_not_buffers)
{
    program p;
    start(&p);
    ck_assert_int_eq(usp_scale(p.be, p.x, 2.0f, N / 2, p.side), USP_OK);
    expect(usp_scale(p.be, p.x + N / 2, 2.0f, N / 2, NULL), NULL, "disjoint halves");
    expect(usp_scale(p.be, p.x + N / 2 - 1, 2.0f, 2, NULL), "scale on stream", "two floats across the middle");
    stop(&p);
    start(&p);
    ck_assert_int_eq(usp_scale(p.be, p.x, 2.0f, N / 2, p.side), USP_OK);
    ck_assert_int_eq(usp_scale(p.be, p.x + N / 2, 2.0f, N / 2, NULL), USP_OK);
    expect(usp_accumulate_2d(p.be, p.y, N, p.x, N, N, 1, NULL), "scale on stream", "the whole of x");
    stop(&p);
}
END_TEST

/* A collective on side (as the simulator tells it: run the queue, note the access) writes y; the
 * default stream reads y without an event (found, naming the collective), or after one (not). */
START_TEST(a_collectives_noted_write)
{
    program p;
    start(&p);
    ck_assert_int_eq(usp_backend_run_queued(p.be, p.side), USP_OK);
    const usp_access a[2] = {{p.x, N * sizeof(float), 0}, {p.y, N * sizeof(float), 1}};
    ck_assert_int_eq(usp_backend_note_access(p.be, p.side, "all_to_all", a, 2), USP_OK);
    if (_i == 1)
        ck_assert_int_eq(order(&p, p.side, NULL), USP_OK);
    expect(usp_scale(p.be, p.y, 2.0f, N, NULL), _i == 1 ? NULL : "all_to_all on stream", "after a collective");
    stop(&p);
}
END_TEST

/* A buffer written on side, synchronised and freed; a new buffer (perhaps at the same address) is
 * written on the default stream: its history starts empty. */
START_TEST(a_freed_buffers_accesses_are_forgotten)
{
    program p;
    start(&p);
    float *z;
    for (int round = 0; round < 2; round++) {
        ck_assert_int_eq(usp_buffer_alloc(p.be, N * sizeof(float), "test", (void **)&z), USP_OK);
        expect(usp_buffer_zero(p.be, z, N * sizeof(float), round ? NULL : p.side), NULL, "a new buffer");
        ck_assert_int_eq(usp_backend_synchronize(p.be, p.side), USP_OK);
        usp_buffer_free(p.be, z);
        ck_assert_int_eq(usp_backend_synchronize(p.be, NULL), USP_OK);
    }
    stop(&p);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("lazy_order");
    TCase *tc = tcase_create("checker");
    tcase_add_loop_test(tc, a_read_after_another_streams_write, 0, 4);
    tcase_add_loop_test(tc, a_write_after_another_streams_read, 0, 2);
    tcase_add_test(tc, bytes_are_followed_not_buffers);
    tcase_add_loop_test(tc, a_collectives_noted_write, 0, 2);
    tcase_add_test(tc, a_freed_buffers_accesses_are_forgotten);
    suite_add_tcase(suite, tc);
    return check_main_run(suite);
}
