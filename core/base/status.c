/* Status codes and the per-thread (or per-rank) error slot. */
#include "core/base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local usp_error_slot thread_slot;
static _Thread_local usp_error_slot *current_slot;

static usp_error_slot *slot_now(void)
{
    return current_slot ? current_slot : &thread_slot;
}

/* Copies `text` (length n) into out[cap]: whole when it fits, else its first
 * quarter, USP_ERROR_ELISION and its end, so that the reason at the end survives. */
static void error_keep_ends(char *out, size_t cap, const char *text, size_t n)
{
    if (n < cap) {
        memcpy(out, text, n + 1);
        return;
    }
    size_t elision = strlen(USP_ERROR_ELISION), head = (cap - 1) / 4, tail = cap - 1 - head - elision;
    memcpy(out, text, head);
    memcpy(out + head, USP_ERROR_ELISION, elision);
    memcpy(out + head + elision, text + n - tail, tail + 1);
}

usp_status usp_error(usp_status status, const char *fmt, ...)
{
    usp_error_slot *slot = slot_now();
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    /* Formatted apart from the slot: an argument may be the slot's own message. */
    char *whole = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (whole)
        vsnprintf(whole, (size_t)n + 1, fmt, again);
    va_end(again);
    if (!whole) {
        snprintf(slot->message, sizeof slot->message, "%s (out of memory formatting its message)", fmt);
    } else {
        error_keep_ends(slot->message, sizeof slot->message, whole, (size_t)n);
        free(whole);
    }
    slot->status = status;
    return status;
}

const char *usp_error_message(void) { return slot_now()->message; }

void usp_error_clear(void)
{
    usp_error_slot *slot = slot_now();
    slot->status = USP_OK;
    slot->message[0] = '\0';
}

usp_error_slot *usp_error_use_slot(usp_error_slot *slot)
{
    usp_error_slot *previous = current_slot;
    current_slot = slot;
    return previous;
}

const char *usp_status_name(usp_status status)
{
    switch (status) {
    case USP_OK: return "ok";
    case USP_ERR_RUNTIME: return "runtime failure";
    case USP_ERR_CONFIG: return "bad usage or configuration";
    case USP_ERR_COLLECTIVE: return "deadlock or collective mismatch";
    case USP_ERR_RANK_FAILED: return "a rank failed";
    }
    return "unknown status";
}

void usp_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    fprintf(stderr, "usp: internal error at %s:%d: %s: ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

usp_status usp_malloc(void **out, size_t bytes, const char *what)
{
    *out = malloc(bytes ? bytes : 1);
    if (!*out)
        return usp_error(USP_ERR_RUNTIME, "out of memory allocating %zu bytes for %s", bytes, what);
    return USP_OK;
}

usp_status usp_calloc(void **out, size_t n, size_t size, const char *what)
{
    *out = calloc(n ? n : 1, size ? size : 1);
    if (!*out)
        return usp_error(USP_ERR_RUNTIME, "out of memory allocating %zu x %zu bytes for %s", n, size, what);
    return USP_OK;
}
