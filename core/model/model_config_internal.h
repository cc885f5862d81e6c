/* What core/model/model_config.c (presets, checks) shares with core/model/model_config_hf.c
 * (the config.json reader and writer). Not a public interface. */
#ifndef USP_MODEL_CONFIG_INTERNAL_H
#define USP_MODEL_CONFIG_INTERNAL_H

#include "core/model/model_config.h"

/* usp_model_config_check with messages that start with `source` (the file) and name the
 * fields as the family's config.json does (hidden_size, not d_model). */
usp_status model_config_check_hf(const usp_model_config *c, const char *source);

/* 1 when `name` is one of usp_model_config_preset's names. */
int model_config_is_preset(const char *name);

#endif
