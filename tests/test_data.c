/* The data loader: every source reads each rank's shard plus the token after
 * each run (a shard's last target is the next shard's first token), with
 * global positions; all SP ranks of a step read the same sequence; llm.c
 * shards, raw uint16/uint32 and text decode as written; bad files are named; packed documents (an
 * end-of-text id) give every rank the whole sequence's documents' table, positions that restart and no
 * target past a document's end, against the definition. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/data/data.h"
#include "tests/check_main.h"

static char dir[] = "/tmp/usp_data_XXXXXX";

/* Writes `n` tokens t_i = (i * 7 + 3) % 50000 as llm.c (header), raw uint16 or raw uint32. */
static void write_tokens(const char *path, int64_t n, int format)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    if (format == 0) {
        int32_t header[256] = {20240520, 1, (int32_t)n};
        fwrite(header, sizeof header, 1, f);
    }
    for (int64_t i = 0; i < n; i++) {
        uint32_t t = (uint32_t)((i * 7 + 3) % 50000);
        if (format == 2)
            fwrite(&t, 4, 1, f);
        else {
            uint16_t s = (uint16_t)t;
            fwrite(&s, 2, 1, f);
        }
    }
    fclose(f);
}

/* Reads sample `sample` on every SP rank of `l` and checks tokens, targets and positions against `expect`. */
static void check_shards(const usp_data *d, const usp_seq_layout *l, int64_t sample, int64_t len,
                         int32_t (*expect)(int64_t sample, int64_t g))
{
    usp_shard s;
    ck_assert_int_eq(usp_shard_alloc(&s, l->per_rank, 0), USP_OK);
    char *seen = calloc((size_t)l->n, 1);
    for (int p = 0; p < l->ulysses * l->ring; p++) {
        ck_assert_int_eq(usp_data_read_shard(d, l, p, sample, len, &s), USP_OK);
        for (int64_t i = 0; i < l->per_rank; i++) {
            int64_t g = s.positions[i];
            ck_assert_int_eq(g, usp_seq_layout_global(l, p, i));
            ck_assert(!seen[g]);
            seen[g] = 1;
            ck_assert_int_eq(s.tokens[i], g < len ? expect(sample, g) : 0);
            ck_assert_int_eq(s.targets[i], g < len ? expect(sample, g + 1) : -1); /* the NEXT global token */
        }
    }
    free(seen);
    usp_shard_free(&s);
}

static int64_t window_len; /* consecutive windows of len + 1 tokens */
static int32_t file_token(int64_t sample, int64_t g)
{
    int64_t i = sample * (window_len + 1) + g;
    return (int32_t)((i * 7 + 3) % 50000);
}

START_TEST(token_files_give_every_rank_its_shard_and_the_next_token)
{
    const char *specs[] = {"tokens:%s/a.bin", "tokens:%s/b.u16", "tokens32:%s/c.u32"};
    const char *files[] = {"%s/a.bin", "%s/b.u16", "%s/c.u32"};
    for (int f = 0; f < 3; f++) {
        char path[256], spec[300];
        snprintf(path, sizeof path, files[f], dir);
        snprintf(spec, sizeof spec, specs[f], dir);
        write_tokens(path, 4000, f);
        usp_data d;
        ck_assert_int_eq(usp_data_open(spec, 1, &d), USP_OK);
        const struct { usp_layout_kind kind; int u, r; int64_t n, len; } cases[] = {
            {USP_LAYOUT_CONTIGUOUS, 4, 1, 64, 64}, {USP_LAYOUT_ZIGZAG, 2, 2, 64, 64}, {USP_LAYOUT_ZIGZAG, 1, 4, 64, 64},
            {USP_LAYOUT_CONTIGUOUS, 4, 1, 64, 61}, /* padded */
        };
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            usp_seq_layout l;
            ck_assert_int_eq(usp_seq_layout_make(cases[c].kind, cases[c].n, cases[c].u, cases[c].r, &l), USP_OK);
            window_len = cases[c].len;
            for (int64_t sample = 0; sample < 3; sample++)
                check_shards(&d, &l, sample, cases[c].len, file_token);
        }
        usp_data_close(&d);
    }
}
END_TEST

static int32_t text_token(int64_t sample, int64_t g)
{
    static const char text[] = "sequence parallelism splits every sequence across the GPUs. ";
    int64_t i = sample * (window_len + 1) + g;
    return (unsigned char)text[i % (int64_t)(sizeof text - 1)];
}

