/* parser.y: the grammar of the mt model language (dsl/README.md explains it).
   A pure parser over a reentrant scanner; every node it builds keeps the
   location of the token it stands for. No conflicts are tolerated. */
%define api.pure full
%define parse.error custom
%define parse.lac full
%define api.location.type {Loc}
%locations
%expect 0
%param {yyscan_t scanner}
%parse-param {ParseCtx *ctx}

%code requires {
#include "dsl/parse_ctx.h"
typedef void *yyscan_t;
}

%code provides {
int yylex(YYSTYPE *yylval, YYLTYPE *yylloc, yyscan_t scanner);
}

%code {
#include <string.h>

#define YYLLOC_DEFAULT(Cur, Rhs, N) \
    do { (Cur) = (N) ? YYRHSLOC(Rhs, 1) : YYRHSLOC(Rhs, 0); } while (0)

static Expr *new_expr(ParseCtx *ctx, ExprKind kind, Loc loc) {
    Expr *e = ctx_alloc(ctx, sizeof(Expr));
    if (e) { e->kind = kind; e->loc = loc; }
    return e;
}

static Expr *new_binary(ParseCtx *ctx, int op, Loc loc, Expr *l, Expr *r) {
    Expr *e = new_expr(ctx, EXPR_BINARY, loc);
    if (e) { e->op = op; e->lhs = l; e->rhs = r; }
    return e;
}

static Expr *new_name(ParseCtx *ctx, const char *s, Loc loc) {
    Expr *e = new_expr(ctx, EXPR_NAME, loc);
    if (e) e->str = s;
    return e;
}

static void yyerror(Loc *loc, yyscan_t scanner, ParseCtx *ctx, const char *msg) {
    (void)scanner;
    diag_error(ctx->diag, *loc, "%s", msg);
}
}

%union {
    const char *str;
    int64_t ival;
    double fval;
    Expr *expr;
    Stmt *stmt;
    ParamDecl *param;
    TypeExpr *type;
    PtrVec *vec;
    Section *section;
    int annot;
}

%token <str> IDENT "identifier" STRING "string"
%token <ival> INT "integer"
%token <fval> FLOAT "number"
%token MODEL "model" CONFIG "config" PARAM "param" BLOCK "block"
%token FORWARD "forward" TRAIN "train" RETURN "return" INIT "init" FROZEN "frozen" BUFFER "buffer"
%token KEEP "keep" RECOMPUTE "recompute" OFFLOAD "offload"
%token TRUE "true" FALSE "false" ARROW "->" WITH "with"

%type <expr> expr primary call_arg
%type <vec> exprs opt_exprs call_args names overrides
%type <stmt> stmt
%type <param> param_decl
%type <type> type opt_output
%type <section> bindings
%type <expr> opt_init opt_count
%type <annot> annot opt_frozen

%left '+' '-'
%left '*' '/' '%' '@'
%precedence UMINUS

%%

/* file: "model" IDENT item* */
file
    : "model" IDENT { ctx->model->name = $2; ctx->model->loc = @2; } items
    ;

items
    : %empty
    | items item
    ;

item
    : "config" '{' bindings '}' { $3->loc = @1; ctx_push(ctx, &ctx->model->configs, $3); }
    | "train" '{' bindings '}'  { $3->loc = @1; ctx_push(ctx, &ctx->model->trains, $3); }
    | param_decl                { ctx_push(ctx, &ctx->model->params, $1); }
    | block_decl
    | forward_decl
    | ';'
    ;

/* bindings: (IDENT "=" expr | ";")* */
bindings
    : %empty { $$ = ctx_alloc(ctx, sizeof(Section)); if (!$$) YYNOMEM; }
    | bindings IDENT '=' expr {
          $$ = $1;
          Binding *b = ctx_alloc(ctx, sizeof(Binding));
          if (!b) YYNOMEM;
          b->loc = @2; b->name = $2; b->value = $4;
          ctx_push(ctx, &$$->bindings, b);
      }
    | bindings ';' { $$ = $1; }
    ;

/* param_decl: "param" IDENT ("[" expr "]")? STRING type ("init" "=" expr)? ("frozen" | "buffer")? */
param_decl
    : "param" IDENT STRING type opt_init opt_frozen {
          $$ = ctx_alloc(ctx, sizeof(ParamDecl));
          if (!$$) YYNOMEM;
          $$->loc = @2; $$->name = $2; $$->ckpt = $3; $$->ckpt_loc = @3;
          $$->type = *$4; $$->init = $5; $$->frozen = $6;
      }
    | "param" IDENT '[' expr ']' STRING type opt_init opt_frozen {
          $$ = ctx_alloc(ctx, sizeof(ParamDecl));
          if (!$$) YYNOMEM;
          $$->loc = @2; $$->name = $2; $$->count = $4; $$->ckpt = $6; $$->ckpt_loc = @6;
          $$->type = *$7; $$->init = $8; $$->frozen = $9;
      }
    ;

