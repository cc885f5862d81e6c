/* Whole-or-nothing output files and directories (temporary name, fsync, rename). */
#include "core/base/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The most usp adds to a file's path to write it: ".tmp." and a pid (at most 19 digits). */
#define TMP_SUFFIX_MAX 24

usp_status usp_atomic_path_check(const char *option, const char *path, size_t added_to_last, size_t added_to_path)
{
    size_t n = strlen(path);
    if (n + added_to_path >= PATH_MAX)
        return usp_error(USP_ERR_CONFIG, "%s %s: the path is %zu characters; with the %zu that usp adds to write it, "
                         "it is over the %d of PATH_MAX: name a shorter path", option, path, n, added_to_path,
                         PATH_MAX);
    for (const char *c = path; *c;) {
        size_t len = strcspn(c, "/"), added = c[len] == '\0' ? added_to_last : 0;
        if (len + added > NAME_MAX)
            return usp_error(USP_ERR_CONFIG, "%s %s: the name '%.*s' is %zu characters%s, over the %d of NAME_MAX: "
                             "name it in at most %zu", option, path, (int)len, c, len,
                             added ? " with the suffix usp adds to write it" : "", NAME_MAX, (size_t)NAME_MAX - added);
        c += len;
        c += strspn(c, "/");
    }
    return USP_OK;
}

/* Follows `path` through symbolic links to the name that is really written (a
 * relative link target is relative to the link's directory); a malloc'd copy,
 * or NULL with errno set (ELOOP after 40 links, as the kernel). */
static char *resolved_target(const char *path)
{
    char *now = strdup(path);
    for (int hops = 0; now; hops++) {
        struct stat st;
        if (lstat(now, &st) != 0 || !S_ISLNK(st.st_mode))
            return now; /* missing (a new file) or not a link: written here */
        if (hops == 40) {
            free(now);
            errno = ELOOP;
            return NULL;
        }
        char *target = malloc((size_t)st.st_size + 1);
        ssize_t len = target ? readlink(now, target, (size_t)st.st_size + 1) : -1;
        if (len < 0 || len > st.st_size) { /* the link changed under us: refuse rather than cut it */
            int e = len < 0 ? errno : ENAMETOOLONG;
            free(target), free(now);
            errno = e;
            return NULL;
        }
        target[len] = '\0';
        char *slash = strrchr(now, '/');
        if (target[0] == '/' || !slash) {
            free(now);
            now = target;
            continue;
        }
        size_t dir_len = (size_t)(slash - now) + 1, n = dir_len + (size_t)len + 1;
        char *next = malloc(n);
        if (next)
            snprintf(next, n, "%.*s%s", (int)dir_len, now, target);
        free(target), free(now);
        now = next;
    }
    errno = ENOMEM;
    return NULL;
}

usp_status usp_atomic_file_open(usp_atomic_file *f, const char *path)
{
    *f = (usp_atomic_file){0};
    usp_status s = USP_OK;
    USP_CHECK(usp_atomic_path_check("output", path, 0, TMP_SUFFIX_MAX));
    struct stat st; /* what the kernel finds at the end of the links: /dev/stdout may end in "pipe:[N]", no path */
    int exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
        return usp_error(USP_ERR_CONFIG, "cannot write %s: it is a directory; name a file", path);
    f->direct = exists && !S_ISREG(st.st_mode);
    f->path = f->direct ? strdup(path) : resolved_target(path);
    if (!f->path)
        return usp_error(USP_ERR_CONFIG, "cannot write %s: following its symbolic link: %s", path, strerror(errno));
    if (strcmp(f->path, path) != 0) /* a link's target can be longer than the link */
        USP_CHECK_GOTO(usp_atomic_path_check("output", f->path, 0, TMP_SUFFIX_MAX), s, failed);
    if (f->direct) { /* a device, FIFO or socket: written through, never replaced by a regular file */
        f->fp = fopen(f->path, "wb");
    } else {
        /* The temporary name is the target's name cut to leave room for ".tmp.PID" in
         * NAME_MAX: any name the OS takes can be written, and the cut is only ever usp's own. */
        const char *slash = strrchr(f->path, '/'), *base = slash ? slash + 1 : f->path;
        size_t dir_len = (size_t)(base - f->path), base_len = strlen(base), n = strlen(f->path) + TMP_SUFFIX_MAX + 1;
        int keep = (int)(base_len < NAME_MAX - TMP_SUFFIX_MAX ? base_len : NAME_MAX - TMP_SUFFIX_MAX);
        f->tmp_path = malloc(n);
        if (!f->tmp_path) {
            s = usp_error(USP_ERR_RUNTIME, "out of memory opening %s", path);
            goto failed;
        }
        snprintf(f->tmp_path, n, "%.*s%.*s.tmp.%ld", (int)dir_len, f->path, keep, base, (long)getpid());
        f->fp = fopen(f->tmp_path, "wb");
    }
    if (!f->fp) {
        s = usp_error(USP_ERR_RUNTIME, "cannot write %s: %s", path, strerror(errno));
        goto failed;
    }
    return USP_OK;
failed:
    usp_atomic_file_abort(f);
    return s;
}

