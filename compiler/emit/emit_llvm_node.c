// emit_llvm_node.c: the node kernels (KK_NODE: the mixture-of-experts ops
// and add_loss) as generated LLVM IR, one function each with the
// expression kernels' ABI (common/node_kernel.h):
//
//   void mt_k<p>_<i>(void **args, int64_t r0, int64_t r1, double *work);
//
// args[0] the node's output, args[1 ..] its operands, all f32 (the JIT
// widens bf16 ones around the call); args[nargs] the library GEMM the JIT's
// GEMM kernels call (NodeSgemm), args[nargs + 1] the stream's
// LoadBalancePool; work node_kernel_work_bytes(node) bytes
// of workspace; r0 and r1 unused (the whole node). Every size is the node's,
// a constant. The loops are those of the plain kernels (runtime/backend/kernels.inc)
// in the same order, with the same f32 and f64 arithmetic: on libm's exp the
// results are theirs bit for bit. moe gathers each expert's rows (those
// whose gate is not 0), runs the expert's three GEMMs over them only and
// scatters the outputs back weighted by the gate; an expert no row selects
// costs one pass over the gates.
//
// Loop counters and accumulators live in allocas of the entry block, which
// the O3 pipeline promotes to registers.
#include "compiler/emit/emit_llvm_node.h"

#include <llvm-c/Analysis.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/node_kernel.h"

typedef struct Nb {
    LLVMContextRef cx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMValueRef fn;
    LLVMBasicBlockRef entry;
    LLVMTypeRef f32, f64, i32, i64, f32p, f64p, i64p, gemm_ty;
    LLVMValueRef gemm; // the library GEMM (NodeSgemm)
} Nb;

typedef struct Loop {
    LLVMValueRef var;
    LLVMBasicBlockRef cond, exit;
} Loop;

static LLVMValueRef ci(Nb *b, int64_t v) { return LLVMConstInt(b->i64, (unsigned long long)v, 1); }
static LLVMValueRef cf(Nb *b, double v) { return LLVMConstReal(b->f32, v); }
static LLVMValueRef cd(Nb *b, double v) { return LLVMConstReal(b->f64, v); }

// A local of type t, in the entry block (promoted to a register by mem2reg).
static LLVMValueRef local(Nb *b, LLVMTypeRef t, LLVMValueRef init) {
    LLVMBasicBlockRef at = LLVMGetInsertBlock(b->b);
    LLVMValueRef first = LLVMGetFirstInstruction(b->entry);
    if (first) LLVMPositionBuilderBefore(b->b, first);
    else LLVMPositionBuilderAtEnd(b->b, b->entry);
    LLVMValueRef v = LLVMBuildAlloca(b->b, t, "");
    LLVMPositionBuilderAtEnd(b->b, at);
    if (init) LLVMBuildStore(b->b, init, v);
    return v;
}
static LLVMValueRef get(Nb *b, LLVMTypeRef t, LLVMValueRef var) { return LLVMBuildLoad2(b->b, t, var, ""); }
static void set(Nb *b, LLVMValueRef var, LLVMValueRef v) { LLVMBuildStore(b->b, v, var); }

static LLVMValueRef at(Nb *b, LLVMTypeRef t, LLVMValueRef p, LLVMValueRef i) {
    return LLVMBuildGEP2(b->b, t, p, &i, 1, "");
}
static LLVMValueRef ld(Nb *b, LLVMTypeRef t, LLVMValueRef p, LLVMValueRef i) {
    return LLVMBuildLoad2(b->b, t, at(b, t, p, i), "");
}
static void st(Nb *b, LLVMTypeRef t, LLVMValueRef p, LLVMValueRef i, LLVMValueRef v) {
    LLVMBuildStore(b->b, v, at(b, t, p, i));
}
static LLVMValueRef add(Nb *b, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildAdd(b->b, x, y, ""); }
static LLVMValueRef mul(Nb *b, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildMul(b->b, x, y, ""); }
static LLVMValueRef f_add(Nb *b, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildFAdd(b->b, x, y, ""); }
static LLVMValueRef f_sub(Nb *b, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildFSub(b->b, x, y, ""); }
static LLVMValueRef f_mul(Nb *b, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildFMul(b->b, x, y, ""); }
static LLVMValueRef f_div(Nb *b, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildFDiv(b->b, x, y, ""); }
static LLVMValueRef wide(Nb *b, LLVMValueRef x) { return LLVMBuildFPExt(b->b, x, b->f64, ""); }
static LLVMValueRef narrow(Nb *b, LLVMValueRef x) { return LLVMBuildFPTrunc(b->b, x, b->f32, ""); }

// for (i = lo; i < hi; i++) { body }: returns i; the body ends with loop_end.
static LLVMValueRef loop_begin(Nb *b, Loop *l, LLVMValueRef lo, LLVMValueRef hi) {
    l->var = local(b, b->i64, lo);
    l->cond = LLVMAppendBasicBlockInContext(b->cx, b->fn, "cond");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(b->cx, b->fn, "body");
    l->exit = LLVMAppendBasicBlockInContext(b->cx, b->fn, "exit");
    LLVMBuildBr(b->b, l->cond);
    LLVMPositionBuilderAtEnd(b->b, l->cond);
    LLVMBuildCondBr(b->b, LLVMBuildICmp(b->b, LLVMIntSLT, get(b, b->i64, l->var), hi, ""), body, l->exit);
    LLVMPositionBuilderAtEnd(b->b, body);
    return get(b, b->i64, l->var);
}
static void loop_end(Nb *b, Loop *l) {
    set(b, l->var, add(b, get(b, b->i64, l->var), ci(b, 1)));
    LLVMBuildBr(b->b, l->cond);
    LLVMPositionBuilderAtEnd(b->b, l->exit);
}

