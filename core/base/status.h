/* Room core/base/: what every room stands on: status codes and messages (this file),
 * growable strings (strbuf.h), whole-or-nothing files and directories (atomic_file.h), a clock
 * in seconds (clock_seconds.h). It may use: nothing of usp.
 *
 * Status codes and error messages.
 *
 * Library code never exits: it returns a usp_status and leaves a message that
 * names the input, the value and what would work. Only the `usp` command and
 * tutorial programs turn a status into an exit code, and the codes are chosen
 * so that the status IS the exit code (docs/CONTRACT.md, "Exit codes and
 * outputs").
 *
 * The message lives in an error slot. Each OS thread has one by default; the
 * simulator gives every rank its own slot and switches it with the rank, so a
 * rank's message is never overwritten by another rank's. */
#ifndef USP_STATUS_H
#define USP_STATUS_H

#include <stddef.h>

#ifdef __cplusplus /* the CUDA kernels are C++ */
extern "C" {
#endif

typedef enum usp_status {
    USP_OK = 0,
    USP_ERR_RUNTIME = 1,     /* I/O, out of memory, a failed check of data */
    USP_ERR_CONFIG = 2,      /* bad usage or configuration */
    USP_ERR_COLLECTIVE = 3,  /* deadlock or collective mismatch */
    USP_ERR_RANK_FAILED = 4, /* a rank died (injected crash, NCCL error) */
} usp_status;

/* A message longer than this keeps its beginning and its end, joined by
 * USP_ERROR_ELISION: the end holds the reason ("...: No space left on device")
 * and the beginning what failed, so only the middle of a long path is lost.
 * 8192 holds two paths of PATH_MAX (4096) whole in all but the longest case. */
#define USP_ERROR_MESSAGE_MAX 8192
#define USP_ERROR_ELISION " [...] "

/* One place where an error message is kept. */
typedef struct usp_error_slot {
    usp_status status;
    char message[USP_ERROR_MESSAGE_MAX];
} usp_error_slot;

/* Records `status` with a printf-style message in the current slot; returns status.
 * The arguments may include usp_error_message() (a message wrapping the last one). */
usp_status usp_error(usp_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The message of the last error recorded in the current slot ("" if none). */
const char *usp_error_message(void);

/* Clears the current slot. */
void usp_error_clear(void);

/* Makes `slot` the current slot of this OS thread (NULL: the thread's own);
 * returns the previous one. Used by the simulator when it switches ranks. */
usp_error_slot *usp_error_use_slot(usp_error_slot *slot);

/* A short name for a status ("deadlock or collective mismatch", ...). */
const char *usp_status_name(usp_status status);

/* Return the status of `expr` upward when it fails (the NCCLCHECK pattern). */
#define USP_CHECK(expr)                      \
    do {                                     \
        usp_status usp_check_s_ = (expr);    \
        if (usp_check_s_ != USP_OK)          \
            return usp_check_s_;             \
    } while (0)

/* Store the failing status in `var` and jump to `label` for cleanup. */
#define USP_CHECK_GOTO(expr, var, label) \
    do {                                 \
        (var) = (expr);                  \
        if ((var) != USP_OK)             \
            goto label;                  \
    } while (0)

/* Programmer errors (a broken invariant, not bad input): print and abort. */
#define USP_ASSERT(cond, ...)                                          \
    do {                                                               \
        if (!(cond))                                                   \
            usp_assert_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);   \
    } while (0)

#ifdef __cplusplus
#define USP_NORETURN [[noreturn]]
#else
#define USP_NORETURN _Noreturn
#endif
USP_NORETURN void usp_assert_fail(const char *file, int line, const char *cond,
                               const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* malloc/calloc that return USP_ERR_RUNTIME with a message naming `what`. */
usp_status usp_malloc(void **out, size_t bytes, const char *what);
usp_status usp_calloc(void **out, size_t n, size_t size, const char *what);

#ifdef __cplusplus
}
#endif

#endif
