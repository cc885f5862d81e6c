/* The checkpoint directory and its model, as the commands name them (see checkpoint_dir.h). */
#include "tools/checkpoint_dir.h"

#include <stdio.h>
#include <sys/stat.h>

usp_status checkpoint_dir_check(const char *option, const char *dir, int takes_model)
{
    struct stat st;
    int exists = stat(dir, &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
        return USP_OK;
    usp_model_config preset; /* a model name is not a checkpoint */
    int is_preset = usp_model_config_preset(dir, &preset) == USP_OK;
    usp_error_clear();
    char hint[160] = "";
    if (is_preset && takes_model)
        snprintf(hint, sizeof hint, " (--model %s names the preset, with fresh weights)", dir);
    else if (is_preset)
        snprintf(hint, sizeof hint, " (%s is a preset: train one first, usp train --model %s --save DIR)", dir, dir);
    return usp_error(USP_ERR_CONFIG, "%s %s: %s; %s takes the directory that a --save wrote, or a Hugging Face "
                     "checkpoint directory%s", option, dir, exists ? "not a directory" : "no such directory", option,
                     hint);
}

usp_status checkpoint_model_load(const char *option, const char *spec, usp_model_config *out)
{
    if (usp_model_config_load(spec, out) == USP_OK)
        return USP_OK;
    char why[USP_ERROR_MESSAGE_MAX];
    snprintf(why, sizeof why, "%s", usp_error_message());
    return usp_error(USP_ERR_CONFIG, "%s %s: %s", option, spec, why);
}