// if (cond) { ... }: the block after it, to position at when the body is done.
static LLVMBasicBlockRef if_begin(Nb *b, LLVMValueRef cond) {
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(b->cx, b->fn, "then");
    LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(b->cx, b->fn, "after");
    LLVMBuildCondBr(b->b, cond, then, after);
    LLVMPositionBuilderAtEnd(b->b, then);
    return after;
}
static void if_end(Nb *b, LLVMBasicBlockRef after) {
    LLVMBuildBr(b->b, after);
    LLVMPositionBuilderAtEnd(b->b, after);
}

// dst[i] = v for i < n.
static void fill(Nb *b, LLVMValueRef dst, int64_t n, LLVMValueRef v) {
    Loop l;
    LLVMValueRef i = loop_begin(b, &l, ci(b, 0), ci(b, n));
    st(b, b->f32, dst, i, v);
    loop_end(b, &l);
}

// exp of f64 or f32 x (kernels.inc's exp, <tgmath.h>'s: expf of a float).
static LLVMValueRef expo(Nb *b, LLVMValueRef x) {
    LLVMTypeRef t = LLVMTypeOf(x);
    unsigned id = LLVMLookupIntrinsicID("llvm.exp", 8);
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(b->mod, id, &t, 1);
    return LLVMBuildCall2(b->b, LLVMIntrinsicGetType(b->cx, id, &t, 1), fn, &x, 1, "");
}
// 1 + exp(-h) of f32 h, in f32.
static LLVMValueRef one_plus_exp_neg(Nb *b, LLVMValueRef h) {
    return f_add(b, cf(b, 1), expo(b, LLVMBuildFNeg(b->b, h, "")));
}
// kernels.inc's sigmoid of f32 h: 1 / (1 + exp(-h)), all in f32.
static LLVMValueRef sigmoid(Nb *b, LLVMValueRef h) { return f_div(b, cf(b, 1), one_plus_exp_neg(b, h)); }
// silu_of(h) = h / (1 + exp(-h)), all in f32.
static LLVMValueRef silu(Nb *b, LLVMValueRef h) { return f_div(b, h, one_plus_exp_neg(b, h)); }

// C (M, N) = op(A) op(B) + beta C through the library GEMM; M may be a value.
static void gemm(Nb *b, int ta, int tb, LLVMValueRef M, LLVMValueRef N, LLVMValueRef K, LLVMValueRef A, int64_t lda,
                 LLVMValueRef B, int64_t ldb, double beta, LLVMValueRef C, int64_t ldc) {
    LLVMValueRef a[12] = {LLVMConstInt(b->i32, (unsigned long long)ta, 0),
                          LLVMConstInt(b->i32, (unsigned long long)tb, 0),
                          M,
                          N,
                          K,
                          A,
                          ci(b, lda),
                          B,
                          ci(b, ldb),
                          cf(b, beta),
                          C,
                          ci(b, ldc)};
    LLVMBuildCall2(b->b, b->gemm_ty, b->gemm, a, 12, "");
}

// The geometry of a moe node: x [rows, C], gates [rows, E], the weights as its moe_form stores them.
typedef struct Moe {
    int64_t rows, C, E, F;
    int layout;                        // the node's moe_form (common/graph.h)
    LLVMValueRef x, gates, wg, wu, wd; // operands
    LLVMValueRef bias;                 // the gate_up bias [E, 2F] (MOE_GATE_UP_BIAS), or NULL
    LLVMValueRef row, xe, h, a,
        o;               // workspace: row i64 [rows]; xe, o [rows, C]; h [rows, 2F] (kernels.inc's); a [rows, F]
    LLVMValueRef n;      // i64 local: expert e's rows
    double alpha, limit; // the clamped SwiGLU (the node's scale, softcap), alpha 0: act(h1) h3
    MoeAct act;          // the gate's activation (common/graph.h; silu: SwiGLU)
} Moe;

