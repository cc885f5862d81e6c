/* safetensors: a validating reader and an F32 writer.
 *
 * The reader trusts nothing in the file: the header length is bounded by the
 * file size (and 100 MB, the limit of the reference implementation), the
 * header must be a JSON object, every tensor's byte range must lie inside the
 * data section, have exactly product(shape) x dtype-size bytes (computed with
 * overflow checks) and overlap no other tensor. Only then is a tensor's data
 * ever read, with a seek and a bounded fread, so a hostile file gives an error
 * naming the file and the tensor, never a crash or a huge allocation. Holes in
 * the data section are allowed (they harm nothing). */
#include "core/checkpoint/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/atomic_file.h"
#include "core/ops/dtype.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader copies it as is and needs a little-endian host"
#endif

/* The reference implementation (safetensors' MAX_HEADER_SIZE) refuses larger headers too. */
#define ST_MAX_HEADER ((uint64_t)100000000)

static const size_t dtype_size[] = {[USP_ST_F32] = 4, [USP_ST_F16] = 2, [USP_ST_BF16] = 2};

const char *usp_st_dtype_name(usp_st_dtype dtype)
{
    switch (dtype) {
    case USP_ST_F32: return "F32";
    case USP_ST_F16: return "F16";
    case USP_ST_BF16: return "BF16";
    }
    return "?";
}

float usp_st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
    if (exp == 0x1f) { /* infinity or NaN: keep the payload */
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) { /* normal: rebias 15 -> 127 */
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else { /* subnormal mant x 2^-24 is normal in f32: shift the leading 1 into the implicit bit */
        uint32_t e = 113;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* ---- reading ------------------------------------------------------------------------------ */

void usp_safetensors_close(usp_safetensors *st)
{
    if (st->fp)
        fclose(st->fp);
    free(st->path);
    free(st->tensors);
    json_decref((json_t *)st->metadata);
    *st = (usp_safetensors){0};
}

/* One tensor entry of the header into t; errors name the file and the tensor. */
static usp_status parse_tensor(const char *path, const char *name, const json_t *v, uint64_t data_size,
                               usp_st_tensor *t)
{
    if (strlen(name) >= sizeof t->name)
        return usp_error(USP_ERR_CONFIG, "%s: tensor \"%.60s...\": the name is %zu bytes; usp takes names of up to %zu",
                         path, name, strlen(name), sizeof t->name - 1);
    snprintf(t->name, sizeof t->name, "%s", name);
    if (!json_is_object(v))
        return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\": its entry is not an object with dtype, shape and "
                         "data_offsets", path, name);
    const json_t *dtype = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
                 *offsets = json_object_get(v, "data_offsets");
    if (!json_is_string(dtype))
        return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\": \"dtype\" is missing or not a string", path, name);
    const char *d = json_string_value(dtype);
    if (strcmp(d, "F32") == 0)
        t->dtype = USP_ST_F32;
    else if (strcmp(d, "F16") == 0)
        t->dtype = USP_ST_F16;
    else if (strcmp(d, "BF16") == 0)
        t->dtype = USP_ST_BF16;
    else
        return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\": dtype \"%.20s\" is not supported; usp reads F32, F16 "
                         "and BF16 (convert the checkpoint, e.g. with torch .float())", path, name, d);
    if (!json_is_array(shape) || json_array_size(shape) > USP_ST_MAX_DIMS)
        return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\": \"shape\" must be an array of at most %d sizes", path,
                         name, USP_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    int64_t n = 1;
    int overflow = 0;
    for (int i = 0; i < t->ndim; i++) {
        const json_t *s = json_array_get(shape, (size_t)i);
        if (!json_is_integer(s) || json_integer_value(s) < 0)
            return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\": shape[%d] is not a non-negative integer", path,
                             name, i);
        t->shape[i] = (int64_t)json_integer_value(s);
        overflow |= __builtin_mul_overflow(n, t->shape[i], &n);
    }
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) /* an empty tensor, however large its other sizes */
            n = 0, overflow = 0;
    uint64_t bytes = 0;
    overflow |= __builtin_mul_overflow((uint64_t)n, (uint64_t)dtype_size[t->dtype], &bytes);
    if (overflow)
        return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\": its shape has more elements than fit in 64 bits", path,
                         name);
    t->n_elems = n;
    if (!json_is_array(offsets) || json_array_size(offsets) != 2 ||
        !json_is_integer(json_array_get(offsets, 0)) || !json_is_integer(json_array_get(offsets, 1)))
        return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\": \"data_offsets\" must be [begin, end] (two integers)",
                         path, name);
    json_int_t b = json_integer_value(json_array_get(offsets, 0)), e = json_integer_value(json_array_get(offsets, 1));
    if (b < 0 || e < b || (uint64_t)e > data_size)
        return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\": data_offsets [%lld, %lld] are not a range inside the "
                         "data section of %llu bytes (a truncated file?)", path, name, (long long)b, (long long)e,
                         (unsigned long long)data_size);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    if (t->end - t->begin != bytes)
        return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes, but %s of "
                         "%lld elements needs %llu", path, name, (unsigned long long)t->begin,
                         (unsigned long long)t->end, (unsigned long long)(t->end - t->begin), d, (long long)n,
                         (unsigned long long)bytes);
    return USP_OK;
}

