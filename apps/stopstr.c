/* stopstr.c - stop strings in generated text (stopstr.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include "stopstr.h"

#include <string.h>

long stop_find(const char *const *stops, int n, const char *s, size_t len)
{
    long best = -1;
    for (int i = 0; i < n; i++) {
        const char *hit = memmem(s, len, stops[i], strlen(stops[i]));
        if (hit && (best < 0 || hit - s < best))
            best = (long)(hit - s);
    }
    return best;
}

size_t stop_prefix(const char *const *stops, int n, const char *s, size_t len)
{
    size_t hold = 0;
    for (int i = 0; i < n; i++) {
        size_t L = strlen(stops[i]);
        for (size_t k = L - 1 < len ? L - 1 : len; k > hold; k--)
            if (memcmp(s + len - k, stops[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}
