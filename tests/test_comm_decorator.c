/* The communicator decorator and the reports without the simulator: a
 * recording backend stands for any real one (it only logs what reaches it),
 * and hand-filled rank records stand for what a real backend learns from the
 * ranks' fingerprints. Links with usp_core alone: the decorator and the
 * reports depend on no simulator code. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safety/comm_decorator.h"
#include "core/safety/comm_report.h"
#include "tests/check_main.h"

/* --- a backend that records the calls that reach it --------------------- */

#define LOG_MAX 16

typedef struct recorder {
    usp_comm_op log[LOG_MAX];
    int n;
    int world_rank;
    char name[USP_COMM_NAME_MAX];
} recorder;

static const usp_comm_i recorder_iface;
static usp_comm_op last_child_op; /* the last call on a handle made by a split */

static usp_comm_t *recorder_open(int world_rank, const char *name)
{
    recorder *r = calloc(1, sizeof *r);
    ck_assert_ptr_nonnull(r);
    r->world_rank = world_rank;
    snprintf(r->name, sizeof r->name, "%s", name);
    usp_comm_t *c;
    ck_assert_int_eq(usp_comm_create(&recorder_iface, r, 0, 1, &world_rank, name, NULL, &c), USP_OK);
    return c;
}

static usp_status recorder_issue(void *ctx, usp_comm_op *op)
{
    recorder *r = ctx;
    ck_assert_int_lt(r->n, LOG_MAX);
    r->log[r->n++] = *op;
    if (strcmp(r->name, "world") != 0)
        last_child_op = *op;
    if (op->kind == USP_OP_SPLIT && op->color != USP_SPLIT_NOCOLOR)
        *op->split_out = recorder_open(r->world_rank, op->name);
    return USP_OK;
}

static void recorder_destroy(void *ctx) { free(ctx); }

static const usp_comm_i recorder_iface = {
    .api_version = USP_COMM_API_VERSION, .name = "recorder", .issue = recorder_issue, .destroy = recorder_destroy};

/* World rank 2 of 4 behind a decorator with the faults in `specs`. */
static usp_comm_t *decorated_rank(const char *const *specs, int n_specs, usp_comm_decorator **d, recorder **inner)
{
    usp_fault faults[4] = {0};
    ck_assert_int_le(n_specs, 4);
    for (int i = 0; i < n_specs; i++)
        ck_assert_int_eq(usp_fault_parse(specs[i], &faults[i]), USP_OK);
    ck_assert_int_eq(usp_comm_decorator_create(faults, n_specs, 4, d), USP_OK);
    usp_comm_t *in = recorder_open(2, "world"), *out;
    *inner = in->context;
    ck_assert_int_eq(usp_comm_decorator_wrap(*d, in, &out), USP_OK);
    return out;
}

START_TEST(calls_reach_the_backend_fingerprinted)
{
    usp_comm_decorator *d;
    recorder *inner;
    usp_comm_t *c = decorated_rank(NULL, 0, &d, &inner);
    ck_assert_int_eq(usp_comm_all_reduce(c, NULL, NULL, 8, USP_F32, USP_REDUCE_MAX, NULL), USP_OK);
    ck_assert_int_eq(inner->n, 1);
    ck_assert_int_eq(inner->log[0].kind, USP_OP_ALL_REDUCE);
    ck_assert_uint_eq(inner->log[0].count, 8);
    usp_comm_fingerprint fp;
    ck_assert_int_eq(usp_comm_decorator_current_call(d, 2, &fp), 0); /* the call has returned */
    ck_assert_int_eq(fp.op, USP_OP_ALL_REDUCE);
    ck_assert_str_eq(fp.group, "world");
    ck_assert_uint_eq(fp.seq, 1);
    ck_assert_ptr_nonnull(strstr(fp.site.file, "test_comm_decorator.c"));
    ck_assert_uint_eq(usp_comm_decorator_calls(d, 2), 1);
    usp_strbuf text = {0};
    usp_comm_fingerprint_describe(&text, &fp);
    ck_assert_str_eq(usp_strbuf_text(&text), "all_reduce(count=8, f32, max)");
    usp_strbuf_free(&text);
    /* Members of one collective agree on the hash wherever they call from; another count does not. */
    usp_comm_fingerprint other = fp;
    other.site.line += 10;
    ck_assert_uint_eq(usp_comm_fingerprint_hash(&other), usp_comm_fingerprint_hash(&fp));
    other.count = 7;
    ck_assert_uint_ne(usp_comm_fingerprint_hash(&other), usp_comm_fingerprint_hash(&fp));
    usp_comm_destroy(c);
    usp_comm_decorator_destroy(d);
}
END_TEST

