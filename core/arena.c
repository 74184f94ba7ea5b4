/* Bump allocator backing per-run scratch memory; a struct with its arrays in one block; the
 * block list of long-lived structs. */
#define _POSIX_C_SOURCE 200809L
#include "core/arena.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN 64

struct lp_arena {
    unsigned char *base;
    size_t capacity;
    size_t used;
};

lp_status lp_arena_create(size_t capacity, lp_arena **out, lp_error *err)
{
    *out = NULL;
    lp_arena *arena = calloc(1, sizeof *arena);
    if (!arena)
        return lp_error_set(err, LP_ERR_NOMEM, "arena: out of memory");
    if (capacity > 0) {
        void *base = NULL;
        size_t rounded = (capacity + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
        if (rounded < capacity || posix_memalign(&base, ARENA_ALIGN, rounded) != 0) {
            free(arena);
            return lp_error_set(err, LP_ERR_NOMEM, "arena: cannot allocate %zu bytes", capacity);
        }
        arena->base = base;
        arena->capacity = rounded;
    }
    *out = arena;
    return LP_OK;
}

void lp_arena_destroy(lp_arena *arena)
{
    if (!arena)
        return;
    free(arena->base);
    free(arena);
}

void *lp_arena_alloc(lp_arena *arena, size_t bytes)
{
    size_t start = (arena->used + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (start > arena->capacity || bytes > arena->capacity - start)
        return NULL;
    arena->used = start + bytes;
    return arena->base + start;
}

void *lp_arena_calloc(lp_arena *arena, size_t count, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(count, size, &bytes))
        return NULL;
    void *p = lp_arena_alloc(arena, bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

size_t lp_arena_mark(const lp_arena *arena) { return arena->used; }

void lp_arena_reset_to(lp_arena *arena, size_t mark)
{
    LP_ASSERT(mark <= arena->used);
    arena->used = mark;
}

size_t lp_arena_used(const lp_arena *arena) { return arena->used; }
size_t lp_arena_capacity(const lp_arena *arena) { return arena->capacity; }

static bool aligned_end(size_t start, size_t bytes, size_t *end)
{
    size_t aligned = (start + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    return aligned >= start && !__builtin_add_overflow(aligned, bytes, end);
}

/* The struct's head bytes (0: none) and the arrays in one zero-filled block; owner's members (the
 * block's own head when owner is NULL) point at the arrays. */
static void *alloc_block(size_t head, void *owner, const lp_owned_array *arrays, size_t n_arrays)
{
    size_t total = head;
    for (size_t i = 0; i < n_arrays; i++) {
        size_t bytes;
        if (arrays[i].count < 0 ||
            __builtin_mul_overflow((size_t)arrays[i].count, arrays[i].elem_size, &bytes) ||
            !aligned_end(total, bytes, &total))
            return NULL;
    }
    void *block = NULL;
    if (!aligned_end(total, 0, &total) || posix_memalign(&block, ARENA_ALIGN, total ? total : 1))
        return NULL;
    memset(block, 0, total);
    unsigned char *members = owner ? owner : block;
    size_t at = head;
    for (size_t i = 0; i < n_arrays; i++) {
        at = (at + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
        void *array = (unsigned char *)block + at;
        memcpy(members + arrays[i].member, &array, sizeof array);
        at += (size_t)arrays[i].count * arrays[i].elem_size;
    }
    return block;
}

void *lp_alloc_with_arrays(size_t struct_size, const lp_owned_array *arrays, size_t n_arrays)
{
    return alloc_block(struct_size, NULL, arrays, n_arrays);
}

void *lp_alloc_arrays_of(void *owner, const lp_owned_array *arrays, size_t n_arrays)
{
    return alloc_block(0, owner, arrays, n_arrays);
}

void *lp_block_list_adopt(lp_block_list *list, void *block)
{
    if (!block)
        return NULL;
    if (list->n == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 16;
        void **grown = cap <= SIZE_MAX / sizeof *grown ? realloc(list->blocks, cap * sizeof *grown)
                                                       : NULL;
        if (!grown) {
            free(block);
            return NULL;
        }
        list->blocks = grown;
        list->cap = cap;
    }
    list->blocks[list->n++] = block;
    return block;
}

void *lp_block_list_alloc(lp_block_list *list, size_t bytes)
{
    return lp_block_list_adopt(list, malloc(bytes ? bytes : 1));
}

void lp_block_list_free(lp_block_list *list)
{
    for (size_t i = 0; i < list->n; i++)
        free(list->blocks[i]);
    free(list->blocks);
    memset(list, 0, sizeof *list);
}