static usp_status parse_metadata(const char *path, json_t *v)
{
    const char *key;
    json_t *value;
    if (!json_is_object(v))
        return usp_error(USP_ERR_CONFIG, "%s: \"__metadata__\" must be an object of strings", path);
    json_object_foreach(v, key, value)
        if (!json_is_string(value))
            return usp_error(USP_ERR_CONFIG, "%s: \"__metadata__\" entry \"%.60s\" is not a string", path, key);
    return USP_OK;
}

typedef struct st_span {
    uint64_t begin, end;
    size_t index;
} st_span;

static int by_begin(const void *a, const void *b)
{
    const st_span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Two non-empty tensors must not share a byte: sorted by begin, each must start
 * at or after the end of the one before. */
static usp_status check_overlaps(const char *path, const usp_st_tensor *t, size_t n)
{
    st_span *span;
    USP_CHECK(usp_calloc((void **)&span, n, sizeof *span, "safetensors tensor ranges"));
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i].begin != t[i].end)
            span[m++] = (st_span){t[i].begin, t[i].end, i};
    qsort(span, m, sizeof *span, by_begin);
    usp_status s = USP_OK;
    for (size_t i = 1; i < m && s == USP_OK; i++)
        if (span[i].begin < span[i - 1].end) {
            const usp_st_tensor *a = &t[span[i - 1].index], *b = &t[span[i].index];
            s = usp_error(USP_ERR_CONFIG, "%s: tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) overlap in the "
                          "data section", path, a->name, (unsigned long long)a->begin, (unsigned long long)a->end,
                          b->name, (unsigned long long)b->begin, (unsigned long long)b->end);
        }
    free(span);
    return s;
}

static usp_status parse_header(usp_safetensors *st, const char *text, size_t len)
{
    const char *path = st->path;
    if (len == 0 || text[0] != '{')
        return usp_error(USP_ERR_CONFIG, "%s: the header does not start with '{'; this is not a safetensors file "
                         "(or it is damaged)", path);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return usp_error(USP_ERR_CONFIG, "%s: the header is not valid JSON (byte %d: %s)", path, jerr.position,
                         jerr.text);
    usp_status s = USP_OK;
    if (!json_is_object(root)) {
        s = usp_error(USP_ERR_CONFIG, "%s: the header is not a JSON object", path);
        goto done;
    }
    size_t n = json_object_size(root);
    USP_CHECK_GOTO(usp_calloc((void **)&st->tensors, n, sizeof *st->tensors, "safetensors header"), s, done);
    const uint64_t data_size = st->file_size - st->data_offset;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        if (strcmp(key, "__metadata__") == 0) {
            USP_CHECK_GOTO(parse_metadata(path, value), s, done);
            st->metadata = json_incref(value);
            continue;
        }
        USP_CHECK_GOTO(parse_tensor(path, key, value, data_size, &st->tensors[st->n_tensors]), s, done);
        st->n_tensors++;
    }
    s = check_overlaps(path, st->tensors, st->n_tensors);
