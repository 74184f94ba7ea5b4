/* `loupe export`: one run of the trace store as a safetensors or npz file that safetensors,
 * numpy.load and PyTorch read without loupe. Streams: maps go out a row at a time, so memory is a
 * row plus the small tables (statistics, token ids, predictions), whatever the run's size.
 *
 * Tensors, in this order (little-endian, row-major):
 *   attention                  [n_layers, n_heads, n_q, n_k] f16|f32, when every head was stored
 *                              with one shape and dtype; else one per stored head:
 *   attention.layer_L.head_H   [n_q, n_k]
 *   head_stats.NAME            [n_layers, n_heads] f64 (NaN where missing), one per statistic
 *   tokens                     [n_tokens] i32 token ids (-1 where missing)
 *   predictions.token_id       [n_tokens, k] i32, predictions.prob / .logit [n_tokens, k] f64
 *   logits                     [n_tokens, vocab] f32, when the run stored full logits (NaN rows
 *                              where a position has none)
 * Metadata (string -> string): every column of the runs row ("id", "model_path", "arch_json",
 * ...), "tokens" (a JSON array of the token texts), "loupe_export" (this layout's version).
 *
 * safetensors: u64 header length N, N bytes of JSON {"__metadata__": {...}, name: {"dtype",
 * "shape", "data_offsets": [begin, end]}} space-padded so the data starts 8-aligned, the data.
 * npz: a zip of stored (uncompressed) members NAME.npy (format 1.0, header padded to 64 bytes) and
 * metadata.json, with ZIP64 sizes and offsets throughout (any size; render/export_write.c). */
#define _POSIX_C_SOURCE 200809L
#include "render/render.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "core/checked.h"
#include "core/dtype.h"
#include "render/export_internal.h"
#include "render/render_internal.h"

lp_export_format lp_export_format_from_path(const char *path)
{
    size_t n = strlen(path);
    if (n > 12 && strcasecmp(path + n - 12, ".safetensors") == 0)
        return LP_EXPORT_SAFETENSORS;
    if (n > 4 && strcasecmp(path + n - 4, ".npz") == 0)
        return LP_EXPORT_NPZ;
    return LP_EXPORT_COUNT;
}

/* ---- the plan: which tensors, with their shapes ----------------------------------------------- */

static lp_status add_tensor(lp_export_job *j, const lp_export_tensor *t, lp_error *err)
{
    if (j->n == j->cap) {
        int64_t cap = j->cap ? 2 * j->cap : 32;
        lp_export_tensor *grown = realloc(j->t, (size_t)cap * sizeof *grown);
        if (!grown)
            return lp_error_set(err, LP_ERR_NOMEM, "export: out of memory (%lld tensors)",
                                (long long)cap);
        j->t = grown;
        j->cap = cap;
    }
    lp_export_tensor *out = &j->t[j->n++];
    *out = *t;
    uint64_t elems = 1;
    for (int d = 0; d < t->n_dims; d++)
        if (!lp_mul_u64(elems, (uint64_t)t->shape[d], &elems))
            return lp_error_set(err, LP_ERR_RANGE, "export: tensor '%s' overflows", t->name);
    if (!lp_mul_u64(elems, lp_dtype_get(t->dtype)->block_bytes, &out->bytes))
        return lp_error_set(err, LP_ERR_RANGE, "export: tensor '%s' overflows", t->name);
    return LP_OK;
}

