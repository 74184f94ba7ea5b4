/* gpt-oss's experts as released: each matrix stack is a pair of safetensors tensors,
 * "<P>experts.<stem>_blocks" and "<P>experts.<stem>_scales", bound as one MXFP4 matrix per expert.
 *
 *   blocks  U8 [E, rows, G, 16] (or F4 [E, rows, G, 32]): 32 E2M1 values a block of the row's
 *           G * 32 inputs, two a byte, value 2j in the low nibble of byte j and 2j + 1 in the high
 *   scales  U8 or F8_E8M0 [E, rows, G]: the block's exponent, value = e2m1 * 2^(e - 127)
 *
 * Rows are output features, as in a weight matrix [out, in] (transformers' convert_moe_packed_
 * tensors transposes after dequantizing to get its [E, in, out] parameters). P is the stem of the
 * layer's router tensor ("model.layers.3.mlp." for "model.layers.3.mlp.router.weight"), so any
 * class prefix, or none, is found as the checkpoint spells it.
 *
 * The kernels read GGUF's MXFP4 (ggml's block {u8 e; u8 qs[16]}, values 0..15 in the low nibbles
 * and 16..31 in the high ones), so each expert's matrix is repacked once at load into a buffer
 * of that layout, which the model owns: the same 4.25 bits a value, every value and scale kept
 * exactly. The cost owned up to: the experts then live in memory rather than in the mmap
 * (gpt-oss-20b: 24 layers x 32 experts x (5760 + 2880) x 2880 values x 17/32 bytes = 9.5 GiB),
 * where a kernel reading the split form in place would borrow them. */
#include "trace/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "inspect/formats/quant.h"
#include "trace/forward/model_internal.h"

/* The stem of the pair that holds this role's matrices, as gpt-oss names its experts. */
static const char *pair_stem(lp_role role)
{
    switch (role) {
    case LP_ROLE_EXPERT_GATE_UP: return "gate_up_proj";
    case LP_ROLE_EXPERT_GATE: return "gate_proj";
    case LP_ROLE_EXPERT_UP: return "up_proj";
    case LP_ROLE_EXPERT_DOWN: return "down_proj";
    default: return NULL;
    }
}

/* "<P>experts.<stem><suffix>" from the router's name "<P><router>.weight"; false when the layer
 * has no router or the name does not fit. */
static bool pair_name(const lp_model *m, int layer, const char *stem, const char *suffix,
                      char *out, size_t size)
{
    const lp_tensor *router = lp_weights_find(m->weights, LP_ROLE_ROUTER, layer, -1, false);
    if (!router)
        return false;
    const char *last = strrchr(router->name, '.');
    size_t stem_len = 0;
    for (const char *p = router->name; last && p < last; p++)
        if (*p == '.')
            stem_len = (size_t)(p - router->name) + 1;
    int n = snprintf(out, size, "%.*sexperts.%s%s", (int)stem_len, router->name, stem, suffix);
    return n > 0 && (size_t)n < size;
}

/* "[4, 7, 3, 16]" */
static const char *shape_text(const lp_tensor *t, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < t->n_dims && used < size; d++) {
        int n = snprintf(buf + used, size - used, "%s%lld", d ? ", " : "[", (long long)t->shape[d]);
        used += n > 0 ? (size_t)n : 0;
    }
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

