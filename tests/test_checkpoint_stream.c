/* Checkpoints that stream (issue 11, item 4; core/checkpoint/checkpoint.h): a save from
 * a parameter store on 1, 3 or 4 simulated ranks, at every ZeRO stage, writes
 * the bytes the whole-array save of the previous code wrote (hashes taken from
 * it); a load into any world and stage gives back the saved arrays bitwise;
 * neither holds more host memory than one bucket (closed form from the
 * table); a NaN in one rank's shard, a failed write on rank 0 or a damaged
 * tensor only one rank reads fails every rank with the same status and
 * message and leaves the old checkpoint; a BF16 Hugging Face directory loads
 * into any world as into one rank. (A run resumed at another stage or world:
 * tests/test_train.c.) */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/safetensors.h"
#include "tests/check_main.h"
#include "tests/harness.h"

static char scratch[] = "/tmp/usp_stream_XXXXXX";

enum { MAX_WORLD = 4, N_MODELS = 3 };

/* 0: GPT-2 (Conv1D weights stored transposed), 1: Llama (fused q|k|v and gate|up), 2: Llama untied (lm_head). */
static usp_model_config model_of(int which, int n_layer)
{
    usp_model_config c;
    ck_assert_int_eq(usp_model_config_preset(which == 0 ? "gpt2-124m" : "tiny", &c), USP_OK);
    c.vocab = 128, c.n_layer = n_layer, c.d_model = 32, c.n_head = 4, c.max_seq = 64;
    c.n_kv_head = which == 0 ? 4 : 2, c.d_ff = which == 0 ? 128 : 48, c.tied_embeddings = which != 2;
    snprintf(c.name, sizeof c.name, "test-%s", which == 0 ? "gpt2" : "llama");
    return c;
}

/* Weights, adam_m, adam_v (3 x total floats) from integers alone, so the hashes hold with any libm. */
static float *state_make(const usp_param_table *t)
{
    size_t n = (size_t)t->total;
    float *a = malloc(3 * n * sizeof *a);
    ck_assert_ptr_nonnull(a);
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)((int)((i * 2654435761u) % 4001u) - 2000) * 1e-4f;
        a[n + i] = (float)((int)(i % 2001) - 1000) * 1e-6f;
        a[2 * n + i] = (float)(i % 997) * 1e-8f;
    }
    return a;
}

/* Size and FNV-1a hash of model.safetensors, config.json and optimizer.safetensors as the save of
 * commit de7deb6 (whole host arrays, before streaming) wrote them for state_make at step 42, seed 7. */
static const struct {
    long size;
    unsigned long long fnv;
} golden[N_MODELS][3] = {
    {{180536, 0xbfa942864bb85a83ull}, {432, 0x1deae2175da18584ull}, {354784, 0x9f113c753681e86aull}},
    {{112376, 0xb4c75ecf63feaeabull}, {583, 0x589bc2e544d23357ull}, {219104, 0x0943a1caeee86674ull}},
    {{128840, 0xa35987fae189e73aull}, {584, 0x9c24a1e16f6c5892ull}, {251872, 0x71837c9a2e4cd803ull}},
};
static const char *const files[3] = {"model.safetensors", "config.json", "optimizer.safetensors"};

static unsigned long long fnv1a(const char *data, size_t n)
{
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)data[i]) * 1099511628211ull;
    return h;
}

/* One streamed save or load on every rank of a simulated world. */
typedef struct stream_run {
    const usp_model_config *model;
    const usp_param_table *table;
    int world, zero, load;
    const char *dir;
    const float *state;  /* save: what every rank puts into its store first */
    float *loaded;       /* load: the three arrays read back, on rank 0 */
    int64_t step[MAX_WORLD];
    int has_optimizer[MAX_WORLD];
    usp_status status[MAX_WORLD];
    char message[MAX_WORLD][1024];
    size_t peak[MAX_WORLD]; /* usp_checkpoint_stats.host_bytes_peak */
} stream_run;

