/* Helpers shared by the unit tests: run a function on every rank of a
 * simulated world, and move test data in and out of backend buffers. */
#ifndef USP_TESTS_HARNESS_H
#define USP_TESTS_HARNESS_H

#include <stddef.h>

#include "core/model/model_params.h"
#include "core/runtime/rank.h"
#include "core/train/train.h"
#include "sim/world.h"

/* One step of training preset `model` (tiny, gpt2-124m, llama-7b, ...) on the mesh world = dp x ulysses x ring,
 * `batch` passkey sequences of `seq` tokens, the other options at their defaults, into *out. */
usp_status harness_config(const char *model, int world, int ulysses, int ring, int64_t seq, int64_t batch,
                          usp_train_config *out);

/* The backend the harness gives every rank: the environment's USP_TEST_BACKEND (cpu, the
 * default, or lazy: ctest runs the training tests on both; cuda, every rank on GPU 0, in a build with it). */
sim_backend_factory harness_backend_factory(void);

/* 1 when that backend's buffers are device memory (cuda): the world's sim_config.device_memory. */
int harness_device_memory(void);

/* Runs fn on `world` ranks with the default config (plus `faults`); returns the
 * run's status. When `report` is non-NULL, the report text is copied there. */
usp_status harness_run(int world, usp_rank_main_fn fn, void *arg, const sim_fault *faults, int n_faults,
                       char *report, size_t report_size);

/* Runs the training `config` on its world (cpu backends); *result is rank 0's (may be NULL). */
usp_status harness_train(const usp_train_config *config, usp_train_result *result, char *report, size_t report_size);

/* Runs the training `config` on a world whose backends `factory` makes (NULL: harness_backend_factory's) and keeps the world for
 * inspection (*out; destroy it), or returns the run's error. */
usp_status harness_train_world(const usp_train_config *config, sim_backend_factory factory, sim_world **out);

/* Where harness_record_tensors copies the trainer's tensor records (NULL: not wanted). */
typedef struct harness_tensors {
    float *first_grads;  /* table->total floats: step 1's gradients */
    float *last_weights; /* table->total floats: the weights after the last step */
} harness_tensors;

/* A usp_train_config.on_record (ctx: harness_tensors *) that copies FIRST_GRADS and
 * LAST_WEIGHTS records and ignores the progress. Set record_tensors to get them. */
void harness_record_tensors(void *ctx, const usp_train_record *record);

/* The number of parameters of model m (its parameter table's total), or -1 when it has no table. */
int64_t harness_param_total(const usp_model_config *m);

/* Step 1's gradients, then the last weights (2 x the table's floats, malloc'd; NULL only when out of
 * memory, with *status saying so) of `config` trained on `factory`'s backends; *status the run's. */
float *harness_train_tensors(const usp_train_config *config, sim_backend_factory factory, usp_status *status);

/* The number of the n floats of a and b whose bits differ. */
size_t harness_bits_differing(const float *a, const float *b, size_t n);

/* Trains a and b on cpu backends and counts the floats of step 1's gradients and the last weights
 * whose bits differ between them (of *total); -1 with the error's message when a run fails. */
long harness_runs_differing(const usp_train_config *a, const usp_train_config *b, size_t *total);

/* One event wait of an overlap, for harness_check_waits: its bit for the test hook, and its name. */
typedef struct harness_wait {
    unsigned bit;
    const char *name;
} harness_wait;

/* The start of what the lazy backend's order checker says of two accesses nothing orders. */
#define HARNESS_RACE_FOUND "nothing orders the two"

/* Shows that an overlap's event waits are needed: `config` trained on lazy backends gives the cpu
 * backends' bits, and with each wait skipped (skip(bit), then skip(0)) the lazy backend's order
 * checker stops the run at the access the wait ordered; prints a line a wait after `label`. 0, or -1
 * with the reason in why. */
int harness_check_waits(const usp_train_config *config, void (*skip)(unsigned), const harness_wait *waits, int n,
                        const char *label, char *why, size_t why_size);

/* The largest, over the table's tensors, of max |a - b| / max |b| within the tensor; *which: that tensor. */
double harness_worst_tensor_error(const usp_param_table *t, const float *a, const float *b, int *which);

/* Allocates a backend buffer of `bytes` and copies `host` into it (host may be NULL: zeroed). */
usp_status harness_upload(const usp_rank_ctx *ctx, const void *host, size_t bytes, void **dev);

/* Copies `bytes` of a backend buffer to `host`. */
usp_status harness_download(const usp_rank_ctx *ctx, void *host, const void *dev, size_t bytes);

/* The whole file at `path` (malloc'd, NUL-terminated; *size its bytes when size
 * is not NULL), or NULL when it cannot be opened. */
char *harness_read_file(const char *path, size_t *size);

/* Runs a usp command (cmd_plan, ...) in this process with its stdout captured into out (size bytes,
 * NUL-terminated, cut if longer); returns the command's exit code. */
int harness_run_command(int (*command)(int argc, char **argv), char **argv, int argc, char *out, size_t size);

/* The figures the overlap tests compare, in this order: step, compute, hidden and exposed communication (s). */
enum { HARNESS_PLAN_FIGURES = 4 };

/* Runs `plan` (cmd_plan) on argv + {option, "off", "--json"} and on argv + {option, "auto", "--json"} and
 * reads the figures above into off and on, printing each after `label`. 0, or -1 with why. */
int harness_plan_overlap(int (*plan)(int argc, char **argv), char *const *argv, int argc, const char *option,
                         const char *label, double off[HARNESS_PLAN_FIGURES], double on[HARNESS_PLAN_FIGURES],
                         char *why, size_t why_size);

/* Returns a USP_ERR_RUNTIME naming the rank and `what` unless got == want. */
usp_status harness_expect_eq(const usp_rank_ctx *ctx, const char *what, size_t index, double got, double want);

#endif
