// jit.c: loading and running the plan's kernels on the cpu (jit.h).
#include "runtime/backend/jit.h"

#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <llvm-c/BitReader.h>
#include <llvm/Config/llvm-config.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bf16.h"
#include "common/plan.h"
#include "common/storage.h"
#include "common/node_kernel.h"
#include "runtime/backend/blas_core.h"
#include "common/cache.h"
#include "runtime/backend/kernels.h"

struct Jit {
    const Graph *g;
    Arena arena; // the kernel IR
    KirProgram prog;
    KirFn *fn[PART_COUNT]; // (prog.parts[p].n) expression and node kernels' entry points
    LLVMOrcLLJITRef lljit;
    double *scratch; // (scratch_n) f64 accumulators
    size_t scratch_n;
    float *attn; // (attn_n) attention scores, probabilities and their gradients
    size_t attn_n;
    void **argv;                 // (argv_n) the running kernel's argument addresses
    const LoadBalancePool *pool; // a pooled load-balancing loss's (jit_set_pool), or NULL
    size_t argv_n;
    float *wide; // (wide_n) bf16 GEMM, attention and node operands widened to f32, and their f32 results
    size_t wide_n;
    double *work; // (work_n bytes) node kernels' workspace (node_kernel_work_bytes)
    size_t work_n;
    const int32_t *seg_start; // (B, T) the batch's document starts (jit_set_doc_starts), or NULL
};

JitProfile *jit_profile;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int set_err(char *err, size_t cap, const char *what, LLVMErrorRef e) {
    char *msg = e ? LLVMGetErrorMessage(e) : NULL;
    snprintf(err, cap, "jit: %s%s%s", what, msg ? ": " : "", msg ? msg : "");
    if (msg) LLVMDisposeErrorMessage(msg);
    return -1;
}

// ---------------------------------------------------------------- loading

// Every argument of every kernel inside its node's buffer, and no argument a view.
static int check_args(const Jit *j, char *err, size_t cap) {
    for (int p = 0; p < PART_COUNT; p++) {
        const Part *part = &j->g->parts[p];
        for (int i = 0; i < j->prog.parts[p].n; i++) {
            const KirKernel *k = &j->prog.parts[p].k[i];
            if (k->kind == KK_ATTN || k->kind == KK_ATTN_BWD) {
                int bwd = k->kind == KK_ATTN_BWD;
                for (int h = 0; h <= bwd; h++) {
                    int hi = k->attn.helper[h];
                    const KirKernel *hk = hi >= 0 ? &j->prog.parts[p].k[hi] : NULL;
                    // the softmax: S, (C), lse; its backward: P, dP, (C)
                    if (!hk || hk->nargs != 2 + (k->attn.softcap > 0) || hk->rows != k->attn.T ||
                        hk->args[0].numel < k->attn.T * k->attn.T ||
                        hk->args[h].numel < k->attn.T * (h ? k->attn.T : 1)) {
                        snprintf(err, cap, "jit: part %s kernel %d: attention without its helper kernels", part_name(p),
                                 i);
                        return -1;
                    }
                }
            }
            if (k->kind == KK_NODE) { // the node kernel is written for the node's sizes: its arguments must be it
                const Node *n = k->anchor < part->nodes.n ? part->nodes.items[k->anchor] : NULL;
                int ok = n && kir_is_plain_op(n->op) && k->nargs == n->nin + 1 && k->args[0].offset == 0 &&
                         k->args[0].numel == shape_numel(&n->shape);
                for (int a = 1; ok && a < k->nargs; a++) ok = k->args[a].numel == shape_numel(&n->in[a - 1]->shape);
                if (!ok) {
                    snprintf(err, cap, "jit: part %s kernel %d: a node kernel whose arguments are not its node's",
                             part_name(p), i);
                    return -1;
                }
            }
            if (k->kind == KK_GEMM && k->gemm.epilogue >= 0 && j->prog.parts[p].k[k->gemm.epilogue].rows != k->gemm.M) {
                snprintf(err, cap, "jit: part %s kernel %d: an epilogue of other rows than its GEMM", part_name(p), i);
                return -1;
            }
            for (int a = 0; a < k->nargs; a++) {
                const KirArg *g = &k->args[a];
                if (g->node < 0) {
                    if (k->fused_into < 0 || j->prog.parts[p].k[k->fused_into].kind == KK_GEMM) {
                        snprintf(err, cap, "jit: part %s kernel %d: scratch argument outside an attention helper",
                                 part_name(p), i);
                        return -1;
                    }
                    continue;
                }
                const Node *n = part->nodes.items[g->node];
                int elem = kir_storage_type(storage_dtype(j->g->train.compute, n));
                if (n->op == OP_VIEW || n->op == OP_RESHAPE || elem != g->dtype ||
                    g->offset + g->numel > shape_numel(&n->shape)) {
                    snprintf(err, cap, "jit: part %s kernel %d argument %d reaches outside node %%%d", part_name(p), i,
                             a, g->node);
                    return -1;
                }
            }
        }
    }
    return 0;
}