static usp_status stream_rank(const usp_rank_ctx *ctx, void *arg)
{
    stream_run *r = arg;
    const int64_t n = r->table->total;
    usp_param_store_config pc = {.backend = ctx->backend, .stream = ctx->stream, .table = r->table,
                                 .n_layer = (int)r->model->n_layer, .zero_stage = r->zero, .world = ctx->world,
                                 .optimizer = 1};
    usp_param_store *store;
    USP_CHECK(usp_param_store_create(&pc, &store));
    usp_checkpoint_stats stats = {0};
    usp_status s = USP_OK;
    float *back = NULL;
    if (!r->load) {
        for (int a = 0; a < 3 && s == USP_OK; a++)
            s = usp_param_store_write(store, (usp_param_array)a, r->state + a * n);
        if (s == USP_OK)
            s = usp_checkpoint_save_store(r->dir, r->model, r->table, store, ctx, 42, 7, 1, &stats);
    } else {
        s = usp_checkpoint_load_store(r->dir, r->model, r->table, store, ctx, &r->step[ctx->rank],
                                      &r->has_optimizer[ctx->rank], &stats);
        back = ctx->rank == 0 ? r->loaded : malloc(3 * (size_t)n * sizeof *back); /* the test's own copy */
        for (int a = 0; a < 3 && s == USP_OK; a++) /* a collective when sharded: every rank joins */
            s = usp_param_store_read(store, (usp_param_array)a, back + a * n);
        if (ctx->rank != 0)
            free(back);
    }
    r->status[ctx->rank] = s;
    snprintf(r->message[ctx->rank], sizeof r->message[0], "%s", s == USP_OK ? "" : usp_error_message());
    r->peak[ctx->rank] = stats.host_bytes_peak;
    usp_param_store_destroy(store);
    return USP_OK; /* each rank's status is in r: the run itself fails only on a deadlock */
}

/* Runs r on its world, with the save hook `hook` set only while it runs (NULL: none). */
static void run_stream_hooked(stream_run *r, usp_checkpoint_save_hook hook)
{
    char report[4096];
    usp_checkpoint_set_save_hook(hook, NULL);
    usp_status s = harness_run(r->world, stream_rank, r, NULL, 0, report, sizeof report);
    usp_checkpoint_set_save_hook(NULL, NULL);
    ck_assert_msg(s == USP_OK, "W=%d ZeRO %d: the run failed (a rank left waiting?): %s", r->world, r->zero, report);
}

static void run_stream(stream_run *r)
{
    run_stream_hooked(r, NULL);
}

/* Every rank returned `want` with rank 0's message, which names `needle`. */
static void assert_agreed(const stream_run *r, usp_status want, const char *needle)
{
    for (int k = 0; k < r->world; k++) {
        ck_assert_msg(r->status[k] == want, "W=%d ZeRO %d: rank %d returned %d, expected %d: %s", r->world, r->zero,
                      k, (int)r->status[k], (int)want, r->message[k]);
        ck_assert_msg(strcmp(r->message[k], r->message[0]) == 0, "rank %d says \"%s\", rank 0 \"%s\"", k,
                      r->message[k], r->message[0]);
    }
    ck_assert_msg(strstr(r->message[0], needle), "the message does not name %s: %s", needle, r->message[0]);
}

/* The largest bucket (embeddings, one layer, or the head), its largest shard over W ranks, and the
 * longest row a transposed tensor has in the file (GPT-2's Conv1D weights: our rows), in elements. */
typedef struct bounds {
    int64_t bucket, shard, row;
} bounds;

static bounds bounds_of(const usp_model_config *c, const usp_param_table *t, int world)
{
    bounds b = {0};
    int64_t len[64] = {0}; /* per bucket, numbered as param_store.h numbers them */
    for (int i = 0; i < t->n; i++) {
        const usp_param_tensor *p = &t->tensors[i];
        int k = p->layer >= 0 ? p->layer + 1 : (p->kind == USP_P_WTE || p->kind == USP_P_WPE) ? 0 : (int)c->n_layer + 1;
        len[k] += p->count;
        int transposed = c->family == USP_FAMILY_GPT2 && p->ndim == 2 && p->layer >= 0;
        if (transposed && p->shape[0] > b.row)
            b.row = p->shape[0];
    }
    for (int k = 0; k < c->n_layer + 2; k++) {
        b.bucket = len[k] > b.bucket ? len[k] : b.bucket;
        int64_t shard = (len[k] + world - 1) / world;
        b.shard = shard > b.shard ? shard : b.shard;
    }
    return b;
}

