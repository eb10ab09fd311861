// The one way a C test counts and reports its failed checks.
//
// CHECK(ok, fmt, ...) prints "FAIL file:line: message" when ok is false,
// counts one failure, and gives back whether it passed (1 or 0), so that a
// test can stop early: `if (!CHECK(p != NULL, "...")) return;`.
// FAIL(fmt, ...) is a check that always fails.
// check_failures is the count so far; check_summary(name) prints it and
// gives the exit code of main: 0 when nothing failed, 1 otherwise.
#ifndef MT_TESTS_CHECK_H
#define MT_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int check_failures;

__attribute__((format(printf, 4, 5))) static inline int check_at(const char *file, int line, int ok, const char *fmt,
                                                                 ...) {
    if (ok) return 1;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s:%d: ", file, line);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    check_failures++;
    return 0;
}

#define CHECK(ok, ...) check_at(__FILE__, __LINE__, (ok) ? 1 : 0, __VA_ARGS__)
#define FAIL(...) check_at(__FILE__, __LINE__, 0, __VA_ARGS__)

// "NAME: N checks failed" when some did; the exit code of main.
static inline int check_summary(const char *name) {
    if (check_failures) printf("%s: %d check%s failed\n", name, check_failures, check_failures == 1 ? "" : "s");
    return check_failures ? 1 : 0;
}

#endif