/* One tensor per stored head, or one stack when every head has a map of the same shape. */
static lp_status plan_attention(lp_export_job *j, lp_error *err)
{
    const lp_store_run *run = j->run;
    int64_t n_maps = 0, n_q = 0, n_k = 0, first = -1;
    int elem = 0;
    bool uniform = true;
    lp_status st = LP_OK;
    for (int64_t i = 0; i < run->n_layers * run->n_heads && st == LP_OK; i++) {
        lp_store_map *m;
        st = lp_store_map_open(j->db, run, i / run->n_heads, i % run->n_heads, &m, err);
        if (st == LP_ERR_NOT_FOUND) {
            st = LP_OK;
            uniform = false;
            continue;
        }
        if (st != LP_OK)
            break;
        int64_t q, k;
        lp_store_map_shape(m, &q, &k);
        int e = lp_store_map_elem_size(m);
        lp_store_map_close(m);
        if (first < 0) {
            first = i;
            n_q = q, n_k = k, elem = e;
        }
        uniform &= q == n_q && k == n_k && e == elem;
        lp_export_tensor t = {.kind = LP_EXPORT_ATTN_HEAD, .dtype = e == 2 ? LP_DTYPE_F16
                                                                           : LP_DTYPE_F32,
                              .n_dims = 2, .shape = {q, k}, .layer = i / run->n_heads,
                              .head = i % run->n_heads};
        snprintf(t.name, sizeof t.name, "attention.layer_%lld.head_%lld", (long long)t.layer,
                 (long long)t.head);
        st = add_tensor(j, &t, err);
        n_maps++;
    }
    if (st != LP_OK || !uniform || n_maps == 0)
        return st;
    j->n -= n_maps; /* every head, one shape: one [layers, heads, n_q, n_k] tensor instead */
    lp_export_tensor t = {.name = "attention", .kind = LP_EXPORT_ATTN_STACK,
                          .dtype = elem == 2 ? LP_DTYPE_F16 : LP_DTYPE_F32, .n_dims = 4,
                          .shape = {run->n_layers, run->n_heads, n_q, n_k}};
    j->attention_stacked = true;
    return add_tensor(j, &t, err);
}

static lp_status plan_tables(lp_export_job *j, lp_error *err)
{
    const lp_store_run *run = j->run;
    lp_status st = LP_OK;
    for (int s = 0; s < LP_STAT_COUNT && st == LP_OK; s++) {
        st = lp_store_read_head_stat(j->db, run, (lp_head_stat)s, &j->stats[s], err);
        if (st == LP_ERR_NOT_FOUND)
            return LP_OK; /* a run without head_stats */
        lp_export_tensor t = {.kind = LP_EXPORT_STAT, .dtype = LP_DTYPE_F64, .n_dims = 2,
                              .shape = {run->n_layers, run->n_heads}, .stat = s};
        snprintf(t.name, sizeof t.name, "head_stats.%s", lp_head_stat_name((lp_head_stat)s));
        if (st == LP_OK)
            st = add_tensor(j, &t, err);
    }
    return st;
}

/* Token ids, predictions and full logits, each when the run has them (LP_ERR_NOT_FOUND from the
 * store means the run has none: left out). */
static lp_status plan_outputs(lp_export_job *j, lp_error *err)
{
    lp_status st = lp_store_read_token_ids(j->db, j->run->id, &j->token_ids, &j->n_token_ids, err);
    lp_export_tensor tok = {.name = "tokens", .kind = LP_EXPORT_TOKENS, .dtype = LP_DTYPE_I32,
                            .n_dims = 1, .shape = {j->n_token_ids}};
    if (st == LP_OK)
        st = add_tensor(j, &tok, err);
    if (st != LP_OK && st != LP_ERR_NOT_FOUND)
        return st;
    static const struct {
        const char *name;
        lp_export_kind kind;
        lp_dtype dtype;
    } pred[] = {{"predictions.token_id", LP_EXPORT_PRED_ID, LP_DTYPE_I32},
                {"predictions.prob", LP_EXPORT_PRED_PROB, LP_DTYPE_F64},
                {"predictions.logit", LP_EXPORT_PRED_LOGIT, LP_DTYPE_F64}};
    st = lp_store_read_predictions(j->db, j->run, &j->pred, err);
    for (size_t i = 0; st == LP_OK && i < sizeof pred / sizeof pred[0]; i++) {
        lp_export_tensor t = {.kind = pred[i].kind, .dtype = pred[i].dtype, .n_dims = 2,
                              .shape = {j->pred.n_pos, j->pred.k}};
        snprintf(t.name, sizeof t.name, "%s", pred[i].name);
        st = add_tensor(j, &t, err);
    }
    if (st != LP_OK && st != LP_ERR_NOT_FOUND)
        return st;
    int64_t rows;
    st = lp_store_logits_shape(j->db, j->run, &rows, &j->vocab, err);
    lp_export_tensor lg = {.name = "logits", .kind = LP_EXPORT_LOGITS, .dtype = LP_DTYPE_F32,
                           .n_dims = 2, .shape = {j->run->n_tokens, j->vocab}};
    if (st == LP_OK)
        return add_tensor(j, &lg, err);
    return st == LP_ERR_NOT_FOUND ? LP_OK : st;
}