START_TEST(skip_drops_a_call_and_crash_fails_every_later_call)
{
    const char *specs[] = {"skip:rank=2,op=all_reduce", "crash:rank=2,op=barrier"};
    usp_comm_decorator *d;
    recorder *inner;
    usp_comm_t *c = decorated_rank(specs, 2, &d, &inner);
    ck_assert_int_eq(usp_comm_decorator_check_fired(d), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "never fired"));
    ck_assert_int_eq(usp_comm_all_reduce(c, NULL, NULL, 8, USP_F32, USP_REDUCE_SUM, NULL), USP_OK);
    ck_assert_int_eq(inner->n, 0); /* skipped: the backend never saw it */
    ck_assert_int_eq(usp_comm_barrier(c, NULL), USP_ERR_RANK_FAILED);
    ck_assert_int_eq(usp_comm_all_reduce(c, NULL, NULL, 8, USP_F32, USP_REDUCE_SUM, NULL), USP_ERR_RANK_FAILED);
    ck_assert_int_eq(inner->n, 0);
    usp_comm_fingerprint at;
    uint64_t call;
    ck_assert_int_eq(usp_comm_decorator_crashed(d, 2, &at, &call), 1);
    ck_assert_int_eq(usp_comm_decorator_crashed(d, 1, NULL, NULL), 0);
    ck_assert_int_eq(at.op, USP_OP_BARRIER);
    ck_assert_uint_eq(call, 2);
    const char *injected = usp_comm_decorator_injected(d);
    ck_assert_ptr_nonnull(strstr(injected, "  rank 2: skip at its call 1, all_reduce #1 on world (tests/"));
    ck_assert_ptr_nonnull(strstr(injected, "  rank 2: crash at its call 2, barrier #1 on world (tests/"));
    ck_assert_int_eq(usp_comm_decorator_check_fired(d), USP_OK);
    usp_comm_destroy(c);
    usp_comm_decorator_destroy(d);
}
END_TEST

START_TEST(split_children_are_decorated)
{
    const char *specs[] = {"size:rank=2,op=all_gather"};
    usp_comm_decorator *d;
    recorder *inner;
    usp_comm_t *c = decorated_rank(specs, 1, &d, &inner), *child = NULL, *none = NULL;
    ck_assert_int_eq(usp_comm_split(c, 0, 0, "sp[0]", &child), USP_OK);
    ck_assert_ptr_nonnull(child);
    ck_assert_uint_eq(usp_comm_decorator_calls(d, 2), 0); /* a split is setup, not counted */
    ck_assert_int_eq(usp_comm_all_gather(child, NULL, NULL, 16, USP_F32, NULL), USP_OK);
    ck_assert_int_eq(inner->n, 1); /* the split; the all_gather went to the child's own backend handle */
    ck_assert_int_eq(last_child_op.kind, USP_OP_ALL_GATHER);
    ck_assert_uint_eq(last_child_op.count, 15); /* the size fault */
    ck_assert_int_eq(usp_comm_split(c, USP_SPLIT_NOCOLOR, 0, "none", &none), USP_OK);
    ck_assert_ptr_null(none); /* no color, no group */
    ck_assert_ptr_nonnull(strstr(usp_comm_decorator_injected(d), "rank 2: size at its call 1, all_gather #1 on sp[0]"));
    ck_assert_uint_eq(usp_comm_decorator_calls(d, 2), 1);
    usp_comm_destroy(child); /* the wrapper and, through it, the recorder's own handle */
    usp_comm_destroy(c);
    usp_comm_decorator_destroy(d);
}
END_TEST

/* --- faults that could not change a run ------------------------------- */

