/* The watchdog (see mpi_watchdog.h). */
#include "runtimes/process/mpi_watchdog.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/base/atomic_file.h"

#define TICK_MS 100 /* ten looks a second: a hang ends within 0.1 s of its timeout */
/* After SIGTERM a process exits only this late, unless the launcher's SIGKILL
 * comes first: mpirun ends the whole job (SIGKILL) when one process exits
 * with an error, which would cut the other processes' dumps short. */
#define SIGTERM_LINGER_S 5
/* A run asked to stop (mpi_watchdog_set_stop) ends its step and saves; a call still blocked this
 * long after the signal waits for a rank that will not come (the launcher's SIGTERM after a failure). */
#define STOP_GRACE_S 1.0

struct mpi_watchdog {
    int rank, world_size;
    double timeout_s;
    struct timespec born;         /* CLOCK_REALTIME at the start: records older than it are another run's */
    const char *dump_dir;
    usp_flight_recorder *recorder;
    pthread_t thread;
    pthread_mutex_t lock;         /* guards what follows */
    int in_call, stopping;
    usp_comm_fingerprint call;
    uint64_t entry;               /* the call's entry in the recorder */
    int recorded;                 /* the recorder took it */
    int started;                  /* the call was handed to the backend (mpi_watchdog_started) */
    struct timespec since;        /* when it entered the call (CLOCK_MONOTONIC) */
    pthread_mutex_t poll_lock;    /* held while the poll runs, so that clearing it waits for it */
    mpi_watchdog_poll_fn poll;    /* (optional) the device's side: asynchronous errors, late calls */
    void *poll_ctx;
    atomic_int *stop;             /* the run's stop request (NULL: a signal ends the process) */
    int asked;                    /* a signal was passed on to *stop ... */
    struct timespec asked_at;     /* ... at this time */
    pthread_mutex_t abort_lock;   /* held while the abort hook runs, so that changing it waits for it */
    mpi_watchdog_abort_fn abort;  /* (optional) ends the rank's communicators */
    void *abort_ctx;
    atomic_int told;              /* this rank wrote the marker: finding it is no news from a peer */
};

/* The self-pipe: a signal handler may only write(2), and any thread of the
 * process (an OpenMP worker, MPI's own) may take the signal. */
static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    unsigned char b = (unsigned char)sig;
    int saved = errno;
    if (write(signal_pipe[1], &b, 1) < 0) { /* full: a signal is already waiting to be read */
    }
    errno = saved;
}

static usp_status catch_signals(void)
{
    if (signal_pipe[0] < 0 && pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return usp_error(USP_ERR_RUNTIME, "the watchdog's signal pipe: %s", strerror(errno));
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
        return usp_error(USP_ERR_RUNTIME, "catching SIGTERM and SIGINT: %s", strerror(errno));
    return USP_OK;
}

static double seconds_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->tv_sec) + 1e-9 * (double)(now.tv_nsec - t->tv_nsec);
}

/* 1 once the CLOCK_MONOTONIC time `deadline` has come. */
static int passed(const struct timespec *deadline) { return seconds_since(deadline) >= 0.0; }

usp_status mpi_watchdog_dump(mpi_watchdog *w, const char *reason)
{
    if (!w || !w->dump_dir)
        return USP_OK;
    return usp_flight_recorder_dump(w->recorder, w->dump_dir, reason);
}

static void sleep_seconds(double s)
{
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* An armed end timer: its thread ends the process with `code` at `until` unless disarmed first. The
 * thread owns it (and frees it once disarmed): it outlives the watchdog, which may be freed meanwhile. */
typedef struct end_timer {
    int rank, code;
    struct timespec until;        /* CLOCK_MONOTONIC */
    atomic_int armed;
} end_timer;

/* Only write(2) and _exit(2) once the time has come: what it cuts short may hold any lock. */
static void *run_end_timer(void *arg)
{
    end_timer *t = arg;
    while (atomic_load(&t->armed) && !passed(&t->until))
        sleep_seconds(0.02);
    if (!atomic_load(&t->armed)) {
        free(t);
        return NULL;
    }
    char line[160];
    int n = snprintf(line, sizeof line, "usp: rank %d: the dump and abort did not finish within %d s; the "
                     "process ends now (exit %d)\n", t->rank, MPI_WATCHDOG_END_BOUND_S, t->code);
    if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) { /* nothing left to tell it to */
    }
    _exit(t->code);
}

/* Arms an end timer: the process ends with `code` bound_s seconds from now. Without a thread (or the
 * memory for one), SIGALRM's default action ends it instead (NULL returned): a signal's exit, but an end. */
