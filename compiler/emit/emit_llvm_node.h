// emit_llvm_node.h: the node kernels (KK_NODE) as LLVM IR, for emit_llvm.c
// (emit_llvm_node.c says what they compute and how).
#ifndef MT_EMIT_LLVM_NODE_H
#define MT_EMIT_LLVM_NODE_H

#include <llvm-c/Core.h>

#include "compiler/emit/emit_llvm.h"

// Adds function `name` of type fnty (the kernels' ABI) computing node n to
// mod. Returns 0, or -1 with a message naming the kernel and op in err.
int emit_llvm_node(LLVMModuleRef mod, LLVMTypeRef fnty, const char *name, const Node *n, char *err, size_t errcap);

#endif
