/* Safetensors files: round-tripped, and read from a file this test lays out
 * byte by byte itself (F16/BF16 as the Hugging Face library writes them,
 * values checked against a conversion written here from the IEEE
 * definitions); every kind of bad file refused with USP_ERR_CONFIG and a
 * message naming the file and the tensor, and no file left by a refused
 * write. (Model configs: tests/test_hf_config.c.) */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/checkpoint/safetensors.h"
#include "tests/check_main.h"
#include "tests/scratch_dir.h"

/* ---- safetensors: an independent byte-level writer and reference conversions -------- */

/* Lays out a safetensors file: 8-byte little-endian length, the header padded
 * with spaces to a multiple of 8 (as the Hugging Face writer does), the data. */
static void st_lay_out(const char *path, const char *header, const void *data, size_t data_len, int pad)
{
    size_t hl = strlen(header), padded = pad ? (hl + 7) / 8 * 8 : hl;
    unsigned char *buf = calloc(1, 8 + padded + data_len);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    if (data_len)
        memcpy(buf + 8 + padded, data, data_len);
    write_bytes(path, buf, 8 + padded + data_len);
    free(buf);
}

/* binary16 and bfloat16 values from their definitions: (-1)^s 2^(e-bias) (1 + m/2^M), subnormals 2^(1-bias) m/2^M */
static double ref_half(uint16_t h, int mant_bits, int bias)
{
    int exp_bits = 15 - mant_bits;
    unsigned e = (h >> mant_bits) & ((1u << exp_bits) - 1), m = h & ((1u << mant_bits) - 1);
    double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (e == (1u << exp_bits) - 1)
        return m ? NAN : sign * INFINITY;
    if (e == 0)
        return sign * ldexp((double)m, 1 - bias - mant_bits);
    return sign * ldexp(1.0 + ldexp((double)m, -mant_bits), (int)e - bias);
}

static void assert_same_float(float got, double want, const char *what, size_t i)
{
    if (isnan(want)) {
        ck_assert_msg(isnan(got), "%s[%zu]: got %g, want NaN", what, i, (double)got);
        return;
    }
    float w = (float)want; /* exact: every half value is an f32 */
    ck_assert_msg(memcmp(&got, &w, sizeof w) == 0, "%s[%zu]: got %a, want %a", what, i, (double)got, want);
}

