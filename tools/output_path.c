/* Output paths checked before a run (see output_path.h): an output written
 * only at the end (--save DIR, --trace FILE, --dot FILE) is checked before
 * step 1. Creates nothing: a refused run leaves no file. */
#include "tools/output_path.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/atomic_file.h"

usp_status output_path_check(const char *option, const char *path, int is_dir)
{
    /* A checkpoint is written as DIR.tmp-XXXXXX/optimizer.safetensors.tmp.PID: the most usp adds to DIR. */
    size_t dir_suffix = strlen(".tmp-XXXXXX"), dir_added = dir_suffix + strlen("/optimizer.safetensors.tmp.") + 20;
    USP_CHECK(usp_atomic_path_check(option, path, is_dir ? dir_suffix : 0, is_dir ? dir_added : 24));
    struct stat st;
    int exists = stat(path, &st) == 0;
    if (exists && !is_dir && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) { /* a device or FIFO: written through */
        if (access(path, W_OK) != 0)
            return usp_error(USP_ERR_CONFIG, "%s %s: cannot write it (%s)", option, path, strerror(errno));
        return USP_OK;
    }
    if (exists && is_dir != S_ISDIR(st.st_mode))
        return is_dir ? usp_error(USP_ERR_CONFIG, "%s %s: exists and is not a directory; name a new or an existing "
                                  "directory", option, path)
                      : usp_error(USP_ERR_CONFIG, "%s %s: is a directory; name a file in it, e.g. %s %s/out", option,
                                  path, option, path);
    if (exists && is_dir) {
        if (access(path, W_OK | X_OK) != 0)
            return usp_error(USP_ERR_CONFIG, "%s %s: cannot write in this directory (%s); name one this user can "
                             "write", option, path, strerror(errno));
        return USP_OK;
    }
    /* A new path, or a file replaced through a new file beside it: its directory must take one. */
    char parent[PATH_MAX]; /* path is shorter: usp_atomic_path_check */
    size_t n = strlen(path);
    if (n >= sizeof parent)
        return usp_error(USP_ERR_CONFIG, "%s %s: the path is too long", option, path);
    memcpy(parent, path, n + 1);
    while (n > 1 && parent[n - 1] == '/') /* "dir/" names dir */
        parent[--n] = '\0';
    char *slash = strrchr(parent, '/');
    if (!slash)
        strcpy(parent, ".");
    else
        slash[slash == parent ? 1 : 0] = '\0';
    if (stat(parent, &st) != 0)
        return usp_error(USP_ERR_CONFIG, "%s %s: the directory %s does not exist (%s); create it first", option, path,
                         parent, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return usp_error(USP_ERR_CONFIG, "%s %s: %s is not a directory", option, path, parent);
    if (access(parent, W_OK | X_OK) != 0)
        return usp_error(USP_ERR_CONFIG, "%s %s: cannot write in the directory %s (%s)", option, path, parent,
                         strerror(errno));
    return USP_OK;
}
