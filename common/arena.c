#include "common/arena.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ArenaChunk {
    ArenaChunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[]; // (cap)
};

enum { ARENA_CHUNK_BYTES = 64 * 1024 };

void *arena_alloc(Arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    ArenaChunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK_BYTES ? n : ARENA_CHUNK_BYTES;
        ArenaChunk **s = &a->spare; // the first spare chunk large enough, else a new one
        while (*s && (*s)->cap < cap) s = &(*s)->next;
        if ((c = *s)) *s = c->next;
        else if ((c = malloc(sizeof(ArenaChunk) + cap))) c->cap = cap;
        else return NULL;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
    char *p = arena_alloc(a, n + 1);
    if (p) memcpy(p, s, n);
    return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(Arena *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *p = arena_alloc(a, (size_t)n + 1);
    if (!p) return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

static void free_chunks(ArenaChunk *c) {
    while (c) {
        ArenaChunk *next = c->next;
        free(c);
        c = next;
    }
}

void arena_free(Arena *a) {
    free_chunks(a->head);
    free_chunks(a->spare);
    a->head = a->spare = NULL;
}

ArenaMark arena_mark(const Arena *a) { return (ArenaMark){a->head, a->head ? a->head->used : 0}; }

void arena_release(Arena *a, ArenaMark m) {
    while (a->head != m.head) {
        ArenaChunk *c = a->head;
        a->head = c->next;
        c->next = a->spare;
        a->spare = c;
    }
    if (a->head) a->head->used = m.used;
}

int ptrvec_push(Arena *a, PtrVec *v, void *p) {
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 8;
        void **items = arena_alloc(a, (size_t)cap * sizeof(void *));
        if (!items) return -1;
        if (v->n) memcpy(items, v->items, (size_t)v->n * sizeof(void *));
        v->items = items;
        v->cap = cap;
    }
    v->items[v->n++] = p;
    return 0;
}
