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
#include <stdint.h>

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

/* ---- a struct and the arrays it owns in one allocation ----------------------------------------
 *
 * A report whose array sizes are known when it is made (an ablation, a logit lens, a run diff)
 * takes one block: the struct first, then each array on the arena's 64-byte alignment. One NULL
 * check when it is made and one free() when it is done, instead of a check and a free per array:
 *
 *   const lp_owned_array arrays[] = {
 *       LP_OWNED_ARRAY(lp_ablation, nll, n_layers * n_heads),
 *       LP_OWNED_ARRAY(lp_ablation, resid, n_layers * T * hidden),
 *   };
 *   lp_ablation *ab = lp_alloc_with_arrays(sizeof *ab, arrays, 2);   // free(ab) frees them all
 */
typedef struct lp_owned_array {
    size_t member;    /* offsetof the pointer member in the struct */
    int64_t count;    /* elements; negative is refused */
    size_t elem_size; /* sizeof one element */
} lp_owned_array;

#define LP_OWNED_ARRAY(type, member_, count_) \
    {offsetof(type, member_), (int64_t)(count_), sizeof *((type *)0)->member_}

/* The struct (struct_size bytes) and every array, zero-filled, each pointer member set to its
 * array; NULL when out of memory, a count is negative or the total overflows. The caller frees
 * the returned block with free(). The members are set by copying a void * into them: object
 * pointers share void *'s representation on every platform loupe builds for. */
void *lp_alloc_with_arrays(size_t struct_size, const lp_owned_array *arrays, size_t n_arrays);

/* The same for a struct the caller holds (a report filled in place): owner's members point into
 * one new block, which is the first array; free() that member to free them all. NULL, and owner
 * untouched, on the same failures. */
void *lp_alloc_arrays_of(void *owner, const lp_owned_array *arrays, size_t n_arrays);

/* ---- the blocks a long-lived struct allocates as it goes, freed together at its close ---------
 *
 * For what outlives a run and has no size known up front (a model's small vectors, a
 * tokenizer's string pool): each block is malloc'd and remembered, and one call frees them all.
 *
 *   lp_block_list owned = {0};
 *   float *norm = lp_block_list_alloc(&owned, n * sizeof *norm);  // NULL when out of memory
 *   if (!lp_block_list_adopt(&owned, decoded)) ...                // decoded is freed then
 *   lp_block_list_free(&owned);                                   // every block, and the list
 */
typedef struct lp_block_list {
    void **blocks; /* [cap], the first n set: each owned by the list */
    size_t n, cap;
} lp_block_list;

/* Takes block (malloc'd, or NULL) into the list and returns it; NULL when block is NULL or the
 * list cannot grow, and then block is freed: it has an owner either way. */
void *lp_block_list_adopt(lp_block_list *list, void *block);
/* A new block of bytes (at least one, so NULL always means out of memory), owned by the list. */
void *lp_block_list_alloc(lp_block_list *list, size_t bytes);
/* Frees every block and the list's own array; list is left empty, ready for reuse. */
void lp_block_list_free(lp_block_list *list);

#endif
