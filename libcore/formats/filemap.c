/* filemap.c - a whole file mapped read-only (filemap.h). */
#include "filemap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

col_status col_file_map(const char *path, const char *kind, void **map, size_t *len, col_err *err)
{
    *map = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* O_NONBLOCK: a FIFO must not hang us */
    if (fd < 0)
        return col_err_set(err, COL_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        col_status st = col_err_set(err, COL_EIO, "cannot open %s: %s", path, strerror(errno));
        close(fd);
        return st;
    }
    col_status st = COL_OK;
    if (S_ISDIR(sb.st_mode))
        st = col_err_set(err, COL_EIO, "%s is a directory, not %s", path, kind);
    else if (!S_ISREG(sb.st_mode))
        st = col_err_set(err, COL_EIO, "%s is not a regular file", path);
    else if (sb.st_size == 0)
        st = col_err_set(err, COL_EIO, "%s is empty (0 bytes), not %s", path, kind);
    else if ((uint64_t)sb.st_size > SIZE_MAX)
        st = col_err_set(err, COL_EIO, "%s is too large to map", path);
    if (st != COL_OK) {
        close(fd);
        return st;
    }
    size_t n = (size_t)sb.st_size;
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    int mmap_errno = errno;
    close(fd);
    if (p == MAP_FAILED)
        return col_err_set(err, COL_EIO, "cannot map %s (%zu bytes): %s", path, n, strerror(mmap_errno));
    *map = p;
    *len = n;
    return COL_OK;
}

void col_file_unmap(void *map, size_t len)
{
    if (map)
        munmap(map, len);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

static uintptr_t page_size(void)
{
    long ps = sysconf(_SC_PAGESIZE);
    return ps > 0 ? (uintptr_t)ps : 4096;
}

void col_file_release(const void *p, size_t len)
{
    uintptr_t page = page_size(), lo = ((uintptr_t)p + page - 1) & ~(page - 1), hi = ((uintptr_t)p + len) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void col_file_populate(const void *p, size_t len)
{
    uintptr_t page = page_size(), lo = (uintptr_t)p & ~(page - 1);
    if (len > 0)
        madvise((void *)lo, (uintptr_t)p + len - lo, MADV_POPULATE_READ);
}
