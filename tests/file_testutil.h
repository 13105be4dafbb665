/* file_testutil.h - comparing files in tests. Include after testlib.h. */
#ifndef COL_TESTS_FILE_TESTUTIL_H
#define COL_TESTS_FILE_TESTUTIL_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "textio.h"

/* both files read and byte for byte equal */
static inline bool tl_same_file(const char *a, const char *b)
{
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    col_err err = {0};
    bool same = col_read_file(a, 0, &x, &nx, &err) == COL_OK && col_read_file(b, 0, &y, &ny, &err) == COL_OK &&
                nx == ny && memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return same;
}

#endif