START_TEST(text_is_bytes)
{
    char path[256], spec[300];
    snprintf(path, sizeof path, "%s/t.txt", dir);
    snprintf(spec, sizeof spec, "text:%s", path);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 100; i++)
        fputs("sequence parallelism splits every sequence across the GPUs. ", f);
    fclose(f);
    usp_data d;
    ck_assert_int_eq(usp_data_open(spec, 1, &d), USP_OK);
    usp_seq_layout l;
    ck_assert_int_eq(usp_seq_layout_make(USP_LAYOUT_ZIGZAG, 96, 2, 2, &l), USP_OK);
    window_len = 96;
    check_shards(&d, &l, 2, 96, text_token);
    usp_data_close(&d);
}
END_TEST

static usp_data passkey_source;
static int32_t passkey_reference(int64_t sample, int64_t g)
{
    /* the sequence as one rank holding everything reads it */
    static int32_t cache[2][129];
    static int64_t cached = -1;
    if (cached != sample) {
        usp_seq_layout one;
        ck_assert_int_eq(usp_seq_layout_make(USP_LAYOUT_CONTIGUOUS, 128, 1, 1, &one), USP_OK);
        usp_shard s;
        ck_assert_int_eq(usp_shard_alloc(&s, 128, 0), USP_OK);
        ck_assert_int_eq(usp_data_read_shard(&passkey_source, &one, 0, sample, 128, &s), USP_OK);
        for (int i = 0; i < 128; i++)
            cache[0][i] = s.tokens[i], cache[1][i + 1] = s.targets[i];
        usp_shard_free(&s);
        cached = sample;
    }
    return g == 0 ? cache[0][0] : cache[1][g];
}

START_TEST(passkey_samples_do_not_depend_on_the_mesh)
{
    ck_assert_int_eq(usp_data_open("passkey", 9, &passkey_source), USP_OK);
    const int shapes[][3] = {{4, 1, 0}, {2, 2, 1}, {1, 4, 1}, {8, 1, 0}};
    for (int k = 0; k < 4; k++) {
        usp_seq_layout l;
        ck_assert_int_eq(usp_seq_layout_make(shapes[k][2] ? USP_LAYOUT_ZIGZAG : USP_LAYOUT_CONTIGUOUS, 128,
                                             shapes[k][0], shapes[k][1], &l), USP_OK);
        window_len = 128;
        for (int64_t sample = 0; sample < 3; sample++)
            check_shards(&passkey_source, &l, sample, 128, passkey_reference);
    }
    /* the key opens the sequence and is asked for at the end: its digits are the last five targets */
    usp_seq_layout one;
    ck_assert_int_eq(usp_seq_layout_make(USP_LAYOUT_CONTIGUOUS, 128, 1, 1, &one), USP_OK);
    usp_shard s;
    ck_assert_int_eq(usp_shard_alloc(&s, 128, 0), USP_OK);
    ck_assert_int_eq(usp_data_read_shard(&passkey_source, &one, 0, 5, 128, &s), USP_OK);
    ck_assert_int_eq(memcmp("pass key=", (char[9]){(char)s.tokens[0], (char)s.tokens[1], (char)s.tokens[2],
                            (char)s.tokens[3], (char)s.tokens[4], (char)s.tokens[5], (char)s.tokens[6],
                            (char)s.tokens[7], (char)s.tokens[8]}, 9), 0);
    for (int i = 0; i < USP_PASSKEY_DIGITS; i++) {
        ck_assert_int_eq(s.targets[128 - USP_PASSKEY_DIGITS + i], s.tokens[9 + i]);
        ck_assert(usp_data_is_answer(&passkey_source, 128 - USP_PASSKEY_DIGITS + i, 128));
    }
    ck_assert(!usp_data_is_answer(&passkey_source, 128 - USP_PASSKEY_DIGITS - 1, 128));
    usp_shard_free(&s);
    usp_data_close(&passkey_source);
}
END_TEST

/* Packed documents (--eot): a file of ids 0 to 10 in a scrambled order, 0 the end-of-text id, so that
 * documents of 1 token, of a few and of dozens straddle every rank boundary. */
#define PACKED_EOT 0
static int32_t packed_token(int64_t i) /* documents of 1 to about 90 tokens, geometric */
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 29)) * 0xBF58476D1CE4E5B9ull;
    return (int32_t)((x ^ (x >> 32)) % 11);
}

/* The sample's token at g of a file of packed_token (window_len + 1 tokens a window). */
static int32_t packed_at(int64_t sample, int64_t g) { return packed_token(sample * (window_len + 1) + g); }

/* Every rank's positions, targets and documents' table against the definition: a document runs to and
 * with its end-of-text token; the last real one ends at len, the padding is one of its own. */
