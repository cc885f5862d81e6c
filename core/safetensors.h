/* safetensors files: the checkpoint format of Hugging Face, read and written.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of a JSON object
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 * "__metadata__": {"key": "value"}}, then the data section; offsets count
 * from the start of the data section. A file is validated whole when opened
 * (every input is untrusted: the reader is fuzzed), tensors are read one at
 * a time into f32 (F16 and BF16 converted exactly), and files are written in
 * F32 whole-or-nothing. */
#ifndef USP_SAFETENSORS_H
#define USP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"

#define USP_ST_MAX_DIMS 8
#define USP_ST_NAME_MAX 160

typedef enum usp_st_dtype { USP_ST_F32, USP_ST_F16, USP_ST_BF16 } usp_st_dtype;

typedef struct usp_st_tensor {
    char name[USP_ST_NAME_MAX];
    usp_st_dtype dtype;
    int ndim;
    int64_t shape[USP_ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets in the data section */
    int64_t n_elems;     /* product of the shape (1 for a scalar) */
} usp_st_tensor;

typedef struct usp_safetensors {
    char *path;
    usp_st_tensor *tensors; /* in the order of the header */
    size_t n_tensors;
    uint64_t data_offset, file_size;
    FILE *fp;
    void *metadata; /* the "__metadata__" object (a json_t *), or NULL */
} usp_safetensors;

/* Opens and validates `path`; bad files are USP_ERR_CONFIG naming the file (and the tensor). */
usp_status usp_safetensors_open(const char *path, usp_safetensors *out);

/* The tensor called `name`, or NULL. */
const usp_st_tensor *usp_safetensors_find(const usp_safetensors *st, const char *name);

/* Reads tensor t into dst as f32; n_elems must be the tensor's element count. */
usp_status usp_safetensors_read_f32(const usp_safetensors *st, const usp_st_tensor *t, float *dst, int64_t n_elems);

/* The value of `key` in the file's __metadata__, or NULL. */
const char *usp_safetensors_metadata_get(const usp_safetensors *st, const char *key);

/* Closes the file and frees everything (safe on a zeroed or already closed struct). */
void usp_safetensors_close(usp_safetensors *st);

/* Name of a dtype as the header spells it ("F32", "F16", "BF16"). */
const char *usp_st_dtype_name(usp_st_dtype dtype);

/* f32 value of an IEEE binary16 bit pattern (exact: subnormals, infinities, NaN). */
float usp_st_f16_to_f32(uint16_t h);


typedef struct usp_st_entry {
    const char *name;
    int ndim;
    int64_t shape[USP_ST_MAX_DIMS];
    const float *data; /* product(shape) floats */
} usp_st_entry;

/* Writes an F32 safetensors file: header padded to 8 bytes, tensors in the
 * given order, atomically. metadata_json: NULL or a JSON object of strings;
 * "format": "pt" is added when absent (transformers refuses a file without it). */
usp_status usp_safetensors_write(const char *path, const usp_st_entry *entries, size_t n,
                                 const char *metadata_json);

#endif
