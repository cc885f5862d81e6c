/* The mask's options (mask_options.h): the document lengths of usp plan --documents. */
#include "tools/mask_options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

usp_status mask_documents_parse(const char *spec, int64_t seq, int64_t **out, int64_t *n_out)
{
    *out = NULL, *n_out = 0;
    int64_t n = 0, cap = 0, sum = 0, *lengths = NULL;
    usp_status s = USP_OK;
    for (const char *p = spec; s == USP_OK && *p;) {
        char *end;
        errno = 0;
        const long long len = strtoll(p, &end, 10);
        long long times = 1;
        if (end != p && *end == 'x')
            times = strtoll(end + 1, &end, 10);
        if (errno || end == p || len < 1 || times < 1 || times > seq || (*end && *end != ',') ||
            (*end == ',' && !end[1])) {
            s = usp_error(USP_ERR_CONFIG, "--documents %s: \"%.*s\" is not a length or LENGTHxCOUNT (positive "
                          "integers), e.g. --documents 60000,1000x8,20000x3", spec, (int)strcspn(p, ","), p);
            break;
        }
        for (long long k = 0; k < times && s == USP_OK; k++) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                int64_t *grown = realloc(lengths, (size_t)cap * sizeof *lengths);
                if (!grown)
                    s = usp_error(USP_ERR_RUNTIME, "out of memory reading --documents");
                else
                    lengths = grown;
            }
            if (s == USP_OK)
                lengths[n++] = len, sum += len;
            if (sum > seq)
                s = usp_error(USP_ERR_CONFIG, "--documents %s: the lengths sum to more than --seq %lld: give "
                              "documents that fill the sequence", spec, (long long)seq);
        }
        p = *end ? end + 1 : end;
    }
    if (s == USP_OK && sum != seq)
        s = usp_error(USP_ERR_CONFIG, "--documents %s: the lengths sum to %lld tokens, --seq is %lld: give documents "
                      "that fill the sequence", spec, (long long)sum, (long long)seq);
    if (s != USP_OK) {
        free(lengths);
        return s;
    }
    *out = lengths, *n_out = n;
    return USP_OK;
}