START_TEST(safetensors_reads_a_file_laid_out_as_hugging_face_writes_it)
{
    const uint16_t f16[12] = {0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0x0001,
                              0x03ff, 0x0400, 0x7c00, 0xfc00, 0x7e00, 0x3555};
    const uint16_t bf16[8] = {0x3f80, 0xc0a0, 0x7f7f, 0x0001, 0x7f80, 0xffc1, 0x8000, 0x4049};
    const float f32[5] = {1.5f, -0.0f, 3.0e38f, 1e-45f, -7.25f}, scalar = 42.0f;
    /* the reference writer sorts by dtype alignment, then name: F32 first, then the 2-byte types */
    unsigned char data[20 + 4 + 24 + 16];
    memcpy(data, f32, 20);
    memcpy(data + 20, &scalar, 4);
    memcpy(data + 24, bf16, 16); /* little-endian host: the bytes are the file's */
    memcpy(data + 40, f16, 24);
    const char *header =
        "{\"__metadata__\":{\"format\":\"pt\"},\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[0,"
        "20]},\"scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[20,24]},\"model.norm.weight\":{\"dtype\":"
        "\"BF16\",\"shape\":[2,2,2],\"data_offsets\":[24,40]},\"model.embed_tokens.weight\":{\"dtype\":\"F16\","
        "\"shape\":[3,4],\"data_offsets\":[40,64]},\"empty\":{\"dtype\":\"F16\",\"shape\":[0,3],\"data_offsets\":[64,"
        "64]}}";
    const char *path = tmp_path("model.safetensors");
    st_lay_out(path, header, data, sizeof data, 1);
    usp_safetensors st;
    ck_assert_msg(usp_safetensors_open(path, &st) == USP_OK, "%s", usp_error_message());
    ck_assert_uint_eq(st.n_tensors, 5);
    ck_assert_uint_eq(st.data_offset % 8, 0);
    ck_assert_str_eq(usp_safetensors_metadata_get(&st, "format"), "pt");
    float out[12];
    const usp_st_tensor *t = usp_safetensors_find(&st, "model.embed_tokens.weight");
    ck_assert(t && t->dtype == USP_ST_F16 && t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 4);
    ck_assert_int_eq(usp_safetensors_read_f32(&st, t, out, 12), USP_OK);
    for (size_t i = 0; i < 12; i++)
        assert_same_float(out[i], ref_half(f16[i], 10, 15), "f16", i);
    t = usp_safetensors_find(&st, "model.norm.weight");
    ck_assert(t && t->dtype == USP_ST_BF16 && t->ndim == 3);
    ck_assert_int_eq(usp_safetensors_read_f32(&st, t, out, 8), USP_OK);
    for (size_t i = 0; i < 8; i++)
        assert_same_float(out[i], ref_half(bf16[i], 7, 127), "bf16", i);
    t = usp_safetensors_find(&st, "lm_head.weight");
    ck_assert_int_eq(usp_safetensors_read_f32(&st, t, out, 5), USP_OK);
    ck_assert_int_eq(memcmp(out, f32, sizeof f32), 0);
    t = usp_safetensors_find(&st, "scale");
    ck_assert(t && t->ndim == 0 && t->n_elems == 1);
    ck_assert_int_eq(usp_safetensors_read_f32(&st, t, out, 1), USP_OK);
    ck_assert(out[0] == 42.0f);
    t = usp_safetensors_find(&st, "empty");
    ck_assert(t && t->n_elems == 0);
    ck_assert_int_eq(usp_safetensors_read_f32(&st, t, out, 0), USP_OK);
    ck_assert_ptr_null(usp_safetensors_find(&st, "missing"));
    /* a wrong element count names the tensor, its shape and the count expected */
    t = usp_safetensors_find(&st, "model.embed_tokens.weight");
    ck_assert_int_eq(usp_safetensors_read_f32(&st, t, out, 11), USP_ERR_CONFIG);
    assert_message_has("model.embed_tokens.weight");
    assert_message_has("[3, 4]");
    assert_message_has("11");
    assert_message_has(path);
    usp_safetensors_close(&st);
    usp_safetensors_close(&st); /* closing twice is harmless */
    clean_tmpdir();
}
END_TEST

START_TEST(safetensors_round_trip_is_bitwise_and_in_the_given_order)
{
    float a[24], b[3] = {NAN, -INFINITY, 1e-40f}, s = -0.0f;
    for (int i = 0; i < 24; i++)
        a[i] = (float)sin(i * 0.7) * 1e3f;
    const usp_st_entry e[] = {
        {"z.last.first", 3, {2, 3, 4}, a},
        {"b", 1, {3}, b},
        {"s", 0, {0}, &s},
        {"none", 2, {0, 5}, NULL},
    };
    const char *path = tmp_path("rt.safetensors");
    ck_assert_int_eq(usp_safetensors_write(path, e, 4, "{\"step\": \"10\"}"), USP_OK);
    usp_safetensors st;
    ck_assert_msg(usp_safetensors_open(path, &st) == USP_OK, "%s", usp_error_message());
    ck_assert_uint_eq(st.n_tensors, 4);
    ck_assert_uint_eq(st.data_offset % 8, 0);
    ck_assert_str_eq(usp_safetensors_metadata_get(&st, "step"), "10");
    ck_assert_str_eq(usp_safetensors_metadata_get(&st, "format"), "pt");
    uint64_t at = 0;
    for (size_t i = 0; i < 4; i++) {
        const usp_st_tensor *t = usp_safetensors_find(&st, e[i].name);
        ck_assert(t && t->dtype == USP_ST_F32 && t->ndim == e[i].ndim && t->begin == at);
        for (int d = 0; d < t->ndim; d++)
            ck_assert_int_eq(t->shape[d], e[i].shape[d]);
        float got[24];
        ck_assert_int_eq(usp_safetensors_read_f32(&st, t, got, t->n_elems), USP_OK);
        if (t->n_elems)
            ck_assert_int_eq(memcmp(got, e[i].data, (size_t)t->n_elems * 4), 0);
        at = t->end;
    }
    ck_assert_uint_eq(st.data_offset + at, st.file_size); /* contiguous, nothing after */
    usp_safetensors_close(&st);
    /* the layout on disk: length prefix, '{', space padding */
    FILE *f = fopen(path, "rb");
    unsigned char head[16];
    ck_assert_uint_eq(fread(head, 1, 16, f), 16);
    fclose(f);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | head[i];
    ck_assert_uint_eq((8 + hl) % 8, 0);
    ck_assert_int_eq(head[8], '{');
    clean_tmpdir();
}
END_TEST

