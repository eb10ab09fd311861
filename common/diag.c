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

void diag_error(Diag *d, Loc loc, const char *fmt, ...) {
    d->nerrors++;
    if (!d->sink) return;
    if (loc.line > 0) fprintf(d->sink, "%s:%d:%d: error: ", d->src->path, loc.line, loc.col);
    else fprintf(d->sink, "%s: error: ", d->src->path);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(d->sink, fmt, ap);
    va_end(ap);
    fputc('\n', d->sink);
    if (loc.line > 0) quote_line(d->sink, d->src, loc.line, loc.col);
}
