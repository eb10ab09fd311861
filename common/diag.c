#include "common/diag.h"

#include <stdarg.h>

// Writes the source line `line` and a caret under column `col`, keeping tabs
// so the caret lines up however the terminal expands them.
static void quote_line(FILE *out, const Source *src, int line, int col) {
    const char *p = src->text, *end = src->text + src->len;
    for (int l = 1; l < line && p < end; p++)
        if (*p == '\n') l++;
    const char *eol = p;
    while (eol < end && *eol != '\n') eol++;
    fputs("  ", out);
    for (const char *q = p; q < eol; q++) fputc((unsigned char)*q < 0x20 && *q != '\t' ? '?' : *q, out);
    fputs("\n  ", out);
    for (int c = 1; c < col && p + c - 1 < eol; c++) fputc(p[c - 1] == '\t' ? '\t' : ' ', out);
    fputs("^\n", out);
}

static void report(Diag *d, Loc loc, const char *what, const char *fmt, va_list ap) {
    if (loc.line > 0) fprintf(d->sink, "%s:%d:%d: %s: ", d->src->path, loc.line, loc.col, what);
    else fprintf(d->sink, "%s: %s: ", d->src->path, what);
    vfprintf(d->sink, fmt, ap);
    fputc('\n', d->sink);
    if (loc.line > 0) quote_line(d->sink, d->src, loc.line, loc.col);
}

void diag_error(Diag *d, Loc loc, const char *fmt, ...) {
    d->nerrors++;
    if (!d->sink) return;
    va_list ap;
    va_start(ap, fmt);
    report(d, loc, "error", fmt, ap);
    va_end(ap);
}

void diag_warning(Diag *d, Loc loc, const char *fmt, ...) {
    if (!d->sink || d->lowered) return;
    va_list ap;
    va_start(ap, fmt);
    report(d, loc, "warning", fmt, ap);
    va_end(ap);
}