// glibc's vector maths (libmvec): exp, log, sin, cos, pow on 2 or 4
// doubles, 4 or 8 floats at once, within 4 ulp of libm's. Without it each
// lane of a vectorised exp is a scalar libm call (a softmax row, a SiLU).
// Offered to the loop vectoriser call by call, as the vector variants
// LLVM's TLI would list for -vector-library=LIBMVEC-X86, on f32 plans only:
// bf16 plans keep libm's scalar results, because rounding every node to
// bf16 turns a last-ulp difference now and then into one of 2^-8, and only
// the reference executor's arithmetic holds a streamed bf16 replay to its
// losses to 1e-5. Needs AVX2 and FMA (the 4-double variants) and
// libmvec.so.1; MT_JIT_LIBMVEC=0 keeps libm's calls everywhere.
typedef struct VecFn {
    const char *scalar; // the intrinsic the kernels call
    int vf, nargs;
    const char *vector; // libmvec's variant of vf lanes
} VecFn;
static const VecFn VEC_FNS[] = {
    {"llvm.exp.f64", 2, 1, "_ZGVbN2v_exp"},   {"llvm.exp.f64", 4, 1, "_ZGVdN4v_exp"},
    {"llvm.exp.f32", 4, 1, "_ZGVbN4v_expf"},  {"llvm.exp.f32", 8, 1, "_ZGVdN8v_expf"},
    {"llvm.log.f64", 2, 1, "_ZGVbN2v_log"},   {"llvm.log.f64", 4, 1, "_ZGVdN4v_log"},
    {"llvm.log.f32", 4, 1, "_ZGVbN4v_logf"},  {"llvm.log.f32", 8, 1, "_ZGVdN8v_logf"},
    {"llvm.sin.f64", 2, 1, "_ZGVbN2v_sin"},   {"llvm.sin.f64", 4, 1, "_ZGVdN4v_sin"},
    {"llvm.sin.f32", 4, 1, "_ZGVbN4v_sinf"},  {"llvm.sin.f32", 8, 1, "_ZGVdN8v_sinf"},
    {"llvm.cos.f64", 2, 1, "_ZGVbN2v_cos"},   {"llvm.cos.f64", 4, 1, "_ZGVdN4v_cos"},
    {"llvm.cos.f32", 4, 1, "_ZGVbN4v_cosf"},  {"llvm.cos.f32", 8, 1, "_ZGVdN8v_cosf"},
    {"llvm.pow.f64", 2, 2, "_ZGVbN2vv_pow"},  {"llvm.pow.f64", 4, 2, "_ZGVdN4vv_pow"},
    {"llvm.pow.f32", 4, 2, "_ZGVbN4vv_powf"}, {"llvm.pow.f32", 8, 2, "_ZGVdN8vv_powf"},
};
enum { NVEC_FNS = sizeof VEC_FNS / sizeof VEC_FNS[0] };

static int vecmath_ok; // the host and the process can run libmvec's variants
static void vecmath_init(void) {
    const char *env = getenv("MT_JIT_LIBMVEC");
    char *feat = LLVMGetHostCPUFeatures();
    int avx2 = feat && strstr(feat, "+avx2") && strstr(feat, "+fma");
    LLVMDisposeMessage(feat);
    vecmath_ok = !(env && !strcmp(env, "0")) && avx2 && dlopen("libmvec.so.1", RTLD_NOW | RTLD_GLOBAL);
}

