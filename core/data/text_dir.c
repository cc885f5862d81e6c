/* A directory of text files as one stream of documents (text_dir.h). */
#include "core/data/text_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int text_dir_is(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The regular files of directory `path` in the order of their names (scandir's alphasort), as paths into
 * *names [*n] (each and the array malloc'd). */
static usp_status list_files(const char *path, char ***names, size_t *n)
{
    struct dirent **entries;
    *names = NULL, *n = 0;
    const int count = scandir(path, &entries, NULL, alphasort);
    if (count < 0)
        return usp_error(USP_ERR_CONFIG, "--data text:%s: cannot open the directory: %s", path, strerror(errno));
    usp_status s = USP_OK;
    *names = malloc((size_t)(count ? count : 1) * sizeof **names);
    if (!*names)
        s = usp_error(USP_ERR_RUNTIME, "out of memory listing %s", path);
    for (int i = 0; i < count; i++) {
        char file[4096];
        struct stat sb;
        if (s == USP_OK && snprintf(file, sizeof file, "%s/%s", path, entries[i]->d_name) < (int)sizeof file &&
            stat(file, &sb) == 0 && S_ISREG(sb.st_mode) && !((*names)[(*n)++] = strdup(file)))
            s = usp_error(USP_ERR_RUNTIME, "out of memory listing %s", path);
        free(entries[i]);
    }
    free(entries);
    if (s == USP_OK && *n == 0)
        s = usp_error(USP_ERR_CONFIG, "--data text:%s: the directory holds no regular file (text:DIR reads each "
                      "file as a document)", path);
    return s;
}

/* Appends file `name` and the end-of-text byte to *bytes [*size, *cap]. */
static usp_status append_file(const char *name, char **bytes, size_t *size, size_t *cap)
{
    FILE *f = fopen(name, "rb");
    if (!f)
        return usp_error(USP_ERR_CONFIG, "--data text: cannot open %s: %s", name, strerror(errno));
    usp_status s = USP_OK;
    long long at = 0; /* the file's bytes read so far */
    for (size_t got = 1; s == USP_OK && got > 0; at += (long long)got) {
        if (*cap - *size < 65536 + 1) {
            *cap = *cap * 2 + 65536 + 1;
            char *grown = realloc(*bytes, *cap);
            if (!grown) {
                s = usp_error(USP_ERR_RUNTIME, "out of memory reading %s", name);
                break;
            }
            *bytes = grown;
        }
        got = fread(*bytes + *size, 1, 65536, f);
        const char *nul = memchr(*bytes + *size, USP_TEXT_DIR_EOT, got);
        if (nul)
            s = usp_error(USP_ERR_CONFIG, "--data text: %s holds a 0 byte at offset %lld; text:DIR ends each file's "
                          "document with that byte, so its files must be text", name, at + (nul - (*bytes + *size)));
        *size += got;
    }
    if (s == USP_OK && ferror(f))
        s = usp_error(USP_ERR_CONFIG, "--data text: cannot read %s", name);
    fclose(f);
    if (s == USP_OK)
        (*bytes)[(*size)++] = USP_TEXT_DIR_EOT;
    return s;
}

usp_status text_dir_read(const char *path, char **bytes, size_t *size)
{
    char **names;
    size_t n, cap = 0;
    *bytes = NULL, *size = 0;
    usp_status s = list_files(path, &names, &n);
    for (size_t i = 0; i < n && s == USP_OK; i++)
        s = append_file(names[i], bytes, size, &cap);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (s != USP_OK)
        free(*bytes), *bytes = NULL, *size = 0;
    return s;
}