/* The files in dir have the golden sizes and hashes of model m. */
static void assert_golden(const char *dir, int m, const char *what)
{
    for (int f = 0; f < 3; f++) {
        char path[512];
        size_t size = 0;
        snprintf(path, sizeof path, "%s/%s", dir, files[f]);
        char *data = harness_read_file(path, &size);
        ck_assert_msg(data, "%s: %s was not written", what, path);
        unsigned long long h = fnv1a(data, size);
        free(data);
        ck_assert_msg((long)size == golden[m][f].size && h == golden[m][f].fnv,
                      "%s: %s has %zu bytes, hash 0x%016llx; the whole-array save wrote %ld bytes, 0x%016llx", what,
                      path, size, h, golden[m][f].size, golden[m][f].fnv);
    }
}

/* (world, ZeRO stage) of the stores; world 0: the host-array save of one rank. */
static const int layouts[][2] = {{0, 0}, {1, 0}, {4, 0}, {4, 1}, {4, 2}, {4, 3}, {3, 3}};
enum { N_LAYOUTS = sizeof layouts / sizeof layouts[0] };

/* _i: model x layout. On every rank but 0 a save holds no host memory; rank 0 holds one bucket and a row. */
START_TEST(a_save_from_any_world_and_stage_is_the_bytes_of_the_whole_array_save)
{
    int m = _i / N_LAYOUTS, world = layouts[_i % N_LAYOUTS][0], zero = layouts[_i % N_LAYOUTS][1];
    usp_model_config model = model_of(m, 3);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    float *state = state_make(&table);
    char dir[256], what[64];
    snprintf(dir, sizeof dir, "%s/save_%d", scratch, _i);
    snprintf(what, sizeof what, "model %d, W=%d ZeRO %d", m, world, zero);
    const int64_t n = table.total;
    if (world == 0) {
        ck_assert_int_eq(usp_checkpoint_save(dir, &model, &table, state, state + n, state + 2 * n, 42, 7), USP_OK);
    } else {
        stream_run r = {.model = &model, .table = &table, .world = world, .zero = zero, .dir = dir, .state = state};
        run_stream(&r);
        assert_agreed(&r, USP_OK, "");
        bounds b = bounds_of(&model, &table, world);
        size_t bound = (size_t)(b.bucket + b.row) * sizeof(float);
        ck_assert_msg(r.peak[0] <= bound, "%s: rank 0 held %zu host bytes, over one bucket and a row (%zu)", what,
                      r.peak[0], bound);
        for (int k = 1; k < world; k++)
            ck_assert_msg(r.peak[k] == 0, "%s: rank %d held %zu host bytes; only rank 0 writes", what, k, r.peak[k]);
    }
    assert_golden(dir, m, what);
    free(state);
    usp_param_table_free(&table);
}
END_TEST

/* _i: model x layout: the arrays a store holds after the load are the saved ones, bit for bit, and
 * each rank held at most one bucket (stages 0-2: the weights are whole) or one shard (3), and a row. */
START_TEST(a_load_into_any_world_and_stage_gives_the_saved_arrays)
{
    int m = _i / N_LAYOUTS, world = layouts[_i % N_LAYOUTS][0], zero = layouts[_i % N_LAYOUTS][1];
    if (world == 0)
        world = 2, zero = 2; /* the host save is the source: load it into a ZeRO 2 pair */
    usp_model_config model = model_of(m, 3);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    float *state = state_make(&table), *loaded = calloc(3 * (size_t)table.total, sizeof *loaded);
    ck_assert_ptr_nonnull(loaded);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/load_%d", scratch, _i);
    const int64_t n = table.total;
    ck_assert_int_eq(usp_checkpoint_save(dir, &model, &table, state, state + n, state + 2 * n, 42, 7), USP_OK);
    stream_run r = {.model = &model, .table = &table, .world = world, .zero = zero, .load = 1, .dir = dir,
                    .loaded = loaded};
    run_stream(&r);
    assert_agreed(&r, USP_OK, "");
    ck_assert_msg(memcmp(loaded, state, 3 * (size_t)n * sizeof *state) == 0,
                  "model %d, W=%d ZeRO %d: the arrays loaded are not the saved ones", m, world, zero);
    bounds b = bounds_of(&model, &table, world);
    size_t bound = (size_t)((zero >= 3 ? b.shard : b.bucket) + b.row) * sizeof(float);
    for (int k = 0; k < world; k++) {
        ck_assert_int_eq(r.step[k], 42);
        ck_assert_int_eq(r.has_optimizer[k], 1);
        ck_assert_msg(r.peak[k] <= bound, "model %d, W=%d ZeRO %d: rank %d held %zu host bytes, bound %zu", m, world,
                      zero, k, r.peak[k], bound);
    }
    free(state), free(loaded);
    usp_param_table_free(&table);
}
END_TEST