done:
    json_decref(root);
    return s;
}

usp_status usp_safetensors_open(const char *path, usp_safetensors *out)
{
    usp_safetensors st = {0};
    usp_status s = USP_OK;
    char *header = NULL;
    st.path = strdup(path);
    if (!st.path)
        return usp_error(USP_ERR_RUNTIME, "out of memory opening %s", path);
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below */
    struct stat sb;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) != 0) {
        s = usp_error(USP_ERR_CONFIG, "cannot read safetensors file %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        s = usp_error(USP_ERR_CONFIG, "%s is not a regular file (give a .safetensors file)", path);
        goto fail;
    }
    st.fp = fdopen(fd, "rb");
    if (!st.fp) {
        close(fd);
        s = usp_error(USP_ERR_RUNTIME, "cannot read safetensors file %s: %s", path, strerror(errno));
        goto fail;
    }
    st.file_size = (uint64_t)sb.st_size;
    unsigned char len_bytes[8];
    if (st.file_size < 8 || fread(len_bytes, 1, 8, st.fp) != 8) {
        s = usp_error(USP_ERR_CONFIG, "%s: the file is %llu bytes; a safetensors file starts with an 8-byte header "
                      "length (truncated?)", path, (unsigned long long)st.file_size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | len_bytes[i];
    if (hlen > st.file_size - 8 || hlen > ST_MAX_HEADER) {
        s = usp_error(USP_ERR_CONFIG, "%s: the header length %llu runs past the end of the file (%llu bytes) or "
                      "over the 100 MB limit; the file is truncated or not safetensors", path,
                      (unsigned long long)hlen, (unsigned long long)st.file_size);
        goto fail;
    }
    st.data_offset = 8 + hlen;
    USP_CHECK_GOTO(usp_malloc((void **)&header, (size_t)hlen + 1, "safetensors header"), s, fail);
    if (fread(header, 1, (size_t)hlen, st.fp) != hlen) {
        s = usp_error(USP_ERR_CONFIG, "%s: cannot read the %llu-byte header (the file changed while read?)", path,
                      (unsigned long long)hlen);
        goto fail;
    }
    header[hlen] = '\0';
    USP_CHECK_GOTO(parse_header(&st, header, (size_t)hlen), s, fail);
    free(header);
    *out = st;
    return USP_OK;
fail:
    free(header);
    usp_safetensors_close(&st);
    return s;
}

const usp_st_tensor *usp_safetensors_find(const usp_safetensors *st, const char *name)
{
    for (size_t i = 0; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0)
            return &st->tensors[i];
    return NULL;
}

const char *usp_safetensors_metadata_get(const usp_safetensors *st, const char *key)
{
    return st->metadata ? json_string_value(json_object_get((const json_t *)st->metadata, key)) : NULL;
}

static void format_shape(const usp_st_tensor *t, char *buf, size_t cap)
{
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
}

usp_status usp_safetensors_read_f32(const usp_safetensors *st, const usp_st_tensor *t, float *dst, int64_t n_elems)
{
    if (n_elems != t->n_elems) {
        char shape[200];
        format_shape(t, shape, sizeof shape);
        return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\" has shape %s (%lld elements), but %lld were expected "
                         "(does the checkpoint match the model config?)", st->path, t->name, shape,
                         (long long)t->n_elems, (long long)n_elems);
    }
    return usp_safetensors_read_range_f32(st, t, 0, n_elems, dst);
}

usp_status usp_safetensors_read_range_f32(const usp_safetensors *st, const usp_st_tensor *t, int64_t first,
                                          int64_t n, float *dst)
{
    USP_ASSERT(first >= 0 && n >= 0 && first + n <= t->n_elems, "elements [%lld, %lld) of a tensor of %lld",
               (long long)first, (long long)(first + n), (long long)t->n_elems);
    if (n == 0)
        return USP_OK;
    const size_t size = dtype_size[t->dtype], count = (size_t)n;
    if (fseeko(st->fp, (off_t)(st->data_offset + t->begin + (uint64_t)first * size), SEEK_SET) != 0)
        return usp_error(USP_ERR_RUNTIME, "%s: tensor \"%s\": cannot seek: %s", st->path, t->name, strerror(errno));
    /* half-precision values are read into the upper half of dst and widened
     * upwards from the front: value i (at byte 2n + 2i) is read before float i
     * (bytes 4i..4i+3, never past it) is written, so no second buffer is needed */
    unsigned char *raw = (unsigned char *)dst + (size == 2 ? 2 * count : 0);
    if (fread(raw, size, count, st->fp) != count)
        return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\": the file ended early (was it changed after it was "
                         "opened?)", st->path, t->name);
    for (size_t i = 0; size == 2 && i < count; i++) {
        uint16_t h;
        memcpy(&h, raw + 2 * i, sizeof h);
        dst[i] = t->dtype == USP_ST_F16 ? usp_st_f16_to_f32(h) : usp_bf16_to_f32(h);
    }
    return USP_OK;
}

