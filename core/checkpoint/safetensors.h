/* safetensors files: the checkpoint format of Hugging Face, read and written.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of a JSON object
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 * "__metadata__": {"key": "value"}}, then the data section; offsets count
 * from the start of the data section. A file is validated whole when opened
 * (every input is untrusted: the reader is fuzzed), tensors are read one at
 * a time, or a range of elements at a time, into f32 (F16 and BF16 converted
 * exactly), and files are written in F32 whole-or-nothing, in one call or as a
 * stream (usp_st_writer: a checkpoint larger than memory). */
#ifndef USP_SAFETENSORS_H
#define USP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/base/atomic_file.h"
#include "core/base/status.h"

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

/* Reads elements [first, first + n) of tensor t (in file order) into dst[n] as f32. */
usp_status usp_safetensors_read_range_f32(const usp_safetensors *st, const usp_st_tensor *t, int64_t first,
                                          int64_t n, float *dst);

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

/* A file written as a stream: the header from the shapes alone, then the data in header order. */
typedef struct usp_st_writer {
    usp_atomic_file f;
    uint64_t data_bytes, written; /* the data section the header announces, and what was put so far */
} usp_st_writer;

/* Opens `path` (atomically, as usp_safetensors_write) and writes the header of `entries` (their data is not read). */
usp_status usp_st_writer_open(usp_st_writer *w, const char *path, const usp_st_entry *entries, size_t n,
                              const char *metadata_json);

/* Appends n floats of tensor data, in the order of the entries. */
usp_status usp_st_writer_put(usp_st_writer *w, const float *data, size_t n);

/* Commits the file once all the data the header announces has been put. */
usp_status usp_st_writer_commit(usp_st_writer *w);

/* Removes the unfinished file (safe after a failed open or a commit). */
void usp_st_writer_abort(usp_st_writer *w);

#endif
