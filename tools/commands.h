/* The sub-commands of `usp`; each returns the process exit code. */
#ifndef USP_TOOLS_COMMANDS_H
#define USP_TOOLS_COMMANDS_H

/* usp selftest: a communication schedule shaped like one training step, checked. */
int cmd_selftest(int argc, char **argv);

/* usp viz: schedule diagrams and the Chrome trace of one attention layer. */
int cmd_viz(int argc, char **argv);

/* usp train / usp eval (argv[1] says which): training and evaluation on the simulator. */
int cmd_train(int argc, char **argv);

/* usp generate: tokens from a checkpoint, greedy or sampled (one rank, no KV cache). */
int cmd_generate(int argc, char **argv);

/* usp plan: one step on the meta backend: memory, modelled time, MFU; --sweep ranks the U x R splits. */
int cmd_plan(int argc, char **argv);

/* usp postmortem DIR: the deadlock / rank-failure report of a real-backend run from its flight records. */
int cmd_postmortem(int argc, char **argv);

/* usp calibrate: measured collectives and kernels of this machine, fitted into a topology file for usp plan. */
int cmd_calibrate(int argc, char **argv);

#endif