/* ---- writing ------------------------------------------------------------------------------ */

/* The metadata object: the caller's (checked) plus "format": "pt". */
static usp_status build_metadata(const char *path, const char *metadata_json, json_t **out)
{
    json_t *m = metadata_json ? json_loads(metadata_json, JSON_REJECT_DUPLICATES, NULL) : json_object();
    if (!m || parse_metadata(path, m) != USP_OK) {
        json_decref(m);
        return usp_error(USP_ERR_CONFIG, "%s: metadata %.80s is not a JSON object of strings", path, metadata_json);
    }
    if (!json_object_get(m, "format") && json_object_set_new(m, "format", json_string("pt")) != 0) {
        json_decref(m);
        return usp_error(USP_ERR_RUNTIME, "out of memory writing %s", path);
    }
    *out = m;
    return USP_OK;
}

/* Elements of an entry (0 when any size is 0, however large the others); sets *overflow. */
static uint64_t entry_elems(const usp_st_entry *e, int *overflow)
{
    uint64_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        if (e->shape[d] == 0)
            return 0;
    for (int d = 0; d < e->ndim; d++)
        *overflow |= __builtin_mul_overflow(n, (uint64_t)e->shape[d], &n);
    return n;
}

/* The header object in file order; *data_bytes is the size of the data section. */
static usp_status build_header(const char *path, const usp_st_entry *e, size_t n, int need_data, json_t *header,
                               uint64_t *data_bytes)
{
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = e[i].name;
        if (!name || strlen(name) >= USP_ST_NAME_MAX || strcmp(name, "__metadata__") == 0)
            return usp_error(USP_ERR_CONFIG, "%s: tensor %zu has name \"%.60s\"; names must be shorter than %d bytes "
                             "and not __metadata__", path, i, name ? name : "(null)", USP_ST_NAME_MAX);
        if (json_object_get(header, name))
            return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\" is given twice", path, name);
        if (e[i].ndim < 0 || e[i].ndim > USP_ST_MAX_DIMS)
            return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\" has %d dimensions; 0 to %d are possible", path, name,
                             e[i].ndim, USP_ST_MAX_DIMS);
        int overflow = 0;
        json_t *shape = json_array();
        for (int d = 0; d < e[i].ndim; d++) {
            if (e[i].shape[d] < 0) {
                json_decref(shape);
                return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\" has size %lld in dimension %d", path, name,
                                 (long long)e[i].shape[d], d);
            }
            json_array_append_new(shape, json_integer(e[i].shape[d]));
        }
        uint64_t elems = entry_elems(&e[i], &overflow);
        uint64_t bytes = 0, end = 0;
        overflow |= __builtin_mul_overflow(elems, (uint64_t)4, &bytes);
        overflow |= __builtin_add_overflow(at, bytes, &end);
        if (overflow || end > (uint64_t)INT64_MAX || (need_data && bytes && !e[i].data)) {
            json_decref(shape);
            return usp_error(USP_ERR_CONFIG, "%s: tensor \"%s\": %s", path, name,
                             overflow || end > (uint64_t)INT64_MAX ? "too large to write" : "no data");
        }
        json_t *entry = json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", shape, "data_offsets",
                                  (json_int_t)at, (json_int_t)end);
        if (!entry || json_object_set_new(header, name, entry) != 0)
            return usp_error(USP_ERR_RUNTIME, "out of memory writing %s", path);
        at = end;
    }
    *data_bytes = at;
    return USP_OK;
}