// Marks every call of mod to an intrinsic of VEC_FNS with its variants
// (the "vector-function-abi-variant" attribute the vectoriser reads),
// declares them and keeps them (llvm.compiler.used) until it has run.
static void offer_vecmath(LLVMModuleRef mod) {
    LLVMContextRef cx = LLVMGetModuleContext(mod);
    LLVMValueRef used[NVEC_FNS];
    int nused = 0;
    for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
        size_t len;
        const char *name = LLVMGetValueName2(f, &len);
        if (!LLVMIsDeclaration(f) || strncmp(name, "llvm.", 5) != 0) continue;
        char variants[512] = "";
        for (int i = 0; i < NVEC_FNS; i++) {
            const VecFn *v = &VEC_FNS[i];
            if (strcmp(v->scalar, name) != 0) continue;
            LLVMTypeRef fty = LLVMGlobalGetValueType(f), ret = LLVMGetReturnType(fty);
            LLVMTypeRef vt = LLVMVectorType(ret, (unsigned)v->vf), params[2] = {vt, vt};
            LLVMValueRef vf = LLVMGetNamedFunction(mod, v->vector);
            if (!vf) vf = LLVMAddFunction(mod, v->vector, LLVMFunctionType(vt, params, (unsigned)v->nargs, 0));
            used[nused++] = LLVMConstBitCast(vf, LLVMPointerType(LLVMInt8TypeInContext(cx), 0));
            size_t at = strlen(variants);
            snprintf(variants + at, sizeof variants - at, "%s_ZGV_LLVM_N%d%s_%s(%s)", at ? "," : "", v->vf,
                     v->nargs == 2 ? "vv" : "v", v->scalar, v->vector);
        }
        if (!variants[0]) continue;
        LLVMAttributeRef attr = LLVMCreateStringAttribute(cx, "vector-function-abi-variant", 27, variants,
                                                          (unsigned)strlen(variants));
        for (LLVMUseRef u = LLVMGetFirstUse(f); u; u = LLVMGetNextUse(u)) {
            LLVMValueRef call = LLVMGetUser(u);
            if (LLVMIsACallInst(call) && LLVMGetCalledValue(call) == f)
                LLVMAddCallSiteAttribute(call, LLVMAttributeFunctionIndex, attr);
        }
    }
    if (!nused) return;
    LLVMTypeRef i8p = LLVMPointerType(LLVMInt8TypeInContext(cx), 0);
    LLVMValueRef keep = LLVMAddGlobal(mod, LLVMArrayType(i8p, (unsigned)nused), "llvm.compiler.used");
    LLVMSetInitializer(keep, LLVMConstArray(i8p, used, (unsigned)nused));
    LLVMSetLinkage(keep, LLVMAppendingLinkage);
    LLVMSetSection(keep, "llvm.metadata");
}

// The pass pipeline and code generation compile() runs: part of the cache key.
static const long long JIT_CACHE_MAX_BYTES = 1ll << 28; // (0.2 to 0.6 s of O3 and code generation a tiny model)
static const char *const PIPELINE = "default<O3> loop-vectorize slp-vectorize; codegen aggressive, JIT code model";

// The optimised object code of bitcode bc, from the cache (common/cache.h: an
// entry "jit" keyed by the bitcode, LLVM's version, the pass pipeline, the
// host's triple, CPU and features and the vector maths library) or
// made here and kept there; NULL on failure (err says why).
static LLVMMemoryBufferRef compile_object(const uint8_t *bc, size_t len, int vecmath, LLVMContextRef cx, char *err,
                                          size_t cap) {
    char *triple = LLVMGetDefaultTargetTriple(), *cpu = LLVMGetHostCPUName(), *feat = LLVMGetHostCPUFeatures();
    const char *dump = getenv("MT_JIT_DUMP"); // the optimised module, to see what the vectoriser did: no cache then
    CacheKey key = cache_key();
    const char *parts[] = {LLVM_VERSION_STRING, PIPELINE, triple, cpu, feat, vecmath ? "libmvec" : "libm"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) cache_key_add(&key, parts[i], strlen(parts[i]));
    cache_key_add(&key, bc, len);
    char path[4200];
    int cached = !dump && cache_path(path, sizeof path, "jit", &key);
    size_t objlen = 0;
    void *obj = cached ? cache_read(path, &objlen) : NULL;
    LLVMMemoryBufferRef out = NULL, mb = NULL;
    LLVMModuleRef mod = NULL;
    LLVMTargetMachineRef tm = NULL;
    LLVMPassBuilderOptionsRef opts = NULL;
    LLVMErrorRef e;
    char *msg = NULL;
    if (obj) {
        out = LLVMCreateMemoryBufferWithMemoryRangeCopy(obj, objlen, "kernels.o");
        free(obj);
        goto done;
    }
    mb = LLVMCreateMemoryBufferWithMemoryRangeCopy((const char *)bc, len, "kernels");
    if (LLVMParseBitcodeInContext2(cx, mb, &mod)) {
        snprintf(err, cap, "jit: the plan's bitcode does not parse");
        goto done;
    }
    LLVMTargetRef target;
    if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
        snprintf(err, cap, "jit: no target for %s: %s", triple, msg ? msg : "?");
        goto done;
    }
    tm = LLVMCreateTargetMachine(target, triple, cpu, feat, LLVMCodeGenLevelAggressive, LLVMRelocDefault,
                                 LLVMCodeModelJITDefault);
    LLVMSetTarget(mod, triple);
    LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(mod, td);
    LLVMDisposeTargetData(td);
    for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
        if (LLVMIsDeclaration(f)) continue;
        LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                                LLVMCreateStringAttribute(cx, "target-cpu", 10, cpu, (unsigned)strlen(cpu)));
        LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                                LLVMCreateStringAttribute(cx, "target-features", 15, feat, (unsigned)strlen(feat)));
    }
    if (vecmath) offer_vecmath(mod);
    opts = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(opts, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(opts, 1);
    if ((e = LLVMRunPasses(mod, "default<O3>", tm, opts))) {
        set_err(err, cap, "the O3 pipeline failed", e);
        goto done;
    }
    if (dump && LLVMPrintModuleToFile(mod, dump, &msg)) {
        snprintf(err, cap, "jit: cannot write MT_JIT_DUMP=%s: %s", dump, msg ? msg : "?");
        goto done;
    }
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &msg, &out)) {
        snprintf(err, cap, "jit: code generation failed: %s", msg ? msg : "?");
        out = NULL;
        goto done;
    }
    if (cached) cache_write(path, LLVMGetBufferStart(out), LLVMGetBufferSize(out), JIT_CACHE_MAX_BYTES);