/* The figure that proves the bound: an 8-layer GPT-2 on 4 ranks, ZeRO 0 (_i = 0) and 3 (_i = 1), saved
 * and loaded, holds at most one bucket and a row on any rank: far below the 3 x total x 4 bytes every
 * rank held before. */
START_TEST(host_memory_of_a_save_and_a_load_is_one_bucket)
{
    const int world = 4, zero = _i ? 3 : 0;
    usp_model_config model = model_of(0, 8);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    float *state = state_make(&table), *loaded = calloc(3 * (size_t)table.total, sizeof *loaded);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/bound_%d", scratch, _i);
    stream_run save = {.model = &model, .table = &table, .world = world, .zero = zero, .dir = dir, .state = state};
    run_stream(&save);
    assert_agreed(&save, USP_OK, "");
    stream_run load = {.model = &model, .table = &table, .world = world, .zero = zero, .load = 1, .dir = dir,
                       .loaded = loaded};
    run_stream(&load);
    assert_agreed(&load, USP_OK, "");
    ck_assert_int_eq(memcmp(loaded, state, 3 * (size_t)table.total * sizeof *state), 0);
    bounds b = bounds_of(&model, &table, world);
    size_t old = 3 * (size_t)table.total * sizeof(float), bucket = (size_t)(b.bucket + b.row) * sizeof(float);
    size_t load_bound = (size_t)((zero >= 3 ? b.shard : b.bucket) + b.row) * sizeof(float), load_peak = 0;
    for (int k = 0; k < world; k++)
        load_peak = load.peak[k] > load_peak ? load.peak[k] : load_peak;
    printf("ZeRO %d, W=%d, 8-layer GPT-2 of %lld parameters: host bytes peak, save %zu (rank 0; bound one bucket + "
           "a row: %zu), load %zu (any rank; bound %zu); before: %zu on every rank\n", zero, world,
           (long long)table.total, save.peak[0], bucket, load_peak, load_bound, old);
    ck_assert_msg(save.peak[0] <= bucket, "save held %zu, bound %zu", save.peak[0], bucket);
    ck_assert_msg(load_peak <= load_bound, "load held %zu, bound %zu", load_peak, load_bound);
    ck_assert_msg(bucket * 8 < old, "the bound %zu is not well below the %zu of three whole copies", bucket, old);
    free(state), free(loaded);
    usp_param_table_free(&table);
}
END_TEST

/* The bytes of dir/optimizer.safetensors and dir/model.safetensors, concatenated (malloc'd). */
static char *checkpoint_bytes(const char *dir, size_t *size)
{
    char path[512];
    size_t n1 = 0, n2 = 0;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    char *a = harness_read_file(path, &n1);
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    char *b = harness_read_file(path, &n2);
    ck_assert_msg(a && b, "%s is not a whole checkpoint", dir);
    a = realloc(a, n1 + n2);
    memcpy(a + n1, b, n2);
    free(b);
    *size = n1 + n2;
    return a;
}

/* Names in scratch that start with `prefix`, other than `prefix` itself (a temporary directory left behind). */
static int leftovers(const char *prefix)
{
    DIR *h = opendir(scratch);
    ck_assert_ptr_nonnull(h);
    int n = 0;
    for (struct dirent *e; (e = readdir(h)) != NULL;)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0 && strcmp(e->d_name, prefix) != 0;
    closedir(h);
    return n;
}

/* _i = 0: a NaN weight, 1: an infinite Adam m, 2: a negative Adam v, each in the shard rank 2 owns of
 * layer 1's bucket; ZeRO 3 on 4 ranks. Every rank fails the save with rank 0's message naming the
 * tensor, the old checkpoint stays as it was and no temporary directory is left. */