START_TEST(safetensors_write_refuses_bad_entries_and_leaves_no_file)
{
    float x[2] = {1, 2};
    const char *path = tmp_path("keep.safetensors");
    const usp_st_entry good = {"w", 1, {2}, x};
    ck_assert_int_eq(usp_safetensors_write(path, &good, 1, NULL), USP_OK);
    const usp_st_entry dup[] = {{"w", 1, {2}, x}, {"w", 1, {1}, x}};
    ck_assert_int_eq(usp_safetensors_write(path, dup, 2, NULL), USP_ERR_CONFIG);
    assert_message_has("\"w\" is given twice");
    ck_assert_int_eq(usp_safetensors_write(path, &good, 1, "[1]"), USP_ERR_CONFIG);
    assert_message_has("metadata");
    ck_assert_int_eq(usp_safetensors_write(path, &good, 1, "{\"n\": 1}"), USP_ERR_CONFIG);
    const usp_st_entry neg = {"w", 1, {-2}, x}, deep = {"w", 9, {1}, x}, meta = {"__metadata__", 1, {2}, x};
    ck_assert_int_eq(usp_safetensors_write(path, &neg, 1, NULL), USP_ERR_CONFIG);
    ck_assert_int_eq(usp_safetensors_write(path, &deep, 1, NULL), USP_ERR_CONFIG);
    ck_assert_int_eq(usp_safetensors_write(path, &meta, 1, NULL), USP_ERR_CONFIG);
    ck_assert_int_eq(usp_safetensors_write(tmp_path("no/such/dir.safetensors"), &good, 1, NULL), USP_ERR_RUNTIME);
    /* the first file is intact and nothing else was left behind */
    usp_safetensors st;
    ck_assert_int_eq(usp_safetensors_open(path, &st), USP_OK);
    ck_assert_uint_eq(st.n_tensors, 1);
    usp_safetensors_close(&st);
    assert_dir_holds_only("keep.safetensors");
    clean_tmpdir();
}
END_TEST

