/* The attention mask's options of `usp train` and `usp eval` (core/ops/mask.h): packed documents cut at an
 * end-of-text id, a sliding window. */
#ifndef USP_TOOLS_MASK_OPTIONS_H
#define USP_TOOLS_MASK_OPTIONS_H

#include <stdint.h>

#include "core/base/status.h"
#include "tools/cli.h"

typedef struct mask_options {
    int window;            /* every layer's sliding window (0: none) */
    int eot;               /* the end-of-text id that ends packed documents (-1: none) */
    const char *documents; /* usp plan --documents L[xK],...: every sequence's documents (NULL: one) */
} mask_options;

#define MASK_OPTIONS_DEFAULTS {.eot = -1}

/* The window's table entry (usp plan has it alone), to put in a command's cli_option array. */
#define MASK_WINDOW_OPTION(o)                                                                                      \
    {"--window", CLI_INT, &(o).window, "W", "sliding-window attention: each token sees itself and the W - 1 "      \
     "before it (Mistral's sliding_window; default: the whole causal past)", 1, 1 << 30}

/* usp plan's: the window and the documents' lengths. */
#define MASK_PLAN_OPTIONS(o)                                                                                       \
    MASK_WINDOW_OPTION(o),                                                                                         \
    {"--documents", CLI_STRING, &(o).documents, "L[xK],...", "packed documents of these lengths fill each "       \
     "sequence (K of L tokens: 60000,1000x8,20000x3): the attention is priced by their visible pairs", 0, -1}

/* The options' table entries, to put in a command's cli_option array. */
#define MASK_OPTIONS(o)                                                                                            \
    {"--eot", CLI_INT, &(o).eot, "ID", "packed documents: the end-of-text id that ends each document of a file "  \
     "(50256 for GPT-2's); each attends only to itself, positions restart (default: one document)", 0, 2147483647}, \
    MASK_WINDOW_OPTION(o)

/* The document lengths of --documents "L[xK],..." (K documents of L tokens), which must fill the `seq`
 * tokens of a sequence: *lengths (free it) and *n; a named USP_ERR_CONFIG otherwise. */
usp_status mask_documents_parse(const char *spec, int64_t seq, int64_t **lengths, int64_t *n);

#endif