static end_timer *arm(const mpi_watchdog *w, int code, double bound_s)
{
    end_timer *t = calloc(1, sizeof *t);
    pthread_t thread;
    if (t) {
        t->rank = w->rank, t->code = code;
        clock_gettime(CLOCK_MONOTONIC, &t->until);
        t->until.tv_sec += (time_t)bound_s;
        atomic_store(&t->armed, 1);
        if (pthread_create(&thread, NULL, run_end_timer, t) == 0) {
            pthread_detach(thread);
            return t;
        }
        free(t);
    }
    signal(SIGALRM, SIG_DFL);
    alarm((unsigned)bound_s + 1);
    return NULL;
}

/* The abort returned in time: the timer (whose thread then frees it) lets the process live. */
static void disarm(end_timer *t)
{
    if (t)
        atomic_store(&t->armed, 0);
    else
        alarm(0);
}

/* Tells every other rank that this one ends the run with `code` (the marker: written whole or not at all). */
static void tell_peers(mpi_watchdog *w, int code, const char *why)
{
    if (!w->dump_dir || atomic_exchange(&w->told, 1))
        return;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/" MPI_WATCHDOG_MARKER, w->dump_dir) >= (int)sizeof path)
        return;
    usp_atomic_file f = {0};
    usp_status s = usp_atomic_file_open(&f, path);
    if (s == USP_OK && fprintf(f.fp, "%d %d %s\n", code, w->rank, why) < 0)
        s = USP_ERR_RUNTIME;
    if (s == USP_OK)
        s = usp_atomic_file_commit(&f);
    if (s != USP_OK) {
        usp_atomic_file_abort(&f);
        fprintf(stderr, "usp: rank %d: could not tell the other ranks through %s\n", w->rank, path);
    }
}

/* Another rank's marker, when there is one: its exit code into *code, "rank R: WHY" into why. */
static int peer_ended(mpi_watchdog *w, int *code, char *why, size_t why_size)
{
    if (!w->dump_dir || atomic_load(&w->told))
        return 0;
    char path[PATH_MAX], text[600] = "";
    if (snprintf(path, sizeof path, "%s/" MPI_WATCHDOG_MARKER, w->dump_dir) >= (int)sizeof path)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int rank = -1, n = fscanf(f, "%d %d %599[^\n]", code, &rank, text);
    fclose(f);
    if (n < 2 || rank == w->rank)
        return 0;
    if (*code != USP_ERR_COLLECTIVE && *code != USP_ERR_RANK_FAILED)
        *code = USP_ERR_RANK_FAILED;
    snprintf(why, why_size, "rank %d ended the run (%s): %s", rank, MPI_WATCHDOG_MARKER, text);
    return 1;
}

/* The ranks whose record is in the dump directory, written since this process started. */
static int records_in_dir(const mpi_watchdog *w)
{
    int n = 0;
    for (int r = 0; r < w->world_size; r++) {
        char path[PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof path, "%s/" USP_FLIGHT_FILE_FORMAT, w->dump_dir, r) < (int)sizeof path &&
            stat(path, &st) == 0 && (st.st_mtim.tv_sec > w->born.tv_sec ||
                                     (st.st_mtim.tv_sec == w->born.tv_sec && st.st_mtim.tv_nsec >= w->born.tv_nsec)))
            n++;
    }
    return n;
}

/* The first exit makes mpirun end the job: wait (a while) until every rank's record is written. */
static void wait_for_peer_records(const mpi_watchdog *w)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += MPI_WATCHDOG_PEER_WAIT_S;
    while (w->dump_dir && records_in_dir(w) < w->world_size && !passed(&until))
        sleep_seconds(0.05);
}

/* Runs the abort hook, once. */
static void run_abort(mpi_watchdog *w)
{
    pthread_mutex_lock(&w->abort_lock);
    mpi_watchdog_abort_fn abort = w->abort;
    w->abort = NULL;
    if (abort)
        abort(w->abort_ctx);
    pthread_mutex_unlock(&w->abort_lock);
}

/* The last thing a watchdog does (see mpi_watchdog.h): arms the end, writes the record (`reason`:
 * "timeout", "sigterm", "peer", ...), tells the others when this rank is the cause (`tell`), says `why`
 * on stderr, aborts the communicators, waits for the others' records or the launcher (linger_s), and
 * ends the process with `code`. */