START_TEST(bad_safetensors_files_name_the_file_and_the_tensor)
{
    static const char A[] = "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}";
    unsigned char data[24] = {0};
    const struct {
        const char *header; /* NULL: raw bytes below */
        size_t data_len;
        const char *needle;
    } cases[] = {
        {"{%s,\"b\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[16,24]}}", 24, "\"b\": dtype \"F64\""},
        {"{%s,\"b\":{\"dtype\":\"I8\",\"shape\":[8],\"data_offsets\":[16,24]}}", 24, "\"b\": dtype \"I8\""},
        {"{%s,\"b\":{\"shape\":[4],\"data_offsets\":[16,24]}}", 24, "\"b\": \"dtype\""},
        {"{%s,\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,24]}}", 24, "\"b\": data_offsets [16, 24]"},
        {"{%s,\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[8,16]}}", 24, "overlap"},
        {"{%s,\"b\":{\"dtype\":\"F16\",\"shape\":[12],\"data_offsets\":[16,40]}}", 24, "\"b\": data_offsets"},
        {"{%s,\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[16,24]}}", 20, "\"b\": data_offsets"},
        {"{%s,\"b\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[24,16]}}", 24, "\"b\": data_offsets"},
        {"{%s,\"b\":{\"dtype\":\"F16\",\"shape\":[-4],\"data_offsets\":[16,24]}}", 24, "\"b\": shape[0]"},
        {"{%s,\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[16,24,32]}}", 24, "\"b\": \"data_offsets\""},
        {"{%s,\"b\":{\"dtype\":\"F16\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[16,18]}}", 24, "\"b\": \"shape\""},
        {"{%s,\"b\":{\"dtype\":\"F16\",\"shape\":[4611686018427387904,4],\"data_offsets\":[16,24]}}", 24, "64 bits"},
        {"{%s,\"b\":7}", 24, "\"b\": its entry"},
        {"{%s,\"__metadata__\":[1]}", 24, "__metadata__"},
        {"{%s,\"__metadata__\":{\"format\":1}}", 24, "__metadata__"},
        {"{%s,%s}", 24, "not valid JSON"}, /* "a" twice */
        {"{%s,\"b\":", 24, "not valid JSON"},
        {"[%s]", 24, "does not start with '{'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char header[512];
        snprintf(header, sizeof header, cases[i].header, A, A);
        const char *path = tmp_path("bad.safetensors");
        st_lay_out(path, header, data, cases[i].data_len, 1);
        usp_safetensors st = {.n_tensors = 99};
        ck_assert_msg(usp_safetensors_open(path, &st) == USP_ERR_CONFIG, "case %zu: %s", i, usp_error_message());
        assert_message_has(path);
        assert_message_has(cases[i].needle);
        ck_assert_uint_eq(st.n_tensors, 99); /* *out untouched on failure */
    }
    /* a name longer than usp keeps */
    char header[512], longname[200];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    snprintf(header, sizeof header, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", longname);
    st_lay_out(tmp_path("bad.safetensors"), header, NULL, 0, 1);
    usp_safetensors st;
    ck_assert_int_eq(usp_safetensors_open(tmp_path("bad.safetensors"), &st), USP_ERR_CONFIG);
    assert_message_has("nnnnnnnnnn");
    /* broken framing: empty, shorter than the length prefix, a length beyond the file or absurd */
    const unsigned char beyond[12] = {0x40, 0x42, 0x0f, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    const unsigned char absurd[12] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}', ' ', ' '};
    const struct {
        const void *bytes;
        size_t n;
        const char *needle;
    } raw[] = {{"", 0, "8-byte"}, {"\x02\0\0\0", 4, "8-byte"}, {beyond, 12, "runs past"}, {absurd, 12, "runs past"}};
    for (size_t i = 0; i < 4; i++) {
        write_bytes(tmp_path("bad.safetensors"), raw[i].bytes, raw[i].n);
        ck_assert_int_eq(usp_safetensors_open(tmp_path("bad.safetensors"), &st), USP_ERR_CONFIG);
        assert_message_has(raw[i].needle);
        assert_message_has("bad.safetensors");
    }
    ck_assert_int_eq(usp_safetensors_open(tmp_path("absent.safetensors"), &st), USP_ERR_CONFIG);
    assert_message_has("absent.safetensors");
    ck_assert_int_eq(usp_safetensors_open(tmpdir, &st), USP_ERR_CONFIG);
    ck_assert_int_eq(mkfifo(tmp_path("fifo"), 0600), 0); /* refused at once, not waited on */
    ck_assert_int_eq(usp_safetensors_open(tmp_path("fifo"), &st), USP_ERR_CONFIG);
    assert_message_has("not a regular file");
    /* no tensors at all is a valid (empty) file */
    st_lay_out(tmp_path("empty.safetensors"), "{}", NULL, 0, 1);
    ck_assert_int_eq(usp_safetensors_open(tmp_path("empty.safetensors"), &st), USP_OK);
    ck_assert_uint_eq(st.n_tensors, 0);
    usp_safetensors_close(&st);
    clean_tmpdir();
}
END_TEST

int main(void)
{
    if (!scratch_dir_make("/tmp/usp_ckpt_io_XXXXXX"))
        return 1;
    Suite *s = suite_create("checkpoint_io");
    TCase *t = tcase_create("checkpoint_io");
    tcase_add_checked_fixture(t, clean_tmpdir, NULL);
    tcase_add_test(t, safetensors_reads_a_file_laid_out_as_hugging_face_writes_it);
    tcase_add_test(t, safetensors_round_trip_is_bitwise_and_in_the_given_order);
    tcase_add_test(t, safetensors_write_refuses_bad_entries_and_leaves_no_file);
    tcase_add_test(t, bad_safetensors_files_name_the_file_and_the_tensor);
    suite_add_tcase(s, t);
    int code = check_main_run(s);
    scratch_dir_remove();
    return code;
}
