/* libFuzzer target: the safetensors reader on arbitrary bytes.
 *
 * An input is a whole file, or, when it starts with '{', a header and data
 * separated by the first NUL byte (the length prefix is then computed here, so
 * mutations reach the header validation instead of dying at the framing).
 * Besides "never crashes, never leaks" (ASan/UBSan/LSan), it checks a
 * property: every file the reader accepts reads back in full, and writing
 * what was read as F32 and reading that again gives the same bits. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_scratch.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_scratch_make("st", "out.safetensors");
    return 0;
}

/* The input as an in-memory file (memfd), named through /proc/self/fd. */
static int input_file(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("usp_fuzz", 0);
    if (fd < 0)
        abort();
    const uint8_t *nul = size && data[0] == '{' ? memchr(data, 0, size) : NULL;
    if (size && data[0] == '{') {
        uint64_t hlen = nul ? (uint64_t)(nul - data) : size;
        uint8_t prefix[8];
        for (int i = 0; i < 8; i++)
            prefix[i] = (uint8_t)(hlen >> (8 * i));
        if (write(fd, prefix, 8) != 8 || write(fd, data, hlen) != (ssize_t)hlen)
            abort();
        if (nul && write(fd, nul + 1, size - hlen - 1) != (ssize_t)(size - hlen - 1))
            abort();
    } else if (size && write(fd, data, size) != (ssize_t)size) {
        abort();
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

static float *read_all(const usp_safetensors *st, const usp_st_tensor *t)
{
    float *v = malloc((size_t)(t->n_elems ? t->n_elems : 1) * sizeof *v);
    if (!v)
        abort();
    if (usp_safetensors_read_f32(st, t, v, t->n_elems) != USP_OK)
        abort(); /* an accepted file must read in full */
    if (t->n_elems && usp_safetensors_read_f32(st, t, v, t->n_elems - 1) != USP_ERR_CONFIG)
        abort();
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = input_file(data, size, path, sizeof path);
    usp_safetensors st;
    if (usp_safetensors_open(path, &st) != USP_OK) {
        close(fd);
        return 0;
    }
    size_t n = st.n_tensors;
    usp_st_entry *e = calloc(n ? n : 1, sizeof *e);
    if (!e)
        abort();
    for (size_t i = 0; i < n; i++) {
        const usp_st_tensor *t = &st.tensors[i];
        if (usp_safetensors_find(&st, t->name) != t) /* names are unique */
            abort();
        e[i].name = t->name;
        e[i].ndim = t->ndim;
        memcpy(e[i].shape, t->shape, sizeof e[i].shape);
        e[i].data = read_all(&st, t);
    }
    if (usp_safetensors_write(out_path, e, n, NULL) != USP_OK)
        abort();
    usp_safetensors back;
    if (usp_safetensors_open(out_path, &back) != USP_OK || back.n_tensors != n)
        abort();
    for (size_t i = 0; i < n; i++) {
        const usp_st_tensor *t = usp_safetensors_find(&back, e[i].name);
        if (!t || t->dtype != USP_ST_F32 || t->ndim != e[i].ndim || memcmp(t->shape, e[i].shape, sizeof t->shape))
            abort();
        float *v = read_all(&back, t);
        if (t->n_elems && memcmp(v, e[i].data, (size_t)t->n_elems * sizeof *v) != 0)
            abort();
        free(v);
    }
    usp_safetensors_close(&back);
    for (size_t i = 0; i < n; i++)
        free((void *)e[i].data);
    free(e);
    usp_safetensors_close(&st);
    close(fd);
    return 0;
}
