/* usp starting its own processes under mpirun on one node (see mpi_self_launch.h). */
#include "runtimes/process/mpi_self_launch.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/strbuf.h"
#include "core/runtime/launcher_env.h"

#ifndef USP_MPIEXEC /* CMake's MPIEXEC_EXECUTABLE, baked in by runtimes/mpi/CMakeLists.txt */
#define USP_MPIEXEC ""
#endif

int mpi_self_launch_needed(int processes) { return processes > 1 && usp_launcher_processes(NULL) == 0; }

static int is_executable_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* `name` in the directories of PATH, into path; 1 when found. */
static int find_on_path(const char *name, char *path, size_t size)
{
    const char *dirs = getenv("PATH");
    while (dirs && *dirs) {
        size_t n = strcspn(dirs, ":");
        /* an empty entry is the current directory, as the shell reads PATH */
        int len = snprintf(path, size, "%.*s/%s", n ? (int)n : 1, n ? dirs : ".", name);
        if (len > 0 && (size_t)len < size && is_executable_file(path))
            return 1;
        dirs += n + (dirs[n] == ':');
    }
    return 0;
}

/* "mpirun -np 4 usp train ... (one node), or srun -n 4 usp train ... (Slurm)":
 * this command line with a launcher in front, as the user typed it. */
static void launch_lines(const mpi_self_launch_request *r, char *buf, size_t size)
{
    char typed[3072];
    mpi_self_launch_quote(r->argv, typed, sizeof typed);
    snprintf(buf, size, "mpirun -np %d %s (one node), or srun -n %d%s %s (Slurm)", r->processes, typed,
             r->processes, strcmp(r->backend, "nccl") == 0 ? " --gpus-per-task=1" : "", typed);
}

usp_status mpi_self_launch_find_mpirun(const mpi_self_launch_request *r, char *path, size_t size)
{
    char tried[PATH_MAX + 256], lines[8192];
    const char *chosen = getenv(MPI_SELF_LAUNCH_MPIRUN);
    if (chosen && *chosen) { /* the user's choice: nothing else is tried */
        if (is_executable_file(chosen) && strlen(chosen) < size) {
            snprintf(path, size, "%s", chosen);
            return USP_OK;
        }
        snprintf(tried, sizeof tried, "%s=%s is not an executable file", MPI_SELF_LAUNCH_MPIRUN, chosen);
    } else {
        if (find_on_path("mpirun", path, size))
            return USP_OK;
        if (*USP_MPIEXEC && is_executable_file(USP_MPIEXEC) && strlen(USP_MPIEXEC) < size) {
            snprintf(path, size, "%s", USP_MPIEXEC);
            return USP_OK;
        }
        snprintf(tried, sizeof tried, "none on PATH%s%s%s", *USP_MPIEXEC ? ", nor " : "", USP_MPIEXEC,
                 *USP_MPIEXEC ? " (where usp's build found it)" : "");
    }
    launch_lines(r, lines, sizeof lines);
    return usp_error(USP_ERR_CONFIG, "--backend %s %s %d: usp starts its %d processes with Open MPI's mpirun, and "
                     "found no mpirun (%s); install it (apt-get install openmpi-bin), point %s at it, or start the "
                     "processes yourself: %s", r->backend, r->count_option, r->processes, r->processes, tried,
                     MPI_SELF_LAUNCH_MPIRUN, lines);
}

/* An integer from a one-line sysfs file; -1 when it cannot be read. */
static long read_sysfs_long(int cpu, const char *field)
{
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, field);
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

int mpi_self_launch_slots(void)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n > 0 ? (int)n : 1;
    }
    /* A core is its (package, core) pair; a CPU whose topology cannot be read counts as its own core. */
    static long cores[CPU_SETSIZE][2];
    int n = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed))
            continue;
        long package = read_sysfs_long(cpu, "physical_package_id"), core = read_sysfs_long(cpu, "core_id");
        if (package < 0 || core < 0)
            package = -1, core = cpu;
        int seen = 0;
        for (int i = 0; i < n && !seen; i++)
            seen = cores[i][0] == package && cores[i][1] == core;
        if (!seen)
            cores[n][0] = package, cores[n][1] = core, n++;
    }
    return n > 0 ? n : 1;
}

