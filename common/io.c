#include "common/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

int io_read_file(const char *path, char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return errno;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
        int err = S_ISDIR(st.st_mode) ? EISDIR : errno;
        fclose(f);
        return err;
    }
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int err = !buf ? ENOMEM : ferror(f) ? EIO : 0;
    fclose(f);
    if (err) {
        free(buf);
        return err;
    }
    buf[n] = 0; // n < cap here
    *data = buf;
    *len = n;
    return 0;
}

int io_fail(char *err, size_t errcap, const char *path, const char *fmt, ...) {
    if (!err || errcap == 0) return -1;
    int n = snprintf(err, errcap, "%s: ", path);
    if (n >= 0 && (size_t)n < errcap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + n, errcap - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int io_map_file(const char *path, const char *noun, size_t min_size, const char *too_small, const unsigned char **map,
                size_t *len, char *err, size_t errcap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); // a FIFO must not block us
    if (fd < 0) return io_fail(err, errcap, path, "cannot open the %s: %s", noun, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return io_fail(err, errcap, path, "cannot stat the %s: %s", noun, strerror(e));
    }
    if (S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < min_size ||
        (uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        if (S_ISDIR(st.st_mode)) return io_fail(err, errcap, path, "is a directory, not a %s", noun);
        if (!S_ISREG(st.st_mode))
            return io_fail(err, errcap, path,
                           "is not a regular file (a %s is mapped, so it cannot be a pipe or a device)", noun);
        if ((uint64_t)st.st_size < min_size) return io_fail(err, errcap, path, "%s", too_small);
        return io_fail(err, errcap, path, "too large to map on this machine");
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); // the mapping stays
    if (m == MAP_FAILED) return io_fail(err, errcap, path, "cannot map the %s: %s", noun, strerror(e));
    *map = m;
    *len = (size_t)st.st_size;
    return 0;
}

uint32_t io_crc32(uint32_t crc, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t done = 0; done < len;) { // crc32 takes an unsigned int length
        size_t n = len - done > (1u << 30) ? (1u << 30) : len - done;
        crc = (uint32_t)crc32(crc, p + done, (uInt)n);
        done += n;
    }
    return crc;
}

void io_sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}
