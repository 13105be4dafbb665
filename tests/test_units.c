/* test_units.c - byte counts in binary units (units.h): each unit's boundary, rounding that would print
 * 1024.0 moves up a unit, the fixed-MiB form, and short or NULL buffers. */
#include <string.h>

#include "testlib.h"
#include "units.h"

static void expect(uint64_t b, const char *want)
{
    char buf[COL_BYTES_STR];
    col_fmt_bytes(buf, sizeof buf, b);
    TL_OK(strcmp(buf, want) == 0, "%llu bytes read \"%s\" (want \"%s\")", (unsigned long long)b, buf, want);
}

int main(void)
{
    expect(0, "0 B");
    expect(1023, "1023 B");
    expect(1024, "1.0 KiB");
    expect(1536, "1.5 KiB");
    expect(1048575, "1.0 MiB"); /* 1023.999 KiB would print 1024.0 KiB */
    expect(1048576, "1.0 MiB");
    expect((uint64_t)12 << 20, "12.0 MiB");
    expect((uint64_t)3 << 30 | (uint64_t)400 << 20, "3.4 GiB");
    expect((uint64_t)5 << 40, "5.0 TiB");
    expect((uint64_t)4096 << 40, "4096.0 TiB");
    expect(UINT64_MAX, "16777216.0 TiB");
    char buf[COL_BYTES_STR];
    TL_OK(strcmp(col_fmt_mib(buf, sizeof buf, (uint64_t)3 << 30), "3072.0 MiB") == 0, "fixed MiB: %s", buf);
    TL_OK(strcmp(col_fmt_mib(buf, sizeof buf, 512 * 1024), "0.5 MiB") == 0, "fixed MiB below one: %s", buf);
    char tiny[4];
    col_fmt_bytes(tiny, sizeof tiny, (uint64_t)12 << 20);
    TL_OK(strlen(tiny) == 3 && memcmp(tiny, "12.", 3) == 0, "a short buffer is cut, still terminated: %s", tiny);
    TL_OK(col_fmt_bytes(NULL, 8, 1) == NULL && col_fmt_mib(buf, 0, 1) == buf, "NULL or empty buffers are left alone");
    return tl_done();
}
