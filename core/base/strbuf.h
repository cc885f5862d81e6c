/* A growable string for reports and generated text (DOT, JSON lines). */
#ifndef USP_STRBUF_H
#define USP_STRBUF_H

#include <stddef.h>

typedef struct usp_strbuf {
    char *text; /* always NUL-terminated once anything was appended */
    size_t len, cap;
    int failed; /* an allocation failed: text is truncated */
} usp_strbuf;

/* Appends printf-style text. */
void usp_strbuf_printf(usp_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The text so far ("" when empty). */
const char *usp_strbuf_text(const usp_strbuf *b);

/* Frees the text and resets the buffer. */
void usp_strbuf_free(usp_strbuf *b);

#endif