done:
    if (msg) LLVMDisposeMessage(msg);
    if (mod) LLVMDisposeModule(mod);
    if (mb) LLVMDisposeMemoryBuffer(mb); // the parsed module keeps no reference to it
    if (opts) LLVMDisposePassBuilderOptions(opts);
    if (tm) LLVMDisposeTargetMachine(tm);
    LLVMDisposeMessage(triple);
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(feat);
    return out;
}

static int compile(Jit *j, const uint8_t *bc, size_t len, char *err, size_t cap) {
    static pthread_once_t vecmath_once = PTHREAD_ONCE_INIT;
    pthread_once(&vecmath_once, vecmath_init);
    int vecmath = vecmath_ok && j->g->train.compute != DT_BF16;
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
    LLVMContextRef cx = LLVMContextCreate();
    LLVMMemoryBufferRef obj = compile_object(bc, len, vecmath, cx, err, cap);
    LLVMContextDispose(cx);
    if (!obj) return -1;
    int rc = -1;
    LLVMErrorRef e;
    LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
    LLVMOrcJITTargetMachineBuilderRef jtmb;
    if ((e = LLVMOrcJITTargetMachineBuilderDetectHost(&jtmb))) {
        LLVMOrcDisposeLLJITBuilder(jb);
        set_err(err, cap, "cannot describe the host", e);
        goto out;
    }
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(jb, jtmb);
    if ((e = LLVMOrcCreateLLJIT(&j->lljit, jb))) {
        j->lljit = NULL;
        set_err(err, cap, "cannot create the JIT", e);
        goto out;
    }
    LLVMOrcDefinitionGeneratorRef gen; // expf, logf, sin, cos, pow: the process's libm
    if ((e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(j->lljit), NULL,
                                                                  NULL))) {
        set_err(err, cap, "cannot resolve the process's symbols", e);
        goto out;
    }
    LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(j->lljit);
    LLVMOrcJITDylibAddGenerator(jd, gen);
    e = LLVMOrcLLJITAddObjectFile(j->lljit, jd, obj);
    obj = NULL; // owned by the JIT from here
    if (e) {
        set_err(err, cap, "cannot add the kernels", e);
        goto out;
    }
    rc = 0;
    for (int p = 0; p < PART_COUNT && rc == 0; p++) {
        j->fn[p] = calloc((size_t)j->prog.parts[p].n + 1, sizeof *j->fn[p]);
        if (!j->fn[p]) {
            rc = set_err(err, cap, "out of memory", NULL);
            break;
        }
        for (int i = 0; i < j->prog.parts[p].n; i++) {
            if (j->prog.parts[p].k[i].kind != KK_EXPR && j->prog.parts[p].k[i].kind != KK_NODE) continue;
            char name[64];
            LLVMOrcExecutorAddress addr = 0;
            if ((e = LLVMOrcLLJITLookup(j->lljit, &addr, kir_symbol(name, sizeof name, p, i))) || !addr) {
                rc = set_err(err, cap, "a kernel is missing from the bitcode", e);
                break;
            }
            j->fn[p][i] = (KirFn)(uintptr_t)addr;
        }
    }