usp_status usp_atomic_file_commit(usp_atomic_file *f)
{
    /* fsync on a FIFO or a character device fails with EINVAL: there is nothing on disk to sync. */
    int failed = ferror(f->fp) || fflush(f->fp) != 0 || (!f->direct && fsync(fileno(f->fp)) != 0);
    int e = errno;
    failed |= fclose(f->fp) != 0;
    f->fp = NULL;
    if (failed || (!f->direct && rename(f->tmp_path, f->path) != 0)) {
        e = failed ? e : errno;
        usp_status s = usp_error(USP_ERR_RUNTIME, "cannot write %s: %s", f->path, strerror(e));
        usp_atomic_file_abort(f);
        return s;
    }
    free(f->tmp_path);
    free(f->path);
    *f = (usp_atomic_file){0};
    return USP_OK;
}

void usp_atomic_file_abort(usp_atomic_file *f)
{
    if (f->fp)
        fclose(f->fp);
    if (f->tmp_path)
        remove(f->tmp_path);
    free(f->tmp_path);
    free(f->path);
    *f = (usp_atomic_file){0};
}

/* a, b and c one after another, or NULL when out of memory. */
static char *joined(const char *a, const char *b, const char *c)
{
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s%s", a, b, c);
    return s;
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* fsync on a directory makes the renames and creations inside it durable. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int failed = fsync(fd) != 0, e = errno;
    close(fd);
    errno = e;
    return failed ? -1 : 0;
}

/* Removes the regular files directly in `dir`, then `dir`: a checkpoint is flat,
 * so anything deeper makes rmdir fail and the directory stays for a person to look at. */
static void remove_flat_dir(const char *dir)
{
    DIR *h = opendir(dir);
    if (!h)
        return;
    for (struct dirent *e; (e = readdir(h)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *p = joined(dir, "/", e->d_name);
        if (p)
            unlink(p);
        free(p);
    }
    closedir(h);
    rmdir(dir);
}

/* The parent directory of `path` (no trailing slash), a copy, and where its last component starts. */
static char *parent_of(const char *path, const char **base)
{
    char *trimmed = strdup(path);
    if (!trimmed)
        return NULL;
    char *slash = strrchr(trimmed, '/');
    *base = path + (slash ? (size_t)(slash - trimmed) + 1 : 0);
    if (!slash) {
        free(trimmed);
        return strdup(".");
    }
    if (slash == trimmed)
        slash[1] = '\0'; /* "/x": the parent is "/" */
    else
        *slash = '\0';
    return trimmed;
}

/* Puts DIR.usp-old back when DIR is missing (the fallback swap was killed between its two
 * renames) or removes it when DIR is there (killed before the old one was removed), and
 * removes every DIR.tmp-*: a killed writer's unfinished new directory, or the old one
 * an exchange left behind. Concurrent writers of one DIR are not supported. */
static usp_status recover(const char *path, const char *old_path)
{
    if (exists(old_path)) {
        if (!exists(path) && rename(old_path, path) != 0)
            return usp_error(USP_ERR_RUNTIME, "%s is missing and %s, the previous one, cannot be renamed back: %s",
                             path, old_path, strerror(errno));
        if (exists(old_path))
            remove_flat_dir(old_path);
    }
    const char *base = NULL;
    char *parent = parent_of(path, &base);
    char *prefix = parent ? joined(base, ".tmp-", "") : NULL;
    DIR *h = prefix ? opendir(parent) : NULL;
    for (struct dirent *e; h && (e = readdir(h)) != NULL;) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        char *p = joined(parent, "/", e->d_name);
        if (p)
            remove_flat_dir(p);
        free(p);
    }
    if (h)
        closedir(h);
    free(parent), free(prefix);
    return USP_OK;
}

/* mkdtemp(3), but made by mkdir(2) with mode 0777, so that the umask applies as to any directory
 * the user makes: mkdtemp makes it 0700, and a checkpoint renamed from it stayed 0700. The six X
 * at the end of `name` become letters or digits of a xorshift seeded by the clock and the pid. */