START_TEST(a_bad_number_in_one_ranks_shard_fails_the_save_on_every_rank)
{
    usp_model_config model = model_of(1, 3);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    float *state = state_make(&table);
    const int64_t n = table.total;
    char name[32], dir[256];
    snprintf(name, sizeof name, "bad_%d", _i);
    snprintf(dir, sizeof dir, "%s/%s", scratch, name);
    ck_assert_int_eq(usp_checkpoint_save(dir, &model, &table, state, state + n, state + 2 * n, 41, 7), USP_OK);
    size_t old_size, now_size;
    char *old = checkpoint_bytes(dir, &old_size);
    int64_t start = -1, len = 0; /* layer 1's bucket */
    for (int i = 0; i < table.n; i++)
        if (table.tensors[i].layer == 1) {
            start = start < 0 ? table.tensors[i].offset : start;
            len += table.tensors[i].count;
        }
    int64_t at = start + 2 * ((len + 3) / 4) + 5; /* inside rank 2's shard */
    const float bad[3] = {NAN, INFINITY, -1e-3f};
    const char *names[3] = {"model.layers.1.", "adam_m", "adam_v"};
    state[_i * n + at] = bad[_i];
    stream_run r = {.model = &model, .table = &table, .world = 4, .zero = 3, .dir = dir, .state = state};
    run_stream(&r);
    assert_agreed(&r, USP_ERR_RUNTIME, names[_i]);
    if (_i > 0) {
        char element[64];
        snprintf(element, sizeof element, "element %lld", (long long)at);
        ck_assert_msg(strstr(r.message[0], element), "the message does not name %s: %s", element, r.message[0]);
    }
    char *now = checkpoint_bytes(dir, &now_size);
    ck_assert_msg(now_size == old_size && memcmp(now, old, old_size) == 0, "%s was replaced by a failed save", dir);
    ck_assert_int_eq(leftovers(name), 0);
    free(old), free(now), free(state);
    usp_param_table_free(&table);
}
END_TEST

static int fail_at;
static int fail_here(usp_checkpoint_boundary at, void *ctx)
{
    (void)ctx;
    return (int)at == fail_at;
}

/* Rank 0's write fails (the test hook, as a full disk would) at each boundary of a ZeRO 3 save on
 * 4 ranks: no rank waits for it, every rank returns its status, and the directory holds the old
 * checkpoint (before the swap) or the new one (after it). */
START_TEST(a_failed_write_on_rank_zero_fails_every_rank)
{
    usp_model_config model = model_of(0, 3);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    float *state = state_make(&table);
    const int64_t n = table.total;
    char dir[256], fresh[256];
    snprintf(dir, sizeof dir, "%s/hooked", scratch);
    snprintf(fresh, sizeof fresh, "%s/hooked_new", scratch);
    ck_assert_int_eq(usp_checkpoint_save(fresh, &model, &table, state, state + n, state + 2 * n, 42, 7), USP_OK);
    size_t new_size, old_size, now_size;
    char *new_bytes = checkpoint_bytes(fresh, &new_size);
    for (fail_at = 0; fail_at < USP_CKPT_BOUNDARIES; fail_at++) {
        state[0] += 1; /* the old checkpoint differs from the new one */
        ck_assert_int_eq(usp_checkpoint_save(dir, &model, &table, state, state + n, state + 2 * n, 41, 7), USP_OK);
        state[0] -= 1;
        char *old = checkpoint_bytes(dir, &old_size);
        stream_run r = {.model = &model, .table = &table, .world = 4, .zero = 3, .dir = dir, .state = state};
        run_stream_hooked(&r, fail_here);
        assert_agreed(&r, USP_ERR_RUNTIME, "test hook");
        char *now = checkpoint_bytes(dir, &now_size);
        int is_new = now_size == new_size && memcmp(now, new_bytes, new_size) == 0;
        int is_old = now_size == old_size && memcmp(now, old, old_size) == 0;
        ck_assert_msg(fail_at >= USP_CKPT_SWAPPED ? is_new : is_old, "boundary %d: %s is not the %s checkpoint",
                      fail_at, dir, fail_at >= USP_CKPT_SWAPPED ? "new" : "old");
        ck_assert_int_eq(leftovers("hooked."), 0);
        free(old), free(now);
    }
    free(new_bytes), free(state);
    usp_param_table_free(&table);
}
END_TEST

/* Overwrites element `index` of the F32 tensor `tensor` in dir/file with `value`. */
static void poke(const char *dir, const char *file, const char *tensor, int64_t index, float value)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    usp_safetensors st;
    ck_assert_msg(usp_safetensors_open(path, &st) == USP_OK, "%s", usp_error_message());
    const usp_st_tensor *t = usp_safetensors_find(&st, tensor);
    ck_assert_msg(t && index < t->n_elems, "%s: no tensor %s of more than %lld elements", path, tensor,
                  (long long)index);
    long at = (long)(st.data_offset + t->begin) + (long)index * (long)sizeof value;
    usp_safetensors_close(&st);
    FILE *fp = fopen(path, "r+b");
    ck_assert_ptr_nonnull(fp);
    ck_assert_int_eq(fseek(fp, at, SEEK_SET), 0);
    ck_assert_int_eq(fwrite(&value, sizeof value, 1, fp), 1);
    ck_assert_int_eq(fclose(fp), 0);
}

