// io.h: whole-file reading with errors returned, never printed.
#ifndef MT_IO_H
#define MT_IO_H

#include <stddef.h>

// Reads the file at path into a malloc'd buffer (NUL-terminated, *len bytes
// before the NUL). Returns 0, or an errno value with *data NULL.
int io_read_file(const char *path, char **data, size_t *len);

#endif
