/* The tensor catalogue: the lp_weights handle, its mapped files, the tensors the readers report,
 * the lookup indexes by name and role, and rows converted to float32. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "inspect/weights/weights_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect/formats/gguf.h"
#include "inspect/formats/quant.h"

_Static_assert(LP_MAX_DIMS == LP_TENSOR_DESC_MAX_DIMS,
               "a reader's descriptor must hold every shape the catalogue holds");

lp_weights *lp_weights_new(const char *path, lp_weights_format format, lp_error *err)
{
    lp_weights *w = calloc(1, sizeof *w);
    if (w)
        w->path = strdup(path);
    if (!w || !w->path) {
        free(w);
        lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        return NULL;
    }
    w->format = format;
    return w;
}

lp_status lp_weights_add_file(lp_weights *w, const char *path, int *index, lp_error *err)
{
    lp_mapped_file *files = realloc(w->files, (size_t)(w->n_files + 1) * sizeof *files);
    if (!files)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", path);
    w->files = files;
    lp_status status = lp_map_file(path, &w->files[w->n_files], err);
    if (status != LP_OK)
        return status;
    *index = w->n_files++;
    return LP_OK;
}

static lp_status grow_tensors(lp_weights *w, lp_error *err)
{
    size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
    lp_tensor *tensors = realloc(w->tensors, cap * sizeof *tensors);
    if (!tensors)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory for %zu tensors", cap);
    w->tensors = tensors;
    w->cap_tensors = cap;
    return LP_OK;
}

lp_status lp_weights_add_tensor(lp_weights *w, int file_index, const lp_tensor_desc *desc,
                                lp_error *err)
{
    lp_status status;
    if (w->n_tensors == w->cap_tensors && (status = grow_tensors(w, err)) != LP_OK)
        return status;
    char *name = strdup(desc->name);
    if (!name)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory for tensor '%s'", desc->name);
    lp_tensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = desc->dtype;
    t->n_dims = desc->n_dims;
    memcpy(t->shape, desc->shape, sizeof t->shape);
    t->n_elements = desc->n_elements;
    t->n_bytes = desc->n_bytes;
    t->data = desc->data;
    t->file_index = file_index;
    t->file_offset = desc->file_offset;
    w->n_tensors++;
    lp_role_assign(t, w->arch ? w->arch->family : "", w->format);
    return LP_OK;
}

static lp_status add_to_file(void *ctx, const lp_tensor_desc *tensor, lp_error *err)
{
    lp_weights_file_sink *file = ctx;
    return lp_weights_add_tensor(file->weights, file->file_index, tensor, err);
}

lp_tensor_sink lp_weights_sink(lp_weights_file_sink *file)
{
    return (lp_tensor_sink){file, add_to_file};
}

const char *lp_weights_file_name(const lp_weights *w, int file_index)
{
    if (w->gguf)
        return lp_path_basename(lp_gguf_path(w->gguf));
    if (file_index < 0 || file_index >= w->n_files)
        return "?";
    return lp_path_basename(w->files[file_index].path);
}

int lp_weights_file_count(const lp_weights *w) { return w->gguf ? 1 : w->n_files; }

const char *lp_weights_arch_note(const lp_weights *w) { return w->arch_note; }

/* ---- lookup indexes -------------------------------------------------------------------------- */

/* The comparators see pointers into w->tensors, so no global context is needed (qsort has no
 * context argument in C11) and opening weights stays thread-safe. Ties keep file order. */
static int cmp_name(const void *a, const void *b)
{
    const lp_tensor *x = *(const lp_tensor *const *)a, *y = *(const lp_tensor *const *)b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x < y ? -1 : 1;
}

static int cmp_key(lp_role ra, int la, int ea, bool ba, const lp_tensor *y)
{
    if (ra != y->role)
        return ra < y->role ? -1 : 1;
    if (la != y->layer)
        return la < y->layer ? -1 : 1;
    if (ea != y->expert)
        return ea < y->expert ? -1 : 1;
    if (ba != y->is_bias)
        return ba ? 1 : -1;
    return 0;
}

static int cmp_role(const void *a, const void *b)
{
    const lp_tensor *x = *(const lp_tensor *const *)a, *y = *(const lp_tensor *const *)b;
    int c = cmp_key(x->role, x->layer, x->expert, x->is_bias, y);
    if (c)
        return c;
    return x < y ? -1 : 1;
}

