/* Test helpers (see harness.h). */
#include "tests/harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/lazy/lazy_backend.h"
#include "backends/registry/compute_backends.h"

usp_status harness_config(const char *model, int world, int ulysses, int ring, int64_t seq, int64_t batch,
                          usp_train_config *out)
{
    usp_train_defaults(out);
    USP_CHECK(usp_model_config_preset(model, &out->model));
    USP_CHECK(usp_mesh_shape_make(world, ulysses, ring, &out->shape));
    out->data = "passkey", out->seq_len = seq, out->batch = batch, out->steps = 1;
    return USP_OK;
}

/* USP_TEST_BACKEND names a numeric compute backend of the registry (default cpu); anything else ends the
 * test with exit 2 and the registry's reason. */
static const usp_compute_backend *test_backend(void)
{
    const char *name = getenv("USP_TEST_BACKEND");
    if (!name || !*name)
        name = "cpu";
    const usp_compute_backend *b = usp_compute_backend_find(name);
    if (usp_compute_backend_check("USP_TEST_BACKEND=", name) != USP_OK || !b->numeric) {
        fprintf(stderr, "%s\n", b && !b->numeric ? "USP_TEST_BACKEND=meta: the tests compare numbers; meta has none"
                                                  : usp_error_message());
        exit(2);
    }
    return b;
}

sim_backend_factory harness_backend_factory(void) { return test_backend()->create; }

int harness_device_memory(void) { return test_backend()->device_memory; }

usp_status harness_run(int world, usp_rank_main_fn fn, void *arg, const sim_fault *faults, int n_faults,
                       char *report, size_t report_size)
{
    sim_config config = sim_config_default(world);
    config.faults = faults;
    config.n_faults = n_faults;
    config.stack_bytes = (size_t)1 << 20;
    config.make_backend = harness_backend_factory(), config.device_memory = harness_device_memory();
    sim_world *w;
    USP_CHECK(sim_world_create(&config, &w));
    usp_status s = sim_world_run(w, fn, arg);
    if (report)
        snprintf(report, report_size, "%s", s != USP_OK && !*sim_world_report(w) ? usp_error_message()
                                                                                 : sim_world_report(w));
    sim_world_destroy(w);
    return s;
}

usp_status harness_train(const usp_train_config *config, usp_train_result *result, char *report, size_t report_size)
{
    usp_train_result mine = {.passkey_accuracy = -1};
    usp_train_run run = {.config = config, .result = &mine};
    usp_status s = harness_run(config->shape.world, usp_train_rank, &run, NULL, 0, report, report_size);
    if (result)
        *result = mine;
    return s;
}

usp_status harness_train_world(const usp_train_config *config, sim_backend_factory factory, sim_world **out)
{
    sim_config sc = sim_config_default(config->shape.world);
    sc.make_backend = factory ? factory : harness_backend_factory(), sc.trace = 0, sc.stack_bytes = (size_t)1 << 20;
    sc.device_memory = !factory && harness_device_memory();
    USP_CHECK(sim_world_create(&sc, out));
    usp_train_result result = {.passkey_accuracy = -1};
    usp_train_run run = {.config = config, .result = &result};
    usp_status s = sim_world_run(*out, usp_train_rank, &run);
    if (s != USP_OK) {
        sim_world_destroy(*out);
        *out = NULL;
    }
    return s;
}

void harness_record_tensors(void *ctx, const usp_train_record *record)
{
    const harness_tensors *h = ctx;
    float *into = record->kind == USP_TRAIN_RECORD_FIRST_GRADS    ? h->first_grads
                  : record->kind == USP_TRAIN_RECORD_LAST_WEIGHTS ? h->last_weights
                                                                  : NULL;
    if (into)
        memcpy(into, record->values, (size_t)record->n_values * sizeof *into);
}

int64_t harness_param_total(const usp_model_config *m)
{
    usp_param_table t;
    if (usp_param_table_make(m, &t) != USP_OK)
        return -1;
    int64_t n = t.total;
    usp_param_table_free(&t);
    return n;
}

