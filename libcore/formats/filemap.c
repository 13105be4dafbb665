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