/* ---- streaming the data ----------------------------------------------------------------------- */


static lp_status emit_map(lp_export_job *j, int64_t layer, int64_t head, lp_error *err)
{
    lp_store_map *m;
    lp_status st = lp_store_map_open(j->db, j->run, layer, head, &m, err);
    if (st != LP_OK)
        return st;
    int64_t n_q, n_k;
    lp_store_map_shape(m, &n_q, &n_k);
    size_t row_bytes = (size_t)n_k * (size_t)lp_store_map_elem_size(m);
    unsigned char *row = malloc(row_bytes);
    if (!row)
        st = lp_error_set(err, LP_ERR_NOMEM, "export: out of memory (a row of %zu bytes)",
                          row_bytes);
    for (int64_t i = 0; i < n_q && st == LP_OK; i++) {
        st = lp_store_map_read_raw(m, i, row, err);
        if (st == LP_OK)
            lp_export_out(j, row, row_bytes);
    }
    free(row);
    lp_store_map_close(m);
    return st;
}

static lp_status emit_logits(lp_export_job *j, lp_error *err)
{
    float *row = malloc((size_t)j->vocab * sizeof *row);
    if (!row)
        return lp_error_set(err, LP_ERR_NOMEM, "export: out of memory (logits of %lld)",
                            (long long)j->vocab);
    lp_status st = LP_OK;
    for (int64_t pos = 0; pos < j->run->n_tokens && st == LP_OK; pos++) {
        st = lp_store_read_logits(j->db, j->run, pos, j->vocab, row, err);
        if (st == LP_OK)
            lp_export_out(j, row, (size_t)j->vocab * sizeof *row);
    }
    free(row);
    return st;
}

/* One tensor's bytes (the host is little-endian, as the store's blobs are). */
lp_status lp_export_emit(lp_export_job *j, const lp_export_tensor *t, lp_error *err)
{
    size_t cells = (size_t)(t->n_dims == 2 ? t->shape[0] * t->shape[1] : t->shape[0]);
    switch (t->kind) {
    case LP_EXPORT_ATTN_STACK: {
        lp_status st = LP_OK;
        for (int64_t i = 0; i < j->run->n_layers * j->run->n_heads && st == LP_OK; i++)
            st = emit_map(j, i / j->run->n_heads, i % j->run->n_heads, err);
        return st;
    }
    case LP_EXPORT_ATTN_HEAD: return emit_map(j, t->layer, t->head, err);
    case LP_EXPORT_STAT: lp_export_out(j, j->stats[t->stat], cells * sizeof(double)); break;
    case LP_EXPORT_TOKENS: lp_export_out(j, j->token_ids, cells * sizeof(int32_t)); break;
    case LP_EXPORT_PRED_ID: lp_export_out(j, j->pred.token_id, cells * sizeof(int32_t)); break;
    case LP_EXPORT_PRED_PROB: lp_export_out(j, j->pred.prob, cells * sizeof(double)); break;
    case LP_EXPORT_PRED_LOGIT: lp_export_out(j, j->pred.logit, cells * sizeof(double)); break;
    case LP_EXPORT_LOGITS: return emit_logits(j, err);
    }
    return LP_OK;
}

/* ---- metadata --------------------------------------------------------------------------------- */

