/* What the commands that read a checkpoint (usp train --resume, usp eval, usp generate) say about
 * the directory they are given and the model in it, in the same words. */
#ifndef USP_TOOLS_CHECKPOINT_DIR_H
#define USP_TOOLS_CHECKPOINT_DIR_H

#include "core/model/model_config.h"

/* USP_OK when `dir` is a directory; else USP_ERR_CONFIG naming `option` and dir, what it is not, what
 * the option takes, and for a preset's name --model (the command `takes_model`) or how to train one. */
usp_status checkpoint_dir_check(const char *option, const char *dir, int takes_model);

/* The model `spec` names (a preset, a config.json, a checkpoint directory); an error names `option` and spec. */
usp_status checkpoint_model_load(const char *option, const char *spec, usp_model_config *out);

#endif