START_TEST(faults_that_cannot_apply_are_refused_when_parsed)
{
    static const struct {
        const char *spec, *why;
    } refused[] = {
        {"size:rank=1,op=barrier", "a barrier has no count"},
        {"swap:rank=1,op=send", "swap reorders collectives"},
        {"swap:rank=1,op=recv,call=2", "swap reorders collectives"},
        {"swap:rank=1,op=sendrecv", "swap reorders collectives"},
        {"group:rank=1,group=foo", "group= names no group of the mesh"},
        {"group:rank=1,group=worlds", "group= names no group of the mesh"},
        {"group:rank=1,group=world[0]", "group= names no group of the mesh"},
        {"group:rank=1,group=ulysses[]", "group= names no group of the mesh"},
        {"group:rank=1,group=ulysses[1", "group= names no group of the mesh"},
        {"group:rank=1,group=ulysses[x]", "group= names no group of the mesh"},
        {"group:rank=1,op=all_to_all,group=ulysses", "the op already runs on that group kind"},
        {"group:rank=1,op=all_to_all_v,group=ulysses[0]", "the op already runs on that group kind"},
        {"group:rank=1,op=sendrecv,group=ring", "the op already runs on that group kind"},
        {"size:rank=1,op=split", "unknown op"},
    };
    usp_fault f;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        ck_assert_msg(usp_fault_parse(refused[i].spec, &f) == USP_ERR_CONFIG, "%s was accepted", refused[i].spec);
        const char *message = usp_error_message();
        ck_assert_msg(strstr(message, refused[i].spec) && strstr(message, refused[i].why),
                      "%s: the message must name the spec and '%s': %s", refused[i].spec, refused[i].why, message);
    }
    /* What can apply still parses: another group kind, an index the mesh makes, op=any. */
    const char *accepted[] = {"group:rank=1,group=dp", "group:rank=1,group=ulysses[12]", "group:rank=1,group=world",
                              "group:rank=1,op=all_to_all,group=dp", "group:rank=1,op=all_reduce,group=sp",
                              "size:rank=1,op=sendrecv", "size:rank=1", "swap:rank=1,op=all_reduce", "swap:rank=1",
                              "skip:rank=1,op=barrier"};
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++)
        ck_assert_msg(usp_fault_parse(accepted[i], &f) == USP_OK, "%s: %s", accepted[i], usp_error_message());
}
END_TEST

/* Faults that parse but meet a call they cannot change: the run must not pass as if injected. */
START_TEST(a_fault_that_changed_nothing_fails_the_check)
{
    static const struct {
        const char *spec, *why;
    } cases[] = {
        {"group:rank=2,group=dp", "the rank is in no other group of that name"}, /* the rank has world only */
        {"size:rank=2", "a barrier has no count"},                             /* op=any lands on a barrier */
        {"swap:rank=2", "the call is point-to-point"},                         /* ... on a send */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        usp_comm_decorator *d;
        recorder *inner;
        usp_comm_t *c = decorated_rank(&cases[i].spec, 1, &d, &inner);
        usp_status s = i == 2 ? usp_comm_send(c, NULL, 4, USP_F32, 0, NULL) : usp_comm_barrier(c, NULL);
        ck_assert_int_eq(s, USP_OK);
        ck_assert_int_eq(inner->n, 1); /* the call went through unchanged */
        ck_assert_int_eq(usp_comm_decorator_check_fired(d), USP_ERR_CONFIG);
        ck_assert_msg(strstr(usp_error_message(), "fired but changed nothing") &&
                          strstr(usp_error_message(), cases[i].why),
                      "%s: %s", cases[i].spec, usp_error_message());
        usp_comm_destroy(c);
        usp_comm_decorator_destroy(d);
    }
}
END_TEST

/* A swap that holds back a collective and issues the next one first, when the two are alike
 * (same op, count, dtype and group), leaves every check the same order to see: it must say so. */