/* The writer's header for `entries`, whose data must be there when need_data. */
static usp_status writer_open(usp_st_writer *w, const char *path, const usp_st_entry *entries, size_t n,
                              int need_data, const char *metadata_json)
{
    json_t *header = json_object(), *meta = NULL;
    char *text = NULL;
    usp_status s = USP_OK;
    *w = (usp_st_writer){0};
    if (!header)
        return usp_error(USP_ERR_RUNTIME, "out of memory writing %s", path);
    /* __metadata__ first, as the reference writer puts it */
    USP_CHECK_GOTO(build_metadata(path, metadata_json, &meta), s, done);
    json_object_set_new(header, "__metadata__", meta);
    USP_CHECK_GOTO(build_header(path, entries, n, need_data, header, &w->data_bytes), s, done);
    text = json_dumps(header, JSON_COMPACT);
    if (!text) {
        s = usp_error(USP_ERR_RUNTIME, "out of memory writing %s", path);
        goto done;
    }
    /* pad with spaces so the data section starts 8-byte aligned (8 + hlen) */
    size_t len = strlen(text), hlen = (len + 7) / 8 * 8;
    unsigned char len_bytes[8];
    for (int i = 0; i < 8; i++)
        len_bytes[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    USP_CHECK_GOTO(usp_atomic_file_open(&w->f, path), s, done);
    fwrite(len_bytes, 1, 8, w->f.fp);
    fwrite(text, 1, len, w->f.fp);
    for (size_t i = len; i < hlen; i++)
        fputc(' ', w->f.fp); /* errors surface in ferror at commit */
done:
    free(text);
    json_decref(header);
    return s;
}

usp_status usp_st_writer_open(usp_st_writer *w, const char *path, const usp_st_entry *entries, size_t n,
                              const char *metadata_json)
{
    return writer_open(w, path, entries, n, 0, metadata_json);
}

usp_status usp_st_writer_put(usp_st_writer *w, const float *data, size_t n)
{
    USP_ASSERT(w->written + n * sizeof *data <= w->data_bytes, "%s: %zu bytes put past the %llu of the header",
               w->f.path, (size_t)w->written + n * sizeof *data, (unsigned long long)w->data_bytes);
    if (n && fwrite(data, sizeof *data, n, w->f.fp) != n)
        return usp_error(USP_ERR_RUNTIME, "cannot write %s: %s", w->f.path, strerror(errno));
    w->written += n * sizeof *data;
    return USP_OK;
}

usp_status usp_st_writer_commit(usp_st_writer *w)
{
    USP_ASSERT(w->written == w->data_bytes, "%s: %llu bytes of data put, the header says %llu", w->f.path,
               (unsigned long long)w->written, (unsigned long long)w->data_bytes);
    return usp_atomic_file_commit(&w->f);
}

void usp_st_writer_abort(usp_st_writer *w)
{
    usp_atomic_file_abort(&w->f);
}

usp_status usp_safetensors_write(const char *path, const usp_st_entry *entries, size_t n, const char *metadata_json)
{
    usp_st_writer w;
    USP_CHECK(writer_open(&w, path, entries, n, 1, metadata_json));
    usp_status s = USP_OK;
    for (size_t i = 0; i < n && s == USP_OK; i++) {
        int overflow = 0;
        s = usp_st_writer_put(&w, entries[i].data, (size_t)entry_elems(&entries[i], &overflow)); /* checked */
    }
    if (s == USP_OK)
        return usp_st_writer_commit(&w);
    usp_st_writer_abort(&w);
    return s;
}