opt_frozen
    : %empty   { $$ = 0; }
    | "frozen" { $$ = 1; }
    | "buffer" { $$ = 2; }
    ;

opt_init
    : %empty        { $$ = NULL; }
    | "init" '=' expr { $$ = $3; }
    ;

/* type: IDENT? "[" exprs? "]" */
type
    : '[' opt_exprs ']' {
          $$ = ctx_alloc(ctx, sizeof(TypeExpr));
          if (!$$) YYNOMEM;
          $$->loc = @1; $$->dims = *$2;
      }
    | IDENT '[' opt_exprs ']' {
          $$ = ctx_alloc(ctx, sizeof(TypeExpr));
          if (!$$) YYNOMEM;
          $$->loc = @1; $$->dtype = $1; $$->dtype_loc = @1; $$->dims = *$3;
      }
    ;

/* block_decl: "block" IDENT ("[" expr "]")? STRING "(" IDENT ":" type ")"
               ("->" type)? "{" (param_decl | stmt | ";")* "}"
             | "block" IDENT "[" expr "]" "=" expr
             | "block" IDENT "=" IDENT "with" IDENT "=" expr ("," IDENT "=" expr)* */
block_decl
    : "block" IDENT opt_count STRING '(' IDENT ':' type ')' opt_output '{' {
          BlockDecl *b = ctx_alloc(ctx, sizeof(BlockDecl));
          if (!b) YYNOMEM;
          b->loc = @2; b->name = $2; b->repeat = $3; b->prefix = $4; b->prefix_loc = @4;
          b->input.loc = @6; b->input.name = $6; b->input.type = *$8; b->output = $10;
          ctx_push(ctx, &ctx->model->blocks, b);
      } block_body '}'
    | "block" IDENT '[' expr ']' '=' expr {
          OrderDecl *o = ctx_alloc(ctx, sizeof(OrderDecl));
          if (!o) YYNOMEM;
          o->loc = @2; o->name = $2; o->count = $4; o->order = $7;
          ctx_push(ctx, &ctx->model->orders, o);
      }
    | "block" IDENT '=' IDENT "with" overrides {
          BlockDecl *b = ctx_alloc(ctx, sizeof(BlockDecl));
          if (!b) YYNOMEM;
          b->loc = @2; b->name = $2; b->base = $4; b->base_loc = @4; b->overrides = *$6;
          ctx_push(ctx, &ctx->model->blocks, b);
      }
    ;

overrides
    : IDENT '=' expr {
          $$ = ctx_alloc(ctx, sizeof(PtrVec));
          Binding *b = ctx_alloc(ctx, sizeof(Binding));
          if (!$$ || !b) YYNOMEM;
          b->loc = @1; b->name = $1; b->value = $3;
          ctx_push(ctx, $$, b);
      }
    | overrides ',' IDENT '=' expr {
          $$ = $1;
          Binding *b = ctx_alloc(ctx, sizeof(Binding));
          if (!b) YYNOMEM;
          b->loc = @3; b->name = $3; b->value = $5;
          ctx_push(ctx, $$, b);
      }
    ;

opt_count
    : %empty       { $$ = NULL; }
    | '[' expr ']' { $$ = $2; }
    ;

opt_output
    : %empty     { $$ = NULL; }
    | "->" type  { $$ = $2; }
    ;

block_body
    : %empty
    | block_body param_decl {
          BlockDecl *b = ctx->model->blocks.items[ctx->model->blocks.n - 1];
          ctx_push(ctx, &b->params, $2);
      }
    | block_body stmt {
          BlockDecl *b = ctx->model->blocks.items[ctx->model->blocks.n - 1];
          ctx_push(ctx, &b->stmts, $2);
      }
    | block_body ';'
    ;

/* forward_decl: "forward" "(" (IDENT ":" type ("," IDENT ":" type)*)? ")" "{" (stmt | ";")* "}" */
forward_decl
    : "forward" '(' {
          ForwardDecl *f = ctx_alloc(ctx, sizeof(ForwardDecl));
          if (!f) YYNOMEM;
          f->loc = @1;
          ctx_push(ctx, &ctx->model->forwards, f);
      } opt_args ')' '{' forward_body '}'
    ;