static void end_process(mpi_watchdog *w, const char *why, const char *reason, int code, int tell, int linger_s)
{
    (void)arm(w, code, MPI_WATCHDOG_END_BOUND_S + linger_s); /* never disarmed: the process ends either way */
    char where[600] = "";
    if (w->dump_dir) {
        if (mpi_watchdog_dump(w, reason) == USP_OK)
            snprintf(where, sizeof where, "; its flight record is in %s (read them all with: usp postmortem %s)",
                     w->dump_dir, w->dump_dir);
        else
            snprintf(where, sizeof where, "; writing its flight record failed: %s", usp_error_message());
    } else {
        snprintf(where, sizeof where, "; give --dump-dir DIR to keep its flight record");
    }
    if (tell)
        tell_peers(w, code, why);
    fprintf(stderr, "usp: rank %d: %s%s\n", w->rank, why, where);
    fflush(stderr);
    run_abort(w); /* the record is safe: now the communicators may go (nothing touches them after) */
    if (tell || strcmp(reason, "peer") == 0) /* this rank, or a peer, ends the job: let every record be written */
        wait_for_peer_records(w);
    if (linger_s > 0) /* the launcher is ending the job: leave it to, so that no exit of ours cuts another's dump */
        sleep_seconds(linger_s);
    _exit(code); /* MPI cannot be finalised with a call in flight; the launcher ends the others */
}

/* "all_reduce #3 on world (core/x.c:12) all_reduce(count=4, f32)" of the current call, into reason. */
static void describe_call(const mpi_watchdog *w, char *reason, size_t size)
{
    usp_strbuf call = {0};
    usp_comm_fingerprint_describe(&call, &w->call);
    snprintf(reason, size, "%s #%llu on %s (%s:%d) %s", usp_comm_kind_name((usp_comm_kind)w->call.op),
             (unsigned long long)w->call.seq, w->call.group, w->call.site.file, w->call.site.line,
             usp_strbuf_text(&call));
    usp_strbuf_free(&call);
}

/* A SIGTERM or SIGINT `sig` (0: none this tick) while the run may be asked to stop; ends the process
 * when it must. */
static void on_stop_signal(mpi_watchdog *w, int sig, atomic_int *stop, int in_call, double waited,
                           const char *reason)
{
    if ((sig == SIGTERM || sig == SIGINT) && stop && !w->asked) { /* the run stops after its step */
        /* the record first: the launcher's SIGTERM after a failed rank comes with a SIGKILL soon after,
         * sooner than STOP_GRACE_S (so under Open MPI 4.1 in tests/mpi_test.sh); a clean stop removes it */
        if (mpi_watchdog_dump(w, sig == SIGTERM ? "sigterm" : "sigint") != USP_OK)
            fprintf(stderr, "usp: rank %d: writing its flight record failed: %s\n", w->rank, usp_error_message());
        atomic_store(stop, sig), w->asked = sig;
        clock_gettime(CLOCK_MONOTONIC, &w->asked_at);
        sig = 0;
    }
    if (!sig && w->asked && in_call && waited > STOP_GRACE_S && seconds_since(&w->asked_at) > STOP_GRACE_S)
        sig = w->asked; /* blocked since the request: a peer is gone, end as a signal would have */
    if (sig != SIGTERM && sig != SIGINT)
        return;
    char why[700];
    snprintf(why, sizeof why, "ended by %s%s%s", sig == SIGTERM ? "SIGTERM (the launcher ends the job: "
             "another rank failed or died)" : "SIGINT", in_call ? " while in " : " outside any call",
             in_call ? reason : "");
    end_process(w, why, sig == SIGTERM ? "sigterm" : "sigint", sig == SIGTERM ? USP_ERR_RANK_FAILED : 130, 0,
                sig == SIGTERM ? SIGTERM_LINGER_S : 0);
}

static void *watch(void *arg)
{
    mpi_watchdog *w = arg;
    for (;;) {
        struct pollfd fd = {.fd = signal_pipe[0], .events = POLLIN};
        unsigned char b = 0;
        int sig = poll(&fd, 1, TICK_MS) == 1 && read(signal_pipe[0], &b, 1) == 1 ? b : 0;
        pthread_mutex_lock(&w->lock);
        if (w->stopping) {
            pthread_mutex_unlock(&w->lock);
            return NULL;
        }
        char reason[512] = "";
        if (w->in_call)
            describe_call(w, reason, sizeof reason);
        double waited = w->in_call ? seconds_since(&w->since) : 0.0;
        int in_call = w->in_call, started = w->started;
        atomic_int *stop = w->stop;
        pthread_mutex_unlock(&w->lock);
        on_stop_signal(w, sig, stop, in_call, waited, reason);
        char why[700];
        if (in_call && waited > w->timeout_s) {
            snprintf(why, sizeof why, "watchdog: %s not complete after %.1f s (--timeout %g): a hang; %s", reason,
                     waited, w->timeout_s, started ? "it is inside the call (handed to the backend)"
                                                   : "it never started (queued: it never reached the backend)");
            end_process(w, why, "timeout", USP_ERR_COLLECTIVE, 1, 0);
        }
        int code = 0;
        if (peer_ended(w, &code, why, sizeof why))
            end_process(w, why, "peer", code, 0, 0);
        usp_status polled = USP_OK;
        if (pthread_mutex_trylock(&w->poll_lock) == 0) { /* held: the poll is being changed; next tick */
            polled = w->poll ? w->poll(w->poll_ctx, w->timeout_s, why, sizeof why) : USP_OK;
            pthread_mutex_unlock(&w->poll_lock);
        }
        if (polled != USP_OK) /* a late call is a hang, an error a failed rank */
            end_process(w, why, polled == USP_ERR_COLLECTIVE ? "timeout" : "failed", polled, 1, 0);
    }
}

