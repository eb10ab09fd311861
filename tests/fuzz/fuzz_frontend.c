// fuzz_frontend.c: libFuzzer target for the front end. Any input must end
// in a graph or in counted diagnostics: no crash, leak, overflow or UB.
// Run: build/fuzz_frontend tests/fuzz/corpus examples -max_total_time=60
#include <stddef.h>
#include <stdint.h>

#include "common/graph.h"
#include "compiler/front/passes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Source src = {.path = "fuzz.mt", .text = (const char *)data, .len = size};
    Diag diag = {.src = &src, .sink = NULL};
    Arena arena = {0};
    Model *m = dsl_parse(&src, &arena, &diag);
    Graph *g = m ? sema_lower(m, NULL, &arena, &diag) : NULL;
    // A front end that fails must say why; one that succeeds must not.
    if ((g == NULL) != (diag.nerrors > 0)) __builtin_trap();
    arena_free(&arena);
    return 0;
}
