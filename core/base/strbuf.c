/* A growable string. */
#include "core/base/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void usp_strbuf_printf(usp_strbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->text ? b->text + b->len : NULL, b->text ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->text && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len <= (size_t)n)
            cap *= 2;
        char *grown = realloc(b->text, cap);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->text = grown;
        b->cap = cap;
    }
}

const char *usp_strbuf_text(const usp_strbuf *b) { return b->text ? b->text : ""; }

void usp_strbuf_free(usp_strbuf *b)
{
    free(b->text);
    *b = (usp_strbuf){0};
}