static int make_temp_dir(char *name)
{
    static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t x = ((uint64_t)now.tv_nsec ^ ((uint64_t)now.tv_sec << 30) ^ ((uint64_t)getpid() << 42)) | 1;
    size_t n = strlen(name);
    for (int attempt = 0; attempt < 1000; attempt++) {
        for (size_t i = n - 6; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            name[i] = letters[x % (sizeof letters - 1)];
        }
        if (mkdir(name, 0777) == 0)
            return 0;
        if (errno != EEXIST)
            return -1;
    }
    return -1; /* errno EEXIST */
}

usp_status usp_atomic_dir_open(usp_atomic_dir *d, const char *path)
{
    *d = (usp_atomic_dir){0};
    if (!path[0])
        return usp_error(USP_ERR_CONFIG, "an empty directory name: name the directory to write");
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode))
        return usp_error(USP_ERR_CONFIG, "%s is a file, not a directory: name a new or existing directory", path);
    d->path = strdup(path);
    for (size_t n = d->path ? strlen(d->path) : 0; n > 1 && d->path[n - 1] == '/'; n--)
        d->path[n - 1] = '\0'; /* "ckpt/": the temporary directory goes beside ckpt, not into it */
    char *old_path = d->path ? joined(d->path, USP_ATOMIC_DIR_OLD_SUFFIX, "") : NULL;
    d->tmp_path = d->path ? joined(d->path, ".tmp-XXXXXX", "") : NULL;
    usp_status s = old_path && d->tmp_path ? USP_OK : usp_error(USP_ERR_RUNTIME, "out of memory writing %s", path);
    if (s == USP_OK)
        s = recover(d->path, old_path);
    if (s == USP_OK && make_temp_dir(d->tmp_path) != 0)
        s = usp_error(USP_ERR_RUNTIME, "cannot create %s beside %s: %s", d->tmp_path, path, strerror(errno));
    free(old_path);
    if (s != USP_OK) {
        free(d->path), free(d->tmp_path);
        *d = (usp_atomic_dir){0};
    }
    return s;
}

static int use_exchange = 1;

void usp_atomic_dir_set_exchange(int use) { use_exchange = use; }

/* Swaps d->tmp_path in for DIR: one exchange where the filesystem has it, else two renames. */
static int swap_in(usp_atomic_dir *d)
{
#ifdef RENAME_EXCHANGE
    if (use_exchange) {
        if (renameat2(AT_FDCWD, d->tmp_path, AT_FDCWD, d->path, RENAME_EXCHANGE) == 0)
            return 0;
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP && errno != ENOENT)
            return -1; /* else: no exchange on this filesystem, or no DIR to exchange with */
    }
#endif
    if (!exists(d->path))
        return rename(d->tmp_path, d->path);
    char *old_path = joined(d->path, USP_ATOMIC_DIR_OLD_SUFFIX, "");
    if (!old_path || rename(d->path, old_path) != 0 || rename(d->tmp_path, d->path) != 0) {
        int e = old_path ? errno : ENOMEM;
        free(old_path);
        errno = e;
        return -1;
    }
    free(d->tmp_path);
    d->tmp_path = old_path; /* the old directory, for usp_atomic_dir_close to remove */
    return 0;
}

usp_status usp_atomic_dir_commit(usp_atomic_dir *d)
{
    if (sync_dir(d->tmp_path) != 0)
        return usp_error(USP_ERR_RUNTIME, "cannot sync %s: %s", d->tmp_path, strerror(errno));
    if (swap_in(d) != 0)
        return usp_error(USP_ERR_RUNTIME, "cannot rename %s to %s: %s", d->tmp_path, d->path, strerror(errno));
    const char *base = NULL;
    char *parent = parent_of(d->path, &base);
    int failed = !parent || sync_dir(parent) != 0, e = parent ? errno : ENOMEM;
    free(parent);
    if (failed)
        return usp_error(USP_ERR_RUNTIME, "cannot sync the directory holding %s: %s", d->path, strerror(e));
    return USP_OK;
}

usp_status usp_atomic_dir_keep_old(usp_atomic_dir *d, const char *as)
{
    if (!d->tmp_path || !exists(d->tmp_path))
        return USP_OK; /* no DIR was replaced */
    if (rename(d->tmp_path, as) != 0)
        return usp_error(USP_ERR_RUNTIME, "cannot keep the replaced %s as %s: %s", d->path, as, strerror(errno));
    free(d->tmp_path);
    d->tmp_path = NULL;
    return USP_OK;
}

void usp_atomic_dir_remove(const char *dir) { remove_flat_dir(dir); }

void usp_atomic_dir_close(usp_atomic_dir *d)
{
    if (d->tmp_path)
        remove_flat_dir(d->tmp_path);
    free(d->tmp_path), free(d->path);
    *d = (usp_atomic_dir){0};
}