usp_status mpi_self_launch_command(const char *mpirun, const char *exe, int processes, int oversubscribe,
                                   char *const *argv, char ***out)
{
    *out = NULL;
    int argc = 0;
    while (argv[argc])
        argc++;
    /* mpirun -np N [--oversubscribe] exe argv[1..] NULL, then the text of N */
    size_t words = 4 + (size_t)(oversubscribe != 0) + (size_t)(argc > 0 ? argc - 1 : 0) + 1;
    char **cmd;
    USP_CHECK(usp_calloc((void **)&cmd, 1, words * sizeof *cmd + 16, "the mpirun command line"));
    char *np = (char *)(cmd + words);
    snprintf(np, 16, "%d", processes);
    size_t k = 0;
    cmd[k++] = (char *)mpirun;
    cmd[k++] = "-np";
    cmd[k++] = np;
    if (oversubscribe)
        cmd[k++] = "--oversubscribe";
    cmd[k++] = (char *)exe;
    for (int i = 1; i < argc; i++)
        cmd[k++] = argv[i];
    cmd[k] = NULL;
    *out = cmd;
    return USP_OK;
}

/* 1 when a shell reads `word` as itself, unquoted. */
static int shell_safe(const char *word)
{
    if (!*word)
        return 0;
    for (const char *c = word; *c; c++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%", *c))
            return 0;
    return 1;
}

void mpi_self_launch_quote(char *const *args, char *buf, size_t size)
{
    usp_strbuf line = {0};
    for (size_t i = 0; args[i]; i++) {
        usp_strbuf_printf(&line, "%s", i ? " " : "");
        if (shell_safe(args[i])) {
            usp_strbuf_printf(&line, "%s", args[i]);
            continue;
        }
        usp_strbuf_printf(&line, "'");
        for (const char *c = args[i]; *c; c++) /* a ' ends the quote, is escaped, and opens it again */
            usp_strbuf_printf(&line, *c == '\'' ? "'\\''" : "%c", *c);
        usp_strbuf_printf(&line, "'");
    }
    snprintf(buf, size, "%s", usp_strbuf_text(&line));
    usp_strbuf_free(&line);
}

/* Open MPI refuses to run as root without both variables set to 1 (its own
 * check, in orterun); usp asks for them rather than setting them itself:
 * running a job as root is the user's decision, not a default. */
static usp_status check_root_consent(const mpi_self_launch_request *r)
{
    const char *allow = getenv("OMPI_ALLOW_RUN_AS_ROOT"), *confirm = getenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM");
    if (geteuid() != 0 || (allow && strcmp(allow, "1") == 0 && confirm && strcmp(confirm, "1") == 0))
        return USP_OK;
    return usp_error(USP_ERR_CONFIG, "--backend %s %s %d: usp would start its %d processes with mpirun, which Open "
                     "MPI refuses to run as root; to run them as root, set OMPI_ALLOW_RUN_AS_ROOT=1 and "
                     "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (Open MPI's own consent, which usp does not give for you), "
                     "or run usp as another user", r->backend, r->count_option, r->processes, r->processes);
}

usp_status mpi_self_launch(const mpi_self_launch_request *r)
{
    char lines[8192];
    if (getenv(MPI_SELF_LAUNCH_MARKER)) { /* launched by usp, yet no launcher is seen: never launch again */
        launch_lines(r, lines, sizeof lines);
        return usp_error(USP_ERR_CONFIG, "--backend %s %s %d: this process was started by usp's own mpirun (%s is "
                         "set), yet finds no launcher in its environment (" USP_LAUNCHER_VARIABLES "): that mpirun did not "
                         "set them (is it Open MPI's?); not launching again: unset %s "
                         "and start the processes yourself: %s", r->backend, r->count_option, r->processes,
                         MPI_SELF_LAUNCH_MARKER, MPI_SELF_LAUNCH_MARKER, lines);
    }
    char mpirun[PATH_MAX], exe[PATH_MAX];
    USP_CHECK(mpi_self_launch_find_mpirun(r, mpirun, sizeof mpirun));
    USP_CHECK(check_root_consent(r));
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1); /* argv[0] may be a bare name found on PATH */
    if (n <= 0)
        return usp_error(USP_ERR_RUNTIME, "--backend %s %s %d: cannot name this program's file to start it "
                         "again (/proc/self/exe: %s)", r->backend, r->count_option, r->processes,
                         n < 0 ? strerror(errno) : "empty");
    exe[n] = '\0';
    char **cmd;
    USP_CHECK(mpi_self_launch_command(mpirun, exe, r->processes, r->processes > mpi_self_launch_slots(),
                                      r->argv, &cmd));
    char line[8192];
    mpi_self_launch_quote(cmd, line, sizeof line);
    fprintf(stderr, "usp: launching %d processes: %s\n", r->processes, line);
    fflush(NULL); /* exec drops what the stdio buffers hold */
    setenv(MPI_SELF_LAUNCH_MARKER, "1", 1);
    execv(mpirun, cmd);
    int err = errno;
    unsetenv(MPI_SELF_LAUNCH_MARKER);
    free(cmd);
    return usp_error(USP_ERR_CONFIG, "--backend %s %s %d: starting %s failed: %s", r->backend, r->count_option,
                     r->processes, mpirun, strerror(err));
}