/* The pair's shapes and dtypes against what the layer expects: E experts of [rows, cols]. */
static lp_status check_pair(const lp_model *m, const lp_tensor *blocks, const lp_tensor *scales,
                            int64_t rows, int64_t cols, lp_error *err)
{
    const char *path = lp_weights_path(m->weights);
    char shape[96];
    int64_t per_block = blocks->dtype == LP_DTYPE_F4_E2M1 ? 32 : 16; /* last dim */
    if (blocks->dtype != LP_DTYPE_U8 && blocks->dtype != LP_DTYPE_F4_E2M1)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': dtype %s, expected U8 or F4",
                            path, blocks->name, lp_dtype_name(blocks->dtype));
    if (scales->dtype != LP_DTYPE_U8 && scales->dtype != LP_DTYPE_F8_E8M0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': dtype %s, expected U8 or F8_E8M0",
                            path, scales->name, lp_dtype_name(scales->dtype));
    if (cols % 32 != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': rows of %lld inputs are not whole 32-value MXFP4 blocks",
                            path, blocks->name, (long long)cols);
    int64_t E = m->arch.n_experts, G = cols / 32;
    if (blocks->n_dims != 4 || blocks->shape[0] != E || blocks->shape[1] != rows ||
        blocks->shape[2] != G || blocks->shape[3] != per_block)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': shape %s, expected [%lld, %lld, %lld, %lld] (experts, "
                            "rows, blocks, %s)",
                            path, blocks->name, shape_text(blocks, shape, sizeof shape),
                            (long long)E, (long long)rows, (long long)G, (long long)per_block,
                            blocks->dtype == LP_DTYPE_U8 ? "bytes" : "values");
    if (scales->n_dims != 3 || scales->shape[0] != E || scales->shape[1] != rows ||
        scales->shape[2] != G)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': shape %s, expected [%lld, %lld, %lld] (experts, rows, "
                            "blocks) as its blocks '%s'",
                            path, scales->name, shape_text(scales, shape, sizeof shape),
                            (long long)E, (long long)rows, (long long)G, blocks->name);
    return LP_OK;
}

lp_status lp_mxfp4_pair_bind(lp_model *m, lp_role role, int layer, int expert, int64_t rows,
                             int64_t cols, lp_matrix *out, bool *found, lp_error *err)
{
    *found = false;
    const char *stem = pair_stem(role);
    char blocks_name[512], scales_name[512];
    if (!stem || expert < 0 || rows <= 0 || cols <= 0 ||
        !pair_name(m, layer, stem, "_blocks", blocks_name, sizeof blocks_name) ||
        !pair_name(m, layer, stem, "_scales", scales_name, sizeof scales_name))
        return LP_OK;
    const lp_tensor *blocks = lp_weights_find_name(m->weights, blocks_name);
    const lp_tensor *scales = lp_weights_find_name(m->weights, scales_name);
    if (!blocks && !scales)
        return LP_OK;
    *found = true;
    if (!blocks || !scales)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s' has no '%s' beside it",
                            lp_weights_path(m->weights), blocks ? blocks_name : scales_name,
                            blocks ? scales_name : blocks_name);
    lp_status st = check_pair(m, blocks, scales, rows, cols, err);
    if (st != LP_OK)
        return st;
    /* the readers checked n_bytes against the files; these spans lie inside them */
    int64_t G = cols / 32;
    uint64_t n_blocks = (uint64_t)rows * (uint64_t)G, bytes;
    if (!lp_mul_u64(n_blocks, 17, &bytes) || (uint64_t)expert >= (uint64_t)m->arch.n_experts ||
        blocks->n_bytes < (uint64_t)(expert + 1) * n_blocks * 16 ||
        scales->n_bytes < (uint64_t)(expert + 1) * n_blocks)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': too short for expert %d",
                            lp_weights_path(m->weights), blocks->name, expert);
    const uint8_t *q = (const uint8_t *)blocks->data + (uint64_t)expert * n_blocks * 16;
    const uint8_t *e = (const uint8_t *)scales->data + (uint64_t)expert * n_blocks;
    uint8_t *packed = malloc((size_t)bytes);
    if (!packed)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory repacking '%s' expert %d (%llu bytes)",
                            blocks->name, expert, (unsigned long long)bytes);
    for (uint64_t b = 0; b < n_blocks; b++)
        lp_mxfp4_block_from_split(q + 16 * b, e[b], packed + 17 * b);
    *out = (lp_matrix){LP_DTYPE_MXFP4, packed, rows, cols, (uint64_t)G * 17, false};
    return LP_OK;
}
