/* backend_conformance: every case of the op-conformance table
 * (tests/conformance_cases.c) on every backend built, against the cpu backend.
 *
 * Each case runs on a fresh cpu backend (the reference) and on a fresh backend
 * under test, with the same seeded inputs. A numeric backend must give every
 * output within the case's tolerance of the reference's. A shapes-only
 * backend (meta) computes nothing, so its numbers are not compared; instead the
 * costs it reports (op, flops, bytes, in order) and its memory accounting
 * (bytes in use after the case, peak) must equal the reference's exactly,
 * since the planner takes them as the real run's. Costs are compared for every
 * backend. The cpu backend is also under test against itself: that proves the
 * table deterministic and exercises the numeric comparison where no other
 * numeric backend is built.
 *
 * Coverage: the slots listed in tests/conformance.h are checked at compile
 * time to be exactly usp_backend_i's, each case names the slots it is about,
 * every_slot_of_usp_backend_i_has_a_case fails for a slot no case names, and
 * a case that names an op slot must report that op's cost on the reference.
 *
 * `--backend NAME` runs one backend; a backend this build lacks (cuda without
 * nvcc) prints why and exits 77, which ctest's SKIP_RETURN_CODE reports as
 * skipped, not passed. With USP_CONFORMANCE_ERRORS set, every compared output's
 * error is printed (in bf16 ulps too): the figures a tolerance is sized from. */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/registry/compute_backends.h"
#include "tests/check_main.h"
#include "tests/conformance.h"