out:
    if (obj) LLVMDisposeMemoryBuffer(obj);
    return rc;
}

Jit *jit_create(const Graph *g, const uint8_t *kir, size_t kir_len, const uint8_t *bitcode, size_t bitcode_len,
                char *err, size_t cap) {
    Jit *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, cap, "jit: out of memory");
        return NULL;
    }
    j->g = g;
    int nnodes[PART_COUNT];
    for (int p = 0; p < PART_COUNT; p++) nnodes[p] = g->parts[p].nodes.n;
    if (kir_read(&j->prog, kir, kir_len, graph_nparts(g), nnodes, &j->arena, err, cap) != 0 ||
        check_args(j, err, cap) != 0 || compile(j, bitcode, bitcode_len, err, cap) != 0) {
        jit_destroy(j);
        return NULL;
    }
    // scratch for the largest kernel, allocated once: running never allocates
    for (int p = 0; p < PART_COUNT; p++)
        for (int i = 0; i < j->prog.parts[p].n; i++) {
            const KirKernel *k = &j->prog.parts[p].k[i];
            size_t acc = (size_t)kir_acc64_offset(k, k->nargs),
                   att = k->kind == KK_EXPR || k->kind == KK_GEMM
                             ? 0
                             : (size_t)((k->attn.softcap > 0 ? 3 : 2) * k->attn.T * k->attn.T + k->attn.T);
            if (acc > j->scratch_n) j->scratch_n = acc;
            if (att > j->attn_n) j->attn_n = att;
            if ((size_t)k->nargs + 2 > j->argv_n)
                j->argv_n = (size_t)k->nargs + 2; // a node kernel's GEMM and pool after its arguments
            if (k->kind == KK_NODE) {
                size_t work = (size_t)node_kernel_work_bytes(j->g->parts[p].nodes.items[k->anchor]);
                if (work > j->work_n) j->work_n = work;
            }
            size_t wide = 0; // GEMM, attention and node kernels: every bf16 argument widened (the output too)
            for (int a = 0; k->kind != KK_EXPR && a < k->nargs; a++)
                if (k->args[a].dtype == KT_BF16) wide += (size_t)k->args[a].numel;
            if (wide > j->wide_n) j->wide_n = wide;
        }
    j->scratch = malloc((j->scratch_n + 1) * sizeof(double));
    j->attn = malloc((j->attn_n + 1) * sizeof(float));
    j->argv = malloc((j->argv_n + 1) * sizeof(void *));
    j->wide = malloc((j->wide_n + 1) * sizeof(float));
    j->work = malloc(j->work_n + 8);
    if (!j->scratch || !j->attn || !j->argv || !j->wide || !j->work) {
        snprintf(err, cap,
                 "jit: cannot allocate %zu accumulator and %zu attention scratch elements, %zu node workspace bytes",
                 j->scratch_n, j->attn_n, j->work_n);
        jit_destroy(j);
        return NULL;
    }
    return j;
}

void jit_destroy(Jit *j) {
    if (!j) return;
    if (j->lljit) LLVMOrcDisposeLLJIT(j->lljit);
    for (int p = 0; p < PART_COUNT; p++) free(j->fn[p]);
    arena_free(&j->arena);
    free(j->scratch);
    free(j->attn);
    free(j->argv);
    free(j->wide);
    free(j->work);
    free(j);
}

void jit_set_pool(Jit *j, const LoadBalancePool *pool) { j->pool = pool; }

const KirProgram *jit_program(const Jit *j) { return &j->prog; }

// ---------------------------------------------------------------- running

static void *arg_ptr(const KirArg *a, char *base, const int64_t *offsets) {
    return base + offsets[a->node] + a->offset * (a->dtype == KT_BF16 ? 2 : 4);
}

void jit_widen(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = f32_from_bf16(src[i]);
}
void jit_narrow(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_from_f32(src[i]);
}

// Zeroes the accumulators of expression kernel k before its first row block.
static double *acc_begin(Jit *j, const KirKernel *k, void **args) {
    size_t n = (size_t)kir_acc64_offset(k, k->nargs);
    double *s = j->scratch; // (scratch_n >= n)
    memset(s, 0, n * sizeof(double));
    for (int a = 0; a < k->nargs; a++)
        if (k->args[a].access & KA_ACC32) memset(args[a], 0, (size_t)k->args[a].numel * 4);
    return s;
}