START_TEST(a_swap_of_two_alike_collectives_fails_the_check)
{
    const char *spec = "swap:rank=2,op=all_to_all";
    usp_comm_decorator *d;
    recorder *inner;
    usp_comm_t *c = decorated_rank(&spec, 1, &d, &inner);
    ck_assert_int_eq(usp_comm_all_to_all(c, NULL, NULL, 8, USP_F32, NULL), USP_OK);
    ck_assert_int_eq(inner->n, 0); /* held back */
    ck_assert_int_eq(usp_comm_all_to_all(c, NULL, NULL, 8, USP_F32, NULL), USP_OK);
    ck_assert_int_eq(inner->n, 2);
    ck_assert_int_eq(usp_comm_decorator_check_fired(d), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "swap:rank=2,op=all_to_all,call=1 fired but changed nothing") &&
                      strstr(usp_error_message(), "two alike collectives"),
                  "%s", usp_error_message());
    usp_comm_destroy(c);
    usp_comm_decorator_destroy(d);

    /* Another count after it: the order is one a check can see. */
    c = decorated_rank(&spec, 1, &d, &inner);
    ck_assert_int_eq(usp_comm_all_to_all(c, NULL, NULL, 8, USP_F32, NULL), USP_OK);
    ck_assert_int_eq(usp_comm_all_to_all(c, NULL, NULL, 16, USP_F32, NULL), USP_OK);
    ck_assert_uint_eq(inner->log[0].count, 16);
    ck_assert_uint_eq(inner->log[1].count, 8);
    ck_assert_int_eq(usp_comm_decorator_check_fired(d), USP_OK);
    usp_comm_destroy(c);
    usp_comm_decorator_destroy(d);
}
END_TEST

/* Under mpi or nccl a process runs one rank of W; a fault on another rank is that process's to judge. */
START_TEST(a_fault_on_a_rank_of_another_process_is_not_judged_here)
{
    const char *specs[] = {"swap:rank=1,call=3", "skip:rank=2,call=9"};
    usp_comm_decorator *d;
    recorder *inner;
    usp_comm_t *c = decorated_rank(specs, 1, &d, &inner); /* this process runs world rank 2 of 4 */
    ck_assert_int_eq(usp_comm_barrier(c, NULL), USP_OK);
    ck_assert_int_eq(usp_comm_decorator_check_fired(d), USP_OK);
    usp_comm_destroy(c);
    usp_comm_decorator_destroy(d);
    c = decorated_rank(specs, 2, &d, &inner); /* its own fault that never fired is still named */
    ck_assert_int_eq(usp_comm_decorator_check_fired(d), USP_ERR_CONFIG);
    ck_assert_msg(strstr(usp_error_message(), "skip:rank=2,op=any,call=9 never fired: rank 2 made 0"), "%s",
                  usp_error_message());
    usp_comm_destroy(c);
    usp_comm_decorator_destroy(d);
}
END_TEST

/* --- reports from records ------------------------------------------------ */

static usp_comm_fingerprint call_of(usp_comm_kind op, const char *group, int line)
{
    usp_comm_fingerprint fp = {.op = (int)op, .dtype = USP_F32, .count = 4, .seq = 1, .site = {"x.c", line}};
    strcpy(fp.group, group);
    return fp;
}

START_TEST(records_of_any_backend_make_the_report_and_its_graph)
{
    static const usp_rank_wait waits[3] = {{1, 1}, {2, 0}, {0, 1}};
    usp_rank_record ranks[4] = {
        {.state = USP_RANK_BLOCKED, .call = call_of(USP_OP_ALL_TO_ALL, "a", 1), .waits = &waits[0], .n_waits = 1,
         .calls = 1, .clock = 0.5},
        {.state = USP_RANK_BLOCKED, .call = call_of(USP_OP_ALL_REDUCE, "b", 2), .waits = &waits[1], .n_waits = 1,
         .calls = 1},
        {.state = USP_RANK_BLOCKED, .call = call_of(USP_OP_BARRIER, "c", 3), .waits = &waits[2], .n_waits = 1,
         .calls = 1},
        {.state = USP_RANK_EXITED, .call.op = -1, .calls = 7, .result = USP_OK},
    };
    usp_report_snapshot snap = {0};
    usp_strbuf text = {0};
    ck_assert_int_eq(usp_report_stall(&snap, ranks, 4, "  rank 0: skip at its call 3, x\n", &text), USP_ERR_COLLECTIVE);
    ck_assert_str_eq(usp_strbuf_text(&text),
                     "deadlock: no rank can run and some are blocked\n"
                     "wait chain: rank 0 waits in all_to_all #1 on a (x.c:1) for rank 1; rank 1 waits in all_reduce #1 "
                     "on b (x.c:2) for rank 2; rank 2 waits in barrier #1 on c (x.c:3) for rank 0; a cycle\n"
                     "injected faults:\n"
                     "  rank 0: skip at its call 3, x\n"
                     "rank states:\n"
                     "  rank 0: blocked in all_to_all #1 on a (x.c:1) all_to_all(count=4, f32), waiting for rank 1 "
                     "[t=0.500000 s]\n"
                     "  rank 1: blocked in all_reduce #1 on b (x.c:2) all_reduce(count=4, f32, sum), waiting for rank 2 "
                     "[t=0.000000 s]\n"
                     "  rank 2: blocked in barrier #1 on c (x.c:3) barrier(), waiting for rank 0 [t=0.000000 s]\n"
                     "  rank 3: exited (ok) after 7 calls [t=0.000000 s]\n");
    usp_wait_graph g;
    ck_assert_int_eq(usp_report_wait_graph(&snap, usp_strbuf_text(&text), &g), USP_OK);
    ck_assert_int_eq(g.kind, USP_REPORT_DEADLOCK);
    ck_assert_str_eq(g.title, "deadlock: no rank can run and some are blocked");
    ck_assert_str_eq(g.injected, "rank 0: skip at its call 3, x");
    ck_assert_uint_eq(g.n_edges, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(g.ranks[i].in_cycle, 1);
        ck_assert_int_eq(g.edges[i].highlight, 1);
    }
    ck_assert_int_eq(g.ranks[3].in_cycle, 0);
    ck_assert_str_eq(g.ranks[1].call, "all_reduce(count=4, f32, sum)");
    usp_wait_graph_free(&g);
    usp_report_snapshot_free(&snap);
    usp_strbuf_free(&text);
}
END_TEST