/* CONFORMANCE_SLOTS is usp_backend_i's list of slots: each one where the list puts it, and no other. */
#define SLOT_IS_AT(slot, op)                                                                                    \
    _Static_assert(offsetof(usp_backend_i, slot) ==                                                             \
                       offsetof(usp_backend_i, alloc) + SLOT_##slot * sizeof(void (*)(void)),                   \
                   "tests/conformance.h lists slot " #slot " out of usp_backend_i's order");
CONFORMANCE_SLOTS(SLOT_IS_AT)
#undef SLOT_IS_AT
_Static_assert(sizeof(usp_backend_i) ==
                   offsetof(usp_backend_i, alloc) + SLOT_INTERFACE_COUNT * sizeof(void (*)(void)),
               "usp_backend_i has a slot that CONFORMANCE_SLOTS (tests/conformance.h) lacks: list it and give it a "
               "case in tests/conformance_cases.c");

/* The name of slot s (an interface slot, an op kind or a map function) and the op its cases report (NULL:
 * none of its own; the map kind reports its functions' names). */
static const char *slot_name(int s)
{
#define SLOT_NAME(slot, op) #slot,
    static const char *const interface[] = {CONFORMANCE_SLOTS(SLOT_NAME)};
#undef SLOT_NAME
    if (s < SLOT_INTERFACE_COUNT)
        return interface[s];
    if (s < SLOT_INTERFACE_COUNT + USP_OP_KIND_COUNT)
        return usp_op_kind_name((usp_op_kind)(s - SLOT_INTERFACE_COUNT));
    return usp_map_fn_name((usp_map_fn)(s - SLOT_INTERFACE_COUNT - USP_OP_KIND_COUNT));
}

static const char *slot_op(int s)
{
#define SLOT_OP(slot, op) op,
    static const char *const interface[] = {CONFORMANCE_SLOTS(SLOT_OP)};
#undef SLOT_OP
    if (s < SLOT_INTERFACE_COUNT)
        return interface[s];
    if (s == SLOT_map)
        return NULL;
    usp_op op = {.kind = USP_OP_MAP};
    if (s < SLOT_INTERFACE_COUNT + USP_OP_KIND_COUNT)
        op.kind = (usp_op_kind)(s - SLOT_INTERFACE_COUNT);
    else
        op.p.map.fn = (usp_map_fn)(s - SLOT_INTERFACE_COUNT - USP_OP_KIND_COUNT);
    return usp_op_cost_name(&op);
}

/* ---- the backends: the compute backend registry (backends/registry/compute_backends.h) ---- */

#define BACKENDS_MAX 16

/* The backends of this run (every built one that runs here, or the one named by --backend). A numeric
 * backend's outputs are compared within tolerance, and it runs the bf16 cases too (every numeric backend
 * stores bf16); a shapes-only one's (meta) costs and memory are compared exactly. */
static const usp_compute_backend *under_test[BACKENDS_MAX];
static int n_under_test;

/* ---- what a case calls (tests/conformance.h) ---------------------------------- */

#define CONFORMANCE_SEED 0x5eed5eedu

void conformance_ok(conformance_run *r, usp_status s, const char *call)
{
    ck_assert_msg(s == USP_OK, "case \"%s\" on %s: %s returned %s: %s", r->case_name, usp_backend_name(r->be), call,
                  usp_status_name(s), usp_error_message());
}

float conformance_rnd(conformance_run *r) /* splitmix64: the same inputs on every machine */
{
    uint64_t z = (r->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

void *conformance_staged(conformance_run *r, size_t bytes)
{
    ck_assert_int_lt(r->n_staged, CONFORMANCE_MAX_STAGED);
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    return r->staged[r->n_staged++] = p;
}

float *conformance_host(conformance_run *r, int64_t n, float scale)
{
    float *x = conformance_staged(r, (size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * conformance_rnd(r);
    return x;
}

static void *upload_bytes(conformance_run *r, const void *values, size_t bytes)
{
    void *dev;
    CONFORMANCE_OK(r, usp_buffer_alloc(r->be, bytes, "conformance", &dev));
    CONFORMANCE_OK(r, usp_buffer_copy(r->be, dev, values, bytes, USP_COPY_HOST_TO_DEVICE, NULL));
    return dev;
}

float *conformance_upload(conformance_run *r, const float *values, int64_t n)
{
    return upload_bytes(r, values, (size_t)n * sizeof *values);
}

float *conformance_input(conformance_run *r, int64_t n, float scale)
{
    return conformance_upload(r, conformance_host(r, n, scale), n);
}

float *conformance_output_buffer(conformance_run *r, int64_t n)
{
    float *x = conformance_staged(r, (size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = NAN;
    return conformance_upload(r, x, n);
}

int32_t *conformance_ids(conformance_run *r, const int32_t *values, int64_t n)
{
    return upload_bytes(r, values, (size_t)n * sizeof *values);
}

static conformance_output *new_output(conformance_run *r, const char *name)
{
    ck_assert_int_lt(r->n_out, CONFORMANCE_MAX_OUTPUTS);
    conformance_output *o = &r->out[r->n_out++];
    *o = (conformance_output){.name = name};
    return o;
}

float *conformance_host_output(conformance_run *r, const char *name, int64_t n)
{
    conformance_output *o = new_output(r, name);
    o->n = n;
    o->host = malloc((size_t)n * sizeof *o->host + 1);
    ck_assert_ptr_nonnull(o->host);
    for (int64_t i = 0; i < n; i++) /* what a backend that never copies leaves (meta: not compared) */
        o->host[i] = NAN;
    return o->host;
}

const float *conformance_download(conformance_run *r, const char *name, const float *dev, int64_t n)
{
    float *host = conformance_host_output(r, name, n);
    CONFORMANCE_OK(r, usp_buffer_copy(r->be, host, dev, (size_t)n * sizeof *host, USP_COPY_DEVICE_TO_HOST, NULL));
    return host;
}

void conformance_scalar(conformance_run *r, const char *name, double value)
{
    conformance_output *o = new_output(r, name);
    o->n = 1;
    o->scalar = value;
}

/* ---- running a case ---------------------------------------------------------------- */

/* A case's run on one backend: its outputs, the costs reported, its memory. */
typedef struct case_result {
    conformance_run run;
    usp_op_cost *costs;
    int n_costs, cap_costs;
    size_t in_use, peak;
} case_result;

static void log_cost(void *ctx, const usp_op_cost *cost)
{
    case_result *res = ctx;
    if (res->n_costs == res->cap_costs) {
        res->cap_costs = res->cap_costs ? 2 * res->cap_costs : 64;
        res->costs = realloc(res->costs, (size_t)res->cap_costs * sizeof *res->costs);
        ck_assert_ptr_nonnull(res->costs);
    }
    res->costs[res->n_costs++] = *cost; /* cost->op: a string literal of the wrapper */
}

/* The case on a fresh backend of b; bf16 cases in bf16 storage where `bf16` (the reference keeps fp32). */
static void run_case(const conformance_case *c, const usp_compute_backend *b, int bf16, case_result *res)
{
    *res = (case_result){0};
    usp_backend_t *be;
    ck_assert_msg(b->create(&be) == USP_OK, "creating the %s backend: %s", b->name, usp_error_message());
    res->run = (conformance_run){.be = be, .case_name = c->name, .rng = CONFORMANCE_SEED,
                                 .storage = c->bf16 && bf16 ? USP_BF16 : USP_F32};
    usp_backend_set_cost_sink(be, log_cost, res);
    c->run(&res->run, c->params);
    /* the contract: host copies are readable only once the stream is done */
    CONFORMANCE_OK(&res->run, usp_backend_synchronize(be, NULL));
    res->in_use = usp_backend_bytes_in_use(be);
    res->peak = usp_backend_peak_bytes(be);
    usp_backend_destroy(be);
    for (int i = 0; i < res->run.n_staged; i++)
        free(res->run.staged[i]);
    res->run.n_staged = 0;
}

static void free_result(case_result *res)
{
    for (int i = 0; i < res->run.n_out; i++)
        free(res->run.out[i].host);
    free(res->costs);
}

/* max |got - ref| / max |ref| over the elements whose reference is finite (all
 * zero: the absolute error); where the reference is not finite (the lse of a
 * row that sees no key is -inf) got must be the same value, and a non-finite
 * got where the reference is finite is an infinite error. *worst: its index. */
static double conformance_error(const float *got, const float *ref, int64_t n, int64_t *worst)
{
    double max_ref = 0.0, err = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(ref[i]))
            max_ref = fmax(max_ref, fabs((double)ref[i]));
    const double denom = max_ref > 0.0 ? max_ref : 1.0;
    *worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e;
        if (!isfinite(ref[i]))
            e = (isnan(ref[i]) ? isnan(got[i]) : got[i] == ref[i]) ? 0.0 : INFINITY;
        else
            e = isfinite(got[i]) ? fabs((double)got[i] - (double)ref[i]) / denom : INFINITY;
        if (e > err)
            err = e, *worst = i;
    }
    return err;
}

/* The bound for one output: a bf16 case's tol_f32 for what the backend under test kept in fp32. */
static double output_tolerance(const conformance_case *c, const conformance_output *got)
{
    return c->bf16 && c->tol_f32 > 0.0 && !got->stored ? c->tol_f32 : c->tol;
}

/* USP_CONFORMANCE_ERRORS=1: every compared output's error, in bf16 ulps too, to size a tolerance by. */
static void print_error(const conformance_case *c, const char *backend, const conformance_output *g, double e,
                        double tol)
{
    static int print = -1;
    if (print < 0)
        print = getenv("USP_CONFORMANCE_ERRORS") != NULL;
    if (print)
        printf("conformance error: %-58s %-5s %-10s %-4s %.3g (%.3f bf16 ulps), tolerance %.3g\n", c->name,
               backend, g->name, g->stored ? "bf16" : "f32", e, e / BF16_ULP, tol);
}

/* FNV-1a over n bytes, continued from h. */
static uint64_t fnv1a(uint64_t h, const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* USP_CONFORMANCE_DIGEST=1: a hash of every output's bits and of the costs reported (op, flops, bytes,
 * outputs, dtype), per case and backend, so that two builds (before and after a change that must not
 * move a bit) are compared by diffing what they print. */
static void print_digest(const conformance_case *c, const char *backend, const case_result *got)
{
    static int print = -1;
    if (print < 0)
        print = getenv("USP_CONFORMANCE_DIGEST") != NULL;
    if (!print)
        return;
    for (int k = 0; k < got->run.n_out; k++) {
        const conformance_output *g = &got->run.out[k];
        uint64_t h = 0xcbf29ce484222325ull;
        h = g->host ? fnv1a(h, g->host, (size_t)g->n * sizeof *g->host) : fnv1a(h, &g->scalar, sizeof g->scalar);
        printf("conformance digest: %-58s %-5s %-10s %016llx\n", c->name, backend, g->name, (unsigned long long)h);
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < got->n_costs; i++) {
        const usp_op_cost *o = &got->costs[i];
        h = fnv1a(h, o->op, strlen(o->op));
        h = fnv1a(h, &o->flops, sizeof o->flops);
        h = fnv1a(h, &o->bytes, sizeof o->bytes);
        h = fnv1a(h, &o->outputs, sizeof o->outputs);
        h = fnv1a(h, &o->dtype, sizeof o->dtype);
    }
    printf("conformance digest: %-58s %-5s %-10s %016llx (%d ops)\n", c->name, backend, "costs",
           (unsigned long long)h, got->n_costs);
    fflush(stdout);
}

static void expect_outputs_match(const conformance_case *c, const case_result *got, const case_result *ref,
                                 const char *backend)
{
    ck_assert_int_eq(got->run.n_out, ref->run.n_out);
    for (int k = 0; k < ref->run.n_out; k++) {
        const conformance_output *g = &got->run.out[k], *w = &ref->run.out[k];
        const double tol = output_tolerance(c, g);
        if (!w->host) {
            const double e = fabs(g->scalar - w->scalar) / (w->scalar != 0.0 ? fabs(w->scalar) : 1.0);
            print_error(c, backend, g, e, tol);
            ck_assert_msg(e <= tol,
                          "case \"%s\" on %s: %s = %.17g, the cpu backend's %.17g: error %g > tolerance %g", c->name,
                          backend, w->name, g->scalar, w->scalar, e, tol);
            continue;
        }
        if (tol == 0.0) { /* bitwise: copies and single correctly rounded operations */
            for (int64_t i = 0; i < w->n; i++)
                ck_assert_msg(memcmp(&g->host[i], &w->host[i], sizeof(float)) == 0,
                              "case \"%s\" on %s: %s[%lld] = %a, the cpu backend's %a (bitwise equal expected)",
                              c->name, backend, w->name, (long long)i, (double)g->host[i], (double)w->host[i]);
            print_error(c, backend, g, 0.0, tol);
            continue;
        }
        int64_t at;
        const double e = conformance_error(g->host, w->host, w->n, &at);
        print_error(c, backend, g, e, tol);
        ck_assert_msg(e <= tol,
                      "case \"%s\" on %s: %s error %g > tolerance %g (relative to max |cpu|), worst at [%lld]: %.9g, "
                      "the cpu backend's %.9g",
                      c->name, backend, w->name, e, tol, (long long)at, (double)g->host[at], (double)w->host[at]);
    }
}

static void expect_costs_match(const conformance_case *c, const case_result *got, const case_result *ref,
                               const char *backend)
{
    ck_assert_msg(got->n_costs == ref->n_costs, "case \"%s\" on %s: %d ops reported, the cpu backend %d", c->name,
                  backend, got->n_costs, ref->n_costs);
    for (int i = 0; i < ref->n_costs; i++) {
        const usp_op_cost *g = &got->costs[i], *w = &ref->costs[i];
        ck_assert_msg(strcmp(g->op, w->op) == 0 && g->flops == w->flops && g->bytes == w->bytes,
                      "case \"%s\" on %s: op %d reported {%s, %.17g flops, %.17g bytes}, the cpu backend {%s, %.17g, "
                      "%.17g}", c->name, backend, i, g->op, g->flops, g->bytes, w->op, w->flops, w->bytes);
    }
}

/* A case that names an op slot calls it: its cost shows in the reference's report. */
static void expect_named_ops_ran(const conformance_case *c, const case_result *ref)
{
    for (int s = 0; s < SLOT_COUNT; s++) {
        if (!(c->slots >> s & 1) || !slot_op(s))
            continue;
        int seen = 0;
        for (int i = 0; i < ref->n_costs && !seen; i++)
            seen = strcmp(ref->costs[i].op, slot_op(s)) == 0;
        ck_assert_msg(seen, "case \"%s\" names slot %s but reported no \"%s\" op", c->name, slot_name(s),
                      slot_op(s));
    }
}

#define ALL_CASES                                                                                         \
    (conformance_case_count + conformance_layer_case_count + conformance_bf16_case_count +                \
     conformance_bf16_layer_case_count)

static const conformance_case *case_at(int i)
{
    const struct {
        const conformance_case *cases;
        int count;
    } tables[] = {{conformance_cases, conformance_case_count},
                  {conformance_layer_cases, conformance_layer_case_count},
                  {conformance_bf16_cases, conformance_bf16_case_count},
                  {conformance_bf16_layer_cases, conformance_bf16_layer_case_count}};
    for (size_t t = 0; t < sizeof tables / sizeof *tables; i -= tables[t++].count)
        if (i < tables[t].count)
            return &tables[t].cases[i];
    ck_abort_msg("case %d is past the tables' end", i);
    return NULL;
}

/* _i: backend under_test[_i / ALL_CASES], case _i % ALL_CASES. */
START_TEST(backend_matches_the_cpu_backend)
{
    const usp_compute_backend *b = under_test[_i / ALL_CASES];
    const conformance_case *c = case_at(_i % ALL_CASES);
    if (c->bf16 && !b->numeric) /* nothing to compare: the same fp32 run as the reference's */
        return;
    case_result ref, got;
    run_case(c, usp_compute_backend_find("cpu"), 0, &ref);
    if (!c->bf16)
        expect_named_ops_ran(c, &ref);
    run_case(c, b, b->numeric, &got);
    print_digest(c, b->name, &got);
    if (c->bf16) /* the reference's conversions are copies: the named ops show on the backend under test */
        expect_named_ops_ran(c, &got);
    else
        expect_costs_match(c, &got, &ref, b->name);
    if (b->numeric) {
        expect_outputs_match(c, &got, &ref, b->name);
    } else {
        ck_assert_msg(got.in_use == ref.in_use && got.peak == ref.peak,
                      "case \"%s\" on %s: %zu bytes in use and a peak of %zu, the cpu backend %zu and %zu", c->name,
                      b->name, got.in_use, got.peak, ref.in_use, ref.peak);
    }
    free_result(&ref);
    free_result(&got);
}
END_TEST

START_TEST(every_slot_of_usp_backend_i_has_a_case)
{
    uint64_t ticked = 0;
    for (int i = 0; i < ALL_CASES; i++)
        ticked |= case_at(i)->slots;
    char missing[1024] = "";
    size_t len = 0;
    for (int s = 0; s < SLOT_COUNT; s++)
        if (!(ticked >> s & 1))
            len += (size_t)snprintf(missing + len, sizeof missing - len, " %s", slot_name(s));
    ck_assert_msg(len == 0, "slots of usp_backend_i, op kinds and map functions that no case of the conformance "
                  "tables names:%s", missing);
}
END_TEST

/* _i: backend under_test[_i / conformance_refusal_count], refusal case _i % conformance_refusal_count.
 * Where the backend stores bf16 (meta, cuda) the wrong dtype is refused by the wrapper, with a
 * message that names it, before any cost is reported; on one that stores fp32 only (cpu, lazy)
 * the wrong buffer cannot be made (usp_buffer_alloc_as refuses it), so only the f32 call runs. */
START_TEST(a_wrong_dtype_is_refused)
{
    const usp_compute_backend *b = under_test[_i / conformance_refusal_count];
    const conformance_refusal *c = &conformance_refusals[_i % conformance_refusal_count];
    usp_backend_t *be;
    ck_assert_int_eq(b->create(&be), USP_OK);
    usp_status s = c->call(be, USP_F32);
    ck_assert_msg(s == USP_OK, "%s with an f32 %s on %s: %s", c->op, c->operand, b->name, usp_error_message());
    if (!usp_backend_stores_bf16(be)) {
        void *p;
        ck_assert_int_eq(usp_buffer_alloc_as(be, 4, c->wrong, "conformance", &p), USP_ERR_CONFIG);
        usp_backend_destroy(be);
        return;
    }
    ck_assert_int_eq(usp_backend_synchronize(be, NULL), USP_OK);
    const double flops = usp_backend_flops(be);
    s = c->call(be, c->wrong);
    const char *msg = usp_error_message();
    ck_assert_msg(s == USP_ERR_CONFIG, "%s with a %s %s on %s returned %s: %s", c->op, usp_dtype_name(c->wrong),
                  c->operand, b->name, usp_status_name(s), msg);
    ck_assert_msg(strstr(msg, c->op) && strstr(msg, c->operand) && strstr(msg, usp_dtype_name(c->wrong)),
                  "the refusal of %s's %s %s on %s does not name them: %s", c->op, usp_dtype_name(c->wrong),
                  c->operand, b->name, msg);
    ck_assert_msg(usp_backend_flops(be) == flops, "%s on %s reported its cost before refusing its %s %s", c->op,
                  b->name, usp_dtype_name(c->wrong), c->operand);
    usp_backend_destroy(be);
}
END_TEST

/* The comparison can fail: an error just above the tolerance, a lost -inf, a NaN; an fp32 output of a bf16 case
 * is not excused by the bf16 bound. */
START_TEST(the_comparison_rejects_what_it_should)
{
    const float ref[4] = {2.0f, -1.0f, -INFINITY, 0.5f};
    float got[4] = {2.0f, -1.0f, -INFINITY, 0.5f + 2.0f * 1e-5f * 1.01f};
    int64_t at;
    ck_assert_double_gt(conformance_error(got, ref, 4, &at), 1e-5);
    ck_assert_int_eq(at, 3);
    got[3] = 0.5f + 2.0f * 1e-5f * 0.9f;
    ck_assert_double_le(conformance_error(got, ref, 4, &at), 1e-5);
    got[2] = -1e30f;
    ck_assert(isinf(conformance_error(got, ref, 4, &at)) && at == 2);
    got[2] = -INFINITY, got[0] = NAN;
    ck_assert(isinf(conformance_error(got, ref, 4, &at)) && at == 0);
    /* a bf16 case holds what the backend under test stored to tol, what it kept in fp32 to tol_f32 */
    const conformance_case bf16 = {.tol = BF16_ULP, .bf16 = 1, .tol_f32 = 1e-5}, f32 = {.tol = 1e-6};
    const conformance_output stored = {.stored = 1}, kept = {.stored = 0};
    ck_assert(output_tolerance(&bf16, &stored) == BF16_ULP && output_tolerance(&bf16, &kept) == 1e-5);
    ck_assert(output_tolerance(&f32, &kept) == 1e-6);
}
END_TEST

/* Whether b runs here; when not, says why (not built, or no GPU), prefixed by `who`. */
static int usable(const usp_compute_backend *b, const char *who)
{
    char why[256];
    if (!b->create)
        printf("%s: skipped: the %s backend is not built (it needs %s)\n", who, b->name, b->needs);
    else if (b->runs_here && !b->runs_here(why, sizeof why))
        printf("%s: skipped: the %s backend is built, but cannot run here (%s)\n", who, b->name, why);
    else
        return 1;
    return 0;
}

/* --backend NAME: selects it; returns 0, or the exit code (77 when it is not built or cannot run here). */
static int select_backends(int argc, char **argv)
{
    if (argc == 1) {
        for (int i = 0; i < usp_compute_backend_count() && n_under_test < BACKENDS_MAX; i++)
            if (usable(usp_compute_backend_at(i), "backend_conformance"))
                under_test[n_under_test++] = usp_compute_backend_at(i);
        return 0;
    }
    if (argc != 3 || strcmp(argv[1], "--backend") != 0) {
        fprintf(stderr, "usage: %s [--backend NAME]\n", argv[0]);
        return 2;
    }
    const usp_compute_backend *b = usp_compute_backend_find(argv[2]);
    if (!b) {
        char known[512];
        usp_compute_backends_describe(known, sizeof known);
        fprintf(stderr, "%s: no backend named \"%s\"; the compute backends are %s\n", argv[0], argv[2], known);
        return 2;
    }
    char who[64];
    snprintf(who, sizeof who, "backend_conformance_%s", b->name);
    if (!usable(b, who))
        return 77;
    under_test[n_under_test++] = b;
    return 0;
}

int main(int argc, char **argv)
{
    const int code = select_backends(argc, argv);
    if (code != 0)
        return code;
    Suite *s = suite_create("backend_conformance");
    TCase *t = tcase_create("table");
    tcase_add_test(t, every_slot_of_usp_backend_i_has_a_case);
    tcase_add_test(t, the_comparison_rejects_what_it_should);
    suite_add_tcase(s, t);
    for (int b = 0; b < n_under_test; b++) {
        TCase *tb = tcase_create(under_test[b]->name);
        tcase_add_loop_test(tb, backend_matches_the_cpu_backend, b * ALL_CASES, (b + 1) * ALL_CASES);
        tcase_add_loop_test(tb, a_wrong_dtype_is_refused, b * conformance_refusal_count,
                            (b + 1) * conformance_refusal_count);
        suite_add_tcase(s, tb);
    }
    return check_main_run(s);
}