float *harness_train_tensors(const usp_train_config *config, sim_backend_factory factory, usp_status *status)
{
    const size_t n = (size_t)harness_param_total(&config->model);
    float *t = NULL;
    if ((*status = usp_calloc((void **)&t, 2 * n, sizeof *t, "the recorded tensors")) != USP_OK)
        return NULL;
    harness_tensors h = {.first_grads = t, .last_weights = t + n};
    usp_train_config c = *config;
    c.on_record = harness_record_tensors, c.record_ctx = &h, c.record_tensors = 1;
    sim_world *w = NULL;
    *status = harness_train_world(&c, factory, &w);
    sim_world_destroy(w);
    size_t nonzero = 0;
    for (size_t k = 0; k < 2 * n; k++)
        nonzero += t[k] != 0;
    if (*status == USP_OK && nonzero <= n)
        *status = usp_error(USP_ERR_RUNTIME, "the run recorded no gradients or weights");
    return t;
}

size_t harness_bits_differing(const float *a, const float *b, size_t n)
{
    size_t d = 0;
    for (size_t k = 0; k < n; k++)
        d += memcmp(&a[k], &b[k], sizeof *a) != 0;
    return d;
}

long harness_runs_differing(const usp_train_config *a, const usp_train_config *b, size_t *total)
{
    *total = 2 * (size_t)harness_param_total(&a->model);
    usp_status s_a, s_b;
    float *x = harness_train_tensors(a, usp_backend_cpu_create, &s_a);
    float *y = s_a == USP_OK ? harness_train_tensors(b, usp_backend_cpu_create, &s_b) : NULL;
    long d = s_a == USP_OK && s_b == USP_OK ? (long)harness_bits_differing(x, y, *total) : -1;
    free(x), free(y);
    return d;
}

int harness_check_waits(const usp_train_config *config, void (*skip)(unsigned), const harness_wait *waits, int n,
                        const char *label, char *why, size_t why_size)
{
    const size_t floats = 2 * (size_t)harness_param_total(&config->model);
    usp_status s_ref, s_lazy, s;
    float *ref = harness_train_tensors(config, usp_backend_cpu_create, &s_ref);
    float *lazy = harness_train_tensors(config, usp_backend_lazy_create, &s_lazy);
    int rc = 0;
    if (s_ref != USP_OK || s_lazy != USP_OK) {
        snprintf(why, why_size, "%s", usp_error_message());
        rc = -1;
    } else if (harness_bits_differing(ref, lazy, floats) != 0) {
        snprintf(why, why_size, "the lazy backend's tensors are not the cpu backend's");
        rc = -1;
    }
    for (int w = 0; rc == 0 && w < n; w++) {
        skip(waits[w].bit);
        float *got = harness_train_tensors(config, usp_backend_lazy_create, &s); /* early reads may diverge */
        skip(0);
        size_t d = got ? harness_bits_differing(ref, got, floats) : 0;
        printf("%s, without %s: %s, %zu of %zu floats differ\n", label, waits[w].name,
               s == USP_OK ? "the run ends" : usp_error_message(), d, floats);
        if (s == USP_OK || !strstr(usp_error_message(), HARNESS_RACE_FOUND)) {
            snprintf(why, why_size, "without %s the lazy backend's order checker finds no race (%s)", waits[w].name,
                     s == USP_OK ? "the run ends" : usp_error_message());
            rc = -1;
        }
        free(got);
    }
    free(ref), free(lazy);
    return rc;
}

double harness_worst_tensor_error(const usp_param_table *t, const float *a, const float *b, int *which)
{
    double worst = 0;
    *which = 0;
    for (int i = 0; i < t->n; i++) {
        double diff = 0, scale = 1e-30;
        for (int64_t j = 0; j < t->tensors[i].count; j++) {
            int64_t k = t->tensors[i].offset + j;
            diff = fmax(diff, fabs((double)a[k] - b[k]));
            scale = fmax(scale, fabs((double)b[k]));
        }
        if (diff / scale > worst)
            worst = diff / scale, *which = i;
    }
    return worst;
}