// Writes f64 accumulators out after the last row block.
static void acc_end(const KirKernel *k, void **args, const double *s) {
    for (int a = 0; a < k->nargs; a++) {
        const KirArg *g = &k->args[a];
        if (!(g->access & KA_ACC64)) continue;
        const double *src = s + kir_acc64_offset(k, a);
        if (g->dtype == KT_BF16) { // rounded once, at the end
            uint16_t *dst = args[a];
            for (int64_t i = 0; i < g->numel; i++) dst[i] = bf16_from_f32((float)(src[i] / g->divisor));
            continue;
        }
        float *dst = args[a];
        for (int64_t i = 0; i < g->numel; i++) dst[i] = (float)(src[i] / g->divisor);
    }
}

static void call(KirFn fn, void **args, int64_t r0, int64_t r1, double *s) {
    double t0 = jit_profile ? now_s() : 0;
    fn(args, r0, r1, s);
    if (jit_profile) jit_profile->kernel_s += now_s() - t0, jit_profile->kernel_calls++;
}

static NodeSgemm sgemm; // the GEMM node kernels call too (common/node_kernel.h)
static void sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                  int64_t ldb, float beta, float *C, int64_t ldc) {
    double t0 = jit_profile ? now_s() : 0;
    mt_blas_threads_for(M * N * K); // one thread for small ones (blas_core.h)
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    if (jit_profile) jit_profile->gemm_s += now_s() - t0, jit_profile->gemm_calls++;
}

static void bind(const KirKernel *k, void **args, char *base, const int64_t *offsets) {
    for (int a = 0; a < k->nargs; a++) args[a] = k->args[a].node >= 0 ? arg_ptr(&k->args[a], base, offsets) : NULL;
}

static void run_expr(Jit *j, const KirKernel *k, KirFn fn, char *base, const int64_t *offsets) {
    void **args = j->argv;
    bind(k, args, base, offsets);
    double *s = acc_begin(j, k, args);
    call(fn, args, 0, k->rows, s);
    acc_end(k, args, s);
}

// Operand pointers of a GEMM or attention kernel as f32: its arguments
// themselves, or for bf16 storage (every argument alike, kir_check says,
// but for a GEMM's output, which may be f32) the inputs widened into j->wide
// and a bf16 output given room there, to be rounded back (narrow) once
// computed.
static void f32_operands(Jit *j, const KirKernel *k, char *base, const int64_t *offsets, float **ops) {
    float *w = j->wide; // (wide_n)
    for (int a = 0; a < k->nargs; a++) {
        void *p = arg_ptr(&k->args[a], base, offsets);
        if (k->args[a].dtype != KT_BF16) {
            ops[a] = p;
            continue;
        }
        ops[a] = w;
        if (a > 0) jit_widen(w, p, k->args[a].numel);
        w += k->args[a].numel;
    }
}

// Rounds output rows [r0, r1) (row length n) of a bf16 kernel from its f32 room back into its argument.
static void narrow_rows(const KirKernel *k, char *base, const int64_t *offsets, const float *out, int64_t r0,
                        int64_t r1, int64_t n) {
    if (k->args[0].dtype != KT_BF16) return;
    jit_narrow((uint16_t *)arg_ptr(&k->args[0], base, offsets) + r0 * n, out + r0 * n, (r1 - r0) * n);
}

// C = op(A) @ op(B), with the epilogue run on each block of rows while it is in cache.
static void run_gemm(Jit *j, int part, const KirKernel *k, int flags, char *base, const int64_t *offsets) {
    const KirGemm *g = &k->gemm;
    const KirKernel *e = g->epilogue >= 0 ? &j->prog.parts[part].k[g->epilogue] : NULL;
    KirFn efn = e ? j->fn[part][g->epilogue] : NULL;
    if (flags & RUN_SKIP_HEAVY) {
        if (e) run_expr(j, e, efn, base, offsets);
        return;
    }
    float *ops[3];
    f32_operands(j, k, base, offsets, ops);
    float *C = ops[0];
    const float *A = ops[1], *B = ops[2];
    if (!e) {
        for (int64_t b = 0; b < g->batch; b++)
            sgemm(g->ta, g->tb, g->M, g->N, g->K, A + b * g->stride_a, g->lda, B + b * g->stride_b, g->ldb, 0.0f,
                  C + b * g->stride_c, g->ldc);
        narrow_rows(k, base, offsets, C, 0, k->args[0].numel, 1);
        return;
    }
    void **args = j->argv;
    bind(e, args, base, offsets);
    double *s = acc_begin(j, e, args);
    int64_t block = kir_gemm_row_block(g->N);
    for (int64_t r0 = 0; r0 < g->M; r0 += block) {
        int64_t r1 = r0 + block < g->M ? r0 + block : g->M;
        sgemm(g->ta, g->tb, r1 - r0, g->N, g->K, A + (g->ta ? r0 : r0 * g->lda), g->lda, B, g->ldb, 0.0f,
              C + r0 * g->ldc, g->ldc);
        narrow_rows(k, base, offsets, C, r0, r1, g->ldc);
        call(efn, args, r0, r1, s);
    }
    acc_end(e, args, s);
}

