/* Per-row key ranges for causal, sliding-window and padded attention, and their faulty twins. */
#include "trace/kernels/mask.h"

#include <string.h>

#include "core/names.h"

lp_mask_spec lp_mask_causal(int64_t n_q, int64_t n_k)
{
    lp_mask_spec mask;
    memset(&mask, 0, sizeof mask);
    mask.n_q = n_q;
    mask.n_k = n_k;
    mask.q_pos0 = n_k - n_q;
    mask.causal = true;
    return mask;
}

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

void lp_mask_row_range(const lp_mask_spec *mask, int64_t batch, int64_t row, int64_t *lo,
                       int64_t *hi)
{
    int64_t pos = mask->q_pos0 + row;
    int64_t pad_left = mask->pad_left ? mask->pad_left[batch] : 0;
    int64_t pad_right = mask->pad_right ? mask->pad_right[batch] : 0;
    int64_t first_real = pad_left, end_real = mask->n_k - pad_right;
    int64_t k_lo = 0, k_hi = mask->n_k;

    switch (mask->fault) {
    case LP_MASK_FAULT_NO_MASK:
        *lo = 0;
        *hi = mask->n_k;
        return;
    case LP_MASK_FAULT_TRANSPOSED:
        k_lo = pos;
        k_hi = mask->n_k;
        break;
    default:
        if (mask->causal)
            k_hi = pos + 1 + (mask->fault == LP_MASK_FAULT_OFF_BY_ONE ? 1 : 0);
        if (mask->window > 0)
            k_lo = pos - mask->window + 1 - (mask->fault == LP_MASK_FAULT_WINDOW_PLUS_ONE ? 1 : 0);
        break;
    }
    if (mask->fault == LP_MASK_FAULT_PAD_AXIS) {
        /* The classic broadcast bug: the padding vector lands on the query axis, so padded rows go
         * blind and padded keys stay visible. */
        if (pos < first_real || pos >= end_real)
            k_hi = k_lo;
    } else {
        if (pos < first_real || pos >= end_real) {
            k_hi = k_lo; /* a padding query attends to nothing */
        } else {
            if (k_lo < first_real)
                k_lo = first_real;
            if (k_hi > end_real)
                k_hi = end_real;
        }
    }
    k_lo = clamp(k_lo, 0, mask->n_k);
    k_hi = clamp(k_hi, 0, mask->n_k);
    if (k_hi < k_lo)
        k_hi = k_lo;
    *lo = k_lo;
    *hi = k_hi;
}

bool lp_mask_allows_reference(const lp_mask_spec *mask, int64_t batch, int64_t row, int64_t key)
{
    int64_t pos = mask->q_pos0 + row;
    int64_t pad_left = mask->pad_left ? mask->pad_left[batch] : 0;
    int64_t pad_right = mask->pad_right ? mask->pad_right[batch] : 0;
    if (key < 0 || key >= mask->n_k)
        return false;
    if (pos < pad_left || pos >= mask->n_k - pad_right)
        return false;
    if (key < pad_left || key >= mask->n_k - pad_right)
        return false;
    if (mask->causal && key > pos)
        return false;
    if (mask->window > 0 && pos - key >= mask->window)
        return false;
    return true;
}

static const lp_name_entry fault_names[] = {
    {LP_MASK_FAULT_NONE, "none"},
    {LP_MASK_FAULT_OFF_BY_ONE, "off-by-one"},
    {LP_MASK_FAULT_TRANSPOSED, "transposed"},
    {LP_MASK_FAULT_NO_MASK, "no-mask"},
    {LP_MASK_FAULT_WINDOW_PLUS_ONE, "window+1"},
    {LP_MASK_FAULT_PAD_AXIS, "pad-axis"},
};

LP_NAMES_DEFINE(lp_mask_fault_name, lp_mask_fault_from_name, lp_mask_fault, fault_names, "unknown",
                false, LP_MASK_FAULT_COUNT)
