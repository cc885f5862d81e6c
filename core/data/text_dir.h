/* text:DIR, a directory of text files as one stream of byte tokens (core/data/data.h): each regular file,
 * in the order of their names, one document ended by a 0 byte, its end-of-text token. */
#ifndef USP_DATA_TEXT_DIR_H
#define USP_DATA_TEXT_DIR_H

#include <stddef.h>

#include "core/base/status.h"

/* The byte that ends each file's document: text files do not hold it. */
#define USP_TEXT_DIR_EOT 0

/* 1 when `path` is a directory. */
int text_dir_is(const char *path);

/* The files of directory `path` concatenated, each followed by USP_TEXT_DIR_EOT, into *bytes [*size]
 * (malloc'd; free it). USP_ERR_CONFIG naming the directory when it holds no regular file, or naming the
 * file and the offset where a file holds a 0 byte. */
usp_status text_dir_read(const char *path, char **bytes, size_t *size);

#endif