usp_status mpi_watchdog_start(int rank, int world_size, double timeout_s, const char *dump_dir,
                              usp_flight_recorder *recorder, mpi_watchdog **out)
{
    USP_CHECK(catch_signals());
    mpi_watchdog *w;
    USP_CHECK(usp_calloc((void **)&w, 1, sizeof *w, "the watchdog"));
    *w = (mpi_watchdog){.rank = rank, .world_size = world_size, .timeout_s = timeout_s, .dump_dir = dump_dir,
                        .recorder = recorder};
    clock_gettime(CLOCK_REALTIME, &w->born);
    w->born.tv_sec -= 1; /* a filesystem's timestamps may be coarser than the clock's */
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->poll_lock, NULL);
    pthread_mutex_init(&w->abort_lock, NULL);
    int rc = pthread_create(&w->thread, NULL, watch, w);
    if (rc != 0) {
        pthread_mutex_destroy(&w->lock);
        pthread_mutex_destroy(&w->poll_lock);
        pthread_mutex_destroy(&w->abort_lock);
        free(w);
        return usp_error(USP_ERR_RUNTIME, "starting the watchdog thread failed (%d)", rc);
    }
    *out = w;
    return USP_OK;
}

void mpi_watchdog_set_abort(mpi_watchdog *w, mpi_watchdog_abort_fn abort, void *ctx)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->abort_lock);
    w->abort = abort;
    w->abort_ctx = ctx;
    pthread_mutex_unlock(&w->abort_lock);
}

void mpi_watchdog_abort(mpi_watchdog *w, int code, const char *why)
{
    if (!w)
        return;
    tell_peers(w, code, why);
    end_timer *t = arm(w, code, MPI_WATCHDOG_END_BOUND_S);
    run_abort(w);
    disarm(t); /* the abort returned: the rank ends its own way */
}

void mpi_watchdog_started(mpi_watchdog *w, double t)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->started = 1;
    if (w->recorded)
        usp_flight_recorder_started(w->recorder, w->entry, t);
    pthread_mutex_unlock(&w->lock);
}

void mpi_watchdog_set_stop(mpi_watchdog *w, atomic_int *stop)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = stop;
    pthread_mutex_unlock(&w->lock);
}

void mpi_watchdog_forget(mpi_watchdog *w)
{
    if (!w || !w->asked || !w->dump_dir)
        return;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/" USP_FLIGHT_FILE_FORMAT, w->dump_dir, w->rank) < (int)sizeof path)
        unlink(path);
}

void mpi_watchdog_set_poll(mpi_watchdog *w, mpi_watchdog_poll_fn poll, void *ctx)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->poll_lock);
    w->poll = poll;
    w->poll_ctx = ctx;
    pthread_mutex_unlock(&w->poll_lock);
}

uint64_t mpi_watchdog_enter(mpi_watchdog *w, const usp_comm_fingerprint *fp, double t)
{
    if (!w)
        return 0;
    pthread_mutex_lock(&w->lock);
    w->in_call = 1;
    w->started = 0;
    w->call = *fp;
    clock_gettime(CLOCK_MONOTONIC, &w->since);
    usp_status s = usp_flight_recorder_post(w->recorder, fp, t, &w->entry);
    w->recorded = s == USP_OK; /* a record that cannot be kept leaves the call unwatched by the dump, not failed */
    uint64_t entry = w->recorded ? w->entry : 0;
    pthread_mutex_unlock(&w->lock);
    return entry;
}

void mpi_watchdog_leave(mpi_watchdog *w, double t, usp_status status, int completed)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->in_call = 0;
    if (w->recorded && status == USP_OK && completed)
        usp_flight_recorder_completed(w->recorder, w->entry, t);
    pthread_mutex_unlock(&w->lock);
}

void mpi_watchdog_stop(mpi_watchdog *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    signal(SIGTERM, SIG_DFL); /* nothing reads the pipe any more: a signal ends the process again */
    signal(SIGINT, SIG_DFL);
    pthread_mutex_destroy(&w->lock);
    pthread_mutex_destroy(&w->poll_lock);
    pthread_mutex_destroy(&w->abort_lock);
    free(w);
}
