// emit_llvm.c: kernel IR to LLVM IR (emit_llvm.h). One function per
// expression kernel (node kernels: emit_llvm_node.c):
//
//   entry:   the argument pointers; if r0 >= r1 return
//   row:     phi row; row-level statements; column loops; row + 1 < r1 ?
//   loop k:  one straight-line block, bottom-tested (a loop has >= 1
//            column): phi col and one phi per reduction of the loop
//
// A reduction's value after its loop is its last update, which dominates
// the loop's exit because the body is one block.
#include "compiler/emit/emit_llvm.h"

#include "compiler/emit/emit_llvm_node.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/BitWriter.h>
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct Em {
    LLVMContextRef cx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMTypeRef f32, f64, i16, i32, i64, i1, ptr8, fnty;
    const KirKernel *k;
    const Part *part;
    char name[64];
    LLVMValueRef fn, *v, *argp, scratch, row;
    LLVMValueRef *phi;             // (nstmts) reductions' phis, by statement
    LLVMValueRef *scope, *noalias; // (nargs) each argument's alias scope, and the scopes it is apart from
    char *err;
    size_t errcap;
    int failed;
} Em;

static void efail(Em *e, int stmt, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void efail(Em *e, int stmt, const char *fmt, ...) {
    if (e->failed) return;
    e->failed = 1;
    int node = stmt >= 0 ? e->k->stmts[stmt].node : e->k->anchor;
    const Node *n = e->part && node >= 0 && node < e->part->nodes.n ? e->part->nodes.items[node] : NULL;
    int w = snprintf(e->err, e->errcap, "llvm: kernel %s, statement %d, from %%%d %s (%d:%d): ", e->name, stmt, node,
                     n ? op_name(n->op) : "?", n ? n->loc.line : 0, n ? n->loc.col : 0);
    if (w < 0 || (size_t)w >= e->errcap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err + w, e->errcap - (size_t)w, fmt, ap);
    va_end(ap);
}

static LLVMTypeRef type_of(Em *e, int t) {
    switch (t) {
    case KT_F32: return e->f32;
    case KT_F64: return e->f64;
    case KT_I32: return e->i32;
    case KT_I64: return e->i64;
    case KT_BF16: return e->i16; // storage only: loads widen, stores round (bf16_widen, bf16_bits)
    default: return e->i1;
    }
}
static int is_fp(int t) { return t == KT_F32 || t == KT_F64; }

static LLVMValueRef intrinsic(Em *e, const char *name, int t, LLVMValueRef *args, unsigned nargs) {
    LLVMTypeRef ty = type_of(e, t);
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(e->mod, id, &ty, 1);
    LLVMTypeRef fty = LLVMIntrinsicGetType(e->cx, id, &ty, 1);
    return LLVMBuildCall2(e->b, fty, fn, args, nargs, "");
}

// The element pointer of argument a at index idx (f64 scratch for KA_ACC64 accumulators).
static LLVMValueRef elem_ptr(Em *e, int a, LLVMValueRef idx, int scratch) {
    if (scratch) {
        LLVMValueRef off = LLVMBuildAdd(e->b, idx,
                                        LLVMConstInt(e->i64, (unsigned long long)kir_acc64_offset(e->k, a), 0), "");
        return LLVMBuildGEP2(e->b, e->f64, e->scratch, &off, 1, "");
    }
    LLVMTypeRef et = type_of(e, e->k->args[a].dtype);
    return LLVMBuildGEP2(e->b, et, e->argp[a], &idx, 1, "");
}

// The f32 a bf16's bits (i16) hold: the bits in the high half.
static LLVMValueRef bf16_widen(Em *e, LLVMValueRef h) {
    LLVMValueRef w = LLVMBuildShl(e->b, LLVMBuildZExt(e->b, h, e->i32, ""), LLVMConstInt(e->i32, 16, 0), "");
    return LLVMBuildBitCast(e->b, w, e->f32, "");
}

// The bf16 bits (i16) of f32 x, rounded to nearest even; a NaN stays a quiet
// NaN. The same operations as bf16_from_f32 in common/bf16.h.
static LLVMValueRef bf16_bits(Em *e, LLVMValueRef x) {
    LLVMBuilderRef B = e->b;
    LLVMValueRef u = LLVMBuildBitCast(B, x, e->i32, "");
    LLVMValueRef hi = LLVMBuildLShr(B, u, LLVMConstInt(e->i32, 16, 0), "");
    LLVMValueRef odd = LLVMBuildAnd(B, hi, LLVMConstInt(e->i32, 1, 0), "");
    LLVMValueRef up = LLVMBuildAdd(B, LLVMBuildAdd(B, u, LLVMConstInt(e->i32, 0x7FFF, 0), ""), odd, "");
    LLVMValueRef rounded = LLVMBuildLShr(B, up, LLVMConstInt(e->i32, 16, 0), "");
    LLVMValueRef quiet = LLVMBuildOr(B, hi, LLVMConstInt(e->i32, 0x40, 0), "");
    LLVMValueRef mag = LLVMBuildAnd(B, u, LLVMConstInt(e->i32, 0x7FFFFFFF, 0), "");
    LLVMValueRef nan = LLVMBuildICmp(B, LLVMIntUGT, mag, LLVMConstInt(e->i32, 0x7F800000, 0), "");
    return LLVMBuildTrunc(B, LLVMBuildSelect(B, nan, quiet, rounded, ""), e->i16, "");
}

static LLVMValueRef convert(Em *e, LLVMValueRef x, int from, int to) {
    LLVMTypeRef t = type_of(e, to);
    if (from == to) return x;
    if (is_fp(from) && is_fp(to))
        return to == KT_F64 ? LLVMBuildFPExt(e->b, x, t, "") : LLVMBuildFPTrunc(e->b, x, t, "");
    if (is_fp(to)) return LLVMBuildSIToFP(e->b, x, t, "");
    if (is_fp(from)) return LLVMBuildFPToSI(e->b, x, t, "");
    return to == KT_I64 ? LLVMBuildSExt(e->b, x, t, "") : LLVMBuildTrunc(e->b, x, t, "");
}

// Tags a load or store through argument a with its alias scope (see arg_scopes).
static LLVMValueRef scoped(Em *e, int a, LLVMValueRef inst) {
    if (!e->scope[a]) return inst;
    LLVMSetMetadata(inst, LLVMGetMDKindIDInContext(e->cx, "alias.scope", 11), e->scope[a]);
    if (e->noalias[a]) LLVMSetMetadata(inst, LLVMGetMDKindIDInContext(e->cx, "noalias", 7), e->noalias[a]);
    return inst;
}

// A self-referential metadata node (what makes an alias domain or scope distinct): !{!self, ops...}.
static LLVMMetadataRef self_node(Em *e, LLVMMetadataRef *ops, int n) {
    LLVMMetadataRef tmp = LLVMTemporaryMDNode(e->cx, NULL, 0), all[4] = {tmp};
    for (int i = 0; i < n && i < 3; i++) all[i + 1] = ops[i];
    LLVMMetadataRef md = LLVMMDNodeInContext2(e->cx, all, (size_t)n + 1);
    LLVMMetadataReplaceAllUsesWith(tmp, md);
    return md;
}

// Whether two arguments can share no element: other nodes (the schedule
// places buffers that are live at once apart, and every argument of a
// kernel is live while it runs), or other element ranges of one node.
static int args_apart(const KirArg *x, const KirArg *y) {
    if (x->node != y->node) return x->node >= 0 && y->node >= 0;
    return x->offset + x->numel <= y->offset || y->offset + y->numel <= x->offset;
}

// One alias scope per argument, each access tagged with its argument's and
// told apart from every argument it shares no element with: the loop
// vectoriser then needs no run-time overlap checks, which it cannot build
// for an access at a computed column (rope's partner element).
static void arg_scopes(Em *e) {
    const KirKernel *k = e->k;
    LLVMMetadataRef name = LLVMMDStringInContext2(e->cx, e->name, strlen(e->name));
    LLVMMetadataRef domain = self_node(e, &name, 1);
    LLVMMetadataRef *sc = calloc((size_t)k->nargs + 1, sizeof *sc),
                    *apart = calloc((size_t)k->nargs + 1, sizeof *apart);
    if (!sc || !apart) {
        free(sc), free(apart);
        return; // no tags: LLVM's own checks
    }
    for (int a = 0; a < k->nargs; a++) sc[a] = self_node(e, &domain, 1);
    for (int a = 0; a < k->nargs; a++) {
        int n = 0;
        for (int b = 0; b < k->nargs; b++)
            if (b != a && args_apart(&k->args[a], &k->args[b])) apart[n++] = sc[b];
        e->scope[a] = LLVMMetadataAsValue(e->cx, LLVMMDNodeInContext2(e->cx, &sc[a], 1));
        e->noalias[a] = n ? LLVMMetadataAsValue(e->cx, LLVMMDNodeInContext2(e->cx, apart, (size_t)n)) : NULL;
    }
    free(sc), free(apart);
}

static void emit_stmt(Em *e, int i) {
    const KirStmt *s = &e->k->stmts[i];
    LLVMValueRef a = s->a >= 0 && s->a < i ? e->v[s->a] : NULL, bv = s->b >= 0 && s->b < i ? e->v[s->b] : NULL;
    LLVMValueRef c = s->c >= 0 && s->c < i ? e->v[s->c] : NULL, r = NULL;
    int t = s->type, fp = is_fp(t);
    int ta = s->a >= 0 && s->a < i ? e->k->stmts[s->a].type : t;
    LLVMBuilderRef B = e->b;
    static const char *const MATH[] = {[KOP_EXP] = "llvm.exp", [KOP_LOG] = "llvm.log", [KOP_SQRT] = "llvm.sqrt",
                                       [KOP_SIN] = "llvm.sin", [KOP_COS] = "llvm.cos", [KOP_POW] = "llvm.pow"};
    switch (s->op) {
    case KOP_CONST:
        r = fp ? LLVMConstReal(type_of(e, t), s->value)
               : LLVMConstInt(type_of(e, t), (unsigned long long)(long long)s->value, 1);
        break;
    case KOP_ROW: r = e->row; break;
    case KOP_COL: r = e->v[i]; break; // set when the loop opened
    case KOP_LOAD: {
        int st = e->k->args[s->a].dtype;
        r = scoped(e, s->a, LLVMBuildLoad2(B, type_of(e, st), elem_ptr(e, s->a, bv, 0), ""));
        if (st == KT_BF16) r = bf16_widen(e, r);
        break;
    }
    case KOP_RBF16: r = bf16_widen(e, bf16_bits(e, a)); break;
    case KOP_NEG: r = fp ? LLVMBuildFNeg(B, a, "") : LLVMBuildNeg(B, a, ""); break;
    case KOP_EXP:
    case KOP_LOG:
    case KOP_SQRT:
    case KOP_SIN:
    case KOP_COS: r = intrinsic(e, MATH[s->op], t, &a, 1); break;
    case KOP_POW: {
        LLVMValueRef xs[2] = {a, bv};
        r = intrinsic(e, MATH[s->op], t, xs, 2);
        break;
    }
    case KOP_CVT: r = convert(e, a, ta, t); break;
    case KOP_ADD: r = fp ? LLVMBuildFAdd(B, a, bv, "") : LLVMBuildAdd(B, a, bv, ""); break;
    case KOP_SUB: r = fp ? LLVMBuildFSub(B, a, bv, "") : LLVMBuildSub(B, a, bv, ""); break;
    case KOP_MUL: r = fp ? LLVMBuildFMul(B, a, bv, "") : LLVMBuildMul(B, a, bv, ""); break;
    case KOP_DIV: r = fp ? LLVMBuildFDiv(B, a, bv, "") : LLVMBuildSDiv(B, a, bv, ""); break;
    case KOP_REM: r = LLVMBuildSRem(B, a, bv, ""); break;
    case KOP_MIN:
    case KOP_MAX: {
        int lt = s->op == KOP_MIN;
        LLVMValueRef cmp = fp ? LLVMBuildFCmp(B, lt ? LLVMRealOLT : LLVMRealOGT, a, bv, "")
                              : LLVMBuildICmp(B, lt ? LLVMIntSLT : LLVMIntSGT, a, bv, "");
        r = LLVMBuildSelect(B, cmp, a, bv, "");
        break;
    }
    case KOP_LT:
    case KOP_LE:
    case KOP_EQ: {
        int tt = e->k->stmts[s->a].type;
        if (is_fp(tt))
            r = LLVMBuildFCmp(B,
                              s->op == KOP_LT   ? LLVMRealOLT
                              : s->op == KOP_LE ? LLVMRealOLE
                                                : LLVMRealOEQ,
                              a, bv, "");
        else r = LLVMBuildICmp(B, s->op == KOP_LT ? LLVMIntSLT : s->op == KOP_LE ? LLVMIntSLE : LLVMIntEQ, a, bv, "");
        break;
    }
    case KOP_SELECT: r = LLVMBuildSelect(B, a, bv, c, ""); break;
    case KOP_RSUM: r = fp ? LLVMBuildFAdd(B, e->phi[i], a, "") : LLVMBuildAdd(B, e->phi[i], a, ""); break;
    case KOP_RMAX: { // acc = x > acc ? x : acc, as the reference
        LLVMValueRef gt = fp ? LLVMBuildFCmp(B, LLVMRealOGT, a, e->phi[i], "")
                             : LLVMBuildICmp(B, LLVMIntSGT, a, e->phi[i], "");
        r = LLVMBuildSelect(B, gt, a, e->phi[i], "");
        break;
    }
    case KOP_STORE:
        scoped(e, s->a,
               LLVMBuildStore(B, e->k->args[s->a].dtype == KT_BF16 ? bf16_bits(e, c) : c, elem_ptr(e, s->a, bv, 0)));
        break;
    case KOP_ACC: {
        int f64 = (e->k->args[s->a].access & KA_ACC64) != 0;
        LLVMValueRef p = elem_ptr(e, s->a, bv, f64);
        LLVMValueRef old = LLVMBuildLoad2(B, f64 ? e->f64 : e->f32, p, "");
        LLVMValueRef st = LLVMBuildStore(B, LLVMBuildFAdd(B, old, c, ""), p);
        if (!f64) scoped(e, s->a, old), scoped(e, s->a, st); // f64 ones are in the scratch, a noalias parameter
        break;
    }
    default: efail(e, i, "no LLVM lowering for %s", kir_op_name(s->op)); return;
    }
    e->v[i] = r;
}

// Emits statements [i, end) of column loop `loop` as one bottom-tested loop.
static void emit_loop(Em *e, int i, int end, int loop) {
    const KirKernel *k = e->k;
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(e->b);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(e->cx, e->fn, "cols");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->cx, e->fn, "cols.done");
    LLVMBuildBr(e->b, body);
    LLVMPositionBuilderAtEnd(e->b, body);
    LLVMValueRef col = LLVMBuildPhi(e->b, e->i64, "col");
    for (int j = i; j < end; j++) {
        const KirStmt *s = &k->stmts[j];
        if (s->op == KOP_RSUM || s->op == KOP_RMAX) {
            LLVMTypeRef t = type_of(e, s->type);
            e->phi[j] = LLVMBuildPhi(e->b, t, "acc");
            LLVMValueRef init = s->op == KOP_RSUM ? (is_fp(s->type) ? LLVMConstReal(t, 0) : LLVMConstInt(t, 0, 0))
                                : is_fp(s->type)
                                    ? LLVMConstReal(t, -INFINITY)
                                    : LLVMConstInt(t, (unsigned long long)(s->type == KT_I32 ? INT32_MIN : INT64_MIN),
                                                   1);
            LLVMAddIncoming(e->phi[j], &init, &pre, 1);
        }
        if (s->op == KOP_COL) e->v[j] = col;
    }
    for (int j = i; j < end && !e->failed; j++) emit_stmt(e, j);
    LLVMValueRef next = LLVMBuildAdd(e->b, col, LLVMConstInt(e->i64, 1, 0), "col.next");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(e->b);
    LLVMValueRef zero = LLVMConstInt(e->i64, 0, 0);
    LLVMAddIncoming(col, &zero, &pre, 1);
    LLVMAddIncoming(col, &next, &latch, 1);
    for (int j = i; j < end; j++)
        if (k->stmts[j].op == KOP_RSUM || k->stmts[j].op == KOP_RMAX) LLVMAddIncoming(e->phi[j], &e->v[j], &latch, 1);
    LLVMValueRef more = LLVMBuildICmp(e->b, LLVMIntSLT, next,
                                      LLVMConstInt(e->i64, (unsigned long long)k->cols[loop - 1], 0), "");
    LLVMValueRef br = LLVMBuildCondBr(e->b, more, body, done);
    int sums = 0;
    for (int j = i; j < end; j++) sums |= k->stmts[j].op == KOP_RSUM && is_fp(k->stmts[j].type);
    if (sums) { // let the vectoriser reassociate the loop's float sums (f64 accumulators: a rounding of 1e-16)
        LLVMMetadataRef tmp = LLVMTemporaryMDNode(e->cx, NULL, 0);
        LLVMMetadataRef kv[2] = {LLVMMDStringInContext2(e->cx, "llvm.loop.vectorize.enable", 26),
                                 LLVMValueAsMetadata(LLVMConstInt(e->i1, 1, 0))};
        LLVMMetadataRef ops[2] = {tmp, LLVMMDNodeInContext2(e->cx, kv, 2)};
        LLVMMetadataRef md = LLVMMDNodeInContext2(e->cx, ops, 2);
        LLVMMetadataReplaceAllUsesWith(tmp, md);
        LLVMSetMetadata(br, LLVMGetMDKindIDInContext(e->cx, "llvm.loop", 9), LLVMMetadataAsValue(e->cx, md));
    }
    LLVMPositionBuilderAtEnd(e->b, done);
}

