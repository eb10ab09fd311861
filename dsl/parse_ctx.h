// parse_ctx.h: state shared by the reentrant scanner and the pure parser.
#ifndef MT_PARSE_CTX_H
#define MT_PARSE_CTX_H

#include "dsl/ast.h"

typedef struct ParseCtx {
    Arena *arena;
    Diag *diag;
    Model *model;
    int line, col;          // where the scanner stands
    Loc comment_start;      // of the block comment being skipped
    const char *last_token; // text of the token last scanned, for messages
    int oom;                // an allocation failed
} ParseCtx;

// Arena helpers that remember an allocation failure instead of crashing.
void *ctx_alloc(ParseCtx *ctx, size_t n);
void ctx_push(ParseCtx *ctx, PtrVec *v, void *p);

#endif