/* A NaN in the last element of lm_head, which at ZeRO 3 on 4 ranks only rank 3 reads (the last shard
 * of the head's bucket), fails the load on every rank with rank 3's message (_i = 0); a negative v
 * in the last element, rank 3's too (_i = 1). */
START_TEST(a_bad_number_only_one_rank_reads_fails_the_load_on_every_rank)
{
    usp_model_config model = model_of(2, 3);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    float *state = state_make(&table), *loaded = calloc(3 * (size_t)table.total, sizeof *loaded);
    const int64_t n = table.total;
    char dir[256];
    snprintf(dir, sizeof dir, "%s/damaged_%d", scratch, _i);
    ck_assert_int_eq(usp_checkpoint_save(dir, &model, &table, state, state + n, state + 2 * n, 42, 7), USP_OK);
    const usp_param_tensor *head = usp_param_find(&table, USP_P_LM_HEAD, -1);
    ck_assert_ptr_nonnull(head);
    char element[64];
    if (_i == 0) {
        poke(dir, "model.safetensors", "lm_head.weight", head->count - 1, NAN);
        snprintf(element, sizeof element, "element %lld", (long long)(head->count - 1));
    } else {
        poke(dir, "optimizer.safetensors", "adam_v", n - 1, -1.0f);
        snprintf(element, sizeof element, "element %lld", (long long)(n - 1));
    }
    stream_run r = {.model = &model, .table = &table, .world = 4, .zero = 3, .load = 1, .dir = dir, .loaded = loaded};
    run_stream(&r);
    assert_agreed(&r, USP_ERR_CONFIG, _i == 0 ? "lm_head.weight" : "adam_v");
    ck_assert_msg(strstr(r.message[0], element), "the message does not name %s: %s", element, r.message[0]);
    free(state), free(loaded);
    usp_param_table_free(&table);
}
END_TEST

/* dst: a Hugging Face directory holding src's weights in BF16 (as save_pretrained writes a bf16
 * model) and its config.json; no optimizer state. */