static void check_documents(const usp_data *d, const usp_seq_layout *l, int64_t sample, int64_t len)
{
    usp_shard s;
    ck_assert_int_eq(usp_shard_alloc(&s, l->per_rank, 0), USP_OK);
    ck_assert_int_eq(usp_shard_alloc_documents(&s, l->n), USP_OK);
    int64_t targets = 0;
    for (int p = 0; p < l->ulysses * l->ring; p++) {
        ck_assert_int_eq(usp_data_read_shard(d, l, p, sample, len, &s), USP_OK);
        for (int64_t g = 0; g < l->n; g++) { /* every rank holds the whole sequence's table */
            int64_t start = g < len ? g : len, end = g < len ? g + 1 : l->n;
            while (g < len && start > 0 && packed_at(sample, start - 1) != PACKED_EOT)
                start--;
            while (end < len && packed_at(sample, end - 1) != PACKED_EOT)
                end++;
            ck_assert_msg(s.docs[2 * g] == start && s.docs[2 * g + 1] == end, "sample %lld position %lld: "
                          "document [%d, %d), expected [%lld, %lld)", (long long)sample, (long long)g, s.docs[2 * g],
                          s.docs[2 * g + 1], (long long)start, (long long)end);
        }
        for (int64_t i = 0; i < l->per_rank; i++) {
            const int64_t g = usp_seq_layout_global(l, p, i), start = s.docs[2 * g];
            ck_assert_int_eq(s.positions[i], g - start);
            const int ends = g < len && packed_at(sample, g) == PACKED_EOT;
            ck_assert_int_eq(s.targets[i], g < len && !ends ? packed_at(sample, g + 1) : -1);
            targets += s.targets[i] >= 0;
        }
    }
    int64_t counted;
    ck_assert_int_eq(usp_data_sample_targets(d, sample, len, &counted), USP_OK);
    ck_assert_int_eq(counted, targets);
    usp_shard_free(&s);
}

START_TEST(packed_documents_cut_at_every_end_of_text_token)
{
    char path[256], spec[300];
    snprintf(path, sizeof path, "%s/packed.u16", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (int64_t i = 0; i < 4000; i++) {
        const uint16_t t = (uint16_t)packed_token(i);
        ck_assert_int_eq(fwrite(&t, sizeof t, 1, f), 1);
    }
    fclose(f);
    snprintf(spec, sizeof spec, "tokens:%s", path);
    usp_data d;
    ck_assert_int_eq(usp_data_open(spec, 1, &d), USP_OK);
    ck_assert_int_eq(usp_data_set_eot(&d, 11, 11), USP_ERR_CONFIG); /* outside the vocabulary */
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "--eot 11 is outside the model's vocabulary of 11"));
    ck_assert_int_eq(usp_data_set_eot(&d, 12, 50), USP_ERR_CONFIG); /* never in the file */
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "never holds that id (4000 tokens read)"));
    ck_assert_int_eq(usp_data_eot_check("passkey", 0, 128), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "--eot 0 with --data passkey"));
    ck_assert_int_eq(usp_data_set_eot(&d, PACKED_EOT, 11), USP_OK);
    int64_t longest = 0, over = 0, want_longest = 0, want_over = 0, len = 0; /* the lengths, by hand */
    for (int64_t i = 0; i <= 4000; i++, len++)
        if (i == 4000 || packed_token(i) == PACKED_EOT) {
            len += i < 4000; /* a document runs to and with its end-of-text token */
            want_longest = len > want_longest ? len : want_longest, want_over += len > 40, len = -1;
        }
    ck_assert_int_eq(usp_data_long_documents(&d, PACKED_EOT, 40, &longest, &over), USP_OK);
    ck_assert_int_eq(longest, want_longest);
    ck_assert_int_eq(over, want_over);
    ck_assert_int_gt(over, 0);
    const struct { usp_layout_kind kind; int u, r; int64_t n, len; } cases[] = {
        {USP_LAYOUT_CONTIGUOUS, 4, 1, 64, 64}, {USP_LAYOUT_ZIGZAG, 2, 2, 64, 64}, {USP_LAYOUT_ZIGZAG, 1, 4, 64, 64},
        {USP_LAYOUT_CONTIGUOUS, 4, 1, 64, 61}, {USP_LAYOUT_ZIGZAG, 1, 4, 200, 197}, /* padded */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        usp_seq_layout l;
        ck_assert_int_eq(usp_seq_layout_make(cases[c].kind, cases[c].n, cases[c].u, cases[c].r, &l), USP_OK);
        window_len = cases[c].len;
        for (int64_t sample = 0; sample < 4; sample++)
            check_documents(&d, &l, sample, cases[c].len);
    }
    usp_data_close(&d);
}
END_TEST

/* text:DIR: the files in name order, each a document ended by byte 0 (its end-of-text id, set), an empty
 * file a 1-token document; a directory with no file, or a file holding a 0 byte, is refused by name. */
