/* Attention masks as the engine builds them: for each (batch item, query row) the half-open range
 * of keys it may see. Every mask loupe supports (causal, sliding window, left/right padding) is an
 * interval per row, so the kernels never need a T x T mask.
 *
 * Conventions (see README, "Mask conventions"):
 *  - Query i of n_q sits at absolute position q_pos0 + i; key j at position j. Prefill has
 *    q_pos0 = 0 and n_q = n_k; decode and chunked prefill have n_q < n_k with q_pos0 = n_k - n_q:
 *    the causal diagonal is aligned bottom-right.
 *  - Causal: key position <= query position.
 *  - A window of W: query at p sees keys p-W+1 .. p, i.e. W keys including itself.
 *  - Padding: keys at positions < pad_left or >= n_k - pad_right (of that batch item) are masked;
 *    query rows of padding positions see nothing (fully masked rows, output zero).
 *
 *   lp_mask_spec mask = lp_mask_causal(n_q, n_k);
 *   mask.window = 4096;
 *   int64_t lo, hi;
 *   lp_mask_row_range(&mask, 0, i, &lo, &hi);   // keys [lo, hi) are visible to query row i
 */
#ifndef LP_TRACE_MASK_H
#define LP_TRACE_MASK_H

#include <stdbool.h>
#include <stdint.h>

/* Deliberately broken masks, so the leak checker can prove it catches each bug. */
typedef enum lp_mask_fault {
    LP_MASK_FAULT_NONE,
    LP_MASK_FAULT_OFF_BY_ONE, /* each query also sees the next key */
    LP_MASK_FAULT_TRANSPOSED, /* key >= query instead of key <= query */
    LP_MASK_FAULT_NO_MASK,    /* every key visible */
    LP_MASK_FAULT_WINDOW_PLUS_ONE, /* window admits W+1 keys */
    LP_MASK_FAULT_PAD_AXIS,   /* padding applied to the query axis instead of the key axis */
    LP_MASK_FAULT_COUNT
} lp_mask_fault;

typedef struct lp_mask_spec {
    int64_t n_q;
    int64_t n_k;
    int64_t q_pos0;    /* absolute position of query row 0 (n_k - n_q for bottom-right) */
    int64_t window;    /* 0 = no sliding window */
    bool causal;       /* false only for encoder-style full attention */
    const int64_t *pad_left;  /* per batch item, or NULL = none */
    const int64_t *pad_right; /* per batch item, or NULL = none */
    lp_mask_fault fault;
} lp_mask_spec;

lp_mask_spec lp_mask_causal(int64_t n_q, int64_t n_k);

/* Keys [*lo, *hi) are visible to query row `row` of batch item `batch`; *lo == *hi for a fully
 * masked row. */
void lp_mask_row_range(const lp_mask_spec *mask, int64_t batch, int64_t row, int64_t *lo,
                       int64_t *hi);

/* The definition, cell by cell, without the fault: used by the checker to compare against. */
bool lp_mask_allows_reference(const lp_mask_spec *mask, int64_t batch, int64_t row, int64_t key);

const char *lp_mask_fault_name(lp_mask_fault fault);
lp_mask_fault lp_mask_fault_from_name(const char *name); /* COUNT when unknown */

#endif