/* Two tensors of one name: in two shards, or twice in one file. */
static lp_status check_unique_names(const lp_weights *w, lp_error *err)
{
    for (size_t i = 1; i < w->n_tensors; i++) {
        const lp_tensor *a = &w->tensors[w->by_name[i - 1]];
        const lp_tensor *b = &w->tensors[w->by_name[i]];
        if (strcmp(a->name, b->name) != 0)
            continue;
        if (a->file_index != b->file_index)
            return lp_error_set(err, LP_ERR_FORMAT, "tensor '%s' appears in both %s and %s",
                                a->name, lp_weights_file_name(w, a->file_index),
                                lp_weights_file_name(w, b->file_index));
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s' appears twice",
                            lp_weights_file_name(w, a->file_index), a->name);
    }
    return LP_OK;
}

lp_status lp_weights_index(lp_weights *w, lp_error *err)
{
    size_t n = w->n_tensors;
    const lp_tensor **order = malloc((n ? n : 1) * sizeof *order);
    free(w->by_name);
    free(w->by_role);
    w->by_name = malloc((n ? n : 1) * sizeof *w->by_name);
    w->by_role = malloc((n ? n : 1) * sizeof *w->by_role);
    if (!order || !w->by_name || !w->by_role) {
        free(order);
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory indexing %zu tensors", n);
    }
    for (size_t i = 0; i < n; i++)
        order[i] = &w->tensors[i];
    qsort(order, n, sizeof *order, cmp_name);
    for (size_t i = 0; i < n; i++)
        w->by_name[i] = (size_t)(order[i] - w->tensors);
    qsort(order, n, sizeof *order, cmp_role);
    for (size_t i = 0; i < n; i++)
        w->by_role[i] = (size_t)(order[i] - w->tensors);
    free(order);
    return check_unique_names(w, err);
}

const lp_tensor *lp_weights_find_name(const lp_weights *w, const char *name)
{
    size_t lo = 0, hi = w->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, w->tensors[w->by_name[mid]].name);
        if (c == 0)
            return &w->tensors[w->by_name[mid]];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const lp_tensor *lp_weights_find(const lp_weights *w, lp_role role, int layer, int expert,
                                 bool is_bias)
{
    size_t lo = 0, hi = w->n_tensors;
    while (lo < hi) { /* first index whose key is >= the one asked for */
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_key(role, layer, expert, is_bias, &w->tensors[w->by_role[mid]]) > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < w->n_tensors &&
        cmp_key(role, layer, expert, is_bias, &w->tensors[w->by_role[lo]]) == 0)
        return &w->tensors[w->by_role[lo]];
    return NULL;
}

/* ---- the handle ------------------------------------------------------------------------------ */

void lp_weights_close(lp_weights *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_tensors; i++) /* the names are the catalogue's copies */
        free((char *)w->tensors[i].name);
    free(w->tensors);
    free(w->by_name);
    free(w->by_role);
    for (int i = 0; i < w->n_files; i++) {
        if (w->files_borrowed)
            free(w->files[i].path);
        else
            lp_unmap_file(&w->files[i]);
    }
    free(w->files);
    if (w->gguf)
        lp_gguf_close(w->gguf);
    free(w->arch);
    free(w->config_path);
    free(w->path);
    free(w);
}

lp_weights_format lp_weights_format_of(const lp_weights *w) { return w->format; }

const char *lp_weights_format_name(lp_weights_format format)
{
    switch (format) {
    case LP_FORMAT_SAFETENSORS: return "safetensors";
    case LP_FORMAT_GGUF: return "gguf";
    case LP_FORMAT_LLAMA2C: return "llama2c";
    default: return "unknown";
    }
}

size_t lp_weights_count(const lp_weights *w) { return w->n_tensors; }

const lp_tensor *lp_weights_tensor(const lp_weights *w, size_t index)
{
    return index < w->n_tensors ? &w->tensors[index] : NULL;
}

const lp_arch *lp_weights_arch(const lp_weights *w) { return w->arch; }

const struct lp_gguf *lp_weights_gguf(const lp_weights *w) { return w->gguf; }

const char *lp_weights_path(const lp_weights *w) { return w->path; }

lp_status lp_tensor_rows_f32(const lp_tensor *t, int64_t row_begin, int64_t n_rows, float *dst,
                             lp_error *err)
{
    lp_rows rows = {t->name, t->dtype, t->data, t->n_elements,
                    t->n_dims > 0 ? t->shape[t->n_dims - 1] : 1};
    return lp_rows_to_f32(&rows, row_begin, n_rows, dst, err);
}