static void emit_kernel(Em *e, int part, int index) {
    const KirKernel *k = e->k;
    kir_symbol(e->name, sizeof e->name, part, index);
    e->fn = LLVMAddFunction(e->mod, e->name, e->fnty);
    e->v = calloc((size_t)k->nstmts + 1, sizeof *e->v);
    e->phi = calloc((size_t)k->nstmts + 1, sizeof *e->phi);
    e->argp = calloc((size_t)k->nargs + 1, sizeof *e->argp);
    e->scope = calloc((size_t)k->nargs + 1, sizeof *e->scope);
    e->noalias = calloc((size_t)k->nargs + 1, sizeof *e->noalias);
    if (!e->v || !e->phi || !e->argp || !e->scope || !e->noalias) {
        efail(e, -1, "out of memory");
        goto out;
    }
    arg_scopes(e);
    LLVMValueRef args = LLVMGetParam(e->fn, 0), r0 = LLVMGetParam(e->fn, 1), r1 = LLVMGetParam(e->fn, 2);
    e->scratch = LLVMGetParam(e->fn, 3);
    // the argument and scratch pointers never alias what the kernel loads them from
    unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
    LLVMAddAttributeAtIndex(e->fn, 4, LLVMCreateEnumAttribute(e->cx, noalias, 0));
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(e->cx, e->fn, "entry");
    LLVMBasicBlockRef rowb = LLVMAppendBasicBlockInContext(e->cx, e->fn, "row");
    LLVMBasicBlockRef ret = LLVMAppendBasicBlockInContext(e->cx, e->fn, "ret");
    LLVMPositionBuilderAtEnd(e->b, entry);
    for (int j = 0; j < k->nargs; j++) {
        LLVMValueRef idx = LLVMConstInt(e->i64, (unsigned long long)j, 0);
        LLVMValueRef slot = LLVMBuildGEP2(e->b, e->ptr8, args, &idx, 1, "");
        LLVMValueRef p = LLVMBuildLoad2(e->b, e->ptr8, slot, "");
        e->argp[j] = LLVMBuildBitCast(e->b, p, LLVMPointerType(type_of(e, k->args[j].dtype), 0), "");
    }
    LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, r0, r1, ""), rowb, ret);
    LLVMPositionBuilderAtEnd(e->b, rowb);
    e->row = LLVMBuildPhi(e->b, e->i64, "row");
    for (int i = 0; i < k->nstmts && !e->failed;) {
        int loop = k->stmts[i].loop;
        if (!loop) {
            emit_stmt(e, i++);
            continue;
        }
        int end = i;
        while (end < k->nstmts && k->stmts[end].loop == loop) end++;
        emit_loop(e, i, end, loop);
        i = end;
    }
    if (e->failed) goto out;
    LLVMValueRef next = LLVMBuildAdd(e->b, e->row, LLVMConstInt(e->i64, 1, 0), "row.next");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(e->b);
    LLVMAddIncoming(e->row, &r0, &entry, 1);
    LLVMAddIncoming(e->row, &next, &latch, 1);
    LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, next, r1, ""), rowb, ret);
    LLVMPositionBuilderAtEnd(e->b, ret);
    LLVMBuildRetVoid(e->b);
    if (LLVMVerifyFunction(e->fn, LLVMReturnStatusAction)) efail(e, -1, "the generated function does not verify");
