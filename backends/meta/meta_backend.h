/* The meta compute backend: shapes only. */
#ifndef USP_META_BACKEND_H
#define USP_META_BACKEND_H

#include "core/ops/ops.h"

/* Creates a meta backend (one per rank): buffers are fake addresses, ops only report their cost. */
usp_status usp_backend_meta_create(usp_backend_t **out);

#endif
