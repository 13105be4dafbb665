/* st_internal.h - what the safetensors reader and writer share. Not installed. */
#ifndef COL_ST_INTERNAL_H
#define COL_ST_INTERNAL_H

#include <stddef.h>

/* The offset of the first byte of s[0..len) that is not valid UTF-8, or len. */
size_t col_st_utf8_invalid_at(const unsigned char *s, size_t len);

#endif