opt_args
    : %empty
    | args
    ;

args
    : arg
    | args ',' arg
    ;

arg
    : IDENT ':' type {
          ForwardDecl *f = ctx->model->forwards.items[ctx->model->forwards.n - 1];
          ArgDecl *a = ctx_alloc(ctx, sizeof(ArgDecl));
          if (!a) YYNOMEM;
          a->loc = @1; a->name = $1; a->type = *$3;
          ctx_push(ctx, &f->inputs, a);
      }
    ;

forward_body
    : %empty
    | forward_body stmt {
          ForwardDecl *f = ctx->model->forwards.items[ctx->model->forwards.n - 1];
          ctx_push(ctx, &f->stmts, $2);
      }
    | forward_body ';'
    ;

/* stmt: annot? IDENT ("," IDENT)* "=" expr | "return" expr */
stmt
    : annot names '=' expr {
          $$ = ctx_alloc(ctx, sizeof(Stmt));
          if (!$$) YYNOMEM;
          $$->kind = STMT_ASSIGN; $$->loc = $1 ? @1 : @2; $$->annot = $1; $$->names = *$2; $$->value = $4;
      }
    | "return" expr {
          $$ = ctx_alloc(ctx, sizeof(Stmt));
          if (!$$) YYNOMEM;
          $$->kind = STMT_RETURN; $$->loc = @1; $$->value = $2;
      }
    ;

annot
    : %empty      { $$ = ANNOT_NONE; }
    | "keep"      { $$ = ANNOT_KEEP; }
    | "recompute" { $$ = ANNOT_RECOMPUTE; }
    | "offload"   { $$ = ANNOT_OFFLOAD; }
    ;

names
    : IDENT {
          $$ = ctx_alloc(ctx, sizeof(PtrVec));
          if (!$$) YYNOMEM;
          ctx_push(ctx, $$, new_name(ctx, $1, @1));
      }
    | names ',' IDENT { $$ = $1; ctx_push(ctx, $$, new_name(ctx, $3, @3)); }
    ;

/* expr: expr ("+" | "-" | "*" | "/" | "%" | "@") expr | "-" expr | primary */
expr
    : expr '+' expr { $$ = new_binary(ctx, '+', @2, $1, $3); }
    | expr '-' expr { $$ = new_binary(ctx, '-', @2, $1, $3); }
    | expr '*' expr { $$ = new_binary(ctx, '*', @2, $1, $3); }
    | expr '/' expr { $$ = new_binary(ctx, '/', @2, $1, $3); }
    | expr '%' expr { $$ = new_binary(ctx, '%', @2, $1, $3); }
    | expr '@' expr { $$ = new_binary(ctx, '@', @2, $1, $3); }
    | '-' expr %prec UMINUS {
          $$ = new_expr(ctx, EXPR_NEG, @1);
          if ($$) $$->lhs = $2;
      }
    | primary
    ;

/* primary: INT | FLOAT | STRING | "true" | "false" | IDENT | IDENT "(" call_args ")"
          | "(" expr ")" | "(" expr ("," expr)+ ")" | "[" exprs? "]" */
primary
    : INT     { $$ = new_expr(ctx, EXPR_INT, @1); if ($$) $$->ival = $1; }
    | FLOAT   { $$ = new_expr(ctx, EXPR_FLOAT, @1); if ($$) $$->fval = $1; }
    | STRING  { $$ = new_expr(ctx, EXPR_STRING, @1); if ($$) $$->str = $1; }
    | "true"  { $$ = new_expr(ctx, EXPR_BOOL, @1); if ($$) $$->ival = 1; }
    | "false" { $$ = new_expr(ctx, EXPR_BOOL, @1); }
    | IDENT   { $$ = new_name(ctx, $1, @1); }
    | IDENT '(' call_args ')' {
          $$ = new_expr(ctx, EXPR_CALL, @1);
          if ($$) { $$->str = $1; $$->items = *$3; }
      }
    | '(' expr ')' { $$ = $2; }
    | '(' expr ',' exprs ')' {
          $$ = new_expr(ctx, EXPR_TUPLE, @1);
          if ($$) {
              ctx_push(ctx, &$$->items, $2);
              for (int i = 0; i < $4->n; i++) ctx_push(ctx, &$$->items, $4->items[i]);
          }
      }
    | '[' opt_exprs ']' {
          $$ = new_expr(ctx, EXPR_LIST, @1);
          if ($$) $$->items = *$2;
      }
    ;