static LLVMValueRef f_lt(Nb *b, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildFCmp(b->b, LLVMRealOLT, x, y, ""); }
static LLVMValueRef pick(Nb *b, LLVMValueRef c, LLVMValueRef x, LLVMValueRef y) {
    return LLVMBuildSelect(b->b, c, x, y, "");
}
// kernels.inc's clamped SwiGLU pieces of f32 h1, h3: g = min(h1, L), u = clamp(h3, -L, L), s = sigmoid(alpha g).
static void clamped_parts(Nb *b, const Moe *m, LLVMValueRef h1, LLVMValueRef h3, LLVMValueRef *g, LLVMValueRef *u,
                          LLVMValueRef *s) {
    LLVMValueRef L = cf(b, m->limit), nL = cf(b, -m->limit);
    *g = pick(b, f_lt(b, h1, L), h1, L);
    *u = pick(b, f_lt(b, h3, nL), nL, pick(b, f_lt(b, L, h3), L, h3));
    *s = sigmoid(b, f_mul(b, cf(b, m->alpha), *g));
}
// erff of f32 x: the process's libm, as kernels.inc's erf of a float.
static LLVMValueRef erf_of(Nb *b, LLVMValueRef x) {
    LLVMTypeRef t = LLVMFunctionType(b->f32, &b->f32, 1, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(b->mod, "erff");
    if (!fn) fn = LLVMAddFunction(b->mod, "erff", t);
    return LLVMBuildCall2(b->b, t, fn, &x, 1, "");
}
// kernels.inc's gate_act: gelu or gelu_tanh of f32 h, its derivative *d, the same operations in the same order.
static LLVMValueRef gate_act(Nb *b, MoeAct act, LLVMValueRef h, LLVMValueRef *d) {
    LLVMValueRef half = cf(b, 0.5), one = cf(b, 1);
    if (act == MOE_ACT_GELU) {
        LLVMValueRef phi2 = f_add(b, one, erf_of(b, f_mul(b, h, cf(b, 0.7071067811865476))));
        LLVMValueRef e = expo(b, f_mul(b, f_mul(b, cf(b, -0.5), h), h));
        *d = f_add(b, f_mul(b, half, phi2), f_mul(b, f_mul(b, h, cf(b, 0.3989422804014327)), e));
        return f_mul(b, f_mul(b, half, h), phi2);
    }
    LLVMValueRef s = cf(b, 0.7978845608028654), c = cf(b, 0.044715);
    LLVMValueRef cube = f_mul(b, f_mul(b, f_mul(b, c, h), h), h);
    LLVMValueRef e2u = expo(b, f_mul(b, cf(b, 2), f_mul(b, s, f_add(b, h, cube)))); // tanh_by_exp's e^2u
    LLVMValueRef t = f_sub(b, one, f_div(b, cf(b, 2), f_add(b, one, e2u)));
    LLVMValueRef lhs = f_mul(b, f_mul(b, f_mul(b, half, h), f_sub(b, one, f_mul(b, t, t))), s);
    LLVMValueRef rhs = f_add(b, one, f_mul(b, f_mul(b, f_mul(b, cf(b, 3), c), h), h));
    *d = f_add(b, f_mul(b, half, f_add(b, one, t)), f_mul(b, lhs, rhs));
    return f_mul(b, f_mul(b, half, h), f_add(b, one, t));
}
// kernels.inc's expert_act: act(h1) h3, or (u + 1) g / (1 + exp(-alpha g)).
static LLVMValueRef expert_act(Nb *b, const Moe *m, LLVMValueRef h1, LLVMValueRef h3) {
    LLVMValueRef d;
    if (!(m->alpha > 0)) return f_mul(b, m->act == MOE_ACT_SILU ? silu(b, h1) : gate_act(b, m->act, h1, &d), h3);
    LLVMValueRef g, u, s;
    clamped_parts(b, m, h1, h3, &g, &u, &s);
    return f_div(b, f_mul(b, f_add(b, u, cf(b, 1)), g), one_plus_exp_neg(b, f_mul(b, cf(b, m->alpha), g)));
}
// kernels.inc's expert_act_bwd: dh at gj, uj (h's gate and up places) from da at j.
static void expert_act_bwd(Nb *b, const Moe *m, LLVMValueRef j, LLVMValueRef gj, LLVMValueRef uj, LLVMValueRef da,
                           LLVMValueRef dh) {
    LLVMValueRef h = ld(b, b->f32, m->h, gj), h3 = ld(b, b->f32, m->h, uj), dav = ld(b, b->f32, da, j);
    LLVMValueRef dh1 = at(b, b->f32, dh, gj), dh3 = at(b, b->f32, dh, uj), z = ci(b, 0);
    if (!(m->alpha > 0) && m->act != MOE_ACT_SILU) {
        LLVMValueRef d, act = gate_act(b, m->act, h, &d);
        st(b, b->f32, dh3, z, f_mul(b, dav, act));
        st(b, b->f32, dh1, z, f_mul(b, f_mul(b, dav, h3), d));
        return;
    }
    if (!(m->alpha > 0)) {
        LLVMValueRef sg = sigmoid(b, h);
        st(b, b->f32, dh3, z, f_mul(b, dav, silu(b, h)));
        LLVMValueRef lhs = f_mul(b, f_mul(b, dav, h3), sg);
        st(b, b->f32, dh1, z, f_mul(b, lhs, f_add(b, cf(b, 1), f_mul(b, h, f_sub(b, cf(b, 1), sg)))));
        return;
    }
    LLVMValueRef g, u, s, L = cf(b, m->limit), zero = cf(b, 0);
    clamped_parts(b, m, h, h3, &g, &u, &s);
    LLVMValueRef out_of = LLVMBuildOr(b->b, f_lt(b, h3, cf(b, -m->limit)), f_lt(b, L, h3), "");
    st(b, b->f32, dh3, z, pick(b, out_of, zero, f_mul(b, f_mul(b, dav, g), s)));
    LLVMValueRef lhs = f_mul(b, f_mul(b, dav, f_add(b, u, cf(b, 1))), s);
    LLVMValueRef rhs = f_add(b, cf(b, 1), f_mul(b, f_mul(b, cf(b, m->alpha), g), f_sub(b, cf(b, 1), s)));
    st(b, b->f32, dh1, z, pick(b, f_lt(b, L, h), zero, f_mul(b, lhs, rhs)));
}

// kernels.inc's times_wt: y [n, N] (ldy) = a [n, K] W^T + beta y, W expert e's of weight w in layout mm.
static void times_wt(Nb *b, LLVMValueRef n, int64_t N, int64_t K, LLVMValueRef a, int64_t lda, LLVMValueRef w,
                     MoeMat mm, LLVMValueRef e, double beta, LLVMValueRef y, int64_t ldy) {
    gemm(b, 0, !mm.t, n, ci(b, N), ci(b, K), a, lda, at(b, b->f32, w, mul(b, e, ci(b, mm.expert))), mm.ld, beta, y,
         ldy);
}
// kernels.inc's times_w: y [n, K] = d [n, N] W + beta y.
static void times_w(Nb *b, LLVMValueRef n, int64_t N, int64_t K, LLVMValueRef d, int64_t ldd, LLVMValueRef w, MoeMat mm,
                    LLVMValueRef e, double beta, LLVMValueRef y, int64_t ldy) {
    gemm(b, 0, mm.t, n, ci(b, K), ci(b, N), d, ldd, at(b, b->f32, w, mul(b, e, ci(b, mm.expert))), mm.ld, beta, y, ldy);
}
// kernels.inc's grad_w: expert e's dW (N x K in layout mm of dw) = d [n, N]^T a [n, K].
static void grad_w(Nb *b, LLVMValueRef n, int64_t N, int64_t K, LLVMValueRef d, int64_t ldd, LLVMValueRef a,
                   int64_t lda, LLVMValueRef dw, MoeMat mm, LLVMValueRef e) {
    LLVMValueRef to = at(b, b->f32, dw, mul(b, e, ci(b, mm.expert)));
    if (mm.t) gemm(b, 1, 0, ci(b, K), ci(b, N), n, a, lda, d, ldd, 0, to, mm.ld);
    else gemm(b, 1, 0, ci(b, N), ci(b, K), n, d, ldd, a, lda, 0, to, mm.ld);
}
static int moe_fused_layout(int layout) { return layout & (MOE_GATE_UP_HALVES | MOE_GATE_UP_INTERLEAVED); }
// Row i, column f's place j in a [n, F] and its gate's and up's places *gj, *uj in h [n, 2F].
static LLVMValueRef act_places(Nb *b, const Moe *m, LLVMValueRef i, LLVMValueRef f, LLVMValueRef *gj,
                               LLVMValueRef *uj) {
    LLVMValueRef row = mul(b, i, ci(b, 2 * m->F));
    if (m->layout & MOE_GATE_UP_INTERLEAVED) {
        *gj = add(b, row, mul(b, f, ci(b, 2)));
        *uj = add(b, *gj, ci(b, 1));
    } else {
        *gj = add(b, row, f);
        *uj = add(b, *gj, ci(b, m->F));
    }
    return add(b, mul(b, i, ci(b, m->F)), f);
}

// Expert e's rows gathered (row[0 .. n), xe) and its three GEMMs over them:
// kernels.inc's expert_forward. Leaves the builder inside `if (n > 0)`, whose
// continuation it returns.
static LLVMBasicBlockRef expert_forward(Nb *b, Moe *m, LLVMValueRef e) {
    Loop l, l2;
    set(b, m->n, ci(b, 0));
    LLVMValueRef r = loop_begin(b, &l, ci(b, 0), ci(b, m->rows));
    LLVMValueRef g = ld(b, b->f32, m->gates, add(b, mul(b, r, ci(b, m->E)), e));
    LLVMBasicBlockRef after = if_begin(b, LLVMBuildFCmp(b->b, LLVMRealUNE, g, cf(b, 0), ""));
    LLVMValueRef k = get(b, b->i64, m->n);
    st(b, b->i64, m->row, k, r);
    set(b, m->n, add(b, k, ci(b, 1)));
    if_end(b, after);
    loop_end(b, &l);
    LLVMValueRef n = get(b, b->i64, m->n);
    LLVMBasicBlockRef done = if_begin(b, LLVMBuildICmp(b->b, LLVMIntSGT, n, ci(b, 0), ""));
    LLVMValueRef i = loop_begin(b, &l, ci(b, 0), n);
    LLVMValueRef ri = ld(b, b->i64, m->row, i), src = mul(b, ri, ci(b, m->C)), dst = mul(b, i, ci(b, m->C));
    LLVMValueRef gi = ld(b, b->f32, m->gates, add(b, mul(b, ri, ci(b, m->E)), e));
    LLVMValueRef c = loop_begin(b, &l2, ci(b, 0), ci(b, m->C)), xv = ld(b, b->f32, m->x, add(b, src, c));
    st(b, b->f32, m->xe, add(b, dst, c), m->layout & MOE_GATES_ON_INPUT ? f_mul(b, xv, gi) : xv); // gate x: its input
    loop_end(b, &l2);
    loop_end(b, &l);
    int64_t C = m->C, F = m->F;
    if (moe_fused_layout(m->layout))
        times_wt(b, n, 2 * F, C, m->xe, C, m->wg, moe_mat(m->layout, 3, C, F), e, 0, m->h, 2 * F);
    else {
        times_wt(b, n, F, C, m->xe, C, m->wg, moe_mat(m->layout, 0, C, F), e, 0, m->h, 2 * F);
        times_wt(b, n, F, C, m->xe, C, m->wu, moe_mat(m->layout, 1, C, F), e, 0, at(b, b->f32, m->h, ci(b, F)), 2 * F);
    }
    if (m->bias) { // kernels.inc's: h [n, 2F] += bias[e]
        LLVMValueRef i2 = loop_begin(b, &l, ci(b, 0), n), j2 = loop_begin(b, &l2, ci(b, 0), ci(b, 2 * F));
        LLVMValueRef hi = add(b, mul(b, i2, ci(b, 2 * F)), j2);
        LLVMValueRef bv = ld(b, b->f32, m->bias, add(b, mul(b, e, ci(b, 2 * F)), j2));
        st(b, b->f32, m->h, hi, f_add(b, ld(b, b->f32, m->h, hi), bv));
        loop_end(b, &l2);
        loop_end(b, &l);
    }
    LLVMValueRef row = loop_begin(b, &l, ci(b, 0), n), f = loop_begin(b, &l2, ci(b, 0), ci(b, F));
    LLVMValueRef gj, uj, j = act_places(b, m, row, f, &gj, &uj);
    st(b, b->f32, m->a, j, expert_act(b, m, ld(b, b->f32, m->h, gj), ld(b, b->f32, m->h, uj)));
    loop_end(b, &l2);
    loop_end(b, &l);
    times_wt(b, n, C, F, m->a, F, m->wd, moe_mat(m->layout, 2, C, F), e, 0, m->o, C);
    return done;
}

static LLVMValueRef arg(Nb *b, LLVMValueRef args, int j, LLVMTypeRef t) {
    LLVMValueRef p = LLVMBuildLoad2(b->b, LLVMPointerType(LLVMInt8TypeInContext(b->cx), 0),
                                    at(b, LLVMPointerType(LLVMInt8TypeInContext(b->cx), 0), args, ci(b, j)), "");
    return LLVMBuildBitCast(b->b, p, t, "");
}

// The workspace's floats from element `at` on (a float pointer), and the next offset.
static LLVMValueRef carve(Nb *b, LLVMValueRef work, int64_t *at_floats, int64_t n) {
    LLVMValueRef p = at(b, b->f32, work, ci(b, *at_floats));
    *at_floats += n;
    return p;
}

static void moe_setup(Nb *b, Moe *m, const Node *n, LLVMValueRef args, LLVMValueRef work, int bwd) {
    const Shape *sx = &n->in[bwd]->shape, *sw = &n->in[bwd + 2]->shape;
    m->C = sx->dims[sx->rank - 1], m->rows = shape_numel(sx) / m->C, m->E = sw->dims[0], m->F = moe_expert_width(n);
    m->layout = n->moe_form;
    m->bias = n->nin > 5 + bwd ? arg(b, args, 6 + bwd, b->f32p) : NULL;
    m->x = arg(b, args, 1 + bwd, b->f32p), m->gates = arg(b, args, 2 + bwd, b->f32p);
    m->wg = arg(b, args, 3 + bwd, b->f32p), m->wu = arg(b, args, 4 + bwd, b->f32p),
    m->wd = arg(b, args, 5 + bwd, b->f32p);
    m->row = LLVMBuildBitCast(b->b, work, b->i64p, "");
    LLVMValueRef fw = LLVMBuildBitCast(b->b, work, b->f32p, "");
    int64_t o = 2 * m->rows; // past the row indices
    m->xe = carve(b, fw, &o, m->rows * m->C), m->h = carve(b, fw, &o, 2 * m->rows * m->F);
    m->a = carve(b, fw, &o, m->rows * m->F);
    m->o = carve(b, fw, &o, m->rows * m->C);
    m->n = local(b, b->i64, NULL);
    m->alpha = n->scale, m->limit = n->softcap, m->act = moe_act(n);
}

// kernels.inc's moe: each expert's output over its rows, added into y weighted by the gate.
static void emit_moe(Nb *b, const Node *n, LLVMValueRef args, LLVMValueRef work) {
    Moe m;
    moe_setup(b, &m, n, args, work, 0);
    LLVMValueRef y = arg(b, args, 0, b->f32p);
    fill(b, y, m.rows * m.C, cf(b, 0));
    Loop le, li, lc;
    LLVMValueRef e = loop_begin(b, &le, ci(b, 0), ci(b, m.E));
    LLVMBasicBlockRef done = expert_forward(b, &m, e);
    LLVMValueRef i = loop_begin(b, &li, ci(b, 0), get(b, b->i64, m.n));
    LLVMValueRef r = ld(b, b->i64, m.row, i);
    LLVMValueRef g = m.layout & MOE_GATES_ON_INPUT ? cf(b, 1)
                                                   : ld(b, b->f32, m.gates, add(b, mul(b, r, ci(b, m.E)), e));
    LLVMValueRef c = loop_begin(b, &lc, ci(b, 0), ci(b, m.C));
    LLVMValueRef yi = add(b, mul(b, r, ci(b, m.C)), c);
    st(b, b->f32, y, yi,
       f_add(b, ld(b, b->f32, y, yi), f_mul(b, g, ld(b, b->f32, m.o, add(b, mul(b, i, ci(b, m.C)), c)))));
    loop_end(b, &lc);
    loop_end(b, &li);
    if_end(b, done);
    loop_end(b, &le);
}

// kernels.inc's: expert e's dbias [2F] = dh [n, 2F] summed over its rows, in double.
static void bias_grad(Nb *b, const Moe *m, LLVMValueRef e, LLVMValueRef nr, LLVMValueRef dh, LLVMValueRef dbias) {
    Loop lj, li;
    LLVMValueRef sum = local(b, b->f64, NULL), j = loop_begin(b, &lj, ci(b, 0), ci(b, 2 * m->F));
    set(b, sum, cd(b, 0));
    LLVMValueRef i = loop_begin(b, &li, ci(b, 0), nr);
    LLVMValueRef v = wide(b, ld(b, b->f32, dh, add(b, mul(b, i, ci(b, 2 * m->F)), j)));
    set(b, sum, f_add(b, get(b, b->f64, sum), v));
    loop_end(b, &li);
    st(b, b->f32, dbias, add(b, mul(b, e, ci(b, 2 * m->F)), j), narrow(b, get(b, b->f64, sum)));
    loop_end(b, &lj);
}

// kernels.inc's expert_dh and expert_bwd_up: dh [n, 2F] through the
// activation, then the gate_up weights' gradients and the rows' dx (dxe).
static void expert_bwd_up(Nb *b, const Moe *m, LLVMValueRef e, LLVMValueRef nr, LLVMValueRef da, LLVMValueRef dh,
                          LLVMValueRef dwg, LLVMValueRef dwu, LLVMValueRef dxe, LLVMValueRef dbias) {
    Loop li, lf;
    int64_t C = m->C, F = m->F, L = m->layout;
    LLVMValueRef i = loop_begin(b, &li, ci(b, 0), nr), f = loop_begin(b, &lf, ci(b, 0), ci(b, F));
    LLVMValueRef gj, uj, j = act_places(b, m, i, f, &gj, &uj);
    expert_act_bwd(b, m, j, gj, uj, da, dh);
    loop_end(b, &lf);
    loop_end(b, &li);
    if (dbias) bias_grad(b, m, e, nr, dh, dbias);
    if (moe_fused_layout(m->layout)) {
        grad_w(b, nr, 2 * F, C, dh, 2 * F, m->xe, C, dwg, moe_mat(L, 3, C, F), e);
        times_w(b, nr, 2 * F, C, dh, 2 * F, m->wg, moe_mat(L, 3, C, F), e, 0, dxe, C);
        return;
    }
    LLVMValueRef dh3 = at(b, b->f32, dh, ci(b, F));
    grad_w(b, nr, F, C, dh, 2 * F, m->xe, C, dwg, moe_mat(L, 0, C, F), e);
    grad_w(b, nr, F, C, dh3, 2 * F, m->xe, C, dwu, moe_mat(L, 1, C, F), e);
    times_w(b, nr, F, C, dh, 2 * F, m->wg, moe_mat(L, 0, C, F), e, 0, dxe, C);
    times_w(b, nr, F, C, dh3, 2 * F, m->wu, moe_mat(L, 1, C, F), e, 1, dxe, C);
}

// kernels.inc's moe_bwd: packed [dx | dgates | dw_gate | dw_up | dw_down], expert by expert.
static void emit_moe_bwd(Nb *b, const Node *n, LLVMValueRef args, LLVMValueRef work) {
    Moe m;
    moe_setup(b, &m, n, args, work, 1);
    int64_t R = m.rows, C = m.C, E = m.E, F = m.F, o = 2 * R + R * (2 * C + 3 * F);
    LLVMValueRef fw = LLVMBuildBitCast(b->b, work, b->f32p, "");
    LLVMValueRef dO = carve(b, fw, &o, R * C), dxe = carve(b, fw, &o, R * C);    // [n, C]
    LLVMValueRef da = carve(b, fw, &o, R * F), dh = carve(b, fw, &o, 2 * R * F); // [n, F], [n, 2F]
    LLVMValueRef out = arg(b, args, 0, b->f32p), dy = arg(b, args, 1, b->f32p);
    int64_t og = R * C, owg = og + R * E, owu = owg + E * F * C, owd = owu + E * F * C; // dx at 0
    int on_input = m.layout & MOE_GATES_ON_INPUT;
    fill(b, out, shape_numel(&n->shape), cf(b, 0));
    LLVMValueRef dot = local(b, b->f64, NULL);
    Loop le, li, lc;
    LLVMValueRef e = loop_begin(b, &le, ci(b, 0), ci(b, E));
    LLVMBasicBlockRef done = expert_forward(b, &m, e);
    LLVMValueRef nr = get(b, b->i64, m.n);
    LLVMValueRef i = loop_begin(b, &li, ci(b, 0), nr);
    LLVMValueRef r = ld(b, b->i64, m.row, i), ge = add(b, mul(b, r, ci(b, E)), e);
    LLVMValueRef g = on_input ? cf(b, 1) : ld(b, b->f32, m.gates, ge);
    set(b, dot, cd(b, 0));
    LLVMValueRef c = loop_begin(b, &lc, ci(b, 0), ci(b, C));
    LLVMValueRef dyv = ld(b, b->f32, dy, add(b, mul(b, r, ci(b, C)), c)), ic = add(b, mul(b, i, ci(b, C)), c);
    set(b, dot, f_add(b, get(b, b->f64, dot), f_mul(b, wide(b, dyv), wide(b, ld(b, b->f32, m.o, ic)))));
    st(b, b->f32, dO, ic, f_mul(b, g, dyv));
    loop_end(b, &lc);
    if (!on_input) st(b, b->f32, out, add(b, ci(b, og), ge), narrow(b, get(b, b->f64, dot)));
    loop_end(b, &li);
    MoeMat md = moe_mat(m.layout, 2, C, F);
    times_w(b, nr, C, F, dO, C, m.wd, md, e, 0, da, F);
    grad_w(b, nr, C, F, dO, C, m.a, F, at(b, b->f32, out, ci(b, owd)), md, e);
    LLVMValueRef dbias = m.bias ? at(b, b->f32, out, ci(b, owd + E * C * F)) : NULL; // [E, 2F]
    expert_bwd_up(b, &m, e, nr, da, dh, at(b, b->f32, out, ci(b, owg)), at(b, b->f32, out, ci(b, owu)), dxe, dbias);
    i = loop_begin(b, &li, ci(b, 0), nr); // gates on the input: dgates = dxe . x, dx = gate dxe
    r = ld(b, b->i64, m.row, i), ge = add(b, mul(b, r, ci(b, E)), e);
    LLVMValueRef xr = mul(b, r, ci(b, C));
    g = on_input ? ld(b, b->f32, m.gates, ge) : cf(b, 1);
    set(b, dot, cd(b, 0));
    c = loop_begin(b, &lc, ci(b, 0), ci(b, C));
    LLVMValueRef xi = add(b, xr, c), dxv = ld(b, b->f32, dxe, add(b, mul(b, i, ci(b, C)), c));
    if (on_input) set(b, dot, f_add(b, get(b, b->f64, dot), f_mul(b, wide(b, ld(b, b->f32, m.x, xi)), wide(b, dxv))));
    st(b, b->f32, out, xi, f_add(b, ld(b, b->f32, out, xi), on_input ? f_mul(b, g, dxv) : dxv));
    loop_end(b, &lc);
    if (on_input) st(b, b->f32, out, add(b, ci(b, og), ge), narrow(b, get(b, b->f64, dot)));
    loop_end(b, &li);
    if_end(b, done);
    loop_end(b, &le);
}

// kernels.inc's top_k: 1 at each row's top_k largest (of equals the lower index first), 0 elsewhere.
static void emit_top_k(Nb *b, const Node *n, LLVMValueRef args) {
    int64_t E = n->shape.dims[n->shape.rank - 1], rows = shape_numel(&n->shape) / E;
    LLVMValueRef y = arg(b, args, 0, b->f32p), x = arg(b, args, 1, b->f32p), best = local(b, b->i64, NULL);
    Loop lr, lk, lj;
    LLVMValueRef r = loop_begin(b, &lr, ci(b, 0), ci(b, rows)), base = mul(b, r, ci(b, E));
    LLVMValueRef yr = at(b, b->f32, y, base), xr = at(b, b->f32, x, base);
    fill(b, yr, E, cf(b, 0));
    loop_begin(b, &lk, ci(b, 0), ci(b, n->top_k));
    set(b, best, ci(b, -1));
    LLVMValueRef j = loop_begin(b, &lj, ci(b, 0), ci(b, E));
    LLVMValueRef bv = get(b, b->i64, best), none = LLVMBuildICmp(b->b, LLVMIntSLT, bv, ci(b, 0), "");
    LLVMValueRef safe = LLVMBuildSelect(b->b, none, ci(b, 0), bv, "");
    LLVMValueRef larger = LLVMBuildFCmp(b->b, LLVMRealOGT, ld(b, b->f32, xr, j), ld(b, b->f32, xr, safe), "");
    LLVMValueRef free_ = LLVMBuildFCmp(b->b, LLVMRealOEQ, ld(b, b->f32, yr, j), cf(b, 0), "");
    LLVMValueRef take = LLVMBuildAnd(b->b, free_, LLVMBuildOr(b->b, none, larger, ""), "");
    set(b, best, LLVMBuildSelect(b->b, take, j, bv, ""));
    loop_end(b, &lj);
    st(b, b->f32, yr, get(b, b->i64, best), cf(b, 1));
    loop_end(b, &lk);
    loop_end(b, &lr);
}

// kernels.inc's load_balance, pooled: f and P (the sums of this layer's
// rows) become the pooled loss's (see there); *R the pooled rows.
static void emit_load_balance_pool(Nb *b, const Node *n, LLVMValueRef args, LLVMValueRef f, int64_t E, int bwd,
                                   LLVMValueRef *R) {
    LLVMValueRef pool = arg(b, args, n->nin + 2, b->i64p), P = at(b, b->f64, f, ci(b, E));
    LLVMValueRef sums = LLVMBuildLoad2(b->b, b->f64p, LLVMBuildBitCast(b->b, pool, LLVMPointerType(b->f64p, 0), ""),
                                       "");
    LLVMValueRef layer = ld(b, b->i64, pool, ci(b, 1)), layers = ld(b, b->i64, pool, ci(b, 2));
    *R = ld(b, b->f64, LLVMBuildBitCast(b->b, pool, b->f64p, ""), ci(b, 3));
    LLVMValueRef own = at(b, b->f64, sums, mul(b, layer, ci(b, 2 * E))); // (2 E) this layer's c, then s
    LLVMValueRef C = local(b, b->f64, NULL), S = local(b, b->f64, NULL);
    Loop le, ll;
    if (!bwd) {
        LLVMValueRef i = loop_begin(b, &le, ci(b, 0), ci(b, 2 * E));
        st(b, b->f64, own, i, ld(b, b->f64, f, i));
        loop_end(b, &le);
    }
    LLVMValueRef e = loop_begin(b, &le, ci(b, 0), ci(b, E));
    set(b, C, cd(b, 0)), set(b, S, cd(b, 0));
    LLVMValueRef l = loop_begin(b, &ll, ci(b, 0), bwd ? layers : layer),
                 row = at(b, b->f64, sums, mul(b, l, ci(b, 2 * E)));
    set(b, C, f_add(b, get(b, b->f64, C), ld(b, b->f64, row, e)));
    set(b, S, f_add(b, get(b, b->f64, S), ld(b, b->f64, row, add(b, e, ci(b, E)))));
    loop_end(b, &ll);
    if (bwd) {
        st(b, b->f64, f, e, f_div(b, get(b, b->f64, C), *R));
    } else {
        LLVMValueRef c = ld(b, b->f64, own, e), sv = ld(b, b->f64, own, add(b, e, ci(b, E)));
        LLVMValueRef v = f_add(b, f_mul(b, c, f_add(b, get(b, b->f64, S), sv)), f_mul(b, sv, get(b, b->f64, C)));
        st(b, b->f64, f, e, f_div(b, v, *R));
        st(b, b->f64, P, e, f_div(b, cd(b, 1), *R));
    }
    loop_end(b, &le);
}

// kernels.inc's load_balance: the loss (bwd 0) or dlogits (bwd 1); work holds
// f, P (E doubles each) and the softmax p (rows x E floats). Pooled, its
// sums across the layers are the LoadBalancePool at args[nargs + 1]
// (common/graph.h), read as words: sums, layer, layers, rows.
static void emit_load_balance(Nb *b, const Node *n, LLVMValueRef args, LLVMValueRef work, int bwd) {
    const Shape *sl = &n->in[bwd]->shape;
    int64_t E = sl->dims[sl->rank - 1], rows = shape_numel(sl) / E;
    LLVMValueRef out = arg(b, args, 0, b->f32p), logits = arg(b, args, 1 + bwd, b->f32p),
                 mask = arg(b, args, 2 + bwd, b->f32p);
    LLVMValueRef f = LLVMBuildBitCast(b->b, work, b->f64p, ""), P = at(b, b->f64, f, ci(b, E));
    LLVMValueRef p = LLVMBuildBitCast(b->b, at(b, b->f64, f, ci(b, 2 * E)), b->f32p, "");
    LLVMValueRef mx = local(b, b->f64, NULL), sum = local(b, b->f64, NULL);
    Loop l, lr, lj;
    LLVMValueRef i = loop_begin(b, &l, ci(b, 0), ci(b, 2 * E));
    st(b, b->f64, f, i, cd(b, 0));
    loop_end(b, &l);
    LLVMValueRef r = loop_begin(b, &lr, ci(b, 0), ci(b, rows)), base = mul(b, r, ci(b, E));
    LLVMValueRef xr = at(b, b->f32, logits, base), pr = at(b, b->f32, p, base);
    set(b, mx, cd(b, -INFINITY)), set(b, sum, cd(b, 0));
    LLVMValueRef j = loop_begin(b, &lj, ci(b, 0), ci(b, E));
    LLVMValueRef xv = wide(b, ld(b, b->f32, xr, j)), m0 = get(b, b->f64, mx);
    set(b, mx, LLVMBuildSelect(b->b, LLVMBuildFCmp(b->b, LLVMRealOGT, xv, m0, ""), xv, m0, ""));
    loop_end(b, &lj);
    j = loop_begin(b, &lj, ci(b, 0), ci(b, E));
    set(b, sum, f_add(b, get(b, b->f64, sum), expo(b, f_sub(b, wide(b, ld(b, b->f32, xr, j)), get(b, b->f64, mx)))));
    loop_end(b, &lj);
    j = loop_begin(b, &lj, ci(b, 0), ci(b, E));
    LLVMValueRef ev = expo(b, f_sub(b, wide(b, ld(b, b->f32, xr, j)), get(b, b->f64, mx)));
    st(b, b->f32, pr, j, narrow(b, f_div(b, ev, get(b, b->f64, sum))));
    loop_end(b, &lj);
    j = loop_begin(b, &lj, ci(b, 0), ci(b, E));
    LLVMValueRef mj = wide(b, ld(b, b->f32, mask, add(b, base, j))), pj = wide(b, ld(b, b->f32, pr, j));
    double norm = n->pooled ? 1.0 : (double)rows; // pooled: the sums, divided once all rows are in
    st(b, b->f64, f, j, f_add(b, ld(b, b->f64, f, j), f_div(b, mj, cd(b, norm))));
    st(b, b->f64, P, j, f_add(b, ld(b, b->f64, P, j), f_div(b, pj, cd(b, norm))));
    loop_end(b, &lj);
    loop_end(b, &lr);
    LLVMValueRef R = cd(b, (double)rows);
    if (n->pooled) emit_load_balance_pool(b, n, args, f, E, bwd, &R);
    if (!bwd) {
        set(b, sum, cd(b, 0));
        j = loop_begin(b, &lj, ci(b, 0), ci(b, E));
        set(b, sum, f_add(b, get(b, b->f64, sum), f_mul(b, ld(b, b->f64, f, j), ld(b, b->f64, P, j))));
        loop_end(b, &lj);
        st(b, b->f32, out, ci(b, 0), narrow(b, f_mul(b, cd(b, (double)E), get(b, b->f64, sum))));
        return;
    }
    LLVMValueRef dloss = LLVMBuildLoad2(b->b, b->f32, arg(b, args, 1, b->f32p), "");
    LLVMValueRef scale = f_div(b, f_mul(b, wide(b, dloss), cd(b, (double)E)), R);
    r = loop_begin(b, &lr, ci(b, 0), ci(b, rows)), base = mul(b, r, ci(b, E));
    pr = at(b, b->f32, p, base);
    set(b, sum, cd(b, 0)); // f . p of the row
    j = loop_begin(b, &lj, ci(b, 0), ci(b, E));
    set(b, sum, f_add(b, get(b, b->f64, sum), f_mul(b, ld(b, b->f64, f, j), wide(b, ld(b, b->f32, pr, j)))));
    loop_end(b, &lj);
    j = loop_begin(b, &lj, ci(b, 0), ci(b, E));
    LLVMValueRef v = f_mul(b, f_mul(b, scale, wide(b, ld(b, b->f32, pr, j))),
                           f_sub(b, ld(b, b->f64, f, j), get(b, b->f64, sum)));
    st(b, b->f32, out, add(b, base, j), narrow(b, v));
    loop_end(b, &lj);
    loop_end(b, &lr);
}

// add_loss: y = x (the loss joins the objective elsewhere).
static void emit_copy(Nb *b, const Node *n, LLVMValueRef args) {
    LLVMValueRef y = arg(b, args, 0, b->f32p), x = arg(b, args, 1, b->f32p);
    Loop l;
    LLVMValueRef i = loop_begin(b, &l, ci(b, 0), ci(b, shape_numel(&n->shape)));
    st(b, b->f32, y, i, ld(b, b->f32, x, i));
    loop_end(b, &l);
}

int emit_llvm_node(LLVMModuleRef mod, LLVMTypeRef fnty, const char *name, const Node *n, char *err, size_t errcap) {
    Nb nb = {.cx = LLVMGetModuleContext(mod), .mod = mod}, *b = &nb;
    b->f32 = LLVMFloatTypeInContext(b->cx), b->f64 = LLVMDoubleTypeInContext(b->cx);
    b->i32 = LLVMInt32TypeInContext(b->cx), b->i64 = LLVMInt64TypeInContext(b->cx);
    b->f32p = LLVMPointerType(b->f32, 0), b->f64p = LLVMPointerType(b->f64, 0), b->i64p = LLVMPointerType(b->i64, 0);
    LLVMTypeRef gp[12] = {b->i32, b->i32,  b->i64, b->i64, b->i64,  b->f32p,
                          b->i64, b->f32p, b->i64, b->f32, b->f32p, b->i64};
    b->gemm_ty = LLVMFunctionType(LLVMVoidTypeInContext(b->cx), gp, 12, 0);
    b->fn = LLVMAddFunction(mod, name, fnty);
    b->b = LLVMCreateBuilderInContext(b->cx);
    b->entry = LLVMAppendBasicBlockInContext(b->cx, b->fn, "entry");
    LLVMPositionBuilderAtEnd(b->b, b->entry);
    LLVMValueRef args = LLVMGetParam(b->fn, 0), work = LLVMBuildBitCast(b->b, LLVMGetParam(b->fn, 3), b->f64p, "");
    b->gemm = arg(b, args, n->nin + 1, LLVMPointerType(b->gemm_ty, 0));
    int rc = 0;
    switch (n->op) {
    case OP_TOP_K: emit_top_k(b, n, args); break;
    case OP_MOE: emit_moe(b, n, args, work); break;
    case OP_MOE_BWD: emit_moe_bwd(b, n, args, work); break;
    case OP_LOAD_BALANCE: emit_load_balance(b, n, args, work, 0); break;
    case OP_LOAD_BALANCE_BWD: emit_load_balance(b, n, args, work, 1); break;
    case OP_ADD_LOSS: emit_copy(b, n, args); break;
    case OP_CONV1D:
    case OP_CONV1D_BWD:
    case OP_DELTA_RULE:
    case OP_DELTA_RULE_BWD:
    case OP_SSD:
    case OP_SSD_BWD: break; // the cpu backend runs their plain kernels (runtime/backend/jit.c, run_node)
    default: rc = -1, snprintf(err, errcap, "llvm: kernel %s: no node kernel for %s", name, op_name(n->op));
    }
    LLVMBuildRetVoid(b->b);
    if (rc == 0 && LLVMVerifyFunction(b->fn, LLVMReturnStatusAction))
        rc = -1,
        snprintf(err, errcap, "llvm: kernel %s (%s): the generated function does not verify", name, op_name(n->op));
    LLVMDisposeBuilder(b->b);
    return rc;
}
