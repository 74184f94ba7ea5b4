/* Bump allocator for per-run scratch: one block sized up front, freed at once.
 *
 *   lp_arena *arena;
 *   if (lp_arena_create(64 << 20, &arena, &err) != LP_OK) ...
 *   float *scores = lp_arena_alloc(arena, n * sizeof(float));   // 64-byte aligned, NULL if full
 *   size_t mark = lp_arena_mark(arena); ... lp_arena_reset_to(arena, mark);
 *   lp_arena_destroy(arena);
 */
#ifndef LP_CORE_ARENA_H
#define LP_CORE_ARENA_H

#include <stddef.h>

#include "core/error.h"

typedef struct lp_arena lp_arena;

lp_status lp_arena_create(size_t capacity, lp_arena **out, lp_error *err);
void lp_arena_destroy(lp_arena *arena);
/* 64-byte aligned (a cache line, and enough for AVX-512 loads); NULL when the arena is full. */
void *lp_arena_alloc(lp_arena *arena, size_t bytes);
/* Zero-filled variant. */
void *lp_arena_calloc(lp_arena *arena, size_t count, size_t size);
size_t lp_arena_mark(const lp_arena *arena);
void lp_arena_reset_to(lp_arena *arena, size_t mark);
size_t lp_arena_used(const lp_arena *arena);
size_t lp_arena_capacity(const lp_arena *arena);

#endif