static void write_bf16_copy(const char *src, const char *dst)
{
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    usp_safetensors st;
    ck_assert_msg(usp_safetensors_open(path, &st) == USP_OK, "%s", usp_error_message());
    char *header = NULL;
    size_t header_len = 0;
    FILE *h = open_memstream(&header, &header_len);
    uint64_t at = 0;
    for (size_t i = 0; i < st.n_tensors; i++) {
        const usp_st_tensor *t = &st.tensors[i];
        fprintf(h, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[", i ? "," : "{", t->name);
        for (int d = 0; d < t->ndim; d++)
            fprintf(h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        fprintf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                (unsigned long long)(at + 2 * (uint64_t)t->n_elems));
        at += 2 * (uint64_t)t->n_elems;
    }
    fprintf(h, "}");
    while ((ftell(h) + 8) % 8) /* the data section 8-byte aligned, as the reference writer keeps it */
        fputc(' ', h);
    fclose(h);
    ck_assert_int_eq(mkdir(dst, 0777), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    FILE *out = fopen(path, "wb");
    ck_assert_ptr_nonnull(out);
    uint64_t len = header_len;
    fwrite(&len, sizeof len, 1, out); /* little-endian, as safetensors.c requires of its host */
    fwrite(header, 1, header_len, out);
    for (size_t i = 0; i < st.n_tensors; i++) {
        const usp_st_tensor *t = &st.tensors[i];
        float *x = malloc((size_t)t->n_elems * sizeof *x);
        ck_assert_int_eq(usp_safetensors_read_f32(&st, t, x, t->n_elems), USP_OK);
        for (int64_t j = 0; j < t->n_elems; j++) {
            uint16_t b = usp_f32_to_bf16(x[j]);
            fwrite(&b, sizeof b, 1, out);
        }
        free(x);
    }
    ck_assert_int_eq(fclose(out), 0);
    free(header);
    usp_safetensors_close(&st);
    char command[1200];
    snprintf(command, sizeof command, "cp '%s/config.json' '%s/config.json'", src, dst);
    ck_assert_int_eq(system(command), 0);
}

/* _i: model. A Hugging Face directory in BF16 (GPT-2's transposed Conv1D weights read one file row
 * at a time, Llama's fused pieces, each half-precision range widened in place) loads into 4 ranks at
 * ZeRO 0 and 3, and 3 ranks at ZeRO 3, as into one rank's host arrays, with a fresh optimizer. */
START_TEST(a_bf16_hugging_face_directory_loads_into_any_world_as_into_one_rank)
{
    usp_model_config model = model_of(_i, 3);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    const int64_t n = table.total;
    float *state = state_make(&table), *want = calloc(3 * (size_t)n, sizeof *want);
    float *got = calloc(3 * (size_t)n, sizeof *got);
    char f32[256], bf16[256];
    snprintf(f32, sizeof f32, "%s/f32_%d", scratch, _i);
    snprintf(bf16, sizeof bf16, "%s/bf16_%d", scratch, _i);
    ck_assert_int_eq(usp_checkpoint_save(f32, &model, &table, state, state + n, state + 2 * n, 42, 7), USP_OK);
    write_bf16_copy(f32, bf16);
    int64_t step = -1;
    int has_optimizer = -1;
    ck_assert_msg(usp_checkpoint_load(bf16, &model, &table, want, want + n, want + 2 * n, &step, &has_optimizer) ==
                  USP_OK, "%s", usp_error_message());
    ck_assert_int_eq(has_optimizer, 0);
    int rounded = 0, off = 0; /* the BF16 weights are the saved ones rounded to 8 bits, some changed */
    for (int64_t i = 0; i < n; i++) {
        rounded += want[i] != state[i];
        off += fabsf(want[i] - state[i]) > fabsf(state[i]) * (1.0f / 256);
    }
    ck_assert_msg(rounded > 0 && off == 0, "%d weights rounded, %d off by more than bf16's rounding", rounded, off);
    const int layouts_bf16[][2] = {{4, 0}, {4, 3}, {3, 3}};
    for (int k = 0; k < 3; k++) {
        stream_run r = {.model = &model, .table = &table, .world = layouts_bf16[k][0], .zero = layouts_bf16[k][1],
                        .load = 1, .dir = bf16, .loaded = got};
        run_stream(&r);
        assert_agreed(&r, USP_OK, "");
        ck_assert_msg(memcmp(got, want, (size_t)n * sizeof *got) == 0 && r.has_optimizer[0] == 0 && r.step[0] == 0,
                      "model %d, W=%d ZeRO %d: not the weights one rank loads", _i, r.world, r.zero);
        for (int64_t i = n; i < 3 * n; i++)
            ck_assert_msg(got[i] == 0, "W=%d ZeRO %d: Adam's state is not fresh", r.world, r.zero);
    }
    free(state), free(want), free(got);
    usp_param_table_free(&table);
}
END_TEST

int main(void)
{
    if (!mkdtemp(scratch)) {
        perror(scratch);
        return 1;
    }
    Suite *s = suite_create("checkpoint_stream");
    TCase *t = tcase_create("checkpoint_stream");
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, a_save_from_any_world_and_stage_is_the_bytes_of_the_whole_array_save, 0,
                        N_MODELS * N_LAYOUTS);
    tcase_add_loop_test(t, a_load_into_any_world_and_stage_gives_the_saved_arrays, 0, N_MODELS * N_LAYOUTS);
    tcase_add_loop_test(t, host_memory_of_a_save_and_a_load_is_one_bucket, 0, 2);
    tcase_add_loop_test(t, a_bad_number_in_one_ranks_shard_fails_the_save_on_every_rank, 0, 3);
    tcase_add_test(t, a_failed_write_on_rank_zero_fails_every_rank);
    tcase_add_loop_test(t, a_bad_number_only_one_rank_reads_fails_the_load_on_every_rank, 0, 2);
    tcase_add_loop_test(t, a_bf16_hugging_face_directory_loads_into_any_world_as_into_one_rank, 0, N_MODELS);
    suite_add_tcase(s, t);
    int code = check_main_run(s);
    char command[300];
    snprintf(command, sizeof command, "rm -rf '%s'", scratch);
    if (system(command) != 0)
        fprintf(stderr, "could not remove %s\n", scratch);
    return code;
}