// The sink logit s as one more column of rows [0, T) of P (T, T) and their
// lse L (T): L' = log(exp(L) + exp(s)), each row times exp(L - L').
static void with_sink(float *P, float *L, int64_t T, float s) {
    for (int64_t r = 0; r < T; r++) {
        const float m = L[r] > s ? L[r] : s, l = m + logf(expf(L[r] - m) + expf(s - m)), w = expf(L[r] - l);
        for (int64_t c = 0; c < T; c++) P[r * T + c] *= w;
        L[r] = l;
    }
}

// Attention on the cpu: per (batch, head) S = q k^T, softmax (generated,
// scaled and masked; it writes the rows' lse too), y = P v; the backward
// recomputes P (the saved y and lse unread), then dP = dy v^T, dS
// (generated), dq = dS k, dk += dS^T q, dv += P^T dy, all in f32. With
// sinks P and its lse take the sink's column (with_sink) before y or dS.
// bf16 plans instead run the plain kernel of kernels.inc (double sums) on
// the widened operands and round its output: the rounding to bf16 turns the
// composite's f32 sums into different bf16 values here and there, and only
// the same arithmetic lets a streamed bf16 replay be held to the reference
// executor's losses to 1e-5. Rows of packed documents (jit_set_doc_starts) run
// the plain kernel too, which masks them.
static void run_attn(Jit *j, int part, const KirKernel *k, char *base, const int64_t *offsets) {
    const KirAttn *t = &k->attn;
    int bwd = k->kind == KK_ATTN_BWD;
    int64_t T = t->T, D = t->D, HD = t->H * D, KD = t->KVH * D, group = t->H / t->KVH;
    int64_t Dv = t->Dv, HV = t->H * Dv, KV = t->KVH * Dv; // v and y heads Dv wide
    int64_t nq = t->B * T * HD, nk = t->B * T * KD, nv = t->B * T * KV;
    float *S = j->attn;                              // (T, T) scores, then P
    float *dP = S + T * T;                           // (T, T) dP, then dS
    float *C = dP + T * T;                           // (T, T) with softcap: the capping's derivative
    float *L = S + (t->softcap > 0 ? 3 : 2) * T * T; // (T) the softmax's rows' lse
    float *ops[8]; // y or [dq | dk | dv], then the node's operands (kernels.h)
    f32_operands(j, k, base, offsets, ops);
    const float *sinks = k->nargs == (bwd ? 8 : 6) ? ops[k->nargs - 1] : NULL; // (H) or none
    if (k->args[0].dtype == KT_BF16 || j->seg_start) { // (documents: the plain kernel masks them)
        const Node *n = j->g->parts[part].nodes.items[k->anchor];
        if (bwd) kernel_run_doc_starts_f32(n, ops[0], (void *const *)(ops + 1), j->seg_start);
        else kernel_attention_doc_starts_f32(n, ops[0], ops[4], (void *const *)(ops + 1), j->seg_start);
        narrow_rows(k, base, offsets, ops[0], 0, bwd ? nq + nk + nv : t->B * T * HV, 1);
        return;
    }
    float *out = ops[0];
    const float *dy = bwd ? ops[1] : NULL;
    const float *q = ops[bwd + 1], *kk = ops[bwd + 2], *v = ops[bwd + 3];
    float *dq = out, *dk = out + nq, *dv = out + nq + nk;
    if (bwd) memset(dk, 0, (size_t)(nk + nv) * sizeof(float));
    KirFn f0 = j->fn[part][t->helper[0]], f1 = bwd ? j->fn[part][t->helper[1]] : NULL;
    void *a0[3] = {S, t->softcap > 0 ? C : L, L}, *a1[3] = {S, dP, C};
    float *lse = bwd ? NULL : ops[4]; // (B, H, T)
    for (int64_t b = 0; b < t->B; b++)
        for (int64_t h = 0; h < t->H; h++) {
            const float *qh = q + b * T * HD + h * D, *kh = kk + b * T * KD + (h / group) * D,
                        *vh = v + b * T * KV + (h / group) * Dv;
            sgemm(0, 1, T, T, D, qh, HD, kh, KD, 0.0f, S, T);
            call(f0, a0, 0, T, NULL);
            if (sinks) with_sink(S, L, T, sinks[h]);
            if (!bwd) {
                memcpy(lse + (b * t->H + h) * T, L, (size_t)T * sizeof(float));
                sgemm(0, 0, T, Dv, T, S, T, vh, KV, 0.0f, out + b * T * HV + h * Dv, HV);
                continue;
            }
            const float *dyh = dy + b * T * HV + h * Dv;
            sgemm(0, 1, T, T, Dv, dyh, HV, vh, KV, 0.0f, dP, T);
            call(f1, a1, 0, T, NULL);
            sgemm(0, 0, T, D, T, dP, T, kh, KD, 0.0f, dq + b * T * HD + h * D, HD);
            sgemm(1, 0, T, D, T, dP, T, qh, HD, 1.0f, dk + b * T * KD + (h / group) * D, KD);
            sgemm(1, 0, T, Dv, T, S, T, dyh, HV, 1.0f, dv + b * T * KV + (h / group) * Dv, KV);
        }
    narrow_rows(k, base, offsets, out, 0, bwd ? nq + nk + nv : t->B * T * HV, 1);
}