exprs
    : expr {
          $$ = ctx_alloc(ctx, sizeof(PtrVec));
          if (!$$) YYNOMEM;
          ctx_push(ctx, $$, $1);
      }
    | exprs ',' expr { $$ = $1; ctx_push(ctx, $$, $3); }
    ;

opt_exprs
    : %empty { $$ = ctx_alloc(ctx, sizeof(PtrVec)); if (!$$) YYNOMEM; }
    | exprs
    ;

call_args
    : %empty {
          $$ = ctx_alloc(ctx, sizeof(PtrVec));
          if (!$$) YYNOMEM;
      }
    | call_arg {
          $$ = ctx_alloc(ctx, sizeof(PtrVec));
          if (!$$) YYNOMEM;
          ctx_push(ctx, $$, $1);
      }
    | call_args ',' call_arg { $$ = $1; ctx_push(ctx, $$, $3); }
    ;

/* call_arg: expr | IDENT "=" expr */
call_arg
    : expr
    | IDENT '=' expr {
          $$ = new_expr(ctx, EXPR_KWARG, @1);
          if ($$) { $$->str = $1; $$->lhs = $3; }
      }
    ;

%%

void *ctx_alloc(ParseCtx *ctx, size_t n) {
    void *p = arena_alloc(ctx->arena, n);
    if (!p) ctx->oom = 1;
    return p;
}

void ctx_push(ParseCtx *ctx, PtrVec *v, void *p) {
    if (!p || ptrvec_push(ctx->arena, v, p) != 0) ctx->oom = 1;
}

// Writes a token's name as users read it: keywords and punctuation quoted
// ('model', '='), classes of tokens as words (identifier, end of file).
static void token_name(char *out, size_t cap, yysymbol_kind_t sym) {
    static const char *const CLASSES[] = {"identifier", "string", "integer", "number", "end of file"};
    const char *name = yysymbol_name(sym);
    for (size_t i = 0; i < sizeof CLASSES / sizeof CLASSES[0]; i++)
        if (!strcmp(name, CLASSES[i])) {
            snprintf(out, cap, "%s", name);
            return;
        }
    size_t n = strlen(name);
    if (n >= 2 && (name[0] == '"' || name[0] == '\''))
        snprintf(out, cap, "'%.*s'", (int)(n - 2), name + 1);
    else
        snprintf(out, cap, "'%s'", name);
}

static int is_binary_operator(yysymbol_kind_t s) {
    const char *name = yysymbol_name(s);
    return strlen(name) == 3 && name[0] == '\'' && strchr("+-*/%@", name[1]);
}

static int yyreport_syntax_error(const yypcontext_t *pctx, yyscan_t scanner, ParseCtx *ctx) {
    (void)scanner;
    yysymbol_kind_t got = yypcontext_token(pctx);
    char got_name[64], msg[512];
    token_name(got_name, sizeof got_name, got);
    int n;
    if (got == YYSYMBOL_IDENT || got == YYSYMBOL_INT || got == YYSYMBOL_FLOAT || got == YYSYMBOL_STRING)
        n = snprintf(msg, sizeof msg, "unexpected %s '%.40s'", got_name, ctx->last_token);
    else
        n = snprintf(msg, sizeof msg, "unexpected %s", got_name);
    // List what would have been accepted, the six binary operators as one.
    enum { MAX_LISTED = 32 };
    yysymbol_kind_t expected[MAX_LISTED];
    int count = yypcontext_expected_tokens(pctx, expected, MAX_LISTED), nops = 0;
    if (count < 0) count = 0;
    for (int i = 0; i < count; i++) nops += is_binary_operator(expected[i]);
    char list[MAX_LISTED][64];
    int nlist = 0;
    if (nops == 6) snprintf(list[nlist++], sizeof list[0], "an operator");
    for (int i = 0; i < count; i++)
        if (nops != 6 || !is_binary_operator(expected[i])) token_name(list[nlist++], sizeof list[0], expected[i]);
    for (int i = 0; i < nlist && n > 0 && (size_t)n < sizeof msg; i++) {
        const char *sep = i == 0 ? "; expected " : i == nlist - 1 ? " or " : ", ";
        n += snprintf(msg + n, sizeof msg - (size_t)n, "%s%s", sep, list[i]);
    }
    diag_error(ctx->diag, *yypcontext_location(pctx), "%s", msg);
    return 0;
}
