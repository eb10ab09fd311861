// sema.h: state shared by the three files of sema: consts.c (lookups,
// constants, call syntax, node construction; below the other two, calling
// neither), sema.c (expressions, sections, statements; it lowers an op
// call's arguments, then hands them to ops.c) and ops.c (the shape and
// dtype rule of every op, calling only consts.c).
#ifndef MT_SEMA_H
#define MT_SEMA_H

#include "compiler/front/passes.h"

// A compile-time number: config values, literals, op attributes.
typedef struct Num {
    int is_int;
    int64_t i;
    double f; // valid for both kinds
} Num;

// What an expression lowers to: a constant or a tensor node.
typedef struct Val {
    int is_num;
    Num num;
    Node *node;
} Val;

typedef struct Sema {
    Arena *a;
    Diag *d;
    const Model *m;
    Graph *g;
    PtrVec config;                 // of ConfigEntry*
    int have_bt;                   // B and T are bound
    const char *bt_unavailable_in; // where B and T cannot be used, for messages
    int64_t B, T;
    PartKind part;           // the part statements are appended to
    PtrVec locals;           // of Local*: names bound by statements and inputs
    int in_block;            // lowering the block's statements
    const char *kind_prefix; // the checkpoint prefix of the block kind being lowered
    int kind;                // which block kind (Graph.nkinds) they are
    const char *block_name;  // what forward calls: the block, or the order of block kinds
    Loc block_loc;
    Node *block_input; // the block's OP_INPUT node (the first kind's)
    int block_called;
    Node *model_inputs; // (g->inputs.n) stand-ins for forward's arguments
} Sema;

typedef struct ConfigEntry {
    const char *name;
    Num v;
    Loc loc;
} ConfigEntry;

typedef struct Local {
    const char *name;
    Node *node;
    Loc loc;
} Local;

// consts.c: lookups, constants, call syntax and node construction, below sema.c and ops.c.
ConfigEntry *find_config(Sema *S, const char *name);
// Inside a block, block parameters are those of the kind being lowered.
int find_param(Sema *S, const char *name, int in_block);
Local *find_local(Sema *S, const char *name);
// The first block declared as `name`, or NULL.
const BlockDecl *find_block(Sema *S, const char *name);
// Whether name is B or T.
int is_bt(const char *name);
// Whether name is a function of constants (sqrt, ln, min, ...).
int is_const_function(const char *name);
// Whether e is a constant expression, without reporting anything.
int is_const_expr(Sema *S, const Expr *e);

// The value of keyword argument `name` of a call, or NULL.
const Expr *find_kwarg(const Expr *call, const char *name);
// Whether w is one of the space-separated words of list.
int word_in_list(const char *list, const char *w);
int eval_num(Sema *S, const Expr *e, Num *out);
int num_binary(Sema *S, int op, Loc loc, Num a, Num b, Num *out);
// A node appended to the current part; a constant's.
Node *new_node(Sema *S, OpKind op, DType dt, const Shape *shape, Loc loc, int nin, Node **in);
Node *const_node(Sema *S, double v, Loc loc);

// sema.c: expressions, statements, sections.
int lower_expr(Sema *S, const Expr *e, Val *out);
// Lowers e and requires a tensor, brought into the current part.
int lower_tensor(Sema *S, const Expr *e, Node **out);
int lower_block_call(Sema *S, const Expr *call, Val *out);

// ops.c: the rule of every op, on operands sema.c lowered (ops.c lowers no
// expression: the arguments are lowered above it, so neither file calls the
// other back). A call's arguments, positional and keyword, in source order:
typedef struct Args {
    const Expr *call;
    const struct OpSpec *spec;
    const Expr *pos[16];
    int npos;
    int nvals; // pos[0, nvals) are values, lowered by the caller into val; the rest the rule reads as written
    int fold;  // matmul: an operand written transpose(w) is lowered as w with trans set (the GEMM's flag)
    Val val[16];
    int trans[16];
} Args;
// The op a call names and its arguments, checked against the op's form
// (known keywords, how many positional); 0, or -1 with a located error.
int ops_collect(Sema *S, const Expr *call, Args *a);
// The op's nodes from its lowered arguments, into nouts values; 0 or -1.
int ops_lower(Sema *S, const Args *a, Val *outs, int nouts);
// a @ b, each operand transposed when ta / tb (ea, eb their expressions, for messages).
Node *lower_matmul(Sema *S, Loc loc, Node *a, int ta, Node *b, int tb, const Expr *ea, const Expr *eb);
// Lowers `a OP b` (+ - * /) on two tensors, or a tensor and a constant.
int lower_binary(Sema *S, const Expr *e, Val a, Val b, Val *out);

#endif