// A node by its generated kernel (emit_llvm_node.c), on f32 operands (bf16
// ones widened, the output rounded back), its GEMMs through sgemm (in the
// profile's gemm_s; the rest of it in neither figure, as before).
// The recurrent ops (conv1d, delta_rule, ssd and their backwards) run their
// plain kernel (kernels_scan.inc), which reads the documents' starts; their
// generated functions are empty.
static void run_node(Jit *j, int part, const KirKernel *k, char *base, const int64_t *offsets) {
    float *ops[8];
    if (k->nargs > 8) abort(); // no node op has more than 7 operands (moe_bwd with a gate_up bias)
    f32_operands(j, k, base, offsets, ops);
    const Node *n = j->g->parts[part].nodes.items[k->anchor];
    if (n->op >= OP_CONV1D && n->op <= OP_SSD_BWD) {
        kernel_run_doc_starts_f32(n, ops[0], (void *const *)(ops + 1), j->seg_start);
        narrow_rows(k, base, offsets, ops[0], 0, k->args[0].numel, 1);
        return;
    }
    for (int a = 0; a < k->nargs; a++) j->argv[a] = ops[a];
    j->argv[k->nargs] = (void *)(uintptr_t)sgemm;
    j->argv[k->nargs + 1] = (void *)j->pool;
    j->fn[part][k - j->prog.parts[part].k](j->argv, 0, k->rows, j->work);
    narrow_rows(k, base, offsets, ops[0], 0, k->args[0].numel, 1);
}

void jit_set_doc_starts(Jit *j, const int32_t *seg_start) { j->seg_start = seg_start; }

void jit_run_kernel(Jit *j, int part, int i, int flags, char *base, const int64_t *offsets) {
    const KirKernel *k = &j->prog.parts[part].k[i];
    double t0 = jit_profile && jit_profile->kernel_s_of[part] ? now_s() : 0;
    switch (k->kind) {
    case KK_EXPR: run_expr(j, k, j->fn[part][i], base, offsets); break;
    case KK_GEMM: run_gemm(j, part, k, flags, base, offsets); break;
    case KK_NODE: {
        const Node *n = j->g->parts[part].nodes.items[k->anchor];
        if (!((flags & RUN_SKIP_HEAVY) && op_is_heavy(n->op))) run_node(j, part, k, base, offsets);
        break;
    }
    default: {
        double a0 = jit_profile ? now_s() : 0;
        if (!(flags & RUN_SKIP_HEAVY)) run_attn(j, part, k, base, offsets);
        if (jit_profile) jit_profile->attn_s += now_s() - a0;
        break;
    }
    }
    if (jit_profile && jit_profile->kernel_s_of[part]) jit_profile->kernel_s_of[part][i] += now_s() - t0;
}

void jit_run(Jit *j, int part, int from, int to, int flags, char *base, const int64_t *offsets) {
    const KirSet *s = &j->prog.parts[part];
    for (int i = 0; i < s->n; i++) {
        const KirKernel *k = &s->k[i];
        if (kir_is_launched(k) && k->anchor >= from && k->anchor < to) jit_run_kernel(j, part, i, flags, base, offsets);
    }
}