/* 16 injected faults (the most --inject takes) on long group names make a text far over the 512 bytes the
 * graph once kept: every line and the whole first line of the report reach the picture's caption. */
START_TEST(the_wait_graph_keeps_every_injected_fault)
{
    static const usp_rank_wait waits[2] = {{1, 1}, {0, 1}};
    usp_rank_record ranks[2] = {
        {.state = USP_RANK_BLOCKED, .call = call_of(USP_OP_ALL_TO_ALL, "a", 1), .waits = &waits[0], .n_waits = 1,
         .calls = 1},
        {.state = USP_RANK_BLOCKED, .call = call_of(USP_OP_BARRIER, "b", 2), .waits = &waits[1], .n_waits = 1,
         .calls = 1},
    };
    usp_strbuf faults = {0};
    for (int i = 0; i < 16; i++)
        usp_strbuf_printf(&faults, "  rank %d: skip at its call %d, all_to_all #%d on a_group_with_a_long_name[%d] "
                          "(core/train/selftest.c:75)\n", i % 2, i + 1, i + 1, i);
    ck_assert_uint_gt(faults.len, 1024);
    usp_report_snapshot snap = {0};
    usp_strbuf text = {0};
    ck_assert_int_eq(usp_report_stall(&snap, ranks, 2, usp_strbuf_text(&faults), &text), USP_ERR_COLLECTIVE);
    usp_wait_graph g;
    ck_assert_int_eq(usp_report_wait_graph(&snap, usp_strbuf_text(&text), &g), USP_OK);
    ck_assert_msg(strstr(g.injected, "rank 1: skip at its call 16, all_to_all #16 on a_group_with_a_long_name[15] "
                                     "(core/train/selftest.c:75)") != NULL, "%s", g.injected);
    ck_assert_uint_eq(strlen(g.injected), faults.len - 16 * 2 - 1); /* the indents and the last newline go */
    ck_assert_str_eq(g.title, "deadlock: no rank can run and some are blocked");
    usp_wait_graph_free(&g);
    usp_report_snapshot_free(&snap);
    usp_strbuf_free(&text);
    usp_strbuf_free(&faults);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("comm_decorator");
    TCase *t = tcase_create("core");
    tcase_add_test(t, calls_reach_the_backend_fingerprinted);
    tcase_add_test(t, skip_drops_a_call_and_crash_fails_every_later_call);
    tcase_add_test(t, split_children_are_decorated);
    tcase_add_test(t, records_of_any_backend_make_the_report_and_its_graph);
    tcase_add_test(t, the_wait_graph_keeps_every_injected_fault);
    tcase_add_test(t, faults_that_cannot_apply_are_refused_when_parsed);
    tcase_add_test(t, a_fault_that_changed_nothing_fails_the_check);
    tcase_add_test(t, a_swap_of_two_alike_collectives_fails_the_check);
    tcase_add_test(t, a_fault_on_a_rank_of_another_process_is_not_judged_here);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
