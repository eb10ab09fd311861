// io.h: whole-file reading with errors returned, never printed.
#ifndef MT_IO_H
#define MT_IO_H

#include <stddef.h>
#include <stdint.h>

// Reads the file at path into a malloc'd buffer (NUL-terminated, *len bytes
// before the NUL). Returns 0, or an errno value with *data NULL.
int io_read_file(const char *path, char **data, size_t *len);

// Writes "PATH: message" into err (cut to errcap) and returns -1: the one
// shape of the runtime's file errors.
int io_fail(char *err, size_t errcap, const char *path, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

// Maps a regular file of at least min_size bytes read-only (MAP_PRIVATE),
// never blocking on a FIFO. noun names the file in messages ("data file");
// too_small is the message for a shorter one. Returns 0 with *map and *len
// set (unmap with munmap), or -1 with "PATH: message" in err.
int io_map_file(const char *path, const char *noun, size_t min_size, const char *too_small, const unsigned char **map,
                size_t *len, char *err, size_t errcap);

// zlib's crc32 of len bytes, continuing crc, for any len.
uint32_t io_crc32(uint32_t crc, const void *data, size_t len);

// Makes a rename inside path's directory durable: fsync of the directory,
// best effort, as some file systems refuse it.
void io_sync_parent_dir(const char *path);

#endif