static lp_status token_texts(lp_export_job *j, json_t *meta, lp_error *err)
{
    char **texts;
    int64_t n;
    lp_status st = lp_store_read_tokens(j->db, j->run->id, &texts, &n, err);
    if (st != LP_OK)
        return st;
    json_t *list = json_array();
    bool ok = true;
    for (int64_t i = 0; i < n; i++)
        lp_render_json_push(&ok, list, texts[i] ? lp_render_json_text(texts[i]) : json_null());
    lp_store_free_texts(texts, n);
    char *dump = ok ? json_dumps(list, JSON_COMPACT) : NULL;
    json_decref(list);
    if (dump)
        lp_render_json_set(&ok, meta, "tokens", json_string(dump));
    free(dump);
    return dump && ok ? LP_OK : lp_error_set(err, LP_ERR_NOMEM, "export: out of memory (tokens)");
}

/* The metadata object: the runs row, the token texts, the layout version. */
static lp_status build_metadata(lp_export_job *j, lp_error *err)
{
    char **keys, **values;
    int64_t n;
    lp_status st = lp_store_read_run_fields(j->db, j->run->id, &keys, &values, &n, err);
    if (st != LP_OK)
        return st;
    j->meta = json_object();
    bool ok = true;
    for (int64_t i = 0; i < n; i++)
        lp_render_json_set(&ok, j->meta, keys[i], lp_render_json_text(values[i]));
    lp_store_free_texts(keys, n);
    lp_store_free_texts(values, n);
    lp_render_json_set(&ok, j->meta, "loupe_export", json_string("1"));
    if (!ok)
        return lp_error_set(err, LP_ERR_NOMEM, "export: out of memory (metadata)");
    return token_texts(j, j->meta, err);
}

/* ---- the whole file --------------------------------------------------------------------------- */

static void job_free(lp_export_job *j)
{
    free(j->t);
    free(j->token_ids);
    for (int s = 0; s < LP_STAT_COUNT; s++)
        free(j->stats[s]);
    lp_store_predictions_clear(&j->pred);
    json_decref(j->meta);
}

static lp_status write_file(lp_export_job *j, lp_export_format format, const char *tmp,
                            lp_error *err)
{
    j->f = fopen(tmp, "wb");
    if (!j->f)
        return lp_error_set(err, LP_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    lp_status st = format == LP_EXPORT_NPZ ? lp_export_write_npz(j, err)
                                           : lp_export_write_safetensors(j, err);
    bool bad = j->write_failed || ferror(j->f) != 0;
    if (fclose(j->f) != 0)
        bad = true;
    j->f = NULL;
    if (st == LP_OK && bad)
        st = lp_error_set(err, LP_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    return st;
}

lp_status lp_render_export(lp_store *db, const lp_store_run *run, const char *path,
                           lp_export_report *report, lp_error *err)
{
    lp_export_format format = lp_export_format_from_path(path);
    if (format == LP_EXPORT_COUNT)
        return lp_error_set(err, LP_ERR_USAGE, "%s: unknown format (the extension must be "
                            ".safetensors or .npz)", path);
    lp_export_job j = {.db = db, .run = run, .emit = lp_export_emit};
    lp_status st = plan_attention(&j, err);
    if (st == LP_OK)
        st = plan_tables(&j, err);
    if (st == LP_OK)
        st = plan_outputs(&j, err);
    if (st == LP_OK)
        st = build_metadata(&j, err);
    char *tmp = st == LP_OK ? malloc(strlen(path) + 5) : NULL;
    if (st == LP_OK && !tmp)
        st = lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", path);
    if (st == LP_OK) {
        snprintf(tmp, strlen(path) + 5, "%s.tmp", path);
        st = write_file(&j, format, tmp, err);
        if (st == LP_OK && rename(tmp, path) != 0)
            st = lp_error_set(err, LP_ERR_IO, "%s: cannot rename: %s", path, strerror(errno));
        if (st != LP_OK)
            unlink(tmp);
    }
    if (st == LP_OK && report)
        *report = (lp_export_report){j.n, j.written, j.attention_stacked};
    free(tmp);
    job_free(&j);
    return st;
}
