/* The memory options shared by `usp train` and `usp plan`: ZeRO stage, layer
 * recomputation, tiled MLP and loss, storage dtype (see core/model/model.h,
 * core/model/param_store.h and docs/planning.md). */
#ifndef USP_TOOLS_MEMORY_OPTIONS_H
#define USP_TOOLS_MEMORY_OPTIONS_H

#include "core/train/train.h"
#include "tools/cli.h"

typedef struct memory_options {
    int zero, recompute, selective_recompute, tiled_mlp, tiled_loss, tile_rows, micro_batches;
    double bucket_mb;
    const char *dtype, *grad_reduce, *offload, *loss, *ring_merge, *ring_overlap, *ulysses_overlap;
} memory_options;

#define MEMORY_OPTIONS_DEFAULTS                                                                                    \
    {.dtype = "fp32", .grad_reduce = "fp32", .offload = "none", .loss = "fused", .ring_merge = "fused",           \
     .ring_overlap = "auto", .ulysses_overlap = "auto", .tile_rows = 1024, .micro_batches = 1, .bucket_mb = 25}

/* The options' table entries, to put in a command's cli_option array. */
#define MEMORY_OPTIONS(o)                                                                                          \
    {"--dtype", CLI_STRING, &(o).dtype, "fp32|bf16",                                                               \
     "storage: fp32 (default), or bf16 mixed precision: bf16 weights and activations, fp32 master weights, "      \
     "gradients and Adam state", 0, -1},                                                                           \
    {"--grad-reduce", CLI_STRING, &(o).grad_reduce, "fp32|bf16",                                                   \
     "the gradients' all-reduce or reduce-scatter: fp32 (default), or bf16 (half the bytes, each partial sum "    \
     "rounded; with --dtype bf16)", 0, -1},                                                                        \
    {"--zero", CLI_INT, &(o).zero, "S",                                                                            \
     "ZeRO stage over all ranks: 1 shards Adam state, 2 also gradients, 3 also weights (default 0)", 0, 3},       \
    {"--recompute", CLI_FLAG, &(o).recompute, NULL,                                                                \
     "keep only each layer's input; backward recomputes the layer (activation checkpointing)", 0, -1},            \
    {"--selective-recompute", CLI_FLAG, &(o).selective_recompute, NULL,                                            \
     "keep the matmuls' and attention's outputs; backward recomputes the norms and the MLP activation "            \
     "(element-wise: no matmul done twice)", 0, -1},                                                               \
    {"--micro-batches", CLI_INT, &(o).micro_batches, "M",                                                        \
     "gradient accumulation: run a replica's sequences of a step in M passes, one optimizer step (default 1)", \
     1, 1 << 20},                                                                                                  \
    {"--bucket-mb", CLI_DOUBLE, &(o).bucket_mb, "MB",                                                            \
     "ZeRO 0-1: gradients all-reduced once over all ranks during backward, in buckets of whole layers of at "   \
     "most MB MiB (a larger layer alone; default 25, as PyTorch DDP)", 0, -1},                                    \
    {"--tiled-mlp", CLI_FLAG, &(o).tiled_mlp, NULL,                                                                \
     "run the MLP --tile-rows rows at a time, keeping none of its hidden for backward", 0, -1},                    \
    {"--tiled-loss", CLI_FLAG, &(o).tiled_loss, NULL,                                                              \
     "run lm_head and the loss --tile-rows rows at a time: the [tokens, vocab] logits never exist", 0, -1},        \
    {"--offload", CLI_STRING, &(o).offload, "none|optimizer",                                                     \
     "optimizer: fp32 master weights and Adam state on the host, updated by the CPUs (ZeRO-Offload; needs "       \
     "--zero 1-3; shapes only: --meta, usp plan)", 0, -1},                                                         \
    {"--loss", CLI_STRING, &(o).loss, "fused|eager",                                                              \
     "the loss's memory: fused (usp's: one fp32 [tokens, vocab] array, its gradient in place) or eager (as "     \
     "PyTorch's cross-entropy: two more, the saved log-softmax and its gradient; shapes only)", 0, -1},           \
    {"--ring-merge", CLI_STRING, &(o).ring_merge, "fused|eager",                                                  \
     "ring attention's merge of a block's output: fused (usp's: one pass) or eager (as ring-flash-attention and "  \
     "PyTorch's context parallelism run it: an fp32 output, four element-wise kernels; shapes only)", 0, -1},      \
    {"--ring-overlap", CLI_STRING, &(o).ring_overlap, "auto|on|off",                                              \
     "ring attention's backward sends each K/V block one step ahead, beside the attention: auto (default: where a " \
     "step's attention backward is at least 1e10 FLOPs), on or off; the same bits either way", 0, -1},             \
    {"--ulysses-overlap", CLI_STRING, &(o).ulysses_overlap, "auto|on|off",                                        \
     "Ulysses' all-to-alls in two head groups, one group's beside the other's attention: auto (default: where a "  \
     "group's attention is at least 1e10 FLOPs and its q exchange 4 MiB a rank), on or off; the same bits", 0, -1}, \
    {"--tile-rows", CLI_INT, &(o).tile_rows, "R", "rows per tile of --tiled-mlp and --tiled-loss (default 1024)", \
     1, 1 << 30}

/* Copies the options into the run's config (a bad --dtype is a config error naming it). */
usp_status memory_options_apply(const memory_options *o, usp_train_config *c);

#endif
