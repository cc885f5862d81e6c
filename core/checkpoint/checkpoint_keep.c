/* The checkpoints kept beside DIR (see checkpoint_internal.h, ckpt_keep_replaced): a save that
 * replaces a usp checkpoint of step N renames it DIR-step-N rather than removing it, then removes
 * all but the newest keep - 1 of the DIR-step-* beside DIR. DIR itself is always the newest. */
#include "core/checkpoint/checkpoint_internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEPT_INFIX "-step-"

/* The step N of `name` when it is `base`-step-N (digits only), else -1. */
static int64_t kept_step(const char *name, const char *base)
{
    size_t n = strlen(base), m = strlen(KEPT_INFIX);
    if (strncmp(name, base, n) != 0 || strncmp(name + n, KEPT_INFIX, m) != 0 || !name[n + m])
        return -1;
    int64_t step = 0;
    for (const char *p = name + n + m; *p; p++) {
        if (*p < '0' || *p > '9' || step > (INT64_MAX - 9) / 10)
            return -1;
        step = step * 10 + (*p - '0');
    }
    return step;
}

static int newest_first(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Removes all but the newest `keep` of the DIR-step-* in DIR's folder. */
static usp_status prune(const char *folder, const char *base, int keep)
{
    DIR *h = opendir(folder);
    if (!h)
        return usp_error(USP_ERR_RUNTIME, "cannot list %s to prune the kept checkpoints: %s", folder,
                         strerror(errno));
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    usp_status s = USP_OK;
    for (struct dirent *e; s == USP_OK && (e = readdir(h)) != NULL;) {
        int64_t step = kept_step(e->d_name, base);
        if (step < 0)
            continue;
        if (n == cap) {
            int64_t *more = realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *steps);
            if (!more) {
                s = usp_error(USP_ERR_RUNTIME, "out of memory listing the kept checkpoints");
                break;
            }
            steps = more;
        }
        steps[n++] = step;
    }
    closedir(h);
    if (s == USP_OK && n > (size_t)keep) {
        qsort(steps, n, sizeof *steps, newest_first);
        for (size_t i = (size_t)keep; i < n; i++) {
            char path[PATH_MAX];
            if (snprintf(path, sizeof path, "%s/%s" KEPT_INFIX "%lld", folder, base, (long long)steps[i]) <
                (int)sizeof path) /* no longer than the one kept (ckpt_keep_replaced checked it) */
                usp_atomic_dir_remove(path);
        }
    }
    free(steps);
    return s;
}

usp_status ckpt_keep_replaced(usp_atomic_dir *d, const char *dir, int keep)
{
    if (keep < 2)
        return USP_OK; /* usp_atomic_dir_close removes the replaced directory */
    usp_checkpoint_state old;
    if (usp_checkpoint_read_state(d->tmp_path, &old) != USP_OK || !old.is_usp) {
        usp_error_clear(); /* nothing replaced, or no usp checkpoint (Hugging Face's): not kept */
        return USP_OK;
    }
    /* DIR, its trailing slashes dropped, is FOLDER/BASE (FOLDER "." without a slash) */
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    size_t cut = len; /* the last slash of dir[0, len), or len for none */
    for (size_t i = 0; i < len; i++)
        cut = dir[i] == '/' ? i : cut;
    char path[PATH_MAX], folder[PATH_MAX], base[NAME_MAX + 1];
    if (cut == len)
        snprintf(folder, sizeof folder, ".");
    else
        snprintf(folder, sizeof folder, "%.*s", cut == 0 ? 1 : (int)cut, dir);
    snprintf(base, sizeof base, "%.*s", (int)(cut == len ? len : len - cut - 1), cut == len ? dir : dir + cut + 1);
    int n = snprintf(path, sizeof path, "%.*s" KEPT_INFIX "%lld", (int)len, dir, (long long)old.step);
    if (n < 0 || (size_t)n >= sizeof path || strlen(base) + strlen(KEPT_INFIX) + 20 > NAME_MAX)
        return usp_error(USP_ERR_CONFIG, "--keep: %.*s" KEPT_INFIX "%lld, where the replaced checkpoint would be "
                         "kept, is over PATH_MAX or NAME_MAX: give --save a shorter DIR", (int)len, dir,
                         (long long)old.step);
    usp_atomic_dir_remove(path); /* a kept one of that step from an earlier run */
    USP_CHECK(usp_atomic_dir_keep_old(d, path));
    return prune(folder, base, keep - 1);
}
