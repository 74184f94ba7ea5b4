/* One head's attention map, max-pooled to display cells while it streams out of the store a row at
 * a time, with each cell told allowed, masked, leaking or bad by the run's mask. */
#include "render/render.h"

#include <stdlib.h>
#include <string.h>

#include "trace/kernels/mask.h"

void lp_pooled_map_free(lp_pooled_map *map)
{
    free(map->allowed_max);
    free(map->masked_max);
    free(map->flags);
    memset(map, 0, sizeof *map);
}

/* Fold one row of probabilities (the shown keys only, row[0] = key col0) into the pooled grid.
 * Shown keys [lo, hi) are allowed. */
static void pool_row(lp_pooled_map *map, const float *row, int64_t n_cols, int64_t pooled_row,
                     int64_t lo, int64_t hi, float leak_threshold)
{
    float *amax = map->allowed_max + pooled_row * map->cols;
    float *mmax = map->masked_max + pooled_row * map->cols;
    uint8_t *flags = map->flags + pooled_row * map->cols;
    int64_t block = map->block;
    for (int64_t j = 0; j < n_cols; j++) {
        float v = row[j];
        int64_t c = j / block;
        if (!(v >= 0.0f)) { /* NaN or negative: not a probability */
            flags[c] |= LP_CELL_NAN;
            map->n_bad_cells++;
            continue;
        }
        if (j >= lo && j < hi) {
            flags[c] |= LP_CELL_ALLOWED;
            if (v > amax[c])
                amax[c] = v;
            if (v > map->max_value)
                map->max_value = v;
        } else {
            flags[c] |= LP_CELL_MASKED;
            if (v > mmax[c])
                mmax[c] = v;
            if (v > leak_threshold) {
                flags[c] |= LP_CELL_LEAK;
                map->n_leak_cells++;
                if (v > map->max_value)
                    map->max_value = v;
            }
        }
    }
}

/* The window of positions shown: keys [pos_lo, pos_hi), and the query rows whose positions fall
 * there (query row i is at position n_k - n_q + i); then the pooled grid for it. */
static lp_status shape_map(lp_pooled_map *map, int64_t n_q, int64_t n_k, int64_t max_cells,
                           int64_t pos_lo, int64_t pos_hi, lp_error *err)
{
    int64_t q_pos0 = n_k - n_q;
    if (pos_hi == 0)
        pos_hi = n_k;
    if (pos_lo < 0 || pos_lo >= pos_hi || pos_hi > n_k)
        return lp_error_set(err, LP_ERR_RANGE,
                            "--range %lld:%lld: outside the map's positions 0:%lld (need "
                            "0 <= A < B <= %lld)",
                            (long long)pos_lo, (long long)pos_hi, (long long)n_k, (long long)n_k);
    int64_t row0 = pos_lo > q_pos0 ? pos_lo - q_pos0 : 0;
    int64_t row_end = pos_hi - q_pos0;
    if (row_end <= row0)
        return lp_error_set(err, LP_ERR_RANGE,
                            "--range %lld:%lld: no query in it (the queries are positions "
                            "%lld:%lld)",
                            (long long)pos_lo, (long long)pos_hi, (long long)q_pos0, (long long)n_k);
    int64_t shown_q = row_end - row0, shown_k = pos_hi - pos_lo;
    int64_t longest = shown_q > shown_k ? shown_q : shown_k;
    int64_t block = (longest + max_cells - 1) / max_cells;
    *map = (lp_pooled_map){.n_q = n_q, .n_k = n_k, .block = block, .row0 = row0, .col0 = pos_lo,
                           .shown_q = shown_q, .shown_k = shown_k,
                           .rows = (shown_q + block - 1) / block,
                           .cols = (shown_k + block - 1) / block};
    size_t n_cells = (size_t)(map->rows * map->cols); /* <= max_cells^2, bounded by the caller */
    map->allowed_max = calloc(n_cells, sizeof *map->allowed_max);
    map->masked_max = calloc(n_cells, sizeof *map->masked_max);
    map->flags = calloc(n_cells, 1);
    return LP_OK;
}

/* Only one row of the map is in memory at a time, and only its shown keys are read. */
static lp_status stream_rows(lp_store_map *sm, const lp_store_run *run, int64_t layer,
                             float leak_threshold, float *row, lp_pooled_map *map, lp_error *err)
{
    lp_mask_spec mask = lp_mask_causal(map->n_q, map->n_k);
    mask.causal = run->causal;
    mask.window = lp_store_run_window(run, layer);
    for (int64_t i = map->row0; i < map->row0 + map->shown_q; i++) {
        lp_status st = lp_store_map_read(sm, i, map->col0, map->shown_k, row, err);
        if (st != LP_OK)
            return st;
        int64_t lo, hi;
        lp_mask_row_range(&mask, 0, i, &lo, &hi);
        pool_row(map, row, map->shown_k, (i - map->row0) / map->block, lo - map->col0,
                 hi - map->col0, leak_threshold);
    }
    return LP_OK;
}

lp_status lp_render_read_map(lp_store *db, const lp_store_run *run, int64_t layer, int64_t head,
                             int64_t max_cells, double leak_threshold, int64_t pos_lo,
                             int64_t pos_hi, lp_pooled_map *map, lp_error *err)
{
    memset(map, 0, sizeof *map);
    if (max_cells < 1)
        return lp_error_set(err, LP_ERR_USAGE, "map size %lld: must be at least 1 cell",
                            (long long)max_cells);
    lp_store_map *sm;
    lp_status st = lp_store_map_open(db, run, layer, head, &sm, err);
    if (st != LP_OK)
        return st;
    int64_t n_q, n_k;
    lp_store_map_shape(sm, &n_q, &n_k);
    float *row = NULL;
    st = shape_map(map, n_q, n_k, max_cells, pos_lo, pos_hi, err);
    if (st == LP_OK) {
        row = malloc((size_t)map->shown_k * sizeof *row);
        if (!map->allowed_max || !map->masked_max || !map->flags || !row)
            st = lp_error_set(err, LP_ERR_NOMEM, "attention layer %lld head %lld: out of memory",
                              (long long)layer, (long long)head);
    }
    if (st == LP_OK)
        st = stream_rows(sm, run, layer, (float)leak_threshold, row, map, err);
    free(row);
    lp_store_map_close(sm);
    if (st != LP_OK)
        lp_pooled_map_free(map);
    return st;
}