out:
    free(e->v), free(e->phi), free(e->argp), free(e->scope), free(e->noalias);
    e->v = e->phi = e->argp = e->scope = e->noalias = NULL;
}

int emit_llvm(const KirProgram *prog, const Graph *g, uint8_t **out, size_t *len, char *err, size_t errcap) {
    Em e = {.err = err, .errcap = errcap};
    e.cx = LLVMContextCreate();
    e.mod = LLVMModuleCreateWithNameInContext("mt_kernels", e.cx);
    e.b = LLVMCreateBuilderInContext(e.cx);
    e.f32 = LLVMFloatTypeInContext(e.cx);
    e.f64 = LLVMDoubleTypeInContext(e.cx);
    e.i16 = LLVMInt16TypeInContext(e.cx);
    e.i32 = LLVMInt32TypeInContext(e.cx);
    e.i64 = LLVMInt64TypeInContext(e.cx);
    e.i1 = LLVMInt1TypeInContext(e.cx);
    e.ptr8 = LLVMPointerType(LLVMInt8TypeInContext(e.cx), 0);
    LLVMTypeRef params[4] = {LLVMPointerType(e.ptr8, 0), e.i64, e.i64, LLVMPointerType(e.f64, 0)};
    e.fnty = LLVMFunctionType(LLVMVoidTypeInContext(e.cx), params, 4, 0);
    for (int p = 0; p < PART_COUNT && !e.failed; p++) {
        e.part = g ? &g->parts[p] : NULL;
        for (int i = 0; i < prog->parts[p].n && !e.failed; i++) {
            e.k = &prog->parts[p].k[i];
            if (e.k->kind == KK_EXPR) emit_kernel(&e, p, i);
            if (e.k->kind == KK_NODE && emit_llvm_node(e.mod, e.fnty, kir_symbol(e.name, sizeof e.name, p, i),
                                                       e.part->nodes.items[e.k->anchor], err, errcap) != 0)
                e.failed = 1;
        }
    }
    int rc = -1;
    char *msg = NULL;
    if (!e.failed && LLVMVerifyModule(e.mod, LLVMReturnStatusAction, &msg)) {
        snprintf(err, errcap, "llvm: the kernel module does not verify: %s", msg ? msg : "?");
    } else if (!e.failed) {
        LLVMMemoryBufferRef buf = LLVMWriteBitcodeToMemoryBuffer(e.mod);
        size_t n = LLVMGetBufferSize(buf);
        *out = malloc(n ? n : 1);
        if (*out) {
            memcpy(*out, LLVMGetBufferStart(buf), n);
            *len = n;
            rc = 0;
        } else {
            snprintf(err, errcap, "llvm: out of memory");
        }
        LLVMDisposeMemoryBuffer(buf);
    }
    if (msg) LLVMDisposeMessage(msg);
    LLVMDisposeBuilder(e.b);
    LLVMDisposeModule(e.mod);
    LLVMContextDispose(e.cx);
    return rc;
}
