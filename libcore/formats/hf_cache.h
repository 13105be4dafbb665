/* hf_cache.h - where a model named on a command line lies: a directory, or a
 * hub id in the Hugging Face cache. Used by every model family. */
#ifndef COL_FORMATS_HF_CACHE_H
#define COL_FORMATS_HF_CACHE_H

#include <stddef.h>

#include "status.h"

/* Resolves MODEL: an existing directory; or a hub id "org/name" found in the
 * Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub, or ~/.cache/huggingface/hub:
 * models--org--name/snapshots/<refs/main or the only snapshot>). Writes the
 * directory into dir (size n). No network access: when the model is not in
 * the cache the message says where it looked and how to download it. */
col_status col_hf_resolve(const char *model, char *dir, size_t n, col_err *err);

#endif
