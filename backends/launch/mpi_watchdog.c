/* The watchdog (see mpi_watchdog.h). */
#include "backends/launch/mpi_watchdog.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS 100 /* ten looks a second: a hang ends within 0.1 s of its timeout */
/* After SIGTERM a process exits only this late, unless the launcher's SIGKILL
 * comes first: mpirun ends the whole job (SIGKILL) when one process exits
 * with an error, which would cut the other processes' dumps short. */
#define SIGTERM_LINGER_S 5
/* A run asked to stop (mpi_watchdog_set_stop) ends its step and saves; a call still blocked this
 * long after the signal waits for a rank that will not come (the launcher's SIGTERM after a failure). */
#define STOP_GRACE_S 1.0

struct mpi_watchdog {
    int rank;
    double timeout_s;
    const char *dump_dir;
    usp_flight_recorder *recorder;
    pthread_t thread;
    pthread_mutex_t lock;         /* guards what follows */
    int in_call, stopping;
    usp_comm_fingerprint call;
    uint64_t entry;               /* the call's entry in the recorder */
    int recorded;                 /* the recorder took it */
    struct timespec since;        /* when it entered the call (CLOCK_MONOTONIC) */
    pthread_mutex_t poll_lock;    /* held while the poll runs, so that clearing it waits for it */
    mpi_watchdog_poll_fn poll;    /* (optional) the device's side: asynchronous errors, late calls */
    void *poll_ctx;
    atomic_int *stop;             /* the run's stop request (NULL: a signal ends the process) */
    int asked;                    /* a signal was passed on to *stop ... */
    struct timespec asked_at;     /* ... at this time */
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

usp_status mpi_watchdog_dump(mpi_watchdog *w, const char *reason)
{
    if (!w || !w->dump_dir)
        return USP_OK;
    return usp_flight_recorder_dump(w->recorder, w->dump_dir, reason);
}

/* Writes the recorder (`reason`: "timeout", "sigterm", ...), says `why` on
 * stderr, waits linger_s seconds for the launcher to end it, and ends the
 * process: the last thing a watchdog does. */
static void end_process(mpi_watchdog *w, const char *why, const char *reason, int code, int linger_s)
{
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
    fprintf(stderr, "usp: rank %d: %s%s\n", w->rank, why, where);
    fflush(stderr);
    if (linger_s > 0) { /* the launcher is ending the job: leave it to, so that no exit of ours cuts another's dump */
        struct timespec t = {(time_t)linger_s, 0};
        while (nanosleep(&t, &t) != 0 && errno == EINTR) {
        }
    }
    _exit(code); /* MPI cannot be finalised with a call in flight; the launcher ends the others */
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
        char reason[512];
        usp_strbuf call = {0};
        if (w->in_call) {
            usp_comm_fingerprint_describe(&call, &w->call);
            snprintf(reason, sizeof reason, "%s #%llu on %s (%s:%d) %s", usp_comm_kind_name((usp_comm_kind)w->call.op),
                     (unsigned long long)w->call.seq, w->call.group, w->call.site.file, w->call.site.line,
                     usp_strbuf_text(&call));
            usp_strbuf_free(&call);
        }
        double waited = w->in_call ? seconds_since(&w->since) : 0.0;
        int in_call = w->in_call;
        atomic_int *stop = w->stop;
        pthread_mutex_unlock(&w->lock);
        char why[700];
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
        if (sig == SIGTERM || sig == SIGINT) {
            snprintf(why, sizeof why, "ended by %s%s%s", sig == SIGTERM ? "SIGTERM (the launcher ends the job: "
                     "another rank failed or died)" : "SIGINT", in_call ? " while in " : " outside any call",
                     in_call ? reason : "");
            end_process(w, why, sig == SIGTERM ? "sigterm" : "sigint", sig == SIGTERM ? USP_ERR_RANK_FAILED : 130,
                        sig == SIGTERM ? SIGTERM_LINGER_S : 0);
        }
        if (in_call && waited > w->timeout_s) {
            snprintf(why, sizeof why, "watchdog: %s not complete after %.1f s (--timeout %g): a hang", reason,
                     waited, w->timeout_s);
            end_process(w, why, "timeout", USP_ERR_COLLECTIVE, 0);
        }
        pthread_mutex_lock(&w->poll_lock);
        usp_status polled = w->poll ? w->poll(w->poll_ctx, w->timeout_s, why, sizeof why) : USP_OK;
        pthread_mutex_unlock(&w->poll_lock);
        if (polled != USP_OK) /* the poll aborted what it had to: a late call is a hang, an error a failed rank */
            end_process(w, why, polled == USP_ERR_COLLECTIVE ? "timeout" : "failed", polled, 0);
    }
}

usp_status mpi_watchdog_start(int rank, double timeout_s, const char *dump_dir, usp_flight_recorder *recorder,
                              mpi_watchdog **out)
{
    USP_CHECK(catch_signals());
    mpi_watchdog *w;
    USP_CHECK(usp_calloc((void **)&w, 1, sizeof *w, "the watchdog"));
    *w = (mpi_watchdog){.rank = rank, .timeout_s = timeout_s, .dump_dir = dump_dir, .recorder = recorder};
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->poll_lock, NULL);
    int rc = pthread_create(&w->thread, NULL, watch, w);
    if (rc != 0) {
        pthread_mutex_destroy(&w->lock);
        pthread_mutex_destroy(&w->poll_lock);
        free(w);
        return usp_error(USP_ERR_RUNTIME, "starting the watchdog thread failed (%d)", rc);
    }
    *out = w;
    return USP_OK;
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
    free(w);
}