usp_status harness_upload(const usp_rank_ctx *ctx, const void *host, size_t bytes, void **dev)
{
    USP_CHECK(usp_buffer_alloc(ctx->backend, bytes, "test", dev));
    if (!host)
        return usp_buffer_zero(ctx->backend, *dev, bytes, ctx->stream);
    return usp_buffer_copy(ctx->backend, *dev, host, bytes, USP_COPY_HOST_TO_DEVICE, ctx->stream);
}

usp_status harness_download(const usp_rank_ctx *ctx, void *host, const void *dev, size_t bytes)
{
    return usp_buffer_download(ctx->backend, host, dev, bytes, ctx->stream);
}

usp_status harness_expect_eq(const usp_rank_ctx *ctx, const char *what, size_t index, double got, double want)
{
    if (got == want)
        return USP_OK;
    return usp_error(USP_ERR_RUNTIME, "rank %d of %d: %s: element %zu is %.17g, expected %.17g", ctx->rank,
                     ctx->world_size, what, index, got, want);
}

char *harness_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = calloc((size_t)n + 1, 1);
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n)
        text[0] = '\0';
    fclose(f);
    if (size)
        *size = (size_t)n;
    return text;
}

int harness_run_command(int (*command)(int argc, char **argv), char **argv, int argc, char *out, size_t size)
{
    char path[] = "/tmp/usp_test_command_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    fflush(stdout);
    int saved = dup(1);
    dup2(fd, 1);
    int code = command(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    ssize_t n = pread(fd, out, size - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return code;
}

/* The JSON fields of the figures of harness_plan_overlap, in its order. */
static const char *const plan_keys[HARNESS_PLAN_FIGURES] = {"step_time_s", "compute_time_s", "comm_hidden_s",
                                                            "comm_exposed_s"};

/* The figures of one `usp plan ... --json` run with `option` set to `mode`: 0, or -1 with why. */
static int plan_figures(int (*plan)(int argc, char **argv), char *const *argv, int argc, const char *option,
                        const char *mode, double figures[HARNESS_PLAN_FIGURES], char *why, size_t why_size)
{
    char *args[48];
    static char out[1 << 16];
    if (argc + 3 > (int)(sizeof args / sizeof *args))
        return snprintf(why, why_size, "%d arguments: more than the harness holds", argc), -1;
    for (int i = 0; i < argc; i++)
        args[i] = argv[i];
    args[argc] = (char *)option, args[argc + 1] = (char *)mode, args[argc + 2] = "--json";
    int code = harness_run_command(plan, args, argc + 3, out, sizeof out);
    json_t *j = code == 0 ? json_loads(out, 0, NULL) : NULL;
    for (int k = 0; j && k < HARNESS_PLAN_FIGURES; k++) {
        const json_t *v = json_object_get(j, plan_keys[k]);
        figures[k] = json_is_number(v) ? json_number_value(v) : NAN;
        if (!json_is_number(v))
            json_decref(j), j = NULL;
    }
    if (!j)
        return snprintf(why, why_size, "plan %s %s: exit %d, or JSON without the figures:\n%s", option, mode, code,
                        out), -1;
    json_decref(j);
    return 0;
}

int harness_plan_overlap(int (*plan)(int argc, char **argv), char *const *argv, int argc, const char *option,
                         const char *label, double off[HARNESS_PLAN_FIGURES], double on[HARNESS_PLAN_FIGURES],
                         char *why, size_t why_size)
{
    if (plan_figures(plan, argv, argc, option, "off", off, why, why_size) != 0 ||
        plan_figures(plan, argv, argc, option, "auto", on, why, why_size) != 0)
        return -1;
    for (int k = 0; k < HARNESS_PLAN_FIGURES; k++)
        printf("%s: %s %.4f off, %.4f auto\n", label, plan_keys[k], off[k], on[k]);
    return 0;
}
