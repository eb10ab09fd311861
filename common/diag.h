// diag.h: the one reporting helper. Every user error of the front end and the
// compiler goes through diag_error, which writes
//
//     file:line:col: error: message
//       the offending source line
//       ^
//
// to the sink the caller chose (NULL discards, as the fuzzer does). Library
// code never prints or exits by itself; it counts errors and returns.
#ifndef MT_DIAG_H
#define MT_DIAG_H

#include <stddef.h>
#include <stdio.h>

typedef struct Loc {
    int line, col; // 1-based; line 0 means "the whole file"
} Loc;

typedef struct Source {
    const char *path; // as the user named it
    const char *text; // (len) bytes, not necessarily NUL-free
    size_t len;
} Source;

typedef struct Diag {
    const Source *src;
    FILE *sink; // NULL: count errors without writing them
    int nerrors;
    int lowered; // models lowered with it so far (sema_lower): warnings are said at the first only
} Diag;

void diag_error(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// The same with "warning:", counting no error: something that compiles but
// is likely not what the user meant. Said only while d->lowered is 0, so a
// model lowered again (another tiling or batch) does not repeat it.
void diag_warning(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
