/* The attention mask's options of `usp train` and `usp eval` (core/ops/mask.h): packed documents cut at an
 * end-of-text id, a sliding window. */
#ifndef USP_TOOLS_MASK_OPTIONS_H
#define USP_TOOLS_MASK_OPTIONS_H

#include "tools/cli.h"

typedef struct mask_options {
    int window; /* every layer's sliding window (0: none) */
    int eot;    /* the end-of-text id that ends packed documents (-1: none) */
} mask_options;

#define MASK_OPTIONS_DEFAULTS {.eot = -1}

/* The window's table entry (usp plan has it alone), to put in a command's cli_option array. */
#define MASK_WINDOW_OPTION(o)                                                                                      \
    {"--window", CLI_INT, &(o).window, "W", "sliding-window attention: each token sees itself and the W - 1 "      \
     "before it (Mistral's sliding_window; default: the whole causal past)", 1, 1 << 30}

/* The options' table entries, to put in a command's cli_option array. */
#define MASK_OPTIONS(o)                                                                                            \
    {"--eot", CLI_INT, &(o).eot, "ID", "packed documents: the end-of-text id that ends each document of a file "  \
     "(50256 for GPT-2's); each attends only to itself, positions restart (default: one document)", 0, 2147483647}, \
    MASK_WINDOW_OPTION(o)

#endif
