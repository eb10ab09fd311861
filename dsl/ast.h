// ast.h: the syntax tree of one .mt file. The parser builds it; sema reads it.
// Every node keeps the source location it came from. All of it lives in the
// Arena passed to dsl_parse.
#ifndef MT_AST_H
#define MT_AST_H

#include <stdint.h>

#include "common/arena.h"
#include "common/diag.h"
#include "common/graph.h" // Annot

typedef enum {
    EXPR_INT,    // ival
    EXPR_FLOAT,  // fval
    EXPR_STRING, // str
    EXPR_BOOL,   // ival 0 or 1
    EXPR_NAME,   // str
    EXPR_BINARY, // lhs op rhs; op one of + - * / % @
    EXPR_NEG,    // -lhs
    EXPR_CALL,   // str(items...), items may be EXPR_KWARG
    EXPR_KWARG,  // str = lhs, only as a call argument
    EXPR_TUPLE,  // (items...), at least two
    EXPR_LIST,   // [items...]
} ExprKind;

typedef struct Expr Expr;
struct Expr {
    ExprKind kind;
    Loc loc;
    int64_t ival;
    double fval;
    const char *str;
    int op;
    Expr *lhs, *rhs;
    PtrVec items; // of Expr*
};

// A dtype and a symbolic shape: `[B, T, C]` or `i32[B, T]`.
typedef struct TypeExpr {
    Loc loc;
    const char *dtype; // NULL when not written (f32)
    Loc dtype_loc;
    PtrVec dims; // of Expr*
} TypeExpr;

// `name = value` in config and train sections.
typedef struct Binding {
    Loc loc;
    const char *name;
    Expr *value;
} Binding;

// `param name "checkpoint.name" [dims] [init = call]`, or a parameter array
// `param name[count] "experts.{e}.name" [dims]`: count tensors of [dims],
// held as one [count, dims...], the checkpoint naming element e with {e}.
typedef struct ParamDecl {
    Loc loc;
    const char *name;
    Expr *count;      // NULL: not an array
    const char *ckpt; // checkpoint name; in a block, relative to its prefix
    Loc ckpt_loc;
    TypeExpr type;
    Expr *init; // NULL: the default for the parameter's rank
    int frozen; // written `frozen` (1): no gradient, no optimizer state (mtc --train may train it); `buffer`
                // (2): frozen whatever the flags, not counted as a parameter (a routing bias), zeros by default
} ParamDecl;

typedef enum { STMT_ASSIGN, STMT_RETURN } StmtKind;

typedef struct Stmt {
    StmtKind kind;
    Loc loc;
    Annot annot;
    PtrVec names; // of Expr* (EXPR_NAME), for STMT_ASSIGN
    Expr *value;
} Stmt;

// `name: type`, an input of a block or of forward.
typedef struct ArgDecl {
    Loc loc;
    const char *name;
    TypeExpr type;
} ArgDecl;

// A block, or a kind derived from one: `block b = a with W = 128, ...`
// (base "a"; no prefix, input, params or statements of its own: a's, with
// the config constants in overrides rebound while b is lowered).
typedef struct BlockDecl {
    Loc loc;
    const char *name;
    const char *base; // a derived kind: the block whose body it takes; NULL otherwise
    Loc base_loc;
    PtrVec overrides;   // of Binding*, a derived kind's
    Expr *repeat;       // how many layers; NULL for a kind an order lists
    const char *prefix; // checkpoint prefix with {i}, e.g. "h.{i}."
    Loc prefix_loc;
    ArgDecl input;
    TypeExpr *output; // NULL when `-> [...]` is left out
    PtrVec params;    // of ParamDecl*
    PtrVec stmts;     // of Stmt*
} BlockDecl;

// `block name[count] = [kind, kind, ...] * repeat`: the order of the
// model's layers by block kind. order is the expression after '=', an
// EXPR_LIST of names, or that list '*' a count.
typedef struct OrderDecl {
    Loc loc;
    const char *name;
    Expr *count; // the layers it declares
    Expr *order;
} OrderDecl;

typedef struct ForwardDecl {
    Loc loc;
    PtrVec inputs; // of ArgDecl*
    PtrVec stmts;  // of Stmt*
} ForwardDecl;

typedef struct Section {
    Loc loc;
    PtrVec bindings; // of Binding*
} Section;

typedef struct Model {
    Loc loc;
    const char *name;
    PtrVec configs;  // of Section*
    PtrVec params;   // of ParamDecl*, global
    PtrVec blocks;   // of BlockDecl*
    PtrVec orders;   // of OrderDecl*
    PtrVec forwards; // of ForwardDecl*
    PtrVec trains;   // of Section*
} Model;

// Parses src into a Model. Returns NULL after reporting at least one error
// through d. Never prints or exits by itself.
Model *dsl_parse(const Source *src, Arena *arena, Diag *d);

#endif
