/* stopstr.h - stop strings in generated text, shared by colossal-chat and colossal-serve: where the first
 * one starts, and how much of the end of the text may still become one (and must be held back). */
#ifndef COL_APPS_STOPSTR_H
#define COL_APPS_STOPSTR_H

#include <stddef.h>

/* The offset of the earliest of the n stop strings in s[0..len), or -1. */
long stop_find(const char *const *stops, int n, const char *s, size_t len);
/* The length of the longest end of s[0..len) that is a proper start of one of the stop strings. */
size_t stop_prefix(const char *const *stops, int n, const char *s, size_t len);

#endif
