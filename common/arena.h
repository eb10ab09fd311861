// arena.h: one region allocator per compilation. Every AST node, graph node
// and string of a compile lives in one Arena and is freed with it, so no
// error path can leak.
#ifndef MT_ARENA_H
#define MT_ARENA_H

#include <stddef.h>

typedef struct ArenaChunk ArenaChunk;

typedef struct Arena {
    ArenaChunk *head;  // newest chunk first
    ArenaChunk *spare; // chunks given back by arena_release, reused before new ones
} Arena;

// A point in an arena's life: arena_release(a, m) gives back everything
// allocated since arena_mark returned m (the scheduler's trial plans).
typedef struct ArenaMark {
    ArenaChunk *head;
    size_t used;
} ArenaMark;

// Zeroed memory of n bytes, 16-byte aligned. Returns NULL only when the
// system is out of memory.
void *arena_alloc(Arena *a, size_t n);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);
ArenaMark arena_mark(const Arena *a);
void arena_release(Arena *a, ArenaMark m);

// A growable array of pointers whose storage lives in an arena.
typedef struct PtrVec {
    void **items; // (cap)
    int n, cap;
} PtrVec;

// Appends p; returns 0, or -1 when out of memory.
int ptrvec_push(Arena *a, PtrVec *v, void *p);

#endif