START_TEST(text_directories_are_documents)
{
    char sub[256], path[300], spec[300];
    snprintf(sub, sizeof sub, "%s/texts", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    snprintf(spec, sizeof spec, "text:%s", sub);
    usp_data d;
    ck_assert_int_eq(usp_data_open(spec, 1, &d), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "holds no regular file"));
    const char *files[][2] = {{"b.txt", "hello"}, {"a.txt", "xy"}, {"c.txt", ""}};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", sub, files[i][0]);
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        fputs(files[i][1], f);
        fclose(f);
    }
    ck_assert_int_eq(usp_data_open(spec, 1, &d), USP_OK);
    ck_assert_int_eq(d.eot, 0);
    ck_assert_int_eq(d.file_tokens, 10); /* "xy" 0 "hello" 0 0 */
    usp_seq_layout l;
    ck_assert_int_eq(usp_seq_layout_make(USP_LAYOUT_CONTIGUOUS, 8, 2, 1, &l), USP_OK);
    usp_shard s;
    ck_assert_int_eq(usp_shard_alloc(&s, l.per_rank, 0), USP_OK);
    ck_assert_int_eq(usp_shard_alloc_documents(&s, l.n), USP_OK);
    const char want[] = "xy\0hello";
    const int32_t starts[8] = {0, 0, 0, 3, 3, 3, 3, 3}, ends[8] = {3, 3, 3, 8, 8, 8, 8, 8};
    for (int p = 0; p < 2; p++) {
        ck_assert_int_eq(usp_data_read_shard(&d, &l, p, 0, 8, &s), USP_OK);
        for (int64_t i = 0; i < l.per_rank; i++) {
            const int64_t g = usp_seq_layout_global(&l, p, i);
            ck_assert_int_eq(s.tokens[i], (unsigned char)want[g]);
            ck_assert_int_eq(s.targets[i], g == 2 ? -1 : (unsigned char)(g == 7 ? 0 : want[g + 1]));
        }
        for (int g = 0; g < 8; g++)
            ck_assert(s.docs[2 * g] == starts[g] && s.docs[2 * g + 1] == ends[g]);
    }
    usp_shard_free(&s);
    usp_data_close(&d);
    FILE *f = fopen(path, "wb"); /* c.txt now holds a 0 byte */
    fputs("ab", f), fputc(0, f);
    fclose(f);
    ck_assert_int_eq(usp_data_open(spec, 1, &d), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "c.txt holds a 0 byte at offset 2"));
}
END_TEST

START_TEST(bad_sources_name_the_input)
{
    usp_data d;
    ck_assert_int_eq(usp_data_open("bogus", 1, &d), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "--data bogus"));
    ck_assert_int_eq(usp_data_open("tokens:/nonexistent/x.bin", 1, &d), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "/nonexistent/x.bin"));
    char path[256], spec[300];
    snprintf(path, sizeof path, "%s/odd.u16", dir);
    FILE *f = fopen(path, "wb");
    fputs("abc", f); /* 3 bytes: not whole uint16 tokens */
    fclose(f);
    snprintf(spec, sizeof spec, "tokens:%s", path);
    ck_assert_int_eq(usp_data_open(spec, 1, &d), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "not a whole number"));
    snprintf(path, sizeof path, "%s/lying.bin", dir);
    f = fopen(path, "wb");
    int32_t header[256] = {20240520, 1, 1000000};
    fwrite(header, sizeof header, 1, f);
    fclose(f);
    snprintf(spec, sizeof spec, "tokens:%s", path);
    ck_assert_int_eq(usp_data_open(spec, 1, &d), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "the header says 1000000 tokens"));
    snprintf(path, sizeof path, "%s/short.u16", dir);
    write_tokens(path, 50, 1);
    snprintf(spec, sizeof spec, "tokens:%s", path);
    ck_assert_int_eq(usp_data_open(spec, 1, &d), USP_OK);
    usp_seq_layout l;
    ck_assert_int_eq(usp_seq_layout_make(USP_LAYOUT_CONTIGUOUS, 64, 1, 1, &l), USP_OK);
    usp_shard s;
    ck_assert_int_eq(usp_shard_alloc(&s, 64, 0), USP_OK);
    ck_assert_int_eq(usp_data_read_shard(&d, &l, 0, 0, 64, &s), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "holds 50 tokens"));
    usp_shard_free(&s);
    usp_data_close(&d);
}
END_TEST

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    Suite *s = suite_create("data");
    TCase *t = tcase_create("data");
    tcase_add_test(t, token_files_give_every_rank_its_shard_and_the_next_token);
    tcase_add_test(t, text_is_bytes);
    tcase_add_test(t, passkey_samples_do_not_depend_on_the_mesh);
    tcase_add_test(t, packed_documents_cut_at_every_end_of_text_token);
    tcase_add_test(t, text_directories_are_documents);
    tcase_add_test(t, bad_sources_name_the_input);
    suite_add_tcase(s, t);
    int code = check_main_run(s);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? code : 1;
}
